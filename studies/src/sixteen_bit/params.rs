//! The 16-bit study's parameters (the experiment file's `[params]`) and their ranges.

use super::*;

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
