//! The sinks: what reads a finished report and writes files, each behind [`Sink`] (the shape of
//! criterion's `Report` trait and its `Reports` fan-out). A study's sinks read one
//! [`StudyReport`] (its document, and its records where it has them) and write into the study's
//! report folder; the sinks of the whole set read the reports rendered under a reports root.
//!
//! | Sink | Reads | Writes |
//! |---|---|---|
//! | [`figures::Figures`] | the document's figures | `figures/<name>.svg` (plotters) |
//! | [`templates::Markdown`] | the document | `report.md`, YAML front matter (minijinja) |
//! | [`templates::Html`] | the document | `index.html`, figures inline (minijinja, comrak) |
//! | [`parquet::Parquet`] | the records | `summary.parquet`, `steps.parquet` (polars) |
//! | [`index::Index`] | the rendered reports | `index.md`, `index.html`, `studies.md` |
//! | [`readme::Readme`] | the rendered reports | the README's results block |
//! | [`hugo::Hugo`] | the rendered reports | a Hugo content tree |
//!
//! No sink builds a section or reads a record store: the [`crate::sections`] and the studies
//! build the document, the driver reads the records.

pub mod figures;
pub mod hugo;
pub mod index;
pub mod markdown;
pub mod parquet;
pub mod readme;
pub mod templates;

pub use templates::{HTML_TEMPLATE, MARKDOWN_TEMPLATE};

use crate::analysis::StudyRecords;
use crate::error::Result;
use crate::sections::ReportDoc;
use std::path::{Path, PathBuf};

/// One study's finished report, as a study's sinks read it.
#[derive(Debug, Clone, Copy)]
pub struct StudyReport<'a> {
    /// The document: header, glance, sections, environment.
    pub doc: &'a ReportDoc,
    /// The records it was built from, for a training study (the Parquet tables); `None` for
    /// an in-process study or the nightly page.
    pub records: Option<&'a StudyRecords>,
}

/// The reports rendered under one reports root, as the sinks of the whole set read them.
#[derive(Debug, Clone, Copy)]
pub struct ReportSet<'a> {
    /// The experiment files of the studies, in index order.
    pub experiments: &'a [PathBuf],
    /// The reports root (`reports/`, or a scratch store's).
    pub reports: &'a Path,
    /// The templates folder.
    pub templates: &'a Path,
}

/// A sink: what it writes from one study's report, and from the set of reports rendered under a
/// reports root. Each method returns the files it wrote; the default writes nothing.
pub trait Sink {
    /// Its name in logs and errors ("figures", "markdown", ...).
    fn name(&self) -> &'static str;

    /// Writes what it makes of `report` into the study's report folder `out_dir`.
    ///
    /// # Errors
    /// [`crate::Error::Io`] naming the file it could not write; [`crate::Error::Report`] for a
    /// template or figure that does not render.
    fn study(&self, report: &StudyReport<'_>, out_dir: &Path) -> Result<Vec<PathBuf>> {
        let _ = (report, out_dir);
        Ok(Vec::new())
    }

    /// Writes what it makes of every report rendered under `set.reports`.
    ///
    /// # Errors
    /// As [`Sink::study`]; a report of the set that does not read, naming it.
    fn set(&self, set: &ReportSet<'_>) -> Result<Vec<PathBuf>> {
        let _ = set;
        Ok(Vec::new())
    }
}

/// Paths written by [`render`].
#[derive(Debug, Clone)]
pub struct Rendered {
    /// `report.md`.
    pub markdown: PathBuf,
    /// `index.html`.
    pub html: PathBuf,
    /// `figures/<name>.svg`, one per figure.
    pub figures: Vec<PathBuf>,
}

/// Renders `report` into `out_dir` through a study's sinks: its figures, `report.md` and
/// `index.html` with the templates in `templates`, and, where it carries its records, the
/// Parquet tables.
///
/// # Errors
/// [`crate::Error::Io`] for unreadable templates or unwritable outputs,
/// [`crate::Error::Report`] for template and figure errors, [`crate::Error::Records`] for a
/// table that does not build.
pub fn render_study(
    report: &StudyReport<'_>,
    templates: &Path,
    out_dir: &Path,
) -> Result<Rendered> {
    let templates = templates.to_path_buf();
    let figures = figures::Figures.study(report, out_dir)?;
    let markdown = templates::Markdown {
        templates: templates.clone(),
    }
    .study(report, out_dir)?;
    let html = templates::Html { templates }.study(report, out_dir)?;
    parquet::Parquet.study(report, out_dir)?;
    let only =
        |v: Vec<PathBuf>, name: &str| v.into_iter().next().unwrap_or_else(|| out_dir.join(name));
    Ok(Rendered {
        markdown: only(markdown, templates::REPORT_MD),
        html: only(html, templates::REPORT_HTML),
        figures,
    })
}

/// Renders `doc` into `out_dir` (`report.md`, `index.html`, `figures/*.svg`) with the templates
/// in `templates`: [`render_study`] of a report without records.
///
/// # Errors
/// As [`render_study`].
pub fn render(doc: &ReportDoc, templates: &Path, out_dir: &Path) -> Result<Rendered> {
    render_study(&StudyReport { doc, records: None }, templates, out_dir)
}
