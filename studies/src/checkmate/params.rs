//! The Checkmate study's parameters (the experiment file's `[params]`) and their ranges.

use super::*;

/// Parameters of [`run_study`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CheckmateParams {
    /// Graph files for the overhead and solve-time sections, relative to
    /// `<data_dir>/remat-graphs` (networkx node-link JSON, either schema).
    pub graphs: Vec<String>,
    /// Memory budgets as fractions of each graph's checkpoint-all peak memory.
    pub budget_fractions: Vec<f64>,
    /// Also solve each graph at its smallest possible budget: the working-set bound (the
    /// largest memory one operation needs with its inputs, [`Graph::working_set_bound`]) as a
    /// fraction of the checkpoint-all peak, rounded up to 0.001, where it is not already a
    /// budget. No schedule fits below it; the MILP says whether one fits at it.
    pub smallest_budget: bool,
    /// HiGHS time limit of the solves at the smallest budget (MILP or staged MILP), seconds:
    /// the tightest budget is the hardest to solve and only asks whether a schedule exists.
    pub smallest_budget_time_limit_s: f64,
    /// Random layered graphs generated in memory (after Moccasin's benchmark family,
    /// `memwall_remat::layered`), measured after `graphs`.
    pub generated: Vec<GeneratedGraph>,
    /// Graphs with more nodes get the scalable staged MILP (`memwall_remat::staged`) instead
    /// of Checkmate's MILP.
    pub milp_max_nodes: usize,
    /// The staged MILP groups `ceil(m / staged_max_stages)` consecutive nodes into one stage,
    /// `m` the nodes after the budget's checkpoint-all prefix (which is one stage, see
    /// `memwall_remat::staged::model_stages`); 1 up to this many nodes: Checkmate's stages,
    /// unrestricted.
    pub staged_max_stages: usize,
    /// Graphs with at most this many nodes are then refined: the unrestricted model (one node
    /// per stage) warm-started from the grouped model's schedule, for the rest of the time
    /// limit; its bounds are valid for Checkmate's problem.
    pub refine_max_nodes: usize,
    /// Share of `staged_time_limit_s` given to the grouped model when refining, in [0, 1].
    pub coarse_share: f64,
    /// Bound on computations per node in the staged MILP (Moccasin's `C`); `None`: unbounded.
    pub staged_max_computations: Option<u32>,
    /// HiGHS time limit of one staged solve (LP relaxation, warm starts and MILP), seconds.
    pub staged_time_limit_s: f64,
    /// Graphs with at most this many nodes also get the LP relaxation with two-phase rounding
    /// of Checkmate's formulation (its LP is slow on larger graphs).
    pub classic_lp_max_nodes: usize,
    /// HiGHS time limit per MILP solve, seconds.
    pub time_limit_s: f64,
    /// Relative MIP gap at which HiGHS stops (0.01 = 1%).
    pub mip_gap: f64,
    /// HiGHS thread count.
    pub threads: u32,
    /// HiGHS `mip_heuristic_effort` in [0, 1] (HiGHS default 0.05).
    pub heuristic_effort: f64,
    /// Number of memory thresholds swept for Chen's greedy heuristic.
    pub greedy_thresholds: usize,
    /// Thresholds for rounding the LP's `S` (two-phase rounding), in (0, 1).
    pub rounding_thresholds: Vec<f64>,
    /// Factors (< 1) of the budget at which the LP is re-solved when no rounding of the
    /// full-budget LP fits (see `milp::solve_lp_rounding`).
    pub lp_tighten: Vec<f64>,
    /// Graph file for the maximum-batch-size search (the paper uses VGG19); `None` skips it.
    pub batch_graph: Option<String>,
    /// Batch size at which `batch_graph`'s memory costs were profiled (256 for the VGG files).
    pub batch_graph_batch: u32,
    /// Fixed device memory for the batch-size search, bytes (the paper: a 16 GB V100).
    pub batch_memory_bytes: u64,
    /// Upper end of the batch-size bisection.
    pub batch_max: u32,
    /// HiGHS time limit per MILP solve inside the batch-size bisection, seconds (the staged
    /// MILP's, for the probes of graphs above `milp_max_nodes`, in place of
    /// `staged_time_limit_s`).
    pub batch_time_limit_s: f64,
    /// More networks for the batch-size search at the same memory and compute limit, built by
    /// memwall: a ResNet and the transformer's chain of blocks.
    pub batch_nets: Vec<BuiltNet>,
    /// Networks built by memwall measured at every budget like `graphs` (after `graphs` and
    /// `generated`): real networks of 100 layers and more (a ResNet-50, the transformer's chain
    /// of 100 blocks), for the notes' solve-time claim on "Networks with 100+ layers".
    pub nets: Vec<BuiltNet>,
    /// Time limit of each solve of the built networks (`nets`) at the budget fractions, seconds
    /// (MILP or staged MILP, in place of `time_limit_s` and `staged_time_limit_s`): a solve that
    /// reaches the target gap stops there, so the limit only bounds the solves that do not.
    pub nets_time_limit_s: f64,
}

/// A network built by memwall instead of read from a file (the batch-size search's
/// `batch_nets` and the budget sweep's `nets`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BuiltNet {
    /// The pre-activation bottleneck ResNet of `memwall_remat::nets::resnet` (`units` per stage,
    /// e.g. [3, 4, 6, 3] for ResNet-50), `image` x `image` x 3 inputs, f32 feature maps, its
    /// training graph built at `batch`. Unit costs (forward 1, gradient 2 per op).
    Resnet {
        /// Bottleneck units per stage.
        units: Vec<usize>,
        /// Input side, pixels.
        image: u64,
        /// Batch size the graph is built at.
        batch: u32,
    },
    /// memwall's transformer as Checkmate's linear graph of its blocks
    /// (`memwall_remat::Graph::from_layers`): `layers` blocks each keeping `activation_bytes`
    /// for backward at `batch` (forward cost 1, backward 2), the head and loss node keeping
    /// `head_bytes`.
    TransformerChain {
        /// Transformer blocks.
        layers: usize,
        /// Bytes one block keeps for backward at `batch` (measured by a job's profiling pass).
        activation_bytes: u64,
        /// Bytes of the head's output (logits) at `batch`.
        head_bytes: u64,
        /// Batch size the sizes are measured at.
        batch: u32,
        /// Where the sizes come from (a record, a formula), shown in the report.
        source: String,
        /// The batch search's step as a fraction of one sample: `divisions` = 8 searches in
        /// eighths of a sequence (the input measured in tokens), so that the largest input is
        /// found to 1/8 of a sequence instead of a whole one. 1 (the default): whole samples.
        #[serde(default = "one", skip_serializing_if = "is_one")]
        divisions: u32,
    },
}

fn one() -> u32 {
    1
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

impl BuiltNet {
    /// How many search steps one sample of the network is divided into (the transformer
    /// chain's `divisions`; 1 for the ResNet, whose input is whole images).
    pub fn divisions(&self) -> u32 {
        match self {
            BuiltNet::Resnet { .. } => 1,
            BuiltNet::TransformerChain { divisions, .. } => *divisions,
        }
    }

    /// The network's training graph and the batch size it is built at.
    ///
    /// # Errors
    /// [`RematError`] when the chain has no layer.
    pub fn graph(&self) -> Result<(Graph, u32), RematError> {
        match self {
            BuiltNet::Resnet {
                units,
                image,
                batch,
            } => {
                let fwd = crate::remat::nets::resnet(units, u64::from(*batch), *image, 4);
                let mut g = crate::remat::nets::training_graph(&fwd)?;
                g.name = format!(
                    "ResNet-{} ({image}x{image})",
                    crate::remat::nets::resnet_layers(units)
                );
                Ok((g, *batch))
            }
            BuiltNet::TransformerChain {
                layers,
                activation_bytes,
                head_bytes,
                batch,
                ..
            } => Ok((
                Graph::from_layers(
                    format!("memwall transformer, {layers} blocks"),
                    &vec![(1.0, *activation_bytes); *layers],
                    2.0,
                    (1.0, *head_bytes),
                    0,
                )?,
                *batch,
            )),
        }
    }
}

impl Default for CheckmateParams {
    /// The default study (about 1–3 minutes on 2 cores): the five Checkmate train graphs at 0.8
    /// and 0.9 of the checkpoint-all peak with a 60 s MILP limit and a 1% gap (the benchmark
    /// target), the random layered n=100 graph (LP rounding only), and the VGG19 batch search
    /// (5 s per MILP solve).
    fn default() -> Self {
        CheckmateParams {
            graphs: vec![
                "VGG16_256_224_224_3_train_nx.json".into(),
                "VGG19_256_224_224_3_train_nx.json".into(),
                "vgg_unet_32_416_608_3_train_nx.json".into(),
                "fcn_8_vgg_32_416_608_3_train_nx.json".into(),
                "segnet_32_416_608_3_train_nx.json".into(),
                "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json".into(),
            ],
            budget_fractions: vec![0.9, 0.8, 0.5, 0.333],
            smallest_budget: true,
            smallest_budget_time_limit_s: 10.0,
            generated: Vec::new(),
            milp_max_nodes: 80,
            staged_max_stages: crate::remat::staged::DEFAULT_MAX_STAGES,
            refine_max_nodes: 300,
            coarse_share: 0.4,
            staged_max_computations: None,
            staged_time_limit_s: 60.0,
            classic_lp_max_nodes: 100,
            time_limit_s: 60.0,
            mip_gap: 0.01,
            threads: 2,
            heuristic_effort: 0.3,
            greedy_thresholds: 16,
            rounding_thresholds: vec![0.1, 0.3, 0.5, 0.7, 0.9],
            lp_tighten: vec![0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5],
            batch_graph: Some("VGG19_256_224_224_3_train_nx.json".into()),
            batch_graph_batch: 256,
            batch_memory_bytes: 16 * (1 << 30),
            batch_max: 1024,
            batch_time_limit_s: 5.0,
            batch_nets: Vec::new(),
            nets: Vec::new(),
            nets_time_limit_s: 60.0,
        }
    }
}

impl CheckmateParams {
    /// A seconds-long configuration for tests: VGG16 only, one budget, short limits.
    pub fn smoke() -> Self {
        CheckmateParams {
            graphs: vec!["VGG16_256_224_224_3_train_nx.json".into()],
            budget_fractions: vec![0.9],
            smallest_budget: false,
            smallest_budget_time_limit_s: 10.0,
            generated: Vec::new(),
            milp_max_nodes: 80,
            staged_max_stages: crate::remat::staged::DEFAULT_MAX_STAGES,
            refine_max_nodes: 300,
            coarse_share: 0.4,
            staged_max_computations: None,
            staged_time_limit_s: 10.0,
            classic_lp_max_nodes: 100,
            time_limit_s: 10.0,
            mip_gap: 0.05,
            threads: 2,
            heuristic_effort: 0.3,
            greedy_thresholds: 4,
            rounding_thresholds: vec![0.5],
            lp_tighten: vec![0.9, 0.8],
            batch_graph: Some("VGG16_256_224_224_3_train_nx.json".into()),
            batch_graph_batch: 256,
            batch_memory_bytes: 16 * (1 << 30),
            batch_max: 512,
            batch_time_limit_s: 2.0,
            batch_nets: Vec::new(),
            nets: Vec::new(),
            nets_time_limit_s: 60.0,
        }
    }
}

/// A random layered graph generated for the study ([`random_layered`]); the field names are
/// the shared files' name parts.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GeneratedGraph {
    /// Number of nodes, source and sink included.
    pub n: usize,
    /// Width parameter (mean layer width `2 w sqrt(n)` nodes).
    pub w: f64,
    /// Relative variation of the layer width, in [0, 1].
    pub nlv: f64,
    /// Edge probability between consecutive layers, in [0, 1].
    pub ed: f64,
    /// Skip-connection probability per node, in [0, 1].
    pub scd: f64,
    /// Generator seed.
    pub seed: u64,
}

impl GeneratedGraph {
    /// The generator's parameters.
    pub fn params(&self) -> LayeredParams {
        LayeredParams {
            n: self.n,
            width: self.w,
            width_variation: self.nlv,
            edge_density: self.ed,
            skip_density: self.scd,
            seed: self.seed,
        }
    }
}

/// Longest time limit of one solve, seconds (a day).
const MAX_TIME_LIMIT_S: f64 = 86_400.0;

/// Checks `p`'s ranges before anything is read or solved: graph names non-empty; 1 to 16
/// budget fractions in (0, 1]; generated graphs of 3..=5000 nodes with `w` in (0, 10] and
/// `nlv`, `ed`, `scd` in [0, 1]; node and stage limits of 1 or more; `coarse_share`,
/// `heuristic_effort` and `mip_gap` in [0, 1]; time limits in (0, 86400] s; 1..=1024 threads;
/// 1..=10000 greedy thresholds; rounding thresholds and tightening factors in (0, 1); a batch
/// search with batches 1..=2^20 and a positive memory.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &CheckmateParams) -> Result<(), ParamError> {
    require(
        !p.graphs.is_empty() || !p.generated.is_empty(),
        "graphs",
        || "and `generated` are both empty: name at least one graph".into(),
    )?;
    list("graphs", &p.graphs, 0, 1000, |f, g| {
        require(!g.trim().is_empty(), f, || {
            "must name a file in the shared data's remat-graphs folder".into()
        })
    })?;
    list("budget_fractions", &p.budget_fractions, 1, 16, |f, &b| {
        num_above(f, b, 0.0, 1.0)
    })?;
    list("generated", &p.generated, 0, 64, |f, g| {
        int_in(&format!("{f}.n"), g.n, 3, 5000)?;
        num_above(&format!("{f}.w"), g.w, 0.0, 10.0)?;
        num_in(&format!("{f}.nlv"), g.nlv, 0.0, 1.0)?;
        num_in(&format!("{f}.ed"), g.ed, 0.0, 1.0)?;
        num_in(&format!("{f}.scd"), g.scd, 0.0, 1.0)
    })?;
    int_in("milp_max_nodes", p.milp_max_nodes, 1, 100_000)?;
    int_in("staged_max_stages", p.staged_max_stages, 1, 100_000)?;
    int_in("refine_max_nodes", p.refine_max_nodes, 0, 100_000)?;
    num_in("coarse_share", p.coarse_share, 0.0, 1.0)?;
    if let Some(c) = p.staged_max_computations {
        int_in("staged_max_computations", c, 1, 1000)?;
    }
    num_above(
        "staged_time_limit_s",
        p.staged_time_limit_s,
        0.0,
        MAX_TIME_LIMIT_S,
    )?;
    int_in("classic_lp_max_nodes", p.classic_lp_max_nodes, 0, 100_000)?;
    num_above("time_limit_s", p.time_limit_s, 0.0, MAX_TIME_LIMIT_S)?;
    num_above(
        "smallest_budget_time_limit_s",
        p.smallest_budget_time_limit_s,
        0.0,
        MAX_TIME_LIMIT_S,
    )?;
    num_in("mip_gap", p.mip_gap, 0.0, 1.0)?;
    int_in("threads", p.threads, 1, 1024)?;
    num_in("heuristic_effort", p.heuristic_effort, 0.0, 1.0)?;
    int_in("greedy_thresholds", p.greedy_thresholds, 1, 10_000)?;
    list(
        "rounding_thresholds",
        &p.rounding_thresholds,
        1,
        64,
        |f, &t| num_between(f, t, 0.0, 1.0),
    )?;
    list("lp_tighten", &p.lp_tighten, 0, 64, |f, &t| {
        num_between(f, t, 0.0, 1.0)
    })?;
    if let Some(g) = &p.batch_graph {
        require(!g.trim().is_empty(), "batch_graph", || {
            "must name a file in remat-graphs (or be left out to skip the batch search)".into()
        })?;
    }
    int_in("batch_graph_batch", p.batch_graph_batch, 1, 1 << 20)?;
    int_in("batch_memory_bytes", p.batch_memory_bytes, 1, 1 << 50)?;
    int_in("batch_max", p.batch_max, 1, 1 << 20)?;
    num_above(
        "batch_time_limit_s",
        p.batch_time_limit_s,
        0.0,
        MAX_TIME_LIMIT_S,
    )?;
    list("batch_nets", &p.batch_nets, 0, 16, check_net)?;
    list("nets", &p.nets, 0, 16, |f, n| {
        check_net(f, n)?;
        require(n.divisions() == 1, &format!("{f}.divisions"), || {
            "only the batch search (`batch_nets`) searches in steps of a sample: remove \
             `divisions` from a network of the budget sweep"
                .into()
        })
    })?;
    num_above(
        "nets_time_limit_s",
        p.nets_time_limit_s,
        0.0,
        MAX_TIME_LIMIT_S,
    )
}

/// A built network's ranges: a ResNet of 1 to 4 stages of 1..=64 units, images of 1..=4096
/// pixels; a chain of 1..=10000 blocks of 1 byte or more; batches 1..=2^20.
fn check_net(f: &str, n: &BuiltNet) -> Result<(), ParamError> {
    match n {
        BuiltNet::Resnet {
            units,
            image,
            batch,
        } => {
            list(&format!("{f}.units"), units, 1, 4, |f, &u| {
                int_in(f, u, 1, 64)
            })?;
            int_in(&format!("{f}.image"), *image, 1, 4096)?;
            int_in(&format!("{f}.batch"), *batch, 1, 1 << 20)
        }
        BuiltNet::TransformerChain {
            layers,
            activation_bytes,
            head_bytes,
            batch,
            source,
            divisions,
        } => {
            int_in(&format!("{f}.divisions"), *divisions, 1, 1024)?;
            int_in(&format!("{f}.layers"), *layers, 1, 10_000)?;
            int_in(
                &format!("{f}.activation_bytes"),
                *activation_bytes,
                1,
                1 << 50,
            )?;
            int_in(&format!("{f}.head_bytes"), *head_bytes, 1, 1 << 50)?;
            int_in(&format!("{f}.batch"), *batch, 1, 1 << 20)?;
            require(!source.trim().is_empty(), &format!("{f}.source"), || {
                "must say where the block sizes come from (a record, a formula)".into()
            })
        }
    }
}

/// The Checkmate study's `[params.cited]`: the paper's numbers its report quotes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckmateCited {
    /// Jain et al. 2020 (arXiv:1910.02653), Fig. 6: VGG19's largest batch size at 16 GB.
    pub fig6_vgg19_max_batch: Fig6Batch,
}

/// VGG19's largest batch size per strategy at 16 GB, Jain et al. 2020, Fig. 6.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fig6Batch {
    /// Checkpoint all.
    pub checkpoint_all: u32,
    /// Chen et al.'s sqrt(n).
    pub chen_sqrt: u32,
    /// Chen et al.'s greedy.
    pub chen_greedy: u32,
    /// Checkmate's MILP.
    pub checkmate_milp: u32,
}
