//! The UIUC lecture's reverse-mode AD worked example (`002_0a85d22a30039616.txt`):
//! y = ln(x1) + x1*x2 - sin(x2) at (x1, x2) = (2, 5), through Burn's autodiff, with the
//! forward (primal) and reverse (adjoint) trace of the evaluation graph.
//!
//! [`measure`] computes the gradients with Burn and the f64 trace and returns an
//! [`AutodiffResult`]; [`sections`] presents it beside the lecture's numbers. [`extended`]
//! builds the same function as an extended graph (the lecture's "Background: Extending
//! Computation Graph", [`memwall_remat::extended_graph`]), differentiates it twice (the Hessian)
//! and plans and executes it in static buffers, against Burn's f64 gradients over a grid.
//!
//! May import: [`memwall_document::content`], [`crate::InProcessStudy`],
//! [`memwall_remat::extended_graph`], [`memwall_remat::memory_plan`] and Burn.

use crate::document::content::{Figure, Measure, Section, Table};
use crate::{Cited, InProcessStudy};
use burn::backend::{Autodiff, Flex};
use burn::tensor::{DType, Tensor, TensorData};
use memwall_remat::extended_graph::{self as xg, ExecutionPlan, ExprError, ExprGraph, NodeId, Op};
use memwall_remat::memory_plan::Reuse;
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
    /// The extended graph: its sweep, Hessian and memory plans ([`extended`]); absent in
    /// records made before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended: Option<ExtendedResult>,
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
    type Error = ExprError;
    fn validate(_: &NoParams) -> Result<(), crate::ParamError> {
        Ok(())
    }
    fn run(_: &NoParams, _data_dir: &Path) -> Result<AutodiffResult, ExprError> {
        Ok(AutodiffResult {
            extended: Some(extended()?),
            ..measure()
        })
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
/// and `dy_dx2` at the evaluation point (f32 autodiff, widened to f64; no unit), the f64
/// trace's `trace_dy_dx1` and `trace_dy_dx2` (the adjoints of v1 = x1 and v2 = x2; NaN without
/// those rows), and the extended graph's ([`ExtendedResult`]; NaN in a record without it):
/// `hessian_gap`, `gradient_gap`, `executor_gap` (largest absolute differences, no unit) and
/// `extended_plan_share` (%, [`plan_share`]).
pub fn measures(r: &AutodiffResult) -> Vec<Measure> {
    use memwall_core::spec::provenance::Provenance::Computed;
    let adjoint = |i: usize| r.trace.get(i).map_or(f64::NAN, |t| t.adjoint);
    let burn = || Computed("Burn's reverse-mode autodiff, f32, on the flex backend".into());
    let trace = || Computed("our f64 reverse-mode trace (adjoints in reverse order)".into());
    let mut m = vec![
        Measure::new("y", r.burn.y, "", 4, burn()),
        Measure::new("dy_dx1", r.burn.dy_dx1, "", 4, burn()),
        Measure::new("dy_dx2", r.burn.dy_dx2, "", 4, burn()),
        Measure::new("trace_dy_dx1", adjoint(0), "", 4, trace()),
        Measure::new("trace_dy_dx2", adjoint(1), "", 4, trace()),
    ];
    let x = r.extended.as_ref();
    let get = |f: fn(&ExtendedResult) -> f64| x.map_or(f64::NAN, f);
    let why = || {
        x.is_none()
            .then(|| "the record predates the extended graph".to_string())
    };
    let points = x.map_or(0, |x| x.points);
    for (name, value, unit, decimals, how) in [
        (
            "hessian_gap",
            get(|x| x.hessian_gap),
            "",
            4,
            format!(
                "our extended graph's Hessian (the gradient nodes differentiated again) against central differences (h = {FD_STEP:e}) of Burn's f64 autodiff gradients: the largest absolute difference over {points} points and 4 entries"
            ),
        ),
        (
            "gradient_gap",
            get(|x| x.gradient_gap),
            "",
            4,
            format!(
                "our extended graph, executed in its planned buffers, against Burn's f64 autodiff gradients: the largest absolute difference over {points} points"
            ),
        ),
        (
            "executor_gap",
            get(|x| x.executor_gap),
            "",
            4,
            "the extended graphs executed in the buffers of their static memory plans against their reference evaluation: the largest absolute difference".to_string(),
        ),
        (
            "extended_plan_share",
            get(plan_share),
            "%",
            1,
            "bytes of the static memory plan of y, dy/dx1 and dy/dx2 planned on the extended graph, in percent of the plan that keeps every forward value (backprop); both with in-place and sharing".to_string(),
        ),
    ] {
        m.push(Measure::new(name, value, unit, decimals, Computed(how)).missing_because(why()));
    }
    m
}

/// The lecture's evaluation point (x1, x2) = (2, 5): of the trace, of Burn's f32 gradients and
/// of the extended graph's sweep and Hessian (also a point of the grid).
pub const POINT: (f64, f64) = (2.0, 5.0);

/// Burn's gradients and the f64 trace at the lecture's point (2, 5) (no extended graph: see
/// [`extended`]).
pub fn measure() -> AutodiffResult {
    let (x1, x2) = POINT;
    let (y, dy_dx1, dy_dx2) = burn_gradients(x1 as f32, x2 as f32);
    AutodiffResult {
        point: (x1, x2),
        burn: BurnGradients { y, dy_dx1, dy_dx2 },
        trace: trace(x1, x2),
        extended: None,
    }
}

/// The grid the extended graph is checked on against Burn: x1 (x1 > 0, for ln) by x2.
pub const GRID_X1: [f64; 4] = [0.5, 1.0, 2.0, 3.5];
/// The grid's x2 values.
pub const GRID_X2: [f64; 5] = [-3.0, -1.0, 0.5, 2.0, 5.0];
/// Step of the central differences of Burn's gradients that check the Hessian: truncation
/// error h^2 |g'''| / 6 for a gradient component g, at most 1.6e-9 on the grid
/// (|d^3/dx1^3 (x2 + 1/x1)| = 6 / x1^4 <= 96 at x1 = 0.5), round-off about 1e-16 * 7 / h =
/// 7e-11.
pub const FD_STEP: f64 = 1e-5;

/// One node of the extended graph's reverse sweep (lecture slide "Background: Extending
/// Computation Graph"): `node_to_grad[node]` and the adjoint it sums to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// The forward node visited, e.g. "v2".
    pub node: String,
    /// `node_to_grad[node]`: the names of the partial-adjoint nodes its consumers appended,
    /// e.g. "adj(v2<-v5)".
    pub partials: Vec<String>,
    /// The node holding the adjoint: the single partial itself, or their sum.
    pub adjoint_node: String,
    /// The adjoint's value at the lecture's point (2, 5).
    pub adjoint: f64,
}

/// One static memory plan of an example graph ([`ExecutionPlan`], values of f64).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRow {
    /// The example, e.g. "y = ln(x1) + x1*x2 - sin(x2)".
    pub example: String,
    /// What the plan evaluates, e.g. "y, dy/dx1, dy/dx2".
    pub evaluates: String,
    /// "one buffer per node" (no reuse), "backprop" (in-place and sharing, every forward
    /// value kept to the end), "extended graph" (in-place and sharing, forward values freed
    /// after their last forward or backward reader) or, for a forward graph alone, "in-place
    /// and sharing".
    pub strategy: String,
    /// Nodes evaluated (forward and backward).
    pub nodes: usize,
    /// Buffers planned.
    pub buffers: usize,
    /// Bytes planned per element of the inputs (8 per buffer).
    pub bytes_per_element: f64,
}

/// What the extended graph of the example measured ([`extended`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtendedResult {
    /// Nodes of the forward graph (inputs included).
    pub forward_nodes: usize,
    /// Nodes [`xg::gradient`] appended for dy/dx1 and dy/dx2.
    pub gradient_nodes: usize,
    /// Nodes appended by differentiating the two gradient nodes again (the Hessian).
    pub hessian_nodes: usize,
    /// The reverse sweep at (2, 5), in the order it visited the nodes.
    pub sweep: Vec<SweepRow>,
    /// The forward nodes a node of gradient(y) reads, in graph order: the values backward
    /// needs; the other forward values may be freed once the forward pass is done.
    pub backward_reads: Vec<String>,
    /// Points of the grid ([`GRID_X1`] x [`GRID_X2`]).
    pub points: usize,
    /// Largest |extended-graph gradient - Burn's f64 gradient| over the grid and both
    /// components (the extended graph executed in its planned buffers).
    pub gradient_gap: f64,
    /// The Hessian [[d2y/dx1^2, d2y/dx1dx2], [d2y/dx2dx1, d2y/dx2^2]] at (2, 5) by the
    /// extended graph (the gradient differentiated again).
    pub hessian: [[f64; 2]; 2],
    /// The same by central differences of Burn's f64 gradients with step [`FD_STEP`]:
    /// H[r][c] = (g_r(x + h e_c) - g_r(x - h e_c)) / 2h.
    pub hessian_fd: [[f64; 2]; 2],
    /// Largest |extended-graph Hessian - central differences of Burn's gradients| over the
    /// grid and the four entries.
    pub hessian_gap: f64,
    /// Largest |value executed in the planned buffers - reference evaluation| over every plan,
    /// output and grid point (0: the plans' buffer sharing never overwrote a live value).
    pub executor_gap: f64,
    /// The memory plans of the lecture's two example graphs.
    pub plans: Vec<PlanRow>,
}

/// Burn's reverse-mode autodiff in f64 on the flex backend, every point of `x1`, `x2` at once
/// (elementwise, so the gradient of the sum is each point's gradient): (dy/dx1, dy/dx2) per
/// point (NaN where Burn returns no gradient).
pub fn burn_gradients_f64(x1: &[f64], x2: &[f64]) -> (Vec<f64>, Vec<f64>) {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let t = |x: &[f64]| {
        Tensor::<B, 1>::from_data(
            TensorData::new(x.to_vec(), [x.len()]),
            (&device, DType::F64),
        )
        .require_grad()
    };
    let (a, b) = (t(x1), t(x2));
    let y = a.clone().log() + a.clone() * b.clone() - b.clone().sin();
    let grads = y.sum().backward();
    let v = |t: Option<Tensor<Flex, 1>>| {
        t.map_or_else(
            || vec![f64::NAN; x1.len()],
            |t| t.into_data().iter::<f64>().collect(),
        )
    };
    (v(a.grad(&grads)), v(b.grad(&grads)))
}

/// The lecture's y = ln(x1) + x1*x2 - sin(x2) as an expression graph in its numbering
/// (v1 = x1, ..., v7 = y): (graph, x1, x2, y).
fn lecture_graph() -> Result<(ExprGraph, NodeId, NodeId, NodeId), ExprError> {
    let mut g = ExprGraph::new();
    let x1 = g.input("v1");
    let x2 = g.input("v2");
    let v3 = g.apply(Op::Ln, &[x1], "v3")?;
    let v4 = g.apply(Op::Mul, &[x1, x2], "v4")?;
    let v5 = g.apply(Op::Sin, &[x2], "v5")?;
    let v6 = g.apply(Op::Add, &[v3, v4], "v6")?;
    let v7 = g.apply(Op::Sub, &[v6, v5], "v7")?;
    Ok((g, x1, x2, v7))
}

const PLANNED: Reuse = Reuse {
    inplace: true,
    sharing: true,
};
const NO_REUSE: Reuse = Reuse {
    inplace: false,
    sharing: false,
};

/// The plans of `outputs` (one buffer per node, backprop and extended graph where an output is
/// a backward node, else in-place and sharing), each executed on `points` in its buffers: the
/// rows and the largest gap to the reference evaluation.
fn plans(
    g: &ExprGraph,
    outputs: &[NodeId],
    example: &str,
    evaluates: &str,
    points: &[&[f64]],
) -> Result<(Vec<PlanRow>, f64), ExprError> {
    let elements = points.first().map_or(0, |p| p.len());
    let mut rows = Vec::new();
    let mut gap = 0.0f64;
    let backward = outputs.iter().any(|&o| g.nodes()[o].backward);
    let strategies = if backward {
        &[
            ("one buffer per node", NO_REUSE, false),
            ("backprop", PLANNED, true),
            ("extended graph", PLANNED, false),
        ][..]
    } else {
        &[
            ("one buffer per node", NO_REUSE, false),
            ("in-place and sharing", PLANNED, false),
        ][..]
    };
    for &(strategy, reuse, keep) in strategies {
        let plan = ExecutionPlan::new(g, outputs, elements, reuse, keep)?;
        let got = xg::execute(g, &plan, points)?;
        for e in 0..elements {
            let at: Vec<f64> = points.iter().map(|p| p[e]).collect();
            let want = g.evaluate(&at)?;
            for (o, &node) in outputs.iter().enumerate() {
                gap = gap.max((got[o][e] - want[node]).abs());
            }
        }
        rows.push(PlanRow {
            example: example.into(),
            evaluates: evaluates.into(),
            strategy: strategy.into(),
            nodes: plan.nodes.len(),
            buffers: plan.memory.buffers,
            bytes_per_element: plan.static_bytes() as f64 / elements.max(1) as f64,
        });
    }
    Ok((rows, gap))
}

/// The adjoint node [`xg::gradient`] returned, or a constant 0 where it returned none (the output
/// does not depend on that input).
fn adjoint_or_zero(g: &mut ExprGraph, adjoint: Option<NodeId>) -> Result<NodeId, ExprError> {
    match adjoint {
        Some(a) => Ok(a),
        None => g.apply(Op::Const(0.0), &[], "0"),
    }
}

/// The extended graph of the lecture's example: the gradient appended by [`xg::gradient`] (its
/// sweep at (2, 5)), differentiated again for the Hessian, the whole executed in the buffers of
/// its static memory plan over the grid and checked against Burn's f64 gradients (and their
/// central differences); the memory plans of y with its gradient and of the lecture's
/// executor example exp(a*b + 3), alone and with its gradient.
///
/// # Errors
/// An [`ExprError`] if a graph or plan is refused (a bug: the graphs are fixed).
pub fn extended() -> Result<ExtendedResult, ExprError> {
    let (mut g, x1, x2, y) = lecture_graph()?;
    let forward_nodes = g.len();
    let grad = xg::gradient(&mut g, y, &[x1, x2])?;
    let gradient_nodes = g.len() - forward_nodes;
    let g1 = adjoint_or_zero(&mut g, grad.adjoints[0])?;
    let g2 = adjoint_or_zero(&mut g, grad.adjoints[1])?;
    let gradient_graph = g.clone();
    let backward_reads = (0..forward_nodes)
        .filter(|&k| {
            g.nodes()[forward_nodes..]
                .iter()
                .any(|n| n.inputs.contains(&k))
        })
        .map(|k| g.nodes()[k].name.clone())
        .collect();
    let h1 = xg::gradient(&mut g, g1, &[x1, x2])?.adjoints;
    let h2 = xg::gradient(&mut g, g2, &[x1, x2])?.adjoints;
    let hessian_nodes = g.len() - forward_nodes - gradient_nodes;
    let at = g.evaluate(&[POINT.0, POINT.1])?;
    let name = |k: NodeId| g.nodes()[k].name.clone();
    let sweep = grad
        .sweep
        .iter()
        .map(|s| SweepRow {
            node: name(s.node),
            partials: s.partials.iter().map(|&k| name(k)).collect(),
            adjoint_node: name(s.adjoint),
            adjoint: at[s.adjoint],
        })
        .collect();
    // Every Hessian entry is a node, or 0 where the gradient does not depend on the input.
    let entry = |a: Option<NodeId>, v: &[f64]| a.map_or(0.0, |a| v[a]);
    let hess = |v: &[f64]| {
        [
            [entry(h1[0], v), entry(h1[1], v)],
            [entry(h2[0], v), entry(h2[1], v)],
        ]
    };

    // The grid, as vectors: every point is an element.
    let (p1, p2): (Vec<f64>, Vec<f64>) = GRID_X1
        .iter()
        .flat_map(|&a| GRID_X2.iter().map(move |&b| (a, b)))
        .unzip();
    let mut outputs = vec![y, g1, g2];
    outputs.extend([h1[0], h1[1], h2[0], h2[1]].into_iter().flatten());
    let plan = ExecutionPlan::new(&g, &outputs, p1.len(), PLANNED, false)?;
    let got = xg::execute(&g, &plan, &[&p1, &p2])?;
    let (b1, b2) = burn_gradients_f64(&p1, &p2);
    let h = FD_STEP;
    let shifted = |d1: f64, d2: f64| {
        let q1: Vec<f64> = p1.iter().map(|x| x + d1).collect();
        let q2: Vec<f64> = p2.iter().map(|x| x + d2).collect();
        burn_gradients_f64(&q1, &q2)
    };
    let (a_plus, a_minus) = (shifted(h, 0.0), shifted(-h, 0.0));
    let (b_plus, b_minus) = (shifted(0.0, h), shifted(0.0, -h));
    let fd = |e: usize| {
        let d = |p: &[f64], m: &[f64]| (p[e] - m[e]) / (2.0 * h);
        [
            [d(&a_plus.0, &a_minus.0), d(&b_plus.0, &b_minus.0)],
            [d(&a_plus.1, &a_minus.1), d(&b_plus.1, &b_minus.1)],
        ]
    };
    // NaN-propagating maxima: a missing value makes the gap NaN, not 0.
    let worse = |gap: f64, d: f64| {
        if d.is_nan() || gap.is_nan() {
            f64::NAN
        } else {
            gap.max(d)
        }
    };
    let mut gradient_gap = 0.0f64;
    let mut hessian_gap = 0.0f64;
    let mut executor_gap = 0.0f64;
    let mut lecture_fd = [[f64::NAN; 2]; 2];
    for e in 0..p1.len() {
        // The executed values (planned buffers) against Burn, and against the reference.
        gradient_gap = worse(gradient_gap, (got[1][e] - b1[e]).abs());
        gradient_gap = worse(gradient_gap, (got[2][e] - b2[e]).abs());
        let want = g.evaluate(&[p1[e], p2[e]])?;
        for (o, &node) in outputs.iter().enumerate() {
            executor_gap = worse(executor_gap, (got[o][e] - want[node]).abs());
        }
        let (ours, theirs) = (hess(&want), fd(e));
        for r in 0..2 {
            for c in 0..2 {
                hessian_gap = worse(hessian_gap, (ours[r][c] - theirs[r][c]).abs());
            }
        }
        if (p1[e], p2[e]) == POINT {
            lecture_fd = theirs;
        }
    }

    // The memory plans: y and its gradient (the lecture's example), and exp(a*b + 3) (its
    // executor example) alone and with its gradient.
    let example = "y = ln(x1) + x1*x2 - sin(x2)";
    let (mut rows, gap) = plans(
        &gradient_graph,
        &[y, g1, g2],
        example,
        "y, dy/dx1, dy/dx2",
        &[&p1, &p2],
    )?;
    executor_gap = worse(executor_gap, gap);
    let mut e = ExprGraph::new();
    let a = e.input("a");
    let b = e.input("b");
    let ab = e.apply(Op::Mul, &[a, b], "a*b")?;
    let three = e.apply(Op::Const(3.0), &[], "3")?;
    let sum = e.apply(Op::Add, &[ab, three], "a*b+3")?;
    let out = e.apply(Op::Exp, &[sum], "exp")?;
    let example = "exp(a*b + 3)";
    let (forward, gap) = plans(&e, &[out], example, "the value", &[&p1, &p2])?;
    executor_gap = worse(executor_gap, gap);
    rows.extend(forward);
    let eg = xg::gradient(&mut e, out, &[a, b])?;
    let mut outs = vec![out];
    outs.extend(eg.adjoints.iter().flatten());
    let (with_grad, gap) = plans(&e, &outs, example, "the value, d/da, d/db", &[&p1, &p2])?;
    executor_gap = worse(executor_gap, gap);
    rows.extend(with_grad);

    Ok(ExtendedResult {
        forward_nodes,
        gradient_nodes,
        hessian_nodes,
        sweep,
        backward_reads,
        points: p1.len(),
        gradient_gap,
        hessian: hess(&at),
        hessian_fd: lecture_fd,
        hessian_gap,
        executor_gap,
        plans: rows,
    })
}

/// Bytes per element of the plan of `example` (its first word, e.g. "y") by `strategy`; NaN
/// without that row.
fn plan_bytes(x: &ExtendedResult, example: &str, strategy: &str) -> f64 {
    x.plans
        .iter()
        .find(|p| p.example.starts_with(example) && p.strategy == strategy)
        .map_or(f64::NAN, |p| p.bytes_per_element)
}

/// The extended graph's plan of y with its gradient in percent of backprop's (bytes planned
/// per element: 100 * extended / backprop); NaN without both rows.
pub fn plan_share(x: &ExtendedResult) -> f64 {
    100.0 * plan_bytes(x, "y =", "extended graph") / plan_bytes(x, "y =", "backprop")
}

/// The example's `[params.cited]`: how the report names the lecture and the lecture's values,
/// as the lecture prints them (rounded to 3 decimals).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LectureValues {
    /// What follows the lecture's file name when the report names it.
    pub cite_as: String,
    /// The same for the extended graph's section (its slides); `cite_as` when absent (records
    /// made before the section existed).
    #[serde(default)]
    pub extended_cite_as: Option<String>,
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
    .into_iter()
    .chain(r.extended.as_ref().map(|x| extended_section(x, r.point, cited)))
    .collect()
}

/// "within 1.2e-9 of" for a largest difference, `equal` when it is 0.
fn close(gap: f64, equal: &str) -> String {
    if gap == 0.0 {
        equal.to_string()
    } else {
        format!("within {gap:.1e} of")
    }
}

/// The extended graph's section: the sweep's node_to_grad, the Hessian against Burn, the
/// memory plans and the graph.
fn extended_section(
    x: &ExtendedResult,
    point: (f64, f64),
    cited: &Cited<LectureValues>,
) -> Section {
    let f = |v: f64| format!("{v:.4}");
    let sweep = Table {
        caption: "The reverse sweep of gradient(y) at (2, 5): node_to_grad and the adjoint".into(),
        columns: vec![
            "node (reverse order)".into(),
            "node_to_grad[node]".into(),
            "adjoint node".into(),
            "adjoint value".into(),
        ],
        rows: x
            .sweep
            .iter()
            .map(|s| {
                vec![
                    s.node.clone(),
                    s.partials.join(", "),
                    s.adjoint_node.clone(),
                    format!("{:.3}", s.adjoint),
                ]
            })
            .collect(),
        notes: Vec::new(),
    };
    let names = ["d2y/dx1^2", "d2y/dx1dx2", "d2y/dx2dx1", "d2y/dx2^2"];
    let (x1, x2) = point;
    let closed = [[-1.0 / (x1 * x1), 1.0], [1.0, x2.sin()]];
    let hessian = Table {
        caption: "The Hessian at (2, 5): the extended graph differentiated again, against central differences of Burn's f64 gradients".into(),
        columns: vec![
            "entry".into(),
            "closed form".into(),
            "extended graph".into(),
            format!("Burn, central differences (h = {FD_STEP:e})"),
        ],
        rows: (0..4)
            .map(|k| {
                let (r, c) = (k / 2, k % 2);
                vec![
                    names[k].into(),
                    f(closed[r][c]),
                    f(x.hessian[r][c]),
                    f(x.hessian_fd[r][c]),
                ]
            })
            .collect(),
        notes: Vec::new(),
    };
    let plans = Table {
        caption: "Static memory plans, bytes per element of the inputs (f64 values)".into(),
        columns: vec![
            "graph".into(),
            "evaluates".into(),
            "plan".into(),
            "nodes".into(),
            "buffers".into(),
            "bytes per element".into(),
        ],
        rows: x
            .plans
            .iter()
            .map(|p| {
                vec![
                    p.example.clone(),
                    p.evaluates.clone(),
                    p.strategy.clone(),
                    p.nodes.to_string(),
                    p.buffers.to_string(),
                    format!("{:.0}", p.bytes_per_element),
                ]
            })
            .collect(),
        notes: Vec::new(),
    };
    let share = plan_share(x);
    Section {
        details: None,
        title: "Extending the graph: the Hessian and the memory plan".into(),
        claim: format!(
            "`{}` {}: the advantages of the explicit extended backward path: \"Clearly describes computation dependency for better memory managements\" and \"Ability to calculate higher order gradients (e.g., Hessian)\".",
            cited.source,
            cited.values.extended_cite_as.as_deref().unwrap_or(&cited.values.cite_as)
        ),
        ours: format!(
            "Our extended graph (gradient(y) appends {} backward nodes to the {} forward nodes; differentiating the gradient again appends {} more) gives the Hessian within {:.1e} of central differences of Burn's f64 gradients at {} points, and a gradient {} Burn's. Planned with the backward's dependencies, y and its gradient need {:.1}% of the bytes of the plan that keeps every forward value (backprop); executed in those buffers the values are {} the reference evaluation's.",
            x.gradient_nodes,
            x.forward_nodes,
            x.hessian_nodes,
            x.hessian_gap,
            x.points,
            close(x.gradient_gap, "equal to"),
            share,
            close(x.executor_gap, "identical to"),
        ),
        notes: vec![
            format!(
                "The grid: x1 in {GRID_X1:?} by x2 in {GRID_X2:?}, each point one element of the vectors the graph and Burn (`Autodiff<Flex>`, f64, one backward of the summed y) evaluate at once."
            ),
            format!(
                "The nodes of gradient(y) read the forward values {} only; the other forward values can be freed once y is computed, which the plan of the extended graph does and backprop, which keeps the forward graph's values for its backward operations, does not.",
                x.backward_reads.join(", ")
            ),
            "adj(k<-i) is the partial adjoint v̄_{k→i} = v̄_i ∂v_i/∂v_k that node i appends to node_to_grad[k]; through `+` it is v̄_i itself (the lecture's id), so no node is added.".into(),
            "Closed form: [[-1/x1^2, 1], [1, sin x2]] (our derivation: d/dx1 of x2 + 1/x1 and d/dx2 of x1 - cos x2).".into(),
            "One buffer per node: the lecture's executor, \"temporary space linear to number of ops\". Backprop: in-place and sharing, but every forward value stays to the end, as when backward operations run on the forward graph. Extended graph: in-place and sharing with the backward nodes' reads known, so a forward value is freed after its last forward or backward reader. A plan's buffers are each 8 bytes per element; the sink that keeps the outputs live adds an empty buffer.".into(),
        ],
        tables: vec![sweep, hessian, plans],
        figures: vec![extended_figure()],
    }
}

/// The extended graph of y and its gradient: the forward nodes v1-v7 and the nodes gradient(y)
/// appends, as [`xg::gradient`] builds them.
fn extended_figure() -> Figure {
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    if let Ok((mut g, x1, x2, y)) = lecture_graph() {
        if let Ok(grad) = xg::gradient(&mut g, y, &[x1, x2]) {
            let mut outs: Vec<NodeId> = grad.adjoints.iter().flatten().copied().collect();
            outs.push(y);
            let needed = g.needed(&outs);
            let pos = |k: NodeId| needed.iter().position(|&n| n == k);
            for &k in &needed {
                let n = &g.nodes()[k];
                nodes.push(n.name.clone());
                edges.extend(n.inputs.iter().filter_map(|&i| Some((pos(i)?, pos(k)?))));
            }
        }
    }
    Figure {
        name: "ad_extended_graph".into(),
        title:
            "Extended graph: y = ln(x1) + x1*x2 - sin(x2) (v1-v7) and the nodes gradient(y) appends"
                .into(),
        nodes,
        edges,
        ..Default::default()
    }
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

    /// The study's full result, as `run` makes it.
    fn full() -> AutodiffResult {
        AutodiffExample::run(&NoParams {}, Path::new(".")).unwrap()
    }

    #[test]
    fn burn_runs_in_f64() {
        let (g1, g2) = burn_gradients_f64(&[2.0, 0.5], &[5.0, -3.0]);
        // f32 would be about 1e-7 off; f64 is exact to rounding.
        assert!((g1[0] - 5.5).abs() < 1e-14, "{g1:?}");
        assert!((g2[0] - (2.0 - 5f64.cos())).abs() < 1e-14, "{g2:?}");
        assert!((g1[1] - (-3.0 + 2.0)).abs() < 1e-14, "{g1:?}");
        assert!((g2[1] - (0.5 - (-3f64).cos())).abs() < 1e-14, "{g2:?}");
    }

    #[test]
    fn the_extended_graph_gives_the_hessian_and_a_smaller_plan() {
        let x = extended().unwrap();
        assert_eq!(x.forward_nodes, 7);
        assert_eq!(x.backward_reads, ["v1", "v2"]);
        assert_eq!(x.points, GRID_X1.len() * GRID_X2.len());
        let want = [[-0.25, 1.0], [1.0, 5f64.sin()]];
        for (r, row) in want.iter().enumerate() {
            for (c, w) in row.iter().enumerate() {
                assert!((x.hessian[r][c] - w).abs() < 1e-12, "{:?}", x.hessian);
                assert!((x.hessian_fd[r][c] - w).abs() < 1e-7, "{:?}", x.hessian_fd);
            }
        }
        assert!(x.hessian_gap < 1e-7, "{}", x.hessian_gap);
        assert!(x.gradient_gap < 1e-12, "{}", x.gradient_gap);
        assert_eq!(x.executor_gap, 0.0);
        // The sweep visits v7 first and the inputs last; v2 and v1 each sum two partials.
        let order: Vec<&str> = x.sweep.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(order, ["v7", "v6", "v5", "v4", "v3", "v2", "v1"]);
        assert_eq!(x.sweep[5].partials, ["adj(v2<-v5)", "adj(v2<-v4)"]);
        assert!((x.sweep[5].adjoint - 1.716).abs() < 5e-4);
        assert!((x.sweep[6].adjoint - 5.5).abs() < 1e-12);
        // Per graph: no reuse > backprop >= extended graph (a forward graph: no reuse > planned).
        let strategies: Vec<&str> = x.plans.iter().map(|p| p.strategy.as_str()).collect();
        let (one, back, ext, fwd) = (
            "one buffer per node",
            "backprop",
            "extended graph",
            "in-place and sharing",
        );
        assert_eq!(strategies, [one, back, ext, one, fwd, one, back, ext]);
        let b: Vec<f64> = x.plans.iter().map(|p| p.bytes_per_element).collect();
        assert!(b[0] > b[1] && b[1] > b[2], "{b:?}");
        assert!(b[3] > b[4], "{b:?}");
        assert!(b[5] > b[6] && b[6] >= b[7], "{b:?}");
        let share = plan_share(&x);
        assert!(share < 100.0 && share > 0.0, "{share}");
    }

    #[test]
    fn a_record_without_the_extended_graph_still_reads_and_renders() {
        let mut v = serde_json::to_value(full()).unwrap();
        v.as_object_mut().unwrap().remove("extended");
        let old: AutodiffResult = serde_json::from_value(v).unwrap();
        assert!(old.extended.is_none());
        let cited = crate::cited::from_experiment("autodiff_example");
        assert_eq!(sections(&old, &cited).len(), 1);
        assert_eq!(sections(&full(), &cited).len(), 2);
        let m = measures(&old);
        assert!(value(&m, "hessian_gap").is_nan());
        let gap = m.iter().find(|m| m.name == "hessian_gap").unwrap();
        assert!(gap.missing.as_deref().unwrap().contains("predates"));
    }

    #[test]
    fn measures_answer_the_claims() {
        let m = assert_claims_have_measures::<AutodiffExample>("autodiff_example", full());
        assert!(value(&m, "hessian_gap") < 1e-6);
        assert!(value(&m, "extended_plan_share") < 91.7);
        assert_eq!(value(&m, "executor_gap"), 0.0);
        assert!((value(&m, "y") - 11.652).abs() < 5e-4);
        assert!((value(&m, "dy_dx1") - 5.5).abs() < 5e-4);
        assert!((value(&m, "dy_dx2") - 1.716).abs() < 5e-4);
        assert!((value(&m, "trace_dy_dx1") - 5.5).abs() < 1e-12);
        assert!((value(&m, "trace_dy_dx2") - (2.0 - 5f64.cos())).abs() < 1e-12);
    }
}
