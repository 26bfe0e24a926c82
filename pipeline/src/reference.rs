//! The PyTorch reference column: the same model shape and configurations trained in PyTorch
//! eager on the same GPU by `reference/torch_peak_memory.py`, one process per configuration.
//!
//! Data flow (one way): [`plan`] writes what the script runs (`<bundle>/reference/<study>.plan.json`,
//! from the bundled jobs); the script prints one [`TorchRow`] per configuration as JSON; the
//! import checks each row ([`read_rows`]) and stores it in the record store as
//! `runs/<study>/pytorch/<device>.<config>.json` ([`store_row`]); the report reads them
//! ([`load_rows`], [`section`]) beside memwall's records of the same device.

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
/// Studies the reference script covers: the training studies of the GPU suite, whose
/// configurations are the script's mechanisms (precision, checkpointing every K blocks, the
/// fused step, torch.compile, the activation memory budget, the attention), in the suite's
/// order; mixed precision with master weights is left out configuration by configuration.
pub const STUDIES: &[&str] = &["peak_memory", "checkpoint_interval", "mixed_precision"];
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
    /// `torch.cuda.get_device_name()`, or `cpu`.
    pub device: String,
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
/// it has one.
fn no_counterpart(c: &ConfigSpec) -> Option<String> {
    if let Some(name) = &c.model {
        return Some(format!(
            "trains the profile's named model `{name}`; a plan runs one model, the profile's own"
        ));
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

/// The plan of `study`'s bundled `jobs`, or `None` for a study the script does not cover.
/// Configurations with no PyTorch counterpart (Burn's BalancedCheckpointing) are left out
/// with the reason.
pub fn plan(study: &Study, jobs: &[JobSpec]) -> Option<TorchPlan> {
    if !STUDIES.contains(&study.header.name.as_str()) {
        return None;
    }
    // The profile's own model (configurations of a named model are left out below).
    let first = jobs.iter().find(|j| {
        study
            .configs
            .iter()
            .any(|c| c.name == j.config && c.model.is_none())
    })?;
    let m = first.model;
    let mut configs = Vec::new();
    let mut left_out = Vec::new();
    for job in jobs {
        let Some(c) = study.configs.iter().find(|c| c.name == job.config) else {
            continue;
        };
        if let Some(reason) = no_counterpart(c) {
            left_out.push((c.name.clone(), reason));
            continue;
        }
        let config = torch_config(c, job, m.layers);
        // PyTorch runs each memory configuration once, with the optimizer of its first
        // configuration (the source's rows come first): GPU time is scarce, and the
        // framework comparison does not need both optimizers.
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

fn check_row(row: &TorchRow, study: &str) -> std::result::Result<(), String> {
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

/// The latest finished memwall record (by `finished_at`) of the row's configuration on its
/// device, with the row's model shape (layers, widths, sequence, batch; the vocabulary may
/// differ where the row was run with another tokenizer).
fn memwall_row<'a>(records: &'a [JobRecord], row: &TorchRow) -> Option<&'a JobRecord> {
    let m = &row.model;
    records
        .iter()
        .filter(|r| {
            let s = &r.spec.model;
            r.spec.config == row.config
                && r.env.device_name == row.device
                && r.status == JobStatus::Ok
                && (s.layers, s.d_model, s.heads, s.d_ff, s.seq_len, s.batch)
                    == (m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch)
        })
        .max_by(|a, b| a.finished_at.cmp(&b.finished_at))
}

/// The report section "memwall | PyTorch on the same GPU": one table per device with PyTorch
/// rows, per configuration memwall's and PyTorch's peak reserved and allocated memory (GiB, or MiB below 1 GiB)
/// and samples/s, each with its ratio memwall / PyTorch (memwall's latest finished record of
/// the configuration on that device and model shape). `None` when the study has no rows.
/// `labels` maps configuration names to display labels, in report order.
pub fn section(
    runs: &Path,
    study: &str,
    records: &[JobRecord],
    labels: &[(String, String)],
) -> Option<Section> {
    let (rows, bad) = load_rows(runs, study);
    if rows.is_empty() && bad.is_empty() {
        return None;
    }
    let mut devices: Vec<&str> = rows.iter().map(|r| r.device.as_str()).collect();
    devices.sort();
    devices.dedup();
    let tables = devices
        .iter()
        .map(|device| device_table(&rows, records, labels, device))
        .collect();
    let torch_versions = {
        let mut v: Vec<&str> = rows.iter().map(|r| r.torch_version.as_str()).collect();
        v.sort();
        v.dedup();
        v.join(", ")
    };
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
            devices.join(", "),
            if torch_versions.is_empty() {
                "–".to_string()
            } else {
                torch_versions
            }
        ),
        notes: section_notes(&bad),
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

/// The unit of one device's table, as bytes per unit and its name: GiB where any peak of the
/// device's rows (or memwall's records on it) reaches 1 GiB, MiB otherwise (small models).
fn device_unit(rows: &[TorchRow], records: &[JobRecord], device: &str) -> (f64, &'static str) {
    let largest = rows
        .iter()
        .filter(|r| r.device == *device)
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
    let mut ordered: Vec<&TorchRow> = rows.iter().filter(|r| r.device == *device).collect();
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
            torch_version: "2.11.0".into(),
            parameters: Some(1),
            max_memory_allocated_bytes: Some(1 << 30),
            max_memory_reserved_bytes: Some(2 << 30),
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
}
