//! The unit executor against plain backward (Flex, f32): bit-identical gradients for every
//! policy, segment length and layer-norm saving, and exactly the recomputation the plan predicts.

use super::super::tests::{batch, config, grad_values, plain_grads};
use super::*;
use crate::model::InitModel;
use burn::backend::{Autodiff, Flex};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::AdamW;
use memwall_core::strategy::{every_k, Segment};
use memwall_core::units::{block_keeps, recomputed_units, Policy};

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
            },
            Segment {
                start: 1,
                end: 3,
                recompute: true,
            },
        ]);
        for segments in &plans {
            for policy in policies() {
                let keeps = block_keeps(segments, policy.kept().expect("a named policy"));
                let out = unit_step::<B, Adam>(model.clone(), &inputs, &keeps, None, &mut |_| {});
                let got = grad_values(&out.step.model, &out.step.grads);
                let what = format!("{saving:?}, segments {segments:?}, policy {policy}");
                assert_eq!(got.len(), reference.len(), "{what}");
                for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
                    let same = g.iter().zip(r).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{what}: parameter {i}'s gradient differs from plain backward"
                    );
                }
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
    let a = grad_free_values(&unfused);
    let b = grad_free_values(&fused);
    assert_eq!(a, b, "stepping each block in backward changes the update");
}

fn grad_free_values(m: &TransformerLm<B>) -> Vec<Vec<u32>> {
    use burn::module::{Module, ModuleVisitor};
    struct V(Vec<Vec<u32>>);
    impl ModuleVisitor<B> for V {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            self.0.push(
                p.val()
                    .into_data()
                    .iter::<f32>()
                    .map(f32::to_bits)
                    .collect(),
            );
        }
    }
    let mut v = V(Vec::new());
    m.visit(&mut v);
    v.0
}
