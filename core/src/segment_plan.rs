//! Planning memwall's transformer for a memory budget with the plans its segment executor runs
//! exactly. It lives in `memwall-core` (pure Rust, no solver crate) so that the slim runner
//! carried to GPU machines plans a Checkmate configuration itself, from its own profiling pass
//! on the device (`memwall_runner::job::run_planned`), exactly as `memwall run` does.
//!
//! Checkmate (Jain et al., MLSys 2020) minimizes compute under a memory budget over all
//! rematerialization schedules of a graph. A schedule of the transformer's chain that the
//! executor cannot run as planned is worth nothing to a user: the chain graph charged a kept
//! checkpoint the whole block's activations while execution keeps its input, and recomputed
//! runs of blocks were merged into segments whose recomputation peak the schedule never saw.
//! So this planner solves Checkmate's problem (least recomputation time subject to peak
//! memory <= budget, eq. 1a with the budget constraint eq. 1e) over the plans the executor runs —
//! single stored blocks and recomputed segments `[s, e)` — with the executor's own memory model
//! ([`memwall_core::segment_memory::predict`]) as the memory constraint. The plan's predicted
//! peak is the model's peak of exactly the plan that runs.
//!
//! The solver is an exact dynamic program over block positions. Every term of the model's peak
//! is the bytes kept by the segments so far plus terms that depend only on the current segment
//! and its position (the pending gradients of the blocks after it), so a partial plan is
//! summarized by `(kept bytes, recomputation time)`; partial plans dominated in both are
//! dropped (a Pareto front per position). Stored segments of several blocks are never better
//! than single stored blocks in the model (their backward accumulates more gradients) and are
//! not enumerated. The smallest feasible budget is found by bisection on feasibility, which is
//! monotone in the budget.

pub use crate::segment_memory::ExecutorProfile;
use crate::segment_memory::{grad_bytes, predict, segment_backward, segment_forward};
use crate::solve_status::SolveStatus;
pub use crate::strategy::TransformerPlan;
use crate::strategy::{per_block_stored, Segment};
use std::time::Instant;

/// Why [`plan_transformer`] made no plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// No executable plan fits `budget_bytes`; `smallest_feasible_bytes` is the exact smallest
    /// budget any does.
    #[error(
        "no schedule fits {budget_bytes} bytes; the smallest feasible budget is \
         {smallest_feasible_bytes} bytes ({status})"
    )]
    Infeasible {
        /// The budget asked for, bytes above the steady state.
        budget_bytes: u64,
        /// The smallest budget an executable plan fits, bytes.
        smallest_feasible_bytes: u64,
        /// How it was established.
        status: String,
    },
    /// The budget fraction is not in (0, 1], or the profile has no block.
    #[error("invalid parameters: {0}")]
    Params(String),
}

/// A partial plan: bytes kept after its last segment, its recomputation time (s), and its
/// segments.
#[derive(Debug, Clone)]
struct Partial {
    kept: u64,
    recompute_s: f64,
    segments: Vec<Segment>,
}

/// Keeps the partial plans not dominated in (kept bytes, recomputation time).
fn pareto(mut states: Vec<Partial>) -> Vec<Partial> {
    states.sort_by(|a, b| {
        a.kept
            .cmp(&b.kept)
            .then(a.recompute_s.total_cmp(&b.recompute_s))
    });
    let mut front: Vec<Partial> = Vec::new();
    for s in states {
        if front
            .last()
            .is_none_or(|f| s.recompute_s < f.recompute_s - 1e-15)
        {
            front.push(s);
        }
    }
    front
}

/// The plan with the least recomputation whose predicted peak ([`predict`] with margin) is at
/// most `budget_bytes`, or `None` when no executable plan fits. Ties go to the plan that
/// keeps fewer bytes.
pub fn cheapest_plan(p: &ExecutorProfile, budget_bytes: u64) -> Option<Vec<Segment>> {
    let layers = p.blocks.len();
    let budget = budget_bytes.checked_sub(p.margin_bytes)?;
    if layers == 0 || p.embed_bytes > budget || p.tail_peak_bytes > budget {
        return None;
    }
    let upstream = p.blocks[layers - 1].cost.boundary_bytes;
    // Gradients still pending when the backward of a segment ending at `e` starts.
    let pending_after = |e: usize| {
        if p.fused {
            0
        } else {
            p.head_grad_bytes + grad_bytes(p, e..layers)
        }
    };
    let mut fronts: Vec<Vec<Partial>> = vec![Vec::new(); layers + 1];
    fronts[0] = vec![Partial {
        kept: p.embed_bytes,
        recompute_s: 0.0,
        segments: Vec::new(),
    }];
    for i in 0..layers {
        let front = pareto(std::mem::take(&mut fronts[i]));
        for s in &front {
            let candidates =
                std::iter::once((i + 1, false)).chain((i + 1..=layers).map(|e| (e, true)));
            for (e, recompute) in candidates {
                let seg = Segment {
                    start: i,
                    end: e,
                    recompute,
                    inner: None,
                };
                let (fwd, added) = segment_forward(p, &seg, s.kept);
                let kept = s.kept + added;
                if fwd > budget
                    || segment_backward(p, &seg, kept + upstream + pending_after(e)) > budget
                {
                    continue;
                }
                let extra: f64 = if recompute {
                    p.blocks[seg.range()].iter().map(|b| b.cost.forward_s).sum()
                } else {
                    0.0
                };
                let mut segments = s.segments.clone();
                segments.push(seg);
                fronts[e].push(Partial {
                    kept,
                    recompute_s: s.recompute_s + extra,
                    segments,
                });
            }
        }
    }
    pareto(std::mem::take(&mut fronts[layers]))
        .into_iter()
        .filter(|s| s.kept + p.head_peak_bytes <= budget)
        .min_by(|a, b| {
            a.recompute_s
                .total_cmp(&b.recompute_s)
                .then(a.kept.cmp(&b.kept))
        })
        .map(|s| s.segments)
}

/// The no-recomputation plan's predicted peak above the steady state (every block stored),
/// bytes: the reference of budget fractions.
pub fn no_recompute_peak(p: &ExecutorProfile) -> u64 {
    predict(p, &per_block_stored(p.blocks.len()), true)
}

/// The smallest budget (bytes) for which [`cheapest_plan`] finds a plan: exact, by bisection
/// over whole bytes between 0 and [`no_recompute_peak`] (always feasible).
pub fn smallest_feasible_budget(p: &ExecutorProfile) -> u64 {
    let (mut lo, mut hi) = (0u64, no_recompute_peak(p));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if cheapest_plan(p, mid).is_some() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    hi
}

/// The budget fraction of a Checkmate plan under a memory limit of `limit_bytes` for the whole
/// process (the CPU's counting-allocator limit, or a device's memory): what the limit leaves
/// above the profile's steady state, `(limit - steady) / no_recompute_peak`, at most
/// `fraction`, and at least the smallest feasible fraction (`smallest_feasible_budget /
/// no_recompute_peak`: where nothing fits, the least-memory plan runs and the limit decides).
/// This is "the Checkmate-optimal plan at that limit": the least recomputation whose
/// predicted peak fits what the limit leaves (Jain et al., MLSys 2020, eq. 1a with the budget
/// of eq. 1e set by the device). A profile without a steady state (0) is taken at its word.
pub fn fraction_at_limit(p: &ExecutorProfile, fraction: f64, limit_bytes: u64) -> f64 {
    let reference = no_recompute_peak(p).max(1) as f64;
    let left = limit_bytes.saturating_sub(p.steady_bytes) as f64 / reference;
    // The smallest feasible budget rounded up to the next representable fraction, so that
    // `floor(reference * f)` in [`plan_transformer`] is not below it.
    let smallest = (smallest_feasible_budget(p) as f64 + 0.5) / reference;
    left.min(fraction).max(smallest).min(1.0)
}

/// Recomputation time of `plan`, seconds: the forward time of every recomputed block.
fn recompute_s(p: &ExecutorProfile, plan: &[Segment]) -> f64 {
    plan.iter()
        .filter(|s| s.recompute)
        .flat_map(|s| s.range())
        .map(|i| p.blocks[i].cost.forward_s)
        .sum()
}

/// Plans the transformer at `fraction` of [`no_recompute_peak`]: the cheapest executable plan
/// that fits ([`cheapest_plan`]), with its predicted peak and compute ratio (forward + backward
/// of the blocks taken as 3x their forward time, Kaplan et al. 2020; the head is not counted).
///
/// # Errors
/// [`PlanError::Infeasible`] with the exact smallest feasible budget when no plan fits;
/// [`PlanError::Params`] when the fraction is not in (0, 1] or the profile has no block.
pub fn plan_transformer(p: &ExecutorProfile, fraction: f64) -> Result<TransformerPlan, PlanError> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(PlanError::Params(format!(
            "budget fraction {fraction} is not in (0, 1]"
        )));
    }
    if p.blocks.is_empty() {
        return Err(PlanError::Params("the profile has no block".into()));
    }
    let t0 = Instant::now();
    let reference = no_recompute_peak(p);
    let budget = (reference as f64 * fraction).floor() as u64;
    let Some(segments) = cheapest_plan(p, budget) else {
        let smallest = smallest_feasible_budget(p);
        return Err(PlanError::Infeasible {
            budget_bytes: budget,
            smallest_feasible_bytes: smallest,
            status: format!(
                "{:.3} of the no-recomputation peak of {reference} bytes; exact, by bisection",
                smallest as f64 / reference as f64
            ),
        });
    };
    let forward: f64 = p.blocks.iter().map(|b| b.cost.forward_s).sum();
    let ratio = if forward > 0.0 {
        (3.0 * forward + recompute_s(p, &segments)) / (3.0 * forward)
    } else {
        1.0
    };
    Ok(TransformerPlan {
        predicted_peak_bytes: predict(p, &segments, true),
        segments,
        budget_fraction: fraction,
        budget_bytes: budget,
        predicted_cost_ratio: ratio,
        solver_status: SolveStatus::OptimalSegmentPlan,
        solve_time_s: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::segment_memory::BlockProfile;
    use crate::strategy::BlockCost;

    /// A synthetic executor profile: per block its activation bytes and forward seconds, the
    /// other measurements fixed (shared with the planner's tests).
    pub(crate) fn profile(acts: &[u64], times: &[f64]) -> ExecutorProfile {
        ExecutorProfile {
            blocks: acts
                .iter()
                .zip(times)
                .map(|(&a, &t)| BlockProfile {
                    cost: BlockCost {
                        activation_bytes: a,
                        boundary_bytes: 100,
                        forward_s: t,
                    },
                    forward_peak_bytes: a + 200,
                    recompute_forward_peak_bytes: 300,
                    backward_peak_bytes: 400,
                    grad_bytes: 30,
                })
                .collect(),
            embed_bytes: 100,
            head_peak_bytes: 800,
            head_grad_bytes: 20,
            tail_peak_bytes: 500,
            margin_bytes: 11,
            steady_bytes: 0,
            unit_forward_s: None,
            fused: false,
            calibration: Vec::new(),
        }
    }

    /// Every plan of single stored blocks and recomputed segments, by brute force.
    fn all_plans(layers: usize) -> Vec<Vec<Segment>> {
        if layers == 0 {
            return vec![Vec::new()];
        }
        let mut out = Vec::new();
        for last_start in 0..layers {
            for recompute in [false, true] {
                if !recompute && last_start + 1 != layers {
                    continue;
                }
                for mut prefix in all_plans(last_start) {
                    prefix.push(Segment {
                        start: last_start,
                        end: layers,
                        recompute,
                        inner: None,
                    });
                    out.push(prefix);
                }
            }
        }
        out
    }

    #[test]
    fn dynamic_program_matches_brute_force_at_every_budget() {
        let p = profile(
            &[1000, 1500, 700, 1200, 900, 1100],
            &[1.0, 3.0, 0.5, 2.0, 1.0, 1.5],
        );
        let plans = all_plans(6);
        // f(L) = f(L-1) + sum_{s<L} f(s), f(0) = 1: 1, 2, 5, 13, 34, 89, 233.
        assert_eq!(plans.len(), 233, "enumeration");
        let top = no_recompute_peak(&p);
        for k in 0..=40 {
            let budget = top * k / 40;
            let brute = plans
                .iter()
                .filter(|pl| predict(&p, pl, true) <= budget)
                .map(|pl| recompute_s(&p, pl))
                .min_by(f64::total_cmp);
            let dp = cheapest_plan(&p, budget);
            match (brute, &dp) {
                (None, None) => {}
                (Some(b), Some(plan)) => {
                    assert!(predict(&p, plan, true) <= budget, "budget {budget}");
                    assert!((recompute_s(&p, plan) - b).abs() < 1e-9, "budget {budget}");
                }
                _ => panic!("budget {budget}: brute force {brute:?}, dynamic program {dp:?}"),
            }
        }
    }

    #[test]
    fn smallest_feasible_budget_is_exact() {
        let p = profile(&[1000, 1500, 700, 1200], &[1.0, 1.0, 1.0, 1.0]);
        let b = smallest_feasible_budget(&p);
        assert!(cheapest_plan(&p, b).is_some());
        assert!(cheapest_plan(&p, b - 1).is_none());
        let min_over_plans = all_plans(4)
            .iter()
            .map(|pl| predict(&p, pl, true))
            .min()
            .unwrap();
        assert_eq!(b, min_over_plans);
    }

    /// Under a byte limit the plan is the cheapest one that fits what the limit leaves above
    /// the steady state; a limit that leaves less than any plan needs gives the least-memory
    /// plan; a generous one the configured fraction.
    #[test]
    fn the_plan_at_a_limit_fits_what_the_limit_leaves() {
        let mut p = profile(&[1000; 8], &[1.0; 8]);
        p.steady_bytes = 50_000;
        let reference = no_recompute_peak(&p);
        let smallest = smallest_feasible_budget(&p);
        let between = (smallest + reference) / 2;
        let f = fraction_at_limit(&p, 1.0, p.steady_bytes + between);
        let plan = plan_transformer(&p, f).unwrap();
        assert!(
            plan.predicted_peak_bytes <= between,
            "{plan:?} past {between}"
        );
        assert!(plan.segments.iter().any(|s| s.recompute));
        let tight = plan_transformer(&p, fraction_at_limit(&p, 1.0, p.steady_bytes)).unwrap();
        assert_eq!(tight.predicted_peak_bytes, smallest);
        assert_eq!(fraction_at_limit(&p, 0.9, u64::MAX / 2), 0.9);
    }

    #[test]
    fn tighter_budgets_recompute_more_and_predict_less() {
        let p = profile(&[1000; 8], &[1.0; 8]);
        let mut last: Option<TransformerPlan> = None;
        for fraction in [1.0, 0.8, 0.6, 0.45] {
            let plan = plan_transformer(&p, fraction).unwrap();
            assert!(plan.predicted_peak_bytes <= plan.budget_bytes);
            if let Some(prev) = &last {
                assert!(plan.predicted_cost_ratio >= prev.predicted_cost_ratio);
                assert!(plan.predicted_peak_bytes <= prev.budget_bytes);
            }
            last = Some(plan);
        }
        assert!(last.unwrap().segments.iter().any(|s| s.recompute));
    }

    #[test]
    fn an_infeasible_budget_names_the_smallest_feasible_one() {
        let p = profile(&[1000; 4], &[1.0; 4]);
        match plan_transformer(&p, 0.05) {
            Err(PlanError::Infeasible {
                budget_bytes,
                smallest_feasible_bytes,
                ..
            }) => {
                assert!(smallest_feasible_bytes > budget_bytes);
                assert_eq!(smallest_feasible_bytes, smallest_feasible_budget(&p));
            }
            other => panic!("expected infeasible, got {other:?}"),
        }
    }
}
