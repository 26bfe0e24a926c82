//! What the memory tests share: a small transformer whose step memory is dominated by
//! activations, and a deterministic batch for it.

use memwall_core::spec::ModelConfig;
use memwall_runner::data::Batch;

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

/// A deterministic batch of `cfg`'s shape (token ids below 300, document positions).
pub fn batch(cfg: &ModelConfig) -> Batch {
    let n = cfg.batch * cfg.seq_len;
    let ids: Vec<i64> = (0..n as i64 + 1).map(|i| (i * 37 + 11) % 300).collect();
    Batch {
        batch: cfg.batch,
        seq_len: cfg.seq_len,
        inputs: ids[..n].to_vec(),
        targets: ids[1..].to_vec(),
        positions: (0..n as i64).map(|i| i % cfg.seq_len as i64).collect(),
    }
}
