//! Report sections of a training study. The analysis stage ([`crate::results::analysis`])
//! reads the polars study table ([`crate::results::study_table`]) and the per-step table into
//! typed values (configuration rows, groups, goal outcomes, step curves); this module only
//! arranges and formats them.

use super::glance::{self, Answer};
use super::markdown;
use super::model::{Details, Figure, GlanceRow, Mark, Measure, Section, Series, Table};
use super::timeline;
use crate::error::Result;
use crate::reference::{self, TorchRow};
use crate::results::analysis::{
    analyze, goal_outcomes, joint_coverage, step_curves, step_scaling, ConfigSummary, GoalOutcome,
    GroupSummary, RepeatRuns, StepScaling, StudyAnalysis,
};
use crate::results::sublinear::{Sweep, SweepPoint};
use crate::results::{steps_table, JobRecord, JobStatus, StudyRecords};
use crate::spec::{Claim, ConfigSpec, Goal, GoalMetric, StudyHeader};
use memwall_core::spec::claims::{
    sweep_measure, sweep_member, training_measure, SourceClaim, SweepMetric, TrainingMetric,
};
use polars::prelude::DataFrame;
use std::collections::BTreeMap;

/// Formats a byte count with a binary unit (KiB, MiB, GiB).
pub fn format_bytes(b: f64) -> String {
    const K: f64 = 1024.0;
    if b >= K * K * K {
        format!("{:.3} GiB", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1} MiB", b / (K * K))
    } else {
        format!("{:.1} KiB", b / K)
    }
}

/// Parses a duration printed like "1m 40s", "41s" or "2m 5s" into seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut any = false;
    for part in s.split_whitespace() {
        let (num, unit) = part.split_at(part.find(|c: char| c.is_alphabetic())?);
        let v: f64 = num.parse().ok()?;
        total += match unit {
            "h" => v * 3600.0,
            "m" | "min" => v * 60.0,
            "s" => v,
            _ => return None,
        };
        any = true;
    }
    any.then_some(total)
}

const MIB: f64 = 1024.0 * 1024.0;

fn fmt_opt(v: Option<f64>, digits: usize, suffix: &str) -> String {
    v.map(|x| format!("{x:.digits$}{suffix}"))
        .unwrap_or_else(|| "–".into())
}

/// Perplexity with one decimal, or in scientific notation from 10^6 (a diverged model).
fn fmt_ppl(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 1e6 => format!("{x:.2e}"),
        other => fmt_opt(other, 1, ""),
    }
}

/// The section's claim: with per-configuration claims in the experiment file, a pointer to the
/// "source" columns of the results table (the numbers are there, beside ours); otherwise the
/// study header's claim or the source document's name.
fn claim_text(header: &StudyHeader, configs: &[ConfigSpec]) -> String {
    // The source's configurations: one per distinct claim (rows that run one source row under
    // two optimizers carry the same claim).
    let mut quoted: Vec<&Claim> = Vec::new();
    for cl in configs.iter().filter_map(|c| c.claim.as_ref()) {
        let numbers = cl.peak_gib.is_some()
            || cl.reduction_pct.is_some()
            || cl.samples_per_s.is_some()
            || cl.perplexity.is_some();
        if numbers && !quoted.contains(&cl) {
            quoted.push(cl);
        }
    }
    let source = markdown::escape(&header.source);
    if quoted.is_empty() {
        return match &header.claim {
            Some(claim) => format!("{source}: {claim}"),
            None => format!(
                "{source}'s claims are quoted under *Results at a glance* above, each beside our \
                 number and its verdict."
            ),
        };
    }
    let metrics = [
        "peak memory",
        "reduction against the control",
        "samples/s",
        "perplexity",
    ];
    format!(
        "{source} (Results table) reports {} for {} configuration(s); they are the \"source\" \
         columns of the first table below, beside each of our rows that runs one of them.",
        metrics.join(", "),
        quoted.len()
    )
}

/// The source's Relative Time of a configuration over its control's (derived from the
/// document's "Relative Time" column, its time between steps 10 and 100; samples/s include
/// compile time and are not used).
fn source_relative_time(claim: Option<&Claim>, control: Option<&Claim>) -> Option<f64> {
    let t = parse_duration(claim?.time.as_deref()?)?;
    let kt = parse_duration(control?.time.as_deref()?)?;
    (kt > 0.0).then(|| t / kt)
}

/// Checkmate-planned configurations: what the planner predicted (peak above the steady state
/// from the executor's memory model, compute over plain forward+backward) beside what the job
/// measured (peak − steady state, step time over the control's).
fn planned_vs_measured(rows: &[ConfigRow]) -> Table {
    let mut table = Table {
        caption: "Budget plans executed: planned vs measured".into(),
        columns: [
            "configuration",
            "budget (fraction of no-recompute peak)",
            "recomputed blocks",
            "planned peak − steady",
            "measured peak − steady",
            "measured / planned",
            "planned compute ratio",
            "measured step-time ratio",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for s in rows
        .iter()
        .map(|c| &c.s)
        .filter(|s| s.strategy.checkmate.is_some())
    {
        let m = &s.measured;
        let measured_bytes = match (m.peak_allocated_bytes, m.steady_bytes) {
            (Some(p), Some(s)) => Some((p - s).max(0.0)),
            _ => None,
        };
        let measured = match measured_bytes {
            Some(m) => format_bytes(m),
            None => {
                table.note(table.rows.len(), 4, s.reason.as_deref().unwrap_or(""));
                s.status.as_str().to_string()
            }
        };
        let ratio = match (measured_bytes, s.plan.peak_bytes) {
            (Some(m), Some(p)) if p > 0.0 => format!("{:.3}", m / p),
            _ => "–".into(),
        };
        table.rows.push(vec![
            s.config.clone(),
            fmt_opt(s.strategy.checkmate, 2, ""),
            fmt_opt(s.plan.recomputed_blocks, 0, ""),
            s.plan
                .peak_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "–".into()),
            measured,
            ratio,
            fmt_opt(s.plan.cost_ratio, 3, "x"),
            fmt_opt(m.relative_step_time, 3, "x"),
        ]);
    }
    table
}

/// The goals evaluated on a group ([`goal_outcomes`]) as a table: per precision and goal, the
/// ratio (with its interval, with repeats), the goal, the verdict and the runs per side.
fn goals_table(outcomes: &[GoalOutcome], goals: &[Goal]) -> Table {
    let step_time_only = goals.iter().all(|g| g.metric == GoalMetric::MedianStepS);
    let mut table = Table {
        caption: if step_time_only {
            "Performance goals: median step-time ratios (same precision, no kernel fusion)".into()
        } else {
            "Goals: ratios between configurations (same precision, no kernel fusion)".into()
        },
        columns: ["comparison", "precision", "ratio", "goal", "met", "runs"]
            .map(String::from)
            .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for o in outcomes {
        let ratio = match o.interval {
            Some(i) => format!("{:.3}x [{:.3}, {:.3}]", o.median, i.lo, i.hi),
            None => format!("{:.3}x", o.median),
        };
        table.rows.push(vec![
            o.goal.label.clone(),
            o.precision.to_string(),
            ratio,
            format!("<= {}x", o.goal.at_most),
            o.verdict.as_str().into(),
            format!("{} / {}", o.runs.0, o.runs.1),
        ]);
    }
    if let Some(coverage) = joint_coverage(outcomes) {
        table.caption += &format!(
            "; ratio of the medians over the runs, with the ratio of their order-statistic \
             intervals (joint coverage at least {:.0}%)",
            coverage * 100.0
        );
    }
    table
}

/// The mixed-precision table: per configuration, its master weights and loss scale, the
/// steps skipped for non-finite gradients, the loss scale at the end, the mean fraction of
/// 16-bit gradient entries that are exactly zero, loss and perplexity. Aggregated with polars
/// from the per-step rows. `None` unless a configuration uses master weights.
fn mixed_precision(
    inputs: &StudyInputs,
    g: &Group,
    steps_df: &DataFrame,
) -> Result<Option<(Table, Option<Figure>)>> {
    if !inputs.by_name.values().any(|c| c.master_weights) {
        return Ok(None);
    }
    let agg = step_scaling(steps_df, &inputs.study)?;
    let table = Table {
        caption: "Mixed precision: loss scaling and gradient underflow".into(),
        columns: [
            "Configuration",
            "Status",
            "Compute",
            "Master weights",
            "Loss scale",
            "Steps skipped",
            "Final / min scale",
            "Zero gradient entries",
            "Final train loss",
            "Eval ppl",
            "Peak allocated",
            "Rel. step time",
        ]
        .map(String::from)
        .to_vec(),
        rows: g.rows.iter().map(|c| mixed_row(c, &agg)).collect(),
        notes: Vec::new(),
    };
    let mut table = table;
    status_notes(&mut table, g, 1);
    let scales = step_curves(steps_df, &inputs.study, "loss_scale")?;
    let scale_series: Vec<Series> = g
        .rows
        .iter()
        .filter(|c| c.cfg.loss_scale.is_some())
        .filter_map(|c| loss_scale_series(c, &scales))
        .collect();
    let figure = (!scale_series.is_empty()).then(|| Figure {
        name: "loss_scale".into(),
        title: "Dynamic loss scale per step".into(),
        x_label: "step".into(),
        y_label: "log2 of the loss scale S".into(),
        series: scale_series,
        ..Default::default()
    });
    Ok(Some((table, figure)))
}

fn mixed_row(c: &ConfigRow, agg: &BTreeMap<String, StepScaling>) -> Vec<String> {
    let (s, cfg, ok) = (&c.s, c.cfg, c.ok);
    let scaling = agg.get(&s.config);
    vec![
        cfg.label.clone(),
        c.status.as_str().to_string(),
        cfg.precision.to_string(),
        if cfg.master_weights { "f32" } else { "–" }.into(),
        cfg.loss_scale
            .map(|l| l.to_string())
            .unwrap_or_else(|| "none".into()),
        fmt_opt(
            scaling
                .and_then(|x| x.skipped_steps)
                .filter(|_| cfg.master_weights),
            0,
            "",
        ),
        match (
            scaling.and_then(|x| x.final_scale),
            scaling.and_then(|x| x.min_scale),
        ) {
            (Some(f), Some(m)) => format!("{f} / {m}"),
            _ => "–".into(),
        },
        fmt_opt(
            scaling.and_then(|x| x.zero_fraction).map(|z| 100.0 * z),
            3,
            "%",
        ),
        fmt_opt(s.measured.final_train_loss.filter(|_| ok), 3, ""),
        fmt_ppl(s.measured.eval_perplexity.filter(|_| ok)),
        c.peak
            .filter(|_| ok)
            .map(format_bytes)
            .unwrap_or_else(|| "–".into()),
        fmt_opt(c.rel.filter(|_| ok), 2, "x"),
    ]
}

/// log2 of the loss scale per step of one configuration, from the loss-scale points of every
/// configuration ([`step_curves`]); `None` without points.
fn loss_scale_series(c: &ConfigRow, scales: &BTreeMap<String, Vec<(f64, f64)>>) -> Option<Series> {
    let points: Vec<(f64, f64)> = scales
        .get(&c.s.config)?
        .iter()
        .map(|&(x, y)| (x, y.log2()))
        .collect();
    (!points.is_empty()).then(|| Series {
        label: c.cfg.label.clone(),
        points,
        mark: Mark::Line,
        point_labels: Vec::new(),
    })
}

/// What every group's section of a study uses: the experiment file's configurations, claims and
/// goals, and where the records are.
struct StudyInputs<'a> {
    records: &'a StudyRecords,
    /// The study's name, for analysis errors.
    study: String,
    /// The finished runs of every job (repeats), for the goals' intervals.
    repeats: RepeatRuns,
    header: &'a StudyHeader,
    configs: &'a [ConfigSpec],
    goals: &'a [Goal],
    /// The headline claims (a group draws the sweeps they name).
    claims: &'a [SourceClaim],
    by_name: BTreeMap<&'a str, &'a ConfigSpec>,
    control_claim: Option<&'a Claim>,
    /// The study's PyTorch reference rows (`runs/<study>/pytorch/`): the CPU ones are shown in
    /// the CPU group of their device and model shape.
    pytorch: &'a [TorchRow],
}

/// One row of the study table with its configuration and the numbers derived from it.
struct ConfigRow<'a> {
    s: ConfigSummary,
    cfg: &'a ConfigSpec,
    claim: Option<&'a Claim>,
    status: JobStatus,
    ok: bool,
    /// Peak allocated bytes.
    peak: Option<f64>,
    /// Peak-memory reduction against the control, percent.
    red: Option<f64>,
    /// Median step time over the control's.
    rel: Option<f64>,
    /// The source's step time over its control's.
    src_rel: Option<f64>,
}

/// The rows that ran with one (profile, backend, device, GPU runtime settings): one section of
/// the report.
struct Group<'a> {
    profile: String,
    device: String,
    /// The backend ("cuda", "flex", "ndarray").
    backend: String,
    /// The profile's named model the rows train (`None`: the profile's own model).
    model: Option<String>,
    /// "cuda" or "cuda, exact_size pool": where and how the group ran.
    backend_label: String,
    gpu: bool,
    /// The configurations that ran (finished or not), in the experiment file's order.
    rows: Vec<ConfigRow<'a>>,
    /// The configurations the backend cannot run (status `unsupported`): named in one
    /// sentence per reason, not as rows of dashes.
    unsupported: Vec<ConfigRow<'a>>,
    /// The figure-name suffix of the group.
    slug: String,
    /// Another group of the same profile and device comes first (other GPU runtime settings):
    /// this one is shown as tables only, so that a page does not repeat a figure set per pool.
    secondary: bool,
    /// The study's goals evaluated on `rows`.
    goals: Vec<GoalOutcome>,
}

impl Group<'_> {
    /// ", lower bound" (the bound `b` of the first row names) or "".
    fn bound(&self, b: impl Fn(&ConfigSummary) -> &str) -> String {
        match self.rows.first().map(|c| b(&c.s)) {
            Some(b) if !b.is_empty() => format!(", {b}"),
            _ => String::new(),
        }
    }
    fn allocated_bound(&self) -> String {
        self.bound(|s| &s.peak_allocated_bound)
    }
    /// The unit of the group's memory axes: GiB when a peak reaches 1 GiB, else MiB (bytes
    /// per unit, name).
    fn mem_unit(&self) -> (f64, &'static str) {
        let max = self.rows.iter().filter_map(|c| c.peak).fold(0.0, f64::max);
        if max >= MIB * 1024.0 {
            (MIB * 1024.0, "GiB")
        } else {
            (MIB, "MiB")
        }
    }
    /// The peak-allocated axis label, naming the bound: "peak allocated, lower bound (GiB)".
    fn peak_axis(&self) -> String {
        format!(
            "peak allocated{} ({})",
            self.allocated_bound(),
            self.mem_unit().1
        )
    }
    /// The first value of `value` over the rows (finished or not, then unsupported ones).
    fn first<T>(&self, value: impl Fn(&ConfigSummary) -> Option<T>) -> Option<T> {
        self.rows
            .iter()
            .chain(&self.unsupported)
            .find_map(|c| value(&c.s))
    }
    /// Whether the group ran at the source document's size (the `full` profile).
    fn at_source_size(&self) -> bool {
        self.profile == "full"
    }
    /// Order of groups in the report: the source's size first, a GPU before the CPU.
    fn rank(&self) -> (u8, bool) {
        let profile = match self.profile.as_str() {
            "full" => 0,
            "cpu" => 1,
            _ => 2,
        };
        (profile, !self.gpu)
    }
    /// The model in words: "8 layers, d_model 128, 1.9M parameters" (a named model's name
    /// first: "model `deep`, 128 layers, ...").
    fn model_text(&self) -> String {
        let n = |v: fn(&ConfigSummary) -> u64| self.first(|s| Some(v(s).to_string()));
        let name = self
            .model
            .as_ref()
            .map(|m| format!("model `{m}`, "))
            .unwrap_or_default();
        format!(
            "{name}{} layers, d_model {}, {} parameters",
            n(|s| s.size.layers).unwrap_or_else(|| "–".into()),
            n(|s| s.size.d_model).unwrap_or_else(|| "–".into()),
            self.first(|s| s.size.parameters)
                .map(human_count)
                .unwrap_or_else(|| "–".into()),
        )
    }
    /// The section's heading: what ran, at which size, where.
    fn heading(&self) -> String {
        if self.at_source_size() {
            format!(
                "At the source's size: {} on {} ({})",
                self.model_text(),
                self.device,
                self.backend_label
            )
        } else if self.gpu {
            format!(
                "Scaled-down stand-in ({} profile): {} on {} ({})",
                self.profile,
                self.model_text(),
                self.device,
                self.backend_label
            )
        } else {
            format!(
                "CPU stand-in ({} profile): {}, {}-thread {} ({})",
                self.profile,
                self.model_text(),
                self.first(|s| Some(s.size.cpu_threads))
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "–".into()),
                self.device,
                self.backend_label
            )
        }
    }
    /// Where the group ran, short, for the glance table.
    fn device_text(&self) -> String {
        if self.at_source_size() {
            format!("{}, source's size ({})", self.device, self.backend_label)
        } else {
            format!(
                "{} ({}), {} profile stand-in",
                self.device, self.backend_label, self.profile
            )
        }
    }
}

/// A count with a decimal suffix: 1.62B, 1.9M, 35.2k.
fn human_count(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.2}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// Builds the sections and environment tables of a training study from its records: one
/// section per (profile, backend, device, runtime) group, evaluating the file's `goals`, and a
/// last section listing records whose configuration is no longer in the experiment file. The
/// PyTorch rows measured on a CPU (`pytorch`, the study's stored rows; empty for none) are
/// shown in the first CPU group of their device and model shape
/// ([`crate::reference::cpu_table`]); the glance does not read them.
///
/// # Errors
/// [`crate::Error::Records`] when the study has no records; [`crate::Error::Report`] on table
/// errors and when the analysis stage cannot read a column (an
/// [`crate::results::analysis::AnalysisError`] naming it and the study).
pub fn sections(
    records: &StudyRecords,
    header: &StudyHeader,
    configs: &[ConfigSpec],
    goals: &[Goal],
    claims: &[SourceClaim],
    pytorch: &[TorchRow],
) -> Result<(Vec<Section>, Vec<Table>, Vec<GlanceRow>)> {
    let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
    let StudyAnalysis {
        study,
        groups: summaries,
        stale,
        repeats,
    } = analyze(records, &names)?;
    let inputs = StudyInputs {
        records,
        repeats,
        study,
        header,
        configs,
        goals,
        claims,
        by_name: configs.iter().map(|c| (c.name.as_str(), c)).collect(),
        control_claim: configs
            .iter()
            .find(|c| c.control)
            .and_then(|c| c.claim.as_ref()),
        pytorch,
    };
    // The first group (the source's size first) where a claim's configuration finished: a GPU
    // group that predates the claims' configurations does not hide the stand-in's answers. It
    // comes first in the report too, right under the glance that quotes it.
    let answers = |g: &Group| claims.iter().any(|claim| answers_claim(g, claim));
    let mut groups = groups(&inputs, summaries);
    if let Some(p) = groups.iter().position(answers) {
        let g = groups.remove(p);
        groups.insert(0, g);
    }
    let mut sections = Vec::new();
    let mut envs = Vec::new();
    for group in &groups {
        sections.push(group_section(&inputs, group)?);
        envs.extend(environment_table(&inputs, group)?);
    }
    // The memory timelines, one section per group with traced records.
    for group in groups.iter().filter(|g| !g.secondary) {
        let lines = timeline_lines(&inputs, group);
        sections.extend(timeline::section(
            &group.heading(),
            &group.slug,
            &lines,
            &header.timeline,
        ));
    }
    sections.extend(stale_records_section(&inputs, &stale));
    sections.extend(unreadable_records_section(records));
    let mut glance = glance_rows(&groups, claims);
    point_to_timelines(&mut glance, &inputs, &groups, claims);
    Ok((sections, envs, glance))
}

/// The finished rows of `g` whose record has a memory timeline, in the file's order.
fn timeline_lines<'a>(inputs: &StudyInputs<'a>, g: &Group<'a>) -> Vec<timeline::Line<'a>> {
    g.rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            let record = inputs.records.get(&c.s.key)?;
            record.timeline.as_ref()?;
            Some(timeline::Line {
                name: &c.cfg.name,
                label: &c.cfg.label,
                control: c.cfg.control,
                record,
            })
        })
        .collect()
}

/// A glance row that disagrees on a memory number (a configuration's peak or reduction, or a
/// sweep's) points to the timeline section of the group that answers it: where the peak comes
/// from, with the configuration's peak phase when the claim names one configuration.
fn point_to_timelines(
    glance: &mut [GlanceRow],
    inputs: &StudyInputs,
    groups: &[Group],
    claims: &[SourceClaim],
) {
    for (row, claim) in glance.iter_mut().zip(claims) {
        if row.verdict != memwall_core::spec::claims::Verdict::Disagree {
            continue;
        }
        let config = match (
            training_measure(&claim.measure),
            sweep_measure(&claim.measure),
        ) {
            (Some((c, TrainingMetric::PeakGib | TrainingMetric::ReductionPct)), _) => Some(c),
            (_, Some(_)) => None,
            _ => continue,
        };
        let Some(g) = groups
            .iter()
            .filter(|g| !g.secondary)
            .find(|g| answers_claim(g, claim))
        else {
            continue;
        };
        let lines = timeline_lines(inputs, g);
        if lines.is_empty() {
            continue;
        }
        let mut pointer = format!(
            "where the peak comes from: \"Memory timeline of one step: {}\"",
            g.heading()
        );
        let peak = config
            .and_then(|c| lines.iter().find(|l| l.name == c))
            .and_then(|l| l.record.timeline.as_ref())
            .and_then(|t| t.peak_phase().map(|i| t.phases[i].phase.label()));
        if let (Some(c), Some(phase)) = (config, peak) {
            pointer.push_str(&format!(" (`{c}` peaks in \"{phase}\")"));
        }
        row.why = Some(match row.why.take() {
            Some(w) => format!("{w}; {pointer}"),
            None => pointer,
        });
    }
}

/// Whether a finished row of group `g` answers `claim`: its configuration, or a configuration
/// of its sweep.
fn answers_claim(g: &Group, claim: &SourceClaim) -> bool {
    if let Some((sweep, _)) = sweep_measure(&claim.measure) {
        return g
            .rows
            .iter()
            .any(|c| c.ok && sweep_member(sweep, &c.cfg.name).is_some());
    }
    training_measure(&claim.measure)
        .is_some_and(|(config, _)| g.rows.iter().any(|c| c.ok && c.cfg.name == config))
}

/// The glance rows of `claims` measured where the report's first group ran (the first group in
/// which a claim's configuration finished: the source's size where it ran, else the
/// stand-in): each claim answered by the first group of that profile and device whose rows
/// hold its configuration or sweep (a study's models are groups of their own).
fn glance_rows(groups: &[Group], claims: &[SourceClaim]) -> Vec<GlanceRow> {
    let Some(first) = groups.first() else {
        return Vec::new();
    };
    let place = |g: &&Group| {
        (&g.profile, &g.device, &g.backend_label)
            == (&first.profile, &first.device, &first.backend_label)
    };
    glance::rows(claims, &first.device_text(), |claim| {
        let g = groups
            .iter()
            .filter(place)
            .find(|g| answers_claim(g, claim))
            .unwrap_or(first);
        if let Some((sweep, metric)) = sweep_measure(&claim.measure) {
            return sweep_answer(g, &claim.measure, sweep, metric);
        }
        let Some((config, metric)) = training_measure(&claim.measure) else {
            return Answer::Missing(format!("`{}` names no metric", claim.measure));
        };
        let row = g
            .rows
            .iter()
            .chain(&g.unsupported)
            .find(|c| c.cfg.name == config);
        let Some(c) = row else {
            return Answer::Missing(format!(
                "configuration `{config}` has no record on {}",
                g.device
            ));
        };
        if !c.ok {
            return Answer::Missing(format!(
                "configuration `{config}` did not finish on {} ({})",
                g.device,
                c.status.as_str()
            ));
        }
        let value = match metric {
            TrainingMetric::PeakGib => c.peak.map(|p| p / (MIB * 1024.0)),
            TrainingMetric::ReductionPct => c.red,
            TrainingMetric::StepTimeRatio => c.rel,
            TrainingMetric::Speedup => c.rel.filter(|r| *r > 0.0).map(|r| 1.0 / r),
            TrainingMetric::SamplesPerS => c.s.measured.samples_per_s,
            TrainingMetric::Perplexity => c.s.measured.eval_perplexity,
            // Answered by the largest-input search's report (crate::search::glance).
            TrainingMetric::LargestBatchRatio | TrainingMetric::LargestSeqLenRatio => None,
            TrainingMetric::PerplexityRatio => {
                // The control of the same optimizer, as for the reductions.
                let control = g.rows.iter().find(|k| {
                    k.ok && k.s.strategy.control && k.s.strategy.optimizer == c.s.strategy.optimizer
                });
                match (
                    c.s.measured.eval_perplexity,
                    control.and_then(|k| k.s.measured.eval_perplexity),
                ) {
                    (Some(p), Some(k)) if k > 0.0 => Some(p / k),
                    _ => None,
                }
            }
        };
        match value {
            Some(v) => Answer::Measured(Measure::new(
                &claim.measure,
                v,
                metric.unit(),
                metric.decimals(),
            )),
            None => Answer::Missing(format!(
                "`{}` has no value for `{config}` on {} (no finished control?)",
                claim.measure, g.device
            )),
        }
    })
}

/// The groups of the study table ([`group_summaries`], configurations of the experiment file
/// only) as report sections: rows in the experiment file's order, the goals evaluated on them,
/// groups in report order ([`Group::rank`]), each with a figure-name slug.
fn groups<'a>(inputs: &StudyInputs<'a>, summaries: Vec<GroupSummary>) -> Vec<Group<'a>> {
    // Each group's key fields (its rows moved out) and its rows with their configurations.
    // A study's named models (`model = "<name>"`) are groups of their own: their rows are
    // compared with their own control and drawn on their own axes.
    let mut by_key: Vec<(GroupSummary, Option<String>, Vec<ConfigRow<'a>>)> = Vec::new();
    for mut g in summaries {
        let rows: Vec<ConfigRow<'a>> = std::mem::take(&mut g.rows)
            .into_iter()
            .filter_map(|s| {
                let cfg = inputs.by_name.get(s.config.as_str()).copied()?;
                Some(config_row(inputs, s, cfg))
            })
            .collect();
        let mut models: Vec<Option<String>> = Vec::new();
        for c in &rows {
            if !models.contains(&c.cfg.model) {
                models.push(c.cfg.model.clone());
            }
        }
        models.sort();
        let mut rows = rows;
        for model in models {
            let (mine, rest): (Vec<_>, Vec<_>) =
                rows.into_iter().partition(|c| c.cfg.model == model);
            rows = rest;
            by_key.push((g.clone(), model, mine));
        }
    }
    // Rows follow the experiment file as it is now: records of one group may carry other
    // positions from the file as it was when they ran (ties included).
    let position = |c: &ConfigRow| inputs.configs.iter().position(|x| x.name == c.cfg.name);
    for (_, _, rows) in &mut by_key {
        rows.sort_by_key(|c| position(c));
    }
    let mut groups: Vec<Group> = by_key
        .into_iter()
        .map(|(g, model, rows)| {
            let GroupSummary {
                profile,
                backend,
                device,
                runtime,
                ..
            } = g;
            let backend_label = if runtime.is_empty() {
                backend.clone()
            } else {
                format!("{backend}, {runtime}")
            };
            let (unsupported, rows): (Vec<_>, Vec<_>) = rows
                .into_iter()
                .partition(|c| c.status == JobStatus::Unsupported);
            let summaries: Vec<&ConfigSummary> = rows.iter().map(|c| &c.s).collect();
            let model_slug = model.as_ref().map(|m| format!("_{m}")).unwrap_or_default();
            Group {
                goals: goal_outcomes(&summaries, inputs.goals, &inputs.repeats),
                slug: slug(&format!("{profile}_{backend_label}{model_slug}")),
                gpu: backend == "cuda",
                profile,
                device,
                backend,
                model,
                backend_label,
                rows,
                unsupported,
                secondary: false,
            }
        })
        .collect();
    groups.sort_by_key(|g| g.rank());
    for i in 1..groups.len() {
        let (seen, rest) = groups.split_at_mut(i);
        let g = &mut rest[0];
        g.secondary = seen
            .iter()
            .any(|h| h.profile == g.profile && h.device == g.device && h.model == g.model);
    }
    // Groups of one profile and backend on different devices (an H100 and an A100 night) get
    // the device in their slug, so that their figure files do not overwrite each other.
    let slugs: Vec<String> = groups.iter().map(|g| g.slug.clone()).collect();
    for g in &mut groups {
        if slugs.iter().filter(|s| **s == g.slug).count() > 1 {
            let device = if g.device.is_empty() {
                "unknown_device".to_string()
            } else {
                slug(&g.device)
            };
            g.slug = format!("{}_{device}", g.slug);
        }
    }
    groups
}

fn config_row<'a>(
    inputs: &StudyInputs<'a>,
    s: ConfigSummary,
    cfg: &'a ConfigSpec,
) -> ConfigRow<'a> {
    let claim = cfg.claim.as_ref();
    ConfigRow {
        ok: s.ok(),
        status: s.status,
        peak: s.measured.peak_allocated_bytes,
        red: s.measured.reduction_pct,
        rel: s.measured.relative_step_time,
        src_rel: source_relative_time(claim, inputs.control_claim),
        claim,
        cfg,
        s,
    }
}

/// `text` with every run of non-alphanumeric characters replaced by one `_`, trimmed.
fn slug(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect::<String>()
        .split('_')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("_")
}

/// One group's section: the results table, the optional mixed-precision, goals and Checkmate
/// tables, and the figures.
fn group_section(inputs: &StudyInputs, g: &Group) -> Result<Section> {
    let keys: Vec<String> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .map(|c| c.s.key.clone())
        .collect();
    let steps_df = steps_table(inputs.records, &keys)?;
    let sweeps = claimed_sweeps(g, inputs.claims);
    // A group in which no job finished gets no figure (its rows say why; nothing to draw).
    let mut figures = Vec::new();
    if !keys.is_empty() && !g.secondary {
        figures.extend(sweeps.iter().map(|(p, s)| sweep_figure(g, p, s)));
        figures.extend(bar_figures(g));
        figures.extend(pareto_figure(g));
        figures.extend(interval_figures(g));
        figures.extend(estimate_figure(g));
        figures.extend(loss_figures(
            g,
            &step_curves(&steps_df, &inputs.study, "loss")?,
        ));
    }
    let mut table_mixed = None;
    if let Some((t, fig)) = mixed_precision(inputs, g, &steps_df)? {
        table_mixed = Some(t);
        if let Some(mut fig) = fig {
            fig.name = format!("loss_scale_{}", g.slug);
            figures.push(fig);
        }
    }
    let non_empty = |t: Table| (!t.rows.is_empty()).then_some(t);
    let pytorch = pytorch_cpu_table(inputs, g);
    let maps: Vec<String> = inputs
        .configs
        .iter()
        .filter(|c| !c.maps_to.is_empty())
        .filter(|c| g.rows.iter().any(|r| r.cfg.name == c.name))
        .map(|c| format!("*{}*: {}", markdown::escape(&c.label), c.maps_to))
        .collect();
    Ok(Section {
        title: g.heading(),
        claim: claim_text(inputs.header, inputs.configs),
        ours: summary(g),
        notes: sweeps
            .iter()
            .map(|(_, s)| sweep_note(s, inputs.records))
            .chain(layer_norm_drift(g))
            .chain(g.secondary.then(|| {
                format!(
                    "The same device with other runtime settings ({}): its numbers are in these \
                     tables; the figures above are drawn for the first group of this device.",
                    markdown::escape(&g.backend_label)
                )
            }))
            .chain(pytorch.is_some().then(reference::cpu_note))
            .collect(),
        tables: [results_table(inputs, g), memory_table(g)]
            .into_iter()
            .chain(sweeps.iter().map(|(p, s)| sweep_table(p, s)))
            .chain(table_mixed)
            .chain(pytorch)
            .chain(non_empty(goals_table(&g.goals, inputs.goals)))
            .chain(non_empty(planned_vs_measured(&g.rows)))
            .collect(),
        figures,
        details: (!maps.is_empty()).then(|| Details {
            title: "How each configuration maps to the source".into(),
            items: maps,
        }),
    })
}

/// The PyTorch eager rows measured on this CPU group's device with its model shape, beside the
/// group's records ([`reference::cpu_table`]): `None` for a GPU group, a secondary group (its
/// first group shows them), or where no such row is stored.
fn pytorch_cpu_table(inputs: &StudyInputs, g: &Group) -> Option<Table> {
    if g.gpu || g.secondary {
        return None;
    }
    let mine = |r: &&JobRecord| {
        r.spec.profile.as_str() == g.profile
            && r.spec.backend.as_str() == g.backend
            && r.env.device_name == g.device
    };
    let group: Vec<&JobRecord> = inputs.records.records.iter().filter(mine).collect();
    let labels: Vec<(String, String)> = inputs
        .configs
        .iter()
        .map(|c| (c.name.clone(), c.label.clone()))
        .collect();
    // The rows of this group's model shape (a smoke group on the same CPU shows none of the
    // cpu profile's rows), as [`reference::has_cpu_group`] places them.
    let rows: Vec<TorchRow> = inputs
        .pytorch
        .iter()
        .filter(|r| {
            group.iter().any(|m| {
                reference::same_model(m, &r.model)
                    && inputs.by_name.contains_key(m.spec.config.as_str())
            })
        })
        .cloned()
        .collect();
    reference::cpu_table(&rows, group.iter().copied(), &labels, &g.device)
}

/// A note naming the rows whose records ran another layer norm than their configuration now
/// names (records written before the option read as Burn's `composed` norm): their figures
/// measure that norm, not the current one. `None` when every row ran its configuration's norm.
fn layer_norm_drift(g: &Group) -> Option<String> {
    let drifted: Vec<String> = g
        .rows
        .iter()
        .filter(|c| c.s.strategy.layer_norm != c.cfg.layer_norm.as_str())
        .map(|c| {
            format!(
                "{} (`{}`)",
                markdown::escape(&c.cfg.name),
                c.s.strategy.layer_norm
            )
        })
        .collect();
    (!drifted.is_empty()).then(|| {
        format!(
            "*Layer norm of these records*: {} of this group's records ran another layer norm \
             than their configuration now names ({}); records written before the `layer_norm` \
             option ran Burn's composed norm. Rerun them to measure the current one.",
            drifted.len(),
            drifted.join(", ")
        )
    })
}

/// The "Ours." paragraph: model size, measured steps, device, how many configurations
/// finished, and the largest reduction against the control (beside the source's). The
/// per-configuration numbers are in the results table.
fn summary(g: &Group) -> String {
    let finished = g.rows.iter().filter(|c| c.ok).count();
    let unfinished: Vec<String> = g
        .rows
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{} ({})", markdown::escape(&c.cfg.label), c.status.as_str()))
        .collect();
    let best = g
        .rows
        .iter()
        .filter(|c| c.ok && !c.s.strategy.control)
        .filter_map(|c| Some((c, c.red?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut text = format!(
        "{} parameters on {} ({}), median of {} measured steps per configuration; peak \
         allocated memory{}. {finished} of {} configuration(s) finished",
        g.first(|s| s.size.parameters)
            .map(human_count)
            .unwrap_or_else(|| "–".into()),
        markdown::escape(&g.device),
        markdown::escape(&g.backend_label),
        g.first(|s| Some(s.size.measured_steps))
            .map(|s| s.to_string())
            .unwrap_or_else(|| "–".into()),
        g.allocated_bound()
            .strip_prefix(", ")
            .map(|b| format!(" is {b}"))
            .unwrap_or_default(),
        g.rows.len(),
    );
    if !unfinished.is_empty() {
        text.push_str(&format!(
            "; not finished: {} (reasons under the table)",
            unfinished.join(", ")
        ));
    }
    text.push('.');
    text.push_str(&unsupported_sentences(g));
    if let Some((c, red)) = best {
        let source = c
            .claim
            .and_then(|cl| cl.reduction_pct)
            .map(|s| format!("; source {s:.1}%"))
            .unwrap_or_default();
        text.push_str(&format!(
            " Largest reduction against the control: {} {}, {red:.1}% ({}{source}).",
            markdown::escape(&c.cfg.label),
            c.peak.map(format_bytes).unwrap_or_default(),
            fmt_opt(c.s.measured.samples_per_s, 2, " samples/s"),
        ));
    }
    text
}

/// One sentence per reason for the configurations the group's backend cannot run, e.g. "
/// Kernel fusion: Burn's fusion backend applies to the CubeCL backends (CUDA here); the flex CPU
/// backend has none: 18 configurations not run on flex (`ck1-f32-fusion`, ...)."; empty when
/// every configuration ran.
fn unsupported_sentences(g: &Group) -> String {
    let mut by_reason: Vec<(String, Vec<&str>)> = Vec::new();
    for c in &g.unsupported {
        let reason = c.s.reason.as_deref().unwrap_or("").to_string();
        match by_reason.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, names)) => names.push(&c.cfg.name),
            None => by_reason.push((reason, vec![&c.cfg.name])),
        }
    }
    by_reason
        .iter()
        .map(|(reason, names)| {
            let mut reason = reason.trim_end_matches('.').to_string();
            if let Some(first) = reason.get(..1) {
                reason = first.to_uppercase() + &reason[1..];
            }
            format!(
                " {}: {} configuration{} not run, unsupported on {} ({}).",
                markdown::escape(&reason),
                names.len(),
                if names.len() == 1 { "" } else { "s" },
                markdown::escape(&g.backend_label),
                name_list(names)
            )
        })
        .collect()
}

/// Configuration names as code spans, the first three and a count of the rest when there are
/// more than four.
fn name_list(names: &[&str]) -> String {
    let shown = if names.len() > 4 { 3 } else { names.len() };
    let mut text = names[..shown]
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > shown {
        text.push_str(&format!(" and {} more", names.len() - shown));
    }
    text
}

/// A binary unit for a column of byte counts: the largest that keeps the column's largest
/// value at 1 or more (KiB, MiB or GiB), with the decimals [`format_bytes`] uses for it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ByteUnit {
    name: &'static str,
    bytes: f64,
    decimals: usize,
}

impl ByteUnit {
    fn for_values(values: impl Iterator<Item = f64>) -> ByteUnit {
        let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
        if max >= MIB * 1024.0 {
            ByteUnit {
                name: "GiB",
                bytes: MIB * 1024.0,
                decimals: 3,
            }
        } else if max >= MIB {
            ByteUnit {
                name: "MiB",
                bytes: MIB,
                decimals: 1,
            }
        } else {
            ByteUnit {
                name: "KiB",
                bytes: 1024.0,
                decimals: 1,
            }
        }
    }
    fn format(self, v: Option<f64>) -> String {
        fmt_opt(v.map(|b| b / self.bytes), self.decimals, "")
    }
}

/// One column of a per-configuration table: its header (with the unit) and its cell for a
/// configuration. Tables are lists of these, so a column is added by pushing one.
struct Column<'g> {
    header: String,
    cell: Box<dyn Fn(&ConfigRow) -> String + 'g>,
}

impl<'g> Column<'g> {
    fn new(header: impl Into<String>, cell: impl Fn(&ConfigRow) -> String + 'g) -> Self {
        Column {
            header: header.into(),
            cell: Box::new(cell),
        }
    }

    /// Byte counts from `value`, in one unit for the whole column (named in the header).
    fn bytes(g: &'g Group, header: &str, value: impl Fn(&ConfigRow) -> Option<f64> + 'g) -> Self {
        let unit = ByteUnit::for_values(g.rows.iter().filter_map(&value));
        Column::new(format!("{header} ({})", unit.name), move |c| {
            unit.format(value(c))
        })
    }
}

/// The per-configuration table of `g` with `columns`: configuration label and status first
/// (the status a short word, the reason of an unfinished job as the status cell's footnote).
fn config_table(caption: String, g: &Group, columns: Vec<Column>) -> Table {
    let mut table = Table {
        caption,
        columns: ["Configuration", "Status"]
            .into_iter()
            .map(String::from)
            .chain(columns.iter().map(|c| c.header.clone()))
            .collect(),
        rows: g
            .rows
            .iter()
            .map(|c| {
                [c.cfg.label.clone(), c.status.as_str().to_string()]
                    .into_iter()
                    .chain(columns.iter().map(|col| (col.cell)(c)))
                    .collect()
            })
            .collect(),
        notes: Vec::new(),
    };
    status_notes(&mut table, g, 1);
    table
}

/// Footnotes the status cell (column `column`) of each unfinished configuration with the
/// record's reason.
fn status_notes(table: &mut Table, g: &Group, column: usize) {
    for (i, c) in g.rows.iter().enumerate().filter(|(_, c)| !c.ok) {
        match c.s.reason.as_deref() {
            Some(reason) if !reason.is_empty() => table.note(i, column, reason),
            _ => {}
        }
    }
}

/// The main table, claim vs ours: per configuration our peak, reduction, throughput,
/// relative step time and perplexity, each beside the source's. A "source" column holds only
/// numbers the document states; the step-time ratio computed from the document's Relative
/// Time column is labelled derived. A source column without any value is left out.
fn results_table(inputs: &StudyInputs, g: &Group) -> Table {
    let mut table = config_table(
        format!("Claim vs ours, the source is {}", inputs.header.source),
        g,
        results_columns(g),
    );
    if g.rows
        .iter()
        .any(|c| c.claim.is_some_and(|c| c.time.is_some()))
    {
        note_derived_time(&mut table);
    }
    table
}

/// The columns of [`results_table`]: each of ours, followed by the source's where any
/// configuration's claim has that number.
fn results_columns<'g>(g: &'g Group) -> Vec<Column<'g>> {
    let has = |f: fn(&Claim) -> bool| g.rows.iter().any(|c| c.claim.is_some_and(f));
    let gib_source = has(|c| c.peak_gib.is_some());
    let mut columns = vec![peak_column(g, gib_source)];
    if gib_source {
        columns.push(Column::new("Peak, source (GiB)", |c| {
            source_number(c.claim.and_then(|c| c.peak_gib))
        }));
    }
    columns.push(Column::new("Reduction, ours (%)", |c| {
        fmt_opt(c.red, 1, "")
    }));
    if has(|c| c.reduction_pct.is_some()) {
        columns.push(Column::new("Reduction, source (%)", |c| {
            source_number(c.claim.and_then(|c| c.reduction_pct))
        }));
    }
    columns.push(Column::new("Samples/s, ours", |c| {
        fmt_opt(c.s.measured.samples_per_s, 2, "")
    }));
    if has(|c| c.samples_per_s.is_some()) {
        columns.push(Column::new("Samples/s, source", |c| {
            source_number(c.claim.and_then(|c| c.samples_per_s))
        }));
    }
    columns.push(Column::new("Step time / control, ours", |c| {
        fmt_opt(c.rel, 2, "x")
    }));
    if has(|c| c.time.is_some()) {
        columns.push(Column::new("Relative Time, source", |c| {
            c.claim
                .and_then(|c| c.time.clone())
                .unwrap_or_else(|| "–".into())
        }));
        columns.push(Column::new(
            "Relative Time / control, derived from the source",
            |c| fmt_opt(c.src_rel, 2, "x"),
        ));
    }
    columns.push(Column::new("Eval ppl, ours", |c| {
        fmt_ppl(c.s.measured.eval_perplexity)
    }));
    if has(|c| c.perplexity.is_some()) {
        columns.push(Column::new("Eval ppl, source", |c| {
            source_number(c.claim.and_then(|c| c.perplexity))
        }));
    }
    columns
}

/// Our peak allocated memory: in the source's unit (GiB) where the source states peaks, else
/// in one byte unit for the column.
fn peak_column<'g>(g: &'g Group, gib_source: bool) -> Column<'g> {
    if gib_source {
        // Ours in the source's unit (GiB), with the digits a CPU-sized peak needs.
        let max = g.rows.iter().filter_map(|c| c.peak).fold(0.0, f64::max);
        let digits = if max >= MIB * 1024.0 { 3 } else { 4 };
        Column::new(
            format!("Peak allocated, ours{} (GiB)", g.allocated_bound()),
            move |c| fmt_opt(c.peak.map(|p| p / (MIB * 1024.0)), digits, ""),
        )
    } else {
        Column::bytes(
            g,
            &format!("Peak allocated, ours{}", g.allocated_bound()),
            |c| c.peak,
        )
    }
}

/// Footnotes the first value of the derived "Relative Time / control" column with how it is
/// derived.
fn note_derived_time(table: &mut Table) {
    if let Some(j) = table
        .columns
        .iter()
        .position(|h| h.starts_with("Relative Time / control"))
    {
        if let Some(i) = table.rows.iter().position(|r| r[j] != "–") {
            table.note(
                i,
                j,
                "Derived: the configuration's Relative Time (the document's time between \
                 steps 10 and 100) over the control's, e.g. BFloat16 41 s / 100 s = 0.41x. \
                 Ours is the median step time over the control's.",
            );
        }
    }
}

/// A number as the source document prints it (no padding digits: 180.0 stays "180.0" only
/// when written so in the experiment file, which copies the document).
fn source_number(v: Option<f64>) -> String {
    v.map(memwall_core::spec::claims::trim_number)
        .unwrap_or_else(|| "–".into())
}

/// The memory table: peak allocated (and on a GPU peak reserved), the activation estimate
/// and the measured peak over the steady state; on a GPU also the time to the first timed
/// step.
fn memory_table(g: &Group) -> Table {
    let mut columns = vec![Column::bytes(
        g,
        &format!("Peak allocated{}", g.allocated_bound()),
        |c| c.peak,
    )];
    if g.gpu {
        columns.push(Column::bytes(
            g,
            &format!("Peak reserved{}", g.bound(|s| &s.peak_reserved_bound)),
            |c| c.s.measured.peak_reserved_bytes,
        ));
    }
    columns.push(Column::bytes(g, "Activations, estimated", |c| {
        c.s.measured.estimated_activation_bytes
    }));
    columns.push(Column::bytes(
        g,
        "Peak − steady state, measured",
        |c| match (c.peak, c.s.measured.steady_bytes) {
            (Some(p), Some(s)) if c.ok => Some((p - s).max(0.0)),
            _ => None,
        },
    ));
    if g.gpu {
        columns.push(Column::new("First timed step after (s)", |c| {
            fmt_opt(c.s.measured.time_to_first_measured_step_s, 1, "")
        }));
    }
    config_table(
        format!(
            "Memory: {} profile on {} ({})",
            g.profile, g.device, g.backend_label
        ),
        g,
        columns,
    )
}

/// A bar series over the group's configurations (NaN where a value is missing).
fn bars(g: &Group, label: &str, value: impl Fn(&ConfigRow) -> Option<f64>) -> Series {
    Series {
        label: label.into(),
        mark: Mark::Bars,
        points: g
            .rows
            .iter()
            .enumerate()
            .map(|(x, c)| (x as f64, value(c).unwrap_or(f64::NAN)))
            .collect(),
        point_labels: g.rows.iter().map(|c| c.cfg.name.clone()).collect(),
    }
}

/// Peak allocated per configuration, and the reduction and relative step time beside the
/// source's (a source series only where the document gives values; its step-time ratio is
/// derived from the document's Relative Time).
fn bar_figures(g: &Group) -> Vec<Figure> {
    let unit = g.mem_unit().0;
    let source_reduction = |c: &ConfigRow| c.claim.and_then(|cl| cl.reduction_pct);
    let drawn = |series: Vec<Series>| -> Vec<Series> {
        series
            .into_iter()
            .filter(|s| s.points.iter().any(|p| p.1.is_finite()))
            .collect()
    };
    let title = |what: &str, series: &[Series]| {
        if series.len() > 1 {
            format!("{what}: ours and the source's")
        } else {
            format!("{what} (ours)")
        }
    };
    let reduction = drawn(vec![
        bars(g, "ours", |c| c.red),
        bars(g, "source", source_reduction),
    ]);
    let step = drawn(vec![
        bars(g, "ours", |c| c.rel),
        bars(g, "source (derived from its Relative Time)", |c| c.src_rel),
    ]);
    vec![
        Figure {
            name: format!("peak_{}", g.slug),
            title: "Peak allocated memory per step (ours)".into(),
            x_label: "configuration".into(),
            y_label: g.peak_axis(),
            series: vec![bars(g, "peak allocated", |c| c.peak.map(|p| p / unit))],
            ..Default::default()
        },
        Figure {
            name: format!("reduction_{}", g.slug),
            title: title("Peak-memory reduction vs the control", &reduction),
            x_label: "configuration".into(),
            y_label: "reduction of peak allocated memory (%)".into(),
            series: reduction,
            ..Default::default()
        },
        Figure {
            name: format!("step_time_{}", g.slug),
            title: title("Step time relative to the control", &step),
            x_label: "configuration".into(),
            y_label: "step time / control step time".into(),
            series: step,
            ..Default::default()
        },
    ]
}

/// Peak allocated against median step time, one labelled point per finished configuration.
fn pareto_figure(g: &Group) -> Option<Figure> {
    let unit = g.mem_unit().0;
    let pareto: Vec<(f64, f64, String)> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            Some((
                c.s.measured.median_step_s?,
                c.peak? / unit,
                c.cfg.name.clone(),
            ))
        })
        .collect();
    (!pareto.is_empty()).then(|| Figure {
        name: format!("pareto_{}", g.slug),
        title: "Memory vs time: peak allocated against median step time".into(),
        x_label: "median step time (s)".into(),
        y_label: g.peak_axis(),
        series: vec![Series {
            label: "configurations".into(),
            points: pareto.iter().map(|(t, m, _)| (*t, *m)).collect(),
            mark: Mark::Points,
            point_labels: pareto.into_iter().map(|(_, _, n)| n).collect(),
        }],
        ..Default::default()
    })
}

/// (K, peak MiB, median step s) per "precision[, fusion]" for checkpointing every K blocks,
/// and (peak MiB, step s) of no checkpointing, from finished configurations without the fused
/// step or a budget.
#[allow(clippy::type_complexity)]
fn interval_points(
    g: &Group,
) -> (
    BTreeMap<String, Vec<(f64, f64, f64)>>,
    BTreeMap<String, (f64, f64)>,
) {
    let unit = g.mem_unit().0;
    let mut by_k: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut none_level = BTreeMap::new();
    for c in g.rows.iter().filter(|c| c.ok) {
        let st = &c.s.strategy;
        if st.fused_optimizer || st.budget.is_some() {
            continue;
        }
        let (Some(p), Some(t)) = (c.peak, c.s.measured.median_step_s) else {
            continue;
        };
        let fusion = if st.fusion { ", fusion" } else { "" };
        let key = format!("{}{fusion}", st.precision);
        match st.checkpoint.as_str() {
            "none" => {
                none_level.insert(key, (p / unit, t));
            }
            "sqrt" => {
                let k = (c.s.size.layers as f64).sqrt().ceil();
                by_k.entry(key).or_default().push((k, p / unit, t));
            }
            other => {
                if let Ok(k) = other.parse::<f64>() {
                    by_k.entry(key).or_default().push((k, p / unit, t));
                }
            }
        }
    }
    (by_k, none_level)
}

/// Peak and median step time against the checkpoint interval K, with no checkpointing as a
/// level line; only when some precision has at least two intervals.
fn interval_figures(g: &Group) -> Vec<Figure> {
    let (by_k, none_level) = interval_points(g);
    if !by_k.values().any(|v| v.len() >= 2) {
        return Vec::new();
    }
    let layers = g.first(|s| Some(s.size.layers as f64)).unwrap_or(1.0);
    let line = |label: String, points: Vec<(f64, f64)>| Series {
        label,
        points,
        ..Default::default()
    };
    let (mut mem, mut time) = (Vec::new(), Vec::new());
    for (key, pts) in &by_k {
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
        mem.push(line(
            format!("{key}, every K"),
            pts.iter().map(|p| (p.0, p.1)).collect(),
        ));
        time.push(line(
            format!("{key}, every K"),
            pts.iter().map(|p| (p.0, p.2)).collect(),
        ));
        if let Some((m, t)) = none_level.get(key) {
            mem.push(line(format!("{key}, none"), vec![(1.0, *m), (layers, *m)]));
            time.push(line(format!("{key}, none"), vec![(1.0, *t), (layers, *t)]));
        }
    }
    vec![
        Figure {
            name: format!("peak_vs_k_{}", g.slug),
            title: "Peak allocated memory vs checkpoint interval K".into(),
            x_label: "K (blocks per segment)".into(),
            y_label: g.peak_axis(),
            log_x: true,
            series: mem,
            ..Default::default()
        },
        Figure {
            name: format!("time_vs_k_{}", g.slug),
            title: "Median step time vs checkpoint interval K".into(),
            x_label: "K (blocks per segment)".into(),
            y_label: "median step time (s)".into(),
            log_x: true,
            series: time,
            ..Default::default()
        },
    ]
}

/// The activation estimate against the measured peak over the steady state, with y = x.
fn estimate_figure(g: &Group) -> Option<Figure> {
    let (unit, unit_name) = g.mem_unit();
    let pts: Vec<(f64, f64, String)> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            let est = c.s.measured.estimated_activation_bytes?;
            let above = (c.peak? - c.s.measured.steady_bytes?).max(0.0);
            Some((est / unit, above / unit, c.cfg.name.clone()))
        })
        .collect();
    if pts.is_empty() {
        return None;
    }
    let max = pts.iter().map(|p| p.0.max(p.1)).fold(0.0, f64::max);
    Some(Figure {
        name: format!("estimated_vs_measured_{}", g.slug),
        title: "Estimated activation memory vs measured (peak − steady state)".into(),
        x_label: format!("estimated activations ({unit_name})"),
        y_label: format!("measured peak − steady ({unit_name})"),
        series: vec![
            Series {
                label: "configurations".into(),
                points: pts.iter().map(|p| (p.0, p.1)).collect(),
                mark: Mark::Points,
                point_labels: pts.into_iter().map(|p| p.2).collect(),
            },
            Series {
                label: "y = x".into(),
                points: vec![(0.0, 0.0), (max, max)],
                ..Default::default()
            },
        ],
        ..Default::default()
    })
}

/// Most lines one chart draws: more are not told apart by colour.
const MAX_LINES: usize = 8;

/// Training loss per step of each finished configuration, in the group's order: one chart per
/// [`MAX_LINES`] - 1 configurations, each with the control's curve as the reference.
fn loss_figures(g: &Group, curves: &BTreeMap<String, Vec<(f64, f64)>>) -> Vec<Figure> {
    let line = |name: &str| {
        curves.get(name).map(|points| Series {
            label: name.to_string(),
            points: points.clone(),
            mark: Mark::Line,
            point_labels: Vec::new(),
        })
    };
    let control = g
        .rows
        .iter()
        .find(|c| c.s.strategy.control)
        .map(|c| c.s.config.clone());
    let others: Vec<Series> = g
        .rows
        .iter()
        .map(|c| c.s.config.clone())
        .filter(|n| Some(n) != control.as_ref())
        .filter_map(|n| line(&n))
        .collect();
    let reference = control.as_deref().and_then(line);
    let per_chart = MAX_LINES - usize::from(reference.is_some());
    let chunks: Vec<&[Series]> = others.chunks(per_chart).collect();
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| Figure {
            name: if n == 1 {
                format!("loss_{}", g.slug)
            } else {
                format!("loss_{}_{}", g.slug, i + 1)
            },
            title: if n == 1 {
                "Training loss per step".into()
            } else {
                format!("Training loss per step ({} of {n})", i + 1)
            },
            x_label: "step".into(),
            y_label: "train loss (nats/token)".into(),
            series: reference
                .iter()
                .cloned()
                .chain(chunk.iter().cloned())
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// The sweep `sweep` (a configuration name with `ck*` for the interval) of group `g`: the
/// activation peak (peak allocated − steady state) of each finished configuration by its
/// interval, fitted ([`Sweep`]); `None` when none of its configurations finished here.
fn group_sweep(g: &Group, sweep: &str) -> Option<Sweep> {
    let layers = g.first(|s| Some(s.size.layers as usize))?;
    let points: Vec<SweepPoint> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            let k = sweep_member(sweep, &c.cfg.name)?.segment_len(layers)?;
            let peak = c.peak?;
            let steady = c.s.measured.steady_bytes?;
            Some(SweepPoint {
                k,
                config: c.cfg.name.clone(),
                activation_bytes: (peak - steady).max(0.0),
                peak_bytes: peak,
                step_s: c.s.measured.median_step_s,
            })
        })
        .collect();
    (!points.is_empty()).then(|| Sweep::new(layers, points))
}

/// The sweeps the claims name (`<sweep>.<metric>`) with a finished configuration in `g`, each
/// once, in the claims' order.
fn claimed_sweeps(g: &Group, claims: &[SourceClaim]) -> Vec<(String, Sweep)> {
    let mut out: Vec<(String, Sweep)> = Vec::new();
    for claim in claims {
        let Some((pattern, _)) = sweep_measure(&claim.measure) else {
            continue;
        };
        if out.iter().any(|(p, _)| p == pattern) {
            continue;
        }
        if let Some(sweep) = group_sweep(g, pattern) {
            out.push((pattern.to_string(), sweep));
        }
    }
    out
}

/// `x` with at most three significant decimals for the prose ("2.67", "0.12", "17").
fn short(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The fit in words: "a = 0.25 MiB per checkpoint, b = 4.50 MiB per block, c = 3.00 MiB
/// (R² 0.998, RMS relative error 1.2%); sqrt(a·N/b) = 2.67".
fn fit_text(fit: &crate::results::sublinear::SublinearFit) -> String {
    let mib = |b: f64| format!("{} MiB", short(b / MIB));
    let k = fit
        .continuous_minimizer()
        .map(|k| format!("; its minimizer √(a·N/b) = {}", short(k)))
        .unwrap_or_default();
    format!(
        "a = {} per checkpoint, b = {} per block of the recomputed segment, c = {} (R² {:.3}, \
         RMS relative error {:.1}%){k}",
        mib(fit.a),
        mib(fit.b),
        mib(fit.c),
        fit.r2,
        100.0 * fit.rms_rel
    )
}

/// The glance's answer for a sweep measure `measure` (sweep `sweep`, metric `metric`) from
/// group `g`: the value with what it rests on as the footnote; a fit without the claimed shape
/// contradicts the model whatever its error.
fn sweep_answer(g: &Group, measure: &str, sweep: &str, metric: SweepMetric) -> Answer {
    let Some(s) = group_sweep(g, sweep) else {
        return Answer::Missing(format!(
            "no configuration of the sweep `{sweep}` finished on {}",
            g.device
        ));
    };
    let value = match s.metric(metric) {
        Ok(v) => v,
        Err(why) => return Answer::Missing(format!("`{sweep}` on {}: {why}", g.device)),
    };
    let m = Measure::new(measure, value, "%", 1);
    let mib = |b: f64| format!("{} MiB", short(b / MIB));
    let n = s.layers;
    let best = s.best().map(|p| (p.k, p.activation_bytes));
    let best_text = best
        .map(|(k, y)| format!("the measured minimum {} at K = {k}", mib(y)))
        .unwrap_or_default();
    let note = match metric {
        SweepMetric::FitRmsPct => {
            let Some(fit) = s.fit else {
                return Answer::Missing("no fit".into());
            };
            let text = format!(
                "Least-squares fit of peak − steady state = a·⌈N/K⌉ + b·K + c over K = {} \
                 (N = {n}), relative residuals: {}.",
                s.points
                    .iter()
                    .map(|p| p.k.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                fit_text(&fit)
            );
            if !fit.has_shape() {
                return Answer::Contradicted(
                    m,
                    format!(
                        "{text} The fit has no O(N/K) + O(K) shape: its two costs do not balance \
                         at a K in [1, N] (a and b positive with √(a·N/b) between 1 and {n})."
                    ),
                );
            }
            text
        }
        SweepMetric::FitKExcessPct => {
            let fit_k = s.fit_best().map(|p| (p.k, p.activation_bytes));
            match fit_k {
                Some((k, y)) => format!(
                    "Of the measured intervals the fit is lowest at K = {k}, which measures {}; \
                     {best_text}.",
                    mib(y)
                ),
                None => best_text,
            }
        }
        SweepMetric::SqrtNExcessPct => {
            let k = s.sqrt_k();
            let ratio = s
                .fit
                .filter(|f| f.a > 0.0)
                .map(|f| {
                    format!(
                        " The slide's K = √N balances equal unit costs; measured, one more block \
                         of the recomputed segment costs b/a = {} checkpoints, so the minimum \
                         lies near √(a·N/b).",
                        short(f.b / f.a)
                    )
                })
                .unwrap_or_default();
            format!(
                "K = ⌈√N⌉ = {k} (N = {n}) measures {}; {best_text}.{ratio}",
                s.at(k).map(|p| mib(p.activation_bytes)).unwrap_or_default()
            )
        }
        SweepMetric::UDepthPct => format!(
            "{}; K = 1 measures {} and K = N = {n} measures {}.",
            best_text
                .get(..1)
                .map(|f| f.to_uppercase() + &best_text[1..])
                .unwrap_or_default(),
            s.at(1).map(|p| mib(p.activation_bytes)).unwrap_or_default(),
            s.at(n).map(|p| mib(p.activation_bytes)).unwrap_or_default()
        ),
    };
    Answer::Explained(m, note)
}

/// The sweep's table: per interval the segments, the measured activation peak, the fit, the
/// residual and the median step time, with the measured minimum, the fit's lowest and
/// K = ceil(sqrt(N)) marked.
fn sweep_table(pattern: &str, s: &Sweep) -> Table {
    let best = s.best().map(|p| p.k);
    let fit_best = s.fit_best().map(|p| p.k);
    let caption = match &s.fit {
        Some(f) => format!(
            "Activation peak vs K, sweep `{pattern}` (N = {}): fit a·⌈N/K⌉ + b·K + c with {}",
            s.layers,
            fit_text(f)
        ),
        None => format!(
            "Activation peak vs K, sweep `{pattern}` (N = {}): too few intervals to fit",
            s.layers
        ),
    };
    let rows = s
        .points
        .iter()
        .map(|p| {
            let fitted = s.fit.map(|f| f.predict(p.k));
            let mut marks = Vec::new();
            if Some(p.k) == best {
                marks.push("measured minimum");
            }
            if Some(p.k) == fit_best {
                marks.push("fit's lowest");
            }
            if p.k == s.sqrt_k() {
                marks.push("K = ⌈√N⌉");
            }
            vec![
                p.k.to_string(),
                crate::results::sublinear::segments(s.layers, p.k).to_string(),
                format!("{:.2}", p.activation_bytes / MIB),
                fmt_opt(fitted.map(|f| f / MIB), 2, ""),
                fmt_opt(
                    fitted.map(|f| 100.0 * (p.activation_bytes - f) / p.activation_bytes),
                    1,
                    "",
                ),
                format!("{:.1}", p.peak_bytes / MIB),
                fmt_opt(p.step_s, 3, ""),
                marks.join(", "),
            ]
        })
        .collect();
    Table {
        caption,
        columns: [
            "K",
            "Segments ⌈N/K⌉",
            "Peak − steady, measured (MiB)",
            "Fit (MiB)",
            "Residual (%)",
            "Peak allocated (MiB)",
            "Median step (s)",
            "",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        notes: Vec::new(),
    }
}

/// The sweep's figure: the measured activation peak against K (both axes logarithmic, so
/// that the bottom of the U is not flattened by K = N), the fit at integer K spaced evenly on
/// the axis, the measured minimum, and K = sqrt(N) and the fit's minimizer sqrt(a·N/b) as
/// vertical lines.
fn sweep_figure(g: &Group, pattern: &str, s: &Sweep) -> Figure {
    let measured: Vec<(f64, f64)> = s
        .points
        .iter()
        .map(|p| (p.k as f64, p.activation_bytes / MIB))
        .collect();
    let positive = measured.iter().map(|p| p.1).filter(|y| *y > 0.0);
    let top = positive.clone().fold(0.0, f64::max) * 1.1;
    let bottom = positive.fold(f64::INFINITY, f64::min) * 0.8;
    let vertical = |label: String, x: f64| Series::line(label, vec![(x, bottom), (x, top)]);
    let mut series = vec![Series::scatter("measured (peak − steady)", measured)];
    if let Some(f) = s.fit {
        // About 40 integer intervals, evenly spaced on the logarithmic axis.
        let mut ks: Vec<usize> = (0..=40)
            .map(|i| (s.layers as f64).powf(f64::from(i) / 40.0).round() as usize)
            .collect();
        ks.dedup();
        series.push(Series::line(
            "fit a·⌈N/K⌉ + b·K + c",
            ks.into_iter()
                .map(|k| (k as f64, f.predict(k) / MIB))
                .collect(),
        ));
        if let Some(k) = f.continuous_minimizer() {
            series.push(vertical(
                format!("fit's minimizer √(a·N/b) = {}", short(k)),
                k,
            ));
        }
    }
    if let Some(b) = s.best() {
        series.push(Series {
            label: format!("measured minimum, K = {}", b.k),
            points: vec![(b.k as f64, b.activation_bytes / MIB)],
            mark: Mark::Points,
            point_labels: vec![format!("K = {}", b.k)],
        });
    }
    series.push(vertical(
        format!("√N = {}", short((s.layers as f64).sqrt())),
        (s.layers as f64).sqrt(),
    ));
    Figure {
        name: format!("sublinear_{}_{}", g.slug, slug(pattern)),
        title: format!(
            "Activation peak vs checkpoint interval K, N = {} blocks (sweep {pattern})",
            s.layers
        ),
        x_label: "K (blocks per segment)".into(),
        y_label: "peak allocated − steady state (MiB)".into(),
        log_x: true,
        log_y: true,
        series,
        ..Default::default()
    }
}

/// What the sweep section states: the model, where it comes from, what is measured, and why
/// its minimum need not be the slide's K = sqrt(N).
fn sweep_note(s: &Sweep, records: &StudyRecords) -> String {
    // One checkpoint is one block input, batch x seq_len x d_model elements.
    let input = s
        .points
        .first()
        .and_then(|p| records.records.iter().find(|r| r.spec.config == p.config))
        .map(|r| {
            let m = &r.spec.model;
            let bytes = r.spec.strategy.precision.bytes();
            format!(
                " One block input here is {} × {} × {} × {bytes} B = {} MiB (batch × seq_len × \
                 d_model × bytes per element).",
                m.batch,
                m.seq_len,
                m.d_model,
                short((m.batch * m.seq_len * m.d_model * bytes) as f64 / MIB)
            )
        })
        .unwrap_or_default();
    let fit = s
        .fit
        .map(|f| format!(" Fitted here: {}.{input}", fit_text(&f)))
        .unwrap_or_default();
    format!(
        "*The sublinear model.* Checkpointing every K of N = {} blocks keeps the input of each \
         of the ⌈N/K⌉ segments (the slide's checkpoint cost, O(N/K)) and, while backward \
         recomputes a segment, the activations of its K blocks (the re-computation cost, O(K)): \
         memory = a·⌈N/K⌉ + b·K + c (CMU 15-442/15-642, Memory Optimizations, slide \
         \"Sublinear Memory Cost\"; Chen, Xu, Zhang and Guestrin 2016, \"Training Deep Nets \
         with Sublinear Memory Cost\", arXiv:1604.06174, Section 4). Its minimum over K lies at \
         K* = √(a·N/b); the slide's K = √N is the case of equal unit costs, a = b. Measured: \
         peak allocated − steady state (the bytes live at the start of the step: parameters, \
         optimizer state, batch), so that what does not depend on K is left out; the fit \
         minimizes relative residuals, since the peaks span more than an order of magnitude.{fit}",
        s.layers
    )
}

/// The environment of a group, read from its first record: device, backend, numerics, host,
/// revision, model and training settings, and the memory probe.
fn environment_table(inputs: &StudyInputs, g: &Group) -> Result<Option<Table>> {
    let Some(key) = g.rows.first().map(|c| c.s.key.clone()) else {
        return Ok(None);
    };
    let Some(rec) = inputs.records.get(&key) else {
        return Ok(None);
    };
    let m = &rec.spec.model;
    let model = format!(
        "{} layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}, vocab {}",
        m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, m.vocab
    );
    Ok(Some(record_environment(
        rec,
        format!(
            "{} profile on {} ({})",
            g.profile, g.device, g.backend_label
        ),
        model,
        "training",
    )))
}

/// The environment table of a training record: device, backend, numerics, CPU, OS, git
/// revision, then `model` (its description), the training settings under the field name
/// `training` and the memory probe.
pub fn record_environment(
    rec: &JobRecord,
    caption: String,
    model: String,
    training: &str,
) -> Table {
    let (e, t) = (&rec.env, &rec.spec.train);
    let row = |field: &str, value: String| vec![field.to_string(), value];
    Table {
        caption,
        columns: vec!["field".into(), "value".into()],
        rows: vec![
            row("device", e.device_name.clone()),
            row("backend", format!("burn {} {}", e.burn_version, e.backend)),
            row("numerics", e.numerics.clone()),
            row(
                "CPU",
                format!("{} ({} threads)", e.cpu_model, e.cpu_threads),
            ),
            row("OS", e.os.clone()),
            row("git revision", e.git_revision.clone()),
            row("model", model),
            row(
                training,
                format!(
                    "{:?}, lr {}, {} warm-up + {} measured steps, {} eval batches, seed {}",
                    t.optimizer, t.lr, t.warmup_steps, t.steps, t.eval_batches, t.seed
                ),
            ),
            row("memory probe", rec.memory_probe.clone()),
        ],
        notes: Vec::new(),
    }
}

/// Records whose configuration is no longer in the experiment file: listed, not dropped.
fn stale_records_section(inputs: &StudyInputs, stale: &[ConfigSummary]) -> Option<Section> {
    let rows: Vec<Vec<String>> = stale
        .iter()
        .map(|s| {
            vec![
                s.config.clone(),
                s.profile.clone(),
                s.backend.clone(),
                s.status.as_str().to_string(),
                s.key.clone(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    Some(Section {
        details: None,
        title: "Records not in the experiment file".into(),
        claim: "None: these configurations are no longer in the experiment file.".into(),
        ours: format!(
            "{} record(s) in `runs/{}/` belong to configurations the experiment file no longer \
             defines; they are not in the tables and figures above. Delete their folders or \
             restore the configurations.",
            rows.len(),
            inputs.header.name
        ),
        notes: Vec::new(),
        tables: vec![Table {
            caption: "Records not in the experiment file".into(),
            columns: [
                "configuration",
                "profile",
                "backend",
                "status",
                "record key",
            ]
            .map(String::from)
            .to_vec(),
            rows,
            notes: Vec::new(),
        }],
        figures: Vec::new(),
    })
}

/// The records of the study that could not be read (named with their file and the reason), so
/// that a damaged or foreign record is seen, not silently dropped.
fn unreadable_records_section(records: &StudyRecords) -> Option<Section> {
    if records.unreadable.is_empty() {
        return None;
    }
    let rows = records
        .unreadable
        .iter()
        .map(|(path, why)| vec![path.display().to_string(), why.clone()])
        .collect();
    Some(Section {
        details: None,
        title: "Records that could not be read".into(),
        claim: "None: these files are in the record store but do not read as records.".into(),
        ours: format!(
            "{} file(s) under `{}` were left out of every table and figure. Rerun their \
             configurations with `--force`, or delete the folders.",
            records.unreadable.len(),
            records.dir.display()
        ),
        notes: Vec::new(),
        tables: vec![Table {
            caption: "Records that could not be read".into(),
            columns: vec!["file".into(), "error".into()],
            rows,
            notes: Vec::new(),
        }],
        figures: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_source_durations() {
        assert_eq!(parse_duration("1m 40s"), Some(100.0));
        assert_eq!(parse_duration("41s"), Some(41.0));
        assert_eq!(parse_duration("2m 5s"), Some(125.0));
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn formats_bytes_with_binary_units() {
        assert_eq!(format_bytes(1536.0), "1.5 KiB");
        assert_eq!(format_bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
        assert_eq!(
            format_bytes(21.165 * 1024.0 * 1024.0 * 1024.0),
            "21.165 GiB"
        );
    }

    /// `experiments/checkpoint_interval.toml` at the cpu profile and records of its deep model's
    /// sweep on flex, each with the activation peak `activation(K)` MiB above a steady state of
    /// 40 MiB (the `none` control at the whole model's).
    fn deep_sweep(activation: impl Fn(usize) -> f64) -> (crate::spec::Study, StudyRecords) {
        use crate::device::BackendKind;
        use crate::results::{JobRecord, Summary};
        use crate::spec::{PreparedData, Profile, Study};
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../experiments/checkpoint_interval.toml");
        let study = Study::load(&path, Profile::Cpu, None).unwrap();
        let corpora = study
            .vocabularies()
            .into_iter()
            .map(|v| {
                let data = PreparedData {
                    dir: "data/x".into(),
                    fingerprint: format!("v{v}"),
                    vocab_size: v,
                    eos_id: 0,
                };
                (v, data)
            })
            .collect();
        let mut records = Vec::new();
        for job in study.jobs(BackendKind::Flex, 0, &corpora) {
            let Some(model) = study.configs.iter().find(|c| c.name == job.config) else {
                continue;
            };
            if model.model.as_deref() != Some("deep") {
                continue;
            }
            let n = job.model.layers;
            let k = model.checkpoint.segment_len(n).unwrap_or(n);
            let steady = 40.0 * MIB;
            let peak = steady + activation(k) * MIB;
            let mut r =
                JobRecord::unfinished(&job, JobStatus::Ok, String::new(), Default::default());
            r.reason = None;
            r.env.device_name = "Test CPU".into();
            r.env.backend = "flex".into();
            r.finished_at = "2026-01-01T00:00:00Z".into();
            r.summary = Some(Summary {
                parameters: 1000,
                median_step_s: 0.1,
                samples_per_s: 80.0,
                tokens_per_s: 5120.0,
                peak_allocated_bytes: peak as u64,
                peak_reserved_bytes: peak as u64,
                baseline_bytes: 0,
                final_train_loss: 3.0,
                eval_loss: 3.1,
                eval_perplexity: 22.2,
                mfu: None,
                peak_flops: None,
                wall_s: 1.0,
                steady_bytes: steady as u64,
                estimated_activation_bytes: 0,
                time_to_first_measured_step_s: Some(0.5),
            });
            records.push(r);
        }
        let records = StudyRecords {
            dir: "runs/checkpoint_interval".into(),
            records,
            unreadable: Vec::new(),
        };
        (study, records)
    }

    /// The glance's verdicts of the study's claims, by claim id.
    fn verdicts(
        study: &crate::spec::Study,
        records: &StudyRecords,
    ) -> BTreeMap<String, (memwall_core::spec::claims::Verdict, String)> {
        let (sections, _, glance) = sections(
            records,
            &study.header,
            &study.configs,
            &study.goals,
            &study.claims,
            &[],
        )
        .unwrap();
        assert!(
            sections[0].title.contains("model `deep`"),
            "{}",
            sections[0].title
        );
        study
            .claims
            .iter()
            .zip(glance)
            .map(|(c, row)| (c.id.clone(), (row.verdict, row.ours)))
            .collect()
    }

    #[test]
    fn the_sublinear_claims_are_answered_by_the_deep_sweep_and_fail_a_wrong_one() {
        use memwall_core::spec::claims::Verdict::{Agree, Disagree};
        let layers: usize = 128;
        // The model itself: a = 0.25 MiB per checkpoint, b = 4.5 MiB per block, c = 3 MiB;
        // lowest at K = 3, against sqrt(N) = 12.
        let model = |k: usize| 0.25 * layers.div_ceil(k) as f64 + 4.5 * k as f64 + 3.0;
        let (study, records) = deep_sweep(model);
        let v = verdicts(&study, &records);
        assert_eq!(v["sublinear_model"].0, Agree, "{v:?}");
        assert_eq!(v["sublinear_minimizer"], (Agree, "0.0%".into()), "{v:?}");
        assert_eq!(
            v["sqrt_n_segments"].0, Disagree,
            "K = 12 is not the minimum: {v:?}"
        );
        assert_eq!(v["sublinear_u_shape"].0, Agree, "{v:?}");
        let (sections, _, _) = sections(
            &records,
            &study.header,
            &study.configs,
            &study.goals,
            &study.claims,
            &[],
        )
        .unwrap();
        let deep = &sections[0];
        assert!(deep
            .figures
            .iter()
            .any(|f| f.name.starts_with("sublinear_") && f.series.len() >= 4));
        let table = deep
            .tables
            .iter()
            .find(|t| t.caption.starts_with("Activation peak vs K"))
            .expect("the sweep's table");
        assert_eq!(table.rows.len(), 11, "K = 1 ... 128, sqrt resolving to 12");
        assert!(
            table.rows[2][7].contains("measured minimum"),
            "{:?}",
            table.rows[2]
        );
        // Checkpointing that saves nothing (the peak only grows with K): the model and the U
        // disagree.
        let (study, records) = deep_sweep(|k| 20.0 + 4.5 * k as f64);
        let v = verdicts(&study, &records);
        assert_eq!(v["sublinear_model"].0, Disagree, "{v:?}");
        assert_eq!(v["sublinear_u_shape"].0, Disagree, "{v:?}");
        // A minimum at an interval the model cannot put it (a dip at K = 32).
        let (study, records) = deep_sweep(|k| if k == 32 { 10.0 } else { model(k) });
        let v = verdicts(&study, &records);
        assert_eq!(v["sublinear_model"].0, Disagree, "{v:?}");
    }

    #[test]
    fn formats_diverged_perplexity_in_scientific_notation() {
        assert_eq!(fmt_ppl(Some(398.04)), "398.0");
        assert_eq!(fmt_ppl(Some(21138645933.0)), "2.11e10");
        assert_eq!(fmt_ppl(None), "–");
    }
}
