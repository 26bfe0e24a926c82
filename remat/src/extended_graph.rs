//! Reverse-mode automatic differentiation by extending the computational graph, and an executor
//! that runs the extended graph in the buffers of a static memory plan.
//!
//! From the UIUC CS 498 lecture (`002_0a85d22a30039616.txt`): slide "Background: Extending
//! Computation Graph" (the `gradient(out)` algorithm: `node_to_grad = {out: [1]}`; for each node
//! `i` in reverse topological order, its adjoint is `sum(node_to_grad[i])` and each input `k`
//! receives the partial adjoint `adj(i) * dv_i/dv_k`), "Reverse Mode AD vs Backprop" (the
//! backward pass as separate graph nodes, whose advantages the lecture names: "Clearly describes
//! computation dependency for better memory managements" and "Ability to calculate higher order
//! gradients (e.g., Hessian)") and "How to build an Executor for a Given Graph?" (allocate the
//! temporaries, then traverse and execute the graph in topological order), with the static
//! allocation of "Plan for reuse ahead of time" done by [`crate::memory_plan`].
//!
//! * [`ExprGraph`]: elementwise expressions over vectors of `f64` (every value has the same
//!   number of elements), nodes in topological order.
//! * [`gradient`]: appends the adjoint nodes of `out` with respect to chosen nodes to the same
//!   graph, so that the result can itself be differentiated (second derivatives).
//! * [`ExecutionPlan::new`] / [`execute`]: the needed nodes as a [`Graph`] of the rematerialization
//!   IR (every value `8 * elements` bytes), planned with liveness, in-place and sharing, and run
//!   in exactly the planned buffers.
//!
//! May import: the graph IR and [`crate::memory_plan`].

use crate::graph::{Graph, Node, OpKind};
use crate::memory_plan::{plain_order, plan_memory, MemoryPlan, Reuse};
use crate::RematError;

/// Index of a node in an [`ExprGraph`].
pub type NodeId = usize;

/// What an expression node computes, elementwise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// A graph input (its values are given to [`execute`]).
    Input,
    /// Every element equal to the constant.
    Const(f64),
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `-a`.
    Neg,
    /// Natural logarithm `ln a`.
    Ln,
    /// `sin a`.
    Sin,
    /// `cos a`.
    Cos,
    /// `exp a`.
    Exp,
    /// The sum of any number (at least 2) of inputs: the lecture's `sum(node_to_grad[i])`.
    Sum,
}

impl Op {
    /// Number of inputs the op reads (`None`: two or more, [`Op::Sum`]).
    pub fn arity(self) -> Option<usize> {
        match self {
            Op::Input | Op::Const(_) => Some(0),
            Op::Neg | Op::Ln | Op::Sin | Op::Cos | Op::Exp => Some(1),
            Op::Add | Op::Sub | Op::Mul | Op::Div => Some(2),
            Op::Sum => None,
        }
    }

    /// The op's value at one element, given its inputs' values there.
    fn apply(self, x: &[f64]) -> f64 {
        match self {
            Op::Input => f64::NAN,
            Op::Const(c) => c,
            Op::Add => x[0] + x[1],
            Op::Sub => x[0] - x[1],
            Op::Mul => x[0] * x[1],
            Op::Div => x[0] / x[1],
            Op::Neg => -x[0],
            Op::Ln => x[0].ln(),
            Op::Sin => x[0].sin(),
            Op::Cos => x[0].cos(),
            Op::Exp => x[0].exp(),
            Op::Sum => x.iter().sum(),
        }
    }
}

/// One node of an [`ExprGraph`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExprNode {
    /// What the node computes.
    pub op: Op,
    /// The nodes it reads, in operand order (all earlier nodes).
    pub inputs: Vec<NodeId>,
    /// Its name ("v3", or "adj(v3)" and "adj(v1<-v4)" for nodes [`gradient`] adds).
    pub name: String,
    /// Whether [`gradient`] added it (a node of the backward pass).
    pub backward: bool,
}

/// Errors of building, differentiating and executing an expression graph.
#[derive(Debug, thiserror::Error)]
pub enum ExprError {
    /// A node id that the graph does not have.
    #[error("node {node} does not exist (the graph has {len} nodes)")]
    UnknownNode {
        /// The id asked for.
        node: NodeId,
        /// Number of nodes of the graph.
        len: usize,
    },
    /// An op given the wrong number of inputs.
    #[error("{op:?} takes {expected} inputs, got {got}")]
    Arity {
        /// The op.
        op: Op,
        /// What it takes ("2", "at least 2").
        expected: String,
        /// How many it was given.
        got: usize,
    },
    /// [`execute`] was given values that do not match the graph's inputs.
    #[error("input values: {0}")]
    Inputs(String),
    /// The memory planner refused the graph.
    #[error(transparent)]
    Plan(#[from] RematError),
}

/// An expression graph whose nodes are in topological order (every input of a node is an
/// earlier node), so that appending nodes keeps the order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExprGraph {
    nodes: Vec<ExprNode>,
    inputs: Vec<NodeId>,
}

impl ExprGraph {
    /// An empty graph.
    pub fn new() -> ExprGraph {
        ExprGraph::default()
    }

    /// The nodes, in topological order.
    pub fn nodes(&self) -> &[ExprNode] {
        &self.nodes
    }

    /// The input nodes, in the order [`execute`] takes their values.
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Appends an input named `name`.
    pub fn input(&mut self, name: &str) -> NodeId {
        self.inputs.push(self.nodes.len());
        self.push(Op::Input, Vec::new(), name.into(), false)
    }

    /// Appends `op` of `inputs`, named `name`.
    ///
    /// # Errors
    /// [`ExprError::UnknownNode`] for an input the graph does not have, [`ExprError::Arity`] for
    /// the wrong number of inputs ([`Op::Input`] is added with [`ExprGraph::input`] only).
    pub fn apply(&mut self, op: Op, inputs: &[NodeId], name: &str) -> Result<NodeId, ExprError> {
        self.node_op(op, inputs, name, false)
    }

    fn node_op(
        &mut self,
        op: Op,
        inputs: &[NodeId],
        name: &str,
        backward: bool,
    ) -> Result<NodeId, ExprError> {
        if let Some(&node) = inputs.iter().find(|&&k| k >= self.nodes.len()) {
            return Err(ExprError::UnknownNode {
                node,
                len: self.nodes.len(),
            });
        }
        let (ok, expected) = match op.arity() {
            _ if op == Op::Input => (false, "none (use ExprGraph::input)".to_string()),
            Some(n) => (inputs.len() == n, n.to_string()),
            None => (inputs.len() >= 2, "at least 2".to_string()),
        };
        if !ok {
            return Err(ExprError::Arity {
                op,
                expected,
                got: inputs.len(),
            });
        }
        Ok(self.push(op, inputs.to_vec(), name.into(), backward))
    }

    fn push(&mut self, op: Op, inputs: Vec<NodeId>, name: String, backward: bool) -> NodeId {
        self.nodes.push(ExprNode {
            op,
            inputs,
            name,
            backward,
        });
        self.nodes.len() - 1
    }

    /// The nodes `outputs` depend on (themselves included), ascending: a topological order.
    /// Ids past the graph's end are ignored.
    pub fn needed(&self, outputs: &[NodeId]) -> Vec<NodeId> {
        let mut need = vec![false; self.nodes.len()];
        for &o in outputs {
            if let Some(n) = need.get_mut(o) {
                *n = true;
            }
        }
        for k in (0..self.nodes.len()).rev() {
            if need[k] {
                for &i in &self.nodes[k].inputs {
                    need[i] = true;
                }
            }
        }
        (0..self.nodes.len()).filter(|&k| need[k]).collect()
    }

    /// Evaluates every node at one point (one value per input, in [`ExprGraph::inputs`]
    /// order) without a memory plan: the reference [`execute`] is checked against.
    ///
    /// # Errors
    /// [`ExprError::Inputs`] when `point` has not one value per input.
    pub fn evaluate(&self, point: &[f64]) -> Result<Vec<f64>, ExprError> {
        if point.len() != self.inputs.len() {
            return Err(ExprError::Inputs(format!(
                "{} values for {} inputs",
                point.len(),
                self.inputs.len()
            )));
        }
        let mut v = vec![0.0; self.nodes.len()];
        let mut next_input = 0;
        for (k, n) in self.nodes.iter().enumerate() {
            v[k] = if n.op == Op::Input {
                next_input += 1;
                point[next_input - 1]
            } else {
                let x: Vec<f64> = n.inputs.iter().map(|&i| v[i]).collect();
                n.op.apply(&x)
            };
        }
        Ok(v)
    }
}

/// One step of [`gradient`]'s reverse sweep: a node, the partial adjoints it received
/// (`node_to_grad[node]`) and the node holding their sum, its adjoint.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepStep {
    /// The node visited.
    pub node: NodeId,
    /// `node_to_grad[node]`: the partial adjoints its consumers sent it.
    pub partials: Vec<NodeId>,
    /// The adjoint `dout/dnode`: the single partial, or an [`Op::Sum`] of them.
    pub adjoint: NodeId,
}

/// What [`gradient`] added.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient {
    /// The adjoint node of each `wrt` node (`None`: `out` does not depend on it, the derivative
    /// is 0).
    pub adjoints: Vec<Option<NodeId>>,
    /// The reverse sweep, in the order it visited the nodes.
    pub sweep: Vec<SweepStep>,
}

/// Reverse-mode AD by extending the graph (lecture slide "Background: Extending Computation
/// Graph"): appends to `g` the nodes computing `dout/dw` for every `w` of `wrt`, and returns
/// them. The seed `adj(out) = 1` is an [`Op::Const`] node; a partial adjoint through `+` (the
/// lecture's `id`) is the consumer's adjoint node itself, not a new node.
///
/// Partial adjoints: `a + b`: `adj`, `adj`; `a - b`: `adj`, `-adj`; `a * b`: `adj * b`,
/// `adj * a`; `a / b`: `adj / b`, `-(adj * (a / b)) / b`; `-a`: `-adj`; `ln a`: `adj / a`;
/// `sin a`: `adj * cos a`; `cos a`: `-(adj * sin a)`; `exp a`: `adj * exp a` (the node
/// itself); a sum: `adj` to each input.
///
/// # Errors
/// [`ExprError::UnknownNode`] for an `out` or `wrt` node the graph does not have.
pub fn gradient(g: &mut ExprGraph, out: NodeId, wrt: &[NodeId]) -> Result<Gradient, ExprError> {
    let len = g.len();
    if let Some(&node) = wrt.iter().chain([&out]).find(|&&k| k >= len) {
        return Err(ExprError::UnknownNode { node, len });
    }
    let reached = g.needed(&[out]);
    let mut node_to_grad: Vec<Vec<NodeId>> = vec![Vec::new(); len];
    let name = |g: &ExprGraph, k: NodeId| g.nodes[k].name.clone();
    let seed = g.node_op(Op::Const(1.0), &[], &format!("adj({})", name(g, out)), true)?;
    node_to_grad[out].push(seed);
    let mut adjoint: Vec<Option<NodeId>> = vec![None; len];
    let mut sweep = Vec::new();
    for &i in reached.iter().rev() {
        let partials = std::mem::take(&mut node_to_grad[i]);
        if partials.is_empty() {
            continue;
        }
        let adj = if partials.len() == 1 {
            partials[0]
        } else {
            g.node_op(Op::Sum, &partials, &format!("adj({})", name(g, i)), true)?
        };
        adjoint[i] = Some(adj);
        sweep.push(SweepStep {
            node: i,
            partials,
            adjoint: adj,
        });
        let node = g.nodes[i].clone();
        let ins = &node.inputs;
        let to = |g: &ExprGraph, k: NodeId| format!("adj({}<-{})", name(g, k), node.name);
        let mut send: Vec<(NodeId, NodeId)> = Vec::new();
        match node.op {
            Op::Input | Op::Const(_) => {}
            Op::Add => send.extend([(ins[0], adj), (ins[1], adj)]),
            Op::Sum => send.extend(ins.iter().map(|&k| (k, adj))),
            Op::Sub => {
                let n = to(g, ins[1]);
                send.extend([
                    (ins[0], adj),
                    (ins[1], g.node_op(Op::Neg, &[adj], &n, true)?),
                ]);
            }
            Op::Mul => {
                let (n0, n1) = (to(g, ins[0]), to(g, ins[1]));
                let d0 = g.node_op(Op::Mul, &[adj, ins[1]], &n0, true)?;
                let d1 = g.node_op(Op::Mul, &[adj, ins[0]], &n1, true)?;
                send.extend([(ins[0], d0), (ins[1], d1)]);
            }
            Op::Div => {
                let (n0, n1) = (to(g, ins[0]), to(g, ins[1]));
                let d0 = g.node_op(Op::Div, &[adj, ins[1]], &n0, true)?;
                let t = g.node_op(Op::Mul, &[adj, i], &format!("{n1}*"), true)?;
                let t = g.node_op(Op::Div, &[t, ins[1]], &format!("{n1}/"), true)?;
                let d1 = g.node_op(Op::Neg, &[t], &n1, true)?;
                send.extend([(ins[0], d0), (ins[1], d1)]);
            }
            Op::Neg => {
                let n = to(g, ins[0]);
                send.push((ins[0], g.node_op(Op::Neg, &[adj], &n, true)?));
            }
            Op::Ln => {
                let n = to(g, ins[0]);
                send.push((ins[0], g.node_op(Op::Div, &[adj, ins[0]], &n, true)?));
            }
            Op::Sin => {
                let n = to(g, ins[0]);
                let c = g.node_op(
                    Op::Cos,
                    &[ins[0]],
                    &format!("cos({})", name(g, ins[0])),
                    true,
                )?;
                send.push((ins[0], g.node_op(Op::Mul, &[adj, c], &n, true)?));
            }
            Op::Cos => {
                let n = to(g, ins[0]);
                let s = g.node_op(
                    Op::Sin,
                    &[ins[0]],
                    &format!("sin({})", name(g, ins[0])),
                    true,
                )?;
                let t = g.node_op(Op::Mul, &[adj, s], &format!("{n}*"), true)?;
                send.push((ins[0], g.node_op(Op::Neg, &[t], &n, true)?));
            }
            Op::Exp => {
                let n = to(g, ins[0]);
                send.push((ins[0], g.node_op(Op::Mul, &[adj, i], &n, true)?));
            }
        }
        for (k, d) in send {
            node_to_grad[k].push(d);
        }
    }
    Ok(Gradient {
        adjoints: wrt.iter().map(|&w| adjoint[w]).collect(),
        sweep,
    })
}

/// The nodes `outputs` need, as a graph of the rematerialization IR with its static memory plan.
#[derive(Debug, Clone)]
pub struct ExecutionPlan {
    /// The needed nodes (ascending ids of the [`ExprGraph`]) in execution order.
    pub nodes: Vec<NodeId>,
    /// The requested outputs.
    pub outputs: Vec<NodeId>,
    /// Elements of every value.
    pub elements: usize,
    /// The planned graph: node `p` is `nodes[p]` (`8 * elements` bytes), and a last node of 0
    /// bytes reads every output, so that outputs stay live to the end.
    pub graph: Graph,
    /// The memory plan of `graph` in its topological order.
    pub memory: MemoryPlan,
}

impl ExecutionPlan {
    /// Plans the evaluation of `outputs` of `g` on values of `elements` f64 each, with the
    /// reuse `reuse` ([`crate::memory_plan::plan_memory`]). `keep_forward`: every node that
    /// [`gradient`] did not add stays resident to the end, as when backward ops run on the
    /// forward graph and every forward value is kept for them (the lecture's "Backprop"); else
    /// a forward value is freed after its last reader, forward or backward.
    ///
    /// # Errors
    /// [`ExprError::UnknownNode`] for an output the graph does not have; [`ExprError::Plan`] if
    /// the planner refuses the graph.
    pub fn new(
        g: &ExprGraph,
        outputs: &[NodeId],
        elements: usize,
        reuse: Reuse,
        keep_forward: bool,
    ) -> Result<ExecutionPlan, ExprError> {
        if let Some(&node) = outputs.iter().find(|&&k| k >= g.len()) {
            return Err(ExprError::UnknownNode { node, len: g.len() });
        }
        let nodes = g.needed(outputs);
        let mut pos = vec![usize::MAX; g.len()];
        for (p, &k) in nodes.iter().enumerate() {
            pos[k] = p;
        }
        let bytes = 8 * elements as u64;
        let mut rnodes = Vec::with_capacity(nodes.len() + 1);
        let mut edges = Vec::new();
        for (p, &k) in nodes.iter().enumerate() {
            let n = &g.nodes[k];
            let mut node = Node::new(n.name.clone(), 1.0, bytes, n.backward);
            node.op = match n.op {
                Op::Input => OpKind::Input,
                _ if keep_forward && !n.backward => OpKind::Input,
                Op::Add => OpKind::Add,
                Op::Mul => OpKind::Mul,
                _ => OpKind::Opaque,
            };
            if node.op != OpKind::Input {
                // Every op is elementwise: it may write over its first (smallest) input.
                node.inplace = n.inputs.iter().map(|&i| pos[i]).min();
            }
            edges.extend(n.inputs.iter().map(|&i| (pos[i], p)));
            rnodes.push(node);
        }
        let sink = rnodes.len();
        rnodes.push(Node::new("outputs", 0.0, 0, true));
        edges.extend(outputs.iter().map(|&o| (pos[o], sink)));
        let graph = Graph::new("extended graph", rnodes, &edges, 0)?;
        let memory = plan_memory(&graph, &plain_order(&graph), reuse)?;
        Ok(ExecutionPlan {
            nodes,
            outputs: outputs.to_vec(),
            elements,
            graph,
            memory,
        })
    }

    /// Bytes the executor allocates: the planned buffers' sizes summed.
    pub fn static_bytes(&self) -> u64 {
        self.memory.static_bytes
    }
}

/// Executes `plan` (lecture slide "Build an Executor for a Given Graph": allocate, then traverse
/// and execute in topological order) in exactly the planned buffers: node `p` writes buffer
/// `plan.memory.assignment[p]` (an input's buffer when computed in place), reading its inputs'
/// buffers. `inputs` holds `plan.elements` values per graph input, in [`ExprGraph::inputs`]
/// order. Returns the values of `plan.outputs`.
///
/// # Errors
/// [`ExprError::Inputs`] when `inputs` does not match the graph's inputs or the plan's length;
/// [`ExprError::UnknownNode`] when `plan` was made for another graph.
pub fn execute(
    g: &ExprGraph,
    plan: &ExecutionPlan,
    inputs: &[&[f64]],
) -> Result<Vec<Vec<f64>>, ExprError> {
    if inputs.len() != g.inputs.len() {
        return Err(ExprError::Inputs(format!(
            "{} arrays for {} inputs",
            inputs.len(),
            g.inputs.len()
        )));
    }
    if let Some((i, x)) = inputs
        .iter()
        .enumerate()
        .find(|(_, x)| x.len() != plan.elements)
    {
        return Err(ExprError::Inputs(format!(
            "input {i} has {} values, the plan {}",
            x.len(),
            plan.elements
        )));
    }
    if let Some(&node) = plan.nodes.iter().find(|&&k| k >= g.len()) {
        return Err(ExprError::UnknownNode { node, len: g.len() });
    }
    let n = plan.elements;
    let sizes = buffer_sizes(plan);
    let mut buffers: Vec<Vec<f64>> = sizes.iter().map(|&b| vec![0.0; b]).collect();
    let mut buffer_of = vec![usize::MAX; g.len()];
    let mut operands = Vec::new();
    for (p, &k) in plan.nodes.iter().enumerate() {
        let node = &g.nodes[k];
        let b = plan.memory.assignment[p];
        buffer_of[k] = b;
        if node.op == Op::Input {
            let which = g.inputs.iter().position(|&i| i == k).unwrap_or(0);
            buffers[b][..n].copy_from_slice(inputs[which]);
            continue;
        }
        let reads: Vec<usize> = node.inputs.iter().map(|&i| buffer_of[i]).collect();
        for e in 0..n {
            operands.clear();
            operands.extend(reads.iter().map(|&r| buffers[r][e]));
            buffers[b][e] = node.op.apply(&operands);
        }
    }
    Ok(plan
        .outputs
        .iter()
        .map(|&o| buffers[buffer_of[o]][..n].to_vec())
        .collect())
}

/// Elements of every planned buffer: the largest value it holds.
fn buffer_sizes(plan: &ExecutionPlan) -> Vec<usize> {
    let mut sizes = vec![0usize; plan.memory.buffers];
    for (p, &b) in plan.memory.assignment.iter().enumerate() {
        let elements = (plan.graph.nodes[p].mem / 8) as usize;
        sizes[b] = sizes[b].max(elements);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lecture's y = ln(x1) + x1*x2 - sin(x2): (graph, x1, x2, y).
    fn lecture() -> (ExprGraph, NodeId, NodeId, NodeId) {
        let mut g = ExprGraph::new();
        let x1 = g.input("v1");
        let x2 = g.input("v2");
        let v3 = g.apply(Op::Ln, &[x1], "v3").unwrap();
        let v4 = g.apply(Op::Mul, &[x1, x2], "v4").unwrap();
        let v5 = g.apply(Op::Sin, &[x2], "v5").unwrap();
        let v6 = g.apply(Op::Add, &[v3, v4], "v6").unwrap();
        let v7 = g.apply(Op::Sub, &[v6, v5], "v7").unwrap();
        (g, x1, x2, v7)
    }

    const BOTH: Reuse = Reuse {
        inplace: true,
        sharing: true,
    };
    const NONE: Reuse = Reuse {
        inplace: false,
        sharing: false,
    };

    #[test]
    fn the_lectures_example_gives_its_adjoints() {
        let (mut g, x1, x2, y) = lecture();
        let grad = gradient(&mut g, y, &[x1, x2]).unwrap();
        let v = g.evaluate(&[2.0, 5.0]).unwrap();
        assert!((v[y] - 11.652).abs() < 5e-4);
        let (a1, a2) = (grad.adjoints[0].unwrap(), grad.adjoints[1].unwrap());
        assert!((v[a1] - 5.5).abs() < 1e-12, "{}", v[a1]);
        assert!((v[a2] - (2.0 - 5f64.cos())).abs() < 1e-12, "{}", v[a2]);
        // Reverse topological order: v7 first, the inputs last; v2 sums two partials (through
        // v5 and v4), as the lecture's node_to_grad[2] = [adj(2->4), adj(2->3)] does.
        let order: Vec<NodeId> = grad.sweep.iter().map(|s| s.node).collect();
        assert_eq!(order, [6, 5, 4, 3, 2, 1, 0]);
        assert_eq!(grad.sweep[5].partials.len(), 2);
        assert_eq!(g.nodes()[grad.sweep[5].adjoint].op, Op::Sum);
        assert!(g.nodes()[7..].iter().all(|n| n.backward));
    }

    /// The extended graph is differentiated again: the Hessian of y is [[-1/x1^2, 1], [1, sin x2]].
    #[test]
    fn differentiating_the_gradient_gives_the_hessian() {
        let (mut g, x1, x2, y) = lecture();
        let grad = gradient(&mut g, y, &[x1, x2]).unwrap();
        let (a1, a2) = (grad.adjoints[0].unwrap(), grad.adjoints[1].unwrap());
        let h1 = gradient(&mut g, a1, &[x1, x2]).unwrap().adjoints;
        let h2 = gradient(&mut g, a2, &[x1, x2]).unwrap().adjoints;
        for (p1, p2) in [(2.0, 5.0), (0.7, -1.3), (3.1, 2.2)] {
            let v = g.evaluate(&[p1, p2]).unwrap();
            let h = |a: Option<NodeId>| a.map_or(0.0, |a| v[a]);
            let want = [[-1.0 / (p1 * p1), 1.0], [1.0, f64::sin(p2)]];
            let got = [[h(h1[0]), h(h1[1])], [h(h2[0]), h(h2[1])]];
            for r in 0..2 {
                for c in 0..2 {
                    assert!((got[r][c] - want[r][c]).abs() < 1e-12, "{got:?} {want:?}");
                }
            }
        }
    }

    /// Every op's adjoint against central differences of the reference evaluation.
    #[test]
    fn every_op_matches_central_differences() {
        let mut g = ExprGraph::new();
        let a = g.input("a");
        let b = g.input("b");
        let ops = [
            (Op::Add, 2),
            (Op::Sub, 2),
            (Op::Mul, 2),
            (Op::Div, 2),
            (Op::Neg, 1),
            (Op::Ln, 1),
            (Op::Sin, 1),
            (Op::Cos, 1),
            (Op::Exp, 1),
        ];
        let mut terms = Vec::new();
        for (op, arity) in ops {
            let ins = if arity == 2 { vec![a, b] } else { vec![b] };
            terms.push(g.apply(op, &ins, &format!("{op:?}")).unwrap());
        }
        // Each term times a distinct constant, so that a wrong partial cannot cancel another.
        let mut scaled = Vec::new();
        for (j, &t) in terms.iter().enumerate() {
            let c = g.apply(Op::Const(1.0 + j as f64), &[], "c").unwrap();
            scaled.push(g.apply(Op::Mul, &[t, c], "ct").unwrap());
        }
        let y = g.apply(Op::Sum, &scaled, "y").unwrap();
        let grad = gradient(&mut g, y, &[a, b]).unwrap();
        let (pa, pb) = (1.3, 0.6);
        let v = g.evaluate(&[pa, pb]).unwrap();
        let f = |x: f64, z: f64| g.evaluate(&[x, z]).unwrap()[y];
        let h = 1e-6;
        let da = (f(pa + h, pb) - f(pa - h, pb)) / (2.0 * h);
        let db = (f(pa, pb + h) - f(pa, pb - h)) / (2.0 * h);
        assert!((v[grad.adjoints[0].unwrap()] - da).abs() < 1e-6);
        assert!((v[grad.adjoints[1].unwrap()] - db).abs() < 1e-6);
    }

    /// The executor, run in the planned buffers, gives the reference values for every reuse,
    /// and planning with the backward's dependencies needs fewer bytes than keeping every
    /// forward value, which needs fewer than one buffer per node.
    #[test]
    fn the_executor_in_planned_buffers_gives_the_reference_values() {
        let (mut g, x1, x2, y) = lecture();
        let grad = gradient(&mut g, y, &[x1, x2]).unwrap();
        let outs = [y, grad.adjoints[0].unwrap(), grad.adjoints[1].unwrap()];
        let p1: Vec<f64> = (0..16).map(|i| 0.5 + 0.2 * i as f64).collect();
        let p2: Vec<f64> = (0..16).map(|i| -4.0 + 0.5 * i as f64).collect();
        let mut bytes = Vec::new();
        for (reuse, keep) in [(NONE, false), (BOTH, true), (BOTH, false)] {
            let plan = ExecutionPlan::new(&g, &outs, 16, reuse, keep).unwrap();
            let got = execute(&g, &plan, &[&p1, &p2]).unwrap();
            for e in 0..16 {
                let want = g.evaluate(&[p1[e], p2[e]]).unwrap();
                for (o, &node) in outs.iter().enumerate() {
                    assert_eq!(got[o][e], want[node], "{reuse:?} {keep} {e} {o}");
                }
            }
            bytes.push(plan.static_bytes());
        }
        // No reuse: one buffer per node evaluated (7 forward, the backward's, no sink bytes).
        let plan = ExecutionPlan::new(&g, &outs, 16, NONE, false).unwrap();
        assert_eq!(bytes[0], plan.nodes.len() as u64 * 16 * 8);
        assert!(bytes[2] < bytes[1] && bytes[1] < bytes[0], "{bytes:?}");
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        let (mut g, x1, _, y) = lecture();
        assert!(matches!(
            g.apply(Op::Add, &[x1], "bad"),
            Err(ExprError::Arity { got: 1, .. })
        ));
        assert!(matches!(
            g.apply(Op::Sum, &[x1], "bad"),
            Err(ExprError::Arity { .. })
        ));
        assert!(matches!(
            g.apply(Op::Ln, &[99], "bad"),
            Err(ExprError::UnknownNode { node: 99, .. })
        ));
        assert!(matches!(
            gradient(&mut g, 42, &[x1]),
            Err(ExprError::UnknownNode { node: 42, .. })
        ));
        let plan = ExecutionPlan::new(&g, &[y], 4, BOTH, false).unwrap();
        let e = execute(&g, &plan, &[&[1.0; 4]]).unwrap_err();
        assert!(e.to_string().contains("1 arrays for 2 inputs"), "{e}");
        let e = execute(&g, &plan, &[&[1.0; 4], &[1.0; 3]]).unwrap_err();
        assert!(e.to_string().contains("input 1 has 3 values"), "{e}");
    }
}
