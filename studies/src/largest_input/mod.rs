//! The largest input that fits: for a memory limit, the largest batch and the largest sequence
//! length that train under each configuration (strategy) of a training study, found by
//! bisection over real training jobs, out-of-memory as data.
//!
//! A study asks for the search with `[params.search]` (overridable per profile as
//! `[profiles.<p>.params.search]`): the limit in bytes, the model fields searched (`batch`,
//! `seq_len`), the upper end and the step of each. Every probe is one job of the study's
//! configuration with the searched field set and [`JobSpec::memory_limit_bytes`] the limit:
//! on the CPU the counting allocator refuses a block past it and the job ends `out_of_memory`
//! exactly as on a device of that size. Probes run through the driver like any job, one process
//! each and keyed by their content, so a killed search resumes where it stopped: its finished
//! probes are read back, not run again, and the bisection takes the same path.
//!
//! The search ([`search`]) doubles from the profile's value until a probe runs out of memory
//! (or the upper end fits), then bisects between the largest value that fitted and the
//! smallest that did not, in steps of `step`, until they are one step apart: the boundary is
//! exact to one step. The report ([`summarize`], [`section`]) reads the records only.
//!
//! The question is the Checkmate notes' "Enables 5.1x larger input sizes on real networks"
//! (`../shared/sources/001_68b9d43f3f694e7a.txt`); the paper (Jain et al., MLSys 2020,
//! arXiv:1910.02653, Section 6.3) searches the largest batch under a V100's 16 GB on graphs,
//! memwall in real training.

use crate::record::{JobRecord, JobStatus};
use crate::spec::{ConfigSpec, JobSpec, Recompute, Study};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};

mod report;
pub use report::{
    bytes_per_unit, environment, glance, measure, ratio, ratio_at_any_limit, section,
};

/// The key of the search's table in a study's `[params]`.
pub const PARAMS_KEY: &str = "search";

/// A model field the search varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dim {
    /// Sequences per batch (`model.batch`).
    Batch,
    /// Tokens per sequence (`model.seq_len`).
    SeqLen,
}

impl Dim {
    /// The model field's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dim::Batch => "batch",
            Dim::SeqLen => "seq_len",
        }
    }

    /// The field's value in `model`.
    pub fn of(self, model: &crate::spec::ModelConfig) -> usize {
        match self {
            Dim::Batch => model.batch,
            Dim::SeqLen => model.seq_len,
        }
    }

    /// `model` with the field set to `v`.
    fn set(self, model: &mut crate::spec::ModelConfig, v: usize) {
        match self {
            Dim::Batch => model.batch = v,
            Dim::SeqLen => model.seq_len = v,
        }
    }

    /// The other field (held at the profile's value while this one is searched).
    fn other(self) -> Dim {
        match self {
            Dim::Batch => Dim::SeqLen,
            Dim::SeqLen => Dim::Batch,
        }
    }

    /// How the report names the field.
    /// One unit of the field: a `sample` (batch) or a `sequence position` (sequence length:
    /// one token in each of the batch's sequences).
    fn unit(self) -> &'static str {
        match self {
            Dim::Batch => "sample",
            Dim::SeqLen => "sequence position",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Dim::Batch => "batch size",
            Dim::SeqLen => "sequence length",
        }
    }
}

/// `[params.search]`: what the search runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// The memory limit, bytes: on the CPU the process's live heap (the counting allocator's
    /// limit); at least 1 MiB.
    pub limit_bytes: u64,
    /// The fields searched, each from the profile's value, the other held at the profile's.
    pub dims: Vec<Dim>,
    /// Upper end of the batch search (sequences).
    pub batch_max: usize,
    /// Upper end of the sequence-length search (tokens); the corpus bounds it too (a window is
    /// `seq_len + 1` tokens of the held-out split).
    pub seq_len_max: usize,
    /// Granularity of the batch search (default 1).
    #[serde(default = "one")]
    pub batch_step: usize,
    /// Granularity of the sequence-length search (default 16 tokens).
    #[serde(default = "sixteen")]
    pub seq_len_step: usize,
    /// Runs in all of each boundary value whose probe came within [`near_margin`] of the limit
    /// (default 3; 1: no reruns): the largest value that fitted and the smallest that did not.
    /// A value whose runs disagree is *at the limit* ([`Row::at_limit`]); the largest value is
    /// then the largest that fits in every run (the search steps down to find it).
    #[serde(default = "three")]
    pub boundary_runs: usize,
}

fn one() -> usize {
    1
}

fn three() -> usize {
    3
}

/// How close to the limit a boundary probe must come to be rerun
/// ([`SearchParams::boundary_runs`]), as a fraction of `limit` bytes: twice the exact tolerance
/// of a peak under it (`2 * max(0.1%, 64 KiB / limit)`, [`memwall_core::measure::peak_spread`]
/// of no runs), 1.0% of the smoke profile's 12 MiB, 0.2% of the cpu profile's 128 MiB. A fit
/// whose peak is that close under the limit, or an out-of-memory whose lower bound of the bytes
/// it needed (live bytes and the refused block) is that close over it (or unknown), may end
/// otherwise in another run; the largest run-to-run spread of a peak seen (34,816 bytes of a
/// 12 MiB smoke job on a loaded 2-core machine, issue 56) is under half of it.
pub fn near_margin(limit: u64) -> f64 {
    2.0 * memwall_core::measure::peak_spread(&[], limit)
}

/// How many steps below a largest fit whose reruns did not all fit the search walks down
/// looking for one that fits in every run, before it stops with what it has.
pub const MAX_STEPS_DOWN: usize = 3;

fn sixteen() -> usize {
    16
}

impl SearchParams {
    /// Upper end and step of `dim`.
    pub fn range(&self, dim: Dim) -> (usize, usize) {
        match dim {
            Dim::Batch => (self.batch_max, self.batch_step),
            Dim::SeqLen => (self.seq_len_max, self.seq_len_step),
        }
    }
}

/// The study's `[params.search]`, checked; `None` when it asks for no search.
///
/// # Errors
/// [`Error::SpecField`] naming `params.search` or its field: unknown fields, wrong types, a
/// limit under 1 MiB, no or repeated fields searched, a step of 0, an upper end below the
/// step or below the profile's own value, a study that is not a training study.
pub fn params(study: &Study) -> Result<Option<SearchParams>> {
    let Some(value) = study.params.get(PARAMS_KEY) else {
        return Ok(None);
    };
    let err = |field: &str, message: String| Error::SpecField {
        path: study.path.clone(),
        field: format!("params.{PARAMS_KEY}{field}"),
        message,
    };
    let p: SearchParams = value.clone().try_into().map_err(|e: toml::de::Error| {
        err(
            "",
            format!(
                "{} (expected limit_bytes, dims, batch_max, seq_len_max and optionally \
                 batch_step, seq_len_step)",
                e.message()
            ),
        )
    })?;
    let Some(model) = study.model else {
        return Err(err(
            "",
            "the largest-input search trains the study's model: only a training study \
             (`kind = \"training\"`) can have one"
                .into(),
        ));
    };
    if p.limit_bytes < 1 << 20 {
        return Err(err(
            ".limit_bytes",
            format!(
                "{} bytes: expected at least 1 MiB (1048576); the limit counts the whole \
                 process's heap (model, optimizer state, corpus)",
                p.limit_bytes
            ),
        ));
    }
    let mut dims = p.dims.clone();
    dims.sort();
    dims.dedup();
    if dims.is_empty() || dims.len() != p.dims.len() {
        return Err(err(
            ".dims",
            "expected one or both of \"batch\" and \"seq_len\", each once".into(),
        ));
    }
    for &d in &p.dims {
        let (max, step) = p.range(d);
        let f = d.as_str();
        if step == 0 {
            return Err(err(&format!(".{f}_step"), "must be at least 1".into()));
        }
        if max < step || max < d.of(&model) {
            return Err(err(
                &format!(".{f}_max"),
                format!(
                    "{max}: expected at least the step ({step}) and the profile's own {f} ({})",
                    d.of(&model)
                ),
            ));
        }
    }
    if !(1..=10).contains(&p.boundary_runs) {
        return Err(err(
            ".boundary_runs",
            format!(
                "{}: expected 1 to 10 runs of each boundary value near the limit (1: no reruns)",
                p.boundary_runs
            ),
        ));
    }
    Ok(Some(p))
}

/// How one probe ended, for the search.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// The job trained under the limit.
    Fits,
    /// The job ran out of memory (or no plan fits): the value is past the limit.
    OutOfMemory,
    /// The job failed otherwise (the search of this field stops): why.
    Failed(String),
}

impl Probe {
    /// The probe outcome of a job record: ok fits; out of memory or infeasible does not; any
    /// other status stops the search.
    pub fn of(record: &JobRecord) -> Probe {
        match record.status {
            JobStatus::Ok => Probe::Fits,
            JobStatus::OutOfMemory | JobStatus::Infeasible => Probe::OutOfMemory,
            other => Probe::Failed(format!(
                "{}: {}",
                other.as_str(),
                record.reason.as_deref().unwrap_or("no reason recorded")
            )),
        }
    }
}

/// Where one search ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Bracket {
    /// The largest value that fitted (`None`: not even one step).
    pub largest_fit: Option<usize>,
    /// The smallest value that ran out of memory (`None`: the upper end fits).
    pub first_oom: Option<usize>,
    /// Why the search stopped early: a probe that failed (value and reason).
    pub failed: Option<(usize, String)>,
    /// Values probed, in order.
    pub probed: Vec<usize>,
}

/// Searches the largest multiple of `step` in `[step, max]` for which `probe` fits, starting
/// at `start` (rounded down to a multiple of `step`, at least `step`): doubling up while it
/// fits, halving down while it does not, then bisection until the largest fitting value and
/// the smallest failing one are one `step` apart. Assumes fitting is monotone (a larger input
/// needs more memory). A failed probe ends the search with what was found so far.
///
/// # Errors
/// The first error of `probe` (an I/O or runner error: the search is left where it was; the
/// probes done are records, so running it again resumes).
pub fn search(
    start: usize,
    max: usize,
    step: usize,
    mut probe: impl FnMut(usize) -> Result<Probe>,
) -> Result<Bracket> {
    search_guided(start, max, step, None, |v| Ok((probe(v)?, None)))
}

/// [`search`] guided by the peaks of the probes that fitted: `probe` returns the outcome and,
/// for a fit, its peak allocated bytes. With a `limit` in bytes and two fits measured, the next
/// value probed is the largest multiple of `step` at which the line through the two largest
/// fits reaches the limit (linear interpolation, as a secant search: a peak made of parameters,
/// optimizer state and activations is affine in the batch), kept inside the bracket and at most
/// twice the largest fit; once the bracket is known, a prediction that fits is checked a step
/// above it and one that does not a step below, so an exact model ends the search in two
/// probes after the first two fits (bisection takes about log2 of the bracket). A probe whose
/// outcome the line mispredicted makes the next probe a plain bisection or doubling one, so
/// a wrong model (a convex peak, a plan that fills the limit at every size) costs at most
/// about twice bisection's probes. The result is the same as [`search`]'s: the two values one
/// `step` apart, each established by its own probe. `None` (or no peaks) is [`search`].
///
/// # Errors
/// As [`search`].
pub fn search_guided(
    start: usize,
    max: usize,
    step: usize,
    limit: Option<u64>,
    mut probe: impl FnMut(usize) -> Result<(Probe, Option<u64>)>,
) -> Result<Bracket> {
    let step = step.max(1);
    let max = (max / step * step).max(step);
    let mut out = Bracket {
        largest_fit: None,
        first_oom: None,
        failed: None,
        probed: Vec::new(),
    };
    // Bracket: good < bad, multiples of step (None: no fit, or no out of memory, yet).
    let (mut good, mut bad): (Option<usize>, Option<usize>) = (None, None);
    let mut fits: Vec<(usize, u64)> = Vec::new();
    let mut v = (start / step * step).clamp(step, max);
    // The last probe's predicted outcome, when the line chose it.
    let mut expected: Option<bool> = None;
    loop {
        out.probed.push(v);
        let fitted = match probe(v)? {
            (Probe::Fits, peak) => {
                if let Some(p) = peak {
                    fits.push((v, p));
                }
                true
            }
            (Probe::OutOfMemory, _) => false,
            (Probe::Failed(why), _) => {
                out.failed = Some((v, why));
                break;
            }
        };
        if fitted {
            good = Some(v);
        } else {
            bad = Some(v);
        }
        let trust = expected.is_none_or(|e| e == fitted);
        expected = None;
        let Some(g) = good else {
            // Nothing fits yet: halve.
            let b = v;
            if b <= step {
                break;
            }
            v = (b / 2 / step * step).max(step);
            continue;
        };
        if g >= max || bad.is_some_and(|b| b - g <= step) {
            break;
        }
        let upper = bad.map_or((g * 2).min(max), |b| b - step);
        let plain = match bad {
            None => upper,
            Some(b) => g + (b - g) / step / 2 * step,
        };
        let line = if trust {
            limit.and_then(|l| predicted_largest(&fits, l, step))
        } else {
            None
        };
        v = match line {
            Some(p) => {
                let c = p.clamp(g + step, upper);
                expected = Some(p >= c);
                c
            }
            None => plain,
        };
    }
    out.largest_fit = good;
    out.first_oom = bad;
    Ok(out)
}

/// The largest multiple of `step` whose peak, on the line through the two largest values of
/// `fits` (value, peak bytes), is at most `limit` bytes; `None` with fewer than two values or a
/// line that does not rise.
fn predicted_largest(fits: &[(usize, u64)], limit: u64, step: usize) -> Option<usize> {
    let mut pts: Vec<(usize, u64)> = fits.to_vec();
    pts.sort_unstable();
    pts.dedup_by_key(|p| p.0);
    let [.., (v1, p1), (v2, p2)] = pts[..] else {
        return None;
    };
    let slope = (p2 as f64 - p1 as f64) / (v2 - v1) as f64;
    if slope <= 0.0 {
        return None;
    }
    let at = v2 as f64 + (limit as f64 - p2 as f64) / slope;
    Some(if at < step as f64 {
        0
    } else {
        (at / step as f64).floor() as usize * step
    })
}

/// The probe job of `job` (a configuration of the study at its profile): `dim` set to `v`,
/// the memory limit `limit_bytes`.
pub fn probe_job(job: &JobSpec, dim: Dim, v: usize, limit_bytes: u64) -> JobSpec {
    let mut j = job.clone();
    dim.set(&mut j.model, v);
    j.memory_limit_bytes = Some(limit_bytes);
    j
}

/// Whether a probe's record came within [`near_margin`] of `limit` bytes (see there), so that
/// another run of it may end otherwise. A plan that no limit admits (`infeasible`) is decided
/// by the planner, not by chance, and is not near.
pub fn near_limit(record: &JobRecord, limit: u64) -> bool {
    let l = limit as f64;
    let near = near_margin(limit);
    match record.status {
        JobStatus::Ok => record
            .summary
            .is_none_or(|s| s.peak_allocated_bytes as f64 >= l * (1.0 - near)),
        JobStatus::OutOfMemory => record
            .out_of_memory
            .as_ref()
            .and_then(|o| o.needed_at_least_bytes())
            .is_none_or(|n| n as f64 <= l * (1.0 + near)),
        _ => false,
    }
}

/// Reruns the boundary of a finished bisection `b` ([`SearchParams::boundary_runs`] runs in
/// all of a value whose probe was [`near_limit`]): the smallest value out of memory, then the
/// largest that fitted; while that one does not fit in every run, the value a step below it,
/// at most [`MAX_STEPS_DOWN`] steps. `run(v, repeat)` runs (or reads back) run `repeat` of
/// value `v`. Returns the values that ended otherwise in some run than in another.
///
/// # Errors
/// The first error of `run`.
fn rerun_boundary(
    b: &Bracket,
    runs: usize,
    step: usize,
    limit: u64,
    mut run: impl FnMut(usize, usize) -> Result<JobRecord>,
) -> Result<Vec<usize>> {
    let mut unsteady = Vec::new();
    if runs <= 1 || b.failed.is_some() {
        return Ok(unsteady);
    }
    // Every run of `v` when its first came near the limit: (fits in every run, some run fit
    // and some did not, a probe failed).
    let mut all_runs = |v: usize| -> Result<(bool, bool, bool)> {
        let first = run(v, 0)?;
        let mut outcomes = vec![Probe::of(&first)];
        if near_limit(&first, limit) {
            for r in 1..runs {
                outcomes.push(Probe::of(&run(v, r)?));
            }
        }
        let fits = outcomes.iter().filter(|p| **p == Probe::Fits).count();
        let failed = outcomes.iter().any(|p| matches!(p, Probe::Failed(_)));
        let ooms = outcomes
            .iter()
            .filter(|p| **p == Probe::OutOfMemory)
            .count();
        Ok((fits == outcomes.len(), fits > 0 && ooms > 0, failed))
    };
    if let Some(bad) = b.first_oom {
        let (_, mixed, failed) = all_runs(bad)?;
        if mixed {
            unsteady.push(bad);
        }
        if failed {
            return Ok(unsteady);
        }
    }
    let mut v = b.largest_fit;
    let mut steps_down = 0;
    while let Some(good) = v {
        let (every, mixed, failed) = all_runs(good)?;
        if mixed {
            unsteady.push(good);
        }
        if every || failed || good <= step || steps_down == MAX_STEPS_DOWN {
            break;
        }
        steps_down += 1;
        v = Some(good - step);
    }
    Ok(unsteady)
}

/// The largest sequence length the corpus of `job` allows: every window is `seq_len + 1`
/// tokens of one split (the smaller of the two), so `tokens - 1`.
///
/// # Errors
/// [`Error::Io`] when a split's token file cannot be read.
pub fn corpus_seq_bound(job: &JobSpec) -> Result<usize> {
    let mut least = u64::MAX;
    for split in ["train", "eval"] {
        let file = job.data.dir.join(format!("{split}.tokens"));
        let tokens = std::fs::metadata(&file)
            .map_err(|e| Error::io("reading", &file, e))?
            .len()
            / 4;
        least = least.min(tokens);
    }
    Ok(least.saturating_sub(1) as usize)
}

/// Runs the search of every job (configuration) of `jobs` and every field of `params`, each
/// probe through `run` (the driver's one-job runner, which reads back a finished probe's
/// record instead of running it again). Returns per (configuration, field) where it ended.
///
/// # Errors
/// The first error of `run` (I/O, a runner that cannot start); a failed probe is not one.
pub fn run_search(
    params: &SearchParams,
    jobs: &[JobSpec],
    mut run: impl FnMut(&JobSpec) -> Result<JobRecord>,
) -> Result<Vec<(String, Dim, Bracket)>> {
    let mut out = Vec::new();
    for job in jobs {
        for &dim in &params.dims {
            let (mut max, step) = params.range(dim);
            if dim == Dim::SeqLen {
                max = max.min(corpus_seq_bound(job)?);
            }
            // A Checkmate plan at the limit fills what the limit leaves at every size, so its
            // peaks say nothing of the next size: its search is plain bisection.
            let guide = (!matches!(job.strategy.recompute, Recompute::Checkmate(_)))
                .then_some(params.limit_bytes);
            let bracket = search_guided(dim.of(&job.model), max, step, guide, |v| {
                let record = run(&probe_job(job, dim, v, params.limit_bytes))?;
                let peak = record.summary.as_ref().map(|s| s.peak_allocated_bytes);
                Ok((Probe::of(&record), peak))
            })?;
            let unsteady = rerun_boundary(
                &bracket,
                params.boundary_runs,
                step,
                params.limit_bytes,
                |v, repeat| {
                    let mut j = probe_job(job, dim, v, params.limit_bytes);
                    j.repeat = repeat;
                    run(&j)
                },
            )?;
            tracing::info!(
                "{}: largest {} under {} bytes: {} (first out of memory: {}; {} probes{})",
                job.config,
                dim.as_str(),
                params.limit_bytes,
                bracket.largest_fit.map_or("none".into(), |v| v.to_string()),
                bracket.first_oom.map_or("none".into(), |v| v.to_string()),
                bracket.probed.len(),
                if unsteady.is_empty() {
                    String::new()
                } else {
                    format!("; at the limit, fitting in some runs only: {unsteady:?}")
                }
            );
            out.push((job.config.clone(), dim, bracket));
        }
    }
    Ok(out)
}

/// One (configuration, field) of the search as its records give it.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    /// The configuration.
    pub config: &'a ConfigSpec,
    /// The field searched.
    pub dim: Dim,
    /// The largest value that trained under the limit in every run of it, with its latest
    /// record.
    pub largest: Option<(usize, &'a JobRecord)>,
    /// The smallest value above it that ran out of memory in every run of it.
    pub first_oom: Option<usize>,
    /// A probe that failed otherwise: its value and status.
    pub failed: Option<(usize, &'a JobRecord)>,
    /// Probes of this configuration and field (every run of every value).
    pub probes: usize,
    /// The values *at the limit*, smallest first: those that fitted in some runs and not in
    /// others, and the largest value when its peak lies within its runs' spread of the limit
    /// ([`memwall_core::measure::at_limit`], the nightly's rule).
    pub at_limit: Vec<AtLimit>,
    /// Boundary values close enough to the limit for [`SearchParams::boundary_runs`] runs (or
    /// of unknown distance: an out-of-memory recorded without its live bytes) that ran fewer
    /// times, with how many: value, runs. Their fitting or not is one run's.
    pub runs_short: Vec<(usize, usize)>,
}

/// A value of the search at the limit: the same job fits or not by chance.
#[derive(Debug, Clone, PartialEq)]
pub struct AtLimit {
    /// The searched field's value.
    pub value: usize,
    /// Runs of it that fitted.
    pub fits: usize,
    /// Runs of it.
    pub runs: usize,
    /// The largest peak allocated of the runs that fitted, bytes (`None`: none fitted).
    pub peak_bytes: Option<u64>,
    /// The limit, bytes.
    pub limit_bytes: u64,
}

impl AtLimit {
    /// In words: "50: fits in 2 of 3 runs, peak 11.64 MiB of the 12.00 MiB limit".
    pub fn describe(&self) -> String {
        let mib = |b: u64| format!("{:.2}", b as f64 / (1u64 << 20) as f64);
        let fits = if self.fits == self.runs {
            format!("fits in every run ({})", self.runs)
        } else {
            format!("fits in {} of {} runs", self.fits, self.runs)
        };
        match self.peak_bytes {
            Some(p) => format!(
                "{}: {fits}, peak {} MiB of the {} MiB limit",
                self.value,
                mib(p),
                mib(self.limit_bytes)
            ),
            None => format!("{}: {fits}", self.value),
        }
    }
}

/// The boundary as every run of every probed value gives it: `runs` are (value, record), any
/// order. Returns the largest value that fitted in every run of it (with its latest record),
/// the smallest value above it that ran out of memory in every run, and the values at the
/// limit ([`Row::at_limit`]).
pub fn boundary<'a>(
    runs: &[(usize, &'a JobRecord)],
    limit: u64,
) -> (Option<(usize, &'a JobRecord)>, Option<usize>, Vec<AtLimit>) {
    let mut values: Vec<usize> = runs.iter().map(|(v, _)| *v).collect();
    values.sort_unstable();
    values.dedup();
    let of = |v: usize| -> Vec<&'a JobRecord> {
        runs.iter()
            .filter(|(x, _)| *x == v)
            .map(|(_, r)| *r)
            .collect()
    };
    let peaks = |recs: &[&JobRecord]| -> Vec<f64> {
        recs.iter()
            .filter_map(|r| (r.status == JobStatus::Ok).then_some(r.summary?))
            .map(|s| s.peak_allocated_bytes as f64)
            .collect()
    };
    let mut largest = None;
    let mut at_limit = Vec::new();
    for &v in &values {
        let recs = of(v);
        let fits = recs.iter().filter(|r| Probe::of(r) == Probe::Fits).count();
        let ooms = recs
            .iter()
            .filter(|r| Probe::of(r) == Probe::OutOfMemory)
            .count();
        let p = peaks(&recs);
        let entry = AtLimit {
            value: v,
            fits,
            runs: recs.len(),
            peak_bytes: p.iter().copied().reduce(f64::max).map(|x| x as u64),
            limit_bytes: limit,
        };
        if fits > 0 && ooms > 0 {
            at_limit.push(entry);
        } else if fits == recs.len() {
            let latest = recs.iter().max_by(|a, b| a.finished_at.cmp(&b.finished_at));
            largest = latest.map(|r| (v, *r));
            at_limit.retain(|a| a.value < v);
            if memwall_core::measure::at_limit(&p, limit) {
                at_limit.push(entry);
            }
        }
    }
    let above = largest.map_or(0, |(v, _)| v);
    at_limit.retain(|a| a.value >= above);
    let first_oom = values
        .iter()
        .copied()
        .find(|&v| v > above && of(v).iter().all(|r| Probe::of(r) == Probe::OutOfMemory));
    (largest, first_oom, at_limit)
}

/// The search as `records` give it, for `study` (resolved at the profile of the records read)
/// and `params`: per configuration of the file and field, the probes of that profile, limit
/// and model (the other field at the profile's value).
pub fn summarize<'a>(
    records: &'a [JobRecord],
    study: &'a Study,
    params: &SearchParams,
) -> Vec<Row<'a>> {
    let Some(model) = study.model else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for config in &study.configs {
        for &dim in &params.dims {
            let probes: Vec<&JobRecord> = records
                .iter()
                .filter(|r| {
                    let m = &r.spec.model;
                    r.spec.config == config.name
                        && r.spec.profile == study.profile
                        && r.spec.memory_limit_bytes == Some(params.limit_bytes)
                        && dim.other().of(m) == dim.other().of(&model)
                        && (m.layers, m.d_model, m.heads, m.d_ff)
                            == (model.layers, model.d_model, model.heads, model.d_ff)
                })
                .collect();
            let runs: Vec<(usize, &JobRecord)> = probes
                .iter()
                .filter(|r| !matches!(Probe::of(r), Probe::Failed(_)))
                .map(|r| (dim.of(&r.spec.model), *r))
                .collect();
            let (largest, first_oom, at_limit) = boundary(&runs, params.limit_bytes);
            // The boundary values the rule would rerun that ran fewer times (records made
            // before the rule, or a search stopped halfway through its reruns).
            let runs_short: Vec<(usize, usize)> = [largest.map(|(v, _)| v), first_oom]
                .into_iter()
                .flatten()
                .filter_map(|v| {
                    let of: Vec<&JobRecord> = runs
                        .iter()
                        .filter(|(x, _)| *x == v)
                        .map(|(_, r)| *r)
                        .collect();
                    let near = of.iter().any(|r| near_limit(r, params.limit_bytes));
                    (near && of.len() < params.boundary_runs).then_some((v, of.len()))
                })
                .collect();
            let failed = probes
                .iter()
                .find(|r| matches!(Probe::of(r), Probe::Failed(_)))
                .map(|r| (dim.of(&r.spec.model), *r));
            rows.push(Row {
                config,
                dim,
                largest,
                first_oom,
                failed,
                probes: probes.len(),
                at_limit,
                runs_short,
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A monotone memory model: `v` fits when `v <= boundary`.
    fn model(boundary: usize) -> impl FnMut(usize) -> Result<Probe> {
        move |v| {
            Ok(if v <= boundary {
                Probe::Fits
            } else {
                Probe::OutOfMemory
            })
        }
    }

    /// From any start, the search ends one step apart around the boundary, in few probes.
    #[test]
    fn the_search_ends_at_the_boundary_within_one_step() {
        for (start, max, step, boundary) in [
            (8, 256, 1, 37),
            (8, 256, 1, 3),
            (8, 256, 1, 8),
            (128, 4096, 16, 1000),
            (128, 4096, 16, 100),
            (1, 1000, 1, 999),
        ] {
            let b = search(start, max, step, model(boundary)).unwrap();
            let good = b.largest_fit.unwrap();
            let bad = b.first_oom.unwrap();
            assert!(
                good <= boundary && bad > boundary,
                "{start} {boundary}: {b:?}"
            );
            assert_eq!(bad - good, step, "{start} {boundary}: {b:?}");
            assert!(
                b.probed.len() <= 2 * (max / step).ilog2() as usize + 2,
                "{b:?}"
            );
            assert!(b.probed.iter().all(|v| v % step == 0 && *v <= max));
        }
    }

    /// A peak model in bytes: `fixed + per * v (+ convex * v^2)`, fitting under `limit`.
    fn peaks(
        fixed: f64,
        per: f64,
        convex: f64,
        limit: u64,
    ) -> impl FnMut(usize) -> Result<(Probe, Option<u64>)> {
        move |v| {
            let x = v as f64;
            let peak = (fixed + per * x + convex * x * x) as u64;
            Ok(if peak <= limit {
                (Probe::Fits, Some(peak))
            } else {
                (Probe::OutOfMemory, None)
            })
        }
    }

    /// The guided search ends where bisection does, one step apart around the boundary; with
    /// an affine peak it needs two probes after the first two fits (bisection: about log2 of
    /// the bracket), and with a convex peak, or one that says nothing (a plan filling the
    /// limit at every size), no more than twice bisection's probes.
    #[test]
    fn the_guided_search_ends_where_bisection_does_in_fewer_probes() {
        let limit = 128u64 << 20;
        // Affine: 10 MiB + 3.7 MiB per sample: the largest fit is 31.
        let affine = |v| peaks(10.0 * 1048576.0, 3.7 * 1048576.0, 0.0, limit)(v);
        let plain = search(8, 512, 1, |v| Ok(affine(v)?.0)).unwrap();
        let guided = search_guided(8, 512, 1, Some(limit), affine).unwrap();
        assert_eq!((plain.largest_fit, plain.first_oom), (Some(31), Some(32)));
        assert_eq!((guided.largest_fit, guided.first_oom), (Some(31), Some(32)));
        assert_eq!(guided.probed, vec![8, 16, 31, 32], "{guided:?}");
        assert!(plain.probed.len() >= 6, "{plain:?}");
        // Without a limit the guided search is bisection, probe for probe.
        let unguided = search_guided(8, 512, 1, None, affine).unwrap();
        assert_eq!(unguided, plain);
        for (start, max, step, fixed, per, convex) in [
            (128, 4096, 32, 20e6, 150e3, 60.0),
            (128, 4096, 32, 20e6, 10e3, 400.0),
            (8, 512, 1, 120e6, 1.0, 0.0),
            (8, 512, 1, 0.0, 130e6, 0.0),
            (8, 512, 1, 100e6, 0.0, 9000.0),
            (8, 64, 1, 1e6, 1e3, 0.0),
        ] {
            let m = |v| peaks(fixed, per, convex, limit)(v);
            let plain = search(start, max, step, |v| Ok(m(v)?.0)).unwrap();
            let guided = search_guided(start, max, step, Some(limit), m).unwrap();
            assert_eq!(
                (guided.largest_fit, guided.first_oom),
                (plain.largest_fit, plain.first_oom),
                "{fixed} {per} {convex}: {guided:?} against {plain:?}"
            );
            assert!(
                guided.probed.len() <= 2 * plain.probed.len(),
                "{guided:?} against {plain:?}"
            );
            assert!(guided.probed.iter().all(|v| v % step == 0 && *v <= max));
        }
        // A line that does not rise guides nothing.
        assert_eq!(predicted_largest(&[(8, 100), (16, 100)], 200, 1), None);
        assert_eq!(predicted_largest(&[(8, 100)], 200, 1), None);
        assert_eq!(predicted_largest(&[(8, 100), (16, 200)], 250, 1), Some(20));
        assert_eq!(
            predicted_largest(&[(128, 100), (256, 200)], 330, 32),
            Some(416)
        );
    }

    /// A record of one probe: fits at `peak` bytes, or out of memory (`peak` None); the
    /// committed record of a finished cpu probe is the template.
    fn probe_record(v: usize, repeat: usize, peak: Option<u64>) -> JobRecord {
        let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../runs/largest_input/00abcd026606e5c0");
        let mut r = crate::record::read_record(&template)
            .unwrap()
            .expect("a committed largest_input record");
        r.spec.model.batch = v;
        r.spec.repeat = repeat;
        r.finished_at = format!("2026-01-01T00:00:{repeat:02}Z");
        match peak {
            Some(p) => {
                r.status = JobStatus::Ok;
                let s = r.summary.as_mut().expect("the template finished");
                s.peak_allocated_bytes = p;
            }
            None => {
                r.status = JobStatus::OutOfMemory;
                r.summary = None;
            }
        }
        r
    }

    /// The boundary from every run: a value that fits in some runs only is at the limit and
    /// not the largest; the largest fits in every run; a peak within 0.1% of the limit is at
    /// the limit though it fits every time.
    #[test]
    fn a_value_that_fits_in_some_runs_only_is_at_the_limit() {
        let limit = 12 << 20;
        let recs = [
            probe_record(40, 0, Some(11 << 20)),
            probe_record(48, 0, Some(12_000_000)),
            probe_record(50, 0, Some(12_200_000)),
            probe_record(50, 1, None),
            probe_record(50, 2, Some(12_100_000)),
            probe_record(51, 0, None),
            probe_record(51, 1, None),
        ];
        let runs: Vec<(usize, &JobRecord)> = recs.iter().map(|r| (r.spec.model.batch, r)).collect();
        let (largest, first_oom, at) = boundary(&runs, limit);
        assert_eq!(largest.map(|(v, _)| v), Some(48));
        assert_eq!(first_oom, Some(51));
        assert_eq!(at.len(), 1, "{at:?}");
        assert_eq!((at[0].value, at[0].fits, at[0].runs), (50, 2, 3));
        assert_eq!(at[0].peak_bytes, Some(12_200_000));
        assert!(
            at[0].describe().contains("fits in 2 of 3 runs"),
            "{}",
            at[0].describe()
        );
        // The largest fit 0.05% under the limit, in every run: at the limit too.
        let close = [
            probe_record(30, 0, Some(limit - 6000)),
            probe_record(30, 1, Some(limit - 6100)),
            probe_record(31, 0, None),
        ];
        let runs: Vec<(usize, &JobRecord)> =
            close.iter().map(|r| (r.spec.model.batch, r)).collect();
        let (largest, first_oom, at) = boundary(&runs, limit);
        assert_eq!((largest.map(|(v, _)| v), first_oom), (Some(30), Some(31)));
        assert_eq!((at.len(), at[0].value, at[0].fits), (1, 30, 2));
        // Far from the limit: a clean boundary.
        let far = [probe_record(8, 0, Some(6 << 20)), probe_record(9, 0, None)];
        let runs: Vec<(usize, &JobRecord)> = far.iter().map(|r| (r.spec.model.batch, r)).collect();
        assert!(boundary(&runs, limit).2.is_empty());
    }

    /// Past either end: nothing fits (the first step runs out of memory), or the upper end fits.
    #[test]
    fn the_ends_are_reported_as_such() {
        let none = search(8, 64, 1, model(0)).unwrap();
        assert_eq!((none.largest_fit, none.first_oom), (None, Some(1)));
        let all = search(8, 64, 1, model(1000)).unwrap();
        assert_eq!((all.largest_fit, all.first_oom), (Some(64), None));
    }

    /// A failed probe stops the search with what it found, the failure named.
    #[test]
    fn a_failed_probe_stops_the_search() {
        let b = search(4, 64, 1, |v| {
            Ok(if v < 16 {
                Probe::Fits
            } else {
                Probe::Failed("failed: boom".into())
            })
        })
        .unwrap();
        assert_eq!(b.largest_fit, Some(8));
        assert_eq!(b.failed, Some((16, "failed: boom".into())));
    }

    /// A search killed after some probes, run again over the probes it finished (the record
    /// store), asks only for the probes it had not finished and ends where an unbroken search
    /// ends.
    #[test]
    fn a_killed_search_resumes_without_repeating_finished_probes() {
        let whole = search(8, 256, 1, model(45)).unwrap();
        let mut store = std::collections::BTreeMap::new();
        let mut calls = 0;
        let killed = search(8, 256, 1, |v| {
            calls += 1;
            if calls > 3 {
                return Err(Error::Job {
                    job: "probe".into(),
                    message: "killed".into(),
                });
            }
            let p = model(45)(v)?;
            store.insert(v, p.clone());
            Ok(p)
        });
        assert!(killed.is_err());
        let mut ran = Vec::new();
        let resumed = search(8, 256, 1, |v| {
            if let Some(p) = store.get(&v) {
                return Ok(p.clone());
            }
            ran.push(v);
            model(45)(v)
        })
        .unwrap();
        assert_eq!(resumed, whole);
        assert_eq!(ran.len(), whole.probed.len() - 3);
        assert!(ran.iter().all(|v| !store.contains_key(v)));
    }
}
