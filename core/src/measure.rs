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
    /// Other processes on the job's GPU (CUDA jobs; `None` on the CPU, where `nvidia-smi`
    /// cannot be run, and in records written before 2026-12-02).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuLoad>,
}

/// What other processes held of the job's GPU, from `nvidia-smi` at the job's start and end:
/// its compute processes (`--query-compute-apps=pid,used_memory`) and, at the end, the share of
/// the streaming multiprocessors each kept busy over the driver's last sampling window (`pmon
/// -c 1 -s u`, NVIDIA's System Management Interface documentation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuLoad {
    /// Compute processes other than the job's, the most seen in one reading.
    pub other_processes: usize,
    /// Bytes of GPU memory they held, the most seen in one reading.
    pub other_memory_bytes: u64,
    /// Percent of the GPU's SMs they kept busy at the end (summed over them); `None` where
    /// `pmon` gave no number (a GPU or driver without per-process sampling).
    pub other_sm_percent: Option<f64>,
}

/// Percent of the GPU's SMs kept busy by other processes from which a job's timings are taken as
/// measured under load: 5%.
pub const LOADED_GPU_SM_PERCENT: f64 = 5.0;

impl GpuLoad {
    /// Whether other processes shared the GPU's compute: they kept at least
    /// [`LOADED_GPU_SM_PERCENT`] of the SMs busy. A process that only holds memory (the PyTorch
    /// twin's server between its rows, an idle notebook) does not slow the job, and where the
    /// share is not known nothing is judged loaded: the record still names the processes.
    pub fn loaded(&self) -> bool {
        self.other_processes > 0
            && self
                .other_sm_percent
                .is_some_and(|sm| sm >= LOADED_GPU_SM_PERCENT)
    }
}

/// Other processes' busy CPUs from which a job's timings are taken as measured under load:
/// a quarter of a CPU ([`MachineLoad::loaded`]).
pub const LOADED_CPUS: f64 = 0.25;

/// Share of stolen CPU time from which a job's timings are taken as measured under load: 5%.
pub const LOADED_STEAL: f64 = 0.05;

impl MachineLoad {
    /// Whether timings taken under this load are noisy: other processes kept at least
    /// [`LOADED_CPUS`] busy, the hypervisor stole at least [`LOADED_STEAL`], or other processes
    /// shared the GPU ([`GpuLoad::loaded`]).
    pub fn loaded(&self) -> bool {
        self.other_busy_cpus >= LOADED_CPUS
            || self.steal_share >= LOADED_STEAL
            || self.gpu.is_some_and(|g| g.loaded())
    }

    /// In words: "1.02 CPUs busy with other processes, 0% stolen, load average 2.1", and on a
    /// GPU ", 1 other process on the GPU (2.0 GiB, 45% of its SMs)".
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{:.2} CPUs busy with other processes, {:.0}% stolen, load average {:.1}",
            self.other_busy_cpus,
            self.steal_share * 100.0,
            self.load_avg_1m
        );
        if let Some(g) = self.gpu.filter(|g| g.other_processes > 0) {
            let sm = g
                .other_sm_percent
                .map_or("SM share not known".to_string(), |s| {
                    format!("{s:.0}% of its SMs")
                });
            text.push_str(&format!(
                ", {} other process{} on the GPU ({:.1} GiB, {sm})",
                g.other_processes,
                if g.other_processes == 1 { "" } else { "es" },
                g.other_memory_bytes as f64 / (1u64 << 30) as f64
            ));
        }
        text
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
    /// Live heap bytes when the CPU memory limit refused the block (`memwall_runner`'s counting
    /// allocator says them with the refusal); `None` on a device or without a limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_bytes: Option<u64>,
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
            live_bytes: None,
        }
    }

    /// A lower bound of the peak the job needed, bytes: the live bytes and the refused block
    /// (`live_bytes + requested_bytes`); `None` unless both are known.
    pub fn needed_at_least_bytes(&self) -> Option<u64> {
        Some(self.live_bytes? + self.requested_bytes?)
    }
}

/// Relative tolerance of an exact byte count from run to run (peak allocated bytes, eval loss
/// at a fixed seed): 0.1%. Peaks on the CPU are exact but vary by a few KiB between runs
/// (rayon's worker threads allocate too); a real change of the memory plan moves them by far
/// more.
pub const EXACT_TOLERANCE: f64 = 1e-3;

/// Absolute slack of a peak's byte count, beside [`EXACT_TOLERANCE`]: 64 KiB. On the CPU the
/// rayon worker threads' own allocations land at slightly different moments from run to run,
/// so the exact high-water mark of the same code moves by a few KiB (2.9 KiB at most over three
/// runs of a 2.6 MB smoke configuration, 15 KiB of 123 MB at the `cpu` profile; issue 27; one
/// of five single-threaded smoke runs under load by 34,816 B, issue 56).
pub const EXACT_SLACK_BYTES: f64 = 65536.0;

/// The relative spread of the peaks (bytes) of one job's runs under a memory limit of `limit`
/// bytes: `(max - min) / max` over `peaks`, and at least the exact tolerance
/// (`max(EXACT_TOLERANCE, EXACT_SLACK_BYTES / limit)`). The one rule of "at the limit" for the
/// nightly and the largest-input search ([`at_limit`]).
pub fn peak_spread(peaks: &[f64], limit: u64) -> f64 {
    let floor = EXACT_TOLERANCE.max(EXACT_SLACK_BYTES / limit.max(1) as f64);
    let (lo, hi) = peaks.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
        (lo.min(v), hi.max(v))
    });
    if hi > 0.0 && lo.is_finite() {
        floor.max((hi - lo) / hi)
    } else {
        floor
    }
}

/// Whether a job whose runs peaked at `peaks` (bytes; every run that fit) is *at the limit* of
/// `limit` bytes: its largest peak lies within [`peak_spread`] of the limit
/// (`max >= limit * (1 - spread)`), so another run of the same code may not fit. `false`
/// without a peak.
pub fn at_limit(peaks: &[f64], limit: u64) -> bool {
    let Some(max) = peaks.iter().copied().reduce(f64::max) else {
        return false;
    };
    max >= limit as f64 * (1.0 - peak_spread(peaks, limit))
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

    /// A peak 0.05% under its limit is at it; 5% under is not, unless its runs spread 6%.
    #[test]
    fn a_peak_within_its_spread_of_the_limit_is_at_the_limit() {
        let limit = 100 << 20;
        let l = limit as f64;
        assert!(at_limit(&[l * 0.9995], limit));
        assert!(!at_limit(&[l * 0.95], limit));
        assert!(at_limit(&[l * 0.89, l * 0.95], limit));
        assert!(!at_limit(&[], limit));
        // A small limit: 64 KiB of slack dominates the 0.1%.
        assert!((peak_spread(&[], 1 << 20) - 1.0 / 16.0).abs() < 1e-12);
    }
}
