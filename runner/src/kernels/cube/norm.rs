//! Layer normalization forward and backward as CubeCL kernels (Ba, Kiros, Hinton 2016, "Layer
//! Normalization", equations (3)-(4), biased variance), with the statistics and the sums in f32
//! whatever the tensors' dtype: the same operation as [`crate::model::norm`]'s composed form.
//!
//! - **forward**, one cube per row: `μ` (first pass over the row), `σ² = mean((x - μ)²)`
//!   (second pass: no cancellation), `r = 1 / sqrt(σ² + ε)`, and `y = (x - μ) r γ + β` (third
//!   pass); the row is read three times, from cache after the first;
//! - **backward**: with `g = dy ∘ γ` and `x̂` recovered from what the operation kept (`(x - μ) r`
//!   or `(y - β) / γ`), one cube per row computes `dx = r (g - mean(g) - x̂ mean(g ∘ x̂))`
//!   (both means in one pass); `dγ = Σ_rows dy ∘ x̂` and `dβ = Σ_rows dy` are summed over
//!   chunks of [`CHUNK_ROWS`] rows, one unit per column (adjacent units read adjacent
//!   columns), into f32 partial sums that a last kernel adds up per column.
//!
//! The composed form ([`crate::model::norm::composed_forward`] and `composed_backward`) is about
//! 14 Burn operations forward and 19 backward, most of them a pass over `[rows, d]` in device
//! memory.

use super::{cube_row, cube_sum, f32_tensor, like, row_cubes};
use burn::tensor::TensorMetadata;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::CubeDim;

/// Rows per partial sum of `dγ` and `dβ`.
pub const CHUNK_ROWS: usize = 64;

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn forward_kernel<F: Float, P: Float>(
    x: &Tensor<F>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    y: &mut Tensor<F>,
    mean: &mut Tensor<f32>,
    rstd: &mut Tensor<f32>,
    rows: usize,
    d: usize,
    epsilon: f32,
    #[comptime] units: usize,
    #[define(F, P)] _dtypes: [StorageType; 2],
) {
    let row = cube_row();
    if row >= rows {
        terminate!();
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let base = row * d;
    let step = CUBE_DIM as usize;
    let mut sum = 0.0f32;
    let mut j = UNIT_POS as usize;
    while j < d {
        sum += f32::cast_from(x[base + j]);
        j += step;
    }
    let mu = cube_sum(&mut shared, sum) / f32::cast_from(d as u32);
    let mut sq = 0.0f32;
    j = UNIT_POS as usize;
    while j < d {
        let c = f32::cast_from(x[base + j]) - mu;
        sq += c * c;
        j += step;
    }
    let var = cube_sum(&mut shared, sq) / f32::cast_from(d as u32);
    let r = f32::recip(f32::sqrt(var + epsilon));
    j = UNIT_POS as usize;
    while j < d {
        let c = f32::cast_from(x[base + j]) - mu;
        let out = c * r * f32::cast_from(gamma[j]) + f32::cast_from(beta[j]);
        y[base + j] = F::cast_from(out);
        j += step;
    }
    if UNIT_POS == 0 {
        mean[row] = mu;
        rstd[row] = r;
    }
}

/// `x̂` at `(row, j)` from what the operation kept: `(x - μ) r` (`saves_output` false, `kept`
/// is `x`, `stat` the row means) or `(y - β) / γ` (`kept` is `y`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn xhat<F: Float, P: Float>(
    kept: &Tensor<F>,
    stat: &Tensor<f32>,
    rstd: &Tensor<f32>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    row: usize,
    j: usize,
    d: usize,
    #[comptime] saves_output: bool,
) -> f32 {
    let v = f32::cast_from(kept[row * d + j]);
    if saves_output {
        (v - f32::cast_from(beta[j])) / f32::cast_from(gamma[j])
    } else {
        (v - stat[row]) * rstd[row]
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_rows_kernel<F: Float, P: Float>(
    kept: &Tensor<F>,
    stat: &Tensor<f32>,
    rstd: &Tensor<f32>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    dy: &Tensor<F>,
    dx: &mut Tensor<F>,
    rows: usize,
    d: usize,
    #[comptime] units: usize,
    #[comptime] saves_output: bool,
    #[define(F, P)] _dtypes: [StorageType; 2],
) {
    let row = cube_row();
    if row >= rows {
        terminate!();
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let base = row * d;
    let step = CUBE_DIM as usize;
    let mut sum_g = 0.0f32;
    let mut sum_gx = 0.0f32;
    let mut j = UNIT_POS as usize;
    while j < d {
        let g = f32::cast_from(dy[base + j]) * f32::cast_from(gamma[j]);
        let xh = xhat::<F, P>(kept, stat, rstd, gamma, beta, row, j, d, saves_output);
        sum_g += g;
        sum_gx += g * xh;
        j += step;
    }
    let n = f32::cast_from(d as u32);
    let mean_g = cube_sum(&mut shared, sum_g) / n;
    let mean_gx = cube_sum(&mut shared, sum_gx) / n;
    let r = rstd[row];
    j = UNIT_POS as usize;
    while j < d {
        let g = f32::cast_from(dy[base + j]) * f32::cast_from(gamma[j]);
        let xh = xhat::<F, P>(kept, stat, rstd, gamma, beta, row, j, d, saves_output);
        dx[base + j] = F::cast_from(r * (g - mean_g - xh * mean_gx));
        j += step;
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_params_kernel<F: Float, P: Float>(
    kept: &Tensor<F>,
    stat: &Tensor<f32>,
    rstd: &Tensor<f32>,
    gamma: &Tensor<P>,
    beta: &Tensor<P>,
    dy: &Tensor<F>,
    partial_dgamma: &mut Tensor<f32>,
    partial_dbeta: &mut Tensor<f32>,
    rows: usize,
    d: usize,
    #[comptime] chunk_rows: usize,
    #[comptime] saves_output: bool,
    #[define(F, P)] _dtypes: [StorageType; 2],
) {
    let j = ABSOLUTE_POS_X as usize;
    let chunk = CUBE_POS_Y as usize;
    if j >= d {
        terminate!();
    }
    let first = chunk * chunk_rows;
    let mut end = first + chunk_rows;
    if end > rows {
        end = rows;
    }
    let mut dg = 0.0f32;
    let mut db = 0.0f32;
    let mut row = first;
    while row < end {
        let g = f32::cast_from(dy[row * d + j]);
        dg += g * xhat::<F, P>(kept, stat, rstd, gamma, beta, row, j, d, saves_output);
        db += g;
        row += 1;
    }
    partial_dgamma[chunk * d + j] = dg;
    partial_dbeta[chunk * d + j] = db;
}

#[cube(launch)]
fn sum_chunks_kernel<P: Float>(
    partial: &Tensor<f32>,
    out: &mut Tensor<P>,
    chunks: usize,
    d: usize,
    #[define(P)] _dtype: StorageType,
) {
    let j = ABSOLUTE_POS;
    if j >= d {
        terminate!();
    }
    let mut total = 0.0f32;
    let mut c = 0usize;
    while c < chunks {
        total += partial[c * d + j];
        c += 1;
    }
    out[j] = P::cast_from(total);
}

/// `(y, mean, rstd)`: `y = (x - μ) / sqrt(σ² + ε) · γ + β` over the last axis of `x` `[rows,
/// d]` (`gamma`, `beta` `[d]`, any float dtype each), in `x`'s dtype; the row means and
/// `1 / sqrt(σ² + ε)` as `[rows, 1]` f32 tensors.
pub fn forward<R: CubeRuntime>(
    x: CubeTensor<R>,
    gamma: CubeTensor<R>,
    beta: CubeTensor<R>,
    epsilon: f64,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let (x, gamma, beta) = (
        into_contiguous(x),
        into_contiguous(gamma),
        into_contiguous(beta),
    );
    let [rows, d] = x.shape().dims::<2>();
    let y = like(&x);
    let mean = f32_tensor(&x, vec![rows, 1]);
    let rstd = f32_tensor(&x, vec![rows, 1]);
    let (count, dim, units) = row_cubes(rows, d);
    let dtypes = [x.dtype.into(), gamma.dtype.into()];
    let client = x.client.clone();
    forward_kernel::launch::<R>(
        &client,
        count,
        dim,
        x.into_tensor_arg(),
        gamma.into_tensor_arg(),
        beta.into_tensor_arg(),
        y.clone().into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        rows,
        d,
        epsilon as f32,
        units,
        dtypes,
    );
    (y, mean, rstd)
}

/// What backward recovers `x̂` from: the input and its row means, or the output and `β`.
pub enum Kept<R: CubeRuntime> {
    /// The input and its row means.
    Input {
        /// `[rows, d]`, the input's dtype.
        x: CubeTensor<R>,
        /// `[rows, 1]`, f32.
        mean: CubeTensor<R>,
    },
    /// The output and `β`.
    Output {
        /// `[rows, d]`, the output's dtype.
        y: CubeTensor<R>,
        /// `[d]`, the parameters' dtype.
        beta: CubeTensor<R>,
    },
}

/// `(dx, dγ, dβ)` from what was kept, the row `rstd` (`[rows, 1]`, f32), `gamma` `[d]` and
/// `dy` `[rows, d]`: `dx` in `dy`'s dtype, `dγ` and `dβ` in `gamma`'s.
pub fn backward<R: CubeRuntime>(
    kept: Kept<R>,
    rstd: CubeTensor<R>,
    gamma: CubeTensor<R>,
    dy: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    // The kernels read `stat` only for a kept input and `beta` only for a kept output; the
    // other slot gets any f32 `[rows, 1]` (`rstd`) or `[d]` (`gamma`) tensor.
    let (saves_output, kept, stat, beta) = match kept {
        Kept::Input { x, mean } => (false, x, mean, gamma.clone()),
        Kept::Output { y, beta } => (true, y, rstd.clone(), beta),
    };
    let [kept, stat, rstd, gamma, beta, dy] =
        [kept, stat, rstd, gamma, beta, dy].map(into_contiguous);
    let [rows, d] = dy.shape().dims::<2>();
    let client = dy.client.clone();
    let dtypes = [dy.dtype.into(), gamma.dtype.into()];
    let dx = like(&dy);
    let (count, dim, units) = row_cubes(rows, d);
    backward_rows_kernel::launch::<R>(
        &client,
        count,
        dim,
        kept.clone().into_tensor_arg(),
        stat.clone().into_tensor_arg(),
        rstd.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        beta.clone().into_tensor_arg(),
        dy.clone().into_tensor_arg(),
        dx.clone().into_tensor_arg(),
        rows,
        d,
        units,
        saves_output,
        dtypes,
    );
    let chunks = rows.div_ceil(CHUNK_ROWS).max(1);
    let partial_dgamma = f32_tensor(&dy, vec![chunks, d]);
    let partial_dbeta = f32_tensor(&dy, vec![chunks, d]);
    let columns = 256u32;
    backward_params_kernel::launch::<R>(
        &client,
        CubeCount::Static(d.div_ceil(columns as usize) as u32, chunks as u32, 1),
        CubeDim::new_1d(columns),
        kept.into_tensor_arg(),
        stat.into_tensor_arg(),
        rstd.into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        beta.into_tensor_arg(),
        dy.into_tensor_arg(),
        partial_dgamma.clone().into_tensor_arg(),
        partial_dbeta.clone().into_tensor_arg(),
        rows,
        d,
        CHUNK_ROWS,
        saves_output,
        dtypes,
    );
    let sum = |partial: CubeTensor<R>| {
        let out = empty_device_dtype(
            client.clone(),
            gamma.device.clone(),
            gamma.shape(),
            gamma.dtype,
        );
        sum_chunks_kernel::launch::<R>(
            &client,
            CubeCount::Static(d.div_ceil(columns as usize) as u32, 1, 1),
            CubeDim::new_1d(columns),
            partial.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            chunks,
            d,
            gamma.dtype.into(),
        );
        out
    };
    let dgamma = sum(partial_dgamma);
    let dbeta = sum(partial_dbeta);
    (dx, dgamma, dbeta)
}
