//! One measured training job: everything the runner process needs, serialized as JSON.

use super::{
    CheckpointSpec, ConfigSpec, LossScale, ModelConfig, Precision, Profile, Study, TrainConfig,
};
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::strategy::{Attention, LayerNormSaving};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// The memory strategy of a job.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Strategy {
    /// Precision of parameters and activations.
    pub precision: Precision,
    /// Segment activation checkpointing.
    pub checkpoint: CheckpointSpec,
    /// Activation memory budget in [0, 1], if set.
    #[serde(default, with = "crate::record::nonfinite::option")]
    pub budget: Option<f64>,
    /// Step each segment's parameters as soon as their gradients exist.
    pub fused_optimizer: bool,
    /// Burn's kernel-fusion backend (CUDA only).
    pub fusion: bool,
    /// Burn's op-level `BalancedCheckpointing` autodiff strategy.
    pub balanced_checkpointing: bool,
    /// The blocks' attention. Job files without the field predate it and ran the naive
    /// attention; the naive attention is omitted from the JSON, so those jobs keep their keys.
    #[serde(
        default = "Attention::legacy",
        skip_serializing_if = "Attention::is_naive"
    )]
    pub attention: Attention,
    /// What the layer norms keep for backward. Job files without the field predate it and ran
    /// Burn's composed layer norm, which is omitted from the JSON, so those jobs keep their keys.
    #[serde(
        default = "LayerNormSaving::legacy",
        skip_serializing_if = "LayerNormSaving::is_composed"
    )]
    pub layer_norm: LayerNormSaving,
    /// Checkmate budget fraction, if the plan comes from the MILP.
    #[serde(default, with = "crate::record::nonfinite::option")]
    pub checkmate: Option<f64>,
    /// An explicit segment plan (filled by the driver for Checkmate plans).
    #[serde(default)]
    pub segments: Option<Vec<crate::strategy::Segment>>,
    /// f32 master weights with `precision` compute (see [`ConfigSpec::master_weights`]).
    /// Omitted from the JSON when false, so keys of jobs without it are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub master_weights: bool,
    /// Loss scaling of the 16-bit backward pass (omitted from the JSON when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<LossScale>,
}

impl From<&ConfigSpec> for Strategy {
    fn from(c: &ConfigSpec) -> Self {
        Strategy {
            precision: c.precision,
            checkpoint: c.checkpoint,
            budget: c.budget,
            fused_optimizer: c.fused_optimizer,
            fusion: c.fusion,
            balanced_checkpointing: c.balanced_checkpointing,
            attention: c.attention(),
            layer_norm: c.layer_norm,
            checkmate: c.checkmate,
            segments: None,
            master_weights: c.master_weights,
            loss_scale: c.loss_scale,
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
/// Measured on an H100 80GB at the `full` profile (README, "GPU runs"): over 13
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
    /// The Checkmate plan and its predictions (not part of the key; its segments are).
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
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl JobSpec {
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
        }
        // A Checkmate plan is derived from measured costs: the job is identified by its
        // budget fraction, not by the segments the solver picked.
        let strategy = Strategy {
            segments: if self.strategy.checkmate.is_some() {
                None
            } else {
                self.strategy.segments.clone()
            },
            ..self.strategy.clone()
        };
        let fields = KeyFields {
            study: &self.study,
            profile: self.profile,
            config: &self.config,
            model: &self.model,
            train: &self.train,
            strategy: &strategy,
            backend: self.backend,
            device_index: self.device_index,
            data: &self.data.fingerprint,
            device_settings: self.backend.is_gpu().then_some((
                self.device_settings.autotune_level,
                self.device_settings.memory_cleanup,
                self.device_settings.memory_pool,
            )),
            repeat: self.repeat,
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
        let job: JobSpec = crate::record::parse_json(&text)
            .map_err(|e| bad(format!("malformed job file ({e})")))?;
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
        if let CheckpointSpec::Every(k) = self.strategy.checkpoint {
            if k == 0 || k > self.model.layers {
                return Err((
                    "strategy.checkpoint".into(),
                    format!(
                        "interval {k} is not in [1, {}] (the model's layers)",
                        self.model.layers
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Study {
    /// Expands a training study into jobs on `backend`, with the corpus tokenized as `data`:
    /// `header.repeats` runs of every configuration, interleaved (all configurations' run 0,
    /// then all run 1, ...).
    pub fn jobs(
        &self,
        backend: BackendKind,
        device_index: usize,
        data: &PreparedData,
    ) -> Vec<JobSpec> {
        let Some(model) = self.model else {
            return Vec::new();
        };
        let repeats = self.header.repeats.max(1);
        (0..repeats)
            .flat_map(|repeat| {
                self.configs
                    .iter()
                    .enumerate()
                    .map(move |(order, c)| (repeat, order, c))
            })
            .map(|(repeat, order, c)| JobSpec {
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
                    ..self.train
                },
                strategy: Strategy::from(c),
                backend,
                device_index,
                data: data.clone(),
                planned: None,
                device_settings: DeviceSettings {
                    autotune_level: c.autotune_level,
                    memory_cleanup: c.memory_cleanup,
                    memory_pool: c.memory_pool,
                    cache_dir: None,
                },
                profile_only: false,
                repeat,
            })
            .collect()
    }
}
