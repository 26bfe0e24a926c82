//! Causal self-attention as an op-level rematerialization: the memory-efficient (tiled,
//! online-softmax) attention of FlashAttention-2 as a custom Burn autodiff operation.
//!
//! Burn 0.21's `attention` under autodiff is the naive composition (`attention_fallback`), which
//! keeps the `[batch, heads, seq, seq]` scores and probabilities of every layer for backward
//! (`4 * batch * heads * seq^2` bytes per tensor in f32). This operation instead computes
//! `softmax(Q K^T / sqrt(d)) V` with the causal mask tile by tile:
//!
//! - **forward** (Dao 2023, "FlashAttention-2", Algorithm 1): for each query tile, the key tiles
//!   at or below the diagonal are visited in order with the online softmax (running row maximum
//!   `m`, running normalizer `l`, rescaled accumulator), and only the output `O` and the per-row
//!   log-sum-exp `L = m + ln l` are produced;
//! - **backward** (Algorithm 2): with `D = rowsum(dO ∘ O)`, each score tile is recomputed from
//!   `Q` and `K`, `P = exp(S - L)`, and `dV += P^T dO`, `dS = P ∘ (dO V^T - D)`,
//!   `dQ += dS K / sqrt(d)`, `dK += dS^T Q / sqrt(d)` are accumulated tile by tile.
//!
//! What the autodiff graph keeps per layer is `Q`, `K`, `V`, `O` (the operation's inputs and
//! output, `[batch, heads, seq, d_head]` each) and `L` (`[batch, heads, seq, 1]`, f32): no
//! `seq x seq` tensor outlives one tile. The score tiles are recomputed in backward: an extra
//! `Q K^T` per tile, the op-level rematerialization trade.
//!
//! The reference form ([`composed_forward`], [`composed_backward`]) is written with Burn tensor
//! operations, so it is generic over the backend and the float dtype: matrix products run in the
//! tensors' dtype (f32, f16 or bf16; see [`AttentionBackend::attention_dtype`]), the softmax
//! statistics (`m`, `l`, `L`, `D`), the probabilities and the accumulators in f32, as
//! FlashAttention does. It is not a fused kernel: each tile is a handful of kernels, so its
//! speed depends on the tile sizes ([`Tiles`]) and, on CUDA, on Burn's fusion backend. On flex
//! both directions are one kernel each ([`crate::kernels::attention`], the same algorithm and
//! tiles in f32, one task per `(batch, head)`), tested against the reference; on `CubeBackend`
//! (CUDA without Burn's fusion) one kernel forward and two backward
//! ([`crate::kernels::cube::attention`]), tested against it on wgpu.

use super::cast::{CastBackend, ToDtype};
use super::exp::{exp, ExpBackend};
use super::linear::{matmul as mm, MatmulBackend};
use super::{float, primitive};
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Int, Tensor};
pub use memwall_core::strategy::{Attention, Tiles};

/// Backends that run the memory-efficient attention. Inner (non-autodiff) backends use the
/// provided tiled forward; [`Autodiff`] registers the operation with its own backward.
pub trait AttentionBackend: MatmulBackend + ExpBackend + CastBackend {
    /// Causal `softmax(Q K^T / sqrt(d_head)) V` computed tile by tile.
    ///
    /// Shapes: `q`, `k`, `v` are `[batch, heads, seq, d_head]` of one float dtype; the result has
    /// the same shape and dtype. Panics (as Burn's tensor operations do) on mismatched shapes.
    fn memory_efficient_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        tiles: Tiles,
    ) -> FloatTensor<Self> {
        let (out, _) = flash_forward::<Self>(float(q), float(k), float(v), tiles);
        primitive(out)
    }

    /// The dtype the tiles' products and elementwise work run in for inputs of `dtype`: the
    /// inputs' own by default (a GPU's bf16 products, as FlashAttention's kernels).
    fn attention_dtype(dtype: DType) -> DType {
        dtype
    }

    /// The forward of [`flash_forward`]: `(out, lse)`. Provided: the composition of Burn
    /// operations ([`composed_forward`], the reference); flex overrides it with memwall's
    /// kernel.
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        composed_forward_primitive::<Self>(q, k, v, tiles)
    }

    /// The backward of [`flash_backward`]: `(dq, dk, dv)`. Provided: [`composed_backward`];
    /// flex overrides it with memwall's kernel.
    fn attention_backward(
        [q, k, v, out, grad_out]: [FloatTensor<Self>; 5],
        lse: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        composed_backward_primitive::<Self>([q, k, v, out, grad_out], lse, tiles)
    }
}

/// On flex the tiles of 16-bit inputs work in f32: flex runs bf16 and f16 elementwise
/// operations one element at a time through f32 and converts both operands of every product,
/// so one conversion of `Q`, `K`, `V` (and `O`, `dO` in backward) per call is cheaper. The
/// operation's inputs, outputs and what it keeps stay in the inputs' dtype; the f32 copies live
/// only during the call (5 `[batch, heads, seq, d_head]` f32 tensors at most, in backward).
///
/// Both directions run memwall's CPU kernel ([`crate::kernels::attention`]: one task per
/// `(batch, head)`, FlashAttention-2's algorithms in f32 with the same tiles) for f32, bf16 and
/// f16 inputs of one shape; the composed form for anything else.
impl AttentionBackend for burn::backend::Flex {
    fn attention_dtype(dtype: DType) -> DType {
        match dtype {
            DType::BF16 | DType::F16 => DType::F32,
            other => other,
        }
    }

    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use crate::kernels::flex;
        if flex::attention_runs(&[&q, &k, &v]) {
            return flex::attention_forward(q, k, v, tiles);
        }
        composed_forward_primitive::<Self>(q, k, v, tiles)
    }

    fn attention_backward(
        [q, k, v, out, grad_out]: [FloatTensor<Self>; 5],
        lse: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use crate::kernels::flex;
        if flex::attention_runs(&[&q, &k, &v, &out, &grad_out]) && lse.dtype() == DType::F32 {
            return flex::attention_backward([q, k, v, out, grad_out], lse, tiles);
        }
        composed_backward_primitive::<Self>([q, k, v, out, grad_out], lse, tiles)
    }
}
#[cfg(feature = "ndarray")]
impl AttentionBackend for burn::backend::NdArray {}
#[cfg(feature = "cuda")]
/// Burn's fusion backend (CUDA's `fusion = true` rows): both directions are custom operations
/// ([`super::custom_op`]) that run the inner backend's, on `CubeBackend` memwall's kernels
/// (`lse` `[batch, heads, seq, 1]` in f32, as they return it).
impl<B: burn_fusion::FusionBackend + AttentionBackend> AttentionBackend for burn_fusion::Fusion<B> {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use super::custom_op::{inputs, outputs, register};
        use burn::tensor::{Shape, TensorMetadata};
        const NAME: &str = "memwall_attention_forward";
        if !crate::kernels::cube::Selection::current().attention {
            return composed_forward_primitive::<Self>(q, k, v, tiles);
        }
        let [b, h, t, _] = q.shape().dims::<4>();
        let out = vec![
            (q.shape(), q.dtype()),
            (Shape::new([b, h, t, 1]), DType::F32),
        ];
        let [o, lse] = outputs::<B, 2>(
            NAME,
            register::<B>(NAME, vec![q, k, v], out, move |x| {
                let [q, k, v] = inputs::<B, 3>(NAME, x);
                let (o, lse) = B::attention_forward(q, k, v, tiles);
                vec![o, lse]
            }),
        );
        (o, lse)
    }

    fn attention_backward(
        [q, k, v, out, grad_out]: [FloatTensor<Self>; 5],
        lse: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use super::custom_op::{inputs, outputs, register};
        use burn::tensor::TensorMetadata;
        const NAME: &str = "memwall_attention_backward";
        if !crate::kernels::cube::Selection::current().attention {
            return composed_backward_primitive::<Self>([q, k, v, out, grad_out], lse, tiles);
        }
        let shapes = vec![
            (q.shape(), q.dtype()),
            (k.shape(), k.dtype()),
            (v.shape(), v.dtype()),
        ];
        let [dq, dk, dv] = outputs::<B, 3>(
            NAME,
            register::<B>(NAME, vec![q, k, v, out, grad_out, lse], shapes, move |x| {
                let [q, k, v, out, grad_out, lse] = inputs::<B, 6>(NAME, x);
                let (dq, dk, dv) = B::attention_backward([q, k, v, out, grad_out], lse, tiles);
                vec![dq, dk, dv]
            }),
        );
        (dq, dk, dv)
    }
}
/// On CubeCL without Burn's fusion (CUDA's eager rows; wgpu in the tests), both directions are
/// memwall's kernels ([`crate::kernels::cube::attention`]: the same algorithms with f32
/// statistics and products, one kernel forward and two backward); `tiles` shapes only the
/// composed form, the kernels pick their rows per cube from the device's shared memory.
#[cfg(feature = "cuda")]
impl<R, F, I, BT> AttentionBackend for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::BoolElement,
{
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if !crate::kernels::cube::Selection::current().attention {
            return composed_forward_primitive::<Self>(q, k, v, tiles);
        }
        crate::kernels::cube::attention::forward(q, k, v)
    }

    fn attention_backward(
        inputs: [FloatTensor<Self>; 5],
        lse: FloatTensor<Self>,
        tiles: Tiles,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        if !crate::kernels::cube::Selection::current().attention {
            return composed_backward_primitive::<Self>(inputs, lse, tiles);
        }
        crate::kernels::cube::attention::backward(inputs, lse)
    }
}

/// [`composed_forward`] on primitives.
fn composed_forward_primitive<B: AttentionBackend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    tiles: Tiles,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (out, lse) = composed_forward::<B>(float(q), float(k), float(v), tiles);
    (primitive(out), primitive(lse))
}

/// [`composed_backward`] on primitives.
fn composed_backward_primitive<B: AttentionBackend>(
    [q, k, v, out, grad_out]: [FloatTensor<B>; 5],
    lse: FloatTensor<B>,
    tiles: Tiles,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let [q, k, v, out, grad_out] = [q, k, v, out, grad_out].map(float);
    let (dq, dk, dv) = composed_backward::<B>(q, k, v, out, float(lse), grad_out, tiles);
    (primitive(dq), primitive(dk), primitive(dv))
}

/// The backward step of the operation; its state is what the graph keeps.
#[derive(Debug)]
struct FlashBackward;

/// `(q, k, v, out, lse, tiles)`: the inputs, the output and the per-row log-sum-exp.
type FlashState<B> = (
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    Tiles,
);

impl<B: AttentionBackend> Backward<B, 3> for FlashBackward {
    type State = FlashState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (q, k, v, out, lse, tiles) = ops.state;
        let grad_out = float::<B, 4>(grads.consume::<B>(&ops.node));
        let (dq, dk, dv) = flash_backward::<B>(
            float(q),
            float(k),
            float(v),
            float(out),
            float(lse),
            grad_out,
            tiles,
        );
        let [pq, pk, pv] = ops.parents;
        for (parent, grad) in [(pq, dq), (pk, dk), (pv, dv)] {
            if let Some(node) = parent {
                grads.register::<B>(node.id, primitive(grad));
            }
        }
    }
}

impl<B: AttentionBackend, C: CheckpointStrategy> AttentionBackend for Autodiff<B, C> {
    fn memory_efficient_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        tiles: Tiles,
    ) -> FloatTensor<Self> {
        let nodes = [q.node.clone(), k.node.clone(), v.node.clone()];
        match FlashBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, lse) = flash_forward::<B>(
                    float(q.primitive.clone()),
                    float(k.primitive.clone()),
                    float(v.primitive.clone()),
                    tiles,
                );
                let out = primitive(out);
                let state = (
                    q.primitive,
                    k.primitive,
                    v.primitive,
                    out.clone(),
                    primitive(lse),
                    tiles,
                );
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::memory_efficient_attention(
                q.primitive,
                k.primitive,
                v.primitive,
                tiles,
            )),
        }
    }
}

/// Memory-efficient causal attention on Burn tensors (see [`AttentionBackend`]).
pub fn memory_efficient_attention<B: AttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    tiles: Tiles,
) -> Tensor<B, 4> {
    float(B::memory_efficient_attention(
        primitive(q),
        primitive(k),
        primitive(v),
        tiles,
    ))
}

/// Starts of the tiles of `size` over `0..len`, with their lengths.
fn tiles_of(len: usize, size: usize) -> impl Iterator<Item = (usize, usize)> {
    let size = size.max(1);
    (0..len).step_by(size).map(move |s| (s, size.min(len - s)))
}

/// The causal mask of the tile `rows r0..r0+nr` x `cols c0..c0+nc` as an additive f32 bias,
/// `[nr, nc]`: `-inf` where the key comes after the query, `0` elsewhere; `None` when the
/// whole tile is at or below the diagonal.
///
/// Adding it gives the same scores as filling the masked entries with `-inf` (`x + 0 = x`,
/// `x + -inf = -inf` for finite `x`), but it stays `nr x nc` and broadcasts over batch and heads:
/// a `[batch, heads, nr, nc]` boolean mask made the CPU backend copy the expanded mask element by
/// element on every tile (a third of a CPU step; issue 28).
fn causal_bias<B: Backend>(
    (r0, nr): (usize, usize),
    (c0, nc): (usize, usize),
    device: &B::Device,
) -> Option<Tensor<B, 2>> {
    if c0 + nc <= r0 + 1 {
        return None;
    }
    let rows = Tensor::<B, 1, Int>::arange(r0 as i64..(r0 + nr) as i64, device)
        .reshape([nr, 1])
        .expand([nr, nc]);
    let cols = Tensor::<B, 1, Int>::arange(c0 as i64..(c0 + nc) as i64, device)
        .reshape([1, nc])
        .expand([nr, nc]);
    let masked = cols.greater(rows);
    Some(Tensor::<B, 2>::zeros([nr, nc], (device, DType::F32)).mask_fill(masked, f32::NEG_INFINITY))
}

/// Scaled, causally masked f32 scores of one tile: `Q_i K_j^T / sqrt(d)`, `[b, h, nr, nc]`.
fn scores<B: MatmulBackend + CastBackend>(
    qi: Tensor<B, 4>,
    kj: Tensor<B, 4>,
    rows: (usize, usize),
    cols: (usize, usize),
    scale: f64,
) -> Tensor<B, 4> {
    let device = qi.device();
    let s = mm(qi, kj.swap_dims(2, 3))
        .to_dtype(DType::F32)
        .mul_scalar(scale);
    match causal_bias::<B>(rows, cols, &device) {
        // Flattened so that one `[nr * nc]` row of bias is shared by every (batch, head): the
        // broadcast the CPU backend adds in place with SIMD, where `[1, 1, nr, nc]` against
        // `[b, h, nr, nc]` took its element-by-element strided path.
        Some(bias) => {
            let [b, h, nr, nc] = s.dims();
            (s.reshape([b * h, nr * nc]) + bias.reshape([1, nr * nc])).reshape([b, h, nr, nc])
        }
        None => s,
    }
}

/// FlashAttention-2 forward (Dao 2023, Algorithm 1) with the causal mask, as the backend runs
/// it ([`AttentionBackend::attention_forward`]).
///
/// Shapes: `q`, `k`, `v` `[batch, heads, seq, d_head]`. Returns the output (same shape and dtype
/// as `q`) and the per-row log-sum-exp of the scaled scores, `[batch, heads, seq, 1]` in f32.
pub fn flash_forward<B: AttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    tiles: Tiles,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let (out, lse) = B::attention_forward(primitive(q), primitive(k), primitive(v), tiles);
    (float(out), float(lse))
}

/// FlashAttention-2 backward (Dao 2023, Algorithm 2) with the causal mask, as the backend runs
/// it ([`AttentionBackend::attention_backward`]); shapes as [`composed_backward`].
pub fn flash_backward<B: AttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    out: Tensor<B, 4>,
    lse: Tensor<B, 4>,
    grad_out: Tensor<B, 4>,
    tiles: Tiles,
) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
    let (dq, dk, dv) = B::attention_backward(
        [q, k, v, out, grad_out].map(primitive),
        primitive(lse),
        tiles,
    );
    (float(dq), float(dk), float(dv))
}

/// FlashAttention-2 forward (Dao 2023, Algorithm 1) with the causal mask, composed of Burn
/// tensor operations tile by tile: the reference every backend's kernel is tested against.
///
/// Shapes: `q`, `k`, `v` `[batch, heads, seq, d_head]`. Returns the output (same shape and dtype
/// as `q`) and the per-row log-sum-exp of the scaled scores, `[batch, heads, seq, 1]` in f32.
pub fn composed_forward<B: AttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    tiles: Tiles,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let [_, _, t, dh] = q.dims();
    let out_dtype = q.dtype();
    let dtype = B::attention_dtype(out_dtype);
    let (q, k, v) = (q.to_dtype(dtype), k.to_dtype(dtype), v.to_dtype(dtype));
    let scale = 1.0 / (dh as f64).sqrt();
    let mut outs = Vec::new();
    let mut lses = Vec::new();
    for rows @ (r0, nr) in tiles_of(t, tiles.query) {
        let qi = q.clone().narrow(2, r0, nr);
        // Running maximum m, normalizer l and unnormalized output acc, all f32.
        let mut state: Option<(Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>)> = None;
        // Key tiles past the last row of this query tile are fully masked: skip them.
        for cols @ (c0, nc) in tiles_of(r0 + nr, tiles.key) {
            let s = scores(qi.clone(), k.clone().narrow(2, c0, nc), rows, cols, scale);
            let vj = v.clone().narrow(2, c0, nc);
            let tile_max = s.clone().max_dim(3);
            let m_new = match &state {
                Some((m, _, _)) => m.clone().max_pair(tile_max),
                None => tile_max,
            };
            let p = exp(s - m_new.clone());
            let p_sum = p.clone().sum_dim(3);
            let pv = mm(p.to_dtype(dtype), vj).to_dtype(DType::F32);
            state = Some(match state {
                Some((m, l, acc)) => {
                    let alpha = exp(m - m_new.clone());
                    (m_new, alpha.clone() * l + p_sum, alpha * acc + pv)
                }
                None => (m_new, p_sum, pv),
            });
        }
        let (m, l, acc) = state.expect("every query row sees at least its own key");
        outs.push((acc / l.clone()).to_dtype(out_dtype));
        lses.push(m + l.log());
    }
    (Tensor::cat(outs, 2), Tensor::cat(lses, 2))
}

/// FlashAttention-2 backward (Dao 2023, Algorithm 2) with the causal mask, composed of Burn
/// tensor operations tile by tile (the reference).
///
/// Shapes: `q`, `k`, `v`, `out`, `grad_out` `[batch, heads, seq, d_head]`, `lse`
/// `[batch, heads, seq, 1]` (f32, from [`flash_forward`]). Returns `(dq, dk, dv)` in the dtype of
/// `q`, accumulated in f32.
pub fn composed_backward<B: AttentionBackend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    out: Tensor<B, 4>,
    lse: Tensor<B, 4>,
    grad_out: Tensor<B, 4>,
    tiles: Tiles,
) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
    let [_, _, t, dh] = q.dims();
    let out_dtype = q.dtype();
    let dtype = B::attention_dtype(out_dtype);
    let (q, k, v, out) = (
        q.to_dtype(dtype),
        k.to_dtype(dtype),
        v.to_dtype(dtype),
        out.to_dtype(dtype),
    );
    let scale = 1.0 / (dh as f64).sqrt();
    let grad_out = grad_out.to_dtype(dtype);
    // D = rowsum(dO ∘ O), f32.
    let d = (grad_out.clone().to_dtype(DType::F32) * out.to_dtype(DType::F32)).sum_dim(3);
    let row_tiles: Vec<(usize, usize)> = tiles_of(t, tiles.query).collect();
    let mut dq: Vec<Option<Tensor<B, 4>>> = vec![None; row_tiles.len()];
    let mut dks = Vec::new();
    let mut dvs = Vec::new();
    for cols @ (c0, nc) in tiles_of(t, tiles.key) {
        let kj = k.clone().narrow(2, c0, nc);
        let vj = v.clone().narrow(2, c0, nc);
        let mut dk_j: Option<Tensor<B, 4>> = None;
        let mut dv_j: Option<Tensor<B, 4>> = None;
        // Only query tiles with a row at or after c0 see these keys.
        for (i, &rows @ (r0, nr)) in row_tiles.iter().enumerate() {
            if r0 + nr <= c0 {
                continue;
            }
            let qi = q.clone().narrow(2, r0, nr);
            let doi = grad_out.clone().narrow(2, r0, nr);
            let s = scores(qi.clone(), kj.clone(), rows, cols, scale);
            let p = exp(s - lse.clone().narrow(2, r0, nr));
            let dv_part = mm(p.clone().to_dtype(dtype).swap_dims(2, 3), doi.clone());
            let dp = mm(doi, vj.clone().swap_dims(2, 3)).to_dtype(DType::F32);
            let ds = (p * (dp - d.clone().narrow(2, r0, nr))).to_dtype(dtype);
            let dq_part = mm(ds.clone(), kj.clone()).to_dtype(DType::F32);
            let dk_part = mm(ds.swap_dims(2, 3), qi).to_dtype(DType::F32);
            dq[i] = Some(add_opt(dq[i].take(), dq_part));
            dk_j = Some(add_opt(dk_j, dk_part));
            dv_j = Some(add_opt(dv_j, dv_part.to_dtype(DType::F32)));
        }
        let zeros = || Tensor::<B, 4>::zeros(kj.shape(), (&kj.device(), DType::F32));
        dks.push(
            dk_j.unwrap_or_else(zeros)
                .mul_scalar(scale)
                .to_dtype(out_dtype),
        );
        dvs.push(dv_j.unwrap_or_else(zeros).to_dtype(out_dtype));
    }
    let dq: Vec<Tensor<B, 4>> = dq
        .into_iter()
        .map(|g| {
            g.expect("every query tile sees the key tile of its first row")
                .mul_scalar(scale)
                .to_dtype(out_dtype)
        })
        .collect();
    (Tensor::cat(dq, 2), Tensor::cat(dks, 2), Tensor::cat(dvs, 2))
}

fn add_opt<B: Backend>(acc: Option<Tensor<B, 4>>, x: Tensor<B, 4>) -> Tensor<B, 4> {
    match acc {
        Some(a) => a + x,
        None => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::module::attention;
    use burn::tensor::ops::AttentionModuleOptions;
    use burn::tensor::{Distribution, TensorData};

    type Ad = Autodiff<Flex>;

    fn naive<B: Backend>(q: Tensor<B, 4>, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Tensor<B, 4> {
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal: true,
        };
        attention(q, k, v, None, None, options)
    }

    /// Deterministic pseudo-random values in [-2, 2) ([`crate::kernels::test_values`]).
    fn random(shape: [usize; 4], seed: u64) -> Tensor<Ad, 4> {
        let values = crate::kernels::test_values(shape.iter().product(), seed, -2.0, 4.0);
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    fn values<B: Backend>(t: Tensor<B, 4>) -> Vec<f32> {
        t.cast(DType::F32).into_data().to_vec::<f32>().unwrap()
    }

    /// max |a - b| / max |b|.
    fn rel_err(a: &[f32], b: &[f32]) -> f32 {
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        diff / scale
    }

    /// Output and the gradients of `sum(out * w)` w.r.t. q, k, v, for one attention.
    fn run([q, k, v, w]: [Tensor<Ad, 4>; 4], dtype: DType, tiles: Option<Tiles>) -> [Vec<f32>; 4] {
        let leaf = |t: Tensor<Ad, 4>| t.cast(dtype).detach().require_grad();
        let (q, k, v) = (leaf(q), leaf(k), leaf(v));
        let out = match tiles {
            Some(tiles) => memory_efficient_attention(q.clone(), k.clone(), v.clone(), tiles),
            None => naive(q.clone(), k.clone(), v.clone()),
        };
        let grads = (out.clone().cast(DType::F32) * w).sum().backward();
        let g = |t: &Tensor<Ad, 4>| values(t.grad(&grads).expect("gradient"));
        [values(out.inner()), g(&q), g(&k), g(&v)]
    }

    fn inputs(shape: [usize; 4]) -> [Tensor<Ad, 4>; 4] {
        [
            random(shape, 1),
            random(shape, 2),
            random(shape, 3),
            random(shape, 4),
        ]
    }

    #[test]
    fn f32_output_and_gradients_equal_the_naive_attention() {
        // Tiles that divide the sequence, that do not, and one tile for everything.
        let shape = [2, 3, 37, 8];
        let reference = run(inputs(shape), DType::F32, None);
        for (query, key) in [(8, 8), (5, 16), (16, 5), (64, 64), (1, 37)] {
            let ours = run(inputs(shape), DType::F32, Some(Tiles { query, key }));
            assert_within(
                &ours,
                &reference,
                1e-5,
                &format!("f32, tiles {query}x{key}"),
            );
        }
    }

    /// Asserts that output and gradients are within `tol` relative error of `reference`.
    fn assert_within(ours: &[Vec<f32>; 4], reference: &[Vec<f32>; 4], tol: f32, what: &str) {
        for (name, (a, b)) in ["out", "dq", "dk", "dv"]
            .iter()
            .zip(ours.iter().zip(reference))
        {
            let e = rel_err(a, b);
            assert!(e <= tol, "{what}: {name} relative error {e:e} > {tol:e}");
        }
    }

    #[test]
    fn bf16_output_and_gradients_are_within_bf16_rounding_of_f32() {
        // bf16 keeps 8 significant bits (unit roundoff 2^-8 = 3.9e-3); products in bf16 with f32
        // softmax statistics stay within 2e-2 of the f32 result, relative to its largest entry,
        // as the naive bf16 attention does.
        let shape = [1, 2, 40, 16];
        let reference = run(inputs(shape), DType::F32, None);
        let ours = run(
            inputs(shape),
            DType::BF16,
            Some(Tiles { query: 16, key: 8 }),
        );
        assert_within(&ours, &reference, 2e-2, "bf16, tiles 16x8");
        // Burn's naive attention in bf16 is held to the same tolerance.
        let naive_bf16 = run(inputs(shape), DType::BF16, None);
        assert_within(&naive_bf16, &reference, 2e-2, "naive bf16");
    }

    /// `(out, lse, dq, dk, dv)` of one attention on flex, through `forward` and `backward`.
    type Direction = fn([Tensor<Flex, 4>; 4], Tiles) -> [Vec<f32>; 5];

    fn through_kernel([q, k, v, g]: [Tensor<Flex, 4>; 4], tiles: Tiles) -> [Vec<f32>; 5] {
        let (out, lse) = flash_forward(q.clone(), k.clone(), v.clone(), tiles);
        let (dq, dk, dv) = flash_backward(q, k, v, out.clone(), lse.clone(), g, tiles);
        [out, lse, dq, dk, dv].map(values)
    }

    fn through_composition([q, k, v, g]: [Tensor<Flex, 4>; 4], tiles: Tiles) -> [Vec<f32>; 5] {
        let (out, lse) = composed_forward(q.clone(), k.clone(), v.clone(), tiles);
        let (dq, dk, dv) = composed_backward(q, k, v, out.clone(), lse.clone(), g, tiles);
        [out, lse, dq, dk, dv].map(values)
    }

    #[test]
    fn flex_kernel_equals_the_composed_reference() {
        // Same algorithm, tiles and f32 arithmetic; only the order of summation inside the
        // products differs, so f32 agrees to a few ulps of the largest entry. 16-bit outputs are
        // each one rounding of those f32 values: within one ulp of the reference's rounding
        // (bf16: 2^-7 relative to the largest entry covers it, f16: 2^-10).
        let kernel: Direction = through_kernel;
        let reference: Direction = through_composition;
        let shapes = [[2, 3, 37, 8], [1, 2, 40, 20], [2, 1, 19, 64]];
        let tiles = [(8, 8), (5, 16), (16, 5), (64, 64), (1, 37), (1024, 1024)];
        for (n, shape) in shapes.into_iter().enumerate() {
            for (dtype, tol) in [(DType::F32, 2e-6), (DType::BF16, 8e-3), (DType::F16, 1e-3)] {
                for &(query, key) in &tiles {
                    let tiles = Tiles { query, key };
                    let inputs = || inputs(shape).map(|t| t.inner().cast(dtype));
                    let taken = inputs().map(primitive);
                    assert!(
                        crate::kernels::flex::attention_runs(&taken.each_ref()),
                        "{dtype:?}: flex runs the kernel"
                    );
                    let ours = kernel(inputs(), tiles);
                    let theirs = reference(inputs(), tiles);
                    for (name, (a, b)) in ["out", "lse", "dq", "dk", "dv"]
                        .iter()
                        .zip(ours.iter().zip(&theirs))
                    {
                        let e = rel_err(a, b);
                        assert!(
                            e <= tol,
                            "shape {n} {dtype:?} tiles {query}x{key}: {name} {e:e} > {tol:e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn causal_masking_is_exact() {
        // Changing keys and values after position p changes no output row at or before p.
        let shape = [1, 2, 24, 4];
        let [q, k, v, _] = inputs(shape);
        let tiles = Tiles { query: 5, key: 7 };
        let p = 10;
        let before = values(memory_efficient_attention(
            q.clone().inner(),
            k.clone().inner(),
            v.clone().inner(),
            tiles,
        ));
        let noise = |t: Tensor<Ad, 4>| {
            let device = t.device();
            let future = Tensor::<Flex, 4>::random(
                [1, 2, 24 - p - 1, 4],
                Distribution::Normal(0.0, 100.0),
                &device,
            );
            Tensor::cat(vec![t.inner().narrow(2, 0, p + 1), future], 2)
        };
        let after = values(memory_efficient_attention(
            q.inner(),
            noise(k),
            noise(v),
            tiles,
        ));
        let row = 4; // d_head
        for h in 0..2 {
            let at = |x: &[f32]| x[h * 24 * row..h * 24 * row + (p + 1) * row].to_vec();
            assert_eq!(at(&before), at(&after), "head {h}: rows up to {p} changed");
        }
        // The first row attends to itself only: its output is v[0] exactly.
        let one = memory_efficient_attention(
            Tensor::<Flex, 4>::from_data(
                TensorData::new(vec![1.0f32; 8], [1, 1, 2, 4]),
                &Default::default(),
            ),
            Tensor::<Flex, 4>::from_data(
                TensorData::new(vec![0.5f32; 8], [1, 1, 2, 4]),
                &Default::default(),
            ),
            Tensor::<Flex, 4>::from_data(
                TensorData::new(
                    vec![1.0f32, 2.0, 3.0, 4.0, 9.0, 9.0, 9.0, 9.0],
                    [1, 1, 2, 4],
                ),
                &Default::default(),
            ),
            Tiles { query: 1, key: 1 },
        );
        assert_eq!(&values(one)[..4], &[1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn spec_form_round_trips() {
        let a = Attention::MemoryEfficient {
            tiles: Tiles { query: 64, key: 32 },
        };
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"kind":"memory_efficient","query":64,"key":32}"#);
        assert_eq!(serde_json::from_str::<Attention>(&json).unwrap(), a);
        assert!(Attention::Naive.is_naive() && !a.is_naive());
    }
}
