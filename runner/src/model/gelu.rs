//! GELU as a backend operation, so that flex runs memwall's kernel ([`crate::kernels::gelu`])
//! and every other backend Burn's own `gelu`.
//!
//! Under autodiff it is registered exactly as Burn 0.21 registers its `gelu` (a memory-bound
//! operation that checkpoints its input and can be recomputed by a checkpointing strategy), so
//! what the graph keeps, and so every measured peak, is unchanged; only the kernels differ.

use super::unary::{self, InputUnary};
use super::{float, primitive};
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

/// Backends that run the model's GELU. The provided methods are Burn's operations; flex
/// overrides them with memwall's kernels.
pub trait GeluBackend: Backend {
    /// `x Φ(x)`, element by element; same shape and dtype.
    fn model_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gelu(x)
    }

    /// `dy · (Φ(x) + x φ(x))`; `x` and `dy` of one shape and dtype.
    fn model_gelu_backward(x: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::gelu_backward(x, dy)
    }
}

impl GeluBackend for burn::backend::Flex {
    fn model_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        crate::kernels::flex::gelu_forward(x)
    }

    fn model_gelu_backward(x: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        crate::kernels::flex::gelu_backward(x, dy)
    }
}
#[cfg(feature = "ndarray")]
impl GeluBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): the forward is Burn's `gelu` (an
/// elementwise chain Burn's fusion compiles with its neighbours), the backward memwall's kernel
/// as a custom operation ([`super::custom_op`]): the exact derivative, as on the eager rows.
impl<B: burn_fusion::FusionBackend + GeluBackend> GeluBackend for burn_fusion::Fusion<B> {
    fn model_gelu_backward(x: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        use super::custom_op::{inputs, outputs, register};
        use burn::tensor::TensorMetadata;
        const NAME: &str = "memwall_gelu_backward";
        if !crate::kernels::cube::Selection::current().gelu {
            return <Self as burn::tensor::ops::ActivationOps<Self>>::gelu_backward(x, dy);
        }
        let out = vec![(dy.shape(), dy.dtype())];
        let [dx] = outputs::<B, 1>(
            NAME,
            register::<B>(NAME, vec![x, dy], out, |t| {
                let [x, dy] = inputs::<B, 2>(NAME, t);
                vec![B::model_gelu_backward(x, dy)]
            }),
        );
        dx
    }
}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > GeluBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
    /// memwall's kernel ([`crate::kernels::cube::gelu`]): one pass, f32 inside.
    fn model_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        if !crate::kernels::cube::Selection::current().gelu {
            return <Self as burn::tensor::ops::ActivationOps<Self>>::gelu(x);
        }
        crate::kernels::cube::gelu::forward(x)
    }

    /// memwall's kernel: the exact derivative in one pass. Burn 0.21's own `gelu_backward` is
    /// the derivative of the tanh approximation: up to 8.7e-4 off the exact one (at x = -2.02;
    /// computed in f64 over [-6, 6], step 1e-5).
    fn model_gelu_backward(x: FloatTensor<Self>, dy: FloatTensor<Self>) -> FloatTensor<Self> {
        if !crate::kernels::cube::Selection::current().gelu {
            return <Self as burn::tensor::ops::ActivationOps<Self>>::gelu_backward(x, dy);
        }
        crate::kernels::cube::gelu::backward(x, dy)
    }
}

/// The inner backend's GELU for [`unary::register`].
struct Op;

impl<B: GeluBackend> InputUnary<B> for Op {
    fn forward(x: FloatTensor<B>) -> FloatTensor<B> {
        B::model_gelu(x)
    }

    fn backward(x: FloatTensor<B>, dy: FloatTensor<B>) -> FloatTensor<B> {
        B::model_gelu_backward(x, dy)
    }
}

impl<B: GeluBackend, C: CheckpointStrategy> GeluBackend for Autodiff<B, C> {
    fn model_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        unary::register::<B, C, Op>(x)
    }
}

/// The model's GELU on Burn tensors (see [`GeluBackend`]).
pub fn gelu<B: GeluBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    float(B::model_gelu(primitive(x)))
}

/// GELU's backward on Burn tensors of an inner backend: `dy · GELU'(x)` (what the operation's
/// autodiff step computes; the unit executor calls it directly).
pub fn gelu_backward<B: GeluBackend, const D: usize>(
    x: Tensor<B, D>,
    dy: Tensor<B, D>,
) -> Tensor<B, D> {
    float(B::model_gelu_backward(primitive(x), primitive(dy)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::{DType, TensorData};

    type Ad = Autodiff<Flex>;

    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919) % 1201) as f32 / 100.0 - 6.0)
            .collect()
    }

    /// Output and input gradient of `sum(gelu(x) * w)`, with memwall's GELU or Burn's.
    fn run(ours: bool, dtype: DType) -> (Vec<f32>, Vec<f32>) {
        let n = 3 * 40_001;
        let x =
            Tensor::<Ad, 2>::from_data(TensorData::new(values(n), [3, n / 3]), &Default::default())
                .cast(dtype)
                .require_grad();
        let w = Tensor::<Ad, 2>::from_data(
            TensorData::new(values(n).iter().map(|v| v.sin()).collect(), [3, n / 3]),
            &Default::default(),
        );
        let y = if ours {
            gelu(x.clone())
        } else {
            burn::tensor::activation::gelu(x.clone())
        };
        let grads = (y.clone().cast(DType::F32) * w).sum().backward();
        let flat = |t: Tensor<Flex, 2>| t.cast(DType::F32).into_data().to_vec::<f32>().unwrap();
        (flat(y.inner()), flat(x.grad(&grads).expect("dx")))
    }

    #[test]
    fn f32_output_and_gradient_match_burns_gelu() {
        let (y, dx) = run(true, DType::F32);
        let (y_ref, dx_ref) = run(false, DType::F32);
        for i in 0..y.len() {
            let scale = 1f32.max(y_ref[i].abs());
            assert!(
                (y[i] - y_ref[i]).abs() <= 5e-7 * scale,
                "y[{i}]: {} vs {}",
                y[i],
                y_ref[i]
            );
            assert!(
                (dx[i] - dx_ref[i]).abs() <= 1e-6,
                "dx[{i}]: {} vs {}",
                dx[i],
                dx_ref[i]
            );
        }
    }

    #[test]
    fn bf16_matches_burns_gelu_within_one_bf16_rounding() {
        let (y, dx) = run(true, DType::BF16);
        let (y_ref, dx_ref) = run(false, DType::BF16);
        for i in 0..y.len() {
            // Both round an f32 result to bf16 (unit roundoff 2^-8); they may round apart.
            let tol = |r: f32| 2f32.powi(-7) * r.abs().max(1e-3);
            assert!(
                (y[i] - y_ref[i]).abs() <= tol(y_ref[i]),
                "y[{i}]: {} vs {}",
                y[i],
                y_ref[i]
            );
            assert!(
                (dx[i] - dx_ref[i]).abs() <= tol(dx_ref[i]),
                "dx[{i}]: {} vs {}",
                dx[i],
                dx_ref[i]
            );
        }
    }
}
