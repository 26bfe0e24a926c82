//! 16-bit floating-point formats, from the CMU 15-442 lecture (`003_c07c09ab371a2f69.txt`,
//! slides "16bit Floating Points" and "Mixed Precision").
//!
//! A table of f32, f16 (IEEE 754 binary16) and bf16 (bfloat16) properties computed from the
//! `half` crate and from the bit layout, plus overflow, underflow and accumulation demos.
//!
//! The study ([`SixteenBit`]) measures with [`measure`] into a [`PrecisionResult`] and presents
//! it with [`render`]. Values that overflow (an f16 square of 300 is +inf) are stored with
//! [`memwall_core::record::nonfinite`].
//!
//! May import: [`super`] (the study trait and helpers), [`crate::report::model`], the `half`
//! crate; no deep-learning framework, never the driver or the report renderers.

use half::{bf16, f16};
use memwall_core::record::nonfinite;
use serde::{Deserialize, Serialize};

use super::params::{finite, int_in, num_above, ParamResult};
use super::{demo_study, ensure, DemoError, XorShift};
use super::{CiteAs, Cited};
use crate::report::model::{Figure, Measure, Section, Series, Table};

/// Label of the data set of `sum_entries` copies of 0.01 (the one plotted).
const REPEATED: &str = "0.01 repeated";
/// Label of the data set of `sum_entries` uniform values in [0, 1).
const UNIFORM: &str = "uniform [0,1)";
/// The accumulator formats, in table order.
const ACCUMULATORS: [&str; 3] = ["f16", "bf16", "f32"];
/// Running-sum points sampled per accumulation.
const RUNNING_SUM_SAMPLES: usize = 200;

/// Parameters of the 16-bit formats study.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrecisionParams {
    /// Number of entries summed in the accumulation demo.
    pub sum_entries: usize,
    /// Activation magnitude whose square is taken in the overflow demo.
    pub activation: f32,
    /// Gradient magnitude in the underflow demo.
    pub small_gradient: f32,
    /// Loss-scaling factor applied to the small gradient (mixed-precision practice).
    pub loss_scale: f32,
}

impl Default for PrecisionParams {
    fn default() -> Self {
        Self {
            sum_entries: 100_000,
            activation: 300.0,
            small_gradient: 1e-8,
            loss_scale: 1024.0,
        }
    }
}

/// Properties of a binary floating-point format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatInfo {
    /// Name ("f32", "f16", "bf16").
    pub name: String,
    /// Exponent bits.
    pub exp_bits: u32,
    /// Stored mantissa (fraction) bits.
    pub man_bits: u32,
    /// Largest finite value.
    pub max: f64,
    /// Smallest positive normal value.
    pub min_normal: f64,
    /// Smallest positive subnormal value.
    pub min_subnormal: f64,
    /// Machine epsilon: distance from 1 to the next representable value.
    pub eps: f64,
}

impl FormatInfo {
    /// Decimal digits of precision, (mantissa bits + 1) * log10(2).
    pub fn decimal_digits(&self) -> f64 {
        (self.man_bits + 1) as f64 * 2f64.log10()
    }

    /// Values derived from the bit layout alone (IEEE 754 rules with bias 2^(e-1) - 1).
    pub fn from_layout(name: &str, exp_bits: u32, man_bits: u32) -> Self {
        let bias = (1i32 << (exp_bits - 1)) - 1;
        let emax = bias; // largest unbiased exponent of a finite number
        let emin = 1 - bias;
        Self {
            name: name.into(),
            exp_bits,
            man_bits,
            max: (2.0 - 2f64.powi(-(man_bits as i32))) * 2f64.powi(emax),
            min_normal: 2f64.powi(emin),
            min_subnormal: 2f64.powi(emin - man_bits as i32),
            eps: 2f64.powi(-(man_bits as i32)),
        }
    }
}

/// The three formats as reported by the `half` crate and `f32` constants, with bit counts read
/// from the bit patterns (exponent field = bits set in the encoding of +inf; mantissa = the rest).
pub fn formats() -> [FormatInfo; 3] {
    let f32_exp = f32::INFINITY.to_bits().count_ones();
    let f16_exp = f16::INFINITY.to_bits().count_ones();
    let bf_exp = bf16::INFINITY.to_bits().count_ones();
    [
        FormatInfo {
            name: "f32".into(),
            exp_bits: f32_exp,
            man_bits: 31 - f32_exp,
            max: f32::MAX as f64,
            min_normal: f32::MIN_POSITIVE as f64,
            min_subnormal: f32::from_bits(1) as f64,
            eps: f32::EPSILON as f64,
        },
        FormatInfo {
            name: "f16".into(),
            exp_bits: f16_exp,
            man_bits: 15 - f16_exp,
            max: f16::MAX.to_f64(),
            min_normal: f16::MIN_POSITIVE.to_f64(),
            min_subnormal: f16::MIN_POSITIVE_SUBNORMAL.to_f64(),
            eps: f16::EPSILON.to_f64(),
        },
        FormatInfo {
            name: "bf16".into(),
            exp_bits: bf_exp,
            man_bits: 15 - bf_exp,
            max: bf16::MAX.to_f64(),
            min_normal: bf16::MIN_POSITIVE.to_f64(),
            min_subnormal: bf16::MIN_POSITIVE_SUBNORMAL.to_f64(),
            eps: bf16::EPSILON.to_f64(),
        },
    ]
}

/// Sums `xs` sequentially with the accumulator rounded to f16, bf16 or f32 after every add.
/// Returns (final sum as f64, running sums sampled at `samples` evenly spaced points).
pub fn accumulate(xs: &[f32], acc: &str, samples: usize) -> (f64, Vec<(f64, f64)>) {
    let every = (xs.len() / samples.max(1)).max(1);
    let mut pts = Vec::new();
    let mut s16 = f16::ZERO;
    let mut sb = bf16::ZERO;
    let mut s32 = 0f32;
    let mut cur = 0f64;
    for (i, &x) in xs.iter().enumerate() {
        cur = match acc {
            "f16" => {
                s16 = f16::from_f32(s16.to_f32() + f16::from_f32(x).to_f32());
                s16.to_f64()
            }
            "bf16" => {
                sb = bf16::from_f32(sb.to_f32() + bf16::from_f32(x).to_f32());
                sb.to_f64()
            }
            _ => {
                s32 += x;
                s32 as f64
            }
        };
        if (i + 1) % every == 0 || i + 1 == xs.len() {
            pts.push(((i + 1) as f64, cur));
        }
    }
    (cur, pts)
}

/// Exact (f64) sum of `xs` after rounding each value to the format `fmt` ("f16", "bf16", else
/// f32).
pub fn exact_sum(xs: &[f32], fmt: &str) -> f64 {
    xs.iter()
        .map(|&x| match fmt {
            "f16" => f16::from_f32(x).to_f64(),
            "bf16" => bf16::from_f32(x).to_f64(),
            _ => x as f64,
        })
        .sum()
}

/// Overflow and underflow of realistic values: each quantity computed in (or rounded to) each
/// format, widened to `f32`. Values may be infinite (stored as "inf").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeResult {
    /// `activation^2` in f32.
    #[serde(with = "nonfinite")]
    pub activation_squared_f32: f32,
    /// `activation^2` computed in f16.
    #[serde(with = "nonfinite")]
    pub activation_squared_f16: f32,
    /// `activation^2` computed in bf16.
    #[serde(with = "nonfinite")]
    pub activation_squared_bf16: f32,
    /// `small_gradient` rounded to f16.
    #[serde(with = "nonfinite")]
    pub gradient_f16: f32,
    /// `small_gradient` rounded to bf16.
    #[serde(with = "nonfinite")]
    pub gradient_bf16: f32,
    /// `small_gradient * loss_scale` in f32.
    #[serde(with = "nonfinite")]
    pub scaled_gradient_f32: f32,
    /// `small_gradient * loss_scale` rounded to f16.
    #[serde(with = "nonfinite")]
    pub scaled_gradient_f16: f32,
    /// The f16 scaled gradient divided by `loss_scale` in f32 (what loss scaling recovers).
    #[serde(with = "nonfinite")]
    pub unscaled_gradient_f16: f32,
    /// `small_gradient * loss_scale` rounded to bf16.
    #[serde(with = "nonfinite")]
    pub scaled_gradient_bf16: f32,
}

/// A sequential sum in one accumulator format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccumulatorSum {
    /// Accumulator format ("f16", "bf16", "f32").
    pub accumulator: String,
    /// Final sum (the accumulator widened to f64).
    pub sum: f64,
    /// Exact f64 sum of the same inputs rounded to the accumulator's format.
    pub exact: f64,
    /// Running sum: (entries summed, sum) at evenly spaced points.
    pub running_sums: Vec<(f64, f64)>,
}

/// The sums of one data set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSetSums {
    /// Data set label ("0.01 repeated", "uniform [0,1)").
    pub data: String,
    /// One sum per accumulator, in the order f16, bf16, f32.
    pub accumulators: Vec<AccumulatorSum>,
    /// Mixed precision: f16 inputs summed in an f32 accumulator.
    pub mixed_sum: f32,
    /// Exact f64 sum of the f16-rounded inputs.
    pub mixed_exact: f64,
}

/// The result of the 16-bit formats study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrecisionResult {
    /// The parameters it ran with.
    pub params: PrecisionParams,
    /// f32, f16 and bf16, each checked equal to the values derived from its bit layout.
    pub formats: [FormatInfo; 3],
    /// The overflow and underflow demo.
    pub range: RangeResult,
    /// `sum_entries` copies of 0.01.
    pub repeated: DataSetSums,
    /// `sum_entries` uniform values in [0, 1) (fixed seed).
    pub uniform: DataSetSums,
}

/// The 16-bit study ([`InProcessStudy`](super::InProcessStudy)).
pub struct SixteenBit;

demo_study!(
    SixteenBit: PrecisionParams => PrecisionResult,
    cited CiteAs,
    validate,
    measure,
    render,
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
    vec![
        Measure::new("f16_minus_bf16_fraction_bits", fraction_bits, "bits", 0),
        Measure::new("log10_bf16_max_over_f16_max", headroom, "", 1),
        Measure::new(
            "f16_square_overflows",
            overflows(r.range.activation_squared_f16),
            "",
            0,
        ),
        Measure::new(
            "bf16_square_overflows",
            overflows(r.range.activation_squared_bf16),
            "",
            0,
        ),
        Measure::new("f16_accumulator_error_pct", e16, "%", 2),
        Measure::new("bf16_accumulator_error_pct", eb, "%", 2),
        Measure::new("f32_accumulator_error_pct", e32, "%", 4),
        Measure::new("sixteen_bit_accumulator_min_error_pct", e16.min(eb), "%", 2),
        Measure::new(
            "f16_inputs_f32_accumulator_max_error_pct",
            mixed_error_pct(&r.repeated).max(mixed_error_pct(&r.uniform)),
            "%",
            4,
        ),
    ]
}

/// Checks `p`'s ranges: `sum_entries` in 1..=1e8 (the data sets are held as f32 arrays, 400 MB
/// each at most), finite magnitudes, a loss scale in (0, 2^24].
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &PrecisionParams) -> ParamResult {
    int_in("sum_entries", p.sum_entries, 1, 100_000_000)?;
    finite("activation", f64::from(p.activation))?;
    finite("small_gradient", f64::from(p.small_gradient))?;
    num_above(
        "loss_scale",
        f64::from(p.loss_scale),
        0.0,
        f64::from(1u32 << 24),
    )
}

/// Runs the study: the format table (checked against the bit layouts), the overflow and
/// underflow demo, and the accumulation demo.
///
/// # Errors
/// [`DemoError::InvalidParam`] for zero entries or non-finite values; [`DemoError::Check`] when
/// a crate constant differs from its bit layout.
pub fn measure(p: &PrecisionParams) -> Result<PrecisionResult, DemoError> {
    validate(p)?;
    ensure(p.sum_entries > 0, "sum_entries", "must be positive")?;
    ensure(
        p.activation.is_finite() && p.small_gradient.is_finite() && p.loss_scale.is_finite(),
        "activation",
        "must be finite",
    )?;
    let formats = formats();
    for f in &formats {
        let d = FormatInfo::from_layout(&f.name, f.exp_bits, f.man_bits);
        if d != *f {
            return Err(DemoError::Check(format!(
                "{}: crate constants {f:?} != layout {d:?}",
                f.name
            )));
        }
    }
    let n = p.sum_entries;
    let mut rng = XorShift(2024);
    let small: Vec<f32> = vec![0.01; n];
    let unif: Vec<f32> = (0..n).map(|_| rng.unit_f64() as f32).collect();
    Ok(PrecisionResult {
        params: p.clone(),
        formats,
        range: measure_range(p),
        repeated: sum_data_set(REPEATED, &small),
        uniform: sum_data_set(UNIFORM, &unif),
    })
}

/// The squared activation, the small gradient and the loss-scaled gradient in each format.
fn measure_range(p: &PrecisionParams) -> RangeResult {
    let a = p.activation;
    let g = p.small_gradient;
    let scaled_f16 = f16::from_f32(g * p.loss_scale).to_f32();
    RangeResult {
        activation_squared_f32: a * a,
        activation_squared_f16: (f16::from_f32(a) * f16::from_f32(a)).to_f32(),
        activation_squared_bf16: (bf16::from_f32(a) * bf16::from_f32(a)).to_f32(),
        gradient_f16: f16::from_f32(g).to_f32(),
        gradient_bf16: bf16::from_f32(g).to_f32(),
        scaled_gradient_f32: g * p.loss_scale,
        scaled_gradient_f16: scaled_f16,
        unscaled_gradient_f16: scaled_f16 / p.loss_scale,
        scaled_gradient_bf16: bf16::from_f32(g * p.loss_scale).to_f32(),
    }
}

/// Sums `xs` in every accumulator format and with f16 inputs in an f32 accumulator.
fn sum_data_set(data: &str, xs: &[f32]) -> DataSetSums {
    let accumulators = ACCUMULATORS
        .iter()
        .map(|&acc| {
            let (sum, running_sums) = accumulate(xs, acc, RUNNING_SUM_SAMPLES);
            AccumulatorSum {
                accumulator: acc.into(),
                sum,
                exact: exact_sum(xs, acc),
                running_sums,
            }
        })
        .collect();
    let mut mixed_sum = 0f32;
    for &x in xs {
        mixed_sum += f16::from_f32(x).to_f32();
    }
    DataSetSums {
        data: data.into(),
        accumulators,
        mixed_sum,
        mixed_exact: exact_sum(xs, "f16"),
    }
}

/// The study's sections: the formats and their range, then accumulation.
pub fn render(r: &PrecisionResult, cited: &Cited<CiteAs>) -> Vec<Section> {
    let src = cited.src();
    vec![formats_section(r, &src), accumulation_section(r, &src)]
}

fn sci(x: f64) -> String {
    format!("{x:.6e}")
}

/// The lecture's fp16-versus-bf16 claim beside the formats' properties and the range demo.
fn formats_section(r: &PrecisionResult, src: &str) -> Section {
    let (p, q) = (&r.params, &r.range);
    let (a, g) = (p.activation, p.small_gradient);
    let (f16i, bfi) = (&r.formats[1], &r.formats[2]);
    Section {
        details: None,
        title: "16-bit floating-point formats".into(),
        claim: format!(
            "{src}, slide \"16bit Floating Points\": its two 16-bit layouts are labelled \"More fraction bits\" and \"Less easy to overflow\" (the figure, \
             not the text, shows that the first is fp16 and the second bf16)."
        ),
        ours: format!(
            "f16 has 1/{}/{} bits, max {}, epsilon 2^{} ({:.2} digits); bf16 has 1/{}/{} bits, max {:.4e} (the f32 range), epsilon 2^{} ({:.2} digits). \
             {a}^2 = {} in f16 and {} in bf16; a gradient of {g:e} becomes {:e} in f16 and {:e} in bf16.",
            f16i.exp_bits, f16i.man_bits, f16i.max, f16i.eps.log2(), f16i.decimal_digits(), bfi.exp_bits, bfi.man_bits, bfi.max, bfi.eps.log2(), bfi.decimal_digits(),
            q.activation_squared_f16, q.activation_squared_bf16, q.gradient_f16, q.gradient_bf16
        ),
        notes: vec![
            "Each row is checked against the value derived from the bit layout (bias 2^(e-1) - 1; max = (2 - 2^-m) 2^bias; smallest normal 2^(1-bias); smallest subnormal \
             2^(1-bias-m); epsilon 2^-m); decimal digits = (m + 1) log10 2."
                .into(),
            "Overflow/underflow rows: products are computed in the 16-bit type (the half crate rounds the exact result to the format). Loss scaling multiplies the loss, \
             hence every gradient, by a constant before the 16-bit backward and divides afterwards in f32."
                .into(),
        ],
        tables: vec![formats_table(&r.formats), range_table(r)],
        figures: vec![formats_figure(&r.formats)],
    }
}

/// Bits, range, epsilon and digits per format.
fn formats_table(fs: &[FormatInfo]) -> Table {
    Table {
        caption: "Floating-point formats (computed from the half crate / f32 constants; equal to the values derived from the bit layout)".into(),
        columns: vec!["Format".into(), "Sign/exponent/mantissa bits".into(), "Largest finite".into(), "Smallest normal".into(), "Smallest subnormal".into(), "Machine epsilon".into(), "Decimal digits".into()],
        rows: fs
            .iter()
            .map(|f| vec![f.name.clone(), format!("1/{}/{}", f.exp_bits, f.man_bits), sci(f.max), sci(f.min_normal), sci(f.min_subnormal), format!("{} = 2^{}", sci(f.eps), f.eps.log2()), format!("{:.2}", f.decimal_digits())])
            .collect(),
        notes: Vec::new(),
    }
}

/// The squared activation, the small gradient and the loss-scaled gradient per format.
fn range_table(r: &PrecisionResult) -> Table {
    let (p, q) = (&r.params, &r.range);
    let (a, g) = (p.activation, p.small_gradient);
    let rows = vec![
        vec![
            format!("activation^2, x = {a}"),
            format!("{}", q.activation_squared_f32),
            format!("{}", q.activation_squared_f16),
            format!("{}", q.activation_squared_bf16),
        ],
        vec![
            format!("gradient {g:e}"),
            format!("{g:e}"),
            format!("{:e}", q.gradient_f16),
            format!("{:e}", q.gradient_bf16),
        ],
        vec![
            format!("gradient x loss scale {}", p.loss_scale),
            format!("{:e}", q.scaled_gradient_f32),
            format!(
                "{:e} (/{} = {:e})",
                q.scaled_gradient_f16, p.loss_scale, q.unscaled_gradient_f16
            ),
            format!("{:e}", q.scaled_gradient_bf16),
        ],
    ];
    Table {
        caption: "Overflow and underflow of realistic values".into(),
        columns: vec!["Quantity".into(), "f32".into(), "f16".into(), "bf16".into()],
        rows,
        notes: Vec::new(),
    }
}

/// log2 of the largest finite, smallest normal and subnormal values and epsilon, per format.
fn formats_figure(fs: &[FormatInfo]) -> Figure {
    let log2_of =
        |v: fn(&FormatInfo) -> f64| -> Vec<f64> { fs.iter().map(|f| v(f).log2()).collect() };
    Figure::grouped_bars(
        "format_range",
        "Range and precision of f32, f16 and bf16 (log2)",
        "format",
        "log2 of the value",
        &fs.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        vec![
            ("largest finite".into(), log2_of(|f| f.max)),
            ("smallest normal".into(), log2_of(|f| f.min_normal)),
            ("smallest subnormal".into(), log2_of(|f| f.min_subnormal)),
            ("machine epsilon".into(), log2_of(|f| f.eps)),
        ],
    )
}

/// The lecture's aggregation claim beside the sums of 0.01 per accumulator.
fn accumulation_section(r: &PrecisionResult, src: &str) -> Section {
    let n = r.params.sum_entries;
    let exact_small = r.repeated.mixed_exact;
    let summary: Vec<String> = r
        .repeated
        .accumulators
        .iter()
        .map(|s| format!("{} {:.2}", s.accumulator, s.sum))
        .collect();
    let mixed: Vec<String> = [&r.repeated, &r.uniform]
        .iter()
        .map(|ds| format!("{:.4}% ({})", mixed_error_pct(ds), ds.data))
        .collect();
    Section {
        details: None,
        title: "Aggregation of many entries in 16-bit accumulators".into(),
        claim: format!(
            "{src}, slide \"Mixed Precision\", its three bullets: \"Some layers are more sensitive to dynamic range\"; \"Common issues: aggregation of a lot of \
             entries\"; \"Mixed precision: different input/output/accumulation types\"."
        ),
        ours: format!(
            "Summing {n} entries of 0.01 sequentially (exact: {exact_small:.2} for the f16-rounded inputs) gives {}: a 16-bit accumulator stalls once its spacing exceeds twice \
             the addend, while f16 inputs with an f32 accumulator stay within {} of the exact sum.",
            summary.join(", "),
            mixed.join(" and ")
        ),
        notes: vec![
            "Accumulators round after every addition (sequential reduction, as a naive kernel would). The exact reference sums the same input values (after rounding them to \
             the accumulator's format) in f64."
                .into(),
        ],
        tables: vec![accumulation_table(r)],
        figures: vec![running_sum_figure(r)],
    }
}

/// Result, exact sum and relative error per data set and accumulation.
fn accumulation_table(r: &PrecisionResult) -> Table {
    let mut rows = Vec::new();
    for ds in [&r.repeated, &r.uniform] {
        for s in &ds.accumulators {
            let rel = (s.sum - s.exact).abs() / s.exact;
            rows.push(vec![
                ds.data.clone(),
                format!("{} accumulator", s.accumulator),
                format!("{:.4}", s.sum),
                format!("{:.4}", s.exact),
                format!("{:.2}%", rel * 100.0),
            ]);
        }
        let (s, ex) = (ds.mixed_sum, ds.mixed_exact);
        rows.push(vec![
            ds.data.clone(),
            "f16 inputs, f32 accumulator".into(),
            format!("{s:.4}"),
            format!("{ex:.4}"),
            format!("{:.4}%", mixed_error_pct(ds)),
        ]);
    }
    Table {
        caption: format!("Sequential sums of {} entries", r.params.sum_entries),
        columns: vec![
            "Data".into(),
            "Accumulation".into(),
            "Result".into(),
            "Exact".into(),
            "Relative error".into(),
        ],
        rows,
        notes: Vec::new(),
    }
}

/// Running sum of the 0.01 entries per accumulator, beside the exact line.
fn running_sum_figure(r: &PrecisionResult) -> Figure {
    let n = r.params.sum_entries;
    let exact_small = r.repeated.mixed_exact;
    let mut series: Vec<Series> = r
        .repeated
        .accumulators
        .iter()
        .map(|s| {
            Series::line(
                format!("{} accumulator", s.accumulator),
                s.running_sums.clone(),
            )
        })
        .collect();
    series.push(Series::line(
        "exact",
        vec![(1.0, exact_small / n as f64), (n as f64, exact_small)],
    ));
    Figure {
        name: "accumulator_running_sum".into(),
        title: format!("Running sum of {n} x 0.01 by accumulator type"),
        x_label: "entries summed".into(),
        y_label: "running sum".into(),
        log_x: true,
        log_y: true,
        series,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demos::InProcessStudy;

    use crate::demos::claim_checks::{assert_claims_have_measures, value};

    #[test]
    fn formats_match_ieee_and_bfloat16_definitions() {
        let [f32i, f16i, bfi] = formats();
        assert_eq!((f32i.exp_bits, f32i.man_bits), (8, 23));
        assert_eq!((f16i.exp_bits, f16i.man_bits), (5, 10));
        assert_eq!((bfi.exp_bits, bfi.man_bits), (8, 7));
        assert_eq!(f16i.max, 65504.0);
        assert_eq!(f16i.eps, 2f64.powi(-10));
        assert_eq!(f16i.min_normal, 2f64.powi(-14));
        assert_eq!(f16i.min_subnormal, 2f64.powi(-24));
        assert_eq!(bfi.eps, 2f64.powi(-7));
        assert_eq!(bfi.min_normal, 2f64.powi(-126));
        assert_eq!(bfi.max, 3.3895313892515355e38);
        assert_eq!(f32i.eps, 2f64.powi(-23));
        for f in [f32i, f16i, bfi] {
            assert_eq!(FormatInfo::from_layout(&f.name, f.exp_bits, f.man_bits), f);
        }
    }

    #[test]
    fn overflow_underflow_and_accumulation() {
        assert!((f16::from_f32(300.0) * f16::from_f32(300.0)).is_infinite());
        assert!(!(bf16::from_f32(300.0) * bf16::from_f32(300.0)).is_infinite());
        assert_eq!(f16::from_f32(1e-8).to_f32(), 0.0);
        assert!(bf16::from_f32(1e-8).to_f32() > 0.0);
        let xs = vec![0.01f32; 10_000];
        let (s16, _) = accumulate(&xs, "f16", 10);
        let (sb, _) = accumulate(&xs, "bf16", 10);
        let (s32, _) = accumulate(&xs, "f32", 10);
        assert_eq!(s16, 32.0); // f16 spacing at 32 is 2^-5 = 0.03125 > 2 * 0.01
        assert!(sb < s16);
        assert!((s32 - 100.0).abs() < 0.1);
    }

    #[test]
    fn run_default() {
        let s = render(
            &measure(&PrecisionParams::default()).unwrap(),
            &crate::demos::cited::from_experiment("sixteen_bit"),
        );
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn result_survives_json_and_renders_the_same() {
        let r = measure(&PrecisionParams::default()).unwrap();
        // 300^2 overflows f16: the stored value is +inf.
        assert!(r.range.activation_squared_f16.is_infinite());
        // Through a serde_json::Value, as the study runner stores it. (The record file's text
        // reads floats back exactly only with serde_json's `float_roundtrip` feature.)
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["range"]["activation_squared_f16"], "inf");
        let back: PrecisionResult = serde_json::from_value(json).unwrap();
        assert_eq!(back.formats, r.formats);
        assert_eq!(back.range, r.range);
        assert_eq!(back.repeated, r.repeated);
        assert_eq!(back.uniform, r.uniform);
        assert_eq!(
            SixteenBit::render(&back, &crate::demos::cited::from_experiment("sixteen_bit")),
            SixteenBit::render(&r, &crate::demos::cited::from_experiment("sixteen_bit"))
        );
    }

    #[test]
    fn nonfinite_floats_round_trip() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Both {
            #[serde(with = "nonfinite")]
            a: f64,
            #[serde(with = "nonfinite")]
            b: f32,
        }
        for (a, b) in [
            (f64::INFINITY, f32::NEG_INFINITY),
            (-0.0, 0.01),
            (1e308, f32::MAX),
        ] {
            let v = Both { a, b };
            let back: Both = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
            assert_eq!(back, v);
        }
        let nan: Both = serde_json::from_str(r#"{"a": "NaN", "b": 1}"#).unwrap();
        assert!(nan.a.is_nan() && nan.b == 1.0);
        assert!(serde_json::from_str::<Both>(r#"{"a": "infinity", "b": 1}"#).is_err());
        assert!(serde_json::from_str::<Both>(r#"{"a": null, "b": 1}"#).is_err());
    }

    #[test]
    fn measures_answer_the_claims() {
        let m = assert_claims_have_measures::<SixteenBit>(
            "sixteen_bit",
            measure(&PrecisionParams::default()).unwrap(),
        );
        assert_eq!(value(&m, "f16_minus_bf16_fraction_bits"), 3.0);
        let headroom = value(&m, "log10_bf16_max_over_f16_max");
        assert!((headroom - (3.3895313892515355e38f64 / 65504.0).log10()).abs() < 1e-12);
        assert_eq!(value(&m, "f16_square_overflows"), 1.0);
        assert_eq!(value(&m, "bf16_square_overflows"), 0.0);
        assert!(value(&m, "sixteen_bit_accumulator_min_error_pct") > 10.0);
        let mixed = value(&m, "f16_inputs_f32_accumulator_max_error_pct");
        assert!(mixed > 0.0 && mixed < 0.1, "{mixed}");
    }
}
