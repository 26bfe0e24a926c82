//! The experiment file's schema (serde, unknown fields are errors) and its resolution for one
//! profile.

use super::{Profile, Study};
use crate::error::{Error, Result};
use crate::strategy::{Attention, LayerNormSaving, Tiles};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// `[study]`: what the study is and where its claims come from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StudyHeader {
    /// Folder name under `reports/` and `runs/` (letters, digits, `_`, `-`).
    pub name: String,
    /// Title of the study's report.
    pub title: String,
    /// The source document in `../shared/sources/` whose claims the study checks.
    pub source: String,
    /// The source document's own title, as it names itself (for the report's front matter).
    #[serde(default)]
    pub source_title: String,
    /// What runs the study: training jobs or one of the demos.
    pub kind: StudyKind,
    /// One paragraph for the report's introduction (Markdown).
    #[serde(default)]
    pub description: String,
    /// Notes printed under the introduction (deviations from the source, mappings).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Front-matter tags of the report.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The source's claim in words (quoted in the report beside our numbers), for studies whose
    /// configurations carry no numeric `claim`.
    #[serde(default)]
    pub claim: Option<String>,
    /// Runs of each configuration (`repeats = N`, default 1), interleaved: every
    /// configuration's first run before any second run, so slow drifts of the machine spread
    /// over all configurations. Each run is its own job and record ([`super::JobSpec::repeat`]).
    #[serde(default = "one")]
    pub repeats: usize,
    /// The configurations whose memory timelines the report overlays, one figure per model (at
    /// most [`MAX_TIMELINE_LINES`] of one model, each a configuration of the file; a model
    /// with none named: its control and first configurations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<String>,
    /// The study's place in the GPU suite (`memwall bundle --suite`): 1 runs first, when a
    /// session's minutes matter most; `None`: not in the suite. A training study's jobs travel
    /// in the bundle; a `fusion_ir` study's CUDA chains run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_suite: Option<u32>,
    /// PyTorch eager runs the study's configurations as twins (`memwall reference`, the
    /// bundle's `torch_peak_memory.py`): a training study only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pytorch_reference: bool,
    /// The study whose control the kernel-attribution benchmark times operation by operation on
    /// a GPU, and whose report shows it: one training study at most.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_attribution: bool,
}

/// Highest place in the GPU suite (`study.gpu_suite`).
pub const MAX_SUITE_PLACE: u32 = 100;

/// Most lines a report's timeline figure overlays (more are unreadable).
pub const MAX_TIMELINE_LINES: usize = 8;

fn one() -> usize {
    1
}

/// Most runs of one configuration `repeats` may ask for.
pub const MAX_REPEATS: usize = 1000;

/// What runs a study.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StudyKind {
    /// Burn training jobs, one process each.
    Training,
    /// The blog's scalar recurrence with checkpoint interval K (`demos::checkpoint`).
    ScalarCheckpoint,
    /// The blog's fusion IR and fused elementwise loops (`demos::fusion`).
    FusionIr,
    /// The UIUC lecture's static memory planning (`demos::planner`).
    StaticPlanning,
    /// The CMU lecture's two-buffer inference (`demos::inference`).
    TwoBufferInference,
    /// The CMU lecture's 16-bit formats (`demos::precision`).
    SixteenBit,
    /// The CMU lecture's FSDP memory model and ring collectives (`demos::fsdp`).
    Fsdp,
    /// The UIUC lecture's reverse-mode AD worked example through Burn autodiff.
    AutodiffExample,
    /// Checkmate's optimal rematerialization and its baselines (`remat::study`).
    Checkmate,
}

/// `[profiles.<p>.model]`: the decoder-only transformer LM. Shapes: tokens `[batch, seq_len]`,
/// hidden states `[batch, seq_len, d_model]`, logits `[batch, seq_len, vocab]`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Number of transformer blocks.
    pub layers: usize,
    /// Width of the hidden states (the residual stream), elements per token.
    pub d_model: usize,
    /// Attention heads; must divide `d_model`.
    pub heads: usize,
    /// Hidden width of the MLP.
    pub d_ff: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Tokenizer vocabulary size to train (the trained tokenizer may have fewer tokens on a
    /// small corpus; the model uses the trained size).
    pub vocab: usize,
    /// Share the token embedding with the LM head ("head tying").
    #[serde(default = "yes")]
    pub tie_embeddings: bool,
}

fn yes() -> bool {
    true
}

/// Optimizer of the training loop.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// AdamW (Loshchilov and Hutter, 2019): two states per parameter, in the parameters'
    /// dtype.
    Adamw,
    /// Adafactor (Shazeer and Stern, 2018, "Adafactor: Adaptive Learning Rates with Sublinear
    /// Memory Cost", ICML, arXiv:1804.04235) as forgather's
    /// `forgather.ml.optim.adafactor.Adafactor` (jdinalt/forgather,
    /// `src/forgather/ml/optim/adafactor.py`) runs it for the `peak_memory` study: Algorithm 4
    /// for matrices (factored second moments, one f32 value per row and per column, Section 3)
    /// and Algorithm 5 for vectors (an unfactored f32 second moment), no first moment, update
    /// clipping at d = 1 (Section 6), the increasing decay `beta2_t = 1 - t^-0.8` (Section 7.1;
    /// forgather clamps it at 0.999), epsilon_1 = 1e-30, an absolute learning rate (forgather's
    /// `relative_step = False`, not the relative step of Section 8) and decoupled weight decay.
    /// The fixed hyperparameters are constants of memwall-runner's `train::adafactor` module;
    /// `lr` and `weight_decay` come from [`TrainConfig`].
    Adafactor,
}

impl OptimizerKind {
    /// The lowercase name used in experiment files and plans: "adamw" or "adafactor".
    pub fn as_str(self) -> &'static str {
        match self {
            OptimizerKind::Adamw => "adamw",
            OptimizerKind::Adafactor => "adafactor",
        }
    }
}

/// Resolved training settings.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Measured steps (timed, their peaks recorded).
    pub steps: usize,
    /// Steps run first and excluded from timing (kernel compilation, allocator warm-up).
    pub warmup_steps: usize,
    /// Learning rate (default 3e-4), in (0, 1].
    #[serde(with = "crate::record::nonfinite")]
    pub lr: f64,
    /// Decoupled weight decay of the optimizer (AdamW or Adafactor; default 0), at least 0 with
    /// `lr * weight_decay < 1`.
    #[serde(with = "crate::record::nonfinite")]
    pub weight_decay: f64,
    /// The optimizer (default AdamW).
    pub optimizer: OptimizerKind,
    /// Seed of the backend's RNG (parameter initialization) and of batch sampling (default 42).
    pub seed: u64,
    /// Held-out batches for eval loss / perplexity at the end.
    pub eval_batches: usize,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrainOverride {
    steps: Option<usize>,
    warmup_steps: Option<usize>,
    lr: Option<f64>,
    weight_decay: Option<f64>,
    optimizer: Option<OptimizerKind>,
    seed: Option<u64>,
    eval_batches: Option<usize>,
}

impl TrainOverride {
    fn or(self, base: TrainOverride) -> TrainOverride {
        TrainOverride {
            steps: self.steps.or(base.steps),
            warmup_steps: self.warmup_steps.or(base.warmup_steps),
            lr: self.lr.or(base.lr),
            weight_decay: self.weight_decay.or(base.weight_decay),
            optimizer: self.optimizer.or(base.optimizer),
            seed: self.seed.or(base.seed),
            eval_batches: self.eval_batches.or(base.eval_batches),
        }
    }
    fn resolve(self) -> TrainConfig {
        TrainConfig {
            steps: self.steps.unwrap_or(10),
            warmup_steps: self.warmup_steps.unwrap_or(2),
            lr: self.lr.unwrap_or(3e-4),
            weight_decay: self.weight_decay.unwrap_or(0.0),
            optimizer: self.optimizer.unwrap_or(OptimizerKind::Adamw),
            seed: self.seed.unwrap_or(42),
            eval_batches: self.eval_batches.unwrap_or(4),
        }
    }
}

/// Resolved data settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DataConfig {
    /// Corpus: TinyStories plain text (stories separated by `<|endoftext|>`) or Parquet with a
    /// `text` column.
    pub path: PathBuf,
    /// Fraction of stories held out for evaluation (chosen by a hash of the story text).
    pub eval_fraction: f64,
    /// Use at most this many stories (in file order), if set.
    pub max_stories: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DataOverride {
    path: Option<String>,
    eval_fraction: Option<f64>,
    max_stories: Option<usize>,
}

impl DataOverride {
    fn or(self, base: DataOverride) -> DataOverride {
        DataOverride {
            path: self.path.or(base.path),
            eval_fraction: self.eval_fraction.or(base.eval_fraction),
            max_stories: self.max_stories.or(base.max_stories),
        }
    }
}

/// Numeric precision of parameters and activations.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    /// IEEE 754 single precision: 4 bytes per element.
    F32,
    /// IEEE 754 half precision: 2 bytes per element (5 exponent, 10 mantissa bits).
    F16,
    /// bfloat16: 2 bytes per element (f32's 8 exponent bits, 7 mantissa bits).
    Bf16,
}

impl Precision {
    /// The lowercase name used in experiment files and reports: "f32", "f16" or "bf16".
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 | Precision::Bf16 => 2,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Segment activation checkpointing: which block inputs the forward pass keeps.
///
/// In a file: `checkpoint = "none"`, `checkpoint = K` (keep the input of every K-th block;
/// backward recomputes one K-block segment at a time), or `checkpoint = "sqrt"`
/// (K = ceil(sqrt(layers)), Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost").
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(try_from = "RawCheckpoint", into = "RawCheckpoint")]
pub enum CheckpointSpec {
    #[default]
    /// No activation checkpointing: the forward pass keeps every block's activations.
    None,
    /// Keep the input of every K-th block; backward recomputes one K-block segment at a time.
    Every(usize),
    /// K = ceil(sqrt(layers)) (Chen et al. 2016).
    Sqrt,
}

impl CheckpointSpec {
    /// Blocks per segment for a model of `layers` blocks, or `None` without checkpointing.
    pub fn segment_len(self, layers: usize) -> Option<usize> {
        match self {
            CheckpointSpec::None => None,
            CheckpointSpec::Every(k) => Some(k.clamp(1, layers.max(1))),
            CheckpointSpec::Sqrt => Some(((layers as f64).sqrt().ceil() as usize).max(1)),
        }
    }
}

impl fmt::Display for CheckpointSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointSpec::None => f.write_str("none"),
            CheckpointSpec::Every(k) => write!(f, "{k}"),
            CheckpointSpec::Sqrt => f.write_str("sqrt"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum RawCheckpoint {
    Int(i64),
    Str(String),
}

impl TryFrom<RawCheckpoint> for CheckpointSpec {
    type Error = String;
    fn try_from(raw: RawCheckpoint) -> std::result::Result<Self, String> {
        match raw {
            RawCheckpoint::Int(k) if k >= 1 => Ok(CheckpointSpec::Every(k as usize)),
            RawCheckpoint::Int(k) => Err(format!(
                "checkpoint interval {k} is not positive: use an integer K >= 1, \"sqrt\" or \"none\""
            )),
            RawCheckpoint::Str(s) => match s.as_str() {
                "none" => Ok(CheckpointSpec::None),
                "sqrt" => Ok(CheckpointSpec::Sqrt),
                other => Err(format!(
                    "unknown checkpoint `{other}`: use an integer K >= 1, \"sqrt\" or \"none\""
                )),
            },
        }
    }
}

impl From<CheckpointSpec> for RawCheckpoint {
    fn from(c: CheckpointSpec) -> Self {
        match c {
            CheckpointSpec::None => RawCheckpoint::Str("none".into()),
            CheckpointSpec::Every(k) => RawCheckpoint::Int(k as i64),
            CheckpointSpec::Sqrt => RawCheckpoint::Str("sqrt".into()),
        }
    }
}

/// Loss scaling for 16-bit training: multiply the loss by S before backward so that small
/// gradients stay above the 16-bit underflow threshold, then divide the gradients by S in f32
/// (Micikevicius et al. 2018, "Mixed Precision Training", ICLR, §3.2).
///
/// In a file: `loss_scale = 1024.0` (static S), `loss_scale = "dynamic"` (S starts at 2^16,
/// halves and skips the step whenever a gradient is inf/NaN, doubles after 2000 clean steps: the
/// defaults of PyTorch's `GradScaler`), or `loss_scale = { init = 65536.0, growth_interval = 50 }`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(try_from = "RawLossScale", into = "RawLossScale")]
pub enum LossScale {
    /// A fixed scale S > 0.
    Static(f64),
    /// Dynamic scaling: initial S, and clean steps before S doubles.
    Dynamic {
        /// Initial loss scale S.
        init: f64,
        /// Consecutive steps without an inf/NaN gradient after which S doubles.
        growth_interval: usize,
    },
}

impl LossScale {
    /// PyTorch `GradScaler`'s defaults: init 2^16, growth interval 2000.
    pub const DYNAMIC_DEFAULT: LossScale = LossScale::Dynamic {
        init: 65536.0,
        growth_interval: 2000,
    };
}

impl fmt::Display for LossScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossScale::Static(s) => write!(f, "static {s}"),
            LossScale::Dynamic {
                init,
                growth_interval,
            } => write!(
                f,
                "dynamic (init {init}, growth every {growth_interval} steps)"
            ),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a positive number (static scale), \"dynamic\", or a table { init = 65536.0, growth_interval = 2000 } with a positive init and an integer growth_interval >= 1"
)]
enum RawLossScale {
    Num(f64),
    Str(String),
    Table(RawDynamic),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDynamic {
    init: Option<f64>,
    growth_interval: Option<usize>,
}

impl TryFrom<RawLossScale> for LossScale {
    type Error = String;
    fn try_from(raw: RawLossScale) -> std::result::Result<Self, String> {
        let LossScale::Dynamic {
            init: d_init,
            growth_interval: d_gi,
        } = LossScale::DYNAMIC_DEFAULT
        else {
            unreachable!("the default is dynamic")
        };
        match raw {
            RawLossScale::Num(s) if s.is_finite() && s > 0.0 => Ok(LossScale::Static(s)),
            RawLossScale::Num(s) => Err(format!(
                "loss scale {s} is not a positive finite number: use e.g. 1024.0 or \"dynamic\""
            )),
            RawLossScale::Str(s) if s == "dynamic" => Ok(LossScale::DYNAMIC_DEFAULT),
            RawLossScale::Str(s) => Err(format!(
                "unknown loss scale `{s}`: use a number, \"dynamic\" or {{ init = 65536.0, growth_interval = 2000 }}"
            )),
            RawLossScale::Table(RawDynamic {
                init,
                growth_interval,
            }) => {
                let init = init.unwrap_or(d_init);
                let growth_interval = growth_interval.unwrap_or(d_gi);
                if !(init.is_finite() && init > 0.0) || growth_interval == 0 {
                    return Err(format!(
                        "dynamic loss scale needs init > 0 and growth_interval >= 1 (got {init}, {growth_interval})"
                    ));
                }
                Ok(LossScale::Dynamic {
                    init,
                    growth_interval,
                })
            }
        }
    }
}

impl From<LossScale> for RawLossScale {
    fn from(l: LossScale) -> Self {
        match l {
            LossScale::Static(s) => RawLossScale::Num(s),
            LossScale::Dynamic {
                init,
                growth_interval,
            } => RawLossScale::Table(RawDynamic {
                init: Some(init),
                growth_interval: Some(growth_interval),
            }),
        }
    }
}

/// A source document's numbers for one configuration (shown beside ours in the report).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// Peak allocated memory, GiB.
    pub peak_gib: Option<f64>,
    /// Peak-memory reduction against the control, percent.
    pub reduction_pct: Option<f64>,
    /// Training throughput, sequences per second.
    pub samples_per_s: Option<f64>,
    /// Wall time as printed in the source (e.g. "1m 40s").
    pub time: Option<String>,
    /// Evaluation perplexity (compared with our `eval_perplexity`).
    pub perplexity: Option<f64>,
}

/// `attention = ...` of a configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionOption {
    /// The tiled, online-softmax attention with its own backward (FlashAttention-2).
    #[default]
    MemoryEfficient,
    /// Burn's attention (the naive composition under autodiff).
    Naive,
}

impl ConfigSpec {
    /// The configuration's one recompute strategy. The file's fields `checkpoint`, `budget`,
    /// `checkmate` and `balanced_checkpointing` are exclusive (checked when the file loads), so
    /// at most one of them is set.
    pub fn recompute(&self) -> super::Recompute {
        use super::Recompute;
        if let Some(f) = self.checkmate {
            Recompute::Checkmate(f)
        } else if let Some(b) = self.budget {
            Recompute::Budget(b)
        } else if self.balanced_checkpointing {
            Recompute::Balanced
        } else {
            match self.checkpoint {
                CheckpointSpec::None => Recompute::None,
                CheckpointSpec::Every(k) => Recompute::EveryK(k),
                CheckpointSpec::Sqrt => Recompute::Sqrt,
            }
        }
    }

    /// The attention this configuration runs.
    pub fn attention(&self) -> Attention {
        match self.attention {
            AttentionOption::Naive => Attention::Naive,
            AttentionOption::MemoryEfficient => Attention::MemoryEfficient {
                tiles: match self.attention_tile {
                    Some(t) => Tiles { query: t, key: t },
                    None => Tiles::default(),
                },
            },
        }
    }
}

/// `[[configs]]`: one configuration (a row of the study's table).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigSpec {
    /// Identifier (letters, digits, `_`, `-`), unique in the study.
    pub name: String,
    /// Display name; defaults to `name`.
    #[serde(default)]
    pub label: String,
    /// The model this configuration trains: the name of one of the profile's named models
    /// (`[profiles.<p>] models.<name> = { ... }`), or `None` for the profile's `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    /// Precision of parameters and activations (default f32).
    pub precision: Precision,
    #[serde(default)]
    /// Segment activation checkpointing (default none).
    pub checkpoint: CheckpointSpec,
    /// Activation memory budget in [0, 1] (0 = full checkpointing, 1 = none).
    #[serde(default)]
    pub budget: Option<f64>,
    /// Step each segment's parameters as soon as their gradients exist.
    #[serde(default)]
    pub fused_optimizer: bool,
    /// Burn's kernel-fusion backend (CUDA only).
    #[serde(default)]
    pub fusion: bool,
    /// Burn's op-level `BalancedCheckpointing` autodiff strategy.
    #[serde(default)]
    pub balanced_checkpointing: bool,
    /// Which attention the blocks run: `"memory_efficient"` (default; the tiled attention of
    /// `model::attention`, which rematerializes score tiles in backward) or `"naive"` (Burn's,
    /// which keeps `[batch, heads, seq, seq]` scores and probabilities per layer).
    #[serde(default)]
    pub attention: AttentionOption,
    /// Tile size in tokens (query rows and key columns) of the memory-efficient attention;
    /// default 1024 (see `model::attention::Tiles`).
    #[serde(default)]
    pub attention_tile: Option<usize>,
    /// What the layer norms keep for backward: `"saves_input"` (default; memwall's layer-norm
    /// operation, which keeps the input and f32 row statistics, as PyTorch does),
    /// `"saves_output"` (keeps only f32 1/std beside the output the next layer keeps anyway,
    /// as Apex's memory-efficient layer norm) or `"composed"` (Burn's, which keeps two full
    /// tensors per norm). See `memwall_core::strategy::LayerNormSaving`.
    #[serde(default)]
    pub layer_norm: LayerNormSaving,
    /// CUDA: CubeCL's autotune level (`"minimal"`, the default, `"balanced"`, `"extensive"`,
    /// `"full"`).
    #[serde(default)]
    pub autotune_level: super::job::AutotuneLevel,
    /// CUDA: release the memory pool's free pages at every step boundary.
    #[serde(default)]
    pub memory_cleanup: bool,
    /// CUDA: how the memory pool places allocations (`"exact_size"`, the default, or
    /// `"sliced"`, CubeCL's own default).
    #[serde(default)]
    pub memory_pool: super::job::MemoryPool,
    /// Mixed precision with f32 master weights: the optimizer keeps f32 parameters and state;
    /// each step runs forward and backward on a `precision` (f16/bf16) copy, and the gradients
    /// are cast back to f32 before the step (Micikevicius et al. 2018, §3.1; apex "O2").
    #[serde(default)]
    pub master_weights: bool,
    /// Loss scaling for the 16-bit backward pass (needs `master_weights`).
    #[serde(default)]
    pub loss_scale: Option<LossScale>,
    /// Plan with Checkmate's objective at this fraction (0, 1] of the no-recomputation peak:
    /// the plan stage runs the job's own profiling pass on its device and solves the exact
    /// dynamic program over the executor's segment plans (`memwall_core::segment_plan`), then
    /// the job runs that plan.
    #[serde(default)]
    pub checkmate: Option<f64>,
    /// The optimizer of this configuration, in place of the study's `[train] optimizer` (e.g.
    /// AdamW rows beside a study that trains with the source's Adafactor).
    #[serde(default)]
    pub optimizer: Option<OptimizerKind>,
    /// The decoupled weight decay of this configuration, in place of the study's `[train]
    /// weight_decay`: finite, in [0, 1) (with `lr` <= 1 the per-step factor `1 - lr * wd`
    /// stays positive).
    #[serde(default)]
    pub weight_decay: Option<f64>,
    /// The configuration is the baseline the others are compared with.
    #[serde(default)]
    pub control: bool,
    /// How the source's configuration maps to memwall options (free text for the report).
    #[serde(default)]
    pub maps_to: String,
    /// The source document's numbers for this configuration.
    #[serde(default)]
    pub claim: Option<Claim>,
}

/// `[[goals]]`: a ratio the report evaluates against a threshold, e.g. "checkpointing every
/// block costs at most 1.4x the step time of no checkpointing". For each precision, the report
/// takes the first finished configuration matching `numerator` and the first matching
/// `denominator` (both without kernel fusion or a memory budget, so that only the compared
/// option differs) and states `metric(numerator) / metric(denominator)` beside `at_most`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    /// What is compared, as the report's row label.
    pub label: String,
    /// The metric whose ratio is taken (default: the median step time).
    #[serde(default)]
    pub metric: GoalMetric,
    /// The configuration in the numerator.
    pub numerator: GoalSelector,
    /// The configuration in the denominator.
    pub denominator: GoalSelector,
    /// The goal is met when the ratio is at most this (finite, positive).
    pub at_most: f64,
}

/// The metric of a [`Goal`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalMetric {
    /// Median step time over the measured steps, seconds.
    #[default]
    MedianStepS,
    /// Peak allocated bytes of a step.
    PeakAllocatedBytes,
}

impl GoalMetric {
    /// The study table's column of the metric.
    pub fn column(self) -> &'static str {
        match self {
            GoalMetric::MedianStepS => "median_step_s",
            GoalMetric::PeakAllocatedBytes => "peak_allocated_bytes",
        }
    }
}

/// Which configuration a [`Goal`] side picks, besides the precision (goals compare configurations
/// of the same precision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoalSelector {
    /// Activation checkpointing of the configuration (`"none"`, `K`, `"sqrt"`).
    pub checkpoint: CheckpointSpec,
    /// Whether the optimizer step is fused into backward (default false).
    #[serde(default)]
    pub fused_optimizer: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileSection {
    model: Option<ModelConfig>,
    /// Further models of the profile by name, for configurations that set `model = "<name>"`
    /// (e.g. a deep, narrow model beside the study's own).
    #[serde(default)]
    models: BTreeMap<String, ModelConfig>,
    #[serde(default)]
    train: TrainOverride,
    #[serde(default)]
    data: DataOverride,
    #[serde(default)]
    params: toml::Table,
}

/// `[grid]` (or several `[[grid]]` tables): configurations as the cross product of strategy
/// options (appended after the explicit `[[configs]]`, grid by grid). Names are
/// `[<model>-]ck<K>-<precision>[-fusion][-fusedopt]`, with the model's name when the grid names
/// one of the profile's named models (`model = "<name>"`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Grid {
    /// A named model of every profile (`models.<name>`) that the grid's configurations train,
    /// instead of the profile's `model`.
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    checkpoint: Vec<CheckpointSpec>,
    #[serde(default)]
    precision: Vec<Precision>,
    #[serde(default)]
    fusion: Vec<bool>,
    #[serde(default)]
    fused_optimizer: Vec<bool>,
}

impl Grid {
    fn expand(&self) -> Vec<ConfigSpec> {
        let or = |v: &Vec<bool>| if v.is_empty() { vec![false] } else { v.clone() };
        let ck = if self.checkpoint.is_empty() {
            vec![CheckpointSpec::None]
        } else {
            self.checkpoint.clone()
        };
        let pr = if self.precision.is_empty() {
            vec![Precision::F32]
        } else {
            self.precision.clone()
        };
        let mut out = Vec::new();
        for &fusion in &or(&self.fusion) {
            for &p in &pr {
                for &c in &ck {
                    for &fo in &or(&self.fused_optimizer) {
                        let mut name = match &self.model {
                            Some(m) => format!("{m}-ck{c}-{p}"),
                            None => format!("ck{c}-{p}"),
                        };
                        if fusion {
                            name.push_str("-fusion");
                        }
                        if fo {
                            name.push_str("-fusedopt");
                        }
                        out.push(ConfigSpec {
                            label: name.clone(),
                            name,
                            model: self.model.clone(),
                            precision: p,
                            checkpoint: c,
                            budget: None,
                            fused_optimizer: fo,
                            fusion,
                            balanced_checkpointing: false,
                            attention: AttentionOption::default(),
                            attention_tile: None,
                            layer_norm: LayerNormSaving::default(),
                            autotune_level: Default::default(),
                            memory_cleanup: false,
                            memory_pool: Default::default(),
                            master_weights: false,
                            loss_scale: None,
                            checkmate: None,
                            optimizer: None,
                            weight_decay: None,
                            control: false,
                            maps_to: String::new(),
                            claim: None,
                        });
                    }
                }
            }
        }
        out
    }
}

/// `[grid]` as one table or `[[grid]]` as several.
#[derive(Debug, Clone)]
enum Grids {
    One(Grid),
    Many(Vec<Grid>),
}

impl<'de> Deserialize<'de> for Grids {
    /// A table or an array of tables, each read as a [`Grid`] (so that an unknown field of a
    /// grid is named as such, not as "no variant matched").
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Grids;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a [grid] table or [[grid]] tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<Grids, A::Error> {
                Grid::deserialize(MapAccessDeserializer::new(map)).map(Grids::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> std::result::Result<Grids, A::Error> {
                Vec::<Grid>::deserialize(SeqAccessDeserializer::new(seq)).map(Grids::Many)
            }
        }
        d.deserialize_any(V)
    }
}

impl Grids {
    /// The grids with their dotted paths in the file (`grid`, or `grid[i]`).
    fn into_list(self) -> Vec<(String, Grid)> {
        match self {
            Grids::One(g) => vec![("grid".into(), g)],
            Grids::Many(v) => v
                .into_iter()
                .enumerate()
                .map(|(i, g)| (format!("grid[{i}]"), g))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    study: StudyHeader,
    #[serde(default)]
    train: TrainOverride,
    #[serde(default)]
    data: DataOverride,
    #[serde(default)]
    profiles: BTreeMap<String, ProfileSection>,
    #[serde(default)]
    configs: Vec<ConfigSpec>,
    #[serde(default)]
    grid: Option<Grids>,
    #[serde(default)]
    goals: Vec<Goal>,
    #[serde(default)]
    claims: Vec<super::claims::SourceClaim>,
    #[serde(default)]
    params: toml::Table,
}

pub(super) fn base_dir(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    dir.parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."))
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Builds the [`Error::SpecField`]s of one experiment file.
#[derive(Clone, Copy)]
struct Fields<'a> {
    path: &'a Path,
}

impl Fields<'_> {
    /// The error for `field` (a dotted path such as `configs[2].budget`).
    fn err(self, field: &str, message: String) -> Error {
        Error::SpecField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            message,
        }
    }
}

pub(super) fn parse(
    path: &Path,
    text: &str,
    profile: Profile,
    data_override: Option<&Path>,
) -> Result<Study> {
    let fields = Fields { path };
    let mut file = read_experiment(path, text)?;
    check_header(&file, fields)?;
    let section = file
        .profiles
        .get(profile.as_str())
        .cloned()
        .unwrap_or_default();
    let train = resolve_train(section.train, file.train, profile, fields)?;
    let params = merge_params(file.params, section.params);
    let training = file.study.kind == StudyKind::Training;
    let (model, models, data) = if training {
        let model = resolve_model(section.model, profile, fields)?;
        let models = resolve_models(section.models, &model, profile, fields)?;
        let data = resolve_data(
            section.data,
            file.data,
            profile,
            path,
            data_override,
            fields,
        )?;
        (Some(model), models, Some(data))
    } else {
        if let Some(name) = section.models.keys().next() {
            return Err(fields.err(
                &format!("profiles.{profile}.models.{name}"),
                "only a training study trains models: remove the table".into(),
            ));
        }
        (None, BTreeMap::new(), None)
    };
    if let Some(grids) = file.grid.take() {
        for (at, grid) in grids.into_list() {
            if let Some(name) = &grid.model {
                check_model_name(name, &models, &format!("{at}.model"), profile, fields)?;
            }
            file.configs.extend(grid.expand());
        }
    }
    let configs = resolve_configs(file.configs, model.as_ref(), &models, profile, fields)?;
    check_timeline(&file.study.timeline, &configs, fields)?;
    check_goals(&file.goals, fields)?;
    check_claims(&file.claims, training.then_some(configs.as_slice()), fields)?;
    Ok(Study {
        path: path.to_path_buf(),
        header: file.study,
        profile,
        model,
        models,
        train,
        data,
        configs,
        goals: file.goals,
        claims: file.claims,
        params,
    })
}

/// `study.timeline` names configurations of the file, each once, at most
/// [`MAX_TIMELINE_LINES`] of one model (a figure overlays one model's configurations).
fn check_timeline(names: &[String], configs: &[ConfigSpec], fields: Fields) -> Result<()> {
    let mut per_model: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let Some(c) = configs.iter().find(|c| &c.name == name) else {
            return Err(fields.err(
                &format!("study.timeline[{i}]"),
                format!("`{name}` is not a configuration of this file (see its [[configs]] names)"),
            ));
        };
        if names[..i].contains(name) {
            return Err(fields.err(
                &format!("study.timeline[{i}]"),
                format!("`{name}` appears twice"),
            ));
        }
        let n = per_model.entry(c.model.as_deref()).or_default();
        *n += 1;
        if *n > MAX_TIMELINE_LINES {
            return Err(fields.err(
                &format!("study.timeline[{i}]"),
                format!(
                    "`{name}` is the {}th configuration of its model: a timeline figure \
                     overlays at most {MAX_TIMELINE_LINES}; keep the ones that matter",
                    *n
                ),
            ));
        }
    }
    Ok(())
}

/// Deserializes the file (its `[grid]`s are expanded once the profile's models are known).
fn read_experiment(path: &Path, text: &str) -> Result<ExperimentFile> {
    toml::from_str(text).map_err(|source| Error::Spec {
        path: path.to_path_buf(),
        source,
    })
}

/// The profile's named models (`models.<name> = { ... }`), each validated; their names are
/// valid, and no two models of the profile (its `model` included) share `layers` and
/// `d_model`, the two sizes every record and the report tell models apart by (each model's
/// configurations are compared with a control of the same model).
fn resolve_models(
    models: BTreeMap<String, ModelConfig>,
    main: &ModelConfig,
    profile: Profile,
    fields: Fields,
) -> Result<BTreeMap<String, ModelConfig>> {
    let shape = |m: &ModelConfig| (m.layers, m.d_model);
    let mut seen = vec![("model".to_string(), shape(main))];
    for (name, m) in &models {
        let at = format!("profiles.{profile}.models.{name}");
        if !valid_name(name) {
            return Err(fields.err(
                &at,
                format!("`{name}`: a model's name uses only letters, digits, `_` and `-`"),
            ));
        }
        validate_model(m).map_err(|(f, msg)| fields.err(&format!("{at}.{f}"), msg))?;
        if let Some((other, _)) = seen.iter().find(|(_, s)| *s == shape(m)) {
            return Err(fields.err(
                &at,
                format!(
                    "has the layers ({}) and d_model ({}) of `profiles.{profile}.{other}`: \
                     records and reports tell a study's models apart by these two sizes, so \
                     change one of them",
                    m.layers, m.d_model
                ),
            ));
        }
        seen.push((format!("models.{name}"), shape(m)));
    }
    Ok(models)
}

/// `name` (a configuration's or a grid's `model`, at field `at`) is a named model of the
/// profile.
fn check_model_name(
    name: &str,
    models: &BTreeMap<String, ModelConfig>,
    at: &str,
    profile: Profile,
    fields: Fields,
) -> Result<()> {
    if models.contains_key(name) {
        return Ok(());
    }
    let known = if models.is_empty() {
        "none".to_string()
    } else {
        models
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(fields.err(
        at,
        format!(
            "`{name}` is not a model of profile `{profile}`: add `models.{name} = {{ layers = ..., \
             d_model = ..., heads = ..., d_ff = ..., seq_len = ..., batch = ..., vocab = ... }}` \
             to [profiles.{profile}] (every profile needs it), or remove `model` to train the \
             profile's own model (the profile's named models: {known})"
        ),
    ))
}

/// Checks the study's name, its roles and the names of its `[profiles.*]` sections.
fn check_header(file: &ExperimentFile, fields: Fields) -> Result<()> {
    check_name(&file.study, fields)?;
    if !(1..=MAX_REPEATS).contains(&file.study.repeats) {
        return Err(fields.err(
            "study.repeats",
            format!(
                "{} runs per configuration: expected 1 to {MAX_REPEATS}",
                file.study.repeats
            ),
        ));
    }
    for key in file.profiles.keys() {
        key.parse::<Profile>()
            .map_err(|m| fields.err(&format!("profiles.{key}"), m))?;
    }
    check_roles(&file.study, fields)
}

/// The `[study]` header of the experiment file at `path` (text `text`), its name and roles
/// checked ([`check_roles`]); the rest of the file is not read.
///
/// # Errors
/// [`Error::Spec`] for a header that does not parse, [`Error::SpecField`] naming the field.
pub(super) fn read_header(path: &Path, text: &str) -> Result<StudyHeader> {
    /// The file with only its `[study]` table read.
    #[derive(Deserialize)]
    struct HeaderOnly {
        study: StudyHeader,
    }
    let h: HeaderOnly = toml::from_str(text).map_err(|source| Error::Spec {
        path: path.to_path_buf(),
        source,
    })?;
    let fields = Fields { path };
    check_name(&h.study, fields)?;
    check_roles(&h.study, fields)?;
    Ok(h.study)
}

/// `study.name` is non-empty letters, digits, `_` and `-` (a folder name under `runs/`).
fn check_name(h: &StudyHeader, fields: Fields) -> Result<()> {
    if valid_name(&h.name) {
        return Ok(());
    }
    Err(fields.err(
        "study.name",
        format!(
            "`{}` must be non-empty and use only letters, digits, `_` and `-`",
            h.name
        ),
    ))
}

/// `study.gpu_suite` in 1..=[`MAX_SUITE_PLACE`] for a training or `fusion_ir` study;
/// `pytorch_reference` and `kernel_attribution` for a training study only.
fn check_roles(h: &StudyHeader, fields: Fields) -> Result<()> {
    let training = h.kind == StudyKind::Training;
    if let Some(place) = h.gpu_suite {
        if !(1..=MAX_SUITE_PLACE).contains(&place) {
            return Err(fields.err(
                "study.gpu_suite",
                format!("{place}: expected a place from 1 (runs first) to {MAX_SUITE_PLACE}"),
            ));
        }
        if !training && h.kind != StudyKind::FusionIr {
            return Err(fields.err(
                "study.gpu_suite",
                "only training studies and the fusion_ir study run on a GPU machine: remove it"
                    .into(),
            ));
        }
    }
    for (set, key) in [
        (h.pytorch_reference, "study.pytorch_reference"),
        (h.kernel_attribution, "study.kernel_attribution"),
    ] {
        if set && !training {
            return Err(fields.err(
                key,
                "applies to a training study (kind = \"training\") only: remove it".into(),
            ));
        }
    }
    Ok(())
}

/// Most steps (warm-up or measured) a job may run: the record keeps one row per step, and no
/// study of memwall needs more than a few hundred.
pub const MAX_STEPS: usize = 1_000_000;

/// Most held-out batches a job may evaluate (each is one forward pass over `batch x seq_len`
/// tokens).
pub const MAX_EVAL_BATCHES: usize = 100_000;

/// The dotted path of a setting that a profile may override: `profiles.<p>.<table>.<key>` when
/// the profile's own table sets it, `<table>.<key>` otherwise.
fn origin(in_profile: bool, profile: Profile, table: &str, key: &str) -> String {
    if in_profile {
        format!("profiles.{profile}.{table}.{key}")
    } else {
        format!("{table}.{key}")
    }
}

/// The training settings (the profile's `train` over the file's `[train]`) with defaults
/// filled in, each number checked: `steps` in [1, MAX_STEPS], `warmup_steps` in
/// [0, MAX_STEPS], `lr` finite in (0, 1], `weight_decay` finite, at least 0 and with
/// `lr * weight_decay < 1` (AdamW multiplies each weight by `1 - lr * weight_decay` per step,
/// Loshchilov and Hutter 2019, Algorithm 2, line 12), `eval_batches` in [1, MAX_EVAL_BATCHES].
fn resolve_train(
    own: TrainOverride,
    base: TrainOverride,
    profile: Profile,
    fields: Fields,
) -> Result<TrainConfig> {
    let in_profile = |key: &str| match key {
        "steps" => own.steps.is_some(),
        "warmup_steps" => own.warmup_steps.is_some(),
        "lr" => own.lr.is_some(),
        "weight_decay" => own.weight_decay.is_some(),
        _ => own.eval_batches.is_some(),
    };
    let set_in_profile: Vec<(&str, bool)> = [
        "steps",
        "warmup_steps",
        "lr",
        "weight_decay",
        "eval_batches",
    ]
    .into_iter()
    .map(|k| (k, in_profile(k)))
    .collect();
    let train = own.or(base).resolve();
    check_train(&train).map_err(|(key, message)| {
        let set = set_in_profile.iter().any(|&(k, p)| k == key && p);
        fields.err(&origin(set, profile, "train", key), message)
    })?;
    Ok(train)
}

/// The numbers of resolved training settings (see [`resolve_train`]); the key at fault and the
/// message otherwise.
pub(super) fn check_train(train: &TrainConfig) -> std::result::Result<(), (&'static str, String)> {
    if !(1..=MAX_STEPS).contains(&train.steps) {
        return Err((
            "steps",
            format!(
                "{} is not in the accepted range [1, {MAX_STEPS}] of measured steps",
                train.steps
            ),
        ));
    }
    if train.warmup_steps > MAX_STEPS {
        return Err((
            "warmup_steps",
            format!(
                "{} is not in the accepted range [0, {MAX_STEPS}] of warm-up steps",
                train.warmup_steps
            ),
        ));
    }
    if !(train.lr.is_finite() && train.lr > 0.0 && train.lr <= 1.0) {
        return Err((
            "lr",
            format!(
                "{} is not a learning rate: use a finite number in (0, 1], e.g. 3e-4",
                train.lr
            ),
        ));
    }
    let wd = train.weight_decay;
    if !(wd.is_finite() && wd >= 0.0) {
        return Err((
            "weight_decay",
            format!("{wd} is not a weight decay: use a finite number >= 0, e.g. 0.01 (0 = none)"),
        ));
    }
    if train.lr * wd >= 1.0 {
        return Err((
            "weight_decay",
            format!(
                "{wd} with lr {} decays every weight to zero or below in one step \
                 (AdamW scales weights by 1 - lr * weight_decay): use weight_decay < {}",
                train.lr,
                1.0 / train.lr
            ),
        ));
    }
    if !(1..=MAX_EVAL_BATCHES).contains(&train.eval_batches) {
        return Err((
            "eval_batches",
            format!(
                "{} is not in the accepted range [1, {MAX_EVAL_BATCHES}] of held-out batches \
                 (eval loss and perplexity need at least one)",
                train.eval_batches
            ),
        ));
    }
    Ok(())
}

/// The file's `[params]` overridden key by key by the profile's.
fn merge_params(mut params: toml::Table, profile: toml::Table) -> toml::Table {
    for (k, v) in profile {
        params.insert(k, v);
    }
    params
}

/// The profile's model (a training study needs one), validated.
fn resolve_model(
    model: Option<ModelConfig>,
    profile: Profile,
    fields: Fields,
) -> Result<ModelConfig> {
    let field = format!("profiles.{profile}.model");
    let model = model.ok_or_else(|| {
        fields.err(
            &field,
            format!(
                "a training study needs a model for profile `{profile}`: add a \
                 [profiles.{profile}.model] table (layers, d_model, heads, d_ff, seq_len, batch, vocab)"
            ),
        )
    })?;
    validate_model(&model).map_err(|(name, m)| fields.err(&format!("{field}.{name}"), m))?;
    Ok(model)
}

/// The corpus (the profile's `data` over the file's `[data]`; relative paths are relative to
/// the study's base folder, `data_override` wins), its held-out fraction in (0, 1) (default
/// 0.1) and `max_stories` of at least 2 (one story to train on, one held out).
fn resolve_data(
    own: DataOverride,
    base: DataOverride,
    profile: Profile,
    path: &Path,
    data_override: Option<&Path>,
    fields: Fields,
) -> Result<DataConfig> {
    let at = |set: bool, key: &str| origin(set, profile, "data", key);
    let at = (
        at(own.path.is_some(), "path"),
        at(own.eval_fraction.is_some(), "eval_fraction"),
        at(own.max_stories.is_some(), "max_stories"),
    );
    let d = own.or(base);
    let path_str = d.path.ok_or_else(|| {
        fields.err(
            "data.path",
            "a training study needs a corpus: set data.path (TinyStories .txt or .parquet)".into(),
        )
    })?;
    if path_str.trim().is_empty() && data_override.is_none() {
        return Err(fields.err(
            &at.0,
            "is empty: set it to a TinyStories .txt or .parquet file".into(),
        ));
    }
    let data_path = match data_override {
        Some(p) => p.to_path_buf(),
        None => corpus_path(path, &path_str),
    };
    let eval_fraction = d.eval_fraction.unwrap_or(0.1);
    if !(eval_fraction > 0.0 && eval_fraction < 1.0) {
        return Err(fields.err(
            &at.1,
            format!(
                "{eval_fraction} is not in the accepted range (0, 1): the fraction of stories \
                 held out for evaluation, e.g. 0.1"
            ),
        ));
    }
    if let Some(m) = d.max_stories.filter(|&m| m < 2) {
        return Err(fields.err(
            &at.2,
            format!(
                "{m} is too few: at least 2 stories are needed (one to train on, one held out \
                 for evaluation); raise it or remove it to use every story of the corpus"
            ),
        ));
    }
    Ok(DataConfig {
        path: data_path,
        eval_fraction,
        max_stories: d.max_stories,
    })
}

/// `data.path` as written if absolute, else under the base folder of the experiment file.
fn corpus_path(path: &Path, path_str: &str) -> PathBuf {
    let p = PathBuf::from(path_str);
    if p.is_absolute() {
        p
    } else {
        base_dir(path).join(p)
    }
}

/// Checks every configuration, fills in default labels and, in a training study without a
/// `control`, makes the first configuration the control.
fn resolve_configs(
    specs: Vec<ConfigSpec>,
    model: Option<&ModelConfig>,
    models: &BTreeMap<String, ModelConfig>,
    profile: Profile,
    fields: Fields,
) -> Result<Vec<ConfigSpec>> {
    let training = model.is_some();
    if specs.is_empty() && training {
        return Err(fields.err(
            "configs",
            "a training study needs at least one [[configs]] entry".into(),
        ));
    }
    let mut configs = Vec::with_capacity(specs.len());
    let mut seen = HashSet::new();
    for (i, mut c) in specs.into_iter().enumerate() {
        let at = format!("configs[{i}]");
        check_config_name(&c, &at, &mut seen, fields)?;
        check_config(&c, &at, fields)?;
        if let Some(name) = &c.model {
            check_model_name(name, models, &format!("{at}.model"), profile, fields)?;
        }
        if let Some(m) = model {
            let own = c.model.as_ref().map_or(m, |name| &models[name]);
            check_checkpoint(&c, &at, own, profile, fields)?;
        }
        if c.label.is_empty() {
            c.label = c.name.clone();
        }
        configs.push(c);
    }
    // Each model's configurations are compared with a control of that model: its first
    // configuration unless one of them is marked.
    if training {
        let mut names: Vec<Option<String>> = configs.iter().map(|c| c.model.clone()).collect();
        names.dedup();
        for name in names {
            if !configs.iter().any(|c| c.model == name && c.control) {
                if let Some(first) = configs.iter_mut().find(|c| c.model == name) {
                    first.control = true;
                }
            }
        }
    }
    Ok(configs)
}

/// A configuration's name is valid and not in `seen` (which it joins).
fn check_config_name(
    c: &ConfigSpec,
    at: &str,
    seen: &mut HashSet<String>,
    fields: Fields,
) -> Result<()> {
    if !valid_name(&c.name) {
        return Err(fields.err(
            &format!("{at}.name"),
            format!("`{}` must use only letters, digits, `_` and `-`", c.name),
        ));
    }
    if !seen.insert(c.name.clone()) {
        return Err(fields.err(
            &format!("{at}.name"),
            format!("`{}` appears twice; names must be unique", c.name),
        ));
    }
    Ok(())
}

/// A configuration's options are in range and do not contradict each other.
fn check_config(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if let Some(wd) = c.weight_decay {
        if !(wd.is_finite() && (0.0..1.0).contains(&wd)) {
            return Err(fields.err(
                &format!("{at}.weight_decay"),
                format!("{wd} is not a weight decay: use a finite number in [0, 1), e.g. 0.01"),
            ));
        }
    }
    check_budget(c, at, fields)?;
    check_checkmate(c, at, fields)?;
    check_balanced(c, at, fields)?;
    check_master_weights(c, at, fields)?;
    check_attention_tile(c, at, fields)?;
    check_claim(c, at, fields)
}

/// A checkpoint interval K is at most the model's layer count (K = layers is one segment: the
/// whole model recomputed once); a larger K would be silently the same as K = layers.
fn check_checkpoint(
    c: &ConfigSpec,
    at: &str,
    model: &ModelConfig,
    profile: Profile,
    fields: Fields,
) -> Result<()> {
    if let CheckpointSpec::Every(k) = c.checkpoint {
        if k > model.layers {
            return Err(fields.err(
                &format!("{at}.checkpoint"),
                format!(
                    "checkpoint interval K = {k} is larger than the {} layers of the `{profile}` \
                     model (profiles.{profile}.{}.layers): use an integer K in [1, {}], \
                     \"sqrt\" or \"none\"",
                    model.layers,
                    c.model
                        .as_ref()
                        .map_or("model".to_string(), |n| format!("models.{n}")),
                    model.layers
                ),
            ));
        }
    }
    Ok(())
}

/// The source's numbers of a configuration are finite and in their ranges: `peak_gib` and
/// `samples_per_s` above 0, `reduction_pct` at most 100, `perplexity` at least 1.
fn check_claim(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(claim) = &c.claim else {
        return Ok(());
    };
    /// A claimed number: its key, value, range test and the range in words.
    type ClaimCheck<'a> = (&'a str, Option<f64>, fn(f64) -> bool, &'a str);
    let checks: [ClaimCheck; 4] = [
        (
            "peak_gib",
            claim.peak_gib,
            |x| x > 0.0,
            "a number of GiB above 0",
        ),
        (
            "reduction_pct",
            claim.reduction_pct,
            |x| x <= 100.0,
            "a percentage at most 100 (negative: more memory than the control)",
        ),
        (
            "samples_per_s",
            claim.samples_per_s,
            |x| x > 0.0,
            "a throughput above 0",
        ),
        (
            "perplexity",
            claim.perplexity,
            |x| x >= 1.0,
            "a perplexity of at least 1",
        ),
    ];
    for (name, value, ok, range) in checks {
        if let Some(x) = value.filter(|&x| !(x.is_finite() && ok(x))) {
            return Err(fields.err(
                &format!("{at}.claim.{name}"),
                format!("{x} is not {range} (finite)"),
            ));
        }
    }
    Ok(())
}

/// `budget` is in [0, 1] and not set together with `checkpoint`.
fn check_budget(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(b) = c.budget else { return Ok(()) };
    if !(0.0..=1.0).contains(&b) {
        return Err(fields.err(
            &format!("{at}.budget"),
            format!("{b} is not in [0, 1] (0 = checkpoint everything, 1 = none)"),
        ));
    }
    if c.checkpoint != CheckpointSpec::None {
        return Err(fields.err(
            &format!("{at}.budget"),
            "set either `budget` or `checkpoint`, not both".into(),
        ));
    }
    Ok(())
}

/// `checkmate` is a fraction in (0, 1] and replaces `checkpoint` and `budget`.
fn check_checkmate(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(f) = c.checkmate else { return Ok(()) };
    if !(f > 0.0 && f <= 1.0) {
        return Err(fields.err(
            &format!("{at}.checkmate"),
            format!("{f} is not in (0, 1] (a fraction of the no-recomputation peak)"),
        ));
    }
    if c.checkpoint != CheckpointSpec::None || c.budget.is_some() {
        return Err(fields.err(
            &format!("{at}.checkmate"),
            "a Checkmate plan replaces `checkpoint` and `budget`: set only one".into(),
        ));
    }
    Ok(())
}

/// Burn's `BalancedCheckpointing` is an autodiff strategy of plain backward: it replaces
/// `checkpoint`, `budget` and `checkmate`, and the fused optimizer step (which runs backward
/// segment by segment) cannot run under it.
fn check_balanced(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if !c.balanced_checkpointing {
        return Ok(());
    }
    let others = [
        ("checkpoint", c.checkpoint != CheckpointSpec::None),
        ("budget", c.budget.is_some()),
        ("checkmate", c.checkmate.is_some()),
        ("fused_optimizer", c.fused_optimizer),
    ];
    match others.iter().find(|(_, set)| *set) {
        Some((name, _)) => Err(fields.err(
            &format!("{at}.balanced_checkpointing"),
            format!(
                "Burn's BalancedCheckpointing is an autodiff strategy of plain backward: remove \
                 `{name}` or `balanced_checkpointing` from this configuration"
            ),
        )),
        None => Ok(()),
    }
}

/// f32 master weights need a 16-bit precision, loss scaling needs master weights, and mixed
/// precision runs plain backward (no checkpointing, budget, Checkmate or fused optimizer).
fn check_master_weights(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if c.master_weights && c.precision == Precision::F32 {
        return Err(fields.err(
            &format!("{at}.master_weights"),
            "f32 master weights keep f32 copies of f16/bf16 parameters: set precision = \"f16\" or \"bf16\"".into(),
        ));
    }
    if c.loss_scale.is_some() && !c.master_weights {
        return Err(fields.err(
            &format!("{at}.loss_scale"),
            "loss scaling unscales gradients into f32 master weights: set master_weights = true"
                .into(),
        ));
    }
    let reshapes_backward = c.checkpoint != CheckpointSpec::None
        || c.budget.is_some()
        || c.checkmate.is_some()
        || c.fused_optimizer
        || c.balanced_checkpointing;
    if c.master_weights && reshapes_backward {
        return Err(fields.err(
            &format!("{at}.master_weights"),
            "mixed precision with master weights runs plain backward: remove checkpoint, budget, checkmate, fused_optimizer and balanced_checkpointing from this configuration".into(),
        ));
    }
    Ok(())
}

/// `attention_tile` is at least 1 token and only set for the memory-efficient attention.
fn check_attention_tile(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(t) = c.attention_tile else {
        return Ok(());
    };
    if t == 0 {
        return Err(fields.err(
            &format!("{at}.attention_tile"),
            "the tile size must be at least 1 token (default 1024)".into(),
        ));
    }
    if c.attention == AttentionOption::Naive {
        return Err(fields.err(
            &format!("{at}.attention_tile"),
            "the naive attention has no tiles: remove attention_tile or set attention = \"memory_efficient\"".into(),
        ));
    }
    Ok(())
}

/// Every goal names its comparison and has a finite positive threshold.
fn check_goals(goals: &[Goal], fields: Fields) -> Result<()> {
    for (i, g) in goals.iter().enumerate() {
        if g.label.trim().is_empty() {
            return Err(fields.err(
                &format!("goals[{i}].label"),
                "must name the comparison (it is the report's row label)".into(),
            ));
        }
        if !(g.at_most.is_finite() && g.at_most > 0.0) {
            return Err(fields.err(
                &format!("goals[{i}].at_most"),
                format!("{} is not a ratio: use a finite number above 0", g.at_most),
            ));
        }
    }
    Ok(())
}

/// Largest vocabulary: token ids are stored as u32 (`train.tokens`, `eval.tokens`).
pub const MAX_VOCAB: usize = 1 << 32;

/// Every size of the model is at least 1, `heads` divides `d_model`, and `vocab` is in
/// [260, 2^32]. Returns the offending field's name and the message. Whether the sizes fit the
/// device is checked against a memory estimate before any job runs
/// ([`ModelConfig::memory_estimate`](crate::spec::MemoryEstimate)).
pub(super) fn validate_model(m: &ModelConfig) -> std::result::Result<(), (&'static str, String)> {
    let positive = [
        ("layers", m.layers),
        ("d_model", m.d_model),
        ("heads", m.heads),
        ("d_ff", m.d_ff),
        ("seq_len", m.seq_len),
        ("batch", m.batch),
        ("vocab", m.vocab),
    ];
    for (name, v) in positive {
        if v == 0 {
            return Err((name, format!("is 0: `{name}` must be at least 1")));
        }
    }
    if !m.d_model.is_multiple_of(m.heads) {
        return Err((
            "heads",
            format!(
                "`heads` ({}) must divide `d_model` ({}): each head gets d_model / heads dimensions",
                m.heads, m.d_model
            ),
        ));
    }
    if !(260..=MAX_VOCAB).contains(&m.vocab) {
        return Err((
            "vocab",
            format!(
                "{} is not in the accepted range [260, {MAX_VOCAB}] (256 byte tokens plus \
                 specials and merges; token ids are u32)",
                m.vocab
            ),
        ));
    }
    Ok(())
}

/// Checks `[[claims]]`: ids unique and well-formed, a quotation and a location, finite
/// numbers, a derived value explained, and a measure or a reason it is not comparable; for a
/// training study (`configs` given) each measure names a configuration of the file and a
/// metric ([`super::claims::TrainingMetric`]).
fn check_claims(
    claims: &[super::claims::SourceClaim],
    configs: Option<&[ConfigSpec]>,
    fields: Fields,
) -> Result<()> {
    let mut ids = HashSet::new();
    for (i, c) in claims.iter().enumerate() {
        let at = |f: &str| format!("claims[{i}].{f}");
        if !valid_name(&c.id) || !ids.insert(c.id.as_str()) {
            return Err(fields.err(
                &at("id"),
                format!(
                    "`{}` must be non-empty, unique among the claims, and use only letters, \
                     digits, `_` and `-`",
                    c.id
                ),
            ));
        }
        check_claim_text(c).map_err(|(f, m)| fields.err(&at(f), m))?;
        if let (Some(configs), false) = (configs, c.measure.is_empty()) {
            check_training_measure(&c.measure, configs)
                .map_err(|m| fields.err(&at("measure"), m))?;
        }
    }
    Ok(())
}

/// One claim's own fields: a quotation and a location, finite numbers, a derived value
/// explained, and a measure or a reason it is not comparable. Returns the field and message.
fn check_claim_text(
    c: &super::claims::SourceClaim,
) -> std::result::Result<(), (&'static str, String)> {
    if c.quote.trim().is_empty() || c.location.trim().is_empty() {
        let f = if c.quote.trim().is_empty() {
            "quote"
        } else {
            "where"
        };
        return Err((
            f,
            "must not be empty: quote the document's words and say where they stand".into(),
        ));
    }
    let rule = &c.agree;
    for (name, v) in [
        ("value", c.value),
        ("agree.within", rule.within),
        ("agree.within_rel", rule.within_rel),
        ("agree.at_most", rule.at_most),
        ("agree.at_least", rule.at_least),
    ] {
        if v.is_some_and(|x| !x.is_finite()) {
            return Err((name, "must be a finite number".into()));
        }
    }
    if c.derived.as_deref().is_some_and(|d| d.trim().is_empty()) {
        return Err((
            "derived",
            "when given, must say how the value is computed from the document's numbers".into(),
        ));
    }
    if c.not_comparable.is_none() && c.measure.is_empty() {
        return Err((
            "measure",
            "name the measurement that answers the claim, or say why none can with \
             `not_comparable = \"...\"`"
                .into(),
        ));
    }
    Ok(())
}

/// Fewest configurations a sweep measure needs: the fit `a * ceil(N / K) + b * K + c` has
/// three coefficients, and a fourth point leaves it a residual to judge it by.
pub const MIN_SWEEP_POINTS: usize = 4;

/// A training claim's `measure`: `<configuration>.<metric>` with a configuration of the file
/// and a metric of [`super::claims::TrainingMetric`], or `<sweep>.<metric>` with a sweep
/// (a configuration name with `ck*` for the interval) of at least [`MIN_SWEEP_POINTS`]
/// configurations of the file and a metric of [`super::claims::SweepMetric`].
fn check_training_measure(
    measure: &str,
    configs: &[ConfigSpec],
) -> std::result::Result<(), String> {
    use super::claims::{
        sweep_measure, sweep_member, training_measure, SweepMetric, TrainingMetric,
    };
    if let Some((sweep, _)) = sweep_measure(measure) {
        let members = configs
            .iter()
            .filter(|c| sweep_member(sweep, &c.name).is_some())
            .count();
        if members < MIN_SWEEP_POINTS {
            return Err(format!(
                "`{sweep}` matches {members} configuration(s) of this file (`ck*` standing for \
                 `ck<K>` or `cksqrt`): a sweep measure fits three coefficients and needs at \
                 least {MIN_SWEEP_POINTS} intervals"
            ));
        }
        return Ok(());
    }
    let names: Vec<&str> = TrainingMetric::ALL.iter().map(|(n, _)| *n).collect();
    let sweep_names: Vec<&str> = SweepMetric::ALL.iter().map(|(n, _)| *n).collect();
    let Some((config, _)) = training_measure(measure) else {
        return Err(format!(
            "`{measure}`: expected `<configuration>.<metric>` with a metric of {}, or \
             `<sweep>.<metric>` (a configuration name with `ck*` for the interval, e.g. \
             `ck*-f32`) with a metric of {}",
            names.join(", "),
            sweep_names.join(", ")
        ));
    };
    if !configs.iter().any(|k| k.name == config) {
        return Err(format!(
            "`{config}` is not a configuration of this file; configurations: {}",
            configs
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}
