//! AdamW's update of one parameter tensor as one CubeCL kernel ([`crate::train::adamw`] has the
//! formula and its source): per element the new moments, the bias-corrected step and the
//! decayed parameter, in f32 in the order of Burn 0.21's composed `AdamW` (as the CPU kernel,
//! [`crate::kernels::adamw`]), each result rounded once to the tensors' dtype. Burn's composed
//! update is 15 operations per parameter tensor, each a pass over it.

use super::vector_size;
use crate::kernels::adamw::AdamWStep;
use burn::tensor::TensorMetadata;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::std::tensor::layout::linear::LinearView;

/// The update's f32 scalars at launch (see [`crate::kernels::adamw::Scalars`]).
#[derive(CubeLaunch, CubeType)]
struct Hyper {
    beta_1: f32,
    beta_2: f32,
    f1: f32,
    f2: f32,
    c1: f32,
    c2: f32,
    epsilon: f32,
    keep: f32,
    lr: f32,
}

#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn update_kernel<F: Float, N: Size>(
    p: &LinearView<Vector<F, N>>,
    g: &LinearView<Vector<F, N>>,
    m: &LinearView<Vector<F, N>>,
    v: &LinearView<Vector<F, N>>,
    p_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    m_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    v_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    h: &Hyper,
    #[comptime] first: bool,
    #[comptime] decays: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if !p_out.is_in_bounds(i) {
        terminate!();
    }
    let gi = Vector::<f32, N>::cast_from(g[i]);
    let mut mi = gi * Vector::new(h.f1);
    let mut vi = gi * gi * Vector::new(h.f2);
    if !first {
        mi = Vector::<f32, N>::cast_from(m[i]) * Vector::new(h.beta_1) + mi;
        vi = Vector::<f32, N>::cast_from(v[i]) * Vector::new(h.beta_2) + vi;
    }
    let delta =
        (mi / Vector::new(h.c1)) / (Vector::sqrt(vi / Vector::new(h.c2)) + Vector::new(h.epsilon));
    let mut pi = Vector::<f32, N>::cast_from(p[i]);
    if decays {
        pi *= Vector::new(h.keep);
    }
    p_out[i] = Vector::cast_from(pi - delta * Vector::new(h.lr));
    m_out[i] = Vector::cast_from(mi);
    v_out[i] = Vector::cast_from(vi);
}

/// One update: the new parameter, first moment and second moment, each a new contiguous tensor
/// of `p`'s shape and dtype (f32, f16 or bf16); `g` and the previous `moments` (`None` at
/// `t = 1`) of the same shape and dtype.
pub fn update<R: CubeRuntime>(
    p: CubeTensor<R>,
    g: CubeTensor<R>,
    moments: Option<(CubeTensor<R>, CubeTensor<R>)>,
    h: &AdamWStep,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let s = h.scalars(moments.is_none());
    let p = into_contiguous(p);
    let g = into_contiguous(g);
    let (m, v) = match moments {
        Some((m, v)) => (into_contiguous(m), into_contiguous(v)),
        // Not read at `t = 1` (`first`): any tensor of the shape.
        None => (g.clone(), g.clone()),
    };
    let len = p.shape().num_elements();
    let (p_out, m_out, v_out) = (super::like(&p), super::like(&p), super::like(&p));
    let width = vector_size(&p, len);
    let (count, dim) = super::elementwise_geometry(&p, len, width);
    let client = p.client.clone();
    let dtype = p.dtype;
    // SAFETY: every tensor has `p`'s shape; outputs are written only where `is_in_bounds`.
    unsafe {
        update_kernel::launch_unchecked::<R>(
            &client,
            count,
            dim,
            width,
            p.into_linear_view(),
            g.into_linear_view(),
            m.into_linear_view(),
            v.into_linear_view(),
            p_out.clone().into_linear_view(),
            m_out.clone().into_linear_view(),
            v_out.clone().into_linear_view(),
            HyperLaunch::new(
                s.beta_1,
                s.beta_2,
                s.f1,
                s.f2,
                s.c1,
                s.c2,
                s.epsilon,
                s.keep.unwrap_or(1.0),
                s.lr,
            ),
            s.first,
            s.keep.is_some(),
            dtype.into(),
        );
    }
    (p_out, m_out, v_out)
}
