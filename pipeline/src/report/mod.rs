//! Reports: the content model ([`model`]), SVG figures (plotters), Markdown and HTML rendering
//! (minijinja), and the sections of training studies built from the typed analysis of their
//! polars tables ([`crate::results::analysis`]).

pub mod attribution;
pub mod beside;
mod figures;
pub mod glance;
pub mod markdown;
pub mod model;
pub mod readme;
mod render;
pub mod timeline;
pub mod training;

pub use figures::svg;
pub use render::{render, Rendered, ReportDoc, HTML_TEMPLATE, MARKDOWN_TEMPLATE};
