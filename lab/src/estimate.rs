//! Expected device time of a bundle's jobs, so that a GPU session knows before it starts what
//! fits its minutes (`memwall bundle` prints it per study; `run.sh --minutes N` starts a job only
//! when its expected time fits).
//!
//! A job's expected seconds come from, in order:
//! 1. **its own record**: the record store holds a finished record of the same job key (the
//!    last imported run): its wall time plus the process start-up;
//! 2. **a measured rate**: the store holds finished records on the same backend and precision
//!    (any study, any size): the job's training FLOPs per step ([`ModelConfig::train_flops_per_token`],
//!    `6 N` plus attention, Kaplan et al. 2020, section 2.1) over the median FLOP/s those records
//!    achieved, times the steps it runs;
//! 3. **a default rate** ([`DEFAULT_FLOPS`]) otherwise.
//!
//! Steps counted: warm-up, the untimed memory step, the measured steps, and the evaluation
//! batches at a third of a step each (forward only); a job with activation checkpointing does one
//! more forward per step (x 4/3, an upper bound); a job whose plan stage profiles it (memory
//! budgets, Checkmate) also runs the profiling pass ([`PROFILE_PASS_STEPS`] steps). These are
//! estimates for scheduling, never reported as results.

use crate::device::BackendKind;
use crate::record::JobRecord;
use crate::spec::{JobSpec, Precision};
use std::collections::BTreeMap;

/// Seconds of a job besides its steps with warm kernel caches: process start, CUDA context and
/// model initialization. CUDA: the H100 `peak_memory` records (2026-11-22) spent 11.0 s of
/// wall time in a job of 15 steps of 0.665 s, so about 1 s in the job besides its steps; 5 s
/// leaves room for the process and the CUDA context, which the wall time does not count.
pub const STARTUP_S: [(BackendKind, f64); 3] = [
    (BackendKind::Cuda, 5.0),
    (BackendKind::Flex, 1.0),
    (BackendKind::Ndarray, 1.0),
];

/// Extra seconds of the first job of a precision when the bundle carries no kernel cache
/// (H100, cold caches: the first bf16 job reached its first step after 153 s; docs/src/operations/gpu-runs.md "GPU
/// runs").
pub const COLD_CACHE_S: f64 = 153.0;

/// Training FLOP/s assumed when no record on the backend and precision exists: CUDA 20e12
/// (about half the f32 rate memwall's H100 `peak_memory` records achieved, so that a first
/// bundle errs long), CPU 5e9.
pub const DEFAULT_FLOPS: [(BackendKind, f64); 3] = [
    (BackendKind::Cuda, 20e12),
    (BackendKind::Flex, 5e9),
    (BackendKind::Ndarray, 5e9),
];

/// Steps' worth of the plan stage's profiling pass (`runner/src/train/profile.rs`): two passes
/// of per-block measurements, each a forward with and without autodiff, a backward and the
/// parameter gradients of every block with a device synchronization between them (about two
/// steps each), then two real training steps under each of three calibration plans that
/// recompute blocks (six steps at 4/3): 2 x 2 + 6 x 4/3 = 12.
pub const PROFILE_PASS_STEPS: f64 = 12.0;

fn lookup(table: &[(BackendKind, f64)], b: BackendKind) -> f64 {
    table
        .iter()
        .find(|(k, _)| *k == b)
        .map(|(_, v)| *v)
        .unwrap_or(table[0].1)
}

/// Where an estimate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Basis {
    /// The job's own last record.
    Record,
    /// FLOP/s measured by other records on the backend and precision.
    MeasuredRate,
    /// [`DEFAULT_FLOPS`].
    DefaultRate,
}

impl Basis {
    /// Lower-case words for tables and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Record => "its last record",
            Basis::MeasuredRate => "the FLOP rate of earlier records",
            Basis::DefaultRate => "a default FLOP rate",
        }
    }
}

/// One job's expected wall seconds on the target and what they rest on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeEstimate {
    /// Expected wall seconds, process start to record.
    pub seconds: f64,
    /// What the estimate rests on.
    pub basis: Basis,
    /// Seconds of `seconds` that are the cold start of the kernel caches ([`COLD_CACHE_S`]),
    /// added by the bundle to the first job of a precision when it carries no cache.
    pub cold_start_s: f64,
}

/// Training FLOP/s achieved per (backend, precision) by finished records: the median over
/// records of `train_flops_per_token * tokens_per_s`.
#[derive(Debug, Clone, Default)]
pub struct Rates {
    by: BTreeMap<(String, String), f64>,
}

impl Rates {
    /// The rates of `records` (finished ones with a summary).
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a JobRecord>) -> Rates {
        let mut all: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for r in records {
            let Some(s) = &r.summary else { continue };
            let rate = r.spec.model.train_flops_per_token() * s.tokens_per_s;
            if rate.is_finite() && rate > 0.0 {
                all.entry(key(r.spec.backend, r.spec.strategy.precision))
                    .or_default()
                    .push(rate);
            }
        }
        let by = all
            .into_iter()
            .map(|(k, mut v)| {
                v.sort_by(f64::total_cmp);
                (k, v[v.len() / 2])
            })
            .collect();
        Rates { by }
    }

    /// The measured FLOP/s of `backend` at `precision`, if any record gives one; f16 without
    /// records of its own takes bf16's (the same tensor-core peak on the GPUs memwall targets:
    /// H100 SXM, 989 TFLOP/s dense for both, NVIDIA's H100 datasheet).
    pub fn get(&self, backend: BackendKind, precision: Precision) -> Option<f64> {
        self.by.get(&key(backend, precision)).copied().or_else(|| {
            (precision == Precision::F16)
                .then(|| self.by.get(&key(backend, Precision::Bf16)).copied())
                .flatten()
        })
    }
}

fn key(b: BackendKind, p: Precision) -> (String, String) {
    (b.as_str().to_string(), p.as_str().to_string())
}

/// The expected seconds of `job`: from `own` (its last record, when finished) or from `rates`.
pub fn estimate(job: &JobSpec, own: Option<&JobRecord>, rates: &Rates) -> TimeEstimate {
    let startup = lookup(&STARTUP_S, job.backend);
    if let Some(s) = own.and_then(|r| r.summary.as_ref()) {
        if s.wall_s.is_finite() && s.wall_s > 0.0 {
            return TimeEstimate {
                seconds: startup + s.wall_s,
                basis: Basis::Record,
                cold_start_s: 0.0,
            };
        }
    }
    let (rate, basis) = match rates.get(job.backend, job.strategy.precision) {
        Some(r) => (r, Basis::MeasuredRate),
        None => (lookup(&DEFAULT_FLOPS, job.backend), Basis::DefaultRate),
    };
    let m = &job.model;
    let tokens = (m.batch * m.seq_len) as f64;
    let s = &job.strategy;
    let recompute = s.recompute.recomputes();
    let step_s =
        m.train_flops_per_token() * tokens / rate * if recompute { 4.0 / 3.0 } else { 1.0 };
    let t = &job.train;
    let steps = (t.warmup_steps + 1 + t.steps) as f64 + t.eval_batches as f64 / 3.0;
    let profile_pass = if s.needs_profile() && job.plan.is_none() {
        startup + PROFILE_PASS_STEPS * step_s
    } else {
        0.0
    };
    TimeEstimate {
        seconds: startup + steps * step_s + profile_pass,
        basis,
        cold_start_s: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs() -> Vec<JobSpec> {
        crate::test_support::peak_memory_full().1
    }

    #[test]
    fn an_estimate_scales_with_the_flops_and_prefers_the_job_s_own_record() {
        let jobs = jobs();
        let control = jobs.iter().find(|j| j.config == "control").unwrap();
        let ckpt = jobs.iter().find(|j| j.config == "checkpoint").unwrap();
        let none = Rates::default();
        let a = estimate(control, None, &none);
        let b = estimate(ckpt, None, &none);
        assert_eq!(a.basis, Basis::DefaultRate);
        // Checkpointing adds one forward: 4/3 of the steps' time, same start-up.
        let startup = lookup(&STARTUP_S, BackendKind::Cuda);
        let ratio = (b.seconds - startup) / (a.seconds - startup);
        assert!((ratio - 4.0 / 3.0).abs() < 1e-9, "{ratio}");
        // 1.6e9 parameters, 3072 tokens a step (about 1.5 s at 20 TFLOP/s), 3 warm-up + 1
        // memory + 5 timed steps + 4 eval batches at a third: about 15.5 s, plus 5 s start-up.
        assert!(a.seconds > 15.0 && a.seconds < 30.0, "{}", a.seconds);
    }
}
