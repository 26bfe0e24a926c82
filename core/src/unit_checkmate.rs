//! Checkmate inside the block: the least recomputation whose predicted peak fits a budget,
//! chosen over every block's unit outputs ([`crate::units`]), as the unit executor runs them.
//!
//! Checkmate (Jain et al., MLSys 2020, arXiv:1910.02653) minimizes the recomputation cost
//! `Σ C·R` (eq. 1a) of a schedule over the operations of the training graph, subject to its
//! memory never exceeding a budget (eq. 1e), with each operation's cost `C` profiled on the
//! device. The block-level planner ([`crate::segment_plan`]) solves that problem over the plans
//! the segment executor runs (whole blocks kept or recomputed). This module solves it over the
//! plans the unit executor runs: every block keeps a subset of its eight unit outputs (its
//! output always) and recomputes the rest once, in its backward, from the nearest kept value.
//! The cost of a unit is its forward time measured by the job's profiling pass
//! ([`ExecutorProfile::unit_forward_s`]); the memory is the segment executor's model
//! ([`crate::segment_memory`]) of checkpointing every block, with each block's kept unit outputs
//! ([`UnitShape::kept_bytes`]) added from its forward until its backward ([`predict_units`]).
//!
//! The solver is exact over those plans: a dynamic program over the blocks, first to last,
//! whose partial plans are summarized by `(bytes the earlier blocks keep beyond their outputs,
//! recomputed seconds)`. Every term of the predicted peak at block `i` is that prefix of kept
//! bytes plus terms of block `i`'s own choice and position (the pending gradients of the blocks
//! after it), and every term grows with the prefix, so a partial plan beaten in both is dropped
//! (a Pareto front per block). Each block chooses among the subsets on its own front (no other
//! subset keeps fewer bytes for less recomputation).
//!
//! The schedules are the unit executor's, not Checkmate's general ones: a unit is recomputed at
//! most once per step and only in its own block's backward, as PyTorch's selective activation
//! checkpointing and JAX's `jax.checkpoint` policies do.
//!
//! May import: [`crate::units`], [`crate::segment_memory`], [`crate::segment_plan`],
//! [`crate::strategy`].

use crate::segment_memory::{grad_bytes, ExecutorProfile};
use crate::segment_plan::{no_recompute_peak, PlanError};
use crate::strategy::LayerNormSaving;
use crate::units::{recomputed_units, Unit, UnitSet, UnitShape};

/// What [`plan_units`] chose: every block's kept unit outputs, the budget and the prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitCheckmate {
    /// The unit outputs each block keeps (its output, `mlp_out`, always), one set per block.
    pub keeps: Vec<UnitSet>,
    /// The budget, bytes: `floor(fraction · no-recomputation peak)` of the block-level model
    /// ([`no_recompute_peak`]), so that a fraction means the same bytes at both granularities.
    pub budget_bytes: u64,
    /// The predicted peak of the plan, bytes, with the profile's margin ([`predict_units`]).
    pub predicted_peak_bytes: u64,
    /// Seconds recomputed per step: the measured forward times of the recomputed units.
    pub recompute_s: f64,
}

/// The bytes block `kept` keeps beyond its output (which checkpointing every block keeps too).
fn extra_bytes(shape: &UnitShape, kept: UnitSet) -> u64 {
    shape
        .kept_bytes(kept.with(Unit::MlpOut))
        .saturating_sub(shape.kept_bytes(UnitSet::NONE.with(Unit::MlpOut)))
}

/// The terms of the predicted peak that do not depend on what the blocks keep: per block, the
/// bytes live at its forward and at its backward besides the kept unit outputs.
struct Terms {
    /// Per block `i`: the embeddings and the earlier blocks' outputs, then the block's own
    /// forward transient (bytes); the kept prefix is added.
    forward: Vec<u64>,
    /// Per block `i`: the embeddings, the outputs of blocks `0..=i`, the head's upstream and the
    /// gradients pending (the head's and those of the blocks after `i`), bytes; the kept prefix
    /// and the block's own working set are added.
    backward: Vec<u64>,
    /// The embeddings and every block's output at the head (bytes).
    head: u64,
}

fn terms(p: &ExecutorProfile) -> Terms {
    let n = p.blocks.len();
    let upstream = p.blocks.last().map_or(0, |b| b.cost.boundary_bytes);
    let mut outputs = p.embed_bytes;
    let (mut forward, mut backward) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (i, b) in p.blocks.iter().enumerate() {
        forward.push(outputs);
        outputs += b.cost.boundary_bytes;
        let pending = if p.fused {
            0
        } else {
            p.head_grad_bytes + grad_bytes(p, i + 1..n)
        };
        backward.push(outputs + upstream + pending);
    }
    Terms {
        forward,
        backward,
        head: outputs,
    }
}

/// The peak of block `i`'s forward and backward with `prefix` bytes kept by the earlier blocks
/// beyond their outputs and `extra` by the block itself. Forward: what is kept so far and the
/// block's forward without autodiff (or its kept outputs, if larger). Backward: what is live,
/// and the segment model's terms for a recomputed block, which bound the unit executor's
/// recomputation of the block's dropped units: the larger of the block's measured forward with
/// autodiff and its activations with its backward's working set (the block's own kept values
/// are among its activations).
fn block_peak(p: &ExecutorProfile, t: &Terms, i: usize, prefix: u64, extra: u64) -> u64 {
    let b = &p.blocks[i];
    let forward = t.forward[i]
        + prefix
        + b.recompute_forward_peak_bytes
            .max(b.cost.boundary_bytes + extra);
    let backward = t.backward[i]
        + prefix
        + b.forward_peak_bytes
            .max(b.cost.activation_bytes.max(extra) + b.backward_peak_bytes);
    forward.max(backward)
}

/// The predicted peak (bytes) of the unit executor under `keeps` (one set per block of `p`),
/// with the profile's margin when `with_margin`: the segment executor's model of checkpointing
/// every block ([`crate::segment_memory::predict`] of `every_k(n, 1)`, which it equals when
/// every block keeps only its output), with each block's kept unit outputs live from its
/// forward until its backward.
///
/// Panics if `keeps` has not one set per block of `p`.
pub fn predict_units(
    p: &ExecutorProfile,
    shape: &UnitShape,
    keeps: &[UnitSet],
    with_margin: bool,
) -> u64 {
    assert_eq!(keeps.len(), p.blocks.len(), "one kept set per block");
    let t = terms(p);
    let mut prefix = 0;
    let mut peak = p.embed_bytes.max(p.tail_peak_bytes);
    for (i, k) in keeps.iter().enumerate() {
        let extra = extra_bytes(shape, *k);
        peak = peak.max(block_peak(p, &t, i, prefix, extra));
        prefix += extra;
    }
    peak = peak.max(t.head + prefix + p.head_peak_bytes);
    peak + if with_margin { p.margin_bytes } else { 0 }
}

/// The unit plan of Checkmate at `fraction` of the block-level no-recomputation peak: of every
/// choice of kept unit outputs per block, the one with the least recomputed seconds (the
/// profile's measured unit forward times) whose [`predict_units`] peak fits the budget.
///
/// # Errors
/// [`PlanError::Params`] when `fraction` is not in (0, 1], the profile has no block or no
/// measured unit times (run the job's profiling pass with the policy set); [`PlanError::Infeasible`]
/// with the smallest feasible budget (every block keeping only its output) when no plan fits.
pub fn plan_units(
    p: &ExecutorProfile,
    fraction: f64,
    shape: &UnitShape,
    saving: LayerNormSaving,
) -> Result<UnitCheckmate, PlanError> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(PlanError::Params(format!(
            "Checkmate policy budget {fraction} is not in (0, 1]: use a fraction of the \
             no-recomputation peak, e.g. {{ checkmate = 0.6 }}"
        )));
    }
    let n = p.blocks.len();
    if n == 0 {
        return Err(PlanError::Params("the profile has no block".into()));
    }
    let Some(times) = p.unit_forward_s else {
        return Err(PlanError::Params(
            "a Checkmate policy chooses by each unit's measured forward time: run the job's \
             profiling pass first (the plan stage of `memwall run` or `memwall-job sweep-dir`)"
                .into(),
        ));
    };
    let budget_bytes = (no_recompute_peak(p) as f64 * fraction).floor() as u64;
    let outputs_only = vec![UnitSet::NONE.with(Unit::MlpOut); n];
    let infeasible = || PlanError::Infeasible {
        budget_bytes,
        smallest_feasible_bytes: predict_units(p, shape, &outputs_only, true),
        status: "every block keeping only its output is the least-memory unit plan".into(),
    };
    let budget = budget_bytes
        .checked_sub(p.margin_bytes)
        .ok_or_else(infeasible)?;
    // One block's options: the subsets on its own front (bytes ascending, seconds descending).
    let mut options: Vec<(u64, f64, UnitSet)> = (0u8..128)
        .map(|bits| {
            let kept = UnitSet::of(
                &Unit::ALL
                    .into_iter()
                    .filter(|u| bits & (1 << u.index()) != 0)
                    .collect::<Vec<_>>(),
            )
            .with(Unit::MlpOut);
            let s = recomputed_units(&[kept], saving)
                .iter()
                .map(|(_, u)| times[u.index()])
                .sum::<f64>();
            (extra_bytes(shape, kept), s, kept)
        })
        .collect();
    options = pareto(options);
    let t = terms(p);
    if p.embed_bytes > budget || p.tail_peak_bytes > budget {
        return Err(infeasible());
    }
    // Partial plans over blocks 0..i: (kept prefix, seconds, choice per block).
    let mut states: Vec<(u64, f64, Vec<usize>)> = vec![(0, 0.0, Vec::new())];
    for i in 0..n {
        let mut next = Vec::with_capacity(states.len() * options.len());
        for (prefix, s, chosen) in &states {
            for (o, (extra, cost, _)) in options.iter().enumerate() {
                if block_peak(p, &t, i, *prefix, *extra) > budget {
                    continue;
                }
                let mut c = chosen.clone();
                c.push(o);
                next.push((prefix + extra, s + cost, c));
            }
        }
        states = pareto(next);
    }
    let (prefix, recompute_s, chosen) = states
        .into_iter()
        .filter(|(prefix, _, _)| t.head + prefix + p.head_peak_bytes <= budget)
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .ok_or_else(infeasible)?;
    let keeps: Vec<UnitSet> = chosen.iter().map(|&o| options[o].2).collect();
    let predicted_peak_bytes = predict_units(p, shape, &keeps, true);
    debug_assert!(predicted_peak_bytes <= budget_bytes, "{prefix}");
    Ok(UnitCheckmate {
        keeps,
        budget_bytes,
        predicted_peak_bytes,
        recompute_s,
    })
}

/// The points no other beats in both bytes and seconds (ties: the first), bytes ascending.
fn pareto<T>(mut points: Vec<(u64, f64, T)>) -> Vec<(u64, f64, T)> {
    points.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut kept: Vec<(u64, f64, T)> = Vec::new();
    for q in points {
        if kept.last().is_none_or(|l| q.1 < l.1) {
            kept.push(q);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment_memory::{predict, BlockProfile};
    use crate::strategy::{every_k, BlockCost};

    const SHAPE: UnitShape = UnitShape {
        d_model: 8,
        d_ff: 32,
        heads: 2,
        batch: 2,
        seq_len: 4,
        dtype_bytes: 4,
    };

    /// Blocks of the shape's size: activations every unit output, the other measurements
    /// close to what the CPU's profiling pass reports for such a block.
    fn profile(n: usize) -> ExecutorProfile {
        let all = SHAPE.kept_bytes(UnitSet::ALL);
        let out = SHAPE.kept_bytes(UnitSet::NONE.with(Unit::MlpOut));
        ExecutorProfile {
            blocks: (0..n)
                .map(|_| BlockProfile {
                    cost: BlockCost {
                        activation_bytes: all,
                        boundary_bytes: out,
                        forward_s: 1e-3,
                    },
                    forward_peak_bytes: all + 2 * out,
                    recompute_forward_peak_bytes: 3 * out,
                    backward_peak_bytes: 2 * out,
                    grad_bytes: 500,
                })
                .collect(),
            embed_bytes: out,
            head_peak_bytes: 6 * out,
            head_grad_bytes: 100,
            tail_peak_bytes: out,
            margin_bytes: 16,
            steady_bytes: 0,
            // norm_attn, qkv, attention, attn_out, norm_mlp, mlp_in, activation, mlp_out (s).
            unit_forward_s: Some([0.1, 0.9, 2.0, 0.3, 0.1, 0.7, 0.2, 0.7]),
            fused: false,
            calibration: Vec::new(),
        }
    }

    fn seconds(p: &ExecutorProfile, keeps: &[UnitSet]) -> f64 {
        let t = p.unit_forward_s.unwrap();
        recomputed_units(keeps, LayerNormSaving::SavesInput)
            .iter()
            .map(|(_, u)| t[u.index()])
            .sum()
    }

    #[test]
    fn keeping_only_outputs_is_checkpointing_every_block_in_the_segment_model() {
        for n in [1, 3, 6] {
            let p = profile(n);
            let outputs = vec![UnitSet::NONE.with(Unit::MlpOut); n];
            assert_eq!(
                predict_units(&p, &SHAPE, &outputs, true),
                predict(&p, &every_k(n, 1), true),
                "{n} blocks"
            );
        }
    }

    #[test]
    fn the_plan_is_the_cheapest_of_every_choice_that_fits() {
        // Brute force over all 128² choices of two blocks, at budgets across the range.
        let p = profile(2);
        let all: Vec<UnitSet> = (0u8..128)
            .map(|bits| {
                UnitSet::of(
                    &Unit::ALL
                        .into_iter()
                        .filter(|u| bits & (1 << u.index()) != 0)
                        .collect::<Vec<_>>(),
                )
                .with(Unit::MlpOut)
            })
            .collect();
        let reference = no_recompute_peak(&p) as f64;
        let mut cheaper_than_nothing_kept = 0;
        for fraction in [0.55, 0.6, 0.7, 0.8, 0.9, 1.0] {
            let budget = (reference * fraction).floor() as u64;
            let best = all
                .iter()
                .flat_map(|a| all.iter().map(move |b| vec![*a, *b]))
                .filter(|k| predict_units(&p, &SHAPE, k, true) <= budget)
                .map(|k| seconds(&p, &k))
                .min_by(f64::total_cmp);
            match (
                plan_units(&p, fraction, &SHAPE, LayerNormSaving::SavesInput),
                best,
            ) {
                (Ok(plan), Some(best)) => {
                    assert!(plan.predicted_peak_bytes <= budget, "{fraction}");
                    assert!(
                        (plan.recompute_s - best).abs() < 1e-9,
                        "{fraction}: {plan:?} vs {best}"
                    );
                    assert!((seconds(&p, &plan.keeps) - best).abs() < 1e-9, "{fraction}");
                    let nothing = seconds(&p, &[UnitSet::NONE.with(Unit::MlpOut); 2]);
                    if plan.recompute_s < nothing {
                        cheaper_than_nothing_kept += 1;
                    }
                }
                (
                    Err(PlanError::Infeasible {
                        smallest_feasible_bytes,
                        ..
                    }),
                    None,
                ) => {
                    assert!(smallest_feasible_bytes > budget, "{fraction}");
                }
                (got, best) => panic!("{fraction}: solver {got:?}, brute force {best:?}"),
            }
        }
        assert!(
            cheaper_than_nothing_kept >= 2,
            "the budgets never let a block keep a unit"
        );
    }

    #[test]
    fn a_larger_budget_never_recomputes_more_and_the_smallest_is_refused_below() {
        let p = profile(6);
        let mut last = f64::INFINITY;
        for fraction in [0.5, 0.6, 0.7, 0.8, 0.9, 1.0] {
            match plan_units(&p, fraction, &SHAPE, LayerNormSaving::SavesInput) {
                Ok(plan) => {
                    assert!(plan.recompute_s <= last + 1e-12, "{fraction}");
                    assert!(plan.predicted_peak_bytes <= plan.budget_bytes);
                    last = plan.recompute_s;
                }
                Err(PlanError::Infeasible { .. }) => assert!(last.is_infinite(), "{fraction}"),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(last < f64::INFINITY);
        for bad in [0.0, 1.5, f64::NAN] {
            let e = plan_units(&p, bad, &SHAPE, LayerNormSaving::SavesInput).unwrap_err();
            assert!(e.to_string().contains("not in (0, 1]"), "{e}");
        }
        let mut untimed = p.clone();
        untimed.unit_forward_s = None;
        let e = plan_units(&untimed, 0.8, &SHAPE, LayerNormSaving::SavesInput).unwrap_err();
        assert!(e.to_string().contains("profiling pass"), "{e}");
    }
}
