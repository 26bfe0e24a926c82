//! The environment a job ran in (recorded with every job).

use memwall_core::measure::Environment;

/// Collects the host facts of the environment a job runs in; the caller fills backend, device,
/// dtype and numerics.
pub fn host_environment() -> Environment {
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
