//! GELU, `gelu(x) = x · Φ(x)` with `Φ(x) = ½ (1 + erf(x / √2))` (Hendrycks and Gimpel 2016,
//! "Gaussian Error Linear Units", section 2; the exact form, as PyTorch's default
//! `approximate='none'` and Burn's `gelu`), and its derivative `Φ(x) + x φ(x)` with
//! `φ(x) = e^{-x²/2} / √(2π)`.
//!
//! `erfc` is Abramowitz and Stegun's formula 7.1.26 (Handbook of Mathematical Functions, 1964):
//! for `z ≥ 0`, `erfc(z) ≈ (a₁t + a₂t² + a₃t³ + a₄t⁴ + a₅t⁵) e^{-z²}` with `t = 1 / (1 + p z)`,
//! absolute error at most 1.5e-7. With `z = |x| / √2`, `e^{-z²} = e^{-x²/2}` is the exponential
//! `φ` needs too, so forward and backward each take one exponential, computed by [`exp_neg`]
//! (Cody-Waite range reduction and a degree-7 Taylor polynomial), and
//! `Φ(x) = 1 - ½ erfc(z)` for `x ≥ 0`, `½ erfc(z)` below (no cancellation in the left tail).
//! Every step is branch-free arithmetic, so the loops vectorize.
//!
//! Measured error against the f64 libm form over `x ∈ [-10, 10]` (step 2⁻¹⁰, the tests below):
//! GELU 1.52e-7 · max(1, |x|) absolute at worst, the derivative 3.70e-7 absolute at worst; the
//! tests hold them to 2.4e-7 and 4e-7.

use super::{dispatch, CHUNK};
use rayon::prelude::*;

/// Abramowitz and Stegun 7.1.26: `p` and `a₁ … a₅`.
const P: f32 = 0.327_591_1;
const A: [f32; 5] = [
    0.254_829_6,
    -0.284_496_74,
    1.421_413_7,
    -1.453_152_1,
    1.061_405_4,
];
const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// `1 / √(2π)`.
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// `e^{-u}` for `u ≥ 0`, exactly zero for `u` above 87 (`e^{-87}` = 1.6e-38 is within 1.4x of
/// the smallest normal f32, and zero beside any term it is added to here: `φ`, `erfc`, a
/// softmax's largest term, which is 1). Relative error about 2e-7 up to 87.
///
/// Zero, not a tiny number, because a value this small makes the products it enters produce
/// subnormal numbers, which Intel cores compute through a microcode assist: the attention's
/// causally masked scores (`e^{-∞}`) had given `e^{-87}` instead of 0, and the tile products
/// that read them made a training step 2.5x slower on an Intel Xeon (AMD cores take no
/// penalty).
///
/// `e^{-u} = 2^k e^r` with `k = round(-u / ln 2)` and `r = -u - k ln 2` in `[-ln2/2, ln2/2]`
/// (Cody and Waite's split of `ln 2` into a short high part and a low part, so `k ln 2` is
/// exact); `e^r` by its Taylor polynomial to degree 7 (remainder below `|r|⁸/8! = 5e-9`); `2^k`
/// by writing `k + 127` into the exponent bits. `k` is rounded by adding and subtracting
/// `1.5 · 2²³`, whose low mantissa bits then hold `k`.
#[inline(always)]
pub fn exp_neg(u: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAGIC: f32 = 12_582_912.0;
    let y = -u.min(87.0);
    let shifted = y * LOG2E + MAGIC;
    let k = shifted - MAGIC;
    let r = y - k * LN2_HI - k * LN2_LO;
    let mut p = 1.0 / 5040.0 + r * (1.0 / 40320.0);
    p = 1.0 / 720.0 + r * p;
    p = 1.0 / 120.0 + r * p;
    p = 1.0 / 24.0 + r * p;
    p = 1.0 / 6.0 + r * p;
    p = 0.5 + r * p;
    p = 1.0 + r * p;
    p = 1.0 + r * p;
    // shifted's bits are 0x4B40_0000 + k; (k + 127) << 23 is 2^k.
    let scale = f32::from_bits((shifted.to_bits().wrapping_sub(0x4B40_0000 - 127)) << 23);
    if u > 87.0 {
        0.0
    } else {
        p * scale
    }
}

/// `e^y` for any `y`: [`exp_neg`] of `-y` below 88, `+∞` above `ln(f32::MAX)` (88.72), NaN for
/// NaN. Relative error about 2e-7 down to `y = -87`, exactly zero below it (`-∞` included: a
/// masked softmax entry is 0; no subnormal result, [`exp_neg`]).
#[inline(always)]
pub fn exp(y: f32) -> f32 {
    // e^{min(y, 88)}, times e^{y - 88} (at most e^{0.73}) above 88; 2^127 is the largest
    // power the exponent bits of exp_neg take.
    let low = exp_neg(-y.min(88.0));
    let high = low * exp_neg((88.0 - y).clamp(-1.0, 0.0));
    let e = if y > 88.0 { high } else { low };
    let e = if y > 88.73 { f32::INFINITY } else { e };
    if y.is_nan() {
        y
    } else {
        e
    }
}

#[inline(always)]
fn exp_body(x: &mut [f32]) {
    for x in x.iter_mut() {
        *x = exp(*x);
    }
}

dispatch!(
    /// `x ← e^x` on this thread.
    pub fn exp_sequential(x: &mut [f32]) => exp_body
);

/// `x ← e^x`, in parallel.
pub fn exp_in_place(x: &mut [f32]) {
    x.par_chunks_mut(CHUNK).for_each(exp_sequential);
}

/// `(Φ(x), e^{-x²/2})`.
#[inline(always)]
fn cdf_and_gauss(x: f32) -> (f32, f32) {
    let a = x.abs();
    let t = 1.0 / (1.0 + P * INV_SQRT_2 * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let gauss = exp_neg(0.5 * a * a);
    let half_erfc = 0.5 * poly * gauss;
    let cdf = if x >= 0.0 { 1.0 - half_erfc } else { half_erfc };
    (cdf, gauss)
}

/// `gelu(x)` for one value.
#[inline(always)]
pub fn gelu_one(x: f32) -> f32 {
    x * cdf_and_gauss(x).0
}

/// `gelu'(x) = Φ(x) + x φ(x)` for one value.
#[inline(always)]
pub fn gelu_grad_one(x: f32) -> f32 {
    let (cdf, gauss) = cdf_and_gauss(x);
    cdf + x * INV_SQRT_2PI * gauss
}

#[inline(always)]
fn forward_body(x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "gelu: input and output lengths");
    for (y, &x) in y.iter_mut().zip(x) {
        *y = gelu_one(x);
    }
}

#[inline(always)]
fn backward_body(x: &[f32], dy: &mut [f32]) {
    assert_eq!(
        x.len(),
        dy.len(),
        "gelu backward: input and gradient lengths"
    );
    for (dy, &x) in dy.iter_mut().zip(x) {
        *dy *= gelu_grad_one(x);
    }
}

dispatch!(
    /// `y = gelu(x)` on this thread. Panics if the lengths differ.
    pub fn forward_sequential(x: &[f32], y: &mut [f32]) => forward_body
);
dispatch!(
    /// `dy ← dy · gelu'(x)` on this thread. Panics if the lengths differ.
    pub fn backward_sequential(x: &[f32], dy: &mut [f32]) => backward_body
);

/// `y = gelu(x)`, element by element, in parallel. Panics if the lengths differ.
pub fn forward(x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "gelu: input and output lengths");
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| forward_sequential(x, y));
}

/// `dy ← dy · gelu'(x)` (the input's gradient, written over the output's), in parallel.
/// Panics if the lengths differ.
pub fn backward_in_place(x: &[f32], dy: &mut [f32]) {
    assert_eq!(
        x.len(),
        dy.len(),
        "gelu backward: input and gradient lengths"
    );
    dy.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(dy, x)| backward_sequential(x, dy));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f64 libm form: `x Φ(x)` and `Φ(x) + x φ(x)`.
    fn reference(x: f64) -> (f64, f64) {
        let cdf = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
        let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        (x * cdf, cdf + x * pdf)
    }

    fn grid() -> Vec<f32> {
        (-10 * 1024..=10 * 1024)
            .map(|i| i as f32 / 1024.0)
            .collect()
    }

    #[test]
    fn exp_neg_is_within_3e7_relative_of_libm() {
        for i in 0..=87 * 256 {
            let u = i as f32 / 256.0;
            let want = (-(u as f64)).exp();
            let got = exp_neg(u) as f64;
            let rel = ((got - want) / want).abs();
            assert!(rel <= 3e-7, "exp(-{u}): {got} vs {want} (relative {rel:e})");
        }
        assert!(exp_neg(1e30) == 0.0 && exp_neg(f32::INFINITY) == 0.0);
        // Never a subnormal: normal down to e^{-87}, zero past it.
        for i in 87 * 256..=120 * 256 {
            let got = exp_neg(i as f32 / 256.0);
            assert!(
                got == 0.0 || got.is_normal(),
                "exp(-{}): {got:e}",
                i as f32 / 256.0
            );
        }
    }

    #[test]
    fn exp_is_within_3e7_relative_of_libm_and_saturates() {
        for i in -87 * 64..=88 * 64 {
            let y = i as f32 / 64.0;
            let want = (y as f64).exp();
            let rel = ((exp(y) as f64 - want) / want).abs();
            assert!(
                rel <= 3e-7,
                "exp({y}): {} vs {want} (relative {rel:e})",
                exp(y)
            );
        }
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(-200.0) == 0.0 && exp(f32::NEG_INFINITY) == 0.0 && exp(-87.5) == 0.0);
        assert!(exp(f32::NAN).is_nan());
        let mut xs: Vec<f32> = (0..3 * CHUNK + 5)
            .map(|i| (i % 300) as f32 / 10.0 - 20.0)
            .collect();
        let want: Vec<u32> = xs.iter().map(|&x| exp(x).to_bits()).collect();
        exp_in_place(&mut xs);
        assert_eq!(xs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want);
    }

    #[test]
    fn gelu_and_its_derivative_are_within_the_stated_error_of_libm() {
        let xs = grid();
        let (mut worst_f, mut worst_b) = (0f64, 0f64);
        for &x in &xs {
            let (f, b) = reference(x as f64);
            let ef = (gelu_one(x) as f64 - f).abs() / (x.abs() as f64).max(1.0);
            let eb = (gelu_grad_one(x) as f64 - b).abs();
            worst_f = worst_f.max(ef);
            worst_b = worst_b.max(eb);
        }
        eprintln!("worst gelu error {worst_f:e} (scaled), gelu' {worst_b:e}");
        assert!(worst_f <= 2.4e-7, "gelu: worst scaled error {worst_f:e}");
        assert!(worst_b <= 4e-7, "gelu': worst error {worst_b:e}");
    }

    #[test]
    fn the_parallel_dispatched_kernels_equal_the_scalar_form() {
        // Longer than several chunks and not a multiple of any vector width.
        let xs: Vec<f32> = (0..3 * CHUNK + 37)
            .map(|i| ((i * 7919) % 4001) as f32 / 200.0 - 10.0)
            .collect();
        let mut y = vec![0f32; xs.len()];
        forward(&xs, &mut y);
        let dy: Vec<f32> = (0..xs.len()).map(|i| (i % 13) as f32 - 6.0).collect();
        let mut dx = dy.clone();
        backward_in_place(&xs, &mut dx);
        for i in 0..xs.len() {
            assert_eq!(y[i].to_bits(), gelu_one(xs[i]).to_bits(), "forward at {i}");
            assert_eq!(
                dx[i].to_bits(),
                (dy[i] * gelu_grad_one(xs[i])).to_bits(),
                "backward at {i}"
            );
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(gelu_one(0.0), 0.0);
        assert_eq!(gelu_one(f32::INFINITY), f32::INFINITY);
        assert!(gelu_one(f32::NAN).is_nan());
        assert!(
            (gelu_grad_one(0.0) - 0.5).abs() <= 4e-7,
            "{}",
            gelu_grad_one(0.0)
        );
    }
}
