//! memwall: reproduces, measures and publishes the experiments of the memory-wall literature for
//! deep-learning training (activation checkpointing and rematerialization, precision, kernel
//! fusion, optimizer-step fusion, memory planning, sharding).
//!
//! Data flows one way (see `../shared/DESIGN.md`, section 3):
//! experiment file ([`spec`]) -> jobs -> runner ([`train`], one process per job) -> records
//! ([`results`]) -> polars aggregation -> figures + templates ([`report`]).
//!
//! This crate is the top of the workspace: the driver, the in-process studies, the analysis
//! (polars), the report sinks and the CLI. It builds on `memwall-core` (data), `memwall-remat`
//! (planners) and `memwall-runner` (the Burn training job), and re-exports their modules under
//! the names the pipeline uses; none of them depends on this crate.

#![warn(missing_docs)]

pub mod attribution;
pub mod autodiff_example;
pub mod bundle;
pub mod data;
pub mod demos;
pub mod driver;
pub mod estimate;
pub mod nightly;
pub mod plan_cmd;
pub mod publish;
pub mod reference;
pub mod reference_cmd;
pub mod report;
pub mod results;
pub mod schedule;
pub mod search;
pub mod slurm;
pub mod stats;
pub mod studies;

pub use memwall_core::{error, spec, strategy};
pub use memwall_core::{Error, Result};
pub use memwall_runner::{device, init_logging, measure, model, train, BURN_VERSION};

/// Fixtures shared by the crate's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::device::BackendKind;
    use crate::spec::{JobSpec, PreparedData, Profile, Study};
    use std::path::Path;

    /// `experiments/peak_memory.toml` at its `full` profile and its CUDA jobs, on a stand-in
    /// tokenized corpus (vocabulary 3025, as the shared data's).
    pub fn peak_memory_full() -> (Study, Vec<JobSpec>) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/peak_memory.toml");
        let study = Study::load(&path, Profile::Full, None).unwrap();
        let data = PreparedData {
            dir: "data/x".into(),
            fingerprint: "x".into(),
            vocab_size: 3025,
            eos_id: 0,
        };
        let jobs = study.jobs(BackendKind::Cuda, 0, &study.one_corpus(data));
        (study, jobs)
    }
}

/// Rematerialization planning ([`memwall_remat`]) and the Checkmate study built on it.
pub mod remat {
    pub use memwall_remat::*;
    pub mod study;
    pub use study::{run_study, CheckmateParams};
}
