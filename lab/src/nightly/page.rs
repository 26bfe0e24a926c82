//! The nightly page (`reports/nightly/`): the change since the last run per configuration and
//! metric, the history table and figures, rendered from the history store only.

use super::*;

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
        measured_date: String::new(),
        measured_on: String::new(),
    };
    let page_dir = paths.reports.join("nightly");
    let rendered = report::render(&doc, &paths.templates, &page_dir)?;
    let summary_path = page_dir.join("summary.md");
    let text = format!("{summary}\n\nThe page: {}\n", rendered.html.display());
    record::write_atomic(&summary_path, text.as_bytes())?;
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
         steps. *Missing*: measured last time, not finished now. Before a change is \
         reported, it is measured again at once: {} reruns (`--confirm-runs`) of tonight's binary, each after \
         a rerun of the binary kept from the last night, so both share the machine and its \
         load; it is reported only if the reruns show it in the same direction (else *not \
         confirmed by rerun*), and a timing taken under load is judged by those reruns. A \
         configuration under a memory limit that fits in one run and not in another of the \
         same code, or whose peak lies within its spread of the limit, is *at the limit*.",
        EXACT_TOLERANCE * 100.0,
        NOISE_SIGMAS,
        NOISE_WINDOW,
        noise * 100.0,
        MIN_NIGHTS,
        confirm::CONFIRM_RUNS
    )
}

/// How many comparisons of `changes` got each verdict.
fn verdict_counts(changes: &[ConfigChange]) -> BTreeMap<ChangeVerdict, usize> {
    let mut counts: BTreeMap<ChangeVerdict, usize> = BTreeMap::new();
    for c in changes {
        for (_, k) in &c.metrics {
            *counts.entry(k.verdict).or_default() += 1;
        }
    }
    counts
}

/// The noise a change was judged against, as the page prints it.
fn noise_text(k: &Classified) -> String {
    k.noise.map_or("–".into(), |x| x.describe())
}

/// The sentence on the worst regression of `changes` (the largest relative change towards
/// worse, with its interval and noise), or on there being none; starts with a space.
fn worst_regression(changes: &[ConfigChange], counts: &BTreeMap<ChangeVerdict, usize>) -> String {
    let worst = changes
        .iter()
        .flat_map(|c| c.metrics.iter().map(move |(m, k)| (c, m, k)))
        .filter(|(_, _, k)| k.verdict == ChangeVerdict::Regressed)
        .filter_map(|(c, m, k)| {
            // A timing judged by its reruns alone (taken under load) has the reruns' change.
            let (d, basis) = match (k.change, &k.confirmation) {
                (Some(d), _) => (d, format!("against noise {}", noise_text(k))),
                (None, Some(x)) => (
                    x.classified(m.lower_is_better()).change?,
                    format!(
                        "in {} reruns beside {} against ±{:.1}%",
                        x.runs,
                        x.against,
                        x.threshold * 100.0
                    ),
                ),
                (None, None) => return None,
            };
            let worse = if m.lower_is_better() {
                d.median
            } else {
                -d.median
            };
            Some((worse, c, m, d, basis))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match worst {
        Some((_, c, m, d, basis)) => format!(
            " Worst regression: {}/{} {} {:+.1}% [{:+.1}%, {:+.1}%] {basis}.",
            c.study,
            c.config,
            m.name(),
            d.median * 100.0,
            d.lo * 100.0,
            d.hi * 100.0,
        ),
        None if counts.get(&ChangeVerdict::Missing).is_some_and(|&n| n > 0) => " No metric \
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
    let n = |v: ChangeVerdict| counts.get(&v).copied().unwrap_or(0);
    let worst_text = worst_regression(changes, &counts);
    let noisy = match n(ChangeVerdict::Noisy) {
        0 => String::new(),
        k => format!(", {k} noisy (timings taken under load: no verdict)"),
    };
    let noisy = match n(ChangeVerdict::NotConfirmed) {
        0 => noisy,
        k => format!("{noisy}, {k} not confirmed by rerun"),
    };
    let noisy = match n(ChangeVerdict::AtLimit) {
        0 => noisy,
        k => format!("{noisy}, {k} at the limit"),
    };
    let noisy = match last.confirm_s {
        Some(t) => {
            let rerun: Vec<usize> = last
                .configs
                .iter()
                .filter_map(|c| c.confirmations.first().map(|x| x.runs))
                .collect();
            format!(
                "{noisy} ({} configuration(s) rerun {}x to confirm, {t:.0} s)",
                rerun.len(),
                rerun.first().copied().unwrap_or(0)
            )
        }
        None => noisy,
    };
    format!(
        "Nightly run {} ({}, revision `{}`, {} profile, {} on {}): {} regressed, {} improved, {} \
         within noise, {} missing, {} not enough history, {} not measured{noisy}, over \
         {}.{worst_text}",
        history.len(),
        last.date,
        last.git_revision,
        last.profile,
        last.backend,
        last.device,
        n(ChangeVerdict::Regressed),
        n(ChangeVerdict::Improved),
        n(ChangeVerdict::WithinNoise),
        n(ChangeVerdict::Missing),
        n(ChangeVerdict::NotEnoughHistory),
        n(ChangeVerdict::NotMeasured) + n(ChangeVerdict::New),
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
    // A searched field of the largest-input search counts as a configuration.
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
                    "ChangeVerdict",
                ]),
                ..Default::default()
            },
            in_process: Table {
                caption: "Numbers the in-process studies track (solve times, schedule costs, \
                          kernel timings) and the largest-input search's boundaries (the \
                          largest value that fits the limit in every run, the peak at it): \
                          change since the last run, with the noise each verdict was judged \
                          against"
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
            if c.kind != ConfigKind::Training {
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
            if matches!(
                k.verdict,
                ChangeVerdict::Missing | ChangeVerdict::NotMeasured
            ) && c.status != JobStatus::Ok
            {
                let at = (self.summary.rows.len(), row.len() - 1);
                let status = format!("this run: {}", c.status.as_str());
                self.summary.note(at.0, at.1, status);
            }
            if matches!(
                k.verdict,
                ChangeVerdict::Regressed
                    | ChangeVerdict::Improved
                    | ChangeVerdict::Missing
                    | ChangeVerdict::Noisy
                    | ChangeVerdict::NotConfirmed
                    | ChangeVerdict::AtLimit
            ) {
                self.detail.rows.push(vec![
                    c.study.clone(),
                    c.config.clone(),
                    m.title().to_string(),
                    est(&k.prev),
                    est(&k.cur),
                    k.change.map_or("–".into(), |d| change_interval(&d)),
                    k.noise.map_or("–".into(), |n| n.describe()),
                    detail_verdict(*m, k),
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

/// The detail table's verdict cell: the verdict, the load a noisy timing was taken under,
/// what the confirmation reruns gave, and for a job at its limit the peak and the limit.
fn detail_verdict(m: Metric, k: &Classified) -> String {
    let mut text = k.verdict.as_str().to_string();
    if let Some(l) = k.under_load {
        text += &format!(": {}", l.describe());
    }
    if let Some(c) = &k.confirmation {
        text += &format!("; {}", confirmation_text(m, c));
    }
    if let Some((peak, limit)) = k.at_limit {
        text += &format!(
            ": peak {:.2} MiB in the run that fit, limit {:.2} MiB",
            peak / (1024.0 * 1024.0),
            limit as f64 / (1024.0 * 1024.0)
        );
    }
    text
}

/// What a confirmation's reruns gave, e.g. "rerun 3x beside previous binary abc1234: +98.2%
/// [+90.1%, +105.3%], round by round +97.0% / +99.1% / +98.4% against ±5.0%: regressed" (the
/// rounds where the reruns were interleaved with a kept binary).
pub fn confirmation_text(m: Metric, c: &Confirmation) -> String {
    if c.metric == STATUS_METRIC {
        return format!(
            "rerun {}x beside {}: fit in {} of {} reruns",
            c.runs,
            c.against,
            c.current.len().min(c.runs),
            c.runs
        );
    }
    let k = c.classified(m.lower_is_better());
    let change = k.change.map_or("–".into(), |d| change_interval(&d));
    let rounds = if c.rounds.is_empty() {
        String::new()
    } else {
        let each: Vec<String> = c
            .rounds
            .iter()
            .map(|d| format!("{:+.1}%", d * 100.0))
            .collect();
        format!(", round by round {}", each.join(" / "))
    };
    format!(
        "rerun {}x beside {}{}: {change}{rounds} against ±{:.1}%: {}",
        c.runs,
        c.against,
        if c.faster_half {
            " (the faster half of each side's steps)"
        } else {
            ""
        },
        c.threshold * 100.0,
        k.verdict.as_str()
    )
}

/// A metric's cell of the summary table: the relative change with its verdict and the noise
/// it was judged against (or the nights it still lacks), or the verdict alone.
fn verdict_cell(k: &Classified) -> String {
    let noise = k
        .noise
        .map(|n| format!(" {}", n.describe()))
        .unwrap_or_default();
    match (k.change, k.verdict) {
        (Some(d), ChangeVerdict::NotEnoughHistory) => format!(
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
            .chain(Metric::IN_PROCESS)
            .chain([Metric::LargestInput]);
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
