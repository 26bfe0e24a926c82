//! The memory-efficient attention's memory on the CPU. The counting allocator is process-wide,
//! so this file holds a single test (its own process).

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use memwall_core::spec::ModelConfig;
use memwall_runner::model::attention::{Attention, Tiles};
use memwall_runner::model::InitModel;

mod common;

type B = Autodiff<Flex>;

#[test]
fn a_block_at_seq_512_keeps_no_score_tensor() {
    let cfg = ModelConfig {
        layers: 1,
        d_model: 64,
        heads: 4,
        d_ff: 128,
        seq_len: 512,
        batch: 2,
        vocab: 300,
        tie_embeddings: true,
    };
    let device = Default::default();
    B::seed(&device, 3);
    let model = cfg.init::<B>(&device);
    let x = Tensor::<B, 3>::random(
        [cfg.batch, cfg.seq_len, cfg.d_model],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let measure = |attention: Attention| {
        common::block_memory(&model.clone().with_attention(attention).blocks[0], &x)
    };
    let (naive_peak, naive_kept) = measure(Attention::Naive);
    let (ours_peak, ours_kept) = measure(Attention::MemoryEfficient {
        tiles: Tiles {
            query: 128,
            key: 128,
        },
    });
    // One [batch, heads, seq, seq] f32 tensor: 8 MiB here.
    let scores = (cfg.batch * cfg.heads * cfg.seq_len * cfg.seq_len * 4) as u64;
    eprintln!(
        "naive: peak {naive_peak} B, kept {naive_kept} B; memory-efficient: peak {ours_peak} B, kept {ours_kept} B; one score tensor {scores} B"
    );
    // The naive attention keeps the scores and the probabilities (at least two score
    // tensors); ours keeps none.
    assert!(
        naive_kept >= ours_kept + 2 * scores,
        "kept after forward: naive {naive_kept} B, memory-efficient {ours_kept} B, scores {scores} B"
    );
    assert!(
        naive_peak >= ours_peak + scores,
        "peak: naive {naive_peak} B, memory-efficient {ours_peak} B, scores {scores} B"
    );
}
