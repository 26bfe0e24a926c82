//! The unit executor: rematerialization inside the transformer block.
//!
//! Each block runs as the chain of eight units of [`memwall_core::units::Unit`] on the inner
//! (non-autodiff) backend. The forward pass keeps the unit outputs the plan keeps
//! ([`memwall_core::units::block_keeps`]) and drops the rest. Backward walks the units last to
//! first and calls each unit's own backward (the same functions the model's autodiff operations
//! call: [`crate::model::linear`]'s products, [`crate::model::norm::backward`],
//! [`crate::model::attention::flash_backward`], the GELU kernel's backward); before a unit's
//! backward, every value it reads that was not kept is recomputed from its forward inputs,
//! recursively to the nearest kept value, and lives until the backward of the unit that
//! produced it ([`memwall_core::units::recomputed_units`] is this rule on names, and the test
//! compares the two).
//!
//! So a unit-level plan pays for exactly the units it recomputes, unlike a segment of Burn
//! autodiff, which would rebuild a unit's whole graph (its matrix product included) to get its
//! backward. This is what PyTorch's selective activation checkpointing and JAX's `jax.checkpoint`
//! policies do with their own autodiff; here it is written against Burn's backend operations.
//!
//! The gradients equal plain backward's bit for bit in f32 on the CPU: every recomputation
//! reruns the forward operation on the same inputs, and the gradient contributions are added in
//! the order Burn's autodiff adds them (tested).

use super::segment::{collect, merge_into, SegmentedStep};
use super::{Inputs, TrainBackend};
use crate::measure::Phase;
use crate::model::attention::{flash_backward, flash_forward, Attention};
use crate::model::heads::{merge_heads, split_heads};
use crate::model::linear::matmul;
use crate::model::norm::{self, LayerNormSaving};
use crate::model::{Block, ModelBackend, TransformerLm};
use burn::module::{AutodiffModule, Param};
use burn::nn::LayerNorm;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use memwall_core::units::{Unit, UnitSet};

/// The inner backend of `B`.
type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// A value a unit produced, on the inner backend. Shapes: `rows` = batch · seq.
#[derive(Clone)]
enum Value<I: Backend> {
    /// A hidden state, `[batch, seq, d_model]`: `x2` (attn_out), `x3` (mlp_out).
    Hidden(Tensor<I, 3>),
    /// A layer norm's output `[rows, d_model]` and its f32 row mean and `1/std`, `[rows, 1]`.
    Norm {
        y: Tensor<I, 2>,
        mean: Tensor<I, 2>,
        rstd: Tensor<I, 2>,
    },
    /// Queries, keys and values, `[batch, heads, seq, d_head]` each.
    Qkv(Tensor<I, 4>, Tensor<I, 4>, Tensor<I, 4>),
    /// The attention output with heads merged, `[batch, seq, d_model]`, and the f32 log-sum-exp
    /// of each row, `[batch, heads, seq, 1]`.
    Attention { a: Tensor<I, 3>, lse: Tensor<I, 4> },
    /// The MLP's hidden values, `[rows, d_ff]`: `m` (mlp_in), `g` (activation).
    Flat(Tensor<I, 2>),
}

impl<I: Backend> Value<I> {
    fn hidden(self) -> Tensor<I, 3> {
        match self {
            Value::Hidden(x) => x,
            _ => unreachable!("a block's input, attn_out and mlp_out are hidden states"),
        }
    }

    fn norm(self) -> NormOut<I> {
        match self {
            Value::Norm { y, mean, rstd } => (y, mean, rstd),
            _ => unreachable!("norm_attn and norm_mlp are layer norms"),
        }
    }

    fn flat(self) -> Tensor<I, 2> {
        match self {
            Value::Flat(m) => m,
            _ => unreachable!("mlp_in and activation are [rows, d_ff]"),
        }
    }
}

/// A layer norm's output `[rows, d_model]` and its f32 row mean and `1/std` (`[rows, 1]`).
type NormOut<I> = (Tensor<I, 2>, Tensor<I, 2>, Tensor<I, 2>);

/// The values of one step's chain: the embeddings and, per block, the unit outputs held now.
struct Chain<I: Backend> {
    embedded: Tensor<I, 3>,
    slots: Vec<[Option<Value<I>>; 8]>,
    /// `(block, unit)` of every recomputed value, in order.
    recomputed: Vec<(usize, Unit)>,
    /// A range survey's record of every value the step computed, when one is taken
    /// ([`crate::train::survey`]); `None` in training.
    seen: Option<Vec<Seen<I>>>,
}

impl<I: Backend> Chain<I> {
    /// Records `t` as `(block, name, kind)` when the step is surveyed (a clone of the handle,
    /// no copy of the data); nothing otherwise.
    fn see<const D: usize>(
        &mut self,
        block: Option<usize>,
        name: &'static str,
        kind: SeenKind,
        t: &Tensor<I, D>,
    ) {
        if let Some(seen) = &mut self.seen {
            let n = t.shape().num_elements();
            seen.push(Seen {
                block,
                name,
                kind,
                values: t.clone().reshape([n]),
            });
        }
    }

    /// Records the output of `unit` of `block` (a unit's every tensor under the unit's name;
    /// the attention core's log-sum-exp as `attention.lse`).
    fn see_value(&mut self, block: usize, unit: Unit, v: &Value<I>) {
        if self.seen.is_none() {
            return;
        }
        let (b, name, kind) = (Some(block), unit.name(), SeenKind::Activation);
        match v {
            Value::Hidden(x) => self.see(b, name, kind, x),
            Value::Norm { y, .. } => self.see(b, name, kind, y),
            Value::Qkv(q, k, v) => {
                for t in [q, k, v] {
                    self.see(b, name, kind, t);
                }
            }
            Value::Attention { a, lse } => {
                self.see(b, name, kind, a);
                self.see(b, "attention.lse", kind, lse);
            }
            Value::Flat(m) => self.see(b, name, kind, m),
        }
    }
}

/// What a surveyed value of a step is ([`Seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SeenKind {
    /// A value of the forward pass: a unit's output, or the head's logits.
    Activation,
    /// The loss's gradient with respect to a unit's output (what backward carries).
    Gradient,
    /// The loss's gradient with respect to a unit's parameters (a matrix product's weight, or
    /// a layer norm's γ and β).
    WeightGradient,
}

/// One value of a surveyed step, as the unit executor computed it
/// ([`crate::train::survey::range_survey`]).
pub struct Seen<I: Backend> {
    /// The block (0-based); `None` for the head.
    pub block: Option<usize>,
    /// The unit whose output (or whose output's gradient, or whose parameters' gradient) it
    /// is ([`Unit::name`]), `attention.lse` for the attention core's log-sum-exp, `logits`
    /// for the head's output.
    pub name: &'static str,
    /// Activation, gradient or weight gradient.
    pub kind: SeenKind,
    /// The values, flattened.
    pub values: Tensor<I, 1>,
}

/// What one unit-level step did besides the [`SegmentedStep`]: the unit outputs it recomputed,
/// `(block, unit)` in order.
pub struct UnitStep<B: AutodiffBackend> {
    /// The model, loss and pending gradients, as the segment executor returns them.
    pub step: SegmentedStep<B>,
    /// The recomputed unit outputs, in the order backward recomputed them.
    pub recomputed: Vec<(usize, Unit)>,
}

/// Flattens `[batch, seq, d]` to `[rows, d]`.
fn rows<I: Backend>(x: Tensor<I, 3>) -> Tensor<I, 2> {
    let [b, t, d] = x.dims();
    x.reshape([b * t, d])
}

/// The bias-free linear layer `x W` on the inner backend (the model's operation).
fn linear<I: ModelBackend>(x: Tensor<I, 2>, w: &Param<Tensor<I, 2>>) -> Tensor<I, 2> {
    matmul(x, w.val())
}

/// The linear layer's backward: `(dW = xᵀ dy, dx = dy Wᵀ)`, as its autodiff operation computes
/// them.
fn linear_backward<I: ModelBackend>(
    x: Tensor<I, 2>,
    w: &Param<Tensor<I, 2>>,
    dy: Tensor<I, 2>,
) -> (Tensor<I, 2>, Tensor<I, 2>) {
    let dw = matmul(x.swap_dims(0, 1), dy.clone());
    let dx = matmul(dy, w.val().swap_dims(0, 1));
    (dw, dx)
}

fn norm_forward<I: ModelBackend>(norm: &LayerNorm<I>, x: Tensor<I, 2>) -> Value<I> {
    let beta = norm
        .beta
        .as_ref()
        .expect("the model's layer norms have a β");
    let f = norm::forward::<I>(x, norm.gamma.val(), beta.val(), norm::epsilon());
    Value::Norm {
        y: f.y,
        mean: f.mean,
        rstd: f.rstd,
    }
}

fn tiles_of<I: Backend>(block: &Block<I>) -> crate::model::attention::Tiles {
    match block.attention {
        Attention::MemoryEfficient { tiles } => tiles,
        Attention::Naive => {
            unreachable!("checked before the step: the unit executor runs memwall's attention")
        }
    }
}

impl<I: ModelBackend> Chain<I> {
    /// The value `unit` of `block` produced (`None`: the block's input), recomputing it (and
    /// what it needs) if it is not held.
    fn value<B: TrainBackend<InnerBackend = I>>(
        &mut self,
        model: &TransformerLm<B>,
        block: usize,
        unit: Option<Unit>,
    ) -> Value<I> {
        let (block, unit) = match unit {
            Some(u) => (block, u),
            None if block == 0 => return Value::Hidden(self.embedded.clone()),
            None => (block - 1, Unit::MlpOut),
        };
        if let Some(v) = &self.slots[block][unit.index()] {
            return v.clone();
        }
        let inner = model.blocks[block].valid();
        let v = self.forward_unit(model, &inner, block, unit);
        self.recomputed.push((block, unit));
        self.slots[block][unit.index()] = Some(v.clone());
        v
    }

    /// Runs `unit` of `block` (whose parameters are `inner`) on its inputs.
    fn forward_unit<B: TrainBackend<InnerBackend = I>>(
        &mut self,
        model: &TransformerLm<B>,
        inner: &Block<I>,
        block: usize,
        unit: Unit,
    ) -> Value<I> {
        let shape = model_shape(&self.embedded);
        let mut input = |u: Option<Unit>| self.value(model, block, u);
        match unit {
            Unit::NormAttn => norm_forward(&inner.norm_attn, rows(input(None).hidden())),
            Unit::Qkv => {
                let (h, _, _) = input(Some(Unit::NormAttn)).norm();
                qkv_forward(inner, h, shape)
            }
            Unit::Attention => {
                let Value::Qkv(q, k, v) = input(Some(Unit::Qkv)) else {
                    unreachable!("qkv holds queries, keys and values")
                };
                let (out, lse) = flash_forward::<I>(q, k, v, tiles_of(inner));
                Value::Attention {
                    a: merge_heads(out),
                    lse,
                }
            }
            Unit::AttnOut => {
                let x = input(None).hidden();
                let Value::Attention { a, .. } = input(Some(Unit::Attention)) else {
                    unreachable!("attention holds its output")
                };
                let [b, t, d] = x.dims();
                Value::Hidden(x + linear(rows(a), &inner.attn_out.weight).reshape([b, t, d]))
            }
            Unit::NormMlp => {
                norm_forward(&inner.norm_mlp, rows(input(Some(Unit::AttnOut)).hidden()))
            }
            Unit::MlpIn => {
                let (h, _, _) = input(Some(Unit::NormMlp)).norm();
                Value::Flat(linear(h, &inner.mlp_in.weight))
            }
            Unit::Activation => {
                let m = input(Some(Unit::MlpIn)).flat();
                Value::Flat(crate::model::gelu::gelu(m))
            }
            Unit::MlpOut => {
                let x2 = input(Some(Unit::AttnOut)).hidden();
                let g = input(Some(Unit::Activation)).flat();
                let [b, t, d] = x2.dims();
                Value::Hidden(x2 + linear(g, &inner.mlp_out.weight).reshape([b, t, d]))
            }
        }
    }

    /// Drops the held outputs of `block`'s units from `unit` on: no unit whose backward is
    /// still to come reads them.
    fn release(&mut self, block: usize, unit: Unit) {
        for slot in &mut self.slots[block][unit.index()..] {
            *slot = None;
        }
    }
}

/// `(batch, seq)` of the step, read from the embeddings `[batch, seq, d_model]`.
fn model_shape<I: Backend>(embedded: &Tensor<I, 3>) -> (usize, usize) {
    let [b, t, _] = embedded.dims();
    (b, t)
}

fn qkv_forward<I: ModelBackend>(
    inner: &Block<I>,
    h: Tensor<I, 2>,
    (b, t): (usize, usize),
) -> Value<I> {
    let project = |w: &Param<Tensor<I, 2>>| {
        let y = linear(h.clone(), w);
        let d = y.dims()[1];
        split_heads(y.reshape([b, t, d]), inner.heads)
    };
    Value::Qkv(
        project(&inner.query.weight),
        project(&inner.key.weight),
        project(&inner.value.weight),
    )
}

/// Why a model cannot run under the unit executor, or `None`: it runs memwall's attention and
/// layer norm, whose backward passes the executor calls.
pub fn unsupported<B: Backend>(model: &TransformerLm<B>) -> Option<String> {
    let block = model.blocks.first()?;
    if block.attention.is_naive() {
        return Some(
            "the unit executor runs memwall's memory-efficient attention, not the naive one".into(),
        );
    }
    if block.layer_norm.is_composed() {
        return Some("the unit executor runs memwall's layer norm (saves_input or saves_output), not Burn's composed one".into());
    }
    None
}

/// One training step with every block's unit outputs kept as `keeps` says (one set per block,
/// from [`memwall_core::units::block_keeps`]); the rest recomputed in backward.
///
/// With `fused = Some((optim, lr))` each block's parameters (and the head's) are stepped as
/// soon as their gradients exist and the returned gradients hold only the embeddings'; otherwise
/// nothing is stepped. `phase` marks the embedding, each block's forward, the head, its
/// backward, each block's backward and the embeddings' backward, as the segment executor does.
///
/// Panics if `keeps` does not have one set per block or the model fails [`unsupported`]
/// (the job checks both before its first step).
pub fn unit_step<B, O>(
    model: TransformerLm<B>,
    inputs: &Inputs<B>,
    keeps: &[UnitSet],
    fused: Option<(&mut O, f64)>,
    phase: &mut dyn FnMut(Phase),
) -> UnitStep<B>
where
    B: TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    match fused {
        Some((optim, lr)) => {
            let mut step = |m, g| optim.step(lr, m, g);
            run_units(model, inputs, keeps, Some(&mut step), phase, None).0
        }
        None => run_units(model, inputs, keeps, None, phase, None).0,
    }
}

/// A step's optimizer update of one block's (or the head's) gradients, in backward (the fused
/// optimizer step): the model with the gradients applied.
type FusedStep<'a, B> = &'a mut dyn FnMut(TransformerLm<B>, GradientsParams) -> TransformerLm<B>;

/// [`unit_step`] with the optimizer step as a closure; with `seen`, the step records every
/// value it computes ([`Chain::see`]) and returns them.
pub(super) fn run_units<B: TrainBackend>(
    model: TransformerLm<B>,
    inputs: &Inputs<B>,
    keeps: &[UnitSet],
    mut fused: Option<FusedStep<'_, B>>,
    phase: &mut dyn FnMut(Phase),
    seen: Option<Vec<Seen<Inner<B>>>>,
) -> (UnitStep<B>, Vec<Seen<Inner<B>>>) {
    assert_eq!(keeps.len(), model.blocks.len(), "one kept set per block");
    assert!(unsupported(&model).is_none(), "{:?}", unsupported(&model));
    let mut model = model;
    let embedded = model.embed(inputs.tokens.clone(), inputs.positions.clone());
    phase(Phase::Embedding);
    let mut chain = Chain::<Inner<B>> {
        embedded: embedded.clone().inner(),
        slots: (0..keeps.len()).map(|_| Default::default()).collect(),
        recomputed: Vec::new(),
        seen,
    };
    let last = forward(&model, &mut chain, keeps, phase);
    if chain.seen.is_some() {
        let logits = model.valid().logits(last.clone());
        chain.see(None, "logits", SeenKind::Activation, &logits);
    }

    let mut pending = GradientsParams::new();
    let super::head::HeadStep {
        loss: loss_inner,
        mut upstream,
        grads: head,
    } = super::head::head_step(
        &model,
        last,
        &inputs.targets,
        1.0,
        &mut pending,
        &mut || phase(Phase::Head),
    );
    match fused.as_mut() {
        Some(step) => model = step(model, head),
        None => merge_into(&mut pending, head, &model),
    }
    phase(Phase::HeadBackward {
        fused: fused.is_some(),
    });

    for block in (0..keeps.len()).rev() {
        let before = chain.recomputed.len();
        let mut grads = GradientsParams::new();
        upstream = block_backward(&model, &mut chain, block, upstream, &mut grads);
        match fused.as_mut() {
            Some(step) => model = step(model, grads),
            None => merge_into(&mut pending, grads, &model),
        }
        phase(Phase::Backward {
            first: block as u16,
            end: block as u16 + 1,
            recompute: chain.recomputed.len() > before,
            fused: fused.is_some(),
        });
    }

    let mut g = (embedded * Tensor::from_inner(upstream)).sum().backward();
    collect(&mut g, &model.token_embedding, &mut pending);
    collect(&mut g, &model.position_embedding, &mut pending);
    drop(g);
    phase(Phase::EmbeddingBackward);
    let step = UnitStep {
        step: SegmentedStep {
            model,
            loss: loss_inner,
            grads: pending,
        },
        recomputed: chain.recomputed,
    };
    (step, chain.seen.unwrap_or_default())
}

/// Forward seconds of each unit of the first block on the model's device, in [`Unit::ALL`]
/// order: per unit, the median over `reps` runs on its inputs (the units before it run first
/// and produce them), with the device synchronized before and after each run, as the
/// profiling pass times whole blocks. The blocks are alike, so the first stands for all; a
/// plan's predicted recomputation time is the sum over the units it recomputes.
///
/// Panics if the model fails [`unsupported`] (the job checks it before its first step).
pub fn unit_forward_seconds<B: TrainBackend>(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    device: &B::Device,
    reps: usize,
) -> [f64; 8] {
    assert!(unsupported(model).is_none(), "{:?}", unsupported(model));
    let embedded = model.embed(inputs.tokens.clone(), inputs.positions.clone());
    let mut chain = Chain::<Inner<B>> {
        embedded: embedded.inner(),
        slots: vec![Default::default()],
        recomputed: Vec::new(),
        seen: None,
    };
    let inner = model.blocks[0].valid();
    let mut out = [0.0; 8];
    for unit in Unit::ALL {
        let mut times = Vec::with_capacity(reps.max(1));
        for _ in 0..reps.max(1) {
            let _ = B::sync(device);
            let started = std::time::Instant::now();
            let v = chain.forward_unit(model, &inner, 0, unit);
            let _ = B::sync(device);
            times.push(started.elapsed().as_secs_f64());
            chain.slots[0][unit.index()] = Some(v);
        }
        times.sort_by(f64::total_cmp);
        out[unit.index()] = times[times.len() / 2];
    }
    out
}

/// The forward pass through the blocks, keeping what `keeps` says; returns the last hidden
/// state.
fn forward<B: TrainBackend>(
    model: &TransformerLm<B>,
    chain: &mut Chain<Inner<B>>,
    keeps: &[UnitSet],
    phase: &mut dyn FnMut(Phase),
) -> Tensor<Inner<B>, 3> {
    for (block, keep) in keeps.iter().enumerate() {
        let inner = model.blocks[block].valid();
        for unit in Unit::ALL {
            let v = chain.forward_unit(model, &inner, block, unit);
            chain.see_value(block, unit, &v);
            chain.slots[block][unit.index()] = Some(v);
            // A value the plan does not keep is dropped once its last reader in forward ran
            // (no later unit of the block reads it, [`Unit::forward_inputs`]).
            for value in unit.forward_inputs() {
                let later = &Unit::ALL[unit.index() + 1..];
                if later.iter().any(|u| u.forward_inputs().contains(value)) {
                    continue;
                }
                let (b, u) = match *value {
                    Some(u) => (block, u),
                    None if block == 0 => continue,
                    None => (block - 1, Unit::MlpOut),
                };
                if !keeps[b].contains(u) {
                    chain.slots[b][u.index()] = None;
                }
            }
        }
        phase(Phase::Forward {
            first: block as u16,
            end: block as u16 + 1,
            recompute: *keep != UnitSet::ALL,
        });
    }
    let last = keeps.len() - 1;
    let x = chain.slots[last][Unit::MlpOut.index()]
        .clone()
        .expect("the last block's output is held until the head")
        .hidden();
    if !keeps[last].contains(Unit::MlpOut) {
        chain.slots[last][Unit::MlpOut.index()] = None;
    }
    x
}

/// The parameter `p`'s gradient `g` into `grads`.
fn register<B: AutodiffBackend, const D: usize>(
    grads: &mut GradientsParams,
    p: &Param<Tensor<B, D>>,
    g: Tensor<B::InnerBackend, D>,
) {
    grads.register::<B::InnerBackend, D>(p.id, g);
}

/// Backward through `block`'s units from the gradient of its output `dy` (`[batch, seq,
/// d_model]`): registers the block's parameter gradients in `grads` and returns the gradient
/// of its input.
fn block_backward<B: TrainBackend>(
    model: &TransformerLm<B>,
    chain: &mut Chain<Inner<B>>,
    block: usize,
    dy: Tensor<Inner<B>, 3>,
    grads: &mut GradientsParams,
) -> Tensor<Inner<B>, 3> {
    let params = &model.blocks[block];
    let inner = params.valid();
    let [b, t, d] = dy.dims();
    let here = Some(block);
    chain.see(here, "mlp_out", SeenKind::Gradient, &dy);

    // mlp_out: x3 = x2 + g W2.
    let g = chain.value(model, block, Some(Unit::Activation)).flat();
    let (dw, dg) = linear_backward(g, &inner.mlp_out.weight, rows(dy.clone()));
    chain.see(here, "mlp_out", SeenKind::WeightGradient, &dw);
    chain.see(here, "activation", SeenKind::Gradient, &dg);
    register(grads, &params.mlp_out.weight, dw);
    chain.release(block, Unit::MlpOut);

    // activation: g = GELU(m).
    let m = chain.value(model, block, Some(Unit::MlpIn)).flat();
    let dm = crate::model::gelu::gelu_backward(m, dg);
    chain.see(here, "mlp_in", SeenKind::Gradient, &dm);
    chain.release(block, Unit::Activation);

    // mlp_in: m = h2 W1.
    let (h2, mean2, rstd2) = chain.value(model, block, Some(Unit::NormMlp)).norm();
    let (dw, dh2) = linear_backward(h2.clone(), &inner.mlp_in.weight, dm);
    chain.see(here, "mlp_in", SeenKind::WeightGradient, &dw);
    chain.see(here, "norm_mlp", SeenKind::Gradient, &dh2);
    register(grads, &params.mlp_in.weight, dw);
    chain.release(block, Unit::MlpIn);

    // norm_mlp: h2 = ln2(x2); x2 also feeds the second residual.
    let norm = (&inner.norm_mlp, &params.norm_mlp);
    let at = (block, Some(Unit::AttnOut));
    let dx2 = norm_unit_backward(chain, model, at, norm, (h2, mean2, rstd2), dh2, grads);
    let dx2 = dx2.reshape([b, t, d]) + dy;
    chain.see(here, "attn_out", SeenKind::Gradient, &dx2);
    chain.release(block, Unit::NormMlp);

    // attn_out: x2 = x + a Wo.
    let Value::Attention { a, lse } = chain.value(model, block, Some(Unit::Attention)) else {
        unreachable!("attention holds its output")
    };
    let (dw, da) = linear_backward(rows(a.clone()), &inner.attn_out.weight, rows(dx2.clone()));
    chain.see(here, "attn_out", SeenKind::WeightGradient, &dw);
    chain.see(here, "attention", SeenKind::Gradient, &da);
    register(grads, &params.attn_out.weight, dw);
    chain.release(block, Unit::AttnOut);

    // attention: the core's own backward from its inputs, output and log-sum-exp.
    let Value::Qkv(q, k, v) = chain.value(model, block, Some(Unit::Qkv)) else {
        unreachable!("qkv holds queries, keys and values")
    };
    let heads = inner.heads;
    let (dq, dk, dv) = flash_backward::<Inner<B>>(
        q,
        k,
        v,
        split_heads(a, heads),
        lse,
        split_heads(da.reshape([b, t, d]), heads),
        tiles_of(&inner),
    );
    for g in [&dq, &dk, &dv] {
        chain.see(here, "qkv", SeenKind::Gradient, g);
    }
    chain.release(block, Unit::Attention);

    // qkv: three products of h1; their input gradients added in the order Burn's autodiff
    // adds them (values, then keys, then queries).
    let (h1, mean1, rstd1) = chain.value(model, block, Some(Unit::NormAttn)).norm();
    let mut dh1: Option<Tensor<Inner<B>, 2>> = None;
    for (dproj, layer, param) in [
        (dv, &inner.value, &params.value),
        (dk, &inner.key, &params.key),
        (dq, &inner.query, &params.query),
    ] {
        let (dw, dx) = linear_backward(h1.clone(), &layer.weight, rows(merge_heads(dproj)));
        chain.see(here, "qkv", SeenKind::WeightGradient, &dw);
        register(grads, &param.weight, dw);
        dh1 = Some(match dh1 {
            Some(acc) => dx + acc,
            None => dx,
        });
    }
    let dh1 = dh1.expect("three projections");
    chain.see(here, "norm_attn", SeenKind::Gradient, &dh1);
    chain.release(block, Unit::Qkv);

    // norm_attn: h1 = ln1(x); x also feeds the first residual.
    let norm = (&inner.norm_attn, &params.norm_attn);
    let dx = norm_unit_backward(
        chain,
        model,
        (block, None),
        norm,
        (h1, mean1, rstd1),
        dh1,
        grads,
    );
    chain.release(block, Unit::NormAttn);
    dx.reshape([b, t, d]) + dx2
}

/// A layer norm unit's backward from the gradient `dy` (`[rows, d_model]`) of its output:
/// registers `dγ` and `dβ` of `params` (the model's norm; `inner` its values) in `grads` and
/// returns the gradient of its input. `(y, mean, rstd)` is the norm's output and row
/// statistics; under [`LayerNormSaving::SavesInput`] `x̂` is recovered from the norm's input,
/// the value of `input` (`(block, None)`: the block's input, for `norm_attn`; `(block,
/// Some(attn_out))` for `norm_mlp`), else from `y` and `β`.
fn norm_unit_backward<B: TrainBackend>(
    chain: &mut Chain<Inner<B>>,
    model: &TransformerLm<B>,
    (block, input): (usize, Option<Unit>),
    (inner, params): (&LayerNorm<Inner<B>>, &LayerNorm<B>),
    (y, mean, rstd): NormOut<Inner<B>>,
    dy: Tensor<Inner<B>, 2>,
    grads: &mut GradientsParams,
) -> Tensor<Inner<B>, 2> {
    let beta = |n: &LayerNorm<Inner<B>>| {
        n.beta
            .as_ref()
            .expect("the model's layer norms have a β")
            .val()
    };
    let kept = match model.blocks[block].layer_norm {
        LayerNormSaving::SavesOutput => norm::Kept::Output {
            y: y.into_primitive().tensor(),
            beta: beta(inner).into_primitive().tensor(),
        },
        _ => norm::Kept::Input {
            x: rows(chain.value(model, block, input).hidden())
                .into_primitive()
                .tensor(),
            mean: mean.into_primitive().tensor(),
        },
    };
    let (dx, dgamma, dbeta) = norm::backward::<Inner<B>>(kept, rstd, inner.gamma.val(), dy);
    let name = if input.is_some() {
        "norm_mlp"
    } else {
        "norm_attn"
    };
    chain.see(Some(block), name, SeenKind::WeightGradient, &dgamma);
    chain.see(Some(block), name, SeenKind::WeightGradient, &dbeta);
    grads.register::<Inner<B>, 1>(params.gamma.id, dgamma);
    if let Some(beta) = &params.beta {
        grads.register::<Inner<B>, 1>(beta.id, dbeta);
    }
    dx
}

#[cfg(test)]
#[path = "units_tests.rs"]
mod tests;
