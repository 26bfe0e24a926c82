//! Change detection: a metric's night-to-night change classified against its noise, as
//! criterion.rs classifies a benchmark's change.

use super::*;

/// How a metric moved since the last run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeVerdict {
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
    /// A timing of a run whose machine was loaded (other processes kept CPUs busy, or the
    /// hypervisor stole time: [`memwall_core::measure::MachineLoad::loaded`]): no verdict is drawn
    /// from it.
    Noisy,
    /// Flagged as regressed or improved, then measured again at once ([`super::confirm`]):
    /// the reruns did not show the change, so it is not reported.
    NotConfirmed,
    /// A configuration under a memory limit whose peak, in the run that fit, lies within the
    /// peak's spread of that limit: it fits or not by chance, so finishing in one run and not in
    /// the other is neither a regression nor a missing measurement.
    AtLimit,
}

impl ChangeVerdict {
    /// The word the page prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeVerdict::Regressed => "regressed",
            ChangeVerdict::Missing => "missing",
            ChangeVerdict::Improved => "improved",
            ChangeVerdict::WithinNoise => "within noise",
            ChangeVerdict::NotEnoughHistory => "not enough history",
            ChangeVerdict::New => "new",
            ChangeVerdict::NotMeasured => "not measured",
            ChangeVerdict::Noisy => "noisy (under load)",
            ChangeVerdict::NotConfirmed => "not confirmed by rerun",
            ChangeVerdict::AtLimit => "at the limit",
        }
    }

    /// Whether `--fail-on-regression` fails on it (a regression, or a configuration that
    /// finished last time and not now).
    pub fn is_regression(self) -> bool {
        matches!(self, ChangeVerdict::Regressed | ChangeVerdict::Missing)
    }
}

/// The change of one metric: the two estimates, the relative change with its interval, the
/// verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Classified {
    /// The verdict.
    pub verdict: ChangeVerdict,
    /// The last run's median and interval.
    pub prev: Option<Estimate>,
    /// This run's median and interval.
    pub cur: Option<Estimate>,
    /// Relative change of the medians (`cur / prev - 1`) with the conservative interval of the
    /// ratio ([`stats::ratio`]) minus one; `None` when a side is missing or the last median is 0.
    pub change: Option<Estimate>,
    /// The noise the change was judged against (set by [`changes`]; `None` from [`classify`]).
    pub noise: Option<Noise>,
    /// The load this run's timing was taken under, when it makes the verdict
    /// [`ChangeVerdict::Noisy`].
    pub under_load: Option<memwall_core::measure::MachineLoad>,
    /// The verdict the change gets before it is confirmed (set by [`changes`]): its own
    /// verdict where it was judged, and for a timing taken under load the verdict against the
    /// last run at the noise floor. A regressed or improved one is measured again by
    /// [`super::confirm`].
    pub suspected: Option<ChangeVerdict>,
    /// The reruns that confirmed the change or did not ([`ChangeVerdict::NotConfirmed`]).
    pub confirmation: Option<Confirmation>,
    /// For [`ChangeVerdict::AtLimit`]: the peak of the run that fit and the limit, bytes.
    pub at_limit: Option<(f64, u64)>,
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
        (None, Some(_)) => return verdict_only(ChangeVerdict::New, p, c),
        (Some(_), None) => return verdict_only(ChangeVerdict::Missing, p, c),
        (None, None) => return verdict_only(ChangeVerdict::NotMeasured, p, c),
    };
    if pe.median == 0.0 && ce.median == 0.0 {
        return verdict_only(ChangeVerdict::WithinNoise, p, c);
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
        ChangeVerdict::Regressed
    } else if better_hi < -noise {
        ChangeVerdict::Improved
    } else {
        ChangeVerdict::WithinNoise
    };
    Classified {
        verdict,
        prev: p,
        cur: c,
        change,
        noise: None,
        under_load: None,
        suspected: None,
        confirmation: None,
        at_limit: None,
    }
}

fn verdict_only(
    verdict: ChangeVerdict,
    prev: Option<Estimate>,
    cur: Option<Estimate>,
) -> Classified {
    Classified {
        verdict,
        prev,
        cur,
        change: None,
        noise: None,
        under_load: None,
        suspected: None,
        confirmation: None,
        at_limit: None,
    }
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
/// at least [`MIN_NIGHTS`] of them ([`ChangeVerdict::NotEnoughHistory`] otherwise). The verdict is
/// [`classify`]'s with that threshold. A timing is compared with, and its noise estimated from,
/// the earlier nights whose machine was not loaded; one taken under load is
/// [`ChangeVerdict::Noisy`].
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
        // An in-process case, or a search's field (the largest value and the peak at it),
        // tracks only some metrics: those this run or the last has.
        let present = |list: &[Metric]| -> Vec<Metric> {
            list.iter()
                .copied()
                .filter(|m| {
                    c.metrics.contains_key(m.name())
                        || prev.is_some_and(|(_, p)| p.metrics.contains_key(m.name()))
                })
                .collect()
        };
        let tracked: Vec<Metric> = match c.kind {
            ConfigKind::Training => Metric::ALL.to_vec(),
            ConfigKind::Search => present(&Metric::SEARCH),
            ConfigKind::InProcess => present(&Metric::IN_PROCESS),
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
    let exact = m.deterministic();
    let every_night = before_c;
    // A timing is compared with, and its noise estimated from, the nights whose machine was
    // not loaded: a loaded night says nothing of the code (nor of the noise between nights).
    let quiet: Vec<(&HistoryEntry, &ConfigEntry)> = if exact {
        before_c.to_vec()
    } else {
        before_c
            .iter()
            .filter(|(_, p)| !p.loaded())
            .copied()
            .collect()
    };
    let measured_before = !before_c.is_empty();
    let before_c = &quiet[..];
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
        ChangeVerdict::Regressed | ChangeVerdict::Improved | ChangeVerdict::WithinNoise
    );
    let measured_now = !samples(c).is_empty();
    k.suspected = Some(k.verdict);
    if !exact && measured_now && c.loaded() {
        // Taken under load: no verdict, whatever the history. Whether it is measured again
        // beside the previous binary, which shares the load, is decided by the median change
        // of the faster halves against the last run's (loaded or not) beyond the noise floor:
        // under load the samples' own intervals are too wide to say more, and the reruns are
        // the judge.
        let last = every_night
            .first()
            .map(|(_, p)| samples(p))
            .unwrap_or_default();
        // The faster halves of both (the load only adds time: [`faster_half`]), so that a
        // slowdown is suspected even when last night carried a heavier load than tonight.
        let lib = m.lower_is_better();
        let moved = classify(
            &faster_half(&last, lib),
            &faster_half(&samples(c), lib),
            lib,
            noise,
        )
        .change;
        k.suspected = Some(match moved.map(|d| d.median) {
            Some(d) if d.abs() > noise => {
                if (d > 0.0) == m.lower_is_better() {
                    ChangeVerdict::Regressed
                } else {
                    ChangeVerdict::Improved
                }
            }
            _ => ChangeVerdict::WithinNoise,
        });
        k.verdict = ChangeVerdict::Noisy;
        k.under_load = c.load;
    } else if !exact && judged && nights.len() < MIN_NIGHTS {
        k.verdict = ChangeVerdict::NotEnoughHistory;
        k.suspected = Some(k.verdict);
    } else if !exact && k.verdict == ChangeVerdict::New && measured_before {
        // Measured before, but only on loaded nights.
        k.verdict = ChangeVerdict::NotEnoughHistory;
        k.suspected = Some(k.verdict);
    }
    if let Some(conf) = c.confirmations.iter().find(|x| x.metric == m.name()) {
        apply_confirmation(&mut k, conf, m);
    }
    if let Some(at) = at_limit(c, every_night) {
        k.verdict = ChangeVerdict::AtLimit;
        k.at_limit = Some(at);
    }
    if let Some(at) = search_at_limit(c, every_night, k.verdict) {
        k.verdict = ChangeVerdict::AtLimit;
        k.at_limit = Some(at);
    }
    k
}

/// Whether a field of the largest-input search whose `verdict` would be a change (regressed,
/// improved, missing) is *at the limit* against the latest of `every_night`: the two nights'
/// boundary bands ([`SearchBoundary::band`]: from the largest value that fits in every run to
/// the largest that fits in some) overlap, so the boundary moved among values that fit by
/// chance. Returns the peak at tonight's largest value (or last night's) and the limit.
fn search_at_limit(
    c: &ConfigEntry,
    every_night: &[(&HistoryEntry, &ConfigEntry)],
    verdict: ChangeVerdict,
) -> Option<(f64, u64)> {
    if !matches!(
        verdict,
        ChangeVerdict::Regressed | ChangeVerdict::Improved | ChangeVerdict::Missing
    ) {
        return None;
    }
    let limit = c.memory_limit_bytes?;
    let (_, last) = every_night.first()?;
    let (now, then) = (c.boundary.as_ref()?, last.boundary.as_ref()?);
    let clean = now.at_limit.is_empty() && then.at_limit.is_empty();
    let ((a0, a1), (b0, b1)) = (now.band()?, then.band()?);
    if clean || a0 > b1 || b0 > a1 {
        return None;
    }
    let peak = |e: &ConfigEntry| {
        e.metrics
            .get(Metric::PeakAllocated.name())
            .and_then(|v| v.iter().copied().reduce(f64::max))
    };
    Some((peak(c).or_else(|| peak(last))?, limit))
}

/// The verdict once the change was measured again ([`super::confirm`]): a suspected
/// regression or improvement that the reruns show in the same direction is reported as such
/// (a timing under load included: both sides of the reruns shared the load, and its
/// suspected direction is that of the faster halves, [`faster_half`]); one they do not show
/// is [`ChangeVerdict::NotConfirmed`] (a noisy timing stays noisy). Both must agree: the
/// reruns of the two binaries alone can differ by more than the floor under load.
fn apply_confirmation(k: &mut Classified, conf: &Confirmation, m: Metric) {
    if conf.metric == STATUS_METRIC {
        return;
    }
    let suspected = k.suspected;
    let shown = conf.classified(m.lower_is_better()).verdict;
    match suspected {
        Some(v @ (ChangeVerdict::Regressed | ChangeVerdict::Improved)) if shown == v => {
            k.verdict = v;
        }
        _ if matches!(
            k.verdict,
            ChangeVerdict::Regressed | ChangeVerdict::Improved
        ) =>
        {
            k.verdict = ChangeVerdict::NotConfirmed;
        }
        _ => {}
    }
    k.confirmation = Some(conf.clone());
}

/// The name a [`Confirmation`] of a configuration's status (finished or out of memory) carries
/// in place of a metric's.
pub const STATUS_METRIC: &str = "status";

/// [`Confirmation::against`] where no binary of the last night was kept: the reruns of
/// tonight's binary are compared with the last run's stored samples.
pub const LAST_RUN: &str = "last run";

/// The relative spread of configuration `c`'s peak allocated bytes under `limit`: the exact
/// tolerance (at least [`EXACT_SLACK_BYTES`] of the limit), widened to the range
/// `(max - min) / max` the peaks of the earlier nights that fit (`every_night`, latest first,
/// the last [`NOISE_WINDOW`]) and of tonight's reruns showed.
pub fn peak_spread(
    c: &ConfigEntry,
    every_night: &[(&HistoryEntry, &ConfigEntry)],
    limit: u64,
) -> f64 {
    let name = Metric::PeakAllocated.name();
    let mut peaks: Vec<f64> = every_night
        .iter()
        .take(NOISE_WINDOW)
        .filter_map(|(_, p)| p.metrics.get(name))
        .flatten()
        .copied()
        .collect();
    peaks.extend(c.metrics.get(name).into_iter().flatten().copied());
    for conf in &c.confirmations {
        if conf.metric == STATUS_METRIC || conf.metric == name {
            peaks.extend(conf.current.iter().chain(&conf.previous).copied());
        }
    }
    memwall_core::measure::peak_spread(&peaks, limit)
}

/// Whether configuration `c` is *at the limit* against the latest of `every_night`: it ran
/// under a memory limit, finished in one of the two runs and ran out of memory in the other,
/// and the peak of the run that fit lies within [`peak_spread`] of the limit, or tonight's
/// reruns ([`super::confirm`]) fit in some runs and not in others. Returns the peak of the run
/// that fit and the limit.
fn at_limit(c: &ConfigEntry, every_night: &[(&HistoryEntry, &ConfigEntry)]) -> Option<(f64, u64)> {
    let limit = c.memory_limit_bytes?;
    let (_, last) = every_night.first()?;
    let peak_of = |e: &ConfigEntry| {
        e.metrics
            .get(Metric::PeakAllocated.name())
            .and_then(|v| v.iter().copied().reduce(f64::max))
    };
    let peak = match (c.status, last.status) {
        (JobStatus::OutOfMemory, JobStatus::Ok) => peak_of(last)?,
        (JobStatus::Ok, JobStatus::OutOfMemory) => peak_of(c)?,
        _ => return None,
    };
    if let Some(conf) = c.confirmations.iter().find(|x| x.metric == STATUS_METRIC) {
        // Tonight's reruns fit in some runs (their peaks are `current`): the same code fits
        // or not by chance.
        if let Some(p) = conf.current.iter().copied().reduce(f64::max) {
            return Some((p, limit));
        }
        // None fit, and neither did the previous night's binary, which fit last night.
        if conf.against != LAST_RUN && conf.previous.is_empty() {
            return Some((peak, limit));
        }
    }
    let spread = peak_spread(c, every_night, limit);
    (peak >= limit as f64 * (1.0 - spread)).then_some((peak, limit))
}
