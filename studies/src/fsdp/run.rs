//! Running the FSDP study: the per-device memory model, the lecture's slide examples and the
//! timed ring all-reduce.

use super::*;

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
