//! The record store: `runs/<study>/<job key>/record.json` (+ Parquet written by the driver).

use super::JobRecord;
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

/// Writes `record` as `<dir>/record.json`, atomically.
pub fn write_record(dir: &Path, record: &JobRecord) -> Result<()> {
    let json = serde_json::to_vec_pretty(record).map_err(|e| Error::Records {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    write_atomic(&dir.join(RECORD_FILE), &json)
}

/// Reads `<dir>/record.json`; `Ok(None)` when there is none.
pub fn read_record(dir: &Path) -> Result<Option<JobRecord>> {
    let path = dir.join(RECORD_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Records {
                path,
                message: format!("malformed record: {e}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reading", path, e)),
    }
}
