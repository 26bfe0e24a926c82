//! The 16-bit study's result, stored as its record.

use super::*;

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
