//! The Checkmate MILP (Jain et al. 2020, Section 4, eq. 1a–1e, 2–4 with the frontier-advancing
//! partial order of eq. 8) and its LP relaxation with two-phase rounding (Section 5), solved
//! with HiGHS.
//!
//! Variables (lower triangular by eq. 8): binary `R[t][i]` (`i <= t`, `R[t][t] = 1`), binary
//! `S[t][i]` (`i < t`), binary `FREE[t][i][k]` for `i in DEPS[k] ∪ {k}`, `k < t` (the free after
//! the stage's last step never affects `U`), continuous `U[t][k]` in `[0, budget]`.
//! Memory is scaled by the largest output size for numerical conditioning; costs are used as is.
//!
//! Warm start: the best feasible baseline is passed to HiGHS as a full primal solution
//! (`Highs_setSolution`, with `FREE` and `U` computed by the simulator's formulas).
//!
//! The model is built with the HiGHS model builder shared with [`crate::staged`] and
//! [`crate::boundary`] (`crate::formulation`).
//!
//! May import: the graph IR, the simulator, the baselines' [`solve_r_given_s`], the HiGHS model
//! builder, [`crate::SolveStatus`], HiGHS.

use super::baselines::solve_r_given_s;
pub use super::formulation::highs_status;
use super::formulation::{
    dual_bound, incumbent_objective, optimise, solve, threshold, warm_start, Columns, Form,
    FormulationBuilder, Term,
};
use super::graph::Graph;
use super::sim::{frees, simulate, stage_memory, Schedule, SimResult};
use super::{RematError, SolveStatus};
use highs::{Col, HighsModelStatus, RowProblem};
use std::time::Instant;

pub use crate::formulation::MilpOptions;

/// Result of a MILP solve.
#[derive(Debug, Clone)]
pub struct MilpOutcome {
    /// The best schedule found (validated by the simulator) and its simulation.
    pub best: Option<(Schedule, SimResult)>,
    /// Objective of HiGHS' incumbent (cost units), if any.
    pub objective: Option<f64>,
    /// HiGHS' proven lower bound on the optimal cost (cost units).
    pub dual_bound: f64,
    /// Relative gap `(objective - dual_bound) / objective` reported by HiGHS.
    pub mip_gap: f64,
    /// HiGHS model status ([`highs_status`]), or [`SolveStatus::InfeasibleWorkingSet`] when
    /// the budget is below the working-set bound (HiGHS not called).
    pub status: SolveStatus,
    /// Wall time of model build + solve, seconds.
    pub solve_time_s: f64,
}

/// Result of the LP relaxation with two-phase rounding.
#[derive(Debug, Clone)]
pub struct LpOutcome {
    /// Optimal LP objective: a lower bound on the MILP optimum (cost units); `None` if the LP is
    /// infeasible at this budget or the budget is below [`Graph::working_set_bound`].
    pub lp_bound: Option<f64>,
    /// Best rounded schedule that fits the budget, with its simulation and the `S` threshold
    /// (`None` if no rounding fits).
    pub rounded: Option<(Schedule, SimResult, f64)>,
    /// Wall time, seconds.
    pub solve_time_s: f64,
}

/// Builds the MILP (or, with `integer = false`, its LP relaxation) for `budget` bytes. Columns
/// and rows are added in a fixed order (per stage `R`, `S`, `U`, then `FREE`; rows 1b, 1c, 2, 3).
fn build(g: &Graph, budget: u64, integer: bool) -> (RowProblem, Columns) {
    let mut mb = FormulationBuilder::new(g, integer);
    add_columns(&mut mb, g, budget);
    add_dependency_rows(&mut mb, g);
    add_memory_rows(&mut mb, g);
    add_free_rows(&mut mb, g);
    mb.finish()
}

/// Columns: per stage `t`, `R[t][0..=t]` (cost `C_i`, `R[t][t] = 1`), `S[t][0..t]`,
/// `U[t][0..=t]` in `[0, budget]` (scaled), then `FREE[t][i][k]` for `i in DEPS[k] ∪ {k}`,
/// `k < t`.
fn add_columns(mb: &mut FormulationBuilder, g: &Graph, budget: u64) {
    let n = g.len();
    for t in 0..n {
        mb.add_r_stage(g, t + 1, true);
        mb.add_s_stage(t, |_| 0.0);
        mb.add_u_stage(t + 1, budget);
    }
    for t in 0..n {
        for k in 0..t {
            for &i in g.deps[k].iter().chain(std::iter::once(&k)) {
                mb.add_free(t, i, k, true);
            }
        }
    }
}

/// (1b) dependencies `R[t][k] <= R[t][i] + S[t][i]`; (1c) `S[t+1][i] <= S[t][i] + R[t][i]`.
fn add_dependency_rows(mb: &mut FormulationBuilder, g: &Graph) {
    let n = g.len();
    for t in 0..n {
        for k in 0..=t {
            for &i in &g.deps[k] {
                let v = mb.cols();
                let (rk, ri, si) = (Term::Col(v.r[t][k]), v.r[t][i], v.s[t][i]);
                mb.dependency(rk, ri, si, Form::AtMost);
            }
        }
    }
    for t in 0..n.saturating_sub(1) {
        for i in 0..=t {
            let v = mb.cols();
            let (next, cur, r) = (v.s[t + 1][i], v.s[t].get(i).copied(), v.r[t][i]);
            mb.storage(next, cur, r);
        }
    }
}

/// (2) `U[t][0] = M_static + sum_i M_i S[t][i] + M_0 R[t][0]` and
/// `U[t][k] = U[t][k-1] + M_k R[t][k] - sum_i M_i FREE[t][i][k-1]` (bytes, scaled).
fn add_memory_rows(mb: &mut FormulationBuilder, g: &Graph) {
    let free_at = mb.free_by_step(|t| t);
    for t in 0..g.len() {
        mb.memory_start(g, t, g.fixed_mem);
        for k in 1..=t {
            mb.memory_step(g, t, k, &free_at[t][k - 1]);
        }
    }
}

/// (3) FREE linearization with hazards h = (1 - R[t][k]) + S[t+1][i] + sum_{j in USERS[i],
/// k < j <= t} R[t][j]:  1 - FREE <= h  and  kappa (1 - FREE) >= h, kappa = max hazards.
fn add_free_rows(mb: &mut FormulationBuilder, g: &Graph) {
    let n = g.len();
    let free = mb.cols().free.clone();
    for (t, i, k, c) in free {
        let v = mb.cols();
        let s_next = (t + 1 < n).then(|| v.s[t + 1][i]);
        let later: Vec<Col> = g.users[i]
            .iter()
            .filter(|&&j| j > k && j <= t)
            .map(|&j| v.r[t][j])
            .collect();
        let rk = v.r[t][k];
        mb.free_aggregated(c, rk, s_next, &later);
    }
}

fn warm_vector(g: &Graph, v: &Columns, sch: &Schedule) -> Vec<f64> {
    let mut x = vec![0.0; v.count];
    let b = |f: bool| if f { 1.0 } else { 0.0 };
    let mem = stage_memory(g, sch);
    for t in 0..g.len() {
        for i in 0..=t {
            x[v.r[t][i].index()] = b(sch.r[t][i]);
            x[v.u[t][i].index()] = mem[t][i] as f64 / v.scale;
        }
        for i in 0..t {
            x[v.s[t][i].index()] = b(sch.s[t][i]);
        }
    }
    for &(t, i, k, c) in &v.free {
        x[c.index()] = b(frees(g, sch, t, i, k));
    }
    x
}

/// Solves the Checkmate MILP at `budget` bytes (total, including `g.fixed_mem`), minimizing
/// total compute cost (eq. 1a). The returned schedule is re-validated by the simulator; if the
/// incumbent has numerical slack, its `S` is kept and `R` recomputed minimally. A budget below
/// [`Graph::working_set_bound`] is reported infeasible without calling HiGHS (status
/// [`SolveStatus::InfeasibleWorkingSet`]), since HiGHS may not prove it within the time limit.
pub fn solve_milp(g: &Graph, budget: u64, opts: &MilpOptions) -> Result<MilpOutcome, RematError> {
    let start = Instant::now();
    if budget < g.working_set_bound() {
        return Ok(MilpOutcome {
            best: None,
            objective: None,
            dual_bound: f64::INFINITY,
            mip_gap: f64::NAN,
            status: SolveStatus::InfeasibleWorkingSet,
            solve_time_s: start.elapsed().as_secs_f64(),
        });
    }
    let (pb, v) = build(g, budget, true);
    let mut model = optimise(pb, opts, false);
    if let Some(ws) = &opts.warm_start {
        if simulate(g, ws).is_ok_and(|r| r.peak_mem <= budget) {
            warm_start(&mut model, &warm_vector(g, &v, ws))?;
        }
    }
    let solved = solve(model, "")?;
    let mut out = MilpOutcome {
        best: None,
        objective: incumbent_objective(&solved),
        dual_bound: dual_bound(&solved),
        mip_gap: solved.mip_gap(),
        status: highs_status(solved.status()),
        solve_time_s: 0.0,
    };
    if out.objective.is_some() {
        let sol = solved.get_solution();
        let n = g.len();
        let sch = Schedule {
            r: threshold(&v.r, sol.columns(), 0.5, n),
            s: threshold(&v.s, sol.columns(), 0.5, n),
        };
        let raw = simulate(g, &sch).ok().filter(|r| r.peak_mem <= budget);
        let minimal = solve_r_given_s(g, &sch.s);
        let min_sim = simulate(g, &minimal).ok().filter(|r| r.peak_mem <= budget);
        out.best = match (raw, min_sim) {
            (Some(a), Some(b)) if b.cost <= a.cost => Some((minimal, b)),
            (Some(a), _) => Some((sch, a)),
            (None, Some(b)) => Some((minimal, b)),
            (None, None) => None,
        };
    }
    out.solve_time_s = start.elapsed().as_secs_f64();
    Ok(out)
}

/// LP relaxation of the MILP plus two-phase rounding (Section 5.1): solve the relaxation, round
/// `S` at each threshold in `thresholds`, compute the minimal `R` for the rounded `S`
/// ([`solve_r_given_s`]), simulate, and keep the cheapest schedule within `budget` bytes.
///
/// Rounding can break the budget (recomputed values occupy memory too). If no threshold gives a
/// fitting schedule, the relaxation is re-solved at tighter budgets `budget * f` for each `f` in
/// `tighten` (in order) and rounded against the original budget, until one fits. `lp_bound` is
/// always the relaxation at the original budget.
pub fn solve_lp_rounding(
    g: &Graph,
    budget: u64,
    opts: &MilpOptions,
    thresholds: &[f64],
    tighten: &[f64],
) -> Result<LpOutcome, RematError> {
    let start = Instant::now();
    let mut out = LpOutcome {
        lp_bound: None,
        rounded: None,
        solve_time_s: 0.0,
    };
    let floor = g.working_set_bound();
    let factors: Vec<f64> = std::iter::once(1.0)
        .chain(tighten.iter().copied())
        .collect();
    for (x, &f) in factors.iter().enumerate() {
        let lp_budget = (budget as f64 * f).floor() as u64;
        if lp_budget < floor {
            break;
        }
        // Every relaxation solve shares the one time limit.
        let left = opts.time_limit_s - start.elapsed().as_secs_f64();
        if left < 0.05 {
            break;
        }
        let (pb, v) = build(g, lp_budget, false);
        let model = optimise(
            pb,
            &MilpOptions {
                time_limit_s: (opts.time_limit_s - start.elapsed().as_secs_f64()).max(0.01),
                ..opts.clone()
            },
            false,
        );
        let solved = solve(model, "")?;
        if solved.status() != HighsModelStatus::Optimal {
            break;
        }
        if x == 0 {
            out.lp_bound = Some(solved.objective_value());
        }
        let sol = solved.get_solution();
        for &th in thresholds {
            let s = threshold(&v.s, sol.columns(), th, g.len());
            let sch = solve_r_given_s(g, &s);
            if let Ok(sim) = simulate(g, &sch) {
                let better = out
                    .rounded
                    .as_ref()
                    .is_none_or(|(_, b, _)| sim.cost < b.cost);
                if sim.peak_mem <= budget && better {
                    out.rounded = Some((sch, sim, th));
                }
            }
        }
        if out.rounded.is_some() {
            break;
        }
    }
    out.solve_time_s = start.elapsed().as_secs_f64();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::*;

    fn baselines_all(g: &Graph) -> Vec<Schedule> {
        let mut v = vec![checkpoint_all(g), chen_sqrt(g)];
        v.extend(
            greedy_thresholds(g, 5)
                .into_iter()
                .map(|th| chen_greedy(g, th)),
        );
        v.extend((0..=g.forward_nodes().len()).map(|s| revolve(g, s)));
        v
    }

    #[test]
    fn milp_dominates_baselines_and_lp_bounds_it() {
        for g in [
            Graph::linear_chain(5).unwrap(),
            Graph::from_layers(
                "mixed",
                &[(2.0, 4), (1.0, 8), (3.0, 2), (1.0, 6)],
                2.0,
                (1.0, 1),
                3,
            )
            .unwrap(),
        ] {
            let base: Vec<SimResult> = baselines_all(&g)
                .iter()
                .map(|s| simulate(&g, s).unwrap())
                .collect();
            let all_peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
            let min_peak = base.iter().map(|r| r.peak_mem).min().unwrap();
            let mut budgets: Vec<u64> = vec![all_peak, min_peak, (all_peak + min_peak) / 2];
            budgets.dedup();
            for &budget in &budgets {
                let opts = MilpOptions {
                    time_limit_s: 20.0,
                    mip_gap: 0.0,
                    ..Default::default()
                };
                let milp = solve_milp(&g, budget, &opts).unwrap();
                let (sch, sim) = milp.best.clone().expect("feasible at a baseline's peak");
                assert!(sim.peak_mem <= budget);
                assert_eq!(simulate(&g, &sch).unwrap(), sim);
                for b in base.iter().filter(|b| b.peak_mem <= budget) {
                    assert!(
                        sim.cost <= b.cost + 1e-9,
                        "{}: budget {budget}: milp {} > baseline {}",
                        g.name,
                        sim.cost,
                        b.cost
                    );
                }
                let lp = solve_lp_rounding(&g, budget, &opts, &[0.5, 0.9], &[0.9, 0.8]).unwrap();
                let bound = lp.lp_bound.unwrap();
                assert!(
                    bound <= sim.cost + 1e-6,
                    "LP bound {bound} > MILP {}",
                    sim.cost
                );
                if let Some((s, r, _)) = lp.rounded {
                    assert!(r.cost >= sim.cost - 1e-9);
                    assert_eq!(simulate(&g, &s).unwrap(), r);
                }
            }
        }
    }

    #[test]
    fn warm_start_and_infeasible_budget() {
        let g = Graph::linear_chain(4).unwrap();
        let ws = chen_sqrt(&g);
        let peak = simulate(&g, &ws).unwrap().peak_mem;
        let opts = MilpOptions {
            warm_start: Some(ws),
            mip_gap: 0.0,
            ..Default::default()
        };
        let out = solve_milp(&g, peak, &opts).unwrap();
        assert!(out.best.is_some());
        // Below the largest single-op working set nothing fits.
        let out = solve_milp(&g, 1, &MilpOptions::default()).unwrap();
        assert!(out.best.is_none(), "{}", out.status);
    }

    /// Every HiGHS status maps to the variant whose text is the status' `Debug` name: the text
    /// records stored when statuses were `format!("{status:?}")`.
    #[test]
    fn highs_statuses_keep_their_text() {
        let all = [
            HighsModelStatus::NotSet,
            HighsModelStatus::LoadError,
            HighsModelStatus::ModelError,
            HighsModelStatus::PresolveError,
            HighsModelStatus::SolveError,
            HighsModelStatus::PostsolveError,
            HighsModelStatus::ModelEmpty,
            HighsModelStatus::Infeasible,
            HighsModelStatus::UnboundedOrInfeasible,
            HighsModelStatus::Unbounded,
            HighsModelStatus::Optimal,
            HighsModelStatus::ObjectiveBound,
            HighsModelStatus::ObjectiveTarget,
            HighsModelStatus::ReachedTimeLimit,
            HighsModelStatus::ReachedIterationLimit,
            HighsModelStatus::Unknown,
            HighsModelStatus::ReachedSolutionLimit,
            HighsModelStatus::ReachedInterrupt,
            HighsModelStatus::ReachedMemoryLimit,
        ];
        for h in all {
            let s = highs_status(h);
            assert!(!matches!(s, SolveStatus::Other(_)), "{h:?}");
            assert_eq!(s.to_string(), format!("{h:?}"));
            assert_eq!(SolveStatus::from_text(&format!("{h:?}")), s);
        }
    }
}
