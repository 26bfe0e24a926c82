//! The tiny expression IR of the post's compiler-driven fusion demo: nodes, the DAG, the
//! fusion pass and evaluation over vectors.

use super::*;

/// Index of a node in a [`Graph`].
pub type NodeId = usize;

/// Body of a fused operation: an expression tree over the fused node's inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// The i-th input of the fused node.
    Input(usize),
    /// Add two subexpressions.
    Add(Box<Expr>, Box<Expr>),
    /// Multiply two subexpressions.
    Mul(Box<Expr>, Box<Expr>),
}

impl Expr {
    fn eval(&self, inputs: &[f32]) -> f32 {
        match self {
            Expr::Input(i) => inputs[*i],
            Expr::Add(l, r) => l.eval(inputs) + r.eval(inputs),
            Expr::Mul(l, r) => l.eval(inputs) * r.eval(inputs),
        }
    }
    fn show(&self, names: &[String]) -> String {
        match self {
            Expr::Input(i) => names[*i].clone(),
            Expr::Add(l, r) => format!("({} + {})", l.show(names), r.show(names)),
            Expr::Mul(l, r) => format!("{}*{}", l.show(names), r.show(names)),
        }
    }
}

/// A node of the tiny IR (the post's `VarA/VarB/VarC`, `Const`, `Add`, `Mult`, `FusedOp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Node {
    /// A named input vector.
    Var(String),
    /// A scalar constant broadcast over the vector.
    Const(f32),
    /// Elementwise sum.
    Add(NodeId, NodeId),
    /// Elementwise product.
    Mul(NodeId, NodeId),
    /// Several elementwise nodes evaluated in one pass over their `inputs`.
    FusedOp {
        /// Input nodes (vars, consts or unfused nodes).
        inputs: Vec<NodeId>,
        /// The fused computation over the inputs.
        body: Expr,
    },
}

/// A DAG of nodes in topological order (inputs before users) with one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    /// Nodes; children always have smaller ids.
    pub nodes: Vec<Node>,
    /// The output node.
    pub output: NodeId,
}

impl Graph {
    /// Builds `a + b*c + 1` parsed left to right: `Add(Add(a, Mul(b, c)), Const 1)`.
    pub fn a_plus_b_times_c_plus_1() -> Self {
        let nodes = vec![
            Node::Var("a".into()),
            Node::Var("b".into()),
            Node::Var("c".into()),
            Node::Mul(1, 2),
            Node::Add(0, 3),
            Node::Const(1.0),
            Node::Add(4, 5),
        ];
        Graph { output: 6, nodes }
    }

    /// Builds the post's first example `(a + b) * c`.
    pub fn a_plus_b_times_c() -> Self {
        let nodes = vec![
            Node::Var("a".into()),
            Node::Var("b".into()),
            Node::Var("c".into()),
            Node::Add(0, 1),
            Node::Mul(3, 2),
        ];
        Graph { output: 4, nodes }
    }

    fn children(n: &Node) -> Vec<NodeId> {
        match n {
            Node::Var(_) | Node::Const(_) => vec![],
            Node::Add(l, r) | Node::Mul(l, r) => vec![*l, *r],
            Node::FusedOp { inputs, .. } => inputs.clone(),
        }
    }

    /// Number of consumers of each node (the output counts as one extra consumer).
    fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for c in Self::children(n) {
                uses[c] += 1;
            }
        }
        uses[self.output] += 1;
        uses
    }

    /// Label of a node for figures.
    pub fn label(&self, id: NodeId) -> String {
        match &self.nodes[id] {
            Node::Var(s) => s.clone(),
            Node::Const(v) => format!("Const {v}"),
            Node::Add(..) => "Add".into(),
            Node::Mul(..) => "Mul".into(),
            Node::FusedOp { inputs, body } => {
                let names: Vec<String> = inputs.iter().map(|&i| self.short(i)).collect();
                format!("FusedOp {}", body.show(&names))
            }
        }
    }

    fn short(&self, id: NodeId) -> String {
        match &self.nodes[id] {
            Node::Var(s) => s.clone(),
            Node::Const(v) => format!("{v}"),
            _ => format!("n{id}"),
        }
    }

    /// The DAG as a figure (`nodes` and `edges` from input to consumer).
    pub fn figure(&self, name: &str, title: &str) -> Figure {
        let mut edges = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for c in Self::children(n) {
                edges.push((c, i));
            }
        }
        Figure {
            name: name.into(),
            title: title.into(),
            nodes: (0..self.nodes.len()).map(|i| self.label(i)).collect(),
            edges,
            ..Default::default()
        }
    }

    /// The expression of node `id` inside a fused op: absorbed Add/Mul nodes inline their
    /// children; any other node becomes (or reuses) an input of the fused op, by its new id.
    fn fused_expr(
        &self,
        id: NodeId,
        absorbed: &[bool],
        inputs: &mut Vec<NodeId>,
        map: &[Option<NodeId>],
    ) -> Expr {
        match &self.nodes[id] {
            Node::Add(l, r) | Node::Mul(l, r) if absorbed[id] => {
                let (le, re) = (
                    self.fused_expr(*l, absorbed, inputs, map),
                    self.fused_expr(*r, absorbed, inputs, map),
                );
                if matches!(self.nodes[id], Node::Add(..)) {
                    Expr::Add(Box::new(le), Box::new(re))
                } else {
                    Expr::Mul(Box::new(le), Box::new(re))
                }
            }
            _ => {
                let m = map[id].expect("child mapped before parent");
                let pos = inputs.iter().position(|&x| x == m).unwrap_or_else(|| {
                    inputs.push(m);
                    inputs.len() - 1
                });
                Expr::Input(pos)
            }
        }
    }

    /// Fusion pass: every Add/Mul node whose result is consumed outside the elementwise tree (or
    /// is the output) becomes a root; the root absorbs, recursively, child Add/Mul nodes that have
    /// exactly one consumer (so no intermediate is needed elsewhere). Vars, consts and shared nodes
    /// become the FusedOp's inputs. Unreachable nodes are dropped and ids compacted.
    pub fn fuse(&self) -> Graph {
        let uses = self.use_counts();
        let is_ew = |id: NodeId| matches!(self.nodes[id], Node::Add(..) | Node::Mul(..));
        // absorbed[i]: node i is folded into its single consumer's fused op.
        let mut absorbed = vec![false; self.nodes.len()];
        for n in &self.nodes {
            if let Node::Add(l, r) | Node::Mul(l, r) = n {
                for &ch in &[*l, *r] {
                    if is_ew(ch) && uses[ch] == 1 && ch != self.output {
                        absorbed[ch] = true;
                    }
                }
            }
        }
        let mut new_nodes: Vec<Node> = Vec::new();
        let mut map: Vec<Option<NodeId>> = vec![None; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if absorbed[i] {
                continue;
            }
            let new = match n {
                Node::Var(_) | Node::Const(_) => n.clone(),
                Node::Add(l, r) | Node::Mul(l, r) => {
                    let mut inputs = Vec::new();
                    let le = self.fused_expr(*l, &absorbed, &mut inputs, &map);
                    let re = self.fused_expr(*r, &absorbed, &mut inputs, &map);
                    let body = if matches!(n, Node::Add(..)) {
                        Expr::Add(Box::new(le), Box::new(re))
                    } else {
                        Expr::Mul(Box::new(le), Box::new(re))
                    };
                    Node::FusedOp { inputs, body }
                }
                Node::FusedOp { inputs, body } => Node::FusedOp {
                    inputs: inputs.iter().map(|&x| map[x].expect("mapped")).collect(),
                    body: body.clone(),
                },
            };
            map[i] = Some(new_nodes.len());
            new_nodes.push(new);
        }
        Graph {
            output: map[self.output].expect("output kept"),
            nodes: new_nodes,
        }
    }

    /// Evaluates the graph over vectors of length `n`, materializing every node's result as its
    /// own vector (unfused execution). Returns the output and the number of elementwise passes
    /// (kernels) executed. `vars` binds variable names to vectors.
    pub fn eval(&self, vars: &[(&str, &[f32])], n: usize) -> Result<(Vec<f32>, usize), DemoError> {
        let mut vals: Vec<Option<Vec<f32>>> = vec![None; self.nodes.len()];
        let mut kernels = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            let v = match node {
                Node::Var(name) => {
                    let (_, data) = vars
                        .iter()
                        .find(|(k, _)| k == name)
                        .ok_or_else(|| DemoError::Check(format!("unbound variable {name}")))?;
                    if data.len() != n {
                        return Err(DemoError::Check(format!(
                            "variable {name} has length {} != {n}",
                            data.len()
                        )));
                    }
                    data.to_vec()
                }
                Node::Const(c) => vec![*c; n],
                Node::Add(l, r) | Node::Mul(l, r) => {
                    kernels += 1;
                    let (a, b) = (
                        vals[*l].as_ref().expect("topo"),
                        vals[*r].as_ref().expect("topo"),
                    );
                    if matches!(node, Node::Add(..)) {
                        a.iter().zip(b).map(|(x, y)| x + y).collect()
                    } else {
                        a.iter().zip(b).map(|(x, y)| x * y).collect()
                    }
                }
                Node::FusedOp { inputs, body } => {
                    kernels += 1;
                    let ins: Vec<&Vec<f32>> = inputs
                        .iter()
                        .map(|&x| vals[x].as_ref().expect("topo"))
                        .collect();
                    let mut buf = vec![0f32; ins.len()];
                    (0..n)
                        .map(|e| {
                            for (slot, v) in buf.iter_mut().zip(&ins) {
                                *slot = v[e];
                            }
                            body.eval(&buf)
                        })
                        .collect()
                }
            };
            vals[i] = Some(v);
        }
        Ok((vals[self.output].take().expect("output"), kernels))
    }
}
