//! The staged MILP as a HiGHS model: its columns, rows, bounds and warm start.

use super::*;

/// Size of a MILP model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelSize {
    /// Columns (variables).
    pub columns: usize,
    /// Integer (binary) columns.
    pub integer_columns: usize,
    /// Rows (constraints).
    pub rows: usize,
}

/// The staged model's columns: [`Columns`] with `r[s]` = `R[s][0..b]` (the stage's own nodes
/// `b..=e` are fixed to 1), `s[s]` = `S[s][0..b]`, `u[s]` = `U[s][0..=e]` (empty for the
/// checkpoint-all prefix stage) and the tight `FREE` columns.
pub(crate) struct Vars {
    pub(crate) stages: Vec<RangeInclusive<usize>>,
    pub(crate) cols: Columns,
    /// The column fixed to 1 that carries the cost of the fixed computations.
    pub(crate) one: Col,
}

/// The staged model over `stages`; with `prefix > 0`, `stages[0]` is the checkpoint-all prefix
/// `0..=prefix - 1` and has no memory columns or rows (see [`model_stages`]). Columns: per
/// stage `R`, `S`, `U`, then the constant, then `FREE`; rows 1b, 1c, 2, 3 (tight), then the
/// computation bound.
pub(crate) fn build(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    prefix: usize,
    cmax: Option<u32>,
    integer: bool,
) -> (RowProblem, Vars) {
    let mut mb = FormulationBuilder::new(g, integer);
    add_stage_columns(&mut mb, g, budget, stages, prefix);
    // Every node is computed once in its own stage: that cost is a constant, carried by one
    // column fixed to 1 (the crate does not expose HiGHS' objective offset).
    let one = mb.add_constant(g.total_cost());
    add_free_columns(&mut mb, g, stages);
    add_dependency_rows(&mut mb, g, stages);
    add_memory_rows(&mut mb, g, stages);
    add_free_rows(&mut mb, g, stages);
    if let Some(cm) = cmax {
        add_computation_bounds(&mut mb, g, cm);
    }
    let (pb, cols) = mb.finish();
    let v = Vars {
        stages: stages.to_vec(),
        cols,
        one,
    };
    (pb, v)
}

/// Per stage `b..=e`: `R[s][0..b]` (cost `C_i`; the stage's own nodes are fixed to 1),
/// `S[s][0..b]`, and `U[s][0..=e]` in `[0, budget]` (none for the prefix stage).
pub(crate) fn add_stage_columns(
    mb: &mut FormulationBuilder,
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    prefix: usize,
) {
    for st in stages {
        let (b, e) = (*st.start(), *st.end());
        mb.add_r_stage(g, b, false);
        mb.add_s_stage(b, |_| 0.0);
        let steps = if prefix > 0 && b == 0 { 0 } else { e + 1 };
        mb.add_u_stage(steps, budget);
    }
}

/// Later users `j` of node `i` in a stage ending at `e` after step `k` (`k < j <= e`).
pub(crate) fn users_in(g: &Graph, i: usize, k: usize, e: usize) -> Vec<usize> {
    g.users[i]
        .iter()
        .copied()
        .filter(|&j| j > k && j <= e)
        .collect()
}

/// Continuous `FREE[s][i][k]` for `i in DEPS[k] ∪ {k}`, `k < e`, in stages with memory rows;
/// none (fixed to 0) when a later user of `i` in the stage is one of the stage's own nodes.
pub(crate) fn add_free_columns(
    mb: &mut FormulationBuilder,
    g: &Graph,
    stages: &[RangeInclusive<usize>],
) {
    for (si, st) in stages.iter().enumerate() {
        let (b, e) = (*st.start(), *st.end());
        if mb.cols().u[si].is_empty() {
            continue;
        }
        for k in 0..e {
            for &i in g.deps[k].iter().chain(std::iter::once(&k)) {
                if users_in(g, i, k, e).iter().any(|&j| j >= b) {
                    continue;
                }
                mb.add_free(si, i, k, false);
            }
        }
    }
}

/// (1b) `R[s][k] <= R[s][i] + S[s][i]` for `i in DEPS[k]`, `i < b`; (1c) `S[s+1][i] <=
/// S[s][i] + R[s][i]` for `i < b` (later nodes are computed in stage `s`).
pub(crate) fn add_dependency_rows(
    mb: &mut FormulationBuilder,
    g: &Graph,
    stages: &[RangeInclusive<usize>],
) {
    for (si, st) in stages.iter().enumerate() {
        let (b, e) = (*st.start(), *st.end());
        for k in 0..=e {
            for &i in g.deps[k].iter().filter(|&&i| i < b) {
                let v = mb.cols();
                let (rk, ri, s) = (v.r_term(si, k), v.r[si][i], v.s[si][i]);
                mb.dependency(rk, ri, s, Form::AtMost);
            }
        }
    }
    for si in 0..stages.len().saturating_sub(1) {
        for i in 0..*stages[si].start() {
            let v = mb.cols();
            let (next, cur, r) = (v.s[si + 1][i], v.s[si][i], v.r[si][i]);
            mb.storage(next, Some(cur), r);
        }
    }
}

/// (2) Memory of every stage with `U` columns, with `FREE` of step `k - 1` subtracted at step
/// `k`. Values freed for sure (fixed `R`, nothing else can keep them) are `FREE` columns too:
/// no freed value is a constant.
pub(crate) fn add_memory_rows(
    mb: &mut FormulationBuilder,
    g: &Graph,
    stages: &[RangeInclusive<usize>],
) {
    let free_at = mb.free_by_step(|si| *stages[si].end() + 1);
    for (si, st) in stages.iter().enumerate() {
        if mb.cols().u[si].is_empty() {
            continue;
        }
        mb.memory_start(g, si, g.fixed_mem);
        for k in 1..=*st.end() {
            mb.memory_step(g, si, k, &free_at[si][k - 1]);
        }
    }
}

/// (3, tight) `FREE <= R[s][k]`, `FREE <= 1 - S[s+1][i]`, `FREE <= 1 - R[s][j]`.
pub(crate) fn add_free_rows(
    mb: &mut FormulationBuilder,
    g: &Graph,
    stages: &[RangeInclusive<usize>],
) {
    let free = mb.cols().free.clone();
    for (si, i, k, c) in free {
        let v = mb.cols();
        let rk = v.r[si].get(k).copied();
        let s_next = v.s.get(si + 1).map(|sn| sn[i]);
        let later: Vec<Col> = users_in(g, i, k, *stages[si].end())
            .into_iter()
            .map(|j| v.r[si][j])
            .collect();
        mb.free_tight(c, rk, s_next, &later);
    }
}

/// Bounded recomputation: `sum_s R[s][i] <= C` (the fixed computation counts as one) for
/// every node with a recomputation column.
pub(crate) fn add_computation_bounds(mb: &mut FormulationBuilder, g: &Graph, cmax: u32) {
    for i in 0..g.len() {
        let r: Vec<Col> = mb
            .cols()
            .r
            .iter()
            .filter_map(|x| x.get(i).copied())
            .collect();
        if !r.is_empty() {
            mb.computation_bound(&r, cmax);
        }
    }
}

pub(crate) fn warm_vector(g: &Graph, v: &Vars, sch: &StagedSchedule) -> Vec<f64> {
    let mut x = vec![0.0; v.cols.count];
    let b01 = |f: bool| if f { 1.0 } else { 0.0 };
    let n = g.len();
    let none = vec![false; n];
    for (si, st) in v.stages.iter().enumerate() {
        let (b, e) = (*st.start(), *st.end());
        for i in 0..b {
            x[v.cols.r[si][i].index()] = b01(sch.r[si][i]);
            x[v.cols.s[si][i].index()] = b01(sch.s[si][i]);
        }
        let next = sch.s.get(si + 1).unwrap_or(&none);
        let mut cur = g.fixed_mem as f64
            + (0..b)
                .filter(|&i| sch.s[si][i])
                .map(|i| g.nodes[i].mem as f64)
                .sum::<f64>();
        for k in 0..=e {
            if k > 0 && sch.r[si][k - 1] {
                let p = k - 1;
                for &i in g.deps[p].iter().chain(std::iter::once(&p)) {
                    let later = g.users[i].iter().any(|&j| j > p && j <= e && sch.r[si][j]);
                    if !next[i] && !later {
                        cur -= g.nodes[i].mem as f64;
                    }
                }
            }
            if sch.r[si][k] {
                cur += g.nodes[k].mem as f64;
            }
            if let Some(c) = v.cols.u[si].get(k) {
                x[c.index()] = cur / v.cols.scale;
            }
        }
    }
    for &(si, i, k, c) in &v.cols.free {
        let e = *v.stages[si].end();
        let next = sch.s.get(si + 1).unwrap_or(&none);
        let later = g.users[i].iter().any(|&j| j > k && j <= e && sch.r[si][j]);
        x[c.index()] = b01(sch.r[si][k] && !next[i] && !later);
    }
    x[v.one.index()] = 1.0;
    x
}

/// A Checkmate schedule as a staged schedule over `stages`, one node per stage after an
/// optional prefix stage `0..=prefix - 1` (which computes its nodes once: the schedule's
/// recomputations there, if any, are dropped and its storage into stage `prefix` is kept).
pub(crate) fn from_checkmate(sch: &Schedule, stages: &[RangeInclusive<usize>]) -> StagedSchedule {
    let n = sch.r.len();
    let row = |t: usize| (sch.r[t].clone(), sch.s[t].clone());
    let (r, s) = stages
        .iter()
        .map(|st| {
            if st.start() == st.end() {
                row(*st.start())
            } else {
                ((0..n).map(|i| i <= *st.end()).collect(), vec![false; n])
            }
        })
        .unzip();
    StagedSchedule {
        stages: stages.to_vec(),
        r,
        s,
    }
}

/// Minimal recomputation for the storage decisions of `sch`: each stage computes its nodes,
/// the values first kept into the next stage, and their missing inputs
/// ([`Graph::compute_closure`]; [`stage_r`] finds the same set depth-first).
pub(crate) fn minimal_r(g: &Graph, sch: &StagedSchedule) -> StagedSchedule {
    let mut out = sch.clone();
    for (si, st) in sch.stages.iter().enumerate() {
        let s_in = &sch.s[si];
        let first_kept = sch
            .s
            .get(si + 1)
            .into_iter()
            .flat_map(|next| (0..*st.start()).filter(move |&i| next[i] && !s_in[i]));
        out.r[si] = g.compute_closure(*st.end(), s_in, st.clone().chain(first_kept));
    }
    out
}

/// Size of the staged model for `g` without building HiGHS' copy of it.
pub fn model_size(g: &Graph, stage_size: usize, max_computations: Option<u32>) -> ModelSize {
    let stages = uniform_stages(g.len(), stage_size);
    let (pb, v) = build(g, u64::MAX / 2, &stages, 0, max_computations, true);
    ModelSize {
        columns: pb.num_cols(),
        integer_columns: v.cols.integer,
        rows: pb.num_rows(),
    }
}

/// LP relaxation of the unrestricted tight model (one node per stage, no computation bound) at
/// `budget` bytes: a lower bound on Checkmate's optimal cost (cost units). `None` when the LP
/// is infeasible or not solved to optimality within `opts.time_limit_s`.
///
/// # Errors
/// [`RematError::Solver`] when HiGHS fails.
pub fn lp_bound(g: &Graph, budget: u64, opts: &MilpOptions) -> Result<Option<f64>, RematError> {
    if budget < g.working_set_bound() {
        return Ok(None);
    }
    let (stages, prefix) = model_stages(g, budget, 1);
    let (pb, _) = build(g, budget, &stages, prefix, None, false);
    let solved = solve(optimise(pb, opts, false), "")?;
    Ok((solved.status() == HighsModelStatus::Optimal).then(|| solved.objective_value()))
}
