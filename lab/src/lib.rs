//! memwall-lab: the operations around the pipeline. GPU bundles ([`bundle`]: export, import, the
//! run script), the PyTorch twin re-measured on this CPU ([`twin_cpu`]), expected
//! device time ([`estimate`]), studies as Slurm job arrays ([`slurm`]), the nightly (run, history,
//! change detection and page: [`nightly`]) and its scheduler files ([`install`]).
//!
//! May import: `memwall-driver` (a study's jobs and sweep), `memwall-studies`, `memwall-report`,
//! `memwall-document`, `memwall-core`, `memwall-runner`. Inside the crate the arrows run one
//! way (`a -> b`: a uses b; `just structure --print`): [`bundle`] -> [`estimate`], [`git`],
//! [`install`]; [`nightly`] -> [`bundle`], [`git`], [`slurm`]; [`slurm`] -> [`install`].

#![warn(missing_docs)]

pub mod bundle;
pub mod estimate;
pub mod git;
pub mod install;
pub mod nightly;
pub mod slurm;
pub mod twin_cpu;

use memwall_core::record;
use memwall_core::{error, spec, Error};
use memwall_document as document;
use memwall_driver as driver;
use memwall_report as report;
use memwall_report::analysis::{self, stats};
#[cfg(test)]
use memwall_report::test_support;
use memwall_report::twin;
use memwall_runner::device;
use memwall_studies as studies;
