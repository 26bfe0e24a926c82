//! The operation timings of the attribution benchmark (`memwall-job bench` for Burn,
//! `reference/torch_attribution.py` for PyTorch; [`memwall_core::record::attribution`]) as the
//! record store keeps them beside a study's records: `runs/<study>/attribution/<framework>.<device>.jsonl`.
//! [`crate::sections::attribution`] builds the report's section from them.

use memwall_core::record::attribution::{read_rows, AttributionRow, ATTRIBUTION_DIR};
use std::path::Path;

/// The rows under `runs/<study>/attribution/*.jsonl` (files in name order), and one message per
/// line or file that does not read (naming the file, the line and the field). `None` when the
/// folder does not exist.
pub fn load(runs: &Path, study: &str) -> Option<(Vec<AttributionRow>, Vec<String>)> {
    let dir = runs.join(study).join(ATTRIBUTION_DIR);
    let entries = std::fs::read_dir(&dir).ok()?;
    let mut files: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for f in files {
        match read_rows(&f) {
            Ok((r, b)) => {
                rows.extend(r);
                bad.extend(b);
            }
            Err(e) => bad.push(e.to_string()),
        }
    }
    Some((rows, bad))
}
