//! Kernel-fusion demo from the blog post (`000_8cbb5ca41b7f2c4a.txt`, section "Demos /
//! Compiler-Driven Kernel Fusion").
//!
//! A tiny IR (Var, Const, Add, Mul, FusedOp) for `a + b*c + 1`, a pass that fuses trees of
//! elementwise nodes whose intermediate results have a single consumer into one `FusedOp`,
//! evaluation over vectors, and a plain-Rust measurement of unfused (each intermediate array
//! materialized) versus fused (one loop) elementwise kernels, and the same chains as Burn tensor
//! ops: flex on the CPU (one kernel per op), and CUDA with and without Burn's fusion backend
//! when a GPU is present. [`measure`] runs all three parts into a [`FusionResult`]; [`render`]
//! presents one as three sections.
//!
//! The Burn part (the chains' types, [`burn_chains`], the CUDA pair, the study's inputs and the
//! fused reference loops) lives in the runner ([`memwall_runner::fusion_chains`], types in
//! `memwall_core::record::fusion_chains`), so GPU machines without Rust measure it with the
//! slim runner: `memwall-job fusion-chains` writes a [`FusionChainsRun`], a bundle's import
//! stores it as `runs/fusion_ir/cuda_chains.json` ([`read_cuda_chains`]), and a record without
//! a CUDA measurement of its own is rendered with it ([`with_imported_cuda`],
//! [`BurnResult::cuda_shown`]), the report naming the device, the runner and the date.
//!
//! Why this module has its own [`Graph`] and not memwall-remat's `Graph` (which says every graph
//! of memwall is that type): the remat graph is a data-flow graph of forward and backward ops,
//! each with a compute cost and an output size in bytes, which the simulator and the Checkmate
//! MILP schedule (which outputs to keep, which to recompute). This one is an expression DAG:
//! element-wise expressions over vectors (Var, Const, Add, Mul nodes that evaluate to values)
//! that the fusion pass rewrites into fused kernels, and whose evaluation counts kernels and the
//! bytes each moves. Built on the remat graph it would lose what the pass and the records need:
//! (1) the remat `Node` has no expression body, constant value or operand order (its `OpKind`
//! is a closed enum without a fused op or a constant, and `deps` are sorted and deduplicated,
//! while a `FusedOp`'s `Expr::Input(i)` indexes its inputs in first-use order, and `Mul(x, x)`
//! has two operands); (2) the remat graph is not serializable, while the study's record stores
//! these graphs (`IrResult`, `runs/fusion_ir/*.result.json`) and the report re-renders from the
//! stored shape; (3) its costs and sizes mean nothing here. memwall-remat is not changed by this
//! study, so a fused-expression op kind and serde for its graph would be the place to unify.
//!
//! May import: [`super`] (the study trait, errors, timing, test data), [`crate::report::model`]
//! (the sections the renderers build), `crate::error` (errors of the imported run's file),
//! `memwall_runner::fusion_chains` (the Burn chains, the study's inputs), `memwall_core`, Burn
//! (flex), serde.

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::params::{int_in, ParamResult};
use super::{demo_study, ensure, median_time, DemoError, XorShift};
use super::{CiteAs, Cited};
use crate::report::model::{Figure, Measure, Section, Table};
use memwall_runner::fusion_chains::{random_vec, ChainsBackend, CUDA_CHAINS_FILE, SEED};
// The chains' types, the fused reference loops and the imported run's format live in
// memwall-core and the runner (the slim runner times the CUDA part on GPU machines).
pub use memwall_runner::fusion_chains::{
    a_bc_1_fused, apb_c_fused, BurnChain, Chain, CudaChains, FusionChainsRun,
};

/// Bytes of one f32 load or store.
const F32_BYTES: usize = 4;

/// The floor of bytes moved per element by both chains: three 4-byte inputs read once and one
/// 4-byte output written once.
const FLOOR_BYTES_PER_ELEMENT: usize = 4 * F32_BYTES;

/// Parameters of the fusion study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// `(a + b) * c` unfused: `t = a + b` is written to memory, then `out = t * c`.
pub fn apb_c_unfused(a: &[f32], b: &[f32], c: &[f32], t: &mut [f32], out: &mut [f32]) {
    for ((t, a), b) in t.iter_mut().zip(a).zip(b) {
        *t = a + b;
    }
    for ((o, t), c) in out.iter_mut().zip(t.iter()).zip(c) {
        *o = t * c;
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

/// Runs `(a+b)*c` and `a+b*c+1` as Burn tensor ops on backend `B` (one op at a time unless the
/// backend fuses them) and compares each result with the fused loop's `expect`
/// ([`memwall_runner::fusion_chains::burn_chains`], which the slim runner's `fusion-chains`
/// runs too).
///
/// # Errors
/// [`DemoError::Worker`] when the device cannot be synchronized or a result cannot be read.
pub fn burn_chains<B: burn::tensor::backend::Backend>(
    device: &B::Device,
    inputs: [&[f32]; 3],
    expect: [&[f32]; 2],
    repeats: usize,
    count_heap: bool,
) -> Result<Vec<BurnChain>, DemoError> {
    memwall_runner::fusion_chains::burn_chains::<B>(device, inputs, expect, repeats, count_heap)
        .map_err(DemoError::Worker)
}

/// The result of the fusion study: the three parts it measured, and the parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FusionResult {
    /// The parameters it ran with.
    pub params: FusionParams,
    /// The fusion pass on the tiny IR.
    pub ir: IrResult,
    /// The plain-Rust loops, unfused versus fused.
    pub loops: LoopsResult,
    /// The same chains as Burn tensor ops.
    pub burn: BurnResult,
}

/// What the fusion pass did to `a + b*c + 1` and `(a + b)*c`, evaluated over `ir_n` elements.
/// The graphs are the pass's output (structure, not text); the renderer labels and draws them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IrResult {
    /// `a + b*c + 1` as parsed, before fusion.
    pub unfused_graph: Graph,
    /// `a + b*c + 1` after the fusion pass.
    pub fused_graph: Graph,
    /// Elementwise kernels (passes over the vectors) of the unfused graph's evaluation.
    pub unfused_kernels: usize,
    /// Elementwise kernels of the fused graph's evaluation.
    pub fused_kernels: usize,
    /// Elements whose fused and unfused values differ bitwise (0: the study fails otherwise).
    pub mismatches: usize,
    /// `(a + b)*c` after the fusion pass.
    pub fused_apb_c_graph: Graph,
}

/// The plain-Rust loops over `n` elements: one entry per chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoopsResult {
    /// Logical CPU cores of the machine (the loops run on one thread).
    pub cores: usize,
    /// `(a+b)*c`, then `a+b*c+1`.
    pub chains: Vec<LoopChain>,
}

/// One chain as unfused loops (each intermediate array materialized) and as one fused loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopChain {
    /// Which chain.
    pub chain: Chain,
    /// Bytes loaded and stored per element by the unfused loops (4 B per f32 access).
    pub unfused_bytes_per_element: usize,
    /// Bytes loaded and stored per element by the fused loop (the 16 B floor).
    pub fused_bytes_per_element: usize,
    /// Median wall time of the unfused loops, seconds.
    pub unfused_s: f64,
    /// Median wall time of the fused loop, seconds.
    pub fused_s: f64,
}

/// The chains as Burn tensor ops.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BurnResult {
    /// Burn flex (CPU, one kernel per op), one per chain.
    pub flex: Vec<BurnChain>,
    /// Burn on CUDA with and without fusion, or why it was not measured (no GPU, no driver,
    /// built without the `cuda` feature).
    pub cuda: Result<CudaChains, String>,
    /// The slim runner's run of the chains from a GPU bundle (`runs/<study>/cuda_chains.json`),
    /// merged in when a record without a CUDA measurement is rendered
    /// ([`with_imported_cuda`]); `None` in every record the study stores (and then absent from
    /// its JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_cuda: Option<FusionChainsRun>,
}

impl BurnResult {
    /// The CUDA chains the report shows: this run's, else the imported run's (with that run),
    /// else why there are none.
    ///
    /// # Errors
    /// Why no CUDA chains were measured: this run's reason, with the imported run's when it
    /// has none either or timed flex.
    pub fn cuda_shown(&self) -> Result<(&CudaChains, Option<&FusionChainsRun>), String> {
        let why = match &self.cuda {
            Ok(c) => return Ok((c, None)),
            Err(why) => why,
        };
        let Some(run) = &self.imported_cuda else {
            return Err(why.clone());
        };
        match (run.backend, &run.chains) {
            (ChainsBackend::Cuda, Ok(c)) => Ok((c, Some(run))),
            (ChainsBackend::Cuda, Err(theirs)) => Err(format!(
                "{why}; the slim runner's run from a GPU bundle ({}) measured none either: {theirs}",
                run.date()
            )),
            (ChainsBackend::Flex, _) => Err(format!(
                "{why}; the imported `{CUDA_CHAINS_FILE}` ({}) is a flex run of the slim runner \
                 (a check of its timing code), not a CUDA measurement",
                run.date()
            )),
        }
    }
}

/// The study's name: its record-store folder is `runs/fusion_ir/`.
pub const STUDY: &str = "fusion_ir";

/// The slim runner's imported CUDA run of the chains, `runs/fusion_ir/cuda_chains.json`
/// (`memwall-job fusion-chains`, format `memwall-fusion-chains/1`, written by a bundle's
/// import), or `None` when there is none.
///
/// # Errors
/// [`Error::Records`](crate::error::Error::Records) naming the file and the field at fault
/// when it does not read as a [`FusionChainsRun`], or the file cannot be read.
pub fn read_cuda_chains(runs: &Path) -> crate::error::Result<Option<FusionChainsRun>> {
    read_cuda_chains_in(&runs.join(STUDY))
}

/// [`read_cuda_chains`] from a study's record-store folder (`runs/<study>/`).
///
/// # Errors
/// As [`read_cuda_chains`].
pub fn read_cuda_chains_in(study_dir: &Path) -> crate::error::Result<Option<FusionChainsRun>> {
    use crate::error::Error;
    let path = study_dir.join(CUDA_CHAINS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading", &path, e)),
    };
    memwall_core::record::fusion_chains::parse_run(&text)
        .map(Some)
        .map_err(|message| Error::Records {
            path,
            message: format!(
                "{message} (the slim runner's `memwall-job fusion-chains` result, \
                 memwall-fusion-chains/1, that a bundle's import writes)"
            ),
        })
}

/// A stored fusion result (JSON) with the imported CUDA run of `study_dir` merged in
/// ([`BurnResult::imported_cuda`]) when the result has no CUDA measurement of its own and the
/// folder has a `cuda_chains.json`; `None` when nothing changes (no file, a CUDA measurement
/// of its own, or a result that does not read as this version's: its renderer says so). With
/// the merged result, where the imported chains were measured (for the glance's device), when
/// the report shows them.
///
/// # Errors
/// The file is malformed ([`read_cuda_chains`]).
pub fn with_imported_cuda(
    result: &serde_json::Value,
    study_dir: &Path,
) -> crate::error::Result<Option<(serde_json::Value, Option<String>)>> {
    let Some(run) = read_cuda_chains_in(study_dir)? else {
        return Ok(None);
    };
    let Ok(mut r) = FusionResult::deserialize(result) else {
        return Ok(None);
    };
    if r.burn.cuda.is_ok() {
        return Ok(None);
    }
    r.burn.imported_cuda = Some(run);
    let measured_on = r.burn.cuda_shown().ok().and_then(|(c, run)| {
        run.map(|run| {
            format!(
                "CUDA rows: {} (slim runner from a GPU bundle, {})",
                c.device,
                run.date()
            )
        })
    });
    let merged = serde_json::to_value(&r).map_err(|e| crate::error::Error::Records {
        path: study_dir.join(CUDA_CHAINS_FILE),
        message: format!("the merged result does not serialize: {e}"),
    })?;
    Ok(Some((merged, measured_on)))
}

/// The fusion IR study ([`InProcessStudy`](super::InProcessStudy)).
pub struct FusionIr;

demo_study!(
    FusionIr: FusionParams => FusionResult,
    cited CiteAs,
    validate,
    measure,
    render,
    measures,
    tracked
);

/// The timings the nightly run tracks ([`super::Tracked`], [`super::TrackedKind::KernelTime`]):
/// per chain, the median time of the unfused and the fused loops, of Burn flex, and of Burn on
/// CUDA with and without fusion where this run measured it (an imported CUDA run is not this
/// run's measurement and is left out).
pub fn tracked(r: &FusionResult) -> Vec<super::Tracked> {
    use super::{Tracked, TrackedKind::KernelTime};
    let t = |case: String, value: f64| Tracked {
        case,
        kind: KernelTime,
        value,
    };
    let mut out = Vec::new();
    for l in &r.loops.chains {
        let c = l.chain.label();
        out.push(t(format!("loops {c} unfused"), l.unfused_s));
        out.push(t(format!("loops {c} fused"), l.fused_s));
    }
    for f in &r.burn.flex {
        out.push(t(format!("burn flex {}", f.expr.label()), f.time_s));
    }
    if let Ok(cuda) = &r.burn.cuda {
        for (how, chains) in [("fused", &cuda.fused), ("unfused", &cuda.unfused)] {
            for f in chains {
                out.push(t(format!("burn cuda {how} {}", f.expr.label()), f.time_s));
            }
        }
    }
    out.retain(|x| x.value.is_finite() && x.value > 0.0);
    out
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only (NaN where the run has no such measurement):
///
/// - `apb_c_loop_speedup`, `a_bc_1_loop_speedup` (x): median time of the unfused loops over the
///   fused loop's, for `(a+b)*c` and `a+b*c+1` (above 1: fusion is faster).
/// - `apb_c_bytes_ratio`, `a_bc_1_bytes_ratio` (x): bytes loaded and stored per element,
///   unfused over fused (memwall's count of 4-byte accesses).
/// - `cuda_fusion_speedup` (x): Burn on CUDA, time without its fusion backend over time with
///   it, the smaller of the two chains; NaN when no GPU was measured (by the study, or by the
///   slim runner from a GPU bundle: [`BurnResult::cuda_shown`]).
/// - `ir_unfused_kernels`, `ir_fused_kernels` (kernels) and `ir_mismatches` (elements): the
///   fusion pass on `a + b*c + 1`.
pub fn measures(r: &FusionResult) -> Vec<Measure> {
    let chain = |c: Chain| r.loops.chains.iter().find(|l| l.chain == c);
    let speedup = |c: Chain| chain(c).map_or(f64::NAN, |l| l.unfused_s / l.fused_s);
    let bytes = |c: Chain| {
        chain(c).map_or(f64::NAN, |l| {
            l.unfused_bytes_per_element as f64 / l.fused_bytes_per_element as f64
        })
    };
    let cuda = match r.burn.cuda_shown() {
        Ok((c, _)) => c
            .unfused
            .iter()
            .zip(&c.fused)
            .map(|(u, f)| u.time_s / f.time_s)
            .reduce(f64::min)
            .unwrap_or(f64::NAN),
        Err(_) => f64::NAN,
    };
    let ir = &r.ir;
    vec![
        Measure::new("apb_c_loop_speedup", speedup(Chain::APlusBTimesC), "x", 2),
        Measure::new(
            "a_bc_1_loop_speedup",
            speedup(Chain::APlusBTimesCPlus1),
            "x",
            2,
        ),
        Measure::new("apb_c_bytes_ratio", bytes(Chain::APlusBTimesC), "x", 2),
        Measure::new(
            "a_bc_1_bytes_ratio",
            bytes(Chain::APlusBTimesCPlus1),
            "x",
            2,
        ),
        Measure::new("cuda_fusion_speedup", cuda, "x", 2),
        Measure::new("ir_unfused_kernels", ir.unfused_kernels as f64, "", 0),
        Measure::new("ir_fused_kernels", ir.fused_kernels as f64, "", 0),
        Measure::new("ir_mismatches", ir.mismatches as f64, "", 0),
    ]
}

pub use memwall_runner::fusion_chains::MAX_N;

/// Checks `p`'s ranges: `n` in 1..=[`MAX_N`], `repeats` in 1..=100, `ir_n` in 1..=2^24.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &FusionParams) -> ParamResult {
    int_in("n", p.n, 1, MAX_N)?;
    int_in("repeats", p.repeats, 1, 100)?;
    int_in("ir_n", p.ir_n, 1, 1 << 24)
}

/// Runs the study: the fusion pass, the loop timings, the Burn chains (in this order, from one
/// seeded generator).
///
/// # Errors
/// [`DemoError::InvalidParam`] for zero `n` or `ir_n`; [`DemoError::Check`] when a fused result
/// differs from the unfused one; [`DemoError::Worker`] when Burn fails on the CPU.
pub fn measure(p: &FusionParams) -> Result<FusionResult, DemoError> {
    validate(p)?;
    ensure(p.n > 0 && p.ir_n > 0, "n", "array lengths must be positive")?;
    let mut rng = XorShift(SEED);
    let ir = measure_ir(p, &mut rng)?;
    let (loops, arrays) = measure_loops(p, &mut rng)?;
    let burn = measure_burn(p, &arrays)?;
    Ok(FusionResult {
        params: p.clone(),
        ir,
        loops,
        burn,
    })
}

/// Whether two arrays are equal bit for bit.
fn bit_equal(x: &[f32], y: &[f32]) -> bool {
    x.iter().zip(y).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Fuses `a + b*c + 1` and `(a + b)*c` and checks, over `ir_n` random elements, that the fused
/// graphs evaluate bit-identically to the unfused ones.
fn measure_ir(p: &FusionParams, rng: &mut XorShift) -> Result<IrResult, DemoError> {
    let g = Graph::a_plus_b_times_c_plus_1();
    let f = g.fuse();
    let (a, b, c) = (
        random_vec(rng, p.ir_n),
        random_vec(rng, p.ir_n),
        random_vec(rng, p.ir_n),
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
    if !bit_equal(&u2, &fv2) {
        return Err(DemoError::Check("fused (a+b)*c differs".into()));
    }
    Ok(IrResult {
        unfused_graph: g,
        fused_graph: f,
        unfused_kernels: ku,
        fused_kernels: kf,
        mismatches,
        fused_apb_c_graph: f2,
    })
}

/// The loop timing's arrays, kept for the Burn part: the inputs and the fused `a+b*c+1` output.
struct ChainArrays {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    a_bc_1: Vec<f32>,
}

/// Times both chains as unfused and fused loops over `n` random elements (buffers allocated
/// before timing) and checks that the variants agree bit for bit.
fn measure_loops(
    p: &FusionParams,
    rng: &mut XorShift,
) -> Result<(LoopsResult, ChainArrays), DemoError> {
    let n = p.n;
    let (a, b, c) = (random_vec(rng, n), random_vec(rng, n), random_vec(rng, n));
    let (mut t1, mut t2, mut out_u, mut out_f) =
        (vec![0f32; n], vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let (tu1, _) = median_time(p.repeats, || apb_c_unfused(&a, &b, &c, &mut t1, &mut out_u));
    let (tf1, _) = median_time(p.repeats, || apb_c_fused(&a, &b, &c, &mut out_f));
    let eq1 = bit_equal(&out_u, &out_f);
    let (tu2, _) = median_time(p.repeats, || {
        a_bc_1_unfused(&a, &b, &c, &mut t1, &mut t2, &mut out_u)
    });
    let (tf2, _) = median_time(p.repeats, || a_bc_1_fused(&a, &b, &c, &mut out_f));
    let eq2 = bit_equal(&out_u, &out_f);
    if !eq1 || !eq2 {
        return Err(DemoError::Check(
            "fused loop result differs from unfused".into(),
        ));
    }
    let chains = Chain::ALL
        .into_iter()
        .zip([(tu1, tf1), (tu2, tf2)])
        .map(|(chain, (unfused_s, fused_s))| LoopChain {
            chain,
            unfused_bytes_per_element: F32_BYTES * chain.unfused_accesses(),
            fused_bytes_per_element: F32_BYTES * chain.fused_accesses(),
            unfused_s,
            fused_s,
        })
        .collect();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let arrays = ChainArrays {
        a,
        b,
        c,
        a_bc_1: out_f,
    };
    Ok((LoopsResult { cores, chains }, arrays))
}

/// Runs both chains as Burn tensor ops on flex and, when a GPU is present, on CUDA, checked
/// against the fused loops' outputs.
fn measure_burn(p: &FusionParams, arrays: &ChainArrays) -> Result<BurnResult, DemoError> {
    let ChainArrays { a, b, c, a_bc_1 } = arrays;
    // a_bc_1 holds a+b*c+1 from the last timed fused loop; (a+b)*c needs its own buffer.
    let mut apb_c = vec![0f32; a.len()];
    apb_c_fused(a, b, c, &mut apb_c);
    let inputs = [a.as_slice(), b.as_slice(), c.as_slice()];
    let expect = [apb_c.as_slice(), a_bc_1.as_slice()];
    let flex =
        burn_chains::<burn::backend::Flex>(&Default::default(), inputs, expect, p.repeats, true)?;
    let cuda = memwall_runner::fusion_chains::burn_cuda_chains(inputs, expect, p.repeats);
    Ok(BurnResult {
        flex,
        cuda,
        imported_cuda: None,
    })
}

/// The study's sections: the fusion pass, the loops, the Burn chains.
pub fn render(r: &FusionResult, cited: &Cited<CiteAs>) -> Vec<Section> {
    let src = cited.src();
    vec![
        render_ir(r, &src),
        render_loops(r, &src),
        render_burn(r, &src),
    ]
}

/// The fusion pass: the post's claim beside the graphs before and after our pass.
fn render_ir(r: &FusionResult, src: &str) -> Section {
    let ir = &r.ir;
    let (g, f, f2) = (&ir.unfused_graph, &ir.fused_graph, &ir.fused_apb_c_graph);
    let (ku, kf, mismatches) = (ir.unfused_kernels, ir.fused_kernels, ir.mismatches);
    Section {
        details: None,
        title: "Fusion pass on a tiny IR".into(),
        claim: format!(
            "{src}, section Demos / Compiler-Driven Kernel Fusion: \"When an operator immediately consumes the output from the one preceding it, it could be \
             advantageous to fuse the operations rather than storing and subsequently collecting the data.\" The post declares a tiny IR (`VarA`, `VarB`, `VarC`, \
             `Const`, `Add`, `Mult`, `FusedOp`) for `a + b * c + 1`, parses the expression into a DAG, and would \"apply a function to recursively traverse the tree. \
             That could transform the original graph into the following:\" the graphs before and after are shown only as images (\"Before Fusion\", \"After Fusion\"); \
             the pass itself is in the post's linked repository, not in its text."
        ),
        ours: format!(
            "Our pass turns the {}-node graph of `a + b*c + 1` ({ku} elementwise kernels) into {} nodes with one FusedOp ({kf} kernel): `{}`. Evaluated over {} random f32 \
             elements, fused and unfused outputs are bit-identical ({mismatches} mismatches); the same holds for `(a + b)*c` (`{}`).",
            g.nodes.len(), f.nodes.len(), f.label(f.output), r.params.ir_n, f2.label(f2.output)
        ),
        notes: vec![
            "Fusion rule: an Add/Mul child is absorbed into its consumer when it is elementwise and has exactly one consumer; a node with several consumers stays \
             materialized and becomes an input of the fused ops that read it. Constants become inputs of the FusedOp (broadcast scalars), as the post's \
             `explicit FusedOp(std::vector<std::shared_ptr<Node>> in);` takes its inputs as nodes. The fused body evaluates the same operations in the same order, hence identical rounding."
                .into(),
        ],
        tables: vec![],
        figures: vec![
            g.figure("fusion_dag_before", "a + b*c + 1 before fusion"),
            f.figure("fusion_dag_after", "a + b*c + 1 after fusion"),
        ],
    }
}

/// The loops' table rows (unfused, fused per chain) and the summary phrase of each chain.
fn loop_rows(r: &FusionResult) -> (Vec<Vec<String>>, Vec<String>) {
    let n = r.params.n;
    let floor = FLOOR_BYTES_PER_ELEMENT;
    let gbs = |bytes: usize, t: f64| bytes as f64 * n as f64 / t / 1e9;
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for l in &r.loops.chains {
        let name = l.chain.label();
        let (bu, bf) = (l.unfused_bytes_per_element, l.fused_bytes_per_element);
        let (tu, tf) = (l.unfused_s, l.fused_s);
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
            "`{name}`: {:.2} ms unfused vs {:.2} ms fused ({:.2}x, {bu} vs {bf} B/element)",
            tu * 1e3,
            tf * 1e3,
            tu / tf
        ));
    }
    (rows, summary)
}

/// The loops: the post's claim beside our timings and bytes per element.
fn render_loops(r: &FusionResult, src: &str) -> Section {
    let (p, n, cores) = (&r.params, r.params.n, r.loops.cores);
    let (rows, summary) = loop_rows(r);
    let bytes = |f: fn(&LoopChain) -> usize| -> Vec<f64> {
        r.loops.chains.iter().map(|l| f(l) as f64).collect()
    };
    Section {
        details: None,
        title: "Fused versus unfused elementwise loops".into(),
        claim: format!(
            "{src}, section Background / Kernel Fusion: fusion \"combines multiple operations into a single environment or context, instead of executing them sequentially \
             and reading/writing temporary values to secondary memory after each one\"; section Demos / User-Driven Kernel Fusion, for `(5 + 3) * 10`: combining \
             the add and the multiply into a single operation removes \"the need to allocate memory and read/write to it\"."
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
            notes: Vec::new(),
        }],
        figures: vec![bar_figure(
            r,
            "fusion_bytes_per_element",
            "Bytes moved per element: unfused kernels vs one fused kernel",
            "bytes per element",
            vec![
                ("unfused", bytes(|l| l.unfused_bytes_per_element)),
                ("fused (floor)", bytes(|l| l.fused_bytes_per_element)),
            ],
        )],
    }
}

/// The Burn table's row for one chain on flex.
fn flex_row(l: &LoopChain, f: &BurnChain) -> Vec<String> {
    let ops_bytes = l.unfused_bytes_per_element as f64;
    vec![
        l.chain.label().into(),
        "Burn flex (CPU), one kernel per op".into(),
        format!("{ops_bytes:.0}"),
        format!("{:.2}", ops_bytes / FLOOR_BYTES_PER_ELEMENT as f64),
        fmt_opt_bytes(f.alloc_bytes_per_element),
        format!("{:.2}", f.time_s * 1e3),
        format!("{:.2}", f.time_s / l.fused_s),
        format!("{:.1e}", f.max_abs_diff),
    ]
}

/// The Burn table's rows for one chain on CUDA: without fusion, then with it.
fn cuda_rows(l: &LoopChain, dev: &str, fused: &BurnChain, unfused: &BurnChain) -> [Vec<String>; 2] {
    let ops_bytes = l.unfused_bytes_per_element as f64;
    [
        vec![
            l.chain.label().into(),
            format!("Burn CUDA without fusion ({dev})"),
            format!("{ops_bytes:.0}"),
            format!("{:.2}", ops_bytes / FLOOR_BYTES_PER_ELEMENT as f64),
            "–".into(),
            format!("{:.3}", unfused.time_s * 1e3),
            "–".into(),
            format!("{:.1e}", unfused.max_abs_diff),
        ],
        vec![
            l.chain.label().into(),
            format!("Burn CUDA with fusion ({dev})"),
            format!("{FLOOR_BYTES_PER_ELEMENT} (floor, if fully fused)"),
            "1.00".into(),
            "–".into(),
            format!("{:.3}", fused.time_s * 1e3),
            "–".into(),
            format!("{:.1e}", fused.max_abs_diff),
        ],
    ]
}

/// The Burn table's rows (flex, then CUDA when measured, per chain) and the summary phrases.
fn burn_rows(r: &FusionResult) -> (Vec<Vec<String>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let cuda = r.burn.cuda_shown().ok().map(|(c, _)| c);
    for (i, (l, f)) in r.loops.chains.iter().zip(&r.burn.flex).enumerate() {
        let name = l.chain.label();
        rows.push(flex_row(l, f));
        summary.push(format!(
            "`{name}` on flex {:.2} ms ({:.2}x our fused loop, {} B/element allocated)",
            f.time_s * 1e3,
            f.time_s / l.fused_s,
            fmt_opt_bytes(f.alloc_bytes_per_element)
        ));
        let Some(cuda) = cuda else { continue };
        if let (Some(fu), Some(un)) = (cuda.fused.get(i), cuda.unfused.get(i)) {
            rows.extend(cuda_rows(l, &cuda.device, fu, un));
            summary.push(format!(
                "`{name}` on CUDA {:.3} ms unfused vs {:.3} ms fused ({:.2}x)",
                un.time_s * 1e3,
                fu.time_s * 1e3,
                un.time_s / fu.time_s
            ));
        }
    }
    (rows, summary)
}

/// The Burn section's figures: CPU time per chain, and Burn on CUDA when measured.
fn burn_figures(r: &FusionResult) -> Vec<Figure> {
    let n = r.params.n;
    fn ms(seconds: impl Iterator<Item = f64>) -> Vec<f64> {
        seconds.map(|s| s * 1e3).collect()
    }
    let loops = &r.loops.chains;
    let mut figures = vec![bar_figure(
        r,
        "fusion_cpu_time",
        &format!("CPU time per chain over {n} elements"),
        "time (ms)",
        vec![
            ("unfused loops", ms(loops.iter().map(|l| l.unfused_s))),
            ("fused loop", ms(loops.iter().map(|l| l.fused_s))),
            ("Burn flex", ms(r.burn.flex.iter().map(|f| f.time_s))),
        ],
    )];
    if let Ok((cuda, run)) = r.burn.cuda_shown() {
        let n = run.map_or(n, |run| run.n);
        figures.push(bar_figure(
            r,
            "fusion_cuda_time",
            &format!("Burn on {}: time per chain over {n} elements", cuda.device),
            "time (ms)",
            vec![
                ("without fusion", ms(cuda.unfused.iter().map(|c| c.time_s))),
                ("with fusion", ms(cuda.fused.iter().map(|c| c.time_s))),
            ],
        ));
    }
    figures
}

/// The Burn chains: the post's claim beside Burn's times on flex (and CUDA when measured).
fn render_burn(r: &FusionResult, src: &str) -> Section {
    let (p, n) = (&r.params, r.params.n);
    let (rows, summary) = burn_rows(r);
    Section {
        details: None,
        title: "Elementwise chains as Burn tensor ops".into(),
        claim: format!(
            "{src}, section Background / Kernel Fusion: fusion avoids \"executing them sequentially and reading/writing temporary values to secondary memory \
             after each one\", and \"just as spawning subprocess involves overhead components, so too does a kernel, meaning fusion reduces these costs as well\". \
             (The post names no framework and gives no number; the bytes-per-element floor below, one read of each input and one write of the output, is \
             memwall's model.)"
        ),
        ours: format!(
            "The same arrays ({n} f32 each) through Burn 0.21, median of {}: {}. {}",
            p.repeats,
            summary.join("; "),
            match r.burn.cuda_shown() {
                Ok((_, None)) => "On CUDA, Burn's fusion backend may run each chain as one kernel (16 B/element); the times show how close it comes.".to_string(),
                Ok((cuda, Some(run))) => format!(
                    "On CUDA, Burn's fusion backend may run each chain as one kernel (16 B/element); the times show how close it comes. {}",
                    imported_provenance(p, cuda, run)
                ),
                Err(why) => format!(
                    "Burn's kernel fusion exists only for its CubeCL backends (CUDA here); no GPU measurement in this run: {why}."
                ),
            }
        ),
        notes: vec![
            "Bytes/element moved count each kernel's 4-byte loads and stores: unfused `(a+b)*c` is two kernels (`a+b`: 2 loads, 1 store; `t*c`: 2 loads, 1 store) = 24 B, \
             unfused `a+b*c+1` three kernels = 32 B; a fused kernel moves the 16 B floor. Allocated bytes are the counting allocator's high-water mark above the \
             bytes live before the chain, per element, output included: flex reuses a temporary's buffer in place when it is the only reference, so an \
             unfused chain can allocate no more than its output while still moving every byte."
                .into(),
            "Results agree with the fused loop to the listed maximum absolute difference (the operations and their order are the same)."
                .into(),
        ],
        tables: vec![Table {
            caption: burn_caption(r),
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
            rows,
            notes: Vec::new(),
        }],
        figures: burn_figures(r),
    }
}

/// Where imported CUDA rows come from: the device, the slim runner's run from a GPU bundle
/// (date, revision), its size, and whether its arrays are this record's.
fn imported_provenance(p: &FusionParams, cuda: &CudaChains, run: &FusionChainsRun) -> String {
    let arrays = if run.n == p.n && run.ir_n == p.ir_n {
        "the same arrays as the rows above (the study's generator)".to_string()
    } else {
        format!(
            "the study's generator at n = {}, ir_n = {} (this record's CPU rows: n = {}, ir_n = {}, so the arrays differ)",
            run.n, run.ir_n, p.n, p.ir_n
        )
    };
    format!(
        "The CUDA rows were measured on {} by the slim runner (`memwall-job fusion-chains`, revision {}, Burn {}) from a GPU bundle on {}, \
         imported as `{CUDA_CHAINS_FILE}`: {} f32 elements per array, median of {}, over {arrays}; the other rows come from this record.",
        cuda.device,
        run.runner_revision,
        run.burn_version,
        run.date(),
        run.n,
        run.repeats
    )
}

/// The Burn table's caption: the record's size and repeats, and the imported CUDA run's where
/// they differ.
fn burn_caption(r: &FusionResult) -> String {
    let p = &r.params;
    let mut caption = format!(
        "Burn tensor ops over {} f32 elements, median of {} runs",
        p.n, p.repeats
    );
    if let Ok((_, Some(run))) = r.burn.cuda_shown() {
        if (run.n, run.repeats) != (p.n, p.repeats) {
            caption.push_str(&format!(
                " (CUDA rows: {} elements, median of {}, from a GPU bundle)",
                run.n, run.repeats
            ));
        }
    }
    caption
}

/// Grouped bars over the chains of `r` (one group per chain), one series per variant.
fn bar_figure(
    r: &FusionResult,
    name: &str,
    title: &str,
    y_label: &str,
    series: Vec<(&str, Vec<f64>)>,
) -> Figure {
    let groups: Vec<String> = r
        .loops
        .chains
        .iter()
        .map(|l| l.chain.label().into())
        .collect();
    Figure::grouped_bars(
        name,
        title,
        "expression",
        y_label,
        &groups,
        series
            .into_iter()
            .map(|(label, ys)| (label.to_string(), ys))
            .collect(),
    )
}

/// An optional per-element byte count with one decimal, or a dash.
fn fmt_opt_bytes(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::demos::claim_checks::{assert_claims_have_measures, value};

    fn small() -> FusionParams {
        FusionParams {
            n: 10_000,
            repeats: 1,
            ir_n: 100,
        }
    }

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
        let s = render(
            &measure(&small()).unwrap(),
            &crate::demos::cited::from_experiment("fusion_ir"),
        );
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

    #[test]
    fn result_survives_json_and_renders_the_same() {
        let fresh = measure(&small()).unwrap();
        let sections = render(&fresh, &crate::demos::cited::from_experiment("fusion_ir"));
        // Through a JSON value, as the study record holds it: exact.
        let value = serde_json::to_value(&fresh).unwrap();
        let stored: FusionResult = serde_json::from_value(value).unwrap();
        assert_eq!(
            render(&stored, &crate::demos::cited::from_experiment("fusion_ir")),
            sections
        );
        // Through JSON text: serde_json (without its `float_roundtrip` feature) may read an f64
        // one unit in the last place off, so figure points are compared to that precision.
        let text = serde_json::to_string(&fresh).unwrap();
        let stored: FusionResult = serde_json::from_str(&text).unwrap();
        assert_eq!(stored.params, fresh.params);
        assert_eq!(stored.ir.fused_graph, fresh.ir.fused_graph);
        assert_eq!(stored.loops.chains.len(), 2);
        let mut again = render(&stored, &crate::demos::cited::from_experiment("fusion_ir"));
        assert_eq!(again.len(), sections.len());
        for (a, b) in again.iter_mut().zip(&sections) {
            for (fa, fb) in a.figures.iter_mut().zip(&b.figures) {
                for (sa, sb) in fa.series.iter_mut().zip(&fb.series) {
                    for (pa, pb) in sa.points.iter_mut().zip(&sb.points) {
                        assert!((pa.1 - pb.1).abs() <= 4.0 * f64::EPSILON * pb.1.abs());
                        *pa = *pb;
                    }
                }
            }
        }
        assert_eq!(again, sections);
    }

    #[test]
    fn cuda_rows_and_figure_render_when_measured() {
        let mut r = measure(&small()).unwrap();
        let flex = r.burn.flex.clone();
        if let Err(why) = &r.burn.cuda {
            let s = render(&r, &crate::demos::cited::from_experiment("fusion_ir"));
            assert_eq!(s[2].tables[0].rows.len(), 2);
            assert_eq!(s[2].figures.len(), 1);
            assert!(s[2].ours.contains(why.as_str()), "{}", s[2].ours);
        }
        r.burn.cuda = Ok(CudaChains {
            device: "Test GPU".into(),
            fused: flex.clone(),
            unfused: flex,
        });
        let s = render(&r, &crate::demos::cited::from_experiment("fusion_ir"));
        let rows = &s[2].tables[0].rows;
        assert_eq!(rows.len(), 6, "flex, CUDA unfused, CUDA fused per chain");
        assert_eq!(rows[1][1], "Burn CUDA without fusion (Test GPU)");
        assert_eq!(rows[2][2], "16 (floor, if fully fused)");
        assert_eq!(s[2].figures.len(), 2);
        assert_eq!(s[2].figures[1].series.len(), 2);
        assert!(s[2].ours.contains("`a+b*c+1` on CUDA"), "{}", s[2].ours);
    }

    #[test]
    fn the_runners_inputs_and_reference_are_the_studys() {
        // The slim runner's `fusion-chains` regenerates the arrays the study times (same
        // generator, after the IR check's draws) and the fused loops' outputs.
        let p = small();
        let mut rng = XorShift(SEED);
        measure_ir(&p, &mut rng).unwrap();
        let (_, arrays) = measure_loops(&p, &mut rng).unwrap();
        let inputs = memwall_runner::fusion_chains::study_inputs(p.n, p.ir_n);
        assert!(bit_equal(&inputs[0], &arrays.a) && inputs[0].len() == p.n);
        assert!(bit_equal(&inputs[1], &arrays.b) && bit_equal(&inputs[2], &arrays.c));
        let [e1, e2] = memwall_runner::fusion_chains::expected([&arrays.a, &arrays.b, &arrays.c]);
        let mut apb_c = vec![0f32; p.n];
        apb_c_fused(&arrays.a, &arrays.b, &arrays.c, &mut apb_c);
        assert!(bit_equal(&e1, &apb_c) && bit_equal(&e2, &arrays.a_bc_1));
    }

    /// A record of the study without a CUDA measurement, stored in `runs/fusion_ir/` of a
    /// temporary record store; returns the store, the record and its path.
    fn stored_without_cuda() -> (
        tempfile::TempDir,
        crate::studies::StudyRecord,
        std::path::PathBuf,
    ) {
        let mut r = measure(&small()).unwrap();
        r.burn.cuda = Err("no CUDA driver library (test)".into());
        let record = crate::studies::StudyRecord {
            study: STUDY.into(),
            profile: "cpu".into(),
            kind: crate::spec::StudyKind::FusionIr,
            params_hash: "test".into(),
            env: crate::measure::Environment {
                cpu_model: "Test CPU".into(),
                cpu_threads: 2,
                ..Default::default()
            },
            result: serde_json::to_value(&r).unwrap(),
            wall_s: 1.0,
            finished_at: "2026-11-25T13:04:06+00:00".into(),
        };
        let runs = tempfile::tempdir().unwrap();
        let path = runs.path().join(STUDY).join("cpu.result.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        (runs, record, path)
    }

    /// The study's experiment file, loaded (its `[params.cited]` quoted by the renderer).
    fn experiment() -> crate::spec::Study {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../experiments")
            .join(format!("{STUDY}.toml"));
        crate::spec::Study::load(&path, crate::spec::Profile::Cpu, None).unwrap()
    }

    /// The slim runner's run of the chains on a GPU, as `memwall-job fusion-chains` writes it.
    fn gpu_run(n: usize, ir_n: usize) -> FusionChainsRun {
        let chain = |expr, time_s| BurnChain {
            expr,
            time_s,
            alloc_bytes_per_element: None,
            max_abs_diff: 0.0,
        };
        FusionChainsRun {
            format: memwall_runner::fusion_chains::FUSION_CHAINS_FORMAT.into(),
            backend: ChainsBackend::Cuda,
            n,
            ir_n,
            repeats: 5,
            finished_at: "2026-12-01T09:30:00+00:00".into(),
            wall_s: 20.0,
            runner_revision: "0123456789ab".into(),
            burn_version: "0.21.0".into(),
            chains: Ok(CudaChains {
                device: "NVIDIA H100 80GB HBM3".into(),
                fused: Chain::ALL.map(|c| chain(c, 2e-4)).to_vec(),
                unfused: vec![
                    chain(Chain::APlusBTimesC, 5e-4),
                    chain(Chain::APlusBTimesCPlus1, 7e-4),
                ],
            }),
        }
    }

    #[test]
    fn an_imported_cuda_run_is_rendered_and_measured() {
        let (runs, record, path) = stored_without_cuda();
        let study_dir = path.parent().unwrap();
        let experiment = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../experiments")
            .join(format!("{STUDY}.toml"));
        let study = crate::spec::Study::load(&experiment, crate::spec::Profile::Cpu, None).unwrap();
        let speedup = |rows: &[crate::report::model::GlanceRow]| {
            let i = study
                .claims
                .iter()
                .position(|c| c.measure == "cuda_fusion_speedup")
                .unwrap();
            rows[i].ours.clone()
        };

        // Without the file: the stored result as it is, no CUDA rows, no speed-up.
        assert_eq!(read_cuda_chains(runs.path()).unwrap(), None);
        assert_eq!(with_imported_cuda(&record.result, study_dir).unwrap(), None);
        let before = crate::studies::render_with(&experiment(), &record, &path).unwrap();
        assert_eq!(before[2].tables[0].rows.len(), 2);
        let glance = crate::studies::glance(&study, &record, &path).unwrap();
        assert_eq!(speedup(&glance), "–");
        assert!(!glance[0].device.contains("GPU bundle"));

        // With it: the CUDA rows, the figure and the speed-up, saying where they come from.
        let p = small();
        let run = gpu_run(p.n, p.ir_n);
        std::fs::write(
            study_dir.join(CUDA_CHAINS_FILE),
            serde_json::to_vec_pretty(&run).unwrap(),
        )
        .unwrap();
        assert_eq!(read_cuda_chains(runs.path()).unwrap(), Some(run.clone()));
        let s = crate::studies::render_with(&experiment(), &record, &path).unwrap();
        let rows = &s[2].tables[0].rows;
        assert_eq!(rows.len(), 6, "flex, CUDA unfused, CUDA fused per chain");
        assert_eq!(
            rows[1][1],
            "Burn CUDA without fusion (NVIDIA H100 80GB HBM3)"
        );
        assert_eq!(rows[1][5], "0.500");
        assert_eq!(s[2].figures.len(), 2);
        let ours = &s[2].ours;
        for part in [
            "measured on NVIDIA H100 80GB HBM3 by the slim runner",
            "revision 0123456789ab",
            "from a GPU bundle on 2026-12-01",
            "the same arrays as the rows above",
        ] {
            assert!(ours.contains(part), "`{part}` not in: {ours}");
        }
        let glance = crate::studies::glance(&study, &record, &path).unwrap();
        assert_eq!(speedup(&glance), "2.50x", "min(5/2, 7/2)");
        assert!(
            glance[0].device.contains(
                "CUDA rows: NVIDIA H100 80GB HBM3 (slim runner from a GPU bundle, 2026-12-01)"
            ),
            "{}",
            glance[0].device
        );
        let merged: FusionResult = serde_json::from_value(
            with_imported_cuda(&record.result, study_dir)
                .unwrap()
                .unwrap()
                .0,
        )
        .unwrap();
        let m = measures(&merged);
        assert!(value(&m, "cuda_fusion_speedup").is_finite());
        // The stored record itself is unchanged (the merge happens when it is rendered).
        let stored: FusionResult = serde_json::from_value(record.result.clone()).unwrap();
        assert!(stored.burn.imported_cuda.is_none());
        assert!(value(&measures(&stored), "cuda_fusion_speedup").is_nan());

        // A run at another size says so.
        let other = gpu_run(1 << 24, 100_000);
        std::fs::write(
            study_dir.join(CUDA_CHAINS_FILE),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        let s = crate::studies::render_with(&experiment(), &record, &path).unwrap();
        assert!(s[2].ours.contains("so the arrays differ"), "{}", s[2].ours);
        assert!(
            s[2].tables[0]
                .caption
                .contains("CUDA rows: 16777216 elements"),
            "{}",
            s[2].tables[0].caption
        );

        // A run that measured nothing, or timed flex: no CUDA rows, the reasons.
        let mut none = gpu_run(p.n, p.ir_n);
        none.chains = Err("no CUDA driver library (bundle)".into());
        std::fs::write(
            study_dir.join(CUDA_CHAINS_FILE),
            serde_json::to_vec(&none).unwrap(),
        )
        .unwrap();
        let s = crate::studies::render_with(&experiment(), &record, &path).unwrap();
        assert_eq!(s[2].tables[0].rows.len(), 2);
        assert!(s[2]
            .ours
            .contains("measured none either: no CUDA driver library (bundle)"));
        let mut flex = gpu_run(p.n, p.ir_n);
        flex.backend = ChainsBackend::Flex;
        flex.chains.as_mut().unwrap().fused.clear();
        std::fs::write(
            study_dir.join(CUDA_CHAINS_FILE),
            serde_json::to_vec(&flex).unwrap(),
        )
        .unwrap();
        let s = crate::studies::render_with(&experiment(), &record, &path).unwrap();
        assert_eq!(s[2].tables[0].rows.len(), 2);
        assert!(
            s[2].ours.contains("is a flex run of the slim runner"),
            "{}",
            s[2].ours
        );
        let glance = crate::studies::glance(&study, &record, &path).unwrap();
        assert_eq!(speedup(&glance), "–");
    }

    #[test]
    fn a_malformed_cuda_run_is_an_error_naming_file_and_field() {
        let (runs, record, path) = stored_without_cuda();
        let p = small();
        let text = serde_json::to_string_pretty(&gpu_run(p.n, p.ir_n)).unwrap();
        let file = path.parent().unwrap().join(CUDA_CHAINS_FILE);
        let cases = [
            (
                text.replace("\"repeats\": 5", "\"repeats\": \"five\""),
                "field `repeats`",
            ),
            (
                text.replace("\"time_s\": 0.0005", "\"time_s\": -1.0"),
                "field `chains.Ok.unfused[0].time_s`",
            ),
            (
                text.replace(
                    "\"format\": \"memwall-fusion-chains/1\"",
                    "\"format\": \"other\"",
                ),
                "field `format`",
            ),
            ("{}".to_string(), "field `format`"),
        ];
        for (bad, field) in cases {
            assert_ne!(bad, text, "{field}: the replacement must apply");
            std::fs::write(&file, &bad).unwrap();
            for e in [
                read_cuda_chains(runs.path()).unwrap_err(),
                crate::studies::render_with(&experiment(), &record, &path).unwrap_err(),
            ] {
                let e = e.to_string();
                assert!(e.contains(&file.display().to_string()), "{e}");
                assert!(e.contains(field), "`{field}` not in: {e}");
            }
        }
    }

    #[test]
    fn measures_answer_the_claims() {
        let m = assert_claims_have_measures::<FusionIr>("fusion_ir", measure(&small()).unwrap());
        assert_eq!(value(&m, "ir_fused_kernels"), 1.0);
        assert_eq!(value(&m, "ir_unfused_kernels"), 3.0);
        assert_eq!(value(&m, "ir_mismatches"), 0.0);
        assert_eq!(value(&m, "apb_c_bytes_ratio"), 1.5);
        assert_eq!(value(&m, "a_bc_1_bytes_ratio"), 2.0);
        assert!(value(&m, "apb_c_loop_speedup") > 0.0);
        assert!(value(&m, "a_bc_1_loop_speedup") > 0.0);
    }
}
