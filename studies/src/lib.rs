//! memwall-studies: the studies that run in-process, one module each, named as the `kind` of
//! its experiment file (`kind = "checkmate"` in `experiments/checkmate.toml` is [`checkmate`]),
//! the registry that resolves a `kind` to its study (one line per study, [`registry`];
//! `docs/src/contributor/adding-a-study.md`) and their record store ([`store`]).
//!
//! Every in-process study implements [`InProcessStudy`]: a `XParams` struct (serde,
//! `deny_unknown_fields`, `Default` sized to run in seconds on a 2-core CPU), a `run` that
//! measures and returns a typed, serializable result (numbers, not sentences; stored as the
//! study's record), and a `sections` that presents a result as report sections pairing the source's
//! claim with our numbers; what it quotes of the source (its name, its numbers) is the experiment
//! file's `[params.cited]` ([`cited`]), not code. Measurement and presentation are separate steps,
//! as in criterion.rs (measurement -> analysis -> report), so `memwall report` re-renders a stored
//! result without re-running it. The larger studies are folders in that order: `params.rs`,
//! `run.rs`, `result.rs`, `sections.rs` (and `tests.rs`), joined by their `mod.rs`.
//! [`largest_input`] is the one training study with its own steps: the search for the largest
//! batch and sequence that fit a memory limit, which the driver runs job by job.
//!
//! May import: `memwall-document` (the content model a study's sections are built in, the
//! glance), `memwall-core`, `memwall-remat`, `memwall-runner`, Burn; never `memwall-report` (its
//! sibling: the report renders what a study builds, and neither imports the other), the driver
//! or the lab.
//!
//! Sources (the `sources/` folder of the shared data, `../shared/sources/` beside a checkout):
//! - `000_8cbb5ca41b7f2c4a.txt`: blog post "Memory Optimization Demo" (kernel fusion, gradient
//!   checkpointing) -> [`scalar_checkpoint`], [`fusion_ir`].
//! - `001_68b9d43f3f694e7a.txt`: notes on Checkmate (Jain et al., MLSys 2020) -> [`checkmate`].
//! - `002_0a85d22a30039616.txt`: UIUC CS 498 lecture (memory planning, in-place, sharing,
//!   checkpointing) -> [`static_planning`].
//! - `003_c07c09ab371a2f69.txt`: CMU 15-442 lecture "Memory Optimizations" (two-buffer inference,
//!   16-bit floats, FSDP and ring collectives) -> [`two_buffer_inference`], [`sixteen_bit`],
//!   [`fp16_range`] (which tensors of real training fp16 cannot hold), [`fsdp`].

#![warn(missing_docs)]

pub mod autodiff_example;
pub mod checkmate;
pub mod cited;
pub mod fp16_range;
pub mod fsdp;
pub mod fusion_ir;
pub mod largest_input;
pub mod params;
pub mod registry;
pub mod scalar_checkpoint;
pub mod sixteen_bit;
pub mod static_planning;
pub mod store;
mod study;
pub mod two_buffer_inference;

pub use cited::{CiteAs, Cited};
pub use params::ParamError;
pub use registry::*;
pub use store::*;
pub use study::*;

use memwall_core::record;
use memwall_core::{error, spec, Error, Result};
use memwall_document as document;
use memwall_remat as remat;
use memwall_runner::measure;
