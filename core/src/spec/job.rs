//! One measured training job: everything the runner process needs, serialized as JSON.

use super::{
    CheckpointSpec, ConfigSpec, LossScale, ModelConfig, Precision, Profile, Study, TrainConfig,
};
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::strategy::{Attention, LayerNormSaving, Segment};
use crate::units::Policy;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// How a job recomputes activations: exactly one of the field's strategies, so that conflicting
/// settings cannot be expressed (an experiment file that sets two of `checkpoint`, `budget`,
/// `checkmate` and `balanced_checkpointing` is refused when it loads, naming the fields).
///
/// Every variant but [`Recompute::Balanced`] is carried out by the runner's segment executor
/// from a segment plan that the plan stage makes before the run ([`crate::planner::plan`]);
/// `Balanced` is Burn's op-level autodiff strategy and needs no plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Recompute {
    /// Plain backward: every block's activations are kept from the forward pass.
    #[default]
    None,
    /// Keep the input of every K-th block; backward recomputes one K-block segment at a time
    /// (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", section 3).
    EveryK(usize),
    /// K = ceil(sqrt(layers)) (Chen et al. 2016, section 4.1).
    Sqrt,
    /// An activation memory budget `b` in [0, 1] of the span between full checkpointing
    /// (`b = 0`) and none (`b = 1`): the block-level knapsack of [`crate::budget`] over the
    /// job's own profile (PyTorch's `activation_memory_budget`).
    Budget(f64),
    /// The least recomputation whose predicted peak fits this fraction (0, 1] of the
    /// no-recomputation peak: the exact dynamic program of [`crate::segment_plan`] over the
    /// job's own profile (the Checkmate objective, Jain et al., MLSys 2020, eq. 1a).
    Checkmate(f64),
    /// Burn's op-level `BalancedCheckpointing` autodiff strategy (no segment plan).
    Balanced,
    /// An explicit segment plan, as written in a job file.
    Explicit(Vec<Segment>),
}

impl Recompute {
    /// The activation-checkpointing interval of an every-K or sqrt strategy (the experiment
    /// file's `checkpoint` field); [`CheckpointSpec::None`] for every other strategy.
    pub fn checkpoint(&self) -> CheckpointSpec {
        match self {
            Recompute::EveryK(k) => CheckpointSpec::Every(*k),
            Recompute::Sqrt => CheckpointSpec::Sqrt,
            _ => CheckpointSpec::None,
        }
    }

    /// The budget `b` of a [`Recompute::Budget`] strategy.
    pub fn budget(&self) -> Option<f64> {
        match self {
            Recompute::Budget(b) => Some(*b),
            _ => None,
        }
    }

    /// The budget fraction of a [`Recompute::Checkmate`] strategy.
    pub fn checkmate(&self) -> Option<f64> {
        match self {
            Recompute::Checkmate(f) => Some(*f),
            _ => None,
        }
    }

    /// Whether this is Burn's `BalancedCheckpointing`.
    pub fn is_balanced(&self) -> bool {
        matches!(self, Recompute::Balanced)
    }

    /// Whether the plan depends on measured costs, so the plan stage runs the job's profiling
    /// pass first (budget and Checkmate).
    pub fn needs_profile(&self) -> bool {
        matches!(self, Recompute::Budget(_) | Recompute::Checkmate(_))
    }

    /// Whether the job recomputes some activations in backward (every strategy but plain
    /// backward; an explicit plan when one of its segments is recomputed).
    pub fn recomputes(&self) -> bool {
        match self {
            Recompute::None => false,
            Recompute::Explicit(segments) => segments.iter().any(|s| s.recompute),
            _ => true,
        }
    }
}

/// The memory strategy of a job.
///
/// In JSON (job files, records and the job key) it keeps the fields it had before
/// [`Recompute`] existed (`checkpoint`, `budget`, `checkmate`, `balanced_checkpointing`,
/// `segments`), so the keys of recorded jobs are unchanged and every record stays readable;
/// reading a strategy that sets two of them fails, naming both.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(try_from = "StrategyWire", into = "StrategyWire")]
pub struct Strategy {
    /// Precision of parameters and activations.
    pub precision: Precision,
    /// How activations are recomputed.
    pub recompute: Recompute,
    /// Step each segment's parameters as soon as their gradients exist.
    pub fused_optimizer: bool,
    /// Burn's kernel-fusion backend (CUDA only).
    pub fusion: bool,
    /// The blocks' attention.
    pub attention: Attention,
    /// What the layer norms keep for backward.
    pub layer_norm: LayerNormSaving,
    /// f32 master weights with `precision` compute (see [`ConfigSpec::master_weights`]).
    pub master_weights: bool,
    /// Loss scaling of the 16-bit backward pass.
    pub loss_scale: Option<LossScale>,
    /// What the blocks of recomputed segments keep, unit by unit (rematerialization inside the
    /// block, [`crate::units`]); `None` runs the block-granular segment executor.
    pub policy: Option<Policy>,
    /// Nested checkpointing inside every `checkpoint = K` segment: blocks per inner segment
    /// ([`crate::strategy::every_k_nested`], [`ConfigSpec::nested_checkpoint`]); `None`: each
    /// segment is recomputed in one piece.
    pub nested_checkpoint: Option<usize>,
    /// The head's logits recomputed in backward in this many chunks of rows
    /// ([`ConfigSpec::head_chunks`]); `None`: the head keeps its logits (autodiff).
    pub head_chunks: Option<usize>,
}

impl Strategy {
    /// Whether the plan stage must run the job's profiling pass before planning: a memory
    /// budget or a Checkmate fraction ([`Recompute::needs_profile`]), or a policy that chooses
    /// by measured unit times ([`crate::units::Policy::needs_profile`]).
    pub fn needs_profile(&self) -> bool {
        self.recompute.needs_profile() || self.policy.is_some_and(|p| p.needs_profile())
    }

    /// Whether the job runs the segment executor, so the plan stage must give it a segment plan
    /// ([`JobSpec::plan`]): every strategy but plain backward without the fused optimizer step,
    /// and Burn's balanced checkpointing.
    pub fn needs_plan(&self) -> bool {
        match self.recompute {
            Recompute::None => self.fused_optimizer,
            Recompute::Balanced => false,
            _ => true,
        }
    }
}

/// [`Strategy`] as it reads and writes in JSON: the fields of job files and records from before
/// [`Recompute`] (one per strategy, so that old keys and records stay as they are).
#[derive(Serialize, Deserialize)]
struct StrategyWire {
    precision: Precision,
    checkpoint: CheckpointSpec,
    #[serde(default, with = "crate::nonfinite::option")]
    budget: Option<f64>,
    fused_optimizer: bool,
    fusion: bool,
    balanced_checkpointing: bool,
    /// Job files without the field predate it and ran the naive attention; the naive attention
    /// is omitted from the JSON, so those jobs keep their keys.
    #[serde(
        default = "Attention::legacy",
        skip_serializing_if = "Attention::is_naive"
    )]
    attention: Attention,
    /// Job files without the field predate it and ran Burn's composed layer norm, which is
    /// omitted from the JSON, so those jobs keep their keys.
    #[serde(
        default = "LayerNormSaving::legacy",
        skip_serializing_if = "LayerNormSaving::is_composed"
    )]
    layer_norm: LayerNormSaving,
    #[serde(default, with = "crate::nonfinite::option")]
    checkmate: Option<f64>,
    /// An explicit segment plan; in records written before [`JobSpec::plan`] existed, also the
    /// plan the driver made for a Checkmate configuration (now in [`JobSpec::plan`]).
    #[serde(default)]
    segments: Option<Vec<Segment>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    master_weights: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    loss_scale: Option<LossScale>,
    /// Absent in job files of block-granular plans, so their keys are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<Policy>,
    /// Absent in job files without nested checkpointing, so their keys are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nested_checkpoint: Option<usize>,
    /// Absent in job files whose head keeps its logits, so their keys are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    head_chunks: Option<usize>,
}

impl TryFrom<StrategyWire> for Strategy {
    type Error = String;

    fn try_from(w: StrategyWire) -> std::result::Result<Self, String> {
        let mut set = Vec::new();
        if w.checkpoint != CheckpointSpec::None {
            set.push((
                "checkpoint",
                match w.checkpoint {
                    CheckpointSpec::Every(k) => Recompute::EveryK(k),
                    _ => Recompute::Sqrt,
                },
            ));
        }
        if let Some(b) = w.budget {
            set.push(("budget", Recompute::Budget(b)));
        }
        if w.balanced_checkpointing {
            set.push(("balanced_checkpointing", Recompute::Balanced));
        }
        match (w.checkmate, w.segments) {
            // A Checkmate job's segments were its plan, not a strategy of their own.
            (Some(f), _) => set.push(("checkmate", Recompute::Checkmate(f))),
            (None, Some(s)) => set.push(("segments", Recompute::Explicit(s))),
            (None, None) => {}
        }
        if set.len() > 1 {
            let names: Vec<&str> = set.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "strategy sets {}: a job recomputes activations one way, so keep one of them",
                names.join(" and ")
            ));
        }
        Ok(Strategy {
            precision: w.precision,
            recompute: set.pop().map(|(_, r)| r).unwrap_or_default(),
            fused_optimizer: w.fused_optimizer,
            fusion: w.fusion,
            attention: w.attention,
            layer_norm: w.layer_norm,
            master_weights: w.master_weights,
            loss_scale: w.loss_scale,
            policy: w.policy,
            nested_checkpoint: w.nested_checkpoint,
            head_chunks: w.head_chunks,
        })
    }
}

impl From<Strategy> for StrategyWire {
    fn from(s: Strategy) -> Self {
        let r = &s.recompute;
        StrategyWire {
            precision: s.precision,
            checkpoint: r.checkpoint(),
            budget: r.budget(),
            fused_optimizer: s.fused_optimizer,
            fusion: s.fusion,
            balanced_checkpointing: r.is_balanced(),
            attention: s.attention,
            layer_norm: s.layer_norm,
            checkmate: r.checkmate(),
            segments: match &s.recompute {
                Recompute::Explicit(segments) => Some(segments.clone()),
                _ => None,
            },
            master_weights: s.master_weights,
            loss_scale: s.loss_scale,
            policy: s.policy,
            nested_checkpoint: s.nested_checkpoint,
            head_chunks: s.head_chunks,
        }
    }
}

impl From<&ConfigSpec> for Strategy {
    fn from(c: &ConfigSpec) -> Self {
        Strategy {
            precision: c.precision,
            recompute: c.recompute(),
            fused_optimizer: c.fused_optimizer,
            fusion: c.fusion,
            attention: c.attention(),
            layer_norm: c.layer_norm,
            master_weights: c.master_weights,
            loss_scale: c.loss_scale,
            policy: c.policy,
            nested_checkpoint: c.nested_checkpoint,
            head_chunks: c.head_chunks,
        }
    }
}

/// CubeCL's autotune level (`cubecl::config::autotune::AutotuneLevel`): how finely kernel
/// choices are keyed by shape (minimal: the coarsest, fewest tunings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AutotuneLevel {
    /// Shapes bucketed by a factor 1.25: the fewest distinct tunings.
    #[default]
    Minimal,
    /// CubeCL's default.
    Balanced,
    /// CubeCL's increased autotuning effort.
    Extensive,
    /// CubeCL's maximum autotuning effort.
    Full,
}

/// How CubeCL's memory pool places allocations on the GPU.
///
/// Measured on an H100 80GB at the `full` profile (docs/src/operations/gpu-runs.md): over 13
/// configurations of `peak_memory`, `exact_size` held less reserved memory than `sliced` in 9
/// and came within 1.25x of the (lower-bound) allocated peak in 10, against 8 for `sliced`, at
/// the same step time; so it is the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPool {
    /// CubeCL's own default (`MemoryConfiguration::SubSlices`): pages of fixed sizes (on an
    /// 80 GB GPU 20 MiB to 20 GiB, a quarter of the device at most), each cut into slices
    /// first-fit; a page is released only by `memory_cleanup`, and only when wholly free.
    Sliced,
    /// Every allocation in CubeCL's persistent pool (`PersistentMemory::Enforced`): one device
    /// buffer of the exact (aligned) size per allocation, reused by later allocations of the
    /// same size. No fragmentation inside pages, but a freed buffer serves only its own size.
    #[default]
    ExactSize,
}

impl MemoryPool {
    /// The pool of job files written before the setting existed: CubeCL's default.
    pub fn legacy() -> Self {
        MemoryPool::Sliced
    }
}

/// Settings of the GPU runtime a job runs with. They change speed and the memory pool's
/// behaviour, not the arithmetic; CPU jobs ignore them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceSettings {
    /// CubeCL autotune level (part of a CUDA job's key).
    #[serde(default)]
    pub autotune_level: AutotuneLevel,
    /// Release the pool's free pages at every step boundary (`Backend::memory_cleanup`), so
    /// that reserved bytes follow each step's own demand (part of a CUDA job's key).
    #[serde(default)]
    pub memory_cleanup: bool,
    /// How the pool places allocations (part of a CUDA job's key). Job files without the field
    /// predate it and ran CubeCL's default, [`MemoryPool::Sliced`].
    #[serde(default = "MemoryPool::legacy")]
    pub memory_pool: MemoryPool,
    /// Directory of CubeCL's on-disk caches (autotune results and compiled kernels), shared by
    /// every job of a sweep (`.memwall/cache/cubecl`, or `<export>/cache/cubecl` in exported
    /// jobs, relative to the directory the runner starts in). Not part of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
}

impl DeviceSettings {
    /// Whether these are the defaults (omitted from job files, keeping older keys).
    pub fn is_default(&self) -> bool {
        *self == DeviceSettings::default()
    }
}

/// A tokenized corpus on disk (written by `data::prepare`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PreparedData {
    /// Directory holding `tokenizer.json`, `train.tokens`, `eval.tokens`, `meta.json`.
    pub dir: PathBuf,
    /// Content hash of the corpus and tokenizer settings (part of the job key).
    pub fingerprint: String,
    /// Vocabulary size of the trained tokenizer (the model's embedding rows).
    pub vocab_size: usize,
    /// Id of `<|endoftext|>`.
    pub eos_id: u32,
}

/// A measured training job (one process).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobSpec {
    /// Name of the study (`[study] name`).
    pub study: String,
    /// The profile the study was resolved for.
    pub profile: Profile,
    /// Name of the configuration (`[[configs]] name`), unique in the study.
    pub config: String,
    /// Display name of the configuration in reports.
    pub label: String,
    /// Position of the configuration in the experiment file (report order; not in the key).
    pub order: usize,
    /// Whether the configuration is the study's baseline, the one the others are compared with.
    pub control: bool,
    /// The model, with `vocab` set to the trained tokenizer's vocabulary size.
    pub model: ModelConfig,
    /// Training settings.
    pub train: TrainConfig,
    /// The memory strategy.
    pub strategy: Strategy,
    /// The Burn backend the job runs on.
    pub backend: BackendKind,
    /// GPU ordinal for CUDA; 0 on the CPU.
    pub device_index: usize,
    /// The tokenized corpus.
    pub data: PreparedData,
    /// The segment plan the runner executes, made by the plan stage before the run
    /// ([`crate::planner::plan`]), with its prediction; `None` before planning and for
    /// strategies without segments (plain backward, balanced checkpointing). Not in the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::strategy::SegmentPlan>,
    /// The unit-level refinement of [`JobSpec::plan`] when the strategy has a policy (made by
    /// [`crate::planner::plan_job`]): the unit executor runs it. `None`: the segment executor
    /// runs the segments at block granularity. Not in the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_plan: Option<crate::units::UnitPlan>,
    /// A Checkmate plan's solver report: budget, predicted peak and cost, status and solve
    /// time (its segments are [`JobSpec::plan`]'s). Not in the key.
    #[serde(default)]
    pub planned: Option<crate::strategy::TransformerPlan>,
    /// GPU runtime settings (autotune level, pool cleanup, cache directory).
    #[serde(default, skip_serializing_if = "DeviceSettings::is_default")]
    pub device_settings: DeviceSettings,
    /// Run only the job's profiling pass (per-block activation bytes and forward time on the
    /// job's own device and precision) and record it, without training: the plan stage of a
    /// Checkmate configuration runs the job this way before solving its plan. Not in the key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub profile_only: bool,
    /// Which run of its configuration the job is (0-based, below `[study] repeats`). Part of
    /// the key from 1 on (omitted when 0), so the first run keeps the key of a study without
    /// repeats and raising `repeats` adds jobs without rerunning the finished ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeat: usize,
    /// A memory limit for the job on the CPU, bytes of live heap of its process: the counting
    /// allocator refuses a block that would pass it, and the job ends `out_of_memory` as on a
    /// device of that size (`memwall_runner::measure::set_limit`). The plan stage's profiling
    /// pass runs without it. `None`: no limit (on CUDA the device's memory is the limit, and a
    /// job with this field is unsupported there). Part of the key when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl JobSpec {
    /// The unit outputs each of the job's blocks keeps for backward, as the unit cost model
    /// ([`crate::units`]) sees any plan: the unit plan's when the job has one; a segment plan's
    /// as block-granular checkpointing runs it (a recomputed segment keeps only its output,
    /// [`crate::units::block_keeps`] with nothing kept inside); every unit output of every
    /// block for plain backward. `None` where the runner chooses the segments (balanced
    /// checkpointing) or the plan is not made yet.
    pub fn unit_keeps(&self) -> Option<Vec<crate::units::UnitSet>> {
        use crate::units::{block_keeps, UnitSet};
        match (&self.unit_plan, &self.plan, &self.strategy.recompute) {
            (Some(units), _, _) => Some(units.keeps.clone()),
            (None, Some(plan), _) => Some(block_keeps(&plan.segments, UnitSet::NONE)),
            (None, None, Recompute::None) => Some(vec![UnitSet::ALL; self.model.layers]),
            (None, None, _) => None,
        }
    }

    /// Content hash (16 hex digits) of everything that affects the job's result: study,
    /// profile, configuration, model, training settings, strategy, backend and the
    /// tokenized corpus. Paths and the git revision are not part of it.
    pub fn key(&self) -> String {
        #[derive(Serialize)]
        struct KeyFields<'a> {
            study: &'a str,
            profile: Profile,
            config: &'a str,
            model: &'a ModelConfig,
            train: &'a TrainConfig,
            strategy: &'a Strategy,
            backend: BackendKind,
            device_index: usize,
            data: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            device_settings: Option<(AutotuneLevel, bool, MemoryPool)>,
            #[serde(skip_serializing_if = "is_zero")]
            repeat: usize,
            #[serde(skip_serializing_if = "Option::is_none")]
            memory_limit_bytes: Option<u64>,
        }
        // A plan is derived from the strategy (and measured costs): the job is identified by
        // its strategy, not by the segments the planner picked (`plan` is not a key field).
        let strategy = &self.strategy;
        let fields = KeyFields {
            study: &self.study,
            profile: self.profile,
            config: &self.config,
            model: &self.model,
            train: &self.train,
            strategy,
            backend: self.backend,
            device_index: self.device_index,
            data: &self.data.fingerprint,
            device_settings: self.backend.is_gpu().then_some((
                self.device_settings.autotune_level,
                self.device_settings.memory_cleanup,
                self.device_settings.memory_pool,
            )),
            repeat: self.repeat,
            memory_limit_bytes: self.memory_limit_bytes,
        };
        let json = serde_json::to_vec(&fields).expect("job key fields serialize");
        let digest = Sha256::digest(&json);
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads a job file written by the driver.
    pub fn read(path: &std::path::Path) -> Result<JobSpec> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        let bad = |message: String| Error::Job {
            job: path.display().to_string(),
            message,
        };
        let job: JobSpec =
            crate::json::parse_json(&text).map_err(|e| bad(format!("malformed job file ({e})")))?;
        job.check()
            .map_err(|(field, m)| bad(format!("field `{field}`: {m}")))?;
        Ok(job)
    }

    /// Checks the numbers of a job (as an experiment file's are checked at load time, for job
    /// files written by hand or by another tool): the model's sizes, the training settings, and
    /// a checkpoint interval of at most the layer count. Returns the field and the message.
    pub fn check(&self) -> std::result::Result<(), (String, String)> {
        // A job's vocabulary is the trained tokenizer's: 256 bytes and `<|endoftext|>` at least.
        if self.model.vocab < 257 {
            return Err((
                "model.vocab".into(),
                format!(
                    "{} is below the 257 tokens of any trained tokenizer",
                    self.model.vocab
                ),
            ));
        }
        let sizes = ModelConfig {
            vocab: self.model.vocab.max(260),
            ..self.model
        };
        super::file::validate_model(&sizes).map_err(|(f, m)| (format!("model.{f}"), m))?;
        super::file::check_train(&self.train).map_err(|(f, m)| (format!("train.{f}"), m))?;
        self.check_strategy()
    }

    /// The strategy's numbers against the model: a checkpoint interval of at most the layer
    /// count, a budget in [0, 1], a Checkmate fraction in (0, 1], an explicit plan that covers
    /// the blocks, and no fused optimizer step with balanced checkpointing.
    fn check_strategy(&self) -> std::result::Result<(), (String, String)> {
        let layers = self.model.layers;
        let err = |field: &str, m: String| Err((format!("strategy.{field}"), m));
        match &self.strategy.recompute {
            Recompute::EveryK(k) if *k == 0 || *k > layers => err(
                "checkpoint",
                format!("interval {k} is not in [1, {layers}] (the model's layers)"),
            ),
            Recompute::Budget(b) if !(0.0..=1.0).contains(b) => err(
                "budget",
                format!("{b} is not in [0, 1] (0 = full checkpointing, 1 = none)"),
            ),
            Recompute::Checkmate(f) if !(*f > 0.0 && *f <= 1.0) => err(
                "checkmate",
                format!("{f} is not in (0, 1] (a fraction of the no-recomputation peak)"),
            ),
            Recompute::Explicit(segments) => crate::strategy::check_segments(segments, layers)
                .map_err(|m| ("strategy.segments".to_string(), m)),
            _ if self.strategy.policy.is_some() && !self.strategy.recompute.recomputes() => err(
                "policy",
                "a policy says what recomputed segments keep: the job recomputes nothing; set \
                 `checkpoint`, `budget`, `checkmate` or recomputed `segments`, or remove it"
                    .into(),
            ),
            _ if self.strategy.policy.is_some() && self.strategy.recompute.is_balanced() => err(
                "policy",
                "Burn's BalancedCheckpointing plans inside autodiff; a policy needs the unit \
                 executor: remove one of them"
                    .into(),
            ),
            Recompute::Balanced if self.strategy.fused_optimizer => err(
                "balanced_checkpointing",
                "Burn's BalancedCheckpointing is an autodiff strategy of plain backward: remove \
                 fused_optimizer or balanced_checkpointing"
                    .into(),
            ),
            _ => Ok(()),
        }
    }
}

/// The tokenized corpora of a study, by the vocabulary size its models ask for (`vocab`; the
/// trained tokenizer may have fewer tokens): one per entry of [`Study::vocabularies`].
pub type Corpora = std::collections::BTreeMap<usize, PreparedData>;

impl Study {
    /// Expands a training study into jobs on `backend`, each model's configurations on the
    /// corpus tokenized for its vocabulary (`corpora`): `header.repeats` runs of every
    /// configuration, interleaved (all configurations' run 0, then all run 1, ...). A
    /// configuration whose vocabulary has no corpus in `corpora` gives no job.
    pub fn jobs(
        &self,
        backend: BackendKind,
        device_index: usize,
        corpora: &Corpora,
    ) -> Vec<JobSpec> {
        if self.model.is_none() {
            return Vec::new();
        }
        let repeats = self.header.repeats.max(1);
        (0..repeats)
            .flat_map(|repeat| {
                self.configs
                    .iter()
                    .enumerate()
                    .map(move |(order, c)| (repeat, order, c))
            })
            .filter_map(|(repeat, order, c)| {
                let model = self.model_of(c)?;
                Some((repeat, order, c, model, corpora.get(&model.vocab)?))
            })
            .map(|(repeat, order, c, model, data)| JobSpec {
                order,
                study: self.header.name.clone(),
                profile: self.profile,
                config: c.name.clone(),
                label: c.label.clone(),
                control: c.control,
                model: ModelConfig {
                    vocab: data.vocab_size,
                    ..model
                },
                train: TrainConfig {
                    optimizer: c.optimizer.unwrap_or(self.train.optimizer),
                    weight_decay: c.weight_decay.unwrap_or(self.train.weight_decay),
                    accumulation_steps: c.accumulation_steps.unwrap_or(1),
                    ..self.train
                },
                strategy: Strategy::from(c),
                backend,
                device_index,
                data: data.clone(),
                plan: None,
                planned: None,
                unit_plan: None,
                device_settings: DeviceSettings {
                    autotune_level: c.autotune_level,
                    memory_cleanup: c.memory_cleanup,
                    memory_pool: c.memory_pool,
                    cache_dir: None,
                },
                profile_only: false,
                repeat,
                memory_limit_bytes: None,
            })
            .collect()
    }

    /// The corpora of a study of one vocabulary: `data` for the profile model's (tests and
    /// callers that tokenized one corpus).
    pub fn one_corpus(&self, data: PreparedData) -> Corpora {
        self.model
            .map(|m| Corpora::from([(m.vocab, data)]))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A strategy as job files and records wrote it before `Recompute` (field order included).
    fn wire(fields: &str) -> String {
        format!(
            r#"{{"precision":"f32","checkpoint":"none","budget":null,"fused_optimizer":false,"fusion":false,"balanced_checkpointing":false,{fields}"checkmate":null,"segments":null}}"#
        )
    }

    #[test]
    fn every_recompute_strategy_writes_the_json_it_was_read_from() {
        let segments = r#"[{"start":0,"end":2,"recompute":true}]"#;
        let cases = [
            (wire(""), Recompute::None),
            (
                wire("").replace(r#""checkpoint":"none""#, r#""checkpoint":2"#),
                Recompute::EveryK(2),
            ),
            (
                wire("").replace(r#""checkpoint":"none""#, r#""checkpoint":"sqrt""#),
                Recompute::Sqrt,
            ),
            (
                wire("").replace(r#""budget":null"#, r#""budget":0.05"#),
                Recompute::Budget(0.05),
            ),
            (
                wire("").replace(r#""checkmate":null"#, r#""checkmate":0.6"#),
                Recompute::Checkmate(0.6),
            ),
            (
                wire("").replace(
                    r#""balanced_checkpointing":false"#,
                    r#""balanced_checkpointing":true"#,
                ),
                Recompute::Balanced,
            ),
            (
                wire("").replace(r#""segments":null"#, &format!(r#""segments":{segments}"#)),
                Recompute::Explicit(vec![Segment {
                    start: 0,
                    end: 2,
                    recompute: true,
                    inner: None,
                }]),
            ),
        ];
        for (json, recompute) in cases {
            let s: Strategy = serde_json::from_str(&json).unwrap();
            assert_eq!(s.recompute, recompute, "{json}");
            // The same bytes back: job keys hash this JSON, so they stay the same.
            assert_eq!(serde_json::to_string(&s).unwrap(), json);
        }
    }

    #[test]
    fn a_recorded_checkmate_plan_is_not_an_explicit_strategy_and_two_strategies_are_refused() {
        // Records written before `JobSpec::plan` kept a Checkmate plan's segments here.
        let old = wire("")
            .replace(r#""checkmate":null"#, r#""checkmate":0.8"#)
            .replace(
                r#""segments":null"#,
                r#""segments":[{"start":0,"end":1,"recompute":false}]"#,
            );
        let s: Strategy = serde_json::from_str(&old).unwrap();
        assert_eq!(s.recompute, Recompute::Checkmate(0.8));
        let both = wire("")
            .replace(r#""checkpoint":"none""#, r#""checkpoint":1"#)
            .replace(r#""budget":null"#, r#""budget":0.5"#);
        let err = serde_json::from_str::<Strategy>(&both)
            .unwrap_err()
            .to_string();
        assert!(err.contains("checkpoint and budget"), "{err}");
    }
}
