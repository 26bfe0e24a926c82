//! The check that the committed reports are what the committed records give (`memwall report
//! --check`): the reports rendered into a scratch folder compared, file by file, with the
//! committed ones.

use crate::error::{Error, Result};
use crate::sinks::index::{INDEX_HTML, INDEX_MD, STUDIES_MD};
use std::path::{Path, PathBuf};

/// The differences between the reports rendered into `rendered` and those in `committed`, for
/// the study folders `names` (and the index files when `index`): one line per file, naming it
/// and its first differing line (text) or saying it differs (binary), is missing, or is not
/// given by the records.
///
/// # Errors
/// [`Error::Io`] when a folder cannot be listed or a file read.
pub fn compare_reports(
    rendered: &Path,
    committed: &Path,
    names: &[String],
    index: bool,
) -> Result<Vec<String>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for n in names {
        for root in [rendered, committed] {
            list_files(&root.join(n), Path::new(n), &mut files)?;
        }
    }
    if index {
        files.push(INDEX_MD.into());
        files.push(INDEX_HTML.into());
        files.push(STUDIES_MD.into());
    }
    files.sort();
    files.dedup();
    let mut diffs = Vec::new();
    for rel in files {
        let (new, old) = (rendered.join(&rel), committed.join(&rel));
        let shown = committed.join(&rel).display().to_string();
        match (new.is_file(), old.is_file()) {
            (true, false) => diffs.push(format!(
                "{shown}: missing (the records give it; run `memwall report`)"
            )),
            (false, true) => diffs.push(format!(
                "{shown}: not given by the records (a stale file: remove it or restore its \
                 records)"
            )),
            (false, false) => {}
            (true, true) => {
                let a = std::fs::read(&new).map_err(|e| Error::io("reading", &new, e))?;
                let b = std::fs::read(&old).map_err(|e| Error::io("reading", &old, e))?;
                if a != b {
                    diffs.push(format!("{shown}: {}", first_difference(&a, &b)));
                }
            }
        }
    }
    Ok(diffs)
}

/// Every file below `dir`, as paths relative to the reports root (`prefix/...`).
fn list_files(dir: &Path, prefix: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("listing", dir, e)),
    };
    for e in entries.flatten() {
        let p = e.path();
        let rel = prefix.join(e.file_name());
        if p.is_dir() {
            list_files(&p, &rel, out)?;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

/// Where two versions of a file first differ: the line number and both lines for text, "binary
/// files differ" otherwise.
fn first_difference(rendered: &[u8], committed: &[u8]) -> String {
    let (Ok(a), Ok(b)) = (
        std::str::from_utf8(rendered),
        std::str::from_utf8(committed),
    ) else {
        return "binary files differ".into();
    };
    let (mut la, mut lb) = (a.lines(), b.lines());
    let mut n = 0;
    loop {
        n += 1;
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => continue,
            (x, y) => {
                let cut = |s: Option<&str>| match s {
                    Some(s) if s.chars().count() > 160 => {
                        format!("{}…", s.chars().take(160).collect::<String>())
                    }
                    Some(s) => s.to_string(),
                    None => "(end of file)".into(),
                };
                return format!(
                    "line {n} differs: committed `{}`, the records give `{}`",
                    cut(y),
                    cut(x)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_file_and_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let (new, old) = (dir.path().join("new"), dir.path().join("old"));
        for root in [&new, &old] {
            std::fs::create_dir_all(root.join("s/figures")).unwrap();
        }
        std::fs::write(new.join("s/report.md"), "a\nb\nc\n").unwrap();
        std::fs::write(old.join("s/report.md"), "a\nB\nc\n").unwrap();
        std::fs::write(new.join("s/figures/x.svg"), "<svg/>").unwrap();
        std::fs::write(old.join("s/figures/stale.svg"), "<svg/>").unwrap();
        let d = compare_reports(&new, &old, &["s".into()], false).unwrap();
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d.iter().any(|l| l.contains("report.md: line 2 differs")
            && l.contains("committed `B`")
            && l.contains("give `b`")));
        assert!(d.iter().any(|l| l.contains("x.svg: missing")));
        assert!(d
            .iter()
            .any(|l| l.contains("stale.svg: not given by the records")));
        std::fs::write(old.join("s/report.md"), "a\nb\nc\n").unwrap();
        std::fs::remove_file(old.join("s/figures/stale.svg")).unwrap();
        std::fs::write(old.join("s/figures/x.svg"), "<svg/>").unwrap();
        assert!(compare_reports(&new, &old, &["s".into()], false)
            .unwrap()
            .is_empty());
    }
}
