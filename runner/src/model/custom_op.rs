//! memwall's kernels inside Burn's fusion backend (`Fusion<B>`, CUDA's rows with `fusion =
//! true`): an operation of the model registered in the fused stream as one custom operation
//! (Burn's `OperationIr::Custom`), which the stream executes by calling the inner backend's
//! method, on `CubeBackend` memwall's CubeCL kernel ([`crate::kernels::cube`]).
//!
//! Burn's fusion compiles runs of elementwise operations (and some reductions) into one kernel
//! each, but not a whole attention, layer norm or Adafactor update: those stay dozens of Burn
//! operations, and their matrix products and reductions cut the runs. A custom operation is one
//! node: the fused runs before it are executed, its kernels run, and fusion goes on after it.
//! So the operations that gain from memwall's kernels (attention, layer norm, GELU's backward
//! with the exact derivative, Adafactor) are custom operations here; GELU's forward and AdamW's
//! update, elementwise chains that Burn's fusion already compiles into one kernel, stay Burn's.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};
use std::sync::Arc;

/// What a custom operation runs on the inner backend: its inputs, in the order given to
/// [`register`], to its outputs, in the order of their shapes.
type Run<B> = dyn Fn(Vec<FloatTensor<B>>) -> Vec<FloatTensor<B>> + Send + Sync;

/// One registered operation: its description in the stream and what it runs.
struct Custom<B: FusionBackend> {
    desc: CustomOpIr,
    run: Arc<Run<B>>,
}

impl<B: FusionBackend> std::fmt::Debug for Custom<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custom").field("id", &self.desc.id).finish()
    }
}

impl<B: FusionBackend> Operation<B::FusionRuntime> for Custom<B> {
    fn execute(
        &self,
        handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    ) {
        let inputs = self
            .desc
            .inputs
            .iter()
            .map(|t| handles.get_float_tensor::<B>(t))
            .collect();
        let outputs = (self.run)(inputs);
        assert_eq!(
            outputs.len(),
            self.desc.outputs.len(),
            "custom operation {}: outputs",
            self.desc.id
        );
        for (ir, tensor) in self.desc.outputs.iter().zip(outputs) {
            handles.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

/// Registers the custom operation `name` on `inputs` (float tensors of one fusion client, at
/// least one) with outputs of the given shapes and dtypes; `run` computes the outputs on the
/// inner backend when the stream executes it. Returns the outputs, in order.
pub fn register<B: FusionBackend>(
    name: &'static str,
    inputs: Vec<FloatTensor<Fusion<B>>>,
    outputs: Vec<(Shape, DType)>,
    run: impl Fn(Vec<FloatTensor<B>>) -> Vec<FloatTensor<B>> + Send + Sync + 'static,
) -> Vec<FloatTensor<Fusion<B>>> {
    let client = inputs
        .first()
        .unwrap_or_else(|| panic!("custom operation {name}: no input"))
        .client
        .clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        Custom::<B> {
            desc,
            run: Arc::new(run),
        },
    )
}

/// The `N` outputs of a custom operation as an array.
pub fn outputs<B: FusionBackend, const N: usize>(
    name: &str,
    tensors: Vec<FloatTensor<Fusion<B>>>,
) -> [FloatTensor<Fusion<B>>; N] {
    let len = tensors.len();
    tensors
        .try_into()
        .unwrap_or_else(|_| panic!("custom operation {name}: {len} outputs, not {N}"))
}

/// The `N` inputs of a custom operation's run as an array.
pub fn inputs<B: burn::tensor::backend::Backend, const N: usize>(
    name: &str,
    tensors: Vec<FloatTensor<B>>,
) -> [FloatTensor<B>; N] {
    let len = tensors.len();
    tensors
        .try_into()
        .unwrap_or_else(|_| panic!("custom operation {name}: {len} inputs, not {N}"))
}
