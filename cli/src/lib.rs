//! memwall: reproduces, measures and publishes the experiments of the memory-wall literature for
//! deep-learning training (activation checkpointing and rematerialization, precision, kernel
//! fusion, optimizer-step fusion, memory planning, sharding).
//!
//! Data flows one way (`docs/src/contributor/architecture.md`): experiment file
//! (`memwall_core::spec`) -> jobs (`memwall_driver`) -> runner (`memwall-job`, one process per
//! job) -> records (`memwall_report::results`) -> analysis over polars -> figures and pages
//! (`memwall_report`). Each stage is a crate whose arrows
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
//! The library holds the command line's own modules ([`cli`]); tests and scripts name the stage
//! crates themselves (`memwall_driver`, `memwall_report`, ...).

#![warn(missing_docs)]

pub mod cli;
