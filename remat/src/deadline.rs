//! One wall-clock limit for a whole planning command, and the record of how each stage used
//! its share: `memwall plan --time-limit T` gives every stage (the baselines, the bound, the
//! annealing, the LP rounding, the MILP) at most what is left of `T` seconds counted from the
//! command's start, and reports per stage the seconds it took, the seconds it was given and
//! whether it stopped at that limit (was cut short).
//!
//! May import: serde.

use serde::Serialize;
use std::time::Instant;

/// A deadline: `limit_s` seconds after `start`.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    start: Instant,
    limit_s: f64,
}

impl Deadline {
    /// A deadline `limit_s` seconds from now.
    pub fn new(limit_s: f64) -> Deadline {
        Deadline::from(Instant::now(), limit_s)
    }

    /// A deadline `limit_s` seconds after `start`.
    pub fn from(start: Instant, limit_s: f64) -> Deadline {
        Deadline { start, limit_s }
    }

    /// The whole limit, seconds.
    pub fn limit_s(&self) -> f64 {
        self.limit_s
    }

    /// Seconds since the start.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Seconds left (0 once the deadline has passed).
    pub fn left(&self) -> f64 {
        (self.limit_s - self.elapsed()).max(0.0)
    }

    /// Seconds a stage may use: `share` of the whole limit, at most what is left.
    pub fn share(&self, share: f64) -> f64 {
        (self.limit_s * share).min(self.left())
    }
}

/// A stage of the staged planner ([`crate::staged::solve_staged`] and
/// [`crate::plan::plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanStage {
    /// The baseline schedules that warm-start the solvers (checkpoint-all, sqrt(n), Chen's
    /// greedy, revolve, greedy eviction).
    Baselines,
    /// Greedy eviction at the staged model's granularity ([`crate::staged::greedy_best`]).
    GreedyEviction,
    /// The boundary-memory relaxation's cutting-plane LP and integer rounds
    /// ([`crate::boundary::boundary_bound`]).
    BoundaryRelaxation,
    /// The windowed boundary relaxation ([`crate::boundary::window_bound`]), the bound of
    /// graphs too large for the whole relaxation.
    WindowBound,
    /// Simulated annealing ([`crate::anneal::anneal`]).
    Anneal,
    /// The staged model's LP relaxation and its rounding.
    LpRounding,
    /// The staged MILP (grouped stages, or one node per stage).
    Milp,
    /// The one-node-per-stage MILP after a grouped one ([`crate::staged::solve_refined`]).
    RefineMilp,
}

impl PlanStage {
    /// The name printed by `memwall plan`.
    pub fn name(self) -> &'static str {
        match self {
            PlanStage::Baselines => "baselines",
            PlanStage::GreedyEviction => "greedy eviction",
            PlanStage::BoundaryRelaxation => "boundary relaxation",
            PlanStage::WindowBound => "window bound",
            PlanStage::Anneal => "annealing",
            PlanStage::LpRounding => "LP rounding",
            PlanStage::Milp => "MILP",
            PlanStage::RefineMilp => "refined MILP",
        }
    }
}

/// How one stage used its share of the time limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageTime {
    /// The stage.
    pub stage: PlanStage,
    /// Wall time it took, seconds (model construction included).
    pub seconds: f64,
    /// Seconds it was given (`None`: not limited, e.g. the baselines).
    pub limit_s: Option<f64>,
    /// Whether it stopped at its limit (cut short) rather than finishing: a solver at its time
    /// limit, annealing before its move schedule ended, a bound with windows left unsolved.
    pub at_limit: bool,
}

impl StageTime {
    /// A stage that started at `since` and ends now.
    pub fn since(stage: PlanStage, since: Instant, limit_s: Option<f64>, at_limit: bool) -> Self {
        StageTime {
            stage,
            seconds: since.elapsed().as_secs_f64(),
            limit_s,
            at_limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_never_exceed_what_is_left() {
        let past = Instant::now() - std::time::Duration::from_secs(5);
        let d = Deadline::from(past, 8.0);
        assert!(d.left() <= 3.0 && d.left() > 2.5, "{}", d.left());
        assert!(d.share(0.25) <= 2.0 + 1e-9);
        let left = d.left();
        let all = d.share(1.0);
        assert!(all <= left + 1e-9 && all > 2.5, "share {all}, left {left}");
        let half = Deadline::from(past, 4.0);
        assert_eq!(half.left(), 0.0, "4 s have passed after 5 s");
        assert_eq!(half.share(0.1), 0.0);
    }
}
