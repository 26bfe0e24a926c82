//! The FSDP study's parameters (the experiment file's `[params]`) and their ranges.

use super::*;

/// Optimizer-state model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// Adam: two states (first and second moment) per parameter, each `state_bytes`.
    Adam,
    /// Adafactor-like: first moment dropped, second moment factored into row and column
    /// statistics, modelled as 0 states per parameter (O(rows + cols) per matrix, negligible).
    Adafactor,
}

/// Parameters of the FSDP study.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FsdpParams {
    /// Model parameter count (default 1.6e9).
    pub params: f64,
    /// Bytes per parameter of the working (compute) copy (2 = bf16/fp16).
    pub param_bytes: f64,
    /// Bytes per gradient element (2 = bf16/fp16).
    pub grad_bytes: f64,
    /// Bytes per element of the fp32 master copy of the weights (4; 0 for none).
    pub master_bytes: f64,
    /// Optimizer model.
    pub optimizer: Optimizer,
    /// Bytes per optimizer-state element (4 = fp32).
    pub state_bytes: f64,
    /// Transformer layers for the activation estimate (default 48, GPT-2 XL's).
    pub layers: f64,
    /// Hidden size (default 1600, GPT-2 XL's).
    pub hidden: f64,
    /// Attention heads (default 25, GPT-2 XL's).
    pub heads: f64,
    /// Sequence length in tokens (default 1024, GPT-2 XL's context).
    pub seq: f64,
    /// Micro-batch per device (sequences).
    pub micro_batch: f64,
    /// Device counts N for the figure.
    pub devices: Vec<usize>,
    /// Elements (f32) of the buffer all-reduced in the ring measurement.
    pub ring_elems: usize,
    /// Worker counts for the ring measurement.
    pub ring_workers: Vec<usize>,
}

impl Default for FsdpParams {
    fn default() -> Self {
        Self {
            params: 1.6e9,
            param_bytes: 2.0,
            grad_bytes: 2.0,
            master_bytes: 4.0,
            optimizer: Optimizer::Adam,
            state_bytes: 4.0,
            layers: 48.0,
            hidden: 1600.0,
            heads: 25.0,
            seq: 1024.0,
            micro_batch: 1.0,
            devices: vec![1, 2, 4, 8, 16, 32, 64],
            ring_elems: 1 << 20,
            ring_workers: vec![2, 3, 4, 8, 16],
        }
    }
}

/// Largest byte count of the ring measurement's buffers (`ring_elems` f32 per worker, at the
/// largest `ring_workers`).
pub const MAX_RING_BYTES: f64 = 4.0 * GIB;

/// Checks `p`'s ranges: a model of 1 to 1e13 parameters; 1 to 8 bytes per parameter, gradient
/// and state element (0 allowed for master weights and states); 1..=1e4 layers, hidden size
/// 1..=1e6 divisible by 1..=hidden heads, 1..=1e7 tokens, 1..=1e6 sequences per micro-batch;
/// 1 to 64 device counts in 1..=1e6; ring buffers of 1 element or more at 1 to 16 worker
/// counts in 1..=256, under [`MAX_RING_BYTES`] in all.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &FsdpParams) -> ParamResult {
    num_above("params", p.params, 0.0, 1e13)?;
    num_above("param_bytes", p.param_bytes, 0.0, 8.0)?;
    num_above("grad_bytes", p.grad_bytes, 0.0, 8.0)?;
    num_in("master_bytes", p.master_bytes, 0.0, 8.0)?;
    num_in("state_bytes", p.state_bytes, 0.0, 8.0)?;
    num_in("layers", p.layers, 1.0, 1e4)?;
    num_in("hidden", p.hidden, 1.0, 1e6)?;
    num_in("heads", p.heads, 1.0, p.hidden)?;
    require(p.hidden % p.heads == 0.0, "heads", || {
        format!(
            "must divide `hidden` ({} is not a multiple of {})",
            p.hidden, p.heads
        )
    })?;
    num_in("seq", p.seq, 1.0, 1e7)?;
    num_in("micro_batch", p.micro_batch, 1.0, 1e6)?;
    list("devices", &p.devices, 1, 64, |f, &n| {
        int_in(f, n, 1, 1_000_000)
    })?;
    int_in("ring_elems", p.ring_elems, 1, usize::MAX)?;
    list("ring_workers", &p.ring_workers, 1, 16, |f, &n| {
        int_in(f, n, 1, 256)
    })?;
    let workers = p.ring_workers.iter().copied().max().unwrap_or(1) as f64;
    bytes_at_most(
        "ring_elems",
        p.ring_elems as f64 * 4.0 * workers,
        MAX_RING_BYTES,
        "the ring buffers (4 B x `ring_elems` x the largest of `ring_workers`)",
    )
}
