//! Baseline rematerialization strategies, expressed as schedules `(R, S)` of the Checkmate
//! formulation (Jain et al. 2020, Section 6.1 baselines).
//!
//! Each baseline decides which tensors are kept between stages (`S`); the compute matrix is then
//! the minimal `R` for that `S` ([`solve_r_given_s`]): stage `t` computes node `t` and, in
//! reverse topological order, every dependency of a computed node that is not resident.
//!
//! Forward values that are not checkpoints are kept only while the forward sweep needs them:
//! up to the end of the sweep `e = min(b + 1, n)`, `b` the first backward node (the loss), so
//! the loss and the first gradient op read the last activations without recomputation, as in
//! Chen et al. Once recomputed in the backward pass, a value is kept while a later stage could
//! need it (Chen et al. recompute each segment once). Backward outputs are kept until their last
//! user.
//!
//! May import: the graph IR, the simulator's [`Schedule`], `memwall_core::strategy` (segments).

use super::graph::Graph;
use super::sim::Schedule;
use memwall_core::strategy::{every_k, Segment};

/// Computes the minimal `R` for stage `t` given the resident set `s_t` and the nodes `must`
/// that have to be computed in the stage ([`Graph::compute_closure`] of node `t` and the
/// non-resident `must`).
fn closure(g: &Graph, t: usize, s_t: &[bool], must: &[usize]) -> Vec<bool> {
    let seeds = std::iter::once(t).chain(must.iter().copied().filter(|&m| !s_t[m]));
    g.compute_closure(t, s_t, seeds)
}

/// Minimal compute matrix for a given storage matrix (the second phase of two-phase rounding,
/// Section 5.1): `S` is first masked to its lower triangle; stage `t` computes node `t`, every
/// node stored in `S[t+1]` but not in `S[t]`, and their non-resident dependencies. The result
/// always satisfies the simulator's constraints.
pub fn solve_r_given_s(g: &Graph, s: &[Vec<bool>]) -> Schedule {
    let n = g.len();
    let mut sch = Schedule::empty(n);
    for t in 0..n {
        for i in 0..t {
            sch.s[t][i] = s[t][i];
        }
    }
    for t in 0..n {
        let must: Vec<usize> = if t + 1 < n {
            (0..=t)
                .filter(|&i| sch.s[t + 1][i] && !sch.s[t][i])
                .collect()
        } else {
            Vec::new()
        };
        sch.r[t] = closure(g, t, &sch.s[t], &must);
    }
    sch
}

/// Builds a schedule stage by stage: `keep(i, t)` says whether a value present in stage `t`
/// (resident or computed) is kept into stage `t+1`; `want(t)` lists values that must be
/// resident at stage `t+1` (snapshots), which are computed in stage `t` if absent.
fn build(
    g: &Graph,
    keep: impl Fn(usize, usize) -> bool,
    want: impl Fn(usize) -> Vec<usize>,
) -> Schedule {
    let n = g.len();
    let mut sch = Schedule::empty(n);
    for t in 0..n {
        let wanted: Vec<usize> = if t + 1 < n { want(t) } else { Vec::new() };
        let r = closure(g, t, &sch.s[t], &wanted);
        if t + 1 < n {
            for i in 0..=t {
                let present = sch.s[t][i] || r[i];
                sch.s[t + 1][i] = present && (keep(i, t) || wanted.contains(&i));
            }
        }
        sch.r[t] = r;
    }
    sch
}

/// End of the forward sweep `e = min(b + 1, n)` (see the module doc).
fn sweep_end(g: &Graph) -> usize {
    (g.first_backward() + 1).min(g.len())
}

/// Schedule for a static checkpoint set `ckpt` (forward nodes kept until no later stage can
/// need them). Checkpointing every forward node is "checkpoint all".
pub fn from_checkpoints(g: &Graph, ckpt: &[bool]) -> Schedule {
    let n = g.len();
    let e = sweep_end(g);
    // need[i]: last stage that may read i, directly or by recomputing a non-checkpoint user.
    let mut need = vec![0usize; n];
    for i in (0..n).rev() {
        need[i] = i;
        for &j in &g.users[i] {
            let h = if g.nodes[j].backward || ckpt[j] {
                j
            } else {
                j.max(need[j])
            };
            need[i] = need[i].max(h);
        }
    }
    let last_user = g.last_users();
    build(
        g,
        |i, t| {
            if g.nodes[i].backward {
                last_user[i] > t
            } else if ckpt[i] || t >= e {
                need[i] > t
            } else {
                g.users[i].iter().any(|&j| j > t && j <= e)
            }
        },
        |_| Vec::new(),
    )
}

/// Checkpoint all: every output is kept until its last use; no recomputation. Its cost is one
/// plain forward + backward pass and its peak is the reference for the memory budgets.
pub fn checkpoint_all(g: &Graph) -> Schedule {
    from_checkpoints(g, &vec![true; g.len()])
}

/// Chen et al. 2016 ("Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174,
/// Sec. 4.1): cut a chain of `m` ops into segments of `k = floor(sqrt(m))` ops (the shared
/// [`every_k`]; the last segment may be shorter). Keeping only segment boundaries costs
/// O(m / k) memory and recomputing one segment during backward O(k), both O(sqrt(m)), for one
/// extra forward pass. The one sqrt(n) rule of memwall: [`chen_sqrt`] and the static planner's
/// segment recomputation ([`crate::memory_plan::segment_order`]) both use it.
pub fn sqrt_segments(m: usize) -> Vec<Segment> {
    every_k(m, ((m as f64).sqrt().floor() as usize).max(1))
}

/// Chen et al. 2016 sqrt(n): cut the linearized forward ops ([`Graph::forward_ops`], `m` of
/// them) into [`sqrt_segments`] and checkpoint the last node of every full segment (every
/// `floor(sqrt(m))`-th node); segments are recomputed in the backward pass. Graphs without
/// backward nodes get checkpoint-all (nothing is ever re-read late).
pub fn chen_sqrt(g: &Graph) -> Schedule {
    if g.first_backward() >= g.len() {
        return checkpoint_all(g);
    }
    let fwd = g.forward_ops();
    let segments = sqrt_segments(fwd.len());
    let k = segments.first().map_or(1, |s| s.end - s.start);
    let mut ckpt = vec![false; g.len()];
    for s in segments.iter().filter(|s| s.end - s.start == k) {
        ckpt[fwd[s.end - 1]] = true;
    }
    from_checkpoints(g, &ckpt)
}

/// Chen et al. 2016 greedy (their Algorithm 3): walk the linearized forward accumulating output
/// bytes; when the running segment exceeds `threshold` bytes, checkpoint the node and restart.
/// Graphs without backward nodes get checkpoint-all.
pub fn chen_greedy(g: &Graph, threshold: u64) -> Schedule {
    if g.first_backward() >= g.len() {
        return checkpoint_all(g);
    }
    let mut ckpt = vec![false; g.len()];
    let mut acc = 0u64;
    for v in g.forward_nodes() {
        acc += g.nodes[v].mem;
        if acc > threshold {
            ckpt[v] = true;
            acc = 0;
        }
    }
    from_checkpoints(g, &ckpt)
}

/// Thresholds (bytes) for sweeping [`chen_greedy`]: `count` values spaced geometrically between
/// the smallest forward output and the total forward output size.
pub fn greedy_thresholds(g: &Graph, count: usize) -> Vec<u64> {
    let fwd = g.forward_nodes();
    let lo = fwd
        .iter()
        .map(|&v| g.nodes[v].mem)
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let hi = (fwd.iter().map(|&v| g.nodes[v].mem).sum::<u64>().max(1) as f64).max(lo);
    let count = count.max(1);
    (0..count)
        .map(|j| {
            let f = if count == 1 {
                1.0
            } else {
                j as f64 / (count - 1) as f64
            };
            (lo * (hi / lo).powf(f)).round() as u64
        })
        .collect()
}

/// Minimal forward recomputations `G(l, s)` of binomial checkpointing (Griewank & Walther,
/// revolve) to reverse a chain of `l` steps with `s` snapshot slots, in the stage model where
/// the backward op of step `j` reads the step's output: advance to `x_m`, snapshot it, reverse
/// the upper `l-m` steps with `s-1` slots, read `x_m` from the snapshot, reverse the lower
/// `m-1` steps with `s` slots. `G(l, 0) = l(l+1)/2`. Returns the table and the chosen splits.
pub fn revolve_table(l: usize, s: usize) -> (Vec<Vec<u64>>, Vec<Vec<usize>>) {
    let mut c = vec![vec![0u64; s + 1]; l + 1];
    let mut split = vec![vec![0usize; s + 1]; l + 1];
    for len in 1..=l {
        c[len][0] = (len * (len + 1) / 2) as u64;
        for sl in 1..=s {
            let mut best = (u64::MAX, 0);
            for m in 1..=len {
                let v = m as u64 + c[len - m][sl - 1] + c[m - 1][sl];
                if v < best.0 {
                    best = (v, m);
                }
            }
            c[len][sl] = best.0;
            split[len][sl] = best.1;
        }
    }
    (c, split)
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Adv(usize),
    Snap(usize),
    Visit(usize),
    Release(usize),
}

fn revolve_events(base: usize, l: usize, s: usize, split: &[Vec<usize>], out: &mut Vec<Ev>) {
    if l == 0 {
        return;
    }
    if s == 0 {
        for top in (0..l).rev() {
            out.extend((0..=top).map(|j| Ev::Adv(base + j)));
            out.push(Ev::Visit(base + top));
        }
        return;
    }
    let m = split[l][s];
    out.extend((0..m).map(|j| Ev::Adv(base + j)));
    out.push(Ev::Snap(base + m - 1));
    revolve_events(base + m, l - m, s - 1, split, out);
    out.push(Ev::Visit(base + m - 1));
    out.push(Ev::Release(base + m - 1));
    revolve_events(base, m - 1, s, split, out);
}

/// Griewank's revolve (binomial checkpointing) with `slots` snapshots, applied to the
/// linearized forward. Position `p` of the forward is "visited" in the last backward stage
/// whose frontier (highest forward position still read by a backward node at or after it)
/// is `>= p`; recomputation between visits happens in the visiting stage. Optimal in compute
/// for uniform chains given the number of slots. Graphs without backward nodes get
/// checkpoint-all.
pub fn revolve(g: &Graph, slots: usize) -> Schedule {
    let n = g.len();
    let b = g.first_backward();
    let fwd = g.forward_nodes();
    let m = fwd.len();
    if b >= n || m == 0 {
        return checkpoint_all(g);
    }
    let (_, split) = revolve_table(m, slots);
    let mut ev = Vec::new();
    revolve_events(0, m, slots, &split, &mut ev);
    let stage = event_stages(g, &fwd, &ev);
    let want = snapshot_wants(n, &fwd, &ev, &stage);
    let e_end = sweep_end(g);
    let last_user = g.last_users();
    build(
        g,
        |i, t| {
            if g.nodes[i].backward {
                last_user[i] > t
            } else if t < e_end {
                g.users[i].iter().any(|&j| j > t && j <= e_end)
            } else {
                false
            }
        },
        |t| want[t].clone(),
    )
}

/// The stage in which revolve visits forward position `p`: the last backward stage whose
/// frontier (highest forward position read by a backward node at or after it) is `>= p`.
fn visit_stages(g: &Graph, fwd: &[usize]) -> Vec<usize> {
    let (n, b, m) = (g.len(), g.first_backward(), fwd.len());
    let frontier: Vec<Option<usize>> = (0..n)
        .map(|t| {
            if t < b {
                return None;
            }
            (0..m).rev().find(|&p| {
                g.users[fwd[p]]
                    .iter()
                    .any(|&j| g.nodes[j].backward && j >= t)
            })
        })
        .collect();
    (0..m)
        .map(|p| {
            (b..n)
                .rev()
                .find(|&t| frontier[t].is_some_and(|f| f >= p))
                .unwrap_or(b)
        })
        .collect()
}

/// The stage of every revolve event: advances and snapshots before the first visit run in the
/// forward sweep (stage of the node); later ones run in the stage of the next visit; visits
/// and releases never move backwards in time.
fn event_stages(g: &Graph, fwd: &[usize], ev: &[Ev]) -> Vec<usize> {
    let visit_stage = visit_stages(g, fwd);
    let b = g.first_backward();
    let mut stage = vec![0usize; ev.len()];
    let mut seen_visit = false;
    let mut last_visit_stage = b;
    for (x, e) in ev.iter().enumerate() {
        stage[x] = match *e {
            Ev::Visit(p) => {
                seen_visit = true;
                last_visit_stage = visit_stage[p].max(last_visit_stage);
                last_visit_stage
            }
            Ev::Release(_) => last_visit_stage,
            Ev::Adv(p) | Ev::Snap(p) if !seen_visit => fwd[p],
            Ev::Adv(_) | Ev::Snap(_) => ev[x..]
                .iter()
                .find_map(|e| {
                    if let Ev::Visit(q) = e {
                        Some(visit_stage[*q])
                    } else {
                        None
                    }
                })
                .unwrap_or(last_visit_stage)
                .max(last_visit_stage),
        };
    }
    stage
}

/// `want[t]`: the snapshots that must be resident at stage `t + 1`; a snapshot is stored from
/// the stage after it is taken through the stage that releases it.
fn snapshot_wants(n: usize, fwd: &[usize], ev: &[Ev], stage: &[usize]) -> Vec<Vec<usize>> {
    let mut want: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut open: Vec<(usize, usize)> = Vec::new();
    for (x, e) in ev.iter().enumerate() {
        match *e {
            Ev::Snap(p) => open.push((p, stage[x])),
            Ev::Release(p) => {
                if let Some(pos) = open.iter().rposition(|&(q, _)| q == p) {
                    let (_, st) = open.remove(pos);
                    for tt in (st + 1)..=stage[x].min(n - 1) {
                        want[tt - 1].push(fwd[p]);
                    }
                }
            }
            _ => {}
        }
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::simulate;

    #[test]
    fn checkpoint_all_on_chains_costs_2n_plus_1() {
        for n in 1..=12 {
            let g = Graph::linear_chain(n).unwrap();
            let r = simulate(&g, &checkpoint_all(&g)).unwrap();
            assert_eq!(r.cost, (2 * n + 1) as f64, "n = {n}");
            assert_eq!(r.recomputations, 0);
        }
    }

    #[test]
    fn sqrt_n_hand_values() {
        // n = 4: k = 2, checkpoints f1, f3; f2 and f0 recomputed once each: 9 + 2.
        // n = 5: k = 2, checkpoints f1, f3; f4 carried to g4; f2, f0 recomputed: 11 + 2.
        // n = 9: k = 3, checkpoints f2, f5, f8; segments {f0,f1}, {f3,f4}, {f6,f7}: 19 + 6.
        for (n, want) in [(4, 11.0), (5, 13.0), (9, 25.0)] {
            let g = Graph::linear_chain(n).unwrap();
            let r = simulate(&g, &chen_sqrt(&g)).unwrap();
            assert_eq!(r.cost, want, "n = {n}");
        }
        // sqrt(n) uses less memory than checkpoint-all on a long chain.
        let g = Graph::linear_chain(16).unwrap();
        let a = simulate(&g, &checkpoint_all(&g)).unwrap();
        let s = simulate(&g, &chen_sqrt(&g)).unwrap();
        assert!(s.peak_mem < a.peak_mem, "{} vs {}", s.peak_mem, a.peak_mem);
    }

    #[test]
    fn revolve_hand_values_and_table() {
        let (c, _) = revolve_table(4, 2);
        assert_eq!(c[4][0], 10);
        assert_eq!(c[4][1], 6);
        // Two slots: snapshot x_1, then three steps with one slot (4): 1 + 4 = 5.
        assert_eq!(c[4][2], 5);
        let (c3, _) = revolve_table(4, 3);
        assert_eq!(c3[4][3], 4);
        let g = Graph::linear_chain(4).unwrap();
        for (s, want) in [(0, 15.0), (1, 11.0), (2, 10.0), (3, 9.0)] {
            let r = simulate(&g, &revolve(&g, s)).unwrap();
            assert_eq!(r.cost, want, "slots = {s}");
        }
        // Simulated cost equals the binomial recurrence plus the n + 1 backward ops.
        for n in 1..=10 {
            let g = Graph::linear_chain(n).unwrap();
            let (c, _) = revolve_table(n, n);
            let mut prev_peak = u64::MAX;
            for s in 0..=n {
                let r = simulate(&g, &revolve(&g, s)).unwrap();
                assert_eq!(r.cost, (c[n][s] + n as u64 + 1) as f64, "n = {n}, s = {s}");
                prev_peak = prev_peak.min(r.peak_mem);
            }
            assert!(prev_peak <= simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem);
        }
    }

    #[test]
    fn greedy_sweep_is_valid() {
        let g = Graph::linear_chain(10).unwrap();
        for th in greedy_thresholds(&g, 6) {
            simulate(&g, &chen_greedy(&g, th)).unwrap();
        }
    }

    #[test]
    fn r_given_s_reproduces_baselines() {
        let g = Graph::linear_chain(7).unwrap();
        for sch in [checkpoint_all(&g), chen_sqrt(&g), revolve(&g, 2)] {
            let again = solve_r_given_s(&g, &sch.s);
            assert_eq!(again, sch);
        }
    }
}
