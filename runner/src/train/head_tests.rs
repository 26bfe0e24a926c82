//! The head with its logits recomputed in chunks against the autodiff head (Flex, f32): the
//! loss and every parameter's gradient agree to f32 rounding under plain backward, a segment
//! plan and a unit plan, for a tied and an untied head, both layer-norm savings and chunk counts
//! from one to one per token.

use super::super::tests::{batch, config, grad_values, max_rel_err, plain_grads};
use super::super::{plain_gradients, segment, units, Inputs};
use crate::measure::HeapProbe;
use crate::model::{InitModel, TransformerLm};
use burn::backend::{Autodiff, Flex};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::AdamW;
use burn::tensor::backend::Backend;
use memwall_core::strategy::{every_k, LayerNormSaving};
use memwall_core::units::{block_keeps, Policy};

type B = Autodiff<Flex>;
type Adam = OptimizerAdaptor<AdamW, TransformerLm<B>, B>;

/// Relative agreement of gradients (largest difference over the parameter's largest magnitude)
/// and of the loss: f32 rounding of a different summation order, far below any real error.
const TOLERANCE: f64 = 2e-5;

fn loss_of(t: burn::tensor::Tensor<Flex, 1>) -> f64 {
    t.into_data().iter::<f32>().next().expect("a [1] loss") as f64
}

#[test]
fn chunked_head_matches_the_autodiff_head_in_every_executor() {
    let device = Default::default();
    for tie in [true, false] {
        for saving in [LayerNormSaving::SavesInput, LayerNormSaving::SavesOutput] {
            let mut cfg = config(3);
            cfg.tie_embeddings = tie;
            B::seed(&device, 21);
            let model = cfg.init::<B>(&device).with_layer_norm(saving);
            let inputs = Inputs::<B>::new(&batch(&cfg), &device);
            let reference_loss = loss_of(inputs.loss(&model).inner());
            let reference = grad_values(&model, &plain_grads(&model, &inputs));
            let tokens = cfg.batch * cfg.seq_len;
            for chunks in [1, 3, tokens] {
                let chunked = model.clone().with_head_chunks(Some(chunks));
                let what = format!("tie {tie}, {saving:?}, {chunks} chunks");
                let mut probe = HeapProbe::default();
                let (loss, grads) = plain_gradients(&chunked, &inputs, 1.0, &mut probe);
                let check = |loss: f64, got: Vec<Vec<f32>>, path: &str| {
                    assert!(
                        (loss - reference_loss).abs() <= TOLERANCE * reference_loss.abs(),
                        "{what}, {path}: loss {loss} against {reference_loss}"
                    );
                    let err = max_rel_err(&got, &reference);
                    assert!(
                        err <= TOLERANCE,
                        "{what}, {path}: gradients differ by {err:e}"
                    );
                };
                check(
                    loss_of(loss),
                    grad_values(&chunked, &grads),
                    "plain backward",
                );
                let out = segment::segmented_step::<B, Adam>(
                    chunked.clone(),
                    &inputs,
                    &every_k(3, 1),
                    None,
                    &mut |_| {},
                );
                check(
                    loss_of(out.loss),
                    grad_values(&out.model, &out.grads),
                    "segments",
                );
                let keeps = block_keeps(&every_k(3, 2), Policy::SaveMatmuls.kept().unwrap());
                let out = units::unit_step::<B, Adam>(chunked, &inputs, &keeps, None, &mut |_| {});
                check(
                    loss_of(out.step.loss),
                    grad_values(&out.step.model, &out.step.grads),
                    "units",
                );
            }
        }
    }
}

#[test]
fn a_weighted_loss_scales_the_chunked_heads_gradients() {
    let cfg = config(2);
    let device = Default::default();
    B::seed(&device, 5);
    let model = cfg.init::<B>(&device).with_head_chunks(Some(4));
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let mut probe = HeapProbe::default();
    let (l1, g1) = plain_gradients(&model, &inputs, 1.0, &mut probe);
    let (l4, g4) = plain_gradients(&model, &inputs, 0.25, &mut probe);
    assert_eq!(loss_of(l1), loss_of(l4), "the returned loss is unweighted");
    let quarter: Vec<Vec<f32>> = grad_values(&model, &g1)
        .into_iter()
        .map(|g| g.into_iter().map(|v| v * 0.25).collect())
        .collect();
    let err = max_rel_err(&grad_values(&model, &g4), &quarter);
    assert!(err <= TOLERANCE, "weight 0.25: gradients differ by {err:e}");
}
