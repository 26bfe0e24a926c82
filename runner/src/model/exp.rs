//! The exponential as a backend operation: flex runs memwall's vectorized, parallel kernel
//! ([`crate::kernels::gelu::exp`]; flex 0.21 calls libm's `expf` per element on one thread),
//! every other backend Burn's `exp`. Used by the attention's softmax tiles and the loss's
//! log-softmax.
//!
//! Under autodiff it is registered exactly as Burn 0.21 registers `exp` (memory-bound, keeps
//! its input and recomputes the output in backward), so what the graph keeps is unchanged.

use super::unary::{self, InputUnary};
use super::{float, primitive};
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

/// Backends that run the model's exponential.
pub trait ExpBackend: Backend {
    /// `e^x` element by element; same shape and dtype.
    fn model_exp(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_exp(x)
    }
}

impl ExpBackend for burn::backend::Flex {
    fn model_exp(x: FloatTensor<Self>) -> FloatTensor<Self> {
        crate::kernels::flex::exp(x)
    }
}
#[cfg(feature = "ndarray")]
impl ExpBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): Burn's operations, fused by it.
impl<B: burn_fusion::FusionBackend> ExpBackend for burn_fusion::Fusion<B> {}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > ExpBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
}

/// The inner backend's exponential for [`unary::register`].
struct Op;

impl<B: ExpBackend> InputUnary<B> for Op {
    fn forward(x: FloatTensor<B>) -> FloatTensor<B> {
        B::model_exp(x)
    }

    fn backward(x: FloatTensor<B>, dy: FloatTensor<B>) -> FloatTensor<B> {
        B::float_mul(dy, B::model_exp(x))
    }
}

impl<B: ExpBackend, C: CheckpointStrategy> ExpBackend for Autodiff<B, C> {
    fn model_exp(x: FloatTensor<Self>) -> FloatTensor<Self> {
        unary::register::<B, C, Op>(x)
    }
}

/// `e^x` on Burn tensors (see [`ExpBackend`]).
pub fn exp<B: ExpBackend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    float(B::model_exp(primitive(x)))
}

/// `log_softmax(x)` over `dim`, composed as Burn 0.21's default (`x - max` with the maximum
/// detached, minus the log of the sum of exponentials) with [`exp`].
pub fn log_softmax<B: ExpBackend, const D: usize>(x: Tensor<B, D>, dim: usize) -> Tensor<B, D> {
    let max = x.clone().detach().max_dim(dim);
    let shifted = x - max;
    let log_sum_exp = exp(shifted.clone()).sum_dim(dim).log();
    shifted - log_sum_exp
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type Ad = Autodiff<Flex>;

    #[test]
    fn log_softmax_and_its_gradient_match_burns() {
        let (n, v) = (7, 3000);
        let data: Vec<f32> = (0..n * v)
            .map(|i| ((i * 7919) % 2003) as f32 / 100.0 - 10.0)
            .collect();
        let w: Vec<f32> = (0..n * v).map(|i| ((i * 13) % 7) as f32 - 3.0).collect();
        let run = |ours: bool| {
            let x = Tensor::<Ad, 2>::from_data(
                TensorData::new(data.clone(), [n, v]),
                &Default::default(),
            )
            .require_grad();
            let w =
                Tensor::<Ad, 2>::from_data(TensorData::new(w.clone(), [n, v]), &Default::default());
            let y = if ours {
                log_softmax(x.clone(), 1)
            } else {
                burn::tensor::activation::log_softmax(x.clone(), 1)
            };
            let grads = (y.clone() * w).sum().backward();
            let flat = |t: Tensor<Flex, 2>| t.into_data().to_vec::<f32>().unwrap();
            (flat(y.inner()), flat(x.grad(&grads).unwrap()))
        };
        let ((y, dx), (y_ref, dx_ref)) = (run(true), run(false));
        for i in 0..y.len() {
            assert!(
                (y[i] - y_ref[i]).abs() <= 2e-6 * y_ref[i].abs().max(1.0),
                "y[{i}]: {} vs {}",
                y[i],
                y_ref[i]
            );
            assert!(
                (dx[i] - dx_ref[i]).abs() <= 1e-5,
                "dx[{i}]: {} vs {}",
                dx[i],
                dx_ref[i]
            );
        }
    }
}
