//! CUDA jobs: the CubeCL runtime configuration (on-disk caches, autotune level), the backend
//! (with or without Burn's kernel fusion) and the memory-pool probe.

use super::run_on;
use crate::measure::fault;
use crate::measure::{
    Bound, Environment, MemoryProbe, MemorySample, PeakBounds, Phase, PhaseSpan, StepTimeline,
};
use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing as Balanced;
use burn::backend::cuda::CudaDevice;
use burn::backend::{Autodiff, Cuda};
use burn::tensor::backend::Backend;
use burn_cubecl::CubeBackend;
use cubecl::cuda::CudaRuntime;
use cubecl::Runtime;
use memwall_core::error::Result;
use memwall_core::record::JobRecord;
use memwall_core::spec::{AutotuneLevel, DeviceSettings, JobSpec, MemoryPool, Precision};

/// CUDA without Burn's fusion (one kernel per op), the analog of eager PyTorch.
pub(crate) type CudaUnfused = CubeBackend<CudaRuntime, f32, i32, u8>;

/// Sets CubeCL's process-wide configuration before the device is first used: the autotune
/// level, the pool's placement ([`MemoryPool`]), and the autotune and compiled-kernel (PTX)
/// caches in `settings.cache_dir`, so every
/// job of a sweep reuses the tunings and kernels of the jobs before it. CubeCL reads its
/// configuration once; this must run before any CUDA tensor exists (it does: a job process
/// configures, then builds its model).
///
/// # Errors
/// The cache directory cannot be created.
pub fn configure_runtime(settings: &DeviceSettings) -> std::io::Result<()> {
    configure_runtime_with(settings, |_| {})
}

/// [`configure_runtime`], with `adjust` applied to the configuration before it is set (the
/// attribution benchmark turns on CubeCL's kernel profiling this way). Only the first call of
/// a process sets the configuration.
///
/// # Errors
/// The cache directory cannot be created.
pub(crate) fn configure_runtime_with(
    settings: &DeviceSettings,
    adjust: impl FnOnce(&mut cubecl::config::CubeClRuntimeConfig),
) -> std::io::Result<()> {
    use cubecl::config::autotune::AutotuneLevel as Level;
    use cubecl::config::cache::CacheConfig;
    use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    let mut config = CubeClRuntimeConfig::default();
    config.autotune.level = match settings.autotune_level {
        AutotuneLevel::Minimal => Level::Minimal,
        AutotuneLevel::Balanced => Level::Balanced,
        AutotuneLevel::Extensive => Level::Extensive,
        AutotuneLevel::Full => Level::Full,
    };
    if settings.memory_pool == MemoryPool::ExactSize {
        config.memory.persistent_memory = cubecl::config::memory::PersistentMemory::Enforced;
    }
    if let Some(dir) = &settings.cache_dir {
        std::fs::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        config.autotune.cache = CacheConfig::File(dir.clone());
        config.compilation.cache = Some(CacheConfig::File(dir));
    }
    adjust(&mut config);
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| CubeClRuntimeConfig::set(config));
    Ok(())
}

/// Reads CubeCL's memory pool (the pools of the calling thread's stream, which is the one
/// training runs on).
///
/// - Reserved bytes: read at step end, after the step's device synchronization. CubeCL's sliced
///   pools release no page unless `memory_cleanup` is called (which memwall does only between
///   steps), so the reserved bytes at step end are the step's reserved high-water mark: exact.
/// - Allocated bytes (`bytes_in_use`): CubeCL keeps no high-water mark, so the peak is the
///   largest of samples. In the untimed memory step the probe synchronizes the device and
///   samples at every phase boundary (after the forward pass, the head, each backward segment,
///   the optimizer step); timed steps sample only at step end. Either way a lower bound.
struct PoolProbe {
    device: CudaDevice,
    fused: bool,
    phase_sampling: bool,
    peak_in_use: u64,
    peak_reserved: u64,
    /// The memory step's timeline, built from its phase samples.
    trace_next: bool,
    tracing: Option<std::time::Instant>,
    last: (f64, u64),
    start_bytes: u64,
    phases: Vec<PhaseSpan>,
    timeline: Option<StepTimeline>,
}

impl PoolProbe {
    fn sync(&self) {
        let _ = if self.fused {
            <Cuda as Backend>::sync(&self.device)
        } else {
            <CudaUnfused as Backend>::sync(&self.device)
        };
    }

    fn sample(&mut self) {
        if let Ok(usage) = CudaRuntime::client(&self.device).memory_usage() {
            self.peak_in_use = self.peak_in_use.max(usage.bytes_in_use);
            self.peak_reserved = self.peak_reserved.max(usage.bytes_reserved);
            fault::note_pool(usage.bytes_in_use, usage.bytes_reserved);
        }
    }
}

impl PoolProbe {
    /// Bytes in use now (after the caller synchronized).
    fn in_use(&self) -> u64 {
        CudaRuntime::client(&self.device)
            .memory_usage()
            .map(|u| u.bytes_in_use)
            .unwrap_or(0)
    }
}

impl MemoryProbe for PoolProbe {
    fn begin_step(&mut self) {
        self.peak_in_use = 0;
        self.peak_reserved = 0;
        self.sample();
        if std::mem::take(&mut self.trace_next) {
            self.sync();
            self.start_bytes = self.in_use();
            self.last = (0.0, self.start_bytes);
            self.phases.clear();
            self.tracing = Some(std::time::Instant::now());
        }
    }
    fn phase(&mut self, ended: Phase) {
        if self.phase_sampling {
            self.sync();
            self.sample();
            if let Some(t0) = self.tracing {
                let (t, now) = (t0.elapsed().as_secs_f64(), self.in_use());
                self.phases.push(PhaseSpan {
                    phase: ended,
                    start_s: self.last.0,
                    end_s: t,
                    start_bytes: self.last.1,
                    end_bytes: now,
                    peak_bytes: self.last.1.max(now),
                });
                self.last = (t, now);
            }
        }
    }
    fn end_step(&mut self) -> MemorySample {
        self.sample();
        if let Some(t0) = self.tracing.take() {
            let t = t0.elapsed().as_secs_f64();
            let mut points = vec![(0.0, self.start_bytes)];
            points.extend(self.phases.iter().map(|p| (p.end_s, p.end_bytes)));
            let top = points
                .iter()
                .copied()
                .max_by_key(|p| p.1)
                .unwrap_or((0.0, 0));
            self.timeline = Some(StepTimeline {
                step: 0,
                source: "bytes in use of CubeCL's memory pool, sampled after a device \
                         synchronization at every phase boundary of the untimed memory step \
                         (between two samples the curve is a lower bound)"
                    .into(),
                exact: false,
                duration_s: t,
                start_bytes: self.start_bytes,
                peak_bytes: self.peak_in_use,
                peak_at_s: top.0,
                points,
                truncated: false,
                phases: std::mem::take(&mut self.phases),
                sizes: None,
                fused: false,
            });
        }
        MemorySample {
            peak_allocated_bytes: self.peak_in_use,
            peak_reserved_bytes: self.peak_reserved,
        }
    }
    fn live_bytes(&mut self) -> u64 {
        self.sync();
        self.in_use()
    }
    fn describe(&self) -> &'static str {
        "CUDA memory pool (CubeCL) of the training stream. Peak allocated: the largest bytes_in_use \
         sampled after device synchronization at every phase boundary of an untimed memory step \
         and at the end of each timed step (lower bound). Peak reserved: pool bytes_reserved at \
         step end, exact because the pool releases pages only at memory_cleanup between steps"
    }
    fn bounds(&self) -> PeakBounds {
        PeakBounds {
            allocated: Bound::LowerBound,
            reserved: Bound::Exact,
        }
    }
    fn wants_memory_step(&self) -> bool {
        true
    }
    fn set_phase_sampling(&mut self, on: bool) {
        self.phase_sampling = on;
    }
    fn timeline_step(&self) -> Option<bool> {
        Some(true)
    }
    fn trace_next_step(&mut self) {
        self.trace_next = true;
    }
    fn take_timeline(&mut self) -> Option<StepTimeline> {
        self.timeline.take()
    }
}

/// Dense peak FLOP/s of known GPUs for `precision` (vendor data sheets; f32 is the TF32 tensor
/// core rate, since Burn may run f32 matmuls as TF32).
fn peak_flops(name: &str, precision: Precision) -> Option<f64> {
    let n = name.to_ascii_uppercase();
    let (half, tf32) = if n.contains("H100") || n.contains("H200") || n.contains("GH200") {
        (989e12, 494.5e12)
    } else if n.contains("A100") {
        (312e12, 156e12)
    } else if n.contains("4090") {
        (165.2e12, 82.6e12)
    } else if n.contains("L40S") {
        (362e12, 183e12)
    } else {
        return None;
    };
    Some(match precision {
        Precision::F32 => tf32,
        Precision::F16 | Precision::Bf16 => half,
    })
}

pub(super) fn run(spec: &JobSpec, mut env: Environment) -> Result<JobRecord> {
    let info = crate::device::probe_cuda().map_err(|m| memwall_core::error::Error::Device {
        requested: format!("cuda:{}", spec.device_index),
        message: m.to_string(),
    })?;
    let name = info
        .names
        .get(spec.device_index)
        .cloned()
        .unwrap_or_else(|| format!("CUDA device {}", spec.device_index));
    env.device_name = name.clone();
    let kernels = crate::kernels::cube::Selection::from_env().map_err(|message| {
        memwall_core::error::Error::Job {
            job: spec.config.clone(),
            message,
        }
    })?;
    let operations =
        if spec.strategy.fusion {
            let fused = kernels.under_fusion();
            format!(
            "Burn's operations fused by Burn, with memwall's CubeCL kernels as custom operations \
             for: {}{} (f32 inside)",
            fused.describe(),
            if fused.gelu { " (GELU: its backward)" } else { "" }
        )
        } else {
            format!(
                "memwall's CubeCL kernels for: {} (f32 inside); the rest Burn's operations",
                kernels.describe()
            )
        };
    env.numerics = format!(
        "CUDA via CubeCL (NVRTC); f32 matmuls may run on TF32 tensor cores; loss in f32; \
         {operations}"
    );
    configure_runtime(&spec.device_settings).map_err(|e| memwall_core::error::Error::Job {
        job: spec.config.clone(),
        message: format!(
            "creating the CubeCL cache directory {:?}: {e}",
            spec.device_settings.cache_dir
        ),
    })?;
    let device = CudaDevice::new(spec.device_index);
    let peak = peak_flops(&name, spec.strategy.precision);
    let mut probe = PoolProbe {
        device: device.clone(),
        fused: spec.strategy.fusion,
        phase_sampling: true,
        peak_in_use: 0,
        peak_reserved: 0,
        trace_next: false,
        tracing: None,
        last: (0.0, 0),
        start_bytes: 0,
        phases: Vec::new(),
        timeline: None,
    };
    match (spec.strategy.fusion, spec.strategy.recompute.is_balanced()) {
        (true, false) => run_on::<Autodiff<Cuda>>(spec, device, &mut probe, env, peak),
        (false, false) => run_on::<Autodiff<CudaUnfused>>(spec, device, &mut probe, env, peak),
        (true, true) => run_on::<Autodiff<Cuda, Balanced>>(spec, device, &mut probe, env, peak),
        (false, true) => {
            run_on::<Autodiff<CudaUnfused, Balanced>>(spec, device, &mut probe, env, peak)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubecl::config::cache::CacheConfig;
    use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};

    /// The job's cache directory becomes CubeCL's autotune and compiled-kernel cache (no GPU
    /// needed: this is CubeCL's configuration, read by the runtime when a device starts).
    #[test]
    fn the_job_cache_directory_is_cubecls_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cubecl");
        let settings = DeviceSettings {
            autotune_level: AutotuneLevel::Minimal,
            memory_cleanup: false,
            memory_pool: MemoryPool::Sliced,
            cache_dir: Some(cache.clone()),
        };
        configure_runtime(&settings).unwrap();
        let config = CubeClRuntimeConfig::get();
        let expected = CacheConfig::File(std::fs::canonicalize(&cache).unwrap());
        assert_eq!(
            format!("{:?}", config.autotune.cache),
            format!("{expected:?}")
        );
        assert_eq!(
            format!("{:?}", config.compilation.cache),
            format!("{:?}", Some(expected))
        );
        assert_eq!(
            format!("{:?}", config.autotune.level),
            format!("{:?}", cubecl::config::autotune::AutotuneLevel::Minimal)
        );
    }
}
