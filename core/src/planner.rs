//! The plan stage's one planner: every segment plan a job runs (checkpoint every K, sqrt, the
//! per-block plan of the fused optimizer step, the budget knapsack, the Checkmate dynamic
//! program, an explicit plan) is made here, before the run, from the job's strategy and, where
//! the plan depends on measured costs, the job's own profiling pass on its device
//! ([`ExecutorProfile`]). The runner's segment executor carries the plan out and never plans.
//!
//! `memwall run` and the slim runner's `sweep-dir` (bundles on GPU machines) call [`plan`] from
//! the same plan stage (`memwall_runner::job::plan_stage`); the plan and its prediction are
//! written into the job file ([`crate::spec::JobSpec::plan`]) and so into its record.
//!
//! May import: [`crate::strategy`], [`crate::spec`], [`crate::budget`],
//! [`crate::segment_plan`], [`crate::segment_memory`], [`crate::units`],
//! [`crate::unit_checkmate`].

use crate::segment_memory::{predict, ExecutorProfile};
use crate::segment_plan::{plan_transformer, PlanError};
use crate::spec::{Recompute, Strategy};
pub use crate::strategy::{check_segments, PlanMethod, SegmentPlan};
use crate::strategy::{every_k, every_k_nested, per_block_stored, Segment, TransformerPlan};
use crate::units::Policy;

/// What [`plan`] made of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The segment plan, or `None` when the job runs without the segment executor (plain
    /// backward, Burn's balanced checkpointing).
    pub segments: Option<SegmentPlan>,
    /// The Checkmate solver's report (budget, predicted peak and cost, status, solve time).
    pub checkmate: Option<TransformerPlan>,
    /// The unit-level refinement of the segments when the strategy has a policy
    /// ([`crate::units::UnitPlan`], made by [`plan_job`]); `None` otherwise.
    pub units: Option<crate::units::UnitPlan>,
}

/// Plans a job of `layers` blocks with `strategy`. `profile` is the job's own profiling pass,
/// needed exactly when [`Recompute::needs_profile`]; without it the other plans carry no
/// prediction, with it every plan carries its predicted bytes and recomputation.
///
/// # Errors
/// [`PlanError::Params`] when a budget or Checkmate strategy has no profile, the profile's
/// blocks are not the model's, or an explicit plan does not cover the blocks;
/// [`PlanError::Infeasible`] when no Checkmate plan fits its budget (with the smallest that
/// does).
pub fn plan(
    strategy: &Strategy,
    layers: usize,
    profile: Option<&ExecutorProfile>,
) -> Result<Plan, PlanError> {
    if let Some(p) = profile {
        if p.blocks.len() != layers {
            return Err(PlanError::Params(format!(
                "the profile has {} blocks, the model {layers}",
                p.blocks.len()
            )));
        }
    }
    if strategy.recompute.needs_profile() {
        let p = profile.ok_or_else(|| {
            PlanError::Params(
                "a budget or Checkmate strategy plans from measured costs: run the job's \
                 profiling pass first (the plan stage of `memwall run` or `memwall-job sweep-dir`)"
                    .into(),
            )
        })?;
        return measured_plan(&strategy.recompute, p);
    }
    let Some((segments, method)) = structural_plan(strategy, layers)? else {
        return Ok(Plan {
            segments: None,
            checkmate: None,
            units: None,
        });
    };
    Ok(Plan {
        segments: Some(SegmentPlan {
            predicted_bytes: profile.map(|p| predict(p, &segments, true)),
            predicted_recompute_s: profile.map(|p| recompute_s(p, &segments)),
            segments,
            method,
        }),
        checkmate: None,
        units: None,
    })
}

/// [`plan`] for a job of `model`, with the unit-level refinement of its segments when the
/// strategy has a policy ([`Plan::units`], [`crate::units::UnitPlan`], sized by the model's
/// shapes and the strategy's precision; a budget with `estimate = "profile"` chosen by the
/// profile's measured unit times, [`ExecutorProfile::unit_forward_s`]).
///
/// # Errors
/// As [`plan`]; [`PlanError::Params`] when the policy needs measured unit times and the
/// profile has none.
pub fn plan_job(
    strategy: &Strategy,
    model: &crate::spec::ModelConfig,
    profile: Option<&ExecutorProfile>,
) -> Result<Plan, PlanError> {
    let mut planned = plan(strategy, model.layers, profile)?;
    if let (Some(Policy::Checkmate(f)), Some(segments)) =
        (strategy.policy, planned.segments.as_ref())
    {
        let every_block = segments.segments.len() == model.layers
            && segments
                .segments
                .iter()
                .all(|s| s.recompute && s.range().len() == 1);
        if !every_block || strategy.recompute != Recompute::EveryK(1) {
            return Err(PlanError::Params(
                "a Checkmate policy chooses what every block keeps itself: make every block its \
                 own recomputed segment (`checkpoint = 1`) beside `policy = { checkmate = f }`"
                    .into(),
            ));
        }
        let p = profile.ok_or_else(|| {
            PlanError::Params(
                "a Checkmate policy is planned from the job's profiling pass on its device: run \
                 the plan stage (`memwall run`, `memwall-job sweep-dir`) first"
                    .into(),
            )
        })?;
        let shape = model.unit_shape(strategy.precision);
        let solved = crate::unit_checkmate::plan_units(p, f, &shape, strategy.layer_norm)?;
        let mut units = crate::units::UnitPlan::from_keeps(
            Policy::Checkmate(f),
            solved.keeps,
            strategy.layer_norm,
            &shape,
            p.unit_forward_s.as_ref(),
        );
        units.predicted_peak_bytes = Some(solved.predicted_peak_bytes);
        units.budget_bytes = Some(solved.budget_bytes);
        planned.units = Some(units);
        return Ok(planned);
    }
    if let (Some(policy), Some(segments)) = (strategy.policy, planned.segments.as_ref()) {
        let shape = model.unit_shape(strategy.precision);
        let unit_forward_s = profile.and_then(|p| p.unit_forward_s.as_ref());
        planned.units = Some(
            crate::units::UnitPlan::new(
                &segments.segments,
                policy,
                strategy.layer_norm,
                &shape,
                unit_forward_s,
            )
            .map_err(PlanError::Params)?,
        );
    }
    Ok(planned)
}

/// The plans that follow from the strategy and the block count alone: K-block segments (every
/// K, sqrt), one stored segment per block (the fused optimizer step without checkpointing) and
/// explicit plans; `None` for plain backward and balanced checkpointing.
fn structural_plan(
    strategy: &Strategy,
    layers: usize,
) -> Result<Option<(Vec<Segment>, PlanMethod)>, PlanError> {
    Ok(match &strategy.recompute {
        Recompute::None if strategy.fused_optimizer => {
            Some((per_block_stored(layers), PlanMethod::PerBlockStored))
        }
        Recompute::EveryK(_) | Recompute::Sqrt => {
            let k = strategy
                .recompute
                .checkpoint()
                .segment_len(layers)
                .unwrap_or(1);
            let segments = match strategy.nested_checkpoint {
                Some(j) => every_k_nested(layers, k, j),
                None => every_k(layers, k),
            };
            Some((segments, PlanMethod::EveryK))
        }
        Recompute::Explicit(segments) => {
            check_segments(segments, layers).map_err(PlanError::Params)?;
            Some((segments.clone(), PlanMethod::Explicit))
        }
        _ => None,
    })
}

/// The plans made from the job's profile `p`: the budget knapsack ([`crate::budget`]) and the
/// Checkmate dynamic program ([`plan_transformer`]).
fn measured_plan(recompute: &Recompute, p: &ExecutorProfile) -> Result<Plan, PlanError> {
    match recompute {
        Recompute::Budget(b) => {
            let knapsack = crate::budget::plan_budget(&p.block_costs(), *b);
            Ok(Plan {
                segments: Some(SegmentPlan {
                    segments: knapsack.segments,
                    method: PlanMethod::Knapsack,
                    predicted_bytes: Some(knapsack.estimated_activation_bytes),
                    predicted_recompute_s: Some(knapsack.recompute_s),
                }),
                checkmate: None,
                units: None,
            })
        }
        Recompute::Checkmate(f) => {
            let solved = plan_transformer(p, *f)?;
            Ok(Plan {
                segments: Some(SegmentPlan {
                    predicted_bytes: Some(solved.predicted_peak_bytes),
                    predicted_recompute_s: Some(recompute_s(p, &solved.segments)),
                    segments: solved.segments.clone(),
                    method: PlanMethod::CheckmateDp,
                }),
                checkmate: Some(solved),
                units: None,
            })
        }
        other => Err(PlanError::Params(format!(
            "{other:?} is not planned from measured costs"
        ))),
    }
}

/// Seconds of forward recomputation per step of `segments` over `p`: the forward time of every
/// block in a recomputed segment.
fn recompute_s(p: &ExecutorProfile, segments: &[Segment]) -> f64 {
    segments
        .iter()
        .filter(|s| s.recompute)
        .flat_map(|s| s.range())
        .map(|i| p.blocks[i].cost.forward_s)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Precision;
    use crate::strategy::{Attention, LayerNormSaving};

    fn strategy(recompute: Recompute, fused_optimizer: bool) -> Strategy {
        Strategy {
            precision: Precision::F32,
            recompute,
            fused_optimizer,
            fusion: false,
            attention: Attention::Naive,
            layer_norm: LayerNormSaving::Composed,
            master_weights: false,
            loss_scale: None,
            policy: None,
            nested_checkpoint: None,
            head_chunks: None,
        }
    }

    /// `layers` blocks of 1000 + 10 i activation bytes and 1 + i seconds of forward.
    fn profile(layers: usize) -> ExecutorProfile {
        let acts: Vec<u64> = (0..layers as u64).map(|i| 1000 + 10 * i).collect();
        let times: Vec<f64> = (0..layers).map(|i| 1.0 + i as f64).collect();
        crate::segment_plan::tests::profile(&acts, &times)
    }

    fn recomputed(plan: &Plan) -> usize {
        let s = plan.segments.as_ref().expect("a segment plan");
        s.segments
            .iter()
            .filter(|x| x.recompute)
            .map(|x| x.end - x.start)
            .sum()
    }

    #[test]
    fn every_strategy_gets_its_plan_and_only_profiled_ones_a_prediction() {
        let p = profile(6);
        let none = plan(&strategy(Recompute::None, false), 6, None).unwrap();
        assert_eq!(none.segments, None);
        let fused = plan(&strategy(Recompute::None, true), 6, None).unwrap();
        assert_eq!(
            fused.segments.as_ref().unwrap().method,
            PlanMethod::PerBlockStored
        );
        assert_eq!(recomputed(&fused), 0);
        let k2 = plan(&strategy(Recompute::EveryK(2), false), 6, None).unwrap();
        assert_eq!(k2.segments.as_ref().unwrap().segments.len(), 3);
        assert_eq!(k2.segments.as_ref().unwrap().predicted_bytes, None);
        let sqrt = plan(&strategy(Recompute::Sqrt, false), 6, Some(&p)).unwrap();
        // ceil(sqrt(6)) = 3: two segments, every block recomputed, 1+2+...+6 = 21 s.
        let s = sqrt.segments.unwrap();
        assert_eq!(s.segments.len(), 2);
        assert_eq!(s.predicted_recompute_s, Some(21.0));
        assert_eq!(s.predicted_bytes, Some(predict(&p, &s.segments, true)));
        let balanced = plan(&strategy(Recompute::Balanced, false), 6, None).unwrap();
        assert_eq!(balanced.segments, None);
    }

    #[test]
    fn budget_and_checkmate_need_the_profile_and_follow_their_budget() {
        let p = profile(6);
        for r in [Recompute::Budget(0.5), Recompute::Checkmate(0.8)] {
            let err = plan(&strategy(r.clone(), false), 6, None).unwrap_err();
            assert!(err.to_string().contains("profiling pass"), "{err}");
        }
        let b0 = plan(&strategy(Recompute::Budget(0.0), false), 6, Some(&p)).unwrap();
        let b1 = plan(&strategy(Recompute::Budget(1.0), false), 6, Some(&p)).unwrap();
        assert_eq!(recomputed(&b0), 6);
        assert_eq!(recomputed(&b1), 0);
        let c = plan(&strategy(Recompute::Checkmate(0.8), false), 6, Some(&p)).unwrap();
        let report = c.checkmate.as_ref().unwrap();
        let s = c.segments.as_ref().unwrap();
        assert_eq!(s.segments, report.segments);
        assert!(s.predicted_bytes.unwrap() <= report.budget_bytes);
        assert_eq!(s.method, PlanMethod::CheckmateDp);
        // The name in logs is the name in JSON.
        let json = serde_json::to_string(&s.method).unwrap();
        assert_eq!(json, format!("\"{}\"", s.method.as_str()));
    }

    #[test]
    fn a_profile_of_another_model_or_a_gapped_explicit_plan_is_refused() {
        let p = profile(4);
        let err = plan(&strategy(Recompute::Budget(0.5), false), 6, Some(&p)).unwrap_err();
        assert!(err.to_string().contains("4 blocks, the model 6"), "{err}");
        let gapped = vec![
            Segment {
                start: 0,
                end: 2,
                recompute: true,
                inner: None,
            },
            Segment {
                start: 3,
                end: 6,
                recompute: false,
                inner: None,
            },
        ];
        let err = plan(&strategy(Recompute::Explicit(gapped), false), 6, None).unwrap_err();
        assert!(err.to_string().contains("segment 1 is [3, 6)"), "{err}");
    }
}
