//! A scalable rematerialization MILP: Checkmate's time-indexed formulation (Jain et al. 2020,
//! Section 4, eq. 1–4) with (a) a tight linearization of the `FREE` indicators, (b) optionally
//! fewer stages (consecutive nodes grouped into one stage) and (c) optionally a bound on the
//! number of computations of each node (Moccasin's bounded recomputation, Bartan et al., ICML
//! 2023, Section 3), warm-started by a greedy eviction heuristic.
//!
//! **Tight `FREE`.** Checkmate linearizes `FREE[t][i][k] = R[t][k] ∧ ¬S[t+1][i] ∧ ¬R[t][j]`
//! (for every later user `j` of `i` computed in the stage) with one aggregated row
//! `κ (1 - FREE) >= hazards` (eq. 3 and the paragraph after it). Here `FREE` is continuous in
//! `[0, 1]` with one upper bound per conjunct (`FREE <= R[t][k]`, `FREE <= 1 - S[t+1][i]`,
//! `FREE <= 1 - R[t][j]`) and no lower bound. A `FREE` below the conjunction only over-counts
//! memory (eq. 2), so every integer `(R, S)` feasible here is feasible for Checkmate and vice
//! versa (set `FREE` to the conjunction): with one node per stage and no computation bound the
//! model has the same optimum as [`crate::milp::solve_milp`], fewer integer columns, and an LP
//! relaxation at least as tight (the per-conjunct bounds imply the aggregated one).
//!
//! **Stages.** A stage is a range `b..=e` of consecutive nodes (Checkmate: `b = e = t`). Stage
//! `s` computes all of its nodes (`R[s][i] = 1` for `b <= i <= e`) in topological order,
//! interleaved with recomputations of earlier nodes (`R[s][i]`, `i < b`); `S[s][i]` (`i < b`)
//! says that node `i`'s output is resident when the stage starts. Within a stage a value is
//! computed at most once, so grouping stages restricts the schedule space: the optimum of a
//! grouped model is an upper bound of Checkmate's optimum, and its MILP gap is a gap for the
//! restricted problem only. A grouped schedule is expanded to Checkmate's `n x n` matrices
//! ([`StagedSchedule::expand`]) and validated by the simulator ([`crate::sim::simulate`]).
//!
//! **Checkpoint-all prefix.** The stages in which checkpoint-all fits the budget
//! ([`Graph::fitting_prefix`]) form one first stage without memory rows ([`model_stages`]): a
//! relaxation of Checkmate's problem there, exact whenever the outputs a schedule keeps into
//! the next stage fit those stages (checked by the simulator). One node per stage after it is
//! what "unrestricted" means below. On the 250-node random layered graph at budget 0.8 the
//! prefix is 187 of 250 stages and the model has 314,059 rows instead of 659,860.
//!
//! **Bounds.** [`StagedOutcome::dual_bound`] is HiGHS' bound for the model solved (restricted
//! when stages are grouped or computations bounded). [`StagedOutcome::valid_bound`] is a lower
//! bound for the unrestricted Checkmate problem: the larger of `sum_i C_i` (every node is
//! computed at least once) and, when the unrestricted model was solved, HiGHS' dual bound.
//! [`lp_bound`] solves the LP relaxation of the unrestricted tight model, a lower bound on
//! Checkmate's optimum.
//!
//! May import: the graph IR, the simulator, [`crate::milp::MilpOptions`], the HiGHS model
//! builder (`crate::formulation`), [`crate::SolveStatus`], HiGHS.

use super::anneal::{anneal, anneal_until, AnnealOptions, AnnealOutcome, Beside};
use super::boundary::{boundary_bound, window_bound, Window, WINDOW_COLUMNS};
use super::deadline::{Deadline, PlanStage, StageTime};
use super::formulation::{
    dual_bound, highs_status, incumbent_objective, optimise, solve, threshold, warm_start, Columns,
    Form, FormulationBuilder,
};
use super::graph::Graph;
use super::milp::MilpOptions;
use super::sim::{simulate, Schedule, SimResult};
use super::{RematError, SolveStatus};
use highs::{Col, HighsModelStatus, RowProblem};
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

mod build;

pub use crate::staged_schedule::*;
use build::*;
pub use build::{lp_bound, model_size, ModelSize};

/// Default number of stages of the staged MILP: a graph of `n` nodes is grouped into stages of
/// `ceil(n / DEFAULT_MAX_STAGES)` nodes. Up to 100 nodes that is Checkmate's one node per stage,
/// which on the random layered graphs reaches a 1% gap within 60 s on 2 threads where grouping
/// first (and refining in the time left) does not (n100 at 0.8: 0.98% in 53 s against 1.23%
/// at 60 s with stages of 2).
pub const DEFAULT_MAX_STAGES: usize = 100;

/// Consecutive stages of `size` nodes each (the last may be shorter) covering `0..n`:
/// `size = 1` is Checkmate's one stage per node. `size = 0` is treated as 1.
pub fn uniform_stages(n: usize, size: usize) -> Vec<RangeInclusive<usize>> {
    let size = size.max(1);
    (0..n)
        .step_by(size)
        .map(|b| b..=(b + size - 1).min(n - 1))
        .collect()
}

/// The stages of the staged model at `budget` bytes: the checkpoint-all prefix
/// ([`Graph::fitting_prefix`], when it has at least two nodes) as one stage without memory rows,
/// then stages of `size` nodes (`0` is treated as 1). Returns the stages and the prefix length
/// (`0`: no prefix stage).
///
/// The prefix stage computes each of its nodes once and may keep any of their outputs into the
/// next stage. Without its memory rows the model is a relaxation of Checkmate's problem on
/// those stages (any schedule costs at least `sum C_i` there and keeps a subset of their
/// outputs), so with one node per later stage the model's dual bound is a lower bound on
/// Checkmate's optimum; its schedules are simulated, which checks that the outputs they keep
/// fit the prefix (by the choice of the prefix, any set of outputs still read later does).
pub fn model_stages(g: &Graph, budget: u64, size: usize) -> (Vec<RangeInclusive<usize>>, usize) {
    let n = g.len();
    let a = g.fitting_prefix(budget);
    if a < 2 {
        return (uniform_stages(n, size), 0);
    }
    let stages = std::iter::once(0..=a - 1)
        .chain(
            uniform_stages(n - a, size)
                .into_iter()
                .map(|st| st.start() + a..=st.end() + a),
        )
        .collect();
    (stages, a)
}

/// Nodes per stage so that the stages after the checkpoint-all prefix
/// ([`Graph::fitting_prefix`] at `budget` bytes) number at most `max_stages`:
/// `ceil((n - prefix) / max_stages)`, at least 1.
pub fn default_stage_size(g: &Graph, budget: u64, max_stages: usize) -> usize {
    let (_, a) = model_stages(g, budget, 1);
    (g.len() - a).div_ceil(max_stages.max(1)).max(1)
}

/// Options of [`solve_staged`].
#[derive(Debug, Clone)]
pub struct StagedOptions {
    /// HiGHS time limit, gap, threads, heuristic effort; `warm_start` is used when
    /// `stage_size == 1` (any Checkmate schedule is then a staged schedule).
    pub milp: MilpOptions,
    /// Nodes per stage (1: Checkmate's stages; larger: fewer stages, a restriction).
    pub stage_size: usize,
    /// At most this many computations of each node (`sum_s R[s][i] <= C`; Moccasin's bounded
    /// recomputation, a restriction); `None`: unbounded.
    pub max_computations: Option<u32>,
    /// Stop at the first improving solution HiGHS finds (HiGHS `mip_max_improving_sols = 1`),
    /// to measure the time to a first feasible schedule.
    pub stop_at_first: bool,
    /// Solve the model's LP relaxation first (a third of the time limit) for its bound and
    /// for repaired LP-rounding warm starts.
    pub lp_rounding: bool,
    /// Solve the boundary-memory relaxation first ([`crate::boundary::boundary_bound`],
    /// [`BOUNDARY_SHARE`] of the time limit): its bound is valid for Checkmate's problem, its
    /// schedule, when it fits, ends the solve with that proof, and otherwise is repaired into
    /// a warm start.
    pub boundary: bool,
    /// Improve the best heuristic schedule by simulated annealing ([`crate::anneal`],
    /// [`ANNEAL_SHARE`] of the time limit) before the MILP, when the boundary relaxation did
    /// not end the solve; a schedule within the gap of the valid bound then ends it.
    pub anneal: bool,
    /// When `milp.time_limit_s` starts counting (`None`: at the call), so that a caller's own
    /// work (the baselines of [`crate::plan::plan`], a coarse solve before a refined one)
    /// counts against the same limit.
    pub start: Option<Instant>,
}

/// Share of [`StagedOptions`]' time limit given to the boundary-memory relaxation.
pub const BOUNDARY_SHARE: f64 = 0.4;

/// Share of [`StagedOptions`]' time limit given to simulated annealing.
pub const ANNEAL_SHARE: f64 = 0.25;

impl Default for StagedOptions {
    fn default() -> Self {
        StagedOptions {
            milp: MilpOptions::default(),
            stage_size: 1,
            max_computations: None,
            stop_at_first: false,
            lp_rounding: true,
            boundary: true,
            anneal: true,
            start: None,
        }
    }
}

/// Result of [`solve_staged`].
#[derive(Debug, Clone)]
pub struct StagedOutcome {
    /// The best schedule (the MILP's or the warm start's), expanded to Checkmate's matrices and
    /// validated by the simulator, with its simulation.
    pub best: Option<(Schedule, SimResult)>,
    /// The best heuristic schedule's simulation (greedy eviction, or repair of the
    /// checkpoint-all, LP-rounded or boundary-relaxation storage; with grouped stages, one node per stage when
    /// nothing fitted at the model's granularity), if one fitted.
    pub greedy: Option<SimResult>,
    /// Optimal objective of the model's LP relaxation, cost units (`None`: not solved to
    /// optimality in its time share). A lower bound on Checkmate's optimum when the model is
    /// unrestricted (one node per stage, no computation bound), else on the restricted model's.
    pub lp_bound: Option<f64>,
    /// Objective of HiGHS' incumbent, cost units.
    pub objective: Option<f64>,
    /// HiGHS' dual bound for the model solved (restricted when `stage_size > 1` or
    /// computations are bounded), cost units.
    pub dual_bound: f64,
    /// HiGHS' relative gap for the model solved.
    pub mip_gap: f64,
    /// A lower bound valid for the unrestricted Checkmate problem, cost units: the largest of
    /// `sum_i C_i`, `boundary_bound` and, for the unrestricted model, `dual_bound` and
    /// `lp_bound`.
    pub valid_bound: f64,
    /// HiGHS model status ([`crate::milp::highs_status`]), or the bound that settled the solve
    /// without the MILP: [`SolveStatus::InfeasibleWorkingSet`],
    /// [`SolveStatus::InfeasibleBoundaryRelaxation`], [`SolveStatus::OptimalBoundaryRelaxation`]
    /// or [`SolveStatus::OptimalNodeCostSum`].
    pub status: SolveStatus,
    /// Wall time of heuristic, model build and solve, seconds.
    pub solve_time_s: f64,
    /// Columns, integer columns and rows of the model (of the boundary relaxation when it
    /// ended the solve).
    pub size: ModelSize,
    /// Nodes per stage of the model.
    pub stage_size: usize,
    /// Lower bound of the boundary-memory relaxation on Checkmate's optimum, cost units
    /// (`None`: not solved).
    pub boundary_bound: Option<f64>,
    /// The boundary relaxation's LP bound with its closure cuts
    /// ([`crate::boundary::BoundaryOutcome::lp_bound`]), cost units (`None`: not solved).
    pub boundary_lp_bound: Option<f64>,
    /// Closure cuts the boundary relaxation added.
    pub closure_cuts: usize,
    /// Simulation of the annealed schedule ([`StagedOptions::anneal`]; `None`: not run or
    /// nothing fitted).
    pub annealed: Option<SimResult>,
    /// How each stage used its share of the time limit, in the order run.
    pub stages: Vec<StageTime>,
}

impl StagedOutcome {
    /// The outcome before any stage: no schedule, the bound `sum C`, status not set.
    fn empty(g: &Graph, opts: &StagedOptions) -> StagedOutcome {
        StagedOutcome {
            best: None,
            greedy: None,
            lp_bound: None,
            objective: None,
            dual_bound: f64::NAN,
            mip_gap: f64::NAN,
            valid_bound: g.total_cost(),
            status: SolveStatus::NotSet,
            solve_time_s: 0.0,
            size: ModelSize::default(),
            stage_size: opts.stage_size.max(1),
            boundary_bound: None,
            boundary_lp_bound: None,
            closure_cuts: 0,
            annealed: None,
            stages: Vec::new(),
        }
    }
}

impl StagedOutcome {
    /// Relative gap of `best` against [`StagedOutcome::valid_bound`]: `(cost - bound) / cost`,
    /// a fraction (NaN without a schedule).
    pub fn valid_gap(&self) -> f64 {
        match &self.best {
            Some((_, r)) if r.cost > 0.0 => ((r.cost - self.valid_bound) / r.cost).max(0.0),
            Some(_) => 0.0,
            None => f64::NAN,
        }
    }
}

/// A fitting schedule (the cheaper of warm start and fallback) within the target gap of
/// `out.valid_bound`, a bound valid for Checkmate's problem, ends the solve: no restricted
/// model can do better than Checkmate's optimum. Fills `out` (status
/// [`SolveStatus::OptimalBoundaryRelaxation`] when a boundary relaxation gave the bound, else
/// [`SolveStatus::OptimalNodeCostSum`], with `size` the relaxation's) and returns true.
fn end_within_gap(st: &mut Solve) -> bool {
    let Some((sch, sim)) = st.best() else {
        return false;
    };
    let gap = (sim.cost - st.out.valid_bound).max(0.0) / sim.cost.max(f64::MIN_POSITIVE);
    if gap > st.opts.milp.mip_gap {
        return false;
    }
    let heuristic = st.out.greedy;
    let out = &mut st.out;
    out.status = match st.relax_size {
        Some(_) => SolveStatus::OptimalBoundaryRelaxation,
        None => SolveStatus::OptimalNodeCostSum,
    };
    out.size = st.relax_size.unwrap_or_default();
    out.dual_bound = out.valid_bound;
    out.mip_gap = gap;
    out.objective = Some(sim.cost);
    out.greedy = heuristic;
    out.best = Some((sch, sim));
    true
}

/// A candidate schedule: staged, expanded to Checkmate's matrices, simulated.
type Candidate = (StagedSchedule, Schedule, SimResult);

/// The state of one [`solve_staged`] call, passed from stage to stage.
struct Solve<'a> {
    g: &'a Graph,
    budget: u64,
    opts: &'a StagedOptions,
    deadline: Deadline,
    stages: Vec<RangeInclusive<usize>>,
    prefix: usize,
    /// One node per stage after the prefix: Checkmate's schedule space.
    fine: bool,
    /// The best schedule at the model's granularity (its warm start).
    warm: Option<Candidate>,
    /// With grouped stages, the best one-node-per-stage schedule (it cannot warm-start the
    /// grouped model but is reported when HiGHS finds nothing better).
    fallback: Option<(Schedule, SimResult)>,
    /// Size of the boundary relaxation solved (the largest window's when windowed).
    relax_size: Option<ModelSize>,
    out: StagedOutcome,
}

impl Solve<'_> {
    /// `s` when it fits the budget and the computation bound, expanded and simulated.
    fn within(&self, s: &StagedSchedule) -> Option<Candidate> {
        if let Some(c) = self.opts.max_computations {
            let over = (0..self.g.len()).any(|i| s.r.iter().filter(|r| r[i]).count() > c as usize);
            if over {
                return None;
            }
        }
        let e = s.expand(self.g);
        let sim = simulate(self.g, &e).ok()?;
        (sim.peak_mem <= self.budget).then(|| (s.clone(), e, sim))
    }

    /// Offers a Checkmate schedule (one node per stage): as a warm start when the model's
    /// stages are Checkmate's, else as the fallback; dropped when it does not fit.
    fn offer_checkmate(&mut self, cand: Schedule) {
        let cand = if self.fine {
            from_checkmate(&cand, &self.stages)
        } else {
            StagedSchedule {
                stages: uniform_stages(self.g.len(), 1),
                r: cand.r,
                s: cand.s,
            }
        };
        let Some(c) = self.within(&cand) else { return };
        if self.fine {
            self.offer_warm(c);
        } else {
            self.offer_fallback((c.1, c.2));
        }
    }

    /// Keeps `c` as the warm start when it is cheaper.
    fn offer_warm(&mut self, c: Candidate) {
        if self.warm.as_ref().is_none_or(|x| c.2.cost < x.2.cost) {
            self.warm = Some(c);
        }
    }

    /// Keeps `c` as the fallback when it is cheaper than both warm start and fallback.
    fn offer_fallback(&mut self, c: (Schedule, SimResult)) {
        let cost = c.1.cost;
        if self.warm.as_ref().is_none_or(|x| cost < x.2.cost)
            && self.fallback.as_ref().is_none_or(|x| cost < x.1.cost)
        {
            self.fallback = Some(c);
        }
    }

    /// The cheaper of warm start and fallback, expanded, with its simulation.
    fn best(&self) -> Option<(Schedule, SimResult)> {
        let warm = self.warm.as_ref().map(|x| (&x.1, x.2));
        let fallback = self.fallback.as_ref().map(|x| (&x.0, x.1));
        [warm, fallback]
            .into_iter()
            .flatten()
            .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
            .map(|(sch, sim)| (sch.clone(), sim))
    }

    /// The simulation of the warm start, else of the fallback (what
    /// [`StagedOutcome::greedy`] reports).
    fn best_sim(&self) -> Option<SimResult> {
        self.warm
            .as_ref()
            .map(|x| x.2)
            .or(self.fallback.as_ref().map(|x| x.1))
    }

    /// `pb` handed to HiGHS with this solve's options and `seconds` as its time limit.
    fn optimise(&self, pb: RowProblem, seconds: f64) -> highs::Model {
        let milp = MilpOptions {
            time_limit_s: seconds.max(0.01),
            ..self.opts.milp.clone()
        };
        optimise(pb, &milp, self.opts.stop_at_first)
    }

    /// The staged model of this solve (its LP relaxation when not `integer`).
    fn model(&self, integer: bool) -> (RowProblem, Vars) {
        let (g, stages) = (self.g, &self.stages);
        build(
            g,
            self.budget,
            stages,
            self.prefix,
            self.opts.max_computations,
            integer,
        )
    }

    fn record(&mut self, stage: PlanStage, since: Instant, limit: Option<f64>, at_limit: bool) {
        self.out
            .stages
            .push(StageTime::since(stage, since, limit, at_limit));
    }

    /// The end of a solve without the staged model (a graph over
    /// [`WHOLE_RELAXATION_COLUMNS`]): the best candidate, unless the bound ended the solve.
    fn finish_large(mut self) -> StagedOutcome {
        if self.out.status == SolveStatus::NotSet {
            self.out.status = if self.best_sim().is_some() {
                SolveStatus::Feasible
            } else {
                SolveStatus::NotFound
            };
            self.out.greedy = self.best_sim();
            self.out.best = self.best();
        }
        self.finish()
    }

    fn finish(mut self) -> StagedOutcome {
        self.out.solve_time_s = self.deadline.elapsed();
        self.out
    }
}

/// Columns of the whole boundary relaxation above which [`solve_staged`] (with
/// [`StagedOptions::boundary`]) bounds by windows ([`crate::boundary::window_bound`]) and, its
/// staged model being too large for HiGHS in the time, gives the rest of the time to annealing
/// instead of the LP rounding and the MILP. The
/// whole relaxation of the random layered n250 graph at budget 0.8 (about 5 x 10^4 columns)
/// solves in 16 s on 2 threads, that of n500 (2.3 x 10^5) in 43 s, that of n1000 (9.1 x 10^5)
/// not in 60 s.
pub const WHOLE_RELAXATION_COLUMNS: usize = 100_000;

/// Columns of the whole boundary relaxation above which [`solve_staged`] bounds by windows
/// ([`crate::boundary::window_bound`]) instead: the whole relaxation of the random layered
/// n500 w 0.36 seed 2 graph at budget 0.8 (2.4 x 10^5 columns) bounds at 253,748 in 58 s on
/// one thread, its windows at 251,737 (`sum C` 251,137); that of n1000 w 0.31 seed 1
/// (9.1 x 10^5) solves no LP in 60 s (509,932 after 20 minutes), its windows 507,048 (`sum C`
/// 506,540).
pub const WINDOWED_COLUMNS: usize = 300_000;

/// Share of the time limit given to the windowed bound on graphs over [`WINDOWED_COLUMNS`]
/// when the bound and the annealing run one after the other (one thread): the windows' LPs
/// need most of the time, and annealing on the random layered n1000 w 0.31 graph at budget 0.8
/// levels off within seconds (523,796 after 6 s, 523,115 after 24 s, from greedy eviction's
/// 535,099).
pub const WINDOW_SHARE: f64 = 0.75;

/// Solves the staged MILP at `budget` bytes (fixed memory included), minimizing total compute
/// cost (eq. 1a), warm-started from the best of [`greedy_best`] and (one node per stage)
/// `opts.milp.warm_start`. The returned schedule is the cheaper of HiGHS' incumbent (with its
/// recomputation made minimal for its storage decisions) and the warm start, expanded to
/// Checkmate's matrices and validated by the simulator.
///
/// **Time.** `opts.milp.time_limit_s` bounds the whole call, counted from `opts.start` (or
/// the call): greedy eviction, the whole boundary relaxation ([`BOUNDARY_SHARE`]), annealing
/// ([`ANNEAL_SHARE`]), the LP rounding (a third, at most half of what is left) and the MILP
/// (the rest; skipped, with status [`SolveStatus::ReachedTimeLimit`], when less than
/// [`MIN_SOLVE_S`] is left). On graphs whose whole relaxation has more than
/// [`WHOLE_RELAXATION_COLUMNS`] columns there is no staged model: the bound (the whole
/// relaxation, or the window bound above [`WINDOWED_COLUMNS`]) and the annealing run side by
/// side on two threads or more ([`BESIDE_SHARE`] of the time for the bound, all of it for the
/// annealing), one after the other on one ([`BOUNDARY_SHARE`] or [`WINDOW_SHARE`], then what
/// is left). Each stage's time and limit are in [`StagedOutcome::stages`]. Beyond the limit it
/// overruns by at most one model construction and one simulation per candidate schedule.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub fn solve_staged(
    g: &Graph,
    budget: u64,
    opts: &StagedOptions,
) -> Result<StagedOutcome, RematError> {
    let deadline = Deadline::from(
        opts.start.unwrap_or_else(Instant::now),
        opts.milp.time_limit_s,
    );
    let columns = Window::whole(g.len(), g.fitting_prefix(budget)).columns(g.len());
    let large = opts.boundary && columns > WHOLE_RELAXATION_COLUMNS;
    let (stages, prefix) = model_stages(g, budget, opts.stage_size);
    let fine = stages
        .iter()
        .skip(usize::from(prefix > 0))
        .all(|st| st.start() == st.end());
    let mut st = Solve {
        g,
        budget,
        opts,
        deadline,
        stages,
        prefix,
        fine,
        warm: None,
        fallback: None,
        relax_size: None,
        out: StagedOutcome::empty(g, opts),
    };
    if budget < g.working_set_bound() {
        st.out.status = SolveStatus::InfeasibleWorkingSet;
        st.out.dual_bound = f64::INFINITY;
        st.out.valid_bound = f64::INFINITY;
        return Ok(st.finish());
    }
    heuristics(&mut st);
    if large {
        // The staged model of such a graph is too large for HiGHS in the time limit.
        large_stages(&mut st, columns > WINDOWED_COLUMNS)?;
        return Ok(st.finish_large());
    }
    if opts.boundary {
        boundary_stage(&mut st, BOUNDARY_SHARE, opts.milp.threads, None)?;
        if st.out.status != SolveStatus::NotSet {
            return Ok(st.finish());
        }
    }
    if opts.anneal {
        anneal_stage(&mut st, ANNEAL_SHARE, false);
        if end_within_gap(&mut st) {
            return Ok(st.finish());
        }
    }
    if opts.lp_rounding {
        lp_rounding_stage(&mut st)?;
    }
    st.out.greedy = st.best_sim();
    milp_stage(&mut st)?;
    Ok(st.finish())
}

/// Least time, seconds, for which [`solve_staged`] still starts an LP or a MILP.
pub const MIN_SOLVE_S: f64 = 0.5;

/// Greedy eviction at the model's granularity, the one-node-per-stage fallback, and the
/// caller's warm start.
fn heuristics(st: &mut Solve) {
    let since = Instant::now();
    let (g, budget) = (st.g, st.budget);
    st.warm = greedy_best(g, budget, &st.stages).and_then(|(s, _)| st.within(&s));
    // With grouped stages and no fitting heuristic at that granularity, the heuristics with one
    // node per stage may still fit.
    if st.warm.is_none() && !st.fine && st.opts.max_computations.is_none() {
        st.fallback =
            greedy_best(g, budget, &uniform_stages(g.len(), 1)).map(|(s, r)| (s.expand(g), r));
    }
    let given = st.opts.milp.warm_start.as_ref();
    if st.fine {
        if let Some(c) = given.and_then(|w| st.within(&from_checkmate(w, &st.stages))) {
            st.offer_warm(c);
        }
    } else if st.opts.max_computations.is_none() {
        // A Checkmate schedule cannot warm-start a grouped model, but may be the best one.
        let one = uniform_stages(g.len(), 1);
        if let Some(c) = given.and_then(|w| st.within(&from_checkmate(w, &one))) {
            st.offer_fallback((c.1, c.2));
        }
    }
    st.out.greedy = st.best_sim();
    st.record(PlanStage::GreedyEviction, since, None, false);
}

/// The whole boundary relaxation ([`boundary_bound`], `share` of the time, HiGHS on `threads`
/// threads, ending early once its bound is within the gap of the best schedule of the
/// annealing `beside` it): its bound, its schedule (repaired) as a candidate, and the end of
/// the solve when it proves the budget infeasible or a schedule within the gap.
fn boundary_stage(
    st: &mut Solve,
    share: f64,
    threads: u32,
    beside: Option<Arc<Beside>>,
) -> Result<(), RematError> {
    let since = Instant::now();
    let (g, budget) = (st.g, st.budget);
    let limit = st.deadline.share(share);
    let relax = boundary_bound(
        g,
        budget,
        &MilpOptions {
            time_limit_s: limit,
            threads,
            beside,
            warm_start: st
                .warm
                .as_ref()
                .map(|x| x.1.clone())
                .or(st.fallback.as_ref().map(|x| x.0.clone())),
            ..st.opts.milp.clone()
        },
    )?;
    st.out.boundary_bound = Some(relax.bound);
    st.out.boundary_lp_bound = relax.lp_bound;
    st.out.closure_cuts = relax.cuts;
    st.out.valid_bound = st.out.valid_bound.max(relax.bound);
    let at_limit = relax.status == SolveStatus::ReachedTimeLimit;
    st.record(PlanStage::BoundaryRelaxation, since, Some(limit), at_limit);
    if relax.bound.is_infinite() {
        st.out.status = SolveStatus::InfeasibleBoundaryRelaxation;
        st.out.dual_bound = f64::INFINITY;
        return Ok(());
    }
    if let Some(sch) = &relax.schedule {
        let one = uniform_stages(g.len(), 1);
        let repaired = repair(g, budget, &one, &sch.s).map(|x| x.expand(g));
        for cand in [Some(sch.clone()), repaired].into_iter().flatten() {
            st.offer_checkmate(cand);
        }
    }
    st.relax_size = Some(ModelSize {
        columns: relax.columns,
        integer_columns: relax.columns,
        rows: relax.rows,
    });
    end_within_gap(st);
    Ok(())
}

/// The windowed boundary relaxation ([`window_bound`], `share` of the time, HiGHS on `threads`
/// threads) of a graph too large for the whole one: a bound only.
fn window_stage(st: &mut Solve, share: f64, threads: u32) -> Result<(), RematError> {
    let since = Instant::now();
    let limit = st.deadline.share(share);
    let w = window_bound(
        st.g,
        st.budget,
        &MilpOptions {
            time_limit_s: limit,
            threads,
            ..st.opts.milp.clone()
        },
        WINDOW_COLUMNS,
    )?;
    st.out.boundary_bound = Some(w.bound);
    let columns = w.windows.iter().map(|x| x.columns(st.g.len())).max();
    st.relax_size = Some(ModelSize {
        columns: columns.unwrap_or(0),
        integer_columns: columns.unwrap_or(0),
        rows: 0,
    });
    st.out.closure_cuts = w.cuts;
    st.out.valid_bound = st.out.valid_bound.max(w.bound);
    st.record(PlanStage::WindowBound, since, Some(limit), w.at_limit);
    if w.bound.is_infinite() {
        st.out.status = SolveStatus::InfeasibleBoundaryRelaxation;
        st.out.dual_bound = f64::INFINITY;
        return Ok(());
    }
    end_within_gap(st);
    Ok(())
}

/// The stages of a graph over [`WHOLE_RELAXATION_COLUMNS`] (no staged model): the bound, the
/// whole boundary relaxation or, when `windowed`, the window bound, and the annealing. With at
/// least two threads they run side by side (`bound_and_anneal`); with one, the bound takes
/// its share ([`BOUNDARY_SHARE`] or [`WINDOW_SHARE`]) and the annealing what is left.
fn large_stages(st: &mut Solve, windowed: bool) -> Result<(), RematError> {
    let threads = st.opts.milp.threads;
    if threads >= 2 && st.opts.anneal {
        return bound_and_anneal(st, windowed);
    }
    if windowed {
        window_stage(st, WINDOW_SHARE, threads)?;
    } else {
        boundary_stage(st, BOUNDARY_SHARE, threads, None)?;
    }
    if st.out.status == SolveStatus::NotSet && st.opts.anneal {
        anneal_stage(st, 1.0, true);
        end_within_gap(st);
    }
    Ok(())
}

/// Share of the time limit of the bound that runs beside the annealing (`bound_and_anneal`):
/// the rest covers the construction of its last model and, after its last solve, the repair and
/// simulation of its schedule (on the random layered n500 w 0.36 graphs at budget 0.8 the whole
/// relaxation ended 1.7 s past a 60 s limit with all of it, seed 1, and 1.7 s past with 95%,
/// seed 2, whose last integer round left a schedule to repair).
pub const BESIDE_SHARE: f64 = 0.9;

/// The bound of [`large_stages`] (HiGHS on one thread fewer, [`BESIDE_SHARE`] of the time
/// limit) and the annealing (on one thread, until the deadline) side by side; the annealing
/// stops early when the bound ends the solve (a schedule within the gap, or an infeasible
/// budget). On the random layered graphs of 500 and 1,000 nodes the bound needs most of the
/// time limit (the whole relaxation of n500 w 0.36 seed 2 at budget 0.8: 58 s on one thread)
/// and the annealing still improves after tens of seconds (n1000 w 0.43 seed 3 at 0.8: 635,771
/// after 1,200 moves in 12 s, from greedy eviction's 816,138), so neither gives the other its
/// share.
fn bound_and_anneal(st: &mut Solve, windowed: bool) -> Result<(), RematError> {
    let since = Instant::now();
    let (g, budget) = (st.g, st.budget);
    let limit = st.deadline.left();
    let from = anneal_start(st, true).filter(|_| limit > 0.0);
    let threads = st.opts.milp.threads - 1;
    let beside = Arc::new(Beside::default());
    std::thread::scope(|scope| {
        let annealing = from.map(|from| {
            let beside = &*beside;
            scope.spawn(move || {
                let opts = AnnealOptions {
                    time_limit_s: limit,
                    seed: 0,
                    max_moves: None,
                };
                (
                    anneal_until(g, budget, &from.stages, &from, &opts, beside),
                    from,
                )
            })
        });
        let bound = if windowed {
            window_stage(st, BESIDE_SHARE, threads)
        } else {
            boundary_stage(st, BESIDE_SHARE, threads, Some(beside.clone()))
        };
        if bound.is_err() || st.out.status != SolveStatus::NotSet {
            beside.stop.store(true, Ordering::Relaxed);
        } else if st.opts.milp.mip_gap < 1.0 {
            // The annealing may end as soon as its schedule is within the gap of the bound.
            beside.set_target(st.out.valid_bound / (1.0 - st.opts.milp.mip_gap));
        }
        if let Some(h) = annealing {
            let (a, from) = h.join().expect("the annealing thread does not panic");
            take_annealed(st, a, &from, since, limit);
        }
        bound?;
        // A cheaper annealed schedule replaces the one a finished bound chose.
        if st.out.status == SolveStatus::NotSet
            || st.out.status == SolveStatus::OptimalBoundaryRelaxation
        {
            end_within_gap(st);
        }
        Ok(())
    })
}

/// Where [`anneal`] starts: the cheaper of warm start and fallback, over the model's stages
/// when it is the warm start, else over one node per stage; over one node per stage in any
/// case when `one_node` (a graph without a staged model, where grouping only restricts the
/// schedule: on the random layered n1000 w 0.43 seed 3 graph at budget 0.8, 57 s of annealing
/// from greedy eviction's 691,969 reach 604,795 over stages of 6 nodes, 570,811 over single
/// nodes).
fn anneal_start(st: &Solve, one_node: bool) -> Option<StagedSchedule> {
    let one = || uniform_stages(st.g.len(), 1);
    match (&st.warm, &st.fallback) {
        (Some(w), f) if f.as_ref().is_none_or(|f| w.2.cost <= f.1.cost) => Some(if one_node {
            from_checkmate(&w.1, &one())
        } else {
            w.0.clone()
        }),
        (_, Some(f)) => Some(from_checkmate(&f.0, &one())),
        _ => None,
    }
}

/// Simulated annealing ([`anneal`]) from [`anneal_start`] (over one node per stage when
/// `one_node`), in `share` of the time limit (at most what is left).
fn anneal_stage(st: &mut Solve, share: f64, one_node: bool) {
    let since = Instant::now();
    let limit = st.deadline.share(share);
    let Some(from) = anneal_start(st, one_node).filter(|_| limit > 0.0) else {
        return;
    };
    let a = anneal(
        st.g,
        st.budget,
        &from.stages,
        &from,
        &AnnealOptions {
            time_limit_s: limit,
            seed: 0,
            max_moves: None,
        },
    );
    take_annealed(st, a, &from, since, limit);
}

/// Offers the annealed schedule (from `from`, started at `since` with `limit` seconds) and
/// records the stage: cut short when its first cooling schedule did not end in the time.
fn take_annealed(
    st: &mut Solve,
    a: AnnealOutcome,
    from: &StagedSchedule,
    since: Instant,
    limit: f64,
) {
    if let Some(c) = a.best.and_then(|(s, _)| st.within(&s)) {
        st.out.annealed = Some(c.2);
        if from.stages == st.stages {
            st.offer_warm(c);
        } else {
            st.offer_fallback((c.1, c.2));
        }
    }
    let at_limit = a.restarts == 0 && a.time_s >= 0.99 * limit;
    st.record(PlanStage::Anneal, since, Some(limit), at_limit);
}

/// The staged model's LP relaxation (a third of the time limit, at most half of what is left):
/// its bound, and its storage rounded at several thresholds and repaired to fit (two-phase
/// rounding, Checkmate Section 5.1, with repair) as warm starts.
fn lp_rounding_stage(st: &mut Solve) -> Result<(), RematError> {
    let since = Instant::now();
    let (g, budget) = (st.g, st.budget);
    let limit = (st.deadline.limit_s() / 3.0).min(st.deadline.left() / 2.0);
    if limit < MIN_SOLVE_S {
        st.record(PlanStage::LpRounding, since, Some(limit), true);
        return Ok(());
    }
    let (pb, v) = st.model(false);
    let model = st.optimise(pb, limit - since.elapsed().as_secs_f64());
    let solved = solve(model, "")?;
    let optimal = solved.status() == HighsModelStatus::Optimal;
    if optimal {
        st.out.lp_bound = Some(solved.objective_value());
        let sol = solved.get_solution();
        let cols = sol.columns();
        for th in LP_THRESHOLDS {
            let s0 = threshold(&v.cols.s, cols, th, g.len());
            if let Some(c) = repair(g, budget, &st.stages, &s0).and_then(|x| st.within(&x)) {
                st.offer_warm(c);
            }
        }
    }
    st.record(PlanStage::LpRounding, since, Some(limit), !optimal);
    Ok(())
}

/// The staged MILP in what is left of the time limit, warm-started; the best of its incumbent
/// (with minimal recomputation) and the candidates so far, and the bounds.
fn milp_stage(st: &mut Solve) -> Result<(), RematError> {
    let since = Instant::now();
    let g = st.g;
    let limit = st.deadline.left();
    let unrestricted = st.fine && st.opts.max_computations.is_none();
    if limit < MIN_SOLVE_S {
        st.out.status = SolveStatus::ReachedTimeLimit;
        st.out.best = st.best();
        st.record(PlanStage::Milp, since, Some(limit), true);
        return Ok(());
    }
    let (pb, v) = st.model(true);
    st.out.size = ModelSize {
        columns: pb.num_cols(),
        integer_columns: v.cols.integer,
        rows: pb.num_rows(),
    };
    let mut model = st.optimise(pb, limit - since.elapsed().as_secs_f64());
    if let Some((ws, _, _)) = &st.warm {
        warm_start(&mut model, &warm_vector(g, &v, ws))?;
    }
    let solved = solve(model, "")?;
    st.out.status = highs_status(solved.status());
    st.out.dual_bound = dual_bound(&solved);
    st.out.mip_gap = solved.mip_gap();
    let mut best = st.best();
    if let Some(objective) = incumbent_objective(&solved) {
        st.out.objective = Some(objective);
        let sol = solved.get_solution();
        let sch = incumbent(g, &st.stages, &v, sol.columns());
        for cand in [minimal_r(g, &sch), sch] {
            if let Some((_, e, sim)) = st.within(&cand) {
                if best.as_ref().is_none_or(|b| sim.cost < b.1.cost) {
                    best = Some((e, sim));
                }
            }
        }
    }
    if unrestricted {
        for b in [Some(st.out.dual_bound), st.out.lp_bound]
            .into_iter()
            .flatten()
        {
            if b.is_finite() {
                st.out.valid_bound = st.out.valid_bound.max(b);
            }
        }
    }
    st.out.best = best;
    let at_limit = st.out.status == SolveStatus::ReachedTimeLimit;
    st.record(PlanStage::Milp, since, Some(limit), at_limit);
    Ok(())
}

/// The staged schedule of the MILP's column values `cols`.
fn incumbent(
    g: &Graph,
    stages: &[RangeInclusive<usize>],
    v: &Vars,
    cols: &[f64],
) -> StagedSchedule {
    let n = g.len();
    let mut sch = StagedSchedule {
        stages: stages.to_vec(),
        r: vec![vec![false; n]; stages.len()],
        s: vec![vec![false; n]; stages.len()],
    };
    for (si, st) in stages.iter().enumerate() {
        for i in 0..=*st.end() {
            sch.r[si][i] = v.cols.r[si].get(i).is_none_or(|c| cols[c.index()] > 0.5);
        }
        for i in 0..*st.start() {
            sch.s[si][i] = cols[v.cols.s[si][i].index()] > 0.5;
        }
    }
    sch
}

/// Coarse-to-fine solve: the staged MILP with `opts.stage_size` nodes per stage for
/// `coarse_share` of the time limit, then, when `refine`, the unrestricted model (one node per
/// stage, Checkmate's schedule space, no LP-rounding pass) for the rest of the time, warm-started
/// from the best schedule so far. The refined model's dual bound and LP relaxation are bounds
/// on Checkmate's optimum. Returns the coarse outcome and the refined one.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub fn solve_refined(
    g: &Graph,
    budget: u64,
    opts: &StagedOptions,
    coarse_share: f64,
    refine: bool,
) -> Result<(StagedOutcome, Option<StagedOutcome>), RematError> {
    let start = opts.start.unwrap_or_else(Instant::now);
    let total = opts.milp.time_limit_s;
    // One node per stage is already the unrestricted model: it gets the whole time.
    let refine = refine && opts.stage_size > 1;
    let coarse_opts = StagedOptions {
        milp: MilpOptions {
            time_limit_s: if refine {
                total * coarse_share.clamp(0.0, 1.0)
            } else {
                total
            },
            ..opts.milp.clone()
        },
        start: Some(start),
        ..opts.clone()
    };
    let coarse = solve_staged(g, budget, &coarse_opts)?;
    // Only the working-set bound proves the full problem infeasible: a grouped model can be
    // infeasible at its granularity while one node per stage fits.
    if !refine || opts.stage_size <= 1 || coarse.status == SolveStatus::InfeasibleWorkingSet {
        return Ok((coarse, None));
    }
    let warm = coarse
        .best
        .as_ref()
        .map(|(s, _)| s.clone())
        .or_else(|| opts.milp.warm_start.clone());
    // The refined solve ends at the same deadline, counted from the same start.
    let fine_opts = StagedOptions {
        milp: MilpOptions {
            time_limit_s: total,
            warm_start: warm,
            ..opts.milp.clone()
        },
        stage_size: 1,
        max_computations: None,
        lp_rounding: false,
        boundary: false,
        start: Some(start),
        ..opts.clone()
    };
    let mut fine = solve_staged(g, budget, &fine_opts)?;
    for t in &mut fine.stages {
        if t.stage == PlanStage::Milp {
            t.stage = PlanStage::RefineMilp;
        }
    }
    // The coarse solve's boundary relaxation bounds Checkmate's problem too.
    fine.valid_bound = fine.valid_bound.max(coarse.valid_bound);
    fine.boundary_bound = coarse.boundary_bound;
    fine.boundary_lp_bound = coarse.boundary_lp_bound;
    fine.closure_cuts = coarse.closure_cuts;
    // The warm start is the coarse schedule; keep the cheaper if HiGHS did not take it.
    if let (Some(c), Some(f)) = (&coarse.best, &fine.best) {
        if c.1.cost < f.1.cost {
            fine.best = Some(c.clone());
        }
    } else if fine.best.is_none() {
        fine.best = coarse.best.clone();
    }
    Ok((coarse, Some(fine)))
}

#[cfg(test)]
mod tests;
