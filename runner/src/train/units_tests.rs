//! The unit executor against plain backward (Flex, f32): bit-identical gradients for every
//! policy, segment length and layer-norm saving, and exactly the recomputation the plan predicts.

use super::super::tests::{batch, config, grad_values, param_bits, plain_grads};
use super::*;
use crate::model::InitModel;
use burn::backend::{Autodiff, Flex};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::AdamW;
use memwall_core::strategy::{every_k, Segment};
use memwall_core::units::{block_keeps, recomputed_units, Estimate, Policy};

type B = Autodiff<Flex>;
type Adam = OptimizerAdaptor<AdamW, TransformerLm<B>, B>;

fn policies() -> Vec<Policy> {
    vec![
        Policy::SaveNothing,
        Policy::SaveMatmuls,
        Policy::SaveEverything,
        Policy::Keep(UnitSet::of(&[Unit::Qkv, Unit::Attention])),
        Policy::Keep(UnitSet::of(&[Unit::NormMlp, Unit::Activation])),
        Policy::Keep(UnitSet::of(&[Unit::AttnOut])),
    ]
}

/// Every parameter's gradient in `got` equals plain backward's (`reference`) bit for bit.
fn assert_same_bits(got: &[Vec<f32>], reference: &[Vec<f32>], what: &str) {
    assert_eq!(got.len(), reference.len(), "{what}");
    for (i, (g, r)) in got.iter().zip(reference).enumerate() {
        assert!(
            g.len() == r.len() && g.iter().zip(r).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{what}: parameter {i}'s gradient differs from plain backward"
        );
    }
}

#[test]
fn gradients_equal_plain_backward_bit_for_bit_and_recomputation_is_the_plans() {
    let layers = 3;
    let cfg = config(layers);
    let device = Default::default();
    for saving in [LayerNormSaving::SavesInput, LayerNormSaving::SavesOutput] {
        B::seed(&device, 7);
        let model = cfg.init::<B>(&device).with_layer_norm(saving);
        let inputs = Inputs::<B>::new(&batch(&cfg), &device);
        let reference = grad_values(&model, &plain_grads(&model, &inputs));
        let mut plans: Vec<Vec<Segment>> = (1..=layers).map(|k| every_k(layers, k)).collect();
        plans.push(vec![
            Segment {
                start: 0,
                end: 1,
                recompute: false,
                inner: None,
            },
            Segment {
                start: 1,
                end: 3,
                recompute: true,
                inner: None,
            },
        ]);
        for segments in &plans {
            for policy in policies() {
                let keeps = block_keeps(segments, policy.kept().expect("a named policy"));
                let out = unit_step::<B, Adam>(model.clone(), &inputs, &keeps, None, &mut |_| {});
                let got = grad_values(&out.step.model, &out.step.grads);
                let what = format!("{saving:?}, segments {segments:?}, policy {policy}");
                assert_same_bits(&got, &reference, &what);
                assert_eq!(
                    out.recomputed,
                    recomputed_units(&keeps, saving),
                    "{what}: recomputed units"
                );
            }
        }
    }
}

#[test]
fn the_fused_step_equals_the_unfused_one() {
    let cfg = config(3);
    let device = Default::default();
    B::seed(&device, 8);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let keeps = block_keeps(&every_k(3, 1), Policy::SaveMatmuls.kept().unwrap());
    let lr = 1e-2;
    let mut opt_a = burn::optim::AdamWConfig::new().init::<B, TransformerLm<B>>();
    let mut opt_b = burn::optim::AdamWConfig::new().init::<B, TransformerLm<B>>();
    let unfused = unit_step::<B, Adam>(model.clone(), &inputs, &keeps, None, &mut |_| {});
    let unfused = opt_a.step(lr, unfused.step.model, unfused.step.grads);
    let fused = unit_step(model, &inputs, &keeps, Some((&mut opt_b, lr)), &mut |_| {});
    let fused = opt_b.step(lr, fused.step.model, fused.step.grads);
    let a = param_bits(&unfused);
    let b = param_bits(&fused);
    assert_eq!(a, b, "stepping each block in backward changes the update");
}

/// Plans the planner makes, as the plan stage makes them for a job: a Checkmate plan and a
/// block-level budget's, each refined by a unit budget (blocks keeping different units), a unit
/// budget chosen by the model's measured unit times and `save_matmuls`, from a synthetic
/// profiling pass whose blocks are alike.
#[test]
fn planned_checkmate_and_budget_plans_refined_by_policies_match_plain_backward() {
    use memwall_core::planner::plan_job;
    use memwall_core::segment_memory::{BlockProfile, ExecutorProfile};
    use memwall_core::spec::{Precision, Recompute, Strategy};
    use memwall_core::strategy::{Attention, BlockCost, Tiles};
    let layers = 4;
    let cfg = config(layers);
    let mut profile = ExecutorProfile {
        blocks: (0..layers)
            .map(|_| BlockProfile {
                cost: BlockCost {
                    activation_bytes: 10_000,
                    boundary_bytes: 1_000,
                    forward_s: 1e-3,
                },
                forward_peak_bytes: 12_000,
                recompute_forward_peak_bytes: 3_000,
                backward_peak_bytes: 4_000,
                grad_bytes: 300,
            })
            .collect(),
        embed_bytes: 1_000,
        head_peak_bytes: 8_000,
        head_grad_bytes: 200,
        tail_peak_bytes: 5_000,
        margin_bytes: 0,
        steady_bytes: 0,
        unit_forward_s: None,
        fused: false,
        calibration: Vec::new(),
    };
    let device = Default::default();
    let saving = LayerNormSaving::SavesInput;
    // An f32 job of memwall's attention and layer norm with `recompute` refined by `policy`.
    let job_strategy = |recompute: Recompute, policy: Policy| Strategy {
        precision: Precision::F32,
        recompute,
        fused_optimizer: false,
        fusion: false,
        attention: Attention::MemoryEfficient {
            tiles: Tiles::default(),
        },
        layer_norm: saving,
        master_weights: false,
        loss_scale: None,
        policy: Some(policy),
        nested_checkpoint: None,
        head_chunks: None,
    };
    B::seed(&device, 11);
    let model = cfg.init::<B>(&device).with_layer_norm(saving);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let reference = grad_values(&model, &plain_grads(&model, &inputs));
    // A budget by measured unit times plans from the profiling pass's timing of this model.
    profile.unit_forward_s = Some(unit_forward_seconds(&model, &inputs, &device, 1));
    let mut distinct_keeps = false;
    for recompute in [Recompute::Checkmate(0.6), Recompute::Budget(0.5)] {
        for policy in [
            Policy::Budget(0.3, Estimate::Flops),
            Policy::Budget(0.3, Estimate::Profile),
            Policy::SaveMatmuls,
        ] {
            let strategy = job_strategy(recompute.clone(), policy);
            let what = format!("{recompute:?} refined by {policy}");
            let plan = plan_job(&strategy, &cfg, Some(&profile)).expect("a plan");
            let units = plan.units.unwrap_or_else(|| panic!("{what}: no unit plan"));
            assert_eq!(units.keeps.len(), layers, "{what}");
            distinct_keeps |= units.keeps.windows(2).any(|w| w[0] != w[1]);
            let out = unit_step::<B, Adam>(model.clone(), &inputs, &units.keeps, None, &mut |_| {});
            let got = grad_values(&out.step.model, &out.step.grads);
            assert_same_bits(&got, &reference, &what);
            assert_eq!(out.recomputed.len(), units.recomputed_units, "{what}");
        }
    }
    assert!(
        distinct_keeps,
        "no plan kept different units in different blocks"
    );
    // Checkmate over the units (every block its own segment): from a budget where only outputs
    // fit to one where every unit does, each plan's gradients are plain backward's.
    let mut kept_some = false;
    let mut recomputed_some = false;
    let shape = cfg.unit_shape(Precision::F32);
    let at = |keeps: &[UnitSet]| {
        memwall_core::unit_checkmate::predict_units(&profile, &shape, keeps, true) as f64
    };
    let low = at(&vec![UnitSet::NONE.with(Unit::MlpOut); layers]);
    let all = at(&vec![UnitSet::ALL; layers]);
    let top = memwall_core::segment_plan::no_recompute_peak(&profile) as f64;
    for k in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let fraction = ((low + k * (all - low)) / top).min(1.0);
        let strategy = job_strategy(Recompute::EveryK(1), Policy::Checkmate(fraction));
        let units = match plan_job(&strategy, &cfg, Some(&profile)) {
            Ok(plan) => plan.units.expect("a unit plan"),
            Err(memwall_core::segment_plan::PlanError::Infeasible { .. }) => continue,
            Err(e) => panic!("checkmate {fraction}: {e}"),
        };
        let what = format!("unit-level checkmate {fraction}");
        assert!(
            units.predicted_peak_bytes.unwrap() <= units.budget_bytes.unwrap(),
            "{what}"
        );
        kept_some |= units.keeps.iter().any(|k| k.len() > 1);
        recomputed_some |= units.recomputed_units > 0;
        let out = unit_step::<B, Adam>(model.clone(), &inputs, &units.keeps, None, &mut |_| {});
        let got = grad_values(&out.step.model, &out.step.grads);
        assert_same_bits(&got, &reference, &what);
        assert_eq!(out.recomputed.len(), units.recomputed_units, "{what}");
    }
    assert!(
        kept_some && recomputed_some,
        "the Checkmate budgets never kept a unit or never recomputed one"
    );
}

/// The unit profiling pass times every unit of a block and leaves the model untouched.
#[test]
fn every_unit_is_timed() {
    let cfg = config(2);
    let device = Default::default();
    B::seed(&device, 3);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let before = grad_values(&model, &plain_grads(&model, &inputs));
    let times = unit_forward_seconds(&model, &inputs, &device, 3);
    assert!(times.iter().all(|t| t.is_finite() && *t > 0.0), "{times:?}");
    assert_eq!(grad_values(&model, &plain_grads(&model, &inputs)), before);
}
