//! GPU bundles and their import: two stages of the pipeline for a machine without Rust.
//!
//! - [`bundle`] writes one folder (and a `.tar.gz` of it) holding the runner binary, the job
//!   files of one or more studies, their tokenized corpus, the CubeCL kernel and autotune
//!   caches, the PyTorch twin script with its configurations, a `manifest.json` and a
//!   `run.sh`. On the other machine `run.sh` checks the device (and NVRTC for CUDA), runs every
//!   job that has no record yet (one process each, resuming), runs the PyTorch twin when
//!   `python3 -c "import torch"` works, and packs the records into `results.tar.gz`.
//! - [`import`] reads that archive (or the bundle folder itself), checks every record against
//!   the job the local experiment file produces (same key, readable as this memwall's record
//!   schema), and writes the records into the record store (`runs/<study>/<key>/`) through
//!   [`record::write_record`], as the sweep does; PyTorch twin rows go to
//!   `runs/<study>/pytorch/` ([`crate::twin`]). The caller then re-renders the reports.
//!
//! Paths inside the bundle's job files are relative to the bundle folder (`run.sh` starts the
//! runner there), so the folder can be copied anywhere.

pub mod script;
pub mod tiers;

use crate::device::BackendKind;
use crate::driver::{self, Paths};
use crate::record::{self, JobRecord};
use crate::spec::{JobSpec, MemoryPool, Profile, Study, StudyKind, StudyRoles};
use crate::twin::{self, TorchRow};
use memwall_core::record::{JsonError, RecordFileError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Why a bundle could not be written or imported. Every message names the file (or flag) and,
/// where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file or folder could not be read, written, copied, packed or unpacked.
    #[error("{action}: {source}")]
    Io {
        /// What was being done, naming the paths (e.g. "copying a to b").
        action: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A step failed; `action` says which (e.g. "unpacking the autotune cache x.tgz").
    #[error("{action}: {source}")]
    Context {
        /// What was being done.
        action: String,
        /// Why it failed.
        #[source]
        source: Box<BundleError>,
    },
    /// The request or the bundle is refused: what is wrong, naming the file or flag, and the fix.
    #[error("{0}")]
    Refused(String),
    /// The source has no readable `manifest.json`.
    #[error(
        "{path}: {source}; not a memwall bundle or results archive (expected manifest.json at \
         its top, as `memwall bundle` and its run.sh write)"
    )]
    NoManifest {
        /// Where the manifest was looked for.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `manifest.json` does not read as a bundle manifest.
    #[error("{path}: not a bundle manifest ({source})")]
    NotAManifest {
        /// The manifest file.
        path: PathBuf,
        /// The JSON field at fault, line and column.
        #[source]
        source: JsonError,
    },
    /// A bundle file (job, plan, record) does not serialize.
    #[error("serializing a bundle file: {0}")]
    Serialize(#[from] serde_json::Error),
    /// An experiment file, corpus, job expansion or record store error (naming file and field).
    #[error(transparent)]
    Core(#[from] crate::Error),
    /// A PyTorch twin row that does not read or store (naming the file).
    #[error(transparent)]
    Twin(#[from] twin::TwinError),
    /// A results file (fusion chains run, attribution rows) that does not read (naming the file).
    #[error(transparent)]
    Record(#[from] RecordFileError),
}

type Result<T, E = BundleError> = std::result::Result<T, E>;

/// `Err(BundleError::Refused(..))` with a formatted message.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err(BundleError::Refused(format!($($arg)*)))
    };
}

// The steps, after the macro they use.
mod export;
mod files;
mod import;
mod manifest;
mod resume;

pub use export::*;
pub use files::*;
pub use import::*;
pub use manifest::*;
pub use resume::*;

/// Names what was being done when an I/O step or a bundle step fails.
trait Doing<T> {
    fn doing(self, action: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Doing<T> for std::io::Result<T> {
    fn doing(self, action: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| BundleError::Io {
            action: action(),
            source,
        })
    }
}

impl<T> Doing<T> for Result<T> {
    fn doing(self, action: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| BundleError::Context {
            action: action(),
            source: Box::new(e),
        })
    }
}

/// `format` field of a bundle's `manifest.json`.
pub const MANIFEST_FORMAT: &str = "memwall-bundle/1";
/// Name of the archive `run.sh` packs the records into.
pub const RESULTS_ARCHIVE: &str = "results.tar.gz";
/// Folder (inside the bundle) of the PyTorch twin script, its plan and its results.
const REFERENCE_DIR: &str = "reference";

// The GPU suite (`memwall bundle --suite`, `just gpu-suite`) is named by the experiment files:
// each study's `study.gpu_suite` is its place in the order a GPU session runs them (the first
// matters most when its minutes run out), read by `StudyRoles::discover`; the suite's
// `fusion_ir` study carries its elementwise chains with and without Burn's fusion backend
// (`memwall-job fusion-chains`) and the `kernel_attribution` study its control's operation
// timings.

/// Where run.sh writes the chains' run inside the bundle.
const CHAINS_FILE: &str = "fusion_ir/chains.json";

/// The experiment files of the GPU suite in `experiments`, in suite order (`study.gpu_suite`).
///
/// # Errors
/// Experiment files whose headers do not read ([`StudyRoles::discover`]), or none in the suite.
pub fn suite_experiments(experiments: &Path) -> Result<Vec<PathBuf>> {
    let roles = StudyRoles::discover(experiments)?;
    if roles.suite.is_empty() {
        refuse!(
            "no experiment file in {} has `study.gpu_suite`: the GPU suite is empty (give the \
             studies a GPU session should run their places, 1 first)",
            experiments.display()
        );
    }
    Ok(roles.suite.into_iter().map(|(_, _, path)| path).collect())
}

/// The attribution benchmark's PyTorch script, beside the reference script.
const ATTRIBUTION_SCRIPT: &str = "torch_attribution.py";
/// Expected seconds of the attribution benchmark's Burn side on a GPU: about 30 operations x 2
/// dtypes x 13 timed runs, plus the autotuning of the shapes a warm cache lacks (20-30 s each,
/// docs/src/operations/gpu-runs.md) and one profiled step per dtype; a guess until a GPU run measures it.
const ATTRIBUTION_BURN_S: u64 = 240;
/// Expected seconds of its PyTorch side (cuBLAS and SDPA need no tuning).
const ATTRIBUTION_TORCH_S: u64 = 90;
/// Folder (inside the bundle) of the attribution benchmark's rows.
const ATTRIBUTION_DIR: &str = "attribution";

/// Bytes a device session carries to the GPU machine, the bundle and the repository's working
/// tree together (docs/src/operations/gpu-runs.md).
pub const CARRY_LIMIT_BYTES: u64 = 64 << 20;

/// The committed CubeCL autotune cache, beside the record store (`gpu-cache/cubecl` for
/// `runs/`): the tunings of every GPU run imported so far (`autotune/<cubecl version>/<device
/// folder>/*.json.log`), carried by every bundle so that a GPU job starts in seconds rather than
/// the 41-159 s of cold tuning (docs/src/operations/gpu-runs.md). Compiled kernels are not kept: they are
/// large (83 MB for 13 configurations) and NVRTC recompiles them in seconds.
pub fn autotune_store(runs: &Path) -> PathBuf {
    runs.parent()
        .unwrap_or(Path::new(""))
        .join("gpu-cache")
        .join("cubecl")
}

/// The minutes one command of a GPU session may run, with a margin for the machine's transfers
/// (a command runs at most 10 minutes, a session has 15 device minutes with the machine's start
/// of 2-4 minutes; docs/src/operations/gpu-runs.md): a CUDA bundle's `run.sh` stops before them unless
/// `--minutes` says otherwise.
pub const SUITE_MINUTES: f64 = 9.0;

#[cfg(test)]
mod tests;
