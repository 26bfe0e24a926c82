//! The FSDP study's report sections from a stored result: per-device memory and the ring
//! collectives, each beside the lecture's claim.

use super::*;

/// The study's sections: per-device memory under FSDP, then the ring collectives.
pub fn sections(r: &FsdpResult, cited: &Cited<CiteAs>) -> Vec<Section> {
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
pub(super) struct RingTraffic {
    /// Number of workers N.
    pub(super) n: f64,
    /// Buffer size, bytes.
    pub(super) buf_bytes: f64,
    /// Mean bytes sent per worker.
    pub(super) mean_sent: f64,
    /// Max bytes sent by a worker.
    pub(super) max_sent: f64,
    /// 2(N-1)/N x buffer bytes.
    pub(super) theory: f64,
}

impl RingTraffic {
    pub(super) fn of(r: &RingResult) -> Self {
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
