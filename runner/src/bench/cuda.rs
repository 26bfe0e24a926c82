//! The benchmark on CUDA: the fused and unfused backends, with the runtime configured as a
//! training job configures it.

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
