//! The environment a job ran in (recorded with every job).

use memwall_core::measure::Environment;

/// The revision this runner was built from: `git rev-parse --short=12 HEAD` at build time,
/// `-dirty` when the runner's sources differed from it (`runner/build.rs`).
pub const BUILD_REVISION: &str = env!("MEMWALL_BUILD_REVISION");

/// When [`BUILD_REVISION`] ends in `-dirty`, the same in words: the commit and the runner's
/// input files that differed from it (`runner/build.rs`); empty otherwise.
pub const BUILD_CHANGES: &str = env!("MEMWALL_BUILD_CHANGES");

/// Collects the host facts of the environment a job runs in; the caller fills backend, device,
/// dtype and numerics.
pub fn host_environment() -> Environment {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Environment {
        git_revision: BUILD_REVISION.into(),
        source_changes: BUILD_CHANGES.into(),
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
