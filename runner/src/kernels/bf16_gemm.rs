//! A bf16 matrix product in bf16: operands read as bf16, products and sums in f32 by the
//! processor's bf16 dot-product instruction (AVX512-BF16 `vdpbf16ps`), the result rounded once
//! to bf16 (to nearest even).
//!
//! `vdpbf16ps` takes, per 32-bit lane, a pair of bf16 values from each operand and adds both
//! products to an f32 accumulator (Intel® 64 and IA-32 Architectures Software Developer's
//! Manual, vol. 2, `VDPBF16PS`). So `k` runs in pairs: the left operand is packed as, per row,
//! 32-bit words holding `(a[i][2p], a[i][2p + 1])`, and the right operand as, per column, words
//! holding `(b[2p][j], b[2p + 1][j])`; an odd `k` gets a zero pair member. The packing reads
//! the operands through their strides, so a transposed view (every backward product) is never
//! copied into a layout first.
//!
//! The product runs as a grid of `MR x NR` tiles (`12 x 32`: 24 of the 32 vector registers
//! accumulate, two hold the right operand's 16-column halves, one the broadcast left pair),
//! each over the whole of `k` in registers, so each output element is one f32 sum rounded
//! once. Tiles run in parallel on rayon's pool, column panel by column panel, so that a
//! thread's tiles reuse one packed right panel from cache.
//!
//! This is GotoBLAS's decomposition (Goto & van de Geijn, "Anatomy of High-Performance Matrix
//! Multiplication", ACM TOMS 34(3), 2008) without its `k` blocking: the model's products have
//! `k` of at most a few thousand, whose packed panels stay in L2.

use half::bf16;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Rows of a register tile.
pub const MR: usize = 12;
/// Columns of a register tile (two 16-lane vectors).
pub const NR: usize = 32;

/// Whether this CPU runs the bf16 dot-product instructions (detected once per process).
pub fn available() -> bool {
    use std::sync::OnceLock;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bf16")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// A strided view of a bf16 matrix: element `(r, c)` is `data[offset + r·row + c·col]`.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The buffer the view reads.
    pub data: &'a [bf16],
    /// Index of element `(0, 0)`.
    pub offset: usize,
    /// Distance between rows, in elements.
    pub row: usize,
    /// Distance between columns, in elements.
    pub col: usize,
}

/// A bf16 product kernel: each output the f32 sum of its products rounded once to bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AMX tiles, `tdpbf16ps` ([`super::amx`]).
    Amx,
    /// AVX512-BF16 dot products, `vdpbf16ps` (this module's register tiles).
    DotProducts,
}

impl Kernel {
    /// The kernel in words, as records name it.
    pub fn describe(self) -> &'static str {
        match self {
            Kernel::Amx => "AMX tiles (tdpbf16ps), f32 sums",
            Kernel::DotProducts => "AVX512-BF16 dot products (vdpbf16ps), f32 sums",
        }
    }
}

/// The environment variable that picks the bf16 product kernel for a comparison on one
/// machine: `amx`, `dot_products` or `f32` (the portable path: operands widened to f32, flex's
/// gemm, the product rounded back); unset, the fastest this CPU runs ([`kernel`]). A kernel the
/// CPU lacks falls back to the next one down.
pub const KERNEL_ENV: &str = "MEMWALL_BF16_GEMM";

/// The bf16 product kernel this process uses (decided once): AMX where the CPU and OS run it,
/// else AVX512-BF16's dot products, else `None` (the portable path), or what [`KERNEL_ENV`]
/// asks for, where the CPU runs it.
pub fn kernel() -> Option<Kernel> {
    use std::sync::OnceLock;
    static KERNEL: OnceLock<Option<Kernel>> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        let wanted = std::env::var(KERNEL_ENV).unwrap_or_default();
        let (amx, dot) = match wanted.as_str() {
            "" | "amx" => (true, true),
            "dot_products" => (false, true),
            "f32" => (false, false),
            other => {
                tracing::warn!(
                    "{KERNEL_ENV}={other}: use amx, dot_products or f32; taking the fastest \
                     kernel this CPU runs"
                );
                (true, true)
            }
        };
        if amx && super::amx::available() {
            Some(Kernel::Amx)
        } else if dot && available() {
            Some(Kernel::DotProducts)
        } else {
            None
        }
    })
}

/// `out = a · b` for `a` `[m, k]` and `b` `[k, n]` as views, `out` `[m, n]` row-major (length
/// `m·n`, uninitialized: every element is written), each element the f32 sum of its `k`
/// products rounded once to bf16, by [`kernel`].
///
/// Returns `false` (and leaves `out` untouched) where no kernel runs ([`kernel`] is `None`);
/// the caller then takes its portable path. Panics if a view reads past its buffer or `out`'s
/// length is not `m·n`.
pub fn gemm(m: usize, k: usize, n: usize, a: View, b: View, out: &mut [MaybeUninit<bf16>]) -> bool {
    match kernel() {
        Some(kernel) => gemm_with(kernel, m, k, n, a, b, out),
        None => false,
    }
}

/// [`gemm`] by `kernel`: `false` (and `out` untouched) where the CPU does not run it.
pub fn gemm_with(
    kernel: Kernel,
    m: usize,
    k: usize,
    n: usize,
    a: View,
    b: View,
    out: &mut [MaybeUninit<bf16>],
) -> bool {
    match kernel {
        Kernel::Amx => super::amx::gemm(m, k, n, a, b, out),
        Kernel::DotProducts => dot_products(m, k, n, a, b, out),
    }
}

/// [`gemm`] with AVX512-BF16's `vdpbf16ps` in `MR x NR` register tiles; `false` where the CPU
/// lacks it ([`available`]).
fn dot_products(
    m: usize,
    k: usize,
    n: usize,
    a: View,
    b: View,
    out: &mut [MaybeUninit<bf16>],
) -> bool {
    assert_eq!(out.len(), m * n, "the product's buffer holds m·n elements");
    if !available() {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    let kp = k.div_ceil(2);
    let (mp, np) = (m.div_ceil(MR), n.div_ceil(NR));
    // `a`'s lanes are its rows, `b`'s its columns; both pair along k.
    let pa = pack::<MR>(a.rows(m, k), mp, kp);
    let pb = pack::<NR>(b.columns(n, k), np, kp);
    let out_ptr = SendPtr(out.as_mut_ptr() as *mut bf16);
    // Column panel major: consecutive tiles (one thread's share) reuse a packed `b` panel.
    (0..mp * np).into_par_iter().for_each(|t| {
        let (jp, ip) = (t / mp, t % mp);
        let a_panel = &pa[ip * MR * kp..(ip + 1) * MR * kp];
        let b_panel = &pb[jp * NR * kp..(jp + 1) * NR * kp];
        let (r0, c0) = (ip * MR, jp * NR);
        let (rows, cols) = ((m - r0).min(MR), (n - c0).min(NR));
        // SAFETY: `available()` said the CPU runs AVX-512F/BW/VL and AVX512-BF16; the panels
        // hold `kp` pairs of MR and NR words; tiles write disjoint rectangles of `out`, inside
        // its `m·n` elements.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            avx512::tile(
                kp,
                a_panel,
                b_panel,
                out_ptr.get().add(r0 * n + c0),
                n,
                rows,
                cols,
            )
        };
    });
    true
}

/// The output pointer, shared by the tiles that write disjoint parts of it.
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut bf16);
// SAFETY: the tiles write disjoint elements.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    pub(super) fn get(self) -> *mut bf16 {
        self.0
    }
}

impl<'a> View<'a> {
    /// The left operand `[count, k]` as lines along `k`: its rows.
    pub(super) fn rows(self, count: usize, k: usize) -> Lines<'a> {
        Lines {
            data: self.data,
            offset: self.offset,
            count,
            step: self.row,
            k,
            k_step: self.col,
        }
    }

    /// The right operand `[k, count]` as lines along `k`: its columns.
    pub(super) fn columns(self, count: usize, k: usize) -> Lines<'a> {
        Lines {
            data: self.data,
            offset: self.offset,
            count,
            step: self.col,
            k,
            k_step: self.row,
        }
    }
}

/// An operand as lines along `k`: line `l`'s element `i` is `data[offset + l·step + i·k_step]`.
#[derive(Clone, Copy)]
pub(super) struct Lines<'a> {
    pub(super) data: &'a [bf16],
    pub(super) offset: usize,
    pub(super) count: usize,
    pub(super) step: usize,
    pub(super) k: usize,
    pub(super) k_step: usize,
}

impl Lines<'_> {
    /// The bits of line `line`'s element `i` (zero past the lines or `k`).
    #[inline(always)]
    pub(super) fn bits(&self, line: usize, i: usize) -> u32 {
        if line < self.count && i < self.k {
            self.data[self.offset + line * self.step + i * self.k_step].to_bits() as u32
        } else {
            0
        }
    }
}

/// `panels` panels of `W` lanes over `kp >= ⌈k/2⌉` pairs: word `[panel][p][lane]` holds line
/// `panel·W + lane`'s elements `2p` (low half, as `vdpbf16ps` and `tdpbf16ps` read a pair) and
/// `2p + 1` (high half), zero past the lines or `k` (so pairs past `⌈k/2⌉` pad with zeros). Built in parallel, one panel per task; a full panel
/// of a layout whose pairs are adjacent (`k_step = 1`: each word is one 32-bit read) or whose
/// lanes are (`step = 1`: two contiguous runs interleaved) is read without per-element index
/// arithmetic.
pub(super) fn pack<const W: usize>(op: Lines, panels: usize, kp: usize) -> Vec<u32> {
    debug_assert!(kp >= op.k.div_ceil(2));
    // Not zeroed: every word is written below (zeroing was 9% of a bf16 step's main thread).
    let mut packed = uninit::<u32>(panels * W * kp);
    packed
        .par_chunks_mut(W * kp)
        .enumerate()
        .for_each(|(panel, words)| {
            let first = panel * W;
            let full = first + W <= op.count;
            let pairs = if full { op.k / 2 } else { 0 };
            // Edge panels (not `full`) take the element-wise path below for every pair.
            if full && op.k_step == 1 {
                for lane in 0..W {
                    let start = op.offset + (first + lane) * op.step;
                    let line = &op.data[start..start + 2 * pairs];
                    for (p, pair) in line.chunks_exact(2).enumerate() {
                        words[p * W + lane]
                            .write(pair[0].to_bits() as u32 | (pair[1].to_bits() as u32) << 16);
                    }
                }
            } else if full && op.step == 1 {
                for p in 0..pairs {
                    let lo = op.offset + first + 2 * p * op.k_step;
                    let hi = lo + op.k_step;
                    let (lo, hi) = (&op.data[lo..lo + W], &op.data[hi..hi + W]);
                    for ((w, l), h) in words[p * W..(p + 1) * W].iter_mut().zip(lo).zip(hi) {
                        w.write(l.to_bits() as u32 | (h.to_bits() as u32) << 16);
                    }
                }
            }
            // Whatever the fast layouts left: other layouts, edge panels, an odd k's last pair.
            let done = if op.k_step == 1 || op.step == 1 {
                pairs
            } else {
                0
            };
            for p in done..kp {
                for (lane, w) in words[p * W..(p + 1) * W].iter_mut().enumerate() {
                    w.write(op.bits(first + lane, 2 * p) | op.bits(first + lane, 2 * p + 1) << 16);
                }
            }
        });
    // SAFETY: every word was written (the fast layouts' pairs, then the rest).
    unsafe { assume_init(packed) }
}

/// A vector of `len` uninitialized elements.
pub fn uninit<T>(len: usize) -> Vec<MaybeUninit<T>> {
    let mut v = Vec::with_capacity(len);
    // SAFETY: `MaybeUninit` needs no initialization; the capacity is `len`.
    unsafe { v.set_len(len) };
    v
}

/// `v` as initialized elements.
///
/// # Safety
/// Every element of `v` has been written.
pub unsafe fn assume_init<T>(v: Vec<MaybeUninit<T>>) -> Vec<T> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: `MaybeUninit<T>` has `T`'s layout; the caller says every element is written.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut T, v.len(), v.capacity()) }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MR, NR};
    use half::bf16;
    use std::arch::x86_64::*;

    /// Rows `..rows` and columns `..cols` of the `MR x NR` tile `Σ_p a[p·MR + r] ⊙ b[p·NR + c]`
    /// (pair products summed in f32), rounded to bf16 (`vcvtneps2bf16`: to nearest even,
    /// subnormals flushed to zero) into `out[r·ld + c]`.
    ///
    /// # Safety
    /// The CPU must run AVX-512F/BW/VL and AVX512-BF16; `a` holds `kp·MR` words, `b` `kp·NR`;
    /// `out[r·ld + c]` is writable for `r < rows <= MR`, `c < cols <= NR`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn tile(
        kp: usize,
        a: &[u32],
        b: &[u32],
        out: *mut bf16,
        ld: usize,
        rows: usize,
        cols: usize,
    ) {
        assert!(a.len() >= kp * MR && b.len() >= kp * NR && rows <= MR && cols <= NR);
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        let (a, b) = (a.as_ptr(), b.as_ptr());
        for p in 0..kp {
            // SAFETY: `p < kp`, within the asserted lengths; the vector types are bit casts.
            unsafe {
                let b0: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(b.add(p * NR) as *const _));
                let b1: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16) as *const _));
                for (r, row) in acc.iter_mut().enumerate() {
                    let pair = *a.add(p * MR + r) as i32;
                    let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                    row[0] = _mm512_dpbf16_ps(row[0], av, b0);
                    row[1] = _mm512_dpbf16_ps(row[1], av, b1);
                }
            }
        }
        let mask = |lanes: usize| -> __mmask16 { ((1u32 << lanes.min(16)) - 1) as __mmask16 };
        let (low, high) = (mask(cols), mask(cols.saturating_sub(16)));
        for (r, row) in acc.iter().enumerate().take(rows) {
            // SAFETY: the caller's bounds on `out`; masked lanes are not written.
            unsafe {
                let dst = out.add(r * ld) as *mut i16;
                let lo: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(row[0]));
                let hi: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(row[1]));
                _mm256_mask_storeu_epi16(dst, low, lo);
                _mm256_mask_storeu_epi16(dst.add(16), high, hi);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<bf16> {
        (0..n)
            .map(|i| bf16::from_f32((((i + seed) * 7919) % 997) as f32 / 500.0 - 1.0))
            .collect()
    }

    /// The exact product (f64) and the sum of absolute products, for the error bound.
    fn reference(m: usize, k: usize, n: usize, a: View, b: View) -> (Vec<f64>, Vec<f64>) {
        let mut exact = vec![0f64; m * n];
        let mut abs = vec![0f64; m * n];
        for r in 0..m {
            for c in 0..n {
                for i in 0..k {
                    let x = f64::from(a.data[a.offset + r * a.row + i * a.col].to_f32());
                    let y = f64::from(b.data[b.offset + i * b.row + c * b.col].to_f32());
                    exact[r * n + c] += x * y;
                    abs[r * n + c] += (x * y).abs();
                }
            }
        }
        (exact, abs)
    }

    /// The kernels this CPU runs (none without AVX512-BF16: the portable path is tested in
    /// matmul).
    fn kernels() -> Vec<Kernel> {
        let mut k = Vec::new();
        if super::super::amx::available() {
            k.push(Kernel::Amx);
        } else {
            eprintln!("this CPU or OS runs no AMX: the AMX kernel is not tested here");
        }
        if available() {
            k.push(Kernel::DotProducts);
        } else {
            eprintln!("this CPU has no AVX512-BF16: the portable path is tested in matmul");
        }
        k
    }

    #[test]
    fn products_of_strided_views_are_the_f32_sums_rounded_once() {
        for kernel in kernels() {
            products_by(kernel);
        }
    }

    /// Every shape and layout of the test through `kernel`.
    fn products_by(kernel: Kernel) {
        // Edges in every direction (m, n not multiples of the tile, odd k) and every layout the
        // packing reads: pairs adjacent (row-major left, transposed right), lanes adjacent
        // (transposed left, row-major right, as the backward's products read them) and
        // neither (every other element of a wider buffer).
        for (m, k, n) in [
            (1, 1, 1),
            (13, 7, 33),
            (25, 40, 64),
            (50, 129, 70),
            (32, 32, 32),
            (70, 100, 97),
        ] {
            for layout in 0..3 {
                let ab = values(2 * m * k + 3, 1);
                let bb = values(2 * k * (n + 5), 2);
                let (a, b) = match layout {
                    0 => (
                        View {
                            data: &ab,
                            offset: 3,
                            row: k,
                            col: 1,
                        },
                        View {
                            data: &bb,
                            offset: 2,
                            row: 1,
                            col: k,
                        },
                    ),
                    1 => (
                        View {
                            data: &ab,
                            offset: 3,
                            row: 1,
                            col: m,
                        },
                        View {
                            data: &bb,
                            offset: 2,
                            row: n + 5,
                            col: 1,
                        },
                    ),
                    _ => (
                        View {
                            data: &ab,
                            offset: 3,
                            row: 2 * k,
                            col: 2,
                        },
                        View {
                            data: &bb,
                            offset: 2,
                            row: 2 * n,
                            col: 2,
                        },
                    ),
                };
                check(kernel, m, k, n, a, b);
            }
        }
    }

    fn check(kernel: Kernel, m: usize, k: usize, n: usize, a: View, b: View) {
        let mut out = uninit(m * n);
        assert!(gemm_with(kernel, m, k, n, a, b, &mut out));
        // SAFETY: gemm wrote every element.
        let out = unsafe { assume_init(out) };
        let (exact, abs) = reference(m, k, n, a, b);
        for (i, o) in out.iter().enumerate() {
            // One rounding to bf16 (unit roundoff 2^-8) of an f32 sum of k products (each
            // addition rounds at most 2^-24 of the running sum: k·2^-24 of the absolute
            // products' sum in all, doubled for slack in the order of the pair sums).
            let bound = exact[i].abs() * 2f64.powi(-8) + (k as f64) * 2f64.powi(-23) * abs[i];
            let got = f64::from(o.to_f32());
            assert!(
                (got - exact[i]).abs() <= bound * 1.01 + 1e-30,
                "{kernel:?} ({m}, {k}, {n}), strides a ({}, {}) b ({}, {}), element {i}: {got} vs {}",
                a.row,
                a.col,
                b.row,
                b.col,
                exact[i]
            );
        }
    }

    #[test]
    fn an_empty_product_writes_nothing() {
        let mut out: Vec<MaybeUninit<bf16>> = Vec::new();
        let a = View {
            data: &[],
            offset: 0,
            row: 0,
            col: 0,
        };
        assert!(gemm(0, 0, 0, a, a, &mut out) || kernel().is_none());
    }
}
