//! How a planner's solve ended: HiGHS' model status for the MILP and LP solves of
//! `memwall_remat` (Checkmate's MILP, the staged MILP, the boundary relaxation), the bounds that
//! settle a budget without HiGHS (the working-set bound, the boundary relaxation, the sum of
//! node costs), the heuristics' verdict, and the exact dynamic program of
//! [`crate::segment_plan`].
//!
//! Records store a status as its text (`"Optimal"`, `"ReachedTimeLimit"`,
//! `"Infeasible (working-set bound)"`, ...): the text of each variant is the one memwall wrote
//! before statuses were typed (HiGHS' statuses as their Rust `Debug` name), so committed records
//! read unchanged and reports print the same words. A text no variant names reads as
//! [`SolveStatus::Other`] and is written back as it was.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// How a solve ended. Serialized (and displayed) as the text given on each variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SolveStatus {
    /// HiGHS proved the incumbent optimal within the target gap (`"Optimal"`).
    Optimal,
    /// HiGHS stopped at its time limit (`"ReachedTimeLimit"`); the incumbent, if any, is not
    /// proven optimal.
    ReachedTimeLimit,
    /// HiGHS stopped at its iteration limit (`"ReachedIterationLimit"`).
    ReachedIterationLimit,
    /// HiGHS stopped at its solution limit (`"ReachedSolutionLimit"`).
    ReachedSolutionLimit,
    /// HiGHS stopped at its memory limit (`"ReachedMemoryLimit"`).
    ReachedMemoryLimit,
    /// HiGHS was interrupted (`"ReachedInterrupt"`).
    ReachedInterrupt,
    /// HiGHS proved that no solution exists (`"Infeasible"`): no schedule fits the budget.
    Infeasible,
    /// HiGHS found the problem unbounded or infeasible without telling which
    /// (`"UnboundedOrInfeasible"`).
    UnboundedOrInfeasible,
    /// HiGHS found the problem unbounded (`"Unbounded"`).
    Unbounded,
    /// HiGHS reached the objective bound set on it (`"ObjectiveBound"`).
    ObjectiveBound,
    /// HiGHS reached the objective target set on it (`"ObjectiveTarget"`).
    ObjectiveTarget,
    /// HiGHS' status was not set (`"NotSet"`).
    NotSet,
    /// HiGHS could not load the model (`"LoadError"`).
    LoadError,
    /// HiGHS found the model invalid (`"ModelError"`).
    ModelError,
    /// HiGHS' presolve failed (`"PresolveError"`).
    PresolveError,
    /// HiGHS' solve failed (`"SolveError"`).
    SolveError,
    /// HiGHS' postsolve failed (`"PostsolveError"`).
    PostsolveError,
    /// The model had no variables (`"ModelEmpty"`).
    ModelEmpty,
    /// HiGHS reported an unknown status (`"Unknown"`).
    Unknown,
    /// The budget is below the graph's largest single-operation working set, so no schedule
    /// fits; HiGHS was not called (`"Infeasible (working-set bound)"`).
    InfeasibleWorkingSet,
    /// The boundary-memory relaxation, a relaxation of Checkmate's problem, is infeasible at
    /// the budget, so Checkmate's problem is too (`"Infeasible (boundary relaxation)"`; the
    /// staged MILP).
    InfeasibleBoundaryRelaxation,
    /// The staged MILP's best schedule is within the target gap of the boundary relaxation's
    /// bound (`"Optimal (boundary relaxation)"`).
    OptimalBoundaryRelaxation,
    /// The staged MILP's best schedule is within the target gap of the sum of node costs, a
    /// bound for any schedule (`"Optimal (sum of node costs)"`).
    OptimalNodeCostSum,
    /// The segment planner's exact dynamic program found the cheapest executable plan
    /// (`"Optimal (exact dynamic program over executable segment plans)"`).
    OptimalSegmentPlan,
    /// A heuristic (a baseline, greedy eviction or LP rounding) found a schedule that fits the
    /// budget (`"feasible"`); it proves nothing about the optimum.
    Feasible,
    /// A heuristic found no schedule that fits the budget (`"infeasible"`). It proves nothing:
    /// [`SolveStatus::is_infeasible`] is false for it.
    NotFound,
    /// Any other text, e.g. a HiGHS status this memwall does not know, kept as it was read.
    Other(String),
}

/// Every variant but [`SolveStatus::Other`].
const NAMED: [SolveStatus; 26] = [
    SolveStatus::Optimal,
    SolveStatus::ReachedTimeLimit,
    SolveStatus::ReachedIterationLimit,
    SolveStatus::ReachedSolutionLimit,
    SolveStatus::ReachedMemoryLimit,
    SolveStatus::ReachedInterrupt,
    SolveStatus::Infeasible,
    SolveStatus::UnboundedOrInfeasible,
    SolveStatus::Unbounded,
    SolveStatus::ObjectiveBound,
    SolveStatus::ObjectiveTarget,
    SolveStatus::NotSet,
    SolveStatus::LoadError,
    SolveStatus::ModelError,
    SolveStatus::PresolveError,
    SolveStatus::SolveError,
    SolveStatus::PostsolveError,
    SolveStatus::ModelEmpty,
    SolveStatus::Unknown,
    SolveStatus::InfeasibleWorkingSet,
    SolveStatus::InfeasibleBoundaryRelaxation,
    SolveStatus::OptimalBoundaryRelaxation,
    SolveStatus::OptimalNodeCostSum,
    SolveStatus::OptimalSegmentPlan,
    SolveStatus::Feasible,
    SolveStatus::NotFound,
];

impl SolveStatus {
    /// The status's text, as records store it and reports print it.
    pub fn as_str(&self) -> &str {
        match self {
            SolveStatus::Optimal => "Optimal",
            SolveStatus::ReachedTimeLimit => "ReachedTimeLimit",
            SolveStatus::ReachedIterationLimit => "ReachedIterationLimit",
            SolveStatus::ReachedSolutionLimit => "ReachedSolutionLimit",
            SolveStatus::ReachedMemoryLimit => "ReachedMemoryLimit",
            SolveStatus::ReachedInterrupt => "ReachedInterrupt",
            SolveStatus::Infeasible => "Infeasible",
            SolveStatus::UnboundedOrInfeasible => "UnboundedOrInfeasible",
            SolveStatus::Unbounded => "Unbounded",
            SolveStatus::ObjectiveBound => "ObjectiveBound",
            SolveStatus::ObjectiveTarget => "ObjectiveTarget",
            SolveStatus::NotSet => "NotSet",
            SolveStatus::LoadError => "LoadError",
            SolveStatus::ModelError => "ModelError",
            SolveStatus::PresolveError => "PresolveError",
            SolveStatus::SolveError => "SolveError",
            SolveStatus::PostsolveError => "PostsolveError",
            SolveStatus::ModelEmpty => "ModelEmpty",
            SolveStatus::Unknown => "Unknown",
            SolveStatus::InfeasibleWorkingSet => "Infeasible (working-set bound)",
            SolveStatus::InfeasibleBoundaryRelaxation => "Infeasible (boundary relaxation)",
            SolveStatus::OptimalBoundaryRelaxation => "Optimal (boundary relaxation)",
            SolveStatus::OptimalNodeCostSum => "Optimal (sum of node costs)",
            SolveStatus::OptimalSegmentPlan => {
                "Optimal (exact dynamic program over executable segment plans)"
            }
            SolveStatus::Feasible => "feasible",
            SolveStatus::NotFound => "infeasible",
            SolveStatus::Other(text) => text,
        }
    }

    /// The status a text names: the variant whose text it is, else [`SolveStatus::Other`].
    pub fn from_text(text: &str) -> Self {
        NAMED
            .iter()
            .find(|s| s.as_str() == text)
            .cloned()
            .unwrap_or_else(|| SolveStatus::Other(text.to_string()))
    }

    /// Whether the solve proved its schedule optimal (within the target gap): HiGHS'
    /// [`SolveStatus::Optimal`], the staged MILP's `Optimal (...)` statuses and the segment
    /// planner's dynamic program. Compare with [`SolveStatus::Optimal`] for HiGHS' own proof.
    pub fn is_optimal(&self) -> bool {
        matches!(
            self,
            SolveStatus::Optimal
                | SolveStatus::OptimalBoundaryRelaxation
                | SolveStatus::OptimalNodeCostSum
                | SolveStatus::OptimalSegmentPlan
        )
    }

    /// Whether the solve proved that no schedule fits the budget: HiGHS'
    /// [`SolveStatus::Infeasible`], the working-set bound and the boundary relaxation (the
    /// statuses whose text starts with `Infeasible`). False for
    /// [`SolveStatus::UnboundedOrInfeasible`], for a heuristic's [`SolveStatus::NotFound`] and
    /// for [`SolveStatus::Other`].
    pub fn is_infeasible(&self) -> bool {
        matches!(
            self,
            SolveStatus::Infeasible
                | SolveStatus::InfeasibleWorkingSet
                | SolveStatus::InfeasibleBoundaryRelaxation
        )
    }

    /// Whether HiGHS stopped at one of its limits (time, iterations, solutions, memory) before
    /// proving optimality or infeasibility.
    pub fn reached_limit(&self) -> bool {
        matches!(
            self,
            SolveStatus::ReachedTimeLimit
                | SolveStatus::ReachedIterationLimit
                | SolveStatus::ReachedSolutionLimit
                | SolveStatus::ReachedMemoryLimit
        )
    }
}

impl fmt::Display for SolveStatus {
    /// The status's text ([`SolveStatus::as_str`]), honouring width and alignment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for SolveStatus {
    /// The status's text, as a JSON string.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SolveStatus {
    /// Any string: a variant's text, or [`SolveStatus::Other`].
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(SolveStatus::from_text(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant with the text memwall wrote for it before statuses were typed.
    const TODAY: [(SolveStatus, &str); 26] = [
        (SolveStatus::Optimal, "Optimal"),
        (SolveStatus::ReachedTimeLimit, "ReachedTimeLimit"),
        (SolveStatus::ReachedIterationLimit, "ReachedIterationLimit"),
        (SolveStatus::ReachedSolutionLimit, "ReachedSolutionLimit"),
        (SolveStatus::ReachedMemoryLimit, "ReachedMemoryLimit"),
        (SolveStatus::ReachedInterrupt, "ReachedInterrupt"),
        (SolveStatus::Infeasible, "Infeasible"),
        (SolveStatus::UnboundedOrInfeasible, "UnboundedOrInfeasible"),
        (SolveStatus::Unbounded, "Unbounded"),
        (SolveStatus::ObjectiveBound, "ObjectiveBound"),
        (SolveStatus::ObjectiveTarget, "ObjectiveTarget"),
        (SolveStatus::NotSet, "NotSet"),
        (SolveStatus::LoadError, "LoadError"),
        (SolveStatus::ModelError, "ModelError"),
        (SolveStatus::PresolveError, "PresolveError"),
        (SolveStatus::SolveError, "SolveError"),
        (SolveStatus::PostsolveError, "PostsolveError"),
        (SolveStatus::ModelEmpty, "ModelEmpty"),
        (SolveStatus::Unknown, "Unknown"),
        (
            SolveStatus::InfeasibleWorkingSet,
            "Infeasible (working-set bound)",
        ),
        (
            SolveStatus::InfeasibleBoundaryRelaxation,
            "Infeasible (boundary relaxation)",
        ),
        (
            SolveStatus::OptimalBoundaryRelaxation,
            "Optimal (boundary relaxation)",
        ),
        (
            SolveStatus::OptimalNodeCostSum,
            "Optimal (sum of node costs)",
        ),
        (
            SolveStatus::OptimalSegmentPlan,
            "Optimal (exact dynamic program over executable segment plans)",
        ),
        (SolveStatus::Feasible, "feasible"),
        (SolveStatus::NotFound, "infeasible"),
    ];

    #[test]
    fn every_status_round_trips_to_its_text() {
        assert_eq!(TODAY.len(), NAMED.len());
        for (status, text) in &TODAY {
            assert_eq!(status.as_str(), *text);
            assert_eq!(status.to_string(), *text);
            let json = serde_json::to_string(status).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(&serde_json::from_str::<SolveStatus>(&json).unwrap(), status);
            assert_eq!(&SolveStatus::from_text(text), status);
        }
        let texts: std::collections::BTreeSet<&str> = NAMED.iter().map(|s| s.as_str()).collect();
        assert_eq!(texts.len(), NAMED.len(), "two variants share a text");
    }

    #[test]
    fn an_unknown_text_reads_and_writes_back_as_it_was() {
        let json = "\"Infeasible (some bound of the future)\"";
        let s: SolveStatus = serde_json::from_str(json).unwrap();
        assert_eq!(
            s,
            SolveStatus::Other("Infeasible (some bound of the future)".into())
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), json);
        assert!(!s.is_infeasible() && !s.is_optimal() && !s.reached_limit());
    }

    #[test]
    fn display_pads_like_a_string() {
        assert_eq!(format!("{:<10}|", SolveStatus::Optimal), "Optimal   |");
        assert_eq!(format!("{:>10}|", SolveStatus::Feasible), "  feasible|");
    }

    #[test]
    fn the_kinds_of_infeasible_and_optimal() {
        for s in [
            SolveStatus::Infeasible,
            SolveStatus::InfeasibleWorkingSet,
            SolveStatus::InfeasibleBoundaryRelaxation,
        ] {
            assert!(s.is_infeasible() && !s.is_optimal(), "{s}");
        }
        for s in [
            SolveStatus::UnboundedOrInfeasible,
            SolveStatus::NotFound,
            SolveStatus::ReachedTimeLimit,
        ] {
            assert!(!s.is_infeasible(), "{s}");
        }
        assert!(SolveStatus::ReachedTimeLimit.reached_limit());
        assert!(!SolveStatus::Optimal.reached_limit());
        assert!(SolveStatus::OptimalBoundaryRelaxation.is_optimal());
        assert!(!SolveStatus::Feasible.is_optimal());
    }
}
