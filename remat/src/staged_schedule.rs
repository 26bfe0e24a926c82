//! A schedule over stages ([`StagedSchedule`]: which outputs each stage keeps and recomputes),
//! its peak per stage, and the heuristics that make or mend one: greedy eviction
//! ([`greedy_evict`], [`greedy_best`]) and repair to a budget ([`repair`]). The staged MILP
//! ([`crate::staged`]) starts from them and annealing ([`crate::anneal`]) moves through them.
//!
//! May import: the graph IR, the simulator, the LP relaxation's columns (`crate::formulation`),
//! HiGHS' types.

use crate::graph::Graph;
use crate::sim::{simulate, Schedule, SimResult};
use std::ops::RangeInclusive;

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
pub(crate) fn closure(g: &Graph, st: &RangeInclusive<usize>, s_in: &[bool]) -> Vec<bool> {
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
pub(crate) fn stage_peak_of(
    g: &Graph,
    e: usize,
    s_in: &[bool],
    computed: &[usize],
    s_out: &[bool],
) -> i128 {
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
pub(crate) struct Evictor<'a> {
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
pub(crate) fn stage_r(
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
pub(crate) struct RunDrop {
    i: usize,
    lo: usize,
    hi: usize,
    tail: bool,
}

/// What a drop does, measured by [`RepairState::trial`].
pub(crate) struct Trial {
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
pub(crate) const LP_THRESHOLDS: [f64; 6] = [0.05, 0.2, 0.4, 0.6, 0.8, 0.95];

/// Candidates of one repair step evaluated exactly.
pub(crate) const REPAIR_EXACT: usize = 64;

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
