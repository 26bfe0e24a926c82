//! Tensor rematerialization planning after Checkmate (Jain et al., "Checkmate: Breaking the
//! Memory Wall with Optimal Tensor Rematerialization", MLSys 2020).
//!
//! * [`graph`]: the data-flow graph IR (forward and backward ops, compute cost in the graph's
//!   cost units, output sizes in bytes) and readers for the benchmark graph files.
//! * [`sim`]: the schedule simulator: checks a schedule `(R, S)` against the constraints of the
//!   paper's Section 4 and computes its compute cost (eq. 1a) and peak memory (eq. 2–4).
//! * [`baselines`]: checkpoint-all, Chen et al. sqrt(n) and greedy, Griewank's revolve.
//! * [`milp`]: the Checkmate MILP (Section 4) and its LP relaxation with two-phase rounding
//!   (Section 5), solved with HiGHS.
//! * [`study`]: the report sections (overhead vs budget, maximum batch size, solve times).

// The schedule code indexes stage x node matrices (R, S, U) by the paper's `t`, `i`, `k`.
#![allow(clippy::needless_range_loop)]

pub mod baselines;
pub mod graph;
pub mod milp;
pub mod sim;
pub mod study;

pub mod execute;
pub use graph::{Graph, Node};
pub use sim::{simulate, Schedule, SimResult};
pub use study::{run_study, CheckmateParams};

use std::path::PathBuf;

/// Errors of the rematerialization planner. File errors name the file.
#[derive(Debug, thiserror::Error)]
pub enum RematError {
    /// The graph file could not be read.
    #[error("cannot read graph file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The graph file is not valid JSON or does not match either node-link schema.
    #[error("cannot parse graph file {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The graph file parsed but its content is inconsistent (unknown node ids, cycles, ...).
    #[error("invalid graph in {path}: {msg}")]
    Schema { path: PathBuf, msg: String },
    /// A graph built in code is inconsistent.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
    /// A schedule violates a constraint of the Checkmate formulation.
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
    /// The MILP/LP solver failed (HiGHS error status).
    #[error("solver error: {0}")]
    Solver(String),
    /// Study parameters are unusable.
    #[error("invalid parameters: {0}")]
    Params(String),
}
