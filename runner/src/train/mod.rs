//! The training job: one process runs one [`JobSpec`] and returns its [`JobRecord`].
//!
//! The loop is generic over the Burn backend. Per step: draw a batch, reset the memory probe,
//! run forward and backward under the job's strategy (plain, segment checkpointing, fused
//! optimizer step), step the optimizer, synchronize the device, and record loss, time and
//! peak memory. Warm-up steps are run first and excluded from timing. At the end the model is
//! evaluated on held-out stories (eval loss and perplexity).

pub mod accumulate;
pub mod adafactor;
pub mod adamw;
pub(crate) mod head;
pub mod mixed;
pub mod profile;
pub mod segment;
pub mod slowdown;
pub mod survey;
#[cfg(test)]
mod tests;
pub mod timeline;
pub mod units;
mod unsupported;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

use crate::data::{Batch, Batcher, TokenStream};
use crate::device::BackendKind;
use crate::measure::fault::{self, OutOfMemory};
use crate::measure::{self, Environment, HeapProbe, MemoryProbe, Phase};
use crate::model::ModelBackend;
use crate::model::{cast_model, dtype_of, InitModel, TransformerLm};
use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use memwall_core::budget::{self, BlockCost};
use memwall_core::error::{Error, Result};
use memwall_core::record::{JobRecord, JobStatus, StepRecord, Summary};
use memwall_core::spec::{JobSpec, OptimizerKind};
use memwall_core::units::UnitSet;
use segment::Segment;
use std::time::Instant;

/// The autodiff backends a training job runs on: both they and their inner backend run the
/// memory-efficient attention and the layer norm ([`ModelBackend`]).
pub trait TrainBackend: AutodiffBackend<InnerBackend: ModelBackend> + ModelBackend {}

impl<B> TrainBackend for B
where
    B: AutodiffBackend + ModelBackend,
    B::InnerBackend: ModelBackend,
{
}

/// A batch on the device: `[batch, seq]` token ids, document positions and targets.
pub struct Inputs<B: Backend> {
    /// Input token ids, `[batch, seq]`.
    pub tokens: Tensor<B, 2, Int>,
    /// Document positions of the inputs, `[batch, seq]`.
    pub positions: Tensor<B, 2, Int>,
    /// Next-token targets, `[batch, seq]`.
    pub targets: Tensor<B, 2, Int>,
}

impl<B: Backend> Inputs<B> {
    /// Uploads `batch` to `device`.
    pub fn new(batch: &Batch, device: &B::Device) -> Self {
        let shape = [batch.batch, batch.seq_len];
        let up = |v: &Vec<i64>| {
            Tensor::<B, 2, Int>::from_data(TensorData::new(v.clone(), shape), device)
        };
        Inputs {
            tokens: up(&batch.inputs),
            positions: up(&batch.positions),
            targets: up(&batch.targets),
        }
    }

    /// The batch cut into `n` equal micro-batches along the batch dimension, in order, each
    /// `[batch / n, seq]` (gradient accumulation). `n` divides `batch`: the experiment file's
    /// check (`accumulation_steps`) refuses any other.
    pub fn micro_batches(&self, n: usize) -> Vec<Inputs<B>> {
        let [batch, _] = self.tokens.dims();
        let size = batch / n.max(1);
        let part = |t: &Tensor<B, 2, Int>, i: usize| t.clone().narrow(0, i * size, size);
        (0..n.max(1))
            .map(|i| Inputs {
                tokens: part(&self.tokens, i),
                positions: part(&self.positions, i),
                targets: part(&self.targets, i),
            })
            .collect()
    }

    /// `model`'s mean token cross-entropy (nats) on this batch: a `[1]` tensor.
    pub fn loss(&self, model: &TransformerLm<B>) -> Tensor<B, 1>
    where
        B: ModelBackend,
    {
        model.forward_loss(
            self.tokens.clone(),
            self.positions.clone(),
            self.targets.clone(),
        )
    }
}

/// The segment plan `spec` runs: the plan stage's ([`JobSpec::plan`], made by
/// [`memwall_core::planner::plan`] before the run), or `None` for plain backward. The runner
/// never plans; [`unsupported`] refuses a job whose strategy needs a plan it lacks.
pub fn plan_of(spec: &JobSpec) -> Option<Vec<Segment>> {
    spec.plan.as_ref().map(|p| p.segments.clone())
}

/// The profiling pass of `spec` alone ([`JobSpec::profile_only`]): the model as the job
/// initializes it (seed, attention, precision), one held-out batch, and
/// [`profile::profile_executor`] on the job's device with the job's optimizer (from
/// `make_optim`), with each unit's forward seconds ([`units::unit_forward_seconds`]) when the
/// policy chooses by them. The record has status `ok`, the block costs, the executor profile
/// and no summary. This is what a Checkmate configuration's plan is solved from.
fn profile_record<B, O>(
    spec: &JobSpec,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
    env: Environment,
    make_optim: impl Fn() -> O,
) -> Result<JobRecord>
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let m = &spec.model;
    let eval_stream = TokenStream::read(&spec.data.dir.join("eval.tokens"), spec.data.eos_id)?;
    let eval_batcher = Batcher::new(eval_stream, m.batch, m.seq_len, spec.train.seed)?;
    let model = init_model::<B>(spec, device);
    let model = if spec.strategy.master_weights {
        cast_model(model, spec.strategy.precision)
    } else {
        model
    };
    let inputs = Inputs::<B>::new(&eval_batcher.sequential(0), device);
    let fused = spec.strategy.fused_optimizer;
    let mut profile = profile::profile_executor(&model, &inputs, device, probe, fused, make_optim);
    // A budget that chooses by measured unit times (`estimate = "profile"`) plans from each
    // unit's forward seconds on this device, timed as the training job times them.
    if spec.strategy.policy.is_some_and(|p| p.needs_profile()) {
        profile.unit_forward_s = Some(units::unit_forward_seconds(&model, &inputs, device, 5));
    }
    let mut record = JobRecord::unfinished(spec, JobStatus::Ok, String::new(), env);
    record.reason = None;
    record.memory_probe = probe.describe().to_string();
    record.peak_bounds = Some(probe.bounds());
    record.block_costs = profile.block_costs();
    record.executor_profile = Some(profile);
    Ok(record)
}

/// The environment of `spec` before it runs: the host's, with the job's backend, dtype and
/// device name (the GPU's name from the driver, the CPU model otherwise). Records of jobs that
/// never ran carry it too, so they fall in the same report group as their study's other jobs.
pub fn job_environment(spec: &JobSpec) -> Environment {
    let mut env = crate::measure::host_environment();
    env.backend = spec.backend.to_string();
    env.dtype = spec.strategy.precision.to_string();
    env.device_name = match spec.backend {
        BackendKind::Cuda => crate::device::probe_cuda()
            .ok()
            .and_then(|i| i.names.get(spec.device_index).cloned())
            .unwrap_or_else(|| format!("CUDA device {}", spec.device_index)),
        _ => crate::device::cpu_model(),
    };
    env
}

/// Runs `spec` on its backend and returns the record. Never panics out: a panic inside the
/// backend (CUDA out of memory, a kernel failure) becomes a `failed` or `out_of_memory` record.
pub fn run_job(spec: &JobSpec) -> JobRecord {
    let env = job_environment(spec);
    if let Some(reason) = unsupported::unsupported(spec) {
        return JobRecord::unfinished(spec, JobStatus::Unsupported, reason, env);
    }
    if let Some(record) = crate::device::too_large(spec, &env) {
        return record;
    }
    fault::install_panic_hook();
    let spec2 = spec.clone();
    let env2 = env.clone();
    if !spec.backend.is_gpu() {
        // Every thread's matmul scratch up front: the peak must not depend on which threads
        // ran a matmul first.
        crate::measure::allocate_gemm_scratch();
    }
    // The limit holds while the job runs (a refused block aborts the process, which the
    // parent records as out of memory), not while its record is written.
    crate::measure::set_limit(spec.memory_limit_bytes);
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || dispatch(&spec2, env2)));
    crate::measure::set_limit(None);
    let outcome = match result {
        Ok(Ok(record)) => Ok(record),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())),
    };
    classify_outcome(spec, env, outcome, fault::first_fault())
}

/// The record of a job from how it ended and the first device allocation failure recorded
/// in its process (see [`crate::measure::fault`]).
///
/// An allocation failure makes the job `out_of_memory`, whatever came after it: an error, a
/// panic, a non-finite loss, or even a run to the end (CubeCL does not retry a failed
/// allocation: the tensor is never bound, later kernels fail on it and reads return garbage,
/// so such a run's numbers are not measurements; its steps are kept for diagnosis, its summary
/// is dropped). A NaN loss is "diverged" only when no allocation failure came first.
pub fn classify_outcome(
    spec: &JobSpec,
    env: Environment,
    outcome: std::result::Result<JobRecord, String>,
    fault: Option<OutOfMemory>,
) -> JobRecord {
    let oom_reason = |oom: &OutOfMemory, after: &str| {
        let bytes = oom
            .requested_bytes
            .map(|b| format!(" of {b} bytes ({:.1} MiB)", b as f64 / (1u64 << 20) as f64))
            .unwrap_or_default();
        format!(
            "out of device memory: an allocation{bytes} failed (`{}`); {after}",
            oom.message.lines().next().unwrap_or_default()
        )
    };
    match (outcome, fault) {
        (Ok(record), None) => record,
        (Ok(mut record), Some(oom)) => {
            record.status = JobStatus::OutOfMemory;
            record.reason = Some(oom_reason(
                &oom,
                "the job ran on with a poisoned device, so its measurements are void",
            ));
            record.summary = None;
            record.out_of_memory = Some(oom);
            record
        }
        (Err(message), Some(oom)) => {
            let reason = oom_reason(&oom, &format!("the job then ended with: {message}"));
            let mut record = JobRecord::unfinished(spec, JobStatus::OutOfMemory, reason, env);
            record.out_of_memory = Some(oom);
            record
        }
        (Err(message), None) => {
            let oom = fault::from_lines([message.as_str()]);
            let status = if oom.is_some() {
                JobStatus::OutOfMemory
            } else {
                JobStatus::Failed
            };
            let mut record = JobRecord::unfinished(spec, status, message, env);
            record.out_of_memory = oom;
            record
        }
    }
}

/// What a flex job's products compute in: f32 products by flex's gemm and, for a bf16 job,
/// the bf16 product kernel this process runs ([`crate::kernels::bf16_gemm::kernel`]: AMX
/// tiles, AVX512-BF16 dot products, or the operands widened to f32), as its record names it.
fn flex_numerics(precision: memwall_core::spec::Precision) -> String {
    let mut s = String::from("CPU f32 matmuls (gemm)");
    if precision == memwall_core::spec::Precision::Bf16 {
        let bf16 = crate::kernels::bf16_gemm::kernel().map_or(
            "operands widened to f32 (gemm), rounded back once",
            crate::kernels::bf16_gemm::Kernel::describe,
        );
        s.push_str(&format!("; bf16 matmuls: {bf16}"));
    }
    s.push_str("; f16/bf16 are storage and arithmetic dtypes of flex");
    s
}

fn dispatch(spec: &JobSpec, mut env: Environment) -> Result<JobRecord> {
    use burn::backend::Flex;
    match spec.backend {
        BackendKind::Flex => {
            env.numerics = flex_numerics(spec.strategy.precision);
            run_cpu::<Flex>(spec, env)
        }
        BackendKind::Ndarray => {
            #[cfg(feature = "ndarray")]
            {
                env.numerics = "CPU f32 matmuls (ndarray)".into();
                run_cpu::<burn::backend::NdArray>(spec, env)
            }
            #[cfg(not(feature = "ndarray"))]
            {
                Err(Error::Device {
                    requested: "ndarray".into(),
                    message: "this runner was built without the `ndarray` feature (the slim \
                              runner carried to GPU machines): use `--cpu-backend flex`"
                        .into(),
                })
            }
        }
        BackendKind::Cuda => {
            #[cfg(feature = "cuda")]
            {
                cuda::run(spec, env)
            }
            #[cfg(not(feature = "cuda"))]
            {
                let _ = env;
                Err(Error::Device {
                    requested: "cuda".into(),
                    message: "this binary was built without the `cuda` feature".into(),
                })
            }
        }
    }
}

/// A CPU job on backend `B` (plain autodiff, or Burn's `BalancedCheckpointing` strategy),
/// measured with the counting allocator.
fn run_cpu<B: ModelBackend>(spec: &JobSpec, env: Environment) -> Result<JobRecord>
where
    B::Device: Default,
{
    use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
    use burn::backend::Autodiff;
    if spec.strategy.recompute.is_balanced() {
        run_on::<Autodiff<B, BalancedCheckpointing>>(
            spec,
            Default::default(),
            &mut HeapProbe::default(),
            env,
            None,
        )
    } else {
        run_on::<Autodiff<B>>(
            spec,
            Default::default(),
            &mut HeapProbe::default(),
            env,
            None,
        )
    }
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_data().iter::<f64>().next().unwrap_or(f64::NAN)
}

/// The training loop on backend `B` with the memory probe `probe`. `peak_flops` (FLOP/s) is
/// the device's peak for the job's precision, when known, for MFU.
pub(crate) fn run_on<B: TrainBackend>(
    spec: &JobSpec,
    device: B::Device,
    probe: &mut dyn MemoryProbe,
    env: Environment,
    peak_flops: Option<f64>,
) -> Result<JobRecord> {
    let dtype = dtype_of(spec.strategy.precision);
    if !B::supports_dtype(&device, dtype) {
        return Ok(JobRecord::unfinished(
            spec,
            JobStatus::Unsupported,
            format!(
                "the {} backend does not support {} tensors",
                spec.backend, spec.strategy.precision
            ),
            env,
        ));
    }
    match spec.train.optimizer {
        OptimizerKind::Adamw => {
            let make_optim = || {
                adamw::AdamWConfig::new(spec.train.weight_decay as f32)
                    .init::<B, TransformerLm<B>>()
            };
            if spec.profile_only {
                return profile_record::<B, _>(spec, &device, probe, env, make_optim);
            }
            train_loop::<B, _>(spec, device, probe, env, peak_flops, make_optim())
        }
        OptimizerKind::Adafactor => {
            let make_optim = || {
                adafactor::AdafactorConfig::new(spec.train.weight_decay)
                    .init::<B, TransformerLm<B>>()
            };
            if spec.profile_only {
                return profile_record::<B, _>(spec, &device, probe, env, make_optim);
            }
            train_loop::<B, _>(spec, device, probe, env, peak_flops, make_optim())
        }
    }
}

/// One training step under the job's strategy; returns the updated model and the loss tensor.
pub fn train_step<B, O>(
    model: TransformerLm<B>,
    optim: &mut O,
    lr: f64,
    inputs: &Inputs<B>,
    plan: Option<&[Segment]>,
    fused: bool,
    probe: &mut dyn MemoryProbe,
) -> (TransformerLm<B>, Tensor<B::InnerBackend, 1>)
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    match plan {
        None => {
            let (loss_inner, grads) = plain_gradients(&model, inputs, 1.0, probe);
            let model = optim.step(lr, model, grads);
            probe.phase(Phase::OptimizerStep);
            (model, loss_inner)
        }
        Some(plan) => {
            let mut phase = |p| probe.phase(p);
            let out = if fused {
                segment::segmented_step(model, inputs, plan, Some((&mut *optim, lr)), &mut phase)
            } else {
                segment::segmented_step::<B, O>(model, inputs, plan, None, &mut phase)
            };
            let model = optim.step(lr, out.model, out.grads);
            probe.phase(Phase::OptimizerStep);
            (model, out.loss)
        }
    }
}

/// Plain backward of `inputs` (one batch, or one micro-batch of gradient accumulation) on its
/// loss times `weight` (1: the loss itself, no extra operation): the unweighted `[1]` loss and
/// the parameters' gradients. Marks the embedding, each block's forward (`inputs.loss(&model)`
/// as its parts), the head and the backward.
pub(super) fn plain_gradients<B: TrainBackend>(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    weight: f64,
    probe: &mut dyn MemoryProbe,
) -> (Tensor<B::InnerBackend, 1>, GradientsParams) {
    let mut h = model.embed(inputs.tokens.clone(), inputs.positions.clone());
    probe.phase(Phase::Embedding);
    for i in 0..model.blocks.len() {
        h = model.forward_blocks(h, i..i + 1);
        let (first, end) = (i as u16, i as u16 + 1);
        probe.phase(Phase::Forward {
            first,
            end,
            recompute: false,
        });
    }
    if model.head_chunks.is_some() {
        // The head runs outside autodiff; its upstream gradient flows into the blocks' graph
        // through `sum(h ∘ upstream)`, whose gradient w.r.t. `h` is `upstream`.
        let mut pending = GradientsParams::new();
        let out = head::head_step(
            model,
            h.clone().inner(),
            &inputs.targets,
            weight,
            &mut pending,
            &mut || probe.phase(Phase::Head),
        );
        let g = (h * Tensor::from_inner(out.upstream)).sum().backward();
        let mut grads = GradientsParams::from_grads(g, model);
        segment::merge_into(&mut grads, out.grads, model);
        segment::merge_into(&mut grads, pending, model);
        probe.phase(Phase::BackwardAll);
        return (out.loss, grads);
    }
    let loss = model.loss(h, inputs.targets.clone());
    probe.phase(Phase::Head);
    let loss_inner = loss.clone().inner();
    let weighted = if weight == 1.0 {
        loss
    } else {
        loss.mul_scalar(weight)
    };
    let grads = weighted.backward();
    let grads = GradientsParams::from_grads(grads, model);
    probe.phase(Phase::BackwardAll);
    (loss_inner, grads)
}

/// What [`unit_train_step`] returns: the updated model, the `[1]` loss and the unit outputs
/// recomputed, `(block, unit)` in order.
pub type UnitTrainStep<B> = (
    TransformerLm<B>,
    Tensor<<B as AutodiffBackend>::InnerBackend, 1>,
    Vec<(usize, memwall_core::units::Unit)>,
);

/// One training step under a unit-level plan (`keeps`, one set per block): the unit executor's
/// forward and backward ([`units::unit_step`]), the fused or the final optimizer step. Returns
/// the updated model, the loss tensor and the unit outputs recomputed, `(block, unit)` in order.
pub fn unit_train_step<B, O>(
    model: TransformerLm<B>,
    optim: &mut O,
    lr: f64,
    inputs: &Inputs<B>,
    keeps: &[UnitSet],
    fused: bool,
    probe: &mut dyn MemoryProbe,
) -> UnitTrainStep<B>
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let mut phase = |p| probe.phase(p);
    let out = if fused {
        units::unit_step(model, inputs, keeps, Some((&mut *optim, lr)), &mut phase)
    } else {
        units::unit_step::<B, O>(model, inputs, keeps, None, &mut phase)
    };
    let step = out.step;
    let model = optim.step(lr, step.model, step.grads);
    probe.phase(Phase::OptimizerStep);
    (model, step.loss, out.recomputed)
}

/// The unit outputs each block keeps when the job's plan is unit-level
/// ([`JobSpec::unit_plan`], made by the plan stage from the strategy's policy).
fn unit_keeps(spec: &JobSpec) -> Option<&[UnitSet]> {
    spec.unit_plan.as_ref().map(|u| u.keeps.as_slice())
}

fn train_loop<B, O>(
    spec: &JobSpec,
    device: B::Device,
    probe: &mut dyn MemoryProbe,
    env: Environment,
    peak_flops: Option<f64>,
    mut optim: O,
) -> Result<JobRecord>
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let started = Instant::now();
    let (model, mut job) = prepare::<B>(spec, &device, probe)?;
    let mut stepper = Stepper {
        spec,
        device: &device,
        plan: job.plan.as_deref(),
        keeps: unit_keeps(spec),
        recomputed: None,
        optim: &mut optim,
        scaler: mixed::LossScaler::new(spec.strategy.loss_scale),
        probe: &mut *probe,
    };
    let mut trained = run_steps(&mut stepper, model, &mut job.batcher, started)?;
    let eval_loss = evaluate(spec, &trained.model, &job.eval_batcher, &device);
    let summary = summarize(spec, &job, &trained, eval_loss, peak_flops, started);
    let step_timeline = trained.timeline.take().map(|mut tl| {
        tl.fused = spec.strategy.fused_optimizer && job.plan.is_some();
        if !spec.strategy.master_weights {
            let sizes = timeline::known_sizes(spec, &trained.model, &job.block_costs);
            tl.sizes = Some(sizes);
        }
        tl
    });
    Ok(JobRecord {
        key: spec.key(),
        spec: spec.clone(),
        status: JobStatus::Ok,
        reason: None,
        env,
        memory_probe: probe.describe().to_string(),
        steps: trained.steps,
        summary: Some(summary),
        plan: job.plan,
        block_costs: job.block_costs,
        executor_profile: None,
        peak_bounds: Some(probe.bounds()),
        timeline: step_timeline,
        out_of_memory: None,
        unit_forward_s: job.unit_forward_s,
        load: None,
        finished_at: chrono::Utc::now().to_rfc3339(),
    })
}

/// What a job builds before its first step (besides the model).
struct Prepared {
    /// Random training batches.
    batcher: Batcher,
    /// Sequential held-out batches (profiling and evaluation).
    eval_batcher: Batcher,
    /// Each block's measured cost.
    block_costs: Vec<BlockCost>,
    /// The segment plan, or `None` for plain backward.
    plan: Option<Vec<Segment>>,
    /// The plan's activation bytes estimated from `block_costs`.
    estimated_activation_bytes: u64,
    /// Bytes allocated once the job is prepared, before its steps.
    baseline_bytes: u64,
    /// Each unit's forward seconds (a job with a unit-level plan).
    unit_forward_s: Option<[f64; 8]>,
}

/// Reads the token streams, initializes the model and profiles its blocks (for the record; the
/// segment plan is the job's own, from the plan stage).
fn prepare<B: TrainBackend>(
    spec: &JobSpec,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
) -> Result<(TransformerLm<B>, Prepared)> {
    let (m, t) = (&spec.model, &spec.train);
    let data_dir = &spec.data.dir;
    let train_stream = TokenStream::read(&data_dir.join("train.tokens"), spec.data.eos_id)?;
    let eval_stream = TokenStream::read(&data_dir.join("eval.tokens"), spec.data.eos_id)?;
    let batcher = Batcher::new(train_stream, m.batch, m.seq_len, t.seed)?;
    let eval_batcher = Batcher::new(eval_stream, m.batch, m.seq_len, t.seed)?;
    let model = init_model::<B>(spec, device);
    // The profiling passes (blocks, and units for a unit-level plan) run on the first held-out
    // batch.
    // With gradient accumulation, on its first micro-batch: the blocks' activations are those
    // of one micro-batch.
    let profile_inputs = Inputs::<B>::new(&eval_batcher.sequential(0), device)
        .micro_batches(t.accumulation_steps)
        .swap_remove(0);
    let block_costs = profile_model(spec, &model, &profile_inputs, device, probe);
    let plan = plan_of(spec);
    let unit_plan = spec.unit_plan.as_ref();
    let unit_forward_s =
        unit_plan.map(|_| units::unit_forward_seconds(&model, &profile_inputs, device, 5));
    drop(profile_inputs);
    let estimated_activation_bytes = match (&plan, unit_plan) {
        (_, Some(u)) => u.kept_bytes,
        (Some(p), None) => budget::estimate_plan(&block_costs, p),
        (None, None) => block_costs.iter().map(|b| b.activation_bytes).sum(),
    };
    let prepared = Prepared {
        batcher,
        eval_batcher,
        block_costs,
        plan,
        estimated_activation_bytes,
        baseline_bytes: measure::allocated_bytes(),
        unit_forward_s,
    };
    Ok((model, prepared))
}

/// The seeded model in the job's precision; with master weights it stays f32 and each step
/// computes on a 16-bit copy.
fn init_model<B: TrainBackend>(spec: &JobSpec, device: &B::Device) -> TransformerLm<B> {
    B::seed(device, spec.train.seed);
    let model = spec
        .model
        .init::<B>(device)
        .with_attention(spec.strategy.attention)
        .with_layer_norm(spec.strategy.layer_norm)
        .with_head_chunks(spec.strategy.head_chunks);
    if spec.strategy.master_weights {
        model
    } else {
        cast_model(model, spec.strategy.precision)
    }
}

/// [`profile::profile_blocks`] on the first held-out batch, in the compute precision.
fn profile_model<B: TrainBackend>(
    spec: &JobSpec,
    model: &TransformerLm<B>,
    profile_inputs: &Inputs<B>,
    device: &B::Device,
    probe: &mut dyn MemoryProbe,
) -> Vec<BlockCost> {
    if spec.strategy.master_weights {
        profile::profile_blocks(
            &cast_model(model.clone(), spec.strategy.precision),
            profile_inputs,
            device,
            probe,
        )
    } else {
        profile::profile_blocks(model, profile_inputs, device, probe)
    }
}

/// What every step of one job uses: the spec, device, plan, optimizer, loss scaler and probe.
struct Stepper<'a, B: TrainBackend, O> {
    spec: &'a JobSpec,
    device: &'a B::Device,
    plan: Option<&'a [Segment]>,
    /// The unit outputs each block keeps when the plan is unit-level (the unit executor runs
    /// the step), `None` otherwise.
    keeps: Option<&'a [UnitSet]>,
    /// Unit outputs the unit executor recomputed in the last step.
    recomputed: Option<u32>,
    optim: &'a mut O,
    scaler: mixed::LossScaler,
    probe: &'a mut dyn MemoryProbe,
}

/// What the step loop leaves: the trained model, its step records and probe readings.
struct Trained<B: TrainBackend> {
    model: TransformerLm<B>,
    steps: Vec<StepRecord>,
    /// Bytes live before the last step began (model, optimizer state, batch).
    steady_bytes: u64,
    /// Seconds from the job's start to the first timed step.
    first_timed_at: Option<f64>,
    /// The memory timeline of the traced step (the memory step, else the last timed step).
    timeline: Option<measure::StepTimeline>,
}

/// Runs the warm-up steps, the probe's untimed memory step (if it wants one) and the timed
/// steps, recording each.
fn run_steps<B, O>(
    stepper: &mut Stepper<'_, B, O>,
    mut model: TransformerLm<B>,
    batcher: &mut Batcher,
    started: Instant,
) -> Result<Trained<B>>
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let t = &stepper.spec.train;
    // Probes that must synchronize to sample (CUDA) get one untimed memory step after the
    // warm-up, sampled at every phase; the timed steps then run without phase probes.
    let memory_steps = usize::from(stepper.probe.wants_memory_step());
    let total = t.warmup_steps + memory_steps + t.steps;
    let mut steady_bytes = 0;
    let mut first_timed_at = None;
    let mut timeline = None;
    let mut steps = Vec::with_capacity(total);
    // The step whose memory timeline is recorded: the memory step of a probe that samples,
    // the last (timed) step of the CPU's allocator trace.
    let traced = match stepper.probe.timeline_step() {
        Some(true) if memory_steps > 0 => Some(t.warmup_steps),
        Some(_) => Some(total - 1),
        None => None,
    };
    for step in 0..total {
        let warmup = step < t.warmup_steps;
        let memory_step = !warmup && step < t.warmup_steps + memory_steps;
        stepper.boundary(step, memory_step);
        if traced == Some(step) {
            stepper.probe.trace_next_step();
        }
        if step == t.warmup_steps + memory_steps {
            first_timed_at = Some(started.elapsed().as_secs_f64());
        }
        let batch = batcher.next_random();
        let inputs = Inputs::<B>::new(&batch, stepper.device);
        steady_bytes = stepper.probe.live_bytes();
        let (next, record) = stepper.step(model, inputs, step, warmup, memory_step)?;
        model = next;
        steps.push(record);
        if traced == Some(step) {
            timeline = stepper.probe.take_timeline().map(|mut tl| {
                tl.step = step;
                tl
            });
        }
    }
    Ok(Trained {
        model,
        steps,
        steady_bytes,
        first_timed_at,
        timeline,
    })
}

impl<B, O> Stepper<'_, B, O>
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    /// Before step `step`: releases the pool pages that warm-up and profiling left wholly
    /// free, so that the measured steps' reserved bytes start from their own demand (with
    /// `memory_cleanup`, at every step boundary); samples phases only in the memory step.
    fn boundary(&mut self, step: usize, memory_step: bool) {
        if self.spec.device_settings.memory_cleanup || step == self.spec.train.warmup_steps {
            B::memory_cleanup(self.device);
        }
        self.probe.set_phase_sampling(memory_step);
    }

    /// Runs and measures step `step` on `inputs`: time (device synchronized), peak memory and
    /// loss. Errors if the device fails to synchronize or the loss is not finite (diverged).
    fn step(
        &mut self,
        model: TransformerLm<B>,
        inputs: Inputs<B>,
        step: usize,
        warmup: bool,
        memory_step: bool,
    ) -> Result<(TransformerLm<B>, StepRecord)> {
        self.probe.begin_step();
        let t0 = Instant::now();
        let (model, loss, info) = self.update(model, &inputs);
        B::sync(self.device)
            .map_err(|e| self.job_error(format!("device synchronization failed: {e:?}")))?;
        let loss = scalar(loss);
        // A planted slowdown (off unless `--inject-slowdown` names this job) stretches the step
        // before its timer stops.
        slowdown::stretch(t0.elapsed().as_secs_f64());
        let time_s = t0.elapsed().as_secs_f64();
        let mem = self.probe.end_step();
        drop(inputs);
        if !loss.is_finite() {
            let message = format!("training loss is {loss} at step {step} (diverged)");
            return Err(self.job_error(message));
        }
        tracing::debug!(step, loss, time_s, peak = mem.peak_allocated_bytes, "step");
        let record = StepRecord {
            step,
            warmup,
            memory_step,
            loss,
            time_s,
            peak_allocated_bytes: mem.peak_allocated_bytes,
            peak_reserved_bytes: mem.peak_reserved_bytes,
            loss_scale: info
                .filter(|_| self.spec.strategy.loss_scale.is_some())
                .map(|i| i.scale),
            skipped: info.is_some_and(|i| i.skipped),
            grad_zero_fraction: info.map(|i| i.zero_fraction),
            recomputed_units: self.recomputed.take(),
        };
        Ok((model, record))
    }

    /// Forward, backward and optimizer step under the job's strategy: a mixed-precision step
    /// on master weights, or [`train_step`]. Returns the model, the `[1]` loss and, for mixed
    /// precision, what the step did.
    fn update(
        &mut self,
        model: TransformerLm<B>,
        inputs: &Inputs<B>,
    ) -> (
        TransformerLm<B>,
        Tensor<B::InnerBackend, 1>,
        Option<mixed::MixedStepInfo>,
    ) {
        let (s, lr) = (&self.spec.strategy, self.spec.train.lr);
        if s.master_weights {
            let precision = s.precision;
            let (m, l, info) = mixed::mixed_step(
                model,
                &mut *self.optim,
                lr,
                inputs,
                precision,
                &mut self.scaler,
                &mut *self.probe,
            );
            (m, l, Some(info))
        } else if let Some(keeps) = self.keeps {
            let probe = &mut *self.probe;
            let fused = s.fused_optimizer;
            let (m, l, recomputed) =
                unit_train_step(model, &mut *self.optim, lr, inputs, keeps, fused, probe);
            self.recomputed = Some(recomputed.len() as u32);
            (m, l, None)
        } else if self.spec.train.accumulation_steps > 1 {
            let n = self.spec.train.accumulation_steps;
            let probe = &mut *self.probe;
            let (m, l) = accumulate::accumulated_step(
                model,
                &mut *self.optim,
                lr,
                inputs,
                n,
                self.plan,
                probe,
            );
            (m, l, None)
        } else {
            let probe = &mut *self.probe;
            let fused = s.fused_optimizer;
            let (m, l) = train_step(model, &mut *self.optim, lr, inputs, self.plan, fused, probe);
            (m, l, None)
        }
    }

    /// The job's error with `message`.
    fn job_error(&self, message: String) -> Error {
        Error::Job {
            job: self.spec.config.clone(),
            message,
        }
    }
}

/// Mean token cross-entropy (nats) over the held-out batches (at least one), in the compute
/// precision for master-weight jobs.
fn evaluate<B: TrainBackend>(
    spec: &JobSpec,
    model: &TransformerLm<B>,
    eval_batcher: &Batcher,
    device: &B::Device,
) -> f64 {
    let inner = if spec.strategy.master_weights {
        cast_model(model.valid(), spec.strategy.precision)
    } else {
        model.valid()
    };
    let batches = spec.train.eval_batches.max(1);
    let mut eval_sum = 0.0;
    for i in 0..batches {
        let inputs = Inputs::<B::InnerBackend>::new(&eval_batcher.sequential(i), device);
        eval_sum += scalar(inner.forward_loss(inputs.tokens, inputs.positions, inputs.targets));
    }
    eval_sum / batches as f64
}

/// The job's summary: peaks over the memory step and the timed steps, times over the timed
/// steps only; throughput from the median step time, and MFU when `peak_flops` (FLOP/s) is
/// known.
fn summarize<B: TrainBackend>(
    spec: &JobSpec,
    job: &Prepared,
    trained: &Trained<B>,
    eval_loss: f64,
    peak_flops: Option<f64>,
    started: Instant,
) -> Summary {
    let m = &spec.model;
    let measured: Vec<&StepRecord> = trained.steps.iter().filter(|s| !s.warmup).collect();
    let timed: Vec<f64> = measured
        .iter()
        .filter(|s| !s.memory_step)
        .map(|s| s.time_s)
        .collect();
    let median_step_s = measure::median(&timed);
    let samples_per_s = m.batch as f64 / median_step_s;
    let tokens_per_s = samples_per_s * m.seq_len as f64;
    let peak = |bytes: fn(&StepRecord) -> u64| measured.iter().map(|s| bytes(s)).max();
    Summary {
        parameters: m.parameter_count(),
        median_step_s,
        samples_per_s,
        tokens_per_s,
        peak_allocated_bytes: peak(|s| s.peak_allocated_bytes).unwrap_or(0),
        peak_reserved_bytes: peak(|s| s.peak_reserved_bytes).unwrap_or(0),
        baseline_bytes: job.baseline_bytes,
        final_train_loss: trained.steps.last().map(|s| s.loss).unwrap_or(f64::NAN),
        eval_loss,
        eval_perplexity: eval_loss.exp(),
        mfu: peak_flops.map(|p| m.train_flops_per_token() * tokens_per_s / p),
        peak_flops,
        wall_s: started.elapsed().as_secs_f64(),
        steady_bytes: trained.steady_bytes,
        estimated_activation_bytes: job.estimated_activation_bytes,
        time_to_first_measured_step_s: trained.first_timed_at,
    }
}
