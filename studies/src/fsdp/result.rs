//! The FSDP study's result, stored as its record.

use super::*;

/// Per-device memory at one device count N.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DevicesMemory {
    /// Number of devices N.
    pub devices: usize,
    /// Per-device bytes under FSDP on `devices` devices ([`fsdp_memory`]).
    pub memory: DeviceMemory,
}

/// The lecture's three slide examples as our ring computed them (each worker's result, in
/// rank order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlideExamples {
    /// All-reduce (sum) of [1, 2, 3] and [1, 0, 1].
    pub all_reduce: Vec<Vec<f32>>,
    /// Reduce-scatter (sum) of [1, 2, 3, 4] and [1, 0, 1, 1]: worker i's reduced chunk i.
    pub reduce_scatter: Vec<Vec<f32>>,
    /// All-gather of [1, 2] and [3, 4].
    pub all_gather: Vec<Vec<f32>>,
}

/// One ring all-reduce of `ring_elems` f32 over `workers` workers, by our ring and by Burn's
/// collective API; both results were checked against the exact sum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingResult {
    /// Number of workers N.
    pub workers: usize,
    /// Size of the buffer each worker all-reduces, bytes (4 per f32).
    pub buffer_bytes: u64,
    /// Bytes each worker of our ring sent, in rank order.
    pub bytes_sent: Vec<u64>,
    /// Wall time of our ring's whole all-reduce call (threads, channels), seconds.
    pub our_ring_s: f64,
    /// Wall time of Burn's ring all-reduce, from every peer registered to the last result,
    /// seconds ([`burn_ring_all_reduce`]).
    pub burn_s: f64,
}

/// The result of the FSDP study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FsdpResult {
    /// The parameters it ran with.
    pub params: FsdpParams,
    /// Activation bytes per device (not sharded), [`activation_bytes`].
    pub activation_bytes: f64,
    /// The memory model at each device count of `params.devices`, in that order.
    pub memory: Vec<DevicesMemory>,
    /// The lecture's slide examples, run on our ring.
    pub slides: SlideExamples,
    /// One all-reduce per worker count of `params.ring_workers`, in that order.
    pub ring: Vec<RingResult>,
}
