//! The Checkmate study: compute overhead vs memory budget, maximum batch size at a fixed
//! memory, and MILP solve times and gaps, after the experiments of Jain et al., "Checkmate:
//! Breaking the Memory Wall with Optimal Tensor Rematerialization" (MLSys 2020,
//! arXiv:1910.02653, Sections 6.2–6.4). The study's source document (`001_68b9d43f3f694e7a.txt`)
//! is a reader's notes on that paper: the paper's figures and numbers are credited to the paper.
//!
//! [`run_study`] simulates the baselines and runs the solvers (MILP, LP relaxation with
//! rounding) and returns a [`CheckmateResult`]: each solve's status, cost, peak bytes and wall
//! time. [`render`] presents a result as the study's three sections.
//!
//! May import: `memwall-remat` (through [`crate::remat`]), the report model
//! ([`crate::report::model`]) and the study trait ([`crate::demos::InProcessStudy`]).

use super::baselines::{checkpoint_all, chen_greedy, chen_sqrt, greedy_thresholds, revolve};
use super::boundary::{boundary_bound, BoundaryOutcome};
use super::graph::Graph;
use super::layered::{random_layered, LayeredParams};
use super::milp::{solve_lp_rounding, solve_milp, LpOutcome, MilpOptions, MilpOutcome};
use super::sim::{simulate, Schedule, SimResult};
use super::staged::{default_stage_size, solve_refined, StagedOptions, StagedOutcome};
use super::{RematError, SolveStatus};
use crate::demos::params::{int_in, list, num_above, num_between, num_in, require};
use crate::demos::{InProcessStudy, ParamError};
use crate::report::model::{Figure, Mark, Measure, Section, Series, Table};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Parameters of [`run_study`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CheckmateParams {
    /// Graph files for the overhead and solve-time sections, relative to
    /// `<data_dir>/remat-graphs` (networkx node-link JSON, either schema).
    pub graphs: Vec<String>,
    /// Memory budgets as fractions of each graph's checkpoint-all peak memory.
    pub budget_fractions: Vec<f64>,
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
    /// HiGHS time limit per MILP solve inside the batch-size bisection, seconds.
    pub batch_time_limit_s: f64,
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
            budget_fractions: vec![0.8, 0.9],
            generated: Vec::new(),
            milp_max_nodes: 80,
            staged_max_stages: super::staged::DEFAULT_MAX_STAGES,
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
        }
    }
}

impl CheckmateParams {
    /// A seconds-long configuration for tests: VGG16 only, one budget, short limits.
    pub fn smoke() -> Self {
        CheckmateParams {
            graphs: vec!["VGG16_256_224_224_3_train_nx.json".into()],
            budget_fractions: vec![0.9],
            generated: Vec::new(),
            milp_max_nodes: 80,
            staged_max_stages: super::staged::DEFAULT_MAX_STAGES,
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

/// One solve of the scalable staged MILP (`memwall_remat::staged`): Checkmate's formulation
/// with a tight `FREE` linearization, `stage_size` nodes per stage and optionally bounded
/// recomputation, warm-started by greedy eviction and repaired LP rounding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedSolve {
    /// Nodes per stage (1: Checkmate's stages; more: a restricted schedule space).
    pub stage_size: usize,
    /// Bound on computations per node (`None`: unbounded).
    pub max_computations: Option<u32>,
    /// HiGHS model status, or the bound that settled the solve (e.g.
    /// [`SolveStatus::InfeasibleWorkingSet`], [`SolveStatus::OptimalBoundaryRelaxation`]).
    pub status: SolveStatus,
    /// Wall time of heuristics, LP relaxation, model build and MILP, seconds.
    pub solve_time_s: f64,
    /// Columns of the MILP.
    pub columns: usize,
    /// Integer columns of the MILP.
    pub integer_columns: usize,
    /// Rows of the MILP.
    pub rows: usize,
    /// The best heuristic warm start, validated by the simulator.
    pub heuristic: Option<ScheduleStats>,
    /// The schedule simulated annealing reached from the best heuristic one
    /// ([`memwall_remat::anneal`]), validated by the simulator (`None`: not run, e.g. when the
    /// boundary relaxation ended the solve).
    #[serde(default)]
    pub annealed: Option<ScheduleStats>,
    /// The best schedule found (MILP incumbent or warm start), validated by the simulator.
    pub best: Option<ScheduleStats>,
    /// HiGHS' dual bound for the model solved (for the restricted problem when
    /// `stage_size > 1` or computations are bounded), cost units.
    #[serde(with = "memwall_core::record::nonfinite")]
    pub model_dual_bound: f64,
    /// HiGHS' relative gap for the model solved, a fraction.
    #[serde(with = "memwall_core::record::nonfinite")]
    pub model_gap: f64,
    /// LP relaxation of the model solved, cost units.
    pub model_lp_bound: Option<f64>,
    /// LP relaxation of the unrestricted tight model (a lower bound on Checkmate's optimum),
    /// cost units, when the model solved is unrestricted and its LP was solved first (`None`
    /// otherwise).
    pub checkmate_lp_bound: Option<f64>,
    /// The boundary-memory relaxation's LP bound with its closure cuts (a lower bound on
    /// Checkmate's optimum), cost units (`None`: not solved in its time share).
    #[serde(default)]
    pub cut_lp_bound: Option<f64>,
    /// A lower bound valid for Checkmate's unrestricted problem, cost units: the largest of
    /// `sum_i C_i`, the boundary-memory relaxation's bound
    /// ([`memwall_remat::boundary::boundary_bound`]) and, for an unrestricted model, its LP
    /// bound and HiGHS' dual bound.
    #[serde(with = "memwall_core::record::nonfinite")]
    pub valid_bound: f64,
}

impl StagedSolve {
    fn new(o: &StagedOutcome, max_computations: Option<u32>) -> Self {
        let unrestricted = o.stage_size == 1 && max_computations.is_none();
        let checkmate_lp_bound = if unrestricted { o.lp_bound } else { None };
        let valid_bound = o.valid_bound;
        Self {
            stage_size: o.stage_size,
            max_computations,
            status: o.status.clone(),
            solve_time_s: o.solve_time_s,
            columns: o.size.columns,
            integer_columns: o.size.integer_columns,
            rows: o.size.rows,
            heuristic: o.greedy.as_ref().map(Into::into),
            annealed: o.annealed.as_ref().map(Into::into),
            best: o.best.as_ref().map(|(_, r)| r.into()),
            model_dual_bound: o.dual_bound,
            model_gap: o.mip_gap,
            model_lp_bound: o.lp_bound,
            checkmate_lp_bound,
            cut_lp_bound: o.boundary_lp_bound,
            valid_bound,
        }
    }

    /// Relative gap of `best` against `valid_bound`, a fraction (NaN without a schedule).
    pub fn valid_gap(&self) -> f64 {
        match self.best {
            Some(b) if b.cost > 0.0 => ((b.cost - self.valid_bound) / b.cost).max(0.0),
            _ => f64::NAN,
        }
    }
}

/// The baseline families, in the order of [`BudgetResult::baselines`] and
/// [`BatchResult::baselines`].
pub const BASELINES: [&str; 4] = ["checkpoint all", "Chen sqrt(n)", "Chen greedy", "revolve"];

/// All baseline schedules of one family, simulated.
fn family(g: &Graph, name: &str, greedy_count: usize) -> Vec<(Schedule, SimResult)> {
    let scheds: Vec<Schedule> = match name {
        "checkpoint all" => vec![checkpoint_all(g)],
        "Chen sqrt(n)" => vec![chen_sqrt(g)],
        "Chen greedy" => greedy_thresholds(g, greedy_count)
            .into_iter()
            .map(|t| chen_greedy(g, t))
            .collect(),
        _ => (0..=g.forward_nodes().len())
            .map(|s| revolve(g, s))
            .collect(),
    };
    scheds
        .into_iter()
        .map(|s| {
            let r = simulate(g, &s).expect("baseline schedules are valid by construction");
            (s, r)
        })
        .collect()
}

fn best_within(
    f: &[(Schedule, SimResult)],
    budget: u64,
    max_cost: f64,
) -> Option<&(Schedule, SimResult)> {
    f.iter()
        .filter(|(_, r)| r.peak_mem <= budget && r.cost <= max_cost + 1e-9)
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
}

/// The figures' budget axis for a graph whose checkpoint-all peak is `peak` bytes: the
/// decimal unit (GB, MB, kB or bytes) in which the peak reads at least 1, as (divisor, axis
/// label). The Checkmate graphs' budgets are gigabytes; the random layered graphs' are tens of
/// thousands of their units, which on a GB axis all printed as the same tick.
fn budget_axis(peak: u64) -> (f64, &'static str) {
    [
        (1e9, "memory budget (GB)"),
        (1e6, "memory budget (MB)"),
        (1e3, "memory budget (kB)"),
    ]
    .into_iter()
    .find(|(d, _)| peak as f64 >= *d)
    .unwrap_or((1.0, "memory budget (bytes)"))
}

/// Cost and peak memory of one schedule, as the simulator measured it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScheduleStats {
    /// Total compute cost (Jain et al. 2020, eq. 1a), in the graph's cost units.
    pub cost: f64,
    /// Peak memory over all stages, bytes (graph memory units), fixed memory included.
    pub peak_bytes: u64,
    /// Node evaluations beyond the first of each node.
    pub recomputations: usize,
}

impl From<&SimResult> for ScheduleStats {
    fn from(r: &SimResult) -> Self {
        Self {
            cost: r.cost,
            peak_bytes: r.peak_mem,
            recomputations: r.recomputations,
        }
    }
}

/// One MILP solve (HiGHS).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MilpSolve {
    /// HiGHS model status, e.g. [`SolveStatus::Optimal`], [`SolveStatus::ReachedTimeLimit`], or
    /// [`SolveStatus::InfeasibleWorkingSet`] when the budget is below the largest single-op
    /// working set (HiGHS not called).
    pub status: SolveStatus,
    /// Wall time of model build + solve, seconds.
    pub solve_time_s: f64,
    /// The best schedule found, validated by the simulator.
    pub best: Option<ScheduleStats>,
    /// Objective of HiGHS' incumbent, cost units.
    pub objective: Option<f64>,
    /// HiGHS' proven lower bound on the optimal cost, cost units (infinite when HiGHS was not
    /// called, NaN when it reported none; stored as text in JSON when not finite).
    #[serde(with = "memwall_core::record::nonfinite")]
    pub dual_bound: f64,
    /// Relative gap `(objective - dual_bound) / objective` reported by HiGHS, a fraction (not
    /// finite when there is no incumbent; stored as text in JSON then).
    #[serde(with = "memwall_core::record::nonfinite")]
    pub mip_gap: f64,
}

impl From<&MilpOutcome> for MilpSolve {
    fn from(m: &MilpOutcome) -> Self {
        Self {
            status: m.status.clone(),
            solve_time_s: m.solve_time_s,
            best: m.best.as_ref().map(|(_, r)| r.into()),
            objective: m.objective,
            dual_bound: m.dual_bound,
            mip_gap: m.mip_gap,
        }
    }
}

/// The boundary-memory relaxation at one budget (`memwall_remat::boundary`, ours): its bound
/// on Checkmate's optimum and, when its pruned schedule fits the budget, that schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundarySolve {
    /// HiGHS status of its last round, or [`SolveStatus::InfeasibleWorkingSet`].
    pub status: SolveStatus,
    /// Lower bound on Checkmate's optimal cost, cost units (infinite: infeasible budget).
    #[serde(with = "memwall_core::record::nonfinite")]
    pub bound: f64,
    /// Its schedule when it fits the budget (then within the gap of `bound`: optimal when
    /// its cost equals `bound`).
    pub fitting: Option<ScheduleStats>,
    /// Rounds of row generation.
    pub rounds: usize,
    /// Closure cuts added by separation on its LP (`memwall_remat::boundary`).
    #[serde(default)]
    pub cuts: usize,
    /// Its LP bound with those cuts, cost units (`None`: the LP was not solved in time).
    #[serde(default)]
    pub cut_lp_bound: Option<f64>,
    /// Wall time, seconds.
    pub solve_time_s: f64,
}

impl BoundarySolve {
    fn new(g: &Graph, o: &BoundaryOutcome) -> Self {
        let fitting = o
            .schedule
            .as_ref()
            .filter(|_| o.fits)
            .and_then(|s| simulate(g, s).ok())
            .map(|r| (&r).into());
        Self {
            status: o.status.clone(),
            bound: o.bound,
            fitting,
            rounds: o.rounds,
            cuts: o.cuts,
            cut_lp_bound: o.lp_bound,
            solve_time_s: o.solve_time_s,
        }
    }
}

/// The LP relaxation with two-phase rounding at one budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LpSolve {
    /// Optimal LP objective, a lower bound on the MILP optimum, cost units (`None`: the LP is
    /// infeasible at this budget).
    pub lp_bound: Option<f64>,
    /// The best rounded schedule that fits the budget (`None`: no rounding fits).
    pub rounded: Option<ScheduleStats>,
    /// The `S` threshold of that rounding, in (0, 1).
    pub rounding_threshold: Option<f64>,
    /// Wall time of the LP solves and roundings, seconds.
    pub solve_time_s: f64,
}

impl From<&LpOutcome> for LpSolve {
    fn from(lp: &LpOutcome) -> Self {
        Self {
            lp_bound: lp.lp_bound,
            rounded: lp.rounded.as_ref().map(|(_, r, _)| r.into()),
            rounding_threshold: lp.rounded.as_ref().map(|(_, _, t)| *t),
            solve_time_s: lp.solve_time_s,
        }
    }
}

/// Every strategy at one memory budget of one graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetResult {
    /// The budget as a fraction of the graph's checkpoint-all peak.
    pub fraction: f64,
    /// The budget, bytes (graph memory units): `floor(peak * fraction)`.
    pub budget_bytes: u64,
    /// The cheapest fitting schedule of each baseline family, in the order of [`BASELINES`]
    /// (`None`: no schedule of the family fits).
    pub baselines: Vec<Option<ScheduleStats>>,
    /// The MILP solve (`None`: the graph has more than `milp_max_nodes` nodes).
    pub milp: Option<MilpSolve>,
    /// The staged MILP solve (graphs with more than `milp_max_nodes` nodes).
    #[serde(default)]
    pub staged: Option<StagedSolve>,
    /// Its refinement with one node per stage (graphs up to `refine_max_nodes` nodes).
    #[serde(default)]
    pub refined: Option<StagedSolve>,
    /// The boundary-memory relaxation beside Checkmate's MILP (graphs solved by the MILP;
    /// the staged MILP runs it inside).
    #[serde(default)]
    pub boundary: Option<BoundarySolve>,
    /// The LP relaxation with rounding (empty for graphs above `classic_lp_max_nodes`).
    pub lp: LpSolve,
}

/// One graph of the overhead and solve-time sections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphResult {
    /// The graph's name (from its file).
    pub name: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Compute cost of one plain forward+backward pass, cost units (overheads divide by it).
    pub forward_backward_cost: f64,
    /// Peak memory of the checkpoint-all schedule, bytes (graph memory units).
    pub checkpoint_all_peak_bytes: u64,
    /// One entry per budget fraction, in the order of the parameters.
    pub budgets: Vec<BudgetResult>,
}

/// One MILP solve of the batch-size bisection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchProbe {
    /// The batch size tried.
    pub batch: u32,
    /// The solve at the fixed memory, with the compute limit as cost cutoff.
    pub milp: MilpSolve,
    /// Whether it found a schedule within the compute limit.
    pub fits: bool,
}

/// The maximum-batch-size search on the batch graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResult {
    /// The graph's name (from its file).
    pub graph: String,
    /// Compute limit, cost units at the profiled batch size: one forward+backward plus one
    /// forward.
    pub compute_limit: f64,
    /// Largest batch size of each baseline family, in the order of [`BASELINES`] (0: none).
    pub baselines: Vec<u32>,
    /// Largest batch size of the Checkmate MILP.
    pub milp: u32,
    /// Batch size above which the largest single-op working set alone exceeds the memory.
    pub working_set_cap: u32,
    /// The MILP solves of the bisection, in the order they ran.
    pub milp_probes: Vec<BatchProbe>,
}

/// The result of the Checkmate study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckmateResult {
    /// The parameters it ran with.
    pub params: CheckmateParams,
    /// One entry per graph of `params.graphs`, in that order.
    pub graphs: Vec<GraphResult>,
    /// The batch-size search (`None` when `params.batch_graph` is `None`).
    pub batch: Option<BatchResult>,
}

/// The Checkmate study ([`InProcessStudy`]).
pub struct Checkmate;

impl InProcessStudy for Checkmate {
    type Params = CheckmateParams;
    type Output = CheckmateResult;
    type Error = RematError;
    fn validate(params: &CheckmateParams) -> Result<(), ParamError> {
        validate(params)
    }
    fn run(params: &CheckmateParams, data_dir: &Path) -> Result<CheckmateResult, RematError> {
        run_study(params, data_dir)
    }
    fn render(output: &CheckmateResult) -> Vec<Section> {
        render(output)
    }
    fn measures(output: &CheckmateResult) -> Vec<Measure> {
        measures(output)
    }
    fn tracked(output: &CheckmateResult) -> Vec<crate::demos::Tracked> {
        tracked(output)
    }
}

/// The numbers the nightly run tracks ([`crate::demos::Tracked`]) per graph and budget: the
/// wall time of the solve that answers it (the MILP, or the staged MILP with its refinement)
/// and the cost of the best schedule it found (none when no schedule fits).
pub fn tracked(r: &CheckmateResult) -> Vec<crate::demos::Tracked> {
    use crate::demos::{Tracked, TrackedKind};
    let mut out = Vec::new();
    for (g, b) in budgets(r) {
        let case = format!("{} at budget {}", g.name, b.fraction);
        if let Some((time, _)) = solve_outcome(b, r.params.mip_gap) {
            out.push(Tracked {
                case: case.clone(),
                kind: TrackedKind::SolveTime,
                value: time,
            });
        }
        if let Some(cost) = milp_cost(b) {
            out.push(Tracked {
                case,
                kind: TrackedKind::ScheduleCost,
                value: cost,
            });
        }
    }
    out
}

/// Budget fractions at or below this reduce memory at least 2x against checkpoint-all (the
/// notes' "2-3x memory reduction").
const TWO_X_FRACTION: f64 = 0.5;

/// Graphs of at least this many nodes answer the notes' "Networks with 100+ layers".
const LARGE_GRAPH_NODES: usize = 100;

/// Wall time of the solve of one (graph, budget) and whether it reached the target: the MILP's
/// status "Optimal" (HiGHS stops at the target gap) or a proven infeasible budget; for the
/// staged MILP (grouped solve plus its refinement) a best schedule within `gap` of the bound
/// valid for Checkmate's problem, or an infeasible budget. `None` without a solve.
fn solve_outcome(b: &BudgetResult, gap: f64) -> Option<(f64, bool)> {
    if let Some(m) = &b.milp {
        let done = m.status == SolveStatus::Optimal || m.status.is_infeasible();
        return Some((m.solve_time_s, done));
    }
    let coarse = b.staged.as_ref()?;
    let last = b.refined.as_ref().unwrap_or(coarse);
    let time = coarse.solve_time_s + b.refined.as_ref().map_or(0.0, |f| f.solve_time_s);
    let done =
        last.status.is_infeasible() || (last.best.is_some() && last.valid_gap() <= gap + 1e-9);
    Some((time, done))
}

/// The largest of `xs`, NaN when empty.
fn max_of(xs: impl Iterator<Item = f64>) -> f64 {
    xs.fold(f64::NAN, f64::max)
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only (NaN where the run has nothing to answer with):
///
/// - `milp_overhead_pct_at_2x_reduction` (%): the largest compute overhead of the MILP's
///   schedule (its cost over one plain forward+backward, minus 1, x 100) at budgets of at most
///   half the checkpoint-all peak; NaN when the run has no such budget with a schedule (the
///   default budgets are 0.8 and 0.9).
/// - `lp_rounding_max_excess_pct` (%): the largest excess cost of the LP-rounded schedule over
///   the MILP's (cost ratio minus 1, x 100) where both exist.
/// - `max_solve_s_100_plus_nodes` (s): the longest solve of a graph of at least 100 nodes
///   (forward and backward), when every such solve reached its target ([`solve_outcome`]);
///   NaN when one did not or there is no such graph.
/// - `max_milp_solve_s` (s): the longest solve of Checkmate's MILP.
/// - `max_batch_milp_over_checkpoint_all` (x): the batch search's largest MILP batch over
///   checkpoint-all's.
pub fn measures(r: &CheckmateResult) -> Vec<Measure> {
    let overhead_2x = max_of(
        budgets(r)
            .filter(|(_, b)| b.fraction <= TWO_X_FRACTION + 1e-12)
            .filter_map(|(g, b)| Some((milp_cost(b)? / g.forward_backward_cost - 1.0) * 100.0)),
    );
    let lp_excess = max_of(budgets(r).filter_map(|(_, b)| {
        let m = milp_cost(b).filter(|m| *m > 0.0)?;
        Some((b.lp.rounded?.cost / m - 1.0) * 100.0)
    }));
    let large: Vec<(f64, bool)> = budgets(r)
        .filter(|(g, _)| g.nodes >= LARGE_GRAPH_NODES)
        .filter_map(|(_, b)| solve_outcome(b, r.params.mip_gap))
        .collect();
    let large_solve = if large.iter().all(|(_, done)| *done) {
        max_of(large.iter().map(|(t, _)| *t))
    } else {
        f64::NAN
    };
    let milp_time = max_of(budgets(r).filter_map(|(_, b)| b.milp.as_ref().map(|m| m.solve_time_s)));
    let batch = r
        .batch
        .as_ref()
        .map_or(f64::NAN, |b| match b.baselines.first() {
            Some(&all) if all > 0 => f64::from(b.milp) / f64::from(all),
            _ => f64::NAN,
        });
    vec![
        Measure::new("milp_overhead_pct_at_2x_reduction", overhead_2x, "%", 1),
        Measure::new("lp_rounding_max_excess_pct", lp_excess, "%", 2),
        Measure::new("max_solve_s_100_plus_nodes", large_solve, "s", 1),
        Measure::new("max_milp_solve_s", milp_time, "s", 1),
        Measure::new("max_batch_milp_over_checkpoint_all", batch, "x", 2),
    ]
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
    )
}

/// Runs the study: for every graph and budget, the baselines, the LP relaxation with rounding
/// and the MILP; then the batch-size search. Graph files are read from
/// `<data_dir>/remat-graphs`.
///
/// # Errors
/// [`RematError::Params`] for budget fractions outside (0, 1]; a graph file that cannot be read
/// or parsed; a solver failure.
pub fn run_study(params: &CheckmateParams, data_dir: &Path) -> Result<CheckmateResult, RematError> {
    validate(params).map_err(|e| RematError::Params(e.to_string()))?;
    if params
        .budget_fractions
        .iter()
        .any(|f| !(*f > 0.0 && *f <= 1.0))
    {
        return Err(RematError::Params(
            "budget fractions must be in (0, 1]".into(),
        ));
    }
    let dir = data_dir.join("remat-graphs");
    let opts = MilpOptions {
        time_limit_s: params.time_limit_s,
        mip_gap: params.mip_gap,
        threads: params.threads,
        warm_start: None,
        heuristic_effort: params.heuristic_effort,
        cost_cutoff: None,
    };
    let mut graphs = params
        .graphs
        .iter()
        .map(|file| measure_graph(&Graph::read_node_link(&dir.join(file))?, params, &opts))
        .collect::<Result<Vec<_>, RematError>>()?;
    for gen in &params.generated {
        graphs.push(measure_graph(
            &random_layered(&gen.params())?,
            params,
            &opts,
        )?);
    }
    let batch = match &params.batch_graph {
        Some(bg) => Some(measure_batch(params, &dir.join(bg), &opts)?),
        None => None,
    };
    Ok(CheckmateResult {
        params: params.clone(),
        graphs,
        batch,
    })
}

/// Every budget fraction of `params` on graph `g`.
fn measure_graph(
    g: &Graph,
    params: &CheckmateParams,
    opts: &MilpOptions,
) -> Result<GraphResult, RematError> {
    let fams: Vec<Vec<(Schedule, SimResult)>> = BASELINES
        .iter()
        .map(|b| family(g, b, params.greedy_thresholds))
        .collect();
    let all_peak = fams[0][0].1.peak_mem;
    let budgets = params
        .budget_fractions
        .iter()
        .map(|&frac| {
            let budget = (all_peak as f64 * frac).floor() as u64;
            measure_budget(g, &fams, frac, budget, params, opts)
        })
        .collect::<Result<Vec<_>, RematError>>()?;
    Ok(GraphResult {
        name: g.name.clone(),
        nodes: g.len(),
        forward_backward_cost: g.total_cost(),
        checkpoint_all_peak_bytes: all_peak,
        budgets,
    })
}

/// The baselines' cheapest fitting schedules, the LP relaxation with rounding and (for graphs
/// of at most `milp_max_nodes` nodes) the MILP, warm-started from the cheapest fitting
/// baseline or rounded schedule, at one budget.
fn measure_budget(
    g: &Graph,
    fams: &[Vec<(Schedule, SimResult)>],
    frac: f64,
    budget: u64,
    params: &CheckmateParams,
    opts: &MilpOptions,
) -> Result<BudgetResult, RematError> {
    let baselines = fams
        .iter()
        .map(|f| best_within(f, budget, f64::INFINITY).map(|x| (&x.1).into()))
        .collect();
    let lp = if g.len() <= params.classic_lp_max_nodes {
        solve_lp_rounding(
            g,
            budget,
            opts,
            &params.rounding_thresholds,
            &params.lp_tighten,
        )?
    } else {
        LpOutcome {
            lp_bound: None,
            rounded: None,
            solve_time_s: 0.0,
        }
    };
    // Warm start: the cheapest fitting baseline or LP-rounded schedule.
    let warm = fams
        .iter()
        .filter_map(|f| best_within(f, budget, f64::INFINITY).cloned())
        .chain(lp.rounded.as_ref().map(|(s, r, _)| (s.clone(), *r)))
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
        .map(|x| x.0);
    let (milp, staged, refined, boundary) = if g.len() <= params.milp_max_nodes {
        let o = MilpOptions {
            warm_start: warm,
            ..opts.clone()
        };
        let relax = boundary_bound(g, budget, &o)?;
        tracing::info!(graph = %g.name, frac, status = %relax.status, time_s = relax.solve_time_s, "boundary relaxation");
        let out = solve_milp(g, budget, &o)?;
        tracing::info!(graph = %g.name, frac, status = %out.status, time_s = out.solve_time_s, "checkmate milp");
        (
            Some((&out).into()),
            None,
            None,
            Some(BoundarySolve::new(g, &relax)),
        )
    } else {
        let (c, f) = measure_staged(g, budget, warm, params, opts)?;
        (None, Some(c), f, None)
    };
    Ok(BudgetResult {
        fraction: frac,
        budget_bytes: budget,
        baselines,
        milp,
        staged,
        refined,
        boundary,
        lp: (&lp).into(),
    })
}

/// The staged MILP at one budget (stage size `ceil(n / staged_max_stages)`) and, for graphs
/// up to `refine_max_nodes` nodes, its refinement with one node per stage.
fn measure_staged(
    g: &Graph,
    budget: u64,
    warm: Option<Schedule>,
    params: &CheckmateParams,
    opts: &MilpOptions,
) -> Result<(StagedSolve, Option<StagedSolve>), RematError> {
    let stage_size = default_stage_size(g, budget, params.staged_max_stages);
    let so = StagedOptions {
        milp: MilpOptions {
            time_limit_s: params.staged_time_limit_s,
            warm_start: warm,
            ..opts.clone()
        },
        stage_size,
        max_computations: params.staged_max_computations,
        stop_at_first: false,
        lp_rounding: true,
        boundary: true,
        anneal: true,
        start: None,
    };
    let refine = g.len() <= params.refine_max_nodes;
    let (coarse, fine) = solve_refined(g, budget, &so, params.coarse_share, refine)?;
    let c = StagedSolve::new(&coarse, params.staged_max_computations);
    let f = fine.as_ref().map(|f| StagedSolve::new(f, None));
    tracing::info!(graph = %g.name, budget, stage_size, status = %c.status, time_s = c.solve_time_s,
        refined = ?f.as_ref().map(|f| (f.status.as_str(), f.solve_time_s)), "staged milp");
    Ok((c, f))
}

/// The study's sections: compute overhead vs budget, MILP solve times and gaps, and (when the
/// batch search ran) the maximum batch size.
pub fn render(r: &CheckmateResult) -> Vec<Section> {
    let mut sections = vec![overhead_section(r), solve_section(r)];
    if let Some(b) = &r.batch {
        sections.push(batch_section(&r.params, b));
    }
    sections
}

/// Every (graph, budget) pair, graphs in order.
fn budgets(r: &CheckmateResult) -> impl Iterator<Item = (&GraphResult, &BudgetResult)> {
    r.graphs
        .iter()
        .flat_map(|g| g.budgets.iter().map(move |b| (g, b)))
}

/// Cost of the MILP's best schedule (Checkmate's MILP, or the staged MILP on larger graphs),
/// if it found one.
fn milp_cost(b: &BudgetResult) -> Option<f64> {
    b.milp
        .as_ref()
        .and_then(|m| m.best)
        .or_else(|| b.refined.as_ref().and_then(|m| m.best))
        .or_else(|| b.staged.as_ref().and_then(|m| m.best))
        .map(|s| s.cost)
}

/// One graph's figure: compute overhead (cost / one forward+backward) of every strategy
/// versus the budget in GB; strategies without a fitting schedule at any budget are left out.
fn overhead_figure(g: &GraphResult) -> Figure {
    let mut series: Vec<Series> = BASELINES
        .iter()
        .chain(["Checkmate MILP", "LP + rounding"].iter())
        .map(|l| Series {
            label: l.to_string(),
            mark: Mark::Line,
            ..Default::default()
        })
        .collect();
    let base_cost = g.forward_backward_cost;
    let (unit, x_label) = budget_axis(g.checkpoint_all_peak_bytes);
    for b in &g.budgets {
        let x = b.budget_bytes as f64 / unit;
        for (k, c) in b.baselines.iter().enumerate() {
            if let Some(c) = c {
                series[k].points.push((x, c.cost / base_cost));
            }
        }
        if let Some(c) = milp_cost(b) {
            series[4].points.push((x, c / base_cost));
        }
        if let Some(c) = &b.lp.rounded {
            series[5].points.push((x, c.cost / base_cost));
        }
    }
    series.retain(|s| !s.points.is_empty());
    Figure {
        name: format!(
            "remat_overhead_{}",
            g.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        ),
        title: format!("{}: compute overhead vs memory budget", g.name),
        x_label: x_label.into(),
        y_label: "compute / one forward+backward".into(),
        series,
        ..Default::default()
    }
}

/// Slowdown of baseline `k` against the MILP over the budgets where the MILP found a
/// schedule: (ln of each cost ratio where the baseline fits, the largest ratio, the number of
/// budgets where it does not fit).
fn slowdowns(r: &CheckmateResult, k: usize) -> (Vec<f64>, f64, usize) {
    let mut logs = Vec::new();
    let mut max: f64 = 0.0;
    let mut infeasible = 0;
    for (_, b) in budgets(r) {
        let Some(m) = milp_cost(b) else {
            continue;
        };
        match b.baselines.get(k).copied().flatten() {
            Some(c) => {
                let x = c.cost / m;
                logs.push(x.ln());
                max = max.max(x);
            }
            None => infeasible += 1,
        }
    }
    (logs, max, infeasible)
}

/// The overhead table's rows (one per baseline) and the summary phrase of each.
fn slowdown_rows(r: &CheckmateResult) -> (Vec<Vec<String>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for (k, name) in BASELINES.iter().enumerate() {
        let (logs, max, infeasible) = slowdowns(r, k);
        let (geo, max) = if logs.is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            let geo = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
            (format!("{geo:.3}"), format!("{max:.3}"))
        };
        summary.push(if logs.is_empty() {
            format!("{name}: no fitting schedule at any compared budget")
        } else {
            format!(
                "{name} {geo}x over {} budget(s) (no fitting schedule at {infeasible})",
                logs.len()
            )
        });
        rows.push(vec![
            name.to_string(),
            logs.len().to_string(),
            geo,
            max,
            infeasible.to_string(),
        ]);
    }
    (rows, summary)
}

/// The notes' optimality claim (the paper's Section 6.2 comparison) beside the baselines'
/// slowdown against the MILP, with one overhead figure per graph.
fn overhead_section(r: &CheckmateResult) -> Section {
    let (rows, summary) = slowdown_rows(r);
    let table = Table {
        caption: "Slowdown of each baseline relative to the Checkmate MILP schedule (cost ratio), over the \
                  budgets where both have a schedule"
            .into(),
        columns: vec!["baseline".into(), "budgets compared".into(), "geo-mean slowdown".into(), "max slowdown".into(), "budgets infeasible for baseline".into()],
        rows,
        notes: Vec::new(),
    };
    let staged: Vec<String> = budgets(r)
        .filter(|(_, b)| b.staged.is_some())
        .map(|(g, _)| format!("{} (n = {})", g.name, g.nodes))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut notes = vec![
        "Budgets are fractions of each graph's checkpoint-all peak, in bytes of activations; the fixed part \
         (parameters, gradients) is 0 for the Checkmate graphs and the sum of `param_cost` for the random \
         layered graphs. Overhead is total compute cost divided by one plain forward+backward pass. Every \
         schedule was validated by the simulator (Jain et al. 2020, eq. 1b–1e, 8) and its peak computed with \
         the paper's memory accounting (eq. 2–4)."
            .into(),
        "Baselines with a parameter (greedy thresholds, revolve slots) show, at each budget, their \
         cheapest schedule that fits. The MILP is warm-started from the cheapest fitting baseline or \
         LP-rounded schedule (HiGHS `setSolution`)."
            .into(),
    ];
    if !staged.is_empty() {
        notes.push(format!(
            "Graphs above {} nodes get the scalable staged MILP instead of Checkmate's (see the solve section; \
             its schedules are not all proven optimal): {}.",
            r.params.milp_max_nodes,
            staged.join(", ")
        ));
    }
    Section {
        details: None,
        title: "Checkmate: compute overhead vs memory budget".into(),
        claim: "`001_68b9d43f3f694e7a.txt` (a reader's notes on Checkmate, Jain et al., MLSys 2020): of prior \
                checkpointing heuristics, \"These methods are not optimal\"; Checkmate's MILP aims at \"Optimality: \
                Find provably best solutions when possible\". The comparison at equal memory budgets against \
                checkpoint-all, Chen et al.'s sqrt(n) and greedy heuristics and revolve (Griewank and Walther 2000) \
                is the paper's (Jain et al. 2020, arXiv:1910.02653, Section 6.2, Fig. 5); the notes give no number \
                for it."
            .into(),
        ours: format!("Geometric-mean slowdown of the baselines against our HiGHS-solved MILP: {}.", summary.join(", ")),
        notes,
        tables: vec![table],
        figures: r.graphs.iter().map(overhead_figure).collect(),
    }
}

/// Formats a cost or bound to one decimal, "-" when absent.
fn one_decimal(x: Option<f64>) -> String {
    // From 10^7 on, 5 significant digits (the table stays within a 1280-px window).
    x.map(|v| {
        if v.is_finite() && v.abs() >= 1e7 {
            format!("{v:.4e}")
        } else {
            format!("{v:.1}")
        }
    })
    .unwrap_or_else(|| "-".into())
}

/// The solve table's row of one (graph, budget): the MILP's status, time, cost, dual bound
/// and gaps, and the LP's bound, rounded cost and time.
fn solve_row(g: &GraphResult, b: &BudgetResult) -> Vec<String> {
    let (status, time, cost, dual, gap) = match &b.milp {
        Some(m) => (
            m.status.to_string(),
            format!("{:.2}", m.solve_time_s),
            m.best.map(|x| x.cost),
            Some(m.dual_bound),
            if m.mip_gap.is_finite() {
                format!("{:.2}", m.mip_gap * 100.0)
            } else {
                "-".into()
            },
        ),
        None => (
            "staged MILP (next table)".into(),
            "-".into(),
            None,
            None,
            "-".into(),
        ),
    };
    let lp_gap = match (cost, b.lp.lp_bound) {
        (Some(c), Some(l)) if c > 0.0 => format!("{:.2}", (c - l) / c * 100.0),
        _ => "-".into(),
    };
    vec![
        short_graph_name(&g.name),
        g.nodes.to_string(),
        format!("{:.2}", b.fraction),
        crate::demos::fmt_bytes(b.budget_bytes as f64),
        status,
        time,
        one_decimal(cost),
        one_decimal(dual),
        gap,
        one_decimal(b.lp.lp_bound),
        lp_gap,
        one_decimal(b.lp.rounded.map(|x| x.cost)),
        format!("{:.2}", b.lp.solve_time_s),
    ]
}

/// The notes' solve-time claims beside every MILP and LP solve.
fn solve_section(r: &CheckmateResult) -> Section {
    let params = &r.params;
    let t = Table {
        caption: format!(
            "MILP solve (HiGHS, {} thread(s), limit {} s, target gap {:.1}%) and LP relaxation",
            params.threads,
            params.time_limit_s,
            params.mip_gap * 100.0
        ),
        columns: [
            "graph",
            "nodes",
            "budget (frac)",
            "budget",
            "MILP status",
            "MILP time (s)",
            "MILP cost",
            "MILP dual bound",
            "HiGHS gap (%)",
            "LP bound",
            "gap MILP vs LP (%)",
            "LP-rounding cost",
            "LP time (s)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows: budgets(r).map(|(g, b)| solve_row(g, b)).collect(),
        notes: Vec::new(),
    };
    let times: Vec<f64> = budgets(r)
        .filter_map(|(_, b)| b.milp.as_ref().map(|m| m.solve_time_s))
        .collect();
    let max_t = times.iter().copied().fold(0.0, f64::max);
    Section {
        details: None,
        title: "Checkmate: MILP solve time and optimality gap".into(),
        claim: "`001_68b9d43f3f694e7a.txt` (a reader's notes on Checkmate): the MILP goes to a solver such as \
                Gurobi; \"MILP solving can take up to an hour for complex networks\"; \"Networks with 100+ layers: \
                solve in <1 hour\"; \"Approximation algorithms within 5-10% of optimal\". The LP relaxation with \
                rounding that memwall runs is its reading of the paper's approximation (Jain et al. 2020, \
                arXiv:1910.02653, abstract: \"near-optimal schedules with an approximation algorithm\"); the \
                notes do not describe it."
            .into(),
        ours: format!(
            "{} MILP solves with HiGHS took at most {max_t:.1} s each on this machine; the table gives each \
             solve's status, HiGHS gap and the gap to the LP-relaxation bound.{}",
            times.len(),
            boundary_summary(r)
        ),
        notes: vec![
            "Solve times are wall time including model construction, measured on the report machine's CPU. \
             HiGHS reports `Optimal` once the relative gap is within the target. `Infeasible (working-set \
             bound)`: the budget is below the largest single-op working set (output plus inputs), so no \
             schedule exists and HiGHS is not called."
                .into(),
        ],
        tables: std::iter::once(t)
            .chain(boundary_table(r))
            .chain(staged_table(r))
            .collect(),
        figures: Vec::new(),
    }
}

/// One sentence on the boundary relaxation's solves beside the MILP: how many it proved
/// optimal (fitting schedule at its bound), its longest time, and how many of those schedules
/// are cheaper than the MILP's incumbent (empty without such solves).
fn boundary_summary(r: &CheckmateResult) -> String {
    let solves: Vec<(&BoundarySolve, Option<f64>)> = budgets(r)
        .filter_map(|(_, b)| Some((b.boundary.as_ref()?, b.milp.as_ref()?.best.map(|s| s.cost))))
        .filter(|(x, _)| x.bound.is_finite())
        .collect();
    if solves.is_empty() {
        return String::new();
    }
    let proven: Vec<_> = solves
        .iter()
        .filter(|(x, _)| {
            x.fitting
                .is_some_and(|f| f.cost - x.bound <= 1e-9 * f.cost.abs().max(1.0))
        })
        .collect();
    let cheaper = proven
        .iter()
        .filter(|(x, m)| matches!((x.fitting, m), (Some(f), Some(mc)) if f.cost < *mc - 1e-9 * mc.abs().max(1.0)))
        .count();
    let max_t = solves
        .iter()
        .map(|(x, _)| x.solve_time_s)
        .fold(0.0, f64::max);
    format!(
        " Ours, the boundary-memory relaxation (next table), proved {} of {} feasible budgets optimal, in at \
         most {max_t:.2} s each; {cheaper} of those schedules are cheaper than the MILP's.",
        proven.len(),
        solves.len()
    )
}

/// The boundary-memory relaxation beside Checkmate's MILP, per (graph, budget) solved by the
/// MILP: both costs and times, the relaxation's bound and its gap.
fn boundary_table(r: &CheckmateResult) -> Option<Table> {
    let rows: Vec<Vec<String>> = budgets(r)
        .filter_map(|(g, b)| Some((g, b, b.milp.as_ref()?, b.boundary.as_ref()?)))
        .map(|(g, b, m, x)| {
            let milp_cost = m.best.map(|s| s.cost);
            let cost = x.fitting.map(|s| s.cost);
            let gap = cost
                .filter(|c| *c > 0.0)
                .map_or(f64::NAN, |c| (c - x.bound).max(0.0) / c);
            let vs = match (cost, milp_cost) {
                (Some(c), Some(mc)) if mc > 0.0 => format!("{:+.3}", (c - mc) / mc * 100.0),
                _ => "-".into(),
            };
            vec![
                short_graph_name(&g.name),
                format!("{:.2}", b.fraction),
                one_decimal(milp_cost),
                format!("{:.2}", m.solve_time_s),
                x.status.to_string(),
                x.rounds.to_string(),
                x.cuts.to_string(),
                format!("{:.2}", x.solve_time_s),
                one_decimal(cost),
                one_decimal(x.cut_lp_bound),
                one_decimal(Some(x.bound)),
                percent(gap),
                vs,
            ]
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    Some(Table {
        caption: "Ours: the boundary-memory relaxation beside Checkmate's MILP (same HiGHS options and warm \
                  start). It keeps Checkmate's R and S with one memory row per stage end instead of U and FREE at \
                  every step, first tightens its LP with closure cuts (a value dropped across a stage boundary \
                  but read after it has each input along a chain kept across that boundary or recomputed in \
                  full before the read; separated on the LP, kept in the integer rounds; cut LP bound: the \
                  LP's bound with them), adds rows for the recomputation steps its schedules overrun, and \
                  prunes values nothing reads; its bound (the larger of the cut LP's and HiGHS' dual bound) \
                  is a lower bound on Checkmate's optimum, so a fitting schedule whose cost equals the bound \
                  is optimal (gap 0.00). Cost vs MILP: the relaxation's schedule \
                  against the MILP's incumbent, which HiGHS stops within the 1% target gap."
            .into(),
        columns: [
            "graph",
            "budget (frac)",
            "MILP cost",
            "MILP time (s)",
            "relaxation status",
            "rounds",
            "closure cuts",
            "time (s)",
            "fitting schedule cost",
            "cut LP bound",
            "bound",
            "gap (%)",
            "cost vs MILP (%)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows,
        notes: Vec::new(),
    })
}

/// Formats a fraction as a percentage to two decimals, "-" when not finite.
fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2}", x * 100.0)
    } else {
        "-".into()
    }
}

/// A graph's name as a table shows it: the network and its input for Checkmate's Keras graphs
/// ("VGG16_256_224_224_3_train" -> "VGG16 (batch 256, 224x224)"), the node count for a random
/// layered DAG ("random layered, 100 nodes"), the name with spaces for any other, so that a
/// table cell breaks between words, never inside a token.
fn short_graph_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("random_layered_n") {
        let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !n.is_empty() {
            return format!("random layered, {n} nodes");
        }
    }
    const FAMILIES: [(&str, &str); 6] = [
        ("VGG16_", "VGG16"),
        ("VGG19_", "VGG19"),
        ("vgg_unet_", "U-Net"),
        ("fcn_8_vgg_", "FCN8"),
        ("segnet_", "SegNet"),
        ("resnet", "ResNet"),
    ];
    for (prefix, family) in FAMILIES {
        if let Some(rest) = name.strip_prefix(prefix) {
            let dims: Vec<&str> = rest.split('_').collect();
            if let [batch, h, w, ..] = dims.as_slice() {
                if [batch, h, w].iter().all(|d| d.parse::<u32>().is_ok()) {
                    return format!("{family} (batch {batch}, {h}x{w})");
                }
            }
            return family.to_string();
        }
    }
    name.replace('_', " ")
}

/// The staged MILP's solves (graphs above `milp_max_nodes` nodes), if any: per graph and
/// budget the model, status, time, heuristic and best cost, the model's own bounds and the
/// bound valid for Checkmate's problem.
fn staged_table(r: &CheckmateResult) -> Option<Table> {
    let rows: Vec<Vec<String>> = budgets(r)
        .flat_map(|(g, b)| {
            [&b.staged, &b.refined]
                .into_iter()
                .flatten()
                .map(move |m| (g, b, m))
        })
        .map(|(g, b, m)| {
            let c = |x: Option<ScheduleStats>| one_decimal(x.map(|s| s.cost));
            vec![
                short_graph_name(&g.name),
                g.nodes.to_string(),
                format!("{:.2}", b.fraction),
                format!(
                    "{}{}",
                    m.stage_size,
                    m.max_computations
                        .map_or(String::new(), |k| format!(", C = {k}"))
                ),
                format!("{} / {} / {}", m.columns, m.integer_columns, m.rows),
                m.status.to_string(),
                format!("{:.1}", m.solve_time_s),
                c(m.heuristic),
                c(m.annealed),
                c(m.best),
                one_decimal(Some(m.model_dual_bound)),
                percent(m.model_gap),
                format!(
                    "{} / {}",
                    one_decimal(m.checkmate_lp_bound),
                    one_decimal(m.cut_lp_bound)
                ),
                one_decimal(Some(m.valid_bound)),
                percent(m.valid_gap()),
            ]
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let p = &r.params;
    Some(Table {
        caption: format!(
            "Staged MILP (tight FREE; the stages where checkpoint-all fits the budget as one stage without \
             memory rows, then stages of ceil(m / {}) nodes for the m nodes after them{}; HiGHS, {} thread(s), \
             limit {} s per graph and budget including LP relaxation, warm starts and, for graphs up to {} nodes, \
             a refinement with one node per stage warm-started from the grouped schedule, on the row below it). \
             Annealed cost: the best heuristic schedule improved by simulated annealing over ejection chains (keep \
             a recomputed value, repair the stages it overflows; {:.0}% of the limit) when the relaxation did not \
             end the solve. Model gap: against \
             HiGHS' bound for the model solved (restricted when stage size > 1). Valid gap: against a bound valid \
             for Checkmate's problem: the largest of sum C_i, the boundary-memory relaxation's bound (Checkmate's \
             schedule variables with one memory row per stage end, its LP tightened by closure cuts, plus rows \
             generated for the recomputation steps its schedules overrun; solved first, {:.0}% of the limit) and, \
             for stage size 1, the model's LP relaxation and HiGHS' bound. LP bounds: the tight model's LP \
             relaxation when solved unrestricted (Checkmate's LP bound) / the boundary relaxation's LP with its \
             closure cuts. Status \"Optimal (boundary relaxation)\": the relaxation's schedule fits \
             the budget within the gap of its bound, which proves it optimal for Checkmate's problem; the columns \
             and rows are then the relaxation's.",
            p.staged_max_stages,
            p.staged_max_computations
                .map_or(String::new(), |k| format!(", at most {k} computations per node")),
            p.threads,
            p.staged_time_limit_s,
            p.refine_max_nodes,
            memwall_remat::staged::ANNEAL_SHARE * 100.0,
            memwall_remat::staged::BOUNDARY_SHARE * 100.0,
        ),
        columns: [
            "graph",
            "nodes",
            "budget (frac)",
            "stage size",
            "columns / integer / rows",
            "status",
            "time (s)",
            "heuristic cost",
            "annealed cost",
            "cost",
            "model dual bound",
            "model gap (%)",
            "LP bounds: tight / cut",
            "valid bound",
            "valid gap (%)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows,
        notes: Vec::new(),
    })
}

/// Largest `b` in `[lo, hi]` with `fits(b)` by bisection, assuming `fits` is monotone
/// (`fits(lo)` is checked; returns 0 if it fails).
fn bisect(
    lo: u32,
    hi: u32,
    mut fits: impl FnMut(u32) -> Result<bool, RematError>,
) -> Result<u32, RematError> {
    if lo == 0 || !fits(lo)? {
        return Ok(0);
    }
    let (mut good, mut bad) = (lo, hi + 1);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if fits(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(good)
}

/// The largest batch size that fits `params.batch_memory_bytes` within one extra forward pass
/// of compute: bisection for each baseline family, then for the MILP from the best baseline's
/// batch up.
fn measure_batch(
    params: &CheckmateParams,
    path: &Path,
    opts: &MilpOptions,
) -> Result<BatchResult, RematError> {
    let g0 = Graph::read_node_link(path)?;
    let b0 = params.batch_graph_batch.max(1) as f64;
    let mem = params.batch_memory_bytes;
    // Compute limit: one extra forward pass. Compute scales linearly with batch too, so the
    // ratio to one forward+backward is batch-independent and the limit is checked at any scale.
    let limit = g0.total_cost() + g0.forward_cost();
    let at = |b: u32| g0.scale_memory(b as f64 / b0);
    let baselines = BASELINES
        .iter()
        .map(|name| {
            bisect(1, params.batch_max, |b| {
                let g = at(b);
                Ok(best_within(&family(&g, name, params.greedy_thresholds), mem, limit).is_some())
            })
        })
        .collect::<Result<Vec<u32>, RematError>>()?;
    let lo = baselines.iter().copied().max().unwrap_or(1).max(1);
    // No schedule fits once one op's working set exceeds the memory.
    let ws = g0.working_set_bound().max(1) as f64;
    let ws_cap = (mem as f64 * b0 / ws).floor() as u32;
    let hi = params.batch_max.min(ws_cap).max(lo);
    let bo = MilpOptions {
        time_limit_s: params.batch_time_limit_s,
        cost_cutoff: Some(limit),
        ..opts.clone()
    };
    let mut milp_probes = Vec::new();
    let milp = bisect(lo, hi, |b| {
        let probe = batch_probe(&at(b), b, params, limit, &bo)?;
        let fits = probe.fits;
        milp_probes.push(probe);
        Ok(fits)
    })?;
    Ok(BatchResult {
        graph: g0.name.clone(),
        compute_limit: limit,
        baselines,
        milp,
        working_set_cap: ws_cap,
        milp_probes,
    })
}

/// The MILP at batch size `batch` (graph `g`, memory already scaled) and the fixed memory,
/// warm-started from the cheapest fitting baseline; it fits when it finds a schedule within
/// `limit`.
fn batch_probe(
    g: &Graph,
    batch: u32,
    params: &CheckmateParams,
    limit: f64,
    opts: &MilpOptions,
) -> Result<BatchProbe, RematError> {
    let mem = params.batch_memory_bytes;
    let warm = BASELINES
        .iter()
        .filter_map(|n| {
            best_within(&family(g, n, params.greedy_thresholds), mem, f64::INFINITY).cloned()
        })
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
        .map(|x| x.0);
    let out = solve_milp(
        g,
        mem,
        &MilpOptions {
            warm_start: warm,
            ..opts.clone()
        },
    )?;
    Ok(BatchProbe {
        batch,
        fits: out
            .best
            .as_ref()
            .is_some_and(|(_, r)| r.cost <= limit + 1e-9),
        milp: (&out).into(),
    })
}

/// The paper's Fig. 6 (Jain et al. 2020) beside the largest batch size of every strategy.
fn batch_section(params: &CheckmateParams, b: &BatchResult) -> Section {
    let ours: Vec<u32> = b.baselines.iter().copied().chain([b.milp]).collect();
    let o = |i: usize| ours.get(i).map_or_else(|| "-".to_string(), u32::to_string);
    let mem = params.batch_memory_bytes;
    Section {
        details: None,
        title: "Checkmate: maximum batch size at fixed memory".into(),
        claim: "Jain et al. 2020 (arXiv:1910.02653), Fig. 6, not in the source document (a reader's notes on \
                the paper): for VGG19 at a fixed 16 GB of memory and at most one extra forward pass of compute, \
                the maximum batch size is 167 with checkpoint-all, 197 with Chen's sqrt(n), 266 with Chen's \
                greedy and 289 with Checkmate."
            .into(),
        ours: format!(
            "On {} at {:.1} GiB: checkpoint all {}, sqrt(n) {}, greedy {}, revolve {}, Checkmate MILP {}.",
            b.graph,
            mem as f64 / (1u64 << 30) as f64,
            o(0), o(1), o(2), o(3), o(4)
        ),
        notes: vec![
            format!(
                "Activation memory is scaled linearly from the profiled batch size {} (`M_i(b) = M_i * b / {}`); \
                 compute is assumed to scale linearly as well, so the overhead limit (one forward+backward plus \
                 one forward, in units of the same batch) is batch-independent. Parameters are not modelled \
                 (fixed memory 0), which is why absolute batch sizes differ from the paper's.",
                params.batch_graph_batch, params.batch_graph_batch
            ),
            format!(
                "Bisection over the batch size in [1, {}]; the MILP search starts from the best baseline's \
                 batch (warm start) and uses a {} s limit per solve; a solve that finds no schedule within the \
                 limit counts as not fitting.",
                params.batch_max, params.batch_time_limit_s
            ),
            format!(
                "No schedule of any strategy fits above batch {}: beyond it the largest single-op working \
                 set (an op's output plus its inputs) alone fills the memory.",
                b.working_set_cap
            ),
        ],
        tables: vec![batch_table(params, b, &ours)],
        figures: Vec::new(),
    }
}

/// The paper's (Jain et al. 2020, Fig. 6) and our largest batch size of every strategy.
fn batch_table(params: &CheckmateParams, b: &BatchResult, ours: &[u32]) -> Table {
    // Jain et al. 2020 (arXiv:1910.02653), Fig. 6; not in the source document.
    let paper = [167, 197, 266, 289];
    let labels = [
        "checkpoint all",
        "Chen sqrt(n)",
        "Chen greedy",
        "revolve",
        "Checkmate MILP",
    ];
    let paper_of = |l: &str| match l {
        "checkpoint all" => paper[0].to_string(),
        "Chen sqrt(n)" => paper[1].to_string(),
        "Chen greedy" => paper[2].to_string(),
        "Checkmate MILP" => paper[3].to_string(),
        _ => "-".into(),
    };
    let mem = params.batch_memory_bytes;
    Table {
        caption: format!(
            "Largest batch size of {} fitting {:.2} GiB with at most one extra forward pass",
            b.graph,
            mem as f64 / (1u64 << 30) as f64
        ),
        columns: vec![
            "strategy".into(),
            "Jain et al. 2020, Fig. 6 (VGG19, V100 16 GB)".into(),
            "ours".into(),
        ],
        rows: labels
            .iter()
            .zip(ours)
            .map(|(l, o)| vec![l.to_string(), paper_of(l), o.to_string()])
            .collect(),
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod short_name_tests {
    use super::short_graph_name;

    #[test]
    fn graph_names_read_as_the_network_and_its_input() {
        assert_eq!(
            short_graph_name("VGG16_256_224_224_3_train"),
            "VGG16 (batch 256, 224x224)"
        );
        assert_eq!(
            short_graph_name("vgg_unet_32_416_608_3_train"),
            "U-Net (batch 32, 416x608)"
        );
        assert_eq!(
            short_graph_name("random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14"),
            "random layered, 250 nodes"
        );
        assert_eq!(short_graph_name("my_net"), "my net");
        assert_eq!(crate::demos::fmt_bytes(1.266e10), "12.66 GB");
        assert_eq!(crate::demos::fmt_bytes(41687.0), "41.69 kB");
        assert_eq!(crate::demos::fmt_bytes(512.0), "512 B");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::demos::claim_checks::{assert_claims_have_measures, value};

    /// The committed result (`runs/checkmate/cpu.result.json`) reads with typed statuses
    /// (among them "ReachedTimeLimit" and "Infeasible (working-set bound)") and writes every
    /// status back as the text it had.
    #[test]
    fn the_committed_result_keeps_its_status_texts() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../runs/checkmate/cpu.result.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let record: crate::studies::StudyRecord = crate::results::parse_json(&text).unwrap();
        let r: CheckmateResult = serde_json::from_value(record.result.clone()).unwrap();
        let statuses: Vec<&SolveStatus> = budgets(&r)
            .flat_map(|(_, b)| {
                let staged = [&b.staged, &b.refined].into_iter().flatten();
                b.milp
                    .iter()
                    .map(|m| &m.status)
                    .chain(staged.map(|s| &s.status))
                    .chain(b.boundary.iter().map(|x| &x.status))
            })
            .chain(
                r.batch
                    .iter()
                    .flat_map(|b| &b.milp_probes)
                    .map(|p| &p.milp.status),
            )
            .collect();
        for s in [
            SolveStatus::Optimal,
            SolveStatus::ReachedTimeLimit,
            SolveStatus::InfeasibleWorkingSet,
            SolveStatus::OptimalBoundaryRelaxation,
        ] {
            assert!(statuses.contains(&&s), "{s} not in {statuses:?}");
        }
        assert!(
            !statuses.iter().any(|s| matches!(s, SolveStatus::Other(_))),
            "{statuses:?}"
        );
        // Every status string of the file, in order, is written back byte for byte.
        fn texts(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        match x {
                            serde_json::Value::String(s) if k == "status" => out.push(s.clone()),
                            _ => texts(x, out),
                        }
                    }
                }
                serde_json::Value::Array(xs) => xs.iter().for_each(|x| texts(x, out)),
                _ => {}
            }
        }
        let (mut before, mut after) = (Vec::new(), Vec::new());
        texts(&record.result, &mut before);
        texts(&serde_json::to_value(&r).unwrap(), &mut after);
        assert_eq!(before.len(), statuses.len(), "{before:?}");
        assert_eq!(before, after);
    }

    #[test]
    fn params_deny_unknown_fields() {
        let mut v = serde_json::to_value(serde_json::json!({})).unwrap();
        v["bogus"] = 1.into();
        assert!(serde_json::from_value::<CheckmateParams>(v).is_err());
    }

    /// The shared data folder (`MEMWALL_SHARED_DATA` or `../shared/data` beside the workspace).
    fn data_dir() -> std::path::PathBuf {
        match std::env::var_os("MEMWALL_SHARED_DATA") {
            Some(d) => std::path::PathBuf::from(d),
            None => {
                std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"))
            }
        }
    }

    #[test]
    fn budget_axis_unit_follows_the_peak() {
        assert_eq!(budget_axis(14_180_941_824), (1e9, "memory budget (GB)"));
        assert_eq!(budget_axis(146_840).1, "memory budget (kB)");
        assert_eq!(budget_axis(2_500_000).1, "memory budget (MB)");
        assert_eq!(budget_axis(999).1, "memory budget (bytes)");
    }

    #[test]
    fn smoke_study() {
        let dir = data_dir();
        let result = run_study(&CheckmateParams::smoke(), &dir).unwrap();
        // Beside every MILP solve, the boundary relaxation: its bound never above the MILP's
        // schedule, its fitting schedule never below its bound nor above the MILP's dual bound
        // by more than the MILP's gap allows.
        let mut beside = 0;
        for g in &result.graphs {
            for b in &g.budgets {
                let (Some(m), Some(x)) = (&b.milp, &b.boundary) else {
                    assert!(b.milp.is_none(), "{}: MILP without the relaxation", g.name);
                    continue;
                };
                beside += 1;
                if let Some(ms) = m.best {
                    assert!(
                        x.bound <= ms.cost + 1e-6,
                        "{}: bound {} > MILP {}",
                        g.name,
                        x.bound,
                        ms.cost
                    );
                }
                if let Some(f) = x.fitting {
                    assert!(f.cost >= x.bound - 1e-6 && f.peak_bytes <= b.budget_bytes);
                    assert!(
                        f.cost >= m.dual_bound - 1e-6,
                        "{}: below the MILP's dual bound",
                        g.name
                    );
                }
            }
        }
        assert!(beside > 0);
        let secs = render(&result);
        assert!(secs[1]
            .tables
            .iter()
            .any(|t| t.caption.starts_with("Ours: the boundary-memory")));
        assert_eq!(secs.len(), 3);
        assert!(!secs[0].figures.is_empty());
        assert!(secs[2].claim.contains("289"));
        let missing = CheckmateParams {
            graphs: vec!["nope.json".into()],
            ..CheckmateParams::smoke()
        };
        let e = run_study(&missing, &dir).unwrap_err().to_string();
        assert!(e.contains("nope.json"), "{e}");
    }

    #[test]
    fn generated_graph_gets_the_staged_milp_and_its_table() {
        let generated = GeneratedGraph {
            n: 40,
            w: 0.27,
            nlv: 0.75,
            ed: 0.2,
            scd: 0.14,
            seed: 3,
        };
        let params = CheckmateParams {
            graphs: Vec::new(),
            generated: vec![generated],
            milp_max_nodes: 20,
            staged_max_stages: 10,
            staged_time_limit_s: 5.0,
            batch_graph: None,
            ..CheckmateParams::smoke()
        };
        let r = run_study(&params, &data_dir()).unwrap();
        let b = &r.graphs[0].budgets[0];
        assert!(b.milp.is_none());
        let coarse = b.staged.as_ref().expect("staged solve");
        // ceil(m / 10) nodes per stage for the m nodes after the budget's checkpoint-all prefix.
        let g = random_layered(&generated.params()).unwrap();
        let prefix = g.fitting_prefix(b.budget_bytes);
        assert!(prefix >= 2, "the prefix stage is exercised");
        assert_eq!(coarse.stage_size, (40 - prefix).div_ceil(10));
        assert!(coarse.stage_size > 1, "a grouped model to refine");
        let fine = b.refined.as_ref().unwrap_or_else(|| {
            panic!(
                "40 nodes are refined; coarse: {} {:?}",
                coarse.status, coarse.best
            )
        });
        assert_eq!(fine.stage_size, 1);
        let best = fine
            .best
            .expect("a schedule at 0.9 of the checkpoint-all peak");
        assert!(best.peak_bytes <= b.budget_bytes);
        assert!(fine.valid_bound <= best.cost + 1e-6);
        let secs = render(&r);
        let staged = &secs[1].tables[1];
        assert_eq!(staged.rows.len(), 2);
        assert_eq!(staged.rows[0][3], coarse.stage_size.to_string());
        let back: CheckmateResult =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(render(&back), secs);
    }

    #[test]
    fn non_finite_bounds_survive_json() {
        let m = MilpSolve {
            status: SolveStatus::InfeasibleWorkingSet,
            solve_time_s: 0.0,
            best: None,
            objective: None,
            dual_bound: f64::INFINITY,
            mip_gap: f64::NAN,
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["dual_bound"], "inf");
        assert_eq!(v["mip_gap"], "NaN");
        let back: MilpSolve = serde_json::from_value(v).unwrap();
        assert_eq!(back.dual_bound, f64::INFINITY);
        assert!(back.mip_gap.is_nan());
        let finite: MilpSolve = serde_json::from_value(
            serde_json::to_value(MilpSolve {
                dual_bound: 1.5,
                mip_gap: 0.25,
                ..m
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!((finite.dual_bound, finite.mip_gap), (1.5, 0.25));
    }

    #[test]
    fn result_round_trips_through_json_and_renders_the_same() {
        // 0.8 of VGG16's checkpoint-all peak is below its largest working set (the MILP is not
        // called: infinite dual bound, NaN gap); 0.9 is solved.
        let params = CheckmateParams {
            budget_fractions: vec![0.8, 0.9],
            batch_graph: None,
            ..CheckmateParams::smoke()
        };
        let r = run_study(&params, &data_dir()).unwrap();
        let low = r.graphs[0].budgets[0].milp.as_ref().unwrap();
        assert_eq!(low.status, SolveStatus::InfeasibleWorkingSet);
        assert_eq!(low.dual_bound, f64::INFINITY);
        let high = r.graphs[0].budgets[1].milp.as_ref().unwrap();
        let best = high.best.unwrap();
        assert!(best.peak_bytes <= r.graphs[0].budgets[1].budget_bytes);
        let back: CheckmateResult =
            serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back.graphs[0].budgets[1], r.graphs[0].budgets[1]);
        assert_eq!(back.params, r.params);
        let (fresh, stored) = (render(&r), render(&back));
        assert_eq!(fresh.len(), 2);
        assert_eq!(stored, fresh);
        assert_eq!(fresh[1].tables[0].rows[0][7], "inf");
    }

    #[test]
    fn measures_answer_the_claims() {
        // A 30-node random layered graph: Checkmate's MILP, the boundary relaxation and the LP
        // rounding at 0.9 of the checkpoint-all peak, in seconds.
        let params = CheckmateParams {
            graphs: Vec::new(),
            generated: vec![GeneratedGraph {
                n: 30,
                w: 0.27,
                nlv: 0.75,
                ed: 0.2,
                scd: 0.14,
                seed: 3,
            }],
            batch_graph: None,
            ..CheckmateParams::smoke()
        };
        let r = run_study(&params, &data_dir()).unwrap();
        let m = assert_claims_have_measures::<Checkmate>("checkmate", r.clone());
        // No budget at half the peak, no graph of 100 nodes, no batch search: not measured.
        assert!(value(&m, "milp_overhead_pct_at_2x_reduction").is_nan());
        assert!(value(&m, "max_solve_s_100_plus_nodes").is_nan());
        assert!(value(&m, "max_batch_milp_over_checkpoint_all").is_nan());
        let b = &r.graphs[0].budgets[0];
        let milp = b.milp.as_ref().unwrap();
        assert!((value(&m, "max_milp_solve_s") - milp.solve_time_s).abs() < 1e-12);
        if let (Some(l), Some(c)) = (b.lp.rounded, milp.best) {
            let excess = value(&m, "lp_rounding_max_excess_pct");
            assert!((excess - (l.cost / c.cost - 1.0) * 100.0).abs() < 1e-9);
        }
        // The same result read as a 100-node graph at half the peak answers the other two.
        let mut big = r.clone();
        big.graphs[0].nodes = 100;
        big.graphs[0].budgets[0].fraction = 0.5;
        let m = measures(&big);
        let cost = milp.best.unwrap().cost;
        let overhead = (cost / r.graphs[0].forward_backward_cost - 1.0) * 100.0;
        assert!((value(&m, "milp_overhead_pct_at_2x_reduction") - overhead).abs() < 1e-9);
        let solve = value(&m, "max_solve_s_100_plus_nodes");
        if milp.status == SolveStatus::Optimal {
            assert!((solve - milp.solve_time_s).abs() < 1e-12);
        } else {
            assert!(solve.is_nan());
        }
    }
}
