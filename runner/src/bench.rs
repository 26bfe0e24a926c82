//! The attribution benchmark (`memwall-job bench`): where the time of a training step goes,
//! one operation of the model at a time, so that a gap to PyTorch (bf16 steps at 0.22x of
//! PyTorch's speed on an H100) is explained kernel by kernel and the next fix can be chosen
//! offline.
//!
//! For the model of a job file, every distinct operation of one transformer block and the head
//! ([`memwall_core::record::attribution::operations`]) is timed on the job's backend, in f32
//! and bf16 (a dtype the backend lacks gives an `unsupported` row):
//!
//! - **matmuls** as the model runs them on the inner (non-autodiff) backend: a linear layer's
//!   forward `B::linear(X, W)` on the `[b, t, k]` input, its input gradient
//!   `B::linear_x_backward(W, dY)` (`dY·Wᵀ`) and weight gradient `B::linear_weight_backward(X,
//!   dY)` (Burn: `[b, k, t]·[b, t, n]` batched, then summed over `b`), plus the flattened
//!   `[k, b·t]·[b·t, n]` weight gradient PyTorch computes (`backward_weight_flat`); the tied head
//!   as the model computes it, `h·Eᵀ`, `dY·E` and `hᵀ·dY` (autodiff's matmul backward);
//! - **attention**: memwall's memory-efficient attention ([`crate::model::attention`], the job's
//!   tiles) and Burn's naive attention, each through autodiff: the tracked forward, then
//!   `backward()` of its output (seeded with ones);
//! - **layer norm**: [`crate::model::norm::layer_norm`] with the job's saving, through autodiff,
//!   forward and backward;
//! - **one training step** of the whole model (plain backward, AdamW, the job's attention and
//!   layer norm, random tokens).
//!
//! Each is run `warmup` times untimed (CUDA compiles and autotunes there), then `repeats` times,
//! each timed between two device synchronizations; the row holds the median. FLOPs: `2·M·K·N`
//! per matmul; causal attention as FlashAttention-2 counts it
//! ([`memwall_core::record::attribution::attention_flops`]); the step `6N + attention` per
//! token ([`ModelConfig::train_flops_per_token`]); layer norm is memory-bound and gets `bytes`
//! (inputs read and outputs written once) instead.
//!
//! **Kernel categories (CUDA).** CubeCL 0.10 profiles kernels when its runtime configuration
//! sets `profiling.logger.level` (`ProfilingLogLevel::Basic`) before the device starts: every
//! kernel launch is then wrapped in `ComputeClient::profile` (the CUDA server synchronizes the
//! stream before and after the kernel and takes host timestamps, `TimestampProfiler`), and the
//! kernel's type name and duration go to the profiling log as `| <duration> | <name> | ...`.
//! The configuration is process-wide and set once, and profiling serializes every kernel, so
//! `bench` runs it in a child process of its own (`bench --kernel-profile --append`) after the
//! timed operations: one warmed-up f32 and one bf16 training step, the profiling log
//! (`<out>.cubecl-profile.log`, kept) parsed into one row per kernel category ([`category`])
//! and one per kernel name. Each kernel's time includes a launch and two synchronizations
//! (tens of microseconds), so the breakdown over-weights small kernels: compare categories by
//! launches as well as by time. Flex and ndarray are not CubeCL backends: no kernel rows.
//!
//! May import: [`crate::model`], [`crate::train`], [`crate::device`], `memwall_core`, Burn.

use crate::data::Batch;
use crate::measure::{median, MemoryProbe, MemorySample};
use crate::model::attention::{memory_efficient_attention, Attention, Tiles};
use crate::model::norm::layer_norm;
use crate::model::{cast_model, dtype_of, InitModel, ModelBackend, TransformerLm};
use crate::train::{train_step, Inputs};
use burn::backend::Autodiff;
use burn::nn::LayerNormConfig;
use burn::optim::{AdamWConfig, Optimizer};
use burn::tensor::activation::gelu;
use burn::tensor::backend::Backend;
use burn::tensor::module::attention as naive_attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Distribution, Tensor, TensorPrimitive};
use memwall_core::device::BackendKind;
use memwall_core::record::attribution::{
    operations, AttributionRow, AttributionStatus, OpSpec, ATTRIBUTION_FORMAT,
};
use memwall_core::spec::{JobSpec, Precision};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Timed repeats per operation (the median is reported).
    pub repeats: usize,
    /// Untimed runs before them.
    pub warmup: usize,
    /// The dtypes, in order.
    pub dtypes: Vec<Precision>,
    /// Only these `op`s (`matmul`, `attention`, `attention_naive`, `layer_norm`,
    /// `train_step`); all when `None`.
    pub ops: Option<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            repeats: 10,
            warmup: 3,
            dtypes: vec![Precision::F32, Precision::Bf16],
            ops: None,
        }
    }
}

/// Where the rows come from: the job, the options, the backend's and device's names.
struct Ctx<'a> {
    job: &'a JobSpec,
    opts: &'a Options,
    backend: String,
    device: String,
    numerics: &'static str,
}

impl Ctx<'_> {
    /// A row for `spec` in `precision`, not yet timed (status `failed`).
    fn row(&self, spec: &OpSpec, precision: Precision) -> AttributionRow {
        let bytes = spec
            .elements_moved
            .map(|n| (n * dtype_of(precision).size() as u64) as f64);
        AttributionRow {
            format: ATTRIBUTION_FORMAT.into(),
            framework: "burn".into(),
            framework_version: crate::BURN_VERSION.into(),
            backend: self.backend.clone(),
            device: self.device.clone(),
            op: spec.op.into(),
            name: spec.name.into(),
            shape: spec.shape.clone(),
            dtype: precision.to_string(),
            pass: spec.pass.into(),
            status: AttributionStatus::Failed,
            reason: None,
            median_s: None,
            repeats: 0,
            flops: spec.flops,
            tflops: None,
            bytes,
            calls_per_step: Some(spec.calls_per_step),
            kernel_launches: None,
            note: None,
            model: self.job.model,
        }
    }

    fn wanted(&self, op: &str) -> bool {
        self.opts
            .ops
            .as_ref()
            .is_none_or(|ops| ops.iter().any(|o| o == op))
    }
}

/// The message of a caught panic.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// Runs `setup` then `run` `warmup + repeats` times; times each `run` between two device
/// synchronizations and returns the timed repeats' seconds. The output of `run` is dropped after
/// the second synchronization.
fn measure<B: Backend, S, O>(
    device: &B::Device,
    opts: &Options,
    mut setup: impl FnMut() -> S,
    mut run: impl FnMut(S) -> O,
) -> Result<Vec<f64>, String> {
    let sync = || B::sync(device).map_err(|e| format!("device synchronization failed: {e:?}"));
    let mut times = Vec::with_capacity(opts.repeats);
    for i in 0..opts.warmup + opts.repeats.max(1) {
        let input = setup();
        sync()?;
        let t0 = Instant::now();
        let out = run(input);
        sync()?;
        let dt = t0.elapsed().as_secs_f64();
        drop(out);
        if i >= opts.warmup {
            times.push(dt);
        }
    }
    Ok(times)
}

fn random<B: Backend, const D: usize>(
    shape: [usize; D],
    dtype: DType,
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::<B, D>::random(shape, Distribution::Normal(0.0, 1.0), device).cast(dtype)
}

fn float<B: Backend, const D: usize>(p: burn::tensor::ops::FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> burn::tensor::ops::FloatTensor<B> {
    t.into_primitive().tensor()
}

/// Times one matmul of `spec` on `B` (see the module documentation); returns the seconds and
/// a note on what ran.
fn time_matmul<B: Backend>(
    spec: &OpSpec,
    dtype: DType,
    device: &B::Device,
    ctx: &Ctx,
) -> Result<(Vec<f64>, String), String> {
    let m = &ctx.job.model;
    let (b, t) = (m.batch, m.seq_len);
    let tokens = b * t;
    let (k, n) = match spec.name {
        "attn_qkvo" => (m.d_model, m.d_model),
        "mlp_up" => (m.d_model, m.d_ff),
        "mlp_down" => (m.d_ff, m.d_model),
        "lm_head" => (m.d_model, m.vocab),
        other => return Err(format!("unknown matmul `{other}`")),
    };
    let opts = ctx.opts;
    if spec.name == "lm_head" && m.tie_embeddings {
        let times = time_tied_head::<B>(spec.pass, [tokens, k, n], dtype, device, opts)?;
        return Ok((
            times,
            "tied head: h·Eᵀ with E the [vocab, d] embedding (a transposed view), as the model"
                .into(),
        ));
    }
    // A linear layer as the model calls it: on the `[b, t, k]` input of a block, on the flat
    // `[b·t, k]` input for an untied head.
    let three_d = spec.name != "lm_head";
    let times = if three_d {
        time_block_linear::<B>(spec, [b, t, k, n], dtype, device, opts)
    } else {
        time_head_linear::<B>(spec.pass, [tokens, k, n], dtype, device, opts)
    }?;
    let note = match spec.pass {
        "backward_weight" if three_d => {
            "Burn's linear_weight_backward on a [b, t, k] input: [b, k, t]·[b, t, n] batched, \
             summed over b"
        }
        "backward_weight_flat" => "Xᵀ·dY on the flattened [b·t, k] input (PyTorch's product)",
        _ if three_d => "Burn's ModuleOps::linear (and its backward) on a [b, t, k] input",
        _ => "Burn's ModuleOps::linear (and its backward) on the flat [b·t, d] input",
    };
    Ok((times, note.into()))
}

/// Times one pass of the tied head (`[tokens, k]` hidden states, `n` the vocabulary):
/// logits = h · Eᵀ (E the [V, d] embedding), as `TransformerLm::logits`; autodiff's matmul
/// backward: dh = dY · (Eᵀ)ᵀ and d(Eᵀ) = hᵀ · dY.
fn time_tied_head<B: Backend>(
    pass: &str,
    [tokens, k, n]: [usize; 3],
    dtype: DType,
    device: &B::Device,
    opts: &Options,
) -> Result<Vec<f64>, String> {
    let h = random::<B, 2>([tokens, k], dtype, device);
    let e = random::<B, 2>([n, k], dtype, device);
    let dy = random::<B, 2>([tokens, n], dtype, device);
    match pass {
        "forward" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| h.clone().matmul(e.clone().transpose()),
        ),
        "backward_input" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| dy.clone().matmul(e.clone().transpose().transpose()),
        ),
        "backward_weight" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| h.clone().transpose().matmul(dy.clone()),
        ),
        other => Err(format!("no pass `{other}` for the tied head")),
    }
}

/// Times one pass of a block's linear layer (`[k, n]` weight) on its `[b, t, k]` input, as
/// the model calls it; `backward_weight_flat` is the flattened product PyTorch computes.
fn time_block_linear<B: Backend>(
    spec: &OpSpec,
    [b, t, k, n]: [usize; 4],
    dtype: DType,
    device: &B::Device,
    opts: &Options,
) -> Result<Vec<f64>, String> {
    let tokens = b * t;
    let w = random::<B, 2>([k, n], dtype, device);
    let x = random::<B, 3>([b, t, k], dtype, device);
    let dy = random::<B, 3>([b, t, n], dtype, device);
    let flat = |a: &Tensor<B, 3>, c| a.clone().reshape([tokens, c]);
    match spec.pass {
        "forward" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| float::<B, 3>(B::linear(prim(x.clone()), prim(w.clone()), None)),
        ),
        "backward_input" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| float::<B, 3>(B::linear_x_backward(prim(w.clone()), prim(dy.clone()))),
        ),
        "backward_weight" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| float::<B, 2>(B::linear_weight_backward(prim(x.clone()), prim(dy.clone()))),
        ),
        "backward_weight_flat" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| flat(&x, k).transpose().matmul(flat(&dy, n)),
        ),
        other => Err(format!("no pass `{other}` for matmul `{}`", spec.name)),
    }
}

/// Times one pass of the untied head's linear layer (`[k, n]` weight) on the flat
/// `[tokens, k]` input.
fn time_head_linear<B: Backend>(
    pass: &str,
    [tokens, k, n]: [usize; 3],
    dtype: DType,
    device: &B::Device,
    opts: &Options,
) -> Result<Vec<f64>, String> {
    let w = random::<B, 2>([k, n], dtype, device);
    let x = random::<B, 2>([tokens, k], dtype, device);
    let dy = random::<B, 2>([tokens, n], dtype, device);
    match pass {
        "forward" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| float::<B, 2>(B::linear(prim(x.clone()), prim(w.clone()), None)),
        ),
        "backward_input" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| float::<B, 2>(B::linear_x_backward(prim(w.clone()), prim(dy.clone()))),
        ),
        "backward_weight" => measure::<B, _, _>(
            device,
            opts,
            || (),
            |_| float::<B, 2>(B::linear_weight_backward(prim(x.clone()), prim(dy.clone()))),
        ),
        other => Err(format!("no pass `{other}` for the head")),
    }
}

/// Times attention, layer norm, GELU or the head merge of `spec` on `B` (all but the head
/// merge through autodiff).
fn time_autodiff_op<B: ModelBackend>(
    spec: &OpSpec,
    dtype: DType,
    precision: Precision,
    device: &B::Device,
    ctx: &Ctx,
) -> Result<(Vec<f64>, String), String> {
    let backward = spec.pass == "backward";
    match spec.op {
        "attention" | "attention_naive" => {
            time_attention::<B>(spec.op == "attention_naive", backward, dtype, device, ctx)
        }
        "layer_norm" => time_layer_norm::<B>(backward, dtype, precision, device, ctx),
        "gelu" => time_gelu::<B>(backward, dtype, device, ctx),
        "head_merge" => time_head_merge::<B>(dtype, device, ctx),
        other => Err(format!("unknown op `{other}`")),
    }
}

/// Times causal attention (memwall's memory-efficient attention with the job's tiles, or
/// Burn's naive composition) under autodiff: the forward, or the backward of a forward.
fn time_attention<B: ModelBackend>(
    naive: bool,
    backward: bool,
    dtype: DType,
    device: &B::Device,
    ctx: &Ctx,
) -> Result<(Vec<f64>, String), String> {
    let m = &ctx.job.model;
    let opts = ctx.opts;
    let (b, h, t) = (m.batch, m.heads, m.seq_len);
    let dh = m.d_model / m.heads;
    let leaf = || random::<Autodiff<B>, 4>([b, h, t, dh], dtype, device).require_grad();
    let (q, k, v) = (leaf(), leaf(), leaf());
    let tiles = match ctx.job.strategy.attention {
        Attention::MemoryEfficient { tiles } => tiles,
        Attention::Naive => Tiles::default(),
    };
    let forward = || {
        if naive {
            let options = AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: true,
            };
            naive_attention(q.clone(), k.clone(), v.clone(), None, None, options)
        } else {
            memory_efficient_attention(q.clone(), k.clone(), v.clone(), tiles)
        }
    };
    let times = if backward {
        measure::<B, _, _>(device, opts, forward, |out| out.backward())
    } else {
        measure::<B, _, _>(device, opts, || (), |_| forward())
    }?;
    let note = if naive {
        "Burn's attention (is_causal) under autodiff: the naive composition".to_string()
    } else {
        format!(
            "memwall's memory-efficient attention (FlashAttention-2 tiling in Burn \
             tensor ops, tiles {}x{}) under autodiff",
            tiles.query, tiles.key
        )
    };
    Ok((times, note))
}

/// Times memwall's layer norm (the job's saving, weights in `precision`) under autodiff.
fn time_layer_norm<B: ModelBackend>(
    backward: bool,
    dtype: DType,
    precision: Precision,
    device: &B::Device,
    ctx: &Ctx,
) -> Result<(Vec<f64>, String), String> {
    let m = &ctx.job.model;
    let opts = ctx.opts;
    let saving = ctx.job.strategy.layer_norm;
    let norm = cast_model(
        LayerNormConfig::new(m.d_model).init::<Autodiff<B>>(device),
        precision,
    );
    let x = random::<Autodiff<B>, 3>([m.batch, m.seq_len, m.d_model], dtype, device).require_grad();
    let forward = || layer_norm(&norm, x.clone(), saving);
    let times = if backward {
        measure::<B, _, _>(device, opts, forward, |y| y.backward())
    } else {
        measure::<B, _, _>(device, opts, || (), |_| forward())
    }?;
    Ok((
        times,
        format!("memwall's layer norm ({}) under autodiff", saving.as_str()),
    ))
}

/// Times Burn's GELU on the MLP's hidden activations under autodiff.
fn time_gelu<B: ModelBackend>(
    backward: bool,
    dtype: DType,
    device: &B::Device,
    ctx: &Ctx,
) -> Result<(Vec<f64>, String), String> {
    let m = &ctx.job.model;
    let opts = ctx.opts;
    let x = random::<Autodiff<B>, 2>([m.batch * m.seq_len, m.d_ff], dtype, device).require_grad();
    let forward = || gelu(x.clone());
    let times = if backward {
        measure::<B, _, _>(device, opts, forward, |y| y.backward())
    } else {
        measure::<B, _, _>(device, opts, || (), |_| forward())
    }?;
    Ok((times, "Burn's gelu (exact, erf) under autodiff".to_string()))
}

/// Times the head merge: the copy of the permuted `[b, h, t, dh]` heads into a contiguous
/// `[b, t, d]` tensor.
fn time_head_merge<B: ModelBackend>(
    dtype: DType,
    device: &B::Device,
    ctx: &Ctx,
) -> Result<(Vec<f64>, String), String> {
    let m = &ctx.job.model;
    let (b, h, t) = (m.batch, m.heads, m.seq_len);
    let x = random::<B, 4>([b, h, t, m.d_model / h], dtype, device);
    let times = measure::<B, _, _>(
        device,
        ctx.opts,
        || (),
        |_| x.clone().swap_dims(1, 2).reshape([b, t, m.d_model]),
    )?;
    Ok((
        times,
        "swap_dims(1, 2) then reshape: the permuted-to-contiguous copy".to_string(),
    ))
}

/// A probe that measures nothing (the benchmark times, it does not weigh).
struct NoProbe;

impl MemoryProbe for NoProbe {
    fn begin_step(&mut self) {}
    fn phase(&mut self, _: crate::measure::Phase) {}
    fn end_step(&mut self) -> MemorySample {
        MemorySample {
            peak_allocated_bytes: 0,
            peak_reserved_bytes: 0,
        }
    }
    fn describe(&self) -> &'static str {
        "none"
    }
    fn live_bytes(&mut self) -> u64 {
        0
    }
}

/// A batch of random tokens of the job's shape (a 64-bit LCG seeded with the job's seed).
fn random_batch(job: &JobSpec) -> Batch {
    let m = &job.model;
    let n = m.batch * m.seq_len;
    let mut state = job.train.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let ids: Vec<i64> = (0..=n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % m.vocab as u64) as i64
        })
        .collect();
    Batch {
        batch: m.batch,
        seq_len: m.seq_len,
        inputs: ids[..n].to_vec(),
        targets: ids[1..].to_vec(),
        positions: (0..n as i64).map(|i| i % m.seq_len as i64).collect(),
    }
}

/// A training step's model, optimizer and inputs on the device, in one precision.
struct Stepper<B: ModelBackend, O> {
    model: Option<TransformerLm<Autodiff<B>>>,
    optim: O,
    inputs: Inputs<Autodiff<B>>,
    lr: f64,
}

/// The model of `job` (its attention and layer norm) in `precision` with AdamW, and a batch of
/// random tokens.
fn stepper<B: ModelBackend>(
    job: &JobSpec,
    precision: Precision,
    device: &B::Device,
) -> Stepper<B, impl Optimizer<TransformerLm<Autodiff<B>>, Autodiff<B>>> {
    <Autodiff<B> as Backend>::seed(device, job.train.seed);
    let model = job
        .model
        .init::<Autodiff<B>>(device)
        .with_attention(job.strategy.attention)
        .with_layer_norm(job.strategy.layer_norm);
    let model = cast_model(model, precision);
    let optim = AdamWConfig::new()
        .with_weight_decay(job.train.weight_decay as f32)
        .init::<Autodiff<B>, TransformerLm<Autodiff<B>>>();
    Stepper {
        model: Some(model),
        optim,
        inputs: Inputs::new(&random_batch(job), device),
        lr: job.train.lr,
    }
}

impl<B: ModelBackend, O: Optimizer<TransformerLm<Autodiff<B>>, Autodiff<B>>> Stepper<B, O> {
    /// One step (plain backward, then the optimizer); returns the loss tensor.
    fn step(&mut self) -> Tensor<B, 1> {
        let model = self
            .model
            .take()
            .expect("the model is back after each step");
        let (model, loss) = train_step(
            model,
            &mut self.optim,
            self.lr,
            &self.inputs,
            None,
            false,
            &mut NoProbe,
        );
        self.model = Some(model);
        loss
    }
}

/// Times every wanted operation of `ctx.job` in every dtype on `B` and hands each row to
/// `sink` as soon as it is measured.
fn bench_on<B: ModelBackend>(device: &B::Device, ctx: &Ctx, sink: &mut dyn FnMut(AttributionRow)) {
    for &precision in &ctx.opts.dtypes {
        let dtype = dtype_of(precision);
        let supported = B::supports_dtype(device, dtype);
        for spec in operations(&ctx.job.model) {
            if !ctx.wanted(spec.op) {
                continue;
            }
            let mut row = ctx.row(&spec, precision);
            if !supported {
                row.status = AttributionStatus::Unsupported;
                row.reason = Some(format!(
                    "the {} backend does not support {precision} tensors",
                    ctx.backend
                ));
                sink(row);
                continue;
            }
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match spec.op {
                    "matmul" => time_matmul::<B>(&spec, dtype, device, ctx),
                    "train_step" => {
                        let mut stepper = stepper::<B>(ctx.job, precision, device);
                        let times =
                            measure::<B, _, _>(device, ctx.opts, || (), |_| stepper.step())?;
                        Ok((
                            times,
                            format!(
                                "one training step of the whole model: plain backward, AdamW, \
                                 the job's attention and layer norm ({}), random tokens",
                                ctx.job.strategy.layer_norm.as_str()
                            ),
                        ))
                    }
                    _ => time_autodiff_op::<B>(&spec, dtype, precision, device, ctx),
                }))
                .map_err(panic_message)
                .and_then(|r| r);
            match outcome {
                Ok((times, note)) => {
                    let s = median(&times);
                    row.status = AttributionStatus::Ok;
                    row.median_s = Some(s);
                    row.repeats = times.len();
                    row.tflops = row.flops.map(|f| f / s / 1e12);
                    row.note = Some(format!("{note}; {}", ctx.numerics));
                }
                Err(reason) => row.reason = Some(reason),
            }
            sink(row);
        }
    }
}

/// Runs the benchmark of `job` on its backend and hands each row to `sink`.
///
/// # Errors
/// The job's backend is not in this build, or its device cannot be used.
pub fn run(
    job: &JobSpec,
    opts: &Options,
    sink: &mut dyn FnMut(AttributionRow),
) -> Result<(), String> {
    match job.backend {
        BackendKind::Flex => {
            let ctx = Ctx {
                job,
                opts,
                backend: "flex".into(),
                device: crate::device::cpu_model(),
                numerics: "CPU (flex)",
            };
            bench_on::<burn::backend::Flex>(&Default::default(), &ctx, sink);
            Ok(())
        }
        BackendKind::Ndarray => {
            #[cfg(feature = "ndarray")]
            {
                let ctx = Ctx {
                    job,
                    opts,
                    backend: "ndarray".into(),
                    device: crate::device::cpu_model(),
                    numerics: "CPU (ndarray)",
                };
                bench_on::<burn::backend::NdArray>(&Default::default(), &ctx, sink);
                Ok(())
            }
            #[cfg(not(feature = "ndarray"))]
            {
                let _ = sink;
                Err("this runner was built without the `ndarray` feature".into())
            }
        }
        BackendKind::Cuda => {
            #[cfg(feature = "cuda")]
            {
                cuda::run(job, opts, sink, None)
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = sink;
                Err("this runner was built without the `cuda` feature".into())
            }
        }
    }
}

/// The kernel category of a CubeCL kernel's name (the first part of the profiling log's
/// name: the kernel's type without its module path, e.g. `KernelBinop`, `Matmul`,
/// `ElemwiseFuse`, `ReduceKernel`).
pub fn category(kernel: &str) -> &'static str {
    let k = kernel.to_ascii_lowercase().replace('_', "");
    let has = |words: &[&str]| words.iter().any(|w| k.contains(w));
    if has(&["matmul", "gemm", "gemv", "mma"]) {
        "matmul"
    } else if has(&["attention"]) {
        "attention kernel"
    } else if has(&["fuse", "fused"]) {
        "fused (Burn fusion)"
    } else if has(&["reduce", "sum", "argmax", "argmin", "cumulative"]) {
        "reduction"
    } else if has(&["cast"]) {
        "cast"
    } else if has(&[
        "contiguous",
        "copy",
        "slice",
        "repeat",
        "flip",
        "cat",
        "permute",
    ]) {
        "layout (copy, slice)"
    } else if has(&["gather", "scatter", "select", "index"]) {
        "gather / scatter"
    } else if has(&["mask"]) {
        "mask"
    } else if has(&["full", "prng", "random", "fill"]) {
        "fill / random"
    } else if has(&[
        "binop",
        "unary",
        "scalar",
        "cmp",
        "predicate",
        "clamp",
        "elemwise",
    ]) {
        "elementwise"
    } else {
        "other"
    }
}

/// A `Duration` as Rust's `Debug` prints it (`850ns`, `12.3µs`, `1.25ms`, `2.5s`), in seconds.
fn parse_debug_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = s.strip_suffix("µs").or_else(|| s.strip_suffix("us")) {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return None;
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| v * scale)
}

/// The profiled kernels of a CubeCL profiling log: one `(kernel, seconds)` per line
/// `| <duration> | <name>[ | <generics>...]` (`cubecl-runtime`'s `ServerLogger`); the summary
/// tables it prints at each synchronization (`| <name> | <duration> | <count> | <ratio> |`) and
/// other lines are skipped.
pub fn parse_profile_log(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix('|')?;
            let mut cells = rest.split('|');
            let seconds = parse_debug_duration(cells.next()?)?;
            let name = cells.next()?.trim();
            (!name.is_empty()).then(|| (name.to_string(), seconds))
        })
        .collect()
}

/// Rows of one profiled step from its kernels: one per category (`op` = `kernels`, `name` the
/// category; plus a `total` row) and one per kernel name (`op` = `kernel`, `name`
/// `<category>/<kernel>`), largest time first.
fn kernel_rows(
    base: &AttributionRow,
    kernels: &[(String, f64)],
    step_s: f64,
) -> Vec<AttributionRow> {
    use std::collections::BTreeMap;
    let mut by_category: BTreeMap<&str, (f64, u64)> = BTreeMap::new();
    let mut by_kernel: BTreeMap<(&str, &str), (f64, u64)> = BTreeMap::new();
    for (name, s) in kernels {
        let c = category(name);
        let e = by_category.entry(c).or_default();
        e.0 += s;
        e.1 += 1;
        let e = by_kernel.entry((c, name.as_str())).or_default();
        e.0 += s;
        e.1 += 1;
    }
    let total: f64 = kernels.iter().map(|(_, s)| s).sum();
    let row = |op: &str, name: String, s: f64, launches: u64, note: String| AttributionRow {
        op: op.into(),
        name,
        status: if s > 0.0 {
            AttributionStatus::Ok
        } else {
            AttributionStatus::Failed
        },
        median_s: Some(s),
        repeats: 1,
        kernel_launches: Some(launches),
        note: Some(note),
        ..base.clone()
    };
    let mut rows = vec![row(
        "kernels",
        "total".into(),
        total,
        kernels.len() as u64,
        format!(
            "sum of the profiled kernels of one training step (each kernel timed between two \
             stream synchronizations); the step took {:.3} ms of wall time under profiling",
            step_s * 1e3
        ),
    )];
    let mut categories: Vec<_> = by_category.into_iter().collect();
    categories.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    for (c, (s, n)) in categories {
        rows.push(row(
            "kernels",
            c.into(),
            s,
            n,
            format!("{:.1}% of the profiled kernel time", 100.0 * s / total),
        ));
    }
    let mut names: Vec<_> = by_kernel.into_iter().collect();
    names.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    for ((c, k), (s, n)) in names {
        rows.push(row(
            "kernel",
            format!("{c}/{k}"),
            s,
            n,
            format!("{:.1}% of the profiled kernel time", 100.0 * s / total),
        ));
    }
    rows
}

/// Waits until the file at `path` stops growing (CubeCL's logger writes from its own thread):
/// unchanged for half a second, or two minutes at most. Returns its length.
fn wait_quiet(path: &Path) -> u64 {
    let len = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let mut last = len();
    let mut still = 0;
    while still < 5 && started.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = len();
        if now == last {
            still += 1;
        } else {
            still = 0;
            last = now;
        }
    }
    last
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::train::cuda::{configure_runtime_with, CudaUnfused};
    use burn::backend::cuda::CudaDevice;
    use burn::backend::Cuda;

    /// The CUDA benchmark (`profile_log`: `None` for the timed operations, the profiling log's
    /// path for the kernel-profiling child).
    pub(super) fn run(
        job: &JobSpec,
        opts: &Options,
        sink: &mut dyn FnMut(AttributionRow),
        profile_log: Option<&Path>,
    ) -> Result<(), String> {
        let info = crate::device::probe_cuda().map_err(|e| e.to_string())?;
        let name = info
            .names
            .get(job.device_index)
            .cloned()
            .ok_or_else(|| format!("no CUDA device {}", job.device_index))?;
        configure_runtime_with(&job.device_settings, |c| {
            if let Some(log) = profile_log {
                c.profiling.logger.file = Some(log.to_path_buf());
                c.profiling.logger.append = true;
                c.profiling.logger.level = cubecl::config::profiling::ProfilingLogLevel::Basic;
            }
        })
        .map_err(|e| {
            format!(
                "creating the CubeCL cache directory {:?}: {e}",
                job.device_settings.cache_dir
            )
        })?;
        let device = CudaDevice::new(job.device_index);
        let ctx = Ctx {
            job,
            opts,
            backend: if job.strategy.fusion {
                "cuda+fusion"
            } else {
                "cuda"
            }
            .into(),
            device: name,
            numerics: "CUDA via CubeCL; f32 matmuls may run on TF32 tensor cores",
        };
        match (profile_log, job.strategy.fusion) {
            (None, true) => bench_on::<Cuda>(&device, &ctx, sink),
            (None, false) => bench_on::<CudaUnfused>(&device, &ctx, sink),
            (Some(log), true) => profile_steps::<Cuda>(&device, &ctx, log, sink),
            (Some(log), false) => profile_steps::<CudaUnfused>(&device, &ctx, log, sink),
        }
        Ok(())
    }

    /// One profiled training step per dtype, after warm-up steps (see the module documentation).
    fn profile_steps<B: ModelBackend>(
        device: &B::Device,
        ctx: &Ctx,
        log: &Path,
        sink: &mut dyn FnMut(AttributionRow),
    ) {
        let step_spec = operations(&ctx.job.model)
            .into_iter()
            .find(|o| o.op == "train_step")
            .expect("the operations end with the training step");
        for &precision in &ctx.opts.dtypes {
            let mut base = ctx.row(&step_spec, precision);
            base.op = "kernels".into();
            base.name = "total".into();
            base.flops = None;
            base.calls_per_step = None;
            if !B::supports_dtype(device, dtype_of(precision)) {
                base.status = AttributionStatus::Unsupported;
                base.reason = Some(format!("CUDA here does not support {precision} tensors"));
                sink(base);
                continue;
            }
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let sync = || B::sync(device).map_err(|e| format!("device synchronization: {e:?}"));
                let mut stepper = stepper::<B>(ctx.job, precision, device);
                for _ in 0..ctx.opts.warmup.max(1) {
                    drop(stepper.step());
                }
                sync()?;
                let start = wait_quiet(log);
                let t0 = Instant::now();
                let loss = stepper.step();
                sync()?;
                let step_s = t0.elapsed().as_secs_f64();
                drop(loss);
                wait_quiet(log);
                let text = std::fs::read(log).map_err(|e| format!("{}: {e}", log.display()))?;
                let tail =
                    String::from_utf8_lossy(&text[(start as usize).min(text.len())..]).into_owned();
                let kernels = parse_profile_log(&tail);
                if kernels.is_empty() {
                    return Err(format!(
                        "CubeCL's profiling log {} holds no kernel of the profiled step",
                        log.display()
                    ));
                }
                Ok(kernel_rows(&base, &kernels, step_s))
            }))
            .map_err(panic_message)
            .and_then(|r| r);
            match outcome {
                Ok(rows) => rows.into_iter().for_each(&mut *sink),
                Err(reason) => {
                    base.reason = Some(reason);
                    sink(base);
                }
            }
        }
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: memwall-job bench --job FILE --out FILE.jsonl [--repeats N] [--warmup N] \
         [--dtypes f32,bf16] [--only matmul,attention,attention_naive,layer_norm,gelu,head_merge,train_step] \
         [--no-kernel-profile] [--append]"
    );
    ExitCode::from(2)
}

/// `memwall-job bench --job FILE --out FILE.jsonl [--repeats N] [--warmup N] [--dtypes LIST]
/// [--only OPS] [--no-kernel-profile] [--append]`: times the operations of the job's model on
/// the job's backend and device ([`run`]) and writes one [`AttributionRow`] per line to the
/// output (replaced, or appended to with `--append`) and to stdout. On CUDA it then runs
/// itself again as `bench ... --kernel-profile --append` for the kernel categories of one
/// training step (skipped with `--no-kernel-profile`); the profiling log is kept beside the
/// output as `<out>.cubecl-profile.log`. Exit status 0 when the rows were written (also when
/// some operations failed: each is a row), 1 when the job cannot run, 2 for bad arguments.
pub fn cli(args: &[String]) -> ExitCode {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let (Some(job_file), Some(out)) = (
        flag_value(args, "--job").map(PathBuf::from),
        flag_value(args, "--out"),
    ) else {
        return usage();
    };
    let out = PathBuf::from(out);
    let opts = match parse_options(args) {
        Ok(opts) => opts,
        Err(code) => return code,
    };
    let job = match JobSpec::read(&job_file) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(has("--append"))
        .truncate(!has("--append"))
        .open(&out);
    let mut file = match file {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: opening {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    };
    let mut write_error = None;
    let mut sink = |row: AttributionRow| {
        let line = serde_json::to_string(&row).expect("attribution rows serialize");
        println!("{line}");
        eprintln!("{}", row_summary(&row));
        if let Err(e) = writeln!(file, "{line}").and_then(|_| file.flush()) {
            write_error.get_or_insert(e);
        }
    };
    let log = PathBuf::from(format!("{}.cubecl-profile.log", out.display()));
    let result = if has("--kernel-profile") {
        profile_kernels(&job, &opts, &mut sink, &log)
    } else {
        run(&job, &opts, &mut sink)
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(e) = write_error {
        eprintln!("error: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    if job.backend == BackendKind::Cuda && !has("--kernel-profile") && !has("--no-kernel-profile") {
        run_profile_child(args, &out, &log);
    }
    ExitCode::SUCCESS
}

/// The value after `flag` in `args`, if both are there.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The options of `--repeats`, `--warmup`, `--dtypes` and `--only` (defaults for those not
/// given); a bad value is reported and answered with [`usage`]'s exit code.
fn parse_options(args: &[String]) -> Result<Options, ExitCode> {
    let mut opts = Options::default();
    for (flag, slot) in [
        ("--repeats", &mut opts.repeats),
        ("--warmup", &mut opts.warmup),
    ] {
        if let Some(v) = flag_value(args, flag) {
            match v.parse::<usize>() {
                Ok(n) => *slot = n,
                Err(_) => {
                    eprintln!("{flag}: `{v}` is not a count");
                    return Err(usage());
                }
            }
        }
    }
    if opts.repeats == 0 {
        eprintln!("--repeats: at least 1");
        return Err(usage());
    }
    if let Some(list) = flag_value(args, "--dtypes") {
        let mut dtypes = Vec::new();
        for d in list.split(',') {
            match d.trim() {
                "f32" => dtypes.push(Precision::F32),
                "f16" => dtypes.push(Precision::F16),
                "bf16" => dtypes.push(Precision::Bf16),
                other => {
                    eprintln!("--dtypes: `{other}` is not f32, f16 or bf16");
                    return Err(usage());
                }
            }
        }
        opts.dtypes = dtypes;
    }
    opts.ops =
        flag_value(args, "--only").map(|l| l.split(',').map(|s| s.trim().to_string()).collect());
    Ok(opts)
}

/// The progress line of one row on stderr: the operation and its time and TFLOP/s, or its
/// status and reason.
fn row_summary(row: &AttributionRow) -> String {
    format!(
        "{} {} {} {}: {}",
        row.op,
        row.name,
        row.pass,
        row.dtype,
        match (row.median_s, row.tflops) {
            (Some(s), Some(t)) => format!("{:.3} ms, {t:.2} TFLOP/s", s * 1e3),
            (Some(s), None) => format!("{:.3} ms", s * 1e3),
            _ => format!("{} ({})", row.status, row.reason.as_deref().unwrap_or("")),
        }
    )
}

/// `--kernel-profile`: the kernel categories of one profiled training step (CUDA only), the
/// profiler's log written to `log`.
fn profile_kernels(
    job: &JobSpec,
    opts: &Options,
    sink: &mut dyn FnMut(AttributionRow),
    log: &Path,
) -> Result<(), String> {
    #[cfg(feature = "cuda")]
    {
        if job.backend == BackendKind::Cuda {
            cuda::run(job, opts, sink, Some(log))
        } else {
            Err(format!(
                "--kernel-profile: the {} backend is not a CubeCL backend",
                job.backend
            ))
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (job, opts, sink, log);
        Err("--kernel-profile: this runner was built without the `cuda` feature".to_string())
    }
}

/// Runs this benchmark again in a child process with `--kernel-profile --append` (CubeCL's
/// profiling is configured once per process), its log at `log`; a failure is reported, not
/// returned: the rows written so far stand.
fn run_profile_child(args: &[String], out: &Path, log: &Path) {
    let _ = std::fs::remove_file(log);
    let mut child_args: Vec<String> = args.iter().filter(|a| *a != "--append").cloned().collect();
    child_args.insert(0, "bench".into());
    child_args.extend(["--kernel-profile".into(), "--append".into()]);
    let status = std::env::current_exe()
        .and_then(|exe| std::process::Command::new(exe).args(&child_args).status());
    match status {
        Ok(s) if s.success() => {}
        other => eprintln!(
            "kernel profile: the child process ended with {other:?} (its rows, if any, are \
             in {})",
            out.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_log_lines_are_kernels_and_summaries_are_skipped() {
        let log = "\
| 12.5µs     | KernelBinop | CudaRuntime | f32\n\
| 1.25ms     | Matmul | CudaRuntime | bf16\n\
| 850ns      | CastElement | f32 | bf16\n\
|⎺⎺⎺⎺⎺⎺⎺⎺| \n\
| Name        | Duration | Num Computed | Ratio |\n\
| Matmul      | 1.25ms   | 1            | 98 %  |\n\
| Total       | 1.26ms   | 3            | 100 % |\n\
Executing Foo\n";
        let k = parse_profile_log(log);
        assert_eq!(
            k.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["KernelBinop", "Matmul", "CastElement"]
        );
        assert!((k[0].1 - 12.5e-6).abs() < 1e-12);
        assert!((k[1].1 - 1.25e-3).abs() < 1e-12);
        assert!((k[2].1 - 850e-9).abs() < 1e-15);
        assert_eq!(parse_debug_duration("2s"), Some(2.0));
        assert_eq!(parse_debug_duration("Total"), None);
    }

    #[test]
    fn kernels_fall_into_categories() {
        assert_eq!(category("Matmul"), "matmul");
        assert_eq!(category("GemvPlaneParallel"), "matmul");
        assert_eq!(category("ElemwiseFuse"), "fused (Burn fusion)");
        assert_eq!(category("ReduceKernel"), "reduction");
        assert_eq!(category("CastElement"), "cast");
        assert_eq!(category("IntoContiguousKernel"), "layout (copy, slice)");
        assert_eq!(category("KernelBinop"), "elementwise");
        assert_eq!(category("MaskFillKernel"), "mask");
        assert_eq!(category("GatherKernel"), "gather / scatter");
        assert_eq!(category("Something"), "other");
    }

    #[test]
    fn kernel_rows_sum_by_category() {
        let base = AttributionRow {
            format: ATTRIBUTION_FORMAT.into(),
            framework: "burn".into(),
            framework_version: crate::BURN_VERSION.into(),
            backend: "cuda".into(),
            device: "GPU".into(),
            op: "kernels".into(),
            name: "total".into(),
            shape: vec![2, 8],
            dtype: "bf16".into(),
            pass: "step".into(),
            status: AttributionStatus::Failed,
            reason: None,
            median_s: None,
            repeats: 0,
            flops: None,
            tflops: None,
            bytes: None,
            calls_per_step: None,
            kernel_launches: None,
            note: None,
            model: memwall_core::spec::ModelConfig {
                layers: 1,
                d_model: 8,
                heads: 2,
                d_ff: 16,
                seq_len: 8,
                batch: 2,
                vocab: 300,
                tie_embeddings: true,
            },
        };
        let kernels = vec![
            ("Matmul".to_string(), 3e-3),
            ("KernelBinop".to_string(), 1e-3),
            ("Matmul".to_string(), 2e-3),
        ];
        let rows = kernel_rows(&base, &kernels, 7e-3);
        assert_eq!(rows[0].name, "total");
        assert_eq!(rows[0].kernel_launches, Some(3));
        assert!((rows[0].median_s.unwrap() - 6e-3).abs() < 1e-12);
        assert_eq!(rows[1].name, "matmul");
        assert_eq!(rows[1].kernel_launches, Some(2));
        assert!((rows[1].median_s.unwrap() - 5e-3).abs() < 1e-12);
        assert!(rows
            .iter()
            .any(|r| r.op == "kernel" && r.name == "matmul/Matmul"));
        assert!(rows.iter().all(|r| r.check().is_ok()), "{rows:?}");
    }
}
