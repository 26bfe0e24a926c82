//! The planners on any graph: what `memwall plan` runs. One graph, one budget, one or all
//! solvers; each gives a schedule checked by the simulator, its cost, overhead and peak, the
//! solver's status, lower bound, gap and solve time, and the schedule as JSON (R and S per
//! stage and the list of recomputations, Jain et al. 2020, Section 4).

use super::baselines::{checkpoint_all, chen_greedy, chen_sqrt, greedy_thresholds, revolve};
use super::deadline::{Deadline, PlanStage, StageTime};
use super::milp::{solve_lp_rounding, solve_milp, MilpOptions};
use super::sim::{simulate, Schedule, SimResult};
use super::staged::{greedy_best, solve_refined, uniform_stages, StagedOptions, StagedOutcome};
use super::{Graph, RematError, SolveStatus};
use serde::Serialize;
use std::time::Instant;

/// A rematerialization planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Solver {
    /// The Checkmate MILP (Section 4), warm-started from the cheapest fitting baseline.
    Milp,
    /// The scalable MILP of [`crate::staged`]: `ceil(n / 50)` nodes per stage for 40% of the
    /// time, then (graphs of at most 300 nodes) Checkmate's one node per stage warm-started
    /// from it; its gap is against a bound valid for the unrestricted problem (the boundary
    /// relaxation, or on graphs too large for it the window bound of
    /// [`crate::boundary::window_bound`]).
    Staged,
    /// The LP relaxation with two-phase rounding (Section 5).
    LpRounding,
    /// Chen et al. 2016's greedy segmentation, the cheapest of its memory thresholds.
    Greedy,
    /// Chen et al. 2016's sqrt(n) segments.
    Sqrt,
    /// Griewank and Walther's revolve, the cheapest slot count that fits.
    Revolve,
    /// Keep every output until its last use (no recomputation).
    CheckpointAll,
}

impl Solver {
    /// Every solver, in the order `--solver all` runs them.
    pub const ALL: [Solver; 7] = [
        Solver::CheckpointAll,
        Solver::Sqrt,
        Solver::Greedy,
        Solver::Revolve,
        Solver::LpRounding,
        Solver::Staged,
        Solver::Milp,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Solver::Milp => "milp",
            Solver::Staged => "staged",
            Solver::LpRounding => "lp-rounding",
            Solver::Greedy => "greedy",
            Solver::Sqrt => "sqrt",
            Solver::Revolve => "revolve",
            Solver::CheckpointAll => "checkpoint-all",
        }
    }

    /// Parses a `--solver` value: one name, or `all`.
    ///
    /// # Errors
    /// [`RematError::Params`] naming the accepted values.
    pub fn parse_list(s: &str) -> Result<Vec<Solver>, RematError> {
        if s == "all" {
            return Ok(Solver::ALL.to_vec());
        }
        Solver::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .map(|x| vec![x])
            .ok_or_else(|| {
                let names: Vec<&str> = Solver::ALL.iter().map(|x| x.name()).collect();
                RematError::Params(format!(
                    "--solver {s:?} is not a solver; use one of {} or all",
                    names.join(", ")
                ))
            })
    }
}

/// The budget of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// Bytes, including the graph's fixed memory.
    Bytes(u64),
    /// Fraction of the checkpoint-all schedule's peak, in (0, 1].
    Fraction(f64),
}

impl Budget {
    /// The budget in bytes for graph `g`.
    ///
    /// # Errors
    /// [`RematError::Params`] for a fraction outside (0, 1] or a zero byte budget.
    pub fn bytes(self, g: &Graph) -> Result<u64, RematError> {
        match self {
            Budget::Bytes(0) => Err(RematError::Params(
                "--budget 0: a budget is a positive number of bytes".into(),
            )),
            Budget::Bytes(b) => Ok(b),
            Budget::Fraction(f) if f > 0.0 && f <= 1.0 => {
                Ok((checkpoint_all_peak(g)? as f64 * f).floor() as u64)
            }
            Budget::Fraction(f) => Err(RematError::Params(format!(
                "--budget-fraction {f} is not in (0, 1] (a fraction of the checkpoint-all peak)"
            ))),
        }
    }
}

/// Peak of the checkpoint-all schedule (no recomputation), bytes.
///
/// # Errors
/// [`RematError::InvalidSchedule`] if the graph is inconsistent.
pub fn checkpoint_all_peak(g: &Graph) -> Result<u64, RematError> {
    Ok(simulate(g, &checkpoint_all(g))?.peak_mem)
}

/// Solver options of `memwall plan`.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Wall-clock limit of the whole plan, seconds: baselines, bounds, annealing, every LP
    /// and MILP (see [`plan`]).
    pub time_limit_s: f64,
    /// Relative MIP gap at which the MILP stops.
    pub gap: f64,
    /// HiGHS threads.
    pub threads: u32,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            time_limit_s: 60.0,
            gap: 0.01,
            threads: 2,
        }
    }
}

impl PlanOptions {
    fn milp(&self) -> MilpOptions {
        MilpOptions {
            time_limit_s: self.time_limit_s,
            mip_gap: self.gap,
            threads: self.threads,
            ..Default::default()
        }
    }
}

/// One solver's answer at one budget.
#[derive(Debug, Clone, Serialize)]
pub struct PlanOutcome {
    /// The solver.
    pub solver: Solver,
    /// The budget, bytes.
    pub budget_bytes: u64,
    /// [`SolveStatus::Feasible`] or [`SolveStatus::NotFound`] for the heuristics (baselines,
    /// LP rounding), else the MILP's status (e.g. [`SolveStatus::Optimal`],
    /// [`SolveStatus::ReachedTimeLimit`]).
    pub status: SolveStatus,
    /// Total compute cost of the schedule (eq. 1a), graph cost units.
    pub cost: Option<f64>,
    /// Cost over one evaluation of every node (1.0 = no recomputation).
    pub overhead: Option<f64>,
    /// Simulated peak memory of the schedule, bytes (fixed memory included).
    pub peak_bytes: Option<u64>,
    /// Node evaluations beyond the first of each node.
    pub recomputations: Option<usize>,
    /// A proven lower bound on the optimal cost at this budget (MILP dual bound or LP
    /// relaxation), graph cost units.
    pub lower_bound: Option<f64>,
    /// `(cost - lower_bound) / cost`.
    pub gap: Option<f64>,
    /// Wall time, seconds.
    pub solve_time_s: f64,
    /// How each stage used its share of the time limit, in the order run (the LP and MILP
    /// solvers; empty for the baselines).
    pub stages: Vec<StageTime>,
    /// The schedule (not serialized here; see [`schedule_json`]).
    #[serde(skip)]
    pub schedule: Option<Schedule>,
}

/// The cheapest of `schedules` whose simulated peak fits `budget`.
fn cheapest_fitting(
    g: &Graph,
    schedules: impl IntoIterator<Item = Schedule>,
    budget: u64,
) -> Result<Option<(Schedule, SimResult)>, RematError> {
    let mut best: Option<(Schedule, SimResult)> = None;
    for s in schedules {
        let r = simulate(g, &s)?;
        if r.peak_mem <= budget && best.as_ref().is_none_or(|b| r.cost < b.1.cost) {
            best = Some((s, r));
        }
    }
    Ok(best)
}

/// The baseline schedules of `solver` (empty for the MILP and LP solvers).
fn baseline_schedules(g: &Graph, solver: Solver) -> Vec<Schedule> {
    match solver {
        Solver::CheckpointAll => vec![checkpoint_all(g)],
        Solver::Sqrt => vec![chen_sqrt(g)],
        Solver::Greedy => greedy_thresholds(g, 32)
            .into_iter()
            .map(|t| chen_greedy(g, t))
            .collect(),
        Solver::Revolve => (0..=g.forward_nodes().len())
            .map(|s| revolve(g, s))
            .collect(),
        Solver::Milp | Solver::LpRounding | Solver::Staged => Vec::new(),
    }
}

/// The cheapest fitting schedule of every baseline and of greedy eviction at `budget` (the
/// MILP's warm start).
fn best_baseline(g: &Graph, budget: u64) -> Result<Option<(Schedule, SimResult)>, RematError> {
    let all = [
        Solver::CheckpointAll,
        Solver::Sqrt,
        Solver::Greedy,
        Solver::Revolve,
    ]
    .into_iter()
    .flat_map(|s| baseline_schedules(g, s));
    let chain = cheapest_fitting(g, all, budget)?;
    Ok(chain
        .into_iter()
        .chain(greedy_eviction(g, budget))
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost)))
}

/// Greedy eviction at `budget` bytes with one node per stage ([`greedy_best`]), as a
/// Checkmate schedule with its simulation (it fits the budget); `None` when it finds nothing.
fn greedy_eviction(g: &Graph, budget: u64) -> Option<(Schedule, SimResult)> {
    greedy_best(g, budget, &uniform_stages(g.len(), 1)).map(|(s, r)| (s.expand(g), r))
}

/// The least peak of the checkpoint-all and chain baseline schedules (sqrt(n), greedy
/// segmentation, revolve), bytes: a feasible budget.
///
/// # Errors
/// [`RematError::InvalidSchedule`] if the graph is inconsistent.
fn baseline_peak(g: &Graph) -> Result<u64, RematError> {
    let mut peak = checkpoint_all_peak(g)?;
    for s in [Solver::Sqrt, Solver::Greedy, Solver::Revolve] {
        for sch in baseline_schedules(g, s) {
            peak = peak.min(simulate(g, &sch)?.peak_mem);
        }
    }
    Ok(peak)
}

/// Thresholds at which LP rounding rounds `S` (Section 5.1), as the Checkmate study uses them.
const ROUNDING_THRESHOLDS: [f64; 5] = [0.1, 0.3, 0.5, 0.7, 0.9];
/// Budget factors at which LP rounding re-solves the relaxation when no rounding fits.
const LP_TIGHTEN: [f64; 8] = [0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5];
/// Fewer re-solves when LP rounding only seeds the MILP's warm start.
const WARM_START_TIGHTEN: [f64; 4] = [0.95, 0.9, 0.8, 0.7];

/// Share of the MILP solver's time limit given to the LP rounding that seeds its warm start.
pub const MILP_ROUNDING_SHARE: f64 = 1.0 / 3.0;

/// Runs `solver` on `g` at `budget` bytes within `opts.time_limit_s` for the whole call. The
/// MILP is warm-started from the cheapest fitting baseline, greedy-eviction or LP-rounded
/// schedule (the rounding gets [`MILP_ROUNDING_SHARE`] of the time, the MILP the rest); the
/// staged solver's baselines count against its limit (see [`crate::staged::solve_staged`] for
/// its shares). [`PlanOutcome::stages`] says how each stage used its share.
///
/// # Errors
/// Solver errors (HiGHS) and invalid graphs.
pub fn plan(
    g: &Graph,
    solver: Solver,
    budget: u64,
    opts: &PlanOptions,
) -> Result<PlanOutcome, RematError> {
    let start = Instant::now();
    let mut stages = Vec::new();
    let (best, status, lower_bound) = match solver {
        Solver::Milp => plan_milp(g, budget, opts, &mut stages)?,
        Solver::Staged => plan_staged(g, budget, opts, start, &mut stages)?,
        Solver::LpRounding => {
            let out =
                solve_lp_rounding(g, budget, &opts.milp(), &ROUNDING_THRESHOLDS, &LP_TIGHTEN)?;
            let at_limit = out.lp_bound.is_none() && out.solve_time_s >= 0.99 * opts.time_limit_s;
            stages.push(StageTime::since(
                PlanStage::LpRounding,
                start,
                Some(opts.time_limit_s),
                at_limit,
            ));
            let best = out.rounded.map(|(s, r, _)| (s, r));
            let status = if best.is_some() {
                SolveStatus::Feasible
            } else {
                SolveStatus::NotFound
            };
            (best, status, out.lp_bound)
        }
        _ => {
            let best = cheapest_fitting(g, baseline_schedules(g, solver), budget)?;
            let status = if best.is_some() {
                SolveStatus::Feasible
            } else {
                SolveStatus::NotFound
            };
            (best, status, None)
        }
    };
    let mut out = outcome(g, solver, budget, best, status, lower_bound);
    out.solve_time_s = start.elapsed().as_secs_f64();
    out.stages = stages;
    Ok(out)
}

/// The best schedule, status and lower bound of a solver's run.
type Planned = (Option<(Schedule, SimResult)>, SolveStatus, Option<f64>);

/// The MILP warm-started from the best baseline and LP-rounded schedule.
fn plan_milp(
    g: &Graph,
    budget: u64,
    opts: &PlanOptions,
    stages: &mut Vec<StageTime>,
) -> Result<Planned, RematError> {
    let deadline = Deadline::new(opts.time_limit_s);
    let since = Instant::now();
    let limit = deadline.share(MILP_ROUNDING_SHARE);
    let rounding = solve_lp_rounding(
        g,
        budget,
        &MilpOptions {
            time_limit_s: limit,
            ..opts.milp()
        },
        &ROUNDING_THRESHOLDS,
        &WARM_START_TIGHTEN,
    )?;
    let at_limit = rounding.lp_bound.is_none() && rounding.solve_time_s >= 0.99 * limit;
    stages.push(StageTime::since(
        PlanStage::LpRounding,
        since,
        Some(limit),
        at_limit,
    ));
    let since = Instant::now();
    let warm = best_baseline(g, budget)?
        .into_iter()
        .chain(rounding.rounded.map(|(s, r, _)| (s, r)))
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
        .map(|b| b.0);
    stages.push(StageTime::since(PlanStage::Baselines, since, None, false));
    let since = Instant::now();
    let limit = deadline.left();
    let out = solve_milp(
        g,
        budget,
        &MilpOptions {
            warm_start: warm,
            time_limit_s: limit.max(0.01),
            ..opts.milp()
        },
    )?;
    let at_limit = out.status == SolveStatus::ReachedTimeLimit;
    stages.push(StageTime::since(
        PlanStage::Milp,
        since,
        Some(limit),
        at_limit,
    ));
    let lb = out.dual_bound.is_finite().then_some(out.dual_bound);
    Ok((out.best, out.status, lb))
}

/// The staged solver ([`solve_refined`]) after the baselines, all within one time limit from
/// `start`.
fn plan_staged(
    g: &Graph,
    budget: u64,
    opts: &PlanOptions,
    start: Instant,
    stages: &mut Vec<StageTime>,
) -> Result<Planned, RematError> {
    let warm = best_baseline(g, budget)?.map(|b| b.0);
    stages.push(StageTime::since(PlanStage::Baselines, start, None, false));
    let so = StagedOptions {
        milp: MilpOptions {
            warm_start: warm,
            ..opts.milp()
        },
        stage_size: super::staged::default_stage_size(g, budget, super::staged::DEFAULT_MAX_STAGES),
        start: Some(start),
        ..Default::default()
    };
    let (coarse, fine) = solve_refined(g, budget, &so, 0.4, g.len() <= 300)?;
    stages.extend(coarse.stages.iter().copied());
    if let Some(f) = &fine {
        stages.extend(f.stages.iter().copied());
    }
    let cost = |o: &StagedOutcome| o.best.as_ref().map_or(f64::INFINITY, |b| b.1.cost);
    let bound = fine.as_ref().map_or(coarse.valid_bound, |f| {
        f.valid_bound.max(coarse.valid_bound)
    });
    let best = match fine {
        Some(f) if cost(&f) <= cost(&coarse) => f,
        _ => coarse,
    };
    let lb = bound.is_finite().then_some(bound);
    Ok((best.best, best.status, lb))
}

/// A solver's [`PlanOutcome`] from its best schedule, status and lower bound.
fn outcome(
    g: &Graph,
    solver: Solver,
    budget: u64,
    best: Option<(Schedule, SimResult)>,
    status: SolveStatus,
    lower_bound: Option<f64>,
) -> PlanOutcome {
    let total = g.total_cost();
    let (schedule, sim) = match best {
        Some((s, r)) => (Some(s), Some(r)),
        None => (None, None),
    };
    let cost = sim.map(|r| r.cost);
    PlanOutcome {
        solver,
        budget_bytes: budget,
        status,
        cost,
        overhead: cost.map(|c| c / total),
        peak_bytes: sim.map(|r| r.peak_mem),
        recomputations: sim.map(|r| r.recomputations),
        lower_bound,
        gap: match (cost, lower_bound) {
            (Some(c), Some(lb)) if c > 0.0 => Some(((c - lb) / c).max(0.0)),
            _ => None,
        },
        solve_time_s: 0.0,
        stages: Vec::new(),
        schedule,
    }
}

/// The smallest feasible budget of a graph, as far as it was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FeasibleBudget {
    /// No schedule fits below this, bytes (proven: the working set, or a MILP proved infeasible).
    pub lower_bytes: u64,
    /// A schedule fits this budget, bytes (found by a baseline or the MILP).
    pub upper_bytes: u64,
}

impl FeasibleBudget {
    /// Whether the bounds meet: `upper_bytes` is the exact smallest feasible budget.
    pub fn exact(&self) -> bool {
        self.lower_bytes >= self.upper_bytes
    }
}

/// The smallest feasible budget of `g` (min over schedules of the simulated peak): the
/// working-set lower bound and the best baseline's peak, lowered by bisection on greedy
/// eviction ([`crate::staged::greedy_best`], a heuristic: it can miss budgets that fit, never
/// reports one that does not), then bisection with MILP feasibility
/// solves until the bounds meet, a solve proves nothing in its time, or `opts.time_limit_s`
/// (all solves together) is spent.
///
/// # Errors
/// Solver errors (HiGHS) and invalid graphs.
pub fn smallest_feasible_budget(
    g: &Graph,
    opts: &PlanOptions,
) -> Result<FeasibleBudget, RematError> {
    let start = Instant::now();
    let mut lower = g.working_set_bound();
    let mut upper = baseline_peak(g)?;
    // The chain baselines rarely help on a general graph: bisect on greedy eviction (one node
    // per stage), each fitting schedule's peak a feasible budget.
    let mut low = lower;
    while low < upper {
        let mid = low + (upper - low) / 2;
        match greedy_eviction(g, mid) {
            Some((_, r)) => upper = r.peak_mem,
            None => low = mid + 1,
        }
    }
    while lower < upper {
        let left = opts.time_limit_s - start.elapsed().as_secs_f64();
        if left <= 0.0 {
            break;
        }
        let mid = lower + (upper - lower) / 2;
        let out = solve_milp(
            g,
            mid,
            &MilpOptions {
                mip_gap: 1.0,
                time_limit_s: left,
                ..opts.milp()
            },
        )?;
        match (&out.best, &out.status) {
            (Some((_, r)), _) => upper = r.peak_mem.min(mid),
            (None, status) if status.is_infeasible() => lower = mid + 1,
            _ => break,
        }
    }
    Ok(FeasibleBudget {
        lower_bytes: lower.min(upper),
        upper_bytes: upper,
    })
}

/// One recomputation: node `node` evaluated again in stage `stage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recomputation {
    /// Stage index `t`.
    pub stage: usize,
    /// Node index `i`.
    pub node: usize,
    /// Node name.
    pub name: String,
}

/// Every evaluation of a node after its first, in stage order.
pub fn recomputations(g: &Graph, sch: &Schedule) -> Vec<Recomputation> {
    let mut seen = vec![false; g.len()];
    let mut out = Vec::new();
    for (t, row) in sch.r.iter().enumerate() {
        for (i, &computed) in row.iter().enumerate() {
            if computed {
                if seen[i] {
                    out.push(Recomputation {
                        stage: t,
                        node: i,
                        name: g.nodes[i].name.clone(),
                    });
                }
                seen[i] = true;
            }
        }
    }
    out
}

/// The schedule file of `memwall plan --out`: the graph, the outcome, and per stage the
/// nodes computed (`R[t]`) and the outputs resident at its start (`S[t]`) as node index lists,
/// plus the recomputations.
pub fn schedule_json(g: &Graph, out: &PlanOutcome) -> serde_json::Value {
    let ones = |row: &Vec<bool>| -> Vec<usize> {
        row.iter()
            .enumerate()
            .filter(|(_, &b)| b)
            .map(|(i, _)| i)
            .collect()
    };
    let stages: Vec<serde_json::Value> = out
        .schedule
        .as_ref()
        .map(|s| {
            (0..g.len())
                .map(|t| serde_json::json!({"stage": t, "compute": ones(&s.r[t]), "resident": ones(&s.s[t])}))
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({
        "graph": g.name,
        "nodes": g.len(),
        "total_cost": g.total_cost(),
        "outcome": out,
        "stages": stages,
        "recomputations": out.schedule.as_ref().map(|s| recomputations(g, s)).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::validate;

    #[test]
    fn every_solver_fits_a_generous_budget_and_milp_is_cheapest() {
        let g = Graph::linear_chain(8).unwrap();
        let budget = Budget::Fraction(0.7).bytes(&g).unwrap();
        let mut milp_cost = None;
        let mut costs = Vec::new();
        for s in Solver::ALL {
            let o = plan(&g, s, budget, &PlanOptions::default()).unwrap();
            if let Some(sch) = &o.schedule {
                validate(&g, sch).unwrap();
                assert!(o.peak_bytes.unwrap() <= budget, "{s:?}");
                costs.push(o.cost.unwrap());
            }
            if s == Solver::Milp {
                milp_cost = o.cost;
            }
        }
        let milp = milp_cost.expect("the MILP fits 70% of the checkpoint-all peak");
        assert!(
            costs.iter().all(|c| milp <= c + 1e-6 * c),
            "{milp} vs {costs:?}"
        );
    }

    /// On random layered graphs of two shapes at budgets from near the checkpoint-all peak to
    /// below the working-set bound, every solver's schedule simulates within the budget at the
    /// cost and peak it reports, no solver's lower bound exceeds any solver's cost, the exact
    /// MILP (gap 0) is never beaten, and a budget the MILP proves infeasible has no schedule
    /// from any solver.
    #[test]
    fn solvers_agree_on_random_graphs_and_budgets() {
        let opts = PlanOptions {
            time_limit_s: 10.0,
            gap: 0.0,
            threads: 1,
        };
        let (mut feasible, mut infeasible) = (0, 0);
        for seed in 1..=3 {
            for n in [5, 8, 12] {
                for (width, edges, skips) in [(0.3, 0.3, 0.3), (0.5, 0.2, 0.1)] {
                    let g = crate::layered::random_layered(&crate::layered::LayeredParams {
                        n,
                        width,
                        width_variation: 0.5,
                        edge_density: edges,
                        skip_density: skips,
                        seed,
                    })
                    .unwrap();
                    // From the checkpoint-all peak down to just below the working-set bound.
                    let (ws, peak) = (g.working_set_bound(), checkpoint_all_peak(&g).unwrap());
                    for f in [0.8, 0.4, 0.0, -0.1] {
                        let budget = (ws as f64 + f * (peak - ws) as f64) as u64;
                        let case = format!("seed {seed} n {n} width {width} fraction {f}");
                        let outs: Vec<PlanOutcome> = Solver::ALL
                            .iter()
                            .map(|&s| plan(&g, s, budget, &opts).unwrap())
                            .collect();
                        for o in &outs {
                            let Some(sch) = &o.schedule else { continue };
                            let sim = simulate(&g, sch).unwrap();
                            assert!(sim.peak_mem <= budget, "{case} {:?}", o.solver);
                            assert_eq!(Some(sim.peak_mem), o.peak_bytes, "{case}");
                            assert!((sim.cost - o.cost.unwrap()).abs() < 1e-6, "{case}");
                        }
                        let costs: Vec<f64> = outs.iter().filter_map(|o| o.cost).collect();
                        let milp = outs.iter().find(|o| o.solver == Solver::Milp).unwrap();
                        for o in &outs {
                            if let Some(lb) = o.lower_bound.filter(|b| b.is_finite()) {
                                assert!(
                                    costs.iter().all(|&c| lb <= c + 1e-6),
                                    "{case}: {:?} bound {lb} above {costs:?}",
                                    o.solver
                                );
                            }
                        }
                        if milp.status == SolveStatus::Optimal {
                            let c = milp.cost.unwrap();
                            assert!(costs.iter().all(|&x| c <= x + 1e-6), "{case}");
                            feasible += 1;
                        } else if milp.status.is_infeasible()
                            || milp.status == SolveStatus::UnboundedOrInfeasible
                        {
                            assert!(costs.is_empty(), "{case}: {costs:?}");
                            infeasible += 1;
                        }
                    }
                }
            }
        }
        assert!(
            feasible >= 20 && infeasible >= 5,
            "{feasible} feasible, {infeasible} infeasible"
        );
    }

    #[test]
    fn recomputations_list_second_evaluations() {
        let g = Graph::linear_chain(6).unwrap();
        let budget = Budget::Fraction(0.5).bytes(&g).unwrap();
        let o = plan(&g, Solver::Milp, budget, &PlanOptions::default()).unwrap();
        let sch = o.schedule.as_ref().expect("feasible");
        let list = recomputations(&g, sch);
        assert_eq!(list.len(), o.recomputations.unwrap());
        let json = schedule_json(&g, &o);
        assert_eq!(json["stages"].as_array().unwrap().len(), g.len());
        assert_eq!(json["recomputations"].as_array().unwrap().len(), list.len());
    }

    #[test]
    fn smallest_feasible_budget_is_tight_on_a_chain() {
        let g = Graph::linear_chain(6).unwrap();
        let fb = smallest_feasible_budget(&g, &PlanOptions::default()).unwrap();
        assert!(fb.exact(), "{fb:?}");
        let at = plan(&g, Solver::Milp, fb.upper_bytes, &PlanOptions::default()).unwrap();
        assert!(at.schedule.is_some());
        let below = plan(
            &g,
            Solver::Milp,
            fb.upper_bytes - 1,
            &PlanOptions::default(),
        )
        .unwrap();
        assert!(below.schedule.is_none(), "{}", below.status);
    }

    /// On random layered graphs, where the chain baselines barely cut the peak, the upper end
    /// of the smallest feasible budget comes from greedy eviction: a schedule fits it, it is
    /// never above the baselines' best peak, and on some graph strictly below it. With no time
    /// for MILP solves the bounds still bracket a fitting budget.
    #[test]
    fn smallest_feasible_budget_uses_greedy_eviction_on_general_graphs() {
        let no_milp = PlanOptions {
            time_limit_s: 0.0,
            ..Default::default()
        };
        let mut lowered = 0;
        for seed in 1..=4 {
            let g = crate::layered::test_graph(40, seed);
            let baselines = baseline_peak(&g).unwrap();
            let fb = smallest_feasible_budget(&g, &no_milp).unwrap();
            assert!(fb.lower_bytes <= fb.upper_bytes, "{fb:?}");
            assert!(
                fb.upper_bytes <= baselines,
                "seed {seed}: {fb:?} vs {baselines}"
            );
            let (sch, _) =
                greedy_eviction(&g, fb.upper_bytes).expect("greedy eviction fits the upper end");
            assert!(simulate(&g, &sch).unwrap().peak_mem <= fb.upper_bytes);
            lowered += usize::from(fb.upper_bytes < baselines);
        }
        assert!(lowered >= 1, "greedy eviction never beat the baselines");
    }

    #[test]
    fn bad_solver_and_budget_are_named() {
        let e = Solver::parse_list("milps").unwrap_err().to_string();
        assert!(e.contains("--solver") && e.contains("lp-rounding"), "{e}");
        let g = Graph::linear_chain(4).unwrap();
        let e = Budget::Fraction(1.5).bytes(&g).unwrap_err().to_string();
        assert!(e.contains("--budget-fraction"), "{e}");
    }
}
