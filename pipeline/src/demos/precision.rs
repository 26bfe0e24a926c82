//! 16-bit floating-point formats, from the CMU 15-442 lecture (`003_c07c09ab371a2f69.txt`,
//! slides "16bit Floating Points" and "Mixed Precision").
//!
//! A table of f32, f16 (IEEE 754 binary16) and bf16 (bfloat16) properties computed from the
//! `half` crate and from the bit layout, plus overflow, underflow and accumulation demos.

use half::{bf16, f16};
use serde::Deserialize;

use super::{ensure, DemoError, XorShift};
use crate::report::model::{Figure, Mark, Section, Series, Table};

const SRC: &str = "003_c07c09ab371a2f69.txt (CMU 15-442 lecture \"Memory Optimizations\")";

/// Parameters of the 16-bit formats study.
#[derive(Debug, Clone, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FormatInfo {
    /// Name.
    pub name: &'static str,
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
    pub fn from_layout(name: &'static str, exp_bits: u32, man_bits: u32) -> Self {
        let bias = (1i32 << (exp_bits - 1)) - 1;
        let emax = bias; // largest unbiased exponent of a finite number
        let emin = 1 - bias;
        Self {
            name,
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
            name: "f32",
            exp_bits: f32_exp,
            man_bits: 31 - f32_exp,
            max: f32::MAX as f64,
            min_normal: f32::MIN_POSITIVE as f64,
            min_subnormal: f32::from_bits(1) as f64,
            eps: f32::EPSILON as f64,
        },
        FormatInfo {
            name: "f16",
            exp_bits: f16_exp,
            man_bits: 15 - f16_exp,
            max: f16::MAX.to_f64(),
            min_normal: f16::MIN_POSITIVE.to_f64(),
            min_subnormal: f16::MIN_POSITIVE_SUBNORMAL.to_f64(),
            eps: f16::EPSILON.to_f64(),
        },
        FormatInfo {
            name: "bf16",
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

fn sci(x: f64) -> String {
    format!("{x:.6e}")
}

/// Runs the study.
pub fn run(p: &PrecisionParams) -> Result<Vec<Section>, DemoError> {
    ensure(p.sum_entries > 0, "sum_entries", "must be positive")?;
    ensure(
        p.activation.is_finite() && p.small_gradient.is_finite() && p.loss_scale.is_finite(),
        "activation",
        "must be finite",
    )?;
    let fs = formats();
    for f in &fs {
        let d = FormatInfo::from_layout(f.name, f.exp_bits, f.man_bits);
        if d != *f {
            return Err(DemoError::Check(format!(
                "{}: crate constants {f:?} != layout {d:?}",
                f.name
            )));
        }
    }
    let fmt_table = Table {
        caption: "Floating-point formats (computed from the half crate / f32 constants; equal to the values derived from the bit layout)".into(),
        columns: vec!["Format".into(), "Sign/exponent/mantissa bits".into(), "Largest finite".into(), "Smallest normal".into(), "Smallest subnormal".into(), "Machine epsilon".into(), "Decimal digits".into()],
        rows: fs
            .iter()
            .map(|f| vec![f.name.into(), format!("1/{}/{}", f.exp_bits, f.man_bits), sci(f.max), sci(f.min_normal), sci(f.min_subnormal), format!("{} = 2^{}", sci(f.eps), f.eps.log2()), format!("{:.2}", f.decimal_digits())])
            .collect(),
    };

    // Overflow / underflow.
    let a = p.activation;
    let sq32 = a * a;
    let sq16 = f16::from_f32(a) * f16::from_f32(a);
    let sqb = bf16::from_f32(a) * bf16::from_f32(a);
    let g = p.small_gradient;
    let g16 = f16::from_f32(g);
    let gb = bf16::from_f32(g);
    let gs16 = f16::from_f32(g * p.loss_scale);
    let demo_rows = vec![
        vec![
            format!("activation^2, x = {a}"),
            format!("{sq32}"),
            format!("{}", sq16.to_f32()),
            format!("{}", sqb.to_f32()),
        ],
        vec![
            format!("gradient {g:e}"),
            format!("{g:e}"),
            format!("{:e}", g16.to_f32()),
            format!("{:e}", gb.to_f32()),
        ],
        vec![
            format!("gradient x loss scale {}", p.loss_scale),
            format!("{:e}", g * p.loss_scale),
            format!(
                "{:e} (/{} = {:e})",
                gs16.to_f32(),
                p.loss_scale,
                gs16.to_f32() / p.loss_scale
            ),
            format!("{:e}", bf16::from_f32(g * p.loss_scale).to_f32()),
        ],
    ];

    // Accumulation.
    let n = p.sum_entries;
    let mut rng = XorShift(2024);
    let small: Vec<f32> = vec![0.01; n];
    let unif: Vec<f32> = (0..n).map(|_| rng.unit_f64() as f32).collect();
    let exact = |xs: &[f32], fmt: &str| -> f64 {
        xs.iter()
            .map(|&x| match fmt {
                "f16" => f16::from_f32(x).to_f64(),
                "bf16" => bf16::from_f32(x).to_f64(),
                _ => x as f64,
            })
            .sum()
    };
    let mut acc_rows = Vec::new();
    let mut series = Vec::new();
    let mut summary = Vec::new();
    for (dname, xs) in [("0.01 repeated", &small), ("uniform [0,1)", &unif)] {
        for acc in ["f16", "bf16", "f32"] {
            let (s, pts) = accumulate(xs, acc, 200);
            // Exact sum of the same (input-rounded) values, in f64.
            let ex = exact(xs, acc);
            let rel = (s - ex).abs() / ex;
            acc_rows.push(vec![
                dname.into(),
                format!("{acc} accumulator"),
                format!("{s:.4}"),
                format!("{ex:.4}"),
                format!("{:.2}%", rel * 100.0),
            ]);
            if dname == "0.01 repeated" {
                series.push(Series {
                    label: format!("{acc} accumulator"),
                    points: pts,
                    mark: Mark::Line,
                    point_labels: vec![],
                });
                summary.push(format!("{acc} {s:.2}"));
            }
        }
        // Mixed precision: f16 inputs, f32 accumulator.
        let mut s = 0f32;
        for &x in xs.iter() {
            s += f16::from_f32(x).to_f32();
        }
        let ex = exact(xs, "f16");
        acc_rows.push(vec![
            dname.into(),
            "f16 inputs, f32 accumulator".into(),
            format!("{s:.4}"),
            format!("{ex:.4}"),
            format!("{:.4}%", ((s as f64 - ex).abs() / ex) * 100.0),
        ]);
    }
    let exact_small = exact(&small, "f16");
    series.push(Series {
        label: "exact".into(),
        points: vec![(1.0, exact_small / n as f64), (n as f64, exact_small)],
        mark: Mark::Line,
        point_labels: vec![],
    });

    let f16i = fs[1];
    let bfi = fs[2];
    let sec1 = Section {
        title: "16-bit floating-point formats".into(),
        claim: format!("{SRC}, slide \"16bit Floating Points\": fp16 has \"more fraction bits\" while bf16 is \"less easy to overflow\"."),
        ours: format!(
            "f16 has 1/{}/{} bits, max {}, epsilon 2^{} ({:.2} digits); bf16 has 1/{}/{} bits, max {:.4e} (the f32 range), epsilon 2^{} ({:.2} digits). \
             {a}^2 = {} in f16 and {} in bf16; a gradient of {g:e} becomes {:e} in f16 and {:e} in bf16.",
            f16i.exp_bits, f16i.man_bits, f16i.max, f16i.eps.log2(), f16i.decimal_digits(), bfi.exp_bits, bfi.man_bits, bfi.max, bfi.eps.log2(), bfi.decimal_digits(),
            sq16.to_f32(), sqb.to_f32(), g16.to_f32(), gb.to_f32()
        ),
        notes: vec![
            "Each row is checked against the value derived from the bit layout (bias 2^(e-1) - 1; max = (2 - 2^-m) 2^bias; smallest normal 2^(1-bias); smallest subnormal \
             2^(1-bias-m); epsilon 2^-m); decimal digits = (m + 1) log10 2."
                .into(),
            "Overflow/underflow rows: products are computed in the 16-bit type (the half crate rounds the exact result to the format). Loss scaling multiplies the loss, \
             hence every gradient, by a constant before the 16-bit backward and divides afterwards in f32."
                .into(),
        ],
        tables: vec![
            fmt_table,
            Table { caption: "Overflow and underflow of realistic values".into(), columns: vec!["Quantity".into(), "f32".into(), "f16".into(), "bf16".into()], rows: demo_rows },
        ],
        figures: vec![Figure::grouped_bars(
            "format_range",
            "Range and precision of f32, f16 and bf16 (log2)",
            "format",
            "log2 of the value",
            &fs.iter().map(|f| f.name.to_string()).collect::<Vec<_>>(),
            vec![
                ("largest finite".into(), fs.iter().map(|f| f.max.log2()).collect()),
                ("smallest normal".into(), fs.iter().map(|f| f.min_normal.log2()).collect()),
                ("smallest subnormal".into(), fs.iter().map(|f| f.min_subnormal.log2()).collect()),
                ("machine epsilon".into(), fs.iter().map(|f| f.eps.log2()).collect()),
            ],
        )],
    };
    let sec2 = Section {
        title: "Aggregation of many entries in 16-bit accumulators".into(),
        claim: format!(
            "{SRC}, slide \"Mixed Precision\": \"Some layers are more sensitive to dynamic range. Common issues: aggregation of a lot of entries. Mixed precision: different \
             input/output/accumulation types\"."
        ),
        ours: format!(
            "Summing {n} entries of 0.01 sequentially (exact: {exact_small:.2} for the f16-rounded inputs) gives {}: a 16-bit accumulator stalls once its spacing exceeds twice \
             the addend, while f16 inputs with an f32 accumulator stay within 0.01%.",
            summary.join(", ")
        ),
        notes: vec![
            "Accumulators round after every addition (sequential reduction, as a naive kernel would). The exact reference sums the same input values (after rounding them to \
             the accumulator's format) in f64."
                .into(),
        ],
        tables: vec![Table {
            caption: format!("Sequential sums of {n} entries"),
            columns: vec!["Data".into(), "Accumulation".into(), "Result".into(), "Exact".into(), "Relative error".into()],
            rows: acc_rows,
        }],
        figures: vec![Figure {
            name: "accumulator_running_sum".into(),
            title: format!("Running sum of {n} x 0.01 by accumulator type"),
            x_label: "entries summed".into(),
            y_label: "running sum".into(),
            log_x: true,
            log_y: true,
            series,
            ..Default::default()
        }],
    };
    Ok(vec![sec1, sec2])
}

/// The 16-bit study ([`InProcessStudy`]). TEMPORARY: its output is still the rendered sections; typed result to come.
pub struct SixteenBit;

impl super::InProcessStudy for SixteenBit {
    type Params = PrecisionParams;
    type Output = Vec<Section>;
    type Error = DemoError;
    fn run(
        params: &PrecisionParams,
        _data_dir: &std::path::Path,
    ) -> Result<Vec<Section>, DemoError> {
        run(params)
    }
    fn render(output: &Vec<Section>) -> Vec<Section> {
        output.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(FormatInfo::from_layout(f.name, f.exp_bits, f.man_bits), f);
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
        let s = run(&PrecisionParams::default()).unwrap();
        assert_eq!(s.len(), 2);
    }
}
