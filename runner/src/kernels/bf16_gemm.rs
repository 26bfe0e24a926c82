//! A bf16 matrix product in bf16: operands read as bf16, products and sums in f32 by the
//! processor's bf16 dot-product instruction (AVX512-BF16 `vdpbf16ps`), the result rounded once
//! to bf16 (to nearest even).
//!
//! `vdpbf16ps` takes, per 32-bit lane, a pair of bf16 values from each operand and adds both
//! products to an f32 accumulator (Intel® 64 and IA-32 Architectures Software Developer's
//! Manual, vol. 2, `VDPBF16PS`). So `k` runs in pairs: the right operand is packed as, per
//! column, 32-bit words holding `(b[2p][j], b[2p + 1][j])`, and the left operand supplies, per
//! row, words holding `(a[i][2p], a[i][2p + 1])`: a row-major left operand with an even `k`
//! already holds them and is read in place; any other is packed (an odd `k` gets a zero pair
//! member). The packing reads the operands through their strides, so a transposed view (the
//! backward's products) is never copied into a layout first.
//!
//! The product runs as a grid of `MR x NR` tiles (`12 x 32`: 24 of the 32 vector registers
//! accumulate, two hold the right operand's 16-column halves, one the broadcast left pair),
//! each over the whole of `k` in registers, so each output element is one f32 sum rounded
//! once. Tiles run in parallel on rayon's pool in blocks of row tiles whose left rows fit in
//! L2, each block column panel by column panel, so that a thread's consecutive tiles reuse a
//! packed right panel and the block's left rows from cache.
//!
//! This is GotoBLAS's decomposition (Goto & van de Geijn, "Anatomy of High-Performance Matrix
//! Multiplication", ACM TOMS 34(3), 2008) without its `k` blocking: the model's products have
//! `k` of at most a few thousand, whose panels stay in L2.

use half::bf16;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Rows of a register tile.
pub const MR: usize = 12;
/// Columns of a register tile (two 16-lane vectors).
pub const NR: usize = 32;

/// Row strides (bytes) at which a row-major left operand is packed rather than read in place:
/// twelve rows a multiple of 2 KiB apart fall into at most two of the 64 sets of a 32 KiB
/// 8-way L1 data cache (Zen 4's, and Intel's since Skylake: their set index is address bits
/// 6-11), so the rows' lines evict each other.
const ALIASING_BYTES: usize = 2048;

/// Bytes of the left operand a block of row tiles keeps in L2 (about a third of the 1-2 MiB
/// L2 of the processors with AVX512-BF16: the packed right panels and the outputs share it).
const L2_BYTES: usize = 384 << 10;

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
    if a.col == 1 && k > 0 {
        // The direct read below trusts the view's bounds: the last row's last element.
        assert!(
            a.offset + (m - 1) * a.row + k <= a.data.len(),
            "the left operand's view reads past its buffer"
        );
    }
    let kp = k.div_ceil(2);
    let (mp, np) = (m.div_ceil(MR), n.div_ceil(NR));
    // A row-major left operand with an even `k` is read where it lies: its pairs are already
    // adjacent 32-bit words (the forward products and the backward's input gradients), so it
    // is not packed. Not where its rows lie a multiple of `ALIASING_BYTES` apart: the tile's
    // twelve rows would share one or two of L1's sets (measured: 10% slower at 4 KiB rows).
    let direct = a.col == 1 && k.is_multiple_of(2) && !(2 * a.row).is_multiple_of(ALIASING_BYTES);
    let pa = if direct {
        Vec::new()
    } else {
        pack::<MR>(a.rows(m, k), mp, kp)
    };
    let pb = pack::<NR>(b.columns(n, k), np, kp);
    let out_ptr = SendPtr(out.as_mut_ptr() as *mut bf16);
    // Tiles in blocks of `block` row tiles, each block column panel by column panel: one
    // thread's consecutive tiles reuse a packed `b` panel from L1, and a block's rows of `a`
    // (about `L2_BYTES`) from L2 for every column panel, instead of streaming all of `a` from
    // L3 per panel.
    let block = (L2_BYTES / (MR * kp * 4)).clamp(1, mp);
    let per_block = block * np;
    (0..mp * np).into_par_iter().for_each(|t| {
        let first = t / per_block * block;
        let in_block = block.min(mp - first);
        let rest = t % per_block;
        let (jp, ip) = (rest / in_block, first + rest % in_block);
        let b_panel = &pb[jp * NR * kp..(jp + 1) * NR * kp];
        let (r0, c0) = (ip * MR, jp * NR);
        let (rows, cols) = ((m - r0).min(MR), (n - c0).min(NR));
        // SAFETY: `available()` said the CPU runs AVX-512F/BW/VL and AVX512-BF16; the packed
        // panels hold `kp` pairs of MR and NR words; a direct left operand's `rows` rows hold
        // `2·kp = k` elements from `offset + r·row` (the view's bounds, checked below); tiles
        // write disjoint rectangles of `out`, inside its `m·n` elements.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            let left = avx512::Left::of(direct, a, &pa, ip, kp);
            avx512::tile(
                kp,
                left,
                b_panel,
                avx512::Out::Bf16 {
                    first: out_ptr.get().add(r0 * n + c0),
                    ld: n,
                },
                rows,
                cols,
            )
        };
    });
    true
}

/// Packing buffers that one task reuses across its [`gemm_f32_sequential`] products, so that
/// a product allocates nothing once they have grown to its operands' size.
#[derive(Default)]
pub struct Packs {
    left: Vec<MaybeUninit<u32>>,
    right: Vec<MaybeUninit<u32>>,
}

/// A right operand `[k, n]` packed once (as [`pack`] lays out `⌈k/2⌉` pairs in panels of
/// `NR` columns) for many [`gemm_f32_sequential`] products over its blocks ([`Right::Block`]):
/// the attention kernel's `K`, `V`, `Q` and `dO` of a head, read by every query block.
#[derive(Default)]
pub struct PackedRight {
    words: Vec<MaybeUninit<u32>>,
    k: usize,
    n: usize,
}

impl PackedRight {
    /// Packs `b` `[k, n]` (on this thread), replacing what was packed before.
    pub fn pack(&mut self, b: View, k: usize, n: usize) {
        let kp = k.div_ceil(2);
        let len = n.div_ceil(NR) * NR * kp;
        pack_into::<NR>(b.columns(n, k), kp, words(&mut self.words, len), false);
        (self.k, self.n) = (k, n);
    }
}

/// A product's right operand.
#[derive(Clone, Copy)]
pub enum Right<'a> {
    /// Read through a view (packed by the product).
    View(View<'a>),
    /// Rows `row..` and columns `col..` of an operand packed before: `row` even, `col` a
    /// multiple of `NR` (32), and the product's `k` even unless its rows reach the operand's
    /// last (whose pair past it is zero).
    Block {
        /// The whole operand.
        packed: &'a PackedRight,
        /// The block's first row.
        row: usize,
        /// The block's first column.
        col: usize,
    },
}

impl Right<'_> {
    /// Whether [`Right::Block`] reads rows `row..row + k` and columns `col..col + n` of
    /// `packed` (the alignment it needs).
    pub fn block_fits(
        packed: &PackedRight,
        (row, col): (usize, usize),
        k: usize,
        n: usize,
    ) -> bool {
        row.is_multiple_of(2)
            && col.is_multiple_of(NR)
            && row + k <= packed.k
            && col + n <= packed.n
            && (k.is_multiple_of(2) || row + k == packed.k)
    }
}

/// `len` words of `buffer`, grown (not zeroed) when it is shorter.
fn words(buffer: &mut Vec<MaybeUninit<u32>>, len: usize) -> &mut [MaybeUninit<u32>] {
    if buffer.len() < len {
        *buffer = uninit(len);
    }
    &mut buffer[..len]
}

/// `out[r·ld + c] ← alpha · Σ_i a[r][i]·b[i][c]` for `a` `[m, k]` and `b` `[k, n]` (bf16, a
/// view or a block of an operand packed before), or `out[r·ld + c] += …` when `accumulate`: the products and sums in f32 by
/// `vdpbf16ps` as in [`gemm`], the result kept in f32 (not rounded to bf16), computed on this
/// thread. For the small products that are one task's share of a parallel loop: the
/// attention kernel's tiles (`m` a few dozen rows), where [`gemm`]'s parallel tiles and
/// packing would cost more than they save. `packs` holds the packed operands between calls.
///
/// Returns `false` (and leaves `out` untouched) where the CPU lacks AVX512-BF16
/// ([`available`]). Panics if a view reads past its buffer, a block does not fit
/// ([`Right::block_fits`]), `out` is shorter than `(m - 1)·ld + n`, or `ld < n`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32_sequential(
    (m, k, n): (usize, usize, usize),
    a: View,
    b: Right,
    (out, ld): (&mut [f32], usize),
    accumulate: bool,
    alpha: f32,
    packs: &mut Packs,
) -> bool {
    if !available() {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    assert!(
        ld >= n && out.len() >= (m - 1) * ld + n,
        "the product's f32 buffer holds (m - 1)·ld + n elements"
    );
    let (kp, mp, np) = (k.div_ceil(2), m.div_ceil(MR), n.div_ceil(NR));
    if kp == 0 {
        // No products: alpha · 0.
        if !accumulate {
            for row in out.chunks_mut(ld).take(m) {
                row[..n].fill(0.0);
            }
        }
        return true;
    }
    if a.col == 1 {
        assert!(
            a.offset + (m - 1) * a.row + k <= a.data.len(),
            "the left operand's view reads past its buffer"
        );
    }
    // As in `dot_products`: a row-major left operand with an even `k` is read in place.
    let direct = a.col == 1 && k.is_multiple_of(2) && !(2 * a.row).is_multiple_of(ALIASING_BYTES);
    let pa = if direct {
        &[][..]
    } else {
        let pa = words(&mut packs.left, mp * MR * kp);
        pack_into::<MR>(a.rows(m, k), kp, pa, false);
        // SAFETY: `pack_into` wrote every word.
        unsafe { &*(pa as *const [MaybeUninit<u32>] as *const [u32]) }
    };
    // The right panels: `pb[first + jp·panel ..][..NR·kp]` is panel `jp`'s `kp` pairs.
    let (pb, first, panel) = match b {
        Right::View(b) => {
            let pb = words(&mut packs.right, np * NR * kp);
            pack_into::<NR>(b.columns(n, k), kp, pb, false);
            (&*pb, 0, NR * kp)
        }
        Right::Block { packed, row, col } => {
            assert!(
                Right::block_fits(packed, (row, col), k, n),
                "a block ({row}, {col}) + ({k}, {n}) of a packed [{}, {}] operand",
                packed.k,
                packed.n
            );
            let whole = packed.k.div_ceil(2);
            let len = packed.n.div_ceil(NR) * NR * whole;
            (
                &packed.words[..len],
                row / 2 * NR + col / NR * NR * whole,
                NR * whole,
            )
        }
    };
    // SAFETY: `pack_into` wrote every word (here or in `PackedRight::pack`).
    let pb = unsafe { &*(pb as *const [MaybeUninit<u32>] as *const [u32]) };
    for jp in 0..np {
        for ip in 0..mp {
            let (r0, c0) = (ip * MR, jp * NR);
            let (rows, cols) = ((m - r0).min(MR), (n - c0).min(NR));
            // SAFETY: `available()` said the CPU runs AVX-512F/BW/VL and AVX512-BF16; the
            // panels hold `kp` pairs of MR and NR words; a direct left operand's rows lie
            // inside its view (checked above); the tile's rows and columns lie inside `out`
            // (`r0 + rows <= m`, `c0 + cols <= n <= ld`, checked above).
            #[cfg(target_arch = "x86_64")]
            unsafe {
                let left = avx512::Left::of(direct, a, pa, ip, kp);
                avx512::tile(
                    kp,
                    left,
                    &pb[first + jp * panel..][..NR * kp],
                    avx512::Out::F32 {
                        first: out.as_mut_ptr().add(r0 * ld + c0),
                        ld,
                        accumulate,
                        alpha,
                    },
                    rows,
                    cols,
                )
            };
        }
    }
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
/// `2p + 1` (high half), zero past the lines or `k` (so pairs past `⌈k/2⌉` pad with zeros).
/// Built in parallel, one task per panel or per group of panels ([`pack_panels`]).
pub(super) fn pack<const W: usize>(op: Lines, panels: usize, kp: usize) -> Vec<u32> {
    // Not zeroed: every word is written below (zeroing was 9% of a bf16 step's main thread).
    let mut packed = uninit::<u32>(panels * W * kp);
    pack_into::<W>(op, kp, &mut packed, true);
    // SAFETY: `pack_into` writes every word of its panels.
    unsafe { assume_init(packed) }
}

/// [`pack`] into `words` (`panels · W · kp` of them, `panels` taken from its length, every
/// one written), in parallel on rayon's pool or, for a product that is one task of a parallel
/// loop, on this thread.
fn pack_into<const W: usize>(op: Lines, kp: usize, words: &mut [MaybeUninit<u32>], parallel: bool) {
    debug_assert!(kp >= op.k.div_ceil(2) && words.len().is_multiple_of(W * kp.max(1)));
    if kp == 0 {
        return;
    }
    // Panels whose lanes are adjacent (`step = 1`) are packed `GROUP` at a time, pair by pair,
    // so that each pair reads whole cache lines of its two source rows (`GROUP · W` elements)
    // instead of `W` of them per panel: twelve lanes are 24 bytes of a 64-byte line, which
    // the next panels' tasks read again later (the backward's weight gradients pack their
    // left operand, the layer inputs transposed, this way).
    const GROUP: usize = 8;
    let group = if op.step == 1 && !W.is_multiple_of(32) {
        GROUP
    } else {
        1
    };
    let task = |(g, words): (usize, &mut [MaybeUninit<u32>])| {
        let first = g * group;
        let count = words.len() / (W * kp);
        if (first + count) * W <= op.count {
            pack_panels::<W>(op, first, count, words, kp);
        } else {
            // The group holding the edge panel: one panel at a time.
            for (i, words) in words.chunks_mut(W * kp).enumerate() {
                pack_panels::<W>(op, first + i, 1, words, kp);
            }
        }
    };
    if parallel {
        words
            .par_chunks_mut(group * W * kp)
            .enumerate()
            .for_each(task);
    } else {
        words.chunks_mut(group * W * kp).enumerate().for_each(task);
    }
}

/// Panels `panel .. panel + count` of [`pack`] into `words` (`count · W · kp` of them, each
/// written). When every panel is full, a layout whose pairs are adjacent (`k_step = 1`: each
/// word is one 32-bit read) or whose lanes are (`step = 1`: two contiguous runs of
/// `count · W` elements interleaved) is read without per-element index arithmetic.
fn pack_panels<const W: usize>(
    op: Lines,
    panel: usize,
    count: usize,
    words: &mut [MaybeUninit<u32>],
    kp: usize,
) {
    let first = panel * W;
    let lanes = count * W;
    let full = first + lanes <= op.count;
    let pairs = if full { op.k / 2 } else { 0 };
    // Edge panels (not `full`) take the element-wise path below for every pair.
    if full && pairs > 0 && simd_packs(op, first + lanes) {
        // The same words, vectorized: the caller's `available()` (AVX-512F/BW/VL) and the
        // bounds `simd_packs` checked.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `simd_packs` checked the CPU and that every element read lies inside
        // `op.data`; `words` holds `count · W · kp` words.
        unsafe {
            let base = op.data.as_ptr().add(op.offset + first * op.step) as *const u16;
            let words = words.as_mut_ptr() as *mut u32;
            if op.k_step == 1 {
                avx512::gather_pairs::<W>(base, op.step, count, pairs, kp, words)
            } else {
                avx512::interleave_pairs::<W>(base, op.k_step, count, pairs, kp, words)
            }
        }
    } else if full && op.k_step == 1 {
        for lane in 0..lanes {
            let at = (lane / W) * W * kp + lane % W;
            let start = op.offset + (first + lane) * op.step;
            let line = &op.data[start..start + 2 * pairs];
            for (p, pair) in line.chunks_exact(2).enumerate() {
                words[at + p * W]
                    .write(pair[0].to_bits() as u32 | (pair[1].to_bits() as u32) << 16);
            }
        }
    } else if full && op.step == 1 {
        for p in 0..pairs {
            let lo = op.offset + first + 2 * p * op.k_step;
            let hi = lo + op.k_step;
            let (lo, hi) = (&op.data[lo..lo + lanes], &op.data[hi..hi + lanes]);
            for (i, (lo, hi)) in lo.chunks_exact(W).zip(hi.chunks_exact(W)).enumerate() {
                let at = i * W * kp + p * W;
                for ((w, l), h) in words[at..at + W].iter_mut().zip(lo).zip(hi) {
                    w.write(l.to_bits() as u32 | (h.to_bits() as u32) << 16);
                }
            }
        }
    }
    // Whatever the fast layouts left: other layouts, edge panels, an odd k's last pair and
    // the zero pairs past ⌈k/2⌉.
    let done = if op.k_step == 1 || op.step == 1 {
        pairs
    } else {
        0
    };
    for i in 0..count {
        let panel_first = first + i * W;
        for p in done..kp {
            let at = i * W * kp + p * W;
            for (lane, w) in words[at..at + W].iter_mut().enumerate() {
                w.write(
                    op.bits(panel_first + lane, 2 * p)
                        | op.bits(panel_first + lane, 2 * p + 1) << 16,
                );
            }
        }
    }
}

/// Whether [`pack_panels`] packs the `pairs` of lines `..end` of `op` (every line full, a
/// layout with adjacent pairs or adjacent lanes) with AVX-512: where the CPU runs it, the
/// element offsets fit the gathers' 32-bit indices, and every element read lies inside
/// `op.data` (checked here, as the element-wise path's slicing would).
fn simd_packs(op: Lines, end: usize) -> bool {
    if !cfg!(target_arch = "x86_64") || !available() || !(op.k_step == 1 || op.step == 1) {
        return false;
    }
    let pairs = op.k / 2;
    // The last element either layout reads: line `end - 1`'s element `2·pairs - 1`.
    let last = op.offset + (end - 1) * op.step + (2 * pairs - 1) * op.k_step;
    assert!(
        last < op.data.len(),
        "an operand's view reads past its buffer"
    );
    end * op.step < (i32::MAX as usize) / 2
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

    /// One pair `p` of `k` into the tile's accumulators `acc`: the right panel `b`'s two
    /// 16-column vectors of pair `p`, times each row `r`'s left pair (`$pair`, a 32-bit word
    /// holding two bf16), broadcast. A macro, so both left layouts compile to the same loop
    /// body inside the caller's `target_feature` function. Unsafe to expand: it reads `b` at
    /// `p·NR .. p·NR + NR` words without checks.
    macro_rules! pair_products {
        ($acc:ident, $b:ident, $p:ident, |$r:ident| $pair:expr) => {{
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512($b.add($p * NR) as *const _));
            let b1: __m512bh =
                std::mem::transmute(_mm512_loadu_si512($b.add($p * NR + 16) as *const _));
            for ($r, row) in $acc.iter_mut().enumerate() {
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32($pair));
                row[0] = _mm512_dpbf16_ps(row[0], av, b0);
                row[1] = _mm512_dpbf16_ps(row[1], av, b1);
            }
        }};
    }

    /// [`super::pack_panels`]' words of `count` full panels of `W` lines whose pairs are
    /// adjacent (`k_step = 1`): word `[i][p][lane]` is line `i·W + lane`'s 32-bit word `p`,
    /// lines `step` elements apart from `base`, gathered 16 lanes at a time.
    ///
    /// # Safety
    /// The CPU runs AVX-512F/BW/VL; lines `..count·W` hold `2·pairs` elements from `base`
    /// (`line·step` elements in, `count·W·step` within `i32` range); `words` holds
    /// `count·W·kp` words, `pairs <= kp`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn gather_pairs<const W: usize>(
        base: *const u16,
        step: usize,
        count: usize,
        pairs: usize,
        kp: usize,
        words: *mut u32,
    ) {
        let lanes = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(step as i32),
        );
        for i in 0..count {
            for j in (0..W).step_by(16) {
                let mask = ((1u32 << (W - j).min(16)) - 1) as __mmask16;
                // Element offsets of lines `i·W + j ..` from `base`.
                let at = _mm512_add_epi32(lanes, _mm512_set1_epi32(((i * W + j) * step) as i32));
                for p in 0..pairs {
                    // SAFETY: the caller's bounds; masked lanes are neither read nor written.
                    unsafe {
                        let v = _mm512_mask_i32gather_epi32::<2>(
                            _mm512_setzero_si512(),
                            mask,
                            at,
                            base.add(2 * p) as *const i32,
                        );
                        _mm512_mask_storeu_epi32(
                            words.add(i * W * kp + p * W + j) as *mut i32,
                            mask,
                            v,
                        );
                    }
                }
            }
        }
    }

    /// [`super::pack_panels`]' words of `count` full panels of `W` adjacent lines (`step = 1`):
    /// word `[i][p][lane]` joins element `i·W + lane` of rows `2p` (low half) and `2p + 1`
    /// (high half), rows `k_step` elements apart from `base`, 16 lanes at a time.
    ///
    /// # Safety
    /// The CPU runs AVX-512F/BW/VL; rows `..2·pairs` hold `count·W` elements from `base`;
    /// `words` holds `count·W·kp` words, `pairs <= kp`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn interleave_pairs<const W: usize>(
        base: *const u16,
        k_step: usize,
        count: usize,
        pairs: usize,
        kp: usize,
        words: *mut u32,
    ) {
        for p in 0..pairs {
            // SAFETY: the caller's bounds; masked lanes are neither read nor written.
            unsafe {
                let lo = base.add(2 * p * k_step);
                let hi = lo.add(k_step);
                for i in 0..count {
                    for j in (0..W).step_by(16) {
                        let mask = ((1u32 << (W - j).min(16)) - 1) as __mmask16;
                        let at = i * W + j;
                        let l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
                            mask,
                            lo.add(at) as *const i16,
                        ));
                        let h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
                            mask,
                            hi.add(at) as *const i16,
                        ));
                        _mm512_mask_storeu_epi32(
                            words.add(i * W * kp + p * W + j) as *mut i32,
                            mask,
                            _mm512_or_si512(l, _mm512_slli_epi32::<16>(h)),
                        );
                    }
                }
            }
        }
    }

    /// Where a tile reads the left operand's pairs.
    #[derive(Clone, Copy)]
    pub enum Left {
        /// Packed: word `p·MR + r` holds row `r`'s pair `p` ([`super::pack`]).
        Packed(*const u32),
        /// Row-major bf16 rows: row `r`'s pair `p` is the 32-bit word at byte
        /// `first + r·row + 4p`.
        Rows { first: *const u8, row: usize },
    }

    impl Left {
        /// Row tile `ip`'s left operand: `a`'s rows `ip·MR ..` read in place (`direct`), or
        /// its panel of `packed` (`kp` pairs per row). Panics if the panel lies past `packed`.
        ///
        /// # Safety
        /// For `direct`, row `ip·MR` of `a` lies inside `a.data`.
        pub unsafe fn of(
            direct: bool,
            a: super::View,
            packed: &[u32],
            ip: usize,
            kp: usize,
        ) -> Left {
            if direct {
                Left::Rows {
                    // SAFETY: the caller's bound.
                    first: unsafe { a.data.as_ptr().add(a.offset + ip * MR * a.row) } as *const u8,
                    row: 2 * a.row,
                }
            } else {
                Left::Packed(packed[ip * MR * kp..(ip + 1) * MR * kp].as_ptr())
            }
        }
    }

    /// Where a tile's sums go: element `(r, c)` at `first + r·ld + c`.
    #[derive(Clone, Copy)]
    pub enum Out {
        /// Rounded to bf16 (`vcvtneps2bf16`: to nearest even, subnormals flushed to zero).
        Bf16 { first: *mut bf16, ld: usize },
        /// In f32, times `alpha`, added to what is there when `accumulate`.
        F32 {
            first: *mut f32,
            ld: usize,
            accumulate: bool,
            alpha: f32,
        },
    }

    /// Rows `..rows` and columns `..cols` of the `MR x NR` tile `Σ_p a[r][p] ⊙ b[p·NR + c]`
    /// (pair products summed in f32) into `out` ([`Out`]).
    ///
    /// # Safety
    /// The CPU must run AVX-512F/BW/VL and AVX512-BF16; `a` reads `kp` pairs of `MR` rows
    /// (packed) or of `rows` rows (row-major), `b` holds `kp·NR` words; `out`'s element
    /// `(r, c)` is writable (and readable, to accumulate) for `r < rows <= MR`, `c < cols <= NR`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn tile(kp: usize, a: Left, b: &[u32], out: Out, rows: usize, cols: usize) {
        assert!(b.len() >= kp * NR && (1..=MR).contains(&rows) && cols <= NR);
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        let b = b.as_ptr();
        match a {
            // SAFETY: the caller's bounds; the vector types are bit casts.
            Left::Packed(a) => unsafe {
                for p in 0..kp {
                    pair_products!(acc, b, p, |r| *a.add(p * MR + r) as i32);
                }
            },
            // SAFETY: as above; rows past `rows` read the last row again (never stored).
            Left::Rows { first, row: stride } => unsafe {
                // Three row pointers
                // (rows 0, 4, 8) and two strides address all twelve rows, so the loop keeps
                // them in registers.
                let line = |r: usize| first.add(r.min(rows - 1) * stride);
                let (mut q0, mut q4, mut q8) = (line(0), line(4), line(8));
                let d = [
                    0isize,
                    line(1).offset_from(line(0)),
                    line(2).offset_from(line(0)),
                    line(3).offset_from(line(0)),
                ];
                let d4 = [
                    0isize,
                    line(5).offset_from(line(4)),
                    line(6).offset_from(line(4)),
                    line(7).offset_from(line(4)),
                ];
                let d8 = [
                    0isize,
                    line(9).offset_from(line(8)),
                    line(10).offset_from(line(8)),
                    line(11).offset_from(line(8)),
                ];
                for p in 0..kp {
                    pair_products!(acc, b, p, |r| {
                        let (q, off) = match r / 4 {
                            0 => (q0, d[r % 4]),
                            1 => (q4, d4[r % 4]),
                            _ => (q8, d8[r % 4]),
                        };
                        (q.offset(off) as *const i32).read_unaligned()
                    });
                    q0 = q0.add(4);
                    q4 = q4.add(4);
                    q8 = q8.add(4);
                }
            },
        }
        let mask = |lanes: usize| -> __mmask16 { ((1u32 << lanes.min(16)) - 1) as __mmask16 };
        let (low, high) = (mask(cols), mask(cols.saturating_sub(16)));
        // All MR rows with constant indices (the loop unrolls), so the accumulators stay in
        // registers: a loop over `..rows` spilled them to a stack array that the compiler then
        // zeroed with `memset` on every call (4% of the kernel's time in a bf16 step).
        for (r, row) in acc.iter().enumerate() {
            if r >= rows {
                continue;
            }
            // SAFETY: the caller's bounds on `out`; masked lanes are neither read nor written.
            unsafe {
                match out {
                    Out::Bf16 { first, ld } => {
                        let dst = first.add(r * ld) as *mut i16;
                        let lo: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(row[0]));
                        let hi: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(row[1]));
                        _mm256_mask_storeu_epi16(dst, low, lo);
                        _mm256_mask_storeu_epi16(dst.add(16), high, hi);
                    }
                    Out::F32 {
                        first,
                        ld,
                        accumulate,
                        alpha,
                    } => {
                        let dst = first.add(r * ld);
                        let alpha = _mm512_set1_ps(alpha);
                        for (half, (mask, sum)) in
                            [(low, row[0]), (high, row[1])].into_iter().enumerate()
                        {
                            let at = dst.add(16 * half);
                            let mut value = _mm512_mul_ps(sum, alpha);
                            if accumulate {
                                value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, at));
                            }
                            _mm512_mask_storeu_ps(at, mask, value);
                        }
                    }
                }
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
        // operands come in: pairs adjacent (row-major left: read in place for an even k, else
        // packed; transposed right), lanes adjacent (transposed left, row-major right, as the
        // backward's products read them) and neither (every other element of a wider buffer).
        for (m, k, n) in [
            (1, 1, 1),
            (13, 7, 33),
            (25, 40, 64),
            (50, 129, 70),
            (32, 32, 32),
            (70, 100, 97),
            // Several blocks of row tiles (4 tiles of 12 rows per block at k = 4096, the last
            // one short), and a row-major left operand packed for its 8 KiB rows.
            (70, 4096, 40),
            // Whole groups of eight 12-lane panels (a transposed left operand packs them pair
            // by pair), with an edge group after them (200) and without (192), odd and even k.
            (200, 33, 40),
            (192, 34, 20),
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
                if kernel == Kernel::DotProducts {
                    check_f32(m, k, n, a, b);
                }
            }
        }
    }

    /// [`gemm_f32_sequential`] on the same views: `out ← alpha·a·b` into a wider buffer (`ld`
    /// past `n`, whose extra columns must stay untouched), then `out += alpha·a·b` again.
    fn check_f32(m: usize, k: usize, n: usize, a: View, b: View) {
        let (ld, alpha, sentinel) = (n + 3, 0.5f32, -7.25f32);
        let mut out = vec![sentinel; m * ld];
        let mut packs = Packs::default();
        let (exact, abs) = reference(m, k, n, a, b);
        for (pass, accumulate) in [(1.0, false), (2.0, true)] {
            assert!(gemm_f32_sequential(
                (m, k, n),
                a,
                Right::View(b),
                (&mut out, ld),
                accumulate,
                alpha,
                &mut packs
            ));
            for r in 0..m {
                for c in 0..ld {
                    let got = f64::from(out[r * ld + c]);
                    if c >= n {
                        assert_eq!(got, f64::from(sentinel), "column {c} past n = {n} written");
                        continue;
                    }
                    // f32 sums of k products (k·2^-23 of the absolute products' sum, as in
                    // `check`), times alpha = 1/2 (exact), the second pass adding one more
                    // rounding of the running value.
                    let i = r * n + c;
                    let want = pass * 0.5 * exact[i];
                    let bound = pass * 0.5 * (k as f64) * 2f64.powi(-23) * abs[i]
                        + want.abs() * 2f64.powi(-23);
                    assert!(
                        (got - want).abs() <= bound * 1.01 + 1e-30,
                        "f32 out ({m}, {k}, {n}) pass {pass}, strides a ({}, {}) b ({}, {}), \
                         element ({r}, {c}): {got} vs {want}",
                        a.row,
                        a.col,
                        b.row,
                        b.col,
                    );
                }
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
    fn blocks_of_a_packed_operand_equal_the_same_views() {
        if !available() {
            eprintln!("this CPU has no AVX512-BF16: not tested here");
            return;
        }
        // A [9, 70] right operand packed once; blocks at even rows and at columns that are
        // multiples of 32: inside it, up to its edges (an odd k ending at its last row, a
        // short last panel), and the whole of it.
        let (k_all, n_all, m) = (9, 70, 13);
        let bb = values(k_all * n_all, 5);
        let ab = values(m * k_all, 6);
        let whole = View {
            data: &bb,
            offset: 0,
            row: n_all,
            col: 1,
        };
        let mut packed = PackedRight::default();
        packed.pack(whole, k_all, n_all);
        for (row, col, k, n) in [(0, 0, 9, 70), (2, 32, 4, 32), (4, 32, 5, 38), (8, 64, 1, 6)] {
            assert!(Right::block_fits(&packed, (row, col), k, n));
            let a = View {
                data: &ab,
                offset: 0,
                row: k,
                col: 1,
            };
            let b = View {
                offset: row * n_all + col,
                ..whole
            };
            let mut packs = Packs::default();
            let [mut by_view, mut by_block] = [(); 2].map(|_| vec![0f32; m * n]);
            for (right, out) in [
                (Right::View(b), &mut by_view),
                (
                    Right::Block {
                        packed: &packed,
                        row,
                        col,
                    },
                    &mut by_block,
                ),
            ] {
                assert!(gemm_f32_sequential(
                    (m, k, n),
                    a,
                    right,
                    (out, n),
                    false,
                    1.0,
                    &mut packs
                ));
            }
            assert_eq!(by_view, by_block, "block ({row}, {col}) + ({k}, {n})");
        }
        // Blocks that would read past the operand or misaligned ones do not fit.
        for (row, col, k, n) in [(1, 0, 2, 32), (0, 16, 2, 16), (2, 0, 3, 32), (0, 64, 2, 7)] {
            assert!(
                !Right::block_fits(&packed, (row, col), k, n),
                "({row}, {col}) + ({k}, {n})"
            );
        }
    }

    /// Throughput on one thread of the register tile alone (panels in cache, packed and row-major
    /// left operands) and of the large benchmark shape's products (`just bench-cpu 3 large`;
    /// `ta`/`tb`: transposed operands, as the backward reads them). A benchmark, not a test:
    /// `--ignored --nocapture` prints GFLOP/s (2·m·k·n FLOPs per product) to compare kernels or
    /// changes on one machine.
    #[test]
    #[ignore]
    fn throughput() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        #[cfg(target_arch = "x86_64")]
        if available() {
            let kp = 256;
            let a: Vec<u32> = (0..kp * MR)
                .map(|i| 0x3f80_3f80 ^ (i as u32 % 97))
                .collect();
            let b: Vec<u32> = (0..kp * NR)
                .map(|i| 0x3f80_3f80 ^ (i as u32 % 89))
                .collect();
            let mut out = vec![bf16::ZERO; MR * NR];
            let packed = avx512::Left::Packed(a.as_ptr());
            let rows = avx512::Left::Rows {
                first: a.as_ptr() as *const u8,
                row: 4 * kp,
            };
            for (name, left) in [("packed", packed), ("row-major", rows)] {
                let reps = 20_000;
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    // SAFETY: `available()`; the panels hold `kp` pairs of MR and NR words.
                    unsafe {
                        avx512::tile(
                            kp,
                            left,
                            &b,
                            avx512::Out::Bf16 {
                                first: out.as_mut_ptr(),
                                ld: NR,
                            },
                            MR,
                            NR,
                        )
                    };
                }
                let flops = (reps * 4 * MR * NR * kp) as f64;
                let rate = flops / t.elapsed().as_secs_f64() / 1e9;
                eprintln!(
                    "tile alone, {name} left operand, k = {}: {rate:.1} GFLOP/s",
                    2 * kp
                );
            }
        }
        for (m, k, n, ta, tb) in [
            (2048, 512, 1536, false, false),
            (2048, 512, 2048, false, false),
            (2048, 2048, 512, false, false),
            (2048, 512, 512, false, true),
            (512, 2048, 2048, true, false),
            (512, 2048, 1536, true, false),
        ] {
            let ab = values(m * k, 1);
            let bb = values(k * n, 2);
            let a = if ta {
                View {
                    data: &ab,
                    offset: 0,
                    row: 1,
                    col: m,
                }
            } else {
                View {
                    data: &ab,
                    offset: 0,
                    row: k,
                    col: 1,
                }
            };
            let b = if tb {
                View {
                    data: &bb,
                    offset: 0,
                    row: 1,
                    col: k,
                }
            } else {
                View {
                    data: &bb,
                    offset: 0,
                    row: n,
                    col: 1,
                }
            };
            let mut out = uninit(m * n);
            for kernel in kernels() {
                pool.install(|| {
                    gemm_with(kernel, m, k, n, a, b, &mut out);
                    let t = std::time::Instant::now();
                    let reps = 10;
                    for _ in 0..reps {
                        gemm_with(kernel, m, k, n, a, b, &mut out);
                    }
                    let dt = t.elapsed().as_secs_f64() / reps as f64;
                    eprintln!(
                        "{kernel:?} {m}x{k}x{n} ta={ta} tb={tb}: {:.1} GFLOP/s",
                        2.0 * (m * k * n) as f64 / dt / 1e9
                    );
                });
            }
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
