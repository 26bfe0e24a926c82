//! The subcommands of `memwall`, one module each; `main` parses the command line and calls them.

use super::*;

mod bundle;
mod claims;
mod data;
mod install;
mod nightly;
mod plan;
mod report;
mod run;
mod twin;

pub(crate) use bundle::*;
pub(crate) use claims::*;
pub(crate) use data::*;
pub(crate) use install::*;
pub(crate) use nightly::*;
pub(crate) use plan::*;
pub(crate) use report::*;
pub(crate) use run::*;
pub(crate) use twin::*;
