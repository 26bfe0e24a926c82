//! The optimizers' updates of one parameter tensor as backend operations.
//!
//! - AdamW ([`AdamWBackend`]): flex runs memwall's one-pass kernel ([`crate::kernels::adamw`]),
//!   CubeCL without Burn's fusion (CUDA's eager rows) memwall's CubeCL kernel
//!   ([`crate::kernels::cube::adamw`]), every other backend Burn 0.21's composed update
//!   ([`composed`]). The optimizer that calls it, with the formula and its source, is
//!   [`crate::train::adamw`].
//! - Adafactor ([`AdafactorBackend`]): CubeCL without Burn's fusion runs memwall's kernels
//!   ([`crate::kernels::cube::adafactor`]), every other backend the composed update
//!   ([`adafactor_composed`]). The optimizer, with the algorithm and its source, is
//!   [`crate::train::adafactor`].

pub use crate::kernels::adafactor::AdafactorStep;
use crate::kernels::adamw::AdamWStep;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};

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
/// Burn's fusion backend (CUDA's `fusion = true` rows): Burn's operations, fused by it.
impl<B: burn_fusion::FusionBackend> AdamWBackend for burn_fusion::Fusion<B> {}
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

/// Adafactor's second-moment statistics of one parameter tensor, f32: for a tensor of rank
/// `D >= 2` seen as `[n, m]` (`n` the product of the leading dimensions) the row sums `R`
/// `[n]` and the column sums `C` `[m]`; for a vector `[n]` the unfactored second moment `V`
/// `[n]` and no second tensor.
pub type AdafactorStats<B> = (Tensor<B, 1>, Option<Tensor<B, 1>>);

/// Backends that run Adafactor's update of one parameter tensor. The provided method is the
/// update composed of Burn tensor operations ([`adafactor_composed`]); CubeCL backends without
/// Burn's fusion override it with memwall's kernels ([`crate::kernels::cube::adafactor`]).
pub trait AdafactorBackend: Backend {
    /// One update: the new parameter (`p`'s shape and dtype) and the new statistics (f32).
    /// `stats` are the previous step's (`None` at `t = 1`, where `beta2` is 0); `g` has `p`'s
    /// shape and dtype.
    fn adafactor_update<const D: usize>(
        p: Tensor<Self, D>,
        g: Tensor<Self, D>,
        stats: Option<AdafactorStats<Self>>,
        h: &AdafactorStep,
    ) -> (Tensor<Self, D>, AdafactorStats<Self>) {
        adafactor_composed(p, g, stats, h)
    }
}

/// `beta * old + (1 - beta) * new`, with a missing `old` read as zeros.
fn ema<B: Backend>(old: Option<Tensor<B, 1>>, new: Tensor<B, 1>, beta: f64) -> Tensor<B, 1> {
    let new = new.mul_scalar(1.0 - beta);
    match old {
        Some(old) => old.mul_scalar(beta) + new,
        None => new,
    }
}

/// Adafactor's update composed of Burn tensor operations, in f32 whatever `p`'s dtype (a later
/// step of a matrix: 26 operations, 12 of them a pass over the whole matrix; in bf16 three
/// casts more, each a pass): Shazeer and Stern 2018,
/// Algorithm 4 (rank >= 2, on the `[n, m]` view) and Algorithm 5 (rank 1), update clipping
/// (Section 6) and decoupled weight decay; the result is rounded once to `p`'s dtype.
pub fn adafactor_composed<B: Backend, const D: usize>(
    p: Tensor<B, D>,
    g: Tensor<B, D>,
    stats: Option<AdafactorStats<B>>,
    h: &AdafactorStep,
) -> (Tensor<B, D>, AdafactorStats<B>) {
    let dtype = p.dtype();
    let dims = p.dims();
    let g = g.cast(DType::F32);
    let (row, col) = match stats {
        Some((row, col)) => (Some(row), col),
        None => (None, None),
    };
    let beta = h.beta2;
    let g_sq = g.clone().square().add_scalar(h.eps1);
    let (update, row, col) = if D == 1 {
        // Algorithm 5: the unfactored second moment V, [n].
        let v = ema(row, g_sq.reshape([dims[0]]), beta);
        let update = g / v.clone().sqrt().reshape(dims);
        (update, v, None)
    } else {
        // Algorithm 4 on the [n, m] view: row sums R [n] and column sums C [m].
        let m = dims[D - 1];
        let n = dims[..D - 1].iter().product::<usize>();
        let g_sq = g_sq.reshape([n, m]);
        let r = ema(row, g_sq.clone().sum_dim(1).reshape([n]), beta);
        let c = ema(col, g_sq.sum_dim(0).reshape([m]), beta);
        // 1 / sqrt(V) = 1 / sqrt(R / (1^T R)) x 1 / sqrt(C), an outer product.
        let r_scale = (r.clone() / r.clone().sum()).sqrt().recip().reshape([n, 1]);
        let c_scale = c.clone().sqrt().recip().reshape([1, m]);
        let update = (g.reshape([n, m]) * r_scale * c_scale).reshape(dims);
        (update, r, Some(c))
    };
    // Section 6: U / max(1, RMS(U) / d), the RMS over every element.
    let rms = update.clone().square().mean().sqrt();
    let clip = rms.div_scalar(h.clip_threshold).clamp_min(1.0);
    let update = update / clip.reshape([1usize; D]);
    let decayed = p.cast(DType::F32).mul_scalar(1.0 - h.lr * h.weight_decay);
    let updated = (decayed - update.mul_scalar(h.lr)).cast(dtype);
    (updated, (row, col))
}

impl AdafactorBackend for burn::backend::Flex {}
impl<B: AdafactorBackend, C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy>
    AdafactorBackend for burn::backend::Autodiff<B, C>
{
}
#[cfg(feature = "ndarray")]
impl AdafactorBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): the update is one custom operation
/// ([`super::custom_op`]) that runs the inner backend's, on `CubeBackend` memwall's kernels.
impl<B: burn_fusion::FusionBackend + AdafactorBackend> AdafactorBackend for burn_fusion::Fusion<B> {
    fn adafactor_update<const D: usize>(
        p: Tensor<Self, D>,
        g: Tensor<Self, D>,
        stats: Option<AdafactorStats<Self>>,
        h: &AdafactorStep,
    ) -> (Tensor<Self, D>, AdafactorStats<Self>) {
        use super::custom_op::{outputs, register};
        use burn::tensor::{Shape, TensorPrimitive};
        const NAME: &str = "memwall_adafactor_update";
        if !crate::kernels::cube::Selection::current().adafactor || p.shape().num_elements() == 0 {
            return adafactor_composed(p, g, stats, h);
        }
        let dims = p.dims();
        let m = dims[D - 1];
        let n = p.shape().num_elements() / m;
        let factored = D > 1;
        let mut out = vec![(p.shape(), p.dtype())];
        if factored {
            out.push((Shape::new([n]), DType::F32));
            out.push((Shape::new([m]), DType::F32));
        } else {
            out.push((Shape::new([n * m]), DType::F32));
        }
        let has_stats = stats.is_some();
        let prim = |t: Tensor<Self, D>| t.into_primitive().tensor();
        let prim1 = |t: Tensor<Self, 1>| t.into_primitive().tensor();
        let mut tensors = vec![prim(p), prim(g)];
        if let Some((row, col)) = stats {
            tensors.push(prim1(row));
            tensors.extend(col.map(prim1));
        }
        let h = *h;
        let results = register::<B>(NAME, tensors, out, move |t| {
            let float = |t| Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t));
            let float1 = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
            let mut t = t.into_iter();
            let mut next = || t.next().expect("memwall_adafactor_update: inputs");
            let (p, g) = (float(next()), float(next()));
            let stats = has_stats.then(|| {
                let row = float1(next());
                (row, factored.then(|| float1(next())))
            });
            let (p, (row, col)) = B::adafactor_update(p, g, stats, &h);
            let mut results = vec![p.into_primitive().tensor(), row.into_primitive().tensor()];
            results.extend(col.map(|c| c.into_primitive().tensor()));
            results
        });
        let float = |t| Tensor::<Self, D>::from_primitive(TensorPrimitive::Float(t));
        let float1 = |t| Tensor::<Self, 1>::from_primitive(TensorPrimitive::Float(t));
        if factored {
            let [p, row, col] = outputs::<B, 3>(NAME, results);
            (float(p), (float1(row), Some(float1(col))))
        } else {
            let [p, v] = outputs::<B, 2>(NAME, results);
            (float(p), (float1(v), None))
        }
    }
}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > AdafactorBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
    /// memwall's kernels ([`crate::kernels::cube::adafactor`]): f32 statistics, one pass per
    /// reduction and one for the update.
    fn adafactor_update<const D: usize>(
        p: Tensor<Self, D>,
        g: Tensor<Self, D>,
        stats: Option<AdafactorStats<Self>>,
        h: &AdafactorStep,
    ) -> (Tensor<Self, D>, AdafactorStats<Self>) {
        if !crate::kernels::cube::Selection::current().adafactor || p.shape().num_elements() == 0 {
            return adafactor_composed(p, g, stats, h);
        }
        let dims = p.dims();
        let m = dims[D - 1];
        let n = p.shape().num_elements() / m.max(1);
        let prim = |t: Tensor<Self, D>| t.into_primitive().tensor();
        let prim1 = |t: Tensor<Self, 1>| t.into_primitive().tensor();
        let float = |t| Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(t));
        let float1 = |t| Tensor::<Self, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(t));
        let stats = stats.map(|(r, c)| (prim1(r), c.map(prim1)));
        let shape = if D == 1 {
            crate::kernels::cube::adafactor::Shape::Vector(n * m)
        } else {
            crate::kernels::cube::adafactor::Shape::Matrix { n, m }
        };
        let (p, row, col) =
            crate::kernels::cube::adafactor::update(prim(p), prim(g), stats, shape, h);
        (float(p), (float1(row), col.map(float1)))
    }
}
