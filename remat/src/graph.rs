//! Graph IR for rematerialization and static memory planning: a DAG of forward and backward ops
//! in topological order (Checkmate, Section 4.1: nodes `v_1..v_n`, cost `C_i`, output memory
//! `M_i`). Every graph of memwall is this type: the Checkmate benchmark graphs read from files,
//! the transformer chain ([`crate::segment_plan`]), and the training graphs of ResNet, LSTM and MLPs
//! built op by op ([`crate::nets`]) for the static planner ([`crate::memory_plan`]).
//!
//! May import: serde, serde_json (the node-link readers); nothing else of the workspace.

use super::RematError;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// What an op computes, as far as the passes over the IR need it: the training-graph builder
/// ([`crate::nets::training_graph`]) derives from it which forward tensors an op's backward
/// reads, and the static planner ([`crate::memory_plan`]) pins graph inputs for the whole step.
/// Graphs read from files and chains built from layer costs carry no op semantics
/// ([`OpKind::Opaque`], the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpKind {
    /// No op semantics (the Checkmate and random layered graphs, layer chains).
    #[default]
    Opaque,
    /// Graph input (data, initial recurrent states): resident for the whole step, no gradient.
    Input,
    /// Convolution (its backward reads its input, for the weight gradient).
    Conv,
    /// Fully connected layer (its backward reads its input).
    Fc,
    /// Batch normalization (its backward reads its input).
    BatchNorm,
    /// ReLU (elementwise; its backward reads its output).
    Relu,
    /// Sigmoid (elementwise; its backward reads its output).
    Sigmoid,
    /// Tanh (elementwise; its backward reads its output).
    Tanh,
    /// Elementwise sum (its backward reads nothing).
    Add,
    /// Elementwise product (its backward reads both inputs).
    Mul,
    /// Pooling (its backward reads its input and its output).
    Pool,
    /// Softmax / loss head (its backward reads its input).
    Loss,
    /// Gradient `dL/d out_i` of forward node `i` (same size as that output).
    Grad(usize),
}

impl OpKind {
    /// Elementwise ops, whose output may overwrite an input of the same size (in-place; UIUC
    /// CS 498 lecture, slide "Inplace / Normal Sharing").
    pub fn elementwise(self) -> bool {
        matches!(
            self,
            OpKind::Relu | OpKind::Sigmoid | OpKind::Tanh | OpKind::Add | OpKind::Mul
        )
    }
}

/// One op of the training graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Op name from the source graph.
    pub name: String,
    /// Compute cost `C_i` in the graph's cost units (profiled time units for the Checkmate
    /// graphs, `duration` for the random layered graphs, 1 for unit chains).
    pub cost: f64,
    /// Size `M_i` of the op's output tensor in bytes.
    pub mem: u64,
    /// Whether the op belongs to the backward pass (the loss counts as backward, as in the
    /// Checkmate graph files).
    pub backward: bool,
    /// What the op computes ([`OpKind::Opaque`] when unknown).
    pub op: OpKind,
    /// In-place candidate: the dependency whose buffer this op's output may overwrite when that
    /// tensor dies at this op and has the same size (an elementwise op's first input in op
    /// order, since `deps` are sorted). `None`: the output always needs its own buffer.
    pub inplace: Option<usize>,
}

impl Node {
    /// A node without op semantics ([`OpKind::Opaque`], no in-place candidate): `cost` in the
    /// graph's cost units, `mem` the output size in bytes.
    pub fn new(name: impl Into<String>, cost: f64, mem: u64, backward: bool) -> Node {
        Node {
            name: name.into(),
            cost,
            mem,
            backward,
            op: OpKind::Opaque,
            inplace: None,
        }
    }
}

/// A computation graph with nodes in topological order: every dependency `i` of node `k`
/// satisfies `i < k` (the paper's fixed topological order, Section 4.1).
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// Graph name (file stem or constructor name).
    pub name: String,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// `deps[k]`: the nodes whose outputs node `k` reads (sorted, all `< k`).
    pub deps: Vec<Vec<usize>>,
    /// `users[i]`: the nodes that read the output of node `i` (sorted, all `> i`).
    pub users: Vec<Vec<usize>>,
    /// Memory that is resident throughout, in bytes (parameters, gradients, optimizer state;
    /// `M_static` of eq. 2). 0 for the Checkmate graphs, whose costs are activations only.
    pub fixed_mem: u64,
}

impl Graph {
    /// Builds a graph from nodes (already topologically ordered) and edges `(source, target)`.
    /// Fails if an edge points backwards or out of range.
    pub fn new(
        name: impl Into<String>,
        nodes: Vec<Node>,
        edges: &[(usize, usize)],
        fixed_mem: u64,
    ) -> Result<Graph, RematError> {
        let n = nodes.len();
        if n == 0 {
            return Err(RematError::InvalidGraph("graph has no nodes".into()));
        }
        let mut deps = vec![Vec::new(); n];
        let mut users = vec![Vec::new(); n];
        for &(u, v) in edges {
            if u >= n || v >= n {
                return Err(RematError::InvalidGraph(format!(
                    "edge {u}->{v} out of range (n = {n})"
                )));
            }
            if u >= v {
                return Err(RematError::InvalidGraph(format!(
                    "edge {u}->{v} is not in topological order"
                )));
            }
            deps[v].push(u);
            users[u].push(v);
        }
        for l in deps.iter_mut().chain(users.iter_mut()) {
            l.sort_unstable();
            l.dedup();
        }
        for (k, nd) in nodes.iter().enumerate() {
            if nd
                .inplace
                .is_some_and(|d| deps[k].binary_search(&d).is_err())
            {
                return Err(RematError::InvalidGraph(format!(
                    "node {} may run in place of a tensor it does not read",
                    nd.name
                )));
            }
            if let OpKind::Grad(i) = nd.op {
                if i >= k {
                    return Err(RematError::InvalidGraph(format!(
                        "gradient node {} comes before its forward node {i}",
                        nd.name
                    )));
                }
            }
            if !(nd.cost.is_finite() && nd.cost >= 0.0) {
                return Err(RematError::InvalidGraph(format!(
                    "node {} has invalid cost {}",
                    nd.name, nd.cost
                )));
            }
        }
        Ok(Graph {
            name: name.into(),
            nodes,
            deps,
            users,
            fixed_mem,
        })
    }

    /// Number of nodes `n` (also the number of stages of a schedule).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false for a constructed graph (graphs have at least one node).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Cost of one plain forward + backward pass, `sum_i C_i` (cost units).
    pub fn total_cost(&self) -> f64 {
        self.nodes.iter().map(|n| n.cost).sum()
    }

    /// Cost of one plain forward pass, the sum of `C_i` over forward nodes (cost units).
    pub fn forward_cost(&self) -> f64 {
        self.nodes
            .iter()
            .filter(|n| !n.backward)
            .map(|n| n.cost)
            .sum()
    }

    /// Indices of the forward nodes in topological order (the "linearized forward").
    pub fn forward_nodes(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| !self.nodes[i].backward)
            .collect()
    }

    /// Forward nodes that compute something, in topological order: [`Graph::forward_nodes`]
    /// without graph inputs ([`OpKind::Input`]), which are resident throughout and never
    /// recomputed. Equal to `forward_nodes` for graphs without op semantics.
    pub fn forward_ops(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| !self.nodes[i].backward && self.nodes[i].op != OpKind::Input)
            .collect()
    }

    /// Index of the first backward node (the loss in the Checkmate graphs); `n` if the graph
    /// has no backward nodes.
    pub fn first_backward(&self) -> usize {
        (0..self.len())
            .find(|&i| self.nodes[i].backward)
            .unwrap_or(self.len())
    }

    /// Lower bound on the peak memory of any schedule, in bytes: computing node `k` needs its
    /// output and all its inputs resident at once (`U[t][k]` of eq. 2 with `R[t][k] = 1`), plus
    /// the fixed memory. Budgets below this are infeasible.
    pub fn working_set_bound(&self) -> u64 {
        let ops = (0..self.len())
            .map(|k| {
                self.nodes[k].mem + self.deps[k].iter().map(|&d| self.nodes[d].mem).sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        self.fixed_mem + ops
    }

    /// Number `a` of leading stages in which checkpoint-all fits `budget` bytes: for every
    /// `t < a`, computing node `t` with every earlier output still read at or after stage `t`
    /// resident, `fixed + sum_{i < t, last_user(i) >= t} M_i + M_t <= budget` (Checkmate's
    /// `U[t][t]`, eq. 2, for the schedule that computes each node once and frees each output
    /// after its last user). At most `n - 1`, so that one stage is always left.
    ///
    /// In these stages memory is not what limits a schedule: the rematerialization models
    /// ([`crate::boundary`], [`crate::staged`]) replace them by one stage that computes each
    /// node once and may hand any of their outputs to stage `a` (a relaxation of Checkmate's
    /// problem: every Checkmate schedule costs at least as much in those stages, and stages
    /// `>= a` keep Checkmate's constraints), and check by simulation that a schedule's
    /// outputs kept into stage `a` fit those stages.
    pub fn fitting_prefix(&self, budget: u64) -> usize {
        let n = self.len();
        let last = self.last_users();
        // `resident` at stage `t`: sum of M_i over i < t with last_user(i) >= t; an output
        // leaves it at stage last_user + 1.
        let mut resident = 0u64;
        let mut ending = vec![0u64; n + 1];
        for t in 0..n.saturating_sub(1) {
            resident -= ending[t];
            if self.fixed_mem + resident + self.nodes[t].mem > budget {
                return t;
            }
            if last[t] > t {
                resident += self.nodes[t].mem;
                ending[last[t] + 1] += self.nodes[t].mem;
            }
        }
        n.saturating_sub(1)
    }

    /// `last_users()[i]`: the last node that reads node `i`'s output (`i` itself when none
    /// does), the stage after which a kept output can be freed. Length `n`.
    pub fn last_users(&self) -> Vec<usize> {
        (0..self.len())
            .map(|i| self.users[i].last().copied().unwrap_or(i))
            .collect()
    }

    /// Minimal compute set of a stage that ends at node `end`, given the outputs `resident` at
    /// its start (length `n`): the nodes `seeds` and, in reverse topological order from `end`,
    /// every input of a computed node that is not resident (Checkmate's minimal `R` for a
    /// given `S`, the second phase of two-phase rounding, Jain et al. 2020, Section 5.1).
    /// Returns `r` of length `n`, `r[k]` when node `k` is computed; a seed after `end` is
    /// computed but its inputs are not added.
    pub fn compute_closure(
        &self,
        end: usize,
        resident: &[bool],
        seeds: impl IntoIterator<Item = usize>,
    ) -> Vec<bool> {
        let mut r = vec![false; self.len()];
        for k in seeds {
            r[k] = true;
        }
        for k in (0..=end).rev() {
            if r[k] {
                for &d in &self.deps[k] {
                    if !resident[d] {
                        r[d] = true;
                    }
                }
            }
        }
        r
    }

    /// Same graph with every output size multiplied by `factor` (rounded up, bytes): activation
    /// memory scales linearly with the batch size. Costs are unchanged.
    pub fn scale_memory(&self, factor: f64) -> Graph {
        let mut g = self.clone();
        for n in &mut g.nodes {
            n.mem = (n.mem as f64 * factor).ceil() as u64;
        }
        g
    }

    /// Training graph of a chain of layers: forward `f_0..f_{L-1}` (cost, output bytes from
    /// `layers`), a loss node, and backward `g_{L-1}..g_0` with cost `backward_factor * cost_i`
    /// and output bytes `bytes_i`. Edges follow Checkmate's linear graph: the chain
    /// `v_j -> v_{j+1}` through all `2L+1` nodes plus `f_i -> g_i` (the gradient op of layer
    /// `i` reads that layer's output). Node indices: `f_i = i`, loss `= L`, `g_i = 2L - i`.
    /// Used by memwall for its chain of transformer blocks.
    pub fn from_layers(
        name: impl Into<String>,
        layers: &[(f64, u64)],
        backward_factor: f64,
        loss: (f64, u64),
        fixed_mem: u64,
    ) -> Result<Graph, RematError> {
        let l = layers.len();
        if l == 0 {
            return Err(RematError::InvalidGraph(
                "chain needs at least one layer".into(),
            ));
        }
        let mut nodes = Vec::with_capacity(2 * l + 1);
        for (i, &(c, m)) in layers.iter().enumerate() {
            nodes.push(Node::new(format!("f{i}"), c, m, false));
        }
        nodes.push(Node::new("loss", loss.0, loss.1, true));
        for i in (0..l).rev() {
            let (c, m) = layers[i];
            nodes.push(Node::new(format!("g{i}"), backward_factor * c, m, true));
        }
        let mut edges: Vec<(usize, usize)> = (0..2 * l).map(|j| (j, j + 1)).collect();
        for i in 0..l {
            edges.push((i, 2 * l - i));
        }
        Graph::new(name, nodes, &edges, fixed_mem)
    }

    /// Checkmate's unit-cost linear graph: `n` forward nodes, the loss and `n` backward nodes
    /// (`2n+1` stages), every cost 1 and every output 1 byte.
    pub fn linear_chain(n: usize) -> Result<Graph, RematError> {
        Graph::from_layers(format!("linear{n}"), &vec![(1.0, 1); n], 1.0, (1.0, 1), 0)
    }

    /// Reads a networkx node-link JSON graph in either schema (see the README of
    /// `shared/data/remat-graphs`): the Checkmate schema (nodes `id`, `name`, `backward`,
    /// `cost_cpu`, `cost_ram`; links `source`/`target`) or the random layered schema (nodes
    /// `name`, `duration`, `out_cost`, `param_cost`; links `{"0": u, "1": v}`; `graph.order`).
    /// For the latter the fixed memory is the sum of `param_cost` and all nodes are forward.
    pub fn read_node_link(path: &Path) -> Result<Graph, RematError> {
        let text = std::fs::read_to_string(path).map_err(|source| RematError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let raw: RawGraph = serde_json::from_str(&text).map_err(|source| RematError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().trim_end_matches("_nx").to_string())
            .unwrap_or_default();
        let rd = NodeLinkReader { path };
        let first = raw.nodes.first().ok_or_else(|| rd.schema("no nodes"))?;
        let (nodes, edges, fixed) = if first.get("cost_cpu").is_some() {
            rd.checkmate(&raw)?
        } else {
            rd.random_layered(&raw)?
        };
        Graph::new(name, nodes, &edges, fixed).map_err(|e| rd.schema(e.to_string()))
    }
}

/// Nodes, edges `(source, target)` by node index, and fixed memory in bytes, as read from a
/// node-link file.
type NodeLinkParts = (Vec<Node>, Vec<(usize, usize)>, u64);

/// Field readers for one node-link file; every error names the file.
struct NodeLinkReader<'a> {
    path: &'a Path,
}

impl NodeLinkReader<'_> {
    fn schema(&self, msg: impl Into<String>) -> RematError {
        RematError::Schema {
            path: self.path.to_path_buf(),
            msg: msg.into(),
        }
    }

    fn num(&self, v: &serde_json::Value, key: &str, what: &str) -> Result<f64, RematError> {
        v.get(key)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| self.schema(format!("{what}: missing or non-numeric `{key}`")))
    }

    fn int(&self, v: &serde_json::Value, key: &str, what: &str) -> Result<i64, RematError> {
        v.get(key)
            .and_then(|x| x.as_i64())
            .ok_or_else(|| self.schema(format!("{what}: missing or non-integer `{key}`")))
    }

    /// The Checkmate schema: nodes `id`, `name`, `backward`, `cost_cpu`, `cost_ram` (bytes);
    /// links `source`/`target`; no fixed memory.
    fn checkmate(&self, raw: &RawGraph) -> Result<NodeLinkParts, RematError> {
        let n = raw.nodes.len();
        let mut nodes: Vec<Option<Node>> = vec![None; n];
        for (pos, v) in raw.nodes.iter().enumerate() {
            let what = format!("node #{pos}");
            let id = self.int(v, "id", &what)?;
            if id < 0 || id as usize >= n {
                return Err(self.schema(format!("{what}: id {id} out of range 0..{n}")));
            }
            if nodes[id as usize]
                .replace(self.checkmate_node(v, &what)?)
                .is_some()
            {
                return Err(self.schema(format!("duplicate node id {id}")));
            }
        }
        let nodes: Vec<Node> = nodes
            .into_iter()
            .map(|n| n.expect("all ids seen"))
            .collect();
        let mut edges = Vec::with_capacity(raw.links.len());
        for (pos, e) in raw.links.iter().enumerate() {
            let what = format!("link #{pos}");
            edges.push((
                self.int(e, "source", &what)? as usize,
                self.int(e, "target", &what)? as usize,
            ));
        }
        Ok((nodes, edges, 0))
    }

    fn checkmate_node(&self, v: &serde_json::Value, what: &str) -> Result<Node, RematError> {
        let mem = self.num(v, "cost_ram", what)?;
        let cost = self.num(v, "cost_cpu", what)?;
        if mem < 0.0 {
            return Err(self.schema(format!("{what}: negative cost_ram")));
        }
        let backward = v
            .get("backward")
            .and_then(|x| x.as_bool())
            .ok_or_else(|| self.schema(format!("{what}: missing boolean `backward`")))?;
        let name = v.get("name").and_then(|x| x.as_str()).unwrap_or("");
        Ok(Node::new(name, cost, mem as u64, backward))
    }

    /// The random layered schema: nodes `name`, `duration`, `out_cost`, `param_cost`; links
    /// `{"0": u, "1": v}`; node order `graph.order`. Fixed memory is the sum of `param_cost`
    /// (bytes); all nodes are forward.
    fn random_layered(&self, raw: &RawGraph) -> Result<NodeLinkParts, RematError> {
        let order = self.order(raw)?;
        let mut by_name: HashMap<i64, &serde_json::Value> = HashMap::new();
        for (pos, v) in raw.nodes.iter().enumerate() {
            by_name.insert(self.int(v, "name", &format!("node #{pos}"))?, v);
        }
        if order.len() != by_name.len() {
            return Err(self.schema(format!(
                "graph.order has {} entries but there are {} nodes",
                order.len(),
                by_name.len()
            )));
        }
        let mut nodes = Vec::with_capacity(order.len());
        let mut fixed = 0u64;
        for name in &order {
            let v = by_name
                .get(name)
                .ok_or_else(|| self.schema(format!("graph.order names unknown node {name}")))?;
            let what = format!("node {name}");
            fixed += self.num(v, "param_cost", &what)?.max(0.0) as u64;
            let cost = self.num(v, "duration", &what)?;
            let mem = self.num(v, "out_cost", &what)?.max(0.0) as u64;
            nodes.push(Node::new(name.to_string(), cost, mem, false));
        }
        let edges = self.layered_edges(raw, &order)?;
        Ok((nodes, edges, fixed))
    }

    /// `graph.order`: the node names in topological order.
    fn order(&self, raw: &RawGraph) -> Result<Vec<i64>, RematError> {
        raw.graph
            .get("order")
            .and_then(|o| o.as_array())
            .ok_or_else(|| self.schema("random layered graph without `graph.order`"))?
            .iter()
            .map(|x| {
                x.as_i64()
                    .ok_or_else(|| self.schema("non-integer in graph.order"))
            })
            .collect()
    }

    /// Links `{"0": u, "1": v}` of the random layered schema as node indices in `order`.
    fn layered_edges(
        &self,
        raw: &RawGraph,
        order: &[i64],
    ) -> Result<Vec<(usize, usize)>, RematError> {
        let index: HashMap<i64, usize> = order
            .iter()
            .enumerate()
            .map(|(i, &name)| (name, i))
            .collect();
        let mut edges = Vec::with_capacity(raw.links.len());
        for (pos, e) in raw.links.iter().enumerate() {
            let what = format!("link #{pos}");
            let (u, v) = (self.int(e, "0", &what)?, self.int(e, "1", &what)?);
            let at = |x: i64| -> Result<usize, RematError> {
                index
                    .get(&x)
                    .copied()
                    .ok_or_else(|| self.schema(format!("{what}: unknown node {x}")))
            };
            edges.push((at(u)?, at(v)?));
        }
        Ok(edges)
    }
}

#[derive(Deserialize)]
struct RawGraph {
    #[serde(default)]
    graph: serde_json::Value,
    nodes: Vec<serde_json::Value>,
    links: Vec<serde_json::Value>,
}

/// Directory of the shared benchmark data for tests: `$MEMWALL_SHARED_DATA`, else
/// `CARGO_MANIFEST_DIR/../../shared/data`.
#[cfg(test)]
pub(crate) fn test_data_dir() -> std::path::PathBuf {
    match std::env::var_os("MEMWALL_SHARED_DATA") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Last users and the minimal compute set on the 3-node linear chain (7 nodes: forward
    /// nodes 0–2, the loss, gradient nodes 4–6; node 6 reads node 0 and node 5): with all but
    /// node 0 resident, node 6's stage recomputes node 0 only; with nothing resident, every
    /// ancestor; a seed after the stage's end adds no inputs.
    #[test]
    fn last_users_and_compute_closure() {
        let g = Graph::linear_chain(3).unwrap();
        let n = g.len();
        let last = g.last_users();
        assert_eq!(last[0], 6);
        assert_eq!(last[n - 1], n - 1);
        for i in 0..n {
            assert!(g.users[i].iter().all(|&j| j <= last[i]));
        }
        // Everything but f_0 resident: node 6 and f_0.
        let mut resident = vec![true; n];
        resident[0] = false;
        resident[6] = false;
        let r = g.compute_closure(6, &resident, [6]);
        assert_eq!(r.iter().filter(|&&x| x).count(), 2);
        assert!(r[0] && r[6]);
        // Nothing resident: every node up to 6 is an ancestor of node 6 here.
        let r = g.compute_closure(6, &vec![false; n], [6]);
        let ancestors: Vec<bool> = (0..n).map(|i| i <= 6).collect();
        assert_eq!(r, ancestors);
        // A seed after `end` is computed, its inputs are not added.
        let r = g.compute_closure(2, &vec![false; n], [2, 6]);
        assert_eq!(r, vec![true, true, true, false, false, false, true]);
    }

    #[test]
    fn linear_chain_shape() {
        let g = Graph::linear_chain(3).unwrap();
        assert_eq!(g.len(), 7);
        assert_eq!(g.total_cost(), 7.0);
        assert_eq!(g.deps[6], vec![0, 5]); // g_0 reads f_0 and the gradient chain
        assert_eq!(g.first_backward(), 3);
        assert_eq!(g.forward_nodes(), vec![0, 1, 2]);
    }

    #[test]
    fn reads_all_real_files() {
        let dir = test_data_dir().join("remat-graphs");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).expect("remat-graphs dir") {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "json") {
                let g = Graph::read_node_link(&p).unwrap();
                assert!(g.len() > 10, "{}", p.display());
                count += 1;
            }
        }
        assert!(count >= 12);
        let g = Graph::read_node_link(&dir.join("VGG16_256_224_224_3_train_nx.json")).unwrap();
        assert_eq!(g.len(), 45);
        assert_eq!(g.first_backward(), 22);
        assert_eq!(g.nodes[22].name, "Loss");
        assert_eq!(g.nodes[0].mem, 3288334336);
        let r = Graph::read_node_link(
            &dir.join("random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json"),
        )
        .unwrap();
        assert_eq!(r.len(), 100);
        assert_eq!(r.nodes[0].name, "0");
        assert_eq!(r.nodes[99].name, "1");
    }

    #[test]
    fn fitting_prefix_ends_where_checkpoint_all_first_exceeds_the_budget() {
        use crate::baselines::checkpoint_all;
        use crate::layered::test_graph;
        use crate::sim::stage_memory;
        let mut interior = 0;
        for seed in [1, 2, 3] {
            let g = test_graph(40, seed);
            // Checkmate's accounting of checkpoint-all, stage by stage.
            let stage_peak: Vec<u64> = stage_memory(&g, &checkpoint_all(&g))
                .iter()
                .map(|row| *row.iter().max().unwrap() as u64)
                .collect();
            let peak = *stage_peak.iter().max().unwrap();
            for f in [1.0, 0.9, 0.7, 0.5, 0.1] {
                let budget = (peak as f64 * f) as u64;
                let a = g.fitting_prefix(budget);
                assert!(a < g.len());
                assert!(
                    stage_peak[..a].iter().all(|&p| p <= budget),
                    "seed {seed} f {f}"
                );
                if a + 1 < g.len() {
                    assert!(
                        stage_peak[a] > budget,
                        "seed {seed} f {f}: prefix {a} too short"
                    );
                    interior += usize::from(a >= 2);
                }
            }
        }
        assert!(
            interior >= 3,
            "only {interior} budgets with a prefix inside the graph"
        );
    }

    #[test]
    fn missing_file_names_it() {
        let err = Graph::read_node_link(Path::new("/nonexistent/dir/foo_graph.json")).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/dir/foo_graph.json"),
            "{err}"
        );
    }

    #[test]
    fn rejects_backward_edge() {
        let nodes = vec![Node::new("a", 1.0, 1, false), Node::new("b", 1.0, 1, false)];
        assert!(Graph::new("x", nodes, &[(1, 0)], 0).is_err());
    }
}
