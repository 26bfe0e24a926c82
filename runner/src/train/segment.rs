//! Segment activation checkpointing and the optimizer step fused into backward, built on Burn's
//! public autodiff API (Burn 0.21 has no checkpoint-a-module API).
//!
//! The blocks are cut into [`Segment`]s. In the forward pass a *recomputed* segment runs on the
//! inner (non-autodiff) backend and keeps only its input (the checkpoint); a *stored* segment
//! runs with autodiff from a detached input and keeps its graph. Backward then walks the
//! segments in reverse: the head's gradient w.r.t. the last hidden state is the first
//! `upstream`; for each segment (recomputed now if needed) `(out * upstream).sum().backward()`
//! yields the gradients of the segment's parameters and, w.r.t. its input, the next upstream.
//! This is Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", section 4.1)
//! and `torch.utils.checkpoint` at block granularity.
//!
//! A nested segment ([`Segment::inner`]) is recomputed in two passes: backward first runs its
//! blocks without autodiff, keeping the input of each inner segment, then walks the inner
//! segments in reverse as the outer walk does, recomputing each with autodiff: checkpointing
//! applied to the recomputation itself (Chen et al. 2016, abstract: applied recursively it
//! reaches O(log n) memory), so that one inner segment's activations are alive instead of the
//! whole segment's, for one more forward pass of its blocks.
//!
//! With `fused`, each segment's parameters are stepped as soon as their gradients exist and the
//! gradients are dropped (PyTorch's "optimizer step in backward" tutorial), so at most one
//! segment's gradients are alive. Tied parameters (the token embedding shared with the head)
//! are stepped once, after their last contribution.

use super::Inputs;
use crate::measure::Phase;
use crate::model::TransformerLm;
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::Tensor;
pub use memwall_core::strategy::{every_k, every_k_nested, per_block_stored, Segment};

/// Moves the gradients of `module`'s parameters from `grads` into `out`, adding to a gradient
/// already there (tied parameters receive several contributions).
struct Collect<'a, B: AutodiffBackend> {
    grads: &'a mut B::Gradients,
    out: &'a mut GradientsParams,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = param.val().grad_remove(self.grads) {
            let g = match self.out.remove::<B::InnerBackend, D>(param.id) {
                Some(prev) => prev + g,
                None => g,
            };
            self.out.register::<B::InnerBackend, D>(param.id, g);
        }
    }
}

/// Moves `module`'s gradients from `grads` into `out` (see [`Collect`]).
pub fn collect<B: AutodiffBackend, M: Module<B>>(
    grads: &mut B::Gradients,
    module: &M,
    out: &mut GradientsParams,
) {
    module.visit(&mut Collect::<B> { grads, out });
}

enum Saved<B: AutodiffBackend> {
    /// The segment input on the inner backend; the segment is recomputed in backward.
    Checkpoint(Tensor<B::InnerBackend, 3>),
    /// Detached input and output with the segment's autodiff graph.
    Graph(Tensor<B, 3>, Tensor<B, 3>),
}

/// Result of a segmented forward + backward.
pub struct SegmentedStep<B: AutodiffBackend> {
    /// The model, stepped where `fused` stepped segments during backward.
    pub model: TransformerLm<B>,
    /// Loss on the inner backend (read after the step to avoid an early sync).
    pub loss: Tensor<B::InnerBackend, 1>,
    /// Gradients not yet applied (all of them unless `fused`).
    pub grads: GradientsParams,
}

/// One training step with the blocks cut into `plan`.
///
/// With `fused = Some((optim, lr))` the parameters of each segment (and of the head) are
/// stepped during backward and the returned `grads` holds only the embeddings' gradients, still
/// to be applied; otherwise nothing is stepped and `grads` holds every gradient.
/// `phase` is called at each phase boundary with the phase that ended (for memory probes that
/// sample or trace): the embedding, each segment's forward, the head, the head's backward, each
/// segment's backward and the embeddings' backward.
pub fn segmented_step<B, O>(
    model: TransformerLm<B>,
    inputs: &Inputs<B>,
    plan: &[Segment],
    fused: Option<(&mut O, f64)>,
    phase: &mut dyn FnMut(Phase),
) -> SegmentedStep<B>
where
    B: super::TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    weighted_segmented_step(model, inputs, plan, fused, 1.0, phase)
}

/// [`segmented_step`] on the loss multiplied by `weight` (gradient accumulation's
/// `1 / micro-batches`): every gradient is `weight` times the loss's; the returned `loss` is the
/// unweighted one.
pub fn weighted_segmented_step<B, O>(
    model: TransformerLm<B>,
    inputs: &Inputs<B>,
    plan: &[Segment],
    mut fused: Option<(&mut O, f64)>,
    weight: f64,
    phase: &mut dyn FnMut(Phase),
) -> SegmentedStep<B>
where
    B: super::TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let mut model = model;
    // Forward. The embedding keeps its (small) graph: its output is the first checkpoint.
    let embedded = model.embed(inputs.tokens.clone(), inputs.positions.clone());
    phase(Phase::Embedding);
    let (h, saved) = forward_segments(&model, embedded.clone().inner(), plan, false, phase);

    // Head: loss and the gradient w.r.t. the last hidden state.
    let mut pending = GradientsParams::new();
    let super::head::HeadStep {
        loss: loss_inner,
        upstream,
        grads: head,
    } = super::head::head_step(
        &model,
        h,
        &inputs.targets,
        weight,
        &mut pending,
        &mut || phase(Phase::Head),
    );
    match fused.as_mut() {
        Some((optim, lr)) => model = optim.step(*lr, model, head),
        None => merge_into(&mut pending, head, &model),
    }
    phase(Phase::HeadBackward {
        fused: fused.is_some(),
    });

    let (model, upstream) = backward_segments(
        model,
        plan,
        saved,
        upstream,
        &mut fused,
        &mut pending,
        phase,
    );

    // Embeddings.
    let mut g = (embedded * Tensor::from_inner(upstream)).sum().backward();
    collect(&mut g, &model.token_embedding, &mut pending);
    collect(&mut g, &model.position_embedding, &mut pending);
    drop(g);
    phase(Phase::EmbeddingBackward);
    SegmentedStep {
        model,
        loss: loss_inner,
        grads: pending,
    }
}

/// The forward pass through the blocks from the embedded `h` (`[batch, seq, d_model]`):
/// returns the last hidden state and what each segment of `plan` saved for backward; `phase`
/// marks each segment's end, as [`Phase::Forward`] or, for the inner segments of a nested
/// segment recomputed in backward (`nested`), as [`Phase::Recompute`].
fn forward_segments<B: super::TrainBackend>(
    model: &TransformerLm<B>,
    mut h: Tensor<B::InnerBackend, 3>,
    plan: &[Segment],
    nested: bool,
    phase: &mut dyn FnMut(Phase),
) -> (Tensor<B::InnerBackend, 3>, Vec<Saved<B>>) {
    let mut saved: Vec<Saved<B>> = Vec::with_capacity(plan.len());
    let inner = model.valid();
    for seg in plan {
        if seg.recompute {
            saved.push(Saved::Checkpoint(h.clone()));
            h = inner.forward_blocks(h, seg.range());
        } else {
            let x = Tensor::<B, 3>::from_inner(h).require_grad();
            let y = model.forward_blocks(x.clone(), seg.range());
            h = y.clone().inner();
            saved.push(Saved::Graph(x, y));
        }
        phase(if nested {
            Phase::Recompute {
                first: seg.start as u16,
                end: seg.end as u16,
            }
        } else {
            Phase::Forward {
                first: seg.start as u16,
                end: seg.end as u16,
                recompute: seg.recompute,
            }
        });
    }
    (h, saved)
}

/// Backward through the segments in reverse, recomputing checkpointed ones, from the head's
/// `upstream`: with `fused`, steps each segment's blocks at once, else adds their gradients to
/// `pending`. A nested segment recomputes its inner checkpoints without autodiff and runs this
/// walk over its inner segments. Returns the model and the gradient w.r.t. the first block's
/// input.
fn backward_segments<B, O>(
    mut model: TransformerLm<B>,
    plan: &[Segment],
    saved: Vec<Saved<B>>,
    mut upstream: Tensor<B::InnerBackend, 3>,
    fused: &mut Option<(&mut O, f64)>,
    pending: &mut GradientsParams,
    phase: &mut dyn FnMut(Phase),
) -> (TransformerLm<B>, Tensor<B::InnerBackend, 3>)
where
    B: super::TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    for (seg, s) in plan.iter().zip(saved).rev() {
        let s = match (seg.inner_plan(), s) {
            (Some(inner), Saved::Checkpoint(input)) => {
                // Every inner segment but the last runs without autodiff, keeping its input;
                // the last one's input is the last output, and the segment's own output is not
                // needed (`upstream` is its gradient already).
                let (last, mut inner_saved) =
                    forward_segments(&model, input, &inner[..inner.len() - 1], true, phase);
                inner_saved.push(Saved::Checkpoint(last));
                (model, upstream) =
                    backward_segments(model, &inner, inner_saved, upstream, fused, pending, phase);
                continue;
            }
            (_, s) => s,
        };
        let (x, y) = segment_graph(&model, seg, s);
        let mut g = (y * Tensor::from_inner(upstream)).sum().backward();
        upstream = x
            .grad_remove(&mut g)
            .expect("a segment's output depends on its input");
        match fused.as_mut() {
            Some((optim, lr)) => {
                let mut seg_grads = GradientsParams::new();
                collect_blocks(&mut g, &model, seg, &mut seg_grads);
                drop(g);
                model = optim.step(*lr, model, seg_grads);
            }
            None => collect_blocks(&mut g, &model, seg, pending),
        }
        phase(Phase::Backward {
            first: seg.start as u16,
            end: seg.end as u16,
            recompute: seg.recompute,
            fused: fused.is_some(),
        });
    }
    (model, upstream)
}

/// A segment's input (requiring its gradient) and its output with the autodiff graph between
/// them: recomputed now from a checkpoint, or as stored in forward.
fn segment_graph<B: super::TrainBackend>(
    model: &TransformerLm<B>,
    seg: &Segment,
    saved: Saved<B>,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    match saved {
        Saved::Checkpoint(input) => {
            let x = Tensor::<B, 3>::from_inner(input).require_grad();
            let y = model.forward_blocks(x.clone(), seg.range());
            (x, y)
        }
        Saved::Graph(x, y) => (x, y),
    }
}

/// Moves the gradients of the blocks of `seg` from `grads` into `out`.
fn collect_blocks<B: AutodiffBackend>(
    grads: &mut B::Gradients,
    model: &TransformerLm<B>,
    seg: &Segment,
    out: &mut GradientsParams,
) {
    for block in &model.blocks[seg.range()] {
        collect(grads, block, out);
    }
}

/// Moves every gradient of `from` (for parameters of `model`) into `into`, adding on overlap.
pub(super) fn merge_into<B: AutodiffBackend>(
    into: &mut GradientsParams,
    mut from: GradientsParams,
    model: &TransformerLm<B>,
) {
    struct Merge<'a> {
        from: &'a mut GradientsParams,
        into: &'a mut GradientsParams,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Merge<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.from.remove::<B::InnerBackend, D>(param.id) {
                let g = match self.into.remove::<B::InnerBackend, D>(param.id) {
                    Some(prev) => prev + g,
                    None => g,
                };
                self.into.register::<B::InnerBackend, D>(param.id, g);
            }
        }
    }
    model.visit(&mut Merge {
        from: &mut from,
        into,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_k_covers_all_blocks_once() {
        for layers in 1..12 {
            for k in 1..=layers {
                let plan = every_k(layers, k);
                let covered: Vec<usize> = plan.iter().flat_map(|s| s.range()).collect();
                assert_eq!(covered, (0..layers).collect::<Vec<_>>());
                assert_eq!(plan.len(), layers.div_ceil(k));
                assert!(plan.iter().all(|s| s.recompute));
            }
        }
    }
}
