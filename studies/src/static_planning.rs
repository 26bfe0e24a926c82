//! Static memory planning study from the UIUC CS 498 lecture (`002_0a85d22a30039616.txt`, slides
//! "Dynamic/Static Memory Allocation", "Inplace / Normal Sharing", "Memory Allocation/Planning
//! Algorithm: Liveness Analysis", "Memory Optimization on a Two Layer MLP", "Sublinear Memory
//! Cost") and Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost" (arXiv:1604.06174),
//! which the lecture's text does not name: its ResNet/LSTM sizes and the "48G to 7G" claim of the
//! deep-ResNet section are the paper's.
//!
//! The graphs (the lecture's two-layer MLP, Chen et al.'s ResNet and LSTM) are memwall-remat's
//! one graph IR ([`crate::remat::nets`]: forward graphs and their training graphs), the planner
//! is memwall-remat's pass over it ([`crate::remat::memory_plan`]: liveness reference counters,
//! in-place, memory sharing), and sqrt(n) segment recomputation cuts the forward ops with
//! [`crate::remat::baselines::sqrt_segments`], the rule Chen's sqrt(n) baseline of the Checkmate
//! study uses too. This module only picks the graphs and strategies ([`measure`] into a
//! [`StaticPlanningResult`]) and presents the numbers ([`sections`]).
//!
//! May import: [`super`] (the study trait and helpers), [`crate::remat`] (graphs, planner),
//! [`memwall_document::content`]; never the driver or the report renderers.

use serde::{Deserialize, Serialize};

use super::params::{int_in, list, require, ParamResult};
use super::Cited;
use super::{demo_study, fmt_bytes, DemoError};
use crate::document::content::{Figure, Measure, Section, Table};
use crate::remat::baselines::sqrt_segments;
use crate::remat::memory_plan::{
    corrupt_reads, plain_order, plan_memory, plan_memory_ignoring_only_consumer, segment_order,
    MemoryPlan, Reuse,
};
use crate::remat::nets::{lstm, resnet, resnet_layers, training_graph, two_layer_mlp};
use crate::remat::Graph;

/// Parameters of the memory-planning study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlannerParams {
    /// Bottleneck units per stage of the ResNet (default [3, 24, 36, 3]: 3 * 66 + 2 = 200
    /// layers, ResNet-200 of He et al. 2016).
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

/// The six strategies of the lecture's (and Chen et al.'s) comparison.
pub const STRATEGIES: [&str; 6] = [
    "none",
    "in-place",
    "sharing",
    "in-place + sharing",
    "sqrt(n) checkpointing (+ sharing)",
    "all combined",
];

/// One strategy's static plan of a training graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StrategyPlan {
    /// Strategy name (one of [`STRATEGIES`]).
    pub strategy: String,
    /// Static plan: sum of the planned buffers, bytes.
    pub static_bytes: u64,
    /// Dynamic pool: peak of live tensor bytes in execution order.
    pub dynamic_peak_bytes: u64,
    /// Number of buffers.
    pub buffers: usize,
    /// Outputs computed in place.
    pub inplace_reuses: usize,
    /// Forward ops recomputed in the backward pass (extra forward evaluations).
    pub recomputed_ops: usize,
    /// Evaluations in the execution order (nodes of the training graph plus recomputations).
    pub evaluations: usize,
    /// Reads that find another value in their buffer when the plan is executed symbolically
    /// ([`corrupt_reads`]): 0 for a correct plan.
    #[serde(default)]
    pub corrupt_reads: usize,
    /// For a strategy with in-place: the same order planned with in-place that ignores the
    /// lecture's only-consumer condition ([`plan_memory_ignoring_only_consumer`]), its corrupt reads
    /// when executed; `None` without in-place.
    #[serde(default)]
    pub corrupt_reads_ignoring_only_consumer: Option<usize>,
}

impl StrategyPlan {
    /// Plans `order` of `g` under `st`, executes the plan symbolically, and for in-place also
    /// the planner that ignores the only-consumer condition.
    fn of(
        strategy: &str,
        g: &Graph,
        order: &[usize],
        st: Reuse,
    ) -> Result<(StrategyPlan, MemoryPlan), DemoError> {
        let check = |e: crate::remat::RematError| DemoError::Check(e.to_string());
        let p = planned(g, order, st)?;
        let unsafe_reads = if st.inplace {
            let u = plan_memory_ignoring_only_consumer(g, order, st).map_err(check)?;
            Some(corrupt_reads(g, order, &u).map_err(check)?)
        } else {
            None
        };
        let plan = StrategyPlan {
            strategy: strategy.to_string(),
            static_bytes: p.static_bytes,
            dynamic_peak_bytes: p.dynamic_peak,
            buffers: p.buffers,
            inplace_reuses: p.inplace_count,
            recomputed_ops: p.recomputed,
            evaluations: order.len(),
            corrupt_reads: corrupt_reads(g, order, &p).map_err(check)?,
            corrupt_reads_ignoring_only_consumer: unsafe_reads,
        };
        Ok((plan, p))
    }
}

/// The six strategies' plans of one network's training graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetPlans {
    /// Forward ops (nodes that compute; graph inputs excluded): the `n` of sqrt(n).
    pub forward_ops: usize,
    /// Nodes of the training graph (forward nodes including inputs, and gradient nodes).
    pub training_nodes: usize,
    /// Segments of sqrt(n) checkpointing.
    pub segments: usize,
    /// Ops per segment (`floor(sqrt(n))`; the last segment may be shorter).
    pub segment_ops: usize,
    /// One plan per entry of [`STRATEGIES`], in that order.
    pub plans: Vec<StrategyPlan>,
}

/// The two-layer MLP's plans with their buffer assignments (first four strategies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpPlans {
    /// Tensor (node) names of the training graph in execution order.
    pub tensors: Vec<String>,
    /// Edges (tensor read, reading tensor) by position in `tensors`.
    pub reads: Vec<(usize, usize)>,
    /// Plans under none, in-place, sharing, in-place + sharing.
    pub plans: Vec<StrategyPlan>,
    /// Buffer id of every tensor, one list per entry of `plans`.
    pub assignments: Vec<Vec<usize>>,
}

/// What the static-planning study measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticPlanningResult {
    /// The parameters it ran with.
    pub params: PlannerParams,
    /// The lecture's two-layer MLP (1-byte tensors).
    pub mlp: MlpPlans,
    /// ResNet of `params.resnet_units`.
    pub resnet: NetPlans,
    /// LSTM of `params.lstm_*`.
    pub lstm: NetPlans,
    /// Deep ResNet of `params.resnet_deep_units`.
    pub resnet_deep: NetPlans,
}

fn strategy(inplace: bool, sharing: bool) -> Reuse {
    Reuse { inplace, sharing }
}

/// The four reuse strategies without recomputation, in [`STRATEGIES`] order.
const REUSE: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

fn planned(g: &Graph, order: &[usize], st: Reuse) -> Result<MemoryPlan, DemoError> {
    plan_memory(g, order, st).map_err(|e| DemoError::Check(e.to_string()))
}

/// Plans the training graph of `fwd` under the six strategies: the plain order with the four
/// reuse strategies, then sqrt(n) segment recomputation on the sharing planner without and with
/// in-place. Checkpointing only saves memory when dropped tensors' buffers are reused, so it
/// runs on the sharing planner, as in Chen et al.
fn compare_strategies(fwd: &Graph) -> Result<NetPlans, DemoError> {
    let check = |e: crate::remat::RematError| DemoError::Check(e.to_string());
    let g = training_graph(fwd).map_err(check)?;
    let plain = plain_order(&g);
    let segments = sqrt_segments(g.forward_ops().len());
    let ck = segment_order(&g, &segments).map_err(check)?;
    let runs = REUSE
        .iter()
        .map(|&(i, s)| (&plain, strategy(i, s)))
        .chain([(&ck, strategy(false, true)), (&ck, strategy(true, true))]);
    let mut plans = Vec::with_capacity(STRATEGIES.len());
    for ((order, st), name) in runs.zip(STRATEGIES) {
        plans.push(StrategyPlan::of(name, &g, order, st)?.0);
    }
    Ok(NetPlans {
        forward_ops: g.forward_ops().len(),
        training_nodes: g.len(),
        segments: segments.len(),
        segment_ops: segments.first().map_or(0, |s| s.end - s.start),
        plans,
    })
}

/// Plans the lecture's two-layer MLP under the four reuse strategies.
fn plan_mlp() -> Result<MlpPlans, DemoError> {
    let g = training_graph(&two_layer_mlp()).map_err(|e| DemoError::Check(e.to_string()))?;
    let order = plain_order(&g);
    let mut plans = Vec::new();
    let mut assignments = Vec::new();
    for (&(i, s), name) in REUSE.iter().zip(STRATEGIES) {
        let (summary, p) = StrategyPlan::of(name, &g, &order, strategy(i, s))?;
        plans.push(summary);
        assignments.push(p.assignment);
    }
    Ok(MlpPlans {
        tensors: g.nodes.iter().map(|n| n.name.clone()).collect(),
        reads: (0..g.len())
            .flat_map(|k| g.deps[k].iter().map(move |&d| (d, k)))
            .collect(),
        plans,
        assignments,
    })
}

/// Checks `p`'s ranges: 1 to 4 ResNet stages of 1..=1000 bottleneck units each (both ResNets),
/// batch 1..=4096 images of 32..=4096 pixels, 1..=8 bytes per element; an LSTM of 1..=64
/// layers, hidden size 1..=65536, batch 1..=4096 and 1..=10000 steps with at most 100000
/// cells in all (the graphs are planned node by node; larger ones take minutes). Sizes stay
/// under 2^64 bytes per tensor at every bound.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &PlannerParams) -> ParamResult {
    list("resnet_units", &p.resnet_units, 1, 4, |f, &u| {
        int_in(f, u, 1, 1000)
    })?;
    list("resnet_deep_units", &p.resnet_deep_units, 1, 4, |f, &u| {
        int_in(f, u, 1, 1000)
    })?;
    int_in("resnet_batch", p.resnet_batch, 1, 4096)?;
    int_in("image_size", p.image_size, 32, 4096)?;
    int_in("lstm_layers", p.lstm_layers, 1, 64)?;
    int_in("lstm_hidden", p.lstm_hidden, 1, 65536)?;
    int_in("lstm_seq", p.lstm_seq, 1, 10_000)?;
    int_in("lstm_batch", p.lstm_batch, 1, 4096)?;
    require(p.lstm_layers * p.lstm_seq <= 100_000, "lstm_seq", || {
        format!(
            "with `lstm_layers` = {} makes {} LSTM cells; at most 100000 are planned",
            p.lstm_layers,
            p.lstm_layers * p.lstm_seq
        )
    })?;
    int_in("bytes_per_elem", p.bytes_per_elem, 1, 8)
}

/// Runs the study: plans the two-layer MLP, the ResNet, the LSTM and the deep ResNet.
///
/// # Errors
/// [`DemoError::InvalidParam`] for parameters out of range.
pub fn measure(p: &PlannerParams) -> Result<StaticPlanningResult, DemoError> {
    validate(p)?;
    let (b, img, bpe) = (p.resnet_batch, p.image_size, p.bytes_per_elem);
    let rn = resnet(&p.resnet_units, b, img, bpe);
    let ls = lstm(p.lstm_layers, p.lstm_hidden, p.lstm_seq, p.lstm_batch, bpe);
    let deep = resnet(&p.resnet_deep_units, b, img, bpe);
    Ok(StaticPlanningResult {
        params: p.clone(),
        mlp: plan_mlp()?,
        resnet: compare_strategies(&rn)?,
        lstm: compare_strategies(&ls)?,
        resnet_deep: compare_strategies(&deep)?,
    })
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

fn strategy_table(caption: String, net: &NetPlans) -> Table {
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
        rows: net
            .plans
            .iter()
            .map(|p| {
                vec![
                    p.strategy.clone(),
                    format!("{:.3}", gb(p.static_bytes)),
                    format!("{:.3}", gb(p.dynamic_peak_bytes)),
                    p.buffers.to_string(),
                    p.inplace_reuses.to_string(),
                    format!("{} of {}", p.recomputed_ops, net.forward_ops),
                ]
            })
            .collect(),
        notes: Vec::new(),
    }
}

/// Static bytes of strategy `i` of [`STRATEGIES`].
fn bytes(net: &NetPlans, i: usize) -> f64 {
    net.plans[i].static_bytes as f64
}

/// Memory reduction of "all combined" over "none".
fn reduction(net: &NetPlans) -> f64 {
    bytes(net, 0) / bytes(net, 5)
}

/// The two-layer MLP section: buffer assignment per tensor and the training graph.
fn render_mlp(m: &MlpPlans, src: &str) -> Section {
    let mut dag = Figure {
        name: "mlp_training_graph_plan".into(),
        title: "Two-layer MLP training graph, buffers under in-place + sharing (same tag = same memory)".into(),
        ..Default::default()
    };
    let best = &m.assignments[3];
    dag.nodes = m
        .tensors
        .iter()
        .zip(best)
        .map(|(t, b)| format!("{t} [buf {b}]"))
        .collect();
    dag.edges = m.reads.clone();
    let buffers: Vec<usize> = m.plans.iter().map(|p| p.buffers).collect();
    Section {
        details: None,
        title: "Memory planning on the lecture's two-layer MLP".into(),
        claim: format!(
            "{src}, slides on in-place and memory sharing and \"Memory Optimization on a Two Layer MLP\": \"We can only do in-place computation if the result op is the \
             only consumer of the current value\"; \"Shared memory between the nodes whose lifetime do not overlap\"; \"We can save memory usage by a constant factor \
             using memory sharing for training, how can we do better?\""
        ),
        ours: format!(
            "The training graph of data-fc1-relu-fc2-softmax has {} tensors (unit size each); with no reuse it needs {} buffers, in-place {}, sharing {}, in-place + sharing {} \
             ({:.1}x fewer than none).",
            m.tensors.len(), buffers[0], buffers[1], buffers[2], buffers[3],
            m.plans[0].static_bytes as f64 / m.plans[3].static_bytes as f64
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
            columns: std::iter::once("Tensor".to_string()).chain(m.plans.iter().map(|p| p.strategy.clone())).collect(),
            rows: m.tensors.iter().enumerate().map(|(i, t)| std::iter::once(t.clone()).chain(m.assignments.iter().map(|a| format!("buf {}", a[i]))).collect()).collect(),
            notes: Vec::new(),
        }],
        figures: vec![dag],
    }
}

/// The ResNet and LSTM section: six strategies each, tables and the strategy figure.
fn render_comparison(r: &StaticPlanningResult, src: &str) -> Section {
    let p = &r.params;
    let (rres, lres) = (&r.resnet, &r.lstm);
    let rn_layers = resnet_layers(&p.resnet_units);
    // Strategies are categories: grouped bars, one per network.
    let plans_gb =
        |net: &NetPlans| -> Vec<f64> { net.plans.iter().map(|p| gb(p.static_bytes)).collect() };
    let fig = Figure::grouped_bars(
        "feature_map_memory_by_strategy",
        "Feature-map memory by allocation strategy (static plan)",
        "allocation strategy",
        "feature-map memory (GB)",
        &rres
            .plans
            .iter()
            .map(|p| p.strategy.clone())
            .collect::<Vec<_>>(),
        vec![
            (format!("ResNet-{rn_layers}"), plans_gb(rres)),
            (
                format!("LSTM {}x{}", p.lstm_layers, p.lstm_hidden),
                plans_gb(lres),
            ),
        ],
    );
    Section {
        details: None,
        title: "Feature-map memory of ResNet and LSTM under six allocation strategies".into(),
        claim: format!(
            "{src}, slide \"Running different schemes on ResNet and LSTM.\" (charts \"(a) Feature map memory cost estimation\" and \"(b) Runtime total memory cost\", \
             images whose numbers are not in the text; the lecture does not name their origin) and slide \"Sublinear Memory Cost\": with k = sqrt(n) segments the \
             activation memory becomes O(2 sqrt(n)) \"with only one additional forward pass\"."
        ),
        ours: format!(
            "ResNet-{rn_layers} (batch {}, {}x{}, fp32): {} with no reuse, {} with in-place + sharing, {} with all combined ({:.1}x less, {} of {} forward ops recomputed). \
             LSTM {} layers x {} hidden, {} steps, batch {}: {} -> {} -> {} ({:.1}x less).",
            p.resnet_batch, p.image_size, p.image_size,
            fmt_bytes(bytes(rres, 0)), fmt_bytes(bytes(rres, 3)), fmt_bytes(bytes(rres, 5)), reduction(rres), rres.plans[5].recomputed_ops, rres.forward_ops,
            p.lstm_layers, p.lstm_hidden, p.lstm_seq, p.lstm_batch,
            fmt_bytes(bytes(lres, 0)), fmt_bytes(bytes(lres, 3)), fmt_bytes(bytes(lres, 5)), reduction(lres),
        ),
        notes: vec![
            format!(
                "Checkpointing cuts the n forward ops into segments of floor(sqrt(n)) ops (Chen et al.'s sqrt(n) rule, shared with the Checkmate study's baseline; \
                 n = {} ResNet ops in {} segments of {}, {} LSTM ops in {} segments of {}); graph inputs and tensors read by a forward op of another segment are the \
                 checkpoints, and before a segment's gradients its other ops are recomputed. Checkpointing only saves memory when dropped tensors' buffers are reused, \
                 so its row runs on the sharing planner (as in Chen et al., where the sublinear plan sits on top of the sharing allocator); \"all combined\" adds in-place.",
                rres.forward_ops, rres.segments, rres.segment_ops, lres.forward_ops, lres.segments, lres.segment_ops
            ),
            "Counted: all forward feature maps (including the input batch) and their gradients, float32; not counted: weights, weight gradients, optimizer state, \
             cuDNN workspaces. The lecture's bar chart numbers are not in the text source, so we compare reductions, not absolute bars."
                .into(),
        ],
        tables: vec![
            strategy_table(format!("ResNet-{rn_layers} (units {:?}), batch {}, {}x{}", p.resnet_units, p.resnet_batch, p.image_size, p.image_size), rres),
            strategy_table(format!("LSTM {} layers x {} hidden, sequence {}, batch {}", p.lstm_layers, p.lstm_hidden, p.lstm_seq, p.lstm_batch), lres),
        ],
        figures: vec![fig],
    }
}

/// The planner study's `[params.cited]`: how the report names the lecture, and the numbers of
/// Chen et al. 2016 that the deep ResNet section quotes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannerCited {
    /// What follows the lecture's file name when the report names it.
    pub cite_as: String,
    /// Chen et al. 2016's claim on the 1,000-layer ResNet and the lecture's time overhead, in
    /// their words (the deep ResNet section's claim).
    pub chen_2016_claim: String,
    /// Chen et al. 2016's memory of the 1,000-layer ResNet without and with sublinear
    /// recomputation, GB ("from 48G to 7G").
    pub chen_2016_gb: [f64; 2],
    /// The lecture's training-time increase of recomputation, % ("roughly increases 30%").
    pub lecture_time_increase_pct: u32,
}

impl Cited<PlannerCited> {
    /// The lecture as the report names it.
    pub fn src(&self) -> String {
        self.name(&self.values.cite_as)
    }
}

/// The deep ResNet section: Chen et al.'s "48 GB -> 7 GB" claim beside our plan.
fn render_deep(r: &StaticPlanningResult, c: &PlannerCited) -> Section {
    let [chen_before, chen_after] = c.chen_2016_gb;
    let p = &r.params;
    let dres = &r.resnet_deep;
    let deep_layers = resnet_layers(&p.resnet_deep_units);
    let extra = 100.0 * dres.plans[5].recomputed_ops as f64 / dres.forward_ops as f64;
    Section {
        details: None,
        title: format!("{deep_layers}-layer ResNet: sublinear memory"),
        claim: c.chen_2016_claim.clone(),
        ours: format!(
            "For our {deep_layers}-layer pre-activation bottleneck ResNet (units {:?}, batch {}, {}x{}, fp32 feature maps and gradients) the planner gives {} with no reuse, \
             {} with in-place + sharing and {} with sqrt(n) checkpointing + in-place + sharing ({:.1}x less than in-place + sharing; Chen et al.: {}/{} = {:.1}x, derived), at {} recomputed \
             forward ops of {} ({:.0}% extra forward work, i.e. about {:.0}% more time per training step if a backward pass costs twice a forward pass; lecture: about {}%).",
            p.resnet_deep_units, p.resnet_batch, p.image_size, p.image_size,
            fmt_bytes(bytes(dres, 0)), fmt_bytes(bytes(dres, 3)), fmt_bytes(bytes(dres, 5)),
            bytes(dres, 3) / bytes(dres, 5), chen_before, chen_after, chen_before / chen_after, dres.plans[5].recomputed_ops, dres.forward_ops, extra, extra / 3.0, c.lecture_time_increase_pct
        ),
        notes: vec![
            "The paper's 1000-layer configuration is not given layer by layer; we keep ResNet-200's stages and put the extra bottleneck units in stage 3 (14x14, 1024 \
             channels), the stage that deep ImageNet ResNets grow. Differences from the paper's absolute numbers come from what is counted (the paper's estimate \
             comes from MXNet's allocator on its own graph, including e.g. BN auxiliary outputs and workspace) and from its memory-budget-driven segment choice \
             versus our sqrt(n)-sized segments."
                .into(),
        ],
        tables: vec![strategy_table(format!("ResNet-{deep_layers} (units {:?}), batch {}", p.resnet_deep_units, p.resnet_batch), dres)],
        figures: vec![Figure::grouped_bars(
            "resnet_deep_memory",
            &format!("ResNet-{deep_layers}: feature-map memory without and with sqrt(n) recomputation"),
            "plan",
            "memory (GB)",
            &["in-place + sharing".into(), "+ sqrt(n) recomputation".into()],
            vec![
                ("ours (static plan)".into(), vec![bytes(dres, 3) / 1e9, bytes(dres, 5) / 1e9]),
                ("Chen et al. 2016".into(), vec![chen_before, chen_after]),
            ],
        )],
    }
}

/// Presents a result as the study's three sections.
pub fn sections(r: &StaticPlanningResult, cited: &Cited<PlannerCited>) -> Vec<Section> {
    let src = cited.src();
    vec![
        render_mlp(&r.mlp, &src),
        render_comparison(r, &src),
        render_deep(r, &cited.values),
    ]
}

/// The static planning study ([`InProcessStudy`](super::InProcessStudy)): [`measure`] then
/// [`sections`].
pub struct StaticPlanning;

demo_study!(
    StaticPlanning: PlannerParams => StaticPlanningResult,
    cited PlannerCited,
    validate,
    measure,
    sections,
    measures
);

/// Static bytes of strategy `i` of [`STRATEGIES`], NaN when the plan is missing.
fn static_bytes(net: &NetPlans, i: usize) -> f64 {
    net.plans.get(i).map_or(f64::NAN, |p| p.static_bytes as f64)
}

/// Memory of no reuse over in-place + sharing (the lecture's "constant factor").
fn sharing_factor(net: &NetPlans) -> f64 {
    static_bytes(net, 0) / static_bytes(net, 3)
}

/// Forward ops recomputed by "all combined" (sqrt(n) checkpointing with in-place and sharing)
/// per forward op: 1.0 is one extra forward pass.
fn recomputed_forward_fraction(net: &NetPlans) -> f64 {
    net.plans.get(5).map_or(f64::NAN, |p| {
        p.recomputed_ops as f64 / net.forward_ops as f64
    })
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only:
///
/// - `mlp_inplace_buffers_saved`, `mlp_sharing_buffers_saved` (buffers): buffers of the
///   two-layer MLP's plan with no reuse minus those with in-place, and with sharing.
/// - `sharing_factor_resnet`, `sharing_factor_deep` (x): static bytes with no reuse over those
///   with in-place + sharing, for ResNet-200 and the deep ResNet.
/// - `sharing_factor_deep_over_shallow` (x): the deep ResNet's factor over ResNet-200's: 1.0
///   when the saving is a constant factor, independent of depth.
/// - `deep_recomputed_forward_fraction` (x): forward ops recomputed by sqrt(n) checkpointing
///   (with in-place + sharing) over the deep ResNet's forward ops; 1.0 is one extra forward pass.
/// - `deep_modelled_time_increase_pct` (%): that fraction x 100 / 3, the extra time per
///   training step if a backward pass costs twice a forward pass (a model, not a timing).
/// - `deep_sqrt_memory_reduction` (x): the deep ResNet's static bytes with in-place + sharing
///   over those with sqrt(n) checkpointing added (Chen et al.'s 48G / 7G = 6.9).
/// - `plan_corrupt_reads`: reads, over every plan of every network executed symbolically,
///   that find another value in their buffer (0: the plans are correct).
/// - `inplace_unsafe_corrupt_reads`: the same for the in-place plans redone with in-place that
///   ignores the only-consumer condition; NaN with the reason when the record has no such plan,
///   the correct plans corrupt a read themselves, or no plan computes anything in place.
pub fn measures(r: &StaticPlanningResult) -> Vec<Measure> {
    let saved = |i: usize| match (r.mlp.plans.first(), r.mlp.plans.get(i)) {
        (Some(none), Some(p)) => none.buffers as f64 - p.buffers as f64,
        _ => f64::NAN,
    };
    let deep = &r.resnet_deep;
    use memwall_core::spec::provenance::Provenance::{Arithmetic, Computed};
    let fraction = recomputed_forward_fraction(deep);
    let planner = |what: &str| Computed(format!("{what}, from our static memory planner's plans"));
    let every_plan = || {
        r.mlp
            .plans
            .iter()
            .chain(&r.resnet.plans)
            .chain(&r.lstm.plans)
            .chain(&r.resnet_deep.plans)
    };
    let corrupt: usize = every_plan().map(|p| p.corrupt_reads).sum();
    let unsafe_reads = every_plan()
        .filter_map(|p| p.corrupt_reads_ignoring_only_consumer)
        .reduce(|a, b| a + b);
    let (unsafe_value, unsafe_missing) = match unsafe_reads {
        None => (
            f64::NAN,
            Some(
                "not measured: the record has no plan redone without the only-consumer \
                 condition (run the study again with --force)"
                    .to_string(),
            ),
        ),
        Some(_) if corrupt > 0 => (
            f64::NAN,
            Some(format!(
                "undecided: the plans that keep the condition corrupt {corrupt} reads themselves"
            )),
        ),
        Some(_) if every_plan().all(|p| p.inplace_reuses == 0) => (
            f64::NAN,
            Some("undecided: no plan computes anything in place".to_string()),
        ),
        Some(n) => (n as f64, None),
    };
    let executed = "reads that find another value in their buffer when the plans are executed \
                    symbolically (each evaluation writes its token, each read checks it)";
    vec![
        Measure::new(
            "plan_corrupt_reads",
            corrupt as f64,
            "",
            0,
            planner(&format!("{executed}, every strategy of every network")),
        ),
        Measure::new(
            "inplace_unsafe_corrupt_reads",
            unsafe_value,
            "",
            0,
            Computed(format!(
                "{executed}, the in-place plans of every network redone with in-place that \
                 ignores the only-consumer condition"
            )),
        )
        .missing_because(unsafe_missing),
        Measure::new(
            "mlp_inplace_buffers_saved",
            saved(1),
            "",
            0,
            planner("buffers of the MLP's plan without sharing minus with in-place"),
        ),
        Measure::new(
            "mlp_sharing_buffers_saved",
            saved(2),
            "",
            0,
            planner("buffers of the MLP's plan without sharing minus with sharing"),
        ),
        Measure::new(
            "sharing_factor_resnet",
            sharing_factor(&r.resnet),
            "x",
            2,
            planner("ResNet's static bytes without sharing / with in-place + sharing"),
        ),
        Measure::new(
            "sharing_factor_deep",
            sharing_factor(deep),
            "x",
            2,
            planner("the deep ResNet's static bytes without sharing / with in-place + sharing"),
        ),
        Measure::new(
            "sharing_factor_deep_over_shallow",
            sharing_factor(deep) / sharing_factor(&r.resnet),
            "x",
            3,
            planner("the deep ResNet's sharing factor / the shallow one's"),
        ),
        Measure::new(
            "deep_recomputed_forward_fraction",
            fraction,
            "x",
            3,
            planner("forward operations recomputed by the sqrt(n) plan / the deep ResNet's forward operations"),
        ),
        Measure::new(
            "deep_modelled_time_increase_pct",
            fraction * 100.0 / 3.0,
            "%",
            1,
            Arithmetic(
                "the recomputed forward fraction x 100 / 3, a model in which backward costs \
                 two forward passes (no timing)"
                    .into(),
            ),
        ),
        Measure::new(
            "deep_sqrt_memory_reduction",
            static_bytes(deep, 3) / static_bytes(deep, 5),
            "x",
            2,
            planner("the deep ResNet's static bytes with in-place + sharing / with sqrt(n) checkpointing added"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::claim_checks::{assert_claims_have_measures, value};

    fn small_params() -> PlannerParams {
        PlannerParams {
            resnet_units: vec![1, 1],
            resnet_deep_units: vec![2, 2],
            resnet_batch: 2,
            image_size: 64,
            lstm_layers: 2,
            lstm_hidden: 16,
            lstm_seq: 10,
            lstm_batch: 2,
            bytes_per_elem: 4,
        }
    }

    #[test]
    fn resnet_strategies_order() {
        let r = compare_strategies(&resnet(&[3, 24, 36, 3], 32, 224, 4)).unwrap();
        assert_eq!(r.forward_ops, 673);
        let b = |i: usize| r.plans[i].static_bytes;
        for i in 1..4 {
            assert!(b(i) <= b(0));
        }
        assert!(b(5) < b(3));
        assert_eq!(r.plans[0].recomputed_ops, 0);
        assert!(r.plans[5].recomputed_ops > 0 && r.plans[5].recomputed_ops < r.forward_ops);
    }

    #[test]
    fn run_small() {
        let r = measure(&small_params()).unwrap();
        assert_eq!(r.mlp.tensors.len(), 8);
        assert_eq!(r.mlp.plans[0].buffers, 8);
        let s = sections(&r, &crate::cited::from_experiment("static_planning"));
        assert_eq!(s.len(), 3);
        // The result round-trips through the record store's JSON.
        let json = serde_json::to_value(&r).unwrap();
        let back: StaticPlanningResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            sections(&back, &crate::cited::from_experiment("static_planning")),
            s
        );
    }

    #[test]
    fn rejects_bad_params() {
        let mut p = small_params();
        p.resnet_units = vec![];
        assert!(measure(&p).is_err());
    }

    #[test]
    fn measures_answer_the_claims() {
        let m = assert_claims_have_measures::<StaticPlanning>(
            "static_planning",
            measure(&small_params()).unwrap(),
        );
        assert!(value(&m, "mlp_inplace_buffers_saved") >= 1.0);
        assert!(value(&m, "mlp_sharing_buffers_saved") >= 1.0);
        assert!(value(&m, "sharing_factor_resnet") > 1.0);
        let f = value(&m, "deep_recomputed_forward_fraction");
        assert!(f > 0.0 && f <= 1.0, "{f}");
        assert!((value(&m, "deep_modelled_time_increase_pct") - f * 100.0 / 3.0).abs() < 1e-9);
        assert!(value(&m, "deep_sqrt_memory_reduction") > 1.0);
        // Every plan reads what it wrote; without the only-consumer condition some read does not.
        assert_eq!(value(&m, "plan_corrupt_reads"), 0.0);
        assert!(value(&m, "inplace_unsafe_corrupt_reads") >= 1.0);
        // A record from before the counter-example says why it has no value.
        let mut old = measure(&small_params()).unwrap();
        for p in old.mlp.plans.iter_mut().chain(&mut old.resnet.plans) {
            p.corrupt_reads_ignoring_only_consumer = None;
        }
        for p in old.lstm.plans.iter_mut().chain(&mut old.resnet_deep.plans) {
            p.corrupt_reads_ignoring_only_consumer = None;
        }
        let m = measures(&old);
        let unsafe_reads = m
            .iter()
            .find(|x| x.name == "inplace_unsafe_corrupt_reads")
            .unwrap();
        assert!(unsafe_reads.value.is_nan());
        assert!(unsafe_reads.missing.as_deref().unwrap().contains("--force"));
    }
}
