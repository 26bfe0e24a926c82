//! memwall-report: what memwall makes of records. The record store and its typed analysis over
//! polars ([`results`], [`stats`]), the sections of training studies built from that analysis as
//! `memwall_document` content ([`training`], [`timeline`], [`kernel_attribution`], [`beside`]),
//! the PyTorch twins' plan, rows and section ([`reference`]), and the sinks that render any
//! study's document: SVG figures (plotters), Markdown and HTML (minijinja), the README's results
//! block ([`readme`]), Hugo publishing ([`publish`]). [`source_check`] checks what a report quotes
//! against the source documents.
//!
//! May import: `memwall-core` (spec, records, device and measurement types) and
//! `memwall-document` (the content model, the glance). Never Burn, the runner, the studies, the
//! driver or the lab: a study builds its own sections as a document, and the driver hands both
//! to the sinks (see `docs/src/contributor/architecture.md`).

#![warn(missing_docs)]

pub mod beside;
mod figures;
pub mod kernel_attribution;
pub mod markdown;
pub mod publish;
pub mod readme;
pub mod reference;
mod render;
pub mod results;
pub mod source_check;
pub mod stats;
#[doc(hidden)]
pub mod test_support;
pub mod timeline;
pub mod training;

pub use figures::svg;
pub use render::{render, Rendered, ReportDoc, HTML_TEMPLATE, MARKDOWN_TEMPLATE};

use memwall_core::{device, measure};
use memwall_core::{error, spec, strategy, Error, Result};
use memwall_document::{content, glance, units};
