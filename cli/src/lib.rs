//! memwall: reproduces, measures and publishes the experiments of the memory-wall literature for
//! deep-learning training (activation checkpointing and rematerialization, precision, kernel
//! fusion, optimizer-step fusion, memory planning, sharding).
//!
//! Data flows one way (`docs/src/contributor/architecture.md`): experiment file
//! (`memwall_core::spec`) -> jobs (`memwall_driver`) -> runner (`memwall-job`, one process per
//! job) -> records (`memwall_core::record`) -> analysis over polars (`memwall_report::analysis`)
//! -> sections (`memwall_report::sections`, `memwall_studies`) -> figures and pages
//! (`memwall_report::sinks`). Each stage is a crate whose arrows run one way:
//!
//! | crate | what it holds |
//! |---|---|
//! | `memwall-core` | experiment spec, records' data, the memory planner |
//! | `memwall-document` | the report's content model, the glance rows, units |
//! | `memwall-remat` | rematerialization: graph IR, baselines, MILP and LP solvers |
//! | `memwall-runner` | the Burn training job (`memwall-job`), devices, measurement |
//! | `memwall-report` | analysis over the records, the training sections, the sinks |
//! | `memwall-studies` | the in-process studies and their registry, one module each |
//! | `memwall-driver` | a study's jobs, the sweep, the report assembled from its records |
//! | `memwall-lab` | bundles, the PyTorch twin, Slurm, the nightly, scheduler files |
//! | `memwall` (this) | the command line: one module per subcommand in the binary, [`plan`]'s tables in the library |
//!
//! The library holds what `memwall plan` prints ([`plan`]); tests and scripts name the stage
//! crates themselves (`memwall_driver`, `memwall_report`, ...).

#![warn(missing_docs)]

pub mod plan;
