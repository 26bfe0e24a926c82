//! Static memory planning from the UIUC CS 498 lecture (`002_0a85d22a30039616.txt`, slides
//! "Dynamic/Static Memory Allocation", "Inplace / Normal Sharing", "Memory Allocation/Planning
//! Algorithm: Liveness Analysis", "Memory Optimization on a Two Layer MLP", "Sublinear Memory
//! Cost") and Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost" (arXiv:1604.06174).
//!
//! A forward graph of tensors (one tensor per op, sizes in bytes) is turned into a training
//! schedule (forward steps, then one gradient step per forward tensor in reverse order, optionally
//! with segment recomputation), and a planner assigns every tensor to a memory buffer using
//! liveness reference counters, in-place reuse and best-fit sharing.

use std::collections::BTreeSet;

use serde::Deserialize;

use super::{ensure, fmt_bytes, DemoError};
use crate::report::model::{Figure, Mark, Section, Series, Table};

const SRC: &str = "002_0a85d22a30039616.txt (UIUC CS 498 lecture, Minjia Zhang)";

/// Parameters of the memory-planning study.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerParams {
    /// Bottleneck units per stage of the ResNet of Chen et al. Fig. (default [3, 24, 36, 3]:
    /// 3 * 66 + 2 = 200 layers, MXNet's ResNet-200).
    pub resnet_units: Vec<usize>,
    /// Units per stage of the deep ResNet for the "1000-layer, 48 GB -> 7 GB" claim (default
    /// [3, 24, 303, 3]: 3 * 333 + 2 = 1001 layers; ResNet-200 with the extra units in stage 3).
    pub resnet_deep_units: Vec<usize>,
    /// Mini-batch size for ResNet (images).
    pub resnet_batch: u64,
    /// Input image side in pixels.
    pub image_size: u64,
    /// LSTM layers.
    pub lstm_layers: usize,
    /// LSTM hidden size (also the input embedding size).
    pub lstm_hidden: u64,
    /// LSTM sequence length (unrolled time steps).
    pub lstm_seq: usize,
    /// LSTM mini-batch size.
    pub lstm_batch: u64,
    /// Bytes per element of feature maps (4 = float32, as in Chen et al.).
    pub bytes_per_elem: u64,
}

impl Default for PlannerParams {
    fn default() -> Self {
        Self {
            resnet_units: vec![3, 24, 36, 3],
            resnet_deep_units: vec![3, 24, 303, 3],
            resnet_batch: 32,
            image_size: 224,
            lstm_layers: 4,
            lstm_hidden: 1024,
            lstm_seq: 1000,
            lstm_batch: 64,
            bytes_per_elem: 4,
        }
    }
}

/// Kind of a forward op; decides which tensors its backward needs and whether it is elementwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Graph input (data, initial states): pinned for the whole step, no gradient.
    Input,
    /// Convolution (backward needs its input for the weight gradient).
    Conv,
    /// Fully connected (backward needs its input).
    Fc,
    /// Batch normalization (backward needs its input).
    BatchNorm,
    /// ReLU (elementwise; backward needs its output).
    Relu,
    /// Sigmoid (elementwise; backward needs its output).
    Sigmoid,
    /// Tanh (elementwise; backward needs its output).
    Tanh,
    /// Elementwise sum (backward needs nothing).
    Add,
    /// Elementwise product (backward needs both inputs).
    Mul,
    /// Pooling (backward needs input and output).
    Pool,
    /// Softmax / loss head (backward needs its input).
    Loss,
}

impl OpKind {
    fn elementwise(self) -> bool {
        matches!(
            self,
            OpKind::Relu | OpKind::Sigmoid | OpKind::Tanh | OpKind::Add | OpKind::Mul
        )
    }
}

/// A forward op producing one tensor.
#[derive(Debug, Clone)]
pub struct Op {
    /// Name for tables and figures.
    pub name: String,
    /// Op kind.
    pub kind: OpKind,
    /// Input op ids (smaller than this op's id).
    pub inputs: Vec<usize>,
    /// Size of the output tensor in bytes.
    pub bytes: u64,
}

/// A forward graph in topological order.
#[derive(Debug, Clone, Default)]
pub struct FwdGraph {
    /// Ops; ids are positions.
    pub ops: Vec<Op>,
}

impl FwdGraph {
    /// Appends an op and returns its id.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        kind: OpKind,
        inputs: &[usize],
        bytes: u64,
    ) -> usize {
        self.ops.push(Op {
            name: name.into(),
            kind,
            inputs: inputs.to_vec(),
            bytes,
        });
        self.ops.len() - 1
    }

    /// Forward tensors the backward of op `j` reads.
    fn saved(&self, j: usize) -> Vec<usize> {
        let op = &self.ops[j];
        match op.kind {
            OpKind::Input | OpKind::Add => vec![],
            OpKind::Conv | OpKind::Fc | OpKind::BatchNorm | OpKind::Loss => vec![op.inputs[0]],
            OpKind::Relu | OpKind::Sigmoid | OpKind::Tanh => vec![j],
            OpKind::Mul => op.inputs.clone(),
            OpKind::Pool => vec![op.inputs[0], j],
        }
    }

    /// Number of non-input ops.
    pub fn compute_ops(&self) -> usize {
        self.ops.iter().filter(|o| o.kind != OpKind::Input).count()
    }
}

/// One step of an execution schedule: produces tensor `index` from earlier tensors.
#[derive(Debug, Clone)]
pub struct Step {
    /// Name (forward op, `grad:` or `recompute:` prefix).
    pub name: String,
    /// Tensors (step indices) it reads.
    pub inputs: Vec<usize>,
    /// Output tensor size in bytes.
    pub bytes: u64,
    /// The output may overwrite `inputs[0]` if that tensor dies here and has the same size.
    pub inplace_ok: bool,
    /// Lives for the whole schedule (graph inputs).
    pub pinned: bool,
    /// True for a forward op re-executed during the backward pass.
    pub recompute: bool,
}

/// Builds the training schedule: all forward steps, then, going backward, one gradient step per
/// non-input forward tensor `i` (dL/d out_i, same size) that reads the output gradients of its
/// consumers and the forward tensors their backward needs. With `segments` (contiguous ranges of
/// op ids), only tensors used across segment boundaries (and inputs) are kept from the forward
/// pass; before a segment's gradient steps, its other forward ops are recomputed from those
/// checkpoints (Chen et al. 2016, Sec. 4; lecture slide "Checkpointing / Recomputation").
pub fn training_schedule(g: &FwdGraph, segments: Option<&[(usize, usize)]>) -> Vec<Step> {
    let n = g.ops.len();
    let mut consumers = vec![Vec::new(); n];
    for (j, op) in g.ops.iter().enumerate() {
        for &i in &op.inputs {
            if !consumers[i].contains(&j) {
                consumers[i].push(j);
            }
        }
    }
    let mut steps: Vec<Step> = g
        .ops
        .iter()
        .map(|op| Step {
            name: op.name.clone(),
            inputs: op.inputs.clone(),
            bytes: op.bytes,
            inplace_ok: op.kind.elementwise(),
            pinned: op.kind == OpKind::Input,
            recompute: false,
        })
        .collect();
    // seg_of[i] and checkpoint set.
    let whole = [(0usize, n)];
    let segs: &[(usize, usize)] = segments.unwrap_or(&whole);
    let mut seg_of = vec![0usize; n];
    for (s, &(a, b)) in segs.iter().enumerate() {
        for x in seg_of.iter_mut().take(b.min(n)).skip(a) {
            *x = s;
        }
    }
    let keep: Vec<bool> = (0..n)
        .map(|i| {
            segments.is_none()
                || g.ops[i].kind == OpKind::Input
                || consumers[i].iter().any(|&j| seg_of[j] != seg_of[i])
        })
        .collect();
    // Where the backward pass finds forward tensor i (original or recomputed copy).
    let mut loc: Vec<usize> = (0..n).collect();
    let mut grad: Vec<Option<usize>> = vec![None; n];
    for s in (0..segs.len()).rev() {
        let (a, b) = segs[s];
        if segments.is_some() {
            for i in a..b.min(n) {
                if !keep[i] {
                    let op = &g.ops[i];
                    steps.push(Step {
                        name: format!("recompute:{}", op.name),
                        inputs: op.inputs.iter().map(|&x| loc[x]).collect(),
                        bytes: op.bytes,
                        inplace_ok: op.kind.elementwise(),
                        pinned: false,
                        recompute: true,
                    });
                    loc[i] = steps.len() - 1;
                }
            }
        }
        for i in (a..b.min(n)).rev() {
            if g.ops[i].kind == OpKind::Input || consumers[i].is_empty() {
                continue;
            }
            let mut inputs = Vec::new();
            let push = |t: usize, v: &mut Vec<usize>| {
                if !v.contains(&t) {
                    v.push(t);
                }
            };
            for &j in &consumers[i] {
                if let Some(gj) = grad[j] {
                    push(gj, &mut inputs);
                }
            }
            for &j in &consumers[i] {
                for t in g.saved(j) {
                    push(loc[t], &mut inputs);
                }
            }
            let single = consumers[i].len() == 1 && g.ops[consumers[i][0]].kind.elementwise();
            let first_is_grad = consumers[i].first().and_then(|&j| grad[j]).is_some();
            steps.push(Step {
                name: format!("grad:{}", g.ops[i].name),
                inputs,
                bytes: g.ops[i].bytes,
                inplace_ok: single && first_is_grad,
                pinned: false,
                recompute: false,
            });
            grad[i] = Some(steps.len() - 1);
        }
    }
    steps
}

/// Forward-only schedule (inference): the forward steps of [`training_schedule`].
pub fn inference_schedule(g: &FwdGraph) -> Vec<Step> {
    training_schedule(g, None)
        .into_iter()
        .take(g.ops.len())
        .collect()
}

/// Splits the non-input ops into `k` contiguous segments of (nearly) equal op count.
pub fn equal_segments(g: &FwdGraph, k: usize) -> Vec<(usize, usize)> {
    let n = g.ops.len();
    let k = k.clamp(1, n.max(1));
    (0..k).map(|s| (s * n / k, (s + 1) * n / k)).collect()
}

/// Allocation strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strategy {
    /// Write an elementwise op's output into its dying input's buffer.
    pub inplace: bool,
    /// Reuse buffers of dead tensors (best fit) for new tensors.
    pub sharing: bool,
}

/// Result of planning a schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Static allocation: total bytes of all planned buffers (each sized to its largest tensor).
    pub static_bytes: u64,
    /// Dynamic pool: peak bytes of simultaneously live tensors in schedule order (tensors freed
    /// when their reference counter reaches zero, in-place outputs add nothing; an ideal pool
    /// without fragmentation).
    pub dynamic_peak: u64,
    /// Number of buffers.
    pub buffers: usize,
    /// Buffer tag of every tensor (step index -> buffer).
    pub assignment: Vec<usize>,
    /// Number of in-place reuses.
    pub inplace_count: usize,
}

/// Plans memory for a schedule with liveness reference counters (lecture slide "Liveness
/// counters: track the number of operations that need to be fulfilled before memory can be
/// reused"). Without sharing every tensor gets a fresh buffer unless it is computed in place.
pub fn plan(steps: &[Step], st: Strategy) -> Plan {
    let n = steps.len();
    let mut refc = vec![0usize; n];
    for s in steps {
        for &i in &s.inputs {
            refc[i] += 1;
        }
    }
    let mut buf_size: Vec<u64> = Vec::new();
    let mut assignment = vec![usize::MAX; n];
    let mut free: BTreeSet<(u64, usize)> = BTreeSet::new();
    let (mut live, mut peak, mut inplace_count) = (0u64, 0u64, 0usize);
    let mut handed = vec![false; n];
    for (t, s) in steps.iter().enumerate() {
        // In place: the first input dies at this step (this is its last reader) and fits exactly.
        let mut chosen = None;
        if st.inplace && s.inplace_ok {
            if let Some(&x) = s.inputs.first() {
                let reads_here = s.inputs.iter().filter(|&&y| y == x).count();
                if refc[x] == reads_here
                    && !steps[x].pinned
                    && steps[x].bytes == s.bytes
                    && !handed[x]
                {
                    chosen = Some(assignment[x]);
                    handed[x] = true;
                    inplace_count += 1;
                }
            }
        }
        let b = match chosen {
            Some(b) => b,
            None => {
                live += s.bytes;
                let reuse = if st.sharing {
                    free.range((s.bytes, 0)..)
                        .next()
                        .copied()
                        .or_else(|| free.iter().next_back().copied())
                } else {
                    None
                };
                match reuse {
                    Some(entry) => {
                        free.remove(&entry);
                        let b = entry.1;
                        buf_size[b] = buf_size[b].max(s.bytes);
                        b
                    }
                    None => {
                        buf_size.push(s.bytes);
                        buf_size.len() - 1
                    }
                }
            }
        };
        assignment[t] = b;
        peak = peak.max(live);
        for &x in &s.inputs {
            refc[x] -= 1;
            if refc[x] == 0 && !steps[x].pinned && !handed[x] {
                live -= steps[x].bytes;
                handed[x] = true; // released
                free.insert((buf_size[assignment[x]], assignment[x]));
            }
        }
        if refc[t] == 0 && !s.pinned {
            live -= s.bytes;
            handed[t] = true;
            free.insert((buf_size[b], b));
        }
    }
    Plan {
        static_bytes: buf_size.iter().sum(),
        dynamic_peak: peak,
        buffers: buf_size.len(),
        assignment,
        inplace_count,
    }
}

/// The six strategies of the lecture's (and Chen et al.'s) comparison.
pub const STRATEGIES: [&str; 6] = [
    "none",
    "in-place",
    "sharing",
    "in-place + sharing",
    "sqrt(n) checkpointing (+ sharing)",
    "all combined",
];

/// Plans a training graph under the six strategies. Returns (name, plan, recomputed steps).
pub fn compare_strategies(g: &FwdGraph) -> Vec<(&'static str, Plan, usize)> {
    let base = training_schedule(g, None);
    let k = ((g.compute_ops() as f64).sqrt().round() as usize).max(1);
    let segs = equal_segments(g, k);
    let ck = training_schedule(g, Some(&segs));
    let rec = ck.iter().filter(|s| s.recompute).count();
    let s = |inplace, sharing| Strategy { inplace, sharing };
    vec![
        (STRATEGIES[0], plan(&base, s(false, false)), 0),
        (STRATEGIES[1], plan(&base, s(true, false)), 0),
        (STRATEGIES[2], plan(&base, s(false, true)), 0),
        (STRATEGIES[3], plan(&base, s(true, true)), 0),
        (STRATEGIES[4], plan(&ck, s(false, true)), rec),
        (STRATEGIES[5], plan(&ck, s(true, true)), rec),
    ]
}

/// Pre-activation bottleneck ResNet for ImageNet as in MXNet's `symbol_resnet` used by Chen et
/// al. (memonger): conv0 7x7/2 (64) - BN - ReLU - max-pool 3x3/2, stages of bottleneck units
/// (BN-ReLU-conv1x1(C/4)-BN-ReLU-conv3x3(C/4, stride)-BN-ReLU-conv1x1(C) + shortcut, the first unit
/// of a stage projecting the shortcut with a 1x1 conv), channels [256, 512, 1024, 2048] at
/// strides [1, 2, 2, 2], then BN-ReLU-global pool-FC(1000)-softmax. Layers = 3 * sum(units) + 2.
pub fn resnet(units: &[usize], batch: u64, image: u64, bpe: u64) -> FwdGraph {
    let mut g = FwdGraph::default();
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
            let ohw = hw.div_ceil(stride);
            let p = format!("s{}u{}", si + 1, u + 1);
            let bn1 = g.add(format!("{p}_bn1"), OpKind::BatchNorm, &[x], t(cin, hw));
            let r1 = g.add(format!("{p}_relu1"), OpKind::Relu, &[bn1], t(cin, hw));
            let cv1 = g.add(format!("{p}_conv1"), OpKind::Conv, &[r1], t(c / 4, hw));
            let bn2 = g.add(format!("{p}_bn2"), OpKind::BatchNorm, &[cv1], t(c / 4, hw));
            let r2 = g.add(format!("{p}_relu2"), OpKind::Relu, &[bn2], t(c / 4, hw));
            let cv2 = g.add(format!("{p}_conv2"), OpKind::Conv, &[r2], t(c / 4, ohw));
            let bn3 = g.add(format!("{p}_bn3"), OpKind::BatchNorm, &[cv2], t(c / 4, ohw));
            let r3 = g.add(format!("{p}_relu3"), OpKind::Relu, &[bn3], t(c / 4, ohw));
            let cv3 = g.add(format!("{p}_conv3"), OpKind::Conv, &[r3], t(c, ohw));
            let sc = if u == 0 {
                g.add(format!("{p}_sc"), OpKind::Conv, &[r1], t(c, ohw))
            } else {
                x
            };
            x = g.add(format!("{p}_add"), OpKind::Add, &[cv3, sc], t(c, ohw));
            hw = ohw;
            cin = c;
        }
    }
    let bn = g.add("bn_final", OpKind::BatchNorm, &[x], t(cin, hw));
    let r = g.add("relu_final", OpKind::Relu, &[bn], t(cin, hw));
    let p = g.add("global_pool", OpKind::Pool, &[r], t(cin, 1));
    let fc = g.add("fc", OpKind::Fc, &[p], batch * 1000 * bpe);
    g.add("softmax", OpKind::Loss, &[fc], batch * 1000 * bpe);
    g
}

/// Unrolled multi-layer LSTM (Chen et al. Sec. 5 LSTM experiment): per cell i2h = FC(x) and
/// h2h = FC(h) (4H each), gates = i2h + h2h, i, f, o = sigmoid and g = tanh of the gate slices,
/// c = f*c' + i*g, h = o*tanh(c). Inputs x_t (embeddings, B x H) and initial states are graph
/// inputs; a softmax head reads the top layer's last h.
pub fn lstm(layers: usize, hidden: u64, seq: usize, batch: u64, bpe: u64) -> FwdGraph {
    let mut g = FwdGraph::default();
    let h1 = batch * hidden * bpe;
    let h4 = 4 * h1;
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
            let p = format!("t{t}l{l}");
            let i2h = g.add(format!("{p}_i2h"), OpKind::Fc, &[inp], h4);
            let h2h = g.add(format!("{p}_h2h"), OpKind::Fc, &[hs[l]], h4);
            let gates = g.add(format!("{p}_gates"), OpKind::Add, &[i2h, h2h], h4);
            let ig = g.add(format!("{p}_i"), OpKind::Sigmoid, &[gates], h1);
            let fg = g.add(format!("{p}_f"), OpKind::Sigmoid, &[gates], h1);
            let gg = g.add(format!("{p}_g"), OpKind::Tanh, &[gates], h1);
            let og = g.add(format!("{p}_o"), OpKind::Sigmoid, &[gates], h1);
            let fc = g.add(format!("{p}_fc"), OpKind::Mul, &[fg, cs[l]], h1);
            let icg = g.add(format!("{p}_ig"), OpKind::Mul, &[ig, gg], h1);
            let c = g.add(format!("{p}_c"), OpKind::Add, &[fc, icg], h1);
            let tc = g.add(format!("{p}_tanhc"), OpKind::Tanh, &[c], h1);
            let h = g.add(format!("{p}_h"), OpKind::Mul, &[og, tc], h1);
            hs[l] = h;
            cs[l] = c;
            inp = h;
        }
        top = inp;
    }
    g.add("softmax", OpKind::Loss, &[top], h1);
    g
}

/// The lecture's two-layer MLP with unit-size tensors: data -> fc1 -> relu -> fc2 -> softmax.
pub fn two_layer_mlp() -> FwdGraph {
    let mut g = FwdGraph::default();
    let x = g.add("data", OpKind::Input, &[], 1);
    let f1 = g.add("fc1", OpKind::Fc, &[x], 1);
    let r = g.add("relu", OpKind::Relu, &[f1], 1);
    let f2 = g.add("fc2", OpKind::Fc, &[r], 1);
    g.add("softmax", OpKind::Loss, &[f2], 1);
    g
}

fn strategy_table(caption: String, res: &[(&str, Plan, usize)], steps: usize) -> Table {
    Table {
        caption,
        columns: vec![
            "Strategy".into(),
            "Static plan (GB)".into(),
            "Dynamic pool peak (GB)".into(),
            "Buffers".into(),
            "In-place reuses".into(),
            "Recomputed ops (extra forward)".into(),
        ],
        rows: res
            .iter()
            .map(|(n, p, r)| {
                vec![
                    n.to_string(),
                    format!("{:.3}", p.static_bytes as f64 / 1e9),
                    format!("{:.3}", p.dynamic_peak as f64 / 1e9),
                    p.buffers.to_string(),
                    p.inplace_count.to_string(),
                    format!("{r} of {steps}"),
                ]
            })
            .collect(),
    }
}

fn strategy_series(label: &str, res: &[(&str, Plan, usize)]) -> Series {
    Series {
        label: label.into(),
        points: res
            .iter()
            .enumerate()
            .map(|(i, (_, p, _))| ((i + 1) as f64, p.static_bytes as f64 / 1e9))
            .collect(),
        mark: Mark::Points,
        point_labels: res.iter().map(|(n, _, _)| n.to_string()).collect(),
    }
}

/// Runs the study.
pub fn run(p: &PlannerParams) -> Result<Vec<Section>, DemoError> {
    ensure(
        !p.resnet_units.is_empty() && p.resnet_units.len() <= 4,
        "resnet_units",
        "1 to 4 stages",
    )?;
    ensure(
        !p.resnet_deep_units.is_empty() && p.resnet_deep_units.len() <= 4,
        "resnet_deep_units",
        "1 to 4 stages",
    )?;
    ensure(
        p.lstm_layers > 0 && p.lstm_seq > 0 && p.lstm_hidden > 0 && p.lstm_batch > 0,
        "lstm_layers",
        "LSTM sizes must be positive",
    )?;
    ensure(
        p.resnet_batch > 0 && p.image_size >= 32 && p.bytes_per_elem > 0,
        "image_size",
        "batch > 0, image >= 32, bytes_per_elem > 0",
    )?;

    // Two-layer MLP (lecture slide "Memory Optimization on a Two Layer MLP").
    let mlp = two_layer_mlp();
    let sched = training_schedule(&mlp, None);
    let mres: Vec<(&str, Plan)> = [(false, false), (true, false), (false, true), (true, true)]
        .iter()
        .zip(STRATEGIES)
        .map(|(&(i, s), n)| {
            (
                n,
                plan(
                    &sched,
                    Strategy {
                        inplace: i,
                        sharing: s,
                    },
                ),
            )
        })
        .collect();
    let best = &mres[3].1;
    let mut dag = Figure { name: "mlp_training_graph_plan".into(), title: "Two-layer MLP training graph, buffers under in-place + sharing (same tag = same memory)".into(), ..Default::default() };
    for (i, s) in sched.iter().enumerate() {
        dag.nodes
            .push(format!("{} [buf {}]", s.name, best.assignment[i]));
        for &x in &s.inputs {
            dag.edges.push((x, i));
        }
    }
    let mlp_sec = Section {
        title: "Memory planning on the lecture's two-layer MLP".into(),
        claim: format!(
            "{SRC}, slides \"Inplace / Normal Sharing\" and \"Memory Optimization on a Two Layer MLP\": in-place is possible \"if the result op is the only consumer of the \
             current value\"; memory is shared \"between the nodes whose lifetime do not overlap\"; \"we can save memory usage by a constant factor using memory sharing for training\"."
        ),
        ours: format!(
            "The training graph of data-fc1-relu-fc2-softmax has {} tensors (unit size each); with no reuse it needs {} buffers, in-place {}, sharing {}, in-place + sharing {} \
             ({:.1}x fewer than none).",
            sched.len(), mres[0].1.buffers, mres[1].1.buffers, mres[2].1.buffers, mres[3].1.buffers, mres[0].1.static_bytes as f64 / mres[3].1.static_bytes as f64
        ),
        notes: vec![
            "Training graph: forward steps, then one gradient step per forward tensor (dL/d out_i) reading the consumers' output gradients and the forward tensors \
             their backward needs (conv/FC/BN: input; ReLU/sigmoid/tanh: output; add: nothing; mul: both inputs; pool: input and output). Weights and weight \
             gradients are not feature maps and are not counted."
                .into(),
            "Planner: a reference counter per tensor counts its remaining readers; in place means an elementwise op writes into its first input's buffer when that \
             input dies at this op and has the same size; sharing returns a dead tensor's buffer to a free list from which later tensors take the best fit \
             (smallest free buffer that is large enough, else the largest free buffer, grown). Static plan = sum of buffer sizes; dynamic pool = peak of live bytes."
                .into(),
        ],
        tables: vec![Table {
            caption: "Buffer assignment per tensor (step order)".into(),
            columns: std::iter::once("Tensor".to_string()).chain(mres.iter().map(|(n, _)| n.to_string())).collect(),
            rows: sched.iter().enumerate().map(|(i, s)| std::iter::once(s.name.clone()).chain(mres.iter().map(|(_, pl)| format!("buf {}", pl.assignment[i]))).collect()).collect(),
        }],
        figures: vec![dag],
    };

    // ResNet and LSTM at Chen et al.'s sizes.
    let rn = resnet(
        &p.resnet_units,
        p.resnet_batch,
        p.image_size,
        p.bytes_per_elem,
    );
    let rn_layers = 3 * p.resnet_units.iter().sum::<usize>() + 2;
    let rres = compare_strategies(&rn);
    let ls = lstm(
        p.lstm_layers,
        p.lstm_hidden,
        p.lstm_seq,
        p.lstm_batch,
        p.bytes_per_elem,
    );
    let lres = compare_strategies(&ls);
    let red = |r: &[(&str, Plan, usize)]| r[0].1.static_bytes as f64 / r[5].1.static_bytes as f64;
    let fig = Figure {
        name: "feature_map_memory_by_strategy".into(),
        title: "Feature-map memory by allocation strategy (static plan)".into(),
        x_label:
            "strategy (1 none, 2 in-place, 3 sharing, 4 in-place+sharing, 5 sqrt(n) ckpt, 6 all)"
                .into(),
        y_label: "feature-map memory (GB)".into(),
        log_y: true,
        series: vec![
            strategy_series(&format!("ResNet-{rn_layers}"), &rres),
            strategy_series(&format!("LSTM {}x{}", p.lstm_layers, p.lstm_hidden), &lres),
        ],
        ..Default::default()
    };
    let cmp_sec = Section {
        title: "Feature-map memory of ResNet and LSTM under six allocation strategies".into(),
        claim: format!(
            "{SRC}, slide \"Running different schemes on ResNet and LSTM\" ((a) feature map memory cost estimation, from Chen et al. 2016 Fig. 5) and slide \
             \"Sublinear Memory Cost: O(sqrt(n))\": with k = sqrt(n) segments the activation memory becomes O(2 sqrt(n)) \"with only one additional forward pass\"."
        ),
        ours: format!(
            "ResNet-{rn_layers} (batch {}, {}x{}, fp32): {} with no reuse, {} with in-place + sharing, {} with all combined ({:.1}x less, {} of {} forward ops recomputed). \
             LSTM {} layers x {} hidden, {} steps, batch {}: {} -> {} -> {} ({:.1}x less).",
            p.resnet_batch, p.image_size, p.image_size,
            fmt_bytes(rres[0].1.static_bytes as f64), fmt_bytes(rres[3].1.static_bytes as f64), fmt_bytes(rres[5].1.static_bytes as f64), red(&rres), rres[5].2, rn.compute_ops(),
            p.lstm_layers, p.lstm_hidden, p.lstm_seq, p.lstm_batch,
            fmt_bytes(lres[0].1.static_bytes as f64), fmt_bytes(lres[3].1.static_bytes as f64), fmt_bytes(lres[5].1.static_bytes as f64), red(&lres),
        ),
        notes: vec![
            format!(
                "Checkpointing splits the forward ops into round(sqrt(n)) equal contiguous segments (n = {} ResNet ops, {} LSTM ops); tensors read across a segment \
                 boundary are the checkpoints. Checkpointing only saves memory when dropped tensors' buffers are reused, so its row runs on the sharing planner (as \
                 in Chen et al., where the sublinear plan sits on top of the sharing allocator); \"all combined\" adds in-place.",
                rn.compute_ops(), ls.compute_ops()
            ),
            "Counted: all forward feature maps (including the input batch) and their gradients, float32; not counted: weights, weight gradients, optimizer state, \
             cuDNN workspaces. The lecture's bar chart numbers are not in the text source, so we compare reductions, not absolute bars."
                .into(),
        ],
        tables: vec![
            strategy_table(format!("ResNet-{rn_layers} (units {:?}), batch {}, {}x{}", p.resnet_units, p.resnet_batch, p.image_size, p.image_size), &rres, rn.compute_ops()),
            strategy_table(format!("LSTM {} layers x {} hidden, sequence {}, batch {}", p.lstm_layers, p.lstm_hidden, p.lstm_seq, p.lstm_batch), &lres, ls.compute_ops()),
        ],
        figures: vec![fig],
    };

    // 1000-layer ResNet: 48 GB -> 7 GB.
    let deep = resnet(
        &p.resnet_deep_units,
        p.resnet_batch,
        p.image_size,
        p.bytes_per_elem,
    );
    let deep_layers = 3 * p.resnet_deep_units.iter().sum::<usize>() + 2;
    let dres = compare_strategies(&deep);
    let deep_sec = Section {
        title: format!("{deep_layers}-layer ResNet: sublinear memory"),
        claim: "Chen et al. 2016 (arXiv:1604.06174), abstract, cited by the lecture's \"Sublinear Memory Cost\" slides: the method reduces \"the memory cost of a 1,000-layer \
                deep residual network from 48G to 7G\" with about 30% extra run time (lecture: \"Training time roughly increases 30%\")."
            .into(),
        ours: format!(
            "For our {deep_layers}-layer pre-activation bottleneck ResNet (units {:?}, batch {}, {}x{}, fp32 feature maps and gradients) the planner gives {} with no reuse, \
             {} with in-place + sharing and {} with sqrt(n) checkpointing + in-place + sharing ({:.1}x less than in-place + sharing; paper: 48/7 = {:.1}x), at {} recomputed \
             forward ops of {} ({:.0}% extra forward work, i.e. about {:.0}% more time per training step if a backward pass costs twice a forward pass; lecture: about 30%).",
            p.resnet_deep_units, p.resnet_batch, p.image_size, p.image_size,
            fmt_bytes(dres[0].1.static_bytes as f64), fmt_bytes(dres[3].1.static_bytes as f64), fmt_bytes(dres[5].1.static_bytes as f64),
            dres[3].1.static_bytes as f64 / dres[5].1.static_bytes as f64, 48.0 / 7.0, dres[5].2, deep.compute_ops(), 100.0 * dres[5].2 as f64 / deep.compute_ops() as f64,
            100.0 * dres[5].2 as f64 / deep.compute_ops() as f64 / 3.0
        ),
        notes: vec![
            "The paper's 1000-layer configuration is not given layer by layer; we keep ResNet-200's stages and put the extra bottleneck units in stage 3 (14x14, 1024 \
             channels), the stage that deep ImageNet ResNets grow. Differences from the paper's absolute numbers come from what is counted (the paper's estimate \
             comes from MXNet's allocator on its own graph, including e.g. BN auxiliary outputs and workspace) and from its memory-budget-driven segment choice \
             versus our equal-count segments."
                .into(),
        ],
        tables: vec![strategy_table(format!("ResNet-{deep_layers} (units {:?}), batch {}", p.resnet_deep_units, p.resnet_batch), &dres, deep.compute_ops())],
        figures: vec![Figure::grouped_bars(
            "resnet_deep_memory",
            &format!("ResNet-{deep_layers}: feature-map memory without and with sqrt(n) recomputation"),
            "plan",
            "memory (GB)",
            &["in-place + sharing".into(), "+ sqrt(n) recomputation".into()],
            vec![
                ("ours (static plan)".into(), vec![dres[3].1.static_bytes as f64 / 1e9, dres[5].1.static_bytes as f64 / 1e9]),
                ("Chen et al. 2016".into(), vec![48.0, 7.0]),
            ],
        )],
    };
    Ok(vec![mlp_sec, cmp_sec, deep_sec])
}

/// The static planning study ([`InProcessStudy`]). TEMPORARY: its output is still the rendered sections; typed result to come.
pub struct StaticPlanning;

impl super::InProcessStudy for StaticPlanning {
    type Params = PlannerParams;
    type Output = Vec<Section>;
    type Error = DemoError;
    fn run(params: &PlannerParams, _data_dir: &std::path::Path) -> Result<Vec<Section>, DemoError> {
        run(params)
    }
    fn render(output: &Vec<Section>) -> Vec<Section> {
        output.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(inplace: bool, sharing: bool) -> Strategy {
        Strategy { inplace, sharing }
    }

    /// x (input, 1) -> a = fc(x) (4) -> b = relu(a) (4) -> c = fc(b) (2) -> d = relu(c) (2), forward only.
    fn small() -> Vec<Step> {
        let mut g = FwdGraph::default();
        let x = g.add("x", OpKind::Input, &[], 1);
        let a = g.add("a", OpKind::Fc, &[x], 4);
        let b = g.add("b", OpKind::Relu, &[a], 4);
        let c = g.add("c", OpKind::Fc, &[b], 2);
        g.add("d", OpKind::Relu, &[c], 2);
        inference_schedule(&g)
    }

    #[test]
    fn hand_computed_small_graph() {
        let s = small();
        // none: 1 + 4 + 4 + 2 + 2.
        assert_eq!(plan(&s, st(false, false)).static_bytes, 13);
        // in-place: b in a's buffer, d in c's: 1 + 4 + 2.
        let p = plan(&s, st(true, false));
        assert_eq!((p.static_bytes, p.inplace_count), (7, 2));
        // sharing: x(1), a->buf(4), b->new(4), c reuses a's (4 >= 2), d reuses b's: 1 + 4 + 4.
        let p = plan(&s, st(false, true));
        assert_eq!(p.static_bytes, 9);
        assert_eq!(p.assignment[3], p.assignment[1]);
        assert_eq!(p.assignment[4], p.assignment[2]);
        // in-place + sharing: a, b share (4); c new (2), d in place: 1 + 4 + 2.
        assert_eq!(plan(&s, st(true, true)).static_bytes, 7);
        // Dynamic peak without in-place: x + a + b live at b's step = 9; with in-place: x + a(=b) + c = 7.
        assert_eq!(plan(&s, st(false, true)).dynamic_peak, 9);
        assert_eq!(plan(&s, st(true, true)).dynamic_peak, 7);
    }

    #[test]
    fn mlp_training_graph() {
        let g = two_layer_mlp();
        let s = training_schedule(&g, None);
        // 5 forward + grads of fc1, relu, fc2, softmax inputs (not data): fc2, relu, fc1 = 3 + ... grad for softmax has no consumer.
        assert_eq!(s.len(), 8);
        assert_eq!(plan(&s, st(false, false)).buffers, 8);
        let both = plan(&s, st(true, true));
        assert!(both.buffers < plan(&s, st(false, true)).buffers || both.inplace_count > 0);
        assert!(both.static_bytes <= plan(&s, st(false, true)).static_bytes);
    }

    #[test]
    fn checkpointing_is_sublinear_on_a_chain() {
        // Chain of n ReLU-like non-elementwise ops (BN) of unit size: O(n) with sharing, O(sqrt n) with checkpoints.
        let mut g = FwdGraph::default();
        let mut x = g.add("x", OpKind::Input, &[], 1);
        for i in 0..400 {
            x = g.add(format!("bn{i}"), OpKind::BatchNorm, &[x], 1);
        }
        g.add("loss", OpKind::Loss, &[x], 1);
        let full = plan(&training_schedule(&g, None), st(false, true)).static_bytes;
        let segs = equal_segments(&g, 20);
        let ck_sched = training_schedule(&g, Some(&segs));
        let ck = plan(&ck_sched, st(false, true)).static_bytes;
        assert!(full >= 400, "{full}");
        assert!(ck < 70, "{ck}");
        // Each forward op recomputed at most once.
        assert!(ck_sched.iter().filter(|s| s.recompute).count() <= 400);
    }

    #[test]
    fn resnet_layers_and_sizes() {
        let g = resnet(&[3, 24, 36, 3], 32, 224, 4);
        let convs = g
            .ops
            .iter()
            .filter(|o| o.kind == OpKind::Conv && !o.name.ends_with("_sc"))
            .count();
        assert_eq!(convs + 1, 200); // + fc
        let r = compare_strategies(&g);
        for w in r.windows(2).take(3) {
            assert!(w[1].1.static_bytes <= r[0].1.static_bytes);
        }
        assert!(r[5].1.static_bytes < r[3].1.static_bytes);
    }

    #[test]
    fn run_small() {
        let p = PlannerParams {
            resnet_units: vec![1, 1],
            resnet_deep_units: vec![2, 2],
            resnet_batch: 2,
            image_size: 64,
            lstm_layers: 2,
            lstm_hidden: 16,
            lstm_seq: 10,
            lstm_batch: 2,
            bytes_per_elem: 4,
        };
        let s = run(&p).unwrap();
        assert_eq!(s.len(), 3);
    }
}
