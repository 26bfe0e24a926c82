//! The fusion study's parameters (the experiment file's `[params]`) and their ranges.

use super::*;

/// Parameters of the fusion study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FusionParams {
    /// Elements per f32 array in the timing (default 2^24 = 16.8 M elements, 67 MB per array,
    /// far larger than the CPU caches so every pass streams from DRAM).
    pub n: usize,
    /// Timing repeats; the median is reported.
    pub repeats: usize,
    /// Elements per array for the IR evaluation check.
    pub ir_n: usize,
}

impl Default for FusionParams {
    fn default() -> Self {
        Self {
            n: 1 << 24,
            repeats: 5,
            ir_n: 100_000,
        }
    }
}

/// Checks `p`'s ranges: `n` in 1..=[`MAX_N`], `repeats` in 1..=100, `ir_n` in 1..=2^24.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &FusionParams) -> ParamResult {
    int_in("n", p.n, 1, MAX_N)?;
    int_in("repeats", p.repeats, 1, 100)?;
    int_in("ir_n", p.ir_n, 1, 1 << 24)
}
