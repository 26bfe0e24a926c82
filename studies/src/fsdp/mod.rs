//! FSDP memory model and ring collectives, from the CMU 15-442 lecture
//! (`003_c07c09ab371a2f69.txt`, sections "Fully Sharded Data Parallelism", "Recap: AllReduce
//! Abstraction", "Ring based Reduction", "Reduce Scatter Abstraction", "Allgather abstraction",
//! "Overall Relations").
//!
//! Per-device memory when parameters, gradients and optimizer state are sharded over N devices
//! (activations are not), and a real ring all-reduce (reduce-scatter + all-gather) across N worker
//! threads exchanging chunks over channels, with bytes sent per device counted, checked against
//! Burn's collective API (`burn-collective`'s ring all-reduce on flex CPU peers).
//!
//! [`measure`] evaluates the memory model and runs the collectives, returning an [`FsdpResult`]
//! (bytes, bytes sent, seconds); [`sections`] presents a result as the study's two sections.
//!
//! May import: [`memwall_document::content`], Burn and `burn-collective`.
//!
//! The study is a folder: [`params`] (its `[params]`), [`ring`] (the collectives), [`run`] (the
//! memory model and the measurement), [`result`] (the stored result) and [`sections`] (the
//! report's sections). This file joins them as the study ([`Fsdp`]) and names the result's
//! measures.

mod params;
mod result;
mod ring;
mod run;
mod sections;
#[cfg(test)]
mod tests;

use sections::RingTraffic;

pub use params::{validate, FsdpParams, Optimizer, MAX_RING_BYTES};
pub use result::{DevicesMemory, FsdpResult, RingResult, SlideExamples};
pub use ring::{
    all_gather, all_reduce, burn_ring_all_reduce, reduce_scatter, ring, run_ring, RingPeer,
};
pub use run::{activation_bytes, fsdp_memory, measure, measure_ring, slide_examples, DeviceMemory};
pub use sections::sections;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::params::{bytes_at_most, int_in, list, num_above, num_in, require, ParamResult, GIB};
use super::{demo_study, ensure, fmt_bytes, DemoError};
use super::{CiteAs, Cited};
use crate::document::content::{Figure, Measure, Section, Series, Table};

/// The FSDP study ([`InProcessStudy`](super::InProcessStudy)).
pub struct Fsdp;

demo_study!(
    Fsdp: FsdpParams => FsdpResult,
    cited CiteAs,
    validate,
    measure,
    sections,
    measures
);

/// Largest absolute difference between each worker's result and the slide's (infinite when a
/// worker's result has another length or the workers another count).
fn slide_error(ours: &[Vec<f32>], slide: &[&[f32]]) -> f64 {
    if ours.len() != slide.len() || ours.iter().zip(slide).any(|(o, s)| o.len() != s.len()) {
        return f64::INFINITY;
    }
    ours.iter()
        .zip(slide)
        .flat_map(|(o, s)| o.iter().zip(s.iter()))
        .map(|(a, b)| f64::from((a - b).abs()))
        .fold(0.0, f64::max)
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only:
///
/// - `allreduce_example_max_abs_error`, `reduce_scatter_example_max_abs_error`,
///   `allgather_example_max_abs_error`: the largest absolute difference between our ring's
///   result on the lecture's running example and the result the slide asserts (all-reduce:
///   [2, 2, 4] on both workers; reduce-scatter: [2, 2] and [4, 5]; all-gather: [1, 2, 3, 4] on
///   both); 0 when exact.
/// - `ring_traffic_over_rs_plus_ag` (x): mean bytes sent per worker by our ring all-reduce over
///   reduce-scatter's plus all-gather's (N-1)/N of the buffer each, 2(N-1)/N x buffer (the
///   standard ring analysis, Patarasuk and Yuan 2009; not the lecture's number), the worker
///   count furthest from 1.0; 1.0 when the all-reduce is exactly a reduce-scatter followed by an
///   all-gather.
/// - `sharded_state_reduction` (x): per-device params + grads + optimizer bytes at the fewest
///   devices over those at the most devices of the memory model.
pub fn measures(r: &FsdpResult) -> Vec<Measure> {
    let s = &r.slides;
    let ratio = r
        .ring
        .iter()
        .filter(|ring| ring.workers > 1)
        .map(|ring| {
            let t = RingTraffic::of(ring);
            t.mean_sent / t.theory
        })
        .reduce(|a, b| {
            if (b - 1.0).abs() > (a - 1.0).abs() {
                b
            } else {
                a
            }
        })
        .unwrap_or(f64::NAN);
    let sharded = |m: &DevicesMemory| m.memory.total() - m.memory.activations;
    let state = match (r.memory.first(), r.memory.last()) {
        (Some(a), Some(b)) => sharded(a) / sharded(b),
        _ => f64::NAN,
    };
    use memwall_core::spec::provenance::Provenance::{Arithmetic, Computed};
    let ring = || Computed("our ring collective's result on the slide's inputs, 2 workers".into());
    vec![
        Measure::new(
            "allreduce_example_max_abs_error",
            slide_error(&s.all_reduce, &[&[2.0, 2.0, 4.0], &[2.0, 2.0, 4.0]]),
            "",
            1,
            ring(),
        ),
        Measure::new(
            "reduce_scatter_example_max_abs_error",
            slide_error(&s.reduce_scatter, &[&[2.0, 2.0], &[4.0, 5.0]]),
            "",
            1,
            ring(),
        ),
        Measure::new(
            "allgather_example_max_abs_error",
            slide_error(
                &s.all_gather,
                &[&[1.0, 2.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 4.0]],
            ),
            "",
            1,
            ring(),
        ),
        Measure::new(
            "ring_traffic_over_rs_plus_ag",
            ratio,
            "x",
            4,
            Computed(
                "bytes our ring all-reduce passes between workers (counted per send) / \
                 2(N-1)/N x buffer; the all-reduce is implemented as the reduce-scatter then the \
                 all-gather, so this holds by construction"
                    .into(),
            ),
        ),
        Measure::new(
            "sharded_state_reduction",
            state,
            "x",
            1,
            Arithmetic(
                "per-device parameter + gradient + optimizer bytes of the memory model at the \
                 fewest devices / at the most"
                    .into(),
            ),
        ),
    ]
}
