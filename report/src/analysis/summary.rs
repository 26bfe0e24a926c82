//! The analysis stage of a training study: the polars frames of [`super::study_table`] and
//! [`super::steps_table`] read once into typed values ([`ConfigSummary`], [`GroupSummary`],
//! [`StepScaling`]) and the goals evaluated on them ([`GoalOutcome`]). The report's renderers
//! only format these values; no renderer reads a frame's cell by column name.
//!
//! A column that the analysis reads and the frame lacks (or holds with another type) is an
//! [`AnalysisError`] naming the column and the study, never an empty cell. A cell that exists
//! and is null (a measurement of a job that did not finish) is read as `None`.
//!
//! May import: `memwall_core` (records, specs), polars, [`crate::analysis::stats`].

use super::{JobStatus, StudyRecords};
use crate::analysis::stats::{self, Estimate};
use crate::spec::{
    CheckpointSpec, ConfigSelector, ConfigSpec, Goal, GoalMetric, JobSpec, OptimizerKind, Precision,
};
use memwall_core::strategy::LayerNormSaving;
use polars::prelude::*;
use std::collections::BTreeMap;

/// Why a study's frames could not be read into typed values.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// A column the analysis reads is not in the frame.
    #[error("study `{study}`: the {table} table has no column `{column}`")]
    MissingColumn {
        /// The study (its folder name under `runs/`).
        study: String,
        /// Which frame: "study" or "steps".
        table: &'static str,
        /// The column that is missing.
        column: String,
    },
    /// A column has another type than the analysis reads.
    #[error("study `{study}`: column `{column}` of the {table} table is {found}, not {expected}")]
    ColumnType {
        /// The study (its folder name under `runs/`).
        study: String,
        /// Which frame: "study" or "steps".
        table: &'static str,
        /// The column.
        column: String,
        /// The type the analysis reads (e.g. "text", "a number").
        expected: &'static str,
        /// The column's polars type.
        found: String,
    },
    /// A cell that every record has is null or cannot be read as its type.
    #[error("study `{study}`: column `{column}` of the {table} table, row {row}: {message}")]
    BadCell {
        /// The study (its folder name under `runs/`).
        study: String,
        /// Which frame: "study" or "steps".
        table: &'static str,
        /// The column.
        column: String,
        /// The row (0-based).
        row: usize,
        /// What is wrong with the cell.
        message: String,
    },
    /// A polars query of the analysis failed.
    #[error("study `{study}`: {what}: {source}")]
    Query {
        /// The study (its folder name under `runs/`).
        study: String,
        /// What the query computes (e.g. "loss scaling per configuration").
        what: &'static str,
        /// polars' error.
        #[source]
        source: polars::prelude::PolarsError,
    },
}

impl From<AnalysisError> for crate::Error {
    fn from(e: AnalysisError) -> Self {
        crate::Error::render("the analysis stage", e)
    }
}

/// Result of the analysis stage.
pub type AnalysisResult<T> = std::result::Result<T, AnalysisError>;

/// The columns of one frame of a study, read whole with the study and frame named in every
/// error.
pub struct Columns<'a> {
    df: &'a DataFrame,
    study: &'a str,
    table: &'static str,
}

impl<'a> Columns<'a> {
    /// The columns of `df`, the `table` frame ("study", "steps") of `study`.
    pub fn new(df: &'a DataFrame, study: &'a str, table: &'static str) -> Self {
        Columns { df, study, table }
    }

    fn column(&self, c: &str) -> AnalysisResult<&'a Column> {
        self.df.column(c).map_err(|_| AnalysisError::MissingColumn {
            study: self.study.to_string(),
            table: self.table,
            column: c.to_string(),
        })
    }

    fn wrong_type(&self, c: &str, expected: &'static str, found: &DataType) -> AnalysisError {
        AnalysisError::ColumnType {
            study: self.study.to_string(),
            table: self.table,
            column: c.to_string(),
            expected,
            found: found.to_string(),
        }
    }

    fn bad_cell(&self, c: &str, row: usize, message: impl Into<String>) -> AnalysisError {
        AnalysisError::BadCell {
            study: self.study.to_string(),
            table: self.table,
            column: c.to_string(),
            row,
            message: message.into(),
        }
    }

    /// The text column `c`, a null cell as `None`.
    ///
    /// # Errors
    /// [`AnalysisError::MissingColumn`], or [`AnalysisError::ColumnType`] when `c` is not text.
    pub fn opt_strs(&self, c: &str) -> AnalysisResult<Vec<Option<String>>> {
        let column = self.column(c)?;
        let s = column
            .str()
            .map_err(|_| self.wrong_type(c, "text", column.dtype()))?;
        Ok(s.iter().map(|v| v.map(str::to_string)).collect())
    }

    /// The text column `c`, which every row has.
    ///
    /// # Errors
    /// As [`Columns::opt_strs`], and [`AnalysisError::BadCell`] for a null cell.
    pub fn strs(&self, c: &str) -> AnalysisResult<Vec<String>> {
        self.opt_strs(c)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| v.ok_or_else(|| self.bad_cell(c, i, "null, but every record has one")))
            .collect()
    }

    /// The text column `c` read as the typed option it spells (a precision, an optimizer, a
    /// layer norm: `T`'s own spelling in experiment files), which every row has.
    ///
    /// # Errors
    /// As [`Columns::strs`], and [`AnalysisError::BadCell`] for a cell that spells no `T`.
    pub fn options<T: serde::de::DeserializeOwned>(&self, c: &str) -> AnalysisResult<Vec<T>> {
        use serde::de::{value::StrDeserializer, IntoDeserializer};
        self.strs(c)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let d: StrDeserializer<'_, serde::de::value::Error> =
                    v.as_str().into_deserializer();
                T::deserialize(d).map_err(|e| self.bad_cell(c, i, e.to_string()))
            })
            .collect()
    }

    /// The boolean column `c`, which every row has.
    ///
    /// # Errors
    /// [`AnalysisError::MissingColumn`], [`AnalysisError::ColumnType`] when `c` is not
    /// boolean, [`AnalysisError::BadCell`] for a null cell.
    pub fn bools(&self, c: &str) -> AnalysisResult<Vec<bool>> {
        let column = self.column(c)?;
        let s = column
            .bool()
            .map_err(|_| self.wrong_type(c, "boolean", column.dtype()))?;
        s.iter()
            .enumerate()
            .map(|(i, v)| v.ok_or_else(|| self.bad_cell(c, i, "null, but every record has one")))
            .collect()
    }

    /// The numeric column `c` as `f64` (in the column's unit), a null cell as `None`, a
    /// non-finite value kept.
    ///
    /// # Errors
    /// [`AnalysisError::MissingColumn`], or [`AnalysisError::ColumnType`] when `c` is not
    /// numeric (an all-null column is read as all `None`).
    pub fn raw_f64s(&self, c: &str) -> AnalysisResult<Vec<Option<f64>>> {
        let column = self.column(c)?;
        let dtype = column.dtype();
        if !(dtype.is_primitive_numeric() || dtype.is_null()) {
            return Err(self.wrong_type(c, "a number", dtype));
        }
        let cast = column
            .cast(&DataType::Float64)
            .map_err(|_| self.wrong_type(c, "a number", dtype))?;
        let s = cast
            .f64()
            .map_err(|_| self.wrong_type(c, "a number", dtype))?;
        Ok(s.iter().collect())
    }

    /// The numeric column `c` as `f64` (in the column's unit); a null or non-finite cell
    /// (a job that did not finish, a ratio to a missing control) is `None`.
    ///
    /// # Errors
    /// As [`Columns::raw_f64s`].
    pub fn f64s(&self, c: &str) -> AnalysisResult<Vec<Option<f64>>> {
        Ok(self
            .raw_f64s(c)?
            .into_iter()
            .map(|v| v.filter(|v| v.is_finite()))
            .collect())
    }

    /// The count column `c` (a non-negative integer every row has).
    ///
    /// # Errors
    /// As [`Columns::f64s`], and [`AnalysisError::BadCell`] for a null cell.
    pub fn counts(&self, c: &str) -> AnalysisResult<Vec<u64>> {
        let column = self.column(c)?;
        if !column.dtype().is_unsigned_integer() {
            return Err(self.wrong_type(c, "a count", column.dtype()));
        }
        self.f64s(c)?
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                v.map(|v| v as u64)
                    .ok_or_else(|| self.bad_cell(c, i, "null, but every record has one"))
            })
            .collect()
    }
}

/// The strategy of a configuration, as the study table records it.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategySummary {
    /// Compute precision.
    pub precision: Precision,
    /// The optimizer the record trained with.
    pub optimizer: OptimizerKind,
    /// Activation checkpointing as the experiment file gives it (none, every K, sqrt), read
    /// from the table's `checkpoint` and `checkpoint_k` columns.
    pub checkpoint: CheckpointSpec,
    /// What the record's layer norms kept for backward.
    pub layer_norm: LayerNormSaving,
    /// Whether the configuration is its group's control.
    pub control: bool,
    /// Whether the optimizer step is fused into the backward pass.
    pub fused_optimizer: bool,
    /// Whether kernel fusion is on.
    pub fusion: bool,
    /// Memory budget (fraction of the no-recompute peak), where one is set.
    pub budget: Option<f64>,
    /// Checkmate budget (fraction of the no-recompute peak), where Checkmate planned the job.
    pub checkmate: Option<f64>,
    /// The unit-level policy refining the plan, where one is set: the unit executor ran the
    /// job.
    pub policy: Option<memwall_core::units::Policy>,
    /// Gradient accumulation's micro-batches per optimizer step (1: none).
    pub accumulation_steps: u64,
    /// Nested checkpointing's blocks per inner segment, where set.
    pub nested_checkpoint: Option<u64>,
}

/// The model and run size of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeSummary {
    /// Trainable parameters (`None` where the job did not finish).
    pub parameters: Option<f64>,
    /// Transformer blocks.
    pub layers: u64,
    /// Model width.
    pub d_model: u64,
    /// CPU threads of the host.
    pub cpu_threads: u64,
    /// Measured (timed) steps.
    pub measured_steps: u64,
}

/// What a job measured, and the derived comparisons with its control; `None` where the job did
/// not finish, the control is missing, or a value is not finite.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Median step time (s).
    pub median_step_s: Option<f64>,
    /// Throughput (samples/s).
    pub samples_per_s: Option<f64>,
    /// Final training loss (nats/token).
    pub final_train_loss: Option<f64>,
    /// Evaluation perplexity.
    pub eval_perplexity: Option<f64>,
    /// Peak allocated memory (bytes).
    pub peak_allocated_bytes: Option<f64>,
    /// Peak reserved memory (bytes).
    pub peak_reserved_bytes: Option<f64>,
    /// Memory of the steady state between steps (bytes).
    pub steady_bytes: Option<f64>,
    /// Activation memory estimate (bytes).
    pub estimated_activation_bytes: Option<f64>,
    /// Time from the start of the job to its first timed step (s).
    pub time_to_first_measured_step_s: Option<f64>,
    /// Peak-allocated reduction against the group's control (percent).
    pub reduction_pct: Option<f64>,
    /// Median step time over the control's.
    pub relative_step_time: Option<f64>,
}

/// What the planner predicted for a budget-planned job (`None` for a job without a plan).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSummary {
    /// Predicted peak above the steady state (bytes).
    pub peak_bytes: Option<f64>,
    /// Predicted compute over plain forward and backward.
    pub cost_ratio: Option<f64>,
    /// Blocks the plan recomputes.
    pub recomputed_blocks: Option<f64>,
}

/// One row of the study table: the newest record of a configuration in one group, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSummary {
    /// The job's record key.
    pub key: String,
    /// Configuration name.
    pub config: String,
    /// Profile the job ran at.
    pub profile: String,
    /// Backend ("cuda", "flex", ...).
    pub backend: String,
    /// Device name (empty where the job ended before reporting it).
    pub device_name: String,
    /// GPU runtime settings label (empty on the CPU).
    pub runtime: String,
    /// How the job ended.
    pub status: JobStatus,
    /// Why a job did not finish (`None` for a finished job).
    pub reason: Option<String>,
    /// What the configuration's peak-allocated number is ("exact", "lower bound", ...).
    pub peak_allocated_bound: String,
    /// What the configuration's peak-reserved number is.
    pub peak_reserved_bound: String,
    /// The configuration's strategy.
    pub strategy: StrategySummary,
    /// Model and run size.
    pub size: SizeSummary,
    /// Measurements.
    pub measured: Measured,
    /// The executed plan's predictions.
    pub plan: PlanSummary,
}

impl ConfigSummary {
    /// Whether the job finished.
    pub fn ok(&self) -> bool {
        self.status == JobStatus::Ok
    }
}

fn strategies(t: &Columns) -> AnalysisResult<Vec<StrategySummary>> {
    let precision: Vec<Precision> = t.options("precision")?;
    let optimizer: Vec<OptimizerKind> = t.options("optimizer")?;
    let layer_norm: Vec<LayerNormSaving> = t.options("layer_norm")?;
    let policy = t.strs("checkpoint")?;
    let k = t.f64s("checkpoint_k")?;
    let checkpoint = policy
        .iter()
        .zip(&k)
        .enumerate()
        .map(|(i, (p, k))| {
            super::checkpoint_of(p, k.map(|k| k as u64)).ok_or_else(|| {
                t.bad_cell(
                    "checkpoint",
                    i,
                    "not none, sqrt, or every_k with its checkpoint_k",
                )
            })
        })
        .collect::<AnalysisResult<Vec<_>>>()?;
    let (control, fused) = (t.bools("control")?, t.bools("fused_optimizer")?);
    let (fusion, budget, checkmate) = (t.bools("fusion")?, t.f64s("budget")?, t.f64s("checkmate")?);
    // The policy as the job file writes it (JSON: a name, a list of units, a budget table).
    let unit_policy = t
        .opt_strs("policy")?
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            p.map(|text| {
                serde_json::from_str::<memwall_core::units::Policy>(&text)
                    .map_err(|_| t.bad_cell("policy", i, "not a policy as a job file writes it"))
            })
            .transpose()
        })
        .collect::<AnalysisResult<Vec<_>>>()?;
    let accumulation = t.counts("accumulation_steps")?;
    let nested = t.f64s("nested_checkpoint")?;
    Ok((0..precision.len())
        .map(|i| StrategySummary {
            precision: precision[i],
            optimizer: optimizer[i],
            checkpoint: checkpoint[i],
            layer_norm: layer_norm[i],
            control: control[i],
            fused_optimizer: fused[i],
            fusion: fusion[i],
            budget: budget[i],
            checkmate: checkmate[i],
            policy: unit_policy[i],
            accumulation_steps: accumulation[i],
            nested_checkpoint: nested[i].map(|j| j as u64),
        })
        .collect())
}

fn sizes(t: &Columns) -> AnalysisResult<Vec<SizeSummary>> {
    let parameters = t.f64s("parameters")?;
    let (layers, d_model) = (t.counts("layers")?, t.counts("d_model")?);
    let (threads, steps) = (t.counts("cpu_threads")?, t.counts("measured_steps")?);
    Ok((0..parameters.len())
        .map(|i| SizeSummary {
            parameters: parameters[i],
            layers: layers[i],
            d_model: d_model[i],
            cpu_threads: threads[i],
            measured_steps: steps[i],
        })
        .collect())
}

fn measurements(t: &Columns) -> AnalysisResult<Vec<Measured>> {
    let step = t.f64s("median_step_s")?;
    let samples = t.f64s("samples_per_s")?;
    let loss = t.f64s("final_train_loss")?;
    let ppl = t.f64s("eval_perplexity")?;
    let peak = t.f64s("peak_allocated_bytes")?;
    let reserved = t.f64s("peak_reserved_bytes")?;
    let steady = t.f64s("steady_bytes")?;
    let estimated = t.f64s("estimated_activation_bytes")?;
    let first = t.f64s("time_to_first_measured_step_s")?;
    let reduction = t.f64s("reduction_pct")?;
    let relative = t.f64s("relative_step_time")?;
    Ok((0..step.len())
        .map(|i| Measured {
            median_step_s: step[i],
            samples_per_s: samples[i],
            final_train_loss: loss[i],
            eval_perplexity: ppl[i],
            peak_allocated_bytes: peak[i],
            peak_reserved_bytes: reserved[i],
            steady_bytes: steady[i],
            estimated_activation_bytes: estimated[i],
            time_to_first_measured_step_s: first[i],
            reduction_pct: reduction[i],
            relative_step_time: relative[i],
        })
        .collect())
}

fn plans(t: &Columns) -> AnalysisResult<Vec<PlanSummary>> {
    let peak = t.f64s("planned_peak_bytes")?;
    let cost = t.f64s("planned_cost_ratio")?;
    let blocks = t.f64s("planned_recomputed_blocks")?;
    Ok((0..peak.len())
        .map(|i| PlanSummary {
            peak_bytes: peak[i],
            cost_ratio: cost[i],
            recomputed_blocks: blocks[i],
        })
        .collect())
}

/// Every row of the study table `df` of `study` ([`super::study_table`]), typed, in table
/// order.
///
/// # Errors
/// [`AnalysisError`] naming the column when one is missing, of another type, or null where
/// every record has a value, or when a status is not a [`JobStatus`].
pub fn config_summaries(df: &DataFrame, study: &str) -> AnalysisResult<Vec<ConfigSummary>> {
    let t = Columns::new(df, study, "study");
    let (key, config, profile) = (t.strs("key")?, t.strs("config")?, t.strs("profile")?);
    let (backend, device, runtime) = (
        t.strs("backend")?,
        t.strs("device_name")?,
        t.strs("runtime")?,
    );
    let (status, reason) = (t.strs("status")?, t.opt_strs("reason")?);
    let allocated_bound = t.strs("peak_allocated_bound")?;
    let reserved_bound = t.strs("peak_reserved_bound")?;
    let parts = strategies(&t)?
        .into_iter()
        .zip(sizes(&t)?)
        .zip(measurements(&t)?)
        .zip(plans(&t)?);
    parts
        .enumerate()
        .map(|(i, (((strategy, size), measured), plan))| {
            let status = status[i]
                .parse::<JobStatus>()
                .map_err(|e| t.bad_cell("status", i, e))?;
            Ok(ConfigSummary {
                key: key[i].clone(),
                config: config[i].clone(),
                profile: profile[i].clone(),
                backend: backend[i].clone(),
                device_name: device[i].clone(),
                runtime: runtime[i].clone(),
                status,
                reason: reason[i].clone(),
                peak_allocated_bound: allocated_bound[i].clone(),
                peak_reserved_bound: reserved_bound[i].clone(),
                strategy,
                size,
                measured,
                plan,
            })
        })
        .collect()
}

/// The name of the study of `records` (its folder under `runs/`), for errors.
pub fn study_name(records: &StudyRecords) -> String {
    match records.dir.file_name() {
        Some(name) => name.to_string_lossy().into_owned(),
        None => records.dir.display().to_string(),
    }
}

/// The rows of one (profile, backend, device, GPU runtime settings): one section of a report.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary {
    /// Profile.
    pub profile: String,
    /// Backend.
    pub backend: String,
    /// Device name (empty only where no record of the group named one).
    pub device: String,
    /// GPU runtime settings label (empty on the CPU).
    pub runtime: String,
    /// The group's rows, in study-table order.
    pub rows: Vec<ConfigSummary>,
}

/// `rows` grouped by (profile, backend, device, runtime), groups in that key's order. A row
/// without a device name (a job that ended before it could report its device, as written by
/// an older runner) joins the one group of its profile, backend and runtime that has one,
/// instead of forming a group of its own with nothing to plot.
pub fn group_summaries(rows: Vec<ConfigSummary>) -> Vec<GroupSummary> {
    type Key = (String, String, String, String);
    let mut by_key: BTreeMap<Key, Vec<ConfigSummary>> = BTreeMap::new();
    for row in rows {
        let key = (
            row.profile.clone(),
            row.backend.clone(),
            row.device_name.clone(),
            row.runtime.clone(),
        );
        by_key.entry(key).or_default().push(row);
    }
    let unnamed: Vec<Key> = by_key.keys().filter(|k| k.2.is_empty()).cloned().collect();
    for key in unnamed {
        let mut named = by_key
            .keys()
            .filter(|k| !k.2.is_empty() && (&k.0, &k.1, &k.3) == (&key.0, &key.1, &key.3));
        if let (Some(target), None) = (named.next().cloned(), named.next()) {
            if let Some(rows) = by_key.remove(&key) {
                by_key.entry(target).or_default().extend(rows);
            }
        }
    }
    by_key
        .into_iter()
        .map(|((profile, backend, device, runtime), rows)| GroupSummary {
            profile,
            backend,
            device,
            runtime,
            rows,
        })
        .collect()
}

/// The analysis stage's value for one training study: what its renderers format, computed
/// from its records before any rendering.
#[derive(Debug, Clone)]
pub struct StudyAnalysis {
    /// The study's name (its folder under `runs/`).
    pub study: String,
    /// Summaries of the configurations of the experiment file, grouped by (profile, backend,
    /// device, runtime) ([`group_summaries`]).
    pub groups: Vec<GroupSummary>,
    /// Summaries of records whose configuration the experiment file no longer has.
    pub stale: Vec<ConfigSummary>,
    /// The finished runs of every job (repeats), for the goals' intervals.
    pub repeats: RepeatRuns,
}

/// The analysis stage of a training study: its records' study table ([`study_table`]) read into
/// [`ConfigSummary`] values, those of configurations named in `configs` grouped, the others set
/// apart as stale, and the repeats of every job.
///
/// # Errors
/// [`crate::Error`] when the study table cannot be built, and the [`AnalysisError`] of a
/// missing column or an unreadable cell.
pub fn analyze(records: &StudyRecords, configs: &[&str]) -> crate::Result<StudyAnalysis> {
    let study = study_name(records);
    let summaries = config_summaries(&super::study_table(records)?, &study)?;
    let (known, stale): (Vec<ConfigSummary>, Vec<ConfigSummary>) = summaries
        .into_iter()
        .partition(|s| configs.contains(&s.config.as_str()));
    Ok(StudyAnalysis {
        groups: group_summaries(known),
        stale,
        repeats: RepeatRuns::new(records),
        study,
    })
}

/// The job of `spec` without its repeat index: the key every run of a configuration shares.
pub(crate) fn base_key(spec: &JobSpec) -> String {
    JobSpec {
        repeat: 0,
        ..spec.clone()
    }
    .key()
}

/// The finished runs of every job of a study (its repeats, `[study] repeats`): per job
/// without its repeat index and device, the median step time (s) and peak allocated bytes
/// of each finished run.
#[derive(Debug, Clone, Default)]
pub struct RepeatRuns {
    /// (job without repeat index, device) of each (record key, device): one job key measured
    /// on two device models is two records (`memwall_lab::bundle::import`).
    job_of: BTreeMap<(String, String), (String, String)>,
    /// Each finished run, by (job, device).
    runs: BTreeMap<(String, String), Vec<Run>>,
}

/// One finished run of a job.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// Median step time, seconds.
    step_s: f64,
    /// Peak allocated bytes.
    peak: f64,
    /// Its repeat index.
    repeat: usize,
}

impl Run {
    fn value(self, metric: GoalMetric) -> f64 {
        match metric {
            GoalMetric::MedianStepS => self.step_s,
            GoalMetric::PeakAllocatedBytes => self.peak,
        }
    }
}

impl RepeatRuns {
    /// The finished runs of `records`, in record order.
    pub fn new(records: &StudyRecords) -> RepeatRuns {
        let mut out = RepeatRuns::default();
        for r in &records.records {
            let job = (base_key(&r.spec), r.env.device_name.clone());
            out.job_of
                .entry((r.key.clone(), r.env.device_name.clone()))
                .or_insert_with(|| job.clone());
            if r.status != JobStatus::Ok {
                continue;
            }
            if let Some(s) = r.summary {
                let run = Run {
                    step_s: s.median_step_s,
                    peak: s.peak_allocated_bytes as f64,
                    repeat: r.spec.repeat,
                };
                out.runs.entry(job).or_default().push(run);
            }
        }
        out
    }

    /// The values of `metric` over every finished run of the job of record `key` on `device`
    /// (the same job but for its repeat index, on the same device); empty when it has no
    /// record there.
    pub fn values(&self, key: &str, device: &str, metric: GoalMetric) -> Vec<f64> {
        self.runs_of(key, device)
            .iter()
            .map(|run| run.value(metric))
            .collect()
    }

    /// [`RepeatRuns::values`], or `own` (the row's own value) alone when the job has no run
    /// here: what each side of a goal and of an equal-memory pair is the median of.
    pub fn values_or(&self, key: &str, device: &str, metric: GoalMetric, own: f64) -> Vec<f64> {
        let v = self.values(key, device, metric);
        if v.is_empty() {
            vec![own]
        } else {
            v
        }
    }

    /// The ratios `a / b` of `metric` between the runs of two jobs that share a repeat index
    /// (repeats run interleaved, so run `r` of every configuration ran close in time: a paired
    /// design), in repeat order; empty when no repeat index is common to both.
    pub fn paired_ratios(&self, a: (&str, &str), b: (&str, &str), metric: GoalMetric) -> Vec<f64> {
        let by_repeat = |(key, device): (&str, &str)| {
            self.runs_of(key, device)
                .iter()
                .map(|run| (run.repeat, run.value(metric)))
                .collect::<BTreeMap<usize, f64>>()
        };
        let (ra, rb) = (by_repeat(a), by_repeat(b));
        ra.iter()
            .filter_map(|(r, x)| rb.get(r).filter(|y| **y > 0.0).map(|y| x / y))
            .collect()
    }

    /// The finished runs of the job of record `key` on `device` (none without a record there).
    fn runs_of(&self, key: &str, device: &str) -> &[Run] {
        self.job_of
            .get(&(key.to_string(), device.to_string()))
            .and_then(|job| self.runs.get(job))
            .map_or(&[], Vec::as_slice)
    }
}

/// Whether a goal is met by a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoalVerdict {
    /// The ratio (its whole interval, with repeats) is at most the goal.
    Met,
    /// The ratio (its whole interval, with repeats) is above the goal.
    Missed,
    /// The interval straddles the goal.
    Undecided,
}

impl GoalVerdict {
    /// The verdict of `ratio` against "at most `at_most`": with an interval, met when the whole
    /// interval is within it, missed when the whole interval is beyond it, undecided
    /// otherwise; without one (a single run per side), the median decides.
    pub fn of(ratio: &Estimate, at_most: f64) -> GoalVerdict {
        if ratio.has_interval() {
            if ratio.hi <= at_most {
                GoalVerdict::Met
            } else if ratio.lo > at_most {
                GoalVerdict::Missed
            } else {
                GoalVerdict::Undecided
            }
        } else if ratio.median <= at_most {
            GoalVerdict::Met
        } else {
            GoalVerdict::Missed
        }
    }

    /// "yes", "no" or "undecided", as the goals table prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            GoalVerdict::Met => "yes",
            GoalVerdict::Missed => "no",
            GoalVerdict::Undecided => "undecided",
        }
    }
}

/// The interval of a ratio over repeated runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower end (a ratio, unitless).
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// Probability that the interval covers the true ratio (at least; the product of the two
    /// sides' coverages).
    pub coverage: f64,
}

/// A `[[goals]]` entry evaluated at one precision of a group: the ratio of the goal's metric
/// between the numerator's and the denominator's configuration, with its interval (with
/// repeats) and verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalOutcome {
    /// The goal.
    pub goal: Goal,
    /// The precision both configurations ran at.
    pub precision: Precision,
    /// The optimizer both configurations trained with.
    pub optimizer: OptimizerKind,
    /// Ratio of the two medians over the runs (unitless).
    pub median: f64,
    /// The ratio's interval; `None` with a single run on a side.
    pub interval: Option<Interval>,
    /// Whether the goal is met.
    pub verdict: GoalVerdict,
    /// Runs of the numerator's and the denominator's configuration.
    pub runs: (usize, usize),
}

/// The first finished row of a group at `precision` with `optimizer` whose configuration `sel`
/// picks in the group ([`ConfigSelector::matches_in_group`]: every strategy field the selector
/// leaves out at its default, so no kernel fusion, budget or unit-level policy unless it names
/// one).
fn goal_side<'r>(
    rows: &[(&'r ConfigSummary, &ConfigSpec)],
    precision: Precision,
    optimizer: OptimizerKind,
    sel: &ConfigSelector,
) -> Option<&'r ConfigSummary> {
    rows.iter()
        .find(|(c, cfg)| {
            c.ok()
                && (c.strategy.precision, c.strategy.optimizer) == (precision, optimizer)
                && sel.matches_in_group(cfg)
        })
        .map(|(c, _)| *c)
}

/// `goals` evaluated on a group's `rows` (in the report's order, each with its configuration
/// in the experiment file): for each precision, optimizer (in the order the rows first train
/// with it) and goal, the ratio of the goal's metric between the first finished configuration
/// its numerator picks and the first its denominator picks, both at that precision with that
/// optimizer ([`goal_side`]). A goal whose configurations or values are missing gives no
/// outcome.
///
/// Each side is the median over its finished runs (`repeats`; the row's own value where the
/// record has none), and the ratio gets an interval: the ratio of the two medians'
/// order-statistic intervals ([`stats::median_interval`], [`stats::ratio`]).
pub fn goal_outcomes(
    rows: &[(&ConfigSummary, &ConfigSpec)],
    goals: &[Goal],
    repeats: &RepeatRuns,
) -> Vec<GoalOutcome> {
    let metric = |c: &ConfigSummary, m: GoalMetric| match m {
        GoalMetric::MedianStepS => c.measured.median_step_s,
        GoalMetric::PeakAllocatedBytes => c.measured.peak_allocated_bytes,
    };
    let mut optimizers: Vec<OptimizerKind> = Vec::new();
    for (c, _) in rows {
        if !optimizers.contains(&c.strategy.optimizer) {
            optimizers.push(c.strategy.optimizer);
        }
    }
    let mut out = Vec::new();
    for precision in [Precision::F32, Precision::F16, Precision::Bf16] {
        for (&optimizer, g) in optimizers
            .iter()
            .flat_map(|o| goals.iter().map(move |g| (o, g)))
        {
            let a = goal_side(rows, precision, optimizer, &g.numerator);
            let b = goal_side(rows, precision, optimizer, &g.denominator);
            let (Some(a), Some(b)) = (a, b) else {
                continue;
            };
            let (Some(x), Some(y)) = (metric(a, g.metric), metric(b, g.metric)) else {
                continue;
            };
            let runs = |c: &ConfigSummary, own: f64| {
                repeats.values_or(&c.key, &c.device_name, g.metric, own)
            };
            let (xs, ys) = (runs(a, x), runs(b, y));
            let est = |v: &[f64]| stats::median_interval(v, stats::LEVEL);
            let Some(r) = est(&xs)
                .zip(est(&ys))
                .and_then(|(ex, ey)| stats::ratio(&ex, &ey))
            else {
                continue;
            };
            out.push(GoalOutcome {
                goal: g.clone(),
                precision,
                optimizer,
                median: r.median,
                interval: r.has_interval().then_some(Interval {
                    lo: r.lo,
                    hi: r.hi,
                    coverage: r.coverage,
                }),
                verdict: GoalVerdict::of(&r, g.at_most),
                runs: (xs.len(), ys.len()),
            });
        }
    }
    out
}

/// The smallest coverage of the intervals of `outcomes` (the joint coverage a table of them
/// can state); `None` when no outcome has an interval.
pub fn joint_coverage(outcomes: &[GoalOutcome]) -> Option<f64> {
    outcomes
        .iter()
        .filter_map(|o| o.interval.map(|i| i.coverage))
        .reduce(f64::min)
}

/// Loss scaling and gradient underflow of one configuration over its steps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepScaling {
    /// Steps skipped for non-finite gradients.
    pub skipped_steps: Option<f64>,
    /// Mean fraction of exactly-zero 16-bit gradient entries (0 to 1).
    pub zero_fraction: Option<f64>,
    /// Loss scale at the last step.
    pub final_scale: Option<f64>,
    /// Smallest loss scale over the steps.
    pub min_scale: Option<f64>,
}

/// Per configuration of the per-step table `steps_df` of `study` ([`super::steps_table`]):
/// steps skipped, mean zero-gradient fraction, final and minimum loss scale (a lazy polars
/// aggregation). Empty for an empty table.
///
/// # Errors
/// [`AnalysisError::MissingColumn`] (or another [`AnalysisError`]) naming the column when the
/// table lacks one the aggregation reads.
pub fn step_scaling(
    steps_df: &DataFrame,
    study: &str,
) -> AnalysisResult<BTreeMap<String, StepScaling>> {
    if steps_df.height() == 0 {
        return Ok(BTreeMap::new());
    }
    let t = Columns::new(steps_df, study, "steps");
    for c in ["config", "skipped", "grad_zero_fraction", "loss_scale"] {
        t.column(c)?;
    }
    let agg = steps_df
        .clone()
        .lazy()
        .group_by([col("config")])
        .agg([
            col("skipped")
                .cast(DataType::UInt32)
                .sum()
                .alias("skipped_steps"),
            col("grad_zero_fraction").mean().alias("zero_fraction"),
            col("loss_scale").last().alias("final_scale"),
            col("loss_scale").min().alias("min_scale"),
        ])
        .collect()
        .map_err(|source| AnalysisError::Query {
            study: study.to_string(),
            what: "loss scaling per configuration",
            source,
        })?;
    let a = Columns::new(&agg, study, "steps");
    let (skipped, zero) = (a.f64s("skipped_steps")?, a.f64s("zero_fraction")?);
    let (last, min) = (a.f64s("final_scale")?, a.f64s("min_scale")?);
    let mut out = BTreeMap::new();
    for (i, config) in a.strs("config")?.into_iter().enumerate() {
        out.entry(config).or_insert(StepScaling {
            skipped_steps: skipped[i],
            zero_fraction: zero[i],
            final_scale: last[i],
            min_scale: min[i],
        });
    }
    Ok(out)
}

/// Per configuration of the per-step table `steps_df` of `study` ([`super::steps_table`]), the
/// points (step, `value`) in table order (by job, then step): `value` in its column's unit
/// (e.g. `loss` in nats/token, `loss_scale`). A row with a null step or value gives no point; a
/// non-finite value (a diverged loss) is kept, as the figures draw it. Empty for an empty table.
///
/// # Errors
/// [`AnalysisError`] naming the column when `config`, `step` or `value` is missing or not of
/// its type.
pub fn step_curves(
    steps_df: &DataFrame,
    study: &str,
    value: &str,
) -> AnalysisResult<BTreeMap<String, Vec<(f64, f64)>>> {
    let mut curves: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    if steps_df.height() == 0 {
        return Ok(curves);
    }
    let t = Columns::new(steps_df, study, "steps");
    let configs = t.strs("config")?;
    let (steps, values) = (t.raw_f64s("step")?, t.raw_f64s(value)?);
    for (i, config) in configs.into_iter().enumerate() {
        if let (Some(s), Some(v)) = (steps[i], values[i]) {
            curves.entry(config).or_default().push((s, v));
        }
    }
    Ok(curves)
}

#[cfg(test)]
mod tests;
