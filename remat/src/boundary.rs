//! The boundary-memory relaxation of Checkmate's MILP: a lower bound on the optimal
//! rematerialization cost that is tighter, and on graphs of a few hundred nodes much cheaper,
//! than the LP relaxation of the time-indexed model.
//!
//! **Model.** Checkmate's schedule variables (Jain et al. 2020, Section 4, eq. 1b–1c, one node
//! per stage, frontier-advancing order of eq. 8): binary `R[s][i]` (`i < s`: node `i` recomputed
//! in stage `s`; `R[s][s] = 1`) and binary `S[s+1][i]` (`i <= s`: node `i`'s output kept across
//! the boundary between stages `s` and `s + 1`), with the dependency rows
//! `R[s][k] <= R[s][i] + S[s][i]` for `i in DEPS[k]` and the storage rows
//! `S[s+1][i] <= S[s][i] + R[s][i]`. The memory rows (eq. 2–4: `U`, `FREE` for every step of
//! every stage, most of the time-indexed model's rows and all of its continuous columns) are
//! replaced by one row per stage, the memory at the stage's last step (the step that computes
//! node `s`):
//!
//! `fixed + M_s + sum_{p in DEPS[s]} M_p + sum_{i <= s, i not in DEPS[s] ∪ {s}} M_i S[s+1][i] <= budget`
//!
//! **Why it is a relaxation.** At that step Checkmate's `U[s][s]` (eq. 2) holds node `s`'s new
//! output, every input of `s` (a value is freed only after its last user in the stage, eq. 3,
//! and `s` is that user) and every value kept into the next stage (`FREE` requires
//! `¬S[s+1][i]`): the left-hand side above is at most `U[s][s] <= budget`. Every schedule of
//! Checkmate's model therefore satisfies this model, so its optimum (and any dual bound HiGHS
//! proves for it) is a lower bound on Checkmate's optimum. What it leaves out is the memory of
//! the recomputation steps inside a stage: a schedule of this model can overrun the budget
//! there, and is then not a Checkmate schedule; when its simulated peak fits, its cost equals
//! the bound and it is optimal.
//!
//! **Checkpoint-all prefix.** The first `a` stages, in which computing each node once and
//! keeping every output until its last user fits the budget ([`Graph::fitting_prefix`]), have
//! no columns or rows: they compute their own nodes and any of their outputs may be kept into
//! stage `a` (`S[a]` free). Every Checkmate schedule costs at least `sum C_i` in those stages
//! and keeps some subset of their outputs, so this is again a relaxation; a schedule's prefix
//! is filled in (each output held from its computation while read or kept) and checked by the
//! simulation with the rest.
//!
//! **Size.** `n (n - 1)` binaries and about `n |E| / 2 + n^2 / 2` rows with 2–3 entries each,
//! against the time-indexed model's additional `~n |E| / 2` continuous `FREE` columns with 1–3
//! rows each and `n^2 / 2` `U` columns: on the 250-node random layered graph 129,469 rows
//! against 659,860, and 60,086 rows with the 187-stage prefix of its budget 0.8.
//!
//! May import: the graph IR, the simulator, [`crate::milp::MilpOptions`], HiGHS.

use super::graph::Graph;
use super::milp::{configure, MilpOptions};
use super::sim::{stage_memory, Schedule};
use super::RematError;
use highs::{Col, HighsModelStatus, HighsSolutionStatus, RowProblem, Sense};
use std::time::Instant;

/// Result of [`boundary_bound`].
#[derive(Debug, Clone)]
pub struct BoundaryOutcome {
    /// Lower bound on Checkmate's optimal cost at this budget, cost units: `sum_i C_i` plus
    /// HiGHS' dual bound on the relaxation's recomputation cost (`f64::INFINITY` when the
    /// relaxation, hence Checkmate's problem, is infeasible).
    pub bound: f64,
    /// Cost of the relaxation's incumbent (cost units), if HiGHS found one.
    pub objective: Option<f64>,
    /// The incumbent as Checkmate's `n x n` matrices (`R` and `S`), [`prune`]d; it satisfies
    /// eq. 1b–1c but may exceed the budget inside a stage (simulate it before use). Its cost
    /// is at most `objective`.
    pub schedule: Option<Schedule>,
    /// HiGHS model status, e.g. "Optimal", "ReachedTimeLimit", "Infeasible".
    pub status: String,
    /// Wall time of build and solve, seconds.
    pub solve_time_s: f64,
    /// Rows of the relaxation in its last round.
    pub rows: usize,
    /// Columns (all binary) of the relaxation.
    pub columns: usize,
    /// Rounds of row generation solved.
    pub rounds: usize,
    /// Whether `schedule` fits the budget in Checkmate's accounting; with status "Optimal"
    /// it is then an optimal schedule of Checkmate's problem.
    pub fits: bool,
}

struct Vars {
    /// `r[s][i]`, `i < s`: node `i` recomputed in stage `s`.
    r: Vec<Vec<Col>>,
    /// `keep[s][i]`, `i <= s`, `s < n - 1`: `S[s+1][i]`.
    keep: Vec<Vec<Col>>,
}

/// Builds the relaxation with one memory row per stage's last step and one per `(s, j)` in
/// `steps` (recomputation of node `j` in stage `s`, see [`step_row`]); `None` when a node's
/// working set exceeds the budget.
fn build(
    g: &Graph,
    budget: u64,
    prefix: usize,
    steps: &[(usize, usize)],
) -> Option<(RowProblem, Vars)> {
    let n = g.len();
    let scale = g.nodes.iter().map(|x| x.mem).max().unwrap_or(1).max(1) as f64;
    let m = |i: usize| g.nodes[i].mem as f64 / scale;
    let mut pb = RowProblem::default();
    let mut v = Vars {
        r: Vec::with_capacity(n),
        keep: Vec::with_capacity(n),
    };
    for s in 0..n {
        // Stages before the prefix's end compute their own node only; outputs kept into
        // stage `prefix` (`keep[prefix - 1]`) are free choices.
        let recomputed = if s >= prefix { s } else { 0 };
        v.r.push(
            (0..recomputed)
                .map(|i| pb.add_integer_column(g.nodes[i].cost, 0.0..=1.0))
                .collect(),
        );
        let kept = if s + 1 < n && s + 1 >= prefix {
            s + 1
        } else {
            0
        };
        v.keep.push(
            (0..kept)
                .map(|_| pb.add_integer_column(0.0, 0.0..=1.0))
                .collect(),
        );
    }
    for s in prefix.max(1)..n {
        // Node s's inputs: R[s][p] + S[s][p] >= 1.
        for &p in &g.deps[s] {
            pb.add_row(1.0.., [(v.r[s][p], 1.0), (v.keep[s - 1][p], 1.0)]);
        }
        // A recomputed node's inputs: R[s][p] + S[s][p] >= R[s][j].
        for j in 0..s {
            for &p in &g.deps[j] {
                pb.add_row(
                    0.0..,
                    [(v.r[s][p], 1.0), (v.keep[s - 1][p], 1.0), (v.r[s][j], -1.0)],
                );
            }
        }
        // Only a present value is kept: S[s+1][i] <= S[s][i] + R[s][i].
        if s + 1 < n {
            for i in 0..s {
                pb.add_row(
                    ..=0.0,
                    [
                        (v.keep[s][i], 1.0),
                        (v.keep[s - 1][i], -1.0),
                        (v.r[s][i], -1.0),
                    ],
                );
            }
        }
    }
    // Memory at each stage's last step (the last stage keeps nothing: only its working set).
    for s in 0..n {
        let forced =
            g.fixed_mem + g.nodes[s].mem + g.deps[s].iter().map(|&p| g.nodes[p].mem).sum::<u64>();
        if forced > budget {
            return None;
        }
        if s + 1 == n || s < prefix {
            continue;
        }
        let row: Vec<(Col, f64)> = (0..s)
            .filter(|i| !g.deps[s].contains(i))
            .map(|i| (v.keep[s][i], m(i)))
            .collect();
        if !row.is_empty() {
            pb.add_row(..=(budget - forced) as f64 / scale, row);
        }
    }
    for &(st, j) in steps {
        let (row, rhs) = step_row(g, budget, &v, st, j, scale);
        pb.add_row(..=rhs, row);
    }
    Some((pb, v))
}

/// Memory row of the step that recomputes node `j` (`j < s`) in stage `s`, a lower bound on
/// Checkmate's `U[s][j]` (eq. 2): at that step every input of node `s` kept into the stage
/// (`S[s][i]`, read later by `s`) is resident, so is every value `i < j` kept into the next
/// stage (`S[s+1][i]`: resident since the stage's start or recomputed at step `i < j`), and,
/// when `R[s][j] = 1`, node `j` and its inputs:
///
/// `sum_{i in DEPS[s] \ D} M_i S[s][i] + sum_{i < j, i not in DEPS[s] ∪ D} M_i S[s+1][i]
///  + (M_j + sum_{p in DEPS[j]} M_p) R[s][j] <= budget - fixed`, with `D = DEPS[j] ∪ {j}`.
///
/// The three sums count disjoint sets of values, each only when it is resident. Returns the
/// row's entries and its right-hand side, memory scaled by `scale`.
fn step_row(
    g: &Graph,
    budget: u64,
    v: &Vars,
    s: usize,
    j: usize,
    scale: f64,
) -> (Vec<(Col, f64)>, f64) {
    let m = |i: usize| g.nodes[i].mem as f64 / scale;
    let in_j = |i: usize| i == j || g.deps[j].contains(&i);
    let mut row: Vec<(Col, f64)> = g.deps[s]
        .iter()
        .filter(|&&i| !in_j(i))
        .map(|&i| (v.keep[s - 1][i], m(i)))
        .collect();
    row.extend(
        (0..j)
            .filter(|&i| !in_j(i) && !g.deps[s].contains(&i))
            // The last stage keeps nothing into a next one (its `keep` is empty).
            .filter_map(|i| v.keep[s].get(i).map(|&c| (c, m(i)))),
    );
    let own = m(j) + g.deps[j].iter().map(|&p| m(p)).sum::<f64>();
    row.push((v.r[s][j], own));
    (row, budget.saturating_sub(g.fixed_mem) as f64 / scale)
}

/// Column values of a Checkmate schedule in the relaxation's column order.
fn warm_vector(n: usize, v: &Vars, sch: &Schedule, ncols: usize) -> Vec<f64> {
    let mut x = vec![0.0; ncols];
    let b = |f: bool| if f { 1.0 } else { 0.0 };
    for s in 0..n {
        for (i, c) in v.r[s].iter().enumerate() {
            x[c.index()] = b(sch.r[s][i]);
        }
        for (i, c) in v.keep[s].iter().enumerate() {
            x[c.index()] = b(sch.s[s + 1][i]);
        }
    }
    x
}

/// The schedule with every computation and every stored value that nothing uses removed:
/// stage by stage from the last, a value is kept into stage `t` (`S[t][i]`) only when a node
/// computed in stage `t` reads it or it is kept into stage `t + 1`, and a node is recomputed
/// only when a later computation of the stage reads it or it is kept into stage `t + 1`
/// without being resident. Validity (eq. 1b–1c) is preserved, cost and memory never grow:
/// this turns a relaxation's schedule, whose unused values cost nothing there, into
/// Checkmate's accounting, where an unused resident value is held to the end of the stage.
pub fn prune(g: &Graph, sch: &Schedule) -> Schedule {
    let n = g.len();
    let mut out = sch.clone();
    for t in (0..n).rev() {
        let mut needed = vec![false; n];
        if t + 1 < n {
            needed[..=t].copy_from_slice(&out.s[t + 1][..=t]);
        }
        for k in (0..=t).rev() {
            let keep = k == t || (out.r[t][k] && (needed[k] && !(k < t && out.s[t][k])));
            out.r[t][k] = keep;
            if keep {
                for &d in &g.deps[k] {
                    needed[d] = true;
                }
            }
        }
        for i in 0..t {
            out.s[t][i] = out.s[t][i] && needed[i];
        }
    }
    out
}

/// Solves the boundary-memory relaxation of Checkmate's MILP at `budget` bytes (fixed memory
/// included) with HiGHS under `opts` (time limit for all rounds together, gap, threads,
/// heuristic effort; a `warm_start` schedule that fits the budget satisfies every row and is
/// passed as the incumbent of every round), by row generation: after each round solved to
/// optimality, the incumbent is [`prune`]d and simulated; if it fits the budget it is optimal
/// for Checkmate's problem and is returned with `bound` equal to its cost; otherwise the
/// `step_row` of every recomputation step over the budget is added and the model solved
/// again. `bound` is the largest dual bound of the rounds, each valid for Checkmate's optimum
/// at the same graph, budget and node order.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub fn boundary_bound(
    g: &Graph,
    budget: u64,
    opts: &MilpOptions,
) -> Result<BoundaryOutcome, RematError> {
    let start = Instant::now();
    let n = g.len();
    let total = g.total_cost();
    let mut out = BoundaryOutcome {
        bound: f64::INFINITY,
        objective: None,
        schedule: None,
        status: "Infeasible (working-set bound)".into(),
        solve_time_s: 0.0,
        rows: 0,
        columns: 0,
        rounds: 0,
        fits: false,
    };
    let mut steps: Vec<(usize, usize)> = Vec::new();
    let mut best_bound = total;
    let prefix = g.fitting_prefix(budget);
    loop {
        let left = opts.time_limit_s - start.elapsed().as_secs_f64();
        let Some((pb, v)) = build(g, budget, prefix, &steps) else {
            break;
        };
        if out.rounds > 0 && left < 0.5 {
            break;
        }
        out.rounds += 1;
        out.rows = pb.num_rows();
        let ncols = pb.num_cols();
        out.columns = ncols;
        let mut model = pb.optimise(Sense::Minimise);
        // The objective here counts recomputations only: a cutoff on total cost does not apply.
        configure(
            &mut model,
            &MilpOptions {
                time_limit_s: left,
                cost_cutoff: None,
                warm_start: None,
                ..opts.clone()
            },
        );
        if let Some(w) = opts.warm_start.as_ref().filter(|w| w.r.len() == n) {
            model
                .try_set_solution(Some(&warm_vector(n, &v, w, ncols)), None, None, None)
                .map_err(|e| RematError::Solver(format!("setSolution: {e:?}")))?;
        }
        let solved = model
            .try_solve()
            .map_err(|e| RematError::Solver(format!("{e:?}")))?;
        let status = solved.status();
        out.status = format!("{status:?}");
        if status == HighsModelStatus::Infeasible {
            best_bound = f64::INFINITY;
            break;
        }
        // The objective counts recomputations only; every node's own computation adds sum C.
        let dual = solved
            .double_info_value(c"mip_dual_bound")
            .unwrap_or(f64::NAN);
        if dual.is_finite() {
            best_bound = best_bound.max(total + dual.max(0.0));
        }
        if solved.primal_solution_status() != HighsSolutionStatus::Feasible {
            break;
        }
        out.objective = Some(total + solved.objective_value());
        let sol = solved.get_solution();
        let cols = sol.columns();
        let mut sch = Schedule::empty(n);
        for s in 0..n {
            sch.r[s][s] = true;
            for (i, c) in v.r[s].iter().enumerate() {
                sch.r[s][i] = cols[c.index()] > 0.5;
            }
            for (i, c) in v.keep[s].iter().enumerate() {
                sch.s[s + 1][i] = cols[c.index()] > 0.5;
            }
            // Stages before the prefix's end keep every output ([`prune`] drops the unread).
            if s < prefix {
                sch.s[s][..s].fill(true);
            }
        }
        let sch = prune(g, &sch);
        let memory = stage_memory(g, &sch);
        out.fits = memory.iter().flatten().all(|&m| m <= budget as i128);
        let fresh = over_budget_steps(budget, &sch, &memory, &steps);
        out.schedule = Some(sch);
        if out.fits || status != HighsModelStatus::Optimal || fresh.is_empty() {
            break;
        }
        steps.extend(fresh);
    }
    out.bound = best_bound;
    if out.rounds == 0 {
        out.bound = f64::INFINITY;
    }
    out.solve_time_s = start.elapsed().as_secs_f64();
    Ok(out)
}

/// Recomputation steps `(s, j)` of `sch` whose memory (`memory[s][j]`, from
/// [`stage_memory`]) exceeds the budget and that have no row in `known` yet.
fn over_budget_steps(
    budget: u64,
    sch: &Schedule,
    memory: &[Vec<i128>],
    known: &[(usize, usize)],
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (s, row) in memory.iter().enumerate() {
        for (j, &m) in row.iter().enumerate() {
            if j < s && sch.r[s][j] && m > budget as i128 && !known.contains(&(s, j)) {
                out.push((s, j));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::checkpoint_all;
    use crate::milp::solve_milp;
    use crate::sim::simulate;

    fn graph(n: usize, seed: u64) -> Graph {
        crate::layered::test_graph(n, seed)
    }

    fn exact() -> MilpOptions {
        MilpOptions {
            mip_gap: 0.0,
            ..Default::default()
        }
    }

    /// The relaxation's optimum never exceeds Checkmate's (it is a lower bound), is at least
    /// `sum C`, and equals Checkmate's optimum whenever its own schedule fits the budget.
    #[test]
    fn bound_is_below_checkmate_optimum_and_exact_when_its_schedule_fits() {
        let mut strict = 0;
        let mut checked = 0;
        // Cases whose first stages are replaced by the checkpoint-all prefix.
        let mut with_prefix = 0;
        for seed in [1, 2, 3, 4] {
            let g = graph(14, seed);
            let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
            for f in [0.9, 0.75, 0.6, 0.5] {
                let budget = g.working_set_bound().max((peak as f64 * f) as u64);
                let opt = solve_milp(&g, budget, &exact()).unwrap();
                let relax = boundary_bound(&g, budget, &exact()).unwrap();
                let Some((_, best)) = &opt.best else {
                    continue;
                };
                checked += 1;
                assert_eq!(relax.status, "Optimal", "seed {seed} f {f}");
                assert!(
                    relax.bound <= best.cost + 1e-6,
                    "seed {seed} f {f}: bound {} above the optimum {}",
                    relax.bound,
                    best.cost
                );
                assert!(relax.bound >= g.total_cost() - 1e-6);
                let sch = relax
                    .schedule
                    .as_ref()
                    .expect("optimal relaxation has a schedule");
                let sim = simulate(&g, sch).expect("satisfies eq. 1b-1c");
                // Pruning removes only what nothing reads: never above the relaxation's cost,
                // never below its bound.
                assert!(sim.cost <= relax.objective.unwrap() + 1e-6);
                assert!(sim.cost >= relax.bound - 1e-6);
                if sim.peak_mem <= budget {
                    assert!(
                        (sim.cost - best.cost).abs() < 1e-6,
                        "seed {seed} f {f}: a fitting relaxed schedule must be optimal"
                    );
                }
                if relax.bound > g.total_cost() + 1e-6 {
                    strict += 1;
                }
                with_prefix += usize::from(g.fitting_prefix(budget) >= 2);
            }
        }
        assert!(checked >= 8, "only {checked} feasible cases");
        assert!(strict >= 1, "no case where the bound exceeds sum C");
        assert!(
            with_prefix >= 2,
            "only {with_prefix} cases exercise the prefix"
        );
    }

    /// A relaxed schedule that recomputes a node over the budget in the last stage gets step
    /// rows there like in any other stage (nothing is kept past the last stage; the row used
    /// to index the last stage's empty `keep` and panic). On this graph and budget Checkmate's
    /// problem is infeasible and the relaxation cannot prove it: every round's schedule
    /// overruns the last stage, the rounds end with a schedule that does not fit, and the
    /// staged solver reports the budget infeasible.
    #[test]
    fn step_rows_in_the_last_stage() {
        let g = graph(12, 3);
        let n = g.len();
        let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
        let budget = g.working_set_bound().max((peak as f64 * 0.75) as u64);
        let prefix = g.fitting_prefix(budget);
        // The last stage's row for every node it could recompute, on the first round's model.
        let (_, v) = build(&g, budget, prefix, &[]).expect("fitting working sets");
        let scale = g.nodes.iter().map(|x| x.mem).max().unwrap() as f64;
        for j in 0..n - 1 {
            let (row, rhs) = step_row(&g, budget, &v, n - 1, j, scale);
            assert!(row.iter().all(|(_, c)| *c > 0.0) && rhs > 0.0, "{j}");
            assert!(row.iter().any(|(c, _)| *c == v.r[n - 1][j]), "{j}");
        }
        let relax = boundary_bound(&g, budget, &exact()).unwrap();
        assert!(relax.rounds >= 2, "no step row was added: {relax:?}");
        assert!(relax.bound.is_finite() && !relax.fits, "{relax:?}");
        let sch = relax.schedule.as_ref().unwrap();
        let memory = stage_memory(&g, sch);
        assert!(
            (0..n - 1).any(|j| sch.r[n - 1][j] && memory[n - 1][j] > budget as i128),
            "the last stage does not overrun: {relax:?}"
        );
        let opt = solve_milp(&g, budget, &exact()).unwrap();
        assert_eq!(opt.status, "Infeasible");
        let staged =
            crate::staged::solve_staged(&g, budget, &crate::staged::StagedOptions::default())
                .unwrap();
        assert!(staged.best.is_none(), "{}", staged.status);
        assert!(staged.status.contains("Infeasible"), "{}", staged.status);
    }

    /// A warm start that fits the budget is accepted as the relaxation's incumbent, and an
    /// infeasible budget (below one node's working set) gives an infinite bound.
    #[test]
    fn warm_start_and_infeasible_budget() {
        let g = graph(30, 7);
        let all = checkpoint_all(&g);
        let peak = simulate(&g, &all).unwrap().peak_mem;
        let relax = boundary_bound(
            &g,
            peak,
            &MilpOptions {
                warm_start: Some(all),
                mip_gap: 0.0,
                ..Default::default()
            },
        )
        .unwrap();
        assert!((relax.bound - g.total_cost()).abs() < 1e-6, "{relax:?}");
        assert!((relax.objective.unwrap() - g.total_cost()).abs() < 1e-6);
        let none = boundary_bound(&g, g.working_set_bound() - 1, &exact()).unwrap();
        assert!(
            none.bound.is_infinite() && none.schedule.is_none(),
            "{none:?}"
        );
        // The largest working set at the last node (a loss reading a wide output).
        let nodes = [1, 1, 8, 9]
            .iter()
            .enumerate()
            .map(|(i, &m)| crate::Node::new(format!("n{i}"), 1.0, m, false))
            .collect();
        let g = Graph::new("wide loss", nodes, &[(0, 1), (1, 2), (2, 3)], 0).unwrap();
        assert_eq!(g.working_set_bound(), 17);
        let none = boundary_bound(&g, 16, &exact()).unwrap();
        assert!(none.bound.is_infinite(), "{none:?}");
        assert!(boundary_bound(&g, 17, &exact()).unwrap().bound.is_finite());
    }
}
