//! The study driver: experiment file -> prepared data -> plan stage -> one process per job ->
//! records -> analysis -> report. A finished job's record is never recomputed unless asked (`force`), a
//! crashed job costs only itself, and a killed sweep resumes where it stopped.
//!
//! May import: `memwall-studies` (the in-process studies and the largest-input search),
//! `memwall-report` (records, analysis, report sinks), `memwall-core`, `memwall-runner`; never
//! the lab.

#![warn(missing_docs)]

mod assemble;
pub mod data;
mod jobs;
mod slots;
mod sweep;

pub use assemble::*;
pub use jobs::*;
pub use slots::*;
pub use sweep::*;

use memwall_core::record::{self, JobRecord, JobStatus};
use memwall_core::{error, spec};
use memwall_document as document;
use memwall_report::analysis;
use memwall_report::{self as report, Rendered, ReportDoc};
use memwall_runner::device::{self, BackendKind, DeviceRequest, ResolvedDevice};
use memwall_studies as studies;

use crate::error::{Error, Result};
use crate::spec::{JobSpec, Profile, Study, StudyKind, StudyOutline};
use std::path::{Path, PathBuf};

/// The committed evidence: the record store the published reports (`reports/`) are rendered
/// from. Only a maintainer's explicit command writes it (`memwall reproduce --publish`,
/// `memwall import`); `memwall report` renders it.
pub const PUBLISHED_RUNS: &str = "runs";

/// This machine's record store, ignored by git: where `memwall reproduce`, `run`, `sweep` and
/// `export-jobs` write unless told otherwise (its reports go to `<store>/reports`).
pub const LOCAL_RUNS: &str = "target/memwall/runs";

/// Where things live and how to run jobs.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Record store root (`runs/`).
    pub runs: PathBuf,
    /// Tokenized-corpus cache (`.memwall/cache/`).
    pub cache: PathBuf,
    /// Report output root (`reports/`).
    pub reports: PathBuf,
    /// Templates directory (`templates/`).
    pub templates: PathBuf,
    /// The published record store to show beside this one in its reports (this machine's
    /// numbers beside the committed evidence); `None` when `runs` is itself the published
    /// store or there is none.
    pub published: Option<PathBuf>,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            runs: PUBLISHED_RUNS.into(),
            cache: ".memwall/cache".into(),
            reports: "reports".into(),
            templates: "templates".into(),
            published: None,
        }
    }
}

/// The published store to show beside `runs` in its reports: [`PUBLISHED_RUNS`] when `runs` is
/// another store and the published one exists here.
pub fn published_beside(runs: &Path) -> Option<PathBuf> {
    let published = Path::new(PUBLISHED_RUNS);
    (!is_published(runs) && published.is_dir()).then(|| published.to_path_buf())
}

/// Whether `runs` names the published store ([`PUBLISHED_RUNS`]).
pub fn is_published(runs: &Path) -> bool {
    runs == Path::new(PUBLISHED_RUNS) || runs == Path::new("./runs")
}

/// How to run one study.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `None`: `full` on a GPU, `cpu` otherwise.
    pub profile: Option<Profile>,
    /// The device to run on (`--device`: auto, cpu, cuda:N).
    pub device: DeviceRequest,
    /// The CPU backend when the device is the CPU (`--cpu-backend`: flex or ndarray).
    pub cpu_backend: BackendKind,
    /// Replaces the experiment file's data path (`--data`, `MEMWALL_DATA`).
    pub data: Option<PathBuf>,
    /// Rerun jobs that already have a record.
    pub force: bool,
    /// Run only these configurations (all when empty).
    pub only: Vec<String>,
    /// The job runner: a program and the arguments before `--job FILE --out DIR`
    /// (normally this executable and `run-job`).
    pub runner: (PathBuf, Vec<String>),
    /// Show a progress bar.
    pub progress: bool,
    /// CUDA: release the pool's free pages at every step boundary in every job
    /// ([`crate::spec::DeviceSettings::memory_cleanup`]).
    pub memory_cleanup: bool,
    /// CUDA: the memory pool of every job, replacing the configurations' own.
    pub memory_pool: Option<crate::spec::MemoryPool>,
    /// Devices to run jobs on at once (`--devices 0,1,...`): one job per device at a time, a
    /// queue across devices. On CUDA each id is a GPU ordinal and each job process sees only
    /// its GPU (`CUDA_VISIBLE_DEVICES`, so its job says `cuda:0` and keeps the key of a
    /// one-GPU run); on the CPU the ids only name parallel job slots. Every job process gets
    /// `MEMWALL_DEVICE=<backend>:<id>`. Empty: every visible GPU when the device is `auto` and
    /// more than one GPU is visible, else one job at a time on the resolved device.
    pub devices: Vec<String>,
    /// Run only the jobs with these keys (all when empty): one Slurm array task per key.
    pub keys: Vec<String>,
    /// Runs of each configuration, replacing the experiment file's `[study] repeats`.
    pub repeats: Option<usize>,
}
