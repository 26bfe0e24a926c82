//! Experiment files -> validated studies -> jobs.
//!
//! An experiment file (TOML, one per study, in `experiments/`) names its source document, the
//! model and training settings per [`Profile`], and the configurations to run. Unknown fields are
//! errors. [`Study::load`] validates a file for one profile; [`Study::jobs`] expands it into
//! [`JobSpec`]s, each identified by a content hash of everything that affects its result
//! ([`JobSpec::key`]), so a rerun skips finished jobs.
//!
//! File layout (see `experiments/peak_memory.toml` for a complete example):
//!
//! ```toml
//! [study]
//! name = "peak_memory"          # folder name under reports/ and runs/
//! title = "..."
//! source = "004_cef2fa4595315230.txt"
//! kind = "training"
//!
//! [train]                       # defaults for every profile
//! steps = 10
//!
//! [profiles.cpu.model]          # the model per profile (smoke, cpu, full)
//! layers = 8
//! ...
//!
//! [[configs]]                   # one row of the study's table
//! name = "control"
//! precision = "f32"
//! ```

pub mod claims;
mod file;
mod job;
mod memory;
pub mod provenance;
mod roles;
mod selector;

pub use file::{
    AttentionOption, CheckpointSpec, Claim, ConfigSpec, DataConfig, Goal, GoalMetric, GpuJob,
    LossScale, ModelConfig, OptimizerKind, Precision, StudyHeader, StudyKind, TrainConfig,
};
pub use file::{
    MAX_EVAL_BATCHES, MAX_STEPS, MAX_SUITE_PLACE, MAX_TIMELINE_LINES, MAX_VOCAB, MIN_SWEEP_POINTS,
};
pub use job::{
    AutotuneLevel, Corpora, DeviceSettings, JobSpec, MemoryPool, PreparedData, Recompute, Strategy,
};
pub use memory::{
    check_fits, human_bytes, tokenizer_training_bytes, DeviceMemory, MemoryEstimate, TooLarge,
};
pub use roles::StudyRoles;
pub use selector::ConfigSelector;

use crate::error::{Error, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Size profile of a study (DESIGN.md section 5).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Seconds: for tests and CI.
    Smoke,
    /// The studies scaled so the whole suite finishes in minutes on 2 CPU cores.
    Cpu,
    /// The source documents' sizes (for GPUs).
    Full,
}

impl Profile {
    /// All profiles, smallest first.
    pub const ALL: [Profile; 3] = [Profile::Smoke, Profile::Cpu, Profile::Full];

    /// The lowercase name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Smoke => "smoke",
            Profile::Cpu => "cpu",
            Profile::Full => "full",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "smoke" => Ok(Profile::Smoke),
            "cpu" => Ok(Profile::Cpu),
            "full" => Ok(Profile::Full),
            other => Err(format!(
                "unknown profile `{other}`: expected smoke, cpu or full"
            )),
        }
    }
}

/// A study validated for one profile: what the experiment file asks for, resolved.
#[derive(Debug, Clone)]
pub struct Study {
    /// The experiment file it came from.
    pub path: PathBuf,
    /// The `[study]` table: name, title, source document, kind.
    pub header: StudyHeader,
    /// The profile the study was resolved for.
    pub profile: Profile,
    /// The model of this profile (training studies only).
    pub model: Option<ModelConfig>,
    /// The profile's named models (`[profiles.<p>] models.<name> = { ... }`), which
    /// configurations with `model = "<name>"` train instead of [`Study::model`].
    pub models: std::collections::BTreeMap<String, ModelConfig>,
    /// Training settings: the file's `[train]` defaults overridden by
    /// `[profiles.<profile>.train]`.
    pub train: TrainConfig,
    /// The corpus (training studies only), its path resolved against the base directory or
    /// replaced by the data override.
    pub data: Option<DataConfig>,
    /// The configurations, in file order, grid expanded.
    pub configs: Vec<ConfigSpec>,
    /// The goals the report evaluates (`[[goals]]`).
    pub goals: Vec<Goal>,
    /// The source document's headline claims (`[[claims]]`), checked in the report's
    /// "Results at a glance" block.
    pub claims: Vec<claims::SourceClaim>,
    /// Study-specific parameters of non-training studies (`[params]` merged with
    /// `[profiles.<profile>.params]`), deserialized by the study itself.
    pub params: toml::Table,
}

/// What an experiment file says for every profile: its `[study]` table, configurations, goals
/// and claims ([`Study::outline`]). A report is rendered from it and the records, which carry
/// their own profile's sizes; [`Study::load`] resolves one profile for running.
#[derive(Debug, Clone)]
pub struct StudyOutline {
    /// The experiment file it came from.
    pub path: PathBuf,
    /// The `[study]` table.
    pub header: StudyHeader,
    /// The configurations in file order, grids expanded, labels and control marks set.
    pub configs: Vec<ConfigSpec>,
    /// The goals the report evaluates (`[[goals]]`).
    pub goals: Vec<Goal>,
    /// The source document's headline claims (`[[claims]]`).
    pub claims: Vec<claims::SourceClaim>,
    /// The keys of `[params]` and of every profile's `params`.
    pub params_keys: std::collections::BTreeSet<String>,
}

impl StudyOutline {
    /// Whether `[params]` or a profile's `params` has `key` (e.g. `search`, the largest-input
    /// search of a training study).
    pub fn has_params(&self, key: &str) -> bool {
        self.params_keys.contains(key)
    }
}

impl Study {
    /// Reads and checks the profile-free part of the experiment file at `path`
    /// ([`StudyOutline`]): the header, the configurations (grids expanded), goals and claims,
    /// checked as [`Study::load`] checks them, without resolving a profile.
    ///
    /// # Errors
    /// As [`Study::load`], for the parts it reads.
    pub fn outline(path: &Path) -> Result<StudyOutline> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        file::outline(path, &text)
    }

    /// Reads and validates the experiment file at `path` for `profile`.
    ///
    /// `data_override` (the `--data` flag or `MEMWALL_DATA`) replaces the file's data path.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read; [`Error::Spec`] for syntax errors, unknown
    /// fields and wrong types (with the line); [`Error::SpecField`] for invalid values, naming
    /// the field and the fix.
    pub fn load(path: &Path, profile: Profile, data_override: Option<&Path>) -> Result<Study> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        file::parse(path, &text, profile, data_override)
    }

    /// Reads only the `[study]` table of the experiment file at `path`: its name, title,
    /// source, kind and roles, for no profile.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read; [`Error::Spec`] for a header that does not
    /// parse; [`Error::SpecField`] naming the header field at fault.
    pub fn header(path: &Path) -> Result<StudyHeader> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
        file::read_header(path, &text)
    }

    /// The directory relative paths in the file are resolved against: the parent of the
    /// directory holding the file (the workspace root for files in `experiments/`).
    pub fn base_dir(path: &Path) -> PathBuf {
        file::base_dir(path)
    }

    /// Every `*.toml` file in `dir`, sorted by name.
    pub fn discover(dir: &Path) -> Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io("listing", dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// The model configuration `c` trains: its named model, else the profile's (`None` for a
    /// study without models).
    pub fn model_of(&self, c: &ConfigSpec) -> Option<ModelConfig> {
        match &c.model {
            Some(name) => self.models.get(name).copied(),
            None => self.model,
        }
    }

    /// The models the configurations train, each once, in the order of their first
    /// configuration, with the dotted path of each in the file (`profiles.<p>.model` or
    /// `profiles.<p>.models.<name>`).
    pub fn trained_models(&self) -> Vec<(String, ModelConfig)> {
        let mut out: Vec<(String, ModelConfig)> = Vec::new();
        for c in &self.configs {
            let Some(m) = self.model_of(c) else { continue };
            let field = match &c.model {
                Some(name) => format!("profiles.{}.models.{name}", self.profile),
                None => format!("profiles.{}.model", self.profile),
            };
            if !out.iter().any(|(f, _)| *f == field) {
                out.push((field, m));
            }
        }
        out
    }

    /// The tokenizer vocabularies the trained models ask for (`vocab`), sorted, each once: one
    /// tokenized corpus per vocabulary ([`Study::jobs`]).
    pub fn vocabularies(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.trained_models().iter().map(|(_, m)| m.vocab).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Checks, before anything is allocated, that the study's model can run on `device` and
    /// its tokenizer can be trained in `host` RAM: the tokenizer's tables
    /// ([`tokenizer_training_bytes`]) must fit the host, and the configuration with the smallest
    /// [`MemoryEstimate`] must fit the device (a configuration that needs more than another is a
    /// result, `out_of_memory`, recorded by its job; a model that fits under no configuration is
    /// an input error). Non-training studies pass.
    ///
    /// # Errors
    /// [`Error::SpecField`] naming `profiles.<profile>.model.<field>`, the estimate, the device
    /// and the largest value of the field that fits.
    pub fn check_fits(&self, device: &DeviceMemory, host: &DeviceMemory) -> Result<()> {
        for (at, model) in self.trained_models() {
            self.check_model_fits(&at, &model, device, host)?;
        }
        Ok(())
    }

    /// [`Study::check_fits`] for one model (at the dotted path `at`) and its configurations.
    fn check_model_fits(
        &self,
        at: &str,
        model: &ModelConfig,
        device: &DeviceMemory,
        host: &DeviceMemory,
    ) -> Result<()> {
        let field = |name: &str| format!("{at}.{name}");
        let tokenizer = tokenizer_training_bytes(model.vocab);
        if tokenizer > host.total_bytes as f64 {
            return Err(Error::SpecField {
                path: self.path.clone(),
                field: field("vocab"),
                message: format!(
                    "`vocab` = {} needs {} of tokenizer tables while training the tokenizer, more \
                     than the {} of {}: use a vocabulary of at most {} tokens",
                    model.vocab,
                    human_bytes(tokenizer),
                    human_bytes(host.total_bytes as f64),
                    host.what,
                    (host.total_bytes as f64 / tokenizer_training_bytes(1)) as u64
                ),
            });
        }
        let cheapest = self
            .configs
            .iter()
            .filter(|c| self.model_of(c).as_ref() == Some(model))
            .map(|c| {
                (
                    Strategy::from(c),
                    c.optimizer.unwrap_or(self.train.optimizer),
                )
            })
            .map(|(s, o)| (MemoryEstimate::of_job(model, &s, o).total(), s, o))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((_, strategy, optimizer)) = cheapest else {
            return Ok(());
        };
        check_fits(model, &strategy, optimizer, device)
            .map(|_| ())
            .map_err(|too| Error::SpecField {
                path: self.path.clone(),
                field: field(too.field),
                message: format!("no configuration fits: {}", too.message),
            })
    }
}

impl ModelConfig {
    /// The shapes a unit plan of this model is sized by ([`crate::units::UnitShape`]), in
    /// `precision` (its bytes per element).
    pub fn unit_shape(&self, precision: Precision) -> crate::units::UnitShape {
        crate::units::UnitShape {
            d_model: self.d_model as u64,
            d_ff: self.d_ff as u64,
            heads: self.heads as u64,
            batch: self.batch as u64,
            seq_len: self.seq_len as u64,
            dtype_bytes: precision.bytes() as u64,
        }
    }

    /// Exact parameter count of `InitModel::init` (in `memwall-runner`)'s model (saturating at
    /// `u64::MAX` for sizes no device holds).
    pub fn parameter_count(&self) -> u64 {
        let (d, f, v, t) = (
            self.d_model as u128,
            self.d_ff as u128,
            self.vocab as u128,
            self.seq_len as u128,
        );
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        let block = mul(4, mul(d, d))
            .saturating_add(mul(2, mul(d, f)))
            .saturating_add(mul(4, d));
        let head = if self.tie_embeddings { 0 } else { mul(v, d) };
        let n = mul(self.layers as u128, block)
            .saturating_add(mul(v, d))
            .saturating_add(mul(t, d))
            .saturating_add(mul(2, d))
            .saturating_add(head);
        n.min(u64::MAX as u128) as u64
    }

    /// Training FLOPs per token, `6 N` (Kaplan et al. 2020, "Scaling Laws for Neural Language
    /// Models", section 2.1) with N the non-embedding parameters plus the head, plus the
    /// attention term `6 * 2 * layers * seq * d_model` (forward `2 n_layer n_ctx d_model`
    /// halved by the causal mask, times 3 for backward).
    pub fn train_flops_per_token(&self) -> f64 {
        let (d, f, v, l, t) = (
            self.d_model as f64,
            self.d_ff as f64,
            self.vocab as f64,
            self.layers as f64,
            self.seq_len as f64,
        );
        let n = l * (4.0 * d * d + 2.0 * d * f) + v * d;
        6.0 * n + 6.0 * l * t * d
    }
}
