//! Publishing: the index across studies (`reports/index.md`, `reports/index.html`), the Hugo
//! content tree a writer builds a blog from (`memwall publish --to DIR`), and the check that
//! the committed reports are what the committed records give (`memwall report --check`).

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
    fn read(name: String, md: &Path) -> Result<IndexEntry> {
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
fn index_markdown(entries: &[IndexEntry], link: impl Fn(&str) -> String) -> Result<String> {
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
    let esc = crate::markdown::escape;
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
    let esc = crate::markdown::escape;
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
        let gpu = match (h.gpu_suite, h.pytorch_reference) {
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

/// Writes `<reports>/index.md` and `<reports>/index.html` (from `templates/index.html.j2`) for
/// the studies of `experiments`, the studies' [`catalogue`] (`<reports>/studies.md`), and a last line for the nightly page when `<reports>/nightly/`
/// holds one (a nightly's own reports root). Returns the Markdown index's path.
///
/// # Errors
/// As [`entries`]; [`Error::Io`] when a template cannot be read or a file written.
pub fn write_index(experiments: &[PathBuf], reports: &Path, templates: &Path) -> Result<PathBuf> {
    let mut entries = entries(experiments, reports)?;
    let nightly = reports.join(NIGHTLY_DIR).join("report.md");
    if nightly.is_file() {
        entries.push(IndexEntry::read(NIGHTLY_DIR.into(), &nightly)?);
    }
    let md = index_markdown(&entries, |n| format!("{n}/report.md"))?;
    let html = index_html(&entries, templates)?;
    let md_path = reports.join(INDEX_MD);
    crate::results::write_atomic(&md_path, md.as_bytes())?;
    crate::results::write_atomic(&reports.join(INDEX_HTML), html.as_bytes())?;
    crate::results::write_atomic(
        &reports.join(STUDIES_MD),
        catalogue(experiments)?.as_bytes(),
    )?;
    let headline = crate::spec::StudyRoles::of_files(experiments)?.headline;
    write_readme_block(reports, headline.as_deref())?;
    Ok(md_path)
}

/// Writes the README's results block ([`crate::readme`]) beside `reports` from the
/// reports rendered there, when a study is the headline (`study.readme_headline`), its report
/// exists and the README has the block's markers.
///
/// # Errors
/// The headline report or the index without what the block quotes; I/O errors.
pub fn write_readme_block(reports: &Path, headline: Option<&str>) -> Result<()> {
    if let Some(block) = readme_block(reports, reports, headline)? {
        crate::readme::write(reports, &block)?;
    }
    Ok(())
}

/// The README's results block from the reports rendered under `rendered`, linking to
/// `committed` (the reports root beside the README), with the glance of `headline`; `None`
/// without a headline study or its report.
///
/// # Errors
/// As [`crate::readme::block`].
pub fn readme_block(
    rendered: &Path,
    committed: &Path,
    headline: Option<&str>,
) -> Result<Option<String>> {
    use crate::readme;
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
    readme::block(rendered, &rel, headline).map(Some)
}

/// Copies the rendered reports under `reports` into the Hugo content folder `to`: the index as
/// `to/reports/_index.md` (links to the page bundles) and each study's `report.md` as the page
/// bundle `to/reports/<study>/index.md` with its `figures/`. `to/reports` is replaced. Returns
/// the number of pages. `nightly`, a rendered nightly page (`<history>/runs/reports/nightly`,
/// which `memwall nightly` writes beside its scratch reports), is published too, as the bundle
/// `to/reports/nightly/` and the index's last line.
///
/// # Errors
/// [`Error::Report`] when `reports` holds no report or `nightly` no nightly page;
/// [`Error::Io`] on copy errors.
pub fn publish(reports: &Path, to: &Path, nightly: Option<&Path>) -> Result<usize> {
    let mut studies: Vec<PathBuf> = std::fs::read_dir(reports)
        .map_err(|e| Error::io("listing", reports, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("report.md").is_file())
        .filter(|p| nightly.is_none() || !p.ends_with(NIGHTLY_DIR))
        .collect();
    studies.sort();
    if let Some(n) = nightly {
        if !n.join("report.md").is_file() {
            return Err(Error::Report(format!(
                "{}: no nightly page (report.md) to publish: run `memwall nightly` or `memwall \
                 history` first, or name the folder that holds it",
                n.display()
            )));
        }
    }
    if studies.is_empty() {
        return Err(Error::Report(format!(
            "{}: no report to publish (run `memwall report` first)",
            reports.display()
        )));
    }
    let out = to.join("reports");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(|e| Error::io("replacing", &out, e))?;
    }
    let mut entries = Vec::new();
    let nightly_page = nightly.map(|n| (n.to_path_buf(), NIGHTLY_DIR.to_string()));
    let pages = studies
        .iter()
        .map(|d| {
            let name = d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (d.clone(), name)
        })
        .chain(nightly_page);
    for (dir, name) in pages {
        let bundle = out.join(&name);
        let figures = bundle.join("figures");
        std::fs::create_dir_all(&figures).map_err(|e| Error::io("creating", &figures, e))?;
        let md = dir.join("report.md");
        std::fs::copy(&md, bundle.join("index.md")).map_err(|e| Error::io("copying", &md, e))?;
        if let Ok(figs) = std::fs::read_dir(dir.join("figures")) {
            for f in figs.flatten() {
                let p = f.path();
                if let Some(file) = p.file_name() {
                    std::fs::copy(&p, figures.join(file))
                        .map_err(|e| Error::io("copying", &p, e))?;
                }
            }
        }
        entries.push(IndexEntry::read(name, &md)?);
    }
    // Studies by title; the nightly page last.
    entries.sort_by_key(|e| (e.name == NIGHTLY_DIR, e.title.clone()));
    let index = index_markdown(&entries, |n| format!("{n}/"))?;
    crate::results::write_atomic(&out.join("_index.md"), index.as_bytes())?;
    Ok(entries.len())
}

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
        let html = crate::markdown::to_html(md.split("\n---\n").nth(1).unwrap());
        assert!(html.contains("x*x + 1 | checkpointing"), "{html}");
    }
}
