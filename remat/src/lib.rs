//! memwall-remat: tensor rematerialization planning after Checkmate (Jain et al., "Checkmate: Breaking the
//! Memory Wall with Optimal Tensor Rematerialization", MLSys 2020).
//!
//! * [`graph`]: the data-flow graph IR (forward and backward ops, compute cost in the graph's
//!   cost units, output sizes in bytes) and readers for the benchmark graph files.
//! * [`layered`]: seeded random layered DAGs (the Moccasin benchmark family) of any size.
//! * [`sim`]: the schedule simulator: checks a schedule `(R, S)` against the constraints of the
//!   paper's Section 4 and computes its compute cost (eq. 1a) and peak memory (eq. 2–4).
//! * [`baselines`]: checkpoint-all, Chen et al. sqrt(n) and greedy, Griewank's revolve.
//! * [`milp`]: the Checkmate MILP (Section 4) and its LP relaxation with two-phase rounding
//!   (Section 5), solved with HiGHS.
//! * [`staged`]: the scalable MILP: tight `FREE` linearization, the checkpoint-all prefix as one
//!   stage, optionally fewer stages and bounded recomputation, warm-started by greedy eviction;
//!   lower bounds valid for Checkmate.
//! * `formulation` (crate-private): the one HiGHS model builder of [`milp`], [`staged`] and
//!   [`boundary`]: column maps and Checkmate's constraint families (eq. 1b–1c, 2–4) by name.
//! * [`boundary`]: the boundary-memory relaxation of Checkmate's MILP (one memory row per stage
//!   end, rows generated for overrun recomputation steps): lower bounds and, when its schedule
//!   fits, proven optima.
//! * [`anneal`]: simulated annealing over ejection chains (keep a recomputed value, repair the
//!   stages it overflows), the staged solver's primal heuristic.
//! * [`segment_plan`]: the transformer planned for a memory budget over the segment plans the runner
//!   executes, with the executor's memory model (exact dynamic program).
//! * [`nets`]: ResNet, LSTM and MLP forward graphs built op by op, and the training graph of a
//!   forward graph (one gradient node per op, reading what the op's backward needs).
//! * [`plan`]: one graph, one budget, any solver: what `memwall plan` runs (schedule JSON,
//!   smallest feasible budget).
//! * [`extended_graph`]: reverse-mode AD by extending the computational graph (the CS 498
//!   lecture's `gradient(out)` with `node_to_grad`), differentiable again for second
//!   derivatives, and an executor that runs it in the buffers of a [`memory_plan`] plan.
//! * [`memory_plan`]: static memory planning over an execution order of a graph (liveness
//!   reference counters, in-place, memory sharing; plain, segment-recomputation or Checkmate
//!   orders).
//!
//! May import: `memwall-core` (plan types), serde, HiGHS, rand (the seeded graph generator). The studies that run these solvers and
//! planners and their reports live in `memwall-studies` (`checkmate`, `static_planning`).

#![warn(missing_docs)]
// The schedule code indexes stage x node matrices (R, S, U) by the paper's `t`, `i`, `k`.
#![allow(clippy::needless_range_loop)]

pub mod anneal;
pub mod baselines;
pub mod boundary;
pub mod deadline;
pub mod extended_graph;
mod formulation;
pub mod graph;
pub mod graph_file;
pub mod layered;
pub mod milp;
pub mod sim;
pub mod staged;
pub mod staged_schedule;

pub mod memory_plan;
pub mod nets;
pub mod plan;
pub mod segment_plan;
pub use graph::{Graph, Node, OpKind};
/// How a solve ended (HiGHS' model status or the bound that settled it); defined in
/// `memwall-core` so that the segment planner's plans carry it too.
pub use memwall_core::solve_status::SolveStatus;
pub use sim::{simulate, Schedule, SimResult};

use std::path::PathBuf;

/// Errors of the rematerialization planner. File errors name the file.
#[derive(Debug, thiserror::Error)]
pub enum RematError {
    /// The graph file could not be read.
    #[error("cannot read graph file {path}: {source}")]
    Io {
        /// The graph file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The graph file is not valid JSON or does not match either node-link schema.
    #[error("cannot parse graph file {path}: {source}")]
    Parse {
        /// The graph file that could not be parsed.
        path: PathBuf,
        /// The JSON parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The graph file parsed but its content is inconsistent (unknown node ids, cycles, ...).
    #[error("invalid graph in {path}: {msg}")]
    Schema {
        /// The graph file whose content is inconsistent.
        path: PathBuf,
        /// What is inconsistent (e.g. an unknown node id, a cycle).
        msg: String,
    },
    /// A graph built in code is inconsistent.
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
    /// A schedule violates a constraint of the Checkmate formulation.
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
    /// No schedule fits the budget: `budget_bytes` is below the smallest feasible budget.
    #[error(
        "no schedule fits {budget_bytes} bytes; the smallest feasible budget is \
         {smallest_feasible_bytes} bytes ({status})"
    )]
    Infeasible {
        /// The budget asked for, bytes.
        budget_bytes: u64,
        /// The smallest budget any schedule of the planner's schedule space fits, bytes.
        smallest_feasible_bytes: u64,
        /// How the solver established it.
        status: String,
    },
    /// The MILP/LP solver failed (HiGHS error status).
    #[error("solver error: {0}")]
    Solver(String),
    /// Study parameters are unusable.
    #[error("invalid parameters: {0}")]
    Params(String),
}
