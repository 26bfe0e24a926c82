//! One registration under autodiff for the model's elementwise operations whose backward needs
//! only their input (GELU, the exponential): as Burn 0.21 registers its own `gelu` and `exp`, a
//! memory-bound operation that checkpoints its input, so a checkpointing strategy may drop the
//! output and recompute it. What the graph keeps is what Burn's operation kept.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::retro_forward::RetroForward;
use burn::backend::autodiff::checkpoint::state::BackwardStates;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use std::marker::PhantomData;

/// An elementwise operation `y = f(x)` on the inner backend `B` with `dx = g(x, dy)`.
pub(crate) trait InputUnary<B: Backend>: 'static {
    /// `f(x)`, same shape and dtype.
    fn forward(x: FloatTensor<B>) -> FloatTensor<B>;
    /// `dx` from the input and the output's gradient.
    fn backward(x: FloatTensor<B>, dy: FloatTensor<B>) -> FloatTensor<B>;
}

/// The backward step; the state is the checkpointed input's node.
struct UnaryBackward<Op>(PhantomData<fn() -> Op>);

impl<Op> std::fmt::Debug for UnaryBackward<Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(std::any::type_name::<Op>())
    }
}

impl<B: Backend, Op: InputUnary<B>> Backward<B, 1> for UnaryBackward<Op> {
    type State = NodeId;

    fn backward(self, ops: Ops<NodeId, 1>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let x = checkpointer.retrieve_node_output::<FloatTensor<B>>(ops.state);
        let dy = grads.consume::<B>(&ops.node);
        if let [Some(parent)] = ops.parents {
            grads.register::<B>(parent.id, Op::backward(x, dy));
        }
    }
}

/// Recomputes the output from the input when a checkpointing strategy dropped it.
struct Retro<B, Op> {
    input: NodeId,
    _op: PhantomData<fn() -> (B, Op)>,
}

impl<B, Op> std::fmt::Debug for Retro<B, Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Retro<{}>({:?})",
            std::any::type_name::<Op>(),
            self.input
        )
    }
}

impl<B: Backend, Op: InputUnary<B>> RetroForward for Retro<B, Op> {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let x = states.get_state::<FloatTensor<B>>(&self.input);
        states.save(out_node, Op::forward(x))
    }
}

/// `Op` on an autodiff tensor, registered as described above.
pub(crate) fn register<B, C, Op>(x: FloatTensor<Autodiff<B, C>>) -> FloatTensor<Autodiff<B, C>>
where
    B: Backend,
    C: CheckpointStrategy,
    Op: InputUnary<B>,
{
    let retro = Retro::<B, Op> {
        input: x.node.id,
        _op: PhantomData,
    };
    match UnaryBackward::<Op>(PhantomData)
        .prepare::<C>([x.node.clone()])
        .memory_bound()
        .retro_forward(retro)
        .parents([&x])
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let state = prep.checkpoint(&x);
            prep.finish(state, Op::forward(x.primitive.clone()))
        }
        OpsKind::UnTracked(prep) => prep.finish(Op::forward(x.primitive)),
    }
}
