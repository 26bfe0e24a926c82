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
//! builder (`crate::model`), [`crate::SolveStatus`], HiGHS.

use super::anneal::{anneal, anneal_until, AnnealOptions, AnnealOutcome, Beside};
use super::boundary::{boundary_bound, window_bound, Window, WINDOW_COLUMNS};
use super::deadline::{Deadline, PlanStage, StageTime};
use super::graph::Graph;
use super::milp::MilpOptions;
use super::model::{
    dual_bound, highs_status, incumbent_objective, optimise, solve, threshold, warm_start, Columns,
    Form, ModelBuilder,
};
use super::sim::{simulate, Schedule, SimResult};
use super::{RematError, SolveStatus};
use highs::{Col, HighsModelStatus, RowProblem};
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

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

/// A schedule over grouped stages: `r[s][i]` (node `i` computed in stage `s`; true for every
/// node of the stage) and `s[s][i]` (node `i`'s output resident at the start of stage `s`,
/// only for `i` before the stage's first node). Vectors have length `n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedSchedule {
    /// The stages, consecutive node ranges covering `0..n`.
    pub stages: Vec<RangeInclusive<usize>>,
    /// Compute matrix, stage x node.
    pub r: Vec<Vec<bool>>,
    /// Storage matrix, stage x node.
    pub s: Vec<Vec<bool>>,
}

impl StagedSchedule {
    /// Checkmate's `n x n` schedule of the same execution: Checkmate stage `b` (a stage's first
    /// node) computes the stage's recomputations and node `b`; stage `t` in `b+1..=e` computes
    /// `t`; a value is resident at the start of Checkmate stage `t` when it is present in the
    /// grouped stage and read by a node in `t..=e` or kept into the next grouped stage. The
    /// expanded schedule's peak is at most the grouped stage's memory (equal except for values
    /// held through a stage unread, which the grouped accounting keeps to the stage's end).
    pub fn expand(&self, g: &Graph) -> Schedule {
        let n = g.len();
        let mut out = Schedule::empty(n);
        for (si, st) in self.stages.iter().enumerate() {
            let (b, e) = (*st.start(), *st.end());
            let none = vec![false; n];
            let next = self.s.get(si + 1).unwrap_or(&none);
            for i in 0..=b {
                out.r[b][i] = self.r[si][i];
            }
            out.s[b][..b].copy_from_slice(&self.s[si][..b]);
            for t in b + 1..=e {
                out.r[t][t] = true;
                for i in 0..t {
                    let present = self.s[si][i] || self.r[si][i];
                    let read_later = g.users[i].iter().any(|&j| j >= t && j <= e);
                    out.s[t][i] = present && (read_later || next[i]);
                }
            }
        }
        out
    }
}

/// Minimal compute set of a stage: its nodes and, in reverse topological order, every
/// dependency of a computed node that is not resident (`s_in`): [`Graph::compute_closure`].
fn closure(g: &Graph, st: &RangeInclusive<usize>, s_in: &[bool]) -> Vec<bool> {
    g.compute_closure(*st.end(), s_in, st.clone())
}

/// Peak memory (bytes, fixed memory included) of one grouped stage ending at node `e`, by the
/// accounting of eq. 2–4 with `t` replaced by the stage's last node: start with `fixed + sum
/// M_i s_in[i]`, add `M_k` when `k` is computed, and after computing `k` free each `i in
/// DEPS[k] ∪ {k}` that is not kept (`s_out[i]`) and has no later user computed in the stage.
pub fn stage_peak(g: &Graph, e: usize, s_in: &[bool], r: &[bool], s_out: &[bool]) -> i128 {
    let computed: Vec<usize> = (0..=e).filter(|&k| r[k]).collect();
    stage_peak_of(g, e, s_in, &computed, s_out)
}

/// [`stage_peak`] given the stage's computed nodes in increasing order (`computed`, the `k`
/// with `r[k]`, all at most `e`): between two computations memory only falls, so only the
/// steps that compute can set the peak, and the cost is linear in the computations, not in `e`.
fn stage_peak_of(g: &Graph, e: usize, s_in: &[bool], computed: &[usize], s_out: &[bool]) -> i128 {
    let mem = |i: usize| g.nodes[i].mem as i128;
    // Only the resident values' sizes are read (a node's record is large; most are not resident).
    let resident: i128 = s_in
        .iter()
        .enumerate()
        .filter(|x| *x.1)
        .map(|(i, _)| mem(i))
        .sum();
    // last_read[i]: the last computed node of the stage that reads `i` (0: none).
    let mut last_read = vec![0usize; e + 1];
    for &k in computed {
        for &d in &g.deps[k] {
            last_read[d] = k;
        }
    }
    let mut cur = g.fixed_mem as i128 + resident;
    let mut peak = cur;
    for (x, &k) in computed.iter().enumerate() {
        if x > 0 {
            let p = computed[x - 1];
            for &i in g.deps[p].iter().chain(std::iter::once(&p)) {
                if !s_out[i] && last_read[i] <= p {
                    cur -= mem(i);
                }
            }
        }
        cur += mem(k);
        peak = peak.max(cur);
    }
    peak
}

/// Weights of the eviction score `recompute_cost^alpha / (M_i * distance^beta)` of
/// [`greedy_evict`]: the lowest score is evicted first (after DTR's heuristic, Kirisame et al.,
/// ICLR 2021, Section 3: cost over memory times staleness; here the distance is to the next
/// stage that reads the value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvictWeights {
    /// Exponent of the recomputation cost (own cost plus non-resident inputs' costs).
    pub alpha: f64,
    /// Exponent of the distance, in nodes, to the value's next reader.
    pub beta: f64,
}

/// The weight pairs [`greedy_best`] tries.
pub const EVICT_WEIGHTS: [EvictWeights; 6] = [
    EvictWeights {
        alpha: 1.0,
        beta: 1.0,
    },
    EvictWeights {
        alpha: 1.0,
        beta: 0.0,
    },
    EvictWeights {
        alpha: 1.0,
        beta: 2.0,
    },
    EvictWeights {
        alpha: 0.5,
        beta: 1.0,
    },
    EvictWeights {
        alpha: 2.0,
        beta: 1.0,
    },
    EvictWeights {
        alpha: 0.0,
        beta: 1.0,
    },
];

/// Greedy eviction over `stages` at `budget` bytes. Stage by stage: compute the stage's nodes
/// and their missing inputs (minimal recomputation); keep every present value that a later node
/// reads; then, while this stage or the next one (computed minimally from the kept set) would
/// exceed the budget, evict kept values by increasing score (values the next stage does not
/// read first). Returns `None` when evicting everything does not fit.
pub fn greedy_evict(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    w: EvictWeights,
) -> Option<StagedSchedule> {
    let n = g.len();
    let ev = Evictor {
        g,
        budget: budget as i128,
        last: g.last_users(),
        w,
    };
    let mut out = StagedSchedule {
        stages: stages.to_vec(),
        r: Vec::with_capacity(stages.len()),
        s: Vec::with_capacity(stages.len()),
    };
    let mut s_in = vec![false; n];
    for (si, st) in stages.iter().enumerate() {
        let r = closure(g, st, &s_in);
        let Some(nst) = stages.get(si + 1) else {
            if stage_peak(g, *st.end(), &s_in, &r, &vec![false; n]) > ev.budget {
                return None;
            }
            out.r.push(r);
            out.s.push(s_in);
            break;
        };
        let next = ev.keep_into_next(st, nst, &s_in, &r)?;
        out.r.push(r);
        out.s.push(s_in);
        s_in = next;
    }
    Some(out)
}

/// The fixed inputs of [`greedy_evict`]: the graph, the budget (bytes), each node's last user
/// ([`Graph::last_users`]) and the score's weights.
struct Evictor<'a> {
    g: &'a Graph,
    budget: i128,
    last: Vec<usize>,
    w: EvictWeights,
}

impl Evictor<'_> {
    /// The values kept from stage `st` (resident at its start: `s_in`; computed: `r`) into the
    /// next stage `nst`: every present value that a later node reads, less evictions in
    /// [`Evictor::eviction_order`] until both stages fit (the next one computed minimally
    /// from the kept set and keeping every value read after it). `None` when evicting
    /// everything does not fit.
    fn keep_into_next(
        &self,
        st: &RangeInclusive<usize>,
        nst: &RangeInclusive<usize>,
        s_in: &[bool],
        r: &[bool],
    ) -> Option<Vec<bool>> {
        let (g, n, last) = (self.g, self.g.len(), &self.last);
        let (e, e2) = (*st.end(), *nst.end());
        let mut next: Vec<bool> = (0..n)
            .map(|i| i <= e && (s_in[i] || r[i]) && last[i] > e)
            .collect();
        loop {
            let r2 = closure(g, nst, &next);
            let next2: Vec<bool> = (0..n)
                .map(|i| i <= e2 && (next[i] || r2[i]) && last[i] > e2)
                .collect();
            let over = (stage_peak(g, e, s_in, r, &next) - self.budget)
                .max(stage_peak(g, e2, &next, &r2, &next2) - self.budget);
            if over <= 0 {
                return Some(next);
            }
            let order = self.eviction_order(e, &next, &r2, e2);
            if order.is_empty() {
                return None;
            }
            let mut freed: i128 = 0;
            for i in order {
                next[i] = false;
                freed += g.nodes[i].mem as i128;
                if freed >= over {
                    break;
                }
            }
        }
    }

    /// The values kept past a stage ending at node `e` (`next`) in eviction order: first those
    /// the next stage (ending at `e2`, computing `r2`) does not read, then by increasing score
    /// `recompute_cost^alpha / (M_i * distance^beta)` ([`EvictWeights`]; recomputation cost:
    /// own cost plus the inputs not kept; distance: nodes from `e` to the next reader).
    fn eviction_order(&self, e: usize, next: &[bool], r2: &[bool], e2: usize) -> Vec<usize> {
        let (g, w) = (self.g, self.w);
        // Values read in the next stage (by a node it computes) are evicted last.
        let mut read2 = vec![false; g.len()];
        for k in 0..=e2 {
            if r2[k] {
                for &d in &g.deps[k] {
                    read2[d] = true;
                }
            }
        }
        let mut cand: Vec<(bool, f64, usize)> = (0..g.len())
            .filter(|&i| next[i])
            .map(|i| {
                let rc = g.nodes[i].cost
                    + g.deps[i]
                        .iter()
                        .filter(|&&d| !next[d])
                        .map(|&d| g.nodes[d].cost)
                        .sum::<f64>();
                let first = g.users[i]
                    .iter()
                    .copied()
                    .find(|&j| j > e)
                    .unwrap_or(self.last[i]);
                let dist = (first - e) as f64;
                let score = (rc.max(1e-9)).powf(w.alpha)
                    / ((g.nodes[i].mem.max(1) as f64) * dist.powf(w.beta));
                (read2[i], score, i)
            })
            .collect();
        cand.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        cand.into_iter().map(|(_, _, i)| i).collect()
    }
}

/// The cheapest of [`greedy_evict`] over [`EVICT_WEIGHTS`] whose expanded schedule the
/// simulator accepts within `budget` bytes, with its simulation.
pub fn greedy_best(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
) -> Option<(StagedSchedule, SimResult)> {
    EVICT_WEIGHTS
        .iter()
        .filter_map(|&w| greedy_evict(g, budget, stages, w))
        .chain(repair(g, budget, stages, &keep_all(g, stages)))
        .filter_map(|s| {
            let sim = simulate(g, &s.expand(g)).ok()?;
            (sim.peak_mem <= budget).then_some((s, sim))
        })
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
}

/// Compute set of one stage for the storage decisions `s_in` (resident at its start) and
/// `s_next` (kept into the next stage): its nodes, the values first kept into the next stage,
/// and every non-resident input of a computed node, with the computed nodes in increasing
/// order. The set is [`Graph::compute_closure`]'s for those seeds, found depth-first from them
/// so that the cost grows with the computations rather than with the stage's last node (the
/// repair's and annealing's inner loop).
fn stage_r(
    g: &Graph,
    st: &RangeInclusive<usize>,
    s_in: &[bool],
    s_next: Option<&[bool]>,
) -> (Vec<bool>, Vec<usize>) {
    let mut r = vec![false; g.len()];
    let mut stack: Vec<usize> = st.clone().collect();
    if let Some(next) = s_next {
        stack.extend((0..*st.start()).filter(|&i| next[i] && !s_in[i]));
    }
    for &k in &stack {
        r[k] = true;
    }
    let mut computed = stack.clone();
    // Depth-first over the inputs that are not resident: each is computed once.
    while let Some(k) = stack.pop() {
        for &d in &g.deps[k] {
            if !s_in[d] && !r[d] {
                r[d] = true;
                computed.push(d);
                stack.push(d);
            }
        }
    }
    computed.sort_unstable();
    (r, computed)
}

/// A drop applied by [`RepairState::drop_step`]: (cost change in cost units, node, first and
/// last stage of the run, whether the stage after the run recomputes the value).
pub(crate) type DroppedRun = (f64, usize, usize, usize, bool);

/// A candidate of [`RepairState::drop_step`]: node `i`'s run of stages `lo..=hi` that hold it
/// without reading it; `tail`: the stage after the run holds it too.
#[derive(Debug, Clone, Copy)]
struct RunDrop {
    i: usize,
    lo: usize,
    hi: usize,
    tail: bool,
}

/// What a drop does, measured by [`RepairState::trial`].
struct Trial {
    /// Change of the total cost, cost units.
    cost_change: f64,
    /// No stage rose above both the budget and its own peak before the move.
    no_new_violation: bool,
    /// The peak of the stage that was the worst before the move, bytes.
    worst_peak: i128,
    /// The highest peak after the move, bytes.
    new_max: i128,
    /// Whether keeping the inputs set any storage cell.
    kept_any: bool,
}

/// Working state of [`repair`] and [`crate::anneal`]: storage decisions, minimal compute sets,
/// per-stage peaks (bytes) and costs.
pub(crate) struct RepairState<'a> {
    pub(crate) g: &'a Graph,
    pub(crate) stages: &'a [RangeInclusive<usize>],
    pub(crate) s: Vec<Vec<bool>>,
    pub(crate) r: Vec<Vec<bool>>,
    pub(crate) peak: Vec<i128>,
    pub(crate) cost: Vec<f64>,
}

impl<'a> RepairState<'a> {
    /// The state of storage decisions `s0` (stage x node; entries at or after a stage's first
    /// node are ignored) with minimal recomputation.
    pub(crate) fn new(
        g: &'a Graph,
        stages: &'a [RangeInclusive<usize>],
        s0: &[Vec<bool>],
    ) -> RepairState<'a> {
        let m = stages.len();
        let mut st = RepairState {
            g,
            stages,
            s: (0..m)
                .map(|si| {
                    let b = *stages[si].start();
                    (0..g.len()).map(|i| i < b && s0[si][i]).collect()
                })
                .collect(),
            r: vec![Vec::new(); m],
            peak: vec![0; m],
            cost: vec![0.0; m],
        };
        for si in 0..m {
            st.refresh(si);
        }
        st
    }

    /// The state as a staged schedule.
    pub(crate) fn schedule(&self) -> StagedSchedule {
        StagedSchedule {
            stages: self.stages.to_vec(),
            r: self.r.clone(),
            s: self.s.clone(),
        }
    }

    fn refresh(&mut self, si: usize) {
        let (g, st) = (self.g, &self.stages[si]);
        let next = self.s.get(si + 1).map(|v| v.as_slice());
        let (r, computed) = stage_r(g, st, &self.s[si], next);
        let none;
        let s_out = match next {
            Some(x) => x,
            None => {
                none = vec![false; g.len()];
                &none
            }
        };
        self.peak[si] = stage_peak_of(g, *st.end(), &self.s[si], &computed, s_out);
        self.cost[si] = computed.iter().map(|&i| g.nodes[i].cost).sum();
        self.r[si] = r;
    }

    /// Whether stage `si` reads node `i`'s output (an input of a node it computes).
    pub(crate) fn reads(&self, si: usize, i: usize) -> bool {
        self.g.users[i]
            .iter()
            .any(|&j| j <= *self.stages[si].end() && self.r[si][j])
    }

    /// The maximal run of stages around `si` that hold `i` without reading it.
    pub(crate) fn run(&self, si: usize, i: usize) -> (usize, usize) {
        let (mut lo, mut hi) = (si, si);
        while lo > 0 && self.s[lo - 1][i] && !self.reads(lo - 1, i) {
            lo -= 1;
        }
        while hi + 1 < self.stages.len() && self.s[hi + 1][i] && !self.reads(hi + 1, i) {
            hi += 1;
        }
        (lo, hi)
    }

    /// Sets `s[lo..=hi][i] = v` for a run of stages that do not read `i`, and `s[hi+1][i] = v`
    /// when `tail` (the next stage reads `i`, and recomputes it when it is not resident);
    /// refreshes the stages it affects (inside the run the compute sets stay and the whole
    /// memory profile moves by `M_i`; the stages before and after are recomputed). Returns the
    /// cost change.
    pub(crate) fn set_run(&mut self, i: usize, lo: usize, hi: usize, tail: bool, v: bool) -> f64 {
        let m = self.stages.len();
        let edges = [lo.checked_sub(1), (hi + 1 < m).then_some(hi + 1)];
        let before: f64 = edges.iter().flatten().map(|&x| self.cost[x]).sum();
        let mem = self.g.nodes[i].mem as i128;
        for x in lo..=hi {
            if self.s[x][i] != v {
                self.s[x][i] = v;
                self.peak[x] += if v { mem } else { -mem };
            }
        }
        if tail && hi + 1 < m {
            self.s[hi + 1][i] = v;
        }
        for &x in edges.iter().flatten() {
            self.refresh(x);
        }
        edges.iter().flatten().map(|&x| self.cost[x]).sum::<f64>() - before
    }

    /// Keeps the inputs of `i` that stage `reader` lacks resident from the last stage that
    /// holds or computes each of them up to `reader`, so that `reader` recomputes `i` from them
    /// instead of recomputing them in turn (the cheap-ancestor move: a small input held a little
    /// longer instead of a recomputation chain back to the source). Refreshes the stages it
    /// changes and returns the `(stage, node)` cells it set; [`RepairState::unset_cells`]
    /// undoes it.
    pub(crate) fn keep_inputs(&mut self, i: usize, reader: usize) -> Vec<(usize, usize)> {
        let g = self.g;
        let mut cells = Vec::new();
        for &d in &g.deps[i] {
            if self.s[reader][d] {
                continue;
            }
            let Some(a) = (0..reader).rev().find(|&x| self.s[x][d] || self.r[x][d]) else {
                continue;
            };
            for x in a + 1..=reader {
                if !self.s[x][d] && d < *self.stages[x].start() {
                    self.s[x][d] = true;
                    cells.push((x, d));
                }
            }
        }
        self.refresh_around(&cells);
        cells
    }

    /// Sets `s[si][i] = v` and refreshes stage `si` and the stage before it.
    pub(crate) fn set_cell(&mut self, si: usize, i: usize, v: bool) {
        self.s[si][i] = v;
        self.refresh_around(&[(si, i)]);
    }

    /// Clears cells set by [`RepairState::keep_inputs`] and refreshes their stages.
    pub(crate) fn unset_cells(&mut self, cells: &[(usize, usize)]) {
        for &(x, d) in cells {
            self.s[x][d] = false;
        }
        self.refresh_around(cells);
    }

    /// Refreshes every stage whose storage changed and the stage before it (whose compute set
    /// and frees depend on what the next stage keeps).
    fn refresh_around(&mut self, cells: &[(usize, usize)]) {
        let mut xs: Vec<usize> = cells
            .iter()
            .flat_map(|&(x, _)| [x.saturating_sub(1), x])
            .collect();
        xs.sort_unstable();
        xs.dedup();
        for x in xs {
            self.refresh(x);
        }
    }

    /// One step of [`repair`]: at the stage with the highest peak, when it exceeds `budget`
    /// bytes, drops the held-but-unread value (for its whole unread run, optionally keeping its
    /// inputs) chosen among the `exact` best candidates by estimated cost per byte. Returns
    /// `Some(None)` when every stage fits, `Some(Some(drop))` with the drop applied
    /// `(cost change, node, run start, run end, tail)`, `None` when no drop lowers the peak.
    pub(crate) fn drop_step(
        &mut self,
        budget: i128,
        exact: usize,
        tabu: &[usize],
    ) -> Option<Option<DroppedRun>> {
        let (worst, &p) = self.peak.iter().enumerate().max_by_key(|x| *x.1)?;
        if p <= budget {
            return Some(None);
        }
        let cand = self.drop_candidates(worst, tabu);
        if cand.is_empty() {
            return None;
        }
        let (d, keep) = self.best_drop(&cand[..cand.len().min(exact)], budget, worst)?;
        let before = self.total_cost();
        self.set_run(d.i, d.lo, d.hi, d.tail, false);
        if keep {
            self.keep_inputs(d.i, d.hi + 1);
        }
        Some(Some((self.total_cost() - before, d.i, d.lo, d.hi, d.tail)))
    }

    /// The values stage `worst` holds without reading them (never `tabu`), each with its whole
    /// unread run, by estimated recomputation cost per byte (its own cost plus its missing
    /// inputs' at the stage after the run, when that stage reads or keeps it), longer runs
    /// first on ties.
    fn drop_candidates(&self, worst: usize, tabu: &[usize]) -> Vec<RunDrop> {
        let g = self.g;
        let mut cand: Vec<(f64, RunDrop)> = Vec::new();
        for i in 0..g.len() {
            if !self.s[worst][i] || self.reads(worst, i) || tabu.contains(&i) {
                continue;
            }
            let (lo, hi) = self.run(worst, i);
            let tail = self.s.get(hi + 1).is_some_and(|a| a[i]);
            let est = match self.s.get(hi + 1) {
                Some(after) if self.reads(hi + 1, i) || after[i] => {
                    g.nodes[i].cost
                        + g.deps[i]
                            .iter()
                            .filter(|&&d| !after[d] && !self.r[hi + 1][d])
                            .map(|&d| g.nodes[d].cost)
                            .sum::<f64>()
                }
                _ => 0.0,
            };
            let per_byte = est / g.nodes[i].mem.max(1) as f64;
            cand.push((per_byte, RunDrop { i, lo, hi, tail }));
        }
        cand.sort_by(|a, b| {
            let len = |d: &RunDrop| d.hi - d.lo;
            a.0.total_cmp(&b.0).then(len(&b.1).cmp(&len(&a.1)))
        });
        cand.into_iter().map(|(_, d)| d).collect()
    }

    /// The best of the candidate drops `cand` (each alone and, when the stage after its run
    /// recomputes the value, with its inputs kept: the cheap-ancestor move), each evaluated
    /// exactly by [`RepairState::trial`], with whether to keep the inputs. Preference: no
    /// cascade (only the value itself is recomputed) and no stage newly above the budget, then
    /// no stage newly above the budget, then the least cost per useful byte. A move that lifts
    /// some stage above the current worst peak (a recomputation cascade) is never taken: it
    /// trades one violation for a larger one. `None` when no move lowers the worst peak.
    fn best_drop(
        &mut self,
        cand: &[RunDrop],
        budget: i128,
        worst: usize,
    ) -> Option<(RunDrop, bool)> {
        let m = self.stages.len();
        let p = self.peak[worst];
        let peaks_before = self.peak.clone();
        // (preference key, cost per byte, move, keep inputs).
        let mut pick: Option<((bool, bool), f64, RunDrop, bool)> = None;
        for &d in cand {
            // The stage after the run recomputes `i` when it reads or keeps it.
            let reader =
                (d.hi + 1 < m && (self.reads(d.hi + 1, d.i) || d.tail)).then_some(d.hi + 1);
            for keep in [false, true] {
                if keep && reader.is_none() {
                    continue;
                }
                let keep_at = if keep { reader } else { None };
                let t = self.trial(d, keep_at, budget, &peaks_before, worst);
                let gain = p - t.worst_peak;
                if gain <= 0 || (keep && !t.kept_any) || t.new_max > p {
                    continue;
                }
                let no_cascade = t.cost_change <= self.g.nodes[d.i].cost + 1e-9;
                // Bytes beyond the excess do not help this stage.
                let useful = gain.min(p - budget).max(1) as f64;
                let per_byte = t.cost_change / useful;
                let key = (t.no_new_violation && no_cascade, t.no_new_violation);
                let better = pick.is_none_or(|b| (key, -per_byte) > (b.0, -b.1));
                if better {
                    pick = Some((key, per_byte, d, keep));
                }
            }
        }
        pick.map(|(_, _, d, keep)| (d, keep))
    }

    /// Applies the drop `d` (with `i`'s inputs kept resident up to stage `keep_at`, when
    /// given), measures it against the peaks before it (`peaks_before`), `budget` and stage
    /// `worst`, and undoes it.
    fn trial(
        &mut self,
        d: RunDrop,
        keep_at: Option<usize>,
        budget: i128,
        peaks_before: &[i128],
        worst: usize,
    ) -> Trial {
        let before = self.total_cost();
        self.set_run(d.i, d.lo, d.hi, d.tail, false);
        let cells = match keep_at {
            Some(rd) => self.keep_inputs(d.i, rd),
            None => Vec::new(),
        };
        let t = Trial {
            cost_change: self.total_cost() - before,
            // No stage rises above both the budget and its own peak before the move.
            no_new_violation: self
                .peak
                .iter()
                .zip(peaks_before)
                .all(|(&now, &was)| now <= was.max(budget)),
            worst_peak: self.peak[worst],
            new_max: self.peak.iter().copied().max().unwrap_or(i128::MIN),
            kept_any: !cells.is_empty(),
        };
        self.unset_cells(&cells);
        self.set_run(d.i, d.lo, d.hi, d.tail, true);
        t
    }

    /// The restoring pass of [`repair`]: puts back dropped runs (most expensive first) where
    /// the budget still holds and the cost falls.
    pub(crate) fn restore(&mut self, budget: i128, dropped: &mut [DroppedRun]) {
        dropped.sort_by(|a, b| b.0.total_cmp(&a.0));
        for &(_, i, lo, hi, tail) in dropped.iter() {
            // Runs may overlap later drops of the same value; restore only an intact run.
            if (lo..=hi).any(|x| self.s[x][i]) {
                continue;
            }
            let dc = self.set_run(i, lo, hi, tail, true);
            let fits =
                (lo..=hi).all(|x| self.peak[x] <= budget) && self.edge_peak(lo, hi) <= budget;
            if !(fits && dc < 0.0) {
                self.set_run(i, lo, hi, tail, false);
            }
        }
    }

    /// Total cost of all stages.
    pub(crate) fn total_cost(&self) -> f64 {
        self.cost.iter().sum()
    }

    /// Highest peak of the stages just before and after a run.
    fn edge_peak(&self, lo: usize, hi: usize) -> i128 {
        let m = self.stages.len();
        [lo.checked_sub(1), (hi + 1 < m).then_some(hi + 1)]
            .iter()
            .flatten()
            .map(|&x| self.peak[x])
            .max()
            .unwrap_or(i128::MIN)
    }
}

/// `S` thresholds at which [`solve_staged`] rounds the LP relaxation before repairing.
const LP_THRESHOLDS: [f64; 6] = [0.05, 0.2, 0.4, 0.6, 0.8, 0.95];

/// Candidates of one repair step evaluated exactly.
const REPAIR_EXACT: usize = 64;

/// Peak-driven repair of storage decisions `s0` (stage x node) into a schedule within `budget`
/// bytes, with minimal recomputation for its storage: while some stage exceeds the budget, drop
/// from the worst stage the held-but-unread value with the least estimated recomputation cost
/// per byte (its own cost plus its missing inputs' at the stage that reads it next), for the
/// whole run of stages that hold it unread; then restore dropped runs, most expensive first,
/// where the budget still holds. Returns `None` when no drop at the worst stage lowers its
/// peak. Dropping a run is Moccasin's splitting of a value's lifetime into two intervals
/// (Bartan et al. 2023, Section 3). Each candidate is also tried with its inputs kept resident
/// up to the stage that recomputes it (the cheap-ancestor move): when those inputs are
/// smaller than the value, this frees memory at the worst stage without the recomputation
/// chain that dropping alone starts (each missing input recomputed from its own inputs, back
/// to the source), the failure mode of greedy eviction on deep DAGs.
pub fn repair(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    s0: &[Vec<bool>],
) -> Option<StagedSchedule> {
    let budget = budget as i128;
    let mut st = RepairState::new(g, stages, s0);
    let mut dropped: Vec<DroppedRun> = Vec::new();
    while let Some(d) = st.drop_step(budget, REPAIR_EXACT, &[])? {
        dropped.push(d);
    }
    st.restore(budget, &mut dropped);
    Some(StagedSchedule {
        stages: stages.to_vec(),
        r: st.r,
        s: st.s,
    })
}

/// Storage of checkpoint-all over `stages`: a value is held from its stage until the stage of
/// its last reader.
pub fn keep_all(g: &Graph, stages: &[RangeInclusive<usize>]) -> Vec<Vec<bool>> {
    let last = g.last_users();
    stages
        .iter()
        .map(|st| {
            (0..g.len())
                .map(|i| i < *st.start() && last[i] >= *st.start())
                .collect()
        })
        .collect()
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
struct Vars {
    stages: Vec<RangeInclusive<usize>>,
    cols: Columns,
    /// The column fixed to 1 that carries the cost of the fixed computations.
    one: Col,
}

/// The staged model over `stages`; with `prefix > 0`, `stages[0]` is the checkpoint-all prefix
/// `0..=prefix - 1` and has no memory columns or rows (see [`model_stages`]). Columns: per
/// stage `R`, `S`, `U`, then the constant, then `FREE`; rows 1b, 1c, 2, 3 (tight), then the
/// computation bound.
fn build(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    prefix: usize,
    cmax: Option<u32>,
    integer: bool,
) -> (RowProblem, Vars) {
    let mut mb = ModelBuilder::new(g, integer);
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
fn add_stage_columns(
    mb: &mut ModelBuilder,
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
fn users_in(g: &Graph, i: usize, k: usize, e: usize) -> Vec<usize> {
    g.users[i]
        .iter()
        .copied()
        .filter(|&j| j > k && j <= e)
        .collect()
}

/// Continuous `FREE[s][i][k]` for `i in DEPS[k] ∪ {k}`, `k < e`, in stages with memory rows;
/// none (fixed to 0) when a later user of `i` in the stage is one of the stage's own nodes.
fn add_free_columns(mb: &mut ModelBuilder, g: &Graph, stages: &[RangeInclusive<usize>]) {
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
fn add_dependency_rows(mb: &mut ModelBuilder, g: &Graph, stages: &[RangeInclusive<usize>]) {
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
fn add_memory_rows(mb: &mut ModelBuilder, g: &Graph, stages: &[RangeInclusive<usize>]) {
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
fn add_free_rows(mb: &mut ModelBuilder, g: &Graph, stages: &[RangeInclusive<usize>]) {
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
fn add_computation_bounds(mb: &mut ModelBuilder, g: &Graph, cmax: u32) {
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

fn warm_vector(g: &Graph, v: &Vars, sch: &StagedSchedule) -> Vec<f64> {
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
fn from_checkmate(sch: &Schedule, stages: &[RangeInclusive<usize>]) -> StagedSchedule {
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
fn minimal_r(g: &Graph, sch: &StagedSchedule) -> StagedSchedule {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::checkpoint_all;
    use crate::layered::{random_layered, LayeredParams};
    use crate::milp::solve_milp;

    fn small(n: usize, seed: u64) -> Graph {
        crate::layered::test_graph(n, seed)
    }

    /// Budgets between the working-set bound and the checkpoint-all peak.
    fn budgets(g: &Graph) -> Vec<u64> {
        let peak = simulate(g, &checkpoint_all(g)).unwrap().peak_mem;
        let ws = g.working_set_bound();
        let mut b: Vec<u64> = [1.0, 0.85, 0.7]
            .iter()
            .map(|f| ws.max((peak as f64 * f) as u64))
            .collect();
        b.dedup();
        b
    }

    fn exact() -> StagedOptions {
        StagedOptions {
            milp: MilpOptions {
                time_limit_s: 60.0,
                mip_gap: 0.0,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Checkmate's MILP solved to a zero gap.
    fn checkmate_exact(g: &Graph, budget: u64) -> crate::milp::MilpOutcome {
        let o = MilpOptions {
            mip_gap: 0.0,
            ..Default::default()
        };
        solve_milp(g, budget, &o).unwrap()
    }

    #[test]
    fn tight_model_matches_checkmate_optimum() {
        // Budgets whose checkpoint-all prefix is one stage without memory rows.
        let mut with_prefix = 0;
        for seed in [1, 2] {
            let g = small(14, seed);
            for budget in budgets(&g) {
                with_prefix += usize::from(model_stages(&g, budget, 1).1 >= 2);
                let classic = checkmate_exact(&g, budget);
                let tight = solve_staged(&g, budget, &exact()).unwrap();
                match (&classic.best, &tight.best) {
                    (Some((_, a)), Some((s, b))) => {
                        assert!(
                            (a.cost - b.cost).abs() < 1e-6,
                            "seed {seed} budget {budget}: {} vs {}",
                            a.cost,
                            b.cost
                        );
                        let sim = simulate(&g, s).unwrap();
                        assert!(sim.peak_mem <= budget);
                        assert_eq!(&sim, b);
                    }
                    (None, None) => {}
                    (a, b) => panic!("seed {seed} budget {budget}: classic {a:?} vs tight {b:?}"),
                }
                // The tight LP is a lower bound of the optimum and at least Checkmate's LP.
                if let Some((_, b)) = &tight.best {
                    let lp = lp_bound(&g, budget, &MilpOptions::default())
                        .unwrap()
                        .unwrap();
                    assert!(lp <= b.cost + 1e-6, "LP {lp} above optimum {}", b.cost);
                    assert!(tight.valid_bound <= b.cost + 1e-6);
                    let classic_lp = crate::milp::solve_lp_rounding(
                        &g,
                        budget,
                        &MilpOptions::default(),
                        &[],
                        &[],
                    )
                    .unwrap()
                    .lp_bound
                    .unwrap();
                    assert!(
                        lp >= classic_lp - 1e-6,
                        "tight LP {lp} below Checkmate's LP {classic_lp}"
                    );
                }
            }
        }
        assert!(
            with_prefix >= 2,
            "only {with_prefix} budgets exercise the prefix stage"
        );
    }

    #[test]
    fn grouped_stages_are_a_restriction_and_simulate() {
        let g = small(18, 3);
        for budget in budgets(&g) {
            let full = solve_staged(&g, budget, &exact()).unwrap();
            for size in [2, 3, 5] {
                let o = StagedOptions {
                    stage_size: size,
                    ..exact()
                };
                let grouped = solve_staged(&g, budget, &o).unwrap();
                if let Some((s, r)) = &grouped.best {
                    let sim = simulate(&g, s).unwrap();
                    assert_eq!(&sim, r);
                    assert!(
                        sim.peak_mem <= budget,
                        "size {size}: {} > {budget}",
                        sim.peak_mem
                    );
                    let opt = full
                        .best
                        .as_ref()
                        .expect("grouped feasible implies feasible")
                        .1
                        .cost;
                    assert!(
                        r.cost >= opt - 1e-6,
                        "size {size}: {} below the optimum {opt}",
                        r.cost
                    );
                    // A restricted model's own bounds do not count: the valid bound is sum C_i
                    // or the boundary relaxation's, and never above Checkmate's optimum.
                    let relax = grouped.boundary_bound.expect("solved first");
                    assert_eq!(grouped.valid_bound, relax.max(g.total_cost()));
                    assert!(grouped.valid_bound <= opt + 1e-6, "size {size}");
                }
            }
            let bounded = solve_staged(
                &g,
                budget,
                &StagedOptions {
                    max_computations: Some(2),
                    ..exact()
                },
            )
            .unwrap();
            if let Some((s, _)) = &bounded.best {
                for i in 0..g.len() {
                    assert!(
                        s.r.iter().filter(|r| r[i]).count() <= 2,
                        "node {i} computed 3 times"
                    );
                }
            }
        }
    }

    #[test]
    fn heuristics_fit_and_expand_to_valid_schedules() {
        let g = small(80, 4);
        for budget in budgets(&g) {
            for size in [1, 4] {
                let stages = uniform_stages(g.len(), size);
                for s in EVICT_WEIGHTS
                    .iter()
                    .filter_map(|&w| greedy_evict(&g, budget, &stages, w))
                    .chain(repair(&g, budget, &stages, &keep_all(&g, &stages)))
                {
                    let e = s.expand(&g);
                    let sim = simulate(&g, &e).expect("valid expansion");
                    // The grouped accounting bounds the expanded schedule's memory.
                    let none = vec![false; g.len()];
                    let grouped = (0..stages.len())
                        .map(|si| {
                            let next = s.s.get(si + 1).unwrap_or(&none);
                            stage_peak(&g, *stages[si].end(), &s.s[si], &s.r[si], next)
                        })
                        .max()
                        .unwrap();
                    assert!(sim.peak_mem as i128 <= grouped);
                }
                if let Some((s, r)) = greedy_best(&g, budget, &stages) {
                    assert!(r.peak_mem <= budget);
                    assert_eq!(simulate(&g, &s.expand(&g)).unwrap(), r);
                }
            }
        }
        // Checkpoint-all storage fits its own peak without any recomputation.
        let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
        let st = uniform_stages(g.len(), 1);
        let r = repair(&g, peak, &st, &keep_all(&g, &st)).unwrap();
        assert_eq!(simulate(&g, &r.expand(&g)).unwrap().cost, g.total_cost());
    }

    /// The accounting of eq. 2–4 written out step by step: after computing `p`, each input
    /// of `p` and `p` itself is freed unless kept into the next stage or read by a later
    /// computation of the stage.
    fn stage_peak_by_steps(g: &Graph, e: usize, s_in: &[bool], r: &[bool], s_out: &[bool]) -> i128 {
        let mem = |i: usize| g.nodes[i].mem as i128;
        let mut cur =
            g.fixed_mem as i128 + (0..g.len()).filter(|&i| s_in[i]).map(mem).sum::<i128>();
        let mut peak = cur;
        let computed: Vec<usize> = (0..=e).filter(|&k| r[k]).collect();
        for (x, &k) in computed.iter().enumerate() {
            if x > 0 {
                let p = computed[x - 1];
                for &i in g.deps[p].iter().chain(std::iter::once(&p)) {
                    let later = computed[x..].iter().any(|&j| g.deps[j].contains(&i));
                    if !s_out[i] && !later {
                        cur -= mem(i);
                    }
                }
            }
            cur += mem(k);
            peak = peak.max(cur);
        }
        peak
    }

    #[test]
    fn stage_peaks_follow_the_step_accounting() {
        let mut stages_checked = 0;
        for seed in [4, 5] {
            let g = small(80, seed);
            for budget in budgets(&g) {
                for size in [1, 3, 8] {
                    let stages = uniform_stages(g.len(), size);
                    let none = vec![false; g.len()];
                    let schedules = EVICT_WEIGHTS
                        .iter()
                        .filter_map(|&w| greedy_evict(&g, budget, &stages, w))
                        .chain(repair(&g, budget, &stages, &keep_all(&g, &stages)));
                    for s in schedules {
                        for si in 0..stages.len() {
                            let next = s.s.get(si + 1).unwrap_or(&none);
                            let e = *stages[si].end();
                            assert_eq!(
                                stage_peak(&g, e, &s.s[si], &s.r[si], next),
                                stage_peak_by_steps(&g, e, &s.s[si], &s.r[si], next),
                                "seed {seed}, budget {budget}, stages of {size}, stage {si}"
                            );
                            stages_checked += 1;
                        }
                    }
                }
            }
        }
        assert!(stages_checked > 1000, "{stages_checked} stages");
    }

    /// Repair with the cheap-ancestor move finds schedules where dropping a value used to force
    /// a recomputation chain back to the source: the 500-node graph of the study's benchmark
    /// family at 0.9 and 0.8 of its checkpoint-all peak (before the move: no schedule), within
    /// budget by the simulator and within 5% of `sum_i C_i`, a lower bound.
    #[test]
    fn repair_keeps_cheap_inputs_instead_of_recomputation_chains() {
        let g = random_layered(&LayeredParams::shared(500, 0.27, 1)).unwrap();
        let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
        let st = uniform_stages(g.len(), 1);
        for f in [0.9, 0.8] {
            let budget = (peak as f64 * f) as u64;
            let s = repair(&g, budget, &st, &keep_all(&g, &st)).expect("a schedule");
            let sim = simulate(&g, &s.expand(&g)).expect("valid");
            assert!(sim.peak_mem <= budget, "{f}: {} > {budget}", sim.peak_mem);
            assert!(sim.cost <= 1.05 * g.total_cost(), "{f}: cost {}", sim.cost);
            assert!(sim.recomputations > 0);
        }
    }

    /// When the boundary relaxation's schedule fits, the solve ends with it, and it is
    /// Checkmate's optimum; with the relaxation off, the same solve goes through the MILP.
    #[test]
    fn boundary_relaxation_ends_the_solve_with_checkmate_optimum() {
        let mut proven = 0;
        for seed in [1, 2, 3] {
            let g = small(16, seed);
            for budget in budgets(&g) {
                let with = solve_staged(&g, budget, &exact()).unwrap();
                if with.status != SolveStatus::OptimalBoundaryRelaxation {
                    continue;
                }
                proven += 1;
                let classic = checkmate_exact(&g, budget);
                let opt = classic.best.expect("feasible").1.cost;
                let (sch, sim) = with.best.as_ref().expect("a schedule");
                assert!(
                    (sim.cost - opt).abs() < 1e-6,
                    "seed {seed}: {} vs {opt}",
                    sim.cost
                );
                assert_eq!(&simulate(&g, sch).unwrap(), sim);
                assert!(sim.peak_mem <= budget);
                assert!((with.valid_bound - opt).abs() < 1e-6);
                let without = solve_staged(
                    &g,
                    budget,
                    &StagedOptions {
                        boundary: false,
                        ..exact()
                    },
                )
                .unwrap();
                assert_ne!(without.status, with.status);
                assert!(without.boundary_bound.is_none());
                assert!((without.best.unwrap().1.cost - opt).abs() < 1e-6);
            }
        }
        assert!(proven >= 2, "the relaxation proved only {proven} optima");
    }

    #[test]
    fn refined_solve_and_infeasible_budget() {
        let g = small(30, 5);
        let budget = budgets(&g)[1];
        let o = StagedOptions {
            stage_size: 3,
            milp: MilpOptions {
                time_limit_s: 20.0,
                ..Default::default()
            },
            ..Default::default()
        };
        let (coarse, fine) = solve_refined(&g, budget, &o, 0.5, true).unwrap();
        let fine = fine.expect("refined");
        assert_eq!(fine.stage_size, 1);
        let (s, r) = fine.best.as_ref().expect("coarse or fine schedule");
        assert_eq!(&simulate(&g, s).unwrap(), r);
        assert!(r.peak_mem <= budget);
        if let Some((_, c)) = &coarse.best {
            assert!(r.cost <= c.cost + 1e-9);
        }
        assert!(fine.valid_bound <= r.cost + 1e-6);
        let out = solve_staged(&g, g.working_set_bound() - 1, &exact()).unwrap();
        assert!(out.best.is_none());
        assert_eq!(out.status, SolveStatus::InfeasibleWorkingSet);
    }
}
