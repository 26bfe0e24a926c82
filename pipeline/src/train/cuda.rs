//! CUDA jobs: the backend (with or without Burn's kernel fusion) and the memory-pool probe.

use super::run_on;
use crate::error::Result;
use crate::measure::{Environment, MemoryProbe, MemorySample};
use crate::results::JobRecord;
use crate::spec::{JobSpec, Precision};
use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing as Balanced;
use burn::backend::cuda::CudaDevice;
use burn::backend::{Autodiff, Cuda};
use burn::tensor::backend::Backend;
use burn_cubecl::CubeBackend;
use cubecl::cuda::CudaRuntime;
use cubecl::Runtime;

/// CUDA without Burn's fusion (one kernel per op), the analog of eager PyTorch.
type CudaUnfused = CubeBackend<CudaRuntime, f32, i32, u8>;

/// Samples CubeCL's memory pool at phase boundaries (after synchronizing the device): the
/// peak is the largest `bytes_in_use` seen, a lower bound of the true high-water mark between
/// samples; reserved is the pool's `bytes_reserved`.
struct PoolProbe {
    device: CudaDevice,
    fused: bool,
    peak_in_use: u64,
    peak_reserved: u64,
}

impl PoolProbe {
    fn sample(&mut self) {
        let _ = if self.fused {
            <Cuda as Backend>::sync(&self.device)
        } else {
            <CudaUnfused as Backend>::sync(&self.device)
        };
        if let Ok(usage) = CudaRuntime::client(&self.device).memory_usage() {
            self.peak_in_use = self.peak_in_use.max(usage.bytes_in_use);
            self.peak_reserved = self.peak_reserved.max(usage.bytes_reserved);
        }
    }
}

impl MemoryProbe for PoolProbe {
    fn begin_step(&mut self) {
        self.peak_in_use = 0;
        self.peak_reserved = 0;
        self.sample();
    }
    fn phase(&mut self) {
        self.sample();
    }
    fn end_step(&mut self) -> MemorySample {
        self.sample();
        MemorySample {
            peak_allocated_bytes: self.peak_in_use,
            peak_reserved_bytes: self.peak_reserved,
        }
    }
    fn live_bytes(&mut self) -> u64 {
        self.sample();
        CudaRuntime::client(&self.device)
            .memory_usage()
            .map(|u| u.bytes_in_use)
            .unwrap_or(0)
    }
    fn describe(&self) -> &'static str {
        "CUDA memory pool bytes in use (CubeCL), sampled after device sync at phase boundaries \
         (after forward, each backward segment, the optimizer step); reserved = pool reserved bytes"
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
    let info = crate::device::probe_cuda().map_err(|m| crate::error::Error::Device {
        requested: format!("cuda:{}", spec.device_index),
        message: m,
    })?;
    let name = info
        .names
        .get(spec.device_index)
        .cloned()
        .unwrap_or_else(|| format!("CUDA device {}", spec.device_index));
    env.device_name = name.clone();
    env.numerics =
        "CUDA via CubeCL (NVRTC); f32 matmuls may run on TF32 tensor cores; loss in f32".into();
    let device = CudaDevice::new(spec.device_index);
    let peak = peak_flops(&name, spec.strategy.precision);
    let mut probe = PoolProbe {
        device: device.clone(),
        fused: spec.strategy.fusion,
        peak_in_use: 0,
        peak_reserved: 0,
    };
    match (spec.strategy.fusion, spec.strategy.balanced_checkpointing) {
        (true, false) => run_on::<Autodiff<Cuda>>(spec, device, &mut probe, env, peak),
        (false, false) => run_on::<Autodiff<CudaUnfused>>(spec, device, &mut probe, env, peak),
        (true, true) => run_on::<Autodiff<Cuda, Balanced>>(spec, device, &mut probe, env, peak),
        (false, true) => {
            run_on::<Autodiff<CudaUnfused, Balanced>>(spec, device, &mut probe, env, peak)
        }
    }
}
