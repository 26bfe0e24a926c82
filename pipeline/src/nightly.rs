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

use crate::demos::{Tracked, TrackedKind};
use crate::driver::{self, Paths, RunOptions};
use crate::error::{Error, Result};
use crate::report::model::{Figure, Section, Series, Table};
use crate::report::{self, ReportDoc};
use crate::results::{self, JobRecord, JobStatus};
use crate::spec::{Profile, Study};
use crate::stats::{self, Estimate};
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
/// is [`Verdict::NotEnoughHistory`]: the steps of one run share a process and say nothing
/// about how much the same code moves from one night to the next.
pub const MIN_NIGHTS: usize = 4;

/// How many earlier nights the noise estimate looks back over.
pub const NOISE_WINDOW: usize = 10;

/// Relative tolerance of the deterministic metrics (peak bytes, eval loss at a fixed seed):
/// 0.1%. Peaks on the CPU are exact but vary by a few KiB between runs (rayon's worker threads
/// allocate too); a real change of the memory plan moves them by far more.
pub const EXACT_TOLERANCE: f64 = 1e-3;

/// Absolute slack of the peak-byte metrics, added to [`EXACT_TOLERANCE`]: 64 KiB. On the CPU
/// the rayon worker threads' own allocations land at slightly different moments from run to
/// run, so the exact high-water mark of the same code moves by a few KiB (2.9 KiB at most over
/// three runs of a 2.6 MB smoke configuration, 15 KiB of 123 MB at the `cpu` profile; issue 27).
pub const EXACT_SLACK_BYTES: f64 = 65536.0;

/// A timing change counts when it is beyond this many robust standard deviations of the
/// night-to-night changes (and beyond the noise floor).
pub const NOISE_SIGMAS: f64 = 4.0;

/// One nightly run: what ran, where, at which revision, and every configuration's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// [`HISTORY_SCHEMA`].
    pub schema: u32,
    /// The run's id and file stem: `<YYYY-MM-DD>T<HHMMSS.mmm>Z-<revision>` (UTC start time;
    /// the names sort in time order).
    pub id: String,
    /// UTC date of the run's start (YYYY-MM-DD).
    pub date: String,
    /// RFC 3339 times of the run's start and end.
    pub started_at: String,
    /// See `started_at`.
    pub finished_at: String,
    /// `git rev-parse --short HEAD` of the tree that ran, `-dirty` appended when it had
    /// uncommitted changes; "unknown" outside a git checkout.
    pub git_revision: String,
    /// The size profile every study ran at.
    pub profile: Profile,
    /// The backend the jobs ran on (flex, ndarray, cuda).
    pub backend: String,
    /// Device name (GPU or CPU model) of the first finished job.
    pub device: String,
    /// Every training configuration of the run.
    pub configs: Vec<ConfigEntry>,
    /// Studies that could not run or report, with the error.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// What a [`ConfigEntry`] is: a training configuration (its records' metrics, [`Metric::ALL`])
/// or a case an in-process study tracks ([`Metric::IN_PROCESS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigKind {
    /// A training configuration (entries written before the field existed are these).
    #[default]
    Training,
    /// A case of an in-process study (a graph at a budget, a loop chain).
    InProcess,
}

/// One configuration of a nightly run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigEntry {
    /// Study name.
    pub study: String,
    /// Configuration name (for an in-process study, the tracked case, e.g. "VGG19 at budget
    /// 0.8").
    pub config: String,
    /// Training configuration or in-process case.
    #[serde(default)]
    pub kind: ConfigKind,
    /// Display label.
    pub label: String,
    /// Job keys of its records (one per repeat).
    pub keys: Vec<String>,
    /// `ok` when every repeat finished, else the first other status (`out_of_memory`, ...).
    pub status: JobStatus,
    /// Why a repeat did not finish.
    #[serde(default)]
    pub reason: Option<String>,
    /// What the samples of each metric are: `repeats` (one value per repeat) or `steps` (one
    /// run: its measured steps for step time and tokens/s, one value for the others).
    pub samples: String,
    /// Samples per metric name ([`Metric::name`]), in the metric's unit; empty when the
    /// configuration did not finish.
    pub metrics: BTreeMap<String, Vec<f64>>,
}

/// A metric tracked from night to night.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    /// Peak allocated bytes (largest per-step peak of the measured steps).
    PeakAllocated,
    /// Peak reserved bytes.
    PeakReserved,
    /// Step time, seconds (median over the measured steps).
    StepTime,
    /// Tokens per second.
    TokensPerS,
    /// Held-out loss, nats per token.
    EvalLoss,
    /// An in-process study's solver wall time, seconds ([`TrackedKind::SolveTime`]).
    SolveTime,
    /// An in-process study's schedule cost, the graph's cost units
    /// ([`TrackedKind::ScheduleCost`]).
    ScheduleCost,
    /// An in-process study's kernel or loop time, seconds ([`TrackedKind::KernelTime`]).
    KernelTime,
}

impl Metric {
    /// Every metric of a training configuration, in table order.
    pub const ALL: [Metric; 5] = [
        Metric::PeakAllocated,
        Metric::PeakReserved,
        Metric::StepTime,
        Metric::TokensPerS,
        Metric::EvalLoss,
    ];

    /// Every metric an in-process study can track ([`crate::demos::InProcessStudy::tracked`]).
    pub const IN_PROCESS: [Metric; 3] =
        [Metric::SolveTime, Metric::ScheduleCost, Metric::KernelTime];

    /// The metric of a tracked number's kind.
    pub fn of_tracked(kind: TrackedKind) -> Metric {
        match kind {
            TrackedKind::SolveTime => Metric::SolveTime,
            TrackedKind::ScheduleCost => Metric::ScheduleCost,
            TrackedKind::KernelTime => Metric::KernelTime,
        }
    }

    /// The name in history entries.
    pub fn name(self) -> &'static str {
        match self {
            Metric::PeakAllocated => "peak_allocated_bytes",
            Metric::PeakReserved => "peak_reserved_bytes",
            Metric::StepTime => "step_time_s",
            Metric::TokensPerS => "tokens_per_s",
            Metric::EvalLoss => "eval_loss",
            Metric::SolveTime => "solve_time_s",
            Metric::ScheduleCost => "schedule_cost",
            Metric::KernelTime => "kernel_time_s",
        }
    }

    /// Column header and axis description, with the unit.
    pub fn title(self) -> &'static str {
        match self {
            Metric::PeakAllocated => "Peak allocated (MiB)",
            Metric::PeakReserved => "Peak reserved (MiB)",
            Metric::StepTime => "Step time (ms)",
            Metric::TokensPerS => "Tokens/s",
            Metric::EvalLoss => "Eval loss (nats)",
            Metric::SolveTime => "Solve time (s)",
            Metric::ScheduleCost => "Schedule cost (cost units)",
            Metric::KernelTime => "Kernel time (µs)",
        }
    }

    /// Whether the metric repeats exactly at a fixed revision and seed (peak bytes, eval loss,
    /// a schedule's cost), so a change beyond [`EXACT_TOLERANCE`] is real; timings are not.
    pub fn deterministic(self) -> bool {
        !matches!(
            self,
            Metric::StepTime | Metric::TokensPerS | Metric::SolveTime | Metric::KernelTime
        )
    }

    /// Whether a smaller value is better (memory, time, loss) or a larger one (throughput).
    pub fn lower_is_better(self) -> bool {
        !matches!(self, Metric::TokensPerS)
    }

    /// `v` (in the history's unit) in the unit of [`Metric::title`].
    pub fn display(self, v: f64) -> f64 {
        match self {
            Metric::PeakAllocated | Metric::PeakReserved => v / (1024.0 * 1024.0),
            Metric::StepTime => v * 1e3,
            Metric::KernelTime => v * 1e6,
            Metric::TokensPerS | Metric::EvalLoss | Metric::SolveTime | Metric::ScheduleCost => v,
        }
    }

    fn format(self, e: &Estimate) -> String {
        let f = |v: f64| {
            let v = self.display(v);
            if v.abs() >= 100.0 {
                format!("{v:.0}")
            } else if v.abs() >= 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.3}")
            }
        };
        if e.has_interval() {
            format!("{} [{}, {}]", f(e.median), f(e.lo), f(e.hi))
        } else {
            f(e.median)
        }
    }
}

/// How a metric moved since the last run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Worse beyond the noise threshold, with the whole interval of the change beyond it.
    Regressed,
    /// Measured in the last run, not in this one (the configuration did not finish).
    Missing,
    /// Better beyond the noise threshold, with the whole interval beyond it.
    Improved,
    /// The interval of the change reaches inside the noise threshold.
    WithinNoise,
    /// A timing measured in fewer than [`MIN_NIGHTS`] earlier nights: its night-to-night noise
    /// is unknown, so no verdict is given.
    NotEnoughHistory,
    /// No earlier run measured it.
    New,
    /// Neither this run nor the last measured it (the configuration did not finish in either).
    NotMeasured,
}

impl Verdict {
    /// The word the page prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Missing => "missing",
            Verdict::Improved => "improved",
            Verdict::WithinNoise => "within noise",
            Verdict::NotEnoughHistory => "not enough history",
            Verdict::New => "new",
            Verdict::NotMeasured => "not measured",
        }
    }

    /// Whether `--fail-on-regression` fails on it (a regression, or a configuration that
    /// finished last time and not now).
    pub fn is_regression(self) -> bool {
        matches!(self, Verdict::Regressed | Verdict::Missing)
    }
}

/// The change of one metric: the two estimates, the relative change with its interval, the
/// verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Classified {
    /// The verdict.
    pub verdict: Verdict,
    /// The last run's median and interval.
    pub prev: Option<Estimate>,
    /// This run's median and interval.
    pub cur: Option<Estimate>,
    /// Relative change of the medians (`cur / prev - 1`) with the conservative interval of the
    /// ratio ([`stats::ratio`]) minus one; `None` when a side is missing or the last median is 0.
    pub change: Option<Estimate>,
    /// The noise the change was judged against (set by [`changes`]; `None` from [`classify`]).
    pub noise: Option<Noise>,
}

/// The noise a metric's change is judged against: a relative threshold and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    /// Relative threshold (0.05 = 5%).
    pub threshold: f64,
    /// Earlier nights it was estimated from (0: the floor alone).
    pub nights: usize,
    /// Whether the metric is compared as deterministic ([`EXACT_TOLERANCE`]).
    pub exact: bool,
    /// Whether the earlier nights raised the threshold above its floor.
    pub from_history: bool,
}

impl Noise {
    /// How the page prints it: `±0.1% (exact)`, `±7.5% (5 nights)` (raised by the history),
    /// `±5.0% (floor)`.
    pub fn describe(&self) -> String {
        let how = if self.from_history {
            format!("{} nights", self.nights)
        } else if self.exact {
            "exact".to_string()
        } else {
            "floor".to_string()
        };
        format!("±{:.1}% ({how})", self.threshold * 100.0)
    }
}

/// The night-to-night noise of a metric from its per-night medians `nights` (oldest first):
/// `NOISE_SIGMAS` robust standard deviations of the successive relative changes
/// `n_i / n_{i-1} - 1` (1.4826 times their median absolute value, the normal-consistent MAD;
/// Rousseeuw and Croux 1993), never below `floor`. A single step in the history moves one of
/// the changes and barely the median, so a past regression does not hide the next one. Fewer
/// than two nights: the floor alone.
pub fn night_noise(nights: &[f64], floor: f64, exact: bool) -> Noise {
    let mut changes: Vec<f64> = nights
        .windows(2)
        .filter(|w| w[0] != 0.0)
        .map(|w| (w[1] / w[0] - 1.0).abs())
        .collect();
    let threshold = if changes.is_empty() {
        floor
    } else {
        changes.sort_by(|a, b| a.total_cmp(b));
        let mid = changes.len() / 2;
        let median = if changes.len() % 2 == 1 {
            changes[mid]
        } else {
            (changes[mid - 1] + changes[mid]) / 2.0
        };
        floor.max(NOISE_SIGMAS * 1.4826 * median)
    };
    Noise {
        threshold,
        nights: nights.len(),
        exact,
        from_history: threshold > floor,
    }
}

/// Classifies the change from the samples `prev` to `cur` of a metric (criterion.rs's rule):
/// with `d = [lo, hi]` the interval of the relative change `cur / prev - 1` (signs flipped
/// where larger is better), *regressed* when `lo > noise`, *improved* when `hi < -noise`,
/// otherwise *within noise*. Single samples give a zero-width interval. `noise` is relative
/// (0.05 = 5%). Empty sample lists count as not measured: *new* when only `cur` has samples,
/// *missing* when only `prev` has, *not measured* when neither has.
pub fn classify(prev: &[f64], cur: &[f64], lower_is_better: bool, noise: f64) -> Classified {
    let p = stats::median_interval(prev, stats::LEVEL);
    let c = stats::median_interval(cur, stats::LEVEL);
    let (pe, ce) = match (p, c) {
        (Some(pe), Some(ce)) => (pe, ce),
        (None, Some(_)) => return verdict_only(Verdict::New, p, c),
        (Some(_), None) => return verdict_only(Verdict::Missing, p, c),
        (None, None) => return verdict_only(Verdict::NotMeasured, p, c),
    };
    if pe.median == 0.0 && ce.median == 0.0 {
        return verdict_only(Verdict::WithinNoise, p, c);
    }
    let change = stats::ratio(&ce, &pe).map(|r| Estimate {
        median: r.median - 1.0,
        lo: r.lo - 1.0,
        hi: r.hi - 1.0,
        ..r
    });
    // A last value of 0 and a non-zero one now: an unbounded change upwards.
    let (lo, hi) = change.map_or((f64::INFINITY, f64::INFINITY), |d| (d.lo, d.hi));
    let (worse_lo, better_hi) = if lower_is_better {
        (lo, hi)
    } else {
        (-hi, -lo)
    };
    let verdict = if worse_lo > noise {
        Verdict::Regressed
    } else if better_hi < -noise {
        Verdict::Improved
    } else {
        Verdict::WithinNoise
    };
    Classified {
        verdict,
        prev: p,
        cur: c,
        change,
        noise: None,
    }
}

fn verdict_only(verdict: Verdict, prev: Option<Estimate>, cur: Option<Estimate>) -> Classified {
    Classified {
        verdict,
        prev,
        cur,
        change: None,
        noise: None,
    }
}

/// The history entry's configurations from the records of one run: records grouped by (study,
/// configuration), in the order given.
pub fn config_entries(records: &[JobRecord]) -> Vec<ConfigEntry> {
    let mut groups: Vec<Vec<&JobRecord>> = Vec::new();
    for r in records {
        match groups
            .iter_mut()
            .find(|g| g[0].spec.study == r.spec.study && g[0].spec.config == r.spec.config)
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups.iter().map(|g| config_entry(g)).collect()
}

fn config_entry(group: &[&JobRecord]) -> ConfigEntry {
    let first = group[0];
    let not_ok = group.iter().find(|r| r.status != JobStatus::Ok);
    let mut metrics = BTreeMap::new();
    let repeats = group.len() >= 2;
    if not_ok.is_none() {
        let summaries: Vec<_> = group.iter().filter_map(|r| r.summary).collect();
        let per_repeat = |f: &dyn Fn(&results::Summary) -> f64| -> Vec<f64> {
            summaries.iter().map(f).collect()
        };
        metrics.insert(
            Metric::PeakAllocated.name().to_string(),
            per_repeat(&|s| s.peak_allocated_bytes as f64),
        );
        metrics.insert(
            Metric::PeakReserved.name().to_string(),
            per_repeat(&|s| s.peak_reserved_bytes as f64),
        );
        metrics.insert(
            Metric::EvalLoss.name().to_string(),
            per_repeat(&|s| s.eval_loss),
        );
        let (times, tokens) = if repeats {
            (
                per_repeat(&|s| s.median_step_s),
                per_repeat(&|s| s.tokens_per_s),
            )
        } else {
            // One run: its measured steps are the samples (timed steps only: no warm-up, not
            // the untimed memory step). Tokens per step = tokens/s x median step time.
            let s = summaries.first();
            let per_step = s.map_or(0.0, |s| s.tokens_per_s * s.median_step_s);
            let times: Vec<f64> = first
                .steps
                .iter()
                .filter(|st| !st.warmup && !st.memory_step && st.time_s > 0.0)
                .map(|st| st.time_s)
                .collect();
            let tokens = times.iter().map(|t| per_step / t).collect();
            (times, tokens)
        };
        metrics.insert(Metric::StepTime.name().to_string(), times);
        metrics.insert(Metric::TokensPerS.name().to_string(), tokens);
    }
    ConfigEntry {
        study: first.spec.study.clone(),
        config: first.spec.config.clone(),
        kind: ConfigKind::Training,
        label: first.spec.label.clone(),
        keys: group.iter().map(|r| r.key.clone()).collect(),
        status: not_ok.map_or(JobStatus::Ok, |r| r.status),
        reason: not_ok.and_then(|r| r.reason.clone()),
        samples: if repeats { "repeats" } else { "steps" }.to_string(),
        metrics,
    }
}

/// The history entry's configurations of an in-process study from the numbers it tracked
/// ([`crate::demos::InProcessStudy::tracked`]): one per case, in the order given, each with one
/// sample per metric (`samples`: "single").
pub fn tracked_entries(study: &str, tracked: &[Tracked]) -> Vec<ConfigEntry> {
    let mut out: Vec<ConfigEntry> = Vec::new();
    for t in tracked {
        let i = match out.iter().position(|c| c.config == t.case) {
            Some(i) => i,
            None => {
                out.push(ConfigEntry {
                    study: study.to_string(),
                    config: t.case.clone(),
                    kind: ConfigKind::InProcess,
                    label: t.case.clone(),
                    keys: Vec::new(),
                    status: JobStatus::Ok,
                    reason: None,
                    samples: "single".into(),
                    metrics: BTreeMap::new(),
                });
                out.len() - 1
            }
        };
        out[i]
            .metrics
            .entry(Metric::of_tracked(t.kind).name().to_string())
            .or_default()
            .push(t.value);
    }
    out
}

/// Appends `entry` to the history store as `<dir>/<entry.id>.json` and returns its path.
///
/// Safe with concurrent writers (two GPUs' nightlies, Slurm tasks, on one shared folder): the
/// entry is written and synced under a temporary name unique to this writer, then linked to its
/// final name with `link(2)`, which fails rather than replaces when that name exists. Readers
/// never see a partial entry, and of two writers of one id exactly one succeeds.
///
/// # Errors
/// [`Error::Records`] when an entry of that id exists already; I/O errors naming the file.
pub fn append(dir: &Path, entry: &HistoryEntry) -> Result<PathBuf> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!("{}.json", entry.id));
    let exists = || Error::Records {
        path: path.clone(),
        message: "a history entry of this id exists already; the history is append-only".into(),
    };
    if path.exists() {
        return Err(exists());
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    // Hidden (leading dot) so that `load` never reads it.
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        entry.id,
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let json = serde_json::to_vec_pretty(entry).expect("history entry serializes");
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&json).and_then(|_| f.sync_all()))
        .map_err(|e| Error::io("writing", &tmp, e));
    let linked = written.and_then(|_| match std::fs::hard_link(&tmp, &path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
        Err(e) => Err(Error::io("linking", &path, e)),
    });
    let _ = std::fs::remove_file(&tmp);
    linked.map(|_| path)
}

/// The history store as read: its entries, oldest first, and the files that could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// Every readable entry, oldest first (file names sort by time).
    pub entries: Vec<HistoryEntry>,
    /// Each entry that was skipped: its file and why (malformed JSON, another schema version).
    pub damaged: Vec<(PathBuf, String)>,
}

/// Every entry of the history store, oldest first. A missing folder is an empty history. An
/// entry that cannot be read or is of another schema version is skipped and named in
/// [`History::damaged`] (the nightly page lists it), never fatal: one bad file must not stop a
/// lab's nightly.
///
/// # Errors
/// I/O errors listing the folder or reading a file.
pub fn load(dir: &Path) -> Result<History> {
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(History::default()),
        Err(e) => return Err(Error::io("listing", dir, e)),
    };
    let mut files: Vec<PathBuf> = listing
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    files.sort();
    let mut history = History::default();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
        let problem = match results::parse_json::<HistoryEntry>(&text) {
            Err(e) => Some(format!("malformed history entry ({e})")),
            Ok(entry) if entry.schema != HISTORY_SCHEMA => Some(format!(
                "field `schema`: {} is not this memwall's history schema {HISTORY_SCHEMA}",
                entry.schema
            )),
            Ok(entry) => {
                history.entries.push(entry);
                None
            }
        };
        if let Some(message) = problem {
            tracing::warn!("{}: skipped: {message}", path.display());
            history.damaged.push((path, message));
        }
    }
    Ok(history)
}

/// The whole history as one long table for a lab's own dashboards: one row per (run,
/// configuration, metric) with the run's id, date, revision, profile, backend and device, the
/// configuration's study, name and status, the metric's name, what its samples are (`repeats`
/// or `steps`), their count, and the median with its order-statistic interval (in the
/// history's units: bytes, seconds, tokens/s, nats). Written as Parquet when `out` ends in
/// `.parquet`, else as CSV; damaged entries are skipped (and returned).
///
/// # Errors
/// I/O and writer errors naming `out`.
pub fn export(history_dir: &Path, out: &Path) -> Result<Vec<(PathBuf, String)>> {
    use polars::prelude::*;
    let History { entries, damaged } = load(history_dir)?;
    let mut cols: [Vec<String>; 11] = Default::default();
    let (mut n, mut median, mut lo, mut hi) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in &entries {
        for c in &e.configs {
            for (name, samples) in &c.metrics {
                let est = stats::median_interval(samples, stats::LEVEL);
                for (col, v) in cols.iter_mut().zip([
                    &e.id,
                    &e.date,
                    &e.git_revision,
                    &e.profile.to_string(),
                    &e.backend,
                    &e.device,
                    &c.study,
                    &c.config,
                    &c.status.as_str().to_string(),
                    name,
                    &c.samples,
                ]) {
                    col.push(v.clone());
                }
                n.push(samples.len() as u32);
                median.push(est.map(|x| x.median));
                lo.push(est.map(|x| x.lo));
                hi.push(est.map(|x| x.hi));
            }
        }
    }
    let names = [
        "run", "date", "revision", "profile", "backend", "device", "study", "config", "status",
        "metric", "samples",
    ];
    let mut columns: Vec<Column> = names
        .iter()
        .zip(cols)
        .map(|(name, v)| Column::new((*name).into(), v))
        .collect();
    columns.push(Column::new("n".into(), n));
    columns.push(Column::new("median".into(), median));
    columns.push(Column::new("lo".into(), lo));
    columns.push(Column::new("hi".into(), hi));
    let perr = |e: PolarsError| Error::Table {
        path: out.to_path_buf(),
        what: "writing the history table: ".into(),
        source: e.into(),
    };
    let height = columns.first().map_or(0, |c| c.len());
    let mut df = DataFrame::new(height, columns).map_err(perr)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    }
    let file = std::fs::File::create(out).map_err(|e| Error::io("creating", out, e))?;
    if out.extension().is_some_and(|x| x == "parquet") {
        ParquetWriter::new(file).finish(&mut df).map_err(perr)?;
    } else {
        CsvWriter::new(file).finish(&mut df).map_err(perr)?;
    }
    Ok(damaged)
}

/// One configuration's changes since the last run that measured it.
#[derive(Debug, Clone)]
pub struct ConfigChange {
    /// Study name.
    pub study: String,
    /// Configuration name (or in-process case).
    pub config: String,
    /// Training configuration or in-process case.
    pub kind: ConfigKind,
    /// The id of the run compared with (`None`: no earlier run of the same profile and
    /// backend had this configuration).
    pub against: Option<String>,
    /// Per metric, in [`Metric::ALL`] order (a training configuration) or
    /// [`Metric::IN_PROCESS`] order (the metrics an in-process case has).
    pub metrics: Vec<(Metric, Classified)>,
    /// The configuration's status in this run.
    pub status: JobStatus,
}

/// The changes of the last entry of `history` against, per configuration, the latest earlier
/// entry of the same profile and backend that has the configuration. Empty for an empty
/// history.
///
/// Each metric is judged against the noise it shows between nights: deterministic metrics
/// (peak bytes, eval loss) against [`EXACT_TOLERANCE`] (peaks: at least [`EXACT_SLACK_BYTES`]
/// of the last night's peak), raised by the history only if they did
/// move between earlier nights; timings against [`night_noise`] of the last [`NOISE_WINDOW`]
/// earlier nights that measured them, never below `noise` (relative, 0.05 = 5%), and only with
/// at least [`MIN_NIGHTS`] of them ([`Verdict::NotEnoughHistory`] otherwise). The verdict is
/// [`classify`]'s with that threshold.
pub fn changes(history: &[HistoryEntry], noise: f64) -> Vec<ConfigChange> {
    let Some((cur, earlier)) = history.split_last() else {
        return Vec::new();
    };
    let comparable = |e: &&HistoryEntry| e.profile == cur.profile && e.backend == cur.backend;
    let mut out = Vec::new();
    for c in &cur.configs {
        // This configuration in the earlier comparable entries, latest first.
        let before_c: Vec<(&HistoryEntry, &ConfigEntry)> = earlier
            .iter()
            .rev()
            .filter(comparable)
            .filter_map(|e| {
                e.configs
                    .iter()
                    .find(|p| p.study == c.study && p.config == c.config)
                    .map(|p| (e, p))
            })
            .collect();
        let prev = before_c.first().copied();
        let tracked: Vec<Metric> = match c.kind {
            ConfigKind::Training => Metric::ALL.to_vec(),
            // An in-process case tracks only some metrics: those this run or the last has.
            ConfigKind::InProcess => Metric::IN_PROCESS
                .into_iter()
                .filter(|m| {
                    c.metrics.contains_key(m.name())
                        || prev.is_some_and(|(_, p)| p.metrics.contains_key(m.name()))
                })
                .collect(),
        };
        let metrics = tracked
            .iter()
            .map(|&m| (m, metric_change(m, c, &before_c, noise)))
            .collect();
        out.push(ConfigChange {
            study: c.study.clone(),
            config: c.config.clone(),
            kind: c.kind,
            against: prev.map(|(e, _)| e.id.clone()),
            metrics,
            status: c.status,
        });
    }
    out
}

/// The change of metric `m` of configuration `c` since the latest of `before_c` (the
/// configuration in the earlier comparable entries, latest first), judged against the noise of
/// the last [`NOISE_WINDOW`] of them as [`changes`] describes.
fn metric_change(
    m: Metric,
    c: &ConfigEntry,
    before_c: &[(&HistoryEntry, &ConfigEntry)],
    noise: f64,
) -> Classified {
    let samples = |e: &ConfigEntry| e.metrics.get(m.name()).cloned().unwrap_or_default();
    let before = before_c
        .first()
        .map(|(_, p)| samples(p))
        .unwrap_or_default();
    // The per-night medians of this configuration's metric, oldest first.
    let mut nights: Vec<f64> = before_c
        .iter()
        .filter_map(|(_, p)| stats::median_interval(&samples(p), stats::LEVEL).map(|x| x.median))
        .take(NOISE_WINDOW)
        .collect();
    nights.reverse();
    let exact = m.deterministic();
    let floor = match m {
        Metric::PeakAllocated | Metric::PeakReserved => {
            let last = nights.last().copied().unwrap_or(0.0);
            if last > 0.0 {
                EXACT_TOLERANCE.max(EXACT_SLACK_BYTES / last)
            } else {
                EXACT_TOLERANCE
            }
        }
        _ if exact => EXACT_TOLERANCE,
        _ => noise,
    };
    let n = night_noise(&nights, floor, exact);
    let mut k = classify(&before, &samples(c), m.lower_is_better(), n.threshold);
    k.noise = Some(n);
    let judged = matches!(
        k.verdict,
        Verdict::Regressed | Verdict::Improved | Verdict::WithinNoise
    );
    if judged && !exact && nights.len() < MIN_NIGHTS {
        k.verdict = Verdict::NotEnoughHistory;
    }
    k
}

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
}

/// The standard output of `git ARGS` in the current directory, `None` when git is missing or
/// the command fails.
pub fn git_output(args: &[&str]) -> Option<Vec<u8>> {
    std::process::Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| o.stdout)
}

/// `git rev-parse --short HEAD`, `-dirty` appended when the tree has uncommitted changes to
/// tracked files; "unknown" outside a git checkout.
pub fn git_revision() -> String {
    let git =
        |args: &[&str]| git_output(args).map(|o| String::from_utf8_lossy(&o).trim().to_string());
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) if !rev.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{rev}-dirty")
            } else {
                rev
            }
        }
        _ => "unknown".into(),
    }
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
    for (study, numbers) in tracked {
        configs.extend(tracked_entries(study, numbers));
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
    }
}

/// Appends `entry` to the history store `history_dir`, renders the nightly page from the whole
/// history ([`render`]) and writes the index of `paths.reports` (the reports of `experiments`
/// rendered there, and the nightly page): the last step of every way a run reaches the history
/// (a local nightly, an imported bundle, the Slurm final job).
///
/// # Errors
/// Those of [`append`] (an entry of that id exists already), [`render`] and
/// [`crate::publish::write_index`].
pub fn record(
    history_dir: &Path,
    entry: &HistoryEntry,
    paths: &Paths,
    noise: f64,
    experiments: &[PathBuf],
) -> Result<NightlyOutcome> {
    let path = append(history_dir, entry)?;
    let mut out = render(history_dir, paths, noise)?;
    crate::publish::write_index(experiments, &paths.reports, &paths.templates)?;
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

/// An in-process study's name and the numbers it tracked in one run.
pub type StudyTracked = (String, Vec<Tracked>);

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
    let outcome = driver::sweep(exp, paths, run)?;
    driver::report(exp, paths)?;
    let tracked = match outcome.in_process {
        Some(rec) => {
            let path = paths.runs.join(&rec.study);
            let numbers = crate::studies::tracked(&rec, &path)?;
            Some((rec.study, numbers))
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
    let (run, dev) = nightly_run_options(opts, run)?;
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
    let entry = entry_of(&info, &records, &tracked, errors);
    record(&opts.history, &entry, paths, opts.noise, &opts.experiments)
}

/// The final job of a Slurm nightly (`memwall nightly --slurm-final <dir>`, written by
/// [`crate::slurm::emit_nightly`]): after the array, runs the in-process studies here, renders
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
    let plan = crate::slurm::read_nightly_plan(dir)?;
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
            let dir = results::record_dir(&paths.runs, &study.header.name, key);
            records.extend(results::read_record(&dir)?);
        }
        Ok((records, None))
    });
    let started = chrono::DateTime::parse_from_rfc3339(&plan.started_at)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| Error::Records {
            path: dir.join(crate::slurm::NIGHTLY_PLAN),
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

/// Renders the nightly page (`<reports>/nightly/`) from the history store: the change of the
/// last run since the one before, per configuration and metric, and a history figure per key
/// metric and study. Reads the history only.
///
/// # Errors
/// [`Error::Records`] when the history is empty or an entry cannot be read; rendering errors.
pub fn render(history_dir: &Path, paths: &Paths, noise: f64) -> Result<NightlyOutcome> {
    let History {
        entries: history,
        damaged,
    } = load(history_dir)?;
    let skipped = skipped_entries(&damaged);
    let Some(last) = history.last() else {
        return Err(Error::Records {
            path: history_dir.to_path_buf(),
            message: if skipped.is_empty() {
                "no nightly run in the history yet: run `memwall nightly` first".into()
            } else {
                format!(
                    "no readable nightly run in the history: {}",
                    skipped.join(" ")
                )
            },
        });
    };
    let changes = changes(&history, noise);
    let summary = summary_paragraph(&history, &changes);
    let doc = ReportDoc {
        name: "nightly".into(),
        title: "Nightly runs: change since the last run".into(),
        date: last.date.chars().take(10).collect(),
        source: "memwall's nightly history store".into(),
        source_title: String::new(),
        summary: summary.clone(),
        glance: Vec::new(),
        description: page_description(history_dir, last),
        notes: vec![method_note(noise)],
        tags: vec!["nightly".into(), "history".into()],
        sections: vec![
            change_section(&history, &changes, noise, &skipped),
            history_section(&history),
        ],
        environment: vec![runs_table(&history)],
        records: format!("{}/", history_dir.display()),
        quotes_source: false,
    };
    let page_dir = paths.reports.join("nightly");
    let rendered = report::render(&doc, &paths.templates, &page_dir)?;
    let summary_path = page_dir.join("summary.md");
    let text = format!("{summary}\n\nThe page: {}\n", rendered.html.display());
    results::write_atomic(&summary_path, text.as_bytes())?;
    Ok(NightlyOutcome {
        entry: None,
        rendered,
        summary: summary_path,
        changes,
    })
}

/// The page's notes' line for each history entry that did not read (`damaged`: path, why).
fn skipped_entries(damaged: &[(PathBuf, String)]) -> Vec<String> {
    damaged
        .iter()
        .map(|(path, why)| {
            format!(
                "Skipped the history entry `{}`: {why}. Move it out of the history folder.",
                path.file_name().map_or(path.display().to_string(), |n| n
                    .to_string_lossy()
                    .into_owned())
            )
        })
        .collect()
}

/// The page's description: what a nightly run does and which run (`last`, in the history
/// store `history_dir`) the page compares.
fn page_description(history_dir: &Path, last: &HistoryEntry) -> String {
    format!(
        "Each nightly run (`memwall nightly`) runs the studies afresh and appends one entry \
         to the history store `{}`, keyed by date and git revision. This page compares the \
         last run ({}, revision `{}`, {} profile, {} on {}) with the run before it of the \
         same profile and backend, per configuration and metric, and draws every run so \
         far.",
        history_dir.display(),
        last.date,
        last.git_revision,
        last.profile,
        last.backend,
        last.device
    )
}

/// The page's note on how a change is judged: the confidence interval against the metric's
/// noise threshold (`noise`: the floor for timings).
fn method_note(noise: f64) -> String {
    format!(
        "A change is *regressed* or *improved* only when the whole confidence interval of \
         the relative change of the medians lies beyond the metric's noise threshold on \
         one side, as criterion.rs classifies changes; otherwise it is *within noise*. The \
         threshold is the noise the metric shows between nights, printed beside each \
         verdict: peak bytes and eval loss repeat at a fixed revision and seed, so they are \
         compared within {:.1}% (*exact*; peaks within 64 KiB at least), widened only if they moved between earlier \
         nights; step time and tokens/s are judged against {} robust standard deviations \
         (1.4826 times the median absolute night-to-night change) of the last {} earlier \
         nights, never below {:.1}%, and only once {} earlier nights measured them: before \
         that the verdict is *not enough history*, since the steps of one run share a \
         process and say nothing about night-to-night noise. The medians' intervals are \
         distribution-free order-statistic intervals (Conover 1999, section 3.2) over a \
         configuration's repeats, or, for a configuration run once, over its measured \
         steps. *Missing*: measured last time, not finished now.",
        EXACT_TOLERANCE * 100.0,
        NOISE_SIGMAS,
        NOISE_WINDOW,
        noise * 100.0,
        MIN_NIGHTS
    )
}

/// How many comparisons of `changes` got each verdict.
fn verdict_counts(changes: &[ConfigChange]) -> BTreeMap<Verdict, usize> {
    let mut counts: BTreeMap<Verdict, usize> = BTreeMap::new();
    for c in changes {
        for (_, k) in &c.metrics {
            *counts.entry(k.verdict).or_default() += 1;
        }
    }
    counts
}

/// The sentence on the worst regression of `changes` (the largest relative change towards
/// worse, with its interval and noise), or on there being none; starts with a space.
fn worst_regression(changes: &[ConfigChange], counts: &BTreeMap<Verdict, usize>) -> String {
    let worst = changes
        .iter()
        .flat_map(|c| c.metrics.iter().map(move |(m, k)| (c, m, k)))
        .filter(|(_, _, k)| k.verdict == Verdict::Regressed)
        .filter_map(|(c, m, k)| {
            let d = k.change?;
            let worse = if m.lower_is_better() {
                d.median
            } else {
                -d.median
            };
            Some((worse, c, m, k, d))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match worst {
        Some((_, c, m, k, d)) => format!(
            " Worst regression: {}/{} {} {:+.1}% [{:+.1}%, {:+.1}%] against noise {}.",
            c.study,
            c.config,
            m.name(),
            d.median * 100.0,
            d.lo * 100.0,
            d.hi * 100.0,
            k.noise.map_or("–".into(), |x| x.describe())
        ),
        None if counts.get(&Verdict::Missing).is_some_and(|&n| n > 0) => " No metric \
            regressed, but configurations that finished last time did not finish now."
            .into(),
        None => " Nothing regressed.".into(),
    }
}

/// The nightly page's one-paragraph summary, also written as `summary.md` beside it (short
/// enough for a chat message or an issue comment): the run, how many comparisons regressed,
/// improved, stayed within noise, went missing or lacked history, and the worst regression with
/// its interval and the noise it was judged against.
pub fn summary_paragraph(history: &[HistoryEntry], changes: &[ConfigChange]) -> String {
    let Some(last) = history.last() else {
        return "No nightly run in the history yet.".into();
    };
    let counts = verdict_counts(changes);
    let n = |v: Verdict| counts.get(&v).copied().unwrap_or(0);
    let worst_text = worst_regression(changes, &counts);
    format!(
        "Nightly run {} ({}, revision `{}`, {} profile, {} on {}): {} regressed, {} improved, {} \
         within noise, {} missing, {} not enough history, {} not measured, over \
         {}.{worst_text}",
        history.len(),
        last.date,
        last.git_revision,
        last.profile,
        last.backend,
        last.device,
        n(Verdict::Regressed),
        n(Verdict::Improved),
        n(Verdict::WithinNoise),
        n(Verdict::Missing),
        n(Verdict::NotEnoughHistory),
        n(Verdict::NotMeasured) + n(Verdict::New),
        measured(last)
    )
}

/// What a run measured, for the page's sentences: "73 configurations", "7 in-process cases",
/// or both joined by "and".
fn measured(e: &HistoryEntry) -> String {
    let cases = e
        .configs
        .iter()
        .filter(|c| c.kind == ConfigKind::InProcess)
        .count();
    let configs = e.configs.len() - cases;
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match (configs, cases) {
        (_, 0) => plural(configs, "configuration", "configurations"),
        (0, _) => plural(cases, "in-process case", "in-process cases"),
        _ => format!(
            "{} and {}",
            plural(configs, "configuration", "configurations"),
            plural(cases, "in-process case", "in-process cases")
        ),
    }
}

/// The tables of the section "Change since the last run", filled configuration by
/// configuration ([`ChangeTables::add`]).
struct ChangeTables {
    /// Per training configuration, each metric's change and verdict.
    summary: Table,
    /// Every change beyond the noise threshold (and every missing metric), with intervals.
    detail: Table,
    /// Per in-process case and metric, the change with both runs' numbers.
    in_process: Table,
}

impl ChangeTables {
    /// The three tables without rows; `noise` is the timings' floor the caption names.
    fn new(noise: f64) -> Self {
        let columns = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ChangeTables {
            summary: Table {
                caption: format!(
                    "Change of each metric since the last run (relative change of the medians; \
                     beside each verdict the noise it was judged against; timings never below \
                     {:.1}%)",
                    noise * 100.0
                ),
                columns: columns(&["Study", "Configuration", "Compared with"])
                    .into_iter()
                    .chain(Metric::ALL.iter().map(|m| m.title().to_string()))
                    .collect(),
                ..Default::default()
            },
            detail: Table {
                caption: "Every change beyond the noise threshold: medians with their intervals"
                    .into(),
                columns: columns(&[
                    "Study",
                    "Configuration",
                    "Metric",
                    "Last run",
                    "This run",
                    "Change",
                    "Noise",
                    "Verdict",
                ]),
                ..Default::default()
            },
            in_process: Table {
                caption: "Numbers the in-process studies track (solve times, schedule costs, \
                          kernel timings): change since the last run, with the noise each \
                          verdict was judged against"
                    .into(),
                columns: columns(&[
                    "Study",
                    "Case",
                    "Metric",
                    "Compared with",
                    "Last run",
                    "This run",
                    "Change",
                ]),
                ..Default::default()
            },
        }
    }

    /// Adds configuration `c`, compared with the run `against` names ("run 3 (abc1234)", or
    /// "–"): a summary row for a training configuration, an in-process row per metric of an
    /// in-process case, and a detail row per metric beyond the noise or missing.
    fn add(&mut self, c: &ConfigChange, against: String) {
        let mut row = vec![c.study.clone(), c.config.clone(), against];
        for (m, k) in &c.metrics {
            let est = |e: &Option<Estimate>| e.map_or("–".into(), |e| m.format(&e));
            let cell = verdict_cell(k);
            if c.kind == ConfigKind::InProcess {
                self.in_process.rows.push(vec![
                    c.study.clone(),
                    c.config.clone(),
                    m.title().to_string(),
                    row[2].clone(),
                    est(&k.prev),
                    est(&k.cur),
                    cell.clone(),
                ]);
            }
            row.push(cell);
            if matches!(k.verdict, Verdict::Missing | Verdict::NotMeasured)
                && c.status != JobStatus::Ok
            {
                let at = (self.summary.rows.len(), row.len() - 1);
                let status = format!("this run: {}", c.status.as_str());
                self.summary.note(at.0, at.1, status);
            }
            if matches!(
                k.verdict,
                Verdict::Regressed | Verdict::Improved | Verdict::Missing
            ) {
                self.detail.rows.push(vec![
                    c.study.clone(),
                    c.config.clone(),
                    m.title().to_string(),
                    est(&k.prev),
                    est(&k.cur),
                    k.change.map_or("–".into(), |d| change_interval(&d)),
                    k.noise.map_or("–".into(), |n| n.describe()),
                    k.verdict.as_str().to_string(),
                ]);
            }
        }
        if c.kind == ConfigKind::Training {
            self.summary.rows.push(row);
        }
    }

    /// The tables that have rows, in page order (summary, in-process, detail).
    fn into_tables(self) -> Vec<Table> {
        [self.summary, self.in_process, self.detail]
            .into_iter()
            .filter(|t| !t.rows.is_empty())
            .collect()
    }
}

/// A metric's cell of the summary table: the relative change with its verdict and the noise
/// it was judged against (or the nights it still lacks), or the verdict alone.
fn verdict_cell(k: &Classified) -> String {
    let noise = k
        .noise
        .map(|n| format!(" {}", n.describe()))
        .unwrap_or_default();
    match (k.change, k.verdict) {
        (Some(d), Verdict::NotEnoughHistory) => format!(
            "{:+.1}% not enough history ({} of {MIN_NIGHTS} nights)",
            d.median * 100.0,
            k.noise.map_or(0, |n| n.nights)
        ),
        (Some(d), v) => format!("{:+.1}% {}{noise}", d.median * 100.0, v.as_str()),
        (None, v) => v.as_str().to_string(),
    }
}

/// A relative change as the detail table prints it: the median with its interval, if any.
fn change_interval(d: &Estimate) -> String {
    if d.has_interval() {
        format!(
            "{:+.1}% [{:+.1}%, {:+.1}%]",
            d.median * 100.0,
            d.lo * 100.0,
            d.hi * 100.0
        )
    } else {
        format!("{:+.1}%", d.median * 100.0)
    }
}

/// The section "Change since the last run": the verdict counts of the last run and the
/// [`ChangeTables`]; its notes are the last run's errors and the `skipped` history entries.
fn change_section(
    history: &[HistoryEntry],
    changes: &[ConfigChange],
    noise: f64,
    skipped: &[String],
) -> Section {
    let last = history.last().expect("a non-empty history");
    // "run 3 (abc1234)": the number of the runs table and the figures' x axes.
    let run_name = |id: &str| {
        history
            .iter()
            .position(|e| e.id == id)
            .map_or(id.to_string(), |i| {
                format!("run {} ({})", i + 1, history[i].git_revision)
            })
    };
    let counts = verdict_counts(changes);
    let count_text = counts
        .iter()
        .map(|(v, n)| format!("{n} {}", v.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let mut tables = ChangeTables::new(noise);
    for c in changes {
        tables.add(c, c.against.as_deref().map_or("–".into(), run_name));
    }
    Section {
        details: None,
        title: "Change since the last run".into(),
        claim: "A change between two nightly runs is a change of the code only when it is \
                larger than the noise of the measurement (criterion.rs's rule: the interval of \
                the change lies beyond the noise threshold)."
            .into(),
        ours: format!(
            "Run {} ({}; {}, {} profile, {} on {}): {}.{}",
            history.len(),
            last.id,
            measured(last),
            last.profile,
            last.backend,
            last.device,
            if count_text.is_empty() {
                "no configuration measured".to_string()
            } else {
                count_text
            },
            worst_regression(changes, &counts)
        ),
        notes: last
            .errors
            .iter()
            .map(|e| format!("Did not run: {e}"))
            .chain(skipped.iter().cloned())
            .collect(),
        tables: tables.into_tables(),
        figures: Vec::new(),
    }
}

/// One figure per key metric and study: x = the run's number (oldest 1), one line per
/// configuration (its median per run).
fn history_section(history: &[HistoryEntry]) -> Section {
    let mut studies: Vec<&str> = Vec::new();
    for e in history {
        for c in &e.configs {
            if !studies.contains(&c.study.as_str()) {
                studies.push(&c.study);
            }
        }
    }
    let mut figures = Vec::new();
    for study in &studies {
        let key_metrics = [Metric::PeakAllocated, Metric::StepTime, Metric::TokensPerS]
            .into_iter()
            .chain(Metric::IN_PROCESS);
        for m in key_metrics {
            let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
            for (i, e) in history.iter().enumerate() {
                for c in e.configs.iter().filter(|c| c.study == *study) {
                    let Some(est) = c
                        .metrics
                        .get(m.name())
                        .and_then(|s| stats::median_interval(s, stats::LEVEL))
                    else {
                        continue;
                    };
                    let point = ((i + 1) as f64, m.display(est.median));
                    match lines.iter_mut().find(|l| l.0 == c.config) {
                        Some(l) => l.1.push(point),
                        None => lines.push((c.config.clone(), vec![point])),
                    }
                }
            }
            if lines.is_empty() {
                continue;
            }
            figures.push(Figure {
                name: format!("history_{study}_{}", m.name()),
                title: format!("{study}: {} per nightly run", m.title()),
                x_label: "nightly run (numbers in the runs table below)".into(),
                integer_x: true,
                y_label: m.title().into(),
                series: lines
                    .into_iter()
                    .map(|(label, points)| {
                        if points.len() == 1 {
                            Series::scatter(label, points)
                        } else {
                            Series::line(label, points)
                        }
                    })
                    .collect(),
                ..Default::default()
            });
        }
    }
    Section {
        details: None,
        title: "History".into(),
        claim: "Every nightly run of the history store, per study and key metric.".into(),
        ours: format!(
            "{} runs from {} to {}; each point is a configuration's median in one run.",
            history.len(),
            history.first().map_or("", |e| e.date.as_str()),
            history.last().map_or("", |e| e.date.as_str())
        ),
        notes: Vec::new(),
        tables: Vec::new(),
        figures,
    }
}

fn runs_table(history: &[HistoryEntry]) -> Table {
    Table {
        caption: "The nightly runs (number as on the figures' x axes)".into(),
        columns: [
            "Run",
            "Id",
            "Revision",
            "Profile",
            "Backend",
            "Device",
            "Configurations (ok)",
            "Wall time (s)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows: history
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let wall = chrono::DateTime::parse_from_rfc3339(&e.finished_at)
                    .ok()
                    .zip(chrono::DateTime::parse_from_rfc3339(&e.started_at).ok())
                    .map_or("–".into(), |(f, s)| {
                        format!("{:.0}", (f - s).num_milliseconds() as f64 / 1e3)
                    });
                vec![
                    (i + 1).to_string(),
                    e.id.clone(),
                    e.git_revision.clone(),
                    e.profile.to_string(),
                    e.backend.clone(),
                    e.device.clone(),
                    format!(
                        "{} ({})",
                        e.configs.len(),
                        e.configs
                            .iter()
                            .filter(|c| c.status == JobStatus::Ok)
                            .count()
                    ),
                    wall,
                ]
            })
            .collect(),
        notes: Vec::new(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(center: f64, spread: f64, n: usize) -> Vec<f64> {
        // Deterministic samples spread evenly over center * (1 +- spread).
        (0..n)
            .map(|i| center * (1.0 + spread * (2.0 * i as f64 / (n - 1) as f64 - 1.0)))
            .collect()
    }

    #[test]
    fn a_clear_slowdown_is_a_regression_and_a_speedup_an_improvement() {
        let before = noisy(100.0, 0.01, 21);
        let k = classify(&before, &noisy(130.0, 0.01, 21), true, 0.05);
        assert_eq!(k.verdict, Verdict::Regressed);
        let d = k.change.unwrap();
        assert!(d.lo > 0.05 && d.median > 0.29 && d.median < 0.31, "{d:?}");
        let k = classify(&before, &noisy(70.0, 0.01, 21), true, 0.05);
        assert_eq!(k.verdict, Verdict::Improved);
        // Throughput: larger is better, so the same moves flip.
        assert_eq!(
            classify(&before, &noisy(130.0, 0.01, 21), false, 0.05).verdict,
            Verdict::Improved
        );
        assert_eq!(
            classify(&before, &noisy(70.0, 0.01, 21), false, 0.05).verdict,
            Verdict::Regressed
        );
    }

    #[test]
    fn a_small_or_uncertain_change_is_within_noise() {
        let before = noisy(100.0, 0.01, 21);
        // 3% slower: below the 5% threshold.
        assert_eq!(
            classify(&before, &noisy(103.0, 0.01, 21), true, 0.05).verdict,
            Verdict::WithinNoise
        );
        // 10% slower in the median, but the samples spread +-30%: the interval of the change
        // reaches inside the threshold (criterion's rule), so it is not called a regression.
        let k = classify(&before, &noisy(110.0, 0.3, 21), true, 0.05);
        assert_eq!(k.verdict, Verdict::WithinNoise, "{:?}", k.change);
        assert!(k.change.unwrap().median > 0.05);
        // Identical single values.
        assert_eq!(
            classify(&[1e9], &[1e9], true, 0.05).verdict,
            Verdict::WithinNoise
        );
        assert_eq!(
            classify(&[0.0], &[0.0], true, 0.05).verdict,
            Verdict::WithinNoise
        );
    }

    #[test]
    fn single_values_are_judged_by_the_threshold() {
        assert_eq!(
            classify(&[1000.0], &[1100.0], true, 0.05).verdict,
            Verdict::Regressed
        );
        assert_eq!(
            classify(&[1000.0], &[1040.0], true, 0.05).verdict,
            Verdict::WithinNoise
        );
        assert_eq!(
            classify(&[0.0], &[10.0], true, 0.05).verdict,
            Verdict::Regressed
        );
    }

    #[test]
    fn missing_previous_is_new_and_missing_now_is_missing() {
        let k = classify(&[], &[1.0, 2.0], true, 0.05);
        assert_eq!((k.verdict, k.change), (Verdict::New, None));
        assert!(!k.verdict.is_regression());
        let k = classify(&[1.0], &[], true, 0.05);
        assert_eq!(k.verdict, Verdict::Missing);
        assert!(k.verdict.is_regression());
        let k = classify(&[], &[], true, 0.05);
        assert_eq!(k.verdict, Verdict::NotMeasured);
        assert!(!k.verdict.is_regression());
    }

    fn entry(id: &str, profile: Profile, configs: Vec<(&str, f64)>) -> HistoryEntry {
        HistoryEntry {
            schema: HISTORY_SCHEMA,
            id: id.into(),
            date: id[..10].into(),
            started_at: "2026-11-20T00:00:00+00:00".into(),
            finished_at: "2026-11-20T00:10:00+00:00".into(),
            git_revision: "abc".into(),
            profile,
            backend: "flex".into(),
            device: "cpu".into(),
            configs: configs
                .into_iter()
                .map(|(name, step)| ConfigEntry {
                    study: "s".into(),
                    config: name.into(),
                    kind: ConfigKind::Training,
                    label: name.into(),
                    keys: vec![],
                    status: JobStatus::Ok,
                    reason: None,
                    samples: "steps".into(),
                    metrics: BTreeMap::from([(
                        Metric::StepTime.name().to_string(),
                        noisy(step, 0.01, 11),
                    )]),
                })
                .collect(),
            errors: vec![],
        }
    }

    #[test]
    fn changes_compare_with_the_latest_run_of_the_same_profile() {
        let history = vec![
            entry(
                "2026-11-20T000000Z-a",
                Profile::Smoke,
                vec![("x", 1.0), ("y", 1.0)],
            ),
            entry("2026-11-21T000000Z-b", Profile::Cpu, vec![("x", 5.0)]),
            entry("2026-11-22T000000Z-c", Profile::Smoke, vec![("x", 1.5)]),
            entry(
                "2026-11-23T000000Z-d",
                Profile::Smoke,
                vec![("x", 1.0), ("y", 1.0), ("z", 1.0)],
            ),
        ];
        let ch = changes(&history, 0.05);
        let step = |c: &ConfigChange| {
            c.metrics
                .iter()
                .find(|(m, _)| *m == Metric::StepTime)
                .unwrap()
                .1
                .verdict
        };
        // x: against c (1.5 -> 1.0), not the cpu run b; two earlier smoke nights are too few
        // to know the step time's night-to-night noise.
        assert_eq!(ch[0].against.as_deref(), Some("2026-11-22T000000Z-c"));
        assert_eq!(step(&ch[0]), Verdict::NotEnoughHistory);
        assert!(!Verdict::NotEnoughHistory.is_regression());
        // y: c lacks it, so a.
        assert_eq!(ch[1].against.as_deref(), Some("2026-11-20T000000Z-a"));
        assert_eq!(step(&ch[1]), Verdict::NotEnoughHistory);
        // z: never measured before.
        assert_eq!(
            (ch[2].against.as_deref(), step(&ch[2])),
            (None, Verdict::New)
        );
    }

    #[test]
    fn night_noise_is_robust_sigmas_of_the_night_to_night_changes_above_a_floor() {
        // Changes 10%, 9.09%, 10%: median 10%, threshold NOISE_SIGMAS x 1.4826 x 10%.
        let n = night_noise(&[1.0, 1.1, 1.0, 1.1], 0.05, false);
        assert!(
            (n.threshold - NOISE_SIGMAS * 1.4826 * 0.1).abs() < 1e-12,
            "{n:?}"
        );
        assert_eq!(n.nights, 4);
        // Steady nights: the floor.
        assert_eq!(night_noise(&[2.0, 2.0, 2.0], 0.05, false).threshold, 0.05);
        // One night or none: the floor alone.
        assert_eq!(night_noise(&[2.0], 0.05, false).threshold, 0.05);
        assert_eq!(night_noise(&[], 1e-3, true).describe(), "±0.1% (exact)");
        // One step in the history barely moves the estimate: 1% changes and one of 50% give
        // NOISE_SIGMAS x 1.4826 x 1%, not a threshold near 50%.
        let n = night_noise(&[1.0, 1.01, 1.0, 1.01, 1.515, 1.53], 0.0, false);
        assert!(
            (n.threshold - NOISE_SIGMAS * 1.4826 * 0.01).abs() < 1e-3,
            "{n:?}"
        );
    }

    /// A small deterministic generator (64-bit LCG, Knuth's MMIX constants) for the simulated
    /// histories below; uniform in [0, 1).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Nights of one configuration: a step time whose level moves up to ±`spread` from night to
    /// night (the machine, not the code), 11 steps 1% apart within a night, and an exact peak.
    fn simulated(
        rng: &mut Lcg,
        nights: usize,
        spread: f64,
        slowdown_last: f64,
    ) -> Vec<HistoryEntry> {
        (0..nights)
            .map(|i| {
                let mut level = 0.1 * (1.0 + spread * (2.0 * rng.next() - 1.0));
                if i + 1 == nights {
                    level *= slowdown_last;
                }
                let steps: Vec<f64> = (0..11).map(|j| level * (1.0 + 0.001 * j as f64)).collect();
                let mut e = entry(
                    &format!("2026-11-{:02}T000000Z-a", i + 1),
                    Profile::Smoke,
                    vec![],
                );
                e.configs.push(ConfigEntry {
                    study: "s".into(),
                    config: "x".into(),
                    kind: ConfigKind::Training,
                    label: "x".into(),
                    keys: vec![],
                    status: JobStatus::Ok,
                    reason: None,
                    samples: "steps".into(),
                    metrics: BTreeMap::from([
                        (Metric::StepTime.name().to_string(), steps),
                        (Metric::PeakAllocated.name().to_string(), vec![1e8]),
                    ]),
                });
                e
            })
            .collect()
    }

    fn flagged(history: &[HistoryEntry], metric: Metric) -> Option<Verdict> {
        let ch = changes(history, DEFAULT_NOISE);
        let k = &ch[0].metrics.iter().find(|(m, _)| *m == metric)?.1;
        matches!(k.verdict, Verdict::Regressed | Verdict::Improved).then_some(k.verdict)
    }

    #[test]
    fn a_a_nights_are_rarely_flagged_and_a_doubled_step_time_nearly_always() {
        // 400 simulated A/A histories of 5 to 12 nights whose step-time level moves up to ±10%
        // between nights (the machine, not the code): the last night is flagged in under 3% of
        // them (a per-comparison false-alarm rate; a simulation of 6,000 such histories gave
        // 1.7%, and 2.0% at ±20%). The same histories with the last night 2x slower are
        // flagged as regressed in at least 98% (the simulation: 99.4%).
        let mut rng = Lcg(20261125);
        let (mut false_flags, mut missed, mut cases) = (0, 0, 0);
        for case in 0..400 {
            let nights = 5 + case % 8;
            let seed = rng.0;
            let aa = simulated(&mut rng, nights, 0.1, 1.0);
            if flagged(&aa, Metric::StepTime).is_some() {
                false_flags += 1;
            }
            // The deterministic peak never moves: never flagged.
            assert_eq!(flagged(&aa, Metric::PeakAllocated), None);
            let ab = simulated(&mut Lcg(seed), nights, 0.1, 2.0);
            if flagged(&ab, Metric::StepTime) != Some(Verdict::Regressed) {
                missed += 1;
            }
            cases += 1;
        }
        assert!(
            false_flags * 100 < 3 * cases,
            "{false_flags} of {cases} A/A histories flagged"
        );
        assert!(
            missed * 100 <= 2 * cases,
            "a 2x slowdown went unflagged {missed} of {cases} times"
        );
    }

    #[test]
    fn deterministic_metrics_are_compared_exactly_from_the_second_night() {
        let mut rng = Lcg(7);
        let mut h = simulated(&mut rng, 2, 0.2, 1.0);
        assert_eq!(flagged(&h, Metric::PeakAllocated), None);
        // 1% more memory on the second night: regressed, with one earlier night only.
        h[1].configs[0]
            .metrics
            .insert(Metric::PeakAllocated.name().to_string(), vec![1.01e8]);
        assert_eq!(flagged(&h, Metric::PeakAllocated), Some(Verdict::Regressed));
        let k = changes(&h, DEFAULT_NOISE)[0].metrics[0].1.clone();
        assert_eq!(k.noise.unwrap().describe(), "±0.1% (exact)");
        // The step time of the same two nights: not enough history, whatever it did.
        let step = changes(&h, DEFAULT_NOISE)[0]
            .metrics
            .iter()
            .find(|(m, _)| *m == Metric::StepTime)
            .unwrap()
            .1
            .verdict;
        assert_eq!(step, Verdict::NotEnoughHistory);
    }

    #[test]
    fn history_refuses_other_schemas_and_duplicate_ids() {
        let dir = tempfile::tempdir().unwrap();
        let e = entry("2026-11-20T000000Z-a", Profile::Smoke, vec![("x", 1.0)]);
        append(dir.path(), &e).unwrap();
        assert!(append(dir.path(), &e).is_err());
        assert_eq!(load(dir.path()).unwrap().entries, vec![e.clone()]);
        // Another schema and a truncated file: skipped and named, the good entry still read.
        let mut other = e.clone();
        other.id = "2026-11-21T000000Z-b".into();
        other.schema = 99;
        append(dir.path(), &other).unwrap();
        std::fs::write(
            dir.path().join("2026-11-22T000000Z-c.json"),
            "{\"schema\": 1, \"id",
        )
        .unwrap();
        let h = load(dir.path()).unwrap();
        assert_eq!(h.entries, vec![e]);
        let named: Vec<String> = h
            .damaged
            .iter()
            .map(|(p, why)| format!("{} {why}", p.file_name().unwrap().to_string_lossy()))
            .collect();
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named[0].starts_with("2026-11-21T000000Z-b.json") && named[0].contains("schema"));
        assert!(
            named[1].starts_with("2026-11-22T000000Z-c.json") && named[1].contains("malformed")
        );
    }

    #[test]
    fn the_history_exports_as_one_long_table_in_csv_and_parquet() {
        use polars::prelude::*;
        let dir = tempfile::tempdir().unwrap();
        let h = dir.path().join("history");
        append(
            &h,
            &entry(
                "2026-11-20T000000Z-a",
                Profile::Smoke,
                vec![("x", 1.0), ("y", 2.0)],
            ),
        )
        .unwrap();
        append(
            &h,
            &entry("2026-11-21T000000Z-b", Profile::Smoke, vec![("x", 1.5)]),
        )
        .unwrap();
        std::fs::write(h.join("2026-11-22T000000Z-c.json"), "not json").unwrap();
        let csv = dir.path().join("out/history.csv");
        let damaged = export(&h, &csv).unwrap();
        assert_eq!(damaged.len(), 1);
        let text = std::fs::read_to_string(&csv).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "run,date,revision,profile,backend,device,study,config,status,metric,samples,n,median,lo,hi"
        );
        // One row per run, configuration and metric (one metric each here): 3 rows.
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[3].starts_with("2026-11-21T000000Z-b,2026-11-21,abc,smoke,flex,cpu,s,x,ok,step_time_s,steps,11,1.5"), "{}", lines[3]);
        let parquet = dir.path().join("history.parquet");
        export(&h, &parquet).unwrap();
        let df = ParquetReader::new(std::fs::File::open(&parquet).unwrap())
            .finish()
            .unwrap();
        assert_eq!(df.height(), 3);
        let medians: Vec<f64> = df
            .column("median")
            .unwrap()
            .f64()
            .unwrap()
            .into_no_null_iter()
            .collect();
        assert_eq!(medians, vec![1.0, 2.0, 1.5]);
    }

    #[test]
    fn concurrent_writers_keep_every_entry_and_one_id_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        // Two writers (threads of one process: the same pid, the harder case for temporary
        // names), 40 entries each, at once.
        std::thread::scope(|s| {
            for w in 0..2 {
                let dir = dir.path();
                s.spawn(move || {
                    for i in 0..40 {
                        let id = format!("2026-11-{:02}T{w}{i:05}Z-w", 1 + i % 28);
                        append(dir, &entry(&id, Profile::Smoke, vec![("x", 1.0)])).unwrap();
                    }
                });
            }
        });
        let h = load(dir.path()).unwrap();
        assert_eq!((h.entries.len(), h.damaged.len()), (80, 0));
        // One id from eight writers at once: exactly one entry, seven clear refusals.
        let e = entry("2026-11-30T000000Z-same", Profile::Smoke, vec![("x", 1.0)]);
        let results: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| append(dir.path(), &e).is_ok()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results.iter().filter(|ok| **ok).count(), 1, "{results:?}");
        let h = load(dir.path()).unwrap();
        assert_eq!((h.entries.len(), h.damaged.len()), (81, 0));
        // No temporary file is left behind.
        let hidden = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|f| f.file_name().to_string_lossy().starts_with('.'))
            .count();
        assert_eq!(hidden, 0);
    }

    /// An in-process study's numbers: one entry per case, its metrics by kind; a schedule's
    /// cost is compared as deterministic (a 1% worse schedule is a regression at once), a
    /// solve time only once enough nights measured it.
    #[test]
    fn in_process_cases_are_tracked_and_judged_by_kind() {
        use crate::demos::{Tracked, TrackedKind};
        let night = |id: &str, cost: f64, time: f64| {
            let t = |kind, value| Tracked {
                case: "VGG16 at budget 0.9".into(),
                kind,
                value,
            };
            let mut e = entry(id, Profile::Smoke, vec![("control", 0.1)]);
            e.configs.extend(tracked_entries(
                "checkmate",
                &[
                    t(TrackedKind::SolveTime, time),
                    t(TrackedKind::ScheduleCost, cost),
                ],
            ));
            e
        };
        let first = night("2026-11-20T000000Z-a", 1000.0, 0.50);
        let cases: Vec<_> = first
            .configs
            .iter()
            .filter(|c| c.kind == ConfigKind::InProcess)
            .collect();
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0].study, "checkmate");
        assert_eq!(cases[0].metrics["schedule_cost"], vec![1000.0]);
        assert_eq!(cases[0].metrics["solve_time_s"], vec![0.50]);
        // The same cost and a 30% slower solve: cost within noise, time not judged yet.
        let h = vec![first.clone(), night("2026-11-21T000000Z-a", 1000.0, 0.65)];
        let c = changes(&h, DEFAULT_NOISE);
        let case = c.iter().find(|c| c.kind == ConfigKind::InProcess).unwrap();
        let verdicts: Vec<(Metric, Verdict)> =
            case.metrics.iter().map(|(m, k)| (*m, k.verdict)).collect();
        assert_eq!(
            verdicts,
            vec![
                (Metric::SolveTime, Verdict::NotEnoughHistory),
                (Metric::ScheduleCost, Verdict::WithinNoise)
            ]
        );
        // A 1% costlier schedule: regressed, and only that.
        let h = vec![first, night("2026-11-21T000000Z-b", 1010.0, 0.50)];
        let c = changes(&h, DEFAULT_NOISE);
        let flagged: Vec<String> = c
            .iter()
            .flat_map(|c| c.metrics.iter().map(move |(m, k)| (c, m, k)))
            .filter(|(_, _, k)| k.verdict.is_regression())
            .map(|(c, m, _)| format!("{} {}", c.config, m.name()))
            .collect();
        assert_eq!(flagged, vec!["VGG16 at budget 0.9 schedule_cost"]);
    }
}
