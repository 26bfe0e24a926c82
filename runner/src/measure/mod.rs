//! Measurement probes: peak memory (a counting global allocator on the CPU, the memory pool on
//! CUDA), device faults, and the environment a job ran in. The numbers' schema is
//! [`memwall_core::measure`]; `../shared/DESIGN.md` section 4 defines each number.

mod alloc;
mod env;
pub mod fault;

pub use alloc::{
    allocated_bytes, limit, peak_allocated_bytes, reset_peak, set_limit, CountingAlloc,
};
pub use env::{host_environment, BUILD_REVISION};
pub use memwall_core::measure::{median, Bound, Environment, MemorySample, PeakBounds};

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
