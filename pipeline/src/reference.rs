//! The PyTorch reference column: the same model shape and configurations trained in PyTorch
//! eager on the same device by `reference/torch_peak_memory.py`, one process per
//! configuration: on a GPU through a bundle (`memwall bundle`, its `run.sh`, `memwall import`),
//! on this machine's CPU through `memwall reference --device cpu` ([`crate::reference_cmd`]).
//!
//! Data flow (one way): [`plan`] writes what the script runs (`<bundle>/reference/<study>.plan.json`,
//! from the bundled jobs); the script prints one [`TorchRow`] per configuration as JSON; the
//! import checks each row ([`read_rows`]) and stores it in the record store as
//! `runs/<study>/pytorch/<device>.<config>.json` ([`store_row`]); the report reads them
//! ([`load_rows`], [`section`]) beside memwall's records of the same device. Rows measured on
//! the CPU ([`TorchRow::on_cpu`]) are shown in the report's CPU section ([`cpu_table`]), beside
//! the group of memwall's records on the same CPU and model shape; the GPU rows, and CPU rows
//! with no such group, in the section "memwall beside PyTorch on the same device".

use crate::report::model::{Section, Table};
use crate::results::{self, JobRecord, JobStatus};
use crate::spec::{AttentionOption, ConfigSpec, JobSpec, OptimizerKind, Study};
use crate::strategy::LayerNormSaving;
use memwall_core::record::JsonError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Why a PyTorch reference row could not be read or stored; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The row file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The row file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not read as a [`TorchRow`].
    #[error("{path}: not a PyTorch reference row ({source})")]
    NotARow {
        /// The row file.
        path: PathBuf,
        /// The JSON field at fault, line and column.
        #[source]
        source: JsonError,
    },
    /// The row reads but is of another format or study, or a number is invalid.
    #[error("{path}: {reason}")]
    Invalid {
        /// The row file.
        path: PathBuf,
        /// The field at fault and why.
        reason: String,
    },
    /// The row does not serialize (it is not stored).
    #[error("{path}: row not written: {source}")]
    Serialize {
        /// Where the row was to be stored.
        path: PathBuf,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The row could not be written into the record store.
    #[error(transparent)]
    Store(#[from] crate::Error),
}

/// `format` of a [`TorchPlan`].
pub const PLAN_FORMAT: &str = "memwall-torch-plan/1";
/// `format` of a [`TorchRow`].
pub const ROW_FORMAT: &str = "memwall-torch-row/1";
// The studies the reference script covers say so in their experiment files
// (`study.pytorch_reference`, read by `memwall_core::spec::StudyRoles`): training studies whose
// configurations are the script's mechanisms (precision, checkpointing every K blocks, the
// fused step, torch.compile, the activation memory budget, the attention); mixed precision
// with master weights is left out configuration by configuration.
/// Folder of the rows inside a study's record-store folder.
pub const ROWS_DIR: &str = "pytorch";

/// The model shape of a [`TorchPlan`] (the job's model: pre-norm decoder, q/k/v/o without
/// bias, GELU MLP, LayerNorm, learned positions, tied head).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct TorchModel {
    /// Transformer blocks.
    pub layers: usize,
    /// Residual width.
    pub d_model: usize,
    /// Attention heads.
    pub heads: usize,
    /// MLP hidden width.
    pub d_ff: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Vocabulary (the bundled tokenizer's).
    pub vocab: usize,
    /// Whether the head shares the embedding matrix.
    pub tie_embeddings: bool,
}

/// Training settings of a [`TorchPlan`] (the first job's; each [`TorchConfig`] carries its own
/// optimizer, learning rate and weight decay).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct TorchTrain {
    /// Measured steps.
    pub steps: usize,
    /// Warm-up steps before them (not timed).
    pub warmup_steps: usize,
    /// Learning rate.
    pub lr: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Seed of the parameters and the random tokens.
    pub seed: u64,
}

/// One configuration as PyTorch runs it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TorchConfig {
    /// memwall's configuration name (the row's key).
    pub name: String,
    /// Display label.
    pub label: String,
    /// `f32`, `f16` or `bf16` (parameters and activations; the loss in f32).
    pub precision: String,
    /// Blocks per `torch.utils.checkpoint` segment (`None`: no checkpointing).
    pub checkpoint: Option<usize>,
    /// An optimizer step per parameter in `register_post_accumulate_grad_hook`.
    pub fused_optimizer: bool,
    /// `torch.compile` the model.
    pub compile: bool,
    /// `torch._functorch.config.activation_memory_budget` (implies `torch.compile`).
    pub activation_memory_budget: Option<f64>,
    /// `sdpa` (scaled_dot_product_attention) or `naive` (scores materialized).
    pub attention: String,
    /// The job's optimizer: `adamw` (`torch.optim.AdamW`) or `adafactor` (the script's
    /// Adafactor, memwall's algorithm). Plans written before this field read as `adamw`.
    #[serde(default = "adamw")]
    pub optimizer: String,
    /// The job's learning rate (absent in older plans: the plan's `train.lr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// The job's decoupled weight decay (absent in older plans: the plan's
    /// `train.weight_decay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
}

fn adamw() -> String {
    OptimizerKind::Adamw.as_str().into()
}

/// What the reference script runs for one study.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TorchPlan {
    /// [`PLAN_FORMAT`].
    pub format: String,
    /// The study.
    pub study: String,
    /// Profile of the bundled jobs.
    pub profile: String,
    /// The model.
    pub model: TorchModel,
    /// The training settings.
    pub train: TorchTrain,
    /// The configurations, in the experiment file's order.
    pub configs: Vec<TorchConfig>,
    /// (configuration, reason) of bundled configurations with no PyTorch counterpart.
    pub left_out: Vec<(String, String)>,
}

/// How one configuration's PyTorch run ended, as `torch_peak_memory.py` writes it (`"ok"`,
/// `"out_of_memory"`, `"failed"`, `"unsupported"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchStatus {
    /// Finished (`"ok"`): the row has its step time and throughput.
    Ok,
    /// The configuration did not fit in device memory (`"out_of_memory"`).
    OutOfMemory,
    /// The run failed (`"failed"`); `reason` holds the error.
    Failed,
    /// PyTorch or CUDA is missing where the script ran (`"unsupported"`); `reason` says which.
    Unsupported,
}

impl TorchStatus {
    /// The status's text in the rows: `"ok"`, `"out_of_memory"`, `"failed"` or
    /// `"unsupported"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TorchStatus::Ok => "ok",
            TorchStatus::OutOfMemory => "out_of_memory",
            TorchStatus::Failed => "failed",
            TorchStatus::Unsupported => "unsupported",
        }
    }
}

impl std::fmt::Display for TorchStatus {
    /// [`TorchStatus::as_str`], honouring width and alignment.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The kind of device a [`TorchRow`] ran on (`torch.device(...).type`), as the script writes it
/// in `device_type`: `"cuda"` or `"cpu"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TorchDeviceType {
    /// A CUDA GPU (`"cuda"`): peaks from PyTorch's caching allocator.
    Cuda,
    /// The CPU (`"cpu"`): no allocator statistics; the process's resident high-water mark.
    Cpu,
}

impl TorchDeviceType {
    /// The type's text in the rows: `"cuda"` or `"cpu"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TorchDeviceType::Cuda => "cuda",
            TorchDeviceType::Cpu => "cpu",
        }
    }
}

/// One configuration's result, as `torch_peak_memory.py` prints it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TorchRow {
    /// [`ROW_FORMAT`].
    pub format: String,
    /// The study.
    pub study: String,
    /// The configuration.
    pub config: String,
    /// `ok`, `out_of_memory`, `failed` or `unsupported`.
    pub status: TorchStatus,
    /// Why it did not finish.
    #[serde(default)]
    pub reason: Option<String>,
    /// `torch.cuda.get_device_name()`; on the CPU the `model name` of `/proc/cpuinfo` (the
    /// architecture where there is none), the name memwall's CPU records carry in
    /// `env.device_name`, so that rows and records match.
    pub device: String,
    /// The kind of device (`None` in rows written before the field: every one of them ran on
    /// CUDA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<TorchDeviceType>,
    /// Intra-op threads PyTorch ran with on the CPU (`torch.get_num_threads()` after
    /// `torch.set_num_threads`); `None` on CUDA and in older rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// `torch.__version__`.
    pub torch_version: String,
    /// Model parameters (elements).
    #[serde(default)]
    pub parameters: Option<u64>,
    /// `torch.cuda.max_memory_allocated()` over the whole run, bytes (`None` on the CPU).
    #[serde(default)]
    pub max_memory_allocated_bytes: Option<u64>,
    /// `torch.cuda.max_memory_reserved()` over the whole run, bytes (`None` on the CPU).
    #[serde(default)]
    pub max_memory_reserved_bytes: Option<u64>,
    /// The process's resident high-water mark at the end of the run, bytes
    /// (`getrusage(RUSAGE_SELF).ru_maxrss`, KiB on Linux, times 1024): the interpreter,
    /// libtorch and its kernels included, an upper bound of what the training needs. PyTorch
    /// keeps no allocator statistics on the CPU, so this is a CPU row's peak. `None` in older
    /// rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    /// The process's resident set right after `import torch`, before the model is built, bytes
    /// (`/proc/self/statm`; `None` where there is none and in older rows): the part of
    /// [`TorchRow::max_rss_bytes`] that is the interpreter and libtorch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_after_import_bytes: Option<u64>,
    /// Median wall time of the measured steps (device synchronized), seconds.
    #[serde(default)]
    pub median_step_s: Option<f64>,
    /// Sequences per second: batch / median step time.
    #[serde(default)]
    pub samples_per_s: Option<f64>,
    /// Wall time of the first (warm-up) step, seconds (compilation included).
    #[serde(default)]
    pub first_step_s: Option<f64>,
    /// Loss of the last step (nats per token).
    #[serde(default)]
    pub final_loss: Option<f64>,
    /// The model it ran.
    pub model: TorchModel,
    /// Measured and warm-up steps.
    pub train: TorchTrain,
    /// RFC 3339 time it finished.
    pub finished_at: String,
}

impl TorchRow {
    /// Whether the row ran on the CPU (`device_type` is `"cpu"`; rows without the field ran on
    /// CUDA).
    pub fn on_cpu(&self) -> bool {
        self.device_type == Some(TorchDeviceType::Cpu)
    }
}

/// Whether two configurations run the same memory mechanism in PyTorch (everything but the
/// name, label and optimizer settings).
fn same_mechanism(a: &TorchConfig, b: &TorchConfig) -> bool {
    (
        &a.precision,
        a.checkpoint,
        a.fused_optimizer,
        a.compile,
        a.activation_memory_budget,
        &a.attention,
    ) == (
        &b.precision,
        b.checkpoint,
        b.fused_optimizer,
        b.compile,
        b.activation_memory_budget,
        &b.attention,
    )
}

/// Why configuration `c` has no PyTorch counterpart in the reference script, or `None` where
/// it has one; `cpu`: the jobs run on a CPU backend (flex, ndarray).
fn no_counterpart(c: &ConfigSpec, cpu: bool) -> Option<String> {
    if let Some(name) = &c.model {
        return Some(format!(
            "trains the profile's named model `{name}`; a plan runs one model, the profile's own"
        ));
    }
    if cpu && c.fusion {
        return Some(
            "kernel fusion is Burn's fusion backend over CubeCL (CUDA): memwall's CPU backends \
             do not run it (its record is `unsupported`), so a torch.compile row would stand \
             beside no memwall number"
                .into(),
        );
    }
    if c.checkmate.is_some() {
        return Some(
            "a Checkmate plan is memwall's (its own profiling pass and exact planner); \
             PyTorch's nearest mechanism, activation_memory_budget, is in the budget rows"
                .into(),
        );
    }
    if c.master_weights {
        return Some(
            "f32 master weights with a 16-bit copy (and loss scaling) are not in the \
             reference script; its rows train in one precision"
                .into(),
        );
    }
    if c.balanced_checkpointing {
        return Some(
            "Burn's op-level BalancedCheckpointing has no PyTorch eager counterpart".into(),
        );
    }
    if c.layer_norm != LayerNormSaving::SavesInput {
        return Some(format!(
            "PyTorch's native layer norm keeps its input and row statistics (memwall's \
             `saves_input`); `{}` has no eager counterpart",
            c.layer_norm.as_str()
        ));
    }
    None
}

/// The PyTorch configuration of configuration `c` as bundled in `job` (a model of `layers`
/// layers).
fn torch_config(c: &ConfigSpec, job: &JobSpec, layers: usize) -> TorchConfig {
    TorchConfig {
        name: c.name.clone(),
        label: c.label.clone(),
        precision: c.precision.as_str().into(),
        checkpoint: c.checkpoint.segment_len(layers),
        fused_optimizer: c.fused_optimizer,
        compile: c.fusion || c.budget.is_some(),
        activation_memory_budget: c.budget,
        attention: match c.attention {
            AttentionOption::MemoryEfficient => "sdpa".into(),
            AttentionOption::Naive => "naive".into(),
        },
        optimizer: job.train.optimizer.as_str().into(),
        lr: Some(job.train.lr),
        weight_decay: Some(job.train.weight_decay),
    }
}

/// The plan of `study`'s bundled `jobs`, or `None` for a study the script does not cover (no
/// `study.pytorch_reference`).
/// Configurations with no PyTorch counterpart (Burn's BalancedCheckpointing, Checkmate plans,
/// master weights, other layer norms, and on a CPU backend kernel fusion) are left out with the
/// reason. The jobs' backend decides the device: CUDA jobs plan a GPU run, flex or ndarray
/// jobs a CPU run (`torch_peak_memory.py --device cpu`). On the CPU the activation-memory
/// budgets stay: `torch.compile` builds them with Inductor's C++ backend (a C++ compiler is
/// needed; without one the row is `failed` with the compiler's error).
pub fn plan(study: &Study, jobs: &[JobSpec]) -> Option<TorchPlan> {
    if !study.header.pytorch_reference {
        return None;
    }
    // The profile's own model (configurations of a named model are left out below).
    let first = jobs.iter().find(|j| {
        study
            .configs
            .iter()
            .any(|c| c.name == j.config && c.model.is_none())
    })?;
    let cpu = !first.backend.is_gpu();
    let m = first.model;
    let mut configs = Vec::new();
    let mut left_out = Vec::new();
    for job in jobs {
        let Some(c) = study.configs.iter().find(|c| c.name == job.config) else {
            continue;
        };
        if let Some(reason) = no_counterpart(c, cpu) {
            left_out.push((c.name.clone(), reason));
            continue;
        }
        let config = torch_config(c, job, m.layers);
        // PyTorch runs each memory configuration once, with the optimizer of its first
        // configuration (the source's rows come first): GPU time is scarce, the framework
        // comparison does not need both optimizers, and the CPU's rows are the GPU's.
        if let Some(twin) = configs.iter().find(|t| same_mechanism(t, &config)) {
            left_out.push((
                c.name.clone(),
                format!(
                    "the same mechanism as `{}` with {} instead of {}: PyTorch runs it once",
                    twin.name, config.optimizer, twin.optimizer
                ),
            ));
            continue;
        }
        configs.push(config);
    }
    Some(TorchPlan {
        format: PLAN_FORMAT.into(),
        study: study.header.name.clone(),
        profile: study.profile.to_string(),
        model: TorchModel {
            layers: m.layers,
            d_model: m.d_model,
            heads: m.heads,
            d_ff: m.d_ff,
            seq_len: m.seq_len,
            batch: m.batch,
            vocab: m.vocab,
            tie_embeddings: m.tie_embeddings,
        },
        train: TorchTrain {
            steps: first.train.steps,
            warmup_steps: first.train.warmup_steps,
            lr: first.train.lr,
            weight_decay: first.train.weight_decay,
            seed: first.train.seed,
        },
        configs,
        left_out,
    })
}

/// Reads and checks the rows of `study` in a bundle's `reference/results/` folder
/// (`<study>.<config>.json`; the script's logs beside them are ignored).
///
/// # Errors
/// A row that is not a [`TorchRow`] (naming the file and the field), of another format or
/// study, or with a non-finite or negative number.
pub fn read_rows(dir: &Path, study: &str) -> Result<Vec<TorchRow>, ReferenceError> {
    let mut rows = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(rows);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with(&format!("{study}.")) && n.ends_with(".json")
        })
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| ReferenceError::Read {
            path: f.clone(),
            source,
        })?;
        let row: TorchRow =
            results::parse_json(&text).map_err(|source| ReferenceError::NotARow {
                path: f.clone(),
                source,
            })?;
        check_row(&row, study).map_err(|reason| ReferenceError::Invalid {
            path: f.clone(),
            reason,
        })?;
        rows.push(row);
    }
    Ok(rows)
}

/// Checks a row of `study` field by field: its format and study, finite non-negative times, an
/// `ok` row's step time and throughput, its configuration name, and a CPU row's fields (no CUDA
/// peaks, a thread count of at least 1, the process high-water mark of a finished row).
///
/// # Errors
/// The field at fault, its value and what it should be (the caller names the file).
pub fn check_row(row: &TorchRow, study: &str) -> std::result::Result<(), String> {
    if row.format != ROW_FORMAT {
        return Err(format!(
            "field `format`: {} is not {ROW_FORMAT}",
            row.format
        ));
    }
    if row.study != study {
        return Err(format!("field `study`: `{}` is not `{study}`", row.study));
    }
    for (field, v) in [
        ("median_step_s", row.median_step_s),
        ("samples_per_s", row.samples_per_s),
        ("first_step_s", row.first_step_s),
    ] {
        if let Some(v) = v {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("field `{field}`: {v} is not a finite number >= 0"));
            }
        }
    }
    if row.status == TorchStatus::Ok && (row.median_step_s.is_none() || row.samples_per_s.is_none())
    {
        return Err("an `ok` row needs `median_step_s` and `samples_per_s`".into());
    }
    if row.config.is_empty() || row.config.contains('/') {
        return Err(format!("field `config`: `{}` is not a name", row.config));
    }
    if row.on_cpu() {
        check_cpu_row(row)?;
    }
    Ok(())
}

/// The fields of a CPU row: no CUDA allocator peaks (PyTorch has none on the CPU; a number
/// there would be read as one), at least one thread, and for a finished row its process
/// high-water mark.
fn check_cpu_row(row: &TorchRow) -> std::result::Result<(), String> {
    for (field, v) in [
        ("max_memory_allocated_bytes", row.max_memory_allocated_bytes),
        ("max_memory_reserved_bytes", row.max_memory_reserved_bytes),
    ] {
        if v.is_some() {
            return Err(format!(
                "field `{field}`: a CPU row (`device_type` \"cpu\") has no CUDA allocator peak; \
                 its peak is `max_rss_bytes` (rerun reference/torch_peak_memory.py --device cpu)"
            ));
        }
    }
    if row.threads == Some(0) {
        return Err("field `threads`: 0 is not a thread count (at least 1)".into());
    }
    if row.status == TorchStatus::Ok && row.max_rss_bytes.is_none() {
        return Err(
            "field `max_rss_bytes`: an `ok` CPU row needs the process's high-water mark \
             (rerun reference/torch_peak_memory.py --device cpu, which writes it)"
                .into(),
        );
    }
    Ok(())
}

/// Stores `row` as `runs/<study>/pytorch/<device>.<config>.json` (atomically; a row of the same
/// device and configuration is replaced).
///
/// # Errors
/// I/O errors naming the path.
pub fn store_row(runs: &Path, study: &str, row: &TorchRow) -> Result<PathBuf, ReferenceError> {
    let path = runs.join(study).join(ROWS_DIR).join(format!(
        "{}.{}.json",
        memwall_core::record::attribution::slug(&row.device),
        row.config
    ));
    let json = serde_json::to_vec_pretty(row).map_err(|source| ReferenceError::Serialize {
        path: path.clone(),
        source,
    })?;
    results::write_atomic(&path, &json)?;
    Ok(path)
}

/// Every stored row of `study` (none when the folder does not exist); a row that does not read
/// is returned as (path, reason).
pub fn load_rows(runs: &Path, study: &str) -> (Vec<TorchRow>, Vec<(PathBuf, String)>) {
    let dir = runs.join(study).join(ROWS_DIR);
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (rows, bad);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        match std::fs::read_to_string(&f)
            .map_err(|e| e.to_string())
            .and_then(|t| results::parse_json::<TorchRow>(&t).map_err(|e| e.to_string()))
            .and_then(|r| check_row(&r, study).map(|_| r))
        {
            Ok(r) => rows.push(r),
            Err(e) => bad.push((f, e)),
        }
    }
    (rows, bad)
}

/// Bytes in `unit` (GiB or MiB) with two decimals, "–" when unknown.
fn in_unit(b: Option<u64>, unit: f64) -> String {
    b.map(|b| format!("{:.2}", b as f64 / unit))
        .unwrap_or_else(|| "–".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => format!("{:.2}x", a / b),
        _ => "–".into(),
    }
}

/// The latest finished memwall record (by `finished_at`) among `records` of the row's
/// configuration on its device, with the row's model shape (layers, widths, sequence, batch;
/// the vocabulary may differ where the row was run with another tokenizer). `None` where no
/// record matches: a row on another device shows no memwall number rather than a wrong one.
fn memwall_row<'a>(
    records: impl IntoIterator<Item = &'a JobRecord>,
    row: &TorchRow,
) -> Option<&'a JobRecord> {
    records
        .into_iter()
        .filter(|r| {
            r.spec.config == row.config
                && r.env.device_name == row.device
                && r.status == JobStatus::Ok
                && same_model(r, &row.model)
        })
        .max_by(|a, b| a.finished_at.cmp(&b.finished_at))
}

/// Whether record `r` ran the model shape `m` (the vocabulary aside: it follows the
/// tokenizer).
pub fn same_model(r: &JobRecord, m: &TorchModel) -> bool {
    let s = &r.spec.model;
    (s.layers, s.d_model, s.heads, s.d_ff, s.seq_len, s.batch)
        == (m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch)
}

/// Whether the CPU row `row` has a home in the report's CPU section: a memwall record of a
/// configuration in `labels` (the experiment file's) on a CPU backend, on the row's device and
/// with its model shape (then the training report's group of that record shows the row,
/// [`cpu_table`]). Rows without one are shown in [`section`], with no memwall number.
pub fn has_cpu_group(row: &TorchRow, records: &[JobRecord], labels: &[(String, String)]) -> bool {
    row.on_cpu()
        && records.iter().any(|r| {
            !r.spec.backend.is_gpu()
                && r.env.device_name == row.device
                && same_model(r, &row.model)
                && labels.iter().any(|(n, _)| *n == r.spec.config)
        })
}

/// The report section "memwall beside PyTorch on the same device": one table per device with
/// PyTorch rows. For a GPU, per configuration memwall's and PyTorch's peak reserved and
/// allocated memory (GiB, or MiB below 1 GiB) and samples/s, each with its ratio memwall /
/// PyTorch (memwall's latest finished record of the configuration on that device and model
/// shape); for a CPU, [`cpu_table`]'s columns. CPU rows with a group of memwall's records on
/// their CPU ([`has_cpu_group`]) are left to that group's section of the report. `None` when
/// the study has no rows left to show and none that failed to read. `labels` maps configuration
/// names to display labels, in report order.
pub fn section(
    runs: &Path,
    study: &str,
    records: &[JobRecord],
    labels: &[(String, String)],
) -> Option<Section> {
    let (mut rows, bad) = load_rows(runs, study);
    rows.retain(|r| !has_cpu_group(r, records, labels));
    if rows.is_empty() && bad.is_empty() {
        return None;
    }
    let mut devices: Vec<(&str, bool)> = rows
        .iter()
        .map(|r| (r.device.as_str(), r.on_cpu()))
        .collect();
    devices.sort();
    devices.dedup();
    let tables = devices
        .iter()
        .filter_map(|&(device, cpu)| {
            if cpu {
                cpu_table(&rows, records, labels, device)
            } else {
                Some(device_table(&rows, records, labels, device))
            }
        })
        .collect();
    let torch_versions = {
        let mut v: Vec<&str> = rows.iter().map(|r| r.torch_version.as_str()).collect();
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let mut names: Vec<&str> = devices.iter().map(|(d, _)| *d).collect();
    names.dedup();
    let mut notes = section_notes(&bad);
    if devices.iter().any(|(_, cpu)| *cpu) {
        notes.insert(1, cpu_note());
    }
    Some(Section {
        details: None,
        title: "memwall beside PyTorch on the same device".into(),
        claim: "The source measures these configurations in PyTorch; this section runs them in \
                PyTorch eager on the device memwall ran on, so the two frameworks are compared \
                on equal hardware."
            .into(),
        ours: format!(
            "{} PyTorch row(s) on {} (PyTorch {}); ratios are memwall / PyTorch (below 1x: \
             memwall uses less memory or is slower).",
            rows.len(),
            names.join(", "),
            if torch_versions.is_empty() {
                "–".to_string()
            } else {
                torch_versions
            }
        ),
        notes,
        tables,
        figures: Vec::new(),
    })
}

/// The section's notes: how PyTorch's rows are measured, and the row files that did not read.
fn section_notes(bad: &[(PathBuf, String)]) -> Vec<String> {
    let mut notes = vec![
        "PyTorch: `reference/torch_peak_memory.py` (eager; `torch.utils.checkpoint` for \
         checkpointing, the job's optimizer step per parameter in \
         `register_post_accumulate_grad_hook` for the fused step, `torch.compile` for compile, \
         `torch._functorch.config.activation_memory_budget` (compiled) for the budgets), the \
         same model shape, optimizer (`torch.optim.AdamW`, or for Adafactor the script's own, \
         memwall's algorithm) and steps, random tokens, one process per configuration; f32 \
         matmuls at \"highest\" precision (no TF32), where memwall's may run on TF32. Its peaks are `torch.cuda.max_memory_allocated` \
         and `max_memory_reserved` over the whole run (exact high-water marks); memwall's \
         allocated peak on CUDA is a sampled lower bound, its reserved peak exact."
            .to_string(),
    ];
    for (p, e) in bad {
        notes.push(format!(
            "Left out: `{}` could not be read ({e}).",
            p.display()
        ));
    }
    notes
}

/// How the CPU rows are measured and what their columns are ([`cpu_table`]), for the section
/// that shows them.
pub fn cpu_note() -> String {
    "PyTorch on the CPU: `reference/torch_peak_memory.py --device cpu` (`memwall reference \
     --device cpu`), PyTorch eager, one process per configuration, with the model shape, \
     optimizer, warm-up and timed steps and seed of memwall's job, random tokens; \
     `torch.compile` (Inductor's C++ backend) only for the activation-memory budgets. \
     Samples/s is batch / median step time over the timed steps in both frameworks; the ratio \
     is memwall / PyTorch (below 1x: memwall is slower). Threads: memwall's flex backend runs \
     its operations on rayon's pool of every CPU available to the process (the record's \
     `cpu_threads`), PyTorch on `torch.set_num_threads(N)` with N that same count (the row's \
     `threads`); the last column shows both. Peaks: memwall's is the exact high-water mark of \
     its counting allocator (every heap byte of the job's process, over a step); PyTorch keeps \
     no allocator statistics on the CPU, so its number is the process's resident high-water \
     mark (`getrusage(RUSAGE_SELF).ru_maxrss`: the interpreter, libtorch and its kernels' code \
     and buffers included), an upper bound of what its training needs, beside the resident set \
     right after `import torch` (before the model exists). The two peaks are different \
     quantities, so no ratio is drawn between them."
        .into()
}

/// The table of the CPU rows on `device` (in `labels`' order): per configuration memwall's and
/// PyTorch's samples/s with their ratio memwall / PyTorch, memwall's peak allocated (MiB, with
/// its bound), PyTorch's process resident high-water mark and its resident set after `import
/// torch` (MiB; no ratio: different quantities), and the threads of each. memwall's numbers
/// are those of its latest finished record among `records` of the configuration, device and
/// model shape ("–" where there is none). `None` when no CPU row is on `device`.
pub fn cpu_table<'a>(
    rows: &[TorchRow],
    records: impl IntoIterator<Item = &'a JobRecord> + Clone,
    labels: &[(String, String)],
    device: &str,
) -> Option<Table> {
    let mut ordered: Vec<&TorchRow> = rows
        .iter()
        .filter(|r| r.on_cpu() && r.device == device)
        .collect();
    if ordered.is_empty() {
        return None;
    }
    ordered.sort_by_key(|r| {
        labels
            .iter()
            .position(|(n, _)| n == &r.config)
            .unwrap_or(usize::MAX)
    });
    let ours: Vec<Option<&JobRecord>> = ordered
        .iter()
        .map(|r| memwall_row(records.clone(), r))
        .collect();
    let bound = ours
        .iter()
        .flatten()
        .map(|m| {
            m.peak_bounds
                .map(|b| b.allocated)
                .unwrap_or(memwall_core::measure::Bound::Exact)
        })
        .next()
        .map(|b| format!(", {}", b.as_str()))
        .unwrap_or_default();
    let mut table = Table {
        caption: format!("{device}: memwall and PyTorch eager on the same CPU"),
        columns: vec![
            "configuration".into(),
            "memwall samples/s".into(),
            "PyTorch samples/s".into(),
            "throughput ratio".into(),
            format!("memwall peak allocated{bound} (MiB)"),
            "PyTorch process high-water RSS (MiB)".into(),
            "PyTorch RSS after import torch (MiB)".into(),
            "threads (memwall / PyTorch)".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mib = |b: Option<u64>| {
        b.map(|b| format!("{:.1}", b as f64 / (1u64 << 20) as f64))
            .unwrap_or_else(|| "–".into())
    };
    let dash = || "–".to_string();
    for (r, m) in ordered.into_iter().zip(ours) {
        let label = labels
            .iter()
            .find(|(n, _)| n == &r.config)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| r.config.clone());
        let s = m.and_then(|m| m.summary);
        let ok = r.status == TorchStatus::Ok;
        let threads = |t: Option<usize>| t.map(|t| t.to_string()).unwrap_or_else(dash);
        let row_index = table.rows.len();
        table.rows.push(vec![
            label,
            s.map(|s| format!("{:.2}", s.samples_per_s))
                .unwrap_or_else(dash),
            if ok {
                r.samples_per_s
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(dash)
            } else {
                r.status.to_string()
            },
            if ok {
                ratio(s.map(|s| s.samples_per_s), r.samples_per_s)
            } else {
                dash()
            },
            mib(s.map(|s| s.peak_allocated_bytes)),
            mib(r.max_rss_bytes),
            mib(r.rss_after_import_bytes),
            format!(
                "{} / {}",
                threads(m.map(|m| m.env.cpu_threads)),
                threads(r.threads)
            ),
        ]);
        if !ok {
            if let Some(reason) = &r.reason {
                table.note(row_index, 2, format!("PyTorch: {reason}"));
            }
        }
        if m.is_none() {
            table.note(
                row_index,
                1,
                "no finished memwall record of this configuration, CPU and model shape",
            );
        }
    }
    Some(table)
}

/// The unit of one device's table, as bytes per unit and its name: GiB where any peak of the
/// device's rows (or memwall's records on it) reaches 1 GiB, MiB otherwise (small models).
fn device_unit(rows: &[TorchRow], records: &[JobRecord], device: &str) -> (f64, &'static str) {
    let largest = rows
        .iter()
        .filter(|r| r.device == *device && !r.on_cpu())
        .flat_map(|r| [r.max_memory_reserved_bytes, r.max_memory_allocated_bytes])
        .chain(
            records
                .iter()
                .filter(|m| m.env.device_name == *device)
                .map(|m| m.summary.map(|s| s.peak_reserved_bytes)),
        )
        .flatten()
        .max()
        .unwrap_or(0);
    if largest >= 1 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    }
}

/// One device's table: per PyTorch row (in report order), memwall's and PyTorch's peaks and
/// samples/s with their ratios.
fn device_table(
    rows: &[TorchRow],
    records: &[JobRecord],
    labels: &[(String, String)],
    device: &str,
) -> Table {
    let (unit, unit_name) = device_unit(rows, records, device);
    let mut table = Table {
        caption: format!("{device}: memwall and PyTorch on the same device"),
        columns: vec![
            "configuration".into(),
            format!("memwall peak reserved ({unit_name})"),
            format!("PyTorch peak reserved ({unit_name})"),
            "reserved ratio".into(),
            format!("memwall peak allocated ({unit_name})"),
            format!("PyTorch peak allocated ({unit_name})"),
            "allocated ratio".into(),
            "memwall samples/s".into(),
            "PyTorch samples/s".into(),
            "throughput ratio".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut ordered: Vec<&TorchRow> = rows
        .iter()
        .filter(|r| r.device == *device && !r.on_cpu())
        .collect();
    ordered.sort_by_key(|r| {
        labels
            .iter()
            .position(|(n, _)| n == &r.config)
            .unwrap_or(usize::MAX)
    });
    for r in ordered {
        let label = labels
            .iter()
            .find(|(n, _)| n == &r.config)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| r.config.clone());
        let row_index = table.rows.len();
        table.rows.push(comparison_row(records, r, label, unit));
        if r.status != TorchStatus::Ok {
            if let Some(reason) = &r.reason {
                table.note(row_index, 2, format!("PyTorch: {reason}"));
            }
        }
    }
    table
}

/// The cells of one configuration's row of [`device_table`]: memwall's latest record beside
/// the PyTorch row `r`, peaks in `unit` bytes; a PyTorch row that did not run shows its status
/// and no ratios.
fn comparison_row(records: &[JobRecord], r: &TorchRow, label: String, unit: f64) -> Vec<String> {
    let gib = |b: Option<u64>| in_unit(b, unit);
    let ours = memwall_row(records, r).and_then(|m| m.summary);
    let torch_ok = r.status == TorchStatus::Ok;
    let mut cells = vec![
        label,
        gib(ours.map(|s| s.peak_reserved_bytes)),
        if torch_ok {
            gib(r.max_memory_reserved_bytes)
        } else {
            r.status.to_string()
        },
        ratio(
            ours.map(|s| s.peak_reserved_bytes as f64),
            r.max_memory_reserved_bytes.map(|b| b as f64),
        ),
        gib(ours.map(|s| s.peak_allocated_bytes)),
        if torch_ok {
            gib(r.max_memory_allocated_bytes)
        } else {
            r.status.to_string()
        },
        ratio(
            ours.map(|s| s.peak_allocated_bytes as f64),
            r.max_memory_allocated_bytes.map(|b| b as f64),
        ),
        ours.map(|s| format!("{:.2}", s.samples_per_s))
            .unwrap_or_else(|| "–".into()),
        r.samples_per_s
            .map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "–".into()),
        ratio(ours.map(|s| s.samples_per_s), r.samples_per_s),
    ];
    if !torch_ok {
        for c in [3, 6, 9] {
            cells[c] = "–".into();
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peak_memory_plan() -> TorchPlan {
        let (study, jobs) = crate::test_support::peak_memory_full();
        plan(&study, &jobs).expect("peak_memory is covered")
    }

    #[test]
    fn the_plan_maps_each_configuration_to_its_pytorch_mechanism() {
        let p = peak_memory_plan();
        assert_eq!(
            (p.model.layers, p.model.d_model, p.model.vocab),
            (32, 2048, 3025)
        );
        let get = |n: &str| p.configs.iter().find(|c| c.name == n).unwrap();
        assert_eq!(get("checkpoint_adafactor").checkpoint, Some(1));
        assert_eq!(get("control_adafactor").checkpoint, None);
        let fused = get("fused_adafactor");
        assert!(fused.fused_optimizer && !fused.compile);
        assert!(get("compile_adafactor").compile);
        let budget = get("memory_budget_05_adafactor");
        assert_eq!(budget.activation_memory_budget, Some(0.05));
        assert!(
            budget.compile,
            "the budget is torch.compile's partitioner option"
        );
        assert_eq!(get("bf16_fused_checkpoint_adafactor").precision, "bf16");
        assert_eq!(get("naive_attention").attention, "naive");
        // The AdamW twins of the source's rows run once in PyTorch, with the source's optimizer.
        let twin = p.left_out.iter().find(|(n, _)| n == "checkpoint").unwrap();
        assert!(twin.1.contains("`checkpoint_adafactor`"), "{}", twin.1);
        assert!(p.configs.iter().all(|c| c.name != "control"));
        assert!(p.left_out.iter().any(|(n, _)| n == "balanced"));
        assert!(p.configs.iter().all(|c| c.name != "balanced"));
        // The source's rows train with the source's Adafactor (weight decay 0.01), the AdamW
        // rows with the study's AdamW settings.
        for c in &p.configs {
            let wd = if c.name.ends_with("_adafactor") {
                assert_eq!(c.optimizer, "adafactor", "{}", c.name);
                0.01
            } else {
                assert_eq!(c.optimizer, "adamw", "{}", c.name);
                0.0 // experiments/peak_memory.toml's [train] weight_decay
            };
            assert_eq!((c.lr, c.weight_decay), (Some(p.train.lr), Some(wd)));
        }
        assert_eq!(get("control_adafactor").checkpoint, None);
        // Checkmate plans are memwall's own: no PyTorch counterpart.
        assert!(p.left_out.iter().any(|(n, _)| n == "checkmate_80"));
        assert!(p.configs.iter().all(|c| !c.name.starts_with("checkmate_")));
    }

    #[test]
    fn the_plan_carries_each_configurations_optimizer() {
        let (study, mut jobs) = crate::test_support::peak_memory_full();
        // A configuration of its own (no twin) whose job trains with Adafactor.
        let job = jobs
            .iter_mut()
            .find(|j| j.config == "naive_attention")
            .unwrap();
        job.train.optimizer = OptimizerKind::Adafactor;
        job.train.lr = 2e-4;
        job.train.weight_decay = 0.01;
        let p = plan(&study, &jobs).unwrap();
        let control = p
            .configs
            .iter()
            .find(|c| c.name == "naive_attention")
            .unwrap();
        assert_eq!(
            (control.optimizer.as_str(), control.lr, control.weight_decay),
            ("adafactor", Some(2e-4), Some(0.01))
        );
        assert!(p
            .configs
            .iter()
            .filter(|c| c.name != "naive_attention" && !c.name.ends_with("_adafactor"))
            .all(|c| c.optimizer == "adamw"));
        // The script's field names, and a plan from before them reading as AdamW.
        let json = serde_json::to_value(control).unwrap();
        assert_eq!(json["optimizer"], "adafactor");
        assert_eq!(json["lr"], 2e-4);
        assert_eq!(json["weight_decay"], 0.01);
        let mut old = json.clone();
        for k in ["optimizer", "lr", "weight_decay"] {
            old.as_object_mut().unwrap().remove(k);
        }
        let old: TorchConfig = serde_json::from_value(old).unwrap();
        assert_eq!((old.optimizer.as_str(), old.lr), ("adamw", None));
    }

    fn row() -> TorchRow {
        let p = peak_memory_plan();
        TorchRow {
            format: ROW_FORMAT.into(),
            study: "peak_memory".into(),
            config: "control".into(),
            status: TorchStatus::Ok,
            reason: None,
            device: "NVIDIA H100 80GB HBM3".into(),
            device_type: None,
            threads: None,
            torch_version: "2.11.0".into(),
            parameters: Some(1),
            max_memory_allocated_bytes: Some(1 << 30),
            max_memory_reserved_bytes: Some(2 << 30),
            max_rss_bytes: None,
            rss_after_import_bytes: None,
            median_step_s: Some(0.7),
            samples_per_s: Some(5.6),
            first_step_s: Some(2.0),
            final_loss: Some(8.0),
            model: p.model,
            train: p.train,
            finished_at: "2026-11-23T00:00:00Z".into(),
        }
    }

    #[test]
    fn rows_are_checked_field_by_field() {
        assert_eq!(check_row(&row(), "peak_memory"), Ok(()));
        let bad = |f: fn(&mut TorchRow)| {
            let mut r = row();
            f(&mut r);
            check_row(&r, "peak_memory").unwrap_err()
        };
        assert!(bad(|r| r.format = "other/1".into()).contains("`format`"));
        let text = serde_json::to_string(&row()).unwrap();
        assert!(text.contains("\"status\":\"ok\""), "{text}");
        let great = text.replace("\"status\":\"ok\"", "\"status\":\"great\"");
        let err = results::parse_json::<TorchRow>(&great)
            .unwrap_err()
            .to_string();
        assert!(err.contains("field `status`"), "{err}");
        for (status, text) in [
            (TorchStatus::Ok, "ok"),
            (TorchStatus::OutOfMemory, "out_of_memory"),
            (TorchStatus::Failed, "failed"),
            (TorchStatus::Unsupported, "unsupported"),
        ] {
            assert_eq!(serde_json::to_value(status).unwrap(), text);
            assert_eq!((status.as_str(), status.to_string()), (text, text.into()));
        }
        assert!(bad(|r| r.median_step_s = Some(f64::NAN)).contains("`median_step_s`"));
        assert!(bad(|r| r.samples_per_s = None).contains("samples_per_s"));
        assert!(bad(|r| r.config = "../x".into()).contains("`config`"));
        assert!(check_row(&row(), "mixed_precision")
            .unwrap_err()
            .contains("`study`"));
    }

    #[test]
    fn rows_are_stored_by_device_and_configuration_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let path = store_row(tmp.path(), "peak_memory", &row()).unwrap();
        assert!(path.ends_with("peak_memory/pytorch/nvidia-h100-80gb-hbm3.control.json"));
        std::fs::write(path.with_file_name("broken.json"), "{").unwrap();
        let (rows, bad) = load_rows(tmp.path(), "peak_memory");
        assert_eq!(rows, vec![row()]);
        assert_eq!(bad.len(), 1, "{bad:?}");
    }

    #[test]
    fn a_cpu_row_checks_its_own_fields_and_older_rows_read_as_cuda() {
        let mut cpu = row();
        cpu.device_type = Some(TorchDeviceType::Cpu);
        let err = check_row(&cpu, "peak_memory").unwrap_err();
        assert!(err.contains("field `max_memory_allocated_bytes`"), "{err}");
        cpu.max_memory_allocated_bytes = None;
        cpu.max_memory_reserved_bytes = None;
        let err = check_row(&cpu, "peak_memory").unwrap_err();
        assert!(err.contains("field `max_rss_bytes`"), "{err}");
        cpu.max_rss_bytes = Some(900 << 20);
        cpu.threads = Some(0);
        assert!(check_row(&cpu, "peak_memory")
            .unwrap_err()
            .contains("field `threads`"));
        cpu.threads = Some(2);
        assert_eq!(check_row(&cpu, "peak_memory"), Ok(()));
        // A row that did not finish needs no peak.
        cpu.status = TorchStatus::Failed;
        cpu.max_rss_bytes = None;
        assert_eq!(check_row(&cpu, "peak_memory"), Ok(()));
        // Rows written before the CPU fields read as CUDA rows and write back without them.
        let old = serde_json::to_value(row()).unwrap();
        for k in [
            "device_type",
            "threads",
            "max_rss_bytes",
            "rss_after_import_bytes",
        ] {
            assert!(old.get(k).is_none(), "{k} written for a CUDA row");
        }
        let back: TorchRow = serde_json::from_value(old).unwrap();
        assert!(!back.on_cpu());
        let json = serde_json::to_value(&cpu).unwrap();
        assert_eq!(json["device_type"], "cpu");
    }

    #[test]
    fn cpu_rows_with_a_cpu_group_leave_the_gpu_section_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, jobs) = crate::test_support::peak_memory_full();
        let labels = vec![("control".to_string(), "Control".to_string())];
        store_row(tmp.path(), "peak_memory", &row()).unwrap();
        let gpu_only = section(tmp.path(), "peak_memory", &[], &labels).unwrap();
        // A CPU row whose CPU has a memwall record of the same shape: shown in the CPU group.
        let mut job = jobs.iter().find(|j| j.config == "control").unwrap().clone();
        job.backend = crate::device::BackendKind::Flex;
        let mut record =
            JobRecord::unfinished(&job, JobStatus::Ok, String::new(), Default::default());
        record.env.device_name = "Some CPU".into();
        let mut cpu = row();
        cpu.device = "Some CPU".into();
        cpu.device_type = Some(TorchDeviceType::Cpu);
        cpu.max_memory_allocated_bytes = None;
        cpu.max_memory_reserved_bytes = None;
        cpu.max_rss_bytes = Some(1 << 30);
        store_row(tmp.path(), "peak_memory", &cpu).unwrap();
        let records = vec![record.clone()];
        assert!(has_cpu_group(&cpu, &records, &labels));
        let with_cpu = section(tmp.path(), "peak_memory", &records, &labels).unwrap();
        assert_eq!(with_cpu.tables, gpu_only.tables);
        assert_eq!(
            (with_cpu.ours, with_cpu.notes),
            (gpu_only.ours, gpu_only.notes)
        );
        // Where memwall's record is of another CPU (with a number that would be wrong here),
        // or there is none: the row has no home there, and the section shows it with no
        // memwall number.
        let mut finished = record;
        finished.summary = Some(crate::results::Summary {
            parameters: 1,
            median_step_s: 0.1,
            samples_per_s: 80.0,
            tokens_per_s: 80.0,
            peak_allocated_bytes: 1 << 20,
            peak_reserved_bytes: 1 << 20,
            baseline_bytes: 0,
            final_train_loss: 7.0,
            eval_loss: 7.0,
            eval_perplexity: 1000.0,
            mfu: None,
            peak_flops: None,
            wall_s: 1.0,
            steady_bytes: 0,
            estimated_activation_bytes: 0,
            time_to_first_measured_step_s: None,
        });
        let records = vec![finished];
        let shown = cpu_table(std::slice::from_ref(&cpu), &records, &labels, "Some CPU").unwrap();
        assert_eq!(
            shown.rows[0][1], "80.00",
            "the record's own CPU: its number"
        );
        assert_eq!(
            shown.rows[0][3], "14.29x",
            "memwall / PyTorch samples/s (80 / 5.6)"
        );
        // The same row on another CPU: no home in a CPU group; the section shows it with no
        // memwall number (the record's 80.00 would be wrong there) and no ratio.
        cpu.device = "Other CPU".into();
        assert!(!has_cpu_group(&cpu, &records, &labels));
        store_row(tmp.path(), "peak_memory", &cpu).unwrap();
        let s = section(tmp.path(), "peak_memory", &records, &labels).unwrap();
        let captions: Vec<&str> = s.tables.iter().map(|t| t.caption.as_str()).collect();
        assert_eq!(captions.len(), 2, "{captions:?}");
        assert!(
            captions.iter().all(|c| !c.starts_with("Some CPU")),
            "{captions:?}"
        );
        let t = s
            .tables
            .iter()
            .find(|t| t.caption.starts_with("Other CPU"))
            .unwrap();
        assert_eq!((t.rows[0][1].as_str(), t.rows[0][3].as_str()), ("–", "–"));
        assert!(
            t.notes.iter().any(|n| n.column == 1),
            "why memwall's cell is empty"
        );
        assert!(s.notes.iter().any(|n| n.contains("ru_maxrss")));
        assert!(
            !t.columns.iter().any(|c| c.contains("reserved")),
            "{:?}",
            t.columns
        );
        // Without memwall's records both CPU rows are shown here.
        let s = section(tmp.path(), "peak_memory", &[], &labels).unwrap();
        assert_eq!(s.tables.len(), 3);
    }
}
