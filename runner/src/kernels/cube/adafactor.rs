//! Adafactor's update of one parameter tensor as CubeCL kernels ([`crate::train::adafactor`] has
//! the algorithm and its source; [`crate::model::optim::adafactor_composed`] is the reference),
//! with the statistics, the sums and the update in f32 whatever the parameters' dtype, and the
//! new parameter rounded once to it.
//!
//! A matrix `G` seen as `[n, m]` (Algorithm 4), six launches, four passes over `G`:
//!
//! 1. one cube per row: `R_i = beta R_i + (1 - beta) sum_j (G_ij^2 + eps1)`;
//! 2. columns in chunks of [`CHUNK_ROWS`] rows, one unit per column (adjacent units read
//!    adjacent columns): partial sums of `G_ij^2 + eps1`;
//! 3. one unit per column: `C_j = beta C_j + (1 - beta) (sum of its partial sums)`;
//! 4. one cube per row: `q_i = (sum_j G_ij^2 / C_j) / R_i`;
//! 5. one cube: `S = sum_i R_i`, `sum U^2 = S sum_i q_i` (since `U_ij = G_ij sqrt(S / (R_i
//!    C_j))`), and `k = sqrt(S) / max(1, RMS(U) / d)` with `RMS(U) = sqrt(sum U^2 / (n m))`;
//! 6. elementwise: `X_ij = X_ij (1 - lr lambda) - lr k G_ij / (sqrt(R_i) sqrt(C_j))`.
//!
//! A vector `[n]` (Algorithm 5), three launches: `V_i = beta V_i + (1 - beta) (G_i^2 + eps1)`
//! with `q_i = G_i^2 / V_i` (elementwise), `k = 1 / max(1, RMS(U) / d)` (one cube), and
//! `X_i = X_i (1 - lr lambda) - lr k G_i / sqrt(V_i)` (elementwise).
//!
//! The composed form of a later step of a matrix is 26 Burn operations in f32, 12 of them a pass
//! over the whole matrix; 29 and 15 in bf16, where the gradient and the parameter are cast to
//! f32 tensors and the result back (counted in [`crate::model::optim::adafactor_composed`]).

use super::{cube_row, cube_sum, f32_tensor, like, row_cubes, ROW_UNITS};
use crate::kernels::adafactor::AdafactorStep;
use burn::tensor::TensorMetadata;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::CubeDim;

/// Rows per partial column sum.
pub const CHUNK_ROWS: usize = 64;

/// Units per cube of the column and elementwise kernels.
const UNITS: u32 = 256;

/// The shape the update sees a parameter tensor as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A vector of this many elements: unfactored statistics (Algorithm 5).
    Vector(usize),
    /// A matrix `[n, m]` (the leading dimensions of a tensor of rank >= 2 flattened into `n`):
    /// row and column statistics (Algorithm 4).
    Matrix {
        /// Rows.
        n: usize,
        /// Columns (the tensor's last dimension).
        m: usize,
    },
}

/// One cube per row `i` of `g` `[n, m]`, two uses: with `rms` false the row statistic `R_i =
/// beta R_i + (1 - beta) sum_j (G_ij^2 + eps1)` into `out` (`r` the previous `R`, not read when
/// `first`; `c` not read); with `rms` true `q_i = (sum_j G_ij^2 / C_j) / R_i` into `out` (`r`
/// and `c` the new statistics).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn row_kernel<F: Float>(
    g: &Tensor<F>,
    r: &Tensor<f32>,
    c: &Tensor<f32>,
    out: &mut Tensor<f32>,
    n: usize,
    m: usize,
    beta: f32,
    eps1: f32,
    #[comptime] units: usize,
    #[comptime] first: bool,
    #[comptime] rms: bool,
    #[define(F)] _dtype: StorageType,
) {
    let row = cube_row();
    if row >= n {
        terminate!();
    }
    let mut shared = SharedMemory::<f32>::new(units);
    let base = row * m;
    let mut sum = 0.0f32;
    let mut j = UNIT_POS as usize;
    while j < m {
        let x = f32::cast_from(g[base + j]);
        if rms {
            sum += x * x / c[j];
        } else {
            sum += x * x + eps1;
        }
        j += CUBE_DIM as usize;
    }
    let total = cube_sum(&mut shared, sum);
    if UNIT_POS == 0 {
        if rms {
            out[row] = total / r[row];
        } else {
            let mut value = total * (f32::new(1.0) - beta);
            if !first {
                value += r[row] * beta;
            }
            out[row] = value;
        }
    }
}

#[cube(launch)]
fn col_partials_kernel<F: Float>(
    g: &Tensor<F>,
    partial: &mut Tensor<f32>,
    n: usize,
    m: usize,
    eps1: f32,
    #[comptime] chunk_rows: usize,
    #[define(F)] _dtype: StorageType,
) {
    let j = ABSOLUTE_POS_X as usize;
    let chunk = CUBE_POS_Y as usize;
    if j >= m {
        terminate!();
    }
    let first = chunk * chunk_rows;
    let mut end = first + chunk_rows;
    if end > n {
        end = n;
    }
    let mut sum = 0.0f32;
    let mut row = first;
    while row < end {
        let x = f32::cast_from(g[row * m + j]);
        sum += x * x + eps1;
        row += 1;
    }
    partial[chunk * m + j] = sum;
}

#[cube(launch)]
fn col_stats_kernel(
    partial: &Tensor<f32>,
    c_old: &Tensor<f32>,
    c: &mut Tensor<f32>,
    chunks: usize,
    m: usize,
    beta: f32,
    #[comptime] first: bool,
) {
    let j = ABSOLUTE_POS;
    if j >= m {
        terminate!();
    }
    let mut total = 0.0f32;
    let mut k = 0usize;
    while k < chunks {
        total += partial[k * m + j];
        k += 1;
    }
    let mut value = total * (f32::new(1.0) - beta);
    if !first {
        value += c_old[j] * beta;
    }
    c[j] = value;
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn vector_stats_kernel<F: Float>(
    g: &Tensor<F>,
    v_old: &Tensor<f32>,
    v: &mut Tensor<f32>,
    q: &mut Tensor<f32>,
    n: usize,
    beta: f32,
    eps1: f32,
    #[comptime] first: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i >= n {
        terminate!();
    }
    let x = f32::cast_from(g[i]);
    let mut value = (x * x + eps1) * (f32::new(1.0) - beta);
    if !first {
        value += v_old[i] * beta;
    }
    v[i] = value;
    q[i] = x * x / value;
}

/// One cube: `k = sqrt(S) / clip` (matrix, `S = sum r`) or `1 / clip` (vector), with `clip =
/// max(1, sqrt(sum U^2 / len) / d)` and `sum U^2 = S sum q` (matrix) or `sum q` (vector).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn scale_kernel(
    r: &Tensor<f32>,
    q: &Tensor<f32>,
    k: &mut Tensor<f32>,
    n: usize,
    len: f32,
    clip_threshold: f32,
    #[comptime] units: usize,
    #[comptime] factored: bool,
) {
    let mut shared = SharedMemory::<f32>::new(units);
    let mut sum_r = 0.0f32;
    let mut sum_q = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < n {
        if factored {
            sum_r += r[i];
        }
        sum_q += q[i];
        i += CUBE_DIM as usize;
    }
    let total_q = cube_sum(&mut shared, sum_q);
    let mut sum_u2 = total_q;
    let mut scale = f32::new(1.0);
    if factored {
        let total_r = cube_sum(&mut shared, sum_r);
        sum_u2 = total_r * total_q;
        scale = f32::sqrt(total_r);
    }
    let rms = f32::sqrt(sum_u2 / len);
    let mut clip = rms / clip_threshold;
    if clip < f32::new(1.0) {
        clip = f32::new(1.0);
    }
    if UNIT_POS == 0 {
        k[0] = scale / clip;
    }
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn apply_kernel<F: Float>(
    p: &Tensor<F>,
    g: &Tensor<F>,
    r: &Tensor<f32>,
    c: &Tensor<f32>,
    k: &Tensor<f32>,
    out: &mut Tensor<F>,
    len: usize,
    m: usize,
    keep: f32,
    lr: f32,
    #[comptime] factored: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i >= len {
        terminate!();
    }
    let x = f32::cast_from(g[i]);
    let mut denom = f32::sqrt(r[i]);
    if factored {
        denom = f32::sqrt(r[i / m]) * f32::sqrt(c[i % m]);
    }
    let update = x * k[0] / denom;
    out[i] = F::cast_from(f32::cast_from(p[i]) * keep - lr * update);
}

/// Cube count and size of a kernel with one unit per element of `len`, [`UNITS`] per cube, the
/// cubes laid out in x then y (at most 65,535 in x, wgpu's limit).
fn units_geometry(len: usize) -> (CubeCount, CubeDim) {
    let cubes = len.div_ceil(UNITS as usize).max(1);
    let x = cubes.min(65_535);
    let y = cubes.div_ceil(x);
    (
        CubeCount::Static(x as u32, y as u32, 1),
        CubeDim::new_1d(UNITS),
    )
}

/// One update of the parameter `p` (f32, f16 or bf16) with gradient `g` (`p`'s shape and
/// dtype, contiguous or not), seen as `shape` (its element count must be `p`'s). `stats` are
/// the previous step's f32 statistics (`None` at `t = 1`: then `h.beta2` is 0 and they are not
/// read): `(V, None)` for a vector, `(R [n], Some(C [m]))` for a matrix.
///
/// Returns the new parameter (a new contiguous tensor of `p`'s shape and dtype) and the new
/// statistics (new f32 tensors).
///
/// # Panics
/// If `shape` does not match `p`, or a matrix's statistics have no column sums: the caller's
/// contract ([`crate::model::optim::AdafactorBackend`] derives both from `p`).
pub fn update<R: CubeRuntime>(
    p: CubeTensor<R>,
    g: CubeTensor<R>,
    stats: Option<(CubeTensor<R>, Option<CubeTensor<R>>)>,
    shape: Shape,
    h: &AdafactorStep,
) -> (CubeTensor<R>, CubeTensor<R>, Option<CubeTensor<R>>) {
    let p = into_contiguous(p);
    let g = into_contiguous(g);
    let len = p.shape().num_elements();
    let first = stats.is_none();
    let (beta, eps1) = (h.beta2 as f32, h.eps1 as f32);
    let keep = (1.0 - h.lr * h.weight_decay) as f32;
    let client = p.client.clone();
    let dtype = p.dtype;
    let out = like(&p);
    let k = f32_tensor(&p, vec![1]);
    match shape {
        Shape::Vector(n) => {
            assert_eq!(n, len, "Adafactor: a vector of {n} elements for {len}");
            let v = f32_tensor(&p, vec![n]);
            let q = f32_tensor(&p, vec![n]);
            // Not read at `t = 1` (`first`): any f32 tensor.
            let v_old = stats.map_or_else(|| v.clone(), |(v, _)| into_contiguous(v));
            let (count, dim) = units_geometry(n);
            vector_stats_kernel::launch::<R>(
                &client,
                count,
                dim,
                g.clone().into_tensor_arg(),
                v_old.into_tensor_arg(),
                v.clone().into_tensor_arg(),
                q.clone().into_tensor_arg(),
                n,
                beta,
                eps1,
                first,
                dtype.into(),
            );
            launch_scale(&client, &v, &q, &k, n, len, h, false);
            launch_apply(&client, &p, &g, &v, &v, &k, &out, 1, h, keep, false);
            (out, v, None)
        }
        Shape::Matrix { n, m } => {
            assert_eq!(
                n * m,
                len,
                "Adafactor: a [{n}, {m}] matrix for {len} elements"
            );
            let (r_old, c_old) = match stats {
                Some((r, c)) => {
                    let c = c.expect("Adafactor: a matrix's statistics have column sums");
                    (Some(into_contiguous(r)), Some(into_contiguous(c)))
                }
                None => (None, None),
            };
            let r = f32_tensor(&p, vec![n]);
            let c = f32_tensor(&p, vec![m]);
            let q = f32_tensor(&p, vec![n]);
            let (count, dim, units) = row_cubes(n, m);
            // `c` is not read here: any f32 tensor (`q`).
            row_kernel::launch::<R>(
                &client,
                count.clone(),
                dim,
                g.clone().into_tensor_arg(),
                r_old.unwrap_or_else(|| q.clone()).into_tensor_arg(),
                q.clone().into_tensor_arg(),
                r.clone().into_tensor_arg(),
                n,
                m,
                beta,
                eps1,
                units,
                first,
                false,
                dtype.into(),
            );
            let chunks = n.div_ceil(CHUNK_ROWS).max(1);
            let partial = f32_tensor(&p, vec![chunks, m]);
            col_partials_kernel::launch::<R>(
                &client,
                CubeCount::Static(m.div_ceil(UNITS as usize) as u32, chunks as u32, 1),
                CubeDim::new_1d(UNITS),
                g.clone().into_tensor_arg(),
                partial.clone().into_tensor_arg(),
                n,
                m,
                eps1,
                CHUNK_ROWS,
                dtype.into(),
            );
            let (col_count, col_dim) = units_geometry(m);
            col_stats_kernel::launch::<R>(
                &client,
                col_count,
                col_dim,
                partial.into_tensor_arg(),
                c_old.unwrap_or_else(|| c.clone()).into_tensor_arg(),
                c.clone().into_tensor_arg(),
                chunks,
                m,
                beta,
                first,
            );
            row_kernel::launch::<R>(
                &client,
                count,
                dim,
                g.clone().into_tensor_arg(),
                r.clone().into_tensor_arg(),
                c.clone().into_tensor_arg(),
                q.clone().into_tensor_arg(),
                n,
                m,
                beta,
                eps1,
                units,
                first,
                true,
                dtype.into(),
            );
            launch_scale(&client, &r, &q, &k, n, len, h, true);
            launch_apply(&client, &p, &g, &r, &c, &k, &out, m, h, keep, true);
            (out, r, Some(c))
        }
    }
}

/// Launches [`scale_kernel`] over `n` values of `r` and `q` into `k`.
#[allow(clippy::too_many_arguments)]
fn launch_scale<R: CubeRuntime>(
    client: &ComputeClient<R>,
    r: &CubeTensor<R>,
    q: &CubeTensor<R>,
    k: &CubeTensor<R>,
    n: usize,
    len: usize,
    h: &AdafactorStep,
    factored: bool,
) {
    scale_kernel::launch::<R>(
        client,
        CubeCount::Static(1, 1, 1),
        CubeDim::new_1d(ROW_UNITS),
        r.clone().into_tensor_arg(),
        q.clone().into_tensor_arg(),
        k.clone().into_tensor_arg(),
        n,
        len as f32,
        h.clip_threshold as f32,
        ROW_UNITS as usize,
        factored,
    );
}

/// Launches [`apply_kernel`]: `out = p keep - lr k g / sqrt(..)`, one unit per element.
#[allow(clippy::too_many_arguments)]
fn launch_apply<R: CubeRuntime>(
    client: &ComputeClient<R>,
    p: &CubeTensor<R>,
    g: &CubeTensor<R>,
    r: &CubeTensor<R>,
    c: &CubeTensor<R>,
    k: &CubeTensor<R>,
    out: &CubeTensor<R>,
    m: usize,
    h: &AdafactorStep,
    keep: f32,
    factored: bool,
) {
    let len = p.shape().num_elements();
    let (count, dim) = units_geometry(len);
    apply_kernel::launch::<R>(
        client,
        count,
        dim,
        p.clone().into_tensor_arg(),
        g.clone().into_tensor_arg(),
        r.clone().into_tensor_arg(),
        c.clone().into_tensor_arg(),
        k.clone().into_tensor_arg(),
        out.clone().into_tensor_arg(),
        len,
        m,
        keep,
        h.lr as f32,
        factored,
        p.dtype.into(),
    );
}
