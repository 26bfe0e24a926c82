//! The analysis of training studies: polars frames built from the job records of a study
//! (one summary row per record, one row per step) and the study table, a lazy query over them.
//!
//! The record store (`runs/<study>/<key>/record.json`) is the source of truth and is only read
//! here; the derived tables go out through the report's Parquet sink ([`write_parquet_tables`],
//! into `reports/<study>/`), never back into `runs/`. A record that cannot be read is named with
//! its path and left out, so one bad file does not stop a report.
//!
//! May import: `memwall_core` (records, specs), polars.

use super::{read_record, JobRecord, RECORD_FILE};
use crate::error::{Error, Result};
use crate::spec::CheckpointSpec;
use polars::prelude::*;
use std::path::{Path, PathBuf};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

pub(crate) fn perr(path: &Path) -> impl Fn(PolarsError) -> Error + '_ {
    move |e| Error::Table {
        path: path.to_path_buf(),
        what: String::new(),
        source: e.into(),
    }
}

/// The job records of one study, read from the record store.
#[derive(Debug, Clone, Default)]
pub struct StudyRecords {
    /// The study's folder in the record store (`runs/<study>`).
    pub dir: PathBuf,
    /// Every readable record, in folder-name (job key) order.
    pub records: Vec<JobRecord>,
    /// Records that could not be read: the file and why (a record of another memwall version,
    /// a damaged file). They are left out of every table.
    pub unreadable: Vec<(PathBuf, String)>,
}

impl StudyRecords {
    /// Reads every `runs_root/<study>/*/record.json` (folders only). A missing study folder gives
    /// no records.
    ///
    /// # Errors
    /// [`Error::Io`] when the study folder exists but cannot be listed.
    pub fn load(runs_root: &Path, study: &str) -> Result<StudyRecords> {
        let dir = runs_root.join(study);
        let mut out = StudyRecords {
            dir: dir.clone(),
            ..Default::default()
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io("listing", &dir, e)),
        };
        // Job folders only: a study's other files (an in-process study's `cpu.result.json`,
        // the PyTorch rows' folder holds no record) are not records.
        let mut job_dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        job_dirs.sort();
        for job_dir in job_dirs {
            match read_record(&job_dir) {
                Ok(Some(record)) => out.records.push(record),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("leaving out {}: {e}", job_dir.join(RECORD_FILE).display());
                    out.unreadable
                        .push((job_dir.join(RECORD_FILE), e.to_string()));
                }
            }
        }
        Ok(out)
    }

    /// The record of job `key`, if it was read.
    pub fn get(&self, key: &str) -> Option<&JobRecord> {
        self.records.iter().find(|r| r.key == key)
    }

    /// Whether no record was read.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// One row per step of `record`: key, profile, backend, device, configuration, step, warm-up
/// flag, loss (nats/token), time (s), peak allocated and reserved bytes, loss scale, skipped
/// flag and the fraction of exactly-zero 16-bit gradient entries.
fn steps_frame(record: &JobRecord) -> PolarsResult<DataFrame> {
    let s = &record.spec;
    let n = record.steps.len();
    let rep = |v: &str| vec![v.to_string(); n];
    df!(
        "key" => rep(&record.key),
        "profile" => rep(s.profile.as_str()),
        "backend" => rep(s.backend.as_str()),
        "device_name" => rep(&record.env.device_name),
        "config" => rep(&s.config),
        "step" => record.steps.iter().map(|x| x.step as u32).collect::<Vec<_>>(),
        "warmup" => record.steps.iter().map(|x| x.warmup).collect::<Vec<_>>(),
        "loss" => record.steps.iter().map(|x| x.loss).collect::<Vec<_>>(),
        "time_s" => record.steps.iter().map(|x| x.time_s).collect::<Vec<_>>(),
        "peak_allocated_bytes" => record.steps.iter().map(|x| x.peak_allocated_bytes).collect::<Vec<_>>(),
        "peak_reserved_bytes" => record.steps.iter().map(|x| x.peak_reserved_bytes).collect::<Vec<_>>(),
        "loss_scale" => record.steps.iter().map(|x| x.loss_scale).collect::<Vec<_>>(),
        "skipped" => record.steps.iter().map(|x| x.skipped).collect::<Vec<_>>(),
        "grad_zero_fraction" => record.steps.iter().map(|x| x.grad_zero_fraction).collect::<Vec<_>>(),
    )
}

/// One summary row of `record`: its configuration and strategy, status, the measured summary
/// (null where the job did not finish), the bounds its peaks are, and the plan it ran.
fn summary_frame(record: &JobRecord) -> PolarsResult<DataFrame> {
    let s = &record.spec;
    let m = record.summary;
    let f = |g: fn(&super::Summary) -> f64| m.as_ref().map(g);
    let bounds = record.peak_bounds.unwrap_or(crate::measure::PeakBounds {
        // Records written before the field: the CPU heap probe was exact, the CUDA pool
        // samples at phase boundaries a lower bound.
        allocated: if s.backend.is_gpu() {
            crate::measure::Bound::LowerBound
        } else {
            crate::measure::Bound::Exact
        },
        reserved: crate::measure::Bound::Exact,
    });
    df!(
        "key" => [record.key.clone()],
        "study" => [s.study.clone()],
        "profile" => [s.profile.as_str()],
        "config" => [s.config.clone()],
        "config_order" => [s.order as u32],
        "label" => [s.label.clone()],
        "control" => [s.control],
        "backend" => [s.backend.as_str()],
        "device_name" => [record.env.device_name.clone()],
        "precision" => [s.strategy.precision.as_str()],
        "optimizer" => [s.train.optimizer.as_str()],
        "checkpoint" => [checkpoint_policy(s.strategy.recompute.checkpoint())],
        "checkpoint_k" => [checkpoint_k(s.strategy.recompute.checkpoint(), s.model.layers)],
        "fused_optimizer" => [s.strategy.fused_optimizer],
        "fusion" => [s.strategy.fusion],
        "master_weights" => [s.strategy.master_weights],
        "accumulation_steps" => [s.train.accumulation_steps as u32],
        "nested_checkpoint" => [s.strategy.nested_checkpoint.map(|j| j as u32)],
        "loss_scale" => [s.strategy.loss_scale.map(|l| l.to_string())],
        "status" => [record.status.as_str()],
        "reason" => [record.reason.clone()],
        "parameters" => [m.map(|m| m.parameters)],
        "median_step_s" => [f(|m| m.median_step_s)],
        "samples_per_s" => [f(|m| m.samples_per_s)],
        "tokens_per_s" => [f(|m| m.tokens_per_s)],
        "peak_allocated_bytes" => [m.map(|m| m.peak_allocated_bytes)],
        "peak_reserved_bytes" => [m.map(|m| m.peak_reserved_bytes)],
        "baseline_bytes" => [m.map(|m| m.baseline_bytes)],
        "final_train_loss" => [f(|m| m.final_train_loss)],
        "eval_loss" => [f(|m| m.eval_loss)],
        "eval_perplexity" => [f(|m| m.eval_perplexity)],
        "mfu" => [m.and_then(|m| m.mfu)],
        "wall_s" => [f(|m| m.wall_s)],
        "steady_bytes" => [m.map(|m| m.steady_bytes)],
        "estimated_activation_bytes" => [m.map(|m| m.estimated_activation_bytes)],
        "peak_allocated_bound" => [bounds.allocated.as_str()],
        "peak_reserved_bound" => [bounds.reserved.as_str()],
        "attention" => [if s.strategy.attention.is_naive() { "naive" } else { "memory_efficient" }],
        "layer_norm" => [s.strategy.layer_norm.as_str()],
        "memory_cleanup" => [s.device_settings.memory_cleanup],
        "runtime" => [runtime_label(s)],
        "time_to_first_measured_step_s" => [m.and_then(|m| m.time_to_first_measured_step_s)],
        "budget" => [s.strategy.recompute.budget()],
        "checkmate" => [s.strategy.recompute.checkmate()],
        "policy" => [s.strategy.policy.map(|p| {
            serde_json::to_string(&p).expect("a policy is a name, a list or a table")
        })],
        "planned_peak_bytes" => [s.planned.as_ref().map(|p| p.predicted_peak_bytes)],
        "planned_cost_ratio" => [s.planned.as_ref().map(|p| p.predicted_cost_ratio)],
        "planned_recomputed_blocks" => [s.planned.as_ref().map(|p| {
            p.segments.iter().filter(|x| x.recompute).map(|x| (x.end - x.start) as u32).sum::<u32>()
        })],
        "measured_steps" => [s.train.steps as u32],
        "layers" => [s.model.layers as u32],
        "d_model" => [s.model.d_model as u32],
        "cpu_threads" => [record.env.cpu_threads as u32],
        "finished_at" => [record.finished_at.clone()],
        "git_revision" => [record.env.git_revision.clone()],
    )
}

/// The frames of every record of `records` (built by `frame`), concatenated lazily.
fn records_frame<'a>(
    dir: &Path,
    records: impl Iterator<Item = &'a JobRecord>,
    frame: fn(&JobRecord) -> PolarsResult<DataFrame>,
) -> Result<LazyFrame> {
    let frames = records
        .map(|r| frame(r).map(IntoLazy::lazy))
        .collect::<PolarsResult<Vec<_>>>()
        .map_err(perr(dir))?;
    if frames.is_empty() {
        return Err(Error::Records {
            path: dir.to_path_buf(),
            message: "no readable record".into(),
        });
    }
    concat(frames, UnionArgs::default()).map_err(perr(dir))
}

/// The GPU runtime settings of a job as a short label (`"exact_size pool"`, `"sliced pool,
/// cleanup every step"`, with a non-default autotune level appended); empty on the CPU, where
/// they do not apply. Records of different runtime settings form separate report groups.
pub fn runtime_label(spec: &crate::spec::JobSpec) -> String {
    if !spec.backend.is_gpu() {
        return String::new();
    }
    let d = &spec.device_settings;
    let pool = match d.memory_pool {
        crate::spec::MemoryPool::Sliced => "sliced pool",
        crate::spec::MemoryPool::ExactSize => "exact_size pool",
    };
    let mut label = pool.to_string();
    if d.memory_cleanup {
        label.push_str(", cleanup every step");
    }
    if d.autotune_level != crate::spec::AutotuneLevel::default() {
        label.push_str(&format!(", autotune {:?}", d.autotune_level).to_lowercase());
    }
    label
}

/// The study table: the newest record per (profile, backend, device, runtime settings,
/// configuration), with
/// `peak_gib`, `reduction_pct` (peak allocated vs the control of the same group, optimizer and
/// model, percent: a study may run the source's optimizer and AdamW side by side, or a named
/// model beside the profile's, each with its own control; models are told apart by `layers`
/// and `d_model`, which the experiment file keeps distinct), `relative_step_time` (median step
/// time / control's) and `speedup` (control's / ours),
/// sorted by profile, backend and the configuration's position in the experiment file.
///
/// # Errors
/// [`Error::Records`] naming the study folder when the query fails.
pub fn study_table(records: &StudyRecords) -> Result<DataFrame> {
    let dir = &records.dir;
    let lf = records_frame(dir, records.records.iter(), summary_frame)?;
    let group = [
        col("profile"),
        col("backend"),
        col("device_name"),
        col("runtime"),
        col("optimizer"),
        col("layers"),
        col("d_model"),
    ];
    let latest = lf
        .sort(
            ["finished_at", "key"],
            SortMultipleOptions::default().with_maintain_order(true),
        )
        .unique_stable_generic(
            Some(vec![
                col("profile"),
                col("backend"),
                col("device_name"),
                col("runtime"),
                col("config"),
            ]),
            UniqueKeepStrategy::Last,
        );
    let control = latest
        .clone()
        .filter(col("control").and(col("status").eq(lit("ok"))))
        .select([
            col("profile"),
            col("backend"),
            col("device_name"),
            col("runtime"),
            col("optimizer"),
            col("layers"),
            col("d_model"),
            col("peak_allocated_bytes").alias("control_peak_bytes"),
            col("median_step_s").alias("control_step_s"),
        ]);
    latest
        .join(control, group.clone(), group, JoinArgs::new(JoinType::Left))
        .with_columns([
            (col("peak_allocated_bytes").cast(DataType::Float64) / lit(GIB)).alias("peak_gib"),
            (col("peak_reserved_bytes").cast(DataType::Float64) / lit(GIB)).alias("reserved_gib"),
            (lit(100.0)
                * (lit(1.0)
                    - col("peak_allocated_bytes").cast(DataType::Float64)
                        / col("control_peak_bytes").cast(DataType::Float64)))
            .alias("reduction_pct"),
            (col("median_step_s") / col("control_step_s")).alias("relative_step_time"),
            (col("control_step_s") / col("median_step_s")).alias("speedup"),
        ])
        .sort(
            // `config` breaks ties of `config_order` (records written under other versions of
            // the experiment file): the table, and so summary.parquet, is the same every time.
            [
                "profile",
                "backend",
                "device_name",
                "runtime",
                "config_order",
                "config",
            ],
            SortMultipleOptions::default().with_maintain_order(true),
        )
        .collect()
        .map_err(perr(dir))
}

/// Per-step rows of the jobs `keys` of the study (for loss curves), sorted by configuration and
/// step; empty when none of them has a record.
///
/// # Errors
/// [`Error::Records`] naming the study folder when a frame cannot be built.
pub fn steps_table(records: &StudyRecords, keys: &[String]) -> Result<DataFrame> {
    let mut chosen = records
        .records
        .iter()
        .filter(|r| keys.contains(&r.key))
        .peekable();
    if chosen.peek().is_none() {
        return Ok(DataFrame::empty());
    }
    records_frame(&records.dir, chosen, steps_frame)?
        .sort(
            ["config", "key", "step"],
            SortMultipleOptions::default().with_maintain_order(true),
        )
        .collect()
        .map_err(perr(&records.dir))
}

/// The study table's `checkpoint` column: the activation checkpointing policy of a job's
/// strategy, `none`, `every_k` or `sqrt` (the interval itself is `checkpoint_k`).
pub fn checkpoint_policy(c: CheckpointSpec) -> &'static str {
    match c {
        CheckpointSpec::None => "none",
        CheckpointSpec::Every(_) => "every_k",
        CheckpointSpec::Sqrt => "sqrt",
    }
}

/// The study table's `checkpoint_k` column: blocks per checkpointed segment, K of every-K
/// checkpointing as the experiment file gives it, ceil(sqrt(`layers`)) for sqrt (Chen et al.
/// 2016), null without checkpointing.
pub fn checkpoint_k(c: CheckpointSpec, layers: usize) -> Option<u32> {
    match c {
        CheckpointSpec::None => None,
        CheckpointSpec::Every(k) => Some(k as u32),
        CheckpointSpec::Sqrt => c.segment_len(layers).map(|k| k as u32),
    }
}

/// The checkpointing of a study table's row from its `checkpoint` (policy) and `checkpoint_k`
/// cells; `None` for a policy this version does not know.
pub fn checkpoint_of(policy: &str, k: Option<u64>) -> Option<CheckpointSpec> {
    match (policy, k) {
        ("none", _) => Some(CheckpointSpec::None),
        ("sqrt", _) => Some(CheckpointSpec::Sqrt),
        ("every_k", Some(k)) => Some(CheckpointSpec::Every(k as usize)),
        _ => None,
    }
}
