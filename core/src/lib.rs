//! memwall-core: memwall's data, shared by every stage and carried to GPU machines.
//!
//! - [`spec`]: experiment files (TOML) -> validated studies -> jobs, each with a content key;
//! - [`strategy`]: memory strategies and plans as data (segments, attention, block costs);
//! - [`segment_memory`]: the segment executor's memory model (what a plan holds, predicted from
//!   measured per-block costs);
//! - [`segment_plan`]: the exact planner of executable segment plans under a memory budget
//!   (Checkmate's objective over the executor's plans, a dynamic program);
//! - [`budget`]: the block-level knapsack of an activation memory budget;
//! - [`planner`]: the plan stage's one planner, from a job's strategy (and its profiling pass)
//!   to the segment plan the runner executes;
//! - [`record`]: the job record schema and the record store (`runs/<study>/<key>/`);
//! - [`solve_status`]: how a planner's solve ended (HiGHS' statuses and memwall's bounds), typed;
//! - [`measure`]: what a measured number is (its bound, the environment, out-of-memory);
//! - [`device`]: devices and backends as data;
//! - [`timeline`]: the memory timeline of one step and what is live at its peak;
//! - [`units`]: the transformer block as a chain of units, and the policies that say which unit
//!   outputs a recomputed segment keeps (rematerialization inside the block);
//! - [`unit_checkmate`]: Checkmate's objective over every block's units (the exact plan of the
//!   unit executor under a peak budget, with its predicted peak);
//! - [`data_path`], [`datasets`]: where data files are found, and the data manifest
//!   (`datasets.toml`: size, SHA-256 and origin of each data set);
//! - [`error`]: the typed errors every stage returns.
//!
//! This crate is data and the memory model over it (with the executor's exact planner): it
//! depends on serde (JSON, TOML) and hashing only, never on Burn,
//! a solver crate, polars or a renderer. The crates above it: `memwall-document` (the report's
//! content), `memwall-remat` (graph IR and solvers), `memwall-runner` (the Burn training job),
//! `memwall-report` (analysis and sinks), `memwall-studies`, `memwall-driver`, `memwall-lab` and
//! `memwall` (the CLI); `just structure --print` prints the arrows.

#![warn(missing_docs)]

pub mod budget;
pub mod data_path;
pub mod datasets;
pub mod device;
pub mod error;
pub mod json;
pub mod measure;
pub mod nonfinite;
pub mod planner;
pub mod record;
pub mod segment_memory;
pub mod segment_plan;
pub mod solve_status;
pub mod spec;
pub mod strategy;
pub mod timeline;
pub mod unit_checkmate;
pub mod units;

pub use error::{BoxError, Error, Result};
