//! 16-bit floating-point formats, from the CMU 15-442 lecture (`003_c07c09ab371a2f69.txt`,
//! slides "16bit Floating Points" and "Mixed Precision").
//!
//! A table of f32, f16 (IEEE 754 binary16) and bf16 (bfloat16) properties computed from the
//! `half` crate and from the bit layout, plus overflow, underflow and accumulation demos.
//!
//! The study ([`SixteenBit`]) measures with [`measure`] into a [`PrecisionResult`] and presents
//! it with [`sections`]. Values that overflow (an f16 square of 300 is +inf) are stored with
//! [`memwall_core::nonfinite`].
//!
//! May import: [`super`] (the study trait and helpers), [`memwall_document::content`], the `half`
//! crate; no deep-learning framework, never the driver or the report renderers.
//!
//! The study is a folder: [`params`] (its `[params]`), [`run`] (the measurement), [`result`]
//! (the stored result) and [`sections`] (the report's sections). This file joins them as the
//! study ([`SixteenBit`]) and names the result's measures.

mod params;
mod result;
mod run;
mod sections;
#[cfg(test)]
mod tests;

pub use params::{validate, PrecisionParams};
pub use result::{AccumulatorSum, DataSetSums, PrecisionResult, RangeResult};
pub use run::{accumulate, exact_sum, formats, measure, FormatInfo};
pub use sections::sections;

use half::{bf16, f16};
use memwall_core::nonfinite;
use serde::{Deserialize, Serialize};

use super::params::{finite, int_in, num_above, ParamResult};
use super::{demo_study, ensure, DemoError, XorShift};
use super::{CiteAs, Cited};
use crate::document::content::{Figure, Measure, Section, Series, Table};

/// Label of the data set of `sum_entries` copies of 0.01 (the one plotted).
const REPEATED: &str = "0.01 repeated";
/// Label of the data set of `sum_entries` uniform values in [0, 1).
const UNIFORM: &str = "uniform [0,1)";
/// The accumulator formats, in table order.
const ACCUMULATORS: [&str; 3] = ["f16", "bf16", "f32"];
/// Running-sum points sampled per accumulation.
const RUNNING_SUM_SAMPLES: usize = 200;

/// The 16-bit study ([`InProcessStudy`](super::InProcessStudy)).
pub struct SixteenBit;

demo_study!(
    SixteenBit: PrecisionParams => PrecisionResult,
    cited CiteAs,
    validate,
    measure,
    sections,
    measures
);

/// Relative error of the f16-inputs, f32-accumulator sum of `ds` against the exact sum of the
/// f16-rounded inputs, percent.
fn mixed_error_pct(ds: &DataSetSums) -> f64 {
    (ds.mixed_sum as f64 - ds.mixed_exact).abs() / ds.mixed_exact * 100.0
}

/// Relative error of the accumulator `acc` of `ds` against its exact sum, percent (NaN when
/// the data set has no such accumulator).
fn accumulator_error_pct(ds: &DataSetSums, acc: &str) -> f64 {
    ds.accumulators
        .iter()
        .find(|s| s.accumulator == acc)
        .map_or(f64::NAN, |s| (s.sum - s.exact).abs() / s.exact * 100.0)
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only:
///
/// - `f16_minus_bf16_fraction_bits` (bits): stored fraction bits of f16 minus those of bf16
///   (10 - 7 = 3).
/// - `log10_bf16_max_over_f16_max`: log10 of bf16's largest finite value over f16's
///   (3.39e38 / 65504: 33.7 decades of headroom before bf16 overflows).
/// - `f16_square_overflows`, `bf16_square_overflows` (1 yes, 0 no): whether `activation^2` is
///   infinite in the format.
/// - `f16_accumulator_error_pct`, `bf16_accumulator_error_pct`, `f32_accumulator_error_pct`
///   (%): relative error of the sequential sum of the "0.01 repeated" data set in each
///   accumulator, against the exact sum of the same (rounded) inputs.
/// - `sixteen_bit_accumulator_min_error_pct` (%): the smaller of the f16 and bf16 errors.
/// - `f16_inputs_f32_accumulator_max_error_pct` (%): f16 inputs summed in an f32 accumulator,
///   the larger relative error of the two data sets.
pub fn measures(r: &PrecisionResult) -> Vec<Measure> {
    let format = |name: &str| r.formats.iter().find(|f| f.name == name);
    let (f16i, bfi) = (format("f16"), format("bf16"));
    let fraction_bits = match (f16i, bfi) {
        (Some(a), Some(b)) => a.man_bits as f64 - b.man_bits as f64,
        _ => f64::NAN,
    };
    let headroom = match (f16i, bfi) {
        (Some(a), Some(b)) => (b.max / a.max).log10(),
        _ => f64::NAN,
    };
    let overflows = |x: f32| if x.is_infinite() { 1.0 } else { 0.0 };
    let rep = &r.repeated;
    let (e16, eb, e32) = (
        accumulator_error_pct(rep, "f16"),
        accumulator_error_pct(rep, "bf16"),
        accumulator_error_pct(rep, "f32"),
    );
    use memwall_core::spec::provenance::Provenance::{Arithmetic, Computed};
    let rounded = |what: &str| {
        Computed(format!(
            "{what}, each operation rounded to the format by the half crate's IEEE conversions \
             on this CPU (not Burn's tensors)"
        ))
    };
    let sum = |acc: &str| {
        rounded(&format!(
            "relative error of the sequential sum in a {acc} accumulator"
        ))
    };
    vec![
        Measure::new(
            "f16_minus_bf16_fraction_bits",
            fraction_bits,
            "bits",
            0,
            Arithmetic("the formats' mantissa bits, f16's minus bf16's".into()),
        ),
        Measure::new(
            "log10_bf16_max_over_f16_max",
            headroom,
            "",
            1,
            Arithmetic("log10 of the formats' largest finite values, bf16's over f16's".into()),
        ),
        Measure::new(
            "f16_square_overflows",
            overflows(r.range.activation_squared_f16),
            "",
            0,
            rounded("whether an activation squared in f16 is infinite"),
        ),
        Measure::new(
            "bf16_square_overflows",
            overflows(r.range.activation_squared_bf16),
            "",
            0,
            rounded("whether an activation squared in bf16 is infinite"),
        ),
        Measure::new("f16_accumulator_error_pct", e16, "%", 2, sum("f16")),
        Measure::new("bf16_accumulator_error_pct", eb, "%", 2, sum("bf16")),
        Measure::new("f32_accumulator_error_pct", e32, "%", 4, sum("f32")),
        Measure::new(
            "sixteen_bit_accumulator_min_error_pct",
            e16.min(eb),
            "%",
            2,
            sum("16-bit (the smaller of f16 and bf16)"),
        ),
        Measure::new(
            "f16_inputs_f32_accumulator_max_error_pct",
            mixed_error_pct(&r.repeated).max(mixed_error_pct(&r.uniform)),
            "%",
            4,
            rounded("relative error of f16 inputs summed in an f32 accumulator, the larger of two data sets"),
        ),
    ]
}
