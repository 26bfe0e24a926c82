//! The report sections of the training studies, built from the analysis as `memwall_document`
//! content with no I/O (the driver reads the records, the PyTorch rows and the attribution rows
//! and hands them over), and the report document they make ([`ReportDoc`]), which the
//! [`crate::sinks`] read.
//!
//! - [`training`]: a training study's sections, environment tables and glance from its records.
//! - [`timeline`]: the memory timeline of chosen configurations.
//! - [`attribution`]: where the time goes, per operation, Burn beside PyTorch.
//! - [`twin`]: memwall beside its PyTorch eager twin on the same device.
//! - [`reproduction`]: this machine's measurements beside the published ones.

pub mod attribution;
pub mod reproduction;
pub mod timeline;
pub mod training;
pub mod twin;

use crate::content::{GlanceRow, Section, Table};
use serde::Serialize;

/// A report: the study's header, its sections and the environment it ran in.
#[derive(Debug, Clone, Serialize)]
pub struct ReportDoc {
    /// Folder name under `reports/`.
    pub name: String,
    /// The study's title (the page's heading).
    pub title: String,
    /// Date of the newest record the report shows (YYYY-MM-DD), for the front matter: the same
    /// records give the same report on any day.
    pub date: String,
    /// The source document whose claims are checked.
    pub source: String,
    /// The source document's own title (empty when the file gives none).
    pub source_title: String,
    /// The headline in one sentence (front matter `description`, the index's result column).
    pub summary: String,
    /// The "Results at a glance" rows: the source's headline claims beside ours.
    pub glance: Vec<GlanceRow>,
    /// The introduction (Markdown).
    pub description: String,
    /// Notes printed under the introduction (Markdown).
    pub notes: Vec<String>,
    /// Front-matter tags.
    pub tags: Vec<String>,
    /// The study's sections, in order.
    pub sections: Vec<Section>,
    /// Environment tables (one per device the study ran on).
    pub environment: Vec<Table>,
    /// Where the numbers come from, as the page names it (`runs/<study>/` for a study; the
    /// history store for the nightly page).
    pub records: String,
    /// Whether the page quotes a source document's numbers beside its own (every study; not
    /// the nightly page, whose "source" is memwall's own history).
    pub quotes_source: bool,
    /// Date (YYYY-MM-DD) of the newest record measured where the headline was (the glance's
    /// device), which the index and the README show beside that device; empty: `date`.
    pub measured_date: String,
    /// Where the rows were measured when no claim is judged (the glance's device otherwise):
    /// the index and the README show it in their device column; empty: unknown.
    pub measured_on: String,
}

impl ReportDoc {
    /// A report of `header`'s study dated `date` (YYYY-MM-DD, the newest record's), opening
    /// with `glance`.
    pub fn new(
        header: &crate::spec::StudyHeader,
        sections: Vec<Section>,
        environment: Vec<Table>,
        date: String,
        glance: Vec<GlanceRow>,
    ) -> Self {
        ReportDoc {
            name: header.name.clone(),
            title: header.title.clone(),
            date,
            summary: if glance.is_empty() {
                "No headline claim of the source is judged here: the rows are memwall's own \
                 measurements."
                    .into()
            } else {
                crate::glance::summary(&glance)
            },
            glance,
            source: header.source.clone(),
            source_title: header.source_title.clone(),
            description: header.description.clone(),
            notes: header.notes.clone(),
            tags: header.tags.clone(),
            sections,
            environment,
            records: format!("runs/{}/", header.name),
            quotes_source: true,
            measured_date: String::new(),
            measured_on: String::new(),
        }
    }
}

impl ReportDoc {
    /// The sentence that says where the numbers come from.
    pub fn evidence(&self) -> String {
        if self.quotes_source {
            format!(
                "Every number under \"ours\" comes from the run records committed in {}; the \
                 source document's numbers are quoted beside them, and a number computed from \
                 them is labelled derived.",
                self.records
            )
        } else {
            format!("Every number comes from {}.", self.records)
        }
    }
}
