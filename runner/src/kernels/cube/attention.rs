//! The memory-efficient causal attention (FlashAttention-2, Dao 2023) as CubeCL kernels: the
//! same algorithms and the same kept tensors as [`crate::model::attention`]'s composed form
//! (the output `O` and the per-row log-sum-exp `L` of the scaled scores), with the products,
//! the softmax statistics and the accumulators in f32 whatever the inputs' dtype.
//!
//! One unit per row, the rows of a block in one cube, the other operand's tile in shared
//! memory (read once per cube from device memory, converted to f32):
//!
//! - **forward** (Algorithm 1): a cube per `(batch · head, block of queries)`; for each key
//!   tile at or below the diagonal, the tile's scores, their maximum, one rescale of the
//!   running sum `l` and accumulator, then `acc += P V`; `O = acc / l`, `L = m + ln l`;
//! - **backward** (Algorithm 2), two kernels with no atomics: `dQ` (a cube per block of
//!   queries, over the key tiles at or below it; it also writes `D = rowsum(dO ∘ O)`), then
//!   `dK`, `dV` (a cube per block of keys, over the query tiles at or after it), each score
//!   recomputed from `Q`, `K` and `L`: `P = exp(S - L)`, `dV += Pᵀ dO`,
//!   `dS = P ∘ (dO Vᵀ - D)`, `dQ += dS K / √d`, `dK += dSᵀ Q / √d`.
//!
//! The products run on CUDA cores, not tensor cores; the composed form is about 17 Burn
//! operations per pair of tiles forward.

use super::{f32_tensor, like};
use burn::tensor::TensorMetadata;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::CubeDim;

/// Below every score: the masked entries' score (WGSL has no `-inf` literal).
const MASKED: f32 = -1.0e30;
/// A score above this is a real one.
const REAL: f32 = -1.0e29;

/// This unit's row of the block (`CUBE_POS_X`-th block of `block` rows), and the row it reads:
/// the same, or the last row for a unit past the end (it reads, takes part in the barriers and
/// writes nothing).
#[cube]
fn block_row(seq: usize, block: usize) -> (usize, usize) {
    let row = CUBE_POS_X as usize * block + UNIT_POS as usize;
    let mut read_row = row;
    if row >= seq {
        read_row = seq - 1;
    }
    (row, read_row)
}

/// Loads rows `r0 .. r0 + block` of `a` (times `scale_a`) and of `b` into `a_tile` and `b_tile`
/// (`[block, d]` f32, zeros past `seq`), all units of the cube together, then waits for them.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_tiles<F: Float>(
    a: &Tensor<F>,
    b: &Tensor<F>,
    a_tile: &mut SharedMemory<f32>,
    b_tile: &mut SharedMemory<f32>,
    base: usize,
    r0: usize,
    seq: usize,
    scale_a: f32,
    #[comptime] d: usize,
    #[comptime] block: usize,
) {
    let mut e = UNIT_POS as usize;
    while e < block * d {
        let row = r0 + e / d;
        let mut av = 0.0f32;
        let mut bv = 0.0f32;
        if row < seq {
            av = f32::cast_from(a[base + row * d + e % d]) * scale_a;
            bv = f32::cast_from(b[base + row * d + e % d]);
        }
        a_tile[e] = av;
        b_tile[e] = bv;
        e += CUBE_DIM as usize;
    }
    sync_cube();
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn forward_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    out: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    seq: usize,
    scale: f32,
    #[comptime] d: usize,
    #[comptime] block: usize,
    #[define(F)] _dtype: StorageType,
) {
    let bh = CUBE_POS_Y as usize;
    let (row, read_row) = block_row(seq, block);
    let base = bh * seq * d;
    let mut ks = SharedMemory::<f32>::new(block * d);
    let mut vs = SharedMemory::<f32>::new(block * d);
    let mut qr = Array::<f32>::new(d);
    let mut acc = Array::<f32>::new(d);
    let mut st = Array::<f32>::new(block);
    for c in 0..d {
        qr[c] = f32::cast_from(q[base + read_row * d + c]) * scale;
        acc[c] = 0.0;
    }
    let mut m = f32::new(MASKED);
    let mut l = 0.0f32;
    let mut end = (CUBE_POS_X as usize + 1) * block;
    if end > seq {
        end = seq;
    }
    let mut c0 = 0usize;
    while c0 < end {
        load_tiles::<F>(k, v, &mut ks, &mut vs, base, c0, seq, 1.0, d, block);
        let mut tile_max = f32::new(MASKED);
        for j in 0..block {
            let key = c0 + j;
            let mut s = f32::new(MASKED);
            if key <= read_row {
                let mut dot = 0.0f32;
                for c in 0..d {
                    dot += qr[c] * ks[j * d + c];
                }
                s = dot;
            }
            st[j] = s;
            if s > tile_max {
                tile_max = s;
            }
        }
        let mut m_new = m;
        if tile_max > m_new {
            m_new = tile_max;
        }
        let alpha = f32::exp(m - m_new);
        l *= alpha;
        for c in 0..d {
            acc[c] *= alpha;
        }
        for j in 0..block {
            if st[j] > f32::new(REAL) {
                let p = f32::exp(st[j] - m_new);
                l += p;
                for c in 0..d {
                    acc[c] += p * vs[j * d + c];
                }
            }
        }
        m = m_new;
        sync_cube();
        c0 += block;
    }
    if row < seq {
        for c in 0..d {
            out[base + row * d + c] = F::cast_from(acc[c] / l);
        }
        lse[bh * seq + row] = m + f32::ln(l);
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_dq_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    out: &Tensor<F>,
    grad_out: &Tensor<F>,
    lse: &Tensor<f32>,
    dq: &mut Tensor<F>,
    delta: &mut Tensor<f32>,
    seq: usize,
    scale: f32,
    #[comptime] d: usize,
    #[comptime] block: usize,
    #[define(F)] _dtype: StorageType,
) {
    let bh = CUBE_POS_Y as usize;
    let (row, read_row) = block_row(seq, block);
    let base = bh * seq * d;
    let mut ks = SharedMemory::<f32>::new(block * d);
    let mut vs = SharedMemory::<f32>::new(block * d);
    let mut qr = Array::<f32>::new(d);
    let mut gr = Array::<f32>::new(d);
    let mut acc = Array::<f32>::new(d);
    let mut dd = 0.0f32;
    for c in 0..d {
        let at = base + read_row * d + c;
        qr[c] = f32::cast_from(q[at]) * scale;
        gr[c] = f32::cast_from(grad_out[at]);
        dd += gr[c] * f32::cast_from(out[at]);
        acc[c] = 0.0;
    }
    let lr = lse[bh * seq + read_row];
    let mut end = (CUBE_POS_X as usize + 1) * block;
    if end > seq {
        end = seq;
    }
    let mut c0 = 0usize;
    while c0 < end {
        load_tiles::<F>(k, v, &mut ks, &mut vs, base, c0, seq, 1.0, d, block);
        for j in 0..block {
            if c0 + j <= read_row {
                let mut s = 0.0f32;
                let mut dp = 0.0f32;
                for c in 0..d {
                    s += qr[c] * ks[j * d + c];
                    dp += gr[c] * vs[j * d + c];
                }
                let ds = f32::exp(s - lr) * (dp - dd);
                for c in 0..d {
                    acc[c] += ds * ks[j * d + c];
                }
            }
        }
        sync_cube();
        c0 += block;
    }
    if row < seq {
        for c in 0..d {
            dq[base + row * d + c] = F::cast_from(acc[c] * scale);
        }
        delta[bh * seq + row] = dd;
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_dkv_kernel<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    grad_out: &Tensor<F>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    dk: &mut Tensor<F>,
    dv: &mut Tensor<F>,
    seq: usize,
    scale: f32,
    #[comptime] d: usize,
    #[comptime] block: usize,
    #[define(F)] _dtype: StorageType,
) {
    let bh = CUBE_POS_Y as usize;
    let first = CUBE_POS_X as usize * block;
    let key = first + UNIT_POS as usize;
    let mut read_key = key;
    if key >= seq {
        read_key = seq - 1;
    }
    let base = bh * seq * d;
    let mut qs = SharedMemory::<f32>::new(block * d);
    let mut gs = SharedMemory::<f32>::new(block * d);
    let mut ls = SharedMemory::<f32>::new(block);
    let mut ds_row = SharedMemory::<f32>::new(block);
    let mut kr = Array::<f32>::new(d);
    let mut vr = Array::<f32>::new(d);
    let mut dk_acc = Array::<f32>::new(d);
    let mut dv_acc = Array::<f32>::new(d);
    for c in 0..d {
        kr[c] = f32::cast_from(k[base + read_key * d + c]);
        vr[c] = f32::cast_from(v[base + read_key * d + c]);
        dk_acc[c] = 0.0;
        dv_acc[c] = 0.0;
    }
    let mut r0 = first;
    while r0 < seq {
        let u = UNIT_POS as usize;
        if u < block {
            let qrow = r0 + u;
            let mut lv = 0.0f32;
            let mut dv0 = 0.0f32;
            if qrow < seq {
                lv = lse[bh * seq + qrow];
                dv0 = delta[bh * seq + qrow];
            }
            ls[u] = lv;
            ds_row[u] = dv0;
        }
        load_tiles::<F>(
            q, grad_out, &mut qs, &mut gs, base, r0, seq, scale, d, block,
        );
        for r in 0..block {
            let qrow = r0 + r;
            if qrow < seq && qrow >= read_key {
                let mut s = 0.0f32;
                let mut dp = 0.0f32;
                for c in 0..d {
                    s += qs[r * d + c] * kr[c];
                    dp += gs[r * d + c] * vr[c];
                }
                let p = f32::exp(s - ls[r]);
                let ds = p * (dp - ds_row[r]);
                for c in 0..d {
                    dv_acc[c] += p * gs[r * d + c];
                    dk_acc[c] += ds * qs[r * d + c];
                }
            }
        }
        sync_cube();
        r0 += block;
    }
    if key < seq {
        for c in 0..d {
            dk[base + key * d + c] = F::cast_from(dk_acc[c]);
            dv[base + key * d + c] = F::cast_from(dv_acc[c]);
        }
    }
}

/// Rows per cube: 32, halved until two `[rows, d_head]` f32 tiles fit the device's shared
/// memory (48 KiB on CUDA, 16 KiB under wgpu's default limits), at least 4.
fn block_rows<R: CubeRuntime>(tensor: &CubeTensor<R>, d: usize) -> usize {
    let shared = tensor.client.properties().hardware.max_shared_memory_size;
    let mut block = 32usize;
    while block > 4 && 2 * block * d * 4 + 2 * block * 4 > shared {
        block /= 2;
    }
    block
}

/// `(out, lse)`: causal `softmax(Q Kᵀ / √d) V` of `q`, `k`, `v` `[batch, heads, seq, d_head]`
/// (one float dtype), in that dtype, and the per-row log-sum-exp of the scaled scores
/// `[batch, heads, seq, 1]` in f32.
pub fn forward<R: CubeRuntime>(
    q: CubeTensor<R>,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [q, k, v] = [q, k, v].map(into_contiguous);
    let [b, h, t, d] = q.shape().dims::<4>();
    let out = like(&q);
    let lse = f32_tensor(&q, vec![b, h, t, 1]);
    let block = block_rows(&q, d);
    let client = q.client.clone();
    let dtype = q.dtype.into();
    forward_kernel::launch::<R>(
        &client,
        CubeCount::Static(t.div_ceil(block) as u32, (b * h) as u32, 1),
        CubeDim::new_1d(block as u32),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        t,
        1.0 / (d as f32).sqrt(),
        d,
        block,
        dtype,
    );
    (out, lse)
}

/// `(dq, dk, dv)` in `q`'s dtype from `q`, `k`, `v`, `out`, `grad_out` `[batch, heads, seq,
/// d_head]` and `lse` `[batch, heads, seq, 1]` (f32, from [`forward`]).
pub fn backward<R: CubeRuntime>(
    [q, k, v, out, grad_out]: [CubeTensor<R>; 5],
    lse: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let [q, k, v, out, grad_out, lse] = [q, k, v, out, grad_out, lse].map(into_contiguous);
    let [b, h, t, d] = q.shape().dims::<4>();
    let (dq, dk, dv) = (like(&q), like(&q), like(&q));
    let delta = f32_tensor(&q, vec![b, h, t, 1]);
    let block = block_rows(&q, d);
    let client = q.client.clone();
    let dtype: StorageType = q.dtype.into();
    let count = CubeCount::Static(t.div_ceil(block) as u32, (b * h) as u32, 1);
    let scale = 1.0 / (d as f32).sqrt();
    backward_dq_kernel::launch::<R>(
        &client,
        count.clone(),
        CubeDim::new_1d(block as u32),
        q.clone().into_tensor_arg(),
        k.clone().into_tensor_arg(),
        v.clone().into_tensor_arg(),
        out.into_tensor_arg(),
        grad_out.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        dq.clone().into_tensor_arg(),
        delta.clone().into_tensor_arg(),
        t,
        scale,
        d,
        block,
        dtype,
    );
    backward_dkv_kernel::launch::<R>(
        &client,
        count,
        CubeDim::new_1d(block as u32),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        grad_out.into_tensor_arg(),
        lse.into_tensor_arg(),
        delta.into_tensor_arg(),
        dk.clone().into_tensor_arg(),
        dv.clone().into_tensor_arg(),
        t,
        scale,
        d,
        block,
        dtype,
    );
    (dq, dk, dv)
}
