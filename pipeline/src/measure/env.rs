//! The environment a job ran in (recorded with every job).

use serde::{Deserialize, Serialize};

/// Where and with what a job ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Environment {
    /// `git rev-parse --short HEAD` of the working tree, or "unknown".
    pub git_revision: String,
    /// Burn backend (flex, ndarray, cuda).
    pub backend: String,
    /// CPU model or GPU name.
    pub device_name: String,
    /// Parameter / activation dtype.
    pub dtype: String,
    pub burn_version: String,
    pub memwall_version: String,
    /// OS and kernel release.
    pub os: String,
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub cpu_threads: usize,
    /// Numerics notes (e.g. TF32 matmuls on CUDA).
    pub numerics: String,
}

impl Environment {
    /// Collects the host facts; the caller fills backend, device, dtype and numerics.
    pub fn host() -> Environment {
        let git_revision = std::env::var("MEMWALL_GIT_REVISION")
            .ok()
            .unwrap_or_else(|| {
                std::process::Command::new("git")
                    .args(["rev-parse", "--short", "HEAD"])
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                    .unwrap_or_else(|| "unknown".into())
            });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Environment {
            git_revision,
            burn_version: crate::BURN_VERSION.into(),
            memwall_version: env!("CARGO_PKG_VERSION").into(),
            os: format!(
                "{} {} {kernel}",
                std::env::consts::OS,
                std::env::consts::ARCH
            )
            .trim()
            .to_string(),
            cpu_model: crate::device::cpu_model(),
            cpu_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            ..Default::default()
        }
    }
}
