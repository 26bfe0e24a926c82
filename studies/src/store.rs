//! The record store of in-process studies: a study's typed result with where it ran and what it
//! quotes ([`StudyRecord`]), at `runs/<study>/<profile>.result.json`, keyed by its parameters
//! and the build that computed it.

use crate::cited;
use crate::error::Result;
use crate::measure::Environment;
use crate::spec::{Study, StudyKind};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The stored result of a non-training study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyRecord {
    /// The study's name (its folder under `runs/` and `reports/`).
    pub study: String,
    /// The profile it ran at.
    pub profile: String,
    /// The study's kind (which renderer reads `result`).
    pub kind: StudyKind,
    /// Hash of the study's resolved parameters and build: a changed file reruns the study.
    pub params_hash: String,
    /// Where it ran.
    pub env: Environment,
    /// The study's typed result ([`InProcessStudy::Output`]) as JSON.
    pub result: serde_json::Value,
    /// What the report quotes from the source as the experiment file said when the study ran
    /// (`[study] source` and `[params.cited]`), so that the record renders without its
    /// experiment file (a scratch record store, a bundle). `None` in records written before
    /// memwall stored it: those are rendered with the experiment file beside the record store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cited: Option<RecordedCitation>,
    /// Wall time of the study, seconds.
    pub wall_s: f64,
    /// RFC 3339 time the study finished.
    pub finished_at: String,
}

/// What a study's report quotes ([`InProcessStudy::Cited`]): the source document and the
/// `[params.cited]` table as JSON, from the experiment file or stored with the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCitation {
    /// The source document's file (`[study] source`).
    pub source: String,
    /// The `[params.cited]` table (an empty object when the file has none).
    pub values: serde_json::Value,
}

impl RecordedCitation {
    /// The citation of `study`'s experiment file.
    pub fn of(study: &Study) -> Self {
        let table = study
            .params
            .get(cited::KEY)
            .cloned()
            .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
        RecordedCitation {
            source: study.header.source.clone(),
            values: serde_json::to_value(table).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// The file name suffix of stored study results.
pub(crate) const RESULT_SUFFIX: &str = ".result.json";

/// Where a study's record lives.
pub fn record_path(runs: &Path, study: &Study) -> PathBuf {
    runs.join(&study.header.name)
        .join(format!("{}{RESULT_SUFFIX}", study.profile))
}

/// SHA-256 (16 hex digits) of the running executable, read once: a stored study computed by
/// another build of memwall is recomputed, so reports never mix old code's numbers with new.
/// "unknown" when the executable cannot be read.
pub(crate) fn build_identity() -> &'static str {
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
pub(crate) fn params_hash(study: &Study) -> String {
    let text = toml::to_string(&study.params).unwrap_or_default();
    let d =
        Sha256::digest(format!("{:?}|{}|{text}", study.header.kind, build_identity()).as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Every stored record of `study_name` (all profiles) with its path, newest first.
pub fn stored(runs: &Path, study_name: &str) -> Result<Vec<(StudyRecord, PathBuf)>> {
    let dir = runs.join(study_name);
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.to_string_lossy().ends_with(RESULT_SUFFIX) {
                // A record that cannot be read is named and left out; the study reruns it.
                let read = std::fs::read_to_string(&p)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        crate::record::parse_json::<StudyRecord>(&text).map_err(|e| e.to_string())
                    });
                match read {
                    Ok(rec) => out.push((rec, p)),
                    Err(e) => tracing::warn!(
                        "leaving out {}: malformed study record ({e}); `memwall run` computes it again",
                        p.display()
                    ),
                }
            }
        }
    }
    out.sort_by(|a, b| b.0.finished_at.cmp(&a.0.finished_at));
    Ok(out)
}
