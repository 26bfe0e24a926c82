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
    /// Rows of `A` and columns of `B` in the matrix product's chain `A·B + C` (the output is
    /// `matmul_size x matmul_size`; default 2048, a 16 MiB f32 output).
    pub matmul_size: usize,
    /// The product's inner dimension (default 64: few FLOPs per output element, so the
    /// epilogue's memory traffic is a visible share of the chain's time).
    pub matmul_k: usize,
}

impl Default for FusionParams {
    fn default() -> Self {
        Self {
            n: 1 << 24,
            repeats: 5,
            ir_n: 100_000,
            matmul_size: 2048,
            matmul_k: 64,
        }
    }
}

/// Checks `p`'s ranges: `n` in 1..=[`MAX_N`], `repeats` in 1..=100, `ir_n` in 1..=2^24,
/// `matmul_size` in 1..=8192, `matmul_k` in 1..=4096.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &FusionParams) -> ParamResult {
    int_in("n", p.n, 1, MAX_N)?;
    int_in("repeats", p.repeats, 1, 100)?;
    int_in("ir_n", p.ir_n, 1, 1 << 24)?;
    int_in("matmul_size", p.matmul_size, 1, 8192)?;
    int_in("matmul_k", p.matmul_k, 1, 4096)
}
