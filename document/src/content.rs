//! The report's content model: what a study hands to the renderers.
//!
//! Every study (a Burn training study, the rematerialization planner, the lecture demos) produces
//! [`Section`]s. The renderers (Markdown, HTML, SVG figures) consume only this model, so a study
//! never formats text or draws pixels itself. A section always pairs the source document's claim
//! with our measurement.

use memwall_core::spec::provenance::{ClaimAbout, Provenance};
use serde::{Deserialize, Serialize};

/// One part of a report: a claim from a source document, what we measured, tables and figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Section {
    /// Heading, e.g. "Scalar checkpointing" (plain text).
    pub title: String,
    /// The source document's claim, quoted or paraphrased, with its location
    /// (file name and section); Markdown.
    pub claim: String,
    /// Our measurement in one or two sentences, with numbers, the device and the repeats;
    /// Markdown. Rendered beside the claim (a two-column table in HTML).
    pub ours: String,
    /// Free Markdown paragraphs (method, caveats, explanations), rendered after `ours`.
    pub notes: Vec<String>,
    /// Tables, rendered after the notes in this order.
    pub tables: Vec<Table>,
    /// Figures, rendered after the tables in this order.
    pub figures: Vec<Figure>,
    /// Reference material a reader may skip (how each configuration maps to the source):
    /// folded in the HTML page, a list after the figures in Markdown.
    #[serde(default)]
    pub details: Option<Details>,
}

/// A folded block of Markdown items under a title.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Details {
    /// The block's title (plain text), e.g. "How each configuration maps to the source".
    pub title: String,
    /// Markdown items.
    pub items: Vec<String>,
}

/// A table with plain-text cells (numbers already formatted; their unit in the column header).
///
/// The renderers right-align a column whose cells are all numbers (an optional sign, digits, a
/// decimal point or exponent, an optional unit suffix such as `%`, `x` or `MiB`; "–" for a
/// missing value) and left-align the others. A long explanation of one cell (why a job failed)
/// goes into [`Table::notes`], not into the cell, so the table stays narrow.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Table {
    /// One line above the table (plain text).
    pub caption: String,
    /// Column headers (plain text, with units, e.g. "Peak allocated (MiB)").
    pub columns: Vec<String>,
    /// Each row has `columns.len()` cells (plain text).
    pub rows: Vec<Vec<String>>,
    /// Footnotes on cells: rendered as a numbered marker in the cell (in HTML also its
    /// tooltip) and the text under the table; equal texts share one number.
    #[serde(default)]
    pub notes: Vec<CellNote>,
}

impl Table {
    /// Attaches the footnote `text` to the cell at (`row`, `column`).
    pub fn note(&mut self, row: usize, column: usize, text: impl Into<String>) {
        self.notes.push(CellNote {
            row,
            column,
            text: text.into(),
        });
    }
}

/// A footnote on one cell of a [`Table`] (plain text), e.g. the reason a job did not finish.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CellNote {
    /// Row index into [`Table::rows`].
    pub row: usize,
    /// Column index into [`Table::columns`].
    pub column: usize,
    /// The footnote text.
    pub text: String,
}

/// How the points of a series are drawn.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// Points joined by a line, in the given order.
    #[default]
    Line,
    /// Unjoined points (scatter), each optionally labelled.
    Points,
    /// Bars at categorical x positions 0, 1, 2, ...; `point_labels` name the categories.
    Bars,
    /// A dense curve: points joined by a thin line, without a dot per point (a memory
    /// timeline's hundreds of samples).
    Curve,
}

/// A named series of (x, y) points.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// Name of the series in the legend.
    pub label: String,
    /// `(x, y)` in the figure's axis units; non-finite points are skipped when drawn.
    pub points: Vec<(f64, f64)>,
    /// How the points are drawn.
    pub mark: Mark,
    /// Per-point labels for `Mark::Points` (empty, or one per point).
    pub point_labels: Vec<String>,
}

impl Series {
    /// `points` joined by a line, in their order, named `label` in the legend.
    pub fn line(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            label: label.into(),
            points,
            mark: Mark::Line,
            point_labels: vec![],
        }
    }

    /// Unjoined, unlabelled `points` (a scatter), named `label` in the legend.
    pub fn scatter(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            mark: Mark::Points,
            ..Series::line(label, points)
        }
    }
}

/// An x/y figure, drawn as SVG. Kind `Dag` figures are drawn as graphs instead (see `edges`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    /// File stem, unique within a report, e.g. "peak_memory_vs_k" (becomes `peak_memory_vs_k.svg`).
    pub name: String,
    /// Caption drawn above the plot.
    pub title: String,
    /// Description of the x axis, with its unit.
    pub x_label: String,
    /// Description of the y axis, with its unit.
    pub y_label: String,
    /// Logarithmic x axis (points with x <= 0 are not drawn).
    pub log_x: bool,
    /// Logarithmic y axis (points with y <= 0 are not drawn).
    pub log_y: bool,
    /// The series, in legend order (colours by position).
    pub series: Vec<Series>,
    /// For graph figures (a DAG drawn as layered boxes): node labels and edges (from, to) by
    /// index. Empty for x/y figures.
    pub nodes: Vec<String>,
    /// Graph edges `(from, to)` as indices into `nodes`.
    pub edges: Vec<(usize, usize)>,
    /// The x values are whole numbers (e.g. the number of a nightly run): ticks only there.
    #[serde(default)]
    pub integer_x: bool,
    /// Shaded x ranges drawn under the series (e.g. the phases of a training step); bands of
    /// the same `label` share a tint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bands: Vec<Band>,
}

/// A shaded x range of a [`Figure`], from `x0` to `x1` in the x axis' units.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Band {
    /// Start (x axis units).
    pub x0: f64,
    /// End (x axis units).
    pub x1: f64,
    /// What the range is ("forward", "backward", ...): bands of one label share a tint.
    pub label: String,
}

impl Figure {
    /// Grouped bars: one bar series per `(label, values)`, with `values[i]` drawn at category
    /// `categories[i]` (x = i). Each series must have one value per category.
    pub fn grouped_bars(
        name: &str,
        title: &str,
        x_label: &str,
        y_label: &str,
        categories: &[String],
        series: Vec<(String, Vec<f64>)>,
    ) -> Figure {
        Figure {
            name: name.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: series
                .into_iter()
                .map(|(label, ys)| Series {
                    label,
                    points: ys
                        .into_iter()
                        .enumerate()
                        .map(|(i, y)| (i as f64, y))
                        .collect(),
                    mark: Mark::Bars,
                    point_labels: categories.to_vec(),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// A named number of a study's result that a `[[claims]]` entry can name as its `measure`
/// (e.g. `"max_batch_ratio"`), with the unit it is printed in and where the number comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measure {
    /// The name a claim's `measure` uses.
    pub name: String,
    /// The value in `unit`.
    pub value: f64,
    /// Unit of `value` ("x", "%", "s", "MB", or empty).
    pub unit: String,
    /// Significant decimals to print.
    pub decimals: usize,
    /// Why the value is missing (NaN), in the study's words; the glance quotes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// The smallest change of `value` the measurement can show, in `unit` (a search's step):
    /// a verdict that one step would turn is "not comparable" (undecided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<f64>,
    /// Proven bounds `(low, high)` of the quantity, in `unit`, where `value` is only an
    /// estimate within them (a solver stopped before proving its schedule optimal): a verdict
    /// the rule would not give on the whole interval is "not comparable" (undecided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<(f64, f64)>,
    /// Measured, derived from measured values, computed by an algorithm of ours, or arithmetic
    /// from the configuration: which claims it may judge
    /// ([`memwall_core::spec::provenance::ClaimAbout::admits`]).
    pub provenance: Provenance,
}

impl Measure {
    /// `value` in `unit`, printed with `decimals` decimals, of provenance `provenance`.
    pub fn new(
        name: &str,
        value: f64,
        unit: &str,
        decimals: usize,
        provenance: Provenance,
    ) -> Measure {
        Measure {
            name: name.into(),
            value,
            unit: unit.into(),
            decimals,
            missing: None,
            resolution: None,
            bounds: None,
            provenance,
        }
    }

    /// The same measure, known to lie in `[low, high]` (in `unit`); bounds that are not
    /// ordered or that do not hold the value are dropped.
    pub fn with_bounds(mut self, low: f64, high: f64) -> Measure {
        self.bounds = (low <= self.value && self.value <= high).then_some((low, high));
        self
    }

    /// The same measure, moving in steps of `step` (in `unit`).
    pub fn with_resolution(mut self, step: f64) -> Measure {
        self.resolution = (step.is_finite() && step > 0.0).then_some(step);
        self
    }

    /// The same measure, saying why it has no value when it has none.
    pub fn missing_because(mut self, why: Option<String>) -> Measure {
        if !self.value.is_finite() {
            self.missing = why;
        }
        self
    }

    /// The value with its unit, e.g. "0.41x" or "12.4 GiB"; a nonzero value under 1e-3 in
    /// scientific notation with two significant digits ("1.6e-9"), whatever `decimals` says.
    pub fn text(&self) -> String {
        let unit = memwall_core::spec::claims::unit_suffix(&self.unit);
        if self.value != 0.0 && self.value.abs() < 1e-3 {
            return format!("{:.1e}{unit}", self.value);
        }
        format!("{:.*}{unit}", self.decimals, self.value)
    }

    /// [`Measure::text`] with as many more decimals (at most 6) as it takes for the printed
    /// number to satisfy `judged` (the rule's verdict on the printed number is the verdict on
    /// the value): a value a hair past its rule's bound must not print as the bound itself.
    pub fn text_judged_as(&self, judged: impl Fn(f64) -> bool) -> String {
        let mut m = self.clone();
        for _ in 0..6 {
            if m.value != 0.0 && m.value.abs() < 1e-3 {
                break;
            }
            let printed: f64 = format!("{:.*}", m.decimals, m.value)
                .parse()
                .unwrap_or(m.value);
            if judged(printed) {
                break;
            }
            m.decimals += 1;
        }
        m.text()
    }
}

/// One row of a report's "Results at a glance" block: a headline claim of the source document
/// beside our measurement, on which device, and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GlanceRow {
    /// The claim's quotation (verbatim from the source document).
    pub quote: String,
    /// Where it stands in the document.
    pub location: String,
    /// The number compared with ours, with its unit; "–" when the claim states none.
    pub claimed: String,
    /// How the compared number is derived from the document's numbers (None: it is stated).
    pub derived: Option<String>,
    /// Our value with its unit ("–" when not measured).
    pub ours: String,
    /// What ours is (the measure) and the rule it is judged by, e.g. "`bfloat16.reduction_pct`
    /// within 10% of 41.3%"; empty for a claim that is not comparable.
    pub rule: String,
    /// Where ours was measured.
    pub device: String,
    /// Agree, disagree or not comparable.
    pub verdict: memwall_core::spec::claims::Verdict,
    /// The verdict's footnote: why the claim is not comparable, what ours rests on, or why
    /// ours contradicts the claim.
    pub why: Option<String>,
    /// What the claim states (the world, a computation, a definition).
    #[serde(default)]
    pub about: ClaimAbout,
    /// Where ours comes from (None: not measured, or not comparable).
    #[serde(default)]
    pub provenance: Option<Provenance>,
    /// The claim's second verdict, ours against PyTorch eager's twin on the same device (None:
    /// no twin ran there, or the claim's measure has none).
    #[serde(default)]
    pub twin: Option<TwinVerdict>,
}

/// Ours against PyTorch eager's run of the same configuration on the same device: the twin's
/// value, the rule and the verdict ([`GlanceRow::twin`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwinVerdict {
    /// PyTorch's value with its unit, e.g. "31.7%".
    pub value: String,
    /// The rule in words, e.g. "within 10 percentage points of PyTorch's 31.7%".
    pub rule: String,
    /// Agree or disagree.
    pub verdict: memwall_core::spec::claims::Verdict,
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwall_core::spec::provenance::Provenance;

    #[test]
    fn a_measure_under_a_thousandth_prints_in_scientific_notation() {
        let m = |v: f64, unit: &str| {
            Measure::new("m", v, unit, 2, Provenance::Computed("test".into())).text()
        };
        assert_eq!(m(1.6e-9, ""), "1.6e-9");
        assert_eq!(m(-2.5e-4, "%"), "-2.5e-4%");
        assert_eq!(m(0.0, ""), "0.00");
        assert_eq!(m(0.41, "x"), "0.41x");
        assert_eq!(m(12.4, "GiB"), "12.40 GiB");
    }
}
