//! Device detection and backend selection.
//!
//! Burn's CUDA backend panics on first use when no driver is present ("Unable to dynamically
//! load the cuda shared library"), so memwall probes the driver itself (dlopen `libcuda`,
//! `cuInit`, `cuDeviceGetCount`) before any CUDA tensor is created, and turns an absent GPU into
//! an [`Error::Device`] with the reason.

pub use memwall_core::device::{BackendKind, DeviceRequest};
use memwall_core::error::{Error, Result};
use memwall_core::spec::DeviceMemory;

/// A device chosen for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedDevice {
    /// The backend that runs the jobs.
    pub backend: BackendKind,
    /// GPU ordinal (0 on the CPU).
    pub index: usize,
    /// Human-readable device name (CPU model or GPU name).
    pub name: String,
}

/// What the CUDA driver reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaInfo {
    /// Number of CUDA devices the driver sees.
    pub device_count: usize,
    /// Names of the devices, by ordinal.
    pub names: Vec<String>,
    /// Total memory of the devices, bytes, by ordinal (`cuDeviceTotalMem_v2`; 0 where the
    /// driver did not say).
    pub total_bytes: Vec<u64>,
}

/// Why the CUDA driver cannot be used ([`probe_cuda`]).
#[derive(Debug, thiserror::Error)]
pub enum CudaUnavailable {
    /// No driver library could be loaded.
    #[error("no CUDA driver library (libcuda.so.1) on this machine: no NVIDIA GPU or driver")]
    NoDriver,
    /// The driver library lacks a symbol every driver has.
    #[error("{symbol}: {source}")]
    Symbol {
        /// The driver API function.
        symbol: &'static str,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// `cuInit` returned an error code.
    #[error("cuInit failed with CUDA error {code} (no usable GPU)")]
    Init {
        /// The `CUresult` code.
        code: i32,
    },
    /// The driver reports no device.
    #[error("the CUDA driver reports no GPU (error {code}, count {count})")]
    NoDevice {
        /// The `CUresult` code of `cuDeviceGetCount`.
        code: i32,
        /// The device count it returned.
        count: i32,
    },
}

/// Probes the CUDA driver without touching Burn.
///
/// # Errors
/// [`CudaUnavailable`]: the driver library is missing or lacks `cuInit`/`cuDeviceGetCount`,
/// `cuInit` failed, or the driver reports no device.
pub fn probe_cuda() -> std::result::Result<CudaInfo, CudaUnavailable> {
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuDeviceGetCount = unsafe extern "C" fn(*mut i32) -> i32;
    type CuDeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type CuDeviceGetName = unsafe extern "C" fn(*mut std::ffi::c_char, i32, i32) -> i32;
    type CuDeviceTotalMem = unsafe extern "C" fn(*mut usize, i32) -> i32;
    // SAFETY: loading the system CUDA driver library; the symbols are called with the
    // signatures of the CUDA driver API (cuda.h), with valid out-pointers.
    unsafe {
        let lib = ["libcuda.so.1", "libcuda.so", "nvcuda.dll"]
            .iter()
            .find_map(|n| libloading::Library::new(n).ok())
            .ok_or(CudaUnavailable::NoDriver)?;
        let symbol =
            |symbol: &'static str| move |source| CudaUnavailable::Symbol { symbol, source };
        let init: libloading::Symbol<CuInit> = lib.get(b"cuInit\0").map_err(symbol("cuInit"))?;
        let code = init(0);
        if code != 0 {
            return Err(CudaUnavailable::Init { code });
        }
        let count_fn: libloading::Symbol<CuDeviceGetCount> = lib
            .get(b"cuDeviceGetCount\0")
            .map_err(symbol("cuDeviceGetCount"))?;
        let mut count = 0i32;
        let code = count_fn(&mut count);
        if code != 0 || count <= 0 {
            return Err(CudaUnavailable::NoDevice { code, count });
        }
        let get: Option<libloading::Symbol<CuDeviceGet>> = lib.get(b"cuDeviceGet\0").ok();
        let name_fn: Option<libloading::Symbol<CuDeviceGetName>> =
            lib.get(b"cuDeviceGetName\0").ok();
        let total_fn: Option<libloading::Symbol<CuDeviceTotalMem>> =
            lib.get(b"cuDeviceTotalMem_v2\0").ok();
        let mut names = Vec::new();
        let mut total_bytes = Vec::new();
        for i in 0..count {
            let mut total = 0usize;
            if let (Some(get), Some(total_fn)) = (&get, &total_fn) {
                let mut dev = 0i32;
                if get(&mut dev, i) != 0 || total_fn(&mut total, dev) != 0 {
                    total = 0;
                }
            }
            total_bytes.push(total as u64);
            let mut name = format!("CUDA device {i}");
            if let (Some(get), Some(name_fn)) = (&get, &name_fn) {
                let mut dev = 0i32;
                let mut buf = [0 as std::ffi::c_char; 256];
                if get(&mut dev, i) == 0 && name_fn(buf.as_mut_ptr(), 256, dev) == 0 {
                    name = std::ffi::CStr::from_ptr(buf.as_ptr())
                        .to_string_lossy()
                        .into_owned();
                }
            }
            names.push(name);
        }
        Ok(CudaInfo {
            device_count: count as usize,
            names,
            total_bytes,
        })
    }
}

/// Whether this binary was built with the `cuda` feature.
pub const CUDA_COMPILED: bool = cfg!(feature = "cuda");

/// Chooses the device and backend for `request`; `cpu_backend` is used on the CPU.
///
/// # Errors
/// [`Error::Device`] when CUDA is asked for and the binary lacks the `cuda` feature, no driver
/// or GPU is present, or the ordinal is out of range.
pub fn resolve(request: DeviceRequest, cpu_backend: BackendKind) -> Result<ResolvedDevice> {
    let cpu = || {
        if cpu_backend.is_gpu() {
            return Err(Error::Device {
                requested: request.to_string(),
                message: "the CPU backend must be `flex` or `ndarray`".into(),
            });
        }
        Ok(ResolvedDevice {
            backend: cpu_backend,
            index: 0,
            name: cpu_model(),
        })
    };
    match request {
        DeviceRequest::Cpu => cpu(),
        DeviceRequest::Auto => {
            if !CUDA_COMPILED {
                return cpu();
            }
            match probe_cuda() {
                Ok(info) => Ok(ResolvedDevice {
                    backend: BackendKind::Cuda,
                    index: 0,
                    name: info.names.first().cloned().unwrap_or_default(),
                }),
                Err(reason) => {
                    // Once per process: `memwall reproduce` resolves the device per study.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::info!("no GPU ({reason}); using the CPU ({cpu_backend})")
                    });
                    cpu()
                }
            }
        }
        DeviceRequest::Cuda(index) => {
            if !CUDA_COMPILED {
                return Err(Error::Device {
                    requested: request.to_string(),
                    message: "this binary was built without the `cuda` feature; rebuild with \
                              `cargo build --release --features cuda`"
                        .into(),
                });
            }
            let info = probe_cuda().map_err(|reason| Error::Device {
                requested: request.to_string(),
                message: format!("{reason}. Use `--device cpu` or `--device auto`"),
            })?;
            if index >= info.device_count {
                return Err(Error::Device {
                    requested: request.to_string(),
                    message: format!(
                        "GPU ordinal {index} out of range: this machine has {} GPU(s)",
                        info.device_count
                    ),
                });
            }
            Ok(ResolvedDevice {
                backend: BackendKind::Cuda,
                index,
                name: info.names[index].clone(),
            })
        }
    }
}

/// The host's RAM: `MemTotal` of `/proc/meminfo` (Linux; `None` elsewhere or when unreadable).
pub fn host_memory() -> Option<DeviceMemory> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(DeviceMemory {
        total_bytes: kib * 1024,
        what: "host RAM (MemTotal)".into(),
    })
}

/// The memory of the device jobs of `backend` run on: the host's RAM for the CPU backends, the
/// GPU's total memory for CUDA device `index`. `None` when it cannot be known (then no size is
/// refused for not fitting).
pub fn device_memory(backend: BackendKind, index: usize) -> Option<DeviceMemory> {
    if !backend.is_gpu() {
        return host_memory();
    }
    let info = probe_cuda().ok()?;
    let total = *info.total_bytes.get(index).filter(|&&b| b > 0)?;
    Some(DeviceMemory {
        total_bytes: total,
        what: format!(
            "memory of GPU {index} ({})",
            info.names.get(index).map(String::as_str).unwrap_or("CUDA")
        ),
    })
}

/// The CPU model name from `/proc/cpuinfo` (or the architecture where that is unavailable).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The record of a job whose sizes cannot fit its device, refused before anything is
/// allocated: status `out_of_memory` (the configuration did not fit, a result) with the
/// estimate and the model field to lower ([`memwall_core::spec::check_fits`]). `None` when the
/// estimate fits or the device's memory is unknown.
pub fn too_large(
    spec: &memwall_core::spec::JobSpec,
    env: &memwall_core::measure::Environment,
) -> Option<memwall_core::record::JobRecord> {
    let device = device_memory(spec.backend, spec.device_index)?;
    let too =
        memwall_core::spec::check_fits(&spec.model, &spec.strategy, spec.train.optimizer, &device)
            .err()?;
    let reason = format!(
        "not run: the estimate exceeds the device (model field `{}`): {}",
        too.field, too.message
    );
    let mut record = memwall_core::record::JobRecord::unfinished(
        spec,
        memwall_core::record::JobStatus::OutOfMemory,
        reason,
        env.clone(),
    );
    record.out_of_memory = Some(memwall_core::measure::OutOfMemory {
        requested_bytes: Some(too.estimate.total().min(u64::MAX as f64) as u64),
        message: format!("memory estimate {} before allocation", too.estimate),
        follow_on_failures: 0,
        pool_in_use_bytes: None,
        pool_reserved_bytes: None,
        live_bytes: None,
    });
    Some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_requests() {
        assert_eq!(
            "auto".parse::<DeviceRequest>().unwrap(),
            DeviceRequest::Auto
        );
        assert_eq!("cpu".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cpu);
        assert_eq!(
            "cuda".parse::<DeviceRequest>().unwrap(),
            DeviceRequest::Cuda(0)
        );
        assert_eq!(
            "cuda:3".parse::<DeviceRequest>().unwrap(),
            DeviceRequest::Cuda(3)
        );
    }

    #[test]
    fn unknown_device_is_a_clear_error() {
        let err = "tpu".parse::<DeviceRequest>().unwrap_err().to_string();
        assert!(err.contains("`tpu`") && err.contains("cuda:N"), "{err}");
        let err = "cuda:x".parse::<DeviceRequest>().unwrap_err().to_string();
        assert!(err.contains("cuda:x"), "{err}");
    }

    #[test]
    fn cuda_without_gpu_is_an_error_not_a_panic() {
        // On machines without a GPU (CI), asking for CUDA must fail with a reason.
        if probe_cuda().is_ok() {
            return; // a GPU is present: nothing to check here
        }
        let err = resolve(DeviceRequest::Cuda(0), BackendKind::Flex)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("device `cuda:0`"), "{err}");
        // auto falls back to the CPU
        let dev = resolve(DeviceRequest::Auto, BackendKind::Flex).unwrap();
        assert_eq!(dev.backend, BackendKind::Flex);
    }
}
