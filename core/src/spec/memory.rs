//! The memory a training job needs, estimated from its sizes before anything is allocated, and
//! the check that refuses sizes that cannot fit the device.
//!
//! Notation: `P` parameters ([`ModelConfig::parameter_count`]), of which `P_v = vocab * d_model`
//! (twice without head tying) are vocabulary tables; `b` bytes per element of the compute
//! precision (4 for f32, 2 for f16/bf16); `L` layers, `d` d_model, `f` d_ff, `a` heads, `T`
//! seq_len, `B` batch, `V` vocab. Every term is in bytes:
//!
//! - parameters `(P - P_v) b`, plus `(P - P_v) 4` for f32 master weights;
//! - vocabulary `P_v b` (plus `P_v 4` for master weights) and one batch's logits with their f32
//!   log-probabilities, `B T V (b + 4)`;
//! - gradients `P b` (plus `P 4` for master weights, cast back to f32); with the optimizer step
//!   fused into backward only the largest of one block and the vocabulary tables is held;
//! - optimizer state `2 P b` (AdamW's two moments in the parameters' dtype; `2 P 4` on f32
//!   master weights). Parameters, gradients and Adam moments as in Rajbhandari et al. 2020,
//!   "ZeRO", Section 3.1 (`2Ψ + 2Ψ + 12Ψ` bytes for mixed-precision Adam). Adafactor keeps f32
//!   row and column statistics of each matrix instead (`n + m` values for an `n x m` matrix, one
//!   per element of a vector; Shazeer and Stern 2018, Algorithm 4):
//!   `4 (L (14 d + 2 f) + V + T + 4 d)` bytes, a few MB where AdamW needs GB;
//! - activations per block and token `6d + 2f` elements kept for backward (Q, K, V and the
//!   attention output `4d`, the projection input `d`, MLP input `d`, pre- and post-GELU `2f`),
//!   plus what the two layer norms keep (`4d` for Burn's composed norm, its centered input and
//!   normalized output; `2d`, their inputs, for the norm that saves its input; none for the one
//!   that saves its output: `strategy::LayerNormSaving`), plus `a` per-row log-sum-exps for the
//!   memory-efficient attention
//!   or `2 a T` scores and probabilities for the naive one: Korthikanti et al. 2022, "Reducing
//!   Activation Recomputation in Large Transformer Models", Section 4.1, equation (1), without
//!   dropout masks. Without checkpointing all `L` blocks are kept; checkpointing every `K` blocks
//!   keeps `ceil(L / K)` block inputs (`d` per token) plus one `K`-block segment; budgets,
//!   Checkmate plans and Burn's balanced checkpointing are counted at their least, `K = 1`.
//!
//! The total is parameters + vocabulary + optimizer state + the larger of gradients and
//! activations: at the end of the forward pass every kept activation is live, at the optimizer
//! step every gradient is, and backward frees the one as it produces the other.
//!
//! It is an estimate, not a measurement (allocator slack, transient buffers and the backend's
//! workspace come on top). Against the 98 finished records of `peak_memory` and
//! `checkpoint_interval` in this repository's record stores (cpu profile on flex, exact peaks;
//! full profile on an H100, lower-bound peaks) it is 0.43 to 1.04 times the measured peak
//! allocated bytes (most over-estimates within 2%), so sizes whose estimate exceeds the
//! device's whole memory cannot run, and are refused before any allocation.

use super::{ModelConfig, OptimizerKind, Recompute, Strategy};
use crate::strategy::LayerNormSaving;
use std::fmt;

/// The estimated bytes of one training job, by kind (see the module's formulas). `f64` bytes:
/// absurd sizes (10^12 layers) overflow `u64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryEstimate {
    /// Parameters outside the vocabulary tables (blocks, position embedding, final norm), bytes.
    pub parameters: f64,
    /// Token embedding (and untied head) parameters, and one batch's logits, bytes.
    pub vocabulary: f64,
    /// Gradients held at once, bytes.
    pub gradients: f64,
    /// The optimizer's state: AdamW's two moments per parameter, or Adafactor's factored
    /// statistics, bytes.
    pub optimizer_state: f64,
    /// Activations kept for backward under the job's strategy, bytes.
    pub activations: f64,
}

impl MemoryEstimate {
    /// Estimates a job of `model` under `strategy` with AdamW.
    pub fn of(model: &ModelConfig, strategy: &Strategy) -> MemoryEstimate {
        Self::of_job(model, strategy, OptimizerKind::Adamw)
    }

    /// Estimates a job of `model` under `strategy` with `optimizer`.
    pub fn of_job(
        model: &ModelConfig,
        strategy: &Strategy,
        optimizer: OptimizerKind,
    ) -> MemoryEstimate {
        let (l, d, f, a, t, b_, v) = (
            model.layers as f64,
            model.d_model as f64,
            model.d_ff as f64,
            model.heads as f64,
            model.seq_len as f64,
            model.batch as f64,
            model.vocab as f64,
        );
        let b = strategy.precision.bytes() as f64;
        let master = if strategy.master_weights { 4.0 } else { 0.0 };
        let p_v = v * d * if model.tie_embeddings { 1.0 } else { 2.0 };
        let p_block = 4.0 * d * d + 2.0 * d * f + 4.0 * d;
        let p = l * p_block + p_v + t * d + 2.0 * d;
        let tokens = b_ * t;
        let gradient_params = if strategy.fused_optimizer {
            p_block.max(p_v)
        } else {
            p
        };
        let norms = match strategy.layer_norm {
            LayerNormSaving::Composed => 4.0 * d,
            LayerNormSaving::SavesInput => 2.0 * d,
            LayerNormSaving::SavesOutput => 0.0,
        };
        let per_block = 6.0 * d
            + norms
            + 2.0 * f
            + if strategy.attention.is_naive() {
                2.0 * a * t
            } else {
                a
            };
        let kept_blocks = match segment_len(strategy, model.layers) {
            None => l * per_block,
            Some(k) => {
                // In backward: one segment's activations, or, nested, its inner checkpoints
                // and one inner segment's.
                let held = match strategy.nested_checkpoint.filter(|&j| j >= 1 && j < k) {
                    Some(j) => ((k as f64 / j as f64).ceil() - 1.0) * d + j as f64 * per_block,
                    None => k as f64 * per_block,
                };
                (l / k as f64).ceil() * d + held
            }
        };
        MemoryEstimate {
            parameters: (p - p_v) * (b + master),
            vocabulary: p_v * (b + master) + tokens * v * (b + 4.0),
            gradients: gradient_params * (b + master),
            optimizer_state: match optimizer {
                OptimizerKind::Adamw => 2.0 * p * if master > 0.0 { 4.0 } else { b },
                // Row + column statistics of q, k, v, o (4 x 2d), MLP up and down (2 (d + f)),
                // the two norms' weights and biases (4d) per block; the embedding (V + d), the
                // positions (T + d) and the final norm (2d); f32 whatever the dtype.
                OptimizerKind::Adafactor => {
                    4.0 * (l * (10.0 * d + 2.0 * f + 4.0 * d) + v + t + 2.0 * d + 2.0 * d)
                }
            },
            activations: tokens * kept_blocks * b,
        }
    }

    /// The peak, bytes: parameters, vocabulary tables and optimizer state, plus the larger of
    /// gradients and activations (not live at their largest together).
    pub fn total(&self) -> f64 {
        self.parameters
            + self.vocabulary
            + self.optimizer_state
            + self.gradients.max(self.activations)
    }
}

/// Blocks per kept segment of `strategy`, or `None` when every block's activations are kept;
/// strategies whose plan depends on measured costs (budget, Checkmate), explicit plans and
/// balanced checkpointing count at their least, 1.
fn segment_len(strategy: &Strategy, layers: usize) -> Option<usize> {
    match &strategy.recompute {
        Recompute::None => None,
        Recompute::EveryK(_) | Recompute::Sqrt => {
            strategy.recompute.checkpoint().segment_len(layers)
        }
        Recompute::Budget(_)
        | Recompute::Checkmate(_)
        | Recompute::Explicit(_)
        | Recompute::Balanced => Some(1),
    }
}

/// `bytes` in binary units (B, KiB, ... EiB, then powers of ten of EiB).
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut x = bytes;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    if x >= 1e4 {
        format!("{x:.2e} {}", UNITS[i])
    } else if i == 0 {
        format!("{x:.0} B")
    } else {
        format!("{x:.1} {}", UNITS[i])
    }
}

impl fmt::Display for MemoryEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (parameters {}, vocabulary tables {}, gradients {}, optimizer state {}, activations {})",
            human_bytes(self.total()),
            human_bytes(self.parameters),
            human_bytes(self.vocabulary),
            human_bytes(self.gradients),
            human_bytes(self.optimizer_state),
            human_bytes(self.activations)
        )
    }
}

/// The memory of the device a job would run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Total bytes of the device (host RAM on the CPU, the GPU's memory on CUDA).
    pub total_bytes: u64,
    /// What the bytes are, for messages (e.g. "host RAM", "memory of NVIDIA H100 80GB HBM3").
    pub what: String,
}

/// Why a job's sizes cannot fit: the model field most responsible, the estimate, and the fix.
#[derive(Debug, Clone, PartialEq)]
pub struct TooLarge {
    /// The model field to lower (`layers`, `d_model`, `d_ff`, `seq_len`, `batch`, `vocab`).
    pub field: &'static str,
    /// The job's estimate.
    pub estimate: MemoryEstimate,
    /// The largest value of `field` whose estimate fits, the other sizes unchanged (`None` when
    /// not even its least value fits).
    pub largest_fitting: Option<u64>,
    /// The sentence for the user: the estimate, the device, the accepted range of the field.
    pub message: String,
}

/// The model sizes that can be lowered to make a job fit, with their least valid values.
const SIZES: [(&str, usize); 6] = [
    ("vocab", 260),
    ("layers", 1),
    ("d_model", 1),
    ("d_ff", 1),
    ("seq_len", 1),
    ("batch", 1),
];

fn with_size(model: &ModelConfig, field: &str, value: usize) -> ModelConfig {
    let mut m = *model;
    match field {
        "vocab" => m.vocab = value,
        "layers" => m.layers = value,
        "d_model" => m.d_model = value,
        "d_ff" => m.d_ff = value,
        "seq_len" => m.seq_len = value,
        _ => m.batch = value,
    }
    m
}

fn size_of(model: &ModelConfig, field: &str) -> usize {
    match field {
        "vocab" => model.vocab,
        "layers" => model.layers,
        "d_model" => model.d_model,
        "d_ff" => model.d_ff,
        "seq_len" => model.seq_len,
        _ => model.batch,
    }
}

/// Checks that a job of `model` under `strategy` can fit `device`: `Ok` when its estimate is at
/// most the device's total bytes. Otherwise names the field whose lowering shrinks the estimate
/// most (each size set in turn to its least valid value) and the largest value of that field
/// that fits, found by bisection.
///
/// # Errors
/// [`TooLarge`] with the estimate and the fix.
pub fn check_fits(
    model: &ModelConfig,
    strategy: &Strategy,
    optimizer: OptimizerKind,
    device: &DeviceMemory,
) -> Result<MemoryEstimate, Box<TooLarge>> {
    let estimate = MemoryEstimate::of_job(model, strategy, optimizer);
    let cap = device.total_bytes as f64;
    if estimate.total() <= cap {
        return Ok(estimate);
    }
    let total_with = |field: &str, v: usize| {
        MemoryEstimate::of_job(&with_size(model, field, v), strategy, optimizer).total()
    };
    let (field, least) = SIZES
        .iter()
        .copied()
        .min_by(|x, y| total_with(x.0, x.1).total_cmp(&total_with(y.0, y.1)))
        .expect("sizes are listed");
    let current = size_of(model, field);
    let largest_fitting = (total_with(field, least) <= cap).then(|| {
        // Largest v in [least, current) with total_with(v) <= cap (the total grows with v).
        let (mut lo, mut hi) = (least, current);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if total_with(field, mid) <= cap {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo as u64
    });
    let range = match largest_fitting {
        Some(n) => format!(
            "with the other sizes as they are, `{field}` must be at most {n} (accepted range [{least}, {n}])"
        ),
        None => format!(
            "not even `{field}` = {least} fits with the other sizes as they are: lower the other sizes too"
        ),
    };
    let message = format!(
        "`{field}` = {current} needs an estimated {estimate}, more than the {} of the device's {}; {range}",
        human_bytes(cap),
        device.what
    );
    Err(Box::new(TooLarge {
        field,
        estimate,
        largest_fitting,
        message,
    }))
}

/// Bytes the tokenizer trainer reserves for a vocabulary of `vocab` tokens before it learns any
/// merge: the `tokenizers` crate's BPE trainer allocates its token-to-id map and id-to-token list
/// with capacity `vocab` (`BpeTrainer::do_train`), at least 24 bytes per token string and 32
/// per map entry, so 56 bytes a token (a floor: hash-map buckets round up).
pub fn tokenizer_training_bytes(vocab: usize) -> f64 {
    56.0 * vocab as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{CheckpointSpec, ConfigSpec, Precision};

    fn model() -> ModelConfig {
        ModelConfig {
            layers: 8,
            d_model: 128,
            heads: 4,
            d_ff: 512,
            seq_len: 128,
            batch: 8,
            vocab: 2048,
            tie_embeddings: true,
        }
    }

    fn strategy(edit: impl FnOnce(&mut ConfigSpec)) -> Strategy {
        let mut c: ConfigSpec = toml::from_str("name = \"c\"").unwrap();
        edit(&mut c);
        Strategy::from(&c)
    }

    #[test]
    fn parameters_gradients_and_adam_state_follow_the_parameter_count() {
        let m = model();
        let e = MemoryEstimate::of(&m, &strategy(|_| {}));
        let p = m.parameter_count() as f64;
        assert_eq!(e.parameters + (m.vocab * m.d_model * 4) as f64, 4.0 * p);
        assert_eq!(e.gradients, 4.0 * p);
        assert_eq!(e.optimizer_state, 8.0 * p);
        let half = MemoryEstimate::of(&m, &strategy(|c| c.precision = Precision::Bf16));
        assert_eq!(half.optimizer_state, 4.0 * p);
    }

    #[test]
    fn adafactor_keeps_row_and_column_statistics_instead_of_two_moments() {
        let m = model();
        let s = strategy(|_| {});
        let adamw = MemoryEstimate::of_job(&m, &s, OptimizerKind::Adamw);
        let ada = MemoryEstimate::of_job(&m, &s, OptimizerKind::Adafactor);
        let p = m.parameter_count() as f64;
        assert_eq!(adamw.optimizer_state, 2.0 * p * 4.0);
        let (d, f) = (m.d_model as f64, m.d_ff as f64);
        let stats = m.layers as f64 * (14.0 * d + 2.0 * f) + (m.vocab + m.seq_len) as f64 + 4.0 * d;
        assert_eq!(ada.optimizer_state, 4.0 * stats);
        assert!(ada.optimizer_state < adamw.optimizer_state / 50.0);
        // Everything else is the optimizer's business only.
        assert_eq!(ada.activations, adamw.activations);
        assert_eq!(ada.gradients, adamw.gradients);
    }

    #[test]
    fn checkpointing_and_attention_change_the_activations() {
        let m = model();
        let plain = MemoryEstimate::of(&m, &strategy(|_| {}));
        let every2 = MemoryEstimate::of(&m, &strategy(|c| c.checkpoint = CheckpointSpec::Every(2)));
        let every1 = MemoryEstimate::of(&m, &strategy(|c| c.checkpoint = CheckpointSpec::Every(1)));
        let budget = MemoryEstimate::of(&m, &strategy(|c| c.budget = Some(0.5)));
        let naive = MemoryEstimate::of(
            &m,
            &strategy(|c| c.attention = crate::spec::AttentionOption::Naive),
        );
        assert!(every1.activations < every2.activations);
        assert!(every2.activations < plain.activations);
        assert_eq!(budget.activations, every1.activations);
        assert!(naive.activations > plain.activations);
        // Nesting 1-block inner segments in K = 2 keeps one more checkpoint and one block's
        // activations fewer than K = 2.
        let nested = MemoryEstimate::of(
            &m,
            &strategy(|c| {
                c.checkpoint = CheckpointSpec::Every(2);
                c.nested_checkpoint = Some(1);
            }),
        );
        // K = 1 keeps 8 checkpoints and one block; nested K = 2, J = 1 keeps 4 + 1 and one block.
        let checkpoint = (m.batch * m.seq_len * m.d_model * 4) as f64;
        assert!(nested.activations < every2.activations);
        assert_eq!(every1.activations - nested.activations, 3.0 * checkpoint);
    }

    #[test]
    fn layer_norms_that_keep_less_estimate_fewer_activation_bytes() {
        let m = model();
        let of = |saving| MemoryEstimate::of(&m, &strategy(|c| c.layer_norm = saving)).activations;
        let (composed, input, output) = (
            of(LayerNormSaving::Composed),
            of(LayerNormSaving::SavesInput),
            of(LayerNormSaving::SavesOutput),
        );
        // Two norms per block, one [batch * seq, d_model] f32 tensor fewer each, per step down.
        let one_tensor_per_norm = (2 * m.layers * m.batch * m.seq_len * m.d_model * 4) as f64;
        assert_eq!(composed - input, one_tensor_per_norm);
        assert_eq!(input - output, one_tensor_per_norm);
    }

    #[test]
    fn a_size_that_cannot_fit_is_named_with_the_largest_that_does() {
        let device = DeviceMemory {
            total_bytes: 1 << 30,
            what: "test RAM".into(),
        };
        let s = strategy(|_| {});
        assert!(check_fits(&model(), &s, OptimizerKind::Adamw, &device).is_ok());
        for (field, edit) in [
            (
                "vocab",
                (|m: &mut ModelConfig| m.vocab = 1_000_000_000_000) as fn(&mut ModelConfig),
            ),
            ("layers", |m| m.layers = 1_000_000_000_000),
            ("d_model", |m| m.d_model = 1 << 40),
            ("batch", |m| m.batch = 1 << 30),
        ] {
            let mut m = model();
            edit(&mut m);
            let err = check_fits(&m, &s, OptimizerKind::Adamw, &device).unwrap_err();
            assert_eq!(err.field, field, "{}", err.message);
            let n = err.largest_fitting.expect("the least value fits") as usize;
            let fits = MemoryEstimate::of(&with_size(&m, field, n), &s).total();
            let over = MemoryEstimate::of(&with_size(&m, field, n + 1), &s).total();
            assert!(fits <= device.total_bytes as f64 && over > device.total_bytes as f64);
            assert!(
                err.message.contains(&format!("`{field}`")),
                "{}",
                err.message
            );
            assert!(err.message.contains("test RAM"), "{}", err.message);
        }
    }
}
