//! The memory-efficient causal attention as one CPU kernel per direction: FlashAttention-2's
//! forward and backward (Dao 2023, "FlashAttention-2", Algorithms 1 and 2) on contiguous
//! `[batch · heads, seq, d_head]` slices, parallel over `(batch, head)` on rayon's pool.
//!
//! [`crate::model::attention`] composes the same algorithm from Burn tensor operations, tile by
//! tile; on flex every one of those operations is a fresh `[batch, heads, rows, cols]` tensor,
//! a parallel section of its own and, for 16-bit inputs, a conversion. Here each `(batch, head)`
//! is one task: its `Q`, `K`, `V` (and `O`, `dO`) are widened to f32 once, every tile's
//! products run on this thread with the gemm crate (the f32 product flex itself uses), and the
//! softmax, masking and `dS` are vectorized loops over the tile, in f32 whatever the inputs'
//! dtype (FlashAttention's f32 statistics; the products in f32 as the composed form on flex).
//! The tile sizes are the spec's ([`Tiles`]), clamped to the sequence, so the algorithm, its
//! order of summation over key tiles and what it keeps are the composed form's; the transient
//! memory is one task's scratch per thread instead of `[batch, heads, query, key]` tensors.
//! Inside a tile, blocks of `ROW_BLOCK` (32) query rows compute only the key columns their last
//! row sees (the masked rest has probability 0 and is skipped, not computed).
//!
//! - forward: for each query tile, the key tiles at or below the diagonal in order with the
//!   online softmax (running row maximum `m`, normalizer `l`, accumulator rescaled by
//!   `e^{m_old - m_new}`); the output `O = acc / l` and the per-row log-sum-exp `L = m + ln l`;
//! - backward: `D = rowsum(dO ∘ O)`; for each key tile and each query tile that sees it,
//!   `P = e^{S - L}`, `dV += Pᵀ dO`, `dP = dO Vᵀ`, `dS = P ∘ (dP - D)`, `dQ += dS K`,
//!   `dK += dSᵀ Q`; `dQ` and `dK` times `1/sqrt(d_head)` at the end.

use super::dispatch;
use super::gelu::exp;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use memwall_core::strategy::Tiles;
use rayon::prelude::*;

/// An element type the kernel reads and writes: f32 directly, bf16 and f16 widened to f32 per
/// `(batch, head)` and the results rounded once to nearest even.
pub trait Element: Copy + Send + Sync + 'static {
    /// `dst ← src` in f32 (same lengths).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// `dst ← src` rounded to `Self` (same lengths).
    fn narrow(src: &[f32], dst: &mut [Self]);
}

impl Element for f32 {
    fn widen(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn narrow(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl Element for bf16 {
    fn widen(src: &[bf16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [bf16]) {
        dst.convert_from_f32_slice(src);
    }
}

impl Element for f16 {
    fn widen(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src);
    }
}

/// The problem's sizes: `heads` independent attentions (`batch · heads`) of `seq` tokens with
/// `d_head` features each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// `batch · heads`.
    pub heads: usize,
    /// Sequence length (tokens).
    pub seq: usize,
    /// Features per head.
    pub d_head: usize,
}

impl Dims {
    fn per_head(&self) -> usize {
        self.seq * self.d_head
    }

    /// The tile sizes clamped to `1..=seq`.
    fn tiles(&self, tiles: Tiles) -> (usize, usize) {
        let clamp = |x: usize| x.clamp(1, self.seq.max(1));
        (clamp(tiles.query), clamp(tiles.key))
    }

    /// Checks the arrays' lengths (`[heads, seq, d_head]` each, `lse` `[heads, seq]`) and gives
    /// `(seq · d_head, query tile, key tile, 1/sqrt(d_head))`, or `None` when there is nothing
    /// to compute. Panics on a wrong length.
    fn prepare(
        &self,
        arrays: &[(&str, usize)],
        lse: usize,
        tiles: Tiles,
    ) -> Option<(usize, usize, usize, f32)> {
        for &(what, len) in arrays {
            self.check(what, len);
        }
        assert_eq!(lse, self.heads * self.seq, "attention kernel: lse");
        let n = self.per_head();
        let (bq, bk) = self.tiles(tiles);
        let scale = (1.0 / (self.d_head as f64).sqrt()) as f32;
        (n > 0).then_some((n, bq, bk, scale))
    }

    fn check(&self, what: &str, len: usize) {
        assert_eq!(
            len,
            self.heads * self.per_head(),
            "attention kernel: {what} has {len} elements, not batch·heads·seq·d_head = {}",
            self.heads * self.per_head()
        );
    }
}

/// Starts and lengths of the tiles of `size` over `0..len`.
fn tiles_of(len: usize, size: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len).step_by(size).map(move |s| (s, size.min(len - s)))
}

/// Causal attention forward: `out ← softmax(Q Kᵀ / sqrt(d_head), causal) V` and
/// `lse ← ` the per-row log-sum-exp of the scaled scores (f32).
///
/// Shapes: `q`, `k`, `v`, `out` `[heads, seq, d_head]` (row-major, `dims`), `lse`
/// `[heads, seq]`. Panics on other lengths.
pub fn forward<E: Element>(
    q: &[E],
    k: &[E],
    v: &[E],
    out: &mut [E],
    lse: &mut [f32],
    dims: Dims,
    tiles: Tiles,
) {
    let Some((n, bq, bk, scale)) = dims.prepare(
        &[
            ("q", q.len()),
            ("k", k.len()),
            ("v", v.len()),
            ("out", out.len()),
        ],
        lse.len(),
        tiles,
    ) else {
        return;
    };
    out.par_chunks_mut(n)
        .zip(lse.par_chunks_mut(dims.seq))
        .enumerate()
        .for_each_init(
            || Scratch::new(5, n, bq * bk, 3 * bq),
            |s, (h, (o, l))| {
                let at = h * n..(h + 1) * n;
                let Scratch { arrays, tile, rows } = s;
                let [qf, kf, vf, of, acc] = arrays.as_mut_slice() else {
                    unreachable!("three inputs, the output and the accumulator")
                };
                E::widen(&q[at.clone()], qf);
                E::widen(&k[at.clone()], kf);
                E::widen(&v[at], vf);
                head_forward(
                    qf,
                    kf,
                    vf,
                    of,
                    l,
                    tile,
                    acc,
                    rows,
                    dims.seq,
                    dims.d_head,
                    bq,
                    bk,
                    scale,
                );
                E::narrow(of, o);
            },
        );
}

/// Causal attention backward: the gradients of `Q`, `K`, `V` given `dO` (accumulated in f32,
/// rounded once to `E`).
///
/// Shapes: `q`, `k`, `v`, `out`, `grad_out`, `dq`, `dk`, `dv` `[heads, seq, d_head]`, `lse`
/// `[heads, seq]` (from [`forward`]). Panics on other lengths.
#[allow(clippy::too_many_arguments)]
pub fn backward<E: Element>(
    q: &[E],
    k: &[E],
    v: &[E],
    out: &[E],
    lse: &[f32],
    grad_out: &[E],
    (dq, dk, dv): (&mut [E], &mut [E], &mut [E]),
    dims: Dims,
    tiles: Tiles,
) {
    let Some((n, bq, bk, scale)) = dims.prepare(
        &[
            ("q", q.len()),
            ("k", k.len()),
            ("v", v.len()),
            ("out", out.len()),
            ("grad_out", grad_out.len()),
            ("dq", dq.len()),
            ("dk", dk.len()),
            ("dv", dv.len()),
        ],
        lse.len(),
        tiles,
    ) else {
        return;
    };
    dq.par_chunks_mut(n)
        .zip(dk.par_chunks_mut(n))
        .zip(dv.par_chunks_mut(n))
        .enumerate()
        .for_each_init(
            || Scratch::new(8, n, 2 * bq * bk, dims.seq),
            |s, (h, ((dq_h, dk_h), dv_h))| {
                let at = h * n..(h + 1) * n;
                let Scratch { arrays, tile, rows } = s;
                let [qf, kf, vf, of, gf, dqf, dkf, dvf] = arrays.as_mut_slice() else {
                    unreachable!("five inputs and three gradients")
                };
                E::widen(&q[at.clone()], qf);
                E::widen(&k[at.clone()], kf);
                E::widen(&v[at.clone()], vf);
                E::widen(&out[at.clone()], of);
                E::widen(&grad_out[at], gf);
                let (p, dp) = tile.split_at_mut(bq * bk);
                head_backward(
                    qf,
                    kf,
                    vf,
                    of,
                    gf,
                    &lse[h * dims.seq..(h + 1) * dims.seq],
                    (dqf, dkf, dvf),
                    (p, dp),
                    rows,
                    dims.seq,
                    dims.d_head,
                    bq,
                    bk,
                    scale,
                );
                E::narrow(dqf, dq_h);
                E::narrow(dkf, dk_h);
                E::narrow(dvf, dv_h);
            },
        );
}

/// One task's f32 buffers, allocated once per rayon task and reused for every head it runs:
/// `count` per-head arrays (`seq · d_head` each: the widened inputs, the output or gradients,
/// the forward's accumulator), the score-sized tiles and per-row statistics.
struct Scratch {
    arrays: Vec<Vec<f32>>,
    tile: Vec<f32>,
    rows: Vec<f32>,
}

impl Scratch {
    fn new(count: usize, per_head: usize, tile: usize, rows: usize) -> Self {
        Scratch {
            arrays: (0..count).map(|_| vec![0f32; per_head]).collect(),
            tile: vec![0f32; tile],
            rows: vec![0f32; rows],
        }
    }
}

/// `dst[m × n] (+)= alpha · lhs[m × k] · rhs[k × n]` on this thread with the gemm crate; each
/// matrix given by its pointer, row stride and column stride (elements).
///
/// # Safety
/// Every `(row, col)` index within the sizes, through the strides, lies inside its slice's
/// allocation; `dst` does not overlap `lhs` or `rhs`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn product(
    (m, n, k): (usize, usize, usize),
    dst: (*mut f32, usize, usize),
    accumulate: bool,
    lhs: (*const f32, usize, usize),
    rhs: (*const f32, usize, usize),
    alpha: f32,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst.0,
        dst.2 as isize,
        dst.1 as isize,
        accumulate,
        lhs.0,
        lhs.2 as isize,
        lhs.1 as isize,
        rhs.0,
        rhs.2 as isize,
        rhs.1 as isize,
        1.0,
        alpha,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// `tile[nr × nc] ← alpha · Q[r0..r0+nr] K[c0..c0+nc]ᵀ` for one head's row-major `q`, `k`
/// (`d` features).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn scores(
    q: &[f32],
    k: &[f32],
    tile: &mut [f32],
    (r0, nr): (usize, usize),
    (c0, nc): (usize, usize),
    d: usize,
    alpha: f32,
) {
    assert!((r0 + nr) * d <= q.len() && (c0 + nc) * d <= k.len() && nr * nc <= tile.len());
    // SAFETY: the bounds were just checked; the tile is its own buffer.
    unsafe {
        product(
            (nr, nc, d),
            (tile.as_mut_ptr(), nc, 1),
            false,
            (q[r0 * d..].as_ptr(), d, 1),
            (k[c0 * d..].as_ptr(), 1, d),
            alpha,
        )
    }
}

/// Query rows per block inside a tile: a block computes only the key columns its last row
/// sees, so a tile on the diagonal skips most of its masked part (at one 256 × 256 tile per
/// head, 56% of the products instead of all).
const ROW_BLOCK: usize = 32;

/// The largest of `x` (`-inf` when empty), over 16 lanes so that it vectorizes.
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (m, &y) in lanes.iter_mut().zip(c) {
            *m = if y > *m { y } else { *m };
        }
    }
    let mut m = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &y| m.max(y));
    for y in lanes {
        m = m.max(y);
    }
    m
}

/// How many of row `i`'s columns `c0..c0+nc` are at or before it (the causal mask).
#[inline(always)]
fn visible(i: usize, c0: usize, nc: usize) -> usize {
    (i + 1).saturating_sub(c0).min(nc)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn forward_body(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
    lse: &mut [f32],
    tile: &mut [f32],
    acc: &mut [f32],
    rows: &mut [f32],
    t: usize,
    d: usize,
    bq: usize,
    bk: usize,
    scale: f32,
) {
    for (r0, nr) in tiles_of(t, bq) {
        let (m, rest) = rows.split_at_mut(bq);
        let (l, rest) = rest.split_at_mut(bq);
        let alpha = &mut rest[..bq];
        let (m, l, alpha) = (&mut m[..nr], &mut l[..nr], &mut alpha[..nr]);
        m.fill(f32::NEG_INFINITY);
        l.fill(0.0);
        let acc = &mut acc[..nr * d];
        acc.fill(0.0);
        // Key tiles past the query tile's last row are fully masked: skipped.
        for (c0, nc) in tiles_of(r0 + nr, bk) {
            for (a0, mb) in tiles_of(nr, ROW_BLOCK) {
                // The columns any row of this block sees; those past them are not computed
                // (their probabilities are 0). A block that sees none keeps its state.
                let vis = visible(r0 + a0 + mb - 1, c0, nc);
                if vis == 0 {
                    continue;
                }
                let s = &mut tile[..mb * vis];
                scores(q, k, s, (r0 + a0, mb), (c0, vis), d, scale);
                for (b, row) in s.chunks_exact_mut(vis).enumerate() {
                    let a = a0 + b;
                    let seen = visible(r0 + a, c0, vis);
                    let (live, masked) = row.split_at_mut(seen);
                    let tile_max = row_max(live);
                    let m_new = m[a].max(tile_max);
                    let mut sum = [0f32; 16];
                    let mut chunks = live.chunks_exact_mut(16);
                    for c in &mut chunks {
                        for (x, s) in c.iter_mut().zip(sum.iter_mut()) {
                            *x = exp(*x - m_new);
                            *s += *x;
                        }
                    }
                    let mut p_sum = 0f32;
                    for x in chunks.into_remainder() {
                        *x = exp(*x - m_new);
                        p_sum += *x;
                    }
                    p_sum += sum.iter().sum::<f32>();
                    masked.fill(0.0);
                    // e^{m_old - m_new}: 0 on the first tile (m_old = -inf), where l and acc
                    // are 0.
                    alpha[a] = exp(m[a] - m_new);
                    l[a] = alpha[a] * l[a] + p_sum;
                    m[a] = m_new;
                    for x in &mut acc[a * d..(a + 1) * d] {
                        *x *= alpha[a];
                    }
                }
                // acc += P V_j over the visible columns.
                assert!((c0 + vis) * d <= v.len() && (a0 + mb) * d <= acc.len());
                // SAFETY: bounds checked above and by the tile's length; acc is its own buffer.
                unsafe {
                    product(
                        (mb, d, vis),
                        (acc[a0 * d..].as_mut_ptr(), d, 1),
                        true,
                        (s.as_ptr(), vis, 1),
                        (v[c0 * d..].as_ptr(), d, 1),
                        1.0,
                    )
                }
            }
        }
        for a in 0..nr {
            let inv = l[a];
            for (y, x) in o[(r0 + a) * d..(r0 + a + 1) * d]
                .iter_mut()
                .zip(&acc[a * d..(a + 1) * d])
            {
                *y = *x / inv;
            }
            lse[r0 + a] = m[a] + l[a].ln();
        }
    }
}

dispatch!(
    /// One head's forward ([`forward`]) on this thread, in f32.
    #[allow(clippy::too_many_arguments)]
    fn head_forward(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        o: &mut [f32],
        lse: &mut [f32],
        tile: &mut [f32],
        acc: &mut [f32],
        rows: &mut [f32],
        t: usize,
        d: usize,
        bq: usize,
        bk: usize,
        scale: f32
    ) => forward_body
);

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn backward_body(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &[f32],
    g: &[f32],
    lse: &[f32],
    (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
    (p_tile, dp_tile): (&mut [f32], &mut [f32]),
    rows: &mut [f32],
    t: usize,
    d: usize,
    bq: usize,
    bk: usize,
    scale: f32,
) {
    assert!(q.len() >= t * d && k.len() >= t * d && v.len() >= t * d && g.len() >= t * d);
    assert!(dq.len() >= t * d && dk.len() >= t * d && dv.len() >= t * d);
    dq.fill(0.0);
    dk.fill(0.0);
    dv.fill(0.0);
    // D = rowsum(dO ∘ O), one value per row of the head.
    let d_rows = &mut rows[..t];
    for (i, r) in d_rows.iter_mut().enumerate() {
        let mut sum = [0f32; 16];
        let (gi, oi) = (&g[i * d..(i + 1) * d], &o[i * d..(i + 1) * d]);
        let mut gc = gi.chunks_exact(16);
        let mut oc = oi.chunks_exact(16);
        for (a, b) in (&mut gc).zip(&mut oc) {
            for ((s, x), y) in sum.iter_mut().zip(a).zip(b) {
                *s += x * y;
            }
        }
        let mut total = 0f32;
        for (x, y) in gc.remainder().iter().zip(oc.remainder()) {
            total += x * y;
        }
        *r = total + sum.iter().sum::<f32>();
    }
    let d_rows = &rows[..t];
    for (c0, nc) in tiles_of(t, bk) {
        for (r0, nr) in tiles_of(t, bq) {
            // Only query tiles with a row at or after c0 see these keys.
            if r0 + nr <= c0 {
                continue;
            }
            for (a0, mb) in tiles_of(nr, ROW_BLOCK) {
                let i0 = r0 + a0;
                // The key columns any row of this block sees; the rest are masked (P = 0).
                let vis = visible(i0 + mb - 1, c0, nc);
                if vis == 0 {
                    continue;
                }
                let p = &mut p_tile[..mb * vis];
                let dp = &mut dp_tile[..mb * vis];
                scores(q, k, p, (i0, mb), (c0, vis), d, scale);
                // P = e^{S - L}, zero where masked.
                for (b, row) in p.chunks_exact_mut(vis).enumerate() {
                    let seen = visible(i0 + b, c0, vis);
                    let l = lse[i0 + b];
                    let (live, masked) = row.split_at_mut(seen);
                    for x in live {
                        *x = exp(*x - l);
                    }
                    masked.fill(0.0);
                }
                // SAFETY (all four products): every operand lies within its head's buffer (the
                // asserts above, i0 + mb <= t, c0 + vis <= t), the tiles are their own buffers
                // and the destinations are distinct from the operands.
                unsafe {
                    // dV_j += Pᵀ dO_i.
                    product(
                        (vis, d, mb),
                        (dv[c0 * d..].as_mut_ptr(), d, 1),
                        true,
                        (p.as_ptr(), 1, vis),
                        (g[i0 * d..].as_ptr(), d, 1),
                        1.0,
                    );
                    // dP = dO_i V_jᵀ.
                    product(
                        (mb, vis, d),
                        (dp.as_mut_ptr(), vis, 1),
                        false,
                        (g[i0 * d..].as_ptr(), d, 1),
                        (v[c0 * d..].as_ptr(), 1, d),
                        1.0,
                    );
                }
                // dS = P ∘ (dP - D), over dP.
                for (b, (ds, p)) in dp
                    .chunks_exact_mut(vis)
                    .zip(p.chunks_exact(vis))
                    .enumerate()
                {
                    let db = d_rows[i0 + b];
                    for (x, p) in ds.iter_mut().zip(p) {
                        *x = p * (*x - db);
                    }
                }
                unsafe {
                    // dQ_i += dS K_j.
                    product(
                        (mb, d, vis),
                        (dq[i0 * d..].as_mut_ptr(), d, 1),
                        true,
                        (dp.as_ptr(), vis, 1),
                        (k[c0 * d..].as_ptr(), d, 1),
                        1.0,
                    );
                    // dK_j += dSᵀ Q_i.
                    product(
                        (vis, d, mb),
                        (dk[c0 * d..].as_mut_ptr(), d, 1),
                        true,
                        (dp.as_ptr(), 1, vis),
                        (q[i0 * d..].as_ptr(), d, 1),
                        1.0,
                    );
                }
            }
        }
    }
    for x in dq[..t * d].iter_mut().chain(dk[..t * d].iter_mut()) {
        *x *= scale;
    }
}

dispatch!(
    /// One head's backward ([`backward`]) on this thread, in f32.
    #[allow(clippy::too_many_arguments)]
    fn head_backward(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        o: &[f32],
        g: &[f32],
        lse: &[f32],
        grads: (&mut [f32], &mut [f32], &mut [f32]),
        tiles: (&mut [f32], &mut [f32]),
        rows: &mut [f32],
        t: usize,
        d: usize,
        bq: usize,
        bk: usize,
        scale: f32
    ) => backward_body
);
