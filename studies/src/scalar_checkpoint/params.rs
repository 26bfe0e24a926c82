//! The scalar checkpointing study's parameters (the experiment file's `[params]`) and their
//! ranges.

use super::*;

/// Parameters of the scalar checkpointing study.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointParams {
    /// Number of recurrence steps (the post uses 2 billion; full storage then needs
    /// 2e9 x 8 B = 16 GB, derived).
    /// Default 2e7 (160 MB of storage, a fraction of a second per run on this machine).
    pub depth: u64,
    /// Start value x0 of `x <- x*x + 1` (post: 1.001).
    pub x0: f64,
    /// Checkpoint intervals K, in steps (post: 10 ... 50000).
    pub ks: Vec<u64>,
    /// Intervals past the post's table, each above the largest of `ks` and at most `depth`: the
    /// post predicts "If we continue to decrease checkpoints (increase K), we would see slight
    /// increases to execution time in that direction as well" without a row that shows it.
    pub ks_beyond: Vec<u64>,
    /// Timing repeats per configuration; the median is reported.
    pub repeats: usize,
    /// Depth of the derivative check on the finite map `x <- x*x + grad_c`.
    pub grad_depth: u64,
    /// Constant c of the derivative-check map. Default 0.25: from x0 = 0.1 the iterates increase
    /// towards the neutral fixed point 1/2 (f'(1/2) = 1), so values and the derivative (which
    /// decays only like ~1/n^2) stay finite and normal for any practical depth.
    pub grad_c: f64,
    /// Start value of the derivative-check map.
    pub grad_x0: f64,
    /// Checkpoint interval of the derivative check in steps; 0 = round(sqrt(grad_depth)).
    pub grad_k: u64,
}

impl Default for CheckpointParams {
    fn default() -> Self {
        Self {
            depth: 20_000_000,
            x0: 1.001,
            ks: vec![10, 50, 100, 500, 1000, 5000, 10000, 50000],
            ks_beyond: vec![200_000, 1_000_000, 5_000_000],
            repeats: 3,
            grad_depth: 2_000_000,
            grad_c: 0.25,
            grad_x0: 0.1,
            grad_k: 0,
        }
    }
}

/// Largest `depth`: full storage keeps 8 B per step, so 4e9 steps are 32 GB (the post's 2e9
/// need 16 GB); deeper runs take minutes per repeat and fail to allocate on most machines.
pub const MAX_DEPTH: u64 = 4_000_000_000;

/// Largest `grad_depth`: the derivative check stores every step once (8 B per step).
pub const MAX_GRAD_DEPTH: u64 = 1_000_000_000;

/// Checks `p`'s ranges: `depth` in 1..=[`MAX_DEPTH`], 1 to 64 intervals K in 1..=depth, 0 to 16
/// intervals `ks_beyond` above the largest of them and at most `depth`,
/// 1..=100 repeats, `grad_depth` in 1..=[`MAX_GRAD_DEPTH`], `grad_k` in 0..=grad_depth, finite
/// start values and constant.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &CheckpointParams) -> ParamResult {
    int_in("depth", p.depth, 1, MAX_DEPTH)?;
    finite("x0", p.x0)?;
    list("ks", &p.ks, 1, 64, |f, &k| int_in(f, k, 1, p.depth))?;
    let table_end = p.ks.iter().max().copied().unwrap_or(0);
    list("ks_beyond", &p.ks_beyond, 0, 16, |f, &k| {
        int_in(f, k, table_end.saturating_add(1).min(p.depth), p.depth)
    })?;
    int_in("repeats", p.repeats, 1, 100)?;
    int_in("grad_depth", p.grad_depth, 1, MAX_GRAD_DEPTH)?;
    finite("grad_c", p.grad_c)?;
    finite("grad_x0", p.grad_x0)?;
    int_in("grad_k", p.grad_k, 0, p.grad_depth)
}
