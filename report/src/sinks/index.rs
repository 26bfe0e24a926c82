//! The index sink: the pages across studies (`reports/index.md`, `reports/index.html`, the
//! studies' catalogue `reports/studies.md`), read from the front matter of the reports
//! rendered there; writing it also writes the README's results block ([`super::readme`]).

use super::{ReportSet, Sink};
use crate::error::{Error, Result};
use crate::spec::Study;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The Markdown index across studies, beside the study folders.
pub const INDEX_MD: &str = "index.md";
/// The HTML index across studies.
pub const INDEX_HTML: &str = "index.html";

/// The front matter of a rendered `report.md`, as the index reads it.
#[derive(Debug, Clone, Deserialize)]
struct Front {
    title: String,
    date: String,
    #[serde(default)]
    measured_date: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    measured_on: String,
    #[serde(default)]
    source: String,
}

/// One line of the index.
#[derive(Debug, Clone, Serialize)]
pub struct IndexEntry {
    /// The study's folder under `reports/`.
    pub name: String,
    /// The report's title.
    pub title: String,
    /// The headline in one sentence.
    pub headline: String,
    /// Where the headline was measured.
    pub device: String,
    /// The date of the newest record measured on `device` (the report's newest record's when
    /// its front matter has no `measured_date`).
    pub date: String,
    /// The source document.
    pub source: String,
}

impl IndexEntry {
    /// The entry of study `name` from the front matter of its `report.md` at `md`.
    pub(crate) fn read(name: String, md: &Path) -> Result<IndexEntry> {
        let fm = read_front(md)?;
        // The device has its own column: the headline drops its closing "(device)".
        let suffix = format!(" ({}).", fm.measured_on);
        let headline = match fm.description.strip_suffix(&suffix) {
            Some(h) if !fm.measured_on.is_empty() => format!("{h}."),
            _ => fm.description.clone(),
        };
        Ok(IndexEntry {
            name,
            title: fm.title,
            headline,
            device: fm.measured_on,
            date: if fm.measured_date.is_empty() {
                fm.date
            } else {
                fm.measured_date
            },
            source: fm.source,
        })
    }
}

/// Reads the front matter of `reports/<name>/report.md`.
fn read_front(path: &Path) -> Result<Front> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("reading", path, e))?;
    let yaml = text
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map(|(front, _)| front)
        .ok_or_else(|| Error::Report(format!("{}: no YAML front matter", path.display())))?;
    serde_norway::from_str(yaml)
        .map_err(|e| Error::render(format!("{}: front matter", path.display()), e))
}

/// The index entries of the studies of `experiments`, in their order, from the reports under
/// `reports`; a study without a rendered report is left out.
///
/// # Errors
/// [`Error::Report`] for a report whose front matter does not read back.
pub fn entries(experiments: &[PathBuf], reports: &Path) -> Result<Vec<IndexEntry>> {
    let mut out = Vec::new();
    for f in experiments {
        let name = Study::header(f)?.name;
        let md = reports.join(&name).join("report.md");
        if !md.exists() {
            continue;
        }
        out.push(IndexEntry::read(name, &md)?);
    }
    Ok(out)
}

/// The index as Markdown with front matter; `link` turns a study folder into its link (the
/// repository's `<name>/report.md`, or a blog's `<name>/`).
pub(crate) fn index_markdown(
    entries: &[IndexEntry],
    link: impl Fn(&str) -> String,
) -> Result<String> {
    #[derive(Serialize)]
    struct IndexFront<'a> {
        title: &'a str,
        date: &'a str,
        description: &'a str,
    }
    let date = entries.iter().map(|e| e.date.as_str()).max().unwrap_or("");
    let front = serde_norway::to_string(&IndexFront {
        title: "memwall: the memory-wall literature, measured",
        date,
        description: "Each study puts the source document's claims beside our measurement.",
    })
    .map_err(|e| Error::render("index front matter", e))?;
    let esc = crate::text::escape;
    let mut md = format!(
        "---\n{front}---\n\nOne line per study: its headline (how many of the source's headline \
         claims our measurement agrees with), where that was measured, and the date of the \
         newest record measured there.\n\n| Study | Headline result | Measured on | Date |\n|---|---|---|---|\n"
    );
    for e in entries {
        md.push_str(&format!(
            "| [{}]({}) | {} | {} | {} |\n",
            esc(&e.title),
            link(&e.name),
            esc(&e.headline),
            esc(&e.device),
            esc(&e.date)
        ));
    }
    Ok(md)
}

/// The index as a standalone HTML page linking each study's `index.html`.
fn index_html(entries: &[IndexEntry], templates: &Path) -> Result<String> {
    let path = templates.join("index.html.j2");
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error::io("reading template", &path, e))?;
    let mut env = minijinja::Environment::new();
    env.add_template_owned("index.html.j2".to_string(), text)
        .map_err(|e| Error::render(format!("template {}", path.display()), e))?;
    env.get_template("index.html.j2")
        .and_then(|t| t.render(minijinja::context! { entries => minijinja::Value::from(minijinja::value::Serde(entries)) }))
        .map_err(|e| Error::render(format!("rendering {}", path.display()), e))
}

/// The catalogue of the studies under a reports root, which the book includes
/// (`docs/src/guide/studies.md`).
pub const STUDIES_MD: &str = "studies.md";

/// The catalogue of the studies of `experiments` (Markdown, no front matter): per study its
/// name, title, kind, source document and roles, from the `[study]` headers alone (no record
/// and no profile), in file order. The book's study list includes it, so that a study added as
/// an experiment file is listed without editing the book.
///
/// # Errors
/// A header that does not read ([`Study::header`]).
pub fn catalogue(experiments: &[PathBuf]) -> Result<String> {
    let esc = crate::text::escape;
    let mut md = String::from(
        "<!-- Written by `memwall report` from the [study] tables of experiments/*.toml; \
         `memwall report --check` fails when it is stale. -->\n\n\
         | Study | What it measures | Kind | Source document | On a GPU |\n\
         |---|---|---|---|---|\n",
    );
    for f in experiments {
        let h = Study::header(f)?;
        let kind = if h.kind.is_training() {
            "training"
        } else {
            "in-process"
        };
        let source = if h.source_title.is_empty() {
            format!("`{}`", h.source)
        } else {
            format!("{} (`{}`)", esc(&h.source_title), h.source)
        };
        let gpu = match (h.gpu_suite, h.pytorch_twin) {
            (Some(p), true) => format!("suite, place {p}; PyTorch twins"),
            (Some(p), false) => format!("suite, place {p}"),
            (None, true) => "PyTorch twins".to_string(),
            (None, false) => "–".to_string(),
        };
        md.push_str(&format!(
            "| `{}` | {} | {kind} | {source} | {gpu} |\n",
            h.name,
            esc(&h.title),
        ));
    }
    Ok(md)
}

/// The folder of the nightly page under a reports root (`memwall nightly`, `memwall history`).
pub const NIGHTLY_DIR: &str = "nightly";

/// The index sink: `<reports>/index.md` and `<reports>/index.html` (from
/// `templates/index.html.j2`) for the studies of the set, the studies' [`catalogue`]
/// (`<reports>/studies.md`), and a last line for the nightly page when `<reports>/nightly/`
/// holds one (a nightly's own reports root).
#[derive(Debug, Clone, Copy, Default)]
pub struct Index;

impl Sink for Index {
    fn name(&self) -> &'static str {
        "index"
    }

    fn set(&self, set: &ReportSet<'_>) -> Result<Vec<PathBuf>> {
        let (experiments, reports) = (set.experiments, set.reports);
        let mut entries = entries(experiments, reports)?;
        let nightly = reports.join(NIGHTLY_DIR).join("report.md");
        if nightly.is_file() {
            entries.push(IndexEntry::read(NIGHTLY_DIR.into(), &nightly)?);
        }
        let md = index_markdown(&entries, |n| format!("{n}/report.md"))?;
        let html = index_html(&entries, set.templates)?;
        let written = [
            (reports.join(INDEX_MD), md),
            (reports.join(INDEX_HTML), html),
            (reports.join(STUDIES_MD), catalogue(experiments)?),
        ];
        for (path, text) in &written {
            crate::analysis::write_atomic(path, text.as_bytes())?;
        }
        Ok(written.into_iter().map(|(p, _)| p).collect())
    }
}

/// Writes the pages across the studies of `experiments` rendered under `reports` through the
/// sinks of the set that `memwall report` runs: the [`Index`] and the README's results block
/// ([`super::readme::Readme`]). Returns the Markdown index's path.
///
/// # Errors
/// As [`entries`]; [`Error::Io`] when a template cannot be read or a file written; as
/// [`super::readme::block`].
pub fn write_index(experiments: &[PathBuf], reports: &Path, templates: &Path) -> Result<PathBuf> {
    let set = ReportSet {
        experiments,
        reports,
        templates,
    };
    Index.set(&set)?;
    super::readme::Readme.set(&set)?;
    Ok(reports.join(INDEX_MD))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_links_each_study_and_escapes_its_text() {
        let e = IndexEntry {
            name: "scalar_checkpoint".into(),
            title: "x*x + 1 | checkpointing".into(),
            headline: "Of 2 headline claims of the source, 2 agree.".into(),
            device: "CPU".into(),
            date: "2026-11-25".into(),
            source: "000.txt".into(),
        };
        let md = index_markdown(&[e], |n| format!("{n}/")).unwrap();
        assert!(md.starts_with("---\n"), "{md}");
        assert!(
            md.contains("| [x\\*x + 1 \\| checkpointing](scalar_checkpoint/) |"),
            "{md}"
        );
        let html = crate::sinks::markdown::to_html(md.split("\n---\n").nth(1).unwrap());
        assert!(html.contains("x*x + 1 | checkpointing"), "{html}");
    }
}
