//! Nightly runs: the suite runs, one entry per run is appended to the history store
//! (`history/<date>T<time>Z-<git revision>.json`, written by the nightly stage only), and the
//! nightly page (`reports/nightly/`) shows the change since the last run per configuration and
//! metric, and a history figure per key metric.
//!
//! A change is classified as criterion.rs classifies a benchmark's change
//! (`criterion::analysis::compare`, `ComparisonResult`): the relative change of the medians gets
//! a confidence interval, and the change is *improved* or *regressed* only when that whole
//! interval lies beyond the noise threshold on one side; otherwise it is *within noise*. The
//! medians' intervals are order-statistic intervals ([`crate::stats`]) over the samples of a
//! metric: the repeats of a configuration where it has several, else the measured steps of its
//! one run (step time and tokens/s), else none (a single value: the change is then judged by
//! the threshold alone, and the page says so).
//!
//! The threshold is the noise the metric shows from night to night, not within one run (the
//! steps of one run share a process): deterministic metrics (peak bytes, eval loss at a fixed
//! seed) are compared within [`EXACT_TOLERANCE`]; timings against [`night_noise`] of the
//! earlier nights in the history, and only once [`MIN_NIGHTS`] of them measured the metric
//! ([`changes`]). Two nightlies of the same revision therefore flag nothing (an A/A test).
//!
//! A job records how loaded its machine was while it ran (other processes' busy CPUs, stolen
//! time: [`memwall_core::measure::MachineLoad`]). A timing of a configuration that ran under
//! load is *noisy*: no verdict is drawn from it, and a loaded night is left out of the nights
//! later timings are compared with and their noise estimated from.

use crate::document::content::{Figure, Section, Series, Table};
use crate::driver::{self, Paths, RunOptions};
use crate::error::{Error, Result};
use crate::record::{self, JobRecord, JobStatus};
use crate::report::{self, ReportDoc};
use crate::spec::{Profile, Study};
use crate::stats::{self, Estimate};
use crate::studies::{Tracked, TrackedKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Version of the history entry format; an entry of another version is refused by name.
pub const HISTORY_SCHEMA: u32 = 1;

/// The default noise threshold: a relative change of the medians smaller than 5% is noise
/// (criterion.rs defaults to 1% for microbenchmarks; a training step shares its machine). It is
/// the floor of a timing metric's threshold; the history can only raise it ([`night_noise`]).
pub const DEFAULT_NOISE: f64 = 0.05;

/// Earlier nights a timing metric needs before a change is judged: its night-to-night noise is
/// estimated from their successive changes (3 changes from 4 nights). With fewer, the verdict
/// is [`ChangeVerdict::NotEnoughHistory`]: the steps of one run share a process and say nothing
/// about how much the same code moves from one night to the next.
pub const MIN_NIGHTS: usize = 4;

/// How many earlier nights the noise estimate looks back over.
pub const NOISE_WINDOW: usize = 10;

/// Relative tolerance of the deterministic metrics (peak bytes, eval loss at a fixed seed), and
/// the absolute slack of the peak-byte metrics beside it: the measurement's own rule.
pub use memwall_core::measure::{EXACT_SLACK_BYTES, EXACT_TOLERANCE};

/// A timing change counts when it is beyond this many robust standard deviations of the
/// night-to-night changes (and beyond the noise floor).
pub const NOISE_SIGMAS: f64 = 4.0;

mod change;
pub mod confirm;
mod history;
mod page;
mod slurm;
#[cfg(test)]
mod tests;

use crate::git::git_revision;
pub use change::*;
pub use history::*;
pub use page::*;
pub use slurm::{emit_nightly, read_nightly_plan, NightlyPlan, NIGHTLY_PLAN};

/// What a nightly run or a history report produced.
#[derive(Debug)]
pub struct NightlyOutcome {
    /// The entry appended (None for `memwall history`, which appends nothing).
    pub entry: Option<PathBuf>,
    /// The nightly page.
    pub rendered: report::Rendered,
    /// `summary.md` beside the page: [`summary_paragraph`] and the page's path.
    pub summary: PathBuf,
    /// The changes of the last run.
    pub changes: Vec<ConfigChange>,
}

impl NightlyOutcome {
    /// `(configuration, metric, verdict)` of every regression (and missing measurement).
    pub fn regressions(&self) -> Vec<String> {
        self.changes
            .iter()
            .flat_map(|c| {
                c.metrics
                    .iter()
                    .filter(|(_, k)| k.verdict.is_regression())
                    .map(move |(m, k)| {
                        format!(
                            "{}/{} {}: {}{}",
                            c.study,
                            c.config,
                            m.name(),
                            k.verdict.as_str(),
                            k.change
                                .map(|d| format!(" ({:+.1}%)", d.median * 100.0))
                                .unwrap_or_default()
                        )
                    })
            })
            .collect()
    }
}

/// How to run the nightly suite.
#[derive(Debug, Clone)]
pub struct NightlyOptions {
    /// Experiment files, in order.
    pub experiments: Vec<PathBuf>,
    /// The history store (`history/`).
    pub history: PathBuf,
    /// Relative noise threshold (0.05 = 5%).
    pub noise: f64,
    /// The profile on the CPU when `--profile` is not given (a GPU runs `full`).
    pub cpu_profile: Profile,
    /// The `memwall` binary running the nightly: its `memwall sweep` reruns tonight's side of
    /// a confirmation ([`confirm`]), and it is kept with its job runner for tomorrow's.
    pub memwall: PathBuf,
    /// Fault injection (off: `None`): `STUDY/CONFIG=FACTOR` makes every step of that
    /// configuration take FACTOR times as long in tonight's binary (`memwall-job run-job
    /// --inject-slowdown`), as a real slowdown of tonight's code would; the last night's binary
    /// in the confirmation reruns runs without it.
    pub inject_slowdown: Option<String>,
    /// Reruns of each side when a flagged change is confirmed ([`confirm`]; 0: no
    /// confirmation, every flag is reported as first measured).
    pub confirm_runs: usize,
}

/// Where and what a run ran: the run-level fields of its history entry.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// When the run started (the entry's id and `started_at`).
    pub started: chrono::DateTime<chrono::Utc>,
    /// When it finished.
    pub finished: chrono::DateTime<chrono::Utc>,
    /// The revision that ran ([`git_revision`] where it ran from this checkout; the bundle's
    /// revision for an imported run).
    pub git_revision: String,
    /// The size profile every study ran at.
    pub profile: Profile,
    /// The backend the jobs ran on.
    pub backend: String,
    /// The device name used when no job finished (otherwise the first finished job's).
    pub device: String,
}

/// The history entry of one run: `records` (training jobs, grouped by configuration), the
/// in-process studies' tracked numbers `tracked` ((study, numbers)), and the studies that could
/// not run (`errors`).
pub fn entry_of(
    info: &RunInfo,
    records: &[JobRecord],
    tracked: &[StudyTracked],
    errors: Vec<String>,
) -> HistoryEntry {
    let mut configs = config_entries(records);
    for (study, numbers, load) in tracked {
        configs.extend(tracked_entries(study, numbers, *load));
    }
    HistoryEntry {
        schema: HISTORY_SCHEMA,
        id: format!(
            "{}-{}",
            info.started.format("%Y-%m-%dT%H%M%S%.3fZ"),
            info.git_revision
        ),
        date: info.started.format("%Y-%m-%d").to_string(),
        started_at: info.started.to_rfc3339(),
        finished_at: info.finished.to_rfc3339(),
        git_revision: info.git_revision.clone(),
        profile: info.profile,
        backend: info.backend.clone(),
        device: records
            .iter()
            .find(|r| r.status == JobStatus::Ok)
            .map_or_else(|| info.device.clone(), |r| r.env.device_name.clone()),
        configs,
        errors,
        confirm_s: None,
    }
}

/// Appends `entry` to the history store `history_dir`, renders the nightly page from the whole
/// history ([`render`]) and writes the index of `paths.reports` (the reports of `experiments`
/// rendered there, and the nightly page): the last step of every way a run reaches the history
/// (a local nightly, an imported bundle, the Slurm final job).
///
/// # Errors
/// Those of [`append`] (an entry of that id exists already), [`render`] and
/// [`report::sinks::index::write_index`].
pub fn record(
    history_dir: &Path,
    entry: &HistoryEntry,
    paths: &Paths,
    noise: f64,
    experiments: &[PathBuf],
) -> Result<NightlyOutcome> {
    let path = append(history_dir, entry)?;
    let mut out = render(history_dir, paths, noise)?;
    report::sinks::index::write_index(experiments, &paths.reports, &paths.templates)?;
    out.entry = Some(path);
    Ok(out)
}

/// The run-level fields of an imported bundle run (`memwall import --nightly`): the bundle's
/// profile and backend; the revision the runner was built from (its records' `env`), else the
/// revision the bundle was written from; the device of the first finished job. A bundle's
/// records say when each job finished, not when the run started: the run is taken to have
/// started when its first record was written and finished with its last.
///
/// # Errors
/// [`Error::Records`] naming `source` when the bundle holds no record (nothing ran).
pub fn import_info(
    source: &Path,
    manifest: &crate::bundle::Manifest,
    records: &[JobRecord],
) -> Result<RunInfo> {
    let times: Vec<chrono::DateTime<chrono::Utc>> = records
        .iter()
        .filter_map(|r| chrono::DateTime::parse_from_rfc3339(&r.finished_at).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .collect();
    let (Some(first), Some(last)) = (times.iter().min(), times.iter().max()) else {
        return Err(Error::Records {
            path: source.to_path_buf(),
            message: "the bundle holds no job record: nothing ran, so there is no nightly run to \
                      append to the history (run its run.sh first)"
                .into(),
        });
    };
    let built = records
        .iter()
        .map(|r| r.env.git_revision.as_str())
        .find(|r| !r.is_empty() && *r != "unknown");
    Ok(RunInfo {
        started: *first,
        finished: *last,
        git_revision: built.unwrap_or(&manifest.git_revision).to_string(),
        profile: manifest.profile,
        backend: manifest.target.as_str().to_string(),
        device: "unknown".into(),
    })
}

/// An in-process study's name, the numbers it tracked in one run and the machine's load while
/// it ran (its own threads excluded).
pub type StudyTracked = (
    String,
    Vec<Tracked>,
    Option<memwall_core::measure::MachineLoad>,
);

/// What one study of a run adds to its history entry: the records of its training jobs, or
/// the numbers its in-process record tracks.
type StudyPart = (Vec<JobRecord>, Option<StudyTracked>);

/// A study run now by [`driver::sweep`] (afresh: `run.force`), its report rendered: the
/// records the sweep returned, or the numbers of the in-process record it stored.
///
/// # Errors
/// Those of [`driver::sweep`] and [`driver::report`]; an in-process record that does not
/// match its kind.
fn sweep_study(exp: &Path, paths: &Paths, run: &RunOptions) -> Result<StudyPart> {
    // An in-process study runs in this process: the load beside it is read around the sweep
    // (a training job reads its own, in its process).
    let probe = memwall_runner::measure::LoadProbe::start();
    let outcome = driver::sweep(exp, paths, run)?;
    let load = probe.and_then(|p| p.finish());
    driver::report(exp, paths)?;
    let tracked = match outcome.in_process {
        Some(rec) => {
            let path = paths.runs.join(&rec.study);
            let numbers = crate::studies::tracked(&rec, &path)?;
            Some((rec.study, numbers, load))
        }
        None => None,
    };
    Ok((outcome.records, tracked))
}

/// `step` for every experiment file, in order: the records and tracked numbers of those that
/// succeeded, and for each that failed its file and error (logged; the others go on).
fn each_study(
    experiments: &[PathBuf],
    step: impl Fn(&Path) -> Result<StudyPart>,
) -> (Vec<JobRecord>, Vec<StudyTracked>, Vec<String>) {
    let (mut records, mut tracked, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for exp in experiments {
        match step(exp) {
            Ok((r, t)) => {
                records.extend(r);
                tracked.extend(t);
            }
            Err(e) => {
                tracing::error!("{}: {e}", exp.display());
                errors.push(format!("{}: {e}", exp.display()));
            }
        }
    }
    (records, tracked, errors)
}

/// Runs the nightly suite: every study of `opts.experiments` is run afresh (`--force`: a
/// nightly measures tonight's code) and its report rendered; the run's records and the
/// in-process studies' tracked numbers become one history entry appended to `opts.history`;
/// the nightly page is rendered from the history. A study that fails is named in the entry and
/// the run goes on.
///
/// # Errors
/// An unavailable device, and I/O errors on the history store and the reports.
pub fn run(opts: &NightlyOptions, paths: &Paths, run: &RunOptions) -> Result<NightlyOutcome> {
    let started = chrono::Utc::now();
    let (mut run, dev) = nightly_run_options(opts, run)?;
    let runner = run.runner.clone();
    if let Some(s) = &opts.inject_slowdown {
        run.runner
            .1
            .extend(["--inject-slowdown".to_string(), s.clone()]);
    }
    // Tonight's reruns are `memwall sweep` processes of this binary with the job runner's own
    // flags (a planted slowdown, however it was given), which `memwall sweep` passes on.
    let tonight_flags: Vec<String> = run
        .runner
        .1
        .iter()
        .filter(|a| *a != "run-job")
        .cloned()
        .collect();
    let profile = run.profile.expect("set by nightly_run_options");
    let (records, tracked, errors) =
        each_study(&opts.experiments, |exp| sweep_study(exp, paths, &run));
    let info = RunInfo {
        started,
        finished: chrono::Utc::now(),
        git_revision: git_revision(),
        profile,
        backend: dev.backend.to_string(),
        device: dev.name.clone(),
    };
    let mut entry = entry_of(&info, &records, &tracked, errors);
    // Confirm before an alarm: what tonight flags is measured again beside the last night's
    // binary, then tonight's binary is kept for tomorrow's.
    let sides = confirm::Sides {
        tonight: (opts.memwall.clone(), tonight_flags),
        previous: confirm::kept_binary(&opts.history),
    };
    let earlier = load(&opts.history).map(|h| h.entries).unwrap_or_default();
    let scratch = opts.history.join("confirm");
    let how = confirm::Reruns {
        run: &run,
        sides: &sides,
        noise: opts.noise,
        scratch: &scratch,
        runs: opts.confirm_runs,
    };
    confirm::confirm(&earlier, &mut entry, &opts.experiments, &how);
    if let Err(e) =
        confirm::keep_binary(&opts.history, &opts.memwall, &runner.0, &info.git_revision)
    {
        tracing::warn!("keeping tonight's binary for tomorrow's confirmations: {e}");
    }
    record(&opts.history, &entry, paths, opts.noise, &opts.experiments)
}

/// The final job of a Slurm nightly (`memwall nightly --slurm-final <dir>`, written by
/// [`emit_nightly`]): after the array, runs the in-process studies here, renders
/// every study's report from the shared store, and makes one history entry of the array's
/// records (the job keys of `<dir>/nightly.json`) and the in-process studies' numbers, with
/// the start time and revision of the moment the scripts were written. A study that fails is
/// named in the entry and the others go on.
///
/// # Errors
/// A missing or malformed `nightly.json`; those of [`record`].
pub fn slurm_final(
    dir: &Path,
    opts: &NightlyOptions,
    paths: &Paths,
    run: &RunOptions,
) -> Result<NightlyOutcome> {
    let plan = read_nightly_plan(dir)?;
    let mut run = run.clone();
    run.profile = Some(plan.profile);
    run.force = true;
    let (records, tracked, errors) = each_study(&plan.experiments, |exp| {
        let study = Study::load(exp, plan.profile, run.data.as_deref())?;
        if study.header.kind != crate::spec::StudyKind::Training {
            return sweep_study(exp, paths, &run);
        }
        // The array wrote the records: the study's jobs among the plan's keys.
        driver::report(exp, paths)?;
        let mut records = Vec::new();
        for key in &plan.keys {
            let dir = record::record_dir(&paths.runs, &study.header.name, key);
            records.extend(record::read_record(&dir)?);
        }
        Ok((records, None))
    });
    let started = chrono::DateTime::parse_from_rfc3339(&plan.started_at)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| Error::Records {
            path: dir.join(NIGHTLY_PLAN),
            message: format!("field `started_at`: {e}"),
        })?;
    let info = RunInfo {
        started,
        finished: chrono::Utc::now(),
        git_revision: plan.git_revision.clone(),
        profile: plan.profile,
        backend: plan.backend.clone(),
        device: plan.device.clone(),
    };
    let entry = entry_of(&info, &records, &tracked, errors);
    record(&opts.history, &entry, paths, opts.noise, &plan.experiments)
}

/// The run options of a nightly: `run` with `force` (a nightly measures tonight's code) and
/// the profile resolved (given, else `full` on a GPU and `opts.cpu_profile` on the CPU).
///
/// # Errors
/// An unavailable device.
pub fn nightly_run_options(
    opts: &NightlyOptions,
    run: &RunOptions,
) -> Result<(RunOptions, crate::device::ResolvedDevice)> {
    let mut run = run.clone();
    let (dev, _) = driver::resolve(&run)?;
    run.profile = Some(
        run.profile
            .unwrap_or_else(|| driver::default_profile(dev.backend, opts.cpu_profile)),
    );
    run.force = true;
    Ok((run, dev))
}

/// The experiment files of a nightly run: `files` when given, else every study of
/// `experiments_dir`.
///
/// # Errors
/// Those of [`Study::discover`].
pub fn experiment_files(files: Vec<PathBuf>, experiments_dir: &Path) -> Result<Vec<PathBuf>> {
    if files.is_empty() {
        Study::discover(experiments_dir)
    } else {
        Ok(files)
    }
}
