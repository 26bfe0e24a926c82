//! The model's matrix products as backend operations: [`MatmulBackend::model_matmul`] (flex's
//! f32 and bf16 products through [`crate::kernels::matmul`], every other case Burn's `matmul`)
//! and the bias-free linear layer `y = x W` built on it, with its own backward
//! (`dx = dy Wᵀ`, `dW = xᵀ dy` over the flattened rows, so no batched weight gradient is
//! summed afterwards).
//!
//! Under autodiff the linear layer keeps `x` and `W`, as Burn's `matmul` does: what the graph
//! keeps, and so every peak, is unchanged.

use super::{float, primitive};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

/// Backends that run the model's matrix products.
pub trait MatmulBackend: Backend {
    /// `lhs @ rhs`, `[..., m, k] x [..., k, n] -> [..., m, n]`, batch dimensions broadcast, one
    /// float dtype. Panics (as Burn's `matmul`) on mismatched shapes.
    fn model_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::float_matmul(lhs, rhs)
    }

    /// `x @ w` for `x` `[rows, d_in]` and `w` `[d_in, d_out]`: the bias-free linear layer.
    fn model_linear(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::model_matmul(x, w)
    }
}

impl MatmulBackend for burn::backend::Flex {
    fn model_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        crate::kernels::matmul::matmul(lhs, rhs)
    }
}
#[cfg(feature = "ndarray")]
impl MatmulBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): Burn's operations, fused by it.
impl<B: burn_fusion::FusionBackend> MatmulBackend for burn_fusion::Fusion<B> {}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > MatmulBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
}

#[derive(Debug)]
struct LinearBackward;

impl<B: MatmulBackend> Backward<B, 2> for LinearBackward {
    /// `(x, w)`.
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (x, w) = ops.state;
        let dy = grads.consume::<B>(&ops.node);
        let [px, pw] = ops.parents;
        if let Some(node) = pw {
            let xt = B::float_swap_dims(x, 0, 1);
            grads.register::<B>(node.id, B::model_matmul(xt, dy.clone()));
        }
        if let Some(node) = px {
            let wt = B::float_swap_dims(w, 0, 1);
            grads.register::<B>(node.id, B::model_matmul(dy, wt));
        }
    }
}

impl<B: MatmulBackend, C: CheckpointStrategy> MatmulBackend for Autodiff<B, C> {
    fn model_linear(x: FloatTensor<Self>, w: FloatTensor<Self>) -> FloatTensor<Self> {
        let nodes = [x.node.clone(), w.node.clone()];
        match LinearBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = B::model_linear(x.primitive.clone(), w.primitive.clone());
                prep.finish((x.primitive, w.primitive), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::model_linear(x.primitive, w.primitive)),
        }
    }
}

/// `layer` (bias-free) on `x` `[batch, seq, d_in]` -> `[batch, seq, d_out]`. Panics if the layer
/// has a bias (the model's have none).
pub fn linear<B: MatmulBackend>(layer: &Linear<B>, x: Tensor<B, 3>) -> Tensor<B, 3> {
    assert!(
        layer.bias.is_none(),
        "the model's linear layers have no bias"
    );
    let [b, t, d] = x.dims();
    let y = B::model_linear(
        primitive(x.reshape([b * t, d])),
        primitive(layer.weight.val()),
    );
    let y = float::<B, 2>(y);
    let out = y.dims()[1];
    y.reshape([b, t, out])
}

/// `lhs @ rhs` on Burn tensors of the inner backend (see [`MatmulBackend::model_matmul`]).
pub fn matmul<B: MatmulBackend, const D: usize>(
    lhs: Tensor<B, D>,
    rhs: Tensor<B, D>,
) -> Tensor<B, D> {
    float(B::model_matmul(primitive(lhs), primitive(rhs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::nn::LinearConfig;
    use burn::tensor::{DType, TensorData};

    type Ad = Autodiff<Flex>;

    fn run(ours: bool, dtype: DType) -> [Vec<f32>; 3] {
        let device = Default::default();
        let mut layer = LinearConfig::new(24, 40)
            .with_bias(false)
            .init::<Ad>(&device);
        let w: Vec<f32> = (0..24 * 40)
            .map(|i| ((i * 13) % 23) as f32 / 11.0 - 1.0)
            .collect();
        let w = Tensor::<Ad, 2>::from_data(TensorData::new(w, [24, 40]), &device).cast(dtype);
        layer.weight = burn::module::Param::from_tensor(w);
        let v: Vec<f32> = (0..2 * 5 * 24)
            .map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0)
            .collect();
        let x = Tensor::<Ad, 3>::from_data(TensorData::new(v, [2, 5, 24]), &device)
            .cast(dtype)
            .require_grad();
        let m: Vec<f32> = (0..2 * 5 * 40)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let m = Tensor::<Ad, 3>::from_data(TensorData::new(m, [2, 5, 40]), &device);
        let y = if ours {
            linear(&layer, x.clone())
        } else {
            layer.forward(x.clone())
        };
        let grads = (y.clone().cast(DType::F32) * m).sum().backward();
        let flat = |t: Tensor<Flex, 3>| t.cast(DType::F32).into_data().to_vec::<f32>().unwrap();
        let dw = layer.weight.val().grad(&grads).expect("dw");
        [
            flat(y.inner()),
            flat(x.grad(&grads).expect("dx")),
            flat(dw.cast(DType::F32).unsqueeze_dim(0)),
        ]
    }

    #[test]
    fn output_and_gradients_equal_burns_linear() {
        for (dtype, tol) in [(DType::F32, 1e-5f32), (DType::BF16, 2f32.powi(-7))] {
            let (ours, burns) = (run(true, dtype), run(false, dtype));
            for (name, (a, b)) in ["y", "dx", "dw"].iter().zip(ours.iter().zip(&burns)) {
                assert_eq!(a.len(), b.len());
                let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() <= tol * scale, "{dtype:?} {name}: {x} vs {y}");
                }
            }
        }
    }
}
