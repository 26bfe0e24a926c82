//! memwall-document: what a report says, as data. Every study (the training studies' sections in
//! `memwall-report`, the in-process studies in `memwall-studies`) builds [`content::Section`]s;
//! the report crate's sinks (Markdown, HTML, SVG figures, Parquet, Hugo, the README block) only
//! read them. [`glance`] turns a study's `[[claims]]` and their measures into the "Results at a
//! glance" rows, [`environment`] is the table of where and how a record was measured, and
//! [`units`] prints and reads back bytes and durations.
//!
//! May import: `memwall-core` (claims, records) and serde. Never polars, plotters, Burn or any
//! other crate of the workspace: studies and the report are siblings above this crate, and
//! neither imports the other (see `docs/src/contributor/architecture.md`).

#![warn(missing_docs)]

pub mod content;
pub mod environment;
pub mod glance;
pub mod text;
pub mod units;
