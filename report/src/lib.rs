//! memwall-report: what memwall makes of records, by role, as criterion's `Report` and its
//! sinks are laid out.
//!
//! - [`analysis`]: a study's records read from the store, and the typed tables and summaries
//!   built from them over polars ([`analysis::summary`], [`analysis::sublinear`]), with the
//!   order-statistic intervals of [`analysis::stats`] and the operation timings of
//!   [`analysis::attribution`].
//! - [`sections`]: the training studies' report sections built from that analysis as
//!   `memwall_document` content, with no I/O: the driver hands them the records, the PyTorch
//!   rows and the attribution rows ([`sections::training`], [`sections::timeline`],
//!   [`sections::attribution`], [`sections::reproduction`], [`sections::twin`]), and the
//!   report document they make ([`ReportDoc`]).
//! - [`sinks`]: what reads a finished document or the set of rendered reports and writes files,
//!   behind one trait ([`sinks::Sink`]): SVG figures (plotters), Markdown and HTML (minijinja),
//!   the study's Parquet tables, the index across studies, the README's results block, and the
//!   Hugo content tree.
//! - [`twin`]: the PyTorch twin's data: the jobs its script runs, the rows it prints and
//!   their store beside the records. [`check`] compares rendered reports with the committed
//!   ones (`memwall report --check`), and [`source_check`] what a report quotes with the
//!   source documents.
//!
//! May import: `memwall-core` (spec, records, device and measurement types) and
//! `memwall-document` (the content model, the glance). Never Burn, the runner, the studies, the
//! driver or the lab: a study builds its own sections as a document, and the driver hands both
//! to the sinks (see `docs/src/contributor/architecture.md`).

#![warn(missing_docs)]

pub mod analysis;
pub mod check;
pub mod sections;
pub mod sinks;
pub mod source_check;
#[doc(hidden)]
pub mod test_support;
pub mod twin;

pub use sections::ReportDoc;
pub use sinks::figures::svg;
pub use sinks::{render, Rendered, HTML_TEMPLATE, MARKDOWN_TEMPLATE};

use memwall_core::{device, measure};
use memwall_core::{error, spec, strategy, Error, Result};
use memwall_document::{content, glance, text, units};
