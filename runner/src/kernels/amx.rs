//! bf16 products on Intel AMX (Advanced Matrix Extensions): the operands read as bf16, the
//! products summed in f32 by the tile dot-product instruction `TDPBF16PS`, the result rounded
//! once to bf16 (to nearest even), as [`super::bf16_gemm`] does with AVX512-BF16's
//! `VDPBF16PS`, but 16 x 16 outputs over 32 values of `k` per instruction.
//!
//! AMX holds eight tile registers of up to 16 rows of 64 bytes (Intel® 64 and IA-32
//! Architectures Software Developer's Manual, vol. 1, ch. 18 "Programming with Intel® AMX").
//! `TDPBF16PS tmmC, tmmA, tmmB` adds to the 16 x 16 f32 tile C, for every row `i` and column
//! `j`, the 32 products of A's row `i` (16 pairs of bf16 along `k`) with B's column `j` held as
//! 16 rows of pairs: B's row `p` holds, per column, the pair `(b[2p][j], b[2p + 1][j])`, the
//! layout [`super::bf16_gemm`] already packs its right operand in. The left operand is packed
//! here with each row's pairs contiguous (A's tile rows).
//!
//! Each task computes 32 x 32 outputs at a time in four accumulator tiles (tmm0-3) from two
//! left tiles (tmm4-5) and two right tiles (tmm6-7), over the whole of `k` (so each output is
//! one f32 sum rounded once), row block after row block down one 32-column panel of the right
//! operand, which stays in cache. `k` is padded with zero pairs to a multiple of 32 and the rows
//! to a multiple of 32, so every tile is whole; only the outputs inside `m x n` are written.
//!
//! Linux grants a process the AMX tile data state only on request
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, the kernel's
//! Documentation/arch/x86/xstate.rst); [`available`] asks once, and the kernel is used only
//! where the CPU has AMX-TILE and AMX-BF16, the OS enables their state (XCR0 bits 17 and 18) and
//! the request succeeded. The instructions are written as inline assembly (stable Rust has no
//! AMX intrinsics); the compiler emits no AMX code of its own, so nothing else uses the tile
//! registers between the assembly blocks of one task.

use super::bf16_gemm::{self, Lines, SendPtr, View, NR};
use half::bf16;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Rows of a tile, and rows of the left operand's packed panels.
const TILE_ROWS: usize = 16;
/// Pairs of `k` per tile (64 bytes of bf16 pairs per row).
const TILE_PAIRS: usize = 16;
/// Rows of outputs a task computes at once (two left tiles).
const BLOCK_ROWS: usize = 2 * TILE_ROWS;

/// Whether this CPU and OS run the AMX bf16 kernel (detected, and the tile state requested from
/// Linux, once per process). Requires AVX512-BF16 too ([`bf16_gemm::available`]), which every
/// AMX processor has, for the final rounding to bf16.
pub fn available() -> bool {
    use std::sync::OnceLock;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            bf16_gemm::available() && detect::amx_bf16() && detect::request_tile_state()
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        {
            false
        }
    })
}

/// `out = a · b` for `a` `[m, k]` and `b` `[k, n]` as views, `out` `[m, n]` row-major (length
/// `m·n`, uninitialized: every element is written), each element the f32 sum of its `k`
/// products rounded once to bf16.
///
/// Returns `false` (and leaves `out` untouched) where the kernel cannot run ([`available`]).
/// Panics if a view reads past its buffer or `out`'s length is not `m·n`.
pub fn gemm(m: usize, k: usize, n: usize, a: View, b: View, out: &mut [MaybeUninit<bf16>]) -> bool {
    assert_eq!(out.len(), m * n, "the product's buffer holds m·n elements");
    if !available() {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    // Pairs of k, padded with zero pairs to whole tiles.
    let kp = k.div_ceil(2).div_ceil(TILE_PAIRS).max(1) * TILE_PAIRS;
    let row_blocks = m.div_ceil(BLOCK_ROWS);
    let panels = n.div_ceil(NR);
    let pa = pack_rows(a.rows(m, k), row_blocks * BLOCK_ROWS, kp);
    let pb = bf16_gemm::pack::<NR>(b.columns(n, k), panels, kp);
    // Tasks: each column panel cut into groups of row blocks, about four tasks per thread.
    let want = 4 * rayon::current_num_threads();
    let groups = want.div_ceil(panels).clamp(1, row_blocks);
    let per_group = row_blocks.div_ceil(groups);
    let out_ptr = SendPtr(out.as_mut_ptr() as *mut bf16);
    (0..panels * groups).into_par_iter().for_each(|t| {
        let (panel, group) = (t / groups, t % groups);
        let blocks = group * per_group..((group + 1) * per_group).min(row_blocks);
        let b_panel = &pb[panel * NR * kp..(panel + 1) * NR * kp];
        let c0 = panel * NR;
        let cols = (n - c0).min(NR);
        // SAFETY: `available()` said the CPU runs AMX-TILE, AMX-BF16 and AVX512-BF16 and Linux
        // granted the tile state; the panels hold whole tiles (`kp` a multiple of 16 pairs,
        // the left operand's rows a multiple of 32); tasks write disjoint rectangles of `out`,
        // inside its `m·n` elements.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            tiles::panel(&pa, kp, blocks, b_panel, out_ptr.get().add(c0), n, m, cols)
        };
    });
    true
}

/// `rows` rows (a multiple of 16) of `kp` pair words each: word `[row][p]` holds line `row`'s
/// elements `2p` (low half) and `2p + 1` (high half), zero past the lines or `k`: the left
/// operand as AMX tile rows. Built in parallel, 16 rows per task; a full panel whose pairs are
/// adjacent (`k_step = 1`: each word one 32-bit read) or whose lines are (`step = 1`, the
/// transposed operand of a weight gradient: two contiguous runs of 16 per pair) is read without
/// per-element index arithmetic.
fn pack_rows(op: Lines, rows: usize, kp: usize) -> Vec<u32> {
    let mut packed = bf16_gemm::uninit::<u32>(rows * kp);
    packed
        .par_chunks_mut(TILE_ROWS * kp)
        .enumerate()
        .for_each(|(panel, words)| {
            let first = panel * TILE_ROWS;
            let full = first + TILE_ROWS <= op.count;
            let pairs = if full && (op.k_step == 1 || op.step == 1) {
                op.k / 2
            } else {
                0
            };
            if pairs > 0 && op.k_step == 1 {
                for (lane, row) in words.chunks_mut(kp).enumerate() {
                    let start = op.offset + (first + lane) * op.step;
                    let src = &op.data[start..start + 2 * pairs];
                    for (w, pair) in row.iter_mut().zip(src.chunks_exact(2)) {
                        w.write(pair[0].to_bits() as u32 | (pair[1].to_bits() as u32) << 16);
                    }
                }
            } else if pairs > 0 {
                for p in 0..pairs {
                    let lo = op.offset + first + 2 * p * op.k_step;
                    let hi = lo + op.k_step;
                    let (lo, hi) = (&op.data[lo..lo + TILE_ROWS], &op.data[hi..hi + TILE_ROWS]);
                    for (lane, (l, h)) in lo.iter().zip(hi).enumerate() {
                        words[lane * kp + p].write(l.to_bits() as u32 | (h.to_bits() as u32) << 16);
                    }
                }
            }
            // Whatever the fast layouts left: other layouts, edge panels, an odd k's last pair
            // and the padding pairs.
            for (lane, row) in words.chunks_mut(kp).enumerate() {
                for (p, w) in row.iter_mut().enumerate().skip(pairs) {
                    w.write(op.bits(first + lane, 2 * p) | op.bits(first + lane, 2 * p + 1) << 16);
                }
            }
        });
    // SAFETY: every word of every row was written (the fast layouts' pairs, then the rest).
    unsafe { bf16_gemm::assume_init(packed) }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod detect {
    use std::arch::asm;
    use std::arch::x86_64::__cpuid_count;

    /// CPUID leaf 7: AMX-BF16 (EDX bit 22) and AMX-TILE (EDX bit 24); the OS saves and
    /// restores the tile configuration and data (XCR0 bits 17 and 18, read with XGETBV where
    /// CPUID leaf 1 reports OSXSAVE, ECX bit 27).
    pub fn amx_bf16() -> bool {
        // SAFETY: CPUID is available on every x86-64 processor (a safe function in current
        // Rust; the block keeps older toolchains building).
        #[allow(unused_unsafe)]
        let (leaf1, leaf7) = unsafe { (__cpuid_count(1, 0), __cpuid_count(7, 0)) };
        let cpu = leaf7.edx & (1 << 22) != 0 && leaf7.edx & (1 << 24) != 0;
        if !cpu || leaf1.ecx & (1 << 27) == 0 {
            return false;
        }
        let lo: u32;
        // SAFETY: XGETBV with ECX = 0 reads XCR0; OSXSAVE says the instruction is enabled.
        unsafe {
            asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") _,
                 options(nomem, nostack, preserves_flags))
        };
        lo & (1 << 17) != 0 && lo & (1 << 18) != 0
    }

    /// Asks Linux for permission to use the tile data state in this process
    /// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, Linux 5.16 and later); `false`
    /// when refused or unknown to the kernel.
    pub fn request_tile_state() -> bool {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a system call with integer arguments; it changes only this process's
        // permitted extended states.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        r == 0
    }
}

#[cfg(target_arch = "x86_64")]
mod tiles {
    use super::{BLOCK_ROWS, NR, TILE_PAIRS, TILE_ROWS};
    use half::bf16;
    use std::arch::asm;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// The tile configuration (palette 1): tmm0-7 each 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    impl Config {
        fn whole_tiles() -> Config {
            let mut c = [0u8; 64];
            c[0] = 1;
            for t in 0..8 {
                c[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
                c[48 + t] = TILE_ROWS as u8;
            }
            Config(c)
        }
    }

    /// The output rows of row blocks `blocks` (32 rows each, of `m` in all) and columns
    /// `..cols` (at most 32) of one right panel: `out[r·ld + c]` = the f32 sum over `kp` pairs
    /// of packed left row `r` (`pa`, `kp` words per row) and packed right column `c` (`b`,
    /// `[p][32 lanes]`), rounded to bf16 (`vcvtneps2bf16`: to nearest even).
    ///
    /// # Safety
    /// The CPU runs AMX-TILE, AMX-BF16 and AVX512-BF16 and Linux granted the tile data state;
    /// `kp` is a multiple of 16; `pa` holds the rows of `blocks` (`kp` words each), `b` holds
    /// `kp·32` words; `out[r·ld + c]` is writable for every row `r < m` of `blocks` and
    /// `c < cols <= 32`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn panel(
        pa: &[u32],
        kp: usize,
        blocks: Range<usize>,
        b: &[u32],
        out: *mut bf16,
        ld: usize,
        m: usize,
        cols: usize,
    ) {
        assert!(kp.is_multiple_of(TILE_PAIRS) && b.len() >= kp * NR && cols <= NR);
        assert!(pa.len() >= blocks.end * BLOCK_ROWS * kp);
        let config = Config::whole_tiles();
        let mut c = [0f32; BLOCK_ROWS * NR];
        let (a_stride, b_stride) = (kp * 4, NR * 4);
        let mask = |lanes: usize| -> __mmask16 { ((1u32 << lanes.min(16)) - 1) as __mmask16 };
        let (low, high) = (mask(cols), mask(cols.saturating_sub(16)));
        // SAFETY (every block below): the caller's CPU and OS guarantees; each tile load reads
        // 16 rows of 64 bytes inside `pa` or `b` (asserted above), each store writes 16 rows of
        // 64 bytes inside `c`.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly));
            for block in blocks {
                let a0 = pa.as_ptr().add(block * BLOCK_ROWS * kp);
                let a1 = a0.add(TILE_ROWS * kp);
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    options(nomem, nostack)
                );
                for chunk in 0..kp / TILE_PAIRS {
                    let (ao, bo) = (chunk * TILE_PAIRS, chunk * TILE_PAIRS * NR);
                    asm!(
                        "tileloadd tmm4, [{a0} + {sa}*1]",
                        "tileloadd tmm5, [{a1} + {sa}*1]",
                        "tileloadd tmm6, [{b0} + {sb}*1]",
                        "tileloadd tmm7, [{b1} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0.add(ao),
                        a1 = in(reg) a1.add(ao),
                        b0 = in(reg) b.as_ptr().add(bo),
                        b1 = in(reg) b.as_ptr().add(bo + 16),
                        sa = in(reg) a_stride,
                        sb = in(reg) b_stride,
                        options(nostack, readonly),
                    );
                }
                let cp = c.as_mut_ptr();
                asm!(
                    "tilestored [{c0} + {s}*1], tmm0",
                    "tilestored [{c1} + {s}*1], tmm1",
                    "tilestored [{c2} + {s}*1], tmm2",
                    "tilestored [{c3} + {s}*1], tmm3",
                    c0 = in(reg) cp,
                    c1 = in(reg) cp.add(16),
                    c2 = in(reg) cp.add(TILE_ROWS * NR),
                    c3 = in(reg) cp.add(TILE_ROWS * NR + 16),
                    s = in(reg) NR * 4,
                    options(nostack),
                );
                let r0 = block * BLOCK_ROWS;
                for r in 0..BLOCK_ROWS.min(m.saturating_sub(r0)) {
                    let dst = out.add((r0 + r) * ld) as *mut i16;
                    let row = cp.add(r * NR);
                    let lo: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(row)));
                    let hi: __m256i =
                        std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(row.add(16))));
                    _mm256_mask_storeu_epi16(dst, low, lo);
                    _mm256_mask_storeu_epi16(dst.add(16), high, hi);
                }
            }
            asm!("tilerelease", options(nomem, nostack));
        }
    }
}
