//! Measurement probes: peak memory (a counting global allocator on the CPU, the memory pool on
//! CUDA), step timers, and the environment a job ran in. DESIGN.md section 4 defines each
//! number.

mod alloc;
mod env;

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
