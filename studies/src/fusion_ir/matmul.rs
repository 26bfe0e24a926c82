//! The blog's "classic example for kernel fusion": a matrix product followed by an
//! elementwise operation on its output, `out = A·B + C`, run unfused (the product written to a
//! temporary, then a second pass adds `C`) and fused (the product accumulated into `C`'s copy
//! by the GEMM itself, BLAS's `C := βC + αAB` form), both through the `gemm` crate that Burn's
//! flex backend multiplies with.

use super::*;

/// `out = A·B + C` for row-major `A` (`m x k`), `B` (`k x n`) and `C` (`m x n`), all f32,
/// timed unfused and fused on one thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatmulChain {
    /// Rows of `A` and of the output.
    pub m: usize,
    /// Columns of `B` and of the output.
    pub n: usize,
    /// The inner dimension: columns of `A`, rows of `B`.
    pub k: usize,
    /// Bytes per output element the unfused pair moves beyond the product's operands: the
    /// product written to the temporary (4 B), then the temporary and `C` read and the sum
    /// written (12 B).
    pub unfused_bytes_per_element: usize,
    /// Bytes per output element the fused product moves beyond its operands: `C`'s copy read
    /// as the accumulator and the sum written (8 B).
    pub fused_bytes_per_element: usize,
    /// Median wall time of the unfused pair (product, then the elementwise add), seconds.
    pub unfused_s: f64,
    /// Median wall time of the fused product accumulating into `C` in place, seconds (each
    /// repeat adds the product again; the values are checked on a fresh copy of `C`, untimed).
    pub fused_s: f64,
    /// Largest |fused − unfused| over the output elements (0: bit-identical).
    pub max_abs_diff: f64,
    /// Largest |unfused| over the output elements, the scale of `max_abs_diff`.
    pub max_abs: f64,
}

impl MatmulChain {
    /// Multiply-adds of the product, as FLOPs: `2 m n k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// `dst := (if accumulate { dst } else { 0 }) + lhs·rhs` for row-major `lhs` (`m x k`), `rhs`
/// (`k x n`) and `dst` (`m x n`) on one thread, by `gemm::gemm` (its `read_dst` and `alpha =
/// beta = 1`).
///
/// # Panics
/// If a slice is shorter than its shape.
pub fn gemm_into(
    dst: &mut [f32],
    lhs: &[f32],
    rhs: &[f32],
    (m, n, k): (usize, usize, usize),
    accumulate: bool,
) {
    assert!(dst.len() >= m * n && lhs.len() >= m * k && rhs.len() >= k * n);
    // SAFETY: the three slices hold at least m x n, m x k and k x n elements (checked above),
    // laid out row-major with the strides given (column stride 1, row stride the width), and
    // `dst` does not alias the operands (a `&mut` and two `&` slices).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.as_ptr(),
            1,
            k as isize,
            rhs.as_ptr(),
            1,
            n as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Times `out = A·B + C` at `m x n x k` unfused and fused (median of `repeats`, buffers
/// allocated before timing) on random inputs from `rng`, and compares the two outputs.
///
/// # Errors
/// [`DemoError::Check`] when the outputs differ by more than one rounding of the sum's scale
/// (f32's relative 2^-23 times `k`, the accumulation's error bound).
pub fn measure_matmul(
    (m, n, k): (usize, usize, usize),
    repeats: usize,
    rng: &mut XorShift,
) -> Result<MatmulChain, DemoError> {
    let (a, b, c) = (
        random_vec(rng, m * k),
        random_vec(rng, k * n),
        random_vec(rng, m * n),
    );
    let (mut t, mut out_u, mut out_f) = (vec![0f32; m * n], vec![0f32; m * n], vec![0f32; m * n]);
    let (unfused_s, _) = median_time(repeats, || {
        gemm_into(&mut t, &a, &b, (m, n, k), false);
        for ((o, t), c) in out_u.iter_mut().zip(&t).zip(&c) {
            *o = t + c;
        }
    });
    // The check: one fused product into a copy of C. The timing: the product accumulated into
    // the buffer in place, as a fused epilogue consumes C (the sums grow by A·B per repeat,
    // which changes no instruction the product runs).
    out_f.copy_from_slice(&c);
    gemm_into(&mut out_f, &a, &b, (m, n, k), true);
    let mut acc = c.clone();
    let (fused_s, _) = median_time(repeats, || gemm_into(&mut acc, &a, &b, (m, n, k), true));
    let max_abs = out_u.iter().fold(0f64, |x, v| x.max(v.abs() as f64));
    let max_abs_diff = out_u
        .iter()
        .zip(&out_f)
        .fold(0f64, |x, (u, f)| x.max((u - f).abs() as f64));
    let bound = max_abs * k as f64 * f32::EPSILON as f64;
    if max_abs_diff > bound {
        return Err(DemoError::Check(format!(
            "fused A·B + C differs from unfused by {max_abs_diff:e} (bound {bound:e})"
        )));
    }
    Ok(MatmulChain {
        m,
        n,
        k,
        unfused_bytes_per_element: 4 * F32_BYTES,
        fused_bytes_per_element: 2 * F32_BYTES,
        unfused_s,
        fused_s,
        max_abs_diff,
        max_abs,
    })
}
