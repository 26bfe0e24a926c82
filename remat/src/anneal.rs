//! Schedule improvement by simulated annealing over ejection chains: the primal heuristic of
//! the staged solver ([`crate::staged::solve_staged`]) for graphs on which HiGHS finds no
//! incumbent better than its warm start within the time limit (the random layered n250 graph at
//! budget 0.8: 133,227 from greedy eviction after 120 s of the exact model).
//!
//! **State.** A staged schedule's storage decisions `S` with minimal recomputation for them
//! (each stage computes its nodes, the values first kept into the next stage and every missing
//! input) and its per-stage peaks (bytes, the accounting of Jain et al. 2020, eq. 2–4) and
//! costs: the state of [`crate::staged::repair`].
//!
//! **Move.** One recomputation `(y, i)` of the current schedule, chosen uniformly, is removed by
//! keeping value `i` resident from the last stage before `y` at whose end it is present through
//! stage `y` (merging two of its lifetime intervals, Moccasin's interval view, Bartan et al.
//! 2023, Section 3). The stages this pushes over the budget are then repaired as
//! [`crate::staged::repair`] does (drop, at the stage with the highest peak, the held-but-unread
//! value with the least exact cost per byte among the [`EXACT`] best estimates, `i` excepted;
//! then put back the dropped runs that still fit): an ejection chain (Glover 1996) whose end
//! state fits the budget, or the move is void.
//!
//! **Acceptance.** A fitting end state is kept when it costs no more, else with probability
//! `exp(-Δcost / T)` (Metropolis; Kirkpatrick et al., Science 1983), `T` falling geometrically
//! from [`T_START`] to [`T_END`] times the mean node cost over a schedule of [`MOVES`] moves, or
//! over the time limit when that is shorter (whichever is further along sets the temperature),
//! so that a run always cools before it ends; the cheapest state visited is returned. Under an
//! explicit move limit the temperature follows the moves only and the result depends only on
//! the seed (unless the time limit ends the run first).
//!
//! **Restarts.** Without a move limit, a schedule that ends with at least [`MIN_ROUND_S`] left
//! is followed by another, from the cheapest state so far, over the moves or the time left
//! (whichever ends first): the staged solver gives the annealing a whole time limit on large
//! graphs, and on the random layered n500 w 0.36 seed 2 graph at budget 0.8 its first 4,000
//! moves take about 25 s.
//!
//! May import: the graph IR, [`crate::staged`]'s repair state, rand.

use super::graph::Graph;
use super::staged_schedule::{RepairState, StagedSchedule};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Starting temperature, in mean node costs (`sum C_i / n`).
pub const T_START: f64 = 3.0;
/// Final temperature, in mean node costs.
pub const T_END: f64 = 0.03;
/// Drop candidates evaluated exactly per repair step (the best by estimated cost per byte).
pub const EXACT: usize = 16;
/// Length of the temperature schedule in moves when [`AnnealOptions::max_moves`] is `None`.
pub const MOVES: u64 = 4000;
/// Least time, seconds, for which [`anneal`] starts another cooling round from its best state
/// when a round ends before the time limit.
pub const MIN_ROUND_S: f64 = 1.0;

/// Options of [`anneal`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnnealOptions {
    /// Wall-clock limit, seconds.
    pub time_limit_s: f64,
    /// Seed of the move sequence (ChaCha8).
    pub seed: u64,
    /// Length of the temperature schedule in moves, which then ignores the time (`None`:
    /// [`MOVES`], shortened by the time limit).
    pub max_moves: Option<u64>,
}

/// Result of [`anneal`].
#[derive(Debug, Clone)]
pub struct AnnealOutcome {
    /// The cheapest schedule visited whose every stage fits the budget, with its cost (cost
    /// units); `None` when the start does not fit and repair cannot make it fit.
    pub best: Option<(StagedSchedule, f64)>,
    /// Moves tried.
    pub moves: u64,
    /// Moves whose end state was kept.
    pub accepted: u64,
    /// The move that found `best` (0: the start).
    pub best_move: u64,
    /// Cooling schedules restarted from `best` after one ended with time left (only without
    /// [`AnnealOptions::max_moves`]).
    pub restarts: u64,
    /// Wall time, seconds.
    pub time_s: f64,
}

/// Improves the storage decisions of `start` (a schedule over `stages`, e.g. greedy eviction's)
/// at `budget` bytes (fixed memory included) by simulated annealing over ejection chains (see
/// the module documentation); a start over the budget is repaired first. The schedule returned
/// fits by the stage accounting of [`crate::staged::stage_peak`]; callers validate it with
/// the simulator.
pub fn anneal(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    start: &StagedSchedule,
    opts: &AnnealOptions,
) -> AnnealOutcome {
    anneal_until(g, budget, stages, start, opts, &Beside::default())
}

/// What [`anneal_until`] shares with a solver running beside it on another thread: the
/// annealing publishes the cost of its best schedule; the solver may stop it, or tell it the
/// cost at which its schedule is good enough (within the gap of a bound it has proved).
#[derive(Debug, Default)]
pub struct Beside {
    /// Set by the solver: end the annealing after the move in progress.
    pub stop: AtomicBool,
    /// `f64` bits of the annealing's best cost (cost units); 0 bits (cost 0) until it starts,
    /// read through [`Beside::best_cost`].
    best: AtomicU64,
    /// `f64` bits of the cost at or below which the annealing ends (0: none set).
    target: AtomicU64,
}

impl Beside {
    /// The annealing's best cost so far (cost units), `None` before its first state.
    pub fn best_cost(&self) -> Option<f64> {
        let bits = self.best.load(Ordering::Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    /// Ends the annealing once its best cost is at most `cost` (cost units).
    pub fn set_target(&self, cost: f64) {
        self.target.store(cost.to_bits(), Ordering::Relaxed);
    }

    fn publish(&self, cost: f64) {
        // A zero cost would read as "none"; no schedule of a non-empty graph costs 0 unless
        // every node is free, and then any schedule is optimal.
        self.best
            .store(cost.max(f64::MIN_POSITIVE).to_bits(), Ordering::Relaxed);
    }

    /// Whether the annealing should end now.
    fn done(&self) -> bool {
        let target = self.target.load(Ordering::Relaxed);
        self.stop.load(Ordering::Relaxed)
            || (target != 0
                && self
                    .best_cost()
                    .is_some_and(|c| c <= f64::from_bits(target)))
    }
}

/// [`anneal`] beside another solver ([`Beside`]): publishes its best cost after each
/// improvement, and ends, after the move in progress, once the solver sets `stop` or the best
/// cost reaches the solver's target.
pub fn anneal_until(
    g: &Graph,
    budget: u64,
    stages: &[RangeInclusive<usize>],
    start: &StagedSchedule,
    opts: &AnnealOptions,
    beside: &Beside,
) -> AnnealOutcome {
    let clock = Instant::now();
    let budget = budget as i128;
    let mut st = RepairState::new(g, stages, &start.s);
    let mean_c = (g.total_cost() / g.len() as f64).max(1e-9);
    let cooling = Cooling {
        t0: T_START * mean_c,
        t1: T_END * mean_c,
        limit_s: opts.time_limit_s.max(1e-9),
        max_moves: opts.max_moves,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut out = AnnealOutcome {
        best: None,
        moves: 0,
        accepted: 0,
        best_move: 0,
        restarts: 0,
        time_s: 0.0,
    };
    if !repair_in_place(&mut st, budget, None) {
        out.time_s = clock.elapsed().as_secs_f64();
        return out;
    }
    let mut cost = st.total_cost();
    out.best = Some((st.schedule(), cost));
    beside.publish(cost);
    // The move count and time at which the current cooling schedule started.
    let mut round = (0, 0.0);
    while !beside.done() {
        let elapsed = clock.elapsed().as_secs_f64();
        let temp = match cooling.temperature(out.moves - round.0, round.1, elapsed) {
            Some(t) => t,
            None if cooling.restart(elapsed) => {
                // Time is left after the schedule ended: cool again from the best state.
                let best = &out.best.as_ref().expect("set above").0;
                st = RepairState::new(g, stages, &best.s);
                cost = st.total_cost();
                out.restarts += 1;
                round = (out.moves, elapsed);
                continue;
            }
            None => break,
        };
        let recomputed = recomputations(&st);
        if recomputed.is_empty() {
            break;
        }
        out.moves += 1;
        let (y, i) = recomputed[rng.random_range(0..recomputed.len())];
        let Some(c1) = eject(&mut st, budget, (y, i), |c1| {
            c1 <= cost || rng.random::<f64>() < (-(c1 - cost) / temp).exp()
        }) else {
            continue;
        };
        out.accepted += 1;
        cost = c1;
        if out.best.as_ref().is_none_or(|b| cost < b.1 - 1e-9) {
            out.best = Some((st.schedule(), cost));
            out.best_move = out.moves;
            beside.publish(cost);
        }
    }
    out.time_s = clock.elapsed().as_secs_f64();
    out
}

/// The temperature schedule of [`anneal`]: geometric from `t0` to `t1` (cost units) over the
/// progress of one cooling round; rounds restart while time is left.
struct Cooling {
    t0: f64,
    t1: f64,
    /// Wall-clock limit, seconds (positive).
    limit_s: f64,
    /// [`AnnealOptions::max_moves`].
    max_moves: Option<u64>,
}

impl Cooling {
    /// The temperature after `moves` moves and `elapsed` seconds of a round that started
    /// `since` seconds into the run (`elapsed` counted from the run's start); `None` when the
    /// round is over (the time limit, or the end of its schedule). Progress is by moves under a
    /// move limit (deterministic), else by moves or by the time the round has left when it
    /// started, whichever is further along.
    fn temperature(&self, moves: u64, since: f64, elapsed: f64) -> Option<f64> {
        let by_moves = moves as f64 / self.max_moves.unwrap_or(MOVES).max(1) as f64;
        let progress = match self.max_moves {
            Some(_) => by_moves,
            None => by_moves.max((elapsed - since) / (self.limit_s - since).max(1e-9)),
        };
        if elapsed >= self.limit_s || progress >= 1.0 {
            return None;
        }
        Some(self.t0 * (self.t1 / self.t0).powf(progress))
    }

    /// Whether a new round starts after one ended `elapsed` seconds into the run: without a
    /// move limit, while at least [`MIN_ROUND_S`] is left.
    fn restart(&self, elapsed: f64) -> bool {
        self.max_moves.is_none() && self.limit_s - elapsed >= MIN_ROUND_S
    }
}

/// The recomputations of the state's schedule: `(stage, node)` for each node a stage computes
/// before its own nodes.
fn recomputations(st: &RepairState) -> Vec<(usize, usize)> {
    st.stages
        .iter()
        .enumerate()
        .flat_map(|(y, sy)| {
            let r = &st.r[y];
            (0..*sy.start()).filter(move |&i| r[i]).map(move |i| (y, i))
        })
        .collect()
}

/// The ejection-chain move on recomputation `(y, i)`: keep `i` resident from the last stage
/// before `y` at whose end it is present through stage `y`, then repair the stages over the
/// budget without dropping `i` ([`repair_in_place`]). When the end state fits and `accept`
/// takes its total cost, keeps it and returns that cost; otherwise restores the state and
/// returns `None` (also when no earlier stage has `i`).
fn eject(
    st: &mut RepairState,
    budget: i128,
    (y, i): (usize, usize),
    accept: impl FnOnce(f64) -> bool,
) -> Option<f64> {
    // The last stage before `y` at whose end `i` is present (its own stage at the latest).
    let x = (0..y).rev().find(|&x| st.s[x][i] || st.r[x][i])?;
    let saved = (st.s.clone(), st.r.clone(), st.peak.clone(), st.cost.clone());
    // Stages x+1..y-1 neither hold nor read `i`: the run's compute sets do not change.
    if y > x + 1 {
        st.set_run(i, x + 1, y - 1, true, true);
    } else {
        st.set_cell(y, i, true);
    }
    let fits = repair_in_place(st, budget, Some(i));
    let c1 = st.total_cost();
    if fits && accept(c1) {
        return Some(c1);
    }
    (st.s, st.r, st.peak, st.cost) = saved;
    None
}

/// Drops at the worst stage until every stage fits (never `tabu`), then puts back the dropped
/// runs that still fit. Returns whether every stage fits.
fn repair_in_place(st: &mut RepairState, budget: i128, tabu: Option<usize>) -> bool {
    let tabu: Vec<usize> = tabu.into_iter().collect();
    let mut dropped = Vec::new();
    for _ in 0..4 * st.g.len() {
        match st.drop_step(budget, EXACT, &tabu) {
            Some(Some(d)) => dropped.push(d),
            Some(None) => {
                st.restore(budget, &mut dropped);
                return true;
            }
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::checkpoint_all;
    use crate::layered::test_graph;
    use crate::sim::simulate;
    use crate::staged::{greedy_best, model_stages};

    #[test]
    fn annealed_schedules_fit_and_never_cost_more_than_the_start() {
        let mut improved = 0;
        let mut checked = 0;
        for seed in [1, 2, 3] {
            let g = test_graph(60, seed);
            let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
            for f in [0.8, 0.65] {
                let budget = g.working_set_bound().max((peak as f64 * f) as u64);
                let (stages, _) = model_stages(&g, budget, 1);
                let Some((start, start_sim)) = greedy_best(&g, budget, &stages) else {
                    continue;
                };
                checked += 1;
                let opts = AnnealOptions {
                    time_limit_s: 60.0,
                    seed: 7,
                    max_moves: Some(300),
                };
                let out = anneal(&g, budget, &stages, &start, &opts);
                let (sch, cost) = out.best.expect("the start fits");
                let sim = simulate(&g, &sch.expand(&g)).expect("a valid schedule");
                assert!(sim.peak_mem <= budget, "seed {seed} f {f}: over the budget");
                assert!(
                    (sim.cost - cost).abs() < 1e-6,
                    "stage costs add up to the simulation"
                );
                assert!(cost <= start_sim.cost + 1e-9);
                improved += usize::from(cost < start_sim.cost - 1e-9);
                // Same seed, same move limit: same schedule.
                let again = anneal(&g, budget, &stages, &start, &opts);
                assert_eq!(again.best.map(|b| b.0), Some(sch));
            }
        }
        assert!(
            checked >= 4,
            "only {checked} budgets with a greedy schedule"
        );
        assert!(improved >= 1, "annealing never improved on greedy eviction");
    }

    /// A greedy start with recomputations: the first 60-node test graph and budget (0.65 or
    /// 0.8 of its checkpoint-all peak) where greedy eviction fits and recomputes.
    fn tight_start() -> (Graph, u64, StagedSchedule) {
        for seed in [1, 2, 3] {
            let g = test_graph(60, seed);
            let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
            for f in [0.65, 0.8] {
                let budget = g.working_set_bound().max((peak as f64 * f) as u64);
                let (stages, _) = model_stages(&g, budget, 1);
                if let Some((start, sim)) = greedy_best(&g, budget, &stages) {
                    if sim.cost > g.total_cost() {
                        return (g, budget, start);
                    }
                }
            }
        }
        panic!("no test graph with a recomputing greedy schedule");
    }

    #[test]
    fn time_left_after_the_schedule_restarts_it_from_the_best_state() {
        // The schedule itself, free of the machine's speed: a round ends after MOVES moves or
        // at the time limit; the next starts hot while MIN_ROUND_S is left.
        let cooling = Cooling {
            t0: 3.0,
            t1: 0.03,
            limit_s: 10.0,
            max_moves: None,
        };
        assert_eq!(cooling.temperature(0, 0.0, 0.0), Some(3.0));
        assert_eq!(
            cooling.temperature(MOVES, 0.0, 2.0),
            None,
            "the round's moves are done"
        );
        assert!(cooling.restart(2.0) && !cooling.restart(10.0 - MIN_ROUND_S / 2.0));
        // A round that starts at 2 s cools over the 8 s left: hot at its start, halfway (in
        // log temperature) at 6 s.
        assert_eq!(cooling.temperature(0, 2.0, 2.0), Some(3.0));
        let mid = cooling.temperature(0, 2.0, 6.0).unwrap();
        assert!((mid - 0.3).abs() < 1e-9, "{mid}");
        assert_eq!(cooling.temperature(0, 2.0, 10.0), None, "the time limit");
        // Under a move limit no round follows the first.
        let limited = Cooling {
            max_moves: Some(200),
            ..cooling
        };
        assert!(!limited.restart(2.0));

        // A run: whatever its rounds, the best state fits and costs no more than the start.
        let (g, budget, start) = tight_start();
        let start_cost = simulate(&g, &start.expand(&g)).unwrap().cost;
        let opts = AnnealOptions {
            time_limit_s: 4.0,
            seed: 3,
            max_moves: None,
        };
        let out = anneal(&g, budget, &start.stages, &start, &opts);
        assert!(
            out.restarts == 0 || out.moves > MOVES,
            "a restart after a whole round"
        );
        let (sch, cost) = out.best.expect("the start fits");
        let sim = simulate(&g, &sch.expand(&g)).unwrap();
        assert!(sim.peak_mem <= budget && (sim.cost - cost).abs() < 1e-6);
        assert!(cost <= start_cost + 1e-9);
        // Under a move limit there is no restart: the run is the seed's alone.
        let limited = AnnealOptions {
            max_moves: Some(200),
            ..opts
        };
        let once = anneal(&g, budget, &start.stages, &start, &limited);
        assert_eq!((once.restarts, once.moves), (0, 200));
    }

    #[test]
    fn a_set_stop_flag_ends_the_annealing_before_its_first_move() {
        let (g, budget, start) = tight_start();
        let opts = AnnealOptions {
            time_limit_s: 60.0,
            seed: 0,
            max_moves: None,
        };
        let beside = Beside::default();
        beside.stop.store(true, Ordering::Relaxed);
        let out = anneal_until(&g, budget, &start.stages, &start, &opts, &beside);
        assert!(beside.best_cost().is_some_and(|c| c > 0.0));
        // Ended before its first move (the move count, not the clock: any machine speed).
        assert_eq!(out.moves, 0);
        // No move: the start with its recomputation made minimal, which fits.
        let (sch, cost) = out.best.expect("the start fits");
        let sim = simulate(&g, &sch.expand(&g)).unwrap();
        assert!(sim.peak_mem <= budget && (sim.cost - cost).abs() < 1e-6);
        assert!(cost <= simulate(&g, &start.expand(&g)).unwrap().cost + 1e-6);
        assert_eq!(
            beside.best_cost(),
            Some(cost),
            "the start's cost is published"
        );
    }

    #[test]
    fn a_target_the_best_cost_reaches_ends_the_annealing() {
        let (g, budget, start) = tight_start();
        let opts = AnnealOptions {
            time_limit_s: 60.0,
            seed: 0,
            max_moves: Some(300),
        };
        let free = anneal(&g, budget, &start.stages, &start, &opts);
        let (_, free_cost) = free.best.expect("the start fits");
        // A target the start already meets: no move.
        let met = Beside::default();
        met.set_target(2.0 * g.total_cost() * g.len() as f64);
        let out = anneal_until(&g, budget, &start.stages, &start, &opts, &met);
        assert_eq!(out.moves, 0);
        // A target below any schedule's cost: the run is the one without a solver beside it.
        let unmet = Beside::default();
        unmet.set_target(0.5 * g.total_cost());
        let out = anneal_until(&g, budget, &start.stages, &start, &opts, &unmet);
        assert_eq!((out.moves, out.best.map(|b| b.1)), (300, Some(free_cost)));
        assert_eq!(unmet.best_cost(), Some(free_cost));
    }
}
