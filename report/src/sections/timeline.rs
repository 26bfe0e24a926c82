//! The report's memory timelines: per group of a training study, one figure of overlaid step
//! timelines (live bytes over one step, the control's phases shaded, each line's peak marked)
//! and the table "peak: when and what" per configuration, from the records' [`StepTimeline`]s
//! ([`memwall_core::timeline`]).

use crate::analysis::JobRecord;
use crate::content::{Band, Figure, Mark, Section, Series, Table};
use crate::units::format_bytes;
use memwall_core::spec::MAX_TIMELINE_LINES;
use memwall_core::timeline::{PeakBreakdown, StepTimeline};

/// One configuration's traced step: its label, whether it is the control, its record.
pub struct Line<'a> {
    /// The configuration's name (`[[configs]]` `name`).
    pub name: &'a str,
    /// Its label in the report.
    pub label: &'a str,
    /// The study's control.
    pub control: bool,
    /// The record, with its timeline.
    pub record: &'a JobRecord,
}

impl Line<'_> {
    fn timeline(&self) -> &StepTimeline {
        self.record
            .timeline
            .as_ref()
            .expect("lines are built from records with a timeline")
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The breakdown's columns: a part's name prefix, the column header.
const COLUMNS: [(&str, &str); 8] = [
    ("parameters", "parameters"),
    ("optimizer state", "optimizer state"),
    ("gradients", "gradients"),
    ("saved activations", "saved activations and checkpoints"),
    ("recomputed activations", "recomputed activations"),
    (
        "left by the earlier phases",
        "left by earlier phases, not derived",
    ),
    ("allocated in", "allocated in the peak's phase"),
    ("batch, data and runtime", "batch, data and runtime"),
];

/// The lines of the figure: those of the configurations `chosen` names (the experiment file's
/// `study.timeline`; the file allows at most [`MAX_TIMELINE_LINES`] per model), else (none of
/// them in this group) the control and the next configurations in file order, at most
/// [`MAX_TIMELINE_LINES`].
fn figure_lines<'a, 'b>(lines: &'b [Line<'a>], chosen: &[String]) -> Vec<&'b Line<'a>> {
    let named: Vec<&Line> = chosen
        .iter()
        .filter_map(|n| lines.iter().find(|l| l.name == n))
        .collect();
    if !named.is_empty() {
        return named;
    }
    let mut out: Vec<&Line> = lines.iter().filter(|l| l.control).collect();
    out.extend(lines.iter().filter(|l| !l.control));
    out.truncate(MAX_TIMELINE_LINES);
    out
}

/// The section of one group: `None` when no record of it has a timeline. `heading` names the
/// group, `slug` makes the figure's file name unique.
pub fn section(heading: &str, slug: &str, lines: &[Line], chosen: &[String]) -> Option<Section> {
    if lines.is_empty() {
        return None;
    }
    let shown = figure_lines(lines, chosen);
    let first = lines[0].timeline();
    let mut notes = vec![format!(
        "Each line is one training step of the configuration's job (its last timed step on the \
         CPU, the untimed memory step on CUDA): {}. Time runs from the step's start; the \
         shaded ranges are the phases of {} (forward, backward, optimizer step), each line's \
         peak is marked. A phase ends where the training loop marks it: after each block's \
         forward (or segment's), the head and loss, the head's backward, each segment's \
         backward (with its recomputation), the embeddings' backward, the optimizer step. \
         Shading: forward (grey-blue), backward (sand), optimizer step (grey-green).",
        first.source,
        shown
            .first()
            .map_or("the first line".to_string(), |l| format!("*{}*", l.label)),
    )];
    notes.push(
        "\"Peak: when and what\" splits each peak into parts that add up to it: the \
         parameters (their elements x bytes per element) and the optimizer state (by the \
         optimizer's definition) are derived from sizes; so are the gradients and the saved \
         activations that exist at the start of the peak's phase (the per-block profile's \
         activation bytes, each gradient the size of its parameter) where the executor says \
         which exist; the rest is measured as differences of exact allocator counts: the steady \
         state's remainder (batch, corpus, runtime), what the earlier phases left beyond the \
         derived parts, and what the peak's own phase allocated up to the peak. Inside a one-pass \
         backward activations are freed as gradients appear, so those rows give the two together."
            .into(),
    );
    if lines.iter().any(|l| l.timeline().truncated) {
        notes.push(
            "A trace marked truncated filled its buffer: its curve keeps the peak and the phase \
             boundaries but fewer points between them."
                .into(),
        );
    }
    Some(Section {
        title: format!("Memory timeline of one step: {heading}"),
        claim: "The sources give each configuration's peak memory, not when in the training \
                step it is reached or what fills it."
            .into(),
        ours: ours(lines),
        notes,
        tables: vec![peak_table(lines)],
        figures: vec![figure(slug, &shown)],
        details: None,
    })
}

/// One sentence per line of the figure's first configurations: where the peak is and its
/// largest parts.
fn ours(lines: &[Line]) -> String {
    let mut out = Vec::new();
    for l in figure_lines(lines, &[]).into_iter().take(3) {
        let t = l.timeline();
        let Some(b) = t.at_peak() else { continue };
        let phase = t.phases[b.phase].phase.label();
        let mut parts: Vec<&memwall_core::timeline::PeakPart> =
            b.parts.iter().filter(|p| p.bytes > 0).collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.bytes));
        let top: Vec<String> = parts
            .iter()
            .take(3)
            .map(|p| format!("{} {}", p.name, format_bytes(p.bytes as f64)))
            .collect();
        out.push(format!(
            "*{}* peaks at {} in \"{phase}\" ({:.1} ms into a {:.1} ms step), mostly {}.",
            l.label,
            format_bytes(t.peak_bytes as f64),
            t.peak_at_s * 1e3,
            t.duration_s * 1e3,
            top.join(", ")
        ));
    }
    out.join(" ")
}

/// The bytes of the parts of `b` whose names start with `prefix` (None without such a part).
fn part(b: &PeakBreakdown, prefix: &str) -> Option<i64> {
    let mut found = None;
    for p in b.parts.iter().filter(|p| p.name.starts_with(prefix)) {
        *found.get_or_insert(0) += p.bytes;
    }
    found
}

/// "Peak: when and what", one row per line, MiB.
fn peak_table(lines: &[Line]) -> Table {
    let mut columns = vec![
        "configuration".to_string(),
        "peak (MiB)".into(),
        "phase of the peak".into(),
        "at (ms of the step)".into(),
    ];
    columns.extend(COLUMNS.iter().map(|(_, c)| format!("{c} (MiB)")));
    let rows = lines
        .iter()
        .map(|l| {
            let t = l.timeline();
            let mut row = vec![
                l.label.to_string(),
                format!("{:.2}", t.peak_bytes as f64 / MIB),
            ];
            match t.at_peak() {
                Some(b) => {
                    row.push(t.phases[b.phase].phase.label());
                    row.push(format!(
                        "{:.1} of {:.1}",
                        t.peak_at_s * 1e3,
                        t.duration_s * 1e3
                    ));
                    row.extend(COLUMNS.iter().map(|(prefix, _)| {
                        part(&b, prefix).map_or("–".into(), |v| format!("{:.2}", v as f64 / MIB))
                    }));
                }
                None => {
                    let phase = t
                        .peak_phase()
                        .map_or("–".to_string(), |i| t.phases[i].phase.label());
                    row.push(phase);
                    row.push(format!(
                        "{:.1} of {:.1}",
                        t.peak_at_s * 1e3,
                        t.duration_s * 1e3
                    ));
                    row.extend(COLUMNS.iter().map(|_| "–".to_string()));
                }
            }
            row
        })
        .collect();
    let mut table = Table {
        caption: "Peak: when and what (derived parts from sizes, the others measured; each row \
                  adds up to its peak)"
            .into(),
        columns,
        rows,
        notes: Vec::new(),
    };
    for (i, l) in lines.iter().enumerate() {
        if l.timeline().at_peak().is_none() {
            table.note(
                i,
                4,
                "not split: master-weight mixed precision keeps two copies of the parameters in \
                 two dtypes, which the derivation does not model",
            );
        }
    }
    table
}

/// The overlaid timelines of `shown`, in ms and MiB, the first line's phases shaded by pass.
fn figure(slug: &str, shown: &[&Line]) -> Figure {
    let mut series: Vec<Series> = shown
        .iter()
        .map(|l| Series {
            label: l.label.to_string(),
            points: l
                .timeline()
                .points
                .iter()
                .map(|&(t, b)| (t * 1e3, b as f64 / MIB))
                .collect(),
            mark: Mark::Curve,
            point_labels: Vec::new(),
        })
        .collect();
    series.push(Series {
        label: "peak of each line".into(),
        points: shown
            .iter()
            .map(|l| {
                let t = l.timeline();
                (t.peak_at_s * 1e3, t.peak_bytes as f64 / MIB)
            })
            .collect(),
        mark: Mark::Points,
        point_labels: Vec::new(),
    });
    let bands = shown
        .first()
        .map(|l| {
            l.timeline()
                .phases
                .iter()
                .map(|p| Band {
                    x0: p.start_s * 1e3,
                    x1: p.end_s * 1e3,
                    label: p.phase.pass().to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    Figure {
        name: format!("timeline_{slug}"),
        title: "Live bytes over one training step".into(),
        x_label: "time since the step's start (ms)".into(),
        y_label: "live bytes (MiB)".into(),
        series,
        bands,
        ..Default::default()
    }
}
