//! The report crate by role (issue 51, item 2): the sections build documents with no I/O, the
//! sinks write files but never read the record store, and the analysis writes nothing. A test
//! module (`#[cfg(test)]` and after, or a `tests.rs`) may do what it needs.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
            out.push(path);
        }
    }
}

/// The lines of the non-test code under `report/src/<role>` that contain one of `patterns`.
fn offending(role: &str, patterns: &[&str]) -> Vec<String> {
    offending_in(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(role),
        patterns,
    )
}

/// The lines of the non-test code of the Rust files under `dir` that contain one of `patterns`.
fn offending_in(dir: &Path, patterns: &[&str]) -> Vec<String> {
    let dir = dir.to_path_buf();
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(p) = patterns.iter().find(|p| line.contains(*p)) {
                found.push(format!(
                    "{}:{}: `{p}` in {}",
                    f.display(),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn sections_read_and_write_no_file() {
    let found = offending(
        "sections",
        &[
            "std::fs",
            "File::",
            "read_dir",
            "write_atomic",
            "StudyRecords::load",
            "read_record",
            "load_rows",
            "attribution::load",
        ],
    );
    assert!(
        found.is_empty(),
        "a section builder doing I/O (let the driver read and hand the rows over):\n{}",
        found.join("\n")
    );
}

#[test]
fn sinks_never_read_the_record_store() {
    let found = offending(
        "sinks",
        &[
            "StudyRecords::load",
            "read_record",
            "load_rows",
            "attribution::load",
        ],
    );
    assert!(
        found.is_empty(),
        "a sink reading records (it reads a document, or the records it is handed):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_analysis_writes_no_file() {
    let found = offending(
        "analysis",
        &[
            "write_atomic(",
            "File::create",
            "fs::write",
            "create_dir",
            "ParquetWriter",
        ],
    );
    assert!(
        found.is_empty(),
        "the analysis writing a file (that is a sink's):\n{}",
        found.join("\n")
    );
}

/// The rule above catches what it is meant to: a planted read in a section is found, the same
/// call in its test module and in a comment is not.
#[test]
fn a_planted_read_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("planted.rs"),
        "// std::fs in a comment\nfn f() { let _ = std::fs::read_to_string(\"x\"); }\n#[cfg(test)]\nmod tests { fn g() { std::fs::write(\"y\", \"\"); } }\n",
    )
    .unwrap();
    let found = offending_in(dir.path(), &["std::fs"]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("planted.rs:2:"), "{found:?}");
}
