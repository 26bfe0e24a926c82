//! memwall: reproduces, measures and publishes the experiments of the memory-wall literature for
//! deep-learning training (activation checkpointing and rematerialization, precision, kernel
//! fusion, optimizer-step fusion, memory planning, sharding).
//!
//! Data flows one way (see `../shared/DESIGN.md`, section 3):
//! experiment file ([`spec`]) -> jobs -> runner ([`train`], one process per job) -> records
//! ([`results`]) -> polars aggregation -> figures + templates ([`report`]).

pub mod autodiff_example;
pub mod data;
pub mod demos;
pub mod device;
pub mod driver;
pub mod error;
pub mod measure;
pub mod model;
pub mod remat;
pub mod report;
pub mod results;
pub mod spec;
pub mod studies;
pub mod train;

pub use error::{Error, Result};

/// The Burn version memwall is built against (pinned in `pipeline/Cargo.toml`).
pub const BURN_VERSION: &str = "0.21.0";

/// Sends `tracing` logs to stderr (stdout carries the commands' results), with colors only on
/// a terminal; the filter comes from `MEMWALL_LOG` (default `info`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMWALL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}
