//! The ring collectives over worker threads: reduce-scatter, all-gather and all-reduce, in
//! plain Rust and with Burn tensors.

use super::*;

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
