//! memwall-report: what memwall makes of records. The record store and its typed analysis over
//! polars ([`results`], [`stats`]), the report's content model ([`model`]), the sections of
//! training studies built from that analysis ([`training`], [`timeline`], [`kernel_attribution`],
//! [`beside`], [`glance`]), the PyTorch twins' plan, rows and section ([`reference`]), and the
//! sinks: SVG figures (plotters), Markdown and HTML (minijinja), the README's results block
//! ([`readme`]), Hugo publishing ([`publish`]). [`source_check`] checks what a report quotes
//! against the source documents.
//!
//! May import: `memwall-core` (spec, records' data) and `memwall-runner` (device and measurement
//! types). Never the studies, the driver or the lab: a study renders its own sections through
//! [`model`], and the driver joins the two (see `docs/src/contributor/architecture.md`).

#![warn(missing_docs)]

pub mod beside;
mod figures;
pub mod glance;
pub mod kernel_attribution;
pub mod markdown;
pub mod model;
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
pub mod units;

pub use figures::svg;
pub use render::{render, Rendered, ReportDoc, HTML_TEMPLATE, MARKDOWN_TEMPLATE};

use memwall_core::{error, spec, strategy, Error, Result};
use memwall_runner::{device, measure};
