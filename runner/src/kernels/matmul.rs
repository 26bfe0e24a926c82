//! bf16 matrix products on flex through f32, without copying the operands' layouts.
//!
//! flex 0.21's `matmul_bf16` makes both operands contiguous (an element-by-element strided
//! copy for a transposed operand, as every backward product has), converts them to f32 on one
//! thread, multiplies and converts back (`burn-flex/src/ops/matmul.rs`). Here each operand's
//! storage span is widened to f32 in parallel as it lies in memory, so the f32 tensor keeps the
//! operand's strides and flex's f32 product (gemm, which reads any strides) multiplies the
//! views directly; the product is rounded back to bf16 (to nearest even) in parallel.

use super::CHUNK;
use burn::backend::Flex;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{bf16, Bytes, DType};
use burn_flex::{FlexTensor, Layout};
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// The bf16 view `t` as an f32 tensor of the same shape and strides, over a buffer holding only
/// the view's span. `None` for negative strides (a flipped view).
fn widen(t: &FlexTensor) -> Option<FlexTensor> {
    let layout = t.layout();
    let strides = layout.strides();
    if strides.iter().any(|&s| s < 0) {
        return None;
    }
    let shape = layout.shape();
    if shape.num_elements() == 0 {
        return None;
    }
    let span = 1 + shape
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d - 1) * s as usize)
        .sum::<usize>();
    let start = layout.start_offset();
    let src = &t.storage::<bf16>()[start..start + span];
    let mut wide = vec![0f32; span];
    wide.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(w, s)| s.convert_to_f32_slice(w));
    let layout = Layout::new(shape.clone(), strides.to_vec(), 0);
    Some(FlexTensor::new(Bytes::from_elems(wide), layout, DType::F32))
}

/// `lhs @ rhs` (`[..., m, k] x [..., k, n]`, batch dimensions broadcast as in Burn) for bf16
/// operands, in f32 with a bf16 result; other dtypes (and flipped views) go to flex's matmul.
pub fn matmul(lhs: FlexTensor, rhs: FlexTensor) -> FlexTensor {
    if lhs.dtype() != DType::BF16 || rhs.dtype() != DType::BF16 {
        return Flex::float_matmul(lhs, rhs);
    }
    let (Some(a), Some(b)) = (widen(&lhs), widen(&rhs)) else {
        return Flex::float_matmul(lhs, rhs);
    };
    drop((lhs, rhs));
    let product = Flex::float_matmul(a, b);
    let shape = product.layout().shape().clone();
    let wide = product.storage::<f32>();
    let mut out = vec![bf16::ZERO; wide.len()];
    out.par_chunks_mut(CHUNK)
        .zip(wide.par_chunks(CHUNK))
        .for_each(|(o, w)| o.convert_from_f32_slice(w));
    super::flex::tensor(out, shape)
}

#[cfg(test)]
mod tests {
    use super::{matmul, Flex};
    use burn::tensor::DType;
    use burn::tensor::{Tensor, TensorData};
    type T3 = Tensor<Flex, 3>;

    fn tensor(shape: [usize; 3], seed: usize) -> Tensor<Flex, 3> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| (((i + seed) * 7919) % 997) as f32 / 500.0 - 1.0)
            .collect();
        T3::from_data(TensorData::new(v, shape), &Default::default()).cast(DType::BF16)
    }

    #[test]
    fn transposed_and_narrowed_bf16_operands_give_flexs_product() {
        // lhs^T and a narrowed rhs: strided views, as a backward's products read them.
        let lhs = tensor([3, 40, 24], 1).swap_dims(1, 2); // [3, 24, 40]
        let rhs = tensor([3, 40, 50], 2).narrow(2, 5, 33); // [3, 40, 33]
        let ours = Tensor::<Flex, 3>::from_primitive(burn::tensor::TensorPrimitive::Float(matmul(
            lhs.clone().into_primitive().tensor(),
            rhs.clone().into_primitive().tensor(),
        )));
        assert_eq!(ours.dtype(), DType::BF16);
        assert_eq!(ours.dims(), [3, 24, 33]);
        let want = lhs.cast(DType::F32).matmul(rhs.cast(DType::F32));
        let (a, b) = (
            ours.cast(DType::F32).into_data().to_vec::<f32>().unwrap(),
            want.into_data().to_vec::<f32>().unwrap(),
        );
        for (x, y) in a.iter().zip(&b) {
            // The f32 product rounded once to bf16 (unit roundoff 2^-8).
            assert!(
                (x - y).abs() <= y.abs() * 2f32.powi(-8) + 1e-6,
                "{x} vs {y}"
            );
        }
    }
}
