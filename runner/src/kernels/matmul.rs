//! The model's matrix products on flex: f32 by the gemm crate straight into the product's
//! buffer, split once over the threads ([`matmul`]'s f32 path); bf16 by memwall's own kernel
//! ([`super::bf16_gemm`]) where the CPU has AVX512-BF16 or AMX, and elsewhere through f32 without
//! copying the operands' layouts:
//!
//! flex 0.21's `matmul_bf16` makes both operands contiguous (an element-by-element strided
//! copy for a transposed operand, as every backward product has), converts them to f32 on one
//! thread, multiplies and converts back (`burn-flex/src/ops/matmul.rs`). Here each operand's
//! storage span is widened to f32 in parallel as it lies in memory, so the f32 tensor keeps the
//! operand's strides and flex's f32 product (gemm, which reads any strides) multiplies the
//! views directly; the product is rounded back to bf16 (to nearest even) in parallel.

use super::convert::Half;
use super::CHUNK;
use burn::backend::Flex;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{bf16, Bytes, DType};
use burn_flex::{FlexTensor, Layout};
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
        .for_each(|(w, s)| Half::widen(s, w));
    let layout = Layout::new(shape.clone(), strides.to_vec(), 0);
    Some(FlexTensor::new(Bytes::from_elems(wide), layout, DType::F32))
}

/// `lhs @ rhs` (`[..., m, k] x [..., k, n]`, batch dimensions broadcast as in Burn). f32
/// operands: the gemm crate into an unzeroed buffer, one part per thread ([`f32_product`]).
/// bf16 operands: on a CPU with AMX or AVX512-BF16, products in bf16 with f32 sums
/// ([`super::bf16_gemm::kernel`]); elsewhere (and for broadcast batch dimensions) in f32 with a bf16
/// result. Other dtypes, broadcast f32 batches and flipped views go to flex's matmul.
pub fn matmul(lhs: FlexTensor, rhs: FlexTensor) -> FlexTensor {
    if lhs.dtype() == DType::F32 && rhs.dtype() == DType::F32 {
        return f32_product(&lhs, &rhs).unwrap_or_else(|| Flex::float_matmul(lhs, rhs));
    }
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
    let product = matmul(a, b);
    let shape = product.layout().shape().clone();
    let wide = product.storage::<f32>();
    let mut out = vec![bf16::ZERO; wide.len()];
    out.par_chunks_mut(CHUNK)
        .zip(wide.par_chunks(CHUNK))
        .for_each(|(o, w)| Half::narrow(w, o));
    super::flex::tensor(out, shape)
}

/// [`matmul`] by the process's bf16 product kernel ([`super::bf16_gemm::kernel`]): `None`
/// where the CPU runs none, a stride is negative, the ranks differ or a batch dimension is
/// broadcast (the portable path takes those).
fn native(lhs: &FlexTensor, rhs: &FlexTensor) -> Option<FlexTensor> {
    native_with(super::bf16_gemm::kernel()?, lhs, rhs)
}

/// `lhs @ rhs`'s sizes and, per batch, where each operand's matrix starts: the plan both
/// direct products below follow. `None` where the ranks differ, the rank is under 2, the inner
/// sizes differ, a batch dimension is broadcast or a stride is negative (those go to flex).
struct Batches {
    /// `(m, k, n)`: `[m, k] x [k, n]` per batch.
    mkn: (usize, usize, usize),
    /// `(row, col)` strides of `lhs` and of `rhs`, in elements.
    strides: [(usize, usize); 2],
    /// Per batch (last batch dimension fastest): the offsets of `lhs`'s and `rhs`'s matrices in
    /// their storage, in elements.
    offsets: Vec<(usize, usize)>,
    /// The product's shape: the batch dimensions, then `[m, n]`.
    shape: burn::tensor::Shape,
}

impl Batches {
    fn of(lhs: &FlexTensor, rhs: &FlexTensor) -> Option<Self> {
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
        let offsets = (0..batches)
            .map(|batch| {
                let (mut oa, mut ob, mut rest) = (la.start_offset(), lb.start_offset(), batch);
                for d in (0..rank - 2).rev() {
                    let i = rest % sa[d];
                    rest /= sa[d];
                    oa += i * stride(la, d);
                    ob += i * stride(lb, d);
                }
                (oa, ob)
            })
            .collect();
        let mut dims: Vec<usize> = (0..rank - 2).map(|d| sa[d]).collect();
        dims.extend([m, n]);
        Some(Self {
            mkn: (m, k, n),
            strides: [
                (stride(la, rank - 2), stride(la, rank - 1)),
                (stride(lb, rank - 2), stride(lb, rank - 1)),
            ],
            offsets,
            shape: burn::tensor::Shape::from(dims),
        })
    }
}

/// [`native`] by `kernel`: `None` also where the CPU does not run it.
fn native_with(
    kernel: super::bf16_gemm::Kernel,
    lhs: &FlexTensor,
    rhs: &FlexTensor,
) -> Option<FlexTensor> {
    let plan = Batches::of(lhs, rhs)?;
    let (m, k, n) = plan.mkn;
    let [(ar, ac), (br, bc)] = plan.strides;
    let (da, db) = (lhs.storage::<bf16>(), rhs.storage::<bf16>());
    // Not zeroed: the product writes every element.
    let mut out = super::bf16_gemm::uninit::<bf16>(plan.offsets.len() * m * n);
    for (dst, &(oa, ob)) in out.chunks_mut((m * n).max(1)).zip(&plan.offsets) {
        let a = super::bf16_gemm::View {
            data: da,
            offset: oa,
            row: ar,
            col: ac,
        };
        let b = super::bf16_gemm::View {
            data: db,
            offset: ob,
            row: br,
            col: bc,
        };
        if !super::bf16_gemm::gemm_with(kernel, m, k, n, a, b, dst) {
            return None;
        }
    }
    // SAFETY: each batch's product wrote its m·n elements.
    let out = unsafe { super::bf16_gemm::assume_init(out) };
    Some(super::flex::tensor(out, plan.shape))
}

/// Products of at least this many multiply-adds (`m·k·n`) split over the thread pool; smaller
/// ones run on the calling thread. flex's own threshold (`burn-flex/src/ops/matmul.rs`).
const PARALLEL_MACS: usize = 192 * 192 * 192;

/// The product's buffer, shared by the parts of one product, each writing its own range.
struct Shared(*mut f32);
// SAFETY: the parts of `f32_product` write disjoint ranges of it.
unsafe impl Sync for Shared {}

/// `lhs @ rhs` for f32 operands by the gemm crate (the kernel flex's f32 matmul runs), straight
/// into the product's buffer: flex's `FlexTensor::empty` zero-fills the output as a byte
/// vector and then copies it once more into a 16-byte aligned one (`Bytes::from_bytes_vec`),
/// two passes over every product that gemm overwrites anyway. And gemm's own threads
/// (`Parallelism::Rayon`) meet once per packed block; here a product of at least
/// [`PARALLEL_MACS`] is split once, by rows or columns, into one gemm per thread. At the `cpu`
/// profile's shape (f32 control, two threads, 2-core AMD EPYC) the step ran 84.3 samples/s
/// against 75.4 through flex (12 alternating runs each; 82.5 without the split).
/// `None` where [`Batches::of`] is.
fn f32_product(lhs: &FlexTensor, rhs: &FlexTensor) -> Option<FlexTensor> {
    let plan = Batches::of(lhs, rhs)?;
    let (m, k, n) = plan.mkn;
    let [(ar, ac), (br, bc)] = plan.strides;
    let (da, db) = (lhs.storage::<f32>(), rhs.storage::<f32>());
    // The last element each operand's views read, checked once here: gemm reads raw pointers.
    let last = |offset: usize, (rows, cols): (usize, usize), (r, c): (usize, usize)| {
        offset + rows.saturating_sub(1) * r + cols.saturating_sub(1) * c
    };
    for &(oa, ob) in &plan.offsets {
        assert!(
            (m == 0 || k == 0 || last(oa, (m, k), (ar, ac)) < da.len())
                && (k == 0 || n == 0 || last(ob, (k, n), (br, bc)) < db.len()),
            "a matmul operand's view reads past its buffer"
        );
    }
    let threads = if m * k * n >= PARALLEL_MACS {
        rayon::current_num_threads()
    } else {
        1
    };
    // One part per thread, split once along the longer of the product's sides: each part is a
    // whole product on one thread, so the pool meets once per product, not once per packed
    // block as gemm's own threads do. The same parts for every batch.
    let (split_rows, side) = if m >= n { (true, m) } else { (false, n) };
    let part = side.div_ceil(threads).next_multiple_of(16).max(16);
    let parts: Vec<(usize, usize)> = (0..side)
        .step_by(part)
        .map(|p0| (p0, part.min(side - p0)))
        .collect();
    // Not zeroed: gemm writes every element (`read_dst` false, so the destination's old values
    // are never read; with k = 0 it writes zeros).
    let mut out = super::bf16_gemm::uninit::<f32>(plan.offsets.len() * m * n);
    for (dst, &(oa, ob)) in out.chunks_mut((m * n).max(1)).zip(&plan.offsets) {
        let dst = Shared(dst.as_mut_ptr() as *mut f32);
        let run = |&(p0, len): &(usize, usize)| {
            let dst = &dst;
            // Where the part starts in the product and in the operand it splits.
            let (pm, pn, d, a, b) = if split_rows {
                (len, n, p0 * n, oa + p0 * ar, ob)
            } else {
                (m, len, p0, oa, ob + p0 * bc)
            };
            // SAFETY: the views lie inside their storage (checked above); the part's rows (or
            // columns) of `dst` are its own, m·n elements in all with row stride n, and `dst`
            // overlaps neither operand (a fresh buffer).
            unsafe {
                gemm::gemm(
                    pm,
                    pn,
                    k,
                    dst.0.add(d),
                    1,
                    n as isize,
                    false,
                    da.as_ptr().add(a),
                    ac as isize,
                    ar as isize,
                    db.as_ptr().add(b),
                    bc as isize,
                    br as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        };
        if parts.len() > 1 {
            parts.par_iter().for_each(run);
        } else {
            parts.iter().for_each(run);
        }
    }
    // SAFETY: each batch's product wrote its m·n elements.
    let out = unsafe { super::bf16_gemm::assume_init(out) };
    Some(super::flex::tensor(out, plan.shape))
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

    #[test]
    fn f32_products_equal_flexs_split_or_not_strided_or_batched() {
        let f32_tensor = |shape: [usize; 3], seed: usize| tensor(shape, seed).cast(DType::F32);
        let ours = |a: &T3, b: &T3| {
            T3::from_primitive(burn::tensor::TensorPrimitive::Float(matmul(
                a.clone().into_primitive().tensor(),
                b.clone().into_primitive().tensor(),
            )))
        };
        // (lhs, rhs): one product under the split threshold, one split by rows (m >= n) with a
        // transposed lhs, one split by columns (n > m) with a narrowed rhs, three batches.
        let cases = [
            (f32_tensor([1, 24, 40], 1), f32_tensor([1, 40, 33], 2)),
            (
                f32_tensor([1, 384, 1000], 3).swap_dims(1, 2),
                f32_tensor([1, 384, 200], 4),
            ),
            (
                f32_tensor([3, 130, 96], 5),
                f32_tensor([3, 96, 1100], 6).narrow(2, 7, 1031),
            ),
        ];
        for (a, b) in &cases {
            let (m, k, n) = (a.dims()[1], a.dims()[2], b.dims()[2]);
            let got = ours(a, b);
            assert_eq!(got.dtype(), DType::F32);
            assert_eq!(got.dims(), [a.dims()[0], m, n]);
            let want = a.clone().matmul(b.clone());
            let (x, y) = (
                got.into_data().to_vec::<f32>().unwrap(),
                want.into_data().to_vec::<f32>().unwrap(),
            );
            let scale = y.iter().fold(1f32, |s, v| s.max(v.abs()));
            for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                // Sums of k products in another order: within k·2^-24 of the largest entry.
                assert!(
                    (x - y).abs() <= k as f32 * 2f32.powi(-24) * scale,
                    "{m}x{k}x{n}, element {i}: {x} vs {y}"
                );
            }
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
