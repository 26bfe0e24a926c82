//! memwall: reproduces, measures and publishes the experiments of the memory-wall literature for
//! deep-learning training (activation checkpointing and rematerialization, precision, kernel
//! fusion, optimizer-step fusion, memory planning, sharding).
//!
//! Data flows one way (`docs/src/contributor/architecture.md`): experiment file ([`spec`]) ->
//! jobs ([`driver`]) -> runner ([`train`], one process per job) -> records ([`results`]) ->
//! analysis over polars -> figures and pages ([`report`]). Each stage is a crate whose arrows
//! run one way:
//!
//! | crate | what it holds |
//! |---|---|
//! | `memwall-core` | experiment spec, records' data, the memory planner |
//! | `memwall-document` | the report's content model, the glance rows, units |
//! | `memwall-remat` | rematerialization: graph IR, baselines, MILP and LP solvers |
//! | `memwall-runner` | the Burn training job (`memwall-job`), devices, measurement |
//! | `memwall-report` | the record store, analysis, training sections, the sinks |
//! | `memwall-studies` | the in-process studies and their registry, one module each |
//! | `memwall-driver` | a study's jobs, the sweep, the report assembled from its records |
//! | `memwall-lab` | bundles, the PyTorch reference, Slurm, the nightly, scheduler files |
//! | `memwall` (this) | the CLI, one module per subcommand ([`cli`]) |
//!
//! This library gives the stage crates one name (as `burn` does for `burn-*`), so that scripts
//! and tests write `memwall::report` rather than `memwall_report`.

#![warn(missing_docs)]

pub mod cli;

pub use memwall_core::{error, spec, strategy, Error, Result};
pub use memwall_driver::{self as driver, data};
pub use memwall_lab::{bundle, estimate, git, install, nightly, reference_cpu, slurm};
pub use memwall_remat as remat;
pub use memwall_report::{self as report, publish, reference, results, source_check, stats};
pub use memwall_runner::{device, init_logging, measure, model, train, BURN_VERSION};
pub use memwall_studies::{self as studies, largest_input};
