//! The scalar checkpointing study's result, stored as its record.

use super::*;

/// One checkpoint interval K of the forward demo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalResult {
    /// Checkpoint interval K, steps.
    pub k: u64,
    /// Bytes held by the checkpoint buffer (capacity x 8 bytes).
    pub bytes: u64,
    /// Median wall time of the checkpointed forward pass, seconds.
    pub seconds: f64,
}

/// The post's forward demo on `x <- x*x + 1`: full storage versus checkpoints every K.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForwardResult {
    /// Bytes held by full storage of the `depth + 1` values (capacity x 8 bytes).
    pub storage_bytes: u64,
    /// Median wall time of the full-storage forward pass, seconds.
    pub storage_seconds: f64,
    /// One entry per K, in the order of `params.ks`.
    pub intervals: Vec<IntervalResult>,
    /// One entry per K of `params.ks_beyond` (past the post's table), in its order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beyond: Vec<IntervalResult>,
    /// Median wall time of the checkpointed loop at the largest K on the finite map
    /// `x <- x*x + 0.25` from 0, seconds.
    pub finite_map_seconds: f64,
    /// First step at which the post's map is +inf (`None`: not within 10000 steps).
    pub overflow_step: Option<u64>,
    /// CPU cores available to the process (`std::thread::available_parallelism`).
    pub cores: usize,
}

/// The derivative on the post's own map `x <- x*x + 1`, at the largest depth whose derivative
/// is finite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostMapDerivative {
    /// Largest depth n (at most 10000 steps) whose forward-mode derivative is finite.
    pub depth: u64,
    /// Checkpoint interval, steps (round(sqrt(depth))).
    pub k: u64,
    /// Reverse mode with full storage.
    pub full_storage: GradResult,
    /// Reverse mode with checkpoints every `k` steps.
    pub checkpointed: GradResult,
}

/// The reverse-mode derivative `dx_n/dx_0` of the finite map `x <- x*x + grad_c`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerivativeResult {
    /// Checkpoint interval K, steps (`params.grad_k`, or round(sqrt(grad_depth)) when 0).
    pub k: u64,
    /// Reverse mode with full storage.
    pub full_storage: GradResult,
    /// Median wall time of the full-storage reverse mode, seconds.
    pub full_storage_seconds: f64,
    /// Reverse mode with checkpoints every `k` steps (bit-identical to `full_storage`).
    pub checkpointed: GradResult,
    /// Median wall time of the checkpointed reverse mode, seconds.
    pub checkpointed_seconds: f64,
    /// Forward-mode derivative (no storage), for the cross-check.
    #[serde(with = "nonfinite")]
    pub forward_mode_grad: f64,
    /// The same comparison on the post's own map.
    pub post_map: PostMapDerivative,
}

/// The result of the scalar checkpointing study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointResult {
    /// The parameters it ran with.
    pub params: CheckpointParams,
    /// The post's forward demo: memory and time per K.
    pub forward: ForwardResult,
    /// The checkpointed reverse-mode derivative.
    pub derivative: DerivativeResult,
}
