//! Studies that are not training sweeps: each runs in-process from its `[params]` table and
//! returns report sections, stored as a record (`runs/<study>/<profile>.sections.json`) so
//! `memwall report` re-renders without re-running.

use crate::demos;
use crate::error::{Error, Result};
use crate::measure::Environment;
use crate::report::model::Section;
use crate::spec::{Study, StudyKind};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The stored result of a non-training study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SectionsRecord {
    pub study: String,
    pub profile: String,
    /// Hash of the study's resolved parameters: a changed file reruns the study.
    pub params_hash: String,
    pub env: Environment,
    pub sections: Vec<Section>,
    /// Wall time of the study, seconds.
    pub wall_s: f64,
    pub finished_at: String,
}

fn params<P: DeserializeOwned>(study: &Study) -> Result<P> {
    P::deserialize(toml::Value::Table(study.params.clone())).map_err(|e| Error::SpecField {
        path: study.path.clone(),
        field: "params".into(),
        message: e.to_string(),
    })
}

fn demo_err(study: &Study) -> impl Fn(demos::DemoError) -> Error + '_ {
    move |e| Error::SpecField {
        path: study.path.clone(),
        field: "params".into(),
        message: e.to_string(),
    }
}

/// Runs a non-training study and returns its sections.
///
/// # Errors
/// [`Error::SpecField`] naming `params` for invalid parameters; the study's own failures.
pub fn run(study: &Study) -> Result<Vec<Section>> {
    let e = demo_err(study);
    match study.header.kind {
        StudyKind::Training => Ok(Vec::new()),
        StudyKind::ScalarCheckpoint => demos::checkpoint::run(&params(study)?).map_err(e),
        StudyKind::FusionIr => demos::fusion::run(&params(study)?).map_err(e),
        StudyKind::StaticPlanning => demos::planner::run(&params(study)?).map_err(e),
        StudyKind::TwoBufferInference => demos::inference::run(&params(study)?).map_err(e),
        StudyKind::SixteenBit => demos::precision::run(&params(study)?).map_err(e),
        StudyKind::Fsdp => demos::fsdp::run(&params(study)?).map_err(e),
        StudyKind::AutodiffExample => crate::autodiff_example::run(),
        StudyKind::Checkmate => {
            let data = shared_data_dir(study);
            crate::remat::run_study(&params(study)?, &data).map_err(|e| Error::SpecField {
                path: study.path.clone(),
                field: "params".into(),
                message: e.to_string(),
            })
        }
    }
}

/// The data directory of a study: its `params.data_dir` resolved against the workspace root,
/// `MEMWALL_SHARED_DATA`, or `../shared/data` beside the workspace.
fn shared_data_dir(study: &Study) -> PathBuf {
    if let Some(d) = std::env::var_os("MEMWALL_SHARED_DATA") {
        return PathBuf::from(d);
    }
    Study::base_dir(&study.path).join("../shared/data")
}

/// Where a study's sections record lives.
pub fn record_path(runs: &Path, study: &Study) -> PathBuf {
    runs.join(&study.header.name)
        .join(format!("{}.sections.json", study.profile))
}

/// SHA-256 (16 hex digits) of the running executable, read once: a stored study computed by
/// another build of memwall is recomputed, so reports never mix old code's numbers with new.
/// "unknown" when the executable cannot be read.
fn build_identity() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        std::env::current_exe()
            .and_then(std::fs::read)
            .map(|bytes| {
                Sha256::digest(&bytes)[..8]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            })
            .unwrap_or_else(|_| "unknown".into())
    })
}

/// Key of a stored study: its kind, its parameters and the build that computes it.
fn params_hash(study: &Study) -> String {
    let text = toml::to_string(&study.params).unwrap_or_default();
    let d =
        Sha256::digest(format!("{:?}|{}|{text}", study.header.kind, build_identity()).as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the study unless a record with the same parameters and build exists (or `force`), and
/// stores it.
/// Returns the record and whether it was computed now.
pub fn run_and_store(study: &Study, runs: &Path, force: bool) -> Result<(SectionsRecord, bool)> {
    let path = record_path(runs, study);
    let hash = params_hash(study);
    if !force {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(rec) = serde_json::from_str::<SectionsRecord>(&text) {
                if rec.params_hash == hash {
                    return Ok((rec, false));
                }
            }
        }
    }
    let t = std::time::Instant::now();
    let sections = run(study)?;
    let rec = SectionsRecord {
        study: study.header.name.clone(),
        profile: study.profile.to_string(),
        params_hash: hash,
        env: memwall_runner::measure::host_environment(),
        sections,
        wall_s: t.elapsed().as_secs_f64(),
        finished_at: chrono::Utc::now().to_rfc3339(),
    };
    let json = serde_json::to_vec_pretty(&rec).map_err(|e| Error::Records {
        path: path.clone(),
        message: e.to_string(),
    })?;
    crate::results::write_atomic(&path, &json)?;
    Ok((rec, true))
}

/// Every stored sections record of `study_name` (all profiles), newest first.
pub fn stored(runs: &Path, study_name: &str) -> Result<Vec<SectionsRecord>> {
    let dir = runs.join(study_name);
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.to_string_lossy().ends_with(".sections.json") {
                let text = std::fs::read_to_string(&p).map_err(|e| Error::io("reading", &p, e))?;
                out.push(serde_json::from_str::<SectionsRecord>(&text).map_err(|e| {
                    Error::Records {
                        path: p.clone(),
                        message: format!("malformed sections record: {e}"),
                    }
                })?);
            }
        }
    }
    out.sort_by(|a, b| b.finished_at.cmp(&a.finished_at));
    Ok(out)
}
