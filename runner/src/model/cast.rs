//! Float dtype conversions inside memwall's operations (the layer norm's f32 statistics, the
//! attention's f32 tiles) as a backend operation: flex converts bf16 and f16 with SIMD slice
//! conversions in parallel ([`crate::kernels::flex::cast`]; flex 0.21 converts one element at a
//! time on one thread), every other backend runs Burn's `cast`.
//!
//! Only the inner (non-autodiff) backend's conversions run inside the operations; the autodiff
//! backend keeps Burn's tracked `cast`.

use super::{float, primitive};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor};

/// Backends that convert float dtypes for memwall's operations.
pub trait CastBackend: Backend {
    /// `x` in `dtype` (rounded to nearest even when narrowing); `x` itself when it already is.
    fn model_cast(x: FloatTensor<Self>, dtype: DType) -> FloatTensor<Self> {
        if burn::tensor::TensorMetadata::dtype(&x) == dtype {
            x
        } else {
            Self::float_cast(x, dtype.into())
        }
    }
}

impl CastBackend for burn::backend::Flex {
    fn model_cast(x: FloatTensor<Self>, dtype: DType) -> FloatTensor<Self> {
        crate::kernels::flex::cast(x, dtype)
    }
}
#[cfg(feature = "ndarray")]
impl CastBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): Burn's operations, fused by it.
impl<B: burn_fusion::FusionBackend> CastBackend for burn_fusion::Fusion<B> {}
#[cfg(feature = "cuda")]
impl<
        R: burn_cubecl::CubeRuntime,
        F: burn_cubecl::FloatElement,
        I: burn_cubecl::IntElement,
        BT: burn_cubecl::BoolElement,
    > CastBackend for burn_cubecl::CubeBackend<R, F, I, BT>
{
}
impl<B: Backend, C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy> CastBackend
    for burn::backend::Autodiff<B, C>
{
}

/// `.to_dtype(dtype)` on tensors of a [`CastBackend`]: [`CastBackend::model_cast`].
pub trait ToDtype {
    /// The tensor in `dtype`.
    fn to_dtype(self, dtype: DType) -> Self;
}

impl<B: CastBackend, const D: usize> ToDtype for Tensor<B, D> {
    fn to_dtype(self, dtype: DType) -> Self {
        float(B::model_cast(primitive(self), dtype))
    }
}
