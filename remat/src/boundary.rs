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
//! **Closure cuts.** The LP relaxation of this model is weak where a large value is dropped
//! and recomputed later: it recomputes the value at small fractions in several stages, each
//! needing the value's inputs only at that fraction, so the inputs are "kept" at a fraction of
//! their bytes instead of recomputed (LP bound 127,692 on the 250-node random layered graph at
//! budget 0.8, where the best known schedule costs 130,919 and HiGHS' root cuts reach
//! 129,144). A [`ClosureCut`] states that a value not kept across a boundary but read after
//! it has each input along a chain kept across that boundary or recomputed, in full, before
//! that read. The cuts are separated on the LP (a cutting-plane loop before the integer
//! rounds, which keep them): on that graph the LP bound rises to 129,737 in seven rounds, a
//! 0.90% gap to 130,919.
//!
//! **Size.** `n (n - 1)` binaries and about `n |E| / 2 + n^2 / 2` rows with 2–3 entries each,
//! against the time-indexed model's additional `~n |E| / 2` continuous `FREE` columns with 1–3
//! rows each and `n^2 / 2` `U` columns: on the 250-node random layered graph 129,469 rows
//! against 659,860, and 60,086 rows with the 187-stage prefix of its budget 0.8.
//!
//! May import: the graph IR, the simulator, [`crate::milp::MilpOptions`], the HiGHS model
//! builder (`crate::formulation`), [`crate::SolveStatus`], HiGHS.

use super::formulation::{
    dual_bound, highs_status, incumbent_objective, optimise, solve, warm_start, Columns, Form,
    FormulationBuilder,
};
use super::graph::Graph;
use super::milp::MilpOptions;
use super::sim::{simulate, stage_memory, Schedule};
use super::{RematError, SolveStatus};
use highs::{Col, HighsModelStatus, RowProblem};
use std::time::Instant;

/// Result of [`boundary_bound`].
#[derive(Debug, Clone)]
pub struct BoundaryOutcome {
    /// Lower bound on Checkmate's optimal cost at this budget, cost units: `sum_i C_i` plus
    /// the larger of the relaxation's LP bound with closure cuts and HiGHS' dual bound on its
    /// integer rounds (`f64::INFINITY` when the relaxation, hence Checkmate's problem, is
    /// infeasible).
    pub bound: f64,
    /// Cost of the relaxation's incumbent (cost units), if HiGHS found one.
    pub objective: Option<f64>,
    /// The incumbent as Checkmate's `n x n` matrices (`R` and `S`), [`prune`]d; it satisfies
    /// eq. 1b–1c but may exceed the budget inside a stage (simulate it before use). Its cost
    /// is at most `objective`.
    pub schedule: Option<Schedule>,
    /// HiGHS model status of its last round ([`crate::milp::highs_status`]), or
    /// [`SolveStatus::InfeasibleWorkingSet`] when no round was solved.
    pub status: SolveStatus,
    /// Wall time of build and solve, seconds.
    pub solve_time_s: f64,
    /// Rows of the relaxation in its last round.
    pub rows: usize,
    /// Columns (all binary) of the relaxation.
    pub columns: usize,
    /// Rounds of row generation solved.
    pub rounds: usize,
    /// LP bound of the relaxation with its closure cuts ([`ClosureCut`]), total cost units,
    /// from the last separation round solved to optimality (`None`: none was).
    pub lp_bound: Option<f64>,
    /// Closure cuts added by separation (also in every round's model).
    pub cuts: usize,
    /// Whether `schedule` fits the budget in Checkmate's accounting; with status
    /// [`SolveStatus::Optimal`] it is then an optimal schedule of Checkmate's problem.
    pub fits: bool,
}

/// `S[s+1]`, the storage kept across the boundary after stage `s` (`keep[s]`, `i <= s`,
/// `s < n - 1`): the relaxation's columns ([`Columns`], built by [`build`]) have `S[0]` empty
/// and `S[s+1]` added with stage `s`.
fn keep(v: &Columns, s: usize) -> &[Col] {
    v.s.get(s + 1).map_or(&[], |x| x.as_slice())
}

/// The stages a relaxation models: columns and rows for stages `first..=last`, and the storage
/// `S[first]` entering the window as free columns, bounded only by the memory row of stage
/// `first - 1` when that stage is after the checkpoint-all prefix. The whole relaxation is the
/// window `prefix..=n - 1`.
///
/// **Why a window bounds its share of the cost.** Every constraint of the window's model is a
/// row of the whole relaxation on the window's variables, so the restriction of any schedule
/// of Checkmate's model is feasible for it, and its recomputation cost in the window's stages
/// is at least the window's optimum. Windows that partition the stages after the prefix give
/// a lower bound `sum C + sum_w OPT_w` on Checkmate's optimum: a Lagrangian decomposition
/// (Guignard and Kim, "Lagrangean decomposition", Mathematical Programming 39, 1987) of the
/// copies of the storage `S[first]` that two consecutive windows share (each window has its own
/// copy, one as its exit storage, the other as its entry storage).
///
/// **Multipliers.** With zero multipliers a window drops, free of charge, every value that is
/// read only after its end, and the next window starts with it resident, also free: the memory
/// such values hold across a window boundary is lost, and on the random layered graphs the
/// bound falls back to `sum C`. [`Window::keep_price`] prices the copies instead: entering a
/// window with a value read in it costs `C_i`, leaving the previous window with it earns `C_i`
/// (the multiplier of the linking equality is `C_i`, the cost of recomputing the value alone).
/// Any multipliers give a valid bound (the two terms cancel for every schedule of the whole
/// problem); these make holding a value across the boundary cost memory in the earlier window
/// or a recomputation in the later one. A boundary whose earlier window was not solved has
/// price 0 on both sides ([`window_bound`]), so that window adds 0, not minus its rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First stage with columns (at least the checkpoint-all prefix).
    pub first: usize,
    /// Last stage with columns (inclusive).
    pub last: usize,
    /// Whether the entry storage is priced ([`Window::keep_price`]).
    pub entry_priced: bool,
    /// Whether the exit storage is priced.
    pub exit_priced: bool,
}

impl Window {
    /// Whether stage `s` is in the window.
    pub fn contains(&self, s: usize) -> bool {
        (self.first..=self.last).contains(&s)
    }

    /// Cost of the keep column `S[s+1][i]` in the window's objective: `+C_i` for the entry
    /// storage (`s + 1 == first`, after the prefix) of a value read in or after the window,
    /// `-C_i` for the exit storage (`s == last`, before the graph's end) of a value read after
    /// it, 0 otherwise (the whole relaxation has no priced column).
    pub fn keep_price(&self, g: &Graph, prefix: usize, s: usize, i: usize) -> f64 {
        let last_user = g.users[i].last().copied().unwrap_or(0);
        let entry = self.entry_priced && self.first > prefix;
        if entry && s + 1 == self.first && last_user >= self.first {
            g.nodes[i].cost
        } else if self.exit_priced && s == self.last && s + 1 < g.len() && last_user > s {
            -g.nodes[i].cost
        } else {
            0.0
        }
    }

    /// The whole relaxation: stages `prefix..=n - 1`.
    pub fn whole(n: usize, prefix: usize) -> Window {
        Window {
            first: prefix,
            last: n.saturating_sub(1),
            entry_priced: false,
            exit_priced: false,
        }
    }

    /// Binary columns of the window's model on an `n`-node graph: `R[s][i]` (`i < s`) and the
    /// storage into each stage after the window's first (`S[s+1][i]`, `i <= s`) and into it.
    pub fn columns(&self, n: usize) -> usize {
        (self.first..=self.last)
            .map(|s| s + if s + 1 < n { s + 1 } else { 0 })
            .sum::<usize>()
            + self.first
    }
}

/// Builds the relaxation on the stages of `w` ([`Window`]) with one memory row per stage's
/// last step, one per `(s, j)` in `steps` (recomputation of node `j` in stage `s`, see
/// [`step_row`]) and one per closure cut in `cuts` ([`ClosureCut::row`]); `None` when a node's
/// working set exceeds the budget. Columns: per stage `R[s]`, then `S[s+1]`; rows: per stage
/// 1b and 1c, then the stage-end memory rows, the step rows and the cuts.
fn build(
    g: &Graph,
    budget: u64,
    prefix: usize,
    w: Window,
    steps: &[(usize, usize)],
    cuts: &[ClosureCut],
) -> Option<(RowProblem, Columns)> {
    let mut mb = FormulationBuilder::new(g, true);
    add_columns(&mut mb, g, prefix, w);
    add_schedule_rows(&mut mb, g, w);
    add_stage_end_rows(&mut mb, g, budget, prefix, w)?;
    for &(st, j) in steps {
        let (row, rhs) = step_row(g, budget, mb.cols(), st, j, mb.cols().scale);
        mb.row(..=rhs, row);
    }
    for c in cuts {
        let row = c.row(mb.cols());
        mb.row(1.0.., row);
    }
    Some(mb.finish())
}

/// Binary columns, stage by stage: `R[s][0..s]` (cost `C_i`) for the window's stages, then the
/// storage `S[s+1][0..=s]` kept into each stage after `first` and into `first` (its entry
/// storage), priced by [`Window::keep_price`].
fn add_columns(mb: &mut FormulationBuilder, g: &Graph, prefix: usize, w: Window) {
    let n = g.len();
    // Nothing is resident before the first stage.
    mb.add_s_stage(0, |_| 0.0);
    for s in 0..n {
        // Stages before the prefix's end compute their own node only; outputs kept into
        // stage `prefix` (`keep[prefix - 1]`) are free choices.
        let recomputed = if w.contains(s) { s } else { 0 };
        mb.add_r_stage(g, recomputed, false);
        // `keep[first - 1]` is the window's entry storage `S[first]`.
        let kept = if s + 1 < n && s + 1 >= w.first && s <= w.last {
            s + 1
        } else {
            0
        };
        mb.add_s_stage(kept, |i| w.keep_price(g, prefix, s, i));
    }
}

/// Per stage of the window: the dependencies (eq. 1b) of node `s` (`R[s][s] = 1`) and of each
/// recomputed node, written `R[s][p] + S[s][p] >= R[s][j]`, and the storage rows (eq. 1c).
fn add_schedule_rows(mb: &mut FormulationBuilder, g: &Graph, w: Window) {
    let n = g.len();
    for s in w.first.max(1)..=w.last {
        for j in std::iter::once(s).chain(0..s) {
            for &p in &g.deps[j] {
                let v = mb.cols();
                let (rj, rp, sp) = (v.r_term(s, j), v.r[s][p], keep(v, s - 1)[p]);
                mb.dependency(rj, rp, sp, Form::AtLeast);
            }
        }
        // Only a present value is kept: S[s+1][i] <= S[s][i] + R[s][i].
        if s + 1 < n {
            for i in 0..s {
                let v = mb.cols();
                let (next, cur, r) = (keep(v, s)[i], keep(v, s - 1)[i], v.r[s][i]);
                mb.storage(next, Some(cur), r);
            }
        }
    }
}

/// Memory at each stage's last step (the last stage keeps nothing: only its working set):
/// `sum_{i < s, i not in DEPS[s]} M_i S[s+1][i] <= budget - fixed - M_s - sum_{p in DEPS[s]}
/// M_p`, for the window's stages and the stage before it (on `S[first]` alone). `None` when
/// some node's working set alone exceeds the budget.
fn add_stage_end_rows(
    mb: &mut FormulationBuilder,
    g: &Graph,
    budget: u64,
    prefix: usize,
    w: Window,
) -> Option<()> {
    let n = g.len();
    for s in 0..n {
        let forced =
            g.fixed_mem + g.nodes[s].mem + g.deps[s].iter().map(|&p| g.nodes[p].mem).sum::<u64>();
        if forced > budget {
            return None;
        }
        if s + 1 == n || s < prefix || s + 1 < w.first || s > w.last {
            continue;
        }
        let row: Vec<(Col, f64)> = (0..s)
            .filter(|i| !g.deps[s].contains(i))
            .map(|i| (keep(mb.cols(), s)[i], mb.mem(g, i)))
            .collect();
        if !row.is_empty() {
            mb.row(..=mb.units(budget - forced), row);
        }
    }
    Some(())
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
    v: &Columns,
    s: usize,
    j: usize,
    scale: f64,
) -> (Vec<(Col, f64)>, f64) {
    let m = |i: usize| g.nodes[i].mem as f64 / scale;
    let in_j = |i: usize| i == j || g.deps[j].contains(&i);
    let mut row: Vec<(Col, f64)> = g.deps[s]
        .iter()
        .filter(|&&i| !in_j(i))
        .map(|&i| (keep(v, s - 1)[i], m(i)))
        .collect();
    row.extend(
        (0..j)
            .filter(|&i| !in_j(i) && !g.deps[s].contains(&i))
            // The last stage keeps nothing into a next one (its `keep` is empty).
            .filter_map(|i| keep(v, s).get(i).map(|&c| (c, m(i)))),
    );
    let own = m(j) + g.deps[j].iter().map(|&p| m(p)).sum::<f64>();
    row.push((v.r[s][j], own));
    (row, budget.saturating_sub(g.fixed_mem) as f64 / scale)
}

/// Longest chain of inputs a closure cut follows from the value read (edges): depth 2 gives
/// the value, an input and an input of that input. On the random layered n250 graph at 0.8,
/// depth 1 lifts the LP bound from 127,692 to 129,315 and depth 2 to 129,737; depth 4 adds
/// nothing.
pub const CLOSURE_DEPTH: usize = 2;

/// Share of the relaxation's time limit that the cutting-plane loop on its LP may use; the
/// integer rounds get the rest.
pub const CUT_SHARE: f64 = 0.75;

/// Most closure cuts added per separation round (the most violated first).
const CUTS_PER_ROUND: usize = 20_000;

/// Violation below which a closure cut is not added (LP values are exact to ~1e-7).
const CUT_TOLERANCE: f64 = 1e-4;

/// A recomputation-closure cut, valid for every schedule of Checkmate's model (Jain et al.
/// 2020, eq. 1b–1c) in the frontier-advancing order. Let `path = [x_0, ..., x_k]` be a chain
/// of inputs (`x_{j+1}` in `DEPS[x_j]`) with `x_0 <= b`, and `u > b` the first stage whose
/// node reads `x_0`. Then
///
/// `sum_{j < k} S[b+1][x_j] + S[b+1][x_k] + sum_{t = b+1}^{u} R[t][x_k] >= 1`.
///
/// **Why it holds.** Suppose none of `x_0..x_{k-1}` is kept across the boundary into stage
/// `b + 1`. Stage `u` computes node `u`, which reads `x_0`, so `x_0` is resident there; not
/// being kept into `b + 1`, the storage rows (`S[t+1][i] <= S[t][i] + R[t][i]`) force a
/// recomputation of `x_0` in some stage `t_0` in `b+1..=u`. That recomputation reads `x_1`
/// (eq. 1b), which by the same argument is recomputed in some `t_1` in `b+1..=t_0`, and so on
/// down to `x_{k-1}` at `t_{k-1} <= u`, which reads `x_k`: `x_k` is kept into `b + 1` or
/// recomputed in `b+1..=t_{k-1}`. If one of `x_0..x_{k-1}` is kept, the row holds trivially.
///
/// **Why it helps.** The LP relaxation drops a large value (`S[b+1][x_0] = 0`) and spreads its
/// recomputation over several stages at small fractions, each needing its inputs only at that
/// fraction, so the inputs can be "kept" at a fraction of their bytes instead of recomputed:
/// on the 250-node random layered graph the LP bound's recomputation cost is 2,123 against
/// 5,350 for the best schedule known. The cut charges the whole closure: an input not kept
/// must be recomputed once, in full. Separated on LP solutions ([`separate_closure_cuts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClosureCut {
    /// The boundary: `keep[b]` is `S[b+1]`.
    b: usize,
    /// First stage after `b` whose node reads `path[0]`.
    u: usize,
    /// `path[0]` (read by node `u`) back to `path[k]`, each an input of the previous.
    path: Vec<usize>,
}

impl ClosureCut {
    /// The cut's entries (right-hand side `>= 1`).
    fn row(&self, v: &Columns) -> Vec<(Col, f64)> {
        let last = *self.path.last().expect("a cut has a path");
        let mut row: Vec<(Col, f64)> = self
            .path
            .iter()
            .map(|&x| (keep(v, self.b)[x], 1.0))
            .collect();
        row.extend((self.b + 1..=self.u).map(|t| (v.r[t][last], 1.0)));
        row
    }
}

/// Closure cuts ([`ClosureCut`]) violated by the column values `x` of the relaxation built
/// on the stages of `w`, for every boundary `b` with keep columns (`first - 1 <= b`), every
/// value `x_0 <= b` read by a later stage `u` of the window and every input chain up to
/// [`CLOSURE_DEPTH`] edges; at most [`CUTS_PER_ROUND`], the most violated first.
fn separate_closure_cuts(g: &Graph, w: Window, v: &Columns, x: &[f64]) -> Vec<ClosureCut> {
    let n = g.len();
    let val = |c: Col| x[c.index()];
    // cum[i][t] = sum_{t' < t} R[t'][i] (zero where node i has no recomputation column).
    let cum: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let mut c = vec![0.0; n + 1];
            for t in 0..n {
                c[t + 1] = c[t] + v.r[t].get(i).map_or(0.0, |&col| val(col));
            }
            c
        })
        .collect();
    let mut found: Vec<(f64, ClosureCut)> = Vec::new();
    for b in w.first.saturating_sub(1)..n.saturating_sub(1) {
        if keep(v, b).is_empty() {
            continue;
        }
        for x0 in 0..=b {
            let users = &g.users[x0];
            let Some(&u) = users
                .get(users.partition_point(|&k| k <= b))
                .filter(|&&u| u <= w.last)
            else {
                continue;
            };
            let kept0 = val(keep(v, b)[x0]);
            if kept0 >= 1.0 - CUT_TOLERANCE {
                continue;
            }
            // S[b+1][i] + sum_{t = b+1}^{u} R[t][i].
            let avail = |i: usize| val(keep(v, b)[i]) + cum[i][u + 1] - cum[i][b + 1];
            // Depth-first over input chains: (path, sum of its nodes' keep values).
            let mut stack = vec![(vec![x0], kept0)];
            while let Some((path, kept)) = stack.pop() {
                let node = *path.last().expect("non-empty");
                for &p in &g.deps[node] {
                    let violation = 1.0 - kept - avail(p);
                    let kept_p = kept + val(keep(v, b)[p]);
                    let deeper = path.len() < CLOSURE_DEPTH && kept_p < 1.0 - CUT_TOLERANCE;
                    if violation <= CUT_TOLERANCE && !deeper {
                        continue;
                    }
                    let mut next = path.clone();
                    next.push(p);
                    if deeper {
                        stack.push((next.clone(), kept_p));
                    }
                    if violation > CUT_TOLERANCE {
                        found.push((violation, ClosureCut { b, u, path: next }));
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    found.truncate(CUTS_PER_ROUND);
    found.into_iter().map(|(_, c)| c).collect()
}

/// Column values of a Checkmate schedule in the relaxation's column order.
fn warm_vector(n: usize, v: &Columns, sch: &Schedule, ncols: usize) -> Vec<f64> {
    let mut x = vec![0.0; ncols];
    let b = |f: bool| if f { 1.0 } else { 0.0 };
    for s in 0..n {
        for (i, c) in v.r[s].iter().enumerate() {
            x[c.index()] = b(sch.r[s][i]);
        }
        for (i, c) in keep(v, s).iter().enumerate() {
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
/// passed as the incumbent of every round). First a cutting-plane loop on the LP relaxation
/// adds violated closure cuts ([`ClosureCut`], at most [`CUT_SHARE`] of the time limit);
/// then integer rounds with those cuts, by row generation: after each round solved to
/// optimality, the incumbent is [`prune`]d and simulated; if it fits the budget it is optimal
/// for Checkmate's problem and is returned with `bound` equal to its cost; otherwise the
/// `step_row` of every recomputation step over the budget is added and the model solved
/// again. `bound` is the largest of the cut LP's bound and the rounds' dual bounds, each valid
/// for Checkmate's optimum at the same graph, budget and node order. With
/// [`MilpOptions::beside`], the cut loop ends, and the integer rounds are skipped (status
/// [`SolveStatus::ObjectiveTarget`]), once the bound is within `opts.mip_gap` of the best
/// schedule of the heuristic beside it.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub fn boundary_bound(
    g: &Graph,
    budget: u64,
    opts: &MilpOptions,
) -> Result<BoundaryOutcome, RematError> {
    let start = Instant::now();
    let prefix = g.fitting_prefix(budget);
    let whole = Window::whole(g.len(), prefix);
    let mut rounds = Rounds {
        g,
        budget,
        prefix,
        opts,
        steps: Vec::new(),
        best_bound: g.total_cost(),
        out: BoundaryOutcome::empty(f64::INFINITY, SolveStatus::InfeasibleWorkingSet),
    };
    let cut_limit = opts.time_limit_s * CUT_SHARE;
    let cuts = separate(
        g,
        budget,
        prefix,
        whole,
        opts,
        (start, cut_limit),
        &mut rounds.out,
    )?;
    if let Some(lp) = rounds.out.lp_bound {
        rounds.best_bound = rounds.best_bound.max(lp);
    }
    // Whether the schedule of a heuristic beside the solve is proved within the gap.
    let mut target = false;
    loop {
        if beside_within_gap(opts, rounds.best_bound) {
            target = true;
            break;
        }
        let left = opts.time_limit_s - start.elapsed().as_secs_f64();
        let Some((pb, v)) = build(g, budget, prefix, whole, &rounds.steps, &cuts) else {
            break;
        };
        if rounds.out.rounds > 0 && left < 0.5 {
            break;
        }
        match rounds.round(pb, &v, left)? {
            RoundEnd::Steps(fresh) => rounds.steps.extend(fresh),
            RoundEnd::Infeasible => {
                rounds.best_bound = f64::INFINITY;
                break;
            }
            RoundEnd::Done => break,
        }
    }
    let mut out = rounds.out;
    out.bound = if out.rounds == 0 && !target {
        f64::INFINITY
    } else {
        rounds.best_bound
    };
    if target {
        out.status = SolveStatus::ObjectiveTarget;
    }
    out.solve_time_s = start.elapsed().as_secs_f64();
    Ok(out)
}

impl BoundaryOutcome {
    /// The outcome before any solve: bound `bound`, status `status`, nothing else.
    fn empty(bound: f64, status: SolveStatus) -> BoundaryOutcome {
        BoundaryOutcome {
            bound,
            objective: None,
            schedule: None,
            status,
            solve_time_s: 0.0,
            rows: 0,
            columns: 0,
            rounds: 0,
            lp_bound: None,
            cuts: 0,
            fits: false,
        }
    }
}

/// How an integer round of [`boundary_bound`] ended.
enum RoundEnd {
    /// The relaxation, hence Checkmate's problem, is infeasible.
    Infeasible,
    /// No further round: the schedule fits, HiGHS stopped short of optimality or found no
    /// schedule, or no step over the budget is new.
    Done,
    /// Recomputation steps over the budget to add as rows ([`step_row`]) for the next round.
    Steps(Vec<(usize, usize)>),
}

/// The state of [`boundary_bound`]'s integer rounds (row generation).
struct Rounds<'a> {
    g: &'a Graph,
    budget: u64,
    prefix: usize,
    opts: &'a MilpOptions,
    /// Step rows `(s, j)` of the model.
    steps: Vec<(usize, usize)>,
    /// The best bound so far, total cost units.
    best_bound: f64,
    out: BoundaryOutcome,
}

impl Rounds<'_> {
    /// One integer round on the relaxation `pb` (columns `v`) in `left` seconds, warm-started
    /// from `opts.warm_start`: records its size, status, objective and [`prune`]d schedule
    /// (and whether that fits) in `out`, raises `best_bound` to `sum C` plus HiGHS' dual
    /// bound, and returns the new steps over the budget when the round was solved to
    /// optimality and its schedule does not fit.
    fn round(&mut self, pb: RowProblem, v: &Columns, left: f64) -> Result<RoundEnd, RematError> {
        let (g, n) = (self.g, self.g.len());
        let total = g.total_cost();
        self.out.rounds += 1;
        self.out.rows = pb.num_rows();
        self.out.columns = pb.num_cols();
        // The objective here counts recomputations only: a cutoff on total cost does not apply.
        let round_opts = MilpOptions {
            time_limit_s: left,
            cost_cutoff: None,
            warm_start: None,
            ..self.opts.clone()
        };
        let mut model = optimise(pb, &round_opts, false);
        if let Some(w) = self.opts.warm_start.as_ref().filter(|w| w.r.len() == n) {
            warm_start(&mut model, &warm_vector(n, v, w, self.out.columns))?;
        }
        let solved = solve(model, "")?;
        let status = solved.status();
        self.out.status = highs_status(status);
        if status == HighsModelStatus::Infeasible {
            return Ok(RoundEnd::Infeasible);
        }
        // The objective counts recomputations only; every node's own computation adds sum C.
        let dual = dual_bound(&solved);
        if dual.is_finite() {
            self.best_bound = self.best_bound.max(total + dual.max(0.0));
        }
        let Some(objective) = incumbent_objective(&solved) else {
            return Ok(RoundEnd::Done);
        };
        self.out.objective = Some(total + objective);
        let x = solved.get_solution();
        let sch = prune(g, &relaxed_schedule(n, self.prefix, v, x.columns()));
        let memory = stage_memory(g, &sch);
        self.out.fits = memory.iter().flatten().all(|&m| m <= self.budget as i128);
        let fresh = over_budget_steps(self.budget, &sch, &memory, &self.steps);
        self.out.schedule = Some(sch);
        if self.out.fits || status != HighsModelStatus::Optimal || fresh.is_empty() {
            return Ok(RoundEnd::Done);
        }
        Ok(RoundEnd::Steps(fresh))
    }
}

/// The relaxation's schedule as Checkmate's `n x n` matrices from its column values `x`:
/// `R[s][s] = 1`, the recomputations and kept values above 0.5, and every output kept through
/// the prefix stages ([`prune`] drops the unread ones).
fn relaxed_schedule(n: usize, prefix: usize, v: &Columns, x: &[f64]) -> Schedule {
    let mut sch = Schedule::empty(n);
    for s in 0..n {
        sch.r[s][s] = true;
        for (i, c) in v.r[s].iter().enumerate() {
            sch.r[s][i] = x[c.index()] > 0.5;
        }
        for (i, c) in keep(v, s).iter().enumerate() {
            sch.s[s + 1][i] = x[c.index()] > 0.5;
        }
        if s < prefix {
            sch.s[s][..s].fill(true);
        }
    }
    sch
}

/// Cutting-plane loop on the relaxation's LP: solve, add the violated closure cuts
/// ([`separate_closure_cuts`]), re-solve from the previous basis, until none is violated,
/// the LP bound is within `opts.mip_gap` of a fitting `opts.warm_start`, or `limit.1`
/// seconds have passed since `limit.0`. Records the last optimal LP bound (the window's
/// recomputation cost plus `sum C`) and the cut count in `out`; returns the cuts for the
/// integer rounds.
fn separate(
    g: &Graph,
    budget: u64,
    prefix: usize,
    w: Window,
    opts: &MilpOptions,
    limit: (Instant, f64),
    out: &mut BoundaryOutcome,
) -> Result<Vec<ClosureCut>, RematError> {
    let (start, limit) = limit;
    let mut cuts = Vec::new();
    let Some((pb, v)) = build(g, budget, prefix, w, &[], &[]) else {
        return Ok(cuts);
    };
    let total = g.total_cost();
    let incumbent = opts
        .warm_start
        .as_ref()
        .filter(|w| w.r.len() == g.len())
        .and_then(|w| simulate(g, w).ok())
        .filter(|r| r.peak_mem <= budget)
        .map(|r| r.cost);
    let lp_opts = MilpOptions {
        cost_cutoff: None,
        warm_start: None,
        ..opts.clone()
    };
    let mut model = optimise(pb, &lp_opts, false);
    model.set_option("solve_relaxation", true);
    loop {
        let left = limit - start.elapsed().as_secs_f64();
        if left < 0.05 {
            break;
        }
        model.set_option("time_limit", left);
        let solved = solve(model, "cut LP: ")?;
        if solved.status() != HighsModelStatus::Optimal {
            break;
        }
        let lp = total + solved.objective_value();
        out.lp_bound = Some(out.lp_bound.map_or(lp, |b: f64| b.max(lp)));
        if within_gap(incumbent, lp, opts.mip_gap) || beside_within_gap(opts, lp) {
            break;
        }
        let fresh = separate_closure_cuts(g, w, &v, solved.get_solution().columns());
        if fresh.is_empty() {
            break;
        }
        model = solved.into();
        for c in &fresh {
            model.add_row(1.0.., c.row(&v));
        }
        cuts.extend(fresh);
    }
    out.cuts = cuts.len();
    Ok(cuts)
}

/// Whether a schedule of cost `cost` (cost units) is within the relative gap `gap` of the lower
/// bound `bound`: `cost - bound <= gap * cost`.
fn within_gap(cost: Option<f64>, bound: f64, gap: f64) -> bool {
    cost.is_some_and(|c| c - bound <= gap * c)
}

/// Whether the best schedule of the heuristic beside the solve ([`MilpOptions::beside`]) is
/// within `opts.mip_gap` of `bound`.
fn beside_within_gap(opts: &MilpOptions, bound: f64) -> bool {
    let cost = opts.beside.as_ref().and_then(|b| b.best_cost());
    within_gap(cost, bound, opts.mip_gap)
}

/// Result of [`window_bound`].
#[derive(Debug, Clone, PartialEq)]
pub struct WindowOutcome {
    /// Lower bound on Checkmate's optimal cost, cost units: `sum_i C_i` plus, per window, the
    /// larger of its cut LP's optimum and its integer round's dual bound (0 for a window not
    /// solved in its time share); `f64::INFINITY` when a node's working set exceeds the
    /// budget.
    pub bound: f64,
    /// The windows, in stage order, with the prices they were solved at (the exit of a window
    /// not solved, and the next window's entry, unpriced).
    pub windows: Vec<Window>,
    /// Each window's share of the bound (cost units: recomputations plus the priced storage of
    /// [`Window::keep_price`]; 0 when not solved).
    pub window_bounds: Vec<f64>,
    /// Windows whose cut LP was solved to optimality.
    pub solved: usize,
    /// Closure cuts added over all windows.
    pub cuts: usize,
    /// Whether the time limit ended the bound before every window's LP was solved.
    pub at_limit: bool,
    /// Wall time, seconds.
    pub solve_time_s: f64,
}

/// Share of a window's time in [`window_bound`] for its cutting-plane LP; an integer round gets
/// what is left. On the random layered n1000 graph at budget 0.8 the windows' LPs alone need
/// most of the time, and what a window leaves passes to the next.
pub const WINDOW_CUT_SHARE: f64 = 0.9;

/// Columns of one window's model in [`window_bound`] when `memwall plan` picks the size: on
/// the random layered graphs of 500 and 1,000 nodes, windows of about this size solve their cut
/// LP in 1–4 s on 2 threads (the whole relaxation of the 1,000-node graph at budget 0.8 has
/// 9.1 x 10^5 columns and its LP does not finish in 60 s). Windows of 60,000 columns bound the
/// w 0.31 graph higher (507,718 against 507,041) but leave windows of the wider w 0.43 graph
/// unsolved in 45 s.
pub const WINDOW_COLUMNS: usize = 40_000;

/// The stages `prefix..n` split into consecutive windows of about equal column counts, each at
/// most `max_columns` columns ([`Window::columns`]) unless a single stage has more.
pub fn windows(n: usize, prefix: usize, max_columns: usize) -> Vec<Window> {
    if prefix >= n {
        return Vec::new();
    }
    let total = Window::whole(n, prefix).columns(n);
    let count = total.div_ceil(max_columns.max(1)).max(1);
    let target = total.div_ceil(count);
    let mut out = Vec::with_capacity(count);
    let mut first = prefix;
    while first < n {
        let mut last = first;
        while last + 1 < n
            && (Window {
                last: last + 1,
                ..Window::whole(n, first)
            })
            .columns(n)
                <= target
        {
            last += 1;
        }
        out.push(Window {
            first,
            last,
            entry_priced: first > prefix,
            exit_priced: last + 1 < n,
        });
        first = last + 1;
    }
    out
}

/// A lower bound on Checkmate's optimal cost at `budget` bytes that scales to graphs whose
/// whole boundary relaxation ([`boundary_bound`]) HiGHS cannot solve in the time limit: the
/// stages after the checkpoint-all prefix are split into [`windows`] of at most `max_columns`
/// columns, and each window's relaxation ([`Window`]: the boundary relaxation's rows on its
/// stages, its entry storage free) is solved in turn, in a share of `opts.time_limit_s`
/// proportional to its columns: the cutting-plane LP with closure cuts
/// (those whose first reader is in the window; [`WINDOW_CUT_SHARE`] of its time), the rest for
/// an integer round with those cuts
/// (HiGHS' dual bound). Each window's optimum bounds the recomputation cost of its own stages
/// in every schedule (see [`Window`]), so `sum C` plus the windows' bounds is a lower bound on
/// Checkmate's optimum. A window left unsolved adds 0: the boundary after it is unpriced on
/// both sides (the next window is built with its entry storage free), so every cost of its
/// objective is nonnegative. The bound stays valid whatever the time.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub fn window_bound(
    g: &Graph,
    budget: u64,
    opts: &MilpOptions,
    max_columns: usize,
) -> Result<WindowOutcome, RematError> {
    let start = Instant::now();
    let n = g.len();
    let total = g.total_cost();
    let prefix = g.fitting_prefix(budget);
    let ws = windows(n, prefix, max_columns);
    let mut out = WindowOutcome {
        bound: total,
        window_bounds: vec![0.0; ws.len()],
        windows: ws,
        solved: 0,
        cuts: 0,
        at_limit: false,
        solve_time_s: 0.0,
    };
    if budget < g.working_set_bound() {
        out.bound = f64::INFINITY;
        return Ok(out);
    }
    let columns: Vec<usize> = out.windows.iter().map(|w| w.columns(n)).collect();
    // A window's LP bounds only its own stages: no schedule's cost compares with it.
    let opts = MilpOptions {
        warm_start: None,
        cost_cutoff: None,
        beside: None,
        ..opts.clone()
    };
    for k in 0..out.windows.len() {
        let left = opts.time_limit_s - start.elapsed().as_secs_f64();
        let share = left * columns[k] as f64 / columns[k..].iter().sum::<usize>() as f64;
        let (b, solved, cuts) = if share < 0.05 {
            (0.0, false, 0)
        } else {
            solve_window(g, budget, prefix, out.windows[k], &opts, share)?
        };
        out.solved += usize::from(solved);
        out.at_limit |= !solved;
        out.cuts += cuts;
        if solved {
            out.window_bounds[k] = b;
        } else if k + 1 < out.windows.len() {
            // Price 0 on both sides of this window's exit: its objective is then at least 0
            // (it adds 0), and the next window enters with its storage free of charge.
            out.windows[k].exit_priced = false;
            out.windows[k + 1].entry_priced = false;
        }
    }
    out.bound = total + out.window_bounds.iter().sum::<f64>();
    out.solve_time_s = start.elapsed().as_secs_f64();
    Ok(out)
}

/// One window of [`window_bound`] in `share` seconds: its bound on the window's objective
/// (recomputations of its stages and its priced storage, cost units; minus its exit rewards when
/// nothing was solved), whether its cut LP was solved to optimality, and the cuts it added.
fn solve_window(
    g: &Graph,
    budget: u64,
    prefix: usize,
    w: Window,
    opts: &MilpOptions,
    share: f64,
) -> Result<(f64, bool, usize), RematError> {
    let start = Instant::now();
    let total = g.total_cost();
    let mut part = BoundaryOutcome::empty(0.0, SolveStatus::NotSet);
    let cuts = separate(
        g,
        budget,
        prefix,
        w,
        opts,
        (start, share * WINDOW_CUT_SHARE),
        &mut part,
    )?;
    // An unsolved window adds 0 ([`window_bound`] unprices its exit).
    let mut bound = part.lp_bound.map_or(0.0, |lp| lp - total);
    let left = share - start.elapsed().as_secs_f64();
    if part.lp_bound.is_some() && left > 0.2 {
        if let Some((pb, _)) = build(g, budget, prefix, w, &[], &cuts) {
            let round_opts = MilpOptions {
                time_limit_s: (share - start.elapsed().as_secs_f64()).max(0.01),
                ..opts.clone()
            };
            let solved = solve(optimise(pb, &round_opts, false), "window MILP: ")?;
            let dual = dual_bound(&solved);
            if dual.is_finite() {
                bound = bound.max(dual);
            }
        }
    }
    Ok((bound, part.lp_bound.is_some(), cuts.len()))
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
                assert_eq!(relax.status, SolveStatus::Optimal, "seed {seed} f {f}");
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

    /// Randomized: the windowed bound (windows of every size, from one stage to the whole
    /// relaxation, with the priced linking storage of [`Window::keep_price`]) never exceeds
    /// Checkmate's exact optimum, on random layered graphs small enough for the exact MILP,
    /// at budgets from loose to tight; with several windows it still rises above `sum C`.
    #[test]
    fn window_bound_never_exceeds_the_exact_optimum() {
        let mut checked = 0;
        let mut split_strict = 0;
        for seed in 1..=10u64 {
            let g = graph(12 + (seed as usize % 5), seed * 7919);
            let n = g.len();
            let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
            for f in [0.9, 0.75, 0.6] {
                let budget = g.working_set_bound().max((peak as f64 * f) as u64);
                let opt = solve_milp(&g, budget, &exact()).unwrap();
                let Some((_, best)) = &opt.best else {
                    continue;
                };
                let prefix = g.fitting_prefix(budget);
                let whole = Window::whole(n, prefix).columns(n);
                for max_columns in [1, whole / 4, whole / 2, whole] {
                    let w = window_bound(&g, budget, &exact(), max_columns.max(1)).unwrap();
                    checked += 1;
                    assert!(
                        w.bound <= best.cost + 1e-6,
                        "seed {seed} f {f} windows {:?}: bound {} above the optimum {}",
                        w.windows,
                        w.bound,
                        best.cost
                    );
                    let covered: usize = w.windows.iter().map(|x| x.last + 1 - x.first).sum();
                    assert_eq!(covered, n - prefix.min(n), "windows partition the stages");
                    if w.windows.len() >= 2 && w.bound > g.total_cost() + 1e-6 {
                        split_strict += 1;
                    }
                }
            }
        }
        assert!(checked >= 60, "only {checked} cases");
        assert!(
            split_strict >= 5,
            "only {split_strict} split cases rise above sum C"
        );
    }

    /// A window bound whose windows get no time adds nothing to `sum C` and unprices every
    /// boundary after an unsolved window (the next window enters free of charge), so the bound
    /// is `sum C`, not below it.
    #[test]
    fn unsolved_windows_add_nothing() {
        // The first graph and budget whose stages after the prefix make three windows.
        let (g, budget, cols) = (1..40u64)
            .find_map(|seed| {
                let g = graph(16, seed);
                let n = g.len();
                let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
                let budget = g.working_set_bound().max((peak as f64 * 0.6) as u64);
                let prefix = g.fitting_prefix(budget);
                let cols = Window::whole(n, prefix).columns(n);
                (windows(n, prefix, cols / 3).len() >= 3).then_some((g, budget, cols))
            })
            .expect("a graph with three windows");
        let none = MilpOptions {
            time_limit_s: 0.0,
            ..exact()
        };
        let w = window_bound(&g, budget, &none, cols / 3).unwrap();
        assert!(w.windows.len() >= 2, "{w:?}");
        assert_eq!(w.solved, 0);
        assert!(w.at_limit);
        assert!((w.bound - g.total_cost()).abs() < 1e-9, "{w:?}");
        assert!(w.windows.iter().skip(1).all(|x| !x.entry_priced), "{w:?}");
        assert!(w.windows.iter().all(|x| !x.exit_priced), "{w:?}");
        // With time, the same windows are priced and solved.
        let all = window_bound(&g, budget, &exact(), cols / 3).unwrap();
        assert_eq!(all.solved, all.windows.len());
        assert!(all.windows[1].entry_priced && all.windows[0].exit_priced);
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
        let (_, v) = build(&g, budget, prefix, Window::whole(n, prefix), &[], &[])
            .expect("fitting working sets");
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
        assert_eq!(opt.status, SolveStatus::Infeasible);
        let staged =
            crate::staged::solve_staged(&g, budget, &crate::staged::StagedOptions::default())
                .unwrap();
        assert!(staged.best.is_none(), "{}", staged.status);
        assert!(
            staged.status.is_infeasible() || staged.status == SolveStatus::UnboundedOrInfeasible,
            "{}",
            staged.status
        );
    }

    /// Every closure cut holds for every schedule of Checkmate's model: no cut is violated by
    /// the column values of the exact MILP's optimal schedules (which recompute), of greedy
    /// eviction's schedules or of checkpoint-all, on random graphs and budgets from loose to
    /// tight. Separation on an integer schedule examines every boundary, value and input chain
    /// (a chain is cut short only when a value on it is kept, where every longer cut holds), so
    /// an empty result checks every cut up to [`CLOSURE_DEPTH`].
    #[test]
    fn closure_cuts_hold_for_every_schedule() {
        let mut recomputing = 0;
        for seed in [1, 2, 3, 5] {
            let g = graph(16, seed);
            let n = g.len();
            let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
            for f in [1.0, 0.9, 0.75, 0.6, 0.5] {
                let budget = g.working_set_bound().max((peak as f64 * f) as u64);
                let prefix = g.fitting_prefix(budget);
                let whole = Window::whole(n, prefix);
                let Some((pb, v)) = build(&g, budget, prefix, whole, &[], &[]) else {
                    continue;
                };
                let stages = crate::staged::uniform_stages(n, 1);
                let mut schedules = vec![checkpoint_all(&g)];
                schedules.extend(
                    crate::staged::greedy_best(&g, budget, &stages).map(|(s, _)| s.expand(&g)),
                );
                schedules.extend(solve_milp(&g, budget, &exact()).unwrap().best.map(|b| b.0));
                for sch in &schedules {
                    let sim = simulate(&g, sch).expect("valid schedule");
                    recomputing += usize::from(sim.recomputations > 0);
                    let x = warm_vector(n, &v, sch, pb.num_cols());
                    let violated = separate_closure_cuts(&g, whole, &v, &x);
                    assert!(
                        violated.is_empty(),
                        "seed {seed} f {f}: a valid schedule violates {:?}",
                        violated[0]
                    );
                }
            }
        }
        assert!(recomputing >= 10, "only {recomputing} schedules recompute");
    }

    /// The cuts tighten the LP: on a random layered graph whose LP relaxation spreads
    /// recomputations over stages, separation finds violated cuts and closes at least 10% of
    /// the gap between the plain LP bound and the best heuristic schedule (16% here: 30,384 to
    /// 31,199 against 35,483; the integer rounds then prove 31,278), staying below that cost.
    #[test]
    fn closure_cuts_raise_the_lp_bound() {
        let g = crate::layered::random_layered(&crate::layered::LayeredParams::shared(60, 0.43, 1))
            .unwrap();
        let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
        let budget = (peak as f64 * 0.8) as u64;
        let prefix = g.fitting_prefix(budget);
        let (pb, _) = build(&g, budget, prefix, Window::whole(g.len(), prefix), &[], &[]).unwrap();
        // HiGHS' thread pool is global: every model of the process uses the same threads.
        let mut model = optimise(pb, &exact(), false);
        model.set_option("solve_relaxation", true);
        let solved = model.solve();
        assert_eq!(solved.status(), HighsModelStatus::Optimal);
        let plain = g.total_cost() + solved.objective_value();
        let stages = crate::staged::uniform_stages(g.len(), 1);
        let best = crate::staged::greedy_best(&g, budget, &stages)
            .expect("a heuristic schedule fits")
            .1
            .cost;
        let relax = boundary_bound(&g, budget, &exact()).unwrap();
        let with_cuts = relax.lp_bound.expect("cut LP solved");
        assert!(relax.cuts > 0, "{relax:?}");
        assert!(
            with_cuts >= plain + 0.1 * (best - plain),
            "cut LP {with_cuts} vs plain LP {plain}, best schedule {best}"
        );
        assert!(
            with_cuts <= best + 1e-6,
            "cut LP {with_cuts} above a schedule's cost {best}"
        );
        assert!(
            relax.bound <= best + 1e-6,
            "bound {} above {best}",
            relax.bound
        );
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
