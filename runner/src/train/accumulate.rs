//! Gradient accumulation: one optimizer step over the batch, its forward and backward run as
//! `n` equal micro-batches one after the other.
//!
//! Each micro-batch's mean token loss is weighted by `1 / n` before its backward, so the summed
//! gradients are the whole batch's mean-loss gradient up to floating-point rounding (the
//! micro-batches have the same number of tokens); Burn's `GradientsAccumulator` adds each
//! micro-batch's gradients into one set, and the optimizer steps once. What a step keeps alive
//! is one micro-batch's activations (`1 / n` of the whole batch's, under plain backward or a
//! checkpoint plan) plus the accumulated gradient set beside the micro-batch's own: the memory
//! technique that "trade[s] batch size for memory usage" (Checkmate's background, 001,
//! "Memory Pressure Handling"). PyTorch users write the same loop by dividing the loss by the
//! accumulation steps and calling `optimizer.step()` every n-th backward.

use super::segment::{self, Segment};
use super::Inputs;
use crate::measure::{MemoryProbe, Phase};
use crate::model::TransformerLm;
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::Tensor;

/// One training step on `inputs` (`[batch, seq]`) as `micro_batches` micro-batches of
/// `[batch / micro_batches, seq]`, each under `plan` (`None`: plain backward), gradients summed
/// and applied by one `optim` step at `lr`. Returns the stepped model and the `[1]` mean loss
/// over the micro-batches (the whole batch's mean token cross-entropy, nats). Phases are marked
/// per micro-batch as the plain or segmented step marks them, then the optimizer step.
///
/// `micro_batches` must divide the batch (the experiment file's check, `accumulation_steps`);
/// 1 is the plain step without an accumulator.
pub fn accumulated_step<B, O>(
    model: TransformerLm<B>,
    optim: &mut O,
    lr: f64,
    inputs: &Inputs<B>,
    micro_batches: usize,
    plan: Option<&[Segment]>,
    probe: &mut dyn MemoryProbe,
) -> (TransformerLm<B>, Tensor<B::InnerBackend, 1>)
where
    B: super::TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let (model, loss, grads) =
        accumulated_gradients::<B, O>(model, inputs, micro_batches, plan, probe);
    let model = optim.step(lr, model, grads);
    probe.phase(Phase::OptimizerStep);
    (model, loss)
}

/// The forward and backward passes of [`accumulated_step`] without its optimizer step: the
/// model (unchanged; the segmented step hands it back), the `[1]` mean loss over the
/// micro-batches and the summed gradients of the weighted micro-batch losses, which are the
/// whole batch's mean-loss gradients up to rounding. `O` is the optimizer type the segmented
/// step is generic over (no step is fused).
pub fn accumulated_gradients<B, O>(
    model: TransformerLm<B>,
    inputs: &Inputs<B>,
    micro_batches: usize,
    plan: Option<&[Segment]>,
    probe: &mut dyn MemoryProbe,
) -> (
    TransformerLm<B>,
    Tensor<B::InnerBackend, 1>,
    GradientsParams,
)
where
    B: super::TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let n = micro_batches.max(1);
    let weight = 1.0 / n as f64;
    let mut model = model;
    let mut accumulator = GradientsAccumulator::<TransformerLm<B>>::new();
    let mut loss_sum: Option<Tensor<B::InnerBackend, 1>> = None;
    for micro in inputs.micro_batches(n) {
        let (loss, grads) = match plan {
            None => super::plain_gradients(&model, &micro, weight, probe),
            Some(plan) => {
                let mut phase = |p| probe.phase(p);
                let out = segment::weighted_segmented_step::<B, O>(
                    model, &micro, plan, None, weight, &mut phase,
                );
                model = out.model;
                (out.loss, out.grads)
            }
        };
        accumulator.accumulate(&model, grads);
        loss_sum = Some(match loss_sum {
            Some(sum) => sum + loss,
            None => loss,
        });
    }
    let loss = loss_sum
        .expect("at least one micro-batch")
        .mul_scalar(weight);
    (model, loss, accumulator.grads())
}
