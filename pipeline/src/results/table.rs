//! Parquet files derived from records, and the study tables aggregated with polars' lazy API.
//!
//! Each job folder gets `steps.parquet` (one row per step) and `summary.parquet` (one row),
//! written by the driver from the job's `record.json`. A study's table is a lazy query over
//! `runs/<study>/*/summary.parquet`: the newest record per (profile, backend, device,
//! configuration), joined with the control row of its group for the reduction and relative
//! step time.

use super::{read_record, JobRecord, RECORD_FILE};
use crate::error::{Error, Result};
use polars::prelude::*;
use std::path::Path;

/// File names of the derived Parquet files in a job folder.
pub const STEPS_FILE: &str = "steps.parquet";
pub const SUMMARY_FILE: &str = "summary.parquet";

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn perr(path: &Path) -> impl Fn(PolarsError) -> Error + '_ {
    move |e| Error::Records {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<()> {
    let tmp = path.with_extension("parquet.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| Error::io("creating", &tmp, e))?;
    ParquetWriter::new(file).finish(df).map_err(perr(path))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("renaming into", path, e))
}

/// Writes `steps.parquet` and `summary.parquet` for `record` into `dir`.
///
/// # Errors
/// [`Error::Records`] or [`Error::Io`] naming the file.
pub fn ingest(dir: &Path, record: &JobRecord) -> Result<()> {
    let s = &record.spec;
    let n = record.steps.len();
    let rep = |v: &str| vec![v.to_string(); n];
    let mut steps = df!(
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
    .map_err(perr(dir))?;
    write_parquet(&dir.join(STEPS_FILE), &mut steps)?;

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
    let mut summary = df!(
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
        "checkpoint" => [s.strategy.checkpoint.to_string()],
        "fused_optimizer" => [s.strategy.fused_optimizer],
        "fusion" => [s.strategy.fusion],
        "master_weights" => [s.strategy.master_weights],
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
        "memory_cleanup" => [s.device_settings.memory_cleanup],
        "runtime" => [runtime_label(s)],
        "time_to_first_measured_step_s" => [m.and_then(|m| m.time_to_first_measured_step_s)],
        "budget" => [s.strategy.budget],
        "checkmate" => [s.strategy.checkmate],
        "planned_peak_bytes" => [s.planned.as_ref().map(|p| p.predicted_peak_bytes)],
        "planned_cost_ratio" => [s.planned.as_ref().map(|p| p.predicted_cost_ratio)],
        "planned_recomputed_blocks" => [s.planned.as_ref().map(|p| {
            p.segments.iter().filter(|x| x.recompute).map(|x| (x.end - x.start) as u32).sum::<u32>()
        })],
        "measured_steps" => [s.train.steps as u32],
        "layers" => [s.model.layers as u32],
        "finished_at" => [record.finished_at.clone()],
        "git_revision" => [record.env.git_revision.clone()],
    )
    .map_err(perr(dir))?;
    write_parquet(&dir.join(SUMMARY_FILE), &mut summary)
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

/// Re-derives the Parquet files of every job folder of `study` from its `record.json` (the
/// source of truth), so all summaries share this version's schema, records brought back from a
/// GPU machine included. Returns how many were ingested.
pub fn ingest_all(runs_root: &Path, study: &str) -> Result<usize> {
    let dir = runs_root.join(study);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(0);
    };
    let mut n = 0;
    for entry in entries.flatten() {
        let job_dir = entry.path();
        if job_dir.join(RECORD_FILE).exists() {
            match read_record(&job_dir) {
                Ok(Some(record)) => {
                    ingest(&job_dir, &record)?;
                    n += 1;
                }
                Ok(None) => {}
                // A record from an incompatible memwall version: leave it out, say so.
                Err(e) => {
                    tracing::warn!("skipping {}: {e}", job_dir.display());
                    let _ = std::fs::remove_file(job_dir.join(SUMMARY_FILE));
                }
            }
        }
    }
    Ok(n)
}

/// The study table: the newest record per (profile, backend, device, runtime settings,
/// configuration), with
/// `peak_gib`, `reduction_pct` (peak allocated vs the control of the same group, percent),
/// `relative_step_time` (median step time / control's) and `speedup` (control's / ours),
/// sorted by profile, backend and the configuration's position in the experiment file.
///
/// # Errors
/// [`Error::Records`] when no summary exists or the query fails.
pub fn study_table(runs_root: &Path, study: &str) -> Result<DataFrame> {
    let dir = runs_root.join(study);
    let glob = dir.join("*").join(SUMMARY_FILE);
    let glob_str = glob.to_string_lossy().to_string();
    let args = ScanArgsParquet {
        allow_missing_columns: true,
        ..Default::default()
    };
    let lf =
        LazyFrame::scan_parquet(PlRefPath::new(glob_str.as_str()), args).map_err(perr(&dir))?;
    let group = [
        col("profile"),
        col("backend"),
        col("device_name"),
        col("runtime"),
    ];
    let latest = lf
        .sort(["finished_at"], Default::default())
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
            [
                "profile",
                "backend",
                "device_name",
                "runtime",
                "config_order",
            ],
            Default::default(),
        )
        .collect()
        .map_err(perr(&dir))
}

/// Per-step rows of the jobs `keys` of `study` (for loss curves).
pub fn steps_table(runs_root: &Path, study: &str, keys: &[String]) -> Result<DataFrame> {
    let dir = runs_root.join(study);
    let mut frames = Vec::new();
    for key in keys {
        let path = dir.join(key).join(STEPS_FILE);
        if path.exists() {
            let p = path.to_string_lossy().to_string();
            frames.push(
                LazyFrame::scan_parquet(PlRefPath::new(p.as_str()), Default::default())
                    .map_err(perr(&path))?,
            );
        }
    }
    if frames.is_empty() {
        return Ok(DataFrame::empty());
    }
    concat(frames, UnionArgs::default())
        .and_then(|lf| lf.sort(["config", "step"], Default::default()).collect())
        .map_err(perr(&dir))
}
