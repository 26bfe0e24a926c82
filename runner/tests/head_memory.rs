//! The head with its logits recomputed in chunks holds no `[tokens, vocab]` tensor of the whole
//! batch: at a shape where the logits dominate, one checkpointed training step's measured peak
//! falls by at least one and a half logits tensors against the autodiff head, and the
//! profiling pass's head peak (what the planner plans with) falls with it. The counting
//! allocator is process-wide, so this file holds a single test.

mod common;

use burn::optim::AdamWConfig;
use burn::tensor::backend::Backend;
use memwall_core::spec::ModelConfig;
use memwall_core::strategy::every_k;
use memwall_runner::measure::HeapProbe;
use memwall_runner::model::{InitModel, TransformerLm};
use memwall_runner::train::profile::profile_executor;
use memwall_runner::train::Inputs;

type B = common::Cpu;

/// Two blocks, 4 x 64 tokens and a vocabulary of 4096: the logits, 256 x 4096 f32 (4 MiB), are
/// the step's largest tensor.
fn vocabulary_dominated() -> ModelConfig {
    ModelConfig {
        layers: 2,
        d_model: 32,
        heads: 2,
        d_ff: 64,
        seq_len: 64,
        batch: 4,
        vocab: 4096,
        tie_embeddings: true,
    }
}

#[test]
fn recomputing_the_logits_in_chunks_lowers_the_step_and_head_peaks() {
    let cfg = vocabulary_dominated();
    let device = Default::default();
    B::seed(&device, 9);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&common::batch(&cfg), &device);
    let logits = (cfg.batch * cfg.seq_len * cfg.vocab * 4) as u64;
    let head_peak = |m: &TransformerLm<B>| {
        profile_executor(
            m,
            &inputs,
            &device,
            &mut HeapProbe::default(),
            false,
            || AdamWConfig::new().init::<B, TransformerLm<B>>(),
        )
        .head_peak_bytes
    };
    let kept = (
        common::step_peak(&model, &inputs, Some(&every_k(cfg.layers, 1))),
        head_peak(&model),
    );
    let chunked_model = model.clone().with_head_chunks(Some(8));
    let chunked = (
        common::step_peak(&chunked_model, &inputs, Some(&every_k(cfg.layers, 1))),
        head_peak(&chunked_model),
    );
    assert!(
        chunked.0 + logits * 3 / 2 <= kept.0,
        "step peak: {} bytes with the logits kept, {} recomputed in 8 chunks; expected a drop \
         of at least 1.5 x {logits} bytes",
        kept.0,
        chunked.0
    );
    assert!(
        chunked.1 + logits * 3 / 2 <= kept.1,
        "head peak of the profiling pass: {} kept, {} chunked",
        kept.1,
        chunked.1
    );
}
