//! Networks of the static-planning study in the one graph IR ([`Graph`]), and the training
//! graph of a forward graph.
//!
//! A forward graph is built op by op with [`NetBuilder`] (each node an op with its
//! [`OpKind`] and output size in bytes; elementwise ops name their first input as in-place
//! candidate). [`training_graph`] appends one gradient node per forward op whose output is read
//! (`dL/d out_i`, same size) with dependencies encoding what each op's backward reads
//! ([`backward_reads`]). The networks: Chen et al. 2016's pre-activation ResNet ([`resnet`])
//! and unrolled LSTM ([`lstm`]), the UIUC CS 498 lecture's two-layer MLP ([`two_layer_mlp`])
//! and an N-layer MLP chain ([`mlp_chain`]).
//!
//! May import: the graph IR and [`RematError`]; nothing else of the workspace.

use super::graph::{Graph, Node, OpKind};
use super::RematError;

/// Cost of a forward op in [`Node::cost`] units: every op counts 1 (graph inputs 0).
const FORWARD_COST: f64 = 1.0;
/// Cost of a gradient op: a backward op costs about twice its forward op.
const GRADIENT_COST: f64 = 2.0;

/// Builds a forward graph op by op in topological order.
#[derive(Debug, Clone, Default)]
pub struct NetBuilder {
    nodes: Vec<Node>,
    edges: Vec<(usize, usize)>,
}

impl NetBuilder {
    /// An empty forward graph.
    pub fn new() -> NetBuilder {
        NetBuilder::default()
    }

    /// Appends a forward op of kind `kind` reading `inputs` (ids of earlier ops, in the op's
    /// argument order) whose output is `bytes` bytes, and returns its id. An elementwise op
    /// ([`OpKind::elementwise`]) may run in place of its first input.
    ///
    /// # Panics
    /// If an input id is not an earlier op (the graph must be built in topological order).
    pub fn add(
        &mut self,
        name: impl Into<String>,
        kind: OpKind,
        inputs: &[usize],
        bytes: u64,
    ) -> usize {
        let id = self.nodes.len();
        assert!(
            inputs.iter().all(|&i| i < id),
            "op {id} reads a later op: build the graph in topological order"
        );
        let cost = if kind == OpKind::Input {
            0.0
        } else {
            FORWARD_COST
        };
        let mut node = Node::new(name, cost, bytes, false);
        node.op = kind;
        node.inplace = inputs.first().copied().filter(|_| kind.elementwise());
        self.nodes.push(node);
        self.edges.extend(inputs.iter().map(|&i| (i, id)));
        id
    }

    /// The forward graph (no fixed memory: weights are not counted).
    ///
    /// # Panics
    /// If no op was added.
    pub fn finish(self, name: impl Into<String>) -> Graph {
        Graph::new(name, self.nodes, &self.edges, 0).expect("ops are added in topological order")
    }
}

/// Forward tensors (node ids) that the backward of forward op `j` reads (lecture slide
/// "Memory Optimization on a Two Layer MLP"; Chen et al. 2016, Sec. 3): conv, FC, batch norm
/// and the loss read their input; ReLU, sigmoid and tanh their output; an add nothing; a product
/// both inputs; pooling its input and its output. `None` for ops without known semantics.
pub fn backward_reads(g: &Graph, j: usize) -> Option<Vec<usize>> {
    let first = || g.deps[j][0];
    Some(match g.nodes[j].op {
        OpKind::Input | OpKind::Add => vec![],
        OpKind::Conv | OpKind::Fc | OpKind::BatchNorm | OpKind::Loss => vec![first()],
        OpKind::Relu | OpKind::Sigmoid | OpKind::Tanh => vec![j],
        OpKind::Mul => g.deps[j].clone(),
        OpKind::Pool => vec![first(), j],
        OpKind::Opaque | OpKind::Grad(_) => return None,
    })
}

/// The training graph of a forward graph: its forward nodes, then, going backward, one gradient
/// node `grad:<op>` ([`OpKind::Grad`]) per non-input forward op `i` whose output is read. The
/// gradient node reads the gradients of `i`'s readers and the forward tensors their backward
/// reads ([`backward_reads`]); its output (`dL/d out_i`, same size as `out_i`) may overwrite the
/// gradient of `i`'s only reader when that reader is elementwise (in-place). Gradient nodes are
/// in decreasing order of their forward op. Unlike the Checkmate graph files, the loss head
/// ([`OpKind::Loss`]) is a forward node: its output is a forward feature map the planner counts.
///
/// # Errors
/// [`RematError::InvalidGraph`] if `fwd` has backward nodes or ops without op semantics.
pub fn training_graph(fwd: &Graph) -> Result<Graph, RematError> {
    let n = fwd.len();
    if let Some(k) = (0..n).find(|&k| fwd.nodes[k].backward || backward_reads(fwd, k).is_none()) {
        return Err(RematError::InvalidGraph(format!(
            "{}: node {} is not a forward op with known semantics",
            fwd.name, fwd.nodes[k].name
        )));
    }
    let mut nodes = fwd.nodes.clone();
    let mut edges: Vec<(usize, usize)> = (0..n)
        .flat_map(|k| fwd.deps[k].iter().map(move |&d| (d, k)))
        .collect();
    let mut grad: Vec<Option<usize>> = vec![None; n];
    for i in (0..n).rev() {
        let readers = &fwd.users[i];
        if fwd.nodes[i].op == OpKind::Input || readers.is_empty() {
            continue;
        }
        let id = nodes.len();
        let mut reads: Vec<usize> = readers.iter().filter_map(|&j| grad[j]).collect();
        for &j in readers {
            reads.extend(backward_reads(fwd, j).unwrap_or_default());
        }
        let only_elementwise = readers.len() == 1 && fwd.nodes[readers[0]].op.elementwise();
        let mut node = Node::new(
            format!("grad:{}", fwd.nodes[i].name),
            GRADIENT_COST,
            fwd.nodes[i].mem,
            true,
        );
        node.op = OpKind::Grad(i);
        node.inplace = if only_elementwise {
            grad[readers[0]]
        } else {
            None
        };
        nodes.push(node);
        edges.extend(reads.into_iter().map(|r| (r, id)));
        grad[i] = Some(id);
    }
    Graph::new(fwd.name.clone(), nodes, &edges, fwd.fixed_mem)
}

/// Layers of [`resnet`] for `units` bottleneck units per stage: three convolutions per unit, the
/// first convolution and the final FC (`3 * sum(units) + 2`).
pub fn resnet_layers(units: &[usize]) -> usize {
    3 * units.iter().sum::<usize>() + 2
}

/// Pre-activation bottleneck ResNet for ImageNet as in MXNet's `symbol_resnet` used by Chen et
/// al. (memonger): conv0 7x7/2 (64) - BN - ReLU - max-pool 3x3/2, stages of bottleneck units
/// (BN-ReLU-conv1x1(C/4)-BN-ReLU-conv3x3(C/4, stride)-BN-ReLU-conv1x1(C) + shortcut, the first unit
/// of a stage projecting the shortcut with a 1x1 conv), channels [256, 512, 1024, 2048] at
/// strides [1, 2, 2, 2], then BN-ReLU-global pool-FC(1000)-softmax ([`resnet_layers`] layers).
/// Feature maps are `batch x C x H x W` of `bpe` bytes per element, images `image x image`.
pub fn resnet(units: &[usize], batch: u64, image: u64, bpe: u64) -> Graph {
    let mut g = NetBuilder::new();
    let t = |c: u64, hw: u64| batch * c * hw * hw * bpe;
    let data = g.add("data", OpKind::Input, &[], t(3, image));
    let mut hw = image.div_ceil(2);
    let c0 = g.add("conv0", OpKind::Conv, &[data], t(64, hw));
    let b0 = g.add("bn0", OpKind::BatchNorm, &[c0], t(64, hw));
    let r0 = g.add("relu0", OpKind::Relu, &[b0], t(64, hw));
    hw = hw.div_ceil(2);
    let mut x = g.add("pool0", OpKind::Pool, &[r0], t(64, hw));
    let mut cin = 64u64;
    let chans = [256u64, 512, 1024, 2048];
    for (si, &nu) in units.iter().enumerate() {
        let c = chans[si.min(3)] * (1 << si.saturating_sub(3));
        for u in 0..nu {
            let stride = if u == 0 && si > 0 { 2 } else { 1 };
            let unit = Unit {
                prefix: format!("s{}u{}", si + 1, u + 1),
                cin,
                c,
                hw,
                ohw: hw.div_ceil(stride),
            };
            x = bottleneck(&mut g, &unit, x, u == 0, &t);
            hw = unit.ohw;
            cin = c;
        }
    }
    let bn = g.add("bn_final", OpKind::BatchNorm, &[x], t(cin, hw));
    let r = g.add("relu_final", OpKind::Relu, &[bn], t(cin, hw));
    let p = g.add("global_pool", OpKind::Pool, &[r], t(cin, 1));
    let fc = g.add("fc", OpKind::Fc, &[p], batch * 1000 * bpe);
    g.add("softmax", OpKind::Loss, &[fc], batch * 1000 * bpe);
    g.finish(format!("resnet{}", resnet_layers(units)))
}

/// Shape of one bottleneck unit: name prefix, input and output channels, input and output side.
struct Unit {
    prefix: String,
    cin: u64,
    c: u64,
    hw: u64,
    ohw: u64,
}

/// Appends one pre-activation bottleneck unit reading `x`; `project` adds the 1x1 shortcut
/// convolution of a stage's first unit. `t(c, hw)` is a feature map's size in bytes. Returns the
/// unit's output (the residual add).
fn bottleneck(
    g: &mut NetBuilder,
    u: &Unit,
    x: usize,
    project: bool,
    t: &impl Fn(u64, u64) -> u64,
) -> usize {
    let (p, cin, c, hw, ohw) = (&u.prefix, u.cin, u.c, u.hw, u.ohw);
    let bn1 = g.add(format!("{p}_bn1"), OpKind::BatchNorm, &[x], t(cin, hw));
    let r1 = g.add(format!("{p}_relu1"), OpKind::Relu, &[bn1], t(cin, hw));
    let cv1 = g.add(format!("{p}_conv1"), OpKind::Conv, &[r1], t(c / 4, hw));
    let bn2 = g.add(format!("{p}_bn2"), OpKind::BatchNorm, &[cv1], t(c / 4, hw));
    let r2 = g.add(format!("{p}_relu2"), OpKind::Relu, &[bn2], t(c / 4, hw));
    let cv2 = g.add(format!("{p}_conv2"), OpKind::Conv, &[r2], t(c / 4, ohw));
    let bn3 = g.add(format!("{p}_bn3"), OpKind::BatchNorm, &[cv2], t(c / 4, ohw));
    let r3 = g.add(format!("{p}_relu3"), OpKind::Relu, &[bn3], t(c / 4, ohw));
    let cv3 = g.add(format!("{p}_conv3"), OpKind::Conv, &[r3], t(c, ohw));
    let sc = if project {
        g.add(format!("{p}_sc"), OpKind::Conv, &[r1], t(c, ohw))
    } else {
        x
    };
    g.add(format!("{p}_add"), OpKind::Add, &[cv3, sc], t(c, ohw))
}

/// Unrolled multi-layer LSTM (Chen et al. Sec. 5 LSTM experiment) of `layers` layers, `hidden`
/// units, `seq` time steps and `batch` sequences, `bpe` bytes per element: per cell i2h = FC(x)
/// and h2h = FC(h) (4H each), gates = i2h + h2h, i, f, o = sigmoid and g = tanh of the gate
/// slices, c = f*c' + i*g, h = o*tanh(c). Inputs x_t (embeddings, B x H) and the initial states
/// are graph inputs; a softmax head reads the top layer's last h.
pub fn lstm(layers: usize, hidden: u64, seq: usize, batch: u64, bpe: u64) -> Graph {
    let mut g = NetBuilder::new();
    let h1 = batch * hidden * bpe;
    let xs: Vec<usize> = (0..seq)
        .map(|t| g.add(format!("x{t}"), OpKind::Input, &[], h1))
        .collect();
    let mut hs: Vec<usize> = (0..layers)
        .map(|l| g.add(format!("h0_l{l}"), OpKind::Input, &[], h1))
        .collect();
    let mut cs: Vec<usize> = (0..layers)
        .map(|l| g.add(format!("c0_l{l}"), OpKind::Input, &[], h1))
        .collect();
    let mut top = xs[0];
    for (t, &xt) in xs.iter().enumerate() {
        let mut inp = xt;
        for l in 0..layers {
            (hs[l], cs[l]) = lstm_cell(&mut g, &format!("t{t}l{l}"), [inp, hs[l], cs[l]], h1);
            inp = hs[l];
        }
        top = inp;
    }
    g.add("softmax", OpKind::Loss, &[top], h1);
    g.finish(format!("lstm{layers}x{hidden}"))
}

/// Appends one LSTM cell reading `[x, h, c]` (tensors of `h1` bytes; gates `4 * h1`) and
/// returns its new `(h, c)`.
fn lstm_cell(g: &mut NetBuilder, p: &str, [x, h, c]: [usize; 3], h1: u64) -> (usize, usize) {
    let h4 = 4 * h1;
    let i2h = g.add(format!("{p}_i2h"), OpKind::Fc, &[x], h4);
    let h2h = g.add(format!("{p}_h2h"), OpKind::Fc, &[h], h4);
    let gates = g.add(format!("{p}_gates"), OpKind::Add, &[i2h, h2h], h4);
    let ig = g.add(format!("{p}_i"), OpKind::Sigmoid, &[gates], h1);
    let fg = g.add(format!("{p}_f"), OpKind::Sigmoid, &[gates], h1);
    let gg = g.add(format!("{p}_g"), OpKind::Tanh, &[gates], h1);
    let og = g.add(format!("{p}_o"), OpKind::Sigmoid, &[gates], h1);
    let fc = g.add(format!("{p}_fc"), OpKind::Mul, &[fg, c], h1);
    let icg = g.add(format!("{p}_ig"), OpKind::Mul, &[ig, gg], h1);
    let c = g.add(format!("{p}_c"), OpKind::Add, &[fc, icg], h1);
    let tc = g.add(format!("{p}_tanhc"), OpKind::Tanh, &[c], h1);
    let h = g.add(format!("{p}_h"), OpKind::Mul, &[og, tc], h1);
    (h, c)
}

/// The lecture's two-layer MLP with 1-byte tensors (UIUC CS 498, slide "Memory Optimization on a
/// Two Layer MLP"): data -> fc1 -> relu -> fc2 -> softmax.
pub fn two_layer_mlp() -> Graph {
    let mut g = NetBuilder::new();
    let x = g.add("data", OpKind::Input, &[], 1);
    let f1 = g.add("fc1", OpKind::Fc, &[x], 1);
    let r = g.add("relu", OpKind::Relu, &[f1], 1);
    let f2 = g.add("fc2", OpKind::Fc, &[r], 1);
    g.add("softmax", OpKind::Loss, &[f2], 1);
    g.finish("two_layer_mlp")
}

/// An `n`-layer MLP chain data -> (FC -> ReLU) x n -> softmax, every tensor `bytes` bytes.
pub fn mlp_chain(n: usize, bytes: u64) -> Graph {
    let mut g = NetBuilder::new();
    let mut x = g.add("data", OpKind::Input, &[], bytes);
    for i in 0..n {
        let f = g.add(format!("fc{i}"), OpKind::Fc, &[x], bytes);
        x = g.add(format!("relu{i}"), OpKind::Relu, &[f], bytes);
    }
    g.add("softmax", OpKind::Loss, &[x], bytes);
    g.finish(format!("mlp{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(g: &Graph, ids: &[usize]) -> Vec<String> {
        ids.iter().map(|&i| g.nodes[i].name.clone()).collect()
    }

    #[test]
    fn two_layer_mlp_backward_deps() {
        let g = training_graph(&two_layer_mlp()).unwrap();
        let all: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            all,
            [
                "data",
                "fc1",
                "relu",
                "fc2",
                "softmax",
                "grad:fc2",
                "grad:relu",
                "grad:fc1"
            ]
        );
        // grad:fc2 reads what softmax's backward needs (its input fc2); softmax has no gradient.
        assert_eq!(names(&g, &g.deps[5]), ["fc2"]);
        // grad:relu reads grad:fc2 and fc2's input (relu).
        assert_eq!(names(&g, &g.deps[6]), ["relu", "grad:fc2"]);
        // grad:fc1 reads grad:relu and relu's output; it may overwrite grad:relu (ReLU is the
        // only reader of fc1 and elementwise).
        assert_eq!(names(&g, &g.deps[7]), ["relu", "grad:relu"]);
        assert_eq!(g.nodes[7].inplace, Some(6));
        assert_eq!(g.nodes[7].op, OpKind::Grad(1));
        assert_eq!(g.nodes[6].inplace, None);
        assert_eq!(g.nodes[2].inplace, Some(1));
        assert_eq!(g.first_backward(), 5);
        assert_eq!(g.forward_ops(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn backward_reads_per_op_kind() {
        let mut b = NetBuilder::new();
        let x = b.add("x", OpKind::Input, &[], 4);
        let y = b.add("y", OpKind::Input, &[], 4);
        let m = b.add("m", OpKind::Mul, &[y, x], 4);
        let a = b.add("a", OpKind::Add, &[m, x], 4);
        let p = b.add("p", OpKind::Pool, &[a], 1);
        let s = b.add("s", OpKind::Sigmoid, &[p], 1);
        let g = b.finish("kinds");
        assert_eq!(backward_reads(&g, m), Some(vec![x, y]));
        assert_eq!(backward_reads(&g, a), Some(vec![]));
        assert_eq!(backward_reads(&g, p), Some(vec![a, p]));
        assert_eq!(backward_reads(&g, s), Some(vec![s]));
        // The in-place candidate is the first argument in op order, not the smallest id.
        assert_eq!(g.nodes[m].inplace, Some(y));
        let t = training_graph(&g).unwrap();
        let grad_of = |i: usize| {
            t.nodes
                .iter()
                .position(|n| n.op == OpKind::Grad(i))
                .unwrap()
        };
        let (gm, ga, gp) = (grad_of(m), grad_of(a), grad_of(p));
        assert!(gm > ga && ga > gp);
        // m is read by the add only, whose backward reads nothing: grad:m reads grad:a alone.
        assert_eq!(t.deps[gm], vec![ga]);
        // a is read by the pool, whose backward reads its input (a) and output (p).
        assert_eq!(t.deps[ga], vec![a, p, gp]);
        // Inputs get no gradient node; the sigmoid (read by nobody) neither.
        assert!(!t
            .nodes
            .iter()
            .any(|n| matches!(n.op, OpKind::Grad(i) if i == x || i == y || i == s)));
    }

    #[test]
    fn training_graph_rejects_opaque_graphs() {
        assert!(training_graph(&Graph::linear_chain(2).unwrap()).is_err());
    }

    #[test]
    fn resnet_layers_and_sizes() {
        let g = resnet(&[3, 24, 36, 3], 32, 224, 4);
        let convs = g
            .nodes
            .iter()
            .filter(|o| o.op == OpKind::Conv && !o.name.ends_with("_sc"))
            .count();
        assert_eq!(convs + 1, 200); // + fc
        assert_eq!(resnet_layers(&[3, 24, 36, 3]), 200);
        assert_eq!(g.nodes[0].mem, 32 * 3 * 224 * 224 * 4);
        assert_eq!(g.forward_ops().len(), g.len() - 1);
    }

    #[test]
    fn lstm_cell_shape() {
        let g = lstm(2, 8, 3, 2, 4);
        // 3 x_t + 2 h0 + 2 c0 inputs, 12 ops per cell, 2 x 3 cells, softmax.
        assert_eq!(g.len(), 7 + 12 * 6 + 1);
        assert_eq!(g.forward_ops().len(), 12 * 6 + 1);
        let t = training_graph(&g).unwrap();
        // Every op but the softmax head has a gradient.
        assert_eq!(t.len(), g.len() + 12 * 6);
    }
}
