//! The record store: `runs/<study>/<job key>/record.json` (+ Parquet written by the driver).
//!
//! A record is checked before it is written (it must read back as a [`JobRecord`], with the key
//! of its job and a summary when it finished), so no job can leave an unreadable record; a record
//! that still cannot be read (another memwall version, a damaged disk, a hand edit) is reported
//! with its path and the JSON field at fault, and can be moved aside ([`set_aside`]).

use super::{JobRecord, JobStatus};
use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// File name of a job's record inside its folder.
pub const RECORD_FILE: &str = "record.json";

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, synced, then
/// renamed over `path`, so readers never see a partial file and a killed writer leaves none.
///
/// # Errors
/// [`Error::Io`] naming the path.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io("creating", &tmp, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("renaming into", path, e))
}

/// The folder of a job: `runs_root/<study>/<key>`.
pub fn record_dir(runs_root: &Path, study: &str, key: &str) -> PathBuf {
    runs_root.join(study).join(key)
}

pub use crate::json::{parse_json, JsonError};

/// Why a record (a JSON file or one line of a `.jsonl` file) was refused: it does not read, or
/// a field fails the record's check.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// It does not read as the record type.
    #[error("{0}")]
    Json(#[from] JsonError),
    /// It reads, but a field's value is invalid.
    #[error("field `{field}`: {message}")]
    Check {
        /// Dotted path of the field.
        field: String,
        /// Why the value is invalid.
        message: String,
    },
}

impl From<(String, String)> for RowError {
    fn from((field, message): (String, String)) -> Self {
        RowError::Check { field, message }
    }
}

/// A record file that cannot be read, or whose record is refused; the message starts with the
/// file's path.
#[derive(Debug, thiserror::Error)]
pub enum RecordFileError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file's record is refused.
    #[error("{path}: {source}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: RowError,
    },
}

/// Checks `record` before it is stored: it reads back from its JSON `json` (no float written
/// as `null`), its key is its job's, and a finished (`ok`) record has a summary.
fn check_record(record: &JobRecord, json: &[u8]) -> std::result::Result<(), String> {
    let text = std::str::from_utf8(json).map_err(|e| e.to_string())?;
    parse_json::<JobRecord>(text).map_err(|e| format!("it would not read back: {e}"))?;
    if record.key != record.spec.key() {
        return Err(format!(
            "field `key`: {} is not the key of its job ({})",
            record.key,
            record.spec.key()
        ));
    }
    if record.status == JobStatus::Ok && record.summary.is_none() && !record.spec.profile_only {
        return Err("field `summary`: a finished (`ok`) record needs its summary".into());
    }
    Ok(())
}

/// Writes `record` as `<dir>/record.json`, atomically, after checking that it reads back.
///
/// # Errors
/// [`Error::Records`] naming the file and the field when the record would not read back;
/// [`Error::Io`] when it cannot be written.
pub fn write_record(dir: &Path, record: &JobRecord) -> Result<()> {
    let path = dir.join(RECORD_FILE);
    let bad = |message: String| Error::Records {
        path: path.clone(),
        message: format!("record not written: {message}"),
    };
    let json = serde_json::to_vec_pretty(record).map_err(|e| bad(e.to_string()))?;
    check_record(record, &json).map_err(bad)?;
    write_atomic(&path, &json)
}

/// Reads `<dir>/record.json`; `Ok(None)` when there is none.
///
/// # Errors
/// [`Error::Records`] naming the file, the JSON field at fault and the line when the file is not
/// a record; [`Error::Io`] when it cannot be read.
pub fn read_record(dir: &Path) -> Result<Option<JobRecord>> {
    let path = dir.join(RECORD_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_json(&text)
            .map(Some)
            .map_err(|source| Error::MalformedRecord {
                path,
                what: "malformed record".into(),
                source,
                fix: format!(
                    "; it is left out: move it aside or rerun the job (`memwall run` moves it \
                     to {UNREADABLE_PREFIX}<time>.json and reruns the job)"
                ),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Error::Records {
            path,
            message: format!("malformed record (not UTF-8 text: {e}); it is left out"),
        }),
        Err(e) => Err(Error::io("reading", path, e)),
    }
}

/// File-name prefix of records moved aside by [`set_aside`].
pub const UNREADABLE_PREFIX: &str = "record.unreadable-";

/// Moves `<dir>/record.json` aside to `<dir>/record.unreadable-<unix seconds>.json` (kept for
/// diagnosis, never read as a record) and returns the new path.
///
/// # Errors
/// [`Error::Io`] when it cannot be renamed.
pub fn set_aside(dir: &Path) -> Result<PathBuf> {
    let from = dir.join(RECORD_FILE);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let to = dir.join(format!("{UNREADABLE_PREFIX}{secs}.json"));
    std::fs::rename(&from, &to).map_err(|e| Error::io("moving aside", &from, e))?;
    Ok(to)
}
