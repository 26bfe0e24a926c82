//! The UIUC lecture's reverse-mode AD worked example (`002_0a85d22a30039616.txt`):
//! y = ln(x1) + x1*x2 - sin(x2) at (x1, x2) = (2, 5), through Burn's autodiff, with the
//! forward (primal) and reverse (adjoint) trace of the evaluation graph.
//!
//! [`measure`] computes the gradients with Burn and the f64 trace and returns an
//! [`AutodiffResult`]; [`sections`] presents it beside the lecture's numbers.
//!
//! May import: [`memwall_document::content`], [`crate::InProcessStudy`] and Burn.

use crate::document::content::{Figure, Measure, Section, Table};
use crate::{Cited, InProcessStudy};
use burn::backend::{Autodiff, Flex};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};
use std::path::Path;

type B = Autodiff<Flex<f32>>;

/// y, dy/dx1, dy/dx2 computed by Burn's reverse-mode autodiff (f32).
pub fn burn_gradients(x1: f32, x2: f32) -> (f64, f64, f64) {
    let device = Default::default();
    let a = Tensor::<B, 1>::from_floats([x1], &device).require_grad();
    let b = Tensor::<B, 1>::from_floats([x2], &device).require_grad();
    let y = a.clone().log() + a.clone() * b.clone() - b.clone().sin();
    let grads = y.backward();
    let v = |t: Tensor<Flex, 1>| t.into_data().iter::<f64>().next().unwrap_or(f64::NAN);
    let yv = y.into_data().iter::<f64>().next().unwrap_or(f64::NAN);
    (
        yv,
        v(a.grad(&grads).expect("x1 requires grad")),
        v(b.grad(&grads).expect("x2 requires grad")),
    )
}

/// One node of the evaluation trace: name, definition, primal value and adjoint dy/dnode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRow {
    /// The node's name, e.g. "v1".
    pub node: String,
    /// How the node is computed, e.g. "ln(x1)".
    pub definition: String,
    /// Primal (forward) value.
    pub value: f64,
    /// Adjoint dy/dnode (reverse sweep).
    pub adjoint: f64,
}

/// The forward and reverse trace in f64, in the lecture's node numbering (v1 = x1, v2 = x2,
/// v3 = ln v1, v4 = v1 x v2, v5 = sin v2, v6 = v3 + v4, v7 = v6 - v5 = y), adjoints
/// accumulated in reverse topological order as on its "Reverse AD evaluation trace".
pub fn trace(x1: f64, x2: f64) -> Vec<TraceRow> {
    let (v1, v2) = (x1, x2);
    let v3 = v1.ln();
    let v4 = v1 * v2;
    let v5 = v2.sin();
    let v6 = v3 + v4;
    let v7 = v6 - v5;
    // reverse sweep
    let b7 = 1.0;
    let b6 = b7;
    let b5 = -b7;
    let b4 = b6;
    let b3 = b6;
    let b2 = b5 * v2.cos() + b4 * v1;
    let b1 = b4 * v2 + b3 / v1;
    let row = |node: &str, definition: &str, value: f64, adjoint: f64| TraceRow {
        node: node.into(),
        definition: definition.into(),
        value,
        adjoint,
    };
    vec![
        row("v1 = x1", "input", v1, b1),
        row("v2 = x2", "input", v2, b2),
        row("v3", "ln(v1)", v3, b3),
        row("v4", "v1 * v2", v4, b4),
        row("v5", "sin(v2)", v5, b5),
        row("v6", "v3 + v4", v6, b6),
        row("y = v7", "v6 - v5", v7, b7),
    ]
}

/// y, dy/dx1 and dy/dx2 as Burn's autodiff computed them (f32, widened to f64).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BurnGradients {
    /// y = ln(x1) + x1*x2 - sin(x2).
    pub y: f64,
    /// dy/dx1.
    pub dy_dx1: f64,
    /// dy/dx2.
    pub dy_dx2: f64,
}

/// The result of the autodiff worked example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutodiffResult {
    /// The evaluation point (x1, x2): the lecture's (2, 5).
    pub point: (f64, f64),
    /// Burn's reverse-mode autodiff at the point.
    pub burn: BurnGradients,
    /// The f64 forward and reverse trace at the point ([`trace`]).
    pub trace: Vec<TraceRow>,
}

/// The autodiff worked example ([`InProcessStudy`]).
pub struct AutodiffExample;

/// The example has no parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl InProcessStudy for AutodiffExample {
    type Params = NoParams;
    type Output = AutodiffResult;
    type Error = crate::Error;
    fn validate(_: &NoParams) -> Result<(), crate::ParamError> {
        Ok(())
    }
    fn run(_: &NoParams, _data_dir: &Path) -> crate::Result<AutodiffResult> {
        Ok(measure())
    }
    type Cited = LectureValues;
    fn sections(output: &AutodiffResult, cited: &Cited<LectureValues>) -> Vec<Section> {
        sections(output, cited)
    }
    fn measures(output: &AutodiffResult) -> Vec<Measure> {
        measures(output)
    }
}

/// The numbers of a result that the experiment file's `[[claims]]` name: Burn's `y`, `dy_dx1`
/// and `dy_dx2` at the evaluation point (f32 autodiff, widened to f64; no unit), and the f64
/// trace's `trace_dy_dx1` and `trace_dy_dx2` (the adjoints of v1 = x1 and v2 = x2; NaN without
/// those rows).
pub fn measures(r: &AutodiffResult) -> Vec<Measure> {
    use memwall_core::spec::provenance::Provenance::Computed;
    let adjoint = |i: usize| r.trace.get(i).map_or(f64::NAN, |t| t.adjoint);
    let burn = || Computed("Burn's reverse-mode autodiff, f32, on the flex backend".into());
    let trace = || Computed("our f64 reverse-mode trace (adjoints in reverse order)".into());
    vec![
        Measure::new("y", r.burn.y, "", 4, burn()),
        Measure::new("dy_dx1", r.burn.dy_dx1, "", 4, burn()),
        Measure::new("dy_dx2", r.burn.dy_dx2, "", 4, burn()),
        Measure::new("trace_dy_dx1", adjoint(0), "", 4, trace()),
        Measure::new("trace_dy_dx2", adjoint(1), "", 4, trace()),
    ]
}

/// Burn's gradients and the f64 trace at the lecture's point (2, 5).
pub fn measure() -> AutodiffResult {
    let (x1, x2) = (2.0, 5.0);
    let (y, dy_dx1, dy_dx2) = burn_gradients(x1 as f32, x2 as f32);
    AutodiffResult {
        point: (x1, x2),
        burn: BurnGradients { y, dy_dx1, dy_dx2 },
        trace: trace(x1, x2),
    }
}

/// The example's `[params.cited]`: how the report names the lecture and the lecture's values,
/// as the lecture prints them (rounded to 3 decimals).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LectureValues {
    /// What follows the lecture's file name when the report names it.
    pub cite_as: String,
    /// The lecture's y at (2, 5).
    pub y: String,
    /// The lecture's dy/dx1 at (2, 5).
    pub dy_dx1: String,
    /// The lecture's dy/dx2 at (2, 5).
    pub dy_dx2: String,
}

/// The example's section: the lecture's numbers (`cited`) beside Burn's, the trace and the
/// graph.
pub fn sections(r: &AutodiffResult, cited: &Cited<LectureValues>) -> Vec<Section> {
    let lecture = &cited.values;
    let BurnGradients {
        y,
        dy_dx1: g1,
        dy_dx2: g2,
    } = r.burn;
    let burn_table = Table {
        caption: "Burn 0.21 autodiff (flex backend, f32) against the lecture".into(),
        columns: vec!["quantity".into(), "lecture".into(), "Burn".into()],
        rows: vec![
            vec!["y".into(), lecture.y.clone(), format!("{y:.3}")],
            vec!["dy/dx1".into(), lecture.dy_dx1.clone(), format!("{g1:.3}")],
            vec!["dy/dx2".into(), lecture.dy_dx2.clone(), format!("{g2:.3}")],
        ],
        notes: Vec::new(),
    };
    vec![Section {
        details: None,
        title: "Reverse-mode AD worked example".into(),
        claim: format!(
            "`{}` {}: for `y = ln(x1) + x1*x2 - sin(x2)` at (2, 5), y = {}, dy/dx1 = {} and dy/dx2 = {}.",
            cited.source, lecture.cite_as, lecture.y, lecture.dy_dx1, lecture.dy_dx2
        ),
        ours: format!(
            "Burn's autodiff gives y = {y:.3}, dy/dx1 = {g1:.3}, dy/dx2 = {g2:.3} (f32 on the CPU); the f64 trace below gives the same to 3 decimals."
        ),
        notes: vec![
            format!(
                "Nodes are numbered as in the lecture. The adjoint of v2 = x2 sums two paths, as the lecture's `-0.284 + 2 = {}`: through v5 = sin v2 it \
                 contributes -cos(5) = -0.284 and through v4 = v1 v2 it contributes v1 = 2.",
                lecture.dy_dx2
            ),
        ],
        tables: vec![burn_table, trace_table(&r.trace)],
        figures: vec![graph_figure()],
    }]
}

/// The forward (primal) and reverse (adjoint) trace, to 3 decimals.
fn trace_table(rows: &[TraceRow]) -> Table {
    Table {
        caption: "Forward (primal) and reverse (adjoint) trace at (x1, x2) = (2, 5), f64".into(),
        columns: vec![
            "node".into(),
            "definition".into(),
            "value".into(),
            "adjoint dy/dnode".into(),
        ],
        rows: rows
            .iter()
            .map(|r| {
                vec![
                    r.node.clone(),
                    r.definition.clone(),
                    format!("{:.3}", r.value),
                    format!("{:.3}", r.adjoint),
                ]
            })
            .collect(),
        notes: Vec::new(),
    }
}

/// The evaluation graph of y = ln(x1) + x1*x2 - sin(x2).
fn graph_figure() -> Figure {
    let names = [
        "v1 = x1",
        "v2 = x2",
        "v3 = ln",
        "v4 = *",
        "v5 = sin",
        "v6 = +",
        "y = v7 = -",
    ];
    Figure {
        name: "ad_graph".into(),
        title: "Evaluation graph of y = ln(x1) + x1*x2 - sin(x2)".into(),
        nodes: names.iter().map(|s| s.to_string()).collect(),
        edges: vec![
            (0, 2),
            (0, 3),
            (1, 3),
            (1, 4),
            (2, 5),
            (3, 5),
            (5, 6),
            (4, 6),
        ],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::claim_checks::{assert_claims_have_measures, value};

    #[test]
    fn burn_matches_the_lecture_to_three_decimals() {
        let (y, g1, g2) = burn_gradients(2.0, 5.0);
        assert!((y - 11.652).abs() < 5e-4, "y = {y}");
        assert!((g1 - 5.5).abs() < 5e-4, "dy/dx1 = {g1}");
        assert!((g2 - 1.716).abs() < 5e-4, "dy/dx2 = {g2}");
    }

    #[test]
    fn trace_adjoints_match_burn() {
        let rows = trace(2.0, 5.0);
        let (y, g1, g2) = burn_gradients(2.0, 5.0);
        assert!((rows[6].value - y).abs() < 1e-4);
        assert!((rows[0].adjoint - g1).abs() < 1e-4);
        assert!((rows[1].adjoint - g2).abs() < 1e-4);
    }

    #[test]
    fn result_round_trips_through_json_and_renders_the_same() {
        let r = measure();
        assert_eq!(r.trace.len(), 7);
        let back: AutodiffResult =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let cited = crate::cited::from_experiment("autodiff_example");
        let s = sections(&back, &cited);
        assert_eq!(s, sections(&r, &cited));
        assert_eq!(s[0].tables[1].rows[2], ["v3", "ln(v1)", "0.693", "1.000"]);
        assert_eq!(s[0].tables[1].rows[1][3], "1.716");
        assert_eq!(s[0].tables[1].rows[0][3], "5.500");
    }

    #[test]
    fn measures_answer_the_claims() {
        let m = assert_claims_have_measures::<AutodiffExample>("autodiff_example", measure());
        assert!((value(&m, "y") - 11.652).abs() < 5e-4);
        assert!((value(&m, "dy_dx1") - 5.5).abs() < 5e-4);
        assert!((value(&m, "dy_dx2") - 1.716).abs() < 5e-4);
        assert!((value(&m, "trace_dy_dx1") - 5.5).abs() < 1e-12);
        assert!((value(&m, "trace_dy_dx2") - (2.0 - 5f64.cos())).abs() < 1e-12);
    }
}
