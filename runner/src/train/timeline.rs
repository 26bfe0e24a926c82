//! The sizes a step's peak breakdown is derived from ([`memwall_core::timeline::breakdown`]):
//! the model's parameters (counted from their shapes), the optimizer's state by its definition
//! and the job's per-block profile.

use crate::model::TransformerLm;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use memwall_core::spec::{JobSpec, OptimizerKind, Precision};
use memwall_core::strategy::BlockCost;
use memwall_core::timeline::KnownSizes;

/// The shape of every float parameter of a module.
struct Shapes(Vec<Vec<usize>>);

impl<B: Backend> ModuleVisitor<B> for Shapes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.push(param.val().dims().to_vec());
    }
}

/// The shapes of `module`'s float parameters.
pub fn parameter_shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<usize>> {
    let mut v = Shapes(Vec::new());
    module.visit(&mut v);
    v.0
}

/// Elements of a shape.
fn elements(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64
}

/// Elements of the optimizer state of one parameter of `shape`: AdamW two moments of its size;
/// Adafactor (memwall-runner's `train::adafactor`) the row sums and column sums of its `[n, m]`
/// view for a matrix (`n` the product of the leading dimensions, `m` the last), one second
/// moment per element for a vector.
pub fn state_elements(optimizer: OptimizerKind, shape: &[usize]) -> u64 {
    match optimizer {
        OptimizerKind::Adamw => 2 * elements(shape),
        OptimizerKind::Adafactor => match shape {
            [] => 1,
            [n] => *n as u64,
            [lead @ .., m] => lead.iter().product::<usize>() as u64 + *m as u64,
        },
    }
}

/// Bytes per element of the parameters of a job that trains in `precision` (no master
/// weights).
fn bytes_per_element(precision: Precision) -> u64 {
    match precision {
        Precision::F32 => 4,
        Precision::F16 | Precision::Bf16 => 2,
    }
}

/// The [`KnownSizes`] of `spec`'s job on `model` with the per-block profile `blocks`: each
/// parameter's elements times the precision's bytes, the optimizer state by
/// [`state_elements`] (AdamW's in the parameters' dtype, Adafactor's in f32), the blocks'
/// activation and input bytes as profiled.
pub fn known_sizes<B: Backend>(
    spec: &JobSpec,
    model: &TransformerLm<B>,
    blocks: &[BlockCost],
) -> KnownSizes {
    let per = bytes_per_element(spec.strategy.precision);
    let bytes = |shapes: &[Vec<usize>]| shapes.iter().map(|s| elements(s) * per).sum::<u64>();
    let all = parameter_shapes(model);
    let (state_per, state_dtype) = match spec.train.optimizer {
        OptimizerKind::Adamw => (per, "the parameters' dtype"),
        OptimizerKind::Adafactor => (4, "f32"),
    };
    let optimizer_state_bytes = all
        .iter()
        .map(|s| state_elements(spec.train.optimizer, s) * state_per)
        .sum();
    let optimizer_state_how = match spec.train.optimizer {
        OptimizerKind::Adamw => {
            format!("AdamW: two moments per parameter element, in {state_dtype} ({per} bytes)")
        }
        OptimizerKind::Adafactor => format!(
            "Adafactor: per matrix [n, m] its n row sums and m column sums, per vector one \
             second moment per element, in {state_dtype}"
        ),
    };
    let token = bytes(&parameter_shapes(&model.token_embedding));
    let head_own = model.head.as_ref().map(|h| bytes(&parameter_shapes(h)));
    KnownSizes {
        parameter_bytes: bytes(&all),
        optimizer_state_bytes,
        optimizer_state_how,
        block_parameter_bytes: model
            .blocks
            .iter()
            .map(|b| bytes(&parameter_shapes(b)))
            .collect(),
        head_grad_bytes: bytes(&parameter_shapes(&model.norm_final)) + head_own.unwrap_or(token),
        tied_embedding_bytes: if head_own.is_none() { token } else { 0 },
        embedding_parameter_bytes: token + bytes(&parameter_shapes(&model.position_embedding)),
        block_activation_bytes: blocks.iter().map(|b| b.activation_bytes).collect(),
        block_input_bytes: blocks.iter().map(|b| b.boundary_bytes).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimizer_state_follows_each_optimizer_s_definition() {
        assert_eq!(state_elements(OptimizerKind::Adamw, &[3, 5]), 30);
        assert_eq!(state_elements(OptimizerKind::Adamw, &[7]), 14);
        // Adafactor: rows + columns of the [n, m] view; a vector keeps one value per element.
        assert_eq!(state_elements(OptimizerKind::Adafactor, &[3, 5]), 8);
        assert_eq!(state_elements(OptimizerKind::Adafactor, &[2, 3, 5]), 11);
        assert_eq!(state_elements(OptimizerKind::Adafactor, &[7]), 7);
    }
}
