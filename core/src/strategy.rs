//! Memory strategies as data: what a job is asked to do (the attention variant, the segments of
//! activation checkpointing) and the plans that planners hand to the executor. The runner's
//! executors (`memwall_runner::train::segment`, `memwall_runner::model::attention`) carry them
//! out; the planners (`memwall_remat`, the runner's budget knapsack) produce them.
//!
//! May import: serde, [`crate::solve_status`] and [`crate::nonfinite`] only.

use crate::solve_status::SolveStatus;
use serde::{Deserialize, Serialize};

/// A run of consecutive blocks `[start, end)`, whether its activations are recomputed in
/// backward (true) or kept from the forward pass (false), and, for a recomputed segment, whether
/// its recomputation is itself checkpointed (nested checkpointing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Segment {
    /// Index of the segment's first block.
    pub start: usize,
    /// One past the index of the segment's last block (exclusive).
    pub end: usize,
    /// Whether backward recomputes the segment's activations from its input (true) or keeps
    /// them from the forward pass (false).
    pub recompute: bool,
    /// Nested checkpointing: backward recomputes this segment's blocks without autodiff first,
    /// keeping the input of every `inner`-th block, then runs them as `inner`-block segments
    /// that are each recomputed once more, with autodiff, and backpropagated in reverse
    /// ([`Segment::inner_plan`]). Only one inner segment's activations are alive at a time, for
    /// one more forward pass of the segment's blocks: checkpointing applied recursively, which
    /// Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174,
    /// abstract) carry to O(log n) memory. `None` (left out of JSON, so plans written before the
    /// field read and key as they did): the segment is recomputed in one piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inner: Option<usize>,
}

impl Segment {
    /// The segment's block indices, `start..end`.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.end
    }

    /// The number of blocks, `end - start`.
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// Whether the segment has no block.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The inner segments of a nested segment: `inner`-block segments over its blocks (the last
    /// may be shorter), all recomputed and none nested again; `None` when the segment is not
    /// nested or not recomputed.
    pub fn inner_plan(&self) -> Option<Vec<Segment>> {
        let j = self.inner.filter(|_| self.recompute)?.max(1);
        Some(
            self.range()
                .step_by(j)
                .map(|start| Segment {
                    start,
                    end: (start + j).min(self.end),
                    recompute: true,
                    inner: None,
                })
                .collect(),
        )
    }
}

/// Segments of `k` blocks (the last may be shorter), all recomputed: checkpoint every `k`.
pub fn every_k(layers: usize, k: usize) -> Vec<Segment> {
    let k = k.max(1);
    (0..layers)
        .step_by(k)
        .map(|start| Segment {
            start,
            end: (start + k).min(layers),
            recompute: true,
            inner: None,
        })
        .collect()
}

/// [`every_k`] with nested checkpointing inside each segment: every `k`-block segment longer
/// than `j` blocks recomputes its blocks as `j`-block inner segments ([`Segment::inner`]); a
/// segment of at most `j` blocks (the last, shorter one) is recomputed in one piece, as nesting
/// would only add a forward pass.
pub fn every_k_nested(layers: usize, k: usize, j: usize) -> Vec<Segment> {
    let j = j.max(1);
    every_k(layers, k)
        .into_iter()
        .map(|s| Segment {
            inner: (s.len() > j).then_some(j),
            ..s
        })
        .collect()
}

/// One stored segment per block: no recomputation, but per-block backward (for the fused
/// optimizer step without checkpointing).
pub fn per_block_stored(layers: usize) -> Vec<Segment> {
    (0..layers)
        .map(|i| Segment {
            start: i,
            end: i + 1,
            recompute: false,
            inner: None,
        })
        .collect()
}

/// Measured cost of one transformer block.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BlockCost {
    /// Bytes kept alive by the block's autodiff graph after its forward pass.
    pub activation_bytes: u64,
    /// Bytes of the block's input (the checkpoint when recomputed).
    pub boundary_bytes: u64,
    /// Forward time of the block, seconds (the recomputation cost).
    #[serde(with = "crate::nonfinite")]
    pub forward_s: f64,
}

/// A budget plan for the transformer (`memwall_remat::segment_plan`), with what the planner predicted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransformerPlan {
    /// The segment plan the job runs.
    pub segments: Vec<Segment>,
    /// Budget fraction of the no-recomputation plan's predicted peak above the steady state.
    #[serde(with = "crate::nonfinite")]
    pub budget_fraction: f64,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// The plan's predicted peak above the steady state, bytes
    /// ([`crate::segment_memory::predict`] with margin).
    pub predicted_peak_bytes: u64,
    /// Simulated cost over the plain forward+backward cost (1.0 = no recomputation).
    #[serde(with = "crate::nonfinite")]
    pub predicted_cost_ratio: f64,
    /// How the planner ended ([`SolveStatus::OptimalSegmentPlan`] from
    /// [`crate::segment_plan::plan_transformer`]).
    pub solver_status: SolveStatus,
    /// Wall time of the planner, seconds.
    #[serde(with = "crate::nonfinite")]
    pub solve_time_s: f64,
}

/// Tile sizes of the memory-efficient attention, in tokens: `query` rows (FlashAttention's
/// `B_r`) by `key` columns (`B_c`). Transient memory per tile is about
/// `4 * batch * heads * query * key` bytes per f32 tile tensor (a few at once); what is kept for
/// backward does not depend on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tiles {
    /// Query rows per tile (at least 1).
    pub query: usize,
    /// Key columns per tile (at least 1).
    pub key: usize,
}

impl Default for Tiles {
    /// 1024 x 1024: one tile for sequences up to 1024 tokens (the `full` profile's 768). What
    /// the graph keeps does not depend on the tile size; the tile bounds only the transient
    /// memory of the one layer being computed (at seq 768, batch 4, 16 heads: 151 MB per f32
    /// score tile), while every tile pair costs about fifteen kernel launches on a GPU and each
    /// distinct tile shape its own autotuning. Smaller tiles trade launches for transient
    /// memory at longer sequences.
    fn default() -> Self {
        Tiles {
            query: 1024,
            key: 1024,
        }
    }
}

/// Which attention the transformer's blocks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Attention {
    /// Burn's `attention` (under autodiff the naive composition that keeps the scores and the
    /// probabilities, `[batch, heads, seq, seq]`, of every layer).
    Naive,
    /// The tiled attention of this module, with its tile sizes.
    MemoryEfficient {
        /// Tile sizes.
        #[serde(flatten)]
        tiles: Tiles,
    },
}

impl Default for Attention {
    fn default() -> Self {
        Attention::MemoryEfficient {
            tiles: Tiles::default(),
        }
    }
}

impl Attention {
    /// Whether this is [`Attention::Naive`] (the attention of records written before the
    /// option existed).
    pub fn is_naive(&self) -> bool {
        *self == Attention::Naive
    }

    /// The attention of a record whose job file predates the option: naive.
    pub fn legacy() -> Self {
        Attention::Naive
    }
}

/// What the transformer's layer norms keep for their backward pass (an op-level
/// rematerialization: the normalized activations are recomputed in backward instead of kept).
///
/// Per norm, for `n = batch * seq` rows of `d_model` features in the compute dtype (`b` bytes):
///
/// | variant | kept between forward and backward |
/// |---|---|
/// | [`Composed`](LayerNormSaving::Composed) | `2 n d b` (centered input and normalized output) |
/// | [`SavesInput`](LayerNormSaving::SavesInput) | `n d b` (the input) + `8 n` (f32 mean and 1/std) |
/// | [`SavesOutput`](LayerNormSaving::SavesOutput) | `4 n` (f32 1/std); the output it keeps is the next linear layer's saved input |
///
/// Formulas: Ba, Kiros, Hinton 2016, "Layer Normalization", equations (3)-(4); the backward pass
/// `dx = rstd (g - mean(g) - x̂ mean(g x̂))`, `g = dy ∘ γ`, is the standard one (as in PyTorch's
/// native `layer_norm_backward`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerNormSaving {
    /// Burn's layer norm (`ModuleOps::layer_norm`, composed of elementwise operations): under
    /// autodiff its `div` and `mul` keep the centered input and the normalized output.
    Composed,
    /// memwall's layer-norm operation with its own backward: keeps its input and the per-row
    /// mean and `1/sqrt(var + eps)` in f32, and recomputes `x̂` in backward. What PyTorch's
    /// native layer norm keeps. Exact; the default.
    #[default]
    SavesInput,
    /// Keeps its output and the per-row `1/sqrt(var + eps)`, and recovers
    /// `x̂ = (y - β) / γ` in backward (the "memory-efficient" layer norm of NVIDIA Apex's
    /// `FusedLayerNorm(memory_efficient=True)`). The output is what the following linear layer
    /// keeps anyway, so the norm adds no full tensor; `x̂` is recovered in the output's dtype,
    /// and features whose `γ` is near zero lose precision.
    SavesOutput,
}

impl LayerNormSaving {
    /// Whether this is [`LayerNormSaving::Composed`] (the layer norm of job files written before
    /// the option existed).
    pub fn is_composed(&self) -> bool {
        *self == LayerNormSaving::Composed
    }

    /// The layer norm of a job file that predates the option: Burn's composed one.
    pub fn legacy() -> Self {
        LayerNormSaving::Composed
    }

    /// The option's spelling in experiment files and tables.
    pub fn as_str(&self) -> &'static str {
        match self {
            LayerNormSaving::Composed => "composed",
            LayerNormSaving::SavesInput => "saves_input",
            LayerNormSaving::SavesOutput => "saves_output",
        }
    }
}

/// Which planner made a [`SegmentPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanMethod {
    /// K-block segments, all recomputed ([`crate::spec::Recompute::EveryK`], [`crate::spec::Recompute::Sqrt`]).
    EveryK,
    /// One stored segment per block: no recomputation, per-block backward (the fused optimizer
    /// step without checkpointing).
    PerBlockStored,
    /// The block-level 0/1 knapsack of an activation memory budget ([`crate::budget`]).
    Knapsack,
    /// The exact dynamic program over executable segment plans ([`crate::segment_plan`]).
    CheckmateDp,
    /// The job's own explicit segments ([`crate::spec::Recompute::Explicit`]).
    Explicit,
}

impl PlanMethod {
    /// The method's name as in JSON (`every_k`, `per_block_stored`, `knapsack`,
    /// `checkmate_dp`, `explicit`).
    pub fn as_str(self) -> &'static str {
        match self {
            PlanMethod::EveryK => "every_k",
            PlanMethod::PerBlockStored => "per_block_stored",
            PlanMethod::Knapsack => "knapsack",
            PlanMethod::CheckmateDp => "checkmate_dp",
            PlanMethod::Explicit => "explicit",
        }
    }
}

/// A segment plan for the runner's executor, with what the planner predicted of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentPlan {
    /// The blocks cut into stored and recomputed segments, in order, covering every block.
    pub segments: Vec<Segment>,
    /// The planner that made it.
    pub method: PlanMethod,
    /// Predicted activation bytes held by the plan over the profile it was made from: the
    /// knapsack's per-block estimate ([`crate::budget::estimate_plan`]) for a budget, the
    /// executor model's peak above the steady state with margin
    /// ([`crate::segment_memory::predict`]) otherwise. `None` without a profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_bytes: Option<u64>,
    /// Predicted recomputation per step, seconds (the recomputed blocks' forward time over the
    /// profile). `None` without a profile.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::nonfinite::option"
    )]
    pub predicted_recompute_s: Option<f64>,
}

/// Checks that `segments` cover blocks `0..layers` in order, each non-empty and starting where
/// the previous one ended, and that a nested segment ([`Segment::inner`]) is recomputed and
/// splits into at least two inner segments of at least one block.
///
/// # Errors
/// A message naming the first segment that does not.
pub fn check_segments(segments: &[Segment], layers: usize) -> Result<(), String> {
    let mut next = 0;
    for (i, s) in segments.iter().enumerate() {
        if s.start != next || s.end <= s.start {
            return Err(format!(
                "segment {i} is [{}, {}): expected a non-empty segment starting at block {next}",
                s.start, s.end
            ));
        }
        if let Some(j) = s.inner {
            if !s.recompute {
                return Err(format!(
                    "segment {i} sets inner = {j} but is stored (recompute = false): only a \
                     recomputed segment's recomputation can be checkpointed; drop `inner` or \
                     set `recompute = true`"
                ));
            }
            if s.len() < 2 {
                return Err(format!(
                    "segment {i} is one block and sets inner = {j}: a nested segment needs at \
                     least two blocks; drop `inner`"
                ));
            }
            if j == 0 || j >= s.len() {
                return Err(format!(
                    "segment {i} ([{}, {}), {} blocks) sets inner = {j}: use 1 to {} blocks per \
                     inner segment, or drop `inner` to recompute the segment in one piece",
                    s.start,
                    s.end,
                    s.len(),
                    s.len() - 1
                ));
            }
        }
        next = s.end;
    }
    if next != layers {
        return Err(format!(
            "the segments cover blocks [0, {next}), the model has {layers}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_segments_split_into_inner_segments_of_j_blocks() {
        let plan = every_k_nested(10, 4, 3);
        // [0, 4) and [4, 8) nest as 3 + 1 blocks; [8, 10) is at most 3 blocks, so it does not.
        assert_eq!(
            plan.iter().map(|s| s.inner).collect::<Vec<_>>(),
            [Some(3), Some(3), None]
        );
        let inner = plan[1].inner_plan().unwrap();
        assert_eq!(
            inner.iter().map(|s| (s.start, s.end)).collect::<Vec<_>>(),
            [(4, 7), (7, 8)]
        );
        assert!(inner.iter().all(|s| s.recompute && s.inner.is_none()));
        assert_eq!(plan[2].inner_plan(), None);
        assert_eq!(check_segments(&plan, 10), Ok(()));
    }

    #[test]
    fn a_nested_segment_must_be_recomputed_and_split() {
        let seg = |end, recompute, inner| Segment {
            start: 0,
            end,
            recompute,
            inner,
        };
        assert!(check_segments(&[seg(4, false, Some(2))], 4)
            .unwrap_err()
            .contains("stored"));
        assert!(check_segments(&[seg(4, true, Some(4))], 4)
            .unwrap_err()
            .contains("use 1 to 3"));
        assert!(check_segments(&[seg(4, true, Some(0))], 4).is_err());
        assert!(check_segments(&[seg(1, true, Some(1))], 1)
            .unwrap_err()
            .contains("two blocks"));
        assert_eq!(check_segments(&[seg(4, true, Some(1))], 4), Ok(()));
    }

    #[test]
    fn a_plan_without_nesting_writes_the_json_it_wrote_before() {
        let json = serde_json::to_string(&every_k(2, 1)[0]).unwrap();
        assert_eq!(json, r#"{"start":0,"end":1,"recompute":true}"#);
        let read: Segment = serde_json::from_str(&json).unwrap();
        assert_eq!(read.inner, None);
    }
}
