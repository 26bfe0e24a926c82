//! The memory model of memwall's segment executor (`memwall_runner::train::segment`): the bytes
//! one training step holds above its steady state (parameters, optimizer state, the batch), for
//! any segment plan, from quantities measured on the job's own device by its profiling pass.
//!
//! This is the model the Checkmate-style planner (`memwall_remat::segment_plan`) plans against, so a
//! plan's predicted peak is what its execution holds. It follows the executor event by event:
//!
//! 1. **Forward.** The embedding keeps its output and graph ([`ExecutorProfile::embed_bytes`]).
//!    A stored block keeps its autodiff graph (`activation_bytes`, its output included, its
//!    input not) and peaks at `forward_peak_bytes` above the bytes live before it. A recomputed
//!    segment runs without autodiff, peaks at `recompute_forward_peak_bytes` per block above the
//!    live bytes (plus the previous block's output inside the segment) and keeps only its output
//!    (`boundary_bytes`); its input is the previous segment's output, already counted.
//! 2. **Head.** The loss and its backward peak at [`ExecutorProfile::head_peak_bytes`] above the
//!    forward's kept bytes; the gradient w.r.t. the last hidden state (the upstream,
//!    `boundary_bytes`) and the head's parameter gradients ([`ExecutorProfile::head_grad_bytes`])
//!    stay.
//! 3. **Backward, segments in reverse.** Segment `j` runs above the kept bytes of segments
//!    `0..=j`, the upstream and the gradients not yet applied (with the fused optimizer step
//!    none: each segment's are applied and dropped). A recomputed segment first re-runs its
//!    blocks with autodiff (peaking at `forward_peak_bytes` above the activations recomputed so
//!    far), then backward holds all its activations plus the block's `backward_peak_bytes` and
//!    the parameter gradients of the segment's later blocks. A stored block's activations are
//!    already counted. Activations are charged until the segment's backward ends (an upper
//!    bound if autodiff frees them earlier).
//! 4. **Tail.** The embedding's backward and the optimizer step peak at
//!    [`ExecutorProfile::tail_peak_bytes`] (measured by a real step; it does not depend on the
//!    plan).
//!
//! The prediction is the maximum over these events plus [`ExecutorProfile::margin_bytes`], the
//! largest under-prediction of the model on the profiling pass's calibration steps (real steps
//! with every block stored and with every block recomputed). Chen et al. 2016 ("Training Deep
//! Nets with Sublinear Memory Cost", Section 4) give the same structure for segment
//! checkpointing with uniform blocks: peak = kept checkpoints + one segment's activations.

use crate::strategy::{BlockCost, Segment};
use serde::{Deserialize, Serialize};

/// What one transformer block costs the segment executor, measured on the job's device in its
/// compute precision. Every `*_peak_bytes` is a high-water mark above the bytes live just before
/// the measured operation (so it includes what the operation leaves allocated).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BlockProfile {
    /// Bytes kept by the block's autodiff graph after its forward pass (its output included,
    /// its input not), the block's forward time and its input's bytes.
    #[serde(flatten)]
    pub cost: BlockCost,
    /// Peak of the block's forward pass with autodiff, bytes above the bytes live before it.
    pub forward_peak_bytes: u64,
    /// Peak of the block's forward pass without autodiff (a recomputed segment's forward),
    /// bytes above the bytes live before it.
    pub recompute_forward_peak_bytes: u64,
    /// Peak of the block's backward pass, bytes above the bytes live before it (which hold the
    /// block's activations and the upstream gradient).
    pub backward_peak_bytes: u64,
    /// Bytes of the block's parameter gradients.
    pub grad_bytes: u64,
}

/// A real calibration step of the profiling pass: the plan's measured peak above the steady
/// state beside the model's prediction without margin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Which plan ("every block stored", "every block recomputed").
    pub plan: String,
    /// Measured peak above the steady state, bytes (exact on the CPU's counting allocator; a
    /// lower bound from phase samples on CUDA).
    pub measured_bytes: u64,
    /// [`predict`] for the plan with a zero margin, bytes.
    pub modeled_bytes: u64,
}

/// Everything the segment executor's memory model needs, measured by a job's profiling pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorProfile {
    /// One profile per transformer block, in order.
    pub blocks: Vec<BlockProfile>,
    /// Bytes the embedding keeps through the step (its output and small graph).
    pub embed_bytes: u64,
    /// Peak of the head's forward (final norm, vocabulary projection, loss) and backward, bytes
    /// above the bytes live before it.
    pub head_peak_bytes: u64,
    /// Bytes of the head's parameter gradients (final norm; the vocabulary projection, or the
    /// tied embedding's contribution).
    pub head_grad_bytes: u64,
    /// Peak of the step's tail (embedding backward and optimizer step) above the steady state,
    /// bytes, measured by the calibration steps (their largest).
    pub tail_peak_bytes: u64,
    /// Largest `measured - modeled` over the calibration steps (zero if the model never
    /// under-predicts), bytes; added to every prediction.
    pub margin_bytes: u64,
    /// Bytes live at the start of the calibration steps (parameters, optimizer state, the
    /// batch: the steady state the other numbers are above), their largest; 0 in profiles
    /// written before the field. What a byte limit leaves for activations is the limit minus
    /// this ([`crate::segment_plan::fraction_at_limit`]).
    #[serde(default)]
    pub steady_bytes: u64,
    /// Forward seconds of each unit of a block ([`crate::units::Unit::ALL`] order, the first
    /// block standing for all), measured by the profiling pass on the job's device when the
    /// job's policy is a budget with `estimate = "profile"` ([`crate::units::Estimate`]);
    /// `None` otherwise and in profiles written before the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_forward_s: Option<[f64; 8]>,
    /// Whether the job steps each segment's parameters during backward (fused optimizer step).
    pub fused: bool,
    /// The calibration steps.
    pub calibration: Vec<Calibration>,
}

impl ExecutorProfile {
    /// The per-block costs (the knapsack's and the Checkmate chain graph's inputs).
    pub fn block_costs(&self) -> Vec<BlockCost> {
        self.blocks.iter().map(|b| b.cost).collect()
    }
}

/// Bytes of a segment's output.
fn output_bytes(p: &ExecutorProfile, seg: &Segment) -> u64 {
    // A block's output has the shape of its input: [batch, seq, d_model].
    p.blocks[seg.end - 1].cost.boundary_bytes
}

/// Peak of one segment's forward pass above `kept` (the bytes live before it); returns the
/// peak and the bytes the segment keeps.
pub fn segment_forward(p: &ExecutorProfile, seg: &Segment, kept: u64) -> (u64, u64) {
    let mut peak = 0;
    let mut added = 0;
    if seg.recompute {
        for (n, i) in seg.range().enumerate() {
            let b = &p.blocks[i];
            let previous = if n > 0 { b.cost.boundary_bytes } else { 0 };
            peak = peak.max(kept + previous + b.recompute_forward_peak_bytes);
        }
        added = output_bytes(p, seg);
    } else {
        for i in seg.range() {
            let b = &p.blocks[i];
            peak = peak.max(kept + added + b.forward_peak_bytes);
            added += b.cost.activation_bytes;
        }
    }
    (peak, added)
}

/// Peak of one segment's backward pass (recomputation included) above `live`, the bytes live
/// before it (kept bytes of this and earlier segments, the upstream, pending gradients).
///
/// A nested segment ([`Segment::inner`]) first runs its inner segments but the last forward
/// without autodiff, as [`segment_forward`] runs recomputed segments, each one's output kept as
/// the next one's checkpoint (the first one's input is the segment's own checkpoint, in
/// `live`; the last one's input is all its backward needs); then each inner segment, in
/// reverse, is a recomputed segment's backward above the inner checkpoints up to it and,
/// without the fused optimizer step, the gradients of the inner segments after it.
pub fn segment_backward(p: &ExecutorProfile, seg: &Segment, live: u64) -> u64 {
    if let Some(inner) = seg.inner_plan() {
        let mut peak = 0;
        let mut kept = 0;
        let mut kept_before = Vec::with_capacity(inner.len());
        for (m, sub) in inner.iter().enumerate() {
            kept_before.push(kept);
            if m + 1 < inner.len() {
                let (fwd, added) = segment_forward(p, sub, live + kept);
                peak = peak.max(fwd);
                kept += added;
            }
        }
        let mut later_grads = 0;
        for (sub, &before) in inner.iter().zip(&kept_before).rev() {
            // The checkpoints of this inner segment and the ones before it: the inputs of
            // inner segments 1..=m, the outputs of 0..m.
            let checkpoints = before;
            peak = peak.max(segment_backward(p, sub, live + checkpoints + later_grads));
            if !p.fused {
                later_grads += grad_bytes(p, sub.range());
            }
        }
        return peak;
    }
    let mut peak = 0;
    let mut recomputed = 0;
    if seg.recompute {
        for i in seg.range() {
            let b = &p.blocks[i];
            peak = peak.max(live + recomputed + b.forward_peak_bytes);
            recomputed += b.cost.activation_bytes;
        }
    }
    let mut later_grads = 0;
    for i in seg.range().rev() {
        let b = &p.blocks[i];
        peak = peak.max(live + recomputed + b.backward_peak_bytes + later_grads);
        later_grads += b.grad_bytes;
    }
    peak
}

/// Gradient bytes of the blocks `range`.
pub fn grad_bytes(p: &ExecutorProfile, range: std::ops::Range<usize>) -> u64 {
    p.blocks[range].iter().map(|b| b.grad_bytes).sum()
}

/// Predicted peak above the steady state of one training step under `plan`, bytes (the model
/// of this module's documentation, with [`ExecutorProfile::margin_bytes`] when `with_margin`).
///
/// `plan` must cover the blocks `0..blocks.len()` in order (as every planner's plan does).
pub fn predict(p: &ExecutorProfile, plan: &[Segment], with_margin: bool) -> u64 {
    let mut kept = p.embed_bytes;
    let mut peak = kept;
    let mut kept_after = Vec::with_capacity(plan.len());
    for seg in plan {
        let (fwd, added) = segment_forward(p, seg, kept);
        peak = peak.max(fwd);
        kept += added;
        kept_after.push(kept);
    }
    peak = peak.max(kept + p.head_peak_bytes);
    let upstream = p.blocks.last().map_or(0, |b| b.cost.boundary_bytes);
    let mut pending = if p.fused { 0 } else { p.head_grad_bytes };
    for (j, seg) in plan.iter().enumerate().rev() {
        peak = peak.max(segment_backward(p, seg, kept_after[j] + upstream + pending));
        if !p.fused {
            pending += grad_bytes(p, seg.range());
        }
    }
    peak = peak.max(p.tail_peak_bytes);
    if with_margin {
        peak + p.margin_bytes
    } else {
        peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(n: usize) -> ExecutorProfile {
        ExecutorProfile {
            blocks: vec![
                BlockProfile {
                    cost: BlockCost {
                        activation_bytes: 1000,
                        boundary_bytes: 100,
                        forward_s: 1.0,
                    },
                    forward_peak_bytes: 1200,
                    recompute_forward_peak_bytes: 300,
                    backward_peak_bytes: 500,
                    grad_bytes: 50,
                };
                n
            ],
            embed_bytes: 100,
            head_peak_bytes: 2000,
            head_grad_bytes: 10,
            tail_peak_bytes: 0,
            margin_bytes: 0,
            steady_bytes: 0,
            unit_forward_s: None,
            fused: false,
            calibration: Vec::new(),
        }
    }

    fn stored(n: usize) -> Vec<Segment> {
        crate::strategy::per_block_stored(n)
    }

    #[test]
    fn storing_everything_peaks_at_the_head() {
        let p = profile(4);
        // embed + 4 blocks' activations + the head's peak
        assert_eq!(predict(&p, &stored(4), false), 100 + 4000 + 2000);
    }

    #[test]
    fn recomputing_one_segment_holds_checkpoints_and_one_segment() {
        let p = profile(4);
        let plan = crate::strategy::every_k(4, 4);
        // forward keeps the embedding and the segment's output; the head then peaks at
        // 100 + 100 + 2000; backward recomputes all four blocks: kept (200) + upstream (100) +
        // head grads (10) + 4000 activations + 500 backward peak + the three later blocks'
        // gradients (150) at the first block.
        assert_eq!(predict(&p, &plan, false), 200 + 100 + 10 + 4000 + 500 + 150);
    }

    #[test]
    fn a_nested_segment_holds_its_inner_checkpoints_and_one_inner_segment() {
        let mut p = profile(4);
        p.head_peak_bytes = 0;
        let nested = crate::strategy::every_k_nested(4, 4, 1);
        // Backward starts above kept (200) + upstream (100) + head grads (10) = 310. The inner
        // forward keeps the outputs of blocks 1-3 (300) as checkpoints; the last block, first
        // in backward, recomputes its 1000 activations and peaks at its backward (500):
        // 310 + 300 + 1000 + 500. Each earlier inner segment holds one checkpoint less and one
        // later block's gradients (50) more.
        assert_eq!(predict(&p, &nested, false), 310 + 300 + 1000 + 500);
        let whole = predict(&p, &crate::strategy::every_k(4, 4), false);
        assert_eq!(whole, 200 + 100 + 10 + 4000 + 500 + 150);
    }

    #[test]
    fn margin_and_tail_bound_the_prediction() {
        let mut p = profile(2);
        p.margin_bytes = 7;
        p.tail_peak_bytes = 1_000_000;
        assert_eq!(predict(&p, &stored(2), true), 1_000_007);
        assert_eq!(predict(&p, &stored(2), false), 1_000_000);
    }

    #[test]
    fn more_recomputation_never_predicts_more_than_storing_when_activations_dominate() {
        let p = profile(8);
        let none = predict(&p, &stored(8), false);
        let every = predict(&p, &crate::strategy::every_k(8, 1), false);
        let sqrt = predict(&p, &crate::strategy::every_k(8, 3), false);
        assert!(every < none && sqrt < none, "{every} {sqrt} {none}");
    }
}
