//! The Hugo sink: the content tree a writer builds a blog from (`memwall publish --to DIR`),
//! copied from the rendered reports.

use super::index::{index_markdown, IndexEntry, NIGHTLY_DIR};
use super::{ReportSet, Sink};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

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
    crate::analysis::write_atomic(&out.join("_index.md"), index.as_bytes())?;
    Ok(entries.len())
}

/// The Hugo sink: [`publish`] of the set's reports into the Hugo content folder `to`, with the
/// nightly page `nightly` where given.
#[derive(Debug, Clone)]
pub struct Hugo {
    /// The Hugo content folder (its `reports/` is replaced).
    pub to: PathBuf,
    /// A rendered nightly page to publish beside the reports.
    pub nightly: Option<PathBuf>,
}

impl Sink for Hugo {
    fn name(&self) -> &'static str {
        "hugo"
    }

    fn set(&self, set: &ReportSet<'_>) -> Result<Vec<PathBuf>> {
        publish(set.reports, &self.to, self.nightly.as_deref())?;
        Ok(vec![self.to.join("reports")])
    }
}
