//! Scalar checkpointing demo from the blog post (`000_8cbb5ca41b7f2c4a.txt`, section
//! "Demos / Gradient Checkpointing").
//!
//! The post iterates `x <- x*x + 1` from `x0 = 1.001` for "a ridiculous depth of 2 billion"
//! steps, once storing every intermediate value and once keeping only every K-th value, and
//! reports memory and time per K. Its "MB" are MiB (derived: it prints 15258.79 MB for full
//! storage, and 2e9 x 8 B / 2^20 = 15258.79; the post does not show `memory_in_mb`'s body). We
//! reproduce both, then add what the post leaves out: a reverse-mode derivative
//! `dx_n/dx_0 = prod_i 2 x_i` whose backward sweep recomputes each segment from its checkpoint,
//! checked bit-for-bit against full storage.
//!
//! This is one of memwall's three segment-checkpointing executors: the blog's scalar chain
//! demo, an executor over plain `f64` values. `memwall_runner::train::segment` carries out the
//! same [`Segment`](memwall_core::strategy::Segment) plans on the Burn transformer (autodiff
//! graphs, real tensors), and the static planner's execution order
//! ([`crate::remat::memory_plan::segment_order`]) recomputes segments inside a plan whose memory is
//! computed without running anything. This one is kept separate because it measures the
//! algorithm itself (stored values, recomputed steps, a bit-identical derivative) with no
//! framework's allocator or autodiff in between. Its derivative sweep cuts the chain with the
//! shared [`every_k`]; the forward demo walks its intervals without building a segment list,
//! because at the post's K = 10 that list (24 B per segment) would outgrow the checkpoints
//! (8 B each) whose memory and time it measures.
//!
//! The study ([`ScalarCheckpoint`]) measures with [`measure`] into a [`CheckpointResult`] and
//! presents it with [`sections`].
//!
//! May import: [`super`] (the study trait and helpers, `memwall_core::nonfinite`),
//! [`memwall_document::content`], `memwall_core::strategy`; no deep-learning framework, never the
//! driver or the report renderers.
//!
//! The study is a folder: [`params`] (its `[params]`), [`run`] (the measurement), [`result`]
//! (the stored result) and [`sections`] (the report's sections). This file joins them as the
//! study ([`ScalarCheckpoint`]) and names the result's measures.

mod params;
mod result;
mod run;
mod sections;
#[cfg(test)]
mod tests;

use sections::interval_time_range;

pub use params::{validate, CheckpointParams, MAX_DEPTH, MAX_GRAD_DEPTH};
pub use result::{
    CheckpointResult, DerivativeResult, ForwardResult, IntervalResult, PostMapDerivative,
};
pub use run::{
    compute_with_checkpoints, compute_with_storage, grad_checkpointed, grad_forward_mode,
    grad_full_storage, measure, overflow_step, GradResult,
};
pub use sections::sections;

use memwall_core::strategy::every_k;
use serde::{Deserialize, Serialize};

use super::params::{finite, int_in, list, ParamResult};
use super::{demo_study, ensure, fmt_bytes, median_time, DemoError};
use super::{CiteAs, Cited};
use crate::document::content::{Figure, Measure, Section, Series, Table};
use memwall_core::nonfinite;

/// Constant c of the post's map `x <- x*x + 1`.
const POST_C: f64 = 1.0;
/// Steps searched for the post's map to overflow, and for its largest depth with a finite
/// derivative.
const POST_SEARCH_STEPS: u64 = 10_000;
/// Start value and constant of the finite map `x <- x*x + 0.25` from 0, timed to show that
/// arithmetic on inf is not what the post's timings measure.
const FINITE_X0: f64 = 0.0;
/// See [`FINITE_X0`].
const FINITE_C: f64 = 0.25;

/// The scalar checkpoint study ([`InProcessStudy`](super::InProcessStudy)).
pub struct ScalarCheckpoint;

demo_study!(
    ScalarCheckpoint: CheckpointParams => CheckpointResult,
    cited CiteAs,
    validate,
    measure,
    sections,
    measures
);

/// The post's depth, "a ridiculous depth of 2 billion" steps.
pub const POST_DEPTH: u64 = 2_000_000_000;

/// Bytes of one MiB, the unit of the post's "MB" (15258.79 MB = 2e9 x 8 B / 2^20).
const MIB: f64 = (1u64 << 20) as f64;

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only:
///
/// - `full_storage_mb_at_post_depth` (MB, the post's MiB): our full-storage bytes per stored
///   value (`storage_bytes / (depth + 1)`, 8 B for an exact `Vec`) times the post's 2e9 + 1
///   values, over 2^20. The post prints 15258.79.
/// - `k10_memory_reduction` (x): full-storage bytes over the checkpoint bytes at K = 10 (NaN
///   without K = 10). The post's 15258.79 / 1525.88 = 10.0.
/// - `min_speedup_vs_storage` (x): full-storage time over the slowest checkpointed time (the
///   smallest speed-up over all K). The post's 28.81 s / 7.10 s = 4.06.
/// - `max_speedup_vs_storage` (x): full-storage time over the fastest checkpointed time.
/// - `time_smallest_k_over_largest_k` (x): checkpointed time at the smallest K over that at the
///   largest K. The post's 7.10 s / 6.03 s = 1.18.
/// - `time_beyond_table_over_table_end` (x): checkpointed time at the largest K past the post's
///   table (`ks_beyond`) over that at the table's largest K (NaN without `ks_beyond`); above 1
///   when the time rises again as K grows, as the post predicts.
/// - `derivative_memory_reduction` (x): stored bytes of the full-storage reverse sweep over the
///   checkpointed one's.
pub fn measures(r: &CheckpointResult) -> Vec<Measure> {
    let f = &r.forward;
    let per_value = f.storage_bytes as f64 / (r.params.depth + 1) as f64;
    let at_k = |k: u64| f.intervals.iter().find(|i| i.k == k);
    let k10 = at_k(10).map_or(f64::NAN, |i| f.storage_bytes as f64 / i.bytes as f64);
    let (t_min, t_max) = interval_time_range(f);
    let smallest_over_largest = match (
        f.intervals.iter().min_by_key(|i| i.k),
        f.intervals.iter().max_by_key(|i| i.k),
    ) {
        (Some(s), Some(l)) => s.seconds / l.seconds,
        _ => f64::NAN,
    };
    use memwall_core::spec::provenance::Provenance::{Arithmetic, Computed, Derived};
    let d = &r.derivative;
    let timed = |what: &str| {
        Derived(format!(
            "{what}, median wall-clock times of the forward runs (repeats as the section says)"
        ))
    };
    vec![
        Measure::new(
            "full_storage_mb_at_post_depth",
            per_value * (POST_DEPTH + 1) as f64 / MIB,
            "MB",
            2,
            Arithmetic(
                "bytes per stored value of our full-storage run (8 B, a Vec's capacity) x \
                 (2e9 + 1) / 2^20"
                    .into(),
            ),
        ),
        Measure::new(
            "k10_memory_reduction",
            k10,
            "x",
            2,
            Computed(
                "stored bytes (Vec capacities) of full storage / of checkpoints at K = 10".into(),
            ),
        ),
        Measure::new(
            "min_speedup_vs_storage",
            f.storage_seconds / t_max,
            "x",
            2,
            timed("full-storage time / the slowest checkpointed time"),
        ),
        Measure::new(
            "max_speedup_vs_storage",
            f.storage_seconds / t_min,
            "x",
            2,
            timed("full-storage time / the fastest checkpointed time"),
        ),
        Measure::new(
            "time_smallest_k_over_largest_k",
            smallest_over_largest,
            "x",
            2,
            timed("checkpointed time at the smallest K / at the largest K"),
        ),
        Measure::new(
            "time_beyond_table_over_table_end",
            match (
                f.beyond.iter().max_by_key(|i| i.k),
                f.intervals.iter().max_by_key(|i| i.k),
            ) {
                (Some(b), Some(l)) => b.seconds / l.seconds,
                _ => f64::NAN,
            },
            "x",
            2,
            timed("checkpointed time at the largest K past the post's table / at the table's largest K"),
        ),
        Measure::new(
            "derivative_memory_reduction",
            d.full_storage.bytes as f64 / d.checkpointed.bytes as f64,
            "x",
            1,
            Computed(
                "stored bytes (Vec capacities) of the full-storage reverse sweep / of the \
                 checkpointed one"
                    .into(),
            ),
        ),
    ]
}
