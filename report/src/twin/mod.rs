//! The PyTorch twin column: the same model shape and configurations trained in PyTorch
//! eager on the same device by `reference/torch_peak_memory.py`, one process per
//! configuration: on a GPU through a bundle (`memwall bundle`, its `run.sh`, `memwall import`),
//! on this machine's CPU through `memwall twin --device cpu` (`memwall_lab::twin_cpu`).
//!
//! Data flow (one way): [`jobs`] writes what the script runs (`<bundle>/reference/<study>.plan.json`,
//! from the bundled jobs); the script prints one [`TorchRow`] per configuration as JSON; the
//! import checks each row ([`read_rows`]) and stores it in the record store as
//! `runs/<study>/pytorch/<device>.<config>.json` ([`store_row`]); the report reads them
//! ([`load_rows`], [`crate::sections::twin::section`]) beside memwall's records of the same device. Rows measured on
//! the CPU ([`TorchRow::on_cpu`]) are shown in the report's CPU section ([`crate::sections::twin::cpu_table`]), beside
//! the group of memwall's records on the same CPU and model shape; the GPU rows, and CPU rows
//! with no such group, in the section "memwall beside PyTorch on the same device".

use crate::spec::{AttentionOption, ConfigSpec, JobSpec, OptimizerKind, Study};
use crate::strategy::LayerNormSaving;
use memwall_core::record::JsonError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
mod rows;

pub use rows::*;

/// Why a PyTorch twin row could not be read or stored; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
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
    #[error("{path}: not a PyTorch twin row ({source})")]
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

/// `format` of a [`TwinJobs`].
pub const PLAN_FORMAT: &str = "memwall-torch-plan/1";
/// `format` of a [`TorchRow`].
pub const ROW_FORMAT: &str = "memwall-torch-row/1";
// The studies the reference script covers say so in their experiment files
// (`study.pytorch_twin`, read by `memwall_core::spec::StudyRoles`): training studies whose
// configurations are the script's mechanisms (precision, checkpointing every K blocks, the
// fused step, torch.compile, the activation memory budget, the attention); mixed precision
// with master weights is left out configuration by configuration.
/// Folder of the rows inside a study's record-store folder.
pub const ROWS_DIR: &str = "pytorch";

/// The model shape of a [`TwinJobs`] (the job's model: pre-norm decoder, q/k/v/o without
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

/// Training settings of a [`TwinJobs`] (the first job's; each [`TorchConfig`] carries its own
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

/// What the twin script (`reference/torch_peak_memory.py`) runs for one study, written as
/// `<bundle>/reference/<study>.plan.json` (its format name, [`PLAN_FORMAT`], is the one bundles
/// have always carried).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TwinJobs {
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
    /// The configuration's place among those its Python process ran: 1 for the first (or the
    /// only one); a later one shared the process, its CUDA context and libraries, with the
    /// configurations before it (`torch_peak_memory.py --serve`, a GPU bundle's twins). Absent
    /// in rows written before the field existed (one process each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_order: Option<u32>,
    /// Wall time of the configuration in its process, seconds (`import torch` and the CUDA
    /// context included for the first): what the bundle's estimates are checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// PyTorch's own memory-budget Pareto dump for a configuration with an
    /// `activation_memory_budget` (what `PARTITIONER_MEMORY_BUDGET_PARETO=1` plots, the source's
    /// "Memory Budget Pareto", 004), one entry per joint graph the partitioner ran; empty for
    /// the other configurations and in rows written before the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_budget_pareto: Vec<ParetoGraph>,
}

/// One joint graph's memory-budget Pareto front as PyTorch's min-cut partitioner computes it
/// (`torch/_functorch/partitioners.py`, `visualize_memory_budget_pareto`): it bisects the budget
/// over [0, 1], solves its knapsack at each budget and keeps every distinct plan. These are the
/// partitioner's estimates from the graph's shapes, not measurements.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ParetoGraph {
    /// The graph's name as AOT autograd gives it (`model__0_joint_0`; the source's SVG files
    /// are named by it).
    pub graph: String,
    /// Bytes of the graph's inputs (parameters and batch), the partitioner's memory floor
    /// (`min_act_size`); `None` when the script could not read it.
    #[serde(default)]
    pub input_bytes: Option<u64>,
    /// Bytes the default partitioner saves (`max_act_size`, budget 1.0), inputs included;
    /// `None` when the script could not read it.
    #[serde(default)]
    pub default_saved_bytes: Option<u64>,
    /// Seconds from the partitioner's first knapsack solve of the graph to its plot: the
    /// bisection, inside the first step's compilation; `None` when not timed.
    #[serde(default)]
    pub bisection_s: Option<f64>,
    /// The distinct plans, by memory ratio ascending.
    pub points: Vec<ParetoPoint>,
}

/// One plan of a [`ParetoGraph`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct ParetoPoint {
    /// Saved activations above the graph's inputs as a fraction of the default partitioner's
    /// (`get_mem_ratio`): 0 saves only the inputs, 1 what budget 1.0 saves.
    pub memory_ratio: f64,
    /// The runtime estimate of what the plan recomputes: FLOPs under the default `flops`
    /// estimator (`torch.utils.flop_counter`, each operation at least 1).
    pub recompute_flops: f64,
    /// `memory_ratio · (default_saved_bytes − input_bytes)`, bytes (derived by the script);
    /// `None` without the sizes.
    #[serde(default)]
    pub saved_bytes_above_inputs: Option<u64>,
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
    if let Some(policy) = &c.policy {
        return Some(format!(
            "a unit-level plan (`policy = {}`) runs memwall's unit executor; its PyTorch \
             counterpart, selective activation checkpointing \
             (`torch.utils.checkpoint.create_selective_checkpoint_contexts`, a policy per \
             operation), is not in the reference script",
            policy.label()
        ));
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
/// `study.pytorch_twin`).
/// Configurations with no PyTorch counterpart (Burn's BalancedCheckpointing, Checkmate plans,
/// unit-level plans, master weights, other layer norms, and on a CPU backend kernel fusion) are
/// left out with the reason. The jobs' backend decides the device: CUDA jobs plan a GPU run, flex or ndarray
/// jobs a CPU run (`torch_peak_memory.py --device cpu`). On the CPU the activation-memory
/// budgets stay: `torch.compile` builds them with Inductor's C++ backend (a C++ compiler is
/// needed; without one the row is `failed` with the compiler's error).
pub fn jobs(study: &Study, jobs: &[JobSpec]) -> Option<TwinJobs> {
    if !study.header.pytorch_twin {
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
    Some(TwinJobs {
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

#[cfg(test)]
mod tests;
