//! The kernels on flex tensors: contiguous views in, contiguous tensors out, any float dtype
//! (f32 directly; bf16 and f16 through f32 chunks; f64 and others through Burn's own
//! operations).

use super::bf16_gemm::{assume_init, uninit};
use super::convert::{self, Half};
use super::{gelu, heads, CHUNK};
use burn::backend::Flex;
use burn::tensor::ops::ActivationOps;
use burn::tensor::{bf16, f16, Bytes, DType, Shape};
use burn_flex::{FlexTensor, Layout};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// `t` itself when it covers its buffer contiguously from offset 0, else a contiguous copy.
fn dense(t: FlexTensor) -> FlexTensor {
    let n = t.layout().num_elements();
    let whole = t.bytes().len() == n * t.dtype().size();
    if t.is_contiguous() && t.layout().start_offset() == 0 && whole {
        t
    } else {
        t.to_contiguous()
    }
}

pub(super) fn tensor<E: bytemuck::Pod + Send + Sync + burn::tensor::Element>(
    v: Vec<E>,
    shape: Shape,
) -> FlexTensor {
    FlexTensor::new(Bytes::from_elems(v), Layout::contiguous(shape), E::dtype())
}

/// Runs the f32 kernel `$op(x, y)` over a 16-bit slice chunk by chunk (in parallel): each
/// chunk is widened to f32 and the result rounded to nearest even.
macro_rules! half_map {
    ($ty:ty, $x:expr, $y:expr, $op:expr) => {{
        let (x, y): (&[$ty], &mut [$ty]) = ($x, $y);
        y.par_chunks_mut(CHUNK)
            .zip(x.par_chunks(CHUNK))
            .for_each(|(y, x)| {
                let mut a = vec![0f32; x.len()];
                let mut b = vec![0f32; x.len()];
                Half::widen(x, &mut a);
                $op(&a, &mut b);
                Half::narrow(&b, y);
            });
    }};
}

/// `gelu(x)` (exact, [`gelu`]) as a new contiguous tensor of `x`'s shape and dtype.
pub fn gelu_forward(x: FlexTensor) -> FlexTensor {
    let x = dense(x);
    let shape = x.layout().shape().clone();
    let n = shape.num_elements();
    match x.dtype() {
        DType::F32 => {
            let mut y = vec![0f32; n];
            gelu::forward(x.storage::<f32>(), &mut y);
            tensor(y, shape)
        }
        DType::BF16 => {
            let mut y = vec![bf16::ZERO; n];
            half_map!(bf16, x.storage::<bf16>(), &mut y, gelu::forward_sequential);
            tensor(y, shape)
        }
        DType::F16 => {
            let mut y = vec![f16::ZERO; n];
            half_map!(f16, x.storage::<f16>(), &mut y, gelu::forward_sequential);
            tensor(y, shape)
        }
        _ => <Flex as ActivationOps<Flex>>::gelu(x),
    }
}

/// The input's gradient `dy · gelu'(x)`, written over `dy` when nothing else holds it.
/// `x` and `dy` have the same shape and dtype (as Burn's `gelu_backward`).
pub fn gelu_backward(x: FlexTensor, dy: FlexTensor) -> FlexTensor {
    let x = dense(x);
    let mut dy = dense(dy);
    if x.dtype() != dy.dtype() {
        return <Flex as ActivationOps<Flex>>::gelu_backward(x, dy);
    }
    match x.dtype() {
        DType::F32 => {
            let g: &mut [f32] = dy.storage_mut();
            gelu::backward_in_place(x.storage::<f32>(), g);
            dy
        }
        DType::BF16 => {
            let xs = x.storage::<bf16>();
            let g: &mut [bf16] = dy.storage_mut();
            half_backward(xs, g);
            dy
        }
        _ => <Flex as ActivationOps<Flex>>::gelu_backward(x, dy),
    }
}

fn half_backward(x: &[bf16], g: &mut [bf16]) {
    g.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(g, x)| {
            let mut a = vec![0f32; x.len()];
            let mut b = vec![0f32; x.len()];
            Half::widen(x, &mut a);
            Half::widen(g, &mut b);
            gelu::backward_sequential(&a, &mut b);
            Half::narrow(&b, g);
        });
}

/// `x` `[batch, seq, heads · dh]` as a contiguous `[batch, heads, seq, dh]`.
pub fn split_heads(x: FlexTensor, heads: usize) -> FlexTensor {
    let x = dense(x);
    let [b, t, d] = x.layout().shape().dims::<3>();
    let dims = [b, t, heads, d / heads];
    let out = Shape::new([b, heads, t, d / heads]);
    match x.dtype() {
        DType::F32 => copy(&x, out, |s: &[f32], o| heads::split(s, o, dims)),
        DType::BF16 => copy(&x, out, |s: &[bf16], o| heads::split(s, o, dims)),
        DType::F16 => copy(&x, out, |s: &[f16], o| heads::split(s, o, dims)),
        DType::F64 => copy(&x, out, |s: &[f64], o| heads::split(s, o, dims)),
        other => panic!("split heads: float dtype {other:?}"),
    }
}

/// `x` `[batch, heads, seq, dh]` as a contiguous `[batch, seq, heads · dh]`.
pub fn merge_heads(x: FlexTensor) -> FlexTensor {
    let x = dense(x);
    let [b, h, t, dh] = x.layout().shape().dims::<4>();
    let dims = [b, t, h, dh];
    let out = Shape::new([b, t, h * dh]);
    match x.dtype() {
        DType::F32 => copy(&x, out, |s: &[f32], o| heads::merge(s, o, dims)),
        DType::BF16 => copy(&x, out, |s: &[bf16], o| heads::merge(s, o, dims)),
        DType::F16 => copy(&x, out, |s: &[f16], o| heads::merge(s, o, dims)),
        DType::F64 => copy(&x, out, |s: &[f64], o| heads::merge(s, o, dims)),
        other => panic!("merge heads: float dtype {other:?}"),
    }
}

/// `f(x's elements, out's)` into a new tensor of shape `out`, whose elements start
/// uninitialized: `f` must write every one (split and merge do).
fn copy<E>(x: &FlexTensor, out: Shape, f: impl Fn(&[E], &mut [MaybeUninit<E>])) -> FlexTensor
where
    E: bytemuck::Pod + Send + Sync + burn::tensor::Element,
{
    let mut v = uninit::<E>(out.num_elements());
    f(x.storage::<E>(), &mut v);
    // SAFETY: `f` wrote every element (split and merge write each of their `n` outputs).
    tensor(unsafe { assume_init(v) }, out)
}

/// `e^x` element by element ([`gelu::exp`]: f32 directly, bf16 and f16 through f32 chunks, f64
/// through flex), written over `x` when nothing else holds it.
pub fn exp(x: FlexTensor) -> FlexTensor {
    let mut x = dense(x);
    match x.dtype() {
        DType::F32 => {
            gelu::exp_in_place(x.storage_mut::<f32>());
            x
        }
        DType::BF16 => {
            let mut y = vec![bf16::ZERO; x.layout().num_elements()];
            half_map!(bf16, x.storage::<bf16>(), &mut y, exp_pair);
            tensor(y, x.layout().shape().clone())
        }
        _ => <Flex as burn::tensor::ops::FloatTensorOps<Flex>>::float_exp(x),
    }
}

fn exp_pair(x: &[f32], y: &mut [f32]) {
    y.copy_from_slice(x);
    gelu::exp_sequential(y);
}

/// `x` converted to `dtype`: f32 to and from bf16 and f16 in parallel chunks with half's slice
/// conversions (rounding to nearest even when narrowing), `x` itself when it is in `dtype`
/// already, flex's `float_cast` otherwise.
pub fn cast(x: FlexTensor, dtype: DType) -> FlexTensor {
    use burn::tensor::ops::FloatTensorOps;
    if x.dtype() == dtype {
        return x;
    }
    let x = dense(x);
    let shape = x.layout().shape().clone();
    match (x.dtype(), dtype) {
        (DType::F32, DType::BF16) => tensor(narrow_to_bf16(x.storage::<f32>()), shape),
        (DType::F32, DType::F16) => {
            let mut out = vec![f16::ZERO; shape.num_elements()];
            narrow_into(x.storage::<f32>(), &mut out);
            tensor(out, shape)
        }
        (DType::BF16, DType::F32) => tensor(widen_bf16(x.storage::<bf16>()), shape),
        (DType::F16, DType::F32) => tensor(widen_from(x.storage::<f16>()), shape),
        _ => Flex::float_cast(x, dtype.into()),
    }
}

fn narrow_into<H>(src: &[f32], out: &mut [H])
where
    H: Half,
{
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(o, s)| Half::narrow(s, o));
}

/// `src` rounded to bf16 (to nearest even), in parallel chunks.
fn narrow_to_bf16(src: &[f32]) -> Vec<bf16> {
    map_chunks(src, convert::narrow_bf16_into)
}

/// `src` widened to f32 (exact: a bf16 is the high half of an f32's bits), in parallel chunks.
fn widen_bf16(src: &[bf16]) -> Vec<f32> {
    map_chunks(src, convert::widen_bf16_into)
}

/// `convert` of `src`, in parallel chunks, into a buffer that is written once (not zeroed
/// first: the zero fill of the casts' outputs was 1% of a bf16 step). `convert` writes every
/// element of its destination chunk.
fn map_chunks<S: Sync, D: Send>(src: &[S], convert: fn(&[S], &mut [MaybeUninit<D>])) -> Vec<D> {
    let mut out = uninit::<D>(src.len());
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(o, s)| convert(s, o));
    // SAFETY: the chunks cover `out`, and `convert` wrote each element.
    unsafe { assume_init(out) }
}

fn widen_from<H>(src: &[H]) -> Vec<f32>
where
    H: Half,
{
    let mut out = vec![0f32; src.len()];
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(o, s)| Half::widen(s, o));
    out
}

/// Whether [`adamw_update`] runs these tensors: f32, bf16 or f16, every one of one dtype.
pub fn adamw_runs(
    p: &FlexTensor,
    g: &FlexTensor,
    moments: Option<(&FlexTensor, &FlexTensor)>,
) -> bool {
    let dtype = p.dtype();
    g.dtype() == dtype
        && moments.is_none_or(|(m, v)| m.dtype() == dtype && v.dtype() == dtype)
        && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
}

/// AdamW's update of one parameter tensor ([`crate::train::adamw`]) with memwall's kernel
/// ([`super::adamw`]): the new parameter, first and second moments, written over `p`, `m` and
/// `v` where nothing else holds them (else over copies). The caller checks [`adamw_runs`]
/// first (the composed update runs the rest); other dtypes panic.
pub fn adamw_update(
    p: FlexTensor,
    g: FlexTensor,
    moments: Option<(FlexTensor, FlexTensor)>,
    h: &super::adamw::AdamWStep,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let dtype = p.dtype();
    assert!(
        adamw_runs(&p, &g, moments.as_ref().map(|(m, v)| (m, v))),
        "adamw_update: dtypes {dtype:?} and {:?}",
        g.dtype()
    );
    let s = h.scalars(moments.is_none());
    let shape = p.layout().shape().clone();
    let mut p = dense(p);
    let g = dense(g);
    let (mut m, mut v) = match moments {
        Some((m, v)) => (dense(m), dense(v)),
        None => (
            FlexTensor::zeros(shape.clone(), dtype),
            FlexTensor::zeros(shape, dtype),
        ),
    };
    match dtype {
        DType::F32 => super::adamw::update(
            &s,
            p.storage_mut::<f32>(),
            g.storage::<f32>(),
            m.storage_mut::<f32>(),
            v.storage_mut::<f32>(),
        ),
        DType::BF16 => super::adamw::update_half(
            &s,
            p.storage_mut::<bf16>(),
            g.storage::<bf16>(),
            m.storage_mut::<bf16>(),
            v.storage_mut::<bf16>(),
        ),
        _ => super::adamw::update_half(
            &s,
            p.storage_mut::<f16>(),
            g.storage::<f16>(),
            m.storage_mut::<f16>(),
            v.storage_mut::<f16>(),
        ),
    }
    (p, m, v)
}

/// Whether [`attention_forward`] and [`attention_backward`] run these inputs: rank-4 tensors of
/// one shape and one dtype among f32, bf16 and f16.
pub fn attention_runs(tensors: &[&FlexTensor]) -> bool {
    let Some(first) = tensors.first() else {
        return false;
    };
    let shape = first.layout().shape();
    shape.num_dims() == 4
        && matches!(first.dtype(), DType::F32 | DType::BF16 | DType::F16)
        && tensors
            .iter()
            .all(|t| t.dtype() == first.dtype() && t.layout().shape() == shape)
}

fn attention_dims(q: &FlexTensor) -> super::attention::Dims {
    let [b, h, t, d] = q.layout().shape().dims::<4>();
    super::attention::Dims {
        heads: b * h,
        seq: t,
        d_head: d,
    }
}

/// Causal memory-efficient attention forward with memwall's kernel ([`super::attention`]):
/// `(out, lse)`, `out` `[batch, heads, seq, d_head]` in the inputs' dtype, `lse`
/// `[batch, heads, seq, 1]` f32. The caller checks [`attention_runs`] first; other inputs
/// panic.
pub fn attention_forward(
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    tiles: memwall_core::strategy::Tiles,
) -> (FlexTensor, FlexTensor) {
    assert!(
        attention_runs(&[&q, &k, &v]),
        "attention_forward: inputs {:?}",
        q.dtype()
    );
    let (q, k, v) = (dense(q), dense(k), dense(v));
    let shape = q.layout().shape().clone();
    let dims = attention_dims(&q);
    let [b, h, t, _] = shape.dims::<4>();
    let mut lse = vec![0f32; b * h * t];
    fn run<E>(
        q: &FlexTensor,
        k: &FlexTensor,
        v: &FlexTensor,
        lse: &mut [f32],
        dims: super::attention::Dims,
        tiles: memwall_core::strategy::Tiles,
    ) -> Vec<E>
    where
        E: super::attention::Element + bytemuck::Pod + burn::tensor::Element,
    {
        let mut out = vec![E::zeroed(); q.layout().num_elements()];
        super::attention::forward(
            q.storage::<E>(),
            k.storage::<E>(),
            v.storage::<E>(),
            &mut out,
            lse,
            dims,
            tiles,
        );
        out
    }
    let out = match q.dtype() {
        DType::F32 => tensor(run::<f32>(&q, &k, &v, &mut lse, dims, tiles), shape),
        DType::BF16 => tensor(run::<bf16>(&q, &k, &v, &mut lse, dims, tiles), shape),
        _ => tensor(run::<f16>(&q, &k, &v, &mut lse, dims, tiles), shape),
    };
    (out, tensor(lse, Shape::new([b, h, t, 1])))
}

/// The gradients `(dq, dk, dv)` of [`attention_forward`] given `grad_out`, in the inputs'
/// dtype (accumulated in f32, rounded once). `lse` is the forward's (`[batch, heads, seq, 1]`
/// f32). The caller checks [`attention_runs`] on the five rank-4 tensors first; other inputs
/// panic.
pub fn attention_backward(
    [q, k, v, out, grad_out]: [FlexTensor; 5],
    lse: FlexTensor,
    tiles: memwall_core::strategy::Tiles,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    assert!(
        attention_runs(&[&q, &k, &v, &out, &grad_out]) && lse.dtype() == DType::F32,
        "attention_backward: inputs {:?}, lse {:?}",
        q.dtype(),
        lse.dtype()
    );
    let [q, k, v, out, grad_out, lse] = [q, k, v, out, grad_out, lse].map(dense);
    let shape = q.layout().shape().clone();
    let dims = attention_dims(&q);
    fn run<E>(
        [q, k, v, out, grad_out]: [&FlexTensor; 5],
        lse: &[f32],
        dims: super::attention::Dims,
        tiles: memwall_core::strategy::Tiles,
    ) -> [Vec<E>; 3]
    where
        E: super::attention::Element + bytemuck::Pod + burn::tensor::Element,
    {
        let n = q.layout().num_elements();
        let [mut dq, mut dk, mut dv] = [(); 3].map(|_| vec![E::zeroed(); n]);
        super::attention::backward(
            q.storage::<E>(),
            k.storage::<E>(),
            v.storage::<E>(),
            out.storage::<E>(),
            lse,
            grad_out.storage::<E>(),
            (&mut dq, &mut dk, &mut dv),
            dims,
            tiles,
        );
        [dq, dk, dv]
    }
    let inputs = [&q, &k, &v, &out, &grad_out];
    let lse = lse.storage::<f32>();
    let [dq, dk, dv] = match q.dtype() {
        DType::F32 => run::<f32>(inputs, lse, dims, tiles).map(|g| tensor(g, shape.clone())),
        DType::BF16 => run::<bf16>(inputs, lse, dims, tiles).map(|g| tensor(g, shape.clone())),
        _ => run::<f16>(inputs, lse, dims, tiles).map(|g| tensor(g, shape.clone())),
    };
    (dq, dk, dv)
}
