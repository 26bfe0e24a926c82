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
/// operands: on a CPU with AMX or AVX512-BF16, products in bf16 with f32 sums
/// ([`super::bf16_gemm::kernel`]); elsewhere (and for broadcast batch dimensions) in f32 with a bf16
/// result. Other dtypes (and flipped views) go to flex's matmul.
pub fn matmul(lhs: FlexTensor, rhs: FlexTensor) -> FlexTensor {
    if lhs.dtype() != DType::BF16 || rhs.dtype() != DType::BF16 {
        return Flex::float_matmul(lhs, rhs);
    }
    if let Some(product) = native(&lhs, &rhs) {
        return product;
    }
    through_f32(lhs, rhs)
}

/// The portable path of [`matmul`]: both bf16 operands widened to f32 as they lie, flex's f32
/// product, rounded back to bf16.
pub fn through_f32(lhs: FlexTensor, rhs: FlexTensor) -> FlexTensor {
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

/// [`matmul`] by the process's bf16 product kernel ([`super::bf16_gemm::kernel`]): `None`
/// where the CPU runs none, a stride is negative, the ranks differ or a batch dimension is
/// broadcast (the portable path takes those).
fn native(lhs: &FlexTensor, rhs: &FlexTensor) -> Option<FlexTensor> {
    native_with(super::bf16_gemm::kernel()?, lhs, rhs)
}

/// [`native`] by `kernel`: `None` also where the CPU does not run it.
fn native_with(
    kernel: super::bf16_gemm::Kernel,
    lhs: &FlexTensor,
    rhs: &FlexTensor,
) -> Option<FlexTensor> {
    let (la, lb) = (lhs.layout(), rhs.layout());
    let (sa, sb) = (la.shape(), lb.shape());
    let rank = sa.num_dims();
    if rank < 2 || sb.num_dims() != rank || sa[rank - 1] != sb[rank - 2] {
        return None;
    }
    if (0..rank - 2).any(|d| sa[d] != sb[d])
        || la.strides().iter().chain(lb.strides()).any(|&s| s < 0)
    {
        return None;
    }
    let (m, k, n) = (sa[rank - 2], sa[rank - 1], sb[rank - 1]);
    let stride = |layout: &Layout, d: usize| layout.strides()[d] as usize;
    let batches: usize = (0..rank - 2).map(|d| sa[d]).product();
    let (da, db) = (lhs.storage::<bf16>(), rhs.storage::<bf16>());
    // Not zeroed: the product writes every element.
    let mut out = super::bf16_gemm::uninit::<bf16>(batches * m * n);
    for (batch, dst) in out.chunks_mut((m * n).max(1)).enumerate().take(batches) {
        // The batch index's offset in each operand, last batch dimension fastest.
        let (mut oa, mut ob, mut rest) = (la.start_offset(), lb.start_offset(), batch);
        for d in (0..rank - 2).rev() {
            let i = rest % sa[d];
            rest /= sa[d];
            oa += i * stride(la, d);
            ob += i * stride(lb, d);
        }
        let a = super::bf16_gemm::View {
            data: da,
            offset: oa,
            row: stride(la, rank - 2),
            col: stride(la, rank - 1),
        };
        let b = super::bf16_gemm::View {
            data: db,
            offset: ob,
            row: stride(lb, rank - 2),
            col: stride(lb, rank - 1),
        };
        if !super::bf16_gemm::gemm_with(kernel, m, k, n, a, b, dst) {
            return None;
        }
    }
    // SAFETY: each batch's product wrote its m·n elements.
    let out = unsafe { super::bf16_gemm::assume_init(out) };
    let mut dims: Vec<usize> = (0..rank - 2).map(|d| sa[d]).collect();
    dims.extend([m, n]);
    Some(super::flex::tensor(out, burn::tensor::Shape::from(dims)))
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

/// The bf16 products of one training step at the `cpu` profile's and the large bench shape's
/// sizes, timed through both paths in one process (a benchmark, not a test:
/// `memwall-job`'s test binary with `--ignored --nocapture bf16_products_benchmark`).
#[cfg(test)]
mod benchmark {
    use super::super::bf16_gemm::Kernel;
    use super::{native_with, through_f32};
    use burn::backend::Flex;
    use burn::tensor::{DType, Distribution, Tensor};
    use std::time::Instant;

    fn operand(shape: [usize; 2], transposed: bool) -> burn_flex::FlexTensor {
        let dims = if transposed {
            [shape[1], shape[0]]
        } else {
            shape
        };
        let t = Tensor::<Flex, 2>::random(dims, Distribution::Default, &Default::default())
            .cast(DType::BF16);
        let t = if transposed { t.transpose() } else { t };
        t.into_primitive().tensor()
    }

    fn time(f: impl Fn() -> burn_flex::FlexTensor) -> f64 {
        drop(f());
        let mut times: Vec<f64> = (0..15)
            .map(|_| {
                let t0 = Instant::now();
                drop(f());
                t0.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    }

    #[test]
    #[ignore = "a benchmark: run with --ignored --nocapture"]
    fn bf16_products_benchmark() {
        println!(
            "| product | m x k x n | through f32 (ms) | AVX512-BF16 dot products (ms) | AMX tiles \
             (ms) | dot products / f32 | AMX / dot products |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|");
        // (name, m, k, n, lhs transposed, rhs transposed): forward, dX = dY Wᵀ, dW = Xᵀ dY.
        for (rows, d, ff, vocab) in [(1024, 128, 512, 2048), (2048, 512, 2048, 2048)] {
            for (name, m, k, n, lt, rt) in [
                ("mlp_in forward", rows, d, ff, false, false),
                ("mlp_in dX", rows, ff, d, false, true),
                ("mlp_in dW", d, rows, ff, true, false),
                ("head forward", rows, d, vocab, false, true),
                ("head dW", vocab, rows, d, true, false),
            ] {
                let (a, b) = (operand([m, k], lt), operand([k, n], rt));
                let slow = time(|| through_f32(a.clone(), b.clone()));
                // A kernel the CPU does not run reads "–".
                let by = |kernel| {
                    native_with(kernel, &a, &b)
                        .is_some()
                        .then(|| time(|| native_with(kernel, &a, &b).unwrap()))
                };
                let (dot, amx) = (by(Kernel::DotProducts), by(Kernel::Amx));
                let ms = |t: Option<f64>| t.map_or("–".into(), |t| format!("{:.3}", t * 1e3));
                let ratio = |x: Option<f64>, y: Option<f64>| {
                    x.zip(y)
                        .map_or("–".into(), |(x, y)| format!("{:.2}x", x / y))
                };
                println!(
                    "| {name} | {m} x {k} x {n} | {:.3} | {} | {} | {} | {} |",
                    slow * 1e3,
                    ms(dot),
                    ms(amx),
                    ratio(Some(slow), dot),
                    ratio(dot, amx),
                );
            }
        }
    }
}
