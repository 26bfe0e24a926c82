//! The memory-efficient causal attention as one CPU kernel per direction: FlashAttention-2's
//! forward and backward (Dao 2023, "FlashAttention-2", Algorithms 1 and 2) on contiguous
//! `[batch · heads, seq, d_head]` slices, parallel over `(batch, head)` on rayon's pool.
//!
//! [`crate::model::attention`] composes the same algorithm from Burn tensor operations, tile by
//! tile; on flex every one of those operations is a fresh `[batch, heads, rows, cols]` tensor,
//! a parallel section of its own and, for 16-bit inputs, a conversion. Here each `(batch, head)`
//! is one task whose tile products run on this thread, and the softmax, masking and `dS` are
//! vectorized loops over the tile, in f32 whatever the inputs' dtype (FlashAttention's f32
//! statistics). The products read one of two kinds of operands (`Operand`):
//!
//! - f32 and f16 inputs, and bf16 ones where the CPU lacks AVX512-BF16 (or
//!   `MEMWALL_BF16_GEMM=f32`): the head's `Q`, `K`, `V` (and `O`, `dO`) widened to f32 once,
//!   the products in f32 with the gemm crate (the product flex itself uses), as the composed
//!   form on flex computes;
//! - bf16 inputs with AVX512-BF16: the inputs read where they lie, `P` and `dS` rounded once to
//!   bf16 before the products that read them, every sum in f32 by `vdpbf16ps`
//!   ([`bf16_gemm::gemm_f32_sequential`]), the head's `Kᵀ`, `V` (forward) and `Kᵀ`, `Vᵀ`, `K`,
//!   `Q`, `dO` (backward) packed once for all its query blocks. FlashAttention-2's CUDA kernels
//!   multiply 16-bit inputs this way; the results are within 2^-7 + 2^-9 of the f32 operands'
//!   (the test below states why).
//!
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

use super::bf16_gemm::{self, PackedRight, Packs, Right};
use super::convert::Half;
use super::dispatch;
use super::gelu::exp;
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
    /// `x` as bf16 when `Self` is bf16.
    fn as_bf16(_x: &[Self]) -> Option<&[bf16]> {
        None
    }
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
        Half::widen(src, dst);
    }
    fn narrow(src: &[f32], dst: &mut [bf16]) {
        Half::narrow(src, dst);
    }
    fn as_bf16(x: &[bf16]) -> Option<&[bf16]> {
        Some(x)
    }
}

impl Element for f16 {
    fn widen(src: &[f16], dst: &mut [f32]) {
        Half::widen(src, dst);
    }
    fn narrow(src: &[f32], dst: &mut [f16]) {
        Half::narrow(src, dst);
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

/// Whether bf16 inputs run their tile products on bf16 operands (the attention's
/// `Operand` for bf16): where the CPU has
/// AVX512-BF16 and `MEMWALL_BF16_GEMM` (the bf16 products' switch, [`bf16_gemm::KERNEL_ENV`])
/// does not ask for the f32 path.
fn bf16_products() -> bool {
    bf16_gemm::kernel().is_some() && bf16_gemm::available()
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
    if E::as_bf16(q).is_some() && bf16_products() {
        forward_with::<E, bf16>(q, k, v, out, lse, dims, tiles)
    } else {
        forward_with::<E, f32>(q, k, v, out, lse, dims, tiles)
    }
}

/// [`forward`] with tile products on operands `X`.
fn forward_with<E: Element, X: Operand>(
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
            || Scratch::<X>::new(3, 2, n, ROW_BLOCK.min(bq) * bk, 3 * bq),
            |s, (h, (o, l))| {
                let at = h * n..(h + 1) * n;
                let Scratch {
                    inputs,
                    arrays,
                    work,
                } = s;
                let [qb, kb, vb] = inputs.as_mut_slice() else {
                    unreachable!("three inputs")
                };
                let [of, acc] = arrays.as_mut_slice() else {
                    unreachable!("the output and the accumulator")
                };
                head_forward(
                    X::head(&q[at.clone()], qb),
                    X::head(&k[at.clone()], kb),
                    X::head(&v[at], vb),
                    of,
                    l,
                    acc,
                    work,
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
    grads: (&mut [E], &mut [E], &mut [E]),
    dims: Dims,
    tiles: Tiles,
) {
    if E::as_bf16(q).is_some() && bf16_products() {
        backward_with::<E, bf16>(q, k, v, out, lse, grad_out, grads, dims, tiles)
    } else {
        backward_with::<E, f32>(q, k, v, out, lse, grad_out, grads, dims, tiles)
    }
}

/// [`backward`] with tile products on operands `X`.
#[allow(clippy::too_many_arguments)]
fn backward_with<E: Element, X: Operand>(
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
            || Scratch::<X>::new(5, 3, n, 2 * ROW_BLOCK.min(bq) * bk, dims.seq),
            |s, (h, ((dq_h, dk_h), dv_h))| {
                let at = h * n..(h + 1) * n;
                let Scratch {
                    inputs,
                    arrays,
                    work,
                } = s;
                let [qb, kb, vb, ob, gb] = inputs.as_mut_slice() else {
                    unreachable!("five inputs")
                };
                let [dqf, dkf, dvf] = arrays.as_mut_slice() else {
                    unreachable!("three gradients")
                };
                head_backward(
                    X::head(&q[at.clone()], qb),
                    X::head(&k[at.clone()], kb),
                    X::head(&v[at.clone()], vb),
                    X::head(&out[at.clone()], ob),
                    X::head(&grad_out[at], gb),
                    &lse[h * dims.seq..(h + 1) * dims.seq],
                    (dqf, dkf, dvf),
                    work,
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

/// One task's buffers, allocated once per rayon task and reused for every head it runs.
struct Scratch<X: Operand> {
    /// The inputs widened to f32, `seq · d_head` each (f32 operands; empty buffers for bf16
    /// ones, which read the inputs where they lie).
    inputs: Vec<Vec<f32>>,
    /// f32 per-head arrays, `seq · d_head` each: the output and the forward's accumulator, or
    /// the three gradients.
    arrays: Vec<Vec<f32>>,
    /// What the head's tiles work in.
    work: Work<X>,
}

/// A task's tile buffers: the f32 tiles of one block of query rows (`ROW_BLOCK` rows by a
/// key tile's columns), the per-row statistics, a tile rounded
/// to the operands' type (bf16 operands: the probabilities `P` and `dS` as the products read
/// them) and the packed operands of bf16 products.
struct Work<X: Operand> {
    tile: Vec<f32>,
    rows: Vec<f32>,
    rounded: Vec<X>,
    packs: Packs,
    /// The head's operands packed once: `Kᵀ` and `V` (forward); `Kᵀ`, `Vᵀ`, `K`, `Q`, `dO`
    /// (backward).
    packed: [X::Packed; 5],
}

impl<X: Operand> Scratch<X> {
    fn new(inputs: usize, arrays: usize, per_head: usize, tile: usize, rows: usize) -> Self {
        let buffers = |count: usize, len: usize| (0..count).map(|_| vec![0f32; len]).collect();
        Scratch {
            inputs: buffers(inputs, if X::WIDENED { per_head } else { 0 }),
            arrays: buffers(arrays, per_head),
            work: Work {
                tile: vec![0f32; tile],
                rows: vec![0f32; rows],
                rounded: if X::WIDENED {
                    Vec::new()
                } else {
                    vec![X::default(); tile]
                },
                packs: Packs::default(),
                packed: Default::default(),
            },
        }
    }
}

/// A matrix operand: the slice from its element `(0, 0)`, its row stride and column stride
/// (elements).
type Matrix<'a, X> = (&'a [X], usize, usize);

/// A product's right operand: the block as a matrix (from its element `(0, 0)`), and the
/// head operand it is a block of, packed before, with the block's first row and column there
/// (`None`: packed by the product).
type Rhs<'a, X> = (
    Matrix<'a, X>,
    Option<(&'a <X as Operand>::Packed, usize, usize)>,
);

/// The elements a `rows × cols` matrix with these strides spans from its first.
fn span(rows: usize, cols: usize, row: usize, col: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row + (cols - 1) * col + 1
    }
}

/// What a task's tile products read. Either way the softmax, its statistics and every sum
/// are f32 (FlashAttention's f32 statistics):
///
/// - `f32`: the inputs widened to f32 once per head, each product in f32 with the gemm crate
///   (the product flex itself uses), as the composed form on flex computes;
/// - `bf16`: the bf16 inputs read where they lie, and the probabilities
///   `P` and `dS` rounded once to bf16 before the products that read them, the products'
///   sums in f32 by AVX512-BF16's `vdpbf16ps` ([`bf16_gemm::gemm_f32_sequential`]).
trait Operand: Copy + Default + Send + Sync + 'static {
    /// Whether the inputs are widened to f32 per head (`f32`), or read as they are.
    const WIDENED: bool;
    /// A head operand packed once for the products that read its blocks (bf16: the layout
    /// of `vdpbf16ps`' right operand; f32: nothing, the gemm crate packs per product).
    type Packed: Default + Send;
    /// Packs `m` `[k, n]` into `into` (f32: nothing).
    fn pack(m: Matrix<Self>, k: usize, n: usize, into: &mut Self::Packed);
    /// The value in f32.
    fn to_f32(self) -> f32;
    /// One head's `input` as operands: widened into `buffer` (`input.len()` elements) or read
    /// where it lies.
    fn head<'a, E: Element>(input: &'a [E], buffer: &'a mut [f32]) -> &'a [Self];
    /// A tile's f32 values as operands: the tile itself, or its rounding into `scratch`.
    fn operands<'a>(tile: &'a [f32], scratch: &'a mut [Self]) -> &'a [Self];
    /// `dst[m × n] (+)= alpha · lhs[m × k] · rhs[k × n]` on this thread, `dst` row-major with
    /// row stride `ld`. Panics if a matrix spans past its slice.
    #[allow(clippy::too_many_arguments)]
    fn product(
        mnk: (usize, usize, usize),
        dst: (&mut [f32], usize),
        accumulate: bool,
        lhs: Matrix<Self>,
        rhs: Rhs<Self>,
        alpha: f32,
        packs: &mut Packs,
    );
}

impl Operand for f32 {
    const WIDENED: bool = true;
    type Packed = ();
    fn pack(_: Matrix<f32>, _: usize, _: usize, _: &mut ()) {}
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    fn head<'a, E: Element>(input: &'a [E], buffer: &'a mut [f32]) -> &'a [f32] {
        E::widen(input, buffer);
        buffer
    }
    fn operands<'a>(tile: &'a [f32], _: &'a mut [f32]) -> &'a [f32] {
        tile
    }
    #[inline(always)]
    fn product(
        (m, n, k): (usize, usize, usize),
        (dst, ld): (&mut [f32], usize),
        accumulate: bool,
        lhs: Matrix<f32>,
        (rhs, _): Rhs<f32>,
        alpha: f32,
        _: &mut Packs,
    ) {
        assert!(
            span(m, n, ld, 1) <= dst.len()
                && span(m, k, lhs.1, lhs.2) <= lhs.0.len()
                && span(k, n, rhs.1, rhs.2) <= rhs.0.len()
        );
        // SAFETY: every index lies inside its slice (just checked); `dst` is a `&mut`, so it
        // overlaps neither operand.
        unsafe {
            product(
                (m, n, k),
                (dst.as_mut_ptr(), ld, 1),
                accumulate,
                (lhs.0.as_ptr(), lhs.1, lhs.2),
                (rhs.0.as_ptr(), rhs.1, rhs.2),
                alpha,
            )
        }
    }
}

// bf16 operands: the products' inputs in bf16, their sums in f32, as FlashAttention-2's CUDA
// kernels multiply (`P` converted to the inputs' 16-bit type before `P·V`, `dS` before `dS·K`
// and `dSᵀ·Q`: Dao, flash-attention `csrc/flash_attn/src/flash_fwd_kernel.h` and
// `flash_bwd_kernel.h`); PyTorch's CPU flash attention forward does the same for bf16 inputs
// (ATen `native/cpu/FlashAttentionKernel.cpp`: its `qk_reduced` buffer holds the
// probabilities in the input type for the `P·V` product).
impl Operand for bf16 {
    const WIDENED: bool = false;
    type Packed = PackedRight;
    fn pack(m: Matrix<bf16>, k: usize, n: usize, into: &mut PackedRight) {
        into.pack(view(m), k, n);
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn head<'a, E: Element>(input: &'a [E], _: &'a mut [f32]) -> &'a [bf16] {
        E::as_bf16(input).expect("bf16 operands read bf16 inputs")
    }
    fn operands<'a>(tile: &'a [f32], scratch: &'a mut [bf16]) -> &'a [bf16] {
        let rounded = &mut scratch[..tile.len()];
        Half::narrow(tile, rounded);
        rounded
    }
    fn product(
        (m, n, k): (usize, usize, usize),
        dst: (&mut [f32], usize),
        accumulate: bool,
        lhs: Matrix<bf16>,
        (rhs, packed): Rhs<bf16>,
        alpha: f32,
        packs: &mut Packs,
    ) {
        let rhs = match packed {
            Some((packed, row, col)) if Right::block_fits(packed, (row, col), k, n) => {
                Right::Block { packed, row, col }
            }
            _ => Right::View(view(rhs)),
        };
        let done = bf16_gemm::gemm_f32_sequential(
            (m, k, n),
            view(lhs),
            rhs,
            dst,
            accumulate,
            alpha,
            packs,
        );
        assert!(done, "bf16 operands only where the CPU runs AVX512-BF16");
    }
}

/// A bf16 matrix as a view of the bf16 product.
fn view((data, row, col): Matrix<'_, bf16>) -> bf16_gemm::View<'_> {
    bf16_gemm::View {
        data,
        offset: 0,
        row,
        col,
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
/// (`d` features); `kt` is `Kᵀ` packed ([`Operand::pack`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn scores<X: Operand>(
    q: &[X],
    (k, kt): (&[X], &X::Packed),
    tile: &mut [f32],
    (r0, nr): (usize, usize),
    (c0, nc): (usize, usize),
    d: usize,
    alpha: f32,
    packs: &mut Packs,
) {
    X::product(
        (nr, nc, d),
        (&mut tile[..nr * nc], nc),
        false,
        (&q[r0 * d..], d, 1),
        ((&k[c0 * d..], 1, d), Some((kt, 0, c0))),
        alpha,
        packs,
    )
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
fn forward_body<X: Operand>(
    q: &[X],
    k: &[X],
    v: &[X],
    o: &mut [f32],
    lse: &mut [f32],
    acc: &mut [f32],
    work: &mut Work<X>,
    t: usize,
    d: usize,
    bq: usize,
    bk: usize,
    scale: f32,
) {
    let Work {
        tile,
        rows,
        rounded,
        packs,
        packed: [kt, vp, ..],
    } = work;
    X::pack((k, 1, d), d, t, kt);
    X::pack((v, d, 1), t, d, vp);
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
                scores(q, (k, kt), s, (r0 + a0, mb), (c0, vis), d, scale, packs);
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
                X::product(
                    (mb, d, vis),
                    (&mut acc[a0 * d..(a0 + mb) * d], d),
                    true,
                    (X::operands(s, rounded), vis, 1),
                    ((&v[c0 * d..], d, 1), Some((vp, c0, 0))),
                    1.0,
                    packs,
                );
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
    /// One head's forward ([`forward`]) on this thread, in f32 with products on `X`.
    #[allow(clippy::too_many_arguments)]
    fn head_forward<X: Operand>(
        q: &[X],
        k: &[X],
        v: &[X],
        o: &mut [f32],
        lse: &mut [f32],
        acc: &mut [f32],
        work: &mut Work<X>,
        t: usize,
        d: usize,
        bq: usize,
        bk: usize,
        scale: f32
    ) => forward_body
);

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn backward_body<X: Operand>(
    q: &[X],
    k: &[X],
    v: &[X],
    o: &[X],
    g: &[X],
    lse: &[f32],
    (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
    work: &mut Work<X>,
    t: usize,
    d: usize,
    bq: usize,
    bk: usize,
    scale: f32,
) {
    assert!(q.len() >= t * d && k.len() >= t * d && v.len() >= t * d && g.len() >= t * d);
    assert!(dq.len() >= t * d && dk.len() >= t * d && dv.len() >= t * d);
    let Work {
        tile,
        rows,
        rounded,
        packs,
        packed: [kt, vt, kp, qp, gp],
    } = work;
    X::pack((k, 1, d), d, t, kt);
    X::pack((v, 1, d), d, t, vt);
    X::pack((k, d, 1), t, d, kp);
    X::pack((q, d, 1), t, d, qp);
    X::pack((g, d, 1), t, d, gp);
    let (p_tile, dp_tile) = tile.split_at_mut(ROW_BLOCK.min(bq) * bk);
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
                *s += x.to_f32() * y.to_f32();
            }
        }
        let mut total = 0f32;
        for (x, y) in gc.remainder().iter().zip(oc.remainder()) {
            total += x.to_f32() * y.to_f32();
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
                scores(q, (k, kt), p, (i0, mb), (c0, vis), d, scale, packs);
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
                // dV_j += Pᵀ dO_i.
                X::product(
                    (vis, d, mb),
                    (&mut dv[c0 * d..(c0 + vis) * d], d),
                    true,
                    (X::operands(p, rounded), 1, vis),
                    ((&g[i0 * d..], d, 1), Some((gp, i0, 0))),
                    1.0,
                    packs,
                );
                // dP = dO_i V_jᵀ.
                X::product(
                    (mb, vis, d),
                    (dp, vis),
                    false,
                    (&g[i0 * d..], d, 1),
                    ((&v[c0 * d..], 1, d), Some((vt, 0, c0))),
                    1.0,
                    packs,
                );
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
                let ds = X::operands(dp, rounded);
                // dQ_i += dS K_j.
                X::product(
                    (mb, d, vis),
                    (&mut dq[i0 * d..(i0 + mb) * d], d),
                    true,
                    (ds, vis, 1),
                    ((&k[c0 * d..], d, 1), Some((kp, c0, 0))),
                    1.0,
                    packs,
                );
                // dK_j += dSᵀ Q_i.
                X::product(
                    (vis, d, mb),
                    (&mut dk[c0 * d..(c0 + vis) * d], d),
                    true,
                    (ds, 1, vis),
                    ((&q[i0 * d..], d, 1), Some((qp, i0, 0))),
                    1.0,
                    packs,
                );
            }
        }
    }
    // Two loops, not one over a chain: a chained iterator does not vectorize.
    for x in &mut dq[..t * d] {
        *x *= scale;
    }
    for x in &mut dk[..t * d] {
        *x *= scale;
    }
}

dispatch!(
    /// One head's backward ([`backward`]) on this thread, in f32 with products on `X`.
    #[allow(clippy::too_many_arguments)]
    fn head_backward<X: Operand>(
        q: &[X],
        k: &[X],
        v: &[X],
        o: &[X],
        g: &[X],
        lse: &[f32],
        grads: (&mut [f32], &mut [f32], &mut [f32]),
        work: &mut Work<X>,
        t: usize,
        d: usize,
        bq: usize,
        bk: usize,
        scale: f32
    ) => backward_body
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bf16 values in [-2, 2] ([`crate::kernels::test_values`], rounded).
    fn values(n: usize, seed: u64) -> Vec<bf16> {
        let values = crate::kernels::test_values(n, seed, -2.0, 4.0);
        values.into_iter().map(bf16::from_f32).collect()
    }

    /// max |a - b| / max |b|, in f32.
    fn rel_err(a: &[bf16], b: &[bf16]) -> f32 {
        let scale = b.iter().fold(0f32, |m, x| m.max(x.to_f32().abs()));
        let diff = a
            .iter()
            .zip(b)
            .fold(0f32, |m, (x, y)| m.max((x.to_f32() - y.to_f32()).abs()));
        diff / scale
    }

    /// The inputs `[q, k, v, dO]` of one attention.
    fn inputs(dims: Dims) -> [Vec<bf16>; 4] {
        [1, 2, 3, 4].map(|seed| values(dims.heads * dims.seq * dims.d_head, seed))
    }

    /// `(out, lse, dq, dk, dv)` of one attention of bf16 inputs, its products on `X`.
    fn run<X: Operand>(
        [q, k, v, g]: &[Vec<bf16>; 4],
        dims: Dims,
        tiles: Tiles,
    ) -> (Vec<bf16>, Vec<f32>, [Vec<bf16>; 3]) {
        let n = q.len();
        let mut out = vec![bf16::ZERO; n];
        let mut lse = vec![0f32; dims.heads * dims.seq];
        forward_with::<bf16, X>(q, k, v, &mut out, &mut lse, dims, tiles);
        let [mut dq, mut dk, mut dv] = [(); 3].map(|_| vec![bf16::ZERO; n]);
        let grads = (&mut dq[..], &mut dk[..], &mut dv[..]);
        backward_with::<bf16, X>(q, k, v, &out, &lse, g, grads, dims, tiles);
        (out, lse, [dq, dk, dv])
    }

    #[test]
    fn bf16_operands_are_within_one_bf16_rounding_of_f32_operands() {
        if !bf16_products() {
            eprintln!("this CPU has no AVX512-BF16 (or MEMWALL_BF16_GEMM=f32): not tested here");
            return;
        }
        // Odd sizes (odd d: the left operands are packed; rows past a tile; one tile), 64
        // features (read in place), and the tiles the model's spec uses.
        for (heads, seq, d_head, query, key) in [
            (3, 37, 7, 8, 5),
            (2, 100, 16, 16, 16),
            (2, 256, 64, 64, 64),
            (1, 130, 64, 256, 256),
        ] {
            let dims = Dims { heads, seq, d_head };
            let tiles = Tiles { query, key };
            let inputs = inputs(dims);
            let (out, lse, grads) = run::<bf16>(&inputs, dims, tiles);
            let (out32, lse32, grads32) = run::<f32>(&inputs, dims, tiles);
            // The scores are the same sums of exact products (a bf16 times a bf16 is exact in
            // f32) in another order: the statistics agree to f32 rounding.
            let lse_diff = lse
                .iter()
                .zip(&lse32)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(lse_diff <= 1e-5, "{dims:?}: lse differs by {lse_diff:e}");
            // The products' operands `P` and `dS` rounded to bf16 (2^-9 relative each) move
            // an f32 result by at most 2^-9 of its terms' absolute sum (about the largest
            // result here); both results are then rounded to bf16, half an ulp each (2^-8
            // relative to the largest entry): 2^-7 + 2^-9 at most (measured: 2.3e-3 to 7.3e-3).
            for (name, (a, b)) in ["out", "dq", "dk", "dv"].into_iter().zip(
                [&out]
                    .into_iter()
                    .chain(&grads)
                    .zip([&out32].into_iter().chain(&grads32)),
            ) {
                let e = rel_err(a, b);
                let bound = 2f32.powi(-7) + 2f32.powi(-9);
                assert!(e <= bound, "{dims:?} tiles {query}x{key}: {name} {e:e}");
            }
            // The two paths did differ: the bf16 products ran.
            assert!(
                out != out32 || grads != grads32,
                "{dims:?}: identical results"
            );
        }
    }

    /// Forward and backward times on one thread, f32 against bf16 operands, at the large
    /// benchmark shape's attention (`just bench-cpu 3 large`: 64 heads of 256 tokens, 64
    /// features, one tile). A benchmark, not a test: `--ignored --nocapture`.
    #[test]
    #[ignore]
    fn throughput() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let dims = Dims {
            heads: 64,
            seq: 256,
            d_head: 64,
        };
        let tiles = Tiles::default();
        let inputs = inputs(dims);
        pool.install(|| {
            for round in 0..3 {
                for bf16_operands in [false, true] {
                    if bf16_operands && !bf16_products() {
                        continue;
                    }
                    let t = std::time::Instant::now();
                    if bf16_operands {
                        run::<bf16>(&inputs, dims, tiles);
                    } else {
                        run::<f32>(&inputs, dims, tiles);
                    }
                    eprintln!(
                        "round {round}, {} operands: {:.1} ms forward + backward",
                        if bf16_operands { "bf16" } else { "f32" },
                        t.elapsed().as_secs_f64() * 1e3
                    );
                }
            }
        });
    }
}
