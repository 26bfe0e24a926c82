//! The measurement schema: what a peak is (its [`Bound`]), the environment a job ran in, and the
//! out-of-memory result. The probes that produce these live in `memwall_runner::measure`;
//! `../shared/DESIGN.md` section 4 defines each number.
//!
//! May import: serde only.

use serde::{Deserialize, Serialize};

/// Peak memory of one training step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySample {
    /// High-water mark of live tensor bytes during the step (CPU: every heap allocation of the
    /// process; CUDA: the pool's bytes in use, sampled at phase boundaries).
    pub peak_allocated_bytes: u64,
    /// Bytes the allocator holds from the system (CUDA pool reserved bytes; on the CPU the same
    /// as allocated, since the system allocator returns freed memory).
    pub peak_reserved_bytes: u64,
}

/// How a peak relates to the true high-water mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The true high-water mark (every allocation counted).
    Exact,
    /// At most the true value (samples that may miss the moment of the peak).
    LowerBound,
    /// At least the true value.
    UpperBound,
}

impl Bound {
    /// "exact", "lower bound", "upper bound".
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Exact => "exact",
            Bound::LowerBound => "lower bound",
            Bound::UpperBound => "upper bound",
        }
    }
}

/// What the peaks of a record are: the bound each one gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakBounds {
    /// Peak allocated bytes.
    pub allocated: Bound,
    /// Peak reserved bytes.
    pub reserved: Bound,
}

/// Where and with what a job ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Environment {
    /// The revision the runner that ran the job was built from (embedded at build time, `-dirty`
    /// when its sources differed from that commit; `runner/build.rs`), or "unknown". Records
    /// written before 2026-11-25 hold `git rev-parse --short HEAD` of the working directory.
    pub git_revision: String,
    /// Burn backend (flex, ndarray, cuda).
    pub backend: String,
    /// CPU model or GPU name.
    pub device_name: String,
    /// Parameter / activation dtype.
    pub dtype: String,
    /// Version of Burn the runner was built with.
    pub burn_version: String,
    /// Version of memwall (the runner crate's `CARGO_PKG_VERSION`).
    pub memwall_version: String,
    /// OS and kernel release.
    pub os: String,
    /// CPU model name (from `/proc/cpuinfo`, or the architecture where that is unavailable).
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub cpu_threads: usize,
    /// Numerics notes (e.g. TF32 matmuls on CUDA).
    pub numerics: String,
    /// When the runner was built from a tree with uncommitted changes (`git_revision` ends in
    /// `-dirty`), in words: the commit and the files that differed from it, e.g. "built from
    /// 98c5ff32d3a8 with uncommitted changes to runner/src/train/cuda.rs"; empty for a runner
    /// built from a commit (and in records written before 2026-11-28).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_changes: String,
}

/// How loaded the machine was while a job ran: what other processes took of its CPUs, and, on a
/// virtual machine, what the hypervisor took (steal). Read from the kernel's counters
/// (`/proc/stat`, `/proc/self/stat`, `/proc/loadavg` on Linux) at the job's start and end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MachineLoad {
    /// CPUs kept busy by other processes over the job, on average: (busy CPU time of the whole
    /// machine - the job process's own) / the job's wall time (0: a quiet machine; 1.0: one
    /// CPU-bound process beside the job).
    pub other_busy_cpus: f64,
    /// Share of the machine's CPU time stolen by the hypervisor over the job (0 to 1).
    pub steal_share: f64,
    /// The 1-minute load average at the job's end.
    pub load_avg_1m: f64,
    /// Logical CPUs of the machine (`/proc/stat`'s `cpuN` lines).
    pub cpus: usize,
    /// Seconds the window covered.
    pub wall_s: f64,
}

/// Other processes' busy CPUs from which a job's timings are taken as measured under load:
/// a quarter of a CPU ([`MachineLoad::loaded`]).
pub const LOADED_CPUS: f64 = 0.25;

/// Share of stolen CPU time from which a job's timings are taken as measured under load: 5%.
pub const LOADED_STEAL: f64 = 0.05;

impl MachineLoad {
    /// Whether timings taken under this load are noisy: other processes kept at least
    /// [`LOADED_CPUS`] busy, or the hypervisor stole at least [`LOADED_STEAL`].
    pub fn loaded(&self) -> bool {
        self.other_busy_cpus >= LOADED_CPUS || self.steal_share >= LOADED_STEAL
    }

    /// In words: "1.02 CPUs busy with other processes, 0% stolen, load average 2.1".
    pub fn describe(&self) -> String {
        format!(
            "{:.2} CPUs busy with other processes, {:.0}% stolen, load average {:.1}",
            self.other_busy_cpus,
            self.steal_share * 100.0,
            self.load_avg_1m
        )
    }
}

/// What an allocation failure said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfMemory {
    /// Bytes of the allocation that failed, when the message names them.
    pub requested_bytes: Option<u64>,
    /// The message of the first failure, verbatim.
    pub message: String,
    /// Panics and errors seen after it (follow-on failures of a poisoned device), counted by
    /// `memwall_runner::measure::fault::install_panic_hook` in this process.
    #[serde(default)]
    pub follow_on_failures: u64,
    /// The memory pool's bytes in use at its last reading before the failure (`memwall_runner::measure::fault::note_pool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_in_use_bytes: Option<u64>,
    /// The memory pool's reserved bytes at its last reading before the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_reserved_bytes: Option<u64>,
}

impl OutOfMemory {
    /// The first failure, read from `message`, with the pool reading `pool` (in use, reserved).
    pub fn first(bytes: Option<u64>, message: &str, pool: Option<(u64, u64)>) -> Self {
        OutOfMemory {
            requested_bytes: bytes,
            message: message.trim().to_string(),
            follow_on_failures: 0,
            pool_in_use_bytes: pool.map(|p| p.0),
            pool_reserved_bytes: pool.map(|p| p.1),
        }
    }
}

/// Median of `xs` (NaN for an empty slice).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
