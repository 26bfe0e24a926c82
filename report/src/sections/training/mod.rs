//! Report sections of a training study. The analysis stage ([`crate::analysis::analysis`])
//! reads the polars study table ([`crate::analysis::study_table`]) and the per-step table into
//! typed values (configuration rows, groups, goal outcomes, step curves); this module only
//! arranges and formats them.

use crate::analysis::sublinear::{Sweep, SweepPoint};
use crate::analysis::summary::{
    analyze, goal_outcomes, joint_coverage, step_curves, step_scaling, ConfigSummary, GoalOutcome,
    GroupSummary, RepeatRuns, StepScaling, StudyAnalysis,
};
use crate::analysis::{stats, steps_table, JobRecord, JobStatus, StudyRecords};
use crate::content::{Details, Figure, GlanceRow, Mark, Measure, Section, Series, Table};
use crate::error::Result;
use crate::glance::{self, Answer};
use crate::sections::timeline;
use crate::spec::{
    CheckpointSpec, Claim, ConfigSelector, ConfigSpec, Goal, GoalMetric, StudyHeader,
};
use crate::text;
use crate::twin::TorchRow;
use memwall_core::spec::claims::{SourceClaim, SweepMetric, TrainingMetric, TrainingTarget};
use polars::prelude::DataFrame;
use std::collections::BTreeMap;

mod claims;
mod inside;
mod plots;
mod sweeps;
mod tables;
mod twins;

pub use crate::units::{format_bytes, parse_duration};
use claims::*;
use memwall_document::environment::record_environment;
use plots::*;
use sweeps::*;
use tables::*;

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
    let source = text::escape(&header.source);
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
    /// The study's PyTorch twin rows (`runs/<study>/pytorch/`): the CPU ones are shown in
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
/// ([`crate::crate::sections::twin::cpu_table`]); the glance does not read them.
///
/// # Errors
/// [`crate::Error::Records`] when the study has no records; [`crate::Error::Report`] on table
/// errors and when the analysis stage cannot read a column (an
/// [`crate::analysis::summary::AnalysisError`] naming it and the study).
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
    let answers = |g: &Group| claims.iter().any(|claim| answers_claim(g, claim, configs));
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
    let mut glance = glance_rows(&inputs, &groups, claims);
    point_to_timelines(&mut glance, &inputs, &groups, claims);
    twins::judge_twins(&mut glance, &inputs, &groups, claims);
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
            let summaries: Vec<(&ConfigSummary, &ConfigSpec)> =
                rows.iter().map(|c| (&c.s, c.cfg)).collect();
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
    let inside = inside::inside_block(inputs, g);
    if !keys.is_empty() && !g.secondary {
        figures.extend(sweeps.iter().map(|(p, s)| sweep_figure(g, p, s)));
        figures.extend(bar_figures(g));
        figures.extend(pareto_figure(g));
        figures.extend(inside.as_ref().map(|(_, f)| f.clone()));
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
        .map(|c| format!("*{}*: {}", text::escape(&c.label), c.maps_to))
        .collect();
    Ok(Section {
        title: g.heading(),
        claim: claim_text(inputs.header, inputs.configs),
        ours: summary(g),
        notes: sweeps
            .iter()
            .map(|(_, s)| sweep_note(s, inputs.records))
            .chain(layer_norm_drift(g))
            .chain(not_run_note(inputs, g))
            .chain(g.secondary.then(|| {
                format!(
                    "The same device with other runtime settings ({}): its numbers are in these \
                     tables; the figures above are drawn for the first group of this device.",
                    text::escape(&g.backend_label)
                )
            }))
            .chain(pytorch.is_some().then(crate::sections::twin::cpu_note))
            .collect(),
        tables: [results_table(inputs, g), memory_table(g)]
            .into_iter()
            .chain(inside.into_iter().flat_map(|(t, _)| t))
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
/// group's records ([`crate::sections::twin::cpu_table`]): `None` for a GPU group, a secondary group (its
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
    // cpu profile's rows), as [`twin::has_cpu_group`] places them.
    let rows: Vec<TorchRow> = inputs
        .pytorch
        .iter()
        .filter(|r| {
            group.iter().any(|m| {
                crate::sections::twin::same_model(m, &r.model)
                    && inputs.by_name.contains_key(m.spec.config.as_str())
            })
        })
        .cloned()
        .collect();
    crate::sections::twin::cpu_table(&rows, group.iter().copied(), &labels, &g.device)
}

/// A GPU group's note naming the study's configurations (of the group's model) that have no
/// record on its device yet, so that a page never reads as the whole study when part of it ran
/// (GPU time comes in short sessions; `memwall bundle --suite` bundles what is missing). `None`
/// for a CPU group (`memwall reproduce` runs every configuration), a secondary group (its
/// device's first group says it), or when every configuration ran.
fn not_run_note(inputs: &StudyInputs, g: &Group) -> Option<String> {
    if !g.gpu || g.secondary {
        return None;
    }
    let ran = |name: &str| {
        g.rows
            .iter()
            .chain(&g.unsupported)
            .any(|c| c.cfg.name == name)
    };
    let of_model: Vec<&ConfigSpec> = inputs
        .configs
        .iter()
        .filter(|c| c.model == g.model)
        .collect();
    let missing: Vec<String> = of_model
        .iter()
        .filter(|c| !ran(&c.name))
        .map(|c| format!("{} (`{}`)", text::escape(&c.label), c.name))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "*Not yet run on {}*: {} of the study's {} configuration(s){} have no record on this \
             device: {}. `memwall bundle --suite --gpu-model \"{}\"` bundles these, leaving out \
             what is stored for this GPU.",
            text::escape(&g.device),
            missing.len(),
            of_model.len(),
            g.model
                .as_ref()
                .map(|m| format!(" of the `{m}` model"))
                .unwrap_or_default(),
            missing.join(", "),
            text::escape(&g.device)
        )
    })
}

/// A note naming the rows whose records ran another layer norm than their configuration now
/// names (records written before the option read as Burn's `composed` norm): their figures
/// measure that norm, not the current one. `None` when every row ran its configuration's norm.
fn layer_norm_drift(g: &Group) -> Option<String> {
    let drifted: Vec<String> = g
        .rows
        .iter()
        .filter(|c| c.s.strategy.layer_norm != c.cfg.layer_norm)
        .map(|c| {
            format!(
                "{} (`{}`)",
                text::escape(&c.cfg.name),
                c.s.strategy.layer_norm.as_str()
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
        .map(|c| format!("{} ({})", text::escape(&c.cfg.label), c.status.as_str()))
        .collect();
    let best = g
        .rows
        .iter()
        .filter(|c| c.ok && !c.s.strategy.control)
        .filter_map(|c| Some((c, c.red?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut text = format!(
        "{} parameters on {} ({}), median of {} measured steps per configuration; peak \
         allocated memory{}. {finished} of the {} configuration(s) run here finished",
        g.first(|s| s.size.parameters)
            .map(human_count)
            .unwrap_or_else(|| "–".into()),
        text::escape(&g.device),
        text::escape(&g.backend_label),
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
            text::escape(&c.cfg.label),
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
                text::escape(&reason),
                names.len(),
                if names.len() == 1 { "" } else { "s" },
                text::escape(&g.backend_label),
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

#[cfg(test)]
mod tests;
