//! Measurement probes: peak memory (a counting global allocator on the CPU, the memory pool on
//! CUDA), step timers, and the environment a job ran in. DESIGN.md section 4 defines each
//! number.

mod alloc;
mod env;
pub mod fault;

pub use alloc::{allocated_bytes, peak_allocated_bytes, reset_peak, CountingAlloc};
pub use env::Environment;

/// Peak memory of one training step.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemorySample {
    /// High-water mark of live tensor bytes during the step (CPU: every heap allocation of the
    /// process; CUDA: the pool's bytes in use, sampled at phase boundaries).
    pub peak_allocated_bytes: u64,
    /// Bytes the allocator holds from the system (CUDA pool reserved bytes; on the CPU the same
    /// as allocated, since the system allocator returns freed memory).
    pub peak_reserved_bytes: u64,
}

/// How a peak relates to the true high-water mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeakBounds {
    /// Peak allocated bytes.
    pub allocated: Bound,
    /// Peak reserved bytes.
    pub reserved: Bound,
}

/// A source of peak-memory readings for one device.
///
/// The training loop calls [`begin_step`](MemoryProbe::begin_step) before a step,
/// [`phase`](MemoryProbe::phase) at phase boundaries (after forward, backward, each segment,
/// the optimizer step) and [`end_step`](MemoryProbe::end_step) after it.
pub trait MemoryProbe {
    /// Starts a new step: the next peak is measured from the bytes live now.
    fn begin_step(&mut self);
    /// A phase boundary: probes that sample (CUDA) read the pool here.
    fn phase(&mut self);
    /// Ends the step and returns its peaks.
    fn end_step(&mut self) -> MemorySample;
    /// What the probe measures, for the report ("process heap high-water mark", ...).
    fn describe(&self) -> &'static str;
    /// Bytes live on the device now (for per-block profiling).
    fn live_bytes(&mut self) -> u64;
    /// What kind of bound the peaks are.
    fn bounds(&self) -> PeakBounds {
        PeakBounds {
            allocated: Bound::Exact,
            reserved: Bound::Exact,
        }
    }
    /// Whether a probe needs an untimed memory step: one that samples at every phase boundary
    /// (and synchronizes the device to do so), so that timed steps need not.
    fn wants_memory_step(&self) -> bool {
        false
    }
    /// Switches phase sampling on (an untimed memory step) or off (timed steps).
    fn set_phase_sampling(&mut self, _on: bool) {}
}

/// CPU probe: the counting global allocator's high-water mark (every heap byte of the process,
/// so it includes parameters, optimizer state, gradients, activations and the data batch).
#[derive(Debug, Default)]
pub struct HeapProbe;

impl MemoryProbe for HeapProbe {
    fn begin_step(&mut self) {
        reset_peak();
    }
    fn phase(&mut self) {}
    fn end_step(&mut self) -> MemorySample {
        let peak = peak_allocated_bytes();
        MemorySample {
            peak_allocated_bytes: peak,
            peak_reserved_bytes: peak,
        }
    }
    fn describe(&self) -> &'static str {
        "process heap high-water mark (counting global allocator, reset each step)"
    }
    fn live_bytes(&mut self) -> u64 {
        allocated_bytes()
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
