//! Layer normalization as an op-level rematerialization: a custom Burn autodiff operation that
//! keeps less for backward than Burn's composed layer norm.
//!
//! Burn 0.21's `layer_norm` is composed of elementwise operations (`ModuleOps::layer_norm`:
//! mean, subtract, square, mean, sqrt, divide, scale, shift). Under autodiff its `div` keeps the
//! centered input and its `mul` by `γ` keeps the normalized output: two `[rows, d_model]` tensors
//! per norm, in the compute dtype. At the `full` profile (batch 4, seq 768, d_model 2048, 65
//! norms) that is 3.3 GB in f32.
//!
//! This operation computes `y = (x - μ) · r · γ + β` with `r = 1 / sqrt(σ² + ε)` (Ba, Kiros,
//! Hinton 2016, "Layer Normalization", equations (3)-(4); biased variance) with the statistics in
//! f32 whatever the dtype, and keeps, per [`LayerNormSaving`]:
//!
//! - `SavesInput`: `x` and the per-row `μ`, `r` (f32, `[rows, 1]`), as PyTorch's native layer
//!   norm does; backward recomputes `x̂ = (x - μ) r`;
//! - `SavesOutput`: `y` and `r`: backward recovers `x̂ = (y - β) / γ` (NVIDIA Apex's
//!   memory-efficient `FusedLayerNorm`). The following linear layer keeps `y` as its saved
//!   input, so the norm adds only `4 · rows` bytes.
//!
//! Backward, with `g = dy ∘ γ` per row (the standard layer-norm gradient):
//! `dx = r (g - mean(g) - x̂ mean(g ∘ x̂))`, `dγ = Σ_rows dy ∘ x̂`, `dβ = Σ_rows dy`,
//! accumulated in f32 and returned in the parameters' and input's dtypes.
//!
//! Written with Burn tensor operations ([`composed_forward`], [`composed_backward`]), so generic
//! over backend and dtype; on CUDA with Burn's fusion each line is a few kernels (the fusion
//! backend fuses the elementwise chains); on `CubeBackend` (no fusion) memwall's kernels run
//! instead ([`crate::kernels::cube::norm`]), tested against the composed form.

use super::cast::{CastBackend, ToDtype};
use super::{float, primitive};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::nn::{LayerNorm, LayerNormConfig};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor};
pub use memwall_core::strategy::LayerNormSaving;

/// The `ε` of every layer norm of the model: Burn's `LayerNormConfig` default (1e-5), with which
/// the norms are built.
pub fn epsilon() -> f64 {
    LayerNormConfig::new(1).epsilon
}

/// Backends that run memwall's layer-norm operation. Inner (non-autodiff) backends use the
/// provided forward; [`Autodiff`] registers the operation with its own backward.
pub trait NormBackend: CastBackend {
    /// `(x - μ) / sqrt(σ² + ε) · γ + β` over the last axis.
    ///
    /// Shapes: `x` `[rows, d]`, `gamma` and `beta` `[d]`; the result is `[rows, d]` in `x`'s
    /// dtype. Panics (as Burn's tensor operations do) on mismatched shapes.
    fn saving_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        _saving: LayerNormSaving,
    ) -> FloatTensor<Self> {
        let stats = forward::<Self>(float(x), float(gamma), float(beta), epsilon);
        primitive(stats.y)
    }

    /// The operation's forward pass on `x` `[rows, d]` with `gamma`, `beta` `[d]`: `(y, mean,
    /// rstd)`, `y` in `x`'s dtype, the row means and `1 / sqrt(σ² + ε)` `[rows, 1]` in f32.
    /// Provided: [`composed_forward`] (Burn's operations, the reference); `CubeBackend`
    /// overrides it with memwall's kernel ([`crate::kernels::cube::norm`]).
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        composed_forward_primitive::<Self>(x, gamma, beta, epsilon)
    }

    /// The operation's backward pass: `(dx, dγ, dβ)` from what was kept, the row `rstd`
    /// (`[rows, 1]`, f32), `gamma` `[d]` and `dy` `[rows, d]`; `dx` in `dy`'s dtype, `dγ` and
    /// `dβ` in `gamma`'s. Provided: [`composed_backward`]; `CubeBackend` overrides it.
    fn layer_norm_backward(
        kept: Kept<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        composed_backward_primitive::<Self>(kept, rstd, gamma, dy)
    }
}

impl NormBackend for burn::backend::Flex {}
#[cfg(feature = "ndarray")]
impl NormBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): both passes are custom operations
/// ([`super::custom_op`]) that run the inner backend's, on `CubeBackend` memwall's kernels.
impl<B: burn_fusion::FusionBackend + NormBackend> NormBackend for burn_fusion::Fusion<B> {
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use super::custom_op::{inputs, outputs, register};
        use burn::tensor::{DType, Shape, TensorMetadata};
        const NAME: &str = "memwall_layer_norm_forward";
        if !crate::kernels::cube::Selection::current().layer_norm {
            return composed_forward_primitive::<Self>(x, gamma, beta, epsilon);
        }
        let [rows, _] = x.shape().dims::<2>();
        let stat = (Shape::new([rows, 1]), DType::F32);
        let out = vec![(x.shape(), x.dtype()), stat.clone(), stat];
        let [y, mean, rstd] = outputs::<B, 3>(
            NAME,
            register::<B>(NAME, vec![x, gamma, beta], out, move |t| {
                let [x, gamma, beta] = inputs::<B, 3>(NAME, t);
                let (y, mean, rstd) = B::layer_norm_forward(x, gamma, beta, epsilon);
                vec![y, mean, rstd]
            }),
        );
        (y, mean, rstd)
    }

    fn layer_norm_backward(
        kept: Kept<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use super::custom_op::{inputs, outputs, register};
        use burn::tensor::TensorMetadata;
        const NAME: &str = "memwall_layer_norm_backward";
        if !crate::kernels::cube::Selection::current().layer_norm {
            return composed_backward_primitive::<Self>(kept, rstd, gamma, dy);
        }
        let (saves_output, a, b) = match kept {
            Kept::Input { x, mean } => (false, x, mean),
            Kept::Output { y, beta } => (true, y, beta),
        };
        let param = (gamma.shape(), gamma.dtype());
        let out = vec![(dy.shape(), dy.dtype()), param.clone(), param];
        let [dx, dgamma, dbeta] = outputs::<B, 3>(
            NAME,
            register::<B>(NAME, vec![a, b, rstd, gamma, dy], out, move |t| {
                let [a, b, rstd, gamma, dy] = inputs::<B, 5>(NAME, t);
                let kept = if saves_output {
                    Kept::Output { y: a, beta: b }
                } else {
                    Kept::Input { x: a, mean: b }
                };
                let (dx, dgamma, dbeta) = B::layer_norm_backward(kept, rstd, gamma, dy);
                vec![dx, dgamma, dbeta]
            }),
        );
        (dx, dgamma, dbeta)
    }
}
/// On CubeCL without Burn's fusion (CUDA's eager rows; wgpu in the tests), both passes are
/// memwall's kernels ([`crate::kernels::cube::norm`]): the same statistics in f32, one kernel
/// forward and three backward instead of Burn's dozens.
#[cfg(feature = "cuda")]
impl<R, F, I, BT> NormBackend for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::BoolElement,
{
    fn layer_norm_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        if !crate::kernels::cube::Selection::current().layer_norm {
            return composed_forward_primitive::<Self>(x, gamma, beta, epsilon);
        }
        crate::kernels::cube::norm::forward(x, gamma, beta, epsilon)
    }

    fn layer_norm_backward(
        kept: Kept<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use crate::kernels::cube::norm::{backward, Kept as CubeKept};
        if !crate::kernels::cube::Selection::current().layer_norm {
            return composed_backward_primitive::<Self>(kept, rstd, gamma, dy);
        }
        let kept = match kept {
            Kept::Input { x, mean } => CubeKept::Input { x, mean },
            Kept::Output { y, beta } => CubeKept::Output { y, beta },
        };
        backward(kept, rstd, gamma, dy)
    }
}

/// [`composed_forward`] on primitives: `(y, mean, rstd)`.
fn composed_forward_primitive<B: CastBackend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let f = composed_forward::<B>(float(x), float(gamma), float(beta), epsilon);
    (primitive(f.y), primitive(f.mean), primitive(f.rstd))
}

/// [`composed_backward`] on primitives: `(dx, dγ, dβ)`.
fn composed_backward_primitive<B: CastBackend>(
    kept: Kept<B>,
    rstd: FloatTensor<B>,
    gamma: FloatTensor<B>,
    dy: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (dx, dgamma, dbeta) = composed_backward::<B>(kept, float(rstd), float(gamma), float(dy));
    (primitive(dx), primitive(dgamma), primitive(dbeta))
}

/// The forward pass's output and its f32 row statistics.
pub struct Forward<B: Backend> {
    /// `[rows, d]`, the input's dtype.
    pub y: Tensor<B, 2>,
    /// Row means, `[rows, 1]`, f32.
    pub mean: Tensor<B, 2>,
    /// Row `1 / sqrt(σ² + ε)`, `[rows, 1]`, f32.
    pub rstd: Tensor<B, 2>,
}

/// The layer norm's forward pass on `x` `[rows, d]` with `gamma`, `beta` `[d]`: the operation's
/// own ([`NormBackend::layer_norm_forward`]; also run by the unit executor,
/// `crate::train::units`, so that its recomputation is bit-identical).
pub(crate) fn forward<B: NormBackend>(
    x: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Forward<B> {
    let (y, mean, rstd) =
        B::layer_norm_forward(primitive(x), primitive(gamma), primitive(beta), epsilon);
    Forward {
        y: float(y),
        mean: float(mean),
        rstd: float(rstd),
    }
}

/// The layer norm's forward pass written with Burn's tensor operations (the reference the
/// kernels are tested against): `x` `[rows, d]`, `gamma`, `beta` `[d]`.
pub fn composed_forward<B: CastBackend>(
    x: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> Forward<B> {
    let dtype = x.dtype();
    let x = x.to_dtype(DType::F32);
    let mean = x.clone().mean_dim(1);
    let centered = x - mean.clone();
    let var = centered.clone().square().mean_dim(1);
    let rstd = var.add_scalar(epsilon).sqrt().recip();
    let gamma = gamma.to_dtype(DType::F32).unsqueeze_dim::<2>(0);
    let beta = beta.to_dtype(DType::F32).unsqueeze_dim::<2>(0);
    let y = (centered * rstd.clone() * gamma + beta).to_dtype(dtype);
    Forward { y, mean, rstd }
}

/// What backward recovers `x̂` from: the kept tensors of each [`LayerNormSaving`].
#[derive(Debug, Clone)]
pub enum Kept<B: Backend> {
    /// The input `x` and the row means.
    Input {
        /// `[rows, d]`, the input's dtype.
        x: FloatTensor<B>,
        /// `[rows, 1]`, f32.
        mean: FloatTensor<B>,
    },
    /// The output `y` and `β`.
    Output {
        /// `[rows, d]`, the output's dtype.
        y: FloatTensor<B>,
        /// `[d]`, the parameters' dtype.
        beta: FloatTensor<B>,
    },
}

/// The backward step; its state is what the graph keeps.
#[derive(Debug)]
struct NormBackward;

/// `(kept, rstd, gamma)`.
type NormState<B> = (Kept<B>, FloatTensor<B>, FloatTensor<B>);

impl<B: NormBackend> Backward<B, 3> for NormBackward {
    type State = NormState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (kept, rstd, gamma) = ops.state;
        let dy = float::<B, 2>(grads.consume::<B>(&ops.node));
        let (dx, dgamma, dbeta) = backward::<B>(kept, float(rstd), float(gamma), dy);
        let [px, pgamma, pbeta] = ops.parents;
        if let Some(node) = px {
            grads.register::<B>(node.id, primitive(dx));
        }
        if let Some(node) = pgamma {
            grads.register::<B>(node.id, primitive(dgamma));
        }
        if let Some(node) = pbeta {
            grads.register::<B>(node.id, primitive(dbeta));
        }
    }
}

/// The layer norm's backward pass: `(dx, dγ, dβ)` from what was kept, the row `rstd`
/// (`[rows, 1]`, f32), `gamma` `[d]` and the output's gradient `dy` `[rows, d]`; `dx` in `dy`'s
/// dtype, `dγ` and `dβ` in `gamma`'s. The operation's own backward
/// ([`NormBackend::layer_norm_backward`]), also run by the unit executor.
pub(crate) fn backward<B: NormBackend>(
    kept: Kept<B>,
    rstd: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    dy: Tensor<B, 2>,
) -> (Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1>) {
    let (dx, dgamma, dbeta) =
        B::layer_norm_backward(kept, primitive(rstd), primitive(gamma), primitive(dy));
    (float(dx), float(dgamma), float(dbeta))
}

/// [`backward`] written with Burn's tensor operations (the reference the kernels are tested
/// against).
pub fn composed_backward<B: CastBackend>(
    kept: Kept<B>,
    rstd: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    dy: Tensor<B, 2>,
) -> (Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1>) {
    let (dtype, param_dtype) = (dy.dtype(), gamma.dtype());
    let gamma = gamma.to_dtype(DType::F32).unsqueeze_dim::<2>(0);
    let xhat = match kept {
        Kept::Input { x, mean } => {
            (float::<B, 2>(x).to_dtype(DType::F32) - float::<B, 2>(mean)) * rstd.clone()
        }
        Kept::Output { y, beta } => {
            let beta = float::<B, 1>(beta)
                .to_dtype(DType::F32)
                .unsqueeze_dim::<2>(0);
            (float::<B, 2>(y).to_dtype(DType::F32) - beta) / gamma.clone()
        }
    };
    let dy = dy.to_dtype(DType::F32);
    let dgamma = (dy.clone() * xhat.clone()).sum_dim(0).squeeze_dim::<1>(0);
    let dbeta = dy.clone().sum_dim(0).squeeze_dim::<1>(0);
    let g = dy * gamma;
    let g_mean = g.clone().mean_dim(1);
    let gx_mean = (g.clone() * xhat.clone()).mean_dim(1);
    let dx = ((g - g_mean - xhat * gx_mean) * rstd).to_dtype(dtype);
    (
        dx,
        dgamma.to_dtype(param_dtype),
        dbeta.to_dtype(param_dtype),
    )
}

impl<B: NormBackend, C: CheckpointStrategy> NormBackend for Autodiff<B, C> {
    fn saving_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        saving: LayerNormSaving,
    ) -> FloatTensor<Self> {
        let nodes = [x.node.clone(), gamma.node.clone(), beta.node.clone()];
        match NormBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let f = forward::<B>(
                    float(x.primitive.clone()),
                    float(gamma.primitive.clone()),
                    float(beta.primitive.clone()),
                    epsilon,
                );
                let y = primitive(f.y);
                let kept = match saving {
                    LayerNormSaving::SavesOutput => Kept::Output {
                        y: y.clone(),
                        beta: beta.primitive,
                    },
                    // `Composed` never reaches the operation (see [`layer_norm`]); keeping the
                    // input is the exact choice.
                    LayerNormSaving::SavesInput | LayerNormSaving::Composed => Kept::Input {
                        x: x.primitive,
                        mean: primitive(f.mean),
                    },
                };
                prep.finish((kept, primitive(f.rstd), gamma.primitive), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::saving_layer_norm(
                x.primitive,
                gamma.primitive,
                beta.primitive,
                epsilon,
                saving,
            )),
        }
    }
}

/// Runs `norm` on `x` (`[batch, seq, d_model]` -> same shape and dtype) as `saving` says:
/// Burn's own layer norm for [`LayerNormSaving::Composed`] (and for a norm without `β`), the
/// operation of this module otherwise, with `ε` = [`epsilon`].
pub fn layer_norm<B: NormBackend>(
    norm: &LayerNorm<B>,
    x: Tensor<B, 3>,
    saving: LayerNormSaving,
) -> Tensor<B, 3> {
    let beta = match (&norm.beta, saving) {
        (Some(beta), LayerNormSaving::SavesInput | LayerNormSaving::SavesOutput) => beta.val(),
        _ => return norm.forward(x),
    };
    let [b, t, d] = x.dims();
    let y = B::saving_layer_norm(
        primitive(x.reshape([b * t, d])),
        primitive(norm.gamma.val()),
        primitive(beta),
        epsilon(),
        saving,
    );
    float::<B, 2>(y).reshape([b, t, d])
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::module::{AutodiffModule, Param};
    use burn::tensor::TensorData;

    type Ad = Autodiff<Flex>;

    /// Deterministic pseudo-random values in `[lo, lo + width)`.
    fn values(n: usize, seed: u64, lo: f32, width: f32) -> Vec<f32> {
        crate::kernels::test_values(n, seed, lo, width)
    }

    fn tensor<const D: usize>(v: Vec<f32>, shape: [usize; D]) -> Tensor<Ad, D> {
        Tensor::from_data(TensorData::new(v, shape), &Default::default())
    }

    /// A norm over `d` features with `γ` in [0.5, 1.5] and `β` in [-0.5, 0.5], in `dtype`.
    fn norm(d: usize, dtype: DType) -> LayerNorm<Ad> {
        let mut norm = LayerNormConfig::new(d).init::<Ad>(&Default::default());
        let param = |v: Vec<f32>| Param::from_tensor(tensor(v, [d]).cast(dtype));
        norm.gamma = param(values(d, 7, 0.5, 1.0));
        norm.beta = Some(param(values(d, 8, -0.5, 1.0)));
        norm
    }

    fn flat<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.cast(DType::F32).into_data().to_vec::<f32>().unwrap()
    }

    /// max |a - b| / max |b|.
    fn rel_err(a: &[f32], b: &[f32]) -> f32 {
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        diff / scale
    }

    /// Output and the gradients of `sum(y * w)` w.r.t. x, γ and β.
    fn run(saving: LayerNormSaving, dtype: DType, shape: [usize; 3]) -> [Vec<f32>; 4] {
        let n: usize = shape.iter().product();
        // Rows with an offset and a spread, so centering matters.
        let x = tensor(values(n, 1, -3.0, 8.0), shape)
            .cast(dtype)
            .detach()
            .require_grad();
        let w = tensor(values(n, 2, -1.0, 2.0), shape);
        let norm = norm(shape[2], dtype);
        let y = layer_norm(&norm, x.clone(), saving);
        let grads = (y.clone().cast(DType::F32) * w).sum().backward();
        let beta = norm.beta.as_ref().expect("beta").val();
        [
            flat(y.inner()),
            flat(x.grad(&grads).expect("dx")),
            flat(norm.gamma.val().grad(&grads).expect("dgamma")),
            flat(beta.grad(&grads).expect("dbeta")),
        ]
    }

    fn assert_within(ours: &[Vec<f32>; 4], reference: &[Vec<f32>; 4], tol: f32, what: &str) {
        for (name, (a, b)) in ["y", "dx", "dgamma", "dbeta"]
            .iter()
            .zip(ours.iter().zip(reference))
        {
            assert_eq!(a.len(), b.len(), "{what}: {name} length");
            let e = rel_err(a, b);
            assert!(e <= tol, "{what}: {name} relative error {e:e} > {tol:e}");
        }
    }

    #[test]
    fn f32_output_and_gradients_equal_burns_layer_norm() {
        for shape in [[2, 5, 16], [1, 3, 7], [3, 1, 64]] {
            let reference = run(LayerNormSaving::Composed, DType::F32, shape);
            for saving in [LayerNormSaving::SavesInput, LayerNormSaving::SavesOutput] {
                let ours = run(saving, DType::F32, shape);
                assert_within(&ours, &reference, 1e-5, &format!("{saving:?} {shape:?}"));
            }
        }
    }

    #[test]
    fn bf16_is_within_bf16_rounding_of_f32() {
        // bf16 keeps 8 significant bits (unit roundoff 2^-8 = 3.9e-3): inputs, output and
        // gradients are rounded to bf16, statistics are f32. Saving the output recovers x̂ from
        // the bf16 output, one more rounding. Burn's composed bf16 norm (statistics in bf16) is
        // held to the same tolerance.
        let shape = [2, 6, 32];
        let reference = run(LayerNormSaving::Composed, DType::F32, shape);
        for saving in [
            LayerNormSaving::SavesInput,
            LayerNormSaving::SavesOutput,
            LayerNormSaving::Composed,
        ] {
            let ours = run(saving, DType::BF16, shape);
            assert_within(&ours, &reference, 3e-2, &format!("bf16 {saving:?}"));
        }
    }

    #[test]
    fn inner_backend_forward_equals_the_tracked_one() {
        let shape = [2, 4, 8];
        let n: usize = shape.iter().product();
        let x = tensor(values(n, 3, -2.0, 4.0), shape);
        let norm = norm(8, DType::F32);
        let tracked = flat(layer_norm(&norm, x.clone(), LayerNormSaving::SavesInput).inner());
        let inner = layer_norm(&norm.valid(), x.inner(), LayerNormSaving::SavesInput);
        assert_eq!(flat(inner), tracked);
    }
}
