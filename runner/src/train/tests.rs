//! Correctness of the memory strategies against plain backward on a small model (Flex, f32).

use super::segment::{self, segmented_step};
use super::{train_step, Inputs};
use crate::data::Batch;
use crate::measure::HeapProbe;
use crate::model::{InitModel, TransformerLm};
use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use memwall_core::spec::ModelConfig;

type B = Autodiff<Flex>;
type I = Flex;

pub(super) fn config(layers: usize) -> ModelConfig {
    ModelConfig {
        layers,
        d_model: 16,
        heads: 2,
        d_ff: 32,
        seq_len: 8,
        batch: 2,
        vocab: 300,
        tie_embeddings: true,
    }
}

/// Every parameter's values of `m`, as f32 bits, in the module's order.
pub(super) fn param_bits(m: &TransformerLm<B>) -> Vec<Vec<u32>> {
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

pub(super) fn batch(cfg: &ModelConfig) -> Batch {
    let n = cfg.batch * cfg.seq_len;
    let ids: Vec<i64> = (0..n as i64 + 1)
        .map(|i| (i * 37 + 11) % cfg.vocab as i64)
        .collect();
    Batch {
        batch: cfg.batch,
        seq_len: cfg.seq_len,
        inputs: ids[..n].to_vec(),
        targets: ids[1..].to_vec(),
        positions: (0..n as i64).map(|i| i % cfg.seq_len as i64).collect(),
    }
}

/// Every parameter's values (flattened) by id.
struct Values(Vec<(ParamId, Vec<f32>)>);
impl<BB: Backend> ModuleVisitor<BB> for Values {
    fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<BB, D>>) {
        self.0
            .push((p.id, p.val().into_data().iter::<f32>().collect()));
    }
}
fn values<BB: Backend, M: Module<BB>>(m: &M) -> Vec<(ParamId, Vec<f32>)> {
    let mut v = Values(Vec::new());
    m.visit(&mut v);
    v.0
}

/// Gradient of every parameter of `model` held in `grads`.
pub(super) fn grad_values(model: &TransformerLm<B>, grads: &GradientsParams) -> Vec<Vec<f32>> {
    struct G<'a>(&'a GradientsParams, Vec<Vec<f32>>);
    impl ModuleVisitor<B> for G<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
            let g = self
                .0
                .get::<I, D>(p.id)
                .expect("every parameter has a gradient");
            self.1.push(g.into_data().iter::<f32>().collect());
        }
    }
    let mut v = G(grads, Vec::new());
    model.visit(&mut v);
    v.1
}

pub(super) fn max_rel_err(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut worst = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        let scale = x.iter().map(|v| v.abs() as f64).fold(1e-12, f64::max);
        for (p, q) in x.iter().zip(y) {
            worst = worst.max((*p as f64 - *q as f64).abs() / scale);
        }
    }
    worst
}

pub(super) fn plain_grads(model: &TransformerLm<B>, inputs: &Inputs<B>) -> GradientsParams {
    let loss = inputs.loss(model);
    GradientsParams::from_grads(loss.backward(), model)
}

#[test]
fn segment_checkpointing_gradients_equal_plain_backward_for_every_k() {
    let layers = 5;
    let cfg = config(layers);
    let device = Default::default();
    B::seed(&device, 1);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let reference = grad_values(&model, &plain_grads(&model, &inputs));
    let mut plans: Vec<Vec<segment::Segment>> =
        (1..=layers).map(|k| segment::every_k(layers, k)).collect();
    plans.push(segment::per_block_stored(layers));
    // a mixed plan: stored and recomputed segments
    plans.push(vec![
        segment::Segment {
            start: 0,
            end: 2,
            recompute: true,
            inner: None,
        },
        segment::Segment {
            start: 2,
            end: 3,
            recompute: false,
            inner: None,
        },
        segment::Segment {
            start: 3,
            end: 5,
            recompute: true,
            inner: None,
        },
    ]);
    // nested checkpointing: inner segments of 1 and 2 blocks, and a stored segment between
    plans.push(segment::every_k_nested(layers, 5, 2));
    plans.push(segment::every_k_nested(layers, 3, 1));
    plans.push(vec![
        segment::Segment {
            start: 0,
            end: 3,
            recompute: true,
            inner: Some(1),
        },
        segment::Segment {
            start: 3,
            end: 4,
            recompute: false,
            inner: None,
        },
        segment::Segment {
            start: 4,
            end: 5,
            recompute: true,
            inner: None,
        },
    ]);
    for plan in plans {
        let out = segmented_step::<
            B,
            burn::optim::adaptor::OptimizerAdaptor<burn::optim::AdamW, TransformerLm<B>, B>,
        >(model.clone(), &inputs, &plan, None, &mut |_| {});
        let got = grad_values(&out.model, &out.grads);
        let err = max_rel_err(&reference, &got);
        assert!(
            err <= 1e-5,
            "plan {plan:?}: max relative gradient error {err}"
        );
    }
}

#[test]
fn untied_head_gradients_also_match() {
    let cfg = ModelConfig {
        tie_embeddings: false,
        ..config(3)
    };
    let device = Default::default();
    B::seed(&device, 2);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let reference = grad_values(&model, &plain_grads(&model, &inputs));
    let out = segmented_step::<
        B,
        burn::optim::adaptor::OptimizerAdaptor<burn::optim::AdamW, TransformerLm<B>, B>,
    >(
        model.clone(),
        &inputs,
        &segment::every_k(3, 2),
        None,
        &mut |_| {},
    );
    assert!(max_rel_err(&reference, &grad_values(&out.model, &out.grads)) <= 1e-5);
}

/// Max relative difference per parameter between two models' values (visit order).
fn param_diffs(a: &TransformerLm<B>, b: &TransformerLm<B>) -> Vec<(usize, f64)> {
    let va: Vec<Vec<f32>> = values(a).into_iter().map(|x| x.1).collect();
    let vb: Vec<Vec<f32>> = values(b).into_iter().map(|x| x.1).collect();
    va.iter()
        .zip(&vb)
        .enumerate()
        .map(|(i, (x, y))| {
            (
                i,
                max_rel_err(std::slice::from_ref(x), std::slice::from_ref(y)),
            )
        })
        .collect()
}

#[test]
fn fused_optimizer_step_equals_the_unfused_step() {
    let cfg = config(4);
    let device = Default::default();
    for plan in [
        segment::every_k(4, 1),
        segment::every_k(4, 2),
        segment::every_k_nested(4, 4, 1),
        segment::per_block_stored(4),
    ] {
        B::seed(&device, 3);
        let model = cfg.init::<B>(&device);
        let inputs = Inputs::<B>::new(&batch(&cfg), &device);
        let lr = 1e-2;
        let mut probe = HeapProbe::default();
        // two steps each, so optimizer state is exercised
        let mut opt_plain = AdamWConfig::new().init::<B, TransformerLm<B>>();
        let mut opt_unfused = AdamWConfig::new().init::<B, TransformerLm<B>>();
        let mut opt_fused = AdamWConfig::new().init::<B, TransformerLm<B>>();
        let (mut plain, mut unfused, mut fused) = (model.clone(), model.clone(), model.clone());
        for _ in 0..2 {
            plain = train_step(plain, &mut opt_plain, lr, &inputs, None, false, &mut probe).0;
            unfused = train_step(
                unfused,
                &mut opt_unfused,
                lr,
                &inputs,
                Some(&plan),
                false,
                &mut probe,
            )
            .0;
            fused = train_step(
                fused,
                &mut opt_fused,
                lr,
                &inputs,
                Some(&plan),
                true,
                &mut probe,
            )
            .0;
        }
        assert!(
            param_diffs(&plain, &model).iter().any(|d| d.1 > 1e-3),
            "the steps changed nothing"
        );
        // Fusing the step into backward changes nothing: the same gradients, stepped earlier.
        let worst = param_diffs(&fused, &unfused)
            .into_iter()
            .fold(0.0f64, |m, d| m.max(d.1));
        assert!(
            worst <= 1e-6,
            "plan {plan:?}: fused vs unfused step differ by {worst}"
        );
        // Against plain backward the gradients agree to float rounding (see the gradient test);
        // Adam's g / sqrt(v) amplifies rounding of near-zero gradients, hence the looser bound.
        let worst = param_diffs(&fused, &plain)
            .into_iter()
            .fold(0.0f64, |m, d| m.max(d.1));
        assert!(
            worst <= 1e-4,
            "plan {plan:?}: fused vs plain backward differ by {worst}"
        );
    }
}

#[test]
fn loss_goes_down_when_training_on_one_batch() {
    let cfg = config(2);
    let device = Default::default();
    B::seed(&device, 4);
    let mut model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let mut optim = AdamWConfig::new().init::<B, TransformerLm<B>>();
    let mut probe = HeapProbe::default();
    let mut losses = Vec::new();
    for _ in 0..15 {
        let (m, loss) = train_step(
            model,
            &mut optim,
            1e-2,
            &inputs,
            Some(&segment::every_k(2, 1)),
            true,
            &mut probe,
        );
        model = m;
        losses.push(loss.into_data().iter::<f64>().next().unwrap());
    }
    assert!(
        losses[14] < 0.7 * losses[0],
        "loss did not drop: {losses:?}"
    );
}

#[test]
fn clones_of_a_new_model_share_parameter_values() {
    // Burn initializes parameters lazily; memwall materializes them at construction so that
    // clones and `valid()` copies see the same values.
    let cfg = config(2);
    let device = Default::default();
    let model = cfg.init::<B>(&device);
    let (a, b) = (model.clone(), model.clone());
    let va: Vec<Vec<f32>> = values(&a).into_iter().map(|x| x.1).collect();
    let vb: Vec<Vec<f32>> = values(&b).into_iter().map(|x| x.1).collect();
    let vi: Vec<Vec<f32>> = values(&model.valid()).into_iter().map(|x| x.1).collect();
    assert_eq!(va, vb);
    assert_eq!(va, vi);
}

/// The parameter update `before - after` of one step, per parameter.
fn update(before: &[(ParamId, Vec<f32>)], after: &[(ParamId, Vec<f32>)]) -> Vec<Vec<f32>> {
    before
        .iter()
        .zip(after)
        .map(|((ia, a), (ib, b))| {
            assert_eq!(ia, ib, "parameter order changed");
            a.iter().zip(b).map(|(x, y)| x - y).collect()
        })
        .collect()
}

fn norm_rel_err(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let (mut d, mut n) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.iter().zip(y) {
            d += (*p as f64 - *q as f64).powi(2);
            n += (*q as f64).powi(2);
        }
    }
    (d / n.max(1e-30)).sqrt()
}

/// One mixed-precision step (f16 compute, f32 master weights) under SGD with lr 1, so the
/// update equals the unscaled gradient.
fn mixed_update(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    scale: Option<memwall_core::spec::LossScale>,
) -> (Vec<Vec<f32>>, super::mixed::MixedStepInfo, f64) {
    use super::mixed::{mixed_step, LossScaler};
    let mut optim = burn::optim::SgdConfig::new().init::<B, TransformerLm<B>>();
    let mut scaler = LossScaler::new(scale);
    let before = values(model);
    let (after, _, info) = mixed_step(
        model.clone(),
        &mut optim,
        1.0,
        inputs,
        memwall_core::spec::Precision::F16,
        &mut scaler,
        &mut HeapProbe::default(),
    );
    (update(&before, &values(&after)), info, scaler.scale())
}

#[test]
fn loss_scaled_f16_updates_match_the_f32_gradient() {
    use memwall_core::spec::LossScale;
    let cfg = config(2);
    let device = Default::default();
    B::seed(&device, 3);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let reference = grad_values(&model, &plain_grads(&model, &inputs));

    let (unscaled, info1, _) = mixed_update(&model, &inputs, None);
    let (scaled, info2, s) = mixed_update(&model, &inputs, Some(LossScale::Static(1024.0)));
    assert!(!info1.skipped && !info2.skipped && info2.finite);
    assert_eq!((info2.scale, s), (1024.0, 1024.0));
    // Unscaling divides by S: the update is the f32 gradient up to f16 rounding.
    let e1 = norm_rel_err(&unscaled, &reference);
    let e2 = norm_rel_err(&scaled, &reference);
    assert!(e1 < 2e-2, "f16 update vs f32 gradient: relative error {e1}");
    assert!(
        e2 < 2e-2,
        "scaled f16 update vs f32 gradient: relative error {e2}"
    );
    // Scaling by 2^10 can only lift gradient entries out of f16 underflow.
    assert!(info2.zero_fraction <= info1.zero_fraction);
}

#[test]
fn overflowing_loss_scale_skips_the_update_and_backs_off() {
    use memwall_core::spec::LossScale;
    let cfg = config(2);
    let device = Default::default();
    B::seed(&device, 4);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    // 1e30 x the loss gradient overflows f16 (largest finite 65504) at the logits.
    let (upd, info, s) = mixed_update(
        &model,
        &inputs,
        Some(LossScale::Dynamic {
            init: 1e30,
            growth_interval: 10,
        }),
    );
    assert!(!info.finite && info.skipped);
    assert_eq!(s, 5e29, "dynamic scaling halves S after an overflow");
    assert!(
        upd.iter().flatten().all(|d| *d == 0.0),
        "a skipped step leaves the master weights unchanged"
    );
    let (_, info, s) = mixed_update(&model, &inputs, Some(LossScale::Static(1e30)));
    assert!(info.skipped && s == 1e30);
}

/// Gradient accumulation over 1, 2 and 4 micro-batches gives the whole batch's mean-loss
/// gradient and loss, under plain backward and under a checkpoint plan, to f32 rounding; the
/// gradient of one micro-batch alone (an accumulator that forgot the others) does not.
#[test]
fn accumulated_micro_batches_give_the_whole_batch_gradient() {
    use super::accumulate::accumulated_gradients;
    type Adam = burn::optim::adaptor::OptimizerAdaptor<burn::optim::AdamW, TransformerLm<B>, B>;
    let cfg = ModelConfig {
        batch: 4,
        ..config(3)
    };
    let device = Default::default();
    B::seed(&device, 5);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let reference = grad_values(&model, &plain_grads(&model, &inputs));
    let whole_loss: f64 = inputs
        .loss(&model)
        .inner()
        .into_data()
        .iter::<f64>()
        .next()
        .unwrap();
    let plan = segment::every_k(3, 1);
    for n in [1, 2, 4] {
        for plan in [None, Some(plan.as_slice())] {
            let mut probe = HeapProbe::default();
            let (m, loss, grads) =
                accumulated_gradients::<B, Adam>(model.clone(), &inputs, n, plan, &mut probe);
            let err = max_rel_err(&reference, &grad_values(&m, &grads));
            assert!(
                err <= 1e-5,
                "{n} micro-batches, plan {plan:?}: max relative gradient error {err}"
            );
            let loss: f64 = loss.into_data().iter::<f64>().next().unwrap();
            assert!(
                (loss - whole_loss).abs() <= 1e-5 * whole_loss.abs(),
                "{n} micro-batches: loss {loss} against the whole batch's {whole_loss}"
            );
        }
    }
    let first = inputs.micro_batches(2).swap_remove(0);
    let alone = grad_values(&model, &plain_grads(&model, &first));
    assert!(
        max_rel_err(&reference, &alone) > 1e-2,
        "one micro-batch's gradient is not the whole batch's"
    );
}
