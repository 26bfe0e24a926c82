//! FSDP memory model and ring collectives, from the CMU 15-442 lecture
//! (`003_c07c09ab371a2f69.txt`, sections "Fully Sharded Data Parallelism", "Recap: AllReduce
//! Abstraction", "Ring based Reduction", "Reduce Scatter Abstraction", "Allgather abstraction",
//! "Overall Relations").
//!
//! Per-device memory when parameters, gradients and optimizer state are sharded over N devices
//! (activations are not), and a real ring all-reduce (reduce-scatter + all-gather) across N worker
//! threads exchanging chunks over channels, with bytes sent per device counted, checked against
//! Burn's collective API (`burn-collective`'s ring all-reduce on flex CPU peers).
//!
//! [`measure`] evaluates the memory model and runs the collectives, returning an [`FsdpResult`]
//! (bytes, bytes sent, seconds); [`render`] presents a result as the study's two sections.
//!
//! May import: [`crate::report::model`], Burn and `burn-collective`.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::params::{bytes_at_most, int_in, list, num_above, num_in, require, ParamResult, GIB};
use super::{demo_study, ensure, fmt_bytes, DemoError};
use super::{CiteAs, Cited};
use crate::report::model::{Figure, Measure, Section, Series, Table};

/// Optimizer-state model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// Adam: two states (first and second moment) per parameter, each `state_bytes`.
    Adam,
    /// Adafactor-like: first moment dropped, second moment factored into row and column
    /// statistics, modelled as 0 states per parameter (O(rows + cols) per matrix, negligible).
    Adafactor,
}

/// Parameters of the FSDP study.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FsdpParams {
    /// Model parameter count (default 1.6e9).
    pub params: f64,
    /// Bytes per parameter of the working (compute) copy (2 = bf16/fp16).
    pub param_bytes: f64,
    /// Bytes per gradient element (2 = bf16/fp16).
    pub grad_bytes: f64,
    /// Bytes per element of the fp32 master copy of the weights (4; 0 for none).
    pub master_bytes: f64,
    /// Optimizer model.
    pub optimizer: Optimizer,
    /// Bytes per optimizer-state element (4 = fp32).
    pub state_bytes: f64,
    /// Transformer layers for the activation estimate (default 48, GPT-2 XL's).
    pub layers: f64,
    /// Hidden size (default 1600, GPT-2 XL's).
    pub hidden: f64,
    /// Attention heads (default 25, GPT-2 XL's).
    pub heads: f64,
    /// Sequence length in tokens (default 1024, GPT-2 XL's context).
    pub seq: f64,
    /// Micro-batch per device (sequences).
    pub micro_batch: f64,
    /// Device counts N for the figure.
    pub devices: Vec<usize>,
    /// Elements (f32) of the buffer all-reduced in the ring measurement.
    pub ring_elems: usize,
    /// Worker counts for the ring measurement.
    pub ring_workers: Vec<usize>,
}

impl Default for FsdpParams {
    fn default() -> Self {
        Self {
            params: 1.6e9,
            param_bytes: 2.0,
            grad_bytes: 2.0,
            master_bytes: 4.0,
            optimizer: Optimizer::Adam,
            state_bytes: 4.0,
            layers: 48.0,
            hidden: 1600.0,
            heads: 25.0,
            seq: 1024.0,
            micro_batch: 1.0,
            devices: vec![1, 2, 4, 8, 16, 32, 64],
            ring_elems: 1 << 20,
            ring_workers: vec![2, 3, 4, 8, 16],
        }
    }
}

/// Per-device memory breakdown in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    /// Parameter shard (working copy), bytes.
    pub params: f64,
    /// Gradient shard, bytes.
    pub grads: f64,
    /// Optimizer state shard, master weights included, bytes.
    pub optimizer: f64,
    /// Activations (not sharded), bytes.
    pub activations: f64,
}

impl DeviceMemory {
    /// Total bytes.
    pub fn total(&self) -> f64 {
        self.params + self.grads + self.optimizer + self.activations
    }
}

/// Activation bytes of a transformer without recomputation, Korthikanti et al. 2022 ("Reducing
/// Activation Recomputation in Large Transformer Models", Eq. 1):
/// layers * s * b * h * (34 + 5 a s / h) with 16-bit activations.
pub fn activation_bytes(p: &FsdpParams) -> f64 {
    p.layers * p.seq * p.micro_batch * p.hidden * (34.0 + 5.0 * p.heads * p.seq / p.hidden)
}

/// FSDP per-device memory on `n` devices: parameters, gradients and optimizer state (with
/// master weights) divided by n, activations whole. Gathered full layers (transient) are not
/// counted.
pub fn fsdp_memory(p: &FsdpParams, n: usize) -> DeviceMemory {
    let n = n as f64;
    let states = match p.optimizer {
        Optimizer::Adam => 2.0,
        Optimizer::Adafactor => 0.0,
    };
    DeviceMemory {
        params: p.params * p.param_bytes / n,
        grads: p.params * p.grad_bytes / n,
        optimizer: p.params * (p.master_bytes + states * p.state_bytes) / n,
        activations: activation_bytes(p),
    }
}

/// One worker in a logical ring: sends to rank+1, receives from rank-1, counts bytes sent.
#[derive(Debug)]
pub struct RingPeer {
    /// This worker's rank.
    pub rank: usize,
    /// Ring size.
    pub n: usize,
    tx: Sender<Vec<f32>>,
    rx: Receiver<Vec<f32>>,
    /// Bytes sent so far (4 per f32).
    pub bytes_sent: u64,
}

/// Chunk boundaries: chunk i = [i*len/n, (i+1)*len/n).
fn chunk(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    i * len / n..(i + 1) * len / n
}

impl RingPeer {
    fn send(&mut self, v: Vec<f32>) -> Result<(), DemoError> {
        self.bytes_sent += (v.len() * 4) as u64;
        self.tx
            .send(v)
            .map_err(|e| DemoError::Worker(format!("rank {}: send failed: {e}", self.rank)))
    }
    fn recv(&mut self) -> Result<Vec<f32>, DemoError> {
        self.rx
            .recv()
            .map_err(|e| DemoError::Worker(format!("rank {}: receive failed: {e}", self.rank)))
    }

    /// Ring reduce-scatter in n-1 steps: at step s send chunk (rank-s-1) mod n, receive chunk
    /// (rank-s-2) mod n and add it in. Afterwards chunk `rank` holds the sum over all workers;
    /// returns it.
    pub fn reduce_scatter(&mut self, buf: &mut [f32]) -> Result<Vec<f32>, DemoError> {
        let (n, r, len) = (self.n, self.rank, buf.len());
        for s in 0..n.saturating_sub(1) {
            let send_c = (r + 2 * n - s - 1) % n;
            let recv_c = (r + 2 * n - s - 2) % n;
            self.send(buf[chunk(len, n, send_c)].to_vec())?;
            let got = self.recv()?;
            for (d, g) in buf[chunk(len, n, recv_c)].iter_mut().zip(&got) {
                *d += g;
            }
        }
        Ok(buf[chunk(len, n, r)].to_vec())
    }

    /// Ring all-gather in n-1 steps: chunk `rank` of `buf` is this worker's; at step s send chunk
    /// (rank-s) mod n and receive chunk (rank-s-1) mod n.
    pub fn all_gather(&mut self, buf: &mut [f32]) -> Result<(), DemoError> {
        let (n, r, len) = (self.n, self.rank, buf.len());
        for s in 0..n.saturating_sub(1) {
            let send_c = (r + n - s) % n;
            let recv_c = (r + 2 * n - s - 1) % n;
            self.send(buf[chunk(len, n, send_c)].to_vec())?;
            let got = self.recv()?;
            buf[chunk(len, n, recv_c)].copy_from_slice(&got);
        }
        Ok(())
    }

    /// All-reduce = reduce-scatter + all-gather (lecture slide "Overall Relations").
    pub fn all_reduce(&mut self, buf: &mut [f32]) -> Result<(), DemoError> {
        self.reduce_scatter(buf)?;
        self.all_gather(buf)
    }
}

/// Creates n ring peers connected by channels.
pub fn ring(n: usize) -> Vec<RingPeer> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel::<Vec<f32>>()).unzip();
    // Peer r sends on channel (r+1) % n and receives on channel r.
    let mut rxs: Vec<Option<Receiver<Vec<f32>>>> = rxs.into_iter().map(Some).collect();
    (0..n)
        .map(|r| RingPeer {
            rank: r,
            n,
            tx: txs[(r + 1) % n].clone(),
            rx: rxs[r].take().expect("one receiver per peer"),
            bytes_sent: 0,
        })
        .collect()
}

/// Runs `f` on every peer of an n-worker ring, one OS thread each, and returns the per-worker
/// results and bytes sent.
pub fn run_ring<T: Send>(
    inputs: Vec<Vec<f32>>,
    f: impl Fn(&mut RingPeer, &mut Vec<f32>) -> Result<T, DemoError> + Sync,
) -> Result<Vec<(Vec<f32>, T, u64)>, DemoError> {
    let n = inputs.len();
    let peers = ring(n);
    std::thread::scope(|sc| {
        let handles: Vec<_> = peers
            .into_iter()
            .zip(inputs)
            .map(|(mut peer, mut buf)| {
                let f = &f;
                sc.spawn(move || -> Result<(Vec<f32>, T, u64), DemoError> {
                    let out = f(&mut peer, &mut buf)?;
                    Ok((buf, out, peer.bytes_sent))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| DemoError::Worker("worker thread panicked".into()))?
            })
            .collect()
    })
}

/// All-reduce (sum) of the workers' buffers; returns each worker's result and bytes sent.
pub fn all_reduce(inputs: Vec<Vec<f32>>) -> Result<Vec<(Vec<f32>, u64)>, DemoError> {
    Ok(run_ring(inputs, |p, b| p.all_reduce(b))?
        .into_iter()
        .map(|(b, _, s)| (b, s))
        .collect())
}

/// All-reduce (sum) of the peers' buffers through Burn's collective API (`burn-collective`
/// 0.21, local strategy `AllReduceStrategy::Ring`: a reduce-scatter then an all-gather, N-1
/// steps each, over N slices of the tensor's largest dimension), one peer per OS thread, each
/// registered on the flex CPU device. Returns every peer's result and the all-reduce time in
/// seconds: from the moment every peer is registered until the last peer has its result.
///
/// Burn keeps one collective server per backend in the process, so calls are serialized by a
/// process-wide lock. A peer that fails or does not answer within 120 s ends the call with
/// an error instead of leaving the other peers waiting.
///
/// # Errors
/// [`DemoError::Worker`] when registration or the collective fails, a peer panics, or the
/// collective does not finish in time.
pub fn burn_ring_all_reduce(inputs: Vec<Vec<f32>>) -> Result<(Vec<Vec<f32>>, f64), DemoError> {
    use burn::backend::Flex;
    use burn_collective::{AllReduceStrategy, CollectiveConfig};
    use std::sync::{Arc, Barrier, Mutex};
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let n = inputs.len();
    burn_collective::reset_collective::<Flex>();
    let config = CollectiveConfig::default()
        .with_num_devices(n)
        .with_local_all_reduce_strategy(AllReduceStrategy::Ring);
    let registered = Arc::new(Barrier::new(n));
    let (tx, rx) = channel::<(usize, Result<BurnPeerResult, DemoError>)>();
    for (i, buf) in inputs.into_iter().enumerate() {
        let (config, registered, tx) = (config.clone(), registered.clone(), tx.clone());
        std::thread::spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                burn_peer_all_reduce(i, buf, config, &registered)
            }))
            .unwrap_or_else(|_| {
                Err(DemoError::Worker(format!(
                    "burn-collective peer {i} panicked"
                )))
            });
            let _ = tx.send((i, result));
        });
    }
    drop(tx);
    let collected = collect_burn_peers(&rx, n);
    burn_collective::reset_collective::<Flex>();
    let results = collected?;
    let start = results.iter().map(|r| r.1).min();
    let end = results.iter().map(|r| r.2).max();
    let secs = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => 0.0,
    };
    Ok((results.into_iter().map(|r| r.0).collect(), secs))
}

/// One Burn peer's all-reduced values, and when its all-reduce started and ended.
type BurnPeerResult = (Vec<f32>, Instant, Instant);

/// The body of Burn peer `i` of [`burn_ring_all_reduce`]: registers `buf` on the flex CPU
/// device, waits until every peer is registered, all-reduces (sum) and reads the result back.
fn burn_peer_all_reduce(
    i: usize,
    buf: Vec<f32>,
    config: burn_collective::CollectiveConfig,
    registered: &std::sync::Barrier,
) -> Result<BurnPeerResult, DemoError> {
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorData, TensorPrimitive};
    use burn_collective::{PeerId, ReduceOperation};
    let err = |e: burn_collective::CollectiveError| {
        DemoError::Worker(format!("burn-collective peer {i}: {e:?}"))
    };
    let id = PeerId(i as u32);
    let device = Default::default();
    let len = buf.len();
    let t = Tensor::<Flex, 1>::from_data(TensorData::new(buf, [len]), &device);
    burn_collective::register::<Flex>(id, device, config).map_err(err)?;
    registered.wait();
    let start = Instant::now();
    let out =
        burn_collective::all_reduce::<Flex>(id, t.into_primitive().tensor(), ReduceOperation::Sum)
            .map_err(err)?;
    let end = Instant::now();
    let out = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(out));
    let values = out
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| DemoError::Worker(format!("burn-collective peer {i}: {e:?}")))?;
    burn_collective::finish_collective::<Flex>(id).map_err(err)?;
    Ok((values, start, end))
}

/// Receives the results of the `n` Burn peers, in rank order; the first failure, or a peer
/// that does not answer within 120 s, ends the wait with an error.
fn collect_burn_peers(
    rx: &Receiver<(usize, Result<BurnPeerResult, DemoError>)>,
    n: usize,
) -> Result<Vec<BurnPeerResult>, DemoError> {
    let mut results: Vec<Option<BurnPeerResult>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok((i, Ok(r))) => results[i] = Some(r),
            Ok((_, Err(e))) => return Err(e),
            Err(_) => {
                return Err(DemoError::Worker(format!(
                    "Burn's ring all-reduce over {n} peers did not finish within 120 s"
                )))
            }
        }
    }
    Ok(results.into_iter().flatten().collect())
}

/// Reduce-scatter (sum): worker i gets the reduced chunk i.
pub fn reduce_scatter(inputs: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, DemoError> {
    Ok(run_ring(inputs, |p, b| p.reduce_scatter(b))?
        .into_iter()
        .map(|(_, c, _)| c)
        .collect())
}

/// All-gather: worker i contributes `inputs[i]` (equal lengths); every worker gets the
/// concatenation.
pub fn all_gather(inputs: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, DemoError> {
    let n = inputs.len();
    let m = inputs.first().map(|v| v.len()).unwrap_or(0);
    if inputs.iter().any(|v| v.len() != m) {
        return Err(DemoError::Check(
            "all_gather needs equal shard lengths".into(),
        ));
    }
    let bufs: Vec<Vec<f32>> = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut b = vec![0f32; n * m];
            b[i * m..(i + 1) * m].copy_from_slice(v);
            b
        })
        .collect();
    Ok(run_ring(bufs, |p, b| p.all_gather(b))?
        .into_iter()
        .map(|(b, _, _)| b)
        .collect())
}

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

/// The FSDP study ([`InProcessStudy`](super::InProcessStudy)).
pub struct Fsdp;

demo_study!(
    Fsdp: FsdpParams => FsdpResult,
    cited CiteAs,
    validate,
    measure,
    render,
    measures
);

/// Largest absolute difference between each worker's result and the slide's (infinite when a
/// worker's result has another length or the workers another count).
fn slide_error(ours: &[Vec<f32>], slide: &[&[f32]]) -> f64 {
    if ours.len() != slide.len() || ours.iter().zip(slide).any(|(o, s)| o.len() != s.len()) {
        return f64::INFINITY;
    }
    ours.iter()
        .zip(slide)
        .flat_map(|(o, s)| o.iter().zip(s.iter()))
        .map(|(a, b)| f64::from((a - b).abs()))
        .fold(0.0, f64::max)
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only:
///
/// - `allreduce_example_max_abs_error`, `reduce_scatter_example_max_abs_error`,
///   `allgather_example_max_abs_error`: the largest absolute difference between our ring's
///   result on the lecture's running example and the result the slide asserts (all-reduce:
///   [2, 2, 4] on both workers; reduce-scatter: [2, 2] and [4, 5]; all-gather: [1, 2, 3, 4] on
///   both); 0 when exact.
/// - `ring_traffic_over_rs_plus_ag` (x): mean bytes sent per worker by our ring all-reduce over
///   reduce-scatter's plus all-gather's (N-1)/N of the buffer each, 2(N-1)/N x buffer (the
///   standard ring analysis, Patarasuk and Yuan 2009; not the lecture's number), the worker
///   count furthest from 1.0; 1.0 when the all-reduce is exactly a reduce-scatter followed by an
///   all-gather.
/// - `sharded_state_reduction` (x): per-device params + grads + optimizer bytes at the fewest
///   devices over those at the most devices of the memory model.
pub fn measures(r: &FsdpResult) -> Vec<Measure> {
    let s = &r.slides;
    let ratio = r
        .ring
        .iter()
        .filter(|ring| ring.workers > 1)
        .map(|ring| {
            let t = RingTraffic::of(ring);
            t.mean_sent / t.theory
        })
        .reduce(|a, b| {
            if (b - 1.0).abs() > (a - 1.0).abs() {
                b
            } else {
                a
            }
        })
        .unwrap_or(f64::NAN);
    let sharded = |m: &DevicesMemory| m.memory.total() - m.memory.activations;
    let state = match (r.memory.first(), r.memory.last()) {
        (Some(a), Some(b)) => sharded(a) / sharded(b),
        _ => f64::NAN,
    };
    vec![
        Measure::new(
            "allreduce_example_max_abs_error",
            slide_error(&s.all_reduce, &[&[2.0, 2.0, 4.0], &[2.0, 2.0, 4.0]]),
            "",
            1,
        ),
        Measure::new(
            "reduce_scatter_example_max_abs_error",
            slide_error(&s.reduce_scatter, &[&[2.0, 2.0], &[4.0, 5.0]]),
            "",
            1,
        ),
        Measure::new(
            "allgather_example_max_abs_error",
            slide_error(
                &s.all_gather,
                &[&[1.0, 2.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 4.0]],
            ),
            "",
            1,
        ),
        Measure::new("ring_traffic_over_rs_plus_ag", ratio, "x", 4),
        Measure::new("sharded_state_reduction", state, "x", 1),
    ]
}

/// Largest byte count of the ring measurement's buffers (`ring_elems` f32 per worker, at the
/// largest `ring_workers`).
pub const MAX_RING_BYTES: f64 = 4.0 * GIB;

/// Checks `p`'s ranges: a model of 1 to 1e13 parameters; 1 to 8 bytes per parameter, gradient
/// and state element (0 allowed for master weights and states); 1..=1e4 layers, hidden size
/// 1..=1e6 divisible by 1..=hidden heads, 1..=1e7 tokens, 1..=1e6 sequences per micro-batch;
/// 1 to 64 device counts in 1..=1e6; ring buffers of 1 element or more at 1 to 16 worker
/// counts in 1..=256, under [`MAX_RING_BYTES`] in all.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &FsdpParams) -> ParamResult {
    num_above("params", p.params, 0.0, 1e13)?;
    num_above("param_bytes", p.param_bytes, 0.0, 8.0)?;
    num_above("grad_bytes", p.grad_bytes, 0.0, 8.0)?;
    num_in("master_bytes", p.master_bytes, 0.0, 8.0)?;
    num_in("state_bytes", p.state_bytes, 0.0, 8.0)?;
    num_in("layers", p.layers, 1.0, 1e4)?;
    num_in("hidden", p.hidden, 1.0, 1e6)?;
    num_in("heads", p.heads, 1.0, p.hidden)?;
    require(p.hidden % p.heads == 0.0, "heads", || {
        format!(
            "must divide `hidden` ({} is not a multiple of {})",
            p.hidden, p.heads
        )
    })?;
    num_in("seq", p.seq, 1.0, 1e7)?;
    num_in("micro_batch", p.micro_batch, 1.0, 1e6)?;
    list("devices", &p.devices, 1, 64, |f, &n| {
        int_in(f, n, 1, 1_000_000)
    })?;
    int_in("ring_elems", p.ring_elems, 1, usize::MAX)?;
    list("ring_workers", &p.ring_workers, 1, 16, |f, &n| {
        int_in(f, n, 1, 256)
    })?;
    let workers = p.ring_workers.iter().copied().max().unwrap_or(1) as f64;
    bytes_at_most(
        "ring_elems",
        p.ring_elems as f64 * 4.0 * workers,
        MAX_RING_BYTES,
        "the ring buffers (4 B x `ring_elems` x the largest of `ring_workers`)",
    )
}

/// Evaluates the memory model at every device count and runs the slide examples and the ring
/// all-reduces (ours and Burn's) of `p`.
///
/// # Errors
/// [`DemoError::InvalidParam`] for non-positive parameters, device counts or elements, or worker
/// counts outside 1..=256; [`DemoError::Check`] when a collective gives a wrong result;
/// [`DemoError::Worker`] when a worker fails.
pub fn measure(p: &FsdpParams) -> Result<FsdpResult, DemoError> {
    validate(p)?;
    ensure(
        p.params > 0.0 && !p.devices.is_empty() && p.devices.iter().all(|&n| n > 0),
        "devices",
        "positive params and device counts",
    )?;
    ensure(
        p.ring_elems > 0 && p.ring_workers.iter().all(|&n| (1..=256).contains(&n)),
        "ring_workers",
        "1..=256 workers, positive elements",
    )?;
    let memory = p
        .devices
        .iter()
        .map(|&n| DevicesMemory {
            devices: n,
            memory: fsdp_memory(p, n),
        })
        .collect();
    let slides = slide_examples()?;
    let ring = p
        .ring_workers
        .iter()
        .map(|&n| measure_ring(n, p.ring_elems))
        .collect::<Result<_, _>>()?;
    Ok(FsdpResult {
        params: p.clone(),
        activation_bytes: activation_bytes(p),
        memory,
        slides,
        ring,
    })
}

/// Runs the lecture's three slide examples on our ring and checks them against the slides.
///
/// # Errors
/// [`DemoError::Check`] when a result differs from the slide; [`DemoError::Worker`].
pub fn slide_examples() -> Result<SlideExamples, DemoError> {
    let slide_ar = all_reduce(vec![vec![1.0, 2.0, 3.0], vec![1.0, 0.0, 1.0]])?;
    let slide_rs = reduce_scatter(vec![vec![1.0, 2.0, 3.0, 4.0], vec![1.0, 0.0, 1.0, 1.0]])?;
    let slide_ag = all_gather(vec![vec![1.0, 2.0], vec![3.0, 4.0]])?;
    let ok_slides = slide_ar.iter().all(|(b, _)| b == &[2.0, 2.0, 4.0])
        && slide_rs == vec![vec![2.0, 2.0], vec![4.0, 5.0]]
        && slide_ag.iter().all(|b| b == &[1.0, 2.0, 3.0, 4.0]);
    if !ok_slides {
        return Err(DemoError::Check(format!(
            "slide examples failed: {slide_ar:?} {slide_rs:?} {slide_ag:?}"
        )));
    }
    Ok(SlideExamples {
        all_reduce: slide_ar.into_iter().map(|(b, _)| b).collect(),
        reduce_scatter: slide_rs,
        all_gather: slide_ag,
    })
}

/// All-reduces `elems` integer-valued f32 over `workers` workers with our ring (timed, bytes
/// counted) and with Burn's collective API, and checks both against the exact sum.
///
/// # Errors
/// [`DemoError::Check`] when either sum is wrong; [`DemoError::Worker`].
pub fn measure_ring(workers: usize, elems: usize) -> Result<RingResult, DemoError> {
    let n = workers;
    // Integer-valued inputs: sums are exact in f32, whatever the addition order.
    let inputs: Vec<Vec<f32>> = (0..n)
        .map(|w| {
            (0..elems)
                .map(|i| ((i * 7 + w * 13) % 101) as f32)
                .collect()
        })
        .collect();
    let expect: Vec<f32> = (0..elems)
        .map(|i| (0..n).map(|w| ((i * 7 + w * 13) % 101) as f32).sum())
        .collect();
    let burn_inputs = inputs.clone();
    let t0 = Instant::now();
    let res = all_reduce(inputs)?;
    let dt = t0.elapsed().as_secs_f64();
    let correct = res.iter().all(|(b, _)| b == &expect);
    if !correct {
        return Err(DemoError::Check(format!(
            "ring all-reduce with {n} workers gave a wrong sum"
        )));
    }
    let (burn_res, burn_dt) = burn_ring_all_reduce(burn_inputs)?;
    if burn_res.len() != n || burn_res.iter().any(|b| b != &expect) {
        return Err(DemoError::Check(format!(
            "Burn's ring all-reduce with {n} peers gave a wrong sum"
        )));
    }
    Ok(RingResult {
        workers: n,
        buffer_bytes: (elems * 4) as u64,
        bytes_sent: res.iter().map(|r| r.1).collect(),
        our_ring_s: dt,
        burn_s: burn_dt,
    })
}

/// The study's sections: per-device memory under FSDP, then the ring collectives.
pub fn render(r: &FsdpResult, cited: &Cited<CiteAs>) -> Vec<Section> {
    let src = cited.src();
    vec![memory_section(r, &src), ring_section(r, &src)]
}

/// Bytes per parameter of the sharded states: working copy + gradient + master + optimizer
/// states.
fn bytes_per_param(p: &FsdpParams) -> f64 {
    p.param_bytes
        + p.grad_bytes
        + p.master_bytes
        + if p.optimizer == Optimizer::Adam {
            2.0 * p.state_bytes
        } else {
            0.0
        }
}

/// The lecture's sharding claim beside the per-device memory at each device count.
fn memory_section(r: &FsdpResult, src: &str) -> Section {
    let p = &r.params;
    let gb =
        |m: &DevicesMemory, f: fn(&DeviceMemory) -> f64| (m.devices as f64, f(&m.memory) / 1e9);
    let tot: Vec<_> = r
        .memory
        .iter()
        .map(|m| gb(m, DeviceMemory::total))
        .collect();
    let sharded: Vec<_> = r
        .memory
        .iter()
        .map(|m| gb(m, |d| d.total() - d.activations))
        .collect();
    let (n1, t1) = r
        .memory
        .first()
        .map_or((0, 0.0), |m| (m.devices, m.memory.total()));
    let (nlast, tlast) = r
        .memory
        .last()
        .map_or((1, 0.0), |m| (m.devices, m.memory.total()));
    Section {
        details: None,
        title: "FSDP per-device memory".into(),
        claim: format!(
            "{src}, slide \"Sources of memory consumption\": \"Model weights\", \"Optimizer states\", \"Intermediate activation values\". The lecture's \
             \"FSDP: Fully Sharded Data Parallel\" slide has only its title in the text; that FSDP shards parameters, gradients and optimizer state across the \
             data-parallel devices (activations stay per device) is ZeRO stage 3 (Rajbhandari et al. 2020, arXiv:1910.02054) and PyTorch FSDP (Zhao et al. 2023, \
             arXiv:2304.11277)."
        ),
        ours: format!(
            "For {:.2e} parameters ({} B params, {} B grads, {} B master, {:?} states of {} B), per-device memory falls from {} on {} device(s) to {} on {}; the \
             unsharded activations ({}) then dominate.",
            p.params, p.param_bytes, p.grad_bytes, p.master_bytes, p.optimizer, p.state_bytes, fmt_bytes(t1), n1, fmt_bytes(tlast),
            nlast, fmt_bytes(r.activation_bytes)
        ),
        notes: vec![
            format!(
                "Bytes per parameter: {} (working copy) + {} (gradient) + {} (fp32 master) + {} x {} (optimizer states; Adam keeps 2, an Adafactor-like optimizer \
                 keeps factored second moments, modelled as 0 per parameter) = {} B, all divided by N.",
                p.param_bytes, p.grad_bytes, p.master_bytes, if p.optimizer == Optimizer::Adam { 2 } else { 0 }, p.state_bytes,
                bytes_per_param(p)
            ),
            format!(
                "Activations per device (not sharded): Korthikanti et al. 2022 Eq. 1, L s b h (34 + 5 a s / h) bytes for 16-bit activations without recomputation, with \
                 L = {}, h = {}, a = {}, s = {}, b = {} (the experiment's parameters). The transient all-gathered layer weights of FSDP are not counted.",
                p.layers, p.hidden, p.heads, p.seq, p.micro_batch
            ),
        ],
        tables: vec![memory_table(r)],
        figures: vec![Figure {
            name: "fsdp_memory_vs_devices".into(),
            title: format!("Per-device memory of a {:.2e}-parameter model under FSDP", p.params),
            x_label: "devices N".into(),
            y_label: "memory per device (GB)".into(),
            log_x: true,
            log_y: true,
            series: vec![
                Series::line("total", tot),
                Series::line("sharded states (params + grads + optimizer)", sharded),
            ],
            ..Default::default()
        }],
    }
}

/// Per-device memory (GB) versus the number of devices.
fn memory_table(r: &FsdpResult) -> Table {
    let rows = r
        .memory
        .iter()
        .map(|DevicesMemory { devices, memory: m }| {
            vec![
                devices.to_string(),
                format!("{:.3}", m.params / 1e9),
                format!("{:.3}", m.grads / 1e9),
                format!("{:.3}", m.optimizer / 1e9),
                format!("{:.3}", m.activations / 1e9),
                format!("{:.3}", m.total() / 1e9),
            ]
        })
        .collect();
    Table {
        caption: "Per-device memory (GB) versus number of devices N".into(),
        columns: vec![
            "N".into(),
            "Params (GB)".into(),
            "Grads (GB)".into(),
            "Optimizer + master (GB)".into(),
            "Activations (GB)".into(),
            "Total (GB)".into(),
        ],
        rows,
        notes: Vec::new(),
    }
}

/// What one ring all-reduce shows: bytes sent per worker (mean, max) against 2(N-1)/N x buffer.
struct RingTraffic {
    /// Number of workers N.
    n: f64,
    /// Buffer size, bytes.
    buf_bytes: f64,
    /// Mean bytes sent per worker.
    mean_sent: f64,
    /// Max bytes sent by a worker.
    max_sent: f64,
    /// 2(N-1)/N x buffer bytes.
    theory: f64,
}

impl RingTraffic {
    fn of(r: &RingResult) -> Self {
        let n = r.workers as f64;
        let buf_bytes = r.buffer_bytes as f64;
        Self {
            n,
            buf_bytes,
            mean_sent: r.bytes_sent.iter().map(|&b| b as f64).sum::<f64>() / n,
            max_sent: r.bytes_sent.iter().copied().max().unwrap_or(0) as f64,
            theory: 2.0 * (n - 1.0) / n * buf_bytes,
        }
    }
}

/// The lecture's collective slides beside our ring's and Burn's results and bytes sent.
fn ring_section(r: &FsdpResult, src: &str) -> Section {
    let p = &r.params;
    let traffic: Vec<RingTraffic> = r.ring.iter().map(RingTraffic::of).collect();
    let ratio_pts: Vec<(f64, f64)> = traffic
        .iter()
        .map(|t| (t.n, t.mean_sent / t.buf_bytes))
        .collect();
    let theory_pts: Vec<(f64, f64)> = traffic
        .iter()
        .map(|t| (t.n, 2.0 * (t.n - 1.0) / t.n))
        .collect();
    let first = |v: &[Vec<f32>]| v.first().cloned().unwrap_or_default();
    Section {
        details: None,
        title: "Ring all-reduce = reduce-scatter + all-gather".into(),
        claim: format!(
            "{src}, slides \"Recap: AllReduce Abstraction\" (workers [1, 2, 3] and [1, 0, 1] -> [2, 2, 4]), \"Reduce Scatter Abstraction\" ([1, 2, 3, 4], [1, 0, 1, 1] -> [2, 2], \
             [4, 5]), \"Allgather abstraction\" ([1, 2], [3, 4] -> [1, 2, 3, 4]), \"Ring based Reduction\" (\"Each node has correctly reduced result of one segment!\" \"This is \
             called `reduce_scatter`\") and \"Overall Relations\" (\"Combine both we get Allreduce\")."
        ),
        ours: format!(
            "Our channel-based ring on OS threads reproduces all three slide examples ({:?}, {:?}, {:?}) and all-reduces {} f32 across {:?} workers exactly, as does \
             Burn's collective API (burn-collective, AllReduceStrategy::Ring, one flex CPU peer per thread); each worker of our ring sends {} of the buffer size on \
             average, matching 2(N-1)/N.",
            first(&r.slides.all_reduce), r.slides.reduce_scatter, first(&r.slides.all_gather), p.ring_elems, p.ring_workers,
            ratio_pts.iter().zip(&theory_pts).map(|(a, b)| format!("{:.4} (theory {:.4})", a.1, b.1)).collect::<Vec<_>>().join(", ")
        ),
        notes: vec![
            "Reduce-scatter: in step s = 0..N-2 worker r sends chunk (r-s-1) mod N to r+1 and adds the chunk (r-s-2) mod N received from r-1; after N-1 steps it owns the \
             full sum of chunk r. All-gather then circulates the reduced chunks for N-1 more steps. Chunks are [i L/N, (i+1) L/N), so with L not divisible by N the \
             per-worker count varies slightly around the mean."
                .into(),
            "Burn's collective API returns results but no traffic counts, so bytes are counted in our ring, which runs the same algorithm (reduce-scatter then all-gather, \
             N-1 steps each, N slices); both results are checked against the exact sum (integer-valued inputs make every summation order exact in f32)."
                .into(),
            "Times are for threads on this 2-core CPU; they show the protocols work, not network bandwidth. Our ring: the whole call, threads exchanging Vecs over \
             std::sync::mpsc channels. Burn: from the moment every peer is registered until the last peer has its result; Burn's local server runs the ring's \
             slice transfers and additions itself, one after another, on flex tensors."
                .into(),
        ],
        tables: vec![ring_table(r, &traffic)],
        figures: vec![Figure {
            name: "ring_bytes_per_worker".into(),
            title: "Bytes sent per worker / buffer size, ring all-reduce".into(),
            x_label: "workers N".into(),
            y_label: "bytes sent / buffer bytes".into(),
            log_x: true,
            log_y: false,
            series: vec![Series::scatter("measured", ratio_pts), Series::line("2(N-1)/N", theory_pts)],
            ..Default::default()
        }],
    }
}

/// Bytes sent per worker and times of each ring all-reduce.
fn ring_table(r: &FsdpResult, traffic: &[RingTraffic]) -> Table {
    let rows = r
        .ring
        .iter()
        .zip(traffic)
        .map(|(ring, t)| {
            vec![
                ring.workers.to_string(),
                format!("{:.0}", t.buf_bytes),
                format!("{:.0}", t.mean_sent),
                format!("{:.0}", t.max_sent),
                format!("{:.0}", t.theory),
                format!("{:.4}", t.mean_sent / t.theory),
                format!("{:.2}", ring.our_ring_s * 1e3),
                format!("{:.2}", ring.burn_s * 1e3),
                "yes (both)".into(),
            ]
        })
        .collect();
    Table {
        caption: format!("Ring all-reduce of {} f32 elements", r.params.ring_elems),
        columns: vec![
            "Workers N".into(),
            "Buffer (bytes)".into(),
            "Mean bytes sent/worker".into(),
            "Max bytes sent/worker".into(),
            "2(N-1)/N x buffer".into(),
            "Mean / theory".into(),
            "Time, our ring (ms)".into(),
            "Time, Burn collective (ms)".into(),
            "Exact result".into(),
        ],
        rows,
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::demos::claim_checks::{assert_claims_have_measures, value};

    #[test]
    fn slide_examples() {
        let ar = all_reduce(vec![vec![1.0, 2.0, 3.0], vec![1.0, 0.0, 1.0]]).unwrap();
        for (b, _) in &ar {
            assert_eq!(b, &vec![2.0, 2.0, 4.0]);
        }
        assert_eq!(
            reduce_scatter(vec![vec![1.0, 2.0, 3.0, 4.0], vec![1.0, 0.0, 1.0, 1.0]]).unwrap(),
            vec![vec![2.0, 2.0], vec![4.0, 5.0]]
        );
        for b in all_gather(vec![vec![1.0, 2.0], vec![3.0, 4.0]]).unwrap() {
            assert_eq!(b, vec![1.0, 2.0, 3.0, 4.0]);
        }
    }

    #[test]
    fn all_reduce_many_workers_and_bytes() {
        for n in [1usize, 3, 5, 8] {
            let len = 40;
            let inputs: Vec<Vec<f32>> = (0..n)
                .map(|w| (0..len).map(|i| (i * (w + 1)) as f32).collect())
                .collect();
            let expect: Vec<f32> = (0..len)
                .map(|i| (0..n).map(|w| (i * (w + 1)) as f32).sum())
                .collect();
            let res = all_reduce(inputs).unwrap();
            let total: u64 = res.iter().map(|r| r.1).sum();
            for (b, _) in &res {
                assert_eq!(b, &expect);
            }
            // Every chunk travels N-1 hops in each phase: total = 2 (N-1) * buffer bytes.
            assert_eq!(total, 2 * (n as u64 - 1) * len as u64 * 4);
        }
    }

    #[test]
    fn burn_collective_ring_matches_the_exact_sum() {
        for n in [2usize, 3, 4] {
            let len = 30;
            let inputs: Vec<Vec<f32>> = (0..n)
                .map(|w| (0..len).map(|i| ((i + 1) * (w + 2)) as f32).collect())
                .collect();
            let expect: Vec<f32> = (0..len)
                .map(|i| (0..n).map(|w| ((i + 1) * (w + 2)) as f32).sum())
                .collect();
            let (res, secs) = burn_ring_all_reduce(inputs).unwrap();
            assert!(secs >= 0.0);
            assert_eq!(res.len(), n);
            for b in &res {
                assert_eq!(b, &expect, "{n} peers");
            }
        }
    }

    #[test]
    fn memory_model() {
        let p = FsdpParams::default();
        let m1 = fsdp_memory(&p, 1);
        assert!((m1.params + m1.grads + m1.optimizer - 16.0 * 1.6e9).abs() < 1.0);
        let m64 = fsdp_memory(&p, 64);
        assert!((m64.params + m64.grads + m64.optimizer - 16.0 * 1.6e9 / 64.0).abs() < 1.0);
        assert_eq!(m1.activations, m64.activations);
    }

    #[test]
    fn run_small() {
        let s = render(
            &measure(&FsdpParams {
                ring_elems: 1000,
                ring_workers: vec![2, 4],
                ..Default::default()
            })
            .unwrap(),
            &crate::demos::cited::from_experiment("fsdp"),
        );
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn result_round_trips_through_json_and_renders_the_same() {
        let r = measure(&FsdpParams {
            ring_elems: 1001,
            ring_workers: vec![2, 3],
            ..Default::default()
        })
        .unwrap();
        let back: FsdpResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.ring, r.ring);
        assert_eq!(back.memory, r.memory);
        assert_eq!(
            render(&back, &crate::demos::cited::from_experiment("fsdp")),
            render(&r, &crate::demos::cited::from_experiment("fsdp"))
        );
        // 1001 elements over 3 workers: chunks of 333, 334 and 334 elements.
        assert_eq!(r.ring[1].bytes_sent.iter().sum::<u64>(), 2 * 2 * 1001 * 4);
        // 2 workers: each sends one chunk of each half in each phase, 500 + 501 elements.
        assert_eq!(r.ring[0].bytes_sent, vec![1001 * 4, 1001 * 4]);
    }

    #[test]
    fn measures_answer_the_claims() {
        let r = measure(&FsdpParams {
            ring_elems: 1000,
            ring_workers: vec![2, 3],
            ..Default::default()
        })
        .unwrap();
        let m = assert_claims_have_measures::<Fsdp>("fsdp", r);
        for name in [
            "allreduce_example_max_abs_error",
            "reduce_scatter_example_max_abs_error",
            "allgather_example_max_abs_error",
        ] {
            assert_eq!(value(&m, name), 0.0, "{name}");
        }
        // Every chunk travels N-1 hops per phase: exactly 2(N-1)/N of the buffer on average.
        assert!((value(&m, "ring_traffic_over_rs_plus_ag") - 1.0).abs() < 1e-12);
        // 1 to 64 devices: the sharded states shrink 64x.
        assert!((value(&m, "sharded_state_reduction") - 64.0).abs() < 1e-9);
        assert_eq!(slide_error(&[vec![1.0]], &[&[1.0, 2.0]]), f64::INFINITY);
        assert_eq!(slide_error(&[vec![1.0, 2.5]], &[&[1.0, 2.0]]), 0.5);
    }
}
