//! Kernel-fusion demo from the blog post (`000_8cbb5ca41b7f2c4a.txt`, section "Demos /
//! Compiler-Driven Kernel Fusion").
//!
//! A tiny IR (Var, Const, Add, Mul, FusedOp) for `a + b*c + 1`, a pass that fuses trees of
//! elementwise nodes whose intermediate results have a single consumer into one `FusedOp`,
//! evaluation over vectors, and a plain-Rust measurement of unfused (each intermediate array
//! materialized) versus fused (one loop) elementwise kernels, and the same chains as Burn tensor
//! ops: flex on the CPU (one kernel per op), and CUDA with and without Burn's fusion backend
//! when a GPU is present.

use serde::Deserialize;

use super::{ensure, median_time, DemoError, XorShift};
use crate::report::model::{Figure, Section, Table};

const SRC: &str =
    "000_8cbb5ca41b7f2c4a.txt (blog \"Memory Optimization Demo\"), section Demos / Kernel Fusion";

/// Parameters of the fusion study.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FusionParams {
    /// Elements per f32 array in the timing (default 2^24 = 16.8 M elements, 67 MB per array,
    /// far larger than the CPU caches so every pass streams from DRAM).
    pub n: usize,
    /// Timing repeats; the median is reported.
    pub repeats: usize,
    /// Elements per array for the IR evaluation check.
    pub ir_n: usize,
}

impl Default for FusionParams {
    fn default() -> Self {
        Self {
            n: 1 << 24,
            repeats: 5,
            ir_n: 100_000,
        }
    }
}

/// Index of a node in a [`Graph`].
pub type NodeId = usize;

/// Body of a fused operation: an expression tree over the fused node's inputs.
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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
        fn build(
            g: &Graph,
            id: NodeId,
            absorbed: &[bool],
            inputs: &mut Vec<NodeId>,
            map: &[Option<NodeId>],
        ) -> Expr {
            match &g.nodes[id] {
                Node::Add(l, r) | Node::Mul(l, r) if absorbed[id] => {
                    let (le, re) = (
                        build(g, *l, absorbed, inputs, map),
                        build(g, *r, absorbed, inputs, map),
                    );
                    if matches!(g.nodes[id], Node::Add(..)) {
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
        for (i, n) in self.nodes.iter().enumerate() {
            if absorbed[i] {
                continue;
            }
            let new = match n {
                Node::Var(_) | Node::Const(_) => n.clone(),
                Node::Add(l, r) | Node::Mul(l, r) => {
                    let mut inputs = Vec::new();
                    let le = build(self, *l, &absorbed, &mut inputs, &map);
                    let re = build(self, *r, &absorbed, &mut inputs, &map);
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

/// `(a + b) * c` unfused: `t = a + b` is written to memory, then `out = t * c`.
pub fn apb_c_unfused(a: &[f32], b: &[f32], c: &[f32], t: &mut [f32], out: &mut [f32]) {
    for ((t, a), b) in t.iter_mut().zip(a).zip(b) {
        *t = a + b;
    }
    for ((o, t), c) in out.iter_mut().zip(t.iter()).zip(c) {
        *o = t * c;
    }
}

/// `(a + b) * c` fused: one loop, no intermediate array.
pub fn apb_c_fused(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
    for (((o, a), b), c) in out.iter_mut().zip(a).zip(b).zip(c) {
        *o = (a + b) * c;
    }
}

/// `a + b*c + 1` unfused: `t1 = b*c`, `t2 = a + t1`, `out = t2 + 1`, each a separate pass.
pub fn a_bc_1_unfused(
    a: &[f32],
    b: &[f32],
    c: &[f32],
    t1: &mut [f32],
    t2: &mut [f32],
    out: &mut [f32],
) {
    for ((t, b), c) in t1.iter_mut().zip(b).zip(c) {
        *t = b * c;
    }
    for ((t2, a), t1) in t2.iter_mut().zip(a).zip(t1.iter()) {
        *t2 = a + t1;
    }
    for (o, t2) in out.iter_mut().zip(t2.iter()) {
        *o = t2 + 1.0;
    }
}

/// `a + b*c + 1` fused: one loop.
pub fn a_bc_1_fused(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
    for (((o, a), b), c) in out.iter_mut().zip(a).zip(b).zip(c) {
        *o = a + b * c + 1.0;
    }
}

fn random_vec(rng: &mut XorShift, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.unit_f64() * 2.0 - 1.0) as f32)
        .collect()
}

/// One elementwise chain run as Burn tensor ops on one backend.
#[derive(Debug, Clone, PartialEq)]
pub struct BurnChain {
    /// `(a+b)*c` or `a+b*c+1`.
    pub expr: &'static str,
    /// Median wall time of the chain (device synchronized after it), seconds; a warm-up run
    /// (kernel compilation on CUDA) is excluded.
    pub time_s: f64,
    /// Heap bytes allocated at the chain's high-water mark above the live bytes before it,
    /// per element (output included); `None` where the counting allocator does not see the
    /// device's memory (CUDA).
    pub alloc_bytes_per_element: Option<f64>,
    /// Largest absolute difference between Burn's result and the fused loop's.
    pub max_abs_diff: f64,
}

/// Runs `(a+b)*c` and `a+b*c+1` as Burn tensor ops on backend `B` (one op at a time unless the
/// backend fuses them) and compares each result with the fused loop's `expect`.
pub fn burn_chains<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
    count_heap: bool,
) -> Result<Vec<BurnChain>, DemoError> {
    use burn::tensor::{Tensor, TensorData};
    let n = inputs[0].len();
    let up = |v: &[f32]| Tensor::<B, 1>::from_data(TensorData::new(v.to_vec(), [n]), device);
    let (a, b, c) = (up(inputs[0]), up(inputs[1]), up(inputs[2]));
    let sync =
        || B::sync(device).map_err(|e| DemoError::Worker(format!("device synchronization: {e:?}")));
    sync()?;
    type Chain<'a, B> = (&'static str, Box<dyn Fn() -> Tensor<B, 1> + 'a>);
    let chains: [Chain<B>; 2] = [
        ("(a+b)*c", Box::new(|| (a.clone() + b.clone()) * c.clone())),
        (
            "a+b*c+1",
            Box::new(|| a.clone() + b.clone() * c.clone() + 1.0),
        ),
    ];
    let mut out = Vec::new();
    for ((expr, chain), want) in chains.into_iter().zip(expect) {
        // Warm-up: kernel compilation (CUDA), allocator pools. The output is kept until the
        // device has run the chain, so a fusing backend compiles the kernel it will time.
        let warm = chain();
        sync()?;
        drop(warm);
        let mut times = Vec::with_capacity(repeats.max(1));
        let mut alloc = 0u64;
        let mut last = None;
        for _ in 0..repeats.max(1) {
            drop(last.take());
            let before = crate::measure::allocated_bytes();
            crate::measure::reset_peak();
            let t0 = std::time::Instant::now();
            let r = chain();
            sync()?;
            times.push(t0.elapsed().as_secs_f64());
            alloc = alloc.max(crate::measure::peak_allocated_bytes().saturating_sub(before));
            last = Some(r);
        }
        let got = last
            .expect("at least one repeat")
            .into_data()
            .to_vec::<f32>()
            .map_err(|e| DemoError::Worker(format!("reading {expr}: {e:?}")))?;
        let max_abs_diff = got
            .iter()
            .zip(want)
            .map(|(x, y)| (x - y).abs() as f64)
            .fold(0.0, f64::max);
        out.push(BurnChain {
            expr,
            time_s: crate::measure::median(&times),
            alloc_bytes_per_element: count_heap.then(|| alloc as f64 / n as f64),
            max_abs_diff,
        });
    }
    Ok(out)
}

/// Burn's CUDA backend with its fusion backend (`Cuda`) and without it (`CubeBackend`), when
/// a GPU is present: `(fused, unfused, device name)`, or the reason it was not measured.
#[cfg(feature = "cuda")]
fn burn_cuda_chains(
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
) -> Result<(Vec<BurnChain>, Vec<BurnChain>, String), String> {
    use burn::backend::cuda::CudaDevice;
    type Unfused = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
    let info = crate::device::probe_cuda()?;
    let name = info
        .names
        .first()
        .cloned()
        .unwrap_or_else(|| "CUDA device 0".into());
    let device = CudaDevice::new(0);
    let run = || -> Result<_, DemoError> {
        Ok((
            burn_chains::<burn::backend::Cuda>(&device, inputs, expect, repeats, false)?,
            burn_chains::<Unfused>(&device, inputs, expect, repeats, false)?,
        ))
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok((f, u))) => Ok((f, u, name)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the CUDA backend panicked".into()),
    }
}

#[cfg(not(feature = "cuda"))]
fn burn_cuda_chains(
    _: [&[f32]; 3],
    _: [&[f32]; 2],
    _: usize,
) -> Result<(Vec<BurnChain>, Vec<BurnChain>, String), String> {
    Err("this binary was built without the `cuda` feature".into())
}

/// Runs the study.
pub fn run(p: &FusionParams) -> Result<Vec<Section>, DemoError> {
    ensure(p.n > 0 && p.ir_n > 0, "n", "array lengths must be positive")?;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    // IR part.
    let g = Graph::a_plus_b_times_c_plus_1();
    let f = g.fuse();
    let (a, b, c) = (
        random_vec(&mut rng, p.ir_n),
        random_vec(&mut rng, p.ir_n),
        random_vec(&mut rng, p.ir_n),
    );
    let vars = [
        ("a", a.as_slice()),
        ("b", b.as_slice()),
        ("c", c.as_slice()),
    ];
    let (u, ku) = g.eval(&vars, p.ir_n)?;
    let (fv, kf) = f.eval(&vars, p.ir_n)?;
    let mismatches = u
        .iter()
        .zip(&fv)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    if mismatches > 0 {
        return Err(DemoError::Check(format!(
            "fused IR differs from unfused in {mismatches} elements"
        )));
    }
    let g2 = Graph::a_plus_b_times_c();
    let f2 = g2.fuse();
    let (u2, _) = g2.eval(&vars, p.ir_n)?;
    let (fv2, _) = f2.eval(&vars, p.ir_n)?;
    if u2.iter().zip(&fv2).any(|(x, y)| x.to_bits() != y.to_bits()) {
        return Err(DemoError::Check("fused (a+b)*c differs".into()));
    }
    let ir_sec = Section {
        title: "Fusion pass on a tiny IR".into(),
        claim: format!(
            "{SRC}: parsing a + b * c + 1 into a DAG of Var/Const/Add/Mult nodes and \"recursively travers[ing] the tree\" transforms the graph into one FusedOp; \
             \"when an operator immediately consumes the output from the one preceding it, it could be advantageous to fuse the operations rather than storing \
             and subsequently collecting the data\"."
        ),
        ours: format!(
            "Our pass turns the {}-node graph of a + b*c + 1 ({ku} elementwise kernels) into {} nodes with one FusedOp ({kf} kernel): `{}`. Evaluated over {} random f32 \
             elements, fused and unfused outputs are bit-identical ({mismatches} mismatches); the same holds for (a + b)*c (`{}`).",
            g.nodes.len(), f.nodes.len(), f.label(f.output), p.ir_n, f2.label(f2.output)
        ),
        notes: vec![
            "Fusion rule: an Add/Mul child is absorbed into its consumer when it is elementwise and has exactly one consumer; a node with several consumers stays \
             materialized and becomes an input of the fused ops that read it. Constants become inputs of the FusedOp (broadcast scalars), as in the post's \
             `FusedOp(std::vector<Node> inputs)`. The fused body evaluates the same operations in the same order, hence identical rounding."
                .into(),
        ],
        tables: vec![],
        figures: vec![
            g.figure("fusion_dag_before", "a + b*c + 1 before fusion"),
            f.figure("fusion_dag_after", "a + b*c + 1 after fusion"),
        ],
    };

    // Measurement part.
    let n = p.n;
    let (a, b, c) = (
        random_vec(&mut rng, n),
        random_vec(&mut rng, n),
        random_vec(&mut rng, n),
    );
    let (mut t1, mut t2, mut out_u, mut out_f) =
        (vec![0f32; n], vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let (tu1, _) = median_time(p.repeats, || apb_c_unfused(&a, &b, &c, &mut t1, &mut out_u));
    let (tf1, _) = median_time(p.repeats, || apb_c_fused(&a, &b, &c, &mut out_f));
    let eq1 = out_u
        .iter()
        .zip(&out_f)
        .all(|(x, y)| x.to_bits() == y.to_bits());
    let (tu2, _) = median_time(p.repeats, || {
        a_bc_1_unfused(&a, &b, &c, &mut t1, &mut t2, &mut out_u)
    });
    let (tf2, _) = median_time(p.repeats, || a_bc_1_fused(&a, &b, &c, &mut out_f));
    let eq2 = out_u
        .iter()
        .zip(&out_f)
        .all(|(x, y)| x.to_bits() == y.to_bits());
    if !eq1 || !eq2 {
        return Err(DemoError::Check(
            "fused loop result differs from unfused".into(),
        ));
    }
    // Bytes per element (f32 = 4 B): (reads, writes) per kernel as written above.
    // (a+b)*c unfused: t=a+b (2R 1W), out=t*c (2R 1W); fused: 3R 1W. Floor: 3 inputs read once, output written once.
    // a+b*c+1 unfused: b*c (2R 1W), a+t1 (2R 1W), t2+1 (1R 1W); fused 3R 1W.
    let cases = [
        ("(a+b)*c", 6usize, 4usize, tu1, tf1),
        ("a+b*c+1", 8, 4, tu2, tf2),
    ];
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for (name, acc_u, acc_f, tu, tf) in cases {
        let floor = 4 * 4;
        let (bu, bf) = (4 * acc_u, 4 * acc_f);
        let gbs = |bytes: usize, t: f64| bytes as f64 * n as f64 / t / 1e9;
        rows.push(vec![
            name.into(),
            "unfused".into(),
            bu.to_string(),
            format!("{:.2}", bu as f64 / floor as f64),
            format!("{:.2}", tu * 1e3),
            format!("{:.1}", gbs(bu, tu)),
            format!("{:.2}", tu / tf),
        ]);
        rows.push(vec![
            name.into(),
            "fused".into(),
            bf.to_string(),
            format!("{:.2}", bf as f64 / floor as f64),
            format!("{:.2}", tf * 1e3),
            format!("{:.1}", gbs(bf, tf)),
            "1.00".into(),
        ]);
        summary.push(format!(
            "{name}: {:.2} ms unfused vs {:.2} ms fused ({:.2}x, {bu} vs {bf} B/element)",
            tu * 1e3,
            tf * 1e3,
            tu / tf
        ));
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let meas = Section {
        title: "Fused versus unfused elementwise loops".into(),
        claim: format!(
            "{SRC} (Background / Kernel Fusion): fusion \"combines multiple operations into a single environment or context, instead of executing them sequentially \
             and reading/writing temporary values to secondary memory after each one\"; for (5 + 3) * 10, fusing removes \"the need to allocate memory and read/write to it\"."
        ),
        ours: format!(
            "On {n} f32 elements per array (single thread on a {cores}-core CPU, median of {}): {}. Fused loops move exactly the one-read-per-input, one-write floor of 16 B/element.",
            p.repeats,
            summary.join("; ")
        ),
        notes: vec![
            "Bytes per element count the loads and stores each loop performs (4 B per f32 access). Intermediate buffers are allocated once before timing (as a \
             caching allocator would), so the timings measure memory traffic, not allocation or page faults. With write-allocate caches each store also reads its \
             line first, so DRAM traffic is higher than the counted bytes for both variants; the GB/s column uses counted bytes."
                .into(),
            "The floor is 16 B/element: three 4-byte inputs read once and one 4-byte output written once. Both loops are memory-bound on arrays this large, so the \
             speed-up tracks the ratio of bytes moved."
                .into(),
        ],
        tables: vec![Table {
            caption: format!("Elementwise expressions over {n} f32 elements, median of {} runs", p.repeats),
            columns: vec!["Expression".into(), "Variant".into(), "Bytes/element".into(), "x floor (16 B)".into(), "Time (ms)".into(), "Counted GB/s".into(), "Slowdown vs fused (x)".into()],
            rows,
        }],
        figures: vec![bar_figure(
            "fusion_bytes_per_element",
            "Bytes moved per element: unfused kernels vs one fused kernel",
            "bytes per element",
            &[("unfused", [24.0, 32.0]), ("fused (floor)", [16.0, 16.0])],
        )],
    };

    // Burn: the same chains as tensor ops.
    // out_f holds a+b*c+1 from the last timed fused loop; (a+b)*c needs its own buffer.
    let mut expect1 = vec![0f32; n];
    apb_c_fused(&a, &b, &c, &mut expect1);
    let inputs = [a.as_slice(), b.as_slice(), c.as_slice()];
    let expect = [expect1.as_slice(), out_f.as_slice()];
    let flex =
        burn_chains::<burn::backend::Flex>(&Default::default(), inputs, expect, p.repeats, true)?;
    let cuda = burn_cuda_chains(inputs, expect, p.repeats);
    let floor = 16.0;
    let mut burn_rows = Vec::new();
    let mut burn_summary = Vec::new();
    for (i, (name, ops_bytes, loop_t)) in [("(a+b)*c", 24.0, tf1), ("a+b*c+1", 32.0, tf2)]
        .into_iter()
        .enumerate()
    {
        let f = &flex[i];
        burn_rows.push(vec![
            name.into(),
            "Burn flex (CPU), one kernel per op".into(),
            format!("{ops_bytes:.0}"),
            format!("{:.2}", ops_bytes / floor),
            fmt_opt_bytes(f.alloc_bytes_per_element),
            format!("{:.2}", f.time_s * 1e3),
            format!("{:.2}", f.time_s / loop_t),
            format!("{:.1e}", f.max_abs_diff),
        ]);
        burn_summary.push(format!(
            "{name} on flex {:.2} ms ({:.2}x our fused loop, {} B/element allocated)",
            f.time_s * 1e3,
            f.time_s / loop_t,
            fmt_opt_bytes(f.alloc_bytes_per_element)
        ));
        if let Ok((fused, unfused, dev)) = &cuda {
            let (fu, un) = (&fused[i], &unfused[i]);
            burn_rows.push(vec![
                name.into(),
                format!("Burn CUDA without fusion ({dev})"),
                format!("{ops_bytes:.0}"),
                format!("{:.2}", ops_bytes / floor),
                "–".into(),
                format!("{:.3}", un.time_s * 1e3),
                "–".into(),
                format!("{:.1e}", un.max_abs_diff),
            ]);
            burn_rows.push(vec![
                name.into(),
                format!("Burn CUDA with fusion ({dev})"),
                format!("{floor:.0} (floor, if fully fused)"),
                "1.00".into(),
                "–".into(),
                format!("{:.3}", fu.time_s * 1e3),
                "–".into(),
                format!("{:.1e}", fu.max_abs_diff),
            ]);
            burn_summary.push(format!(
                "{name} on CUDA {:.3} ms unfused vs {:.3} ms fused ({:.2}x)",
                un.time_s * 1e3,
                fu.time_s * 1e3,
                un.time_s / fu.time_s
            ));
        }
    }
    let mut figures = vec![bar_figure(
        "fusion_cpu_time",
        &format!("CPU time per chain over {n} elements"),
        "time (ms)",
        &[
            ("unfused loops", [tu1 * 1e3, tu2 * 1e3]),
            ("fused loop", [tf1 * 1e3, tf2 * 1e3]),
            ("Burn flex", [flex[0].time_s * 1e3, flex[1].time_s * 1e3]),
        ],
    )];
    if let Ok((fused, unfused, dev)) = &cuda {
        figures.push(bar_figure(
            "fusion_cuda_time",
            &format!("Burn on {dev}: time per chain over {n} elements"),
            "time (ms)",
            &[
                (
                    "without fusion",
                    [unfused[0].time_s * 1e3, unfused[1].time_s * 1e3],
                ),
                (
                    "with fusion",
                    [fused[0].time_s * 1e3, fused[1].time_s * 1e3],
                ),
            ],
        ));
    }
    let burn_sec = Section {
        title: "Elementwise chains as Burn tensor ops".into(),
        claim: format!(
            "{SRC}: the unfused chain writes each temporary to memory and reads it back; fusing the chain into one kernel leaves one read of each input \
             and one write of the output."
        ),
        ours: format!(
            "The same arrays ({n} f32 each) through Burn 0.21, median of {}: {}. {}",
            p.repeats,
            burn_summary.join("; "),
            match &cuda {
                Ok(_) => "On CUDA, Burn's fusion backend may run each chain as one kernel (16 B/element); the times show how close it comes.".to_string(),
                Err(why) => format!(
                    "Burn's kernel fusion exists only for its CubeCL backends (CUDA here); no GPU measurement in this run: {why}."
                ),
            }
        ),
        notes: vec![
            "Bytes/element moved count each kernel's 4-byte loads and stores: unfused (a+b)*c is two kernels (a+b: 2 loads, 1 store; t*c: 2 loads, 1 store) = 24 B, \
             unfused a+b*c+1 three kernels = 32 B; a fused kernel moves the 16 B floor. Allocated bytes are the counting allocator's high-water mark above the \
             bytes live before the chain, per element, output included: flex reuses a temporary's buffer in place when it is the only reference, so an \
             unfused chain can allocate no more than its output while still moving every byte."
                .into(),
            "Results agree with the fused loop to the listed maximum absolute difference (the operations and their order are the same)."
                .into(),
        ],
        tables: vec![Table {
            caption: format!("Burn tensor ops over {n} f32 elements, median of {} runs", p.repeats),
            columns: vec![
                "Expression".into(),
                "Backend".into(),
                "Bytes/element moved".into(),
                "x floor (16 B)".into(),
                "Allocated B/element".into(),
                "Time (ms)".into(),
                "x our fused loop".into(),
                "Max abs. difference".into(),
            ],
            rows: burn_rows,
        }],
        figures,
    };
    Ok(vec![ir_sec, meas, burn_sec])
}

/// Grouped bars over the two expressions, one series per variant.
fn bar_figure(name: &str, title: &str, y_label: &str, series: &[(&str, [f64; 2])]) -> Figure {
    Figure::grouped_bars(
        name,
        title,
        "expression",
        y_label,
        &["(a+b)*c".into(), "a+b*c+1".into()],
        series
            .iter()
            .map(|(label, ys)| (label.to_string(), ys.to_vec()))
            .collect(),
    )
}

fn fmt_opt_bytes(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into())
}

/// The fusion IR study ([`InProcessStudy`]). TEMPORARY: its output is still the rendered sections; typed result to come.
pub struct FusionIr;

impl super::InProcessStudy for FusionIr {
    type Params = FusionParams;
    type Output = Vec<Section>;
    type Error = DemoError;
    fn run(params: &FusionParams, _data_dir: &std::path::Path) -> Result<Vec<Section>, DemoError> {
        run(params)
    }
    fn render(output: &Vec<Section>) -> Vec<Section> {
        output.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusion_makes_one_fused_op_with_same_value() {
        let g = Graph::a_plus_b_times_c_plus_1();
        let f = g.fuse();
        assert_eq!(f.nodes.len(), 5); // a, b, c, Const 1, FusedOp
        assert!(matches!(f.nodes[f.output], Node::FusedOp { .. }));
        let a = [1.0f32, 2.0, -3.5];
        let b = [4.0f32, 0.5, 2.0];
        let c = [10.0f32, -2.0, 0.25];
        let vars = [("a", &a[..]), ("b", &b[..]), ("c", &c[..])];
        let (u, ku) = g.eval(&vars, 3).unwrap();
        let (v, kf) = f.eval(&vars, 3).unwrap();
        assert_eq!(u, vec![42.0, 2.0, -2.0]);
        assert_eq!(u, v);
        assert_eq!((ku, kf), (3, 1));
        // Post's (5 + 3) * 10 = 80.
        let g2 = Graph::a_plus_b_times_c();
        let (r, _) = g2
            .fuse()
            .eval(
                &[("a", &[5.0][..]), ("b", &[3.0][..]), ("c", &[10.0][..])],
                1,
            )
            .unwrap();
        assert_eq!(r, vec![80.0]);
    }

    #[test]
    fn shared_intermediate_is_not_fused_away() {
        // t = a*b used twice: out = (t + a) * t. t must stay materialized.
        let g = Graph {
            nodes: vec![
                Node::Var("a".into()),
                Node::Var("b".into()),
                Node::Mul(0, 1),
                Node::Add(2, 0),
                Node::Mul(3, 2),
            ],
            output: 4,
        };
        let f = g.fuse();
        assert!(f.nodes.iter().any(|n| matches!(n, Node::FusedOp { .. })));
        assert_eq!(
            f.nodes
                .iter()
                .filter(|n| matches!(n, Node::FusedOp { .. }))
                .count(),
            2
        );
        let a = [1.5f32, -2.0];
        let b = [2.0f32, 3.0];
        let vars = [("a", &a[..]), ("b", &b[..])];
        assert_eq!(g.eval(&vars, 2).unwrap().0, f.eval(&vars, 2).unwrap().0);
    }

    #[test]
    fn fused_loops_equal_unfused() {
        let mut rng = XorShift(7);
        let n = 1000;
        let (a, b, c) = (
            random_vec(&mut rng, n),
            random_vec(&mut rng, n),
            random_vec(&mut rng, n),
        );
        let (mut t1, mut t2, mut u, mut f) =
            (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        apb_c_unfused(&a, &b, &c, &mut t1, &mut u);
        apb_c_fused(&a, &b, &c, &mut f);
        assert_eq!(u, f);
        a_bc_1_unfused(&a, &b, &c, &mut t1, &mut t2, &mut u);
        a_bc_1_fused(&a, &b, &c, &mut f);
        assert_eq!(u, f);
    }

    #[test]
    fn run_small() {
        let s = run(&FusionParams {
            n: 10_000,
            repeats: 1,
            ir_n: 100,
        })
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].figures[1].nodes.len(), 5);
        assert_eq!(s[1].figures.len(), 1);
        assert_eq!(
            s[2].figures[0].series.len(),
            3,
            "loops, fused loop, Burn flex"
        );
    }

    #[test]
    fn burn_flex_chains_equal_the_fused_loops() {
        let n = 4096;
        let mut rng = XorShift(7);
        let (a, b, c) = (
            random_vec(&mut rng, n),
            random_vec(&mut rng, n),
            random_vec(&mut rng, n),
        );
        let (mut e1, mut e2) = (vec![0f32; n], vec![0f32; n]);
        apb_c_fused(&a, &b, &c, &mut e1);
        a_bc_1_fused(&a, &b, &c, &mut e2);
        let got = burn_chains::<burn::backend::Flex>(
            &Default::default(),
            [&a, &b, &c],
            [&e1, &e2],
            2,
            true,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        for g in &got {
            assert!(g.max_abs_diff <= 1e-6, "{}: {}", g.expr, g.max_abs_diff);
            assert!(g.time_s > 0.0 && g.alloc_bytes_per_element.is_some());
        }
        // A wrong expectation is detected.
        let wrong = burn_chains::<burn::backend::Flex>(
            &Default::default(),
            [&a, &b, &c],
            [&e2, &e1],
            1,
            false,
        )
        .unwrap();
        assert!(wrong[0].max_abs_diff > 1e-3 && wrong[0].alloc_bytes_per_element.is_none());
    }
}
