//! Job records: what one measured job produced. Written by the job process as JSON
//! (`record.json`, atomically), then converted to Parquet by the driver.

use crate::measure::Environment;
use crate::spec::JobSpec;
use serde::{Deserialize, Serialize};

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Finished; every measurement is present.
    Ok,
    /// The configuration did not fit in device memory (a result, not an error).
    OutOfMemory,
    /// The backend cannot run this configuration (e.g. a dtype it lacks); `reason` says why.
    Unsupported,
    /// The job crashed or failed; `reason` holds the error.
    Failed,
    /// No plan fits the configuration's memory budget (a result, not an error: the budget is
    /// below what any schedule of the model needs); `reason` gives the budget and the bound.
    Infeasible,
}

impl JobStatus {
    /// The snake_case name used in records: "ok", "out_of_memory", "unsupported", "failed" or
    /// "infeasible".
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Ok => "ok",
            JobStatus::OutOfMemory => "out_of_memory",
            JobStatus::Unsupported => "unsupported",
            JobStatus::Failed => "failed",
            JobStatus::Infeasible => "infeasible",
        }
    }
}

impl std::str::FromStr for JobStatus {
    type Err = String;

    /// The status named by its record text ([`JobStatus::as_str`]).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [
            JobStatus::Ok,
            JobStatus::OutOfMemory,
            JobStatus::Unsupported,
            JobStatus::Failed,
            JobStatus::Infeasible,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
        .ok_or_else(|| format!("`{text}` is not a job status"))
    }
}

/// One training step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 0-based step index, warm-up steps included.
    pub step: usize,
    /// Warm-up steps are excluded from timing and peaks.
    pub warmup: bool,
    /// The untimed memory step (probes that synchronize the device sample at every phase
    /// boundary in it): its peaks count, its time does not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memory_step: bool,
    /// Training loss (mean token cross-entropy, nats) of the step's batch.
    #[serde(with = "crate::nonfinite")]
    pub loss: f64,
    /// Wall time of the step (device synchronized), seconds.
    #[serde(with = "crate::nonfinite")]
    pub time_s: f64,
    /// Peak allocated bytes of the step: high-water mark of live tensor bytes (see
    /// [`MemorySample`](crate::measure::MemorySample)).
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes of the step: bytes the allocator holds from the system.
    pub peak_reserved_bytes: u64,
    /// Loss scale S the step's backward pass used (loss-scaled jobs only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::nonfinite::option"
    )]
    pub loss_scale: Option<f64>,
    /// The optimizer step was skipped because a gradient was inf/NaN (dynamic loss scaling).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// Fraction of the 16-bit gradient entries that are exactly zero before unscaling
    /// (master-weight jobs only): the underflow that loss scaling exists to prevent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::nonfinite::option"
    )]
    pub grad_zero_fraction: Option<f64>,
    /// Unit outputs the unit executor recomputed in this step's backward, counted as it ran
    /// (jobs with a policy only; the plan predicts it in `spec.unit_plan.recomputed_units`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_units: Option<u32>,
}

/// Summary of a finished job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of trainable parameters of the model (elements, not bytes).
    pub parameters: u64,
    /// Median step time over the measured steps, seconds.
    #[serde(with = "crate::nonfinite")]
    pub median_step_s: f64,
    /// Throughput, sequences per second (batch over the median step time).
    #[serde(with = "crate::nonfinite")]
    pub samples_per_s: f64,
    /// Throughput, tokens per second (`samples_per_s` times `seq_len`).
    #[serde(with = "crate::nonfinite")]
    pub tokens_per_s: f64,
    /// Largest per-step peak over the measured steps, bytes.
    pub peak_allocated_bytes: u64,
    /// Largest per-step reserved peak over the measured steps, bytes.
    pub peak_reserved_bytes: u64,
    /// Bytes live before the first step (parameters, data; optimizer state is allocated
    /// lazily at the first step).
    pub baseline_bytes: u64,
    /// Training loss of the last step (mean token cross-entropy, nats).
    #[serde(with = "crate::nonfinite")]
    pub final_train_loss: f64,
    /// Mean token cross-entropy on the held-out stories, nats.
    #[serde(with = "crate::nonfinite")]
    pub eval_loss: f64,
    /// exp(eval_loss).
    #[serde(with = "crate::nonfinite")]
    pub eval_perplexity: f64,
    /// Model FLOPs utilization against `peak_flops` (None where no peak is known).
    #[serde(default, with = "crate::nonfinite::option")]
    pub mfu: Option<f64>,
    /// Peak FLOP/s used for MFU.
    #[serde(default, with = "crate::nonfinite::option")]
    pub peak_flops: Option<f64>,
    /// Wall time of the whole job (warm-up, measured steps, eval), seconds.
    #[serde(with = "crate::nonfinite")]
    pub wall_s: f64,
    /// Bytes live at the start of the last measured step (parameters, optimizer state, data).
    pub steady_bytes: u64,
    /// Estimated activation bytes of the job's plan from measured per-block costs
    /// (`memwall_core::budget::estimate_plan`).
    pub estimated_activation_bytes: u64,
    /// Seconds from the start of the training loop (device initialization, model, per-block
    /// profiling, warm-up and memory steps with their kernel compilation and autotuning) to
    /// the start of the first timed step. Absent in older records.
    #[serde(default, with = "crate::nonfinite::option")]
    pub time_to_first_measured_step_s: Option<f64>,
}

/// Everything one job produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's content key ([`JobSpec::key`], 16 hex digits).
    pub key: String,
    /// The job as it was run.
    pub spec: JobSpec,
    /// How the job ended.
    pub status: JobStatus,
    /// Why the job did not finish (failed, unsupported, out of memory).
    pub reason: Option<String>,
    /// Where and with what the job ran.
    pub env: Environment,
    /// What the peak-memory numbers measure.
    pub memory_probe: String,
    /// Every step run, in order, warm-up steps included.
    pub steps: Vec<StepRecord>,
    /// Summary over the measured steps (present only when the job finished).
    pub summary: Option<Summary>,
    /// The segment plan the job ran (None for plain backward).
    pub plan: Option<Vec<crate::strategy::Segment>>,
    /// Measured per-block costs (bytes kept by each block's graph, its input, forward time).
    #[serde(default)]
    pub block_costs: Vec<crate::strategy::BlockCost>,
    /// The profiling pass's measurements of the segment executor (a `profile_only` record:
    /// what a Checkmate configuration's plan is solved from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_profile: Option<crate::segment_memory::ExecutorProfile>,
    /// The first device allocation failure of the job's process, if one happened (what made
    /// the record `out_of_memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_memory: Option<crate::measure::OutOfMemory>,
    /// Which bound each peak of the record is (absent in records written before the field:
    /// CPU peaks were exact, CUDA allocated peaks lower bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bounds: Option<crate::measure::PeakBounds>,
    /// The memory timeline of one traced step, with what is live at its peak (absent in
    /// records written before the field and in records of jobs that did not train).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::timeline::StepTimeline>,
    /// Forward seconds of each unit of a block on the job's device, in
    /// [`crate::units::Unit::ALL`] order (the first block's, median of 5 runs each), measured
    /// before the first step of a job with a unit-level plan; `None` for other jobs and
    /// records before the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_forward_s: Option<[f64; 8]>,
    /// How loaded the machine was while the job ran (absent in records written before the
    /// field, and where the kernel's counters cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::measure::MachineLoad>,
    /// RFC 3339 time the record was written.
    pub finished_at: String,
}

impl JobRecord {
    /// A record for a job that produced no measurements.
    pub fn unfinished(spec: &JobSpec, status: JobStatus, reason: String, env: Environment) -> Self {
        JobRecord {
            key: spec.key(),
            spec: spec.clone(),
            status,
            reason: Some(reason),
            env,
            memory_probe: String::new(),
            steps: Vec::new(),
            summary: None,
            plan: None,
            block_costs: Vec::new(),
            executor_profile: None,
            out_of_memory: None,
            peak_bounds: None,
            timeline: None,
            unit_forward_s: None,
            load: None,
            finished_at: chrono::Utc::now().to_rfc3339(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JobStatus;

    #[test]
    fn a_job_status_reads_back_from_its_text() {
        for s in [
            JobStatus::Ok,
            JobStatus::OutOfMemory,
            JobStatus::Unsupported,
            JobStatus::Failed,
            JobStatus::Infeasible,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.as_str().parse::<JobStatus>(), Ok(s));
        }
        assert!("done".parse::<JobStatus>().is_err());
    }
}
