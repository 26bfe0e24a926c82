//! The experiment file's schema (serde, unknown fields are errors) and its resolution for one
//! profile.

use super::{Profile, Study};
use crate::error::{Error, Result};
use crate::strategy::{Attention, LayerNormSaving, Tiles};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

mod resolve;

pub use resolve::*;

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
    /// What runs the study: training jobs or one of the in-process studies (`memwall-studies`).
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
    /// in the bundle; an in-process study's declared `gpu_job` runs there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_suite: Option<u32>,
    /// PyTorch eager runs the study's configurations as twins (`memwall twin`, the bundle's
    /// `torch_peak_memory.py`): a training study only. Files written before the key's rename
    /// say `pytorch_reference`, read as this.
    #[serde(
        default,
        alias = "pytorch_reference",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub pytorch_twin: bool,
    /// The study whose control the kernel-attribution benchmark times operation by operation on
    /// a GPU, and whose report shows it: one training study at most.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_attribution: bool,
    /// The study whose glance opens the README's results block (the source's headline table):
    /// one study at most; without one, `memwall report` leaves the README alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub readme_headline: bool,
    /// The GPU part of an in-process study: the slim runner's command that a GPU bundle runs
    /// for it (`study.gpu_job = "fusion_chains"`), whose output `memwall import` stores beside
    /// the study's CPU result. An in-process study in the GPU suite (`gpu_suite`) declares
    /// one; a training study's jobs are its GPU part and it declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_job: Option<GpuJob>,
}

/// A GPU measurement of an in-process study that the slim runner (`memwall-job`) makes in a
/// bundle (`study.gpu_job`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GpuJob {
    /// `memwall-job fusion-chains`: the elementwise chains of the blog's fusion IR, unfused and
    /// fused, on Burn's CUDA backend (`chains.json`, imported as the study's `cuda_chains.json`).
    FusionChains,
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

/// What runs a study: `kind = "training"` (Burn training jobs, one process each) or the name of
/// an in-process study, which `memwall_studies`' registry resolves (`kind = "checkmate"`: the
/// module `studies/src/checkmate/` and its registry line). The set of in-process studies is
/// open: core knows only that the name is well formed; an unknown name is refused when the
/// file is checked (`memwall_studies::check`), naming the known ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum StudyKind {
    /// Burn training jobs, one process each.
    Training,
    /// An in-process study by its registry name (letters, digits and `_`).
    InProcess(String),
}

impl StudyKind {
    /// The name as in the experiment file (`"training"`, `"checkmate"`).
    pub fn as_str(&self) -> &str {
        match self {
            StudyKind::Training => "training",
            StudyKind::InProcess(name) => name,
        }
    }

    /// Whether the study is a sweep of training jobs.
    pub fn is_training(&self) -> bool {
        *self == StudyKind::Training
    }
}

impl TryFrom<String> for StudyKind {
    type Error = String;
    fn try_from(name: String) -> std::result::Result<Self, String> {
        if name == "training" {
            return Ok(StudyKind::Training);
        }
        let well_formed = !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if well_formed {
            Ok(StudyKind::InProcess(name))
        } else {
            Err(format!(
                "`{name}` is not a study kind: \"training\" or an in-process study's name \
                 (lowercase letters, digits and `_`, as its folder under studies/src/)"
            ))
        }
    }
}

impl From<StudyKind> for String {
    fn from(kind: StudyKind) -> String {
        kind.as_str().to_string()
    }
}

impl fmt::Display for StudyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    #[serde(with = "crate::nonfinite")]
    pub lr: f64,
    /// Decoupled weight decay of the optimizer (AdamW or Adafactor; default 0), at least 0 with
    /// `lr * weight_decay < 1`.
    #[serde(with = "crate::nonfinite")]
    pub weight_decay: f64,
    /// The optimizer (default AdamW).
    pub optimizer: OptimizerKind,
    /// Seed of the backend's RNG (parameter initialization) and of batch sampling (default 42).
    pub seed: u64,
    /// Held-out batches for eval loss / perplexity at the end.
    pub eval_batches: usize,
    /// Gradient accumulation: each optimizer step runs forward and backward on this many equal
    /// micro-batches of `batch / accumulation_steps` sequences, adds their gradients and steps
    /// once (1: no accumulation, the whole batch at once). Set per configuration
    /// ([`ConfigSpec::accumulation_steps`]); omitted from job files at 1, so older jobs keep
    /// their keys.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub accumulation_steps: usize,
}

/// Whether `n` is 1 (the field is then left out of job files).
fn is_one(n: &usize) -> bool {
    *n == 1
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
            accumulation_steps: 1,
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

/// `[[configs]]`: one configuration (a row of the study's table). Its `Default` is the plain
/// configuration (f32, no checkpointing, no fusion, the profile's model, the study's
/// optimizer) with an empty name.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
    /// What the blocks of a recomputed segment keep for backward, per unit of the block
    /// (rematerialization inside the block): `"save_matmuls"`, `"save_nothing"`,
    /// `"save_everything"` or a list of unit names (`memwall_core::units`). Refines the segments
    /// of `checkpoint`, `budget` or `checkmate`; without it a recomputed segment keeps only its
    /// input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::units::Policy>,
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
    /// Gradient accumulation: the profile's `batch` sequences of every optimizer step run as
    /// this many equal micro-batches, forward and backward one after the other, their
    /// gradients summed before the one optimizer step (the loss of each weighted by
    /// `1 / accumulation_steps`, so the step is the whole batch's up to rounding). Activations
    /// are those of one micro-batch; an accumulated gradient set is added. `None` (or 1): the
    /// whole batch at once. Must divide `batch`; needs plain backward or `checkpoint`, without
    /// `fused_optimizer`, `master_weights` or a `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accumulation_steps: Option<usize>,
    /// Nested checkpointing, J blocks per inner segment: inside each segment of `checkpoint =
    /// K`, backward first recomputes the K blocks without autodiff keeping the input of every
    /// J-th block, then recomputes and backpropagates one J-block inner segment at a time, so
    /// that the activations of J blocks (not K) are alive, for one more forward pass of the
    /// blocks (`memwall_core::strategy::Segment::inner`). Needs `checkpoint` with 1 <= J < K,
    /// without a `policy` or `master_weights`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_checkpoint: Option<usize>,
    /// The head's logits recomputed in backward, in this many chunks of rows (tokens): forward
    /// computes the logits one chunk at a time and keeps only the final norm's output and each
    /// row's f32 log-sum-exp; backward recomputes each chunk's logits and takes its gradient
    /// at once, so no `[tokens, vocab]` tensor of the whole batch is ever alive
    /// (`memwall_runner::train::head`; the chunked linear cross-entropy of Liger Kernel, Hsu et
    /// al. 2024, arXiv:2410.10989, and of Wijmans et al. 2024, "Cut Your Losses in
    /// Large-Vocabulary Language Models", arXiv:2411.09009). Absent: the head runs under
    /// autodiff and keeps its logits. At least 1 and at most the step's tokens (batch · seq).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_chunks: Option<usize>,
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
/// block costs at most 1.4x the step time of no checkpointing". In each group of the report (one
/// profile, device, backend and model) and at each precision and optimizer of its rows, the
/// report takes the first finished configuration that `numerator` picks and the first that
/// `denominator` picks, both at that precision with that optimizer
/// ([`ConfigSelector::matches_in_group`](crate::spec::ConfigSelector::matches_in_group): every
/// strategy field the selector leaves out at its default, so that only the compared option
/// differs) and states `metric(numerator) / metric(denominator)` beside `at_most`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goal {
    /// What is compared, as the report's row label.
    pub label: String,
    /// The metric whose ratio is taken (default: the median step time).
    #[serde(default)]
    pub metric: GoalMetric,
    /// The configuration in the numerator, with the fields a claim's `config` takes
    /// (`{ checkpoint = 1, fused_optimizer = true }`); no `precision`: both sides run at the
    /// precision the goal is evaluated at.
    pub numerator: crate::spec::ConfigSelector,
    /// The configuration in the denominator (as `numerator`).
    pub denominator: crate::spec::ConfigSelector,
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
