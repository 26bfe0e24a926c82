//! 16-bit float slices to and from f32, on one thread, vectorized for the CPU at hand.
//!
//! The `half` crate's bf16 slice conversions (`HalfFloatSliceExt`, 2.7) are element loops that
//! the build compiles for its baseline, SSE2 on x86-64: four lanes at a time with the NaN
//! handling blended in. In a bf16 training step on flex those loops (under GELU, AdamW and the
//! attention's rounding of its probabilities) were 5.3% of the CPU samples at the large bench
//! shape (`reference/perf_step_profile.py`, 2-core AMD EPYC). Here the same loops are compiled
//! for AVX-512 and AVX2 too and picked at run time ([`super::dispatch`]); each result is bit for
//! bit `half`'s ([`bf16::to_f32`] and [`bf16::from_f32`]: round to nearest even, NaNs kept and
//! made quiet, subnormals kept), which a test checks over every bit pattern. f16 keeps `half`'s
//! own conversions, which use F16C where the CPU has it.

use super::dispatch;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::mem::MaybeUninit;

/// A 16-bit float type the kernels widen to f32 for their arithmetic and round back.
pub trait Half: Copy + Send + Sync + 'static {
    /// `dst[i] = src[i]` as f32 (exact). Panics if the lengths differ.
    fn widen(src: &[Self], dst: &mut [f32]);
    /// `dst[i] = src[i]` rounded to nearest even (NaNs stay NaN). Panics if the lengths differ.
    fn narrow(src: &[f32], dst: &mut [Self]);
}

impl Half for bf16 {
    fn widen(src: &[bf16], dst: &mut [f32]) {
        widen_bf16(src, dst);
    }
    fn narrow(src: &[f32], dst: &mut [bf16]) {
        narrow_bf16(src, dst);
    }
}

impl Half for f16 {
    fn widen(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src);
    }
}

/// A bf16's bits as the f32 it stands for: the high half of the f32's bits, a NaN made quiet
/// (`half`'s `bf16::to_f32`).
#[inline(always)]
fn widen_one(h: u16) -> u32 {
    let quiet = if h & 0x7FFF > 0x7F80 { 0x0040 } else { 0 };
    u32::from(h | quiet) << 16
}

/// An f32's bits rounded to bf16's: to nearest, ties to even; a NaN keeps its high bits and is
/// made quiet (`half`'s `bf16::from_f32`).
#[inline(always)]
fn narrow_one(x: u32) -> u16 {
    let high = x >> 16;
    let rounded = if x & 0x7FFF_FFFF > 0x7F80_0000 {
        high | 0x0040
    } else {
        // Up when the dropped half is over one half, or exactly one half and `high` is odd.
        high + u32::from(x & 0x8000 != 0 && x & 0x1_7FFF != 0)
    };
    rounded as u16
}

#[inline(always)]
fn widen_body(src: &[bf16], dst: &mut [MaybeUninit<f32>]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "widen: source and destination lengths"
    );
    for (d, s) in dst.iter_mut().zip(src) {
        d.write(f32::from_bits(widen_one(s.to_bits())));
    }
}

#[inline(always)]
fn narrow_body(src: &[f32], dst: &mut [MaybeUninit<bf16>]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "narrow: source and destination lengths"
    );
    for (d, s) in dst.iter_mut().zip(src) {
        d.write(bf16::from_bits(narrow_one(s.to_bits())));
    }
}

dispatch!(
    /// `dst[i] = src[i]` as f32, on this thread: every element of `dst` is written. Panics if
    /// the lengths differ.
    pub fn widen_bf16_into(src: &[bf16], dst: &mut [MaybeUninit<f32>]) => widen_body
);
dispatch!(
    /// `dst[i] = src[i]` rounded to bf16 (nearest even), on this thread: every element of `dst`
    /// is written. Panics if the lengths differ.
    pub fn narrow_bf16_into(src: &[f32], dst: &mut [MaybeUninit<bf16>]) => narrow_body
);

/// [`widen_bf16_into`] an initialized `dst`.
pub fn widen_bf16(src: &[bf16], dst: &mut [f32]) {
    // SAFETY: `MaybeUninit<f32>` has f32's layout, and the kernel writes only initialized
    // values (every element), so `dst` stays initialized.
    widen_bf16_into(src, unsafe {
        &mut *(dst as *mut [f32] as *mut [MaybeUninit<f32>])
    });
}

/// [`narrow_bf16_into`] an initialized `dst`.
pub fn narrow_bf16(src: &[f32], dst: &mut [bf16]) {
    // SAFETY: as in `widen_bf16`.
    narrow_bf16_into(src, unsafe {
        &mut *(dst as *mut [bf16] as *mut [MaybeUninit<bf16>])
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bf16_widens_and_every_f32_pattern_class_narrows_as_half_does() {
        // Every bf16 bit pattern, through the dispatched kernel, against `half`.
        let all: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
        let mut wide = vec![0f32; all.len()];
        widen_bf16(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            assert_eq!(
                w.to_bits(),
                h.to_f32().to_bits(),
                "widen {:#06x}",
                h.to_bits()
            );
        }
        // Every f32 whose low 16 bits are one of the rounding cases (below, at and above one
        // half, with an even and an odd high half), for every high half: zeros, subnormals,
        // normals, the largest finite values (rounding up to infinity), infinities and NaNs.
        let lows = [0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF];
        let floats: Vec<f32> = (0..=u16::MAX as u32)
            .flat_map(|high| {
                lows.iter()
                    .map(move |&low| f32::from_bits(high << 16 | low))
            })
            .collect();
        let mut narrow = vec![bf16::ZERO; floats.len()];
        narrow_bf16(&floats, &mut narrow);
        for (x, h) in floats.iter().zip(&narrow) {
            assert_eq!(
                h.to_bits(),
                bf16::from_f32(*x).to_bits(),
                "narrow {:#010x}",
                x.to_bits()
            );
        }
    }
}
