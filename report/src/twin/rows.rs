//! PyTorch rows: read from a bundle, checked, stored in the record store and loaded back.

use super::*;

/// Reads and checks the rows of `study` in a bundle's `reference/results/` folder
/// (`<study>.<config>.json`; the script's logs beside them are ignored).
///
/// # Errors
/// A row that is not a [`TorchRow`] (naming the file and the field), of another format or
/// study, or with a non-finite or negative number.
pub fn read_rows(dir: &Path, study: &str) -> Result<Vec<TorchRow>, TwinError> {
    let mut rows = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(rows);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with(&format!("{study}.")) && n.ends_with(".json")
        })
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| TwinError::Read {
            path: f.clone(),
            source,
        })?;
        let row: TorchRow =
            crate::analysis::parse_json(&text).map_err(|source| TwinError::NotARow {
                path: f.clone(),
                source,
            })?;
        check_row(&row, study).map_err(|reason| TwinError::Invalid {
            path: f.clone(),
            reason,
        })?;
        rows.push(row);
    }
    Ok(rows)
}

/// Checks a row of `study` field by field: its format and study, finite non-negative times, an
/// `ok` row's step time and throughput, its configuration name, and a CPU row's fields (no CUDA
/// peaks, a thread count of at least 1, the process high-water mark of a finished row).
///
/// # Errors
/// The field at fault, its value and what it should be (the caller names the file).
pub fn check_row(row: &TorchRow, study: &str) -> std::result::Result<(), String> {
    if row.format != ROW_FORMAT {
        return Err(format!(
            "field `format`: {} is not {ROW_FORMAT}",
            row.format
        ));
    }
    if row.study != study {
        return Err(format!("field `study`: `{}` is not `{study}`", row.study));
    }
    for (field, v) in [
        ("median_step_s", row.median_step_s),
        ("samples_per_s", row.samples_per_s),
        ("first_step_s", row.first_step_s),
    ] {
        if let Some(v) = v {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("field `{field}`: {v} is not a finite number >= 0"));
            }
        }
    }
    if row.status == TorchStatus::Ok && (row.median_step_s.is_none() || row.samples_per_s.is_none())
    {
        return Err("an `ok` row needs `median_step_s` and `samples_per_s`".into());
    }
    if row.config.is_empty() || row.config.contains('/') {
        return Err(format!("field `config`: `{}` is not a name", row.config));
    }
    if row.on_cpu() {
        check_cpu_row(row)?;
    }
    for (g, graph) in row.memory_budget_pareto.iter().enumerate() {
        for (i, p) in graph.points.iter().enumerate() {
            if !p.memory_ratio.is_finite()
                || !p.recompute_flops.is_finite()
                || p.recompute_flops < 0.0
            {
                return Err(format!(
                    "field `memory_budget_pareto[{g}].points[{i}]`: memory_ratio {} and \
                     recompute_flops {} are not finite numbers (recompute_flops >= 0)",
                    p.memory_ratio, p.recompute_flops
                ));
            }
        }
    }
    Ok(())
}

/// The fields of a CPU row: no CUDA allocator peaks (PyTorch has none on the CPU; a number
/// there would be read as one), at least one thread, and for a finished row its process
/// high-water mark.
fn check_cpu_row(row: &TorchRow) -> std::result::Result<(), String> {
    for (field, v) in [
        ("max_memory_allocated_bytes", row.max_memory_allocated_bytes),
        ("max_memory_reserved_bytes", row.max_memory_reserved_bytes),
    ] {
        if v.is_some() {
            return Err(format!(
                "field `{field}`: a CPU row (`device_type` \"cpu\") has no CUDA allocator peak; \
                 its peak is `max_rss_bytes` (rerun reference/torch_peak_memory.py --device cpu)"
            ));
        }
    }
    if row.threads == Some(0) {
        return Err("field `threads`: 0 is not a thread count (at least 1)".into());
    }
    if row.status == TorchStatus::Ok && row.max_rss_bytes.is_none() {
        return Err(
            "field `max_rss_bytes`: an `ok` CPU row needs the process's high-water mark \
             (rerun reference/torch_peak_memory.py --device cpu, which writes it)"
                .into(),
        );
    }
    Ok(())
}

/// Stores `row` as `runs/<study>/pytorch/<device>.<config>.json` (atomically; a row of the same
/// device and configuration is replaced).
///
/// # Errors
/// I/O errors naming the path.
pub fn store_row(runs: &Path, study: &str, row: &TorchRow) -> Result<PathBuf, TwinError> {
    let path = row_path(runs, study, &row.device, &row.config);
    let json = serde_json::to_vec_pretty(row).map_err(|source| TwinError::Serialize {
        path: path.clone(),
        source,
    })?;
    crate::analysis::write_atomic(&path, &json)?;
    Ok(path)
}

/// Where the row of `config` measured on `device` is stored:
/// `runs/<study>/pytorch/<device slug>.<config>.json`.
pub fn row_path(runs: &Path, study: &str, device: &str, config: &str) -> PathBuf {
    runs.join(study).join(ROWS_DIR).join(format!(
        "{}.{config}.json",
        memwall_core::record::attribution::slug(device)
    ))
}

/// The stored row of `config` of `study` measured on `device`, if one is there and reads.
pub fn stored_row(runs: &Path, study: &str, device: &str, config: &str) -> Option<TorchRow> {
    let text = std::fs::read_to_string(row_path(runs, study, device, config)).ok()?;
    crate::analysis::parse_json::<TorchRow>(&text).ok()
}

/// Every stored row of `study` (none when the folder does not exist); a row that does not read
/// is returned as (path, reason).
pub fn load_rows(runs: &Path, study: &str) -> (Vec<TorchRow>, Vec<(PathBuf, String)>) {
    let dir = runs.join(study).join(ROWS_DIR);
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (rows, bad);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        match std::fs::read_to_string(&f)
            .map_err(|e| e.to_string())
            .and_then(|t| crate::analysis::parse_json::<TorchRow>(&t).map_err(|e| e.to_string()))
            .and_then(|r| check_row(&r, study).map(|_| r))
        {
            Ok(r) => rows.push(r),
            Err(e) => bad.push((f, e)),
        }
    }
    (rows, bad)
}
