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
use crate::measure::{median, NoProbe};
use crate::model::attention::{memory_efficient_attention, Attention, Tiles};
use crate::model::norm::layer_norm;
use crate::model::{cast_model, dtype_of, InitModel, ModelBackend, TransformerLm};
use crate::train::adamw::AdamWConfig;
use crate::train::{train_step, Inputs};
use burn::backend::Autodiff;
use burn::nn::LayerNormConfig;
use burn::optim::Optimizer;
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

mod cli;
#[cfg(feature = "cuda")]
mod cuda;
mod kernels;

pub use cli::*;
pub use kernels::*;

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
    let optim = AdamWConfig::new(job.train.weight_decay as f32)
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

#[cfg(test)]
mod tests;
