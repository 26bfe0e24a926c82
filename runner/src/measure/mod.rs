//! Measurement probes: peak memory (a counting global allocator on the CPU, the memory pool on
//! CUDA), device faults, the environment a job ran in, and the machine's load while it ran
//! ([`LoadProbe`]). The numbers' schema is
//! [`memwall_core::measure`]; `../shared/DESIGN.md` section 4 defines each number.

mod alloc;
mod env;
pub mod fault;
mod load;

pub use alloc::{
    allocated_bytes, limit, peak_allocated_bytes, reset_peak, set_limit, trace, CountingAlloc,
};
pub use env::{host_environment, BUILD_CHANGES, BUILD_REVISION};
pub use load::LoadProbe;
pub use memwall_core::measure::{median, Bound, Environment, MemorySample, PeakBounds};
pub use memwall_core::timeline::{Phase, PhaseSpan, StepTimeline};

/// A source of peak-memory readings for one device.
///
/// The training loop calls [`begin_step`](MemoryProbe::begin_step) before a step,
/// [`phase`](MemoryProbe::phase) at phase boundaries (after the embedding, each forward block
/// or segment, the head, each backward segment, the optimizer step) and
/// [`end_step`](MemoryProbe::end_step) after it.
pub trait MemoryProbe {
    /// Starts a new step: the next peak is measured from the bytes live now.
    fn begin_step(&mut self);
    /// A phase boundary: `ended` is the phase that ends here. Probes that sample (CUDA) read
    /// the pool here; a probe tracing the step marks the phase on its timeline.
    fn phase(&mut self, ended: Phase);
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
    /// Whether the probe can record a step's memory timeline, and in which step: `Some(true)`
    /// in the untimed memory step (a probe that samples), `Some(false)` in the last timed step
    /// (the CPU's allocator trace, which does not synchronize), `None`: no timeline.
    fn timeline_step(&self) -> Option<bool> {
        None
    }
    /// Records the timeline of the next step ([`MemoryProbe::take_timeline`] returns it).
    fn trace_next_step(&mut self) {}
    /// The timeline of the step traced, once (its `step`, `sizes` and `fused` are the caller's
    /// to set).
    fn take_timeline(&mut self) -> Option<StepTimeline> {
        None
    }
}

/// Allocates now, on the calling thread and on every thread of rayon's global pool, the
/// packing buffer the `gemm` crate (flex's matmuls) keeps per thread
/// (`gemm_common::gemm::L2_SLAB`, one core's L2 cache: 1 MiB on a 2 MiB, 2-core AMD EPYC).
/// `gemm` allocates it lazily, on a thread's first matmul large enough to pack, and keeps it
/// for the thread's life; which of rayon's threads run such a matmul first changes from run to
/// run, so without this a CPU job's peak moved in whole slabs between runs of the same job
/// (the smoke largest-input search at batch 61: 10.61 MB with one thread in 6 of 6 runs,
/// 11.67 or 12.72 MB with two; issue 56). Called before a CPU job's model is built, the slabs
/// are part of its baseline and every step's peak repeats. Costs one slab per thread, once.
pub fn allocate_gemm_scratch() {
    let touch = || gemm_common::gemm::L2_SLAB.with(|slab| drop(slab.borrow()));
    touch();
    rayon::broadcast(|_| touch());
}

/// A probe that measures nothing: for code that times or inspects a step without weighing it
/// (the benchmarks, the range survey's training steps).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProbe;

impl MemoryProbe for NoProbe {
    fn begin_step(&mut self) {}
    fn phase(&mut self, _: Phase) {}
    fn end_step(&mut self) -> MemorySample {
        MemorySample {
            peak_allocated_bytes: 0,
            peak_reserved_bytes: 0,
        }
    }
    fn describe(&self) -> &'static str {
        "none"
    }
    fn live_bytes(&mut self) -> u64 {
        0
    }
}

/// CPU probe: the counting global allocator's high-water mark (every heap byte of the process,
/// so it includes parameters, optimizer state, gradients, activations and the data batch), and
/// on request the allocator's trace of one step ([`trace`]) as its memory timeline. Tracing
/// allocates nothing during the step (its buffers are static), so the traced step's peak is
/// the untraced one's.
#[derive(Debug, Default)]
pub struct HeapProbe {
    trace_next: bool,
    tracing: bool,
    start_bytes: u64,
    timeline: Option<StepTimeline>,
}

impl MemoryProbe for HeapProbe {
    fn begin_step(&mut self) {
        reset_peak();
        if std::mem::take(&mut self.trace_next) {
            self.tracing = true;
            self.start_bytes = trace::start(memwall_core::timeline::CPU_GRAIN_BYTES);
        }
    }
    fn phase(&mut self, ended: Phase) {
        if self.tracing {
            trace::mark(ended.to_bits());
        }
    }
    fn end_step(&mut self) -> MemorySample {
        let peak = peak_allocated_bytes();
        if std::mem::take(&mut self.tracing) {
            // What ran after the last mark (reading the loss) belongs to the last phase.
            trace::extend_last();
            let tr = trace::stop();
            let mut phases = Vec::with_capacity(tr.marks.len());
            let mut last = (0.0, self.start_bytes);
            for m in &tr.marks {
                let Some(phase) = Phase::from_bits(m.bits) else {
                    continue;
                };
                phases.push(PhaseSpan {
                    phase,
                    start_s: last.0,
                    end_s: m.end_s,
                    start_bytes: last.1,
                    end_bytes: m.bytes,
                    peak_bytes: m.high,
                });
                last = (m.end_s, m.bytes);
            }
            self.timeline = Some(StepTimeline {
                step: 0,
                source: format!(
                    "live heap bytes of the job's process (counting global allocator, exact), \
                     recorded at every phase boundary, at every change of {} KiB or more and at \
                     every new high of the step",
                    memwall_core::timeline::CPU_GRAIN_BYTES >> 10
                ),
                exact: true,
                duration_s: last.0,
                start_bytes: self.start_bytes,
                peak_bytes: peak,
                peak_at_s: micros(tr.high.0),
                // Microseconds are the clock's useful resolution here (and keep records small).
                points: memwall_core::timeline::downsample(
                    &tr.points,
                    memwall_core::timeline::MAX_POINTS,
                )
                .into_iter()
                .map(|(t, b)| (micros(t), b))
                .collect(),
                truncated: tr.dropped > 0,
                phases,
                sizes: None,
                fused: false,
            });
        }
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
    fn timeline_step(&self) -> Option<bool> {
        Some(false)
    }
    fn trace_next_step(&mut self) {
        self.trace_next = true;
    }
    fn take_timeline(&mut self) -> Option<StepTimeline> {
        self.timeline.take()
    }
}

/// `seconds` rounded to whole microseconds.
fn micros(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e6
}
