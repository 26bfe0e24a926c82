//! Planning memwall's transformer for a memory budget with the plans its segment executor runs
//! exactly: the exact dynamic program of [`memwall_core::segment_plan`], re-exported here with
//! the rest of memwall's planners. It lives in `memwall-core` so that the slim runner carried to
//! GPU machines plans Checkmate configurations itself.

pub use memwall_core::segment_plan::*;

impl From<PlanError> for super::RematError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Infeasible {
                budget_bytes,
                smallest_feasible_bytes,
                status,
            } => super::RematError::Infeasible {
                budget_bytes,
                smallest_feasible_bytes,
                status,
            },
            PlanError::Params(m) => super::RematError::Params(m),
        }
    }
}
