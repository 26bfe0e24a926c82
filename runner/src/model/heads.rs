//! Splitting the projections into attention heads and merging them back, as backend
//! operations: flex copies contiguous blocks ([`crate::kernels::heads`]); every other backend
//! runs Burn's `reshape` and `swap_dims` (a view on CUDA, where the fusion backend and the
//! attention's kernels read it as it is).
//!
//! Under autodiff the split's backward is the merge of its gradient and the merge's is the
//! split: neither keeps anything for backward.

use super::{float, primitive};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

/// Backends that split and merge attention heads. The provided methods are Burn's views;
/// flex overrides them with contiguous copies.
pub trait HeadsBackend: Backend {
    /// `[batch, seq, heads · dh]` -> `[batch, heads, seq, dh]`. Panics if `heads` does not
    /// divide the last dimension.
    fn split_heads(x: FloatTensor<Self>, heads: usize) -> FloatTensor<Self> {
        let x = float::<Self, 3>(x);
        let [b, t, d] = x.dims();
        assert_eq!(
            d % heads,
            0,
            "split heads: {heads} heads do not divide d_model {d}"
        );
        primitive(x.reshape([b, t, heads, d / heads]).swap_dims(1, 2))
    }

    /// `[batch, heads, seq, dh]` -> `[batch, seq, heads · dh]`.
    fn merge_heads(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let x = float::<Self, 4>(x);
        let [b, h, t, dh] = x.dims();
        primitive(x.swap_dims(1, 2).reshape([b, t, h * dh]))
    }
}

impl HeadsBackend for burn::backend::Flex {
    fn split_heads(x: FloatTensor<Self>, heads: usize) -> FloatTensor<Self> {
        let d = x.layout().shape()[2];
        assert_eq!(
            d % heads,
            0,
            "split heads: {heads} heads do not divide d_model {d}"
        );
        crate::kernels::flex::split_heads(x, heads)
    }

    fn merge_heads(x: FloatTensor<Self>) -> FloatTensor<Self> {
        crate::kernels::flex::merge_heads(x)
    }
}
#[cfg(feature = "ndarray")]
impl HeadsBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): Burn's operations, fused by it.
impl<B: burn_fusion::FusionBackend> HeadsBackend for burn_fusion::Fusion<B> {}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > HeadsBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
}

/// Backward of the split: merge the gradient.
#[derive(Debug)]
struct SplitBackward;

impl<B: HeadsBackend> Backward<B, 1> for SplitBackward {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        if let [Some(parent)] = ops.parents {
            grads.register::<B>(parent.id, B::merge_heads(dy));
        }
    }
}

/// Backward of the merge: split the gradient into `heads`.
#[derive(Debug)]
struct MergeBackward {
    heads: usize,
}

impl<B: HeadsBackend> Backward<B, 1> for MergeBackward {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        if let [Some(parent)] = ops.parents {
            grads.register::<B>(parent.id, B::split_heads(dy, self.heads));
        }
    }
}

impl<B: HeadsBackend, C: CheckpointStrategy> HeadsBackend for Autodiff<B, C> {
    fn split_heads(x: FloatTensor<Self>, heads: usize) -> FloatTensor<Self> {
        SplitBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateless(B::split_heads(x.primitive, heads))
    }

    fn merge_heads(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let heads = burn::tensor::TensorMetadata::shape(&x.primitive)[1];
        (MergeBackward { heads })
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateless(B::merge_heads(x.primitive))
    }
}

/// `[batch, seq, heads · dh]` -> `[batch, heads, seq, dh]` (see [`HeadsBackend`]).
pub fn split_heads<B: HeadsBackend>(x: Tensor<B, 3>, heads: usize) -> Tensor<B, 4> {
    float(B::split_heads(primitive(x), heads))
}

/// `[batch, heads, seq, dh]` -> `[batch, seq, heads · dh]` (see [`HeadsBackend`]).
pub fn merge_heads<B: HeadsBackend>(x: Tensor<B, 4>) -> Tensor<B, 3> {
    float(B::merge_heads(primitive(x)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    type Ad = Autodiff<Flex>;

    #[test]
    fn flex_split_and_merge_equal_burns_views_with_their_gradients() {
        let [b, t, h, dh] = [2, 3, 4, 5];
        let n = b * t * h * dh;
        let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
        let x =
            Tensor::<Ad, 3>::from_data(TensorData::new(data, [b, t, h * dh]), &Default::default())
                .require_grad();
        let w: Vec<f32> = (0..n).map(|i| ((i * 13) % 17) as f32).collect();
        let w = Tensor::<Ad, 4>::from_data(TensorData::new(w, [b, h, t, dh]), &Default::default());
        let ours = split_heads(x.clone(), h);
        let burns = x.clone().reshape([b, t, h, dh]).swap_dims(1, 2);
        let values = |t: Tensor<Flex, 4>| t.into_data().to_vec::<f32>().unwrap();
        assert_eq!(values(ours.clone().inner()), values(burns.inner()));
        // sum(merge(split(x) * w) * m): the gradient is split-then-merge of w times m.
        let m: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        let m = Tensor::<Ad, 3>::from_data(TensorData::new(m, [b, t, h * dh]), &Default::default());
        let merged = merge_heads(ours * w.clone());
        let grads = (merged * m.clone()).sum().backward();
        let dx = x
            .grad(&grads)
            .expect("dx")
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let want = (w.swap_dims(1, 2).reshape([b, t, h * dh]) * m).inner();
        assert_eq!(dx, want.into_data().to_vec::<f32>().unwrap());
    }
}
