//! The history store: one entry per nightly run (`history/<date>T<time>Z-<revision>.json`),
//! its configurations and metrics, appended and read back.

use super::*;

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
    /// Wall seconds the confirmation reruns took ([`super::confirm`]); absent where nothing
    /// was rerun (and in entries written before the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_s: Option<f64>,
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
    /// One field of one configuration of the largest-input search
    /// (`memwall_studies::largest_input`): the largest value that fits the limit in every run
    /// and the peak at it ([`Metric::SEARCH`]), with the boundary's band ([`SearchBoundary`]).
    Search,
}

/// The boundary of a largest-input search of one night ([`ConfigKind::Search`]): the field,
/// the largest value that fitted in every run of it and the largest value at the limit
/// (`memwall_studies::largest_input::Row::at_limit`), so a boundary that moved within a band
/// of values that fit by chance reads "at the limit", not as a regression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchBoundary {
    /// The field searched (`batch`, `seq_len`).
    pub field: String,
    /// The largest value that fitted in every run (`None`: none did).
    pub largest: Option<usize>,
    /// The values at the limit, in words ([`memwall_studies::largest_input::AtLimit::describe`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_limit: Vec<String>,
    /// The largest value at the limit (`None`: the boundary is clean).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_limit_up_to: Option<usize>,
}

impl SearchBoundary {
    /// The band `[lowest, highest]` the boundary lies in this night: the largest value that
    /// fitted in every run up to the largest value at the limit.
    pub fn band(&self) -> Option<(usize, usize)> {
        let lo = self.largest?;
        Some((lo, self.at_limit_up_to.unwrap_or(lo).max(lo)))
    }
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
    /// The heaviest machine load one of its records ran under (other processes' busy CPUs);
    /// absent where none was recorded (in-process cases, entries written before the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<memwall_core::measure::MachineLoad>,
    /// The job's memory limit, bytes, where it ran under one (the largest-input search, a
    /// `memory_limit` configuration): a peak within its spread of the limit is *at the limit*
    /// ([`ChangeVerdict::AtLimit`]), not a status flip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// The changes of this configuration measured again at once, interleaved with the previous
    /// night's binary where it was kept ([`super::confirm`]); empty when nothing was flagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmations: Vec<Confirmation>,
    /// For a field of the largest-input search ([`ConfigKind::Search`]): its boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boundary: Option<SearchBoundary>,
}

/// A flagged change of one metric measured again before it is reported (issue 56): `runs`
/// reruns of tonight's binary, each beside a rerun of the previous night's binary where one is
/// kept (`history/bin/`; the two in alternating order), all in a row, so both sides share the
/// machine's state, its load included. The change is reported only if the reruns show it too,
/// a timing's in every round ([`Confirmation::rounds`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    /// The metric ([`Metric::name`]).
    pub metric: String,
    /// What the reruns of tonight's binary were compared with: `previous binary <revision>`
    /// (interleaved reruns of the binary kept from the last night), or `last run` (its stored
    /// samples, where no binary was kept).
    pub against: String,
    /// Reruns of each side.
    pub runs: usize,
    /// Samples of tonight's binary's reruns, pooled over the reruns (the metric's unit).
    pub current: Vec<f64>,
    /// Samples of the previous binary's reruns, pooled; the last run's samples where no binary
    /// was kept.
    pub previous: Vec<f64>,
    /// The relative threshold the reruns' change was judged against: the timings' noise floor,
    /// or for a deterministic metric its exact tolerance widened to the spread the reruns of
    /// one binary showed.
    pub threshold: f64,
    /// The reruns' own verdict ([`Confirmation::classified`]): regressed, improved or within
    /// noise.
    pub verdict: ChangeVerdict,
    /// Whether the reruns are judged on the faster half of each side's samples
    /// ([`faster_half`]): timings rerun under load beside the last night's binary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub faster_half: bool,
    /// The change each round of interleaved reruns showed: `current / previous - 1` of the
    /// medians (of the faster halves where [`Confirmation::faster_half`]) of tonight's rerun
    /// and the previous binary's rerun beside it, one value per round. Empty where no binary
    /// was kept (and in entries written before the field). A timing's change is confirmed only
    /// if every round shows it beyond the threshold, in the direction of the pooled change
    /// ([`Confirmation::classified`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
}

impl Confirmation {
    /// The reruns' change as [`classify`] gives it (`current / previous - 1` with its
    /// interval), of the faster half of each side's samples where [`Confirmation::faster_half`].
    ///
    /// Where the reruns were interleaved in rounds ([`Confirmation::rounds`]), a regression or
    /// an improvement of the pooled samples stands only if every round shows it beyond the
    /// threshold in the same direction; otherwise the verdict is within noise. The pooled
    /// interval treats every step as independent, but the steps of one rerun share that
    /// process's state (its place in the machine's load, its allocator, its caches): on a
    /// loaded 2-core CI machine the reruns of one binary read +4.6%, +17.1% and +33.2% round by
    /// round, a pooled change whose interval excluded 5%, while every round of a planted 3x
    /// slowdown showed more than +200%.
    /// The rounds are the paired comparison of an A/B benchmark run in alternating order
    /// (Kalibera and Jones, "Rigorous benchmarking in reasonable time", ISMM 2013: repeat at
    /// the level whose variation dominates, here the process, not the iteration).
    pub fn classified(&self, lower_is_better: bool) -> Classified {
        let mut k = if self.faster_half {
            classify(
                &faster_half(&self.previous, lower_is_better),
                &faster_half(&self.current, lower_is_better),
                lower_is_better,
                self.threshold,
            )
        } else {
            classify(
                &self.previous,
                &self.current,
                lower_is_better,
                self.threshold,
            )
        };
        // Each round's change, signed so that worse is positive, past the threshold.
        let shows = |d: &f64| {
            let worse = if lower_is_better { *d } else { -*d };
            match k.verdict {
                ChangeVerdict::Regressed => worse > self.threshold,
                ChangeVerdict::Improved => worse < -self.threshold,
                _ => true,
            }
        };
        if !self.rounds.iter().all(shows) {
            k.verdict = ChangeVerdict::WithinNoise;
        }
        k
    }

    /// The change of one round of interleaved reruns ([`Confirmation::rounds`]):
    /// `current / previous - 1` of the medians of the two reruns' samples (of their faster
    /// halves where `faster`); `None` where a side has no sample or a zero median.
    pub fn round_change(
        previous: &[f64],
        current: &[f64],
        lower_is_better: bool,
        faster: bool,
    ) -> Option<f64> {
        let pick = |v: &[f64]| {
            if faster {
                faster_half(v, lower_is_better)
            } else {
                v.iter().copied().filter(|x| x.is_finite()).collect()
            }
        };
        let p = stats::median_interval(&pick(previous), stats::LEVEL)?.median;
        let c = stats::median_interval(&pick(current), stats::LEVEL)?.median;
        (p != 0.0).then(|| c / p - 1.0)
    }
}

/// The better half of timing samples (`ceil(n / 2)` of them: the smallest where lower is
/// better, the largest for a throughput), the estimate of a timing taken under load: another
/// process only ever adds time to a step, so the fastest steps are those it disturbed least,
/// and their median (the 25th percentile of all) moves with the code, not with the load (the
/// reasoning of Chen and Revels, "Robust benchmarking in noisy environments", arXiv:1608.04295,
/// 2016, Section 3, who take the minimum; the faster half keeps an interval).
pub fn faster_half(samples: &[f64], lower_is_better: bool) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    if !lower_is_better {
        v.reverse();
    }
    v.truncate(v.len().div_ceil(2));
    v
}

impl ConfigEntry {
    /// Whether its timings were taken under load ([`memwall_core::measure::MachineLoad::loaded`]).
    pub fn loaded(&self) -> bool {
        self.load.is_some_and(|l| l.loaded())
    }
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
    /// The largest value of a searched field that fits the memory limit in every run
    /// (sequences or tokens; [`ConfigKind::Search`]).
    LargestInput,
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

    /// Every metric an in-process study can track ([`crate::studies::InProcessStudy::tracked`]).
    pub const IN_PROCESS: [Metric; 3] =
        [Metric::SolveTime, Metric::ScheduleCost, Metric::KernelTime];

    /// The metrics of a field of the largest-input search ([`ConfigKind::Search`]): the largest
    /// value and the peak allocated at it.
    pub const SEARCH: [Metric; 2] = [Metric::LargestInput, Metric::PeakAllocated];

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
            Metric::LargestInput => "largest_input",
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
            Metric::LargestInput => "Largest input that fits (sequences or tokens)",
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
        !matches!(self, Metric::TokensPerS | Metric::LargestInput)
    }

    /// `v` (in the history's unit) in the unit of [`Metric::title`].
    pub fn display(self, v: f64) -> f64 {
        match self {
            Metric::PeakAllocated | Metric::PeakReserved => v / (1024.0 * 1024.0),
            Metric::StepTime => v * 1e3,
            Metric::KernelTime => v * 1e6,
            Metric::TokensPerS
            | Metric::EvalLoss
            | Metric::SolveTime
            | Metric::ScheduleCost
            | Metric::LargestInput => v,
        }
    }

    pub(crate) fn format(self, e: &Estimate) -> String {
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

/// The history entry's configurations from the records of one run: records grouped by (study,
/// configuration), in the order given.
pub fn config_entries(records: &[JobRecord]) -> Vec<ConfigEntry> {
    let mut groups: Vec<Vec<&JobRecord>> = Vec::new();
    let mut searches: Vec<Vec<&JobRecord>> = Vec::new();
    for r in records {
        if r.spec.memory_limit_bytes.is_some() && is_search_probe(r, records) {
            match searches
                .iter_mut()
                .find(|g| g[0].spec.study == r.spec.study && g[0].spec.config == r.spec.config)
            {
                Some(g) => g.push(r),
                None => searches.push(vec![r]),
            }
            continue;
        }
        match groups
            .iter_mut()
            .find(|g| g[0].spec.study == r.spec.study && g[0].spec.config == r.spec.config)
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    let mut out: Vec<ConfigEntry> = groups.iter().map(|g| config_entry(g)).collect();
    for g in &searches {
        out.extend(search_entries(g));
    }
    out
}

/// Whether `r` is a probe of a largest-input search: a job under a memory limit whose
/// configuration ran at more than one batch size or sequence length in `records`.
fn is_search_probe(r: &JobRecord, records: &[JobRecord]) -> bool {
    records.iter().any(|o| {
        o.spec.study == r.spec.study
            && o.spec.config == r.spec.config
            && o.spec.memory_limit_bytes == r.spec.memory_limit_bytes
            && (o.spec.model.batch, o.spec.model.seq_len)
                != (r.spec.model.batch, r.spec.model.seq_len)
    })
}

/// The most common value of `f` over `group` (the smallest of equals).
fn mode(group: &[&JobRecord], f: impl Fn(&JobRecord) -> usize) -> usize {
    let mut values: Vec<usize> = group.iter().map(|r| f(r)).collect();
    values.sort_unstable();
    let mut best = (0, values.first().copied().unwrap_or(0));
    let mut i = 0;
    while i < values.len() {
        let n = values[i..].iter().take_while(|v| **v == values[i]).count();
        if n > best.0 {
            best = (n, values[i]);
        }
        i += n;
    }
    best.1
}

/// The entries of one configuration's largest-input search (its probes, `group`): one per
/// searched field, named `<config>: largest <field>`. A field's probes hold the other field
/// at the profile's value, the one most of the configuration's probes share; a field is
/// searched when its probes reach more than one value. Each entry's samples are the largest
/// value that fitted in every run ([`Metric::LargestInput`]) and the peaks of its runs; its
/// boundary, the band in which the same job fits or not by chance
/// (`memwall_studies::largest_input::boundary`, the rule of "at the limit").
fn search_entries(group: &[&JobRecord]) -> Vec<ConfigEntry> {
    use memwall_studies::largest_input::{boundary, Dim};
    let first = group[0];
    let limit = first.spec.memory_limit_bytes.unwrap_or(u64::MAX);
    let (batch0, seq0) = (
        mode(group, |r| r.spec.model.batch),
        mode(group, |r| r.spec.model.seq_len),
    );
    let mut out = Vec::new();
    for dim in [Dim::Batch, Dim::SeqLen] {
        let runs: Vec<(usize, &JobRecord)> = group
            .iter()
            .filter(|r| match dim {
                Dim::Batch => r.spec.model.seq_len == seq0,
                Dim::SeqLen => r.spec.model.batch == batch0,
            })
            .map(|r| (dim.of(&r.spec.model), *r))
            .collect();
        let mut values: Vec<usize> = runs.iter().map(|(v, _)| *v).collect();
        values.sort_unstable();
        values.dedup();
        if values.len() < 2 {
            continue;
        }
        let (largest, _, at_limit) = boundary(&runs, limit);
        let mut metrics = BTreeMap::new();
        if let Some((v, _)) = largest {
            metrics.insert(Metric::LargestInput.name().to_string(), vec![v as f64]);
            let peaks: Vec<f64> = runs
                .iter()
                .filter(|(x, r)| *x == v && r.status == JobStatus::Ok)
                .filter_map(|(_, r)| r.summary.map(|s| s.peak_allocated_bytes as f64))
                .collect();
            metrics.insert(Metric::PeakAllocated.name().to_string(), peaks);
        }
        let field = dim.as_str();
        out.push(ConfigEntry {
            study: first.spec.study.clone(),
            config: format!("{}: largest {field}", first.spec.config),
            kind: ConfigKind::Search,
            label: format!("{}, largest {field}", first.spec.label),
            keys: runs.iter().map(|(_, r)| r.key.clone()).collect(),
            status: if largest.is_some() {
                JobStatus::Ok
            } else {
                JobStatus::OutOfMemory
            },
            reason: largest
                .is_none()
                .then(|| format!("no {field} fits under {limit} bytes")),
            samples: "search".into(),
            metrics,
            load: runs
                .iter()
                .filter_map(|(_, r)| r.load)
                .max_by(|a, b| a.other_busy_cpus.total_cmp(&b.other_busy_cpus)),
            memory_limit_bytes: Some(limit),
            confirmations: Vec::new(),
            boundary: Some(SearchBoundary {
                field: field.into(),
                largest: largest.map(|(v, _)| v),
                at_limit_up_to: at_limit.iter().map(|a| a.value).max(),
                at_limit: at_limit.iter().map(|a| a.describe()).collect(),
            }),
        });
    }
    out
}

fn config_entry(group: &[&JobRecord]) -> ConfigEntry {
    let first = group[0];
    let not_ok = group.iter().find(|r| r.status != JobStatus::Ok);
    let mut metrics = BTreeMap::new();
    let repeats = group.len() >= 2;
    if not_ok.is_none() {
        let summaries: Vec<_> = group.iter().filter_map(|r| r.summary).collect();
        let per_repeat =
            |f: &dyn Fn(&record::Summary) -> f64| -> Vec<f64> { summaries.iter().map(f).collect() };
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
        load: group
            .iter()
            .filter_map(|r| r.load)
            .max_by(|a, b| a.other_busy_cpus.total_cmp(&b.other_busy_cpus)),
        memory_limit_bytes: first.spec.memory_limit_bytes,
        confirmations: Vec::new(),
        boundary: None,
    }
}

/// The history entry's configurations of an in-process study from the numbers it tracked
/// ([`crate::studies::InProcessStudy::tracked`]): one per case, in the order given, each with one
/// sample per metric (`samples`: "single"), and the machine's load while the study ran, `load`.
pub fn tracked_entries(
    study: &str,
    tracked: &[Tracked],
    load: Option<memwall_core::measure::MachineLoad>,
) -> Vec<ConfigEntry> {
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
                    load,
                    memory_limit_bytes: None,
                    boundary: None,
                    confirmations: Vec::new(),
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
        let problem = match record::parse_json::<HistoryEntry>(&text) {
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
