//! The Checkmate study: compute overhead vs memory budget, maximum batch size at a fixed
//! memory, and MILP solve times and gaps, after the experiments of Jain et al., "Checkmate:
//! Breaking the Memory Wall with Optimal Tensor Rematerialization" (MLSys 2020,
//! arXiv:1910.02653, Sections 6.2–6.4). The study's source document (`001_68b9d43f3f694e7a.txt`)
//! is a reader's notes on that paper: the paper's figures and numbers are credited to the paper.
//!
//! [`run_study`] simulates the baselines and runs the solvers (MILP, LP relaxation with
//! rounding) and returns a [`CheckmateResult`]: each solve's status, cost, peak bytes and wall
//! time. [`sections`] presents a result as the study's three sections.
//!
//! May import: `memwall-remat` (through [`crate::remat`]), the report model
//! ([`memwall_document::content`]) and the study trait ([`crate::InProcessStudy`]).
//!
//! The study is a folder of four steps: [`params`] (the experiment file's `[params]`, their
//! ranges), [`run`] (simulating the baselines, running the solvers: a [`CheckmateResult`]),
//! [`result`] (the typed result stored as the study's record) and [`sections`] (the report's
//! sections from a stored result). This file joins them as the study ([`Checkmate`]) and names
//! the result's measures and tracked numbers.

mod params;
mod result;
mod run;
mod sections;
#[cfg(test)]
mod tests;

pub use params::{validate, BuiltNet, CheckmateCited, CheckmateParams, Fig6Batch, GeneratedGraph};
pub use result::{
    BatchProbe, BatchResult, BoundarySolve, BudgetResult, CheckmateResult, GraphResult, LpSolve,
    MilpSolve, ScheduleStats, StagedSolve,
};
pub use run::{run_study, BASELINES};
pub use sections::sections;
use sections::*;

use crate::document::content::{Figure, Mark, Measure, Section, Series, Table};
use crate::params::{int_in, list, num_above, num_between, num_in, require};
use crate::remat::baselines::{checkpoint_all, chen_greedy, chen_sqrt, greedy_thresholds, revolve};
use crate::remat::boundary::{boundary_bound, BoundaryOutcome};
use crate::remat::graph::Graph;
use crate::remat::layered::{random_layered, LayeredParams};
use crate::remat::milp::{solve_lp_rounding, solve_milp, LpOutcome, MilpOptions, MilpOutcome};
use crate::remat::sim::{simulate, Schedule, SimResult};
use crate::remat::staged::{default_stage_size, solve_refined, StagedOptions, StagedOutcome};
use crate::remat::{RematError, SolveStatus};
use crate::{Cited, InProcessStudy, ParamError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The Checkmate study ([`InProcessStudy`]).
pub struct Checkmate;

impl InProcessStudy for Checkmate {
    type Params = CheckmateParams;
    type Output = CheckmateResult;
    type Error = RematError;
    fn validate(params: &CheckmateParams) -> Result<(), ParamError> {
        validate(params)
    }
    const DATA: Option<&'static str> = Some("remat-graphs");
    fn run(params: &CheckmateParams, data_dir: &Path) -> Result<CheckmateResult, RematError> {
        run_study(params, data_dir)
    }
    type Cited = CheckmateCited;
    fn sections(output: &CheckmateResult, cited: &Cited<CheckmateCited>) -> Vec<Section> {
        sections(output, &cited.values)
    }
    fn measures(output: &CheckmateResult) -> Vec<Measure> {
        measures(output)
    }
    fn tracked(output: &CheckmateResult) -> Vec<crate::Tracked> {
        tracked(output)
    }
}

/// The numbers the nightly run tracks ([`crate::Tracked`]) per graph and budget: the
/// wall time of the solve that answers it (the MILP, or the staged MILP with its refinement)
/// and the cost of the best schedule it found (none when no schedule fits).
pub fn tracked(r: &CheckmateResult) -> Vec<crate::Tracked> {
    use crate::{Tracked, TrackedKind};
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

/// The notes' "<10% time overhead" (%), the overhead the reduction claims count under.
const CLAIM_OVERHEAD_PCT: f64 = 10.0;

/// Budget fractions at or below this reduce memory at least 3x against checkpoint-all (1/3).
const THREE_X_FRACTION: f64 = 1.0 / 3.0;

/// One graph's answer to "2-3x memory reduction at under 10% overhead" at a reduction of
/// `1 / max_fraction`: the compute overhead (%) of the MILP's schedule at the largest budget
/// fraction at most `max_fraction` where it found one (cost over one plain forward+backward,
/// minus 1, x 100); `None` when no budget that small has a schedule, with the reason.
pub fn overhead_at_reduction(g: &GraphResult, max_fraction: f64) -> Result<f64, String> {
    let small = g
        .budgets
        .iter()
        .filter(|b| b.fraction <= max_fraction + 1e-9)
        .max_by(|a, b| a.fraction.total_cmp(&b.fraction));
    let ws = g.working_set_bound_bytes as f64 / g.checkpoint_all_peak_bytes.max(1) as f64;
    if g.working_set_bound_bytes > 0 && ws > max_fraction + 1e-9 {
        return Err(format!(
            "no schedule can: one operation with its inputs needs {:.3} of the checkpoint-all peak (working-set bound)",
            ws
        ));
    }
    let Some(b) = small else {
        return Err(format!("no budget of at most {max_fraction:.3} was solved"));
    };
    match milp_cost(b) {
        Some(c) => Ok((c / g.forward_backward_cost - 1.0) * 100.0),
        None => Err(format!(
            "no schedule found at {:.3} of the checkpoint-all peak ({})",
            b.fraction,
            b.milp
                .as_ref()
                .map(|m| m.status.to_string())
                .or_else(|| b.staged.as_ref().map(|m| m.status.to_string()))
                .unwrap_or_else(|| "not solved".into())
        )),
    }
}

/// Why the overhead of [`overhead_at_reduction`] on `g` at `max_fraction` is not proven
/// optimal, when it is not: the solve stopped at its time limit, so the value is an upper bound
/// of the optimal overhead, with the lower bound its dual bound gives.
pub fn overhead_bound_note(g: &GraphResult, max_fraction: f64) -> Option<String> {
    let b = g
        .budgets
        .iter()
        .filter(|b| b.fraction <= max_fraction + 1e-9)
        .max_by(|a, b| a.fraction.total_cmp(&b.fraction))?;
    milp_cost(b)?;
    let (status, dual) = match (&b.milp, b.refined.as_ref().or(b.staged.as_ref())) {
        (Some(m), _) => (m.status.clone(), m.dual_bound),
        (None, Some(s)) => (s.status.clone(), s.valid_bound),
        _ => return None,
    };
    if status == SolveStatus::Optimal || status.as_str().starts_with("Optimal") {
        return None;
    }
    Some(format!(
        "not proven optimal ({status}): an upper bound of the optimal schedule's overhead; the \
         solver's lower bound gives {:.1}%",
        (dual / g.forward_backward_cost - 1.0) * 100.0
    ))
}

/// The compute overhead (%) of the *optimal* schedule of `g` at a reduction of
/// `1 / max_fraction`, as the interval `(low, high)` its solve proves, at the largest budget
/// fraction at most `max_fraction` that was solved:
///
/// - `high`: the overhead of the best schedule found (the solver's incumbent), `+inf` when it
///   found none;
/// - `low`: the overhead at the solver's proven lower bound of the cost (HiGHS's dual bound,
///   or the staged MILP's bound valid for Checkmate's problem), at least 0 (no schedule costs
///   less than one plain forward+backward);
/// - both `+inf` when no schedule can exist: the working-set bound lies above the budget, or
///   the solver proved the budget infeasible;
/// - `(0, +inf)` when no budget that small was solved (nothing is known).
///
/// Overhead is `cost / forward_backward_cost - 1`, x 100 (as in [`overhead_at_reduction`]).
pub fn optimal_overhead_bounds(g: &GraphResult, max_fraction: f64) -> (f64, f64) {
    let cannot = (f64::INFINITY, f64::INFINITY);
    let ws = g.working_set_bound_bytes as f64 / g.checkpoint_all_peak_bytes.max(1) as f64;
    if g.working_set_bound_bytes > 0 && ws > max_fraction + 1e-9 {
        return cannot;
    }
    let Some(b) = g
        .budgets
        .iter()
        .filter(|b| b.fraction <= max_fraction + 1e-9)
        .max_by(|a, b| a.fraction.total_cmp(&b.fraction))
    else {
        return (0.0, f64::INFINITY);
    };
    let (status, dual) = match (&b.milp, b.refined.as_ref().or(b.staged.as_ref())) {
        (Some(m), _) => (&m.status, m.dual_bound),
        (None, Some(s)) => (&s.status, s.valid_bound),
        (None, None) => return (0.0, f64::INFINITY),
    };
    if status.is_infeasible() {
        return cannot;
    }
    let overhead = |cost: f64| (cost / g.forward_backward_cost - 1.0) * 100.0;
    let high = milp_cost(b).map_or(f64::INFINITY, overhead);
    let low = if dual.is_nan() {
        0.0
    } else {
        overhead(dual).max(0.0)
    };
    (low.min(high), high)
}

/// How many of the study's graphs the optimal schedule takes to a reduction of
/// `1 / max_fraction` at under `pct` % overhead, as a share of every graph (%) with the
/// interval the solves prove: `(low, high)`, where `low` counts the graphs whose incumbent is
/// under `pct` (proven; the estimate shown) and `high` adds those whose lower bound is (not
/// excluded). A graph no schedule can take there counts as not under. NaN without graphs.
pub fn graphs_under_overhead_pct(r: &CheckmateResult, max_fraction: f64, pct: f64) -> (f64, f64) {
    if r.graphs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = r.graphs.len() as f64;
    let bounds: Vec<(f64, f64)> = r
        .graphs
        .iter()
        .map(|g| optimal_overhead_bounds(g, max_fraction))
        .collect();
    let proven = bounds.iter().filter(|(_, high)| *high < pct).count() as f64;
    let possible = bounds.iter().filter(|(low, _)| *low < pct).count() as f64;
    (proven / n * 100.0, possible / n * 100.0)
}

/// The largest batch the MILP can fit in a batch search, as the interval `(low, high)` the
/// search proves: `low` is the largest batch it found a schedule for within the compute limit
/// ([`BatchResult::milp`]); `high` the batch below the smallest probe proven not to fit (HiGHS
/// found the problem infeasible under the cost cutoff, or its lower bound of the cost is over
/// the compute limit), else the working-set cap (above it no schedule exists). A probe stopped
/// at its time limit without a fitting schedule proves nothing.
pub fn milp_batch_bounds(b: &BatchResult) -> (u32, u32) {
    let proven_over = b
        .milp_probes
        .iter()
        .filter(|p| p.proven_not_to_fit(b.compute_limit))
        .map(|p| p.batch.saturating_sub(1))
        .min();
    let high = proven_over.map_or(b.working_set_cap, |h| h.min(b.working_set_cap));
    (b.milp, high.max(b.milp))
}

/// The notes' "within 5-10% of optimal", its upper end (%).
const CLAIM_ROUNDING_EXCESS_PCT: f64 = 10.0;

/// The LP-rounded schedule against the optimal one over the budgets where the MILP (or the
/// staged MILP) found a schedule and the LP relaxation was solved: the share (%) of those at
/// which rounding gives a schedule costing at most `pct` % more than the optimal, as
/// `(estimate, low, high)`. The optimal cost lies between the solver's proven lower bound and
/// its incumbent, so the excess over the optimum lies between the excess over the incumbent
/// (the estimate, `high` counts by it) and the excess over the lower bound (`low` counts by
/// it). A budget where no rounding fits counts as not within. NaN without such a budget.
pub fn lp_rounding_within(r: &CheckmateResult, pct: f64) -> (f64, f64, f64) {
    let cases: Vec<(f64, f64)> = budgets(r)
        .filter(|(_, b)| b.lp.lp_bound.is_some())
        .filter_map(|(_, b)| {
            let incumbent = milp_cost(b).filter(|c| *c > 0.0)?;
            let dual = match (&b.milp, b.refined.as_ref().or(b.staged.as_ref())) {
                (Some(m), _) => m.dual_bound,
                (None, Some(s)) => s.valid_bound,
                (None, None) => f64::NAN,
            };
            let lower = if dual.is_finite() && dual > 0.0 {
                dual.min(incumbent)
            } else {
                0.0
            };
            let excess = |optimal: f64| match &b.lp.rounded {
                Some(x) if optimal > 0.0 => (x.cost / optimal - 1.0) * 100.0,
                _ => f64::INFINITY,
            };
            // Against the lower bound: the largest the excess over the optimum can be.
            Some((excess(incumbent), excess(lower)))
        })
        .collect();
    if cases.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let n = cases.len() as f64;
    let share = |k: usize| k as f64 / n * 100.0;
    let high = share(cases.iter().filter(|(e, _)| *e <= pct).count());
    let low = share(cases.iter().filter(|(_, e)| *e <= pct).count());
    (high, low, high)
}

/// The median of `xs` (NaN when empty).
fn median_of(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Networks of at least this many layers ([`GraphResult::layers`]: the forward operations of a
/// training graph) answer the notes' "Networks with 100+ layers".
const LARGE_GRAPH_LAYERS: usize = 100;

/// The notes' "solve in <1 hour", seconds: a solve stopped at a time limit this long or longer
/// decides the claim against it.
const CLAIM_SOLVE_S: f64 = 3600.0;

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
/// - `milp_overhead_pct_at_2x_reduction` (%): the median over graphs of the compute overhead
///   of the MILP's schedule at a 2x memory reduction ([`overhead_at_reduction`] at 0.5 of the
///   checkpoint-all peak), over the graphs where a schedule reaches it: the notes' "typical"
///   savings; NaN when none does.
/// - `milp_overhead_pct_at_3x_reduction` (%): the same at a 3x reduction (1/3).
/// - `graphs_reaching_3x_pct` (%): the share of graphs on which a schedule reaches 3x.
/// - `graphs_2x_under_10pct_pct` (%): the share of every graph on which the optimal schedule
///   reaches 2x at under 10% overhead ([`graphs_under_overhead_pct`]): a graph no schedule can
///   take to 2x counts as not under; a solve stopped at a limit counts as under only when its
///   incumbent is, and the measure carries the interval its lower bounds leave open.
/// - `graphs_3x_under_10pct_pct` (%): the same at 3x.
/// - `lp_rounding_max_excess_pct` (%): the largest excess cost of the LP-rounded schedule over
///   the MILP's (cost ratio minus 1, x 100) where both exist.
/// - `lp_rounding_within_10pct_pct` (%): the share of the budgets where the MILP found a
///   schedule and the LP relaxation was solved at which rounding gives a schedule that costs
///   at most 10% more than the optimal one ([`lp_rounding_within`]); a budget where no
///   rounding fits counts as not within.
/// - `max_solve_s_100_plus_layers` (s): the longest solve of a network of at least 100 layers
///   ([`GraphResult::layers`]; the random layered DAGs have none) at the budget fractions (not the
///   smallest-budget probe, a feasibility question under its own short limit), when every such
///   solve reached its target ([`solve_outcome`]); a solve stopped at a limit of an hour or
///   more gives its time (over the claim); otherwise NaN, with the solves that did not finish
///   and why, or that there is no such graph.
/// - `max_milp_solve_s` (s): the longest solve of Checkmate's MILP.
/// - `max_batch_milp_over_checkpoint_all` (x): the largest, over the batch searches (the
///   graph file and the built networks where the MILP ran), of the MILP's largest batch over
///   checkpoint-all's (no rematerialization); it moves in steps of 1 / checkpoint-all's batch (its resolution).
pub fn measures(r: &CheckmateResult) -> Vec<Measure> {
    let at = |f: f64| -> Vec<f64> {
        r.graphs
            .iter()
            .filter_map(|g| overhead_at_reduction(g, f).ok())
            .collect()
    };
    let overhead_2x = median_of(at(TWO_X_FRACTION));
    let reaching_3x = at(THREE_X_FRACTION);
    let reach_3x_pct = if r.graphs.is_empty() {
        f64::NAN
    } else {
        reaching_3x.len() as f64 / r.graphs.len() as f64 * 100.0
    };
    let under_10_2x = graphs_under_overhead_pct(r, TWO_X_FRACTION, CLAIM_OVERHEAD_PCT);
    let under_10_3x = graphs_under_overhead_pct(r, THREE_X_FRACTION, CLAIM_OVERHEAD_PCT);
    let overhead_3x = median_of(reaching_3x);
    let lp_excess = max_of(budgets(r).filter_map(|(_, b)| {
        let m = milp_cost(b).filter(|m| *m > 0.0)?;
        Some((b.lp.rounded?.cost / m - 1.0) * 100.0)
    }));
    let within = lp_rounding_within(r, CLAIM_ROUNDING_EXCESS_PCT);
    let large: Vec<(&GraphResult, &BudgetResult, f64, bool)> = budgets(r)
        .filter(|(g, b)| {
            g.layers.is_some_and(|l| l >= LARGE_GRAPH_LAYERS)
                && r.params.budget_fractions.contains(&b.fraction)
        })
        .filter_map(|(g, b)| solve_outcome(b, r.params.mip_gap).map(|(t, done)| (g, b, t, done)))
        .collect();
    let stopped = max_of(large.iter().filter(|l| !l.3).map(|l| l.2));
    // All finished: the longest. One stopped at its limit of at least the claim's hour: that
    // time, a lower bound of its solve time, already over the claim. Otherwise not decided.
    let large_solve = if large.iter().all(|l| l.3) {
        max_of(large.iter().map(|l| l.2))
    } else if stopped >= CLAIM_SOLVE_S {
        stopped
    } else {
        f64::NAN
    };
    let unfinished: Vec<String> = large
        .iter()
        .filter(|l| !l.3)
        .map(|(g, b, t, _)| {
            let found = if milp_cost(b).is_some() {
                "a schedule not proven within the target gap"
            } else {
                "no schedule"
            };
            format!(
                "{} ({} layers) at {:.3} of the checkpoint-all peak: {found} after {t:.1} s",
                g.name,
                g.layers.unwrap_or_default(),
                b.fraction
            )
        })
        .collect();
    let finished = max_of(large.iter().filter(|l| l.3).map(|l| l.2));
    let large_missing = if large.is_empty() {
        Some(format!(
            "not measured: no graph of at least {LARGE_GRAPH_LAYERS} layers was solved in this \
             run (the profile's `nets` or `graphs`)"
        ))
    } else if large_solve.is_nan() {
        Some(format!(
            "not decided: a solve stopped at its time limit ({}; HiGHS), which cannot show a \
             solve under {CLAIM_SOLVE_S:.0} s{}",
            unfinished.join("; "),
            if finished.is_finite() {
                format!(
                    "; the other solves of graphs of at least {LARGE_GRAPH_LAYERS} layers \
                     finished within {finished:.1} s"
                )
            } else {
                String::new()
            }
        ))
    } else {
        None
    };
    let milp_time = max_of(budgets(r).filter_map(|(_, b)| b.milp.as_ref().map(|m| m.solve_time_s)));
    // The largest ratio, and its step: one batch more moves milp / all by 1 / all.
    let (batch, batch_step) = r
        .batch
        .iter()
        .chain(&r.batch_nets)
        .filter(|b| b.milp_solved)
        .filter_map(|b| match b.baselines.first() {
            Some(&all) if all > 0 => {
                Some((f64::from(b.milp) / f64::from(all), 1.0 / f64::from(all)))
            }
            _ => None,
        })
        .fold((f64::NAN, f64::NAN), |best, x| {
            if best.0.is_nan() || x.0 > best.0 {
                x
            } else {
                best
            }
        });
    // What the searches prove: each MILP batch is a lower bound of the largest batch the MILP
    // can fit (its bisection's solves stop at a time limit); the upper bound is the batch
    // below the smallest probe proven not to fit, or the working-set cap.
    let batch_high = r
        .batch
        .iter()
        .chain(&r.batch_nets)
        .filter(|b| b.milp_solved)
        .filter_map(|b| match b.baselines.first() {
            Some(&all) if all > 0 => Some(f64::from(milp_batch_bounds(b).1) / f64::from(all)),
            _ => None,
        })
        .fold(f64::NAN, f64::max);
    use memwall_core::spec::provenance::Provenance::{Computed, Measured};
    let schedules = |what: &str| {
        Computed(format!(
            "{what}, from the schedules HiGHS solves for Checkmate's MILP (and its LP \
             relaxation) on the study's graphs, costs from the graphs' operation costs"
        ))
    };
    // The share of every graph under 10% at a reduction, with the interval the solves prove.
    let under_share = |name: &str, reduction: &str, (low, high): (f64, f64)| {
        Measure::new(
            name,
            low,
            "%",
            0,
            schedules(&format!(
                "share of every graph whose optimal schedule reaches {reduction} at under 10% \
                 extra cost (a graph that cannot reach {reduction} counts as not under; a solve \
                 stopped at a limit counts as under when its schedule is, and its dual bound \
                 bounds the share)"
            )),
        )
        .with_bounds(low, high)
    };
    let solve_timer = |what: &str| Measured(format!("{what}, wall clock of HiGHS's solves"));
    vec![
        Measure::new(
            "milp_overhead_pct_at_2x_reduction",
            overhead_2x,
            "%",
            1,
            schedules("median over graphs reaching 2x of the MILP schedule's extra cost"),
        ),
        Measure::new(
            "milp_overhead_pct_at_3x_reduction",
            overhead_3x,
            "%",
            1,
            schedules("median over graphs reaching 3x of the MILP schedule's extra cost"),
        ),
        Measure::new(
            "graphs_reaching_3x_pct",
            reach_3x_pct,
            "%",
            0,
            schedules("share of graphs with a schedule at a 3x reduction"),
        ),
        under_share("graphs_2x_under_10pct_pct", "2x", under_10_2x),
        under_share("graphs_3x_under_10pct_pct", "3x", under_10_3x),
        Measure::new(
            "lp_rounding_max_excess_pct",
            lp_excess,
            "%",
            2,
            schedules("largest excess cost of the LP-rounded schedule over the MILP's"),
        ),
        Measure::new(
            "lp_rounding_within_10pct_pct",
            within.0,
            "%",
            0,
            schedules(
                "share of the budgets with a MILP schedule and an LP solve where the \
                 LP-rounded schedule costs at most 10% more than the optimal one (no rounded \
                 schedule: not within; the MILP's dual bound bounds the share)",
            ),
        )
        .with_bounds(within.1, within.2),
        Measure::new(
            "max_solve_s_100_plus_layers",
            large_solve,
            "s",
            1,
            solve_timer("longest solve of a network of at least 100 layers"),
        )
        .missing_because(large_missing),
        Measure::new(
            "max_milp_solve_s",
            milp_time,
            "s",
            1,
            solve_timer("longest MILP solve"),
        ),
        Measure::new(
            "max_batch_milp_over_checkpoint_all",
            batch,
            "x",
            2,
            schedules(
                "largest batch with a feasible MILP schedule under the memory limit / \
                 checkpoint-all's largest batch, batch sizes searched on the memory model",
            ),
        )
        .with_resolution(batch_step)
        .with_bounds(batch, batch_high),
    ]
}
