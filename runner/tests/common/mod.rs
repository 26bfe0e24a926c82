//! What the memory tests share: a small transformer whose step memory is dominated by
//! activations, a deterministic batch for it, and one block's measured memory.

// Every test binary includes this module and uses a part of it.
#![allow(dead_code)]

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use memwall_core::spec::ModelConfig;
use memwall_core::strategy::Segment;
use memwall_runner::data::Batch;
use memwall_runner::measure::{allocated_bytes, peak_allocated_bytes, reset_peak, HeapProbe};
use memwall_runner::model::{InitModel, TransformerLm};
use memwall_runner::train::{train_step, Inputs};

/// The memory tests' backend: Flex (f32) with autodiff.
pub type Cpu = Autodiff<Flex>;

/// Six blocks of d_model 32 over 8 x 128 tokens: activations dominate the step's peak.
pub fn activation_dominated() -> ModelConfig {
    ModelConfig {
        layers: 6,
        d_model: 32,
        heads: 2,
        d_ff: 64,
        seq_len: 128,
        batch: 8,
        vocab: 300,
        tie_embeddings: true,
    }
}

/// [`activation_dominated`]'s model, initialized with seed 5 on the default CPU device, and its
/// [`batch`] as training inputs.
pub fn activation_dominated_model() -> (ModelConfig, TransformerLm<Cpu>, Inputs<Cpu>) {
    let cfg = activation_dominated();
    let device = Default::default();
    Cpu::seed(&device, 5);
    let model = cfg.init::<Cpu>(&device);
    let inputs = Inputs::<Cpu>::new(&batch(&cfg), &device);
    (cfg, model, inputs)
}

/// A deterministic batch of `cfg`'s shape (token ids below `cfg.vocab`, document positions).
pub fn batch(cfg: &ModelConfig) -> Batch {
    let n = cfg.batch * cfg.seq_len;
    let ids: Vec<i64> = (0..n as i64 + 1)
        .map(|i| (i * 37 + 11) % cfg.vocab as i64)
        .collect();
    Batch {
        batch: cfg.batch,
        seq_len: cfg.seq_len,
        inputs: ids[..n].to_vec(),
        targets: ids[1..].to_vec(),
        positions: (0..n as i64).map(|i| i % cfg.seq_len as i64).collect(),
    }
}

/// One block's forward and backward on `x` (a fresh leaf copy), measured with the counting
/// allocator: `(peak, kept)`, the high-water mark of forward + backward and the bytes the
/// autodiff graph holds between them, both above the live bytes at the start (so `x` itself,
/// which the caller holds, is not counted). The counter is process-wide: a test binary that
/// uses this holds a single test.
pub fn block_memory(
    block: &memwall_runner::model::Block<burn::backend::Autodiff<burn::backend::Flex>>,
    x: &burn::tensor::Tensor<burn::backend::Autodiff<burn::backend::Flex>, 3>,
) -> (u64, u64) {
    use memwall_runner::measure::{allocated_bytes, peak_allocated_bytes, reset_peak};
    let x = x.clone().detach().require_grad();
    let base = allocated_bytes();
    reset_peak();
    let y = block.forward(x.clone());
    let kept = allocated_bytes() - base;
    let grads = y.sum().backward();
    let g = x.grad(&grads).expect("input gradient");
    drop((grads, g));
    (peak_allocated_bytes() - base, kept)
}

/// Peak above the steady state (bytes) of the second of two AdamW training steps of `model` on
/// `inputs` under the segment `plan` (`None`: plain backward); the first step allocates the
/// optimizer state. The counting allocator is process-wide: one test per file.
pub fn step_peak(
    model: &TransformerLm<Cpu>,
    inputs: &Inputs<Cpu>,
    plan: Option<&[Segment]>,
) -> u64 {
    use burn::optim::AdamWConfig;
    let mut optim = AdamWConfig::new().init::<Cpu, TransformerLm<Cpu>>();
    let mut probe = HeapProbe::default();
    let (m, _) = train_step(
        model.clone(),
        &mut optim,
        1e-3,
        inputs,
        plan,
        false,
        &mut probe,
    );
    reset_peak();
    let steady = allocated_bytes();
    let (m, loss) = train_step(m, &mut optim, 1e-3, inputs, plan, false, &mut probe);
    let peak = peak_allocated_bytes() - steady;
    drop((m, loss));
    peak
}
