//! The Checkmate study's result: per graph and budget the baselines', the MILP's, the LP
//! rounding's and the staged MILP's schedules, and the batch-size search; stored as the study's
//! record.

use super::*;

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
    #[serde(with = "memwall_core::nonfinite")]
    pub model_dual_bound: f64,
    /// HiGHS' relative gap for the model solved, a fraction.
    #[serde(with = "memwall_core::nonfinite")]
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
    #[serde(with = "memwall_core::nonfinite")]
    pub valid_bound: f64,
}

impl StagedSolve {
    pub(super) fn new(o: &StagedOutcome, max_computations: Option<u32>) -> Self {
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
    #[serde(with = "memwall_core::nonfinite")]
    pub dual_bound: f64,
    /// Relative gap `(objective - dual_bound) / objective` reported by HiGHS, a fraction (not
    /// finite when there is no incumbent; stored as text in JSON then).
    #[serde(with = "memwall_core::nonfinite")]
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
    #[serde(with = "memwall_core::nonfinite")]
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
    pub(super) fn new(g: &Graph, o: &BoundaryOutcome) -> Self {
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
    /// The network's layers as Checkmate's graphs count them, one node per layer: the forward
    /// operations of a training graph ([`Graph::forward_ops`]: forward nodes without graph
    /// inputs, the loss included). `None` for a graph without backward nodes (the random
    /// layered DAGs: generated graphs, not a network's training graph) and in results written
    /// before the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<usize>,
    /// Compute cost of one plain forward+backward pass, cost units (overheads divide by it).
    pub forward_backward_cost: f64,
    /// Peak memory of the checkpoint-all schedule, bytes (graph memory units).
    pub checkpoint_all_peak_bytes: u64,
    /// The working-set bound, bytes ([`Graph::working_set_bound`]): no schedule's peak is
    /// below it (0 in results written before the field).
    #[serde(default)]
    pub working_set_bound_bytes: u64,
    /// One entry per budget fraction, in the order of the parameters.
    pub budgets: Vec<BudgetResult>,
}

/// One MILP solve of the batch-size bisection: Checkmate's MILP on graphs of at most
/// `milp_max_nodes` nodes, the staged MILP (with its refinement) on larger ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchProbe {
    /// The batch size tried.
    pub batch: u32,
    /// The solve at the fixed memory, with the compute limit as cost cutoff (`None`: the
    /// graph got the staged MILP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milp: Option<MilpSolve>,
    /// The staged MILP at the fixed memory (graphs above `milp_max_nodes` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<StagedSolve>,
    /// Its refinement with one node per stage (graphs up to `refine_max_nodes` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refined: Option<StagedSolve>,
    /// Whether it found a schedule within the compute limit.
    pub fits: bool,
}

impl BatchProbe {
    /// Whether the solve proved that no schedule fits the memory within `limit` cost units:
    /// the problem is infeasible (under HiGHS's cost cutoff, or below the working set), or
    /// the proven lower bound of the cost is over `limit`. A solve stopped at its time limit
    /// with neither proves nothing.
    pub fn proven_not_to_fit(&self, limit: f64) -> bool {
        if self.fits {
            return false;
        }
        let milp = self
            .milp
            .as_ref()
            .is_some_and(|m| m.status.is_infeasible() || m.dual_bound > limit);
        let staged = [&self.staged, &self.refined]
            .into_iter()
            .flatten()
            .any(|s| s.status.is_infeasible() || s.valid_bound > limit);
        milp || staged
    }
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
    /// Whether the MILP ran (results written before the staged MILP probed graphs above
    /// `milp_max_nodes` nodes have the baselines only for those; `milp` is then 0). True in
    /// results written before the field.
    #[serde(default = "yes")]
    pub milp_solved: bool,
    /// Search steps per sample ([`BuiltNet::divisions`](super::BuiltNet::divisions)): every
    /// batch of this result (baselines, MILP, cap, probes) counts steps of `1 / divisions` of a
    /// sample. 1 in results written before the field.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub divisions: u32,
}

impl BatchResult {
    /// `steps` of this search in samples (`steps / divisions`), printed with the digits the
    /// step needs ("20", "4.125").
    pub fn samples_text(&self, steps: u32) -> String {
        let d = self.divisions.max(1);
        if steps.is_multiple_of(d) {
            return (steps / d).to_string();
        }
        memwall_core::spec::claims::trim_number(f64::from(steps) / f64::from(d))
    }
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

fn is_one(x: &u32) -> bool {
    *x == 1
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
    /// The batch-size search on `params.batch_nets`, in that order.
    #[serde(default)]
    pub batch_nets: Vec<BatchResult>,
}
