//! Running the scalar checkpointing study: the post's map with full storage and with every K-th
//! value kept, and the reverse-mode derivative with segment recomputation.

use super::*;

fn alloc_f64(n: u64, what: &'static str) -> Result<Vec<f64>, DemoError> {
    let mut v: Vec<f64> = Vec::new();
    let n_us = usize::try_from(n).map_err(|_| DemoError::Alloc {
        bytes: n.saturating_mul(8),
        what,
    })?;
    v.try_reserve_exact(n_us).map_err(|_| DemoError::Alloc {
        bytes: n.saturating_mul(8),
        what,
    })?;
    Ok(v)
}

/// Full storage, as `compute_with_storage` in the post: keeps all `depth + 1` values.
/// Returns (x_depth, bytes held by the buffer = capacity * 8).
pub fn compute_with_storage(x0: f64, c: f64, depth: u64) -> Result<(f64, u64), DemoError> {
    let mut v = alloc_f64(depth + 1, "full storage of intermediates")?;
    v.push(x0);
    let mut x = x0;
    for _ in 0..depth {
        x = x * x + c;
        v.push(x);
    }
    let bytes = (v.capacity() * std::mem::size_of::<f64>()) as u64;
    Ok((*std::hint::black_box(&v).last().unwrap_or(&x0), bytes))
}

/// Checkpointed forward pass, as in the post: keeps x0 and every K-th value (and the last one).
/// Returns (x_depth, bytes held by the checkpoint buffer = capacity * 8).
///
/// It walks the intervals without building a [`every_k`] segment list: the list would hold
/// 24 B per segment against the 8 B checkpoint this demo measures, and allocating it would
/// enter the timings.
pub fn compute_with_checkpoints(
    x0: f64,
    c: f64,
    depth: u64,
    k: u64,
) -> Result<(f64, u64), DemoError> {
    ensure(k > 0, "ks", "K must be positive")?;
    let n_ckpt = depth.div_ceil(k) + 1;
    let mut ck = alloc_f64(n_ckpt, "checkpoints")?;
    ck.push(x0);
    let mut i = 0;
    let mut val = x0;
    while i < depth {
        let steps = k.min(depth - i);
        for _ in 0..steps {
            val = val * val + c;
        }
        ck.push(val);
        i += steps;
    }
    let bytes = (ck.capacity() * std::mem::size_of::<f64>()) as u64;
    Ok((*std::hint::black_box(&ck).last().unwrap_or(&x0), bytes))
}

/// First step i (x_i, with x_0 = `x0`) at which `x <- x*x + c` is +inf, searching up to
/// `max_steps`.
pub fn overflow_step(x0: f64, c: f64, max_steps: u64) -> Option<u64> {
    let mut x = x0;
    for i in 1..=max_steps {
        x = x * x + c;
        if x.is_infinite() {
            return Some(i);
        }
    }
    None
}

/// Result of a derivative computation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GradResult {
    /// x_n (may be infinite on the post's map; stored as "inf" then).
    #[serde(with = "nonfinite")]
    pub value: f64,
    /// dx_n/dx_0 = prod_{i<n} 2 x_i (may be infinite or NaN for maps that overflow).
    #[serde(with = "nonfinite")]
    pub grad: f64,
    /// Peak bytes of stored values (buffer capacities * 8).
    pub bytes: u64,
    /// Number of recurrence steps evaluated (forward + recomputation).
    pub steps_evaluated: u64,
}

/// Reverse mode with full storage: store x_0..x_{n-1}, then sweep back multiplying by 2 x_i.
pub fn grad_full_storage(x0: f64, c: f64, depth: u64) -> Result<GradResult, DemoError> {
    let mut xs = alloc_f64(depth.max(1), "full storage for the derivative")?;
    let mut x = x0;
    for _ in 0..depth {
        xs.push(x);
        x = x * x + c;
    }
    let mut g = 1.0f64;
    for &xi in xs.iter().rev() {
        g *= 2.0 * xi;
    }
    Ok(GradResult {
        value: x,
        grad: g,
        bytes: (xs.capacity() * 8) as u64,
        steps_evaluated: depth,
    })
}

/// Reverse mode with checkpoints every `k` steps: the chain is cut into the segments of
/// [`every_k`]; the forward pass keeps each segment's input x_0, x_k, x_2k, ...; the backward
/// sweep, segment by segment from the last, recomputes the segment's values from its checkpoint
/// into a k-element buffer and multiplies by 2 x_i in reverse order. It performs the same
/// multiplications in the same order as [`grad_full_storage`], so the result is bit-identical.
/// `bytes` counts the checkpoints and the segment buffer (the stored values), not the segment
/// list (the schedule, 24 B per segment).
pub fn grad_checkpointed(x0: f64, c: f64, depth: u64, k: u64) -> Result<GradResult, DemoError> {
    ensure(k > 0, "grad_k", "K must be positive")?;
    let steps = usize::try_from(depth).map_err(|_| DemoError::Alloc {
        bytes: depth.saturating_mul(8),
        what: "derivative checkpoints",
    })?;
    let segments = every_k(steps, usize::try_from(k).unwrap_or(usize::MAX));
    let mut ck = alloc_f64((segments.len() as u64).max(1), "derivative checkpoints")?;
    let mut x = x0;
    for s in &segments {
        ck.push(x);
        for _ in s.range() {
            x = x * x + c;
        }
    }
    let mut seg = alloc_f64(k.min(depth).max(1), "segment recomputation buffer")?;
    let mut g = 1.0f64;
    let mut recomputed = 0u64;
    for (s, &checkpoint) in segments.iter().zip(&ck).rev() {
        seg.clear();
        let mut y = checkpoint;
        for _ in s.range() {
            seg.push(y);
            y = y * y + c;
        }
        recomputed += s.range().len() as u64;
        for &xi in seg.iter().rev() {
            g *= 2.0 * xi;
        }
    }
    let bytes = ((ck.capacity() + seg.capacity()) * 8) as u64;
    Ok(GradResult {
        value: x,
        grad: g,
        bytes,
        steps_evaluated: depth + recomputed,
    })
}

/// Forward-mode derivative (d_{i+1} = 2 x_i d_i), an independent cross-check (different
/// multiplication order, so equal only up to rounding).
pub fn grad_forward_mode(x0: f64, c: f64, depth: u64) -> f64 {
    let (mut x, mut d) = (x0, 1.0f64);
    for _ in 0..depth {
        d *= 2.0 * x;
        x = x * x + c;
    }
    d
}

/// Runs the study: memory/time per K versus full storage, the overflow step, and the
/// checkpointed reverse-mode derivative.
///
/// # Errors
/// [`DemoError::InvalidParam`] for a zero depth, an empty or zero K, or non-finite start values;
/// [`DemoError::Alloc`] when full storage does not fit in memory; [`DemoError::Check`] when a
/// checkpointed result differs from full storage.
pub fn measure(p: &CheckpointParams) -> Result<CheckpointResult, DemoError> {
    validate(p)?;
    Ok(CheckpointResult {
        params: p.clone(),
        forward: measure_forward(p)?,
        derivative: measure_derivative(p)?,
    })
}

/// [`median_time`] of a step that can fail: the first failure, or the median time and the last
/// result.
fn median_time_fallible<T>(
    repeats: usize,
    mut f: impl FnMut() -> Result<T, DemoError>,
) -> Result<(f64, T), DemoError> {
    let mut err = None;
    let (t, last) = median_time(repeats, || match f() {
        Ok(v) => Some(v),
        Err(e) => {
            err.get_or_insert(e);
            None
        }
    });
    match (err, last) {
        (Some(e), _) => Err(e),
        (None, last) => Ok((
            t,
            last.expect("no run failed, so the last run has a result"),
        )),
    }
}

/// The post's forward demo: full storage, then checkpoints at every K (each checked to reach the
/// same final value), the largest K on the finite map, the overflow step.
fn measure_forward(p: &CheckpointParams) -> Result<ForwardResult, DemoError> {
    tracing::info!(depth = p.depth, "scalar checkpointing: full storage");
    let (storage_seconds, (v_store, storage_bytes)) =
        median_time_fallible(p.repeats, || compute_with_storage(p.x0, POST_C, p.depth))?;
    let interval = |k: u64| -> Result<IntervalResult, DemoError> {
        let (seconds, (v, bytes)) = median_time_fallible(p.repeats, || {
            compute_with_checkpoints(p.x0, POST_C, p.depth, k)
        })?;
        if v.to_bits() != v_store.to_bits() {
            return Err(DemoError::Check(format!(
                "K={k}: final value {v} != stored {v_store}"
            )));
        }
        Ok(IntervalResult { k, bytes, seconds })
    };
    let intervals =
        p.ks.iter()
            .map(|&k| interval(k))
            .collect::<Result<Vec<_>, _>>()?;
    let beyond = p
        .ks_beyond
        .iter()
        .map(|&k| interval(k))
        .collect::<Result<Vec<_>, _>>()?;
    // Same loop on a map that stays finite: shows the timing does not depend on the inf values.
    let k_max = *p.ks.iter().max().unwrap_or(&1);
    let (finite_map_seconds, _) = median_time(p.repeats, || {
        compute_with_checkpoints(FINITE_X0, FINITE_C, p.depth, k_max)
            .map(|r| r.0)
            .unwrap_or(f64::NAN)
    });
    Ok(ForwardResult {
        storage_bytes,
        storage_seconds,
        intervals,
        beyond,
        finite_map_seconds,
        overflow_step: overflow_step(p.x0, POST_C, POST_SEARCH_STEPS),
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    })
}

/// The derivative of `x <- x*x + grad_c` by full storage, by checkpoints (checked bit for bit)
/// and by forward mode, then the same on the post's map.
fn measure_derivative(p: &CheckpointParams) -> Result<DerivativeResult, DemoError> {
    let k = if p.grad_k == 0 {
        ((p.grad_depth as f64).sqrt().round() as u64).max(1)
    } else {
        p.grad_k
    };
    let (full_storage_seconds, full) = median_time_fallible(p.repeats, || {
        grad_full_storage(p.grad_x0, p.grad_c, p.grad_depth)
    })?;
    let (checkpointed_seconds, ck) = median_time_fallible(p.repeats, || {
        grad_checkpointed(p.grad_x0, p.grad_c, p.grad_depth, k)
    })?;
    if ck.grad.to_bits() != full.grad.to_bits() || ck.value.to_bits() != full.value.to_bits() {
        return Err(DemoError::Check(format!(
            "checkpointed derivative {} != full-storage {}",
            ck.grad, full.grad
        )));
    }
    Ok(DerivativeResult {
        k,
        full_storage: full,
        full_storage_seconds,
        checkpointed: ck,
        checkpointed_seconds,
        forward_mode_grad: grad_forward_mode(p.grad_x0, p.grad_c, p.grad_depth),
        post_map: measure_post_map(p.x0)?,
    })
}

/// The post's own map from `x0` at the largest depth whose derivative is finite, by full storage
/// and by checkpoints every round(sqrt(n)) steps (checked bit for bit).
fn measure_post_map(x0: f64) -> Result<PostMapDerivative, DemoError> {
    let mut depth = 1u64;
    while depth < POST_SEARCH_STEPS && grad_forward_mode(x0, POST_C, depth + 1).is_finite() {
        depth += 1;
    }
    let k = ((depth as f64).sqrt().round() as u64).max(1);
    let full_storage = grad_full_storage(x0, POST_C, depth)?;
    let checkpointed = grad_checkpointed(x0, POST_C, depth, k)?;
    if full_storage.grad.to_bits() != checkpointed.grad.to_bits() {
        return Err(DemoError::Check(format!(
            "post map: checkpointed derivative {} != full {}",
            checkpointed.grad, full_storage.grad
        )));
    }
    Ok(PostMapDerivative {
        depth,
        k,
        full_storage,
        checkpointed,
    })
}
