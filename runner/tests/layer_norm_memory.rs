//! The layer-norm operation's memory on the CPU. The counting allocator is process-wide, so
//! this file holds a single test (its own process).

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use memwall_core::spec::ModelConfig;
use memwall_runner::model::norm::LayerNormSaving;
use memwall_runner::model::InitModel;

mod common;

type B = Autodiff<Flex>;

#[test]
fn a_block_keeps_one_tensor_less_per_norm_at_each_step() {
    let cfg = ModelConfig {
        layers: 1,
        d_model: 256,
        heads: 4,
        d_ff: 512,
        seq_len: 256,
        batch: 4,
        vocab: 300,
        tie_embeddings: true,
    };
    let device = Default::default();
    B::seed(&device, 5);
    let model = cfg.init::<B>(&device);
    let x = Tensor::<B, 3>::random(
        [cfg.batch, cfg.seq_len, cfg.d_model],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let measure = |saving: LayerNormSaving| {
        common::block_memory(&model.clone().with_layer_norm(saving).blocks[0], &x)
    };
    let (composed_peak, composed) = measure(LayerNormSaving::Composed);
    let (input_peak, input) = measure(LayerNormSaving::SavesInput);
    let (output_peak, output) = measure(LayerNormSaving::SavesOutput);
    // One [batch, seq, d_model] f32 tensor, and the f32 row statistics of one norm.
    let rows = cfg.batch * cfg.seq_len;
    let tensor = (rows * cfg.d_model * 4) as u64;
    let stats = (2 * rows * 4) as u64;
    eprintln!(
        "kept after forward / peak: composed {composed} / {composed_peak} B, saves_input \
         {input} / {input_peak} B, saves_output {output} / {output_peak} B; one tensor {tensor} B"
    );
    // Burn's norm keeps the centered input and the normalized output of both norms; saving the
    // input keeps one tensor per norm (the first norm's input is the caller's); saving the
    // output keeps only the statistics.
    assert!(
        composed >= input + 2 * tensor,
        "kept: composed {composed} B, saves_input {input} B, one tensor {tensor} B"
    );
    assert!(
        input + 2 * stats >= output + tensor,
        "kept: saves_input {input} B, saves_output {output} B, one tensor {tensor} B"
    );
    assert!(
        composed_peak >= input_peak + tensor && input_peak >= output_peak,
        "peak: composed {composed_peak} B, saves_input {input_peak} B, saves_output \
         {output_peak} B, one tensor {tensor} B"
    );
}
