//! The README's results block: written by `memwall report` (and every command that renders the
//! index) from the rendered reports, between two markers, and checked by `memwall report
//! --check`, so the repository's first page answers the source's claims exactly as the reports
//! do: the headline study's "Results at a glance" (its claims, quoted, beside our measurement
//! and the rule that decides each verdict) and the index's line per study.
//!
//! A README without the markers is left alone (a scratch record store's reports have none
//! beside them).
//!
//! May import: `crate::error`, `crate::analysis` (atomic writes).

use super::{ReportSet, Sink};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The line that opens the generated block.
pub const BEGIN: &str =
    "<!-- memwall report: generated from the records in runs/ by `memwall report`; edit the records or the templates, not this block -->";
/// The line that closes it.
pub const END: &str = "<!-- memwall report: end of the generated block -->";

/// The README beside the reports root `reports` (`README.md` for `reports/`).
pub fn readme_of(reports: &Path) -> PathBuf {
    reports.parent().unwrap_or(Path::new("")).join("README.md")
}

/// The block's text (between the markers, without them) from the reports rendered under
/// `reports`, with links relative to the README (`reports_rel`, e.g. `reports`). Its first
/// table is the glance of `headline`, the study whose experiment file sets
/// `study.readme_headline` (the source's headline table at the source's size).
///
/// # Errors
/// [`Error::Report`] when the headline report or the index is missing or has no glance or
/// table.
pub fn block(reports: &Path, reports_rel: &str, headline: &str) -> Result<String> {
    let report = reports.join(headline).join("report.md");
    let text = std::fs::read_to_string(&report).map_err(|e| Error::io("reading", &report, e))?;
    let glance = section(&text, "## Results at a glance").ok_or_else(|| {
        Error::Report(format!(
            "{}: no \"## Results at a glance\" section for the README's block",
            report.display()
        ))
    })?;
    let index = reports.join("index.md");
    let itext = std::fs::read_to_string(&index).map_err(|e| Error::io("reading", &index, e))?;
    let table: Vec<String> = itext
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| relink(l, reports_rel))
        .collect();
    if table.is_empty() {
        return Err(Error::Report(format!(
            "{}: no table of studies for the README's block",
            index.display()
        )));
    }
    Ok(format!(
        "The source's headline claims, quoted, beside our measurement at the source's size \
         (from [its report]({rel}/{headline}/report.md); a value marked derived is \
         computed from the document's words or numbers, with the formula in the footnote):\n\n\
         {glance}\n\nEvery study, with how many of its source's headline claims our measurement \
         agrees with ([index]({rel}/index.md), also as [HTML]({rel}/index.html)):\n\n{}\n",
        table.join("\n"),
        rel = reports_rel,
        glance = glance.trim(),
    ))
}

/// The body of the markdown section that starts with the line `heading` (up to the next
/// heading of the same or a higher level).
fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let start = text.find(&format!("\n{heading}\n"))? + heading.len() + 2;
    let rest = &text[start..];
    let end = rest.find("\n## ").map(|i| i + 1).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// A table line of the index with its links `(x/report.md)` made relative to the README.
fn relink(line: &str, rel: &str) -> String {
    line.replace("](", &format!("]({rel}/"))
}

/// `readme` with the block between its markers replaced by `block`; `None` when it has no
/// (well-ordered) markers.
pub fn with_block(readme: &str, block: &str) -> Option<String> {
    let b = readme.find(BEGIN)?;
    let e = readme[b..].find(END)? + b;
    Some(format!(
        "{}{BEGIN}\n\n{}\n{}",
        &readme[..b],
        block.trim_end(),
        &readme[e..]
    ))
}

/// Writes `block` into the README beside `reports` when it has the markers; returns whether
/// it did.
///
/// # Errors
/// I/O errors naming the README.
pub fn write(reports: &Path, block: &str) -> Result<bool> {
    let path = readme_of(reports);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    let Some(new) = with_block(&text, block) else {
        return Ok(false);
    };
    if new != text {
        crate::analysis::write_atomic(&path, new.as_bytes())?;
    }
    Ok(true)
}

/// Compares the README beside `committed` (a reports root) with `block` (rendered from the
/// records): `None` when it matches or has no markers, else the first differing line.
///
/// # Errors
/// I/O errors naming the README.
pub fn check(committed: &Path, block: &str) -> Result<Option<String>> {
    let path = readme_of(committed);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let Some(expected) = with_block(&text, block) else {
        return Ok(None);
    };
    if expected == text {
        return Ok(None);
    }
    let line = text
        .lines()
        .zip(expected.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| text.lines().count().min(expected.lines().count()));
    Ok(Some(format!(
        "{}: the results block differs from what the records give at line {} (`{}`): run \
         `memwall report` and commit the README",
        path.display(),
        line + 1,
        text.lines()
            .nth(line)
            .unwrap_or("")
            .chars()
            .take(100)
            .collect::<String>()
    )))
}

/// The README sink: the README's results block beside the reports root of the set, from the
/// reports rendered there ([`write_readme_block`] with the set's headline study, its
/// `study.readme_headline`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Readme;

impl Sink for Readme {
    fn name(&self) -> &'static str {
        "readme"
    }

    fn set(&self, set: &ReportSet<'_>) -> Result<Vec<PathBuf>> {
        let headline = crate::spec::StudyRoles::of_files(set.experiments)?.headline;
        Ok(if write_readme_block(set.reports, headline.as_deref())? {
            vec![readme_of(set.reports)]
        } else {
            Vec::new()
        })
    }
}

/// Writes the README's results block ([`block`]) beside `reports` from the
/// reports rendered there, when a study is the headline (`study.readme_headline`), its report
/// exists and the README has the block's markers; returns whether it did (as [`write`]).
///
/// # Errors
/// The headline report or the index without what the block quotes; I/O errors.
pub fn write_readme_block(reports: &Path, headline: Option<&str>) -> Result<bool> {
    match readme_block(reports, reports, headline)? {
        Some(block) => write(reports, &block),
        None => Ok(false),
    }
}

/// The README's results block from the reports rendered under `rendered`, linking to
/// `committed` (the reports root beside the README), with the glance of `headline`; `None`
/// without a headline study or its report.
///
/// # Errors
/// As [`block`].
pub fn readme_block(
    rendered: &Path,
    committed: &Path,
    headline: Option<&str>,
) -> Result<Option<String>> {
    let Some(headline) = headline else {
        return Ok(None);
    };
    if !rendered.join(headline).join("report.md").is_file() {
        return Ok(None);
    }
    let rel = committed
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "reports".into());
    block(rendered, &rel, headline).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_replaces_what_is_between_the_markers_and_an_edit_is_found() {
        let readme = format!("# x\n\nintro\n{BEGIN}\n\nold table\n{END}\n\nrest\n");
        let new = with_block(&readme, "new table\n").unwrap();
        assert_eq!(
            new,
            format!("# x\n\nintro\n{BEGIN}\n\nnew table\n{END}\n\nrest\n")
        );
        assert!(with_block("no markers", "x").is_none());
        assert!(with_block(&format!("{END}\n{BEGIN}\n"), "x").is_none());

        let dir = tempfile::tempdir().unwrap();
        let reports = dir.path().join("reports");
        std::fs::create_dir_all(&reports).unwrap();
        std::fs::write(dir.path().join("README.md"), &new).unwrap();
        assert_eq!(check(&reports, "new table\n").unwrap(), None);
        let edited = new.replace("new table", "new table, edited by hand");
        std::fs::write(dir.path().join("README.md"), &edited).unwrap();
        let diff = check(&reports, "new table\n")
            .unwrap()
            .expect("a difference");
        assert!(
            diff.contains("README.md") && diff.contains("line 6"),
            "{diff}"
        );
        assert!(write(&reports, "new table\n").unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("README.md")).unwrap(),
            new
        );
    }

    #[test]
    fn the_glance_section_ends_at_the_next_section() {
        let md =
            "---\nx\n---\n\n## Results at a glance\n\n| a |\n\n[^g]: note\n\n## Next\n\nbody\n";
        assert_eq!(
            section(md, "## Results at a glance").unwrap(),
            "\n| a |\n\n[^g]: note\n\n"
        );
        assert_eq!(
            relink("| [T](s/report.md) | x |", "reports"),
            "| [T](reports/s/report.md) | x |"
        );
    }
}
