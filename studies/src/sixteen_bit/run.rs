//! Running the 16-bit study: the formats' ranges and precision, and sums in 16-bit and f32
//! accumulators.

use super::*;

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
