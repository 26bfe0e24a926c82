//! AdamW's update of one parameter tensor as a backend operation ([`AdamWBackend`]): flex runs
//! memwall's one-pass kernel ([`crate::kernels::adamw`]), CubeCL without Burn's fusion (CUDA's
//! eager rows) memwall's CubeCL kernel ([`crate::kernels::cube::adamw`]), every other backend
//! Burn 0.21's composed update ([`composed`]). The optimizer that calls it, with the formula and its
//! source, is [`crate::train::adamw`].

use crate::kernels::adamw::AdamWStep;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// Backends that run AdamW's update. The provided method is Burn's `AdamW` composed of tensor
/// operations; flex overrides it with memwall's kernel.
pub trait AdamWBackend: Backend {
    /// One update: the new parameter, first moment and second moment, each of `p`'s shape
    /// and dtype. `moments` are the previous step's (`None` at `t = 1`); `g` has `p`'s shape
    /// and dtype.
    fn adamw_update<const D: usize>(
        p: Tensor<Self, D>,
        g: Tensor<Self, D>,
        moments: Option<(Tensor<Self, D>, Tensor<Self, D>)>,
        h: &AdamWStep,
    ) -> (Tensor<Self, D>, Tensor<Self, D>, Tensor<Self, D>) {
        composed(p, g, moments, h)
    }
}

/// The update as Burn 0.21's `AdamW::step` and `AdaptiveMomentum::transform` compose it, one
/// tensor operation at a time, in their order.
pub fn composed<B: Backend, const D: usize>(
    p: Tensor<B, D>,
    g: Tensor<B, D>,
    moments: Option<(Tensor<B, D>, Tensor<B, D>)>,
    h: &AdamWStep,
) -> (Tensor<B, D>, Tensor<B, D>, Tensor<B, D>) {
    let (f1, f2, c1, c2) = h.factors();
    let (m, v) = match moments {
        Some((m, v)) => (
            m.mul_scalar(h.beta_1).add(g.clone().mul_scalar(f1)),
            v.mul_scalar(h.beta_2).add(g.square().mul_scalar(f2)),
        ),
        None => (g.clone().mul_scalar(f1), g.square().mul_scalar(f2)),
    };
    let m_hat = m.clone().div_scalar(c1);
    let v_hat = v.clone().div_scalar(c2);
    let delta = m_hat.div(v_hat.sqrt().add_scalar(h.epsilon));
    let decay = h.decay_rate();
    let p = if decay == 0.0 {
        p
    } else {
        p.mul_scalar(1.0 - decay)
    };
    (p - delta.mul_scalar(h.lr), m, v)
}

impl AdamWBackend for burn::backend::Flex {
    fn adamw_update<const D: usize>(
        p: Tensor<Self, D>,
        g: Tensor<Self, D>,
        moments: Option<(Tensor<Self, D>, Tensor<Self, D>)>,
        h: &AdamWStep,
    ) -> (Tensor<Self, D>, Tensor<Self, D>, Tensor<Self, D>) {
        let prim = |t: Tensor<Self, D>| t.into_primitive().tensor();
        let float = |t| Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(t));
        let (p, g) = (prim(p), prim(g));
        let moments = moments.map(|(m, v)| (prim(m), prim(v)));
        if !crate::kernels::flex::adamw_runs(&p, &g, moments.as_ref().map(|(m, v)| (m, v))) {
            // A dtype the kernel does not run (f64): the composed update.
            return composed(
                float(p),
                float(g),
                moments.map(|(m, v)| (float(m), float(v))),
                h,
            );
        }
        let (p, m, v) = crate::kernels::flex::adamw_update(p, g, moments, h);
        (float(p), float(m), float(v))
    }
}
impl<B: AdamWBackend, C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy>
    AdamWBackend for burn::backend::Autodiff<B, C>
{
}
#[cfg(feature = "ndarray")]
impl AdamWBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
impl AdamWBackend for burn::backend::Cuda {}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > AdamWBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
    /// memwall's kernel ([`crate::kernels::cube::adamw`]): one pass, f32 inside.
    fn adamw_update<const D: usize>(
        p: Tensor<Self, D>,
        g: Tensor<Self, D>,
        moments: Option<(Tensor<Self, D>, Tensor<Self, D>)>,
        h: &AdamWStep,
    ) -> (Tensor<Self, D>, Tensor<Self, D>, Tensor<Self, D>) {
        if !crate::kernels::cube::Selection::current().adamw {
            return composed(p, g, moments, h);
        }
        let prim = |t: Tensor<Self, D>| t.into_primitive().tensor();
        let float = |t| Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(t));
        let moments = moments.map(|(m, v)| (prim(m), prim(v)));
        let (p, m, v) = crate::kernels::cube::adamw::update(prim(p), prim(g), moments, h);
        (float(p), float(m), float(v))
    }
}
