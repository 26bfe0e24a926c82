//! One HiGHS model builder for the three formulations of Checkmate's problem solved here: the
//! Checkmate MILP ([`crate::milp`]), the staged model ([`crate::staged`]) and the
//! boundary-memory relaxation ([`crate::boundary`]).
//!
//! [`FormulationBuilder`] owns a [`RowProblem`] and the column index maps ([`Columns`], stage x node)
//! and adds columns and rows by the family of Checkmate's formulation (Jain et al.,
//! "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization", MLSys 2020,
//! Section 4, eq. 1a–1e and 2–4, in the frontier-advancing order of eq. 8) they implement:
//!
//! * eq. 1a, the objective `sum_t sum_i C_i R[t][i]`: the cost of the `R` columns
//!   ([`FormulationBuilder::add_r_stage`]);
//! * eq. 1b, dependencies ([`FormulationBuilder::dependency`]);
//! * eq. 1c, storage ([`FormulationBuilder::storage`]);
//! * eq. 1d–1e (nothing resident before the first stage, the last node computed) hold by
//!   construction in the order of eq. 8: stage `t` has `S[t][i]` columns only for `i` before
//!   the stage's first node, and computes its own nodes (`R` fixed to 1, [`Term::One`], or a
//!   column with lower bound 1);
//! * eq. 2, the memory accounting `U` ([`FormulationBuilder::memory_start`],
//!   [`FormulationBuilder::memory_step`]), with eq. 4, `U <= budget`, as the upper bound of the `U`
//!   columns ([`FormulationBuilder::add_u_stage`]);
//! * eq. 3, the `FREE` linearization: Checkmate's aggregated rows
//!   ([`FormulationBuilder::free_aggregated`]) or one row per conjunct ([`FormulationBuilder::free_tight`]).
//!
//! Memory (bytes) is in units of the largest output size ([`Columns::scale`]) for numerical
//! conditioning; costs are used as is. Each formulation adds its columns and rows in its own
//! fixed order, and each family writes its rows in the orientation that formulation always
//! used ([`Form`]): HiGHS receives the same models as before the builder existed (the order of
//! entries within a row is immaterial: [`RowProblem`] stores the matrix by column), so solves
//! do not change.
//!
//! Solving: [`optimise`] (HiGHS options from [`configure`]), [`warm_start`], [`solve`], and the
//! readers [`incumbent_objective`], [`dual_bound`], [`highs_status`], [`threshold`].

use super::anneal::Beside;
use super::graph::Graph;
use super::sim::Schedule;
use super::{RematError, SolveStatus};
use highs::{Col, HighsModelStatus, HighsSolutionStatus, RowProblem, Sense, SolvedModel};
use std::sync::Arc;

/// Solver options of every HiGHS solve (Checkmate's MILP, LP rounding, the staged MILP, the
/// boundary relaxation).
#[derive(Debug, Clone)]
pub struct MilpOptions {
    /// Wall-clock limit for HiGHS, seconds.
    pub time_limit_s: f64,
    /// Relative MIP gap at which HiGHS stops (e.g. 0.01 = 1%).
    pub mip_gap: f64,
    /// HiGHS thread count.
    pub threads: u32,
    /// Feasible schedule passed to HiGHS as the incumbent (must fit the budget to help).
    pub warm_start: Option<Schedule>,
    /// HiGHS `mip_heuristic_effort` (fraction of effort on primal heuristics, HiGHS default
    /// 0.05); more effort finds first feasible schedules at tight budgets sooner.
    pub heuristic_effort: f64,
    /// Only schedules with cost at most this (cost units) are of interest: passed to HiGHS as
    /// `objective_bound`, which prunes the search (used by the batch-size search).
    pub cost_cutoff: Option<f64>,
    /// The cost (cost units) of the best schedule a heuristic running beside the solve has
    /// found so far ([`crate::anneal::Beside::best_cost`]): the boundary relaxation ends its
    /// cutting-plane loop, and skips its integer rounds, once its bound is within `mip_gap` of it.
    pub beside: Option<Arc<Beside>>,
}

impl Default for MilpOptions {
    fn default() -> Self {
        MilpOptions {
            time_limit_s: 60.0,
            mip_gap: 0.01,
            threads: 2,
            warm_start: None,
            heuristic_effort: 0.05,
            cost_cutoff: None,
            beside: None,
        }
    }
}

/// A `FREE[s][i][k]` column: `(stage, i, k, column)`: after step `k` of stage `s`, node `i`'s
/// output (`i in DEPS[k] ∪ {k}`) is freed.
pub(crate) type FreeCol = (usize, usize, usize, Col);

/// The column index maps of a model, stage x node, with its memory unit and column counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Columns {
    /// `r[s][i]`: `R[s][i]` (node `i` computed in stage `s`). For `i >= r[s].len()` the
    /// formulation fixes `R[s][i]`: to 1 for the stage's own nodes ([`Columns::r_term`]).
    pub(crate) r: Vec<Vec<Col>>,
    /// `s[s][i]`: `S[s][i]` (node `i`'s output resident at the start of stage `s`).
    pub(crate) s: Vec<Vec<Col>>,
    /// `u[s][k]`: `U[s][k]`, memory after step `k` of stage `s` (units of `scale` bytes);
    /// empty for a stage without memory rows.
    pub(crate) u: Vec<Vec<Col>>,
    /// The `FREE` columns, in the order added.
    pub(crate) free: Vec<FreeCol>,
    /// Bytes per memory unit: the largest output size (at least 1).
    pub(crate) scale: f64,
    /// Columns of the model.
    pub(crate) count: usize,
    /// Integer columns of the model (0 for an LP relaxation).
    pub(crate) integer: usize,
}

impl Columns {
    /// `R[s][i]` as a term: its column, or [`Term::One`] past the stage's columns.
    pub(crate) fn r_term(&self, s: usize, i: usize) -> Term {
        self.r[s].get(i).map_or(Term::One, |&c| Term::Col(c))
    }
}

/// A variable of a row that a formulation may fix: a column, or the constant 1 (folded into
/// the row's bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Term {
    /// A column.
    Col(Col),
    /// Fixed to 1.
    One,
}

impl Term {
    /// Pushes `coef * self` onto `row`; returns the constant part (`coef` when fixed to 1).
    fn push(self, coef: f64, row: &mut Vec<(Col, f64)>) -> f64 {
        match self {
            Term::Col(c) => {
                row.push((c, coef));
                0.0
            }
            Term::One => coef,
        }
    }
}

/// How a family's row is written: the same constraint either way, kept apart so that every
/// formulation passes HiGHS the rows it always passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// `lhs - rhs <= 0` (the time-indexed models).
    AtMost,
    /// `rhs - lhs >= 0` (the boundary relaxation).
    AtLeast,
}

/// Builds one HiGHS model of a Checkmate formulation: owns the [`RowProblem`] and the
/// [`Columns`]; [`FormulationBuilder::finish`] hands both over.
pub(crate) struct FormulationBuilder {
    pb: RowProblem,
    cols: Columns,
    integer: bool,
}

impl FormulationBuilder {
    /// An empty model for `g`; `integer = false` builds the LP relaxation (every column
    /// continuous).
    pub(crate) fn new(g: &Graph, integer: bool) -> FormulationBuilder {
        let scale = g.nodes.iter().map(|x| x.mem).max().unwrap_or(1).max(1) as f64;
        FormulationBuilder {
            pb: RowProblem::default(),
            cols: Columns {
                scale,
                ..Columns::default()
            },
            integer,
        }
    }

    /// The column maps built so far.
    pub(crate) fn cols(&self) -> &Columns {
        &self.cols
    }

    /// Node `i`'s output size `M_i` in memory units.
    pub(crate) fn mem(&self, g: &Graph, i: usize) -> f64 {
        g.nodes[i].mem as f64 / self.cols.scale
    }

    /// `bytes` in memory units.
    pub(crate) fn units(&self, bytes: u64) -> f64 {
        bytes as f64 / self.cols.scale
    }

    /// A binary column (continuous in `[lo, 1]` for the LP relaxation) of objective `cost`.
    fn binary(&mut self, cost: f64, lo: f64) -> Col {
        self.cols.integer += usize::from(self.integer);
        self.pb
            .add_column_with_integrality(cost, lo..=1.0, self.integer)
    }

    /// Appends the next stage's recomputation columns `R[s][i]`, `i in 0..count`, binary, of
    /// objective `C_i` (eq. 1a). With `computes_last`, `R[s][count - 1]` has lower bound 1
    /// (Checkmate's `R[t][t] = 1`, eq. 8); otherwise the stage's own nodes are past `count`
    /// and fixed to 1 ([`Columns::r_term`]).
    pub(crate) fn add_r_stage(&mut self, g: &Graph, count: usize, computes_last: bool) {
        let row = (0..count)
            .map(|i| {
                let lo = if computes_last && i + 1 == count {
                    1.0
                } else {
                    0.0
                };
                self.binary(g.nodes[i].cost, lo)
            })
            .collect();
        self.cols.r.push(row);
    }

    /// Appends the next stage's storage columns `S[s][i]`, `i in 0..count`, binary, of
    /// objective `price(i)` (0 in Checkmate's objective; the boundary relaxation's windows
    /// price storage, [`crate::boundary::Window::keep_price`]).
    pub(crate) fn add_s_stage(&mut self, count: usize, price: impl Fn(usize) -> f64) {
        let row = (0..count).map(|i| self.binary(price(i), 0.0)).collect();
        self.cols.s.push(row);
    }

    /// Appends the next stage's memory columns `U[s][k]`, `k in 0..steps`, continuous in
    /// `[0, budget]` (eq. 4; `budget` in bytes, fixed memory included).
    pub(crate) fn add_u_stage(&mut self, steps: usize, budget: u64) {
        let cap = self.units(budget);
        let row = (0..steps)
            .map(|_| self.pb.add_column(0.0, 0.0..=cap))
            .collect();
        self.cols.u.push(row);
    }

    /// Adds `FREE[s][i][k]` (eq. 3) in `[0, 1]`, binary when `binary` and the model is
    /// integer, else continuous.
    pub(crate) fn add_free(&mut self, s: usize, i: usize, k: usize, binary: bool) {
        let c = if binary {
            self.pb
                .add_column_with_integrality(0.0, 0.0..=1.0, self.integer)
        } else {
            self.pb.add_column(0.0, 0.0..=1.0)
        };
        self.cols.free.push((s, i, k, c));
    }

    /// A column fixed to 1 of objective `cost`: a constant of the objective (the crate does
    /// not expose HiGHS' objective offset).
    pub(crate) fn add_constant(&mut self, cost: f64) -> Col {
        self.pb.add_column(cost, 1.0..=1.0)
    }

    /// (eq. 1b) Dependencies: `R[s][k] <= R[s][i] + S[s][i]` for `i in DEPS[k]` (node `k`
    /// computed in stage `s` needs its input `i` resident or computed in the stage), with
    /// `rk = R[s][k]`, `ri = R[s][i]`, `si = S[s][i]`.
    pub(crate) fn dependency(&mut self, rk: Term, ri: Col, si: Col, form: Form) {
        let mut row = Vec::with_capacity(3);
        match form {
            Form::AtMost => {
                let c = rk.push(1.0, &mut row);
                row.push((ri, -1.0));
                row.push((si, -1.0));
                self.pb.add_row(..=-c, row);
            }
            Form::AtLeast => {
                row.push((ri, 1.0));
                row.push((si, 1.0));
                let c = rk.push(-1.0, &mut row);
                self.pb.add_row(-c.., row);
            }
        }
    }

    /// (eq. 1c) Storage: `S[s+1][i] <= S[s][i] + R[s][i]` (only a value present in stage `s`
    /// is kept into the next), with `s_next = S[s+1][i]`, `s_cur = S[s][i]` (`None`: no
    /// column, node `i` is the stage's own) and `r = R[s][i]`.
    pub(crate) fn storage(&mut self, s_next: Col, s_cur: Option<Col>, r: Col) {
        let mut row = vec![(s_next, 1.0), (r, -1.0)];
        row.extend(s_cur.map(|c| (c, -1.0)));
        self.pb.add_row(..=0.0, row);
    }

    /// (eq. 2) Memory at the first step of stage `s`: `U[s][0] = fixed + sum_{i < b} M_i
    /// S[s][i] + M_0 R[s][0]`, `b = S[s].len()`, `fixed` in bytes.
    pub(crate) fn memory_start(&mut self, g: &Graph, s: usize, fixed: u64) {
        let fixed = self.units(fixed);
        let mut row = vec![(self.cols.u[s][0], 1.0)];
        let c0 = self.cols.r_term(s, 0).push(-self.mem(g, 0), &mut row);
        let entries: Vec<(Col, f64)> = (0..self.cols.s[s].len())
            .map(|i| (self.cols.s[s][i], -self.mem(g, i)))
            .collect();
        row.extend(entries);
        self.pb.add_row(fixed - c0..=fixed - c0, row);
    }

    /// (eq. 2) Memory at step `k >= 1` of stage `s`: `U[s][k] = U[s][k-1] + M_k R[s][k] -
    /// sum_i M_i FREE[s][i][k-1]`, with `freed` the `(i, FREE[s][i][k-1])` of step `k - 1`.
    pub(crate) fn memory_step(&mut self, g: &Graph, s: usize, k: usize, freed: &[(usize, Col)]) {
        let u = &self.cols.u[s];
        let mut row = vec![(u[k], 1.0), (u[k - 1], -1.0)];
        let c = self.cols.r_term(s, k).push(-self.mem(g, k), &mut row);
        row.extend(freed.iter().map(|&(i, f)| (f, self.mem(g, i))));
        self.pb.add_row(-c..=-c, row);
    }

    /// The `FREE` columns grouped by stage and step: `[s][k]` lists `(i, FREE[s][i][k])`;
    /// `steps[s]` is stage `s`'s step count.
    pub(crate) fn free_by_step(
        &self,
        steps: impl Fn(usize) -> usize,
    ) -> Vec<Vec<Vec<(usize, Col)>>> {
        let mut at: Vec<Vec<Vec<(usize, Col)>>> = (0..self.cols.u.len())
            .map(|s| vec![Vec::new(); steps(s)])
            .collect();
        for &(s, i, k, c) in &self.cols.free {
            at[s][k].push((i, c));
        }
        at
    }

    /// (eq. 3) Checkmate's `FREE` linearization of `free = FREE[s][i][k] = R[s][k] ∧
    /// ¬S[s+1][i] ∧ ¬R[s][j]` (every later user `j` of `i` in the stage, `later`): with the
    /// hazards `h = (1 - R[s][k]) + S[s+1][i] + sum_j R[s][j]`, `1 - FREE <= h` and
    /// `κ (1 - FREE) >= h`, `κ = 2 + |later|` (an upper bound on `h`).
    pub(crate) fn free_aggregated(
        &mut self,
        free: Col,
        rk: Col,
        s_next: Option<Col>,
        later: &[Col],
    ) {
        let mut hz: Vec<(Col, f64)> = vec![(rk, -1.0)];
        hz.extend(s_next.map(|c| (c, 1.0)));
        hz.extend(later.iter().map(|&j| (j, 1.0)));
        let kappa = 2.0 + later.len() as f64;
        let mut a = hz.clone();
        a.push((free, 1.0));
        self.pb.add_row(0.0.., a);
        let mut b = hz;
        b.push((free, kappa));
        self.pb.add_row(..=kappa - 1.0, b);
    }

    /// (eq. 3, tight) One upper bound per conjunct of `free = FREE[s][i][k]`: `FREE <=
    /// R[s][k]` (`rk`, `None` when fixed to 1), `FREE <= 1 - S[s+1][i]` (`s_next`, `None` in
    /// the last stage) and `FREE <= 1 - R[s][j]` for each later user `j` in the stage
    /// (`later`). No lower bound: a `FREE` below the conjunction only over-counts memory.
    pub(crate) fn free_tight(
        &mut self,
        free: Col,
        rk: Option<Col>,
        s_next: Option<Col>,
        later: &[Col],
    ) {
        if let Some(rk) = rk {
            self.pb.add_row(..=0.0, [(free, 1.0), (rk, -1.0)]);
        }
        if let Some(sn) = s_next {
            self.pb.add_row(..=1.0, [(free, 1.0), (sn, 1.0)]);
        }
        for &rj in later {
            self.pb.add_row(..=1.0, [(free, 1.0), (rj, 1.0)]);
        }
    }

    /// Bounded recomputation (Moccasin, Bartan et al., ICML 2023, Section 3): `sum_s R[s][i]
    /// <= max_computations` over the `R` columns `r` of node `i`, the fixed computation in
    /// its own stage counting as one (`max_computations` at least 1).
    pub(crate) fn computation_bound(&mut self, r: &[Col], max_computations: u32) {
        let row: Vec<(Col, f64)> = r.iter().map(|&c| (c, 1.0)).collect();
        self.pb
            .add_row(..=(max_computations.max(1) as f64 - 1.0), row);
    }

    /// A row `bounds` on `entries` of a formulation's own family (the boundary relaxation's
    /// stage-end memory, recomputation-step and closure-cut rows).
    pub(crate) fn row(
        &mut self,
        bounds: impl std::ops::RangeBounds<f64>,
        entries: Vec<(Col, f64)>,
    ) {
        self.pb.add_row(bounds, entries);
    }

    /// The model and its column maps (with their final column count).
    pub(crate) fn finish(mut self) -> (RowProblem, Columns) {
        self.cols.count = self.pb.num_cols();
        (self.pb, self.cols)
    }
}

/// `x[c] > threshold` for each column `c` of `map` (`R` or `S`), each row padded with false
/// to `width` nodes: a schedule matrix from HiGHS' column values `x`.
pub(crate) fn threshold(map: &[Vec<Col>], x: &[f64], th: f64, width: usize) -> Vec<Vec<bool>> {
    map.iter()
        .map(|row| {
            let mut out = vec![false; width];
            for (i, c) in row.iter().enumerate() {
                out[i] = x[c.index()] > th;
            }
            out
        })
        .collect()
}

/// Applies `opts` (time limit, gap, threads, heuristic effort, cost cutoff) to a HiGHS model,
/// quiet and with a fixed random seed; `stop_at_first` stops at HiGHS' first improving
/// solution (`mip_max_improving_sols = 1`).
pub(crate) fn configure(model: &mut highs::Model, opts: &MilpOptions, stop_at_first: bool) {
    model.make_quiet();
    model.set_option("time_limit", opts.time_limit_s.max(0.01));
    model.set_option("mip_rel_gap", opts.mip_gap.max(0.0));
    model.set_option("threads", opts.threads.max(1) as i32);
    model.set_option("random_seed", 0);
    model.set_option(
        "mip_heuristic_effort",
        opts.heuristic_effort.clamp(0.0, 1.0),
    );
    if stop_at_first {
        model.set_option("mip_max_improving_sols", 1);
    }
    if let Some(c) = opts.cost_cutoff {
        // Small slack so that a schedule of exactly the cutoff cost is kept.
        model.set_option("objective_bound", c + 1e-6 * c.abs().max(1.0));
    }
}

/// `pb` handed to HiGHS, minimizing, configured by [`configure`].
pub(crate) fn optimise(pb: RowProblem, opts: &MilpOptions, stop_at_first: bool) -> highs::Model {
    let mut model = pb.optimise(Sense::Minimise);
    configure(&mut model, opts, stop_at_first);
    model
}

/// Passes the column values `x` to HiGHS as the incumbent (`Highs_setSolution`).
///
/// # Errors
/// [`RematError::Solver`] when HiGHS rejects them.
pub(crate) fn warm_start(model: &mut highs::Model, x: &[f64]) -> Result<(), RematError> {
    model
        .try_set_solution(Some(x), None, None, None)
        .map(|_| ())
        .map_err(|e| RematError::Solver(format!("setSolution: {e:?}")))
}

/// Solves `model`; `what` (empty or ending in `": "`) prefixes the error.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub(crate) fn solve(model: highs::Model, what: &str) -> Result<SolvedModel, RematError> {
    model
        .try_solve()
        .map_err(|e| RematError::Solver(format!("{what}{e:?}")))
}

/// The objective of HiGHS' incumbent (cost units) when it has a feasible one.
pub(crate) fn incumbent_objective(solved: &SolvedModel) -> Option<f64> {
    (solved.primal_solution_status() == HighsSolutionStatus::Feasible
        && !matches!(solved.status(), HighsModelStatus::Infeasible))
    .then(|| solved.objective_value())
}

/// HiGHS' MIP dual bound (cost units; NaN when HiGHS reports none).
pub(crate) fn dual_bound(solved: &SolvedModel) -> f64 {
    solved
        .double_info_value(c"mip_dual_bound")
        .unwrap_or(f64::NAN)
}

/// HiGHS' model status as a [`SolveStatus`]: the variant of the same name (whose text is the
/// status' `Debug` name, what records stored before statuses were typed), or
/// [`SolveStatus::Other`] with that name for a status added to HiGHS after this memwall.
pub fn highs_status(status: HighsModelStatus) -> SolveStatus {
    match status {
        HighsModelStatus::NotSet => SolveStatus::NotSet,
        HighsModelStatus::LoadError => SolveStatus::LoadError,
        HighsModelStatus::ModelError => SolveStatus::ModelError,
        HighsModelStatus::PresolveError => SolveStatus::PresolveError,
        HighsModelStatus::SolveError => SolveStatus::SolveError,
        HighsModelStatus::PostsolveError => SolveStatus::PostsolveError,
        HighsModelStatus::ModelEmpty => SolveStatus::ModelEmpty,
        HighsModelStatus::Infeasible => SolveStatus::Infeasible,
        HighsModelStatus::UnboundedOrInfeasible => SolveStatus::UnboundedOrInfeasible,
        HighsModelStatus::Unbounded => SolveStatus::Unbounded,
        HighsModelStatus::Optimal => SolveStatus::Optimal,
        HighsModelStatus::ObjectiveBound => SolveStatus::ObjectiveBound,
        HighsModelStatus::ObjectiveTarget => SolveStatus::ObjectiveTarget,
        HighsModelStatus::ReachedTimeLimit => SolveStatus::ReachedTimeLimit,
        HighsModelStatus::ReachedIterationLimit => SolveStatus::ReachedIterationLimit,
        HighsModelStatus::Unknown => SolveStatus::Unknown,
        HighsModelStatus::ReachedSolutionLimit => SolveStatus::ReachedSolutionLimit,
        HighsModelStatus::ReachedInterrupt => SolveStatus::ReachedInterrupt,
        HighsModelStatus::ReachedMemoryLimit => SolveStatus::ReachedMemoryLimit,
        other => SolveStatus::Other(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the model `mb` is feasible with its first columns fixed to `values`.
    fn feasible_at(mut mb: FormulationBuilder, cols: &[Col], values: &[f64]) -> bool {
        for (&c, &x) in cols.iter().zip(values) {
            mb.row(x..=x, vec![(c, 1.0)]);
        }
        let (pb, _) = mb.finish();
        let solved = solve(optimise(pb, &MilpOptions::default(), false), "").unwrap();
        match solved.status() {
            HighsModelStatus::Optimal => true,
            HighsModelStatus::Infeasible => false,
            other => panic!("{other:?}"),
        }
    }

    /// The dependency family (eq. 1b) cuts off exactly the 0/1 points with `R[s][k] = 1` and
    /// neither `R[s][i]` nor `S[s][i]`, in both forms and with `R[s][k]` a column or fixed
    /// to 1: the two forms are one constraint.
    #[test]
    fn dependency_forms_cut_off_the_same_points() {
        let g = Graph::linear_chain(3).unwrap();
        for form in [Form::AtMost, Form::AtLeast] {
            for fixed in [false, true] {
                for bits in 0..8u32 {
                    let x: Vec<f64> = (0..3).map(|b| f64::from((bits >> b) & 1)).collect();
                    if fixed && x[0] == 0.0 {
                        continue;
                    }
                    let mut mb = FormulationBuilder::new(&g, true);
                    // Stage 2: R[2][0], R[2][1] as columns, S[2][0], S[2][1].
                    mb.add_r_stage(&g, 2, false);
                    mb.add_s_stage(2, |_| 0.0);
                    let v = mb.cols().clone();
                    let rk = if fixed {
                        Term::One
                    } else {
                        Term::Col(v.r[0][1])
                    };
                    assert_eq!(v.r_term(0, 2), Term::One);
                    mb.dependency(rk, v.r[0][0], v.s[0][0], form);
                    let cols = [v.r[0][1], v.r[0][0], v.s[0][0]];
                    let fixed_cols = if fixed { &cols[1..] } else { &cols[..] };
                    let vals = if fixed { &x[1..] } else { &x[..] };
                    let expect = x[0] <= x[1] + x[2];
                    assert_eq!(
                        feasible_at(mb, fixed_cols, vals),
                        expect,
                        "{form:?} fixed {fixed} R[k], R[i], S[i] = {x:?}"
                    );
                }
            }
        }
    }

    /// Column maps and counts of a Checkmate MILP-shaped model: `R[t][0..=t]`, `S[t][0..t]`,
    /// `U[t][0..=t]`, integer columns `R` and `S` only in the integer model, memory in units of
    /// the largest output, and [`threshold`] padding each row to the graph's width.
    #[test]
    fn columns_counts_and_threshold() {
        let g = Graph::linear_chain(4).unwrap();
        let n = g.len();
        for integer in [true, false] {
            let mut mb = FormulationBuilder::new(&g, integer);
            for t in 0..n {
                mb.add_r_stage(&g, t + 1, true);
                mb.add_s_stage(t, |_| 0.0);
                mb.add_u_stage(t + 1, 1000);
            }
            let largest = g.nodes.iter().map(|x| x.mem).max().unwrap();
            assert_eq!(mb.mem(&g, 0), g.nodes[0].mem as f64 / largest as f64);
            let (pb, v) = mb.finish();
            let tri = n * (n + 1) / 2;
            assert_eq!(v.count, pb.num_cols());
            assert_eq!(v.count, tri + (tri - n) + tri);
            assert_eq!(v.integer, if integer { tri + tri - n } else { 0 });
            let x: Vec<f64> = (0..v.count).map(|c| (c % 2) as f64).collect();
            let s = threshold(&v.s, &x, 0.5, n);
            assert_eq!(s.len(), n);
            for t in 0..n {
                assert_eq!(s[t].len(), n);
                for i in 0..n {
                    let want = i < t && x[v.s[t][i].index()] > 0.5;
                    assert_eq!(s[t][i], want, "S[{t}][{i}]");
                }
            }
        }
    }
}
