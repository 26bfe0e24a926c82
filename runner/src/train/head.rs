//! The head (final layer norm, logits, loss) as the executors run it: under Burn's autodiff,
//! keeping its logits for backward, or with its logits recomputed in backward, a chunk of rows
//! at a time ([`memwall_core::spec::ConfigSpec::head_chunks`]).
//!
//! Under autodiff the head keeps what its operations need: the final norm's input and row
//! statistics, the logits `z = y W` (`[tokens, vocab]`, the model's dtype) and the f32 graph of
//! `log_softmax` and `gather`, and its backward materializes the f32 softmax and `dz` of the
//! whole batch. At a large vocabulary that is the step's peak (issue 42's "Peak: when and
//! what": at the cpu profile's shape the head's backward is the peak of every checkpointed
//! plan).
//!
//! With `chunks = c` the head runs on the inner backend. Forward: `y = ln_f(x)` (kept, with its
//! row statistics), then for each chunk of rows `z_c = y_c W`, its f32 log-sum-exp
//! `lse_c = max(z_c) + log Σ exp(z_c − max(z_c))` (kept, one f32 per row) and its part of the
//! loss `Σ (lse_c − z_c[target])`; the loss is their sum over the tokens `n`, the mean
//! cross-entropy. Backward, chunk by chunk: `z_c` again, `dz_c = (exp(z_c − lse_c) −
//! onehot(target)) · w / n` (w: the loss's weight, 1 but under gradient accumulation), then
//! `dW += y_cᵀ dz_c` and `dy_c = dz_c Wᵀ`; last, the final norm's backward. So at most one
//! chunk's logits (with its softmax and gradient) is ever alive, for one more logits product
//! per step: `2 n d V` FLOPs. This is the chunked linear cross-entropy of Liger Kernel (Hsu et
//! al. 2024, arXiv:2410.10989, `LigerFusedLinearCrossEntropyLoss`) and the idea of Wijmans et
//! al. 2024 ("Cut Your Losses in Large-Vocabulary Language Models", arXiv:2411.09009), written
//! against Burn's backend operations with memwall's own layer norm and products.
//!
//! The gradients equal autodiff's up to f32 rounding, not bit for bit: `dW` is summed chunk by
//! chunk and the loss's softmax is computed from the log-sum-exp (tested against the autodiff
//! head).

use super::segment;
use super::TrainBackend;
use crate::model::linear::matmul;
use crate::model::norm::{self, LayerNormSaving};
use crate::model::TransformerLm;
use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, IndexingUpdateOp, Int, Tensor};

/// The inner backend of `B`.
type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// What the head gives the step: the unweighted loss, the first upstream gradient and the head's
/// own parameter gradients.
pub(super) struct HeadStep<B: AutodiffBackend> {
    /// Mean token cross-entropy (nats), `[1]`, f32, unweighted.
    pub(super) loss: Tensor<Inner<B>, 1>,
    /// Gradient of the weighted loss w.r.t. the last hidden state, `[batch, seq, d_model]`.
    pub(super) upstream: Tensor<Inner<B>, 3>,
    /// Gradients of the final norm and of an untied head; a tied head's contribution to the
    /// token embedding is registered in the caller's `pending` instead (stepped last).
    pub(super) grads: GradientsParams,
}

/// The head's forward and backward from the last hidden state `last` (`[batch, seq, d_model]`,
/// inner backend) for `targets` (`[batch, seq]`), on the loss times `weight`, as the model's
/// [`TransformerLm::head_chunks`] says: under autodiff ([`head_gradients`]) or with its logits
/// recomputed chunk by chunk (the module's text). `phase` is called once the loss is known
/// (between the head's forward and its backward).
pub(super) fn head_step<B: TrainBackend>(
    model: &TransformerLm<B>,
    last: Tensor<Inner<B>, 3>,
    targets: &Tensor<B, 2, Int>,
    weight: f64,
    pending: &mut GradientsParams,
    phase: &mut dyn FnMut(),
) -> HeadStep<B> {
    let Some(chunks) = model.head_chunks else {
        let last = Tensor::<B, 3>::from_inner(last).require_grad();
        let loss = model.loss(last.clone(), targets.clone());
        phase();
        let loss_inner = loss.clone().inner();
        let loss = if weight == 1.0 {
            loss
        } else {
            loss.mul_scalar(weight)
        };
        let (upstream, grads) = head_gradients(model, &loss, &last, pending);
        return HeadStep {
            loss: loss_inner,
            upstream,
            grads,
        };
    };
    chunked_head(
        model,
        last,
        targets.clone().inner(),
        chunks,
        weight,
        pending,
        phase,
    )
}

/// Backward through the head from `loss`: returns the gradient w.r.t. the `last` hidden state
/// (the first upstream) and the gradients of the final norm and the untied head; the token
/// embedding's (tied head) contribution goes to `pending`, to be stepped last.
fn head_gradients<B: TrainBackend>(
    model: &TransformerLm<B>,
    loss: &Tensor<B, 1>,
    last: &Tensor<B, 3>,
    pending: &mut GradientsParams,
) -> (Tensor<B::InnerBackend, 3>, GradientsParams) {
    let mut g = loss.backward();
    let upstream = last
        .grad_remove(&mut g)
        .expect("the loss depends on the last hidden state");
    let mut head = GradientsParams::new();
    segment::collect(&mut g, &model.norm_final, &mut head);
    if let Some(lm_head) = &model.head {
        segment::collect(&mut g, lm_head, &mut head);
    }
    // A tied head contributes to the token embedding, which is stepped last.
    segment::collect(&mut g, &model.token_embedding, pending);
    (upstream, head)
}

/// The head with its logits recomputed in backward in `chunks` chunks of rows (the module's
/// text). Panics if `chunks` is 0 or above the tokens (the configuration check refuses both).
fn chunked_head<B: TrainBackend>(
    model: &TransformerLm<B>,
    last: Tensor<Inner<B>, 3>,
    targets: Tensor<Inner<B>, 2, Int>,
    chunks: usize,
    weight: f64,
    pending: &mut GradientsParams,
    phase: &mut dyn FnMut(),
) -> HeadStep<B> {
    let [b, t, d] = last.dims();
    let n = b * t;
    assert!(
        (1..=n).contains(&chunks),
        "{chunks} head chunks for {n} tokens"
    );
    let rows = n.div_ceil(chunks);
    let spans: Vec<(usize, usize)> = (0..n)
        .step_by(rows)
        .map(|r0| (r0, (r0 + rows).min(n)))
        .collect();
    let x = last.reshape([n, d]);
    let targets = targets.reshape([n]);
    let norm = model.norm_final.valid();
    let beta = norm
        .beta
        .as_ref()
        .expect("the model's layer norms have a β")
        .val();
    let f = norm::forward::<Inner<B>>(x.clone(), norm.gamma.val(), beta.clone(), norm::epsilon());
    let y = f.y;
    // Backward recovers x̂ from the input unless the norm keeps its output: only then is the
    // input held until the head's backward.
    let x = (model.layer_norm != LayerNormSaving::SavesOutput).then_some(x);
    // The logits' weight as `[d, vocab]`: the untied head's, or the token embedding's transpose.
    let w: Tensor<Inner<B>, 2> = match &model.head {
        Some(head) => head.weight.val().inner(),
        None => model.token_embedding.weight.val().inner().transpose(),
    };
    let logits = |r0: usize, r1: usize| -> Tensor<Inner<B>, 2> {
        matmul(y.clone().narrow(0, r0, r1 - r0), w.clone()).cast(DType::F32)
    };
    let target_of =
        |r0: usize, r1: usize| targets.clone().narrow(0, r0, r1 - r0).reshape([r1 - r0, 1]);

    // Forward: each chunk's log-sum-exp (kept) and its part of the loss.
    let mut lse = Vec::with_capacity(spans.len());
    let mut total: Option<Tensor<Inner<B>, 1>> = None;
    for &(r0, r1) in &spans {
        let z = logits(r0, r1);
        let max = z.clone().max_dim(1);
        let l = (z.clone() - max.clone()).exp().sum_dim(1).log() + max;
        let picked = z.gather(1, target_of(r0, r1));
        let part = (l.clone() - picked).sum();
        total = Some(match total {
            Some(s) => s + part,
            None => part,
        });
        lse.push(l);
    }
    let loss = total.expect("at least one chunk").div_scalar(n as f64);
    phase();

    // Backward, chunk by chunk.
    let dtype = y.dtype();
    let scale = weight / n as f64;
    let mut dw: Option<Tensor<Inner<B>, 2>> = None;
    let mut dy = Vec::with_capacity(spans.len());
    for (&(r0, r1), l) in spans.iter().zip(lse) {
        let p = (logits(r0, r1) - l).exp();
        let minus_one = Tensor::<Inner<B>, 2>::full([r1 - r0, 1], -1.0, &p.device());
        let dz = p
            .scatter(1, target_of(r0, r1), minus_one, IndexingUpdateOp::Add)
            .mul_scalar(scale)
            .cast(dtype);
        let y_c = y.clone().narrow(0, r0, r1 - r0);
        let part = matmul(y_c.swap_dims(0, 1), dz.clone());
        dw = Some(match dw {
            Some(s) => s + part,
            None => part,
        });
        dy.push(matmul(dz, w.clone().swap_dims(0, 1)));
    }
    let dy = Tensor::cat(dy, 0);
    let kept = match x {
        // Composed and SavesInput: memwall's layer norm, recovering x̂ from the input.
        Some(x) => norm::Kept::Input {
            x: x.into_primitive().tensor(),
            mean: f.mean.into_primitive().tensor(),
        },
        None => norm::Kept::Output {
            y: y.into_primitive().tensor(),
            beta: beta.into_primitive().tensor(),
        },
    };
    let (dx, dgamma, dbeta) = norm::backward::<Inner<B>>(kept, f.rstd, norm.gamma.val(), dy);
    let mut grads = GradientsParams::new();
    grads.register::<Inner<B>, 1>(model.norm_final.gamma.id, dgamma);
    if let Some(beta) = &model.norm_final.beta {
        grads.register::<Inner<B>, 1>(beta.id, dbeta);
    }
    let dw = dw.expect("at least one chunk");
    match &model.head {
        Some(head) => grads.register::<Inner<B>, 2>(head.weight.id, dw),
        None => {
            let id = model.token_embedding.weight.id;
            let g = match pending.remove::<Inner<B>, 2>(id) {
                Some(prev) => prev + dw.transpose(),
                None => dw.transpose(),
            };
            pending.register::<Inner<B>, 2>(id, g);
        }
    }
    HeadStep {
        loss,
        upstream: dx.reshape([b, t, d]),
        grads,
    }
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
