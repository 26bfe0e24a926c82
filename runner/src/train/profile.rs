//! The profiling pass of a job: what the segment executor's memory model
//! ([`memwall_core::segment_memory`]) needs, measured on the job's own device and precision.
//!
//! Per block, the bytes and high-water marks of the operations the executor runs: the forward
//! pass with autodiff (stored or recomputed in backward), without autodiff (a recomputed
//! segment's forward), the backward pass from an upstream gradient, and the block's parameter
//! gradients; then the embedding and the head. Every measurement is taken twice and the second
//! kept, so one-time allocations of the first use (workspace buffers, kernel caches) are not
//! charged to the first block. Finally real training steps under calibration plans measure the
//! step's tail (embedding backward, optimizer step) and the model's largest under-prediction,
//! which becomes its margin.
//!
//! High-water marks come from the job's [`MemoryProbe`]: exact on the CPU's counting allocator,
//! lower bounds from samples on CUDA.

use super::{segment, train_step, Inputs, TrainBackend};
use crate::measure::{MemoryProbe, MemorySample, Phase};
use crate::model::TransformerLm;
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::Tensor;
use memwall_core::segment_memory::{predict, BlockProfile, Calibration, ExecutorProfile};
use memwall_core::strategy::{BlockCost, Segment};
use std::time::Instant;

/// Runs `f` and returns its result with its high-water mark above the bytes live before it and
/// the bytes it left allocated (both may be zero).
fn measured<B: TrainBackend, R>(
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
    f: impl FnOnce() -> R,
) -> (R, u64, u64) {
    let before = probe.live_bytes();
    probe.begin_step();
    let r = f();
    let _ = B::sync(device);
    let MemorySample {
        peak_allocated_bytes,
        ..
    } = probe.end_step();
    let after = probe.live_bytes();
    (
        r,
        peak_allocated_bytes.max(after).saturating_sub(before),
        after.saturating_sub(before),
    )
}

/// Bytes freed by dropping `x`.
fn bytes_held<T>(probe: &mut dyn MemoryProbe, x: T) -> u64 {
    let before = probe.live_bytes();
    drop(x);
    before.saturating_sub(probe.live_bytes())
}

/// One block's profile from its input `h` (`[batch, seq, d_model]` on the inner backend);
/// returns the profile and the block's output.
fn profile_block<B: TrainBackend>(
    model: &TransformerLm<B>,
    i: usize,
    h: Tensor<B::InnerBackend, 3>,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
) -> (BlockProfile, Tensor<B::InnerBackend, 3>) {
    let block = &model.blocks[i];
    let inner = model.valid();
    let boundary_bytes = h.shape().num_elements() as u64 * h.dtype().size() as u64;
    // Forward with autodiff: what the graph keeps and the pass's peak.
    let x = Tensor::<B, 3>::from_inner(h.clone()).require_grad();
    let (y, forward_peak_bytes, activation_bytes) =
        measured::<B, _>(device, probe, || block.forward(x.clone()));
    // Backward from an upstream gradient, as the executor runs it.
    let upstream = Tensor::<B::InnerBackend, 3>::ones_like(&y.clone().inner());
    let (mut grads, backward_peak_bytes, _) = measured::<B, _>(device, probe, || {
        (y * Tensor::from_inner(upstream)).sum().backward()
    });
    let input_grad = x.grad_remove(&mut grads);
    let mut params = GradientsParams::new();
    segment::collect(&mut grads, block, &mut params);
    drop((grads, input_grad, x));
    let grad_bytes = bytes_held(probe, params);
    // Forward without autodiff (a recomputed segment's forward).
    let (warm, recompute_forward_peak_bytes, _) =
        measured::<B, _>(device, probe, || inner.blocks[i].forward(h.clone()));
    drop(warm);
    let t0 = Instant::now();
    let next = inner.blocks[i].forward(h);
    let _ = B::sync(device);
    let forward_s = t0.elapsed().as_secs_f64();
    let profile = BlockProfile {
        cost: BlockCost {
            activation_bytes,
            boundary_bytes,
            forward_s,
        },
        forward_peak_bytes,
        recompute_forward_peak_bytes,
        backward_peak_bytes,
        grad_bytes,
    };
    (profile, next)
}

/// Each block's [`BlockCost`] on the job's device, from [`profile_block`] (the same
/// measurements as the executor profile): the bytes its autodiff graph keeps after a forward
/// pass with its output, its input's bytes, and the time of its forward pass without autodiff
/// (device synchronized, after one warm-up pass). Two passes over the blocks, the second kept,
/// as in [`profile_executor`]. This is what every record's `block_costs`
/// come from (budget plans are made from the profiling pass's [`profile_executor`]).
pub fn profile_blocks<B: TrainBackend>(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
) -> Vec<BlockCost> {
    let inner = model.valid();
    let pass = |probe: &mut dyn MemoryProbe| {
        let mut h = inner.embed(
            inputs.tokens.clone().inner(),
            inputs.positions.clone().inner(),
        );
        let mut costs = Vec::with_capacity(model.blocks.len());
        for i in 0..model.blocks.len() {
            let (p, next) = profile_block(model, i, h, device, probe);
            costs.push(p.cost);
            h = next;
        }
        costs
    };
    drop(pass(probe));
    pass(probe)
}

/// One pass over the embedding, every block and the head (see the module documentation);
/// tail, margin and calibration are left empty.
fn profile_pass<B: TrainBackend>(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
    fused: bool,
) -> ExecutorProfile {
    let (embedded, _, embed_bytes) = measured::<B, _>(device, probe, || {
        model.embed(inputs.tokens.clone(), inputs.positions.clone())
    });
    let mut h = embedded.clone().inner();
    let mut blocks = Vec::with_capacity(model.blocks.len());
    for i in 0..model.blocks.len() {
        let (p, next) = profile_block(model, i, h, device, probe);
        blocks.push(p);
        h = next;
    }
    // The head as the job runs it (its logits kept under autodiff, or recomputed in chunks).
    let ((upstream, head), head_peak_bytes, _) = measured::<B, _>(device, probe, || {
        let mut head = GradientsParams::new();
        let out = super::head::head_step(
            model,
            h.clone(),
            &inputs.targets,
            1.0,
            &mut head,
            &mut || {},
        );
        segment::merge_into(&mut head, out.grads, model);
        (out.upstream, head)
    });
    drop((upstream, h, embedded));
    let head_grad_bytes = bytes_held(probe, head);
    ExecutorProfile {
        blocks,
        embed_bytes,
        head_peak_bytes,
        head_grad_bytes,
        tail_peak_bytes: 0,
        margin_bytes: 0,
        steady_bytes: 0,
        unit_forward_s: None,
        fused,
        calibration: Vec::new(),
    }
}

/// A probe that records the high-water mark of every phase of a step (between two
/// [`MemoryProbe::phase`] calls, and from the last one to the step's end, `None`).
struct PhaseRecorder<'a> {
    inner: &'a mut dyn MemoryProbe,
    peaks: Vec<(Option<Phase>, u64)>,
}

impl MemoryProbe for PhaseRecorder<'_> {
    fn begin_step(&mut self) {
        self.peaks.clear();
        self.inner.begin_step();
    }
    fn phase(&mut self, ended: Phase) {
        let s = self.inner.end_step();
        self.peaks.push((Some(ended), s.peak_allocated_bytes));
        self.inner.begin_step();
    }
    fn end_step(&mut self) -> MemorySample {
        let s = self.inner.end_step();
        self.peaks.push((None, s.peak_allocated_bytes));
        s
    }
    fn describe(&self) -> &'static str {
        self.inner.describe()
    }
    fn live_bytes(&mut self) -> u64 {
        self.inner.live_bytes()
    }
}

/// The calibration plans for `layers` blocks: every block recomputed, segments of
/// `ceil(sqrt(layers))` blocks, and the first half stored with the rest recomputed.
pub fn calibration_plans(layers: usize) -> Vec<(String, Vec<Segment>)> {
    let k = (layers as f64).sqrt().ceil() as usize;
    let half = layers / 2;
    let mut mixed = segment::per_block_stored(half);
    mixed.extend((half..layers).map(|i| Segment {
        start: i,
        end: i + 1,
        recompute: true,
        inner: None,
    }));
    vec![
        ("every block recomputed".into(), segment::every_k(layers, 1)),
        (
            format!("segments of {k} blocks"),
            segment::every_k(layers, k),
        ),
        (
            format!("blocks 0..{half} stored, the rest recomputed"),
            mixed,
        ),
    ]
}

/// The executor profile of `model` on `inputs`: two passes of per-block measurements (the
/// second kept), then one real training step with an optimizer from `make_optim` (it allocates
/// the optimizer state) and one measured step per calibration plan with that optimizer, each
/// measured phase by phase above its steady state (the bytes live before it).
pub fn profile_executor<B, O>(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
    fused: bool,
    make_optim: impl Fn() -> O,
) -> ExecutorProfile
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    drop(profile_pass(model, inputs, device, probe, fused));
    let mut profile = profile_pass(model, inputs, device, probe, fused);
    let mut measured = Vec::new();
    let plans = calibration_plans(model.blocks.len());
    // One optimizer for every calibration plan: its first step (under the first plan)
    // allocates the optimizer state, so each plan's measured step starts from the same steady
    // state (parameters and optimizer state; the learning rate is 0, so the model stays the
    // same), one unmeasured step in all instead of one per plan.
    let mut optim = make_optim();
    let (mut m, _) = train_step(
        model.clone(),
        &mut optim,
        0.0,
        inputs,
        Some(&plans[0].1),
        fused,
        probe,
    );
    for (name, plan) in plans {
        let steady = probe.live_bytes();
        profile.steady_bytes = profile.steady_bytes.max(steady);
        let mut rec = PhaseRecorder {
            inner: &mut *probe,
            peaks: Vec::new(),
        };
        rec.begin_step();
        let (next, loss) = train_step(m, &mut optim, 0.0, inputs, Some(&plan), fused, &mut rec);
        let _ = B::sync(device);
        rec.end_step();
        drop(loss);
        m = next;
        let above = |(_, p): &(Option<Phase>, u64)| p.saturating_sub(steady);
        // The step's tail: the embeddings' backward, the optimizer step and what follows it.
        let tail = rec
            .peaks
            .iter()
            .filter(|(phase, _)| {
                matches!(
                    phase,
                    None | Some(Phase::EmbeddingBackward | Phase::OptimizerStep)
                )
            })
            .map(above)
            .max()
            .unwrap_or(0);
        profile.tail_peak_bytes = profile.tail_peak_bytes.max(tail);
        measured.push((name, plan, rec.peaks.iter().map(above).max().unwrap_or(0)));
    }
    drop((m, optim));
    for (plan_name, plan, measured_bytes) in measured {
        let modeled_bytes = predict(&profile, &plan, false);
        profile.margin_bytes = profile
            .margin_bytes
            .max(measured_bytes.saturating_sub(modeled_bytes));
        profile.calibration.push(Calibration {
            plan: plan_name,
            measured_bytes,
            modeled_bytes,
        });
    }
    profile
}
