//! GELU forward and backward as one CubeCL kernel each: `gelu(x) = x Φ(x)` and
//! `dx = dy (Φ(x) + x φ(x))` with `Φ(x) = ½ (1 + erf(x / √2))` and `φ(x) = e^{-x²/2} / √(2π)`
//! (Hendrycks and Gimpel 2016, "Gaussian Error Linear Units", section 2; the exact form, as
//! PyTorch's default `approximate='none'` and Burn's `gelu`).
//!
//! Each element is widened to f32, computed with CubeCL's `erf` and `exp` in f32 and rounded
//! once to the tensors' dtype. Burn 0.21's composed form is five operations forward (a
//! division, `erf`, an addition, a product, a division) and 16 backward, each a kernel that
//! reads and writes the whole tensor in its dtype.

use super::vector_size;
use burn::tensor::TensorMetadata;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::std::tensor::layout::linear::LinearView;

/// `1 / √2`.
const INV_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// `1 / √(2π)`.
const INV_SQRT_2PI: f32 = 0.398_942_3;

#[cube(launch_unchecked)]
fn gelu_forward_kernel<F: Float, N: Size>(
    x: &LinearView<Vector<F, N>>,
    y: &mut LinearView<Vector<F, N>, ReadWrite>,
    #[define(F)] _dtype: StorageType,
) {
    if !y.is_in_bounds(ABSOLUTE_POS) {
        terminate!();
    }
    let v = Vector::<f32, N>::cast_from(x[ABSOLUTE_POS]);
    let cdf = (Vector::erf(v * Vector::new(INV_SQRT_2)) + Vector::new(1.0)) * Vector::new(0.5);
    y[ABSOLUTE_POS] = Vector::cast_from(v * cdf);
}

#[cube(launch_unchecked)]
fn gelu_backward_kernel<F: Float, N: Size>(
    x: &LinearView<Vector<F, N>>,
    dy: &LinearView<Vector<F, N>>,
    dx: &mut LinearView<Vector<F, N>, ReadWrite>,
    #[define(F)] _dtype: StorageType,
) {
    if !dx.is_in_bounds(ABSOLUTE_POS) {
        terminate!();
    }
    let v = Vector::<f32, N>::cast_from(x[ABSOLUTE_POS]);
    let g = Vector::<f32, N>::cast_from(dy[ABSOLUTE_POS]);
    let cdf = (Vector::erf(v * Vector::new(INV_SQRT_2)) + Vector::new(1.0)) * Vector::new(0.5);
    let pdf = Vector::exp(v * v * Vector::new(-0.5)) * Vector::new(INV_SQRT_2PI);
    dx[ABSOLUTE_POS] = Vector::cast_from(g * (cdf + v * pdf));
}

/// `gelu(x)`, element by element: same shape and dtype (f32, f16 or bf16) as `x`, a new
/// contiguous tensor.
pub fn forward<R: CubeRuntime>(x: CubeTensor<R>) -> CubeTensor<R> {
    let x = into_contiguous(x);
    let len = x.shape().num_elements();
    let y = super::like(&x);
    let width = vector_size(&x, len);
    let (count, dim) = super::elementwise_geometry(&x, len, width);
    let dtype = x.dtype;
    // SAFETY: `y` has `x`'s shape and is written only where `is_in_bounds` holds.
    unsafe {
        gelu_forward_kernel::launch_unchecked::<R>(
            &x.client.clone(),
            count,
            dim,
            width,
            x.into_linear_view(),
            y.clone().into_linear_view(),
            dtype.into(),
        );
    }
    y
}

/// `dy (Φ(x) + x φ(x))`, element by element; `x` and `dy` of one shape and dtype, the result
/// a new contiguous tensor of both.
pub fn backward<R: CubeRuntime>(x: CubeTensor<R>, dy: CubeTensor<R>) -> CubeTensor<R> {
    let x = into_contiguous(x);
    let dy = into_contiguous(dy);
    let len = x.shape().num_elements();
    let dx = super::like(&x);
    let width = vector_size(&x, len);
    let (count, dim) = super::elementwise_geometry(&x, len, width);
    let dtype = x.dtype;
    // SAFETY: as in `forward`; `dy` has `x`'s shape.
    unsafe {
        gelu_backward_kernel::launch_unchecked::<R>(
            &x.client.clone(),
            count,
            dim,
            width,
            x.into_linear_view(),
            dy.into_linear_view(),
            dx.clone().into_linear_view(),
            dtype.into(),
        );
    }
    dx
}
