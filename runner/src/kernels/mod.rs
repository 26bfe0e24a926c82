//! memwall's own kernels for the model's hot operations: on flex (Burn's CPU backend), and on
//! CubeCL ([`cube`]).
//!
//! Burn 0.21's flex runs GELU as a scalar `libm::erff` per element on one thread and copies a
//! strided view element by element; at the `cpu` profile these were 38% of a training step's
//! main-thread time (`just profile-cpu`, the book's findings on the CPU backend, docs/src/findings/cpu-backend.md). The kernels here work on
//! contiguous `f32` slices (bf16 through chunked conversion), are written so that LLVM
//! vectorizes their loops, are compiled for AVX-512 and AVX2 besides the baseline and picked
//! at run time ([`simd_level`]), and run over rows in parallel on rayon's pool (the one flex's
//! matmuls use).
//!
//! - [`attention`]: the memory-efficient causal attention (FlashAttention-2's forward and
//!   backward) as one task per `(batch, head)`, its tiles' products on one thread;
//! - [`gelu`]: GELU forward and backward with a vectorizable `erf` (its error against libm is
//!   stated and tested there);
//! - [`heads`]: splitting `[batch, seq, heads · dh]` into `[batch, heads, seq, dh]` and merging
//!   it back as blocked contiguous copies;
//! - [`bf16_gemm`]: a bf16 product with AVX512-BF16's dot-product instruction (f32 sums), and
//!   the choice of kernel;
//! - [`amx`]: the same product on AMX tiles where the CPU and OS run them;
//! - [`matmul`]: the model's products: f32 by gemm into unzeroed buffers, split once over the
//!   threads; bf16 through [`bf16_gemm`], or through f32 without copying the operands' layouts
//!   where the CPU lacks its instructions;
//! - [`convert`]: bf16 slices to and from f32, vectorized (bit for bit the `half` crate's);
//! - [`adamw`]: AdamW's update of one parameter tensor in one pass, in f32 for every dtype
//!   ([`crate::train::adamw`]);
//! - [`adafactor`]: the settings of one Adafactor update (no CPU kernel: flex runs the
//!   composed update).
//!
//! - [`cube`]: the CUDA counterparts in CubeCL (attention, layer norm, GELU, AdamW, Adafactor), run on
//!   `CubeBackend` (CUDA without Burn's fusion) and tested on CubeCL's wgpu runtime.
//!
//! [`crate::model`]'s operations call the CPU kernels only on flex and the CubeCL ones only on
//! `CubeBackend`, through backend traits whose default (Burn's fusion backend, ndarray) is
//! Burn's own tensor operations.

pub mod adafactor;
pub mod adamw;
pub mod amx;
pub mod attention;
pub mod bf16_gemm;
pub mod convert;
#[cfg(feature = "cuda")]
pub mod cube;
pub mod flex;
pub mod gelu;
pub mod heads;
pub mod matmul;

/// The widest vector instructions this CPU runs that a kernel was compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdLevel {
    /// x86-64 with AVX-512F (16 f32 lanes).
    Avx512,
    /// x86-64 with AVX2 and FMA (8 f32 lanes).
    Avx2,
    /// The build's baseline (SSE2 on x86-64).
    Baseline,
}

/// The level detected once per process (`is_x86_feature_detected!`).
pub fn simd_level() -> SimdLevel {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Baseline
    })
}

/// Deterministic pseudo-random values in `[lo, lo + width)` for tests: a 64-bit LCG (Knuth's
/// MMIX multiplier and increment), independent of the backends' process-wide RNG, which tests
/// running in parallel threads share.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u64, lo: f32, width: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            lo + ((state >> 40) as f32 / (1u64 << 24) as f32) * width
        })
        .collect()
}

/// Elements per parallel task: large enough that rayon's scheduling (a few µs) is small
/// beside the work, small enough that two cores share a `[8·128, 512]` activation evenly.
pub(crate) const CHUNK: usize = 16 * 1024;

/// Defines `$name(args)` (optionally generic over one type parameter with one bound) that runs
/// the `#[inline(always)]` body `$body` compiled for AVX-512, AVX2 + FMA or the baseline, as
/// [`simd_level`] says. The body must be safe code.
macro_rules! dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident $(<$g:ident: $bound:path>)?
        ($($arg:ident: $ty:ty),*) => $body:path) => {
        $(#[$meta])*
        $vis fn $name $(<$g: $bound>)? ($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
                unsafe fn avx512 $(<$g: $bound>)? ($($arg: $ty),*) { $body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2 $(<$g: $bound>)? ($($arg: $ty),*) { $body($($arg),*) }
                match $crate::kernels::simd_level() {
                    // SAFETY: the CPU runs these instructions (detected at run time).
                    $crate::kernels::SimdLevel::Avx512 => return unsafe { avx512($($arg),*) },
                    $crate::kernels::SimdLevel::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::kernels::SimdLevel::Baseline => {}
                }
            }
            $body($($arg),*)
        }
    };
}
pub(crate) use dispatch;
