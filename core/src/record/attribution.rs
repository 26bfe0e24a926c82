//! The attribution benchmark's rows: "where the time goes", one operation of the model at a time.
//!
//! `memwall-job bench` (Burn) and `reference/torch_attribution.py` (PyTorch: cuBLAS, SDPA) time
//! the same operations at the same shapes on the same device and write one JSON line per
//! (operation, shape, dtype, pass): an [`AttributionRow`]. The record store keeps them as
//! `runs/<study>/attribution/<framework>.<device>.jsonl` ([`ATTRIBUTION_DIR`]), and the report
//! sets the two frameworks side by side.
//!
//! The operations ([`operations`]) are those of one transformer block and the head of a
//! [`ModelConfig`] (`b` batch, `t` sequence, `d` model width, `h` heads of `d/h` features, `f`
//! MLP width, `V` vocabulary; `m = b·t` tokens):
//!
//! | op | name | passes | shape | FLOPs |
//! |---|---|---|---|---|
//! | `matmul` | `attn_qkvo` (q, k, v, o projections) | see below | `[M, K, N]` | `2·M·K·N` |
//! | `matmul` | `mlp_up`, `mlp_down`, `lm_head` | see below | `[M, K, N]` | `2·M·K·N` |
//! | `attention` | `causal` | `forward`, `backward` | `[b, h, t, d/h]` | [`attention_flops`] |
//! | `attention_naive` | `causal` | `forward`, `backward` | `[b, h, t, d/h]` | [`attention_flops`] |
//! | `layer_norm` | `pre_norm` | `forward`, `backward` | `[m, d]` | none (memory-bound: `bytes`) |
//! | `train_step` | `plain` | `step` | `[b, t]` | `train_flops_per_token · b · t` |
//!
//! A matmul `(M×K)·(K×N)` has shape `[M, K, N]` and costs `2·M·K·N` FLOPs (one multiply and
//! one add per term). For a linear layer `Y = X·W` (`X` is `[m, k]`, `W` is `[k, n]`):
//! `forward` is `X·W` (`[m, k, n]`), `backward_input` is `dY·Wᵀ` (`[m, n, k]`) and
//! `backward_weight` is `Xᵀ·dY` (`[k, m, n]`). Burn computes the weight gradient of a linear
//! layer on a `[b, t, k]` input as a batched product `[b, k, t]·[b, t, n]` summed over `b`
//! (`burn-backend`'s `linear_weight_backward`); `backward_weight` times that, and the Burn-only
//! `backward_weight_flat` times the flattened `[k, m]·[m, n]` product PyTorch computes.
//!
//! Kernel rows (`op` = `kernels` or `kernel`, CUDA only) split one profiled training step by
//! CubeCL kernel category (see `memwall_runner::bench`).

use super::{RecordFileError, RowError};
use crate::spec::ModelConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `format` of an [`AttributionRow`].
pub const ATTRIBUTION_FORMAT: &str = "memwall-attribution/1";

/// How the timing of one [`AttributionRow`] ended, as the Burn bench and the PyTorch script
/// write it (`"ok"`, `"unsupported"`, `"failed"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttributionStatus {
    /// Timed (`"ok"`): the row has its `median_s` and repeats.
    Ok,
    /// The backend cannot run the operation, e.g. lacks the dtype (`"unsupported"`); the row's
    /// `reason` says why.
    Unsupported,
    /// The operation failed (`"failed"`); the row's `reason` holds the error.
    Failed,
}

impl AttributionStatus {
    /// The status's text in the rows: `"ok"`, `"unsupported"` or `"failed"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttributionStatus::Ok => "ok",
            AttributionStatus::Unsupported => "unsupported",
            AttributionStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for AttributionStatus {
    /// [`AttributionStatus::as_str`], honouring width and alignment.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Folder of the attribution rows inside a study's record-store folder
/// (`runs/<study>/attribution/<framework>.<device>.jsonl`).
pub const ATTRIBUTION_DIR: &str = "attribution";

/// One timed operation of one framework on one device, as one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AttributionRow {
    /// [`ATTRIBUTION_FORMAT`].
    pub format: String,
    /// `burn` or `pytorch`.
    pub framework: String,
    /// Burn's version (`0.21.0`) or `torch.__version__`.
    pub framework_version: String,
    /// The backend: `flex`, `ndarray`, `cuda`, `cuda+fusion` (Burn); `cuda` or `cpu` (PyTorch).
    pub backend: String,
    /// The device's name: the GPU's name from the driver, or the CPU model.
    pub device: String,
    /// `matmul`, `attention`, `attention_naive`, `layer_norm`, `train_step`, `kernels` (one
    /// kernel category of a profiled step) or `kernel` (one kernel of it).
    pub op: String,
    /// Which one: `attn_qkvo`, `mlp_up`, `mlp_down`, `lm_head`, `causal`, `pre_norm`, `plain`,
    /// or a kernel category / kernel name.
    pub name: String,
    /// The operation's shape (see the module documentation).
    pub shape: Vec<u64>,
    /// `f32`, `bf16` or `f16`.
    pub dtype: String,
    /// `forward`, `backward`, `backward_input`, `backward_weight`, `backward_weight_flat` or
    /// `step`.
    pub pass: String,
    /// `ok`, `unsupported` (the backend lacks the dtype) or `failed`.
    pub status: AttributionStatus,
    /// Why it is not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Median wall time of the timed repeats (device synchronized before and after each), s.
    /// For a kernel row: the summed time of its kernels in the profiled step.
    #[serde(default)]
    pub median_s: Option<f64>,
    /// Timed repeats (after the warm-up runs); profiled steps for a kernel row.
    pub repeats: usize,
    /// FLOPs of one run (formula in the module documentation); `None` for memory-bound
    /// operations and kernel rows.
    #[serde(default)]
    pub flops: Option<f64>,
    /// `flops / median_s / 1e12`.
    #[serde(default)]
    pub tflops: Option<f64>,
    /// Bytes a memory-bound operation must move at least (inputs read and outputs written
    /// once), for `layer_norm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<f64>,
    /// How often one training step of the model runs this operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_step: Option<u64>,
    /// Kernel launches counted in the profiled step (kernel rows only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_launches: Option<u64>,
    /// What ran (the implementation, precision settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The model whose shapes these are.
    pub model: ModelConfig,
}

impl AttributionRow {
    /// The row's key among one framework's rows: (op, name, pass, dtype, shape).
    pub fn key(&self) -> (String, String, String, String, Vec<u64>) {
        (
            self.op.clone(),
            self.name.clone(),
            self.pass.clone(),
            self.dtype.clone(),
            self.shape.clone(),
        )
    }

    /// Checks the row's values; returns the field at fault and the message.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_string(), m));
        if self.format != ATTRIBUTION_FORMAT {
            return bad(
                "format",
                format!("`{}` is not {ATTRIBUTION_FORMAT}", self.format),
            );
        }
        if !["burn", "pytorch"].contains(&self.framework.as_str()) {
            return bad(
                "framework",
                format!("`{}` is not burn or pytorch", self.framework),
            );
        }
        for (field, v) in [
            ("op", &self.op),
            ("name", &self.name),
            ("pass", &self.pass),
            ("device", &self.device),
        ] {
            if v.trim().is_empty() {
                return bad(field, "is empty".into());
            }
        }
        if !["f32", "bf16", "f16"].contains(&self.dtype.as_str()) {
            return bad("dtype", format!("`{}` is not f32, bf16 or f16", self.dtype));
        }
        for (field, v) in [
            ("median_s", self.median_s),
            ("flops", self.flops),
            ("tflops", self.tflops),
            ("bytes", self.bytes),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return bad(field, format!("{v} is not a finite number >= 0"));
                }
            }
        }
        if self.status == AttributionStatus::Ok {
            if !self.median_s.is_some_and(|s| s > 0.0) {
                return bad("median_s", "an `ok` row needs a time above 0".into());
            }
            if self.repeats == 0 {
                return bad("repeats", "an `ok` row needs at least one repeat".into());
            }
        }
        Ok(())
    }
}

/// Parses one JSON line as an [`AttributionRow`] and checks it.
///
/// # Errors
/// [`RowError`], naming the field at fault (`field `median_s`: ...`).
pub fn parse_row(line: &str) -> Result<AttributionRow, RowError> {
    let row: AttributionRow = super::parse_json(line)?;
    row.check()?;
    Ok(row)
}

/// The rows of a `.jsonl` file (blank lines skipped), and for each line that does not read, its
/// error naming the file, the 1-based line and the field: `FILE:LINE: field `x`: ...`.
///
/// # Errors
/// [`RecordFileError::Io`] when the file cannot be read.
pub fn read_rows(path: &Path) -> Result<(Vec<AttributionRow>, Vec<String>), RecordFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| RecordFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_row(line) {
            Ok(r) => rows.push(r),
            Err(e) => bad.push(format!("{}:{}: {e}", path.display(), i + 1)),
        }
    }
    Ok((rows, bad))
}

/// A file-name-safe form of a device name (`NVIDIA H100 80GB HBM3` -> `nvidia-h100-80gb-hbm3`).
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// The file name of one framework's rows on one device: `<framework>.<device slug>.jsonl`.
pub fn file_name(framework: &str, device: &str) -> String {
    format!("{framework}.{}.jsonl", slug(device))
}

/// FLOPs of a matmul `(m×k)·(k×n)`: `2·m·k·n`.
pub fn matmul_flops(m: u64, k: u64, n: u64) -> f64 {
    2.0 * m as f64 * k as f64 * n as f64
}

/// FLOPs of causal attention over `[b, h, t, dh]`, as FlashAttention-2 counts them (Dao 2023,
/// "FlashAttention-2", section 4.1; `benchmarks/benchmark_flash_attention.py` of
/// Dao-AILab/flash-attention): forward `4·b·h·t²·dh` (the two products `Q·Kᵀ` and `P·V`),
/// halved for the causal mask (about half the scores are computed); backward 2.5 times the
/// forward (five products instead of two).
pub fn attention_flops(b: u64, h: u64, t: u64, dh: u64, backward: bool) -> f64 {
    let forward = 4.0 * b as f64 * h as f64 * (t as f64).powi(2) * dh as f64 / 2.0;
    if backward {
        2.5 * forward
    } else {
        forward
    }
}

/// One operation the benchmark times (dtype-independent).
#[derive(Debug, Clone, PartialEq)]
pub struct OpSpec {
    /// [`AttributionRow::op`].
    pub op: &'static str,
    /// [`AttributionRow::name`].
    pub name: &'static str,
    /// [`AttributionRow::pass`].
    pub pass: &'static str,
    /// [`AttributionRow::shape`].
    pub shape: Vec<u64>,
    /// FLOPs of one run, if counted.
    pub flops: Option<f64>,
    /// Elements a memory-bound operation reads and writes at least (times the element size
    /// gives [`AttributionRow::bytes`]).
    pub elements_moved: Option<u64>,
    /// [`AttributionRow::calls_per_step`].
    pub calls_per_step: u64,
    /// Timed by Burn only (PyTorch's counterpart is another row).
    pub burn_only: bool,
}

/// The matmul layers of the model: (name, k, n, calls per step, on a `[b, t, k]` input).
/// The head's input is flat (`[b·t, d]`).
fn linears(m: &ModelConfig) -> [(&'static str, u64, u64, u64, bool); 4] {
    let (d, f, v, l) = (
        m.d_model as u64,
        m.d_ff as u64,
        m.vocab as u64,
        m.layers as u64,
    );
    [
        ("attn_qkvo", d, d, 4 * l, true),
        ("mlp_up", d, f, l, true),
        ("mlp_down", f, d, l, true),
        ("lm_head", d, v, 1, false),
    ]
}

/// Every operation of one transformer block and the head of `model`, in report order.
pub fn operations(model: &ModelConfig) -> Vec<OpSpec> {
    let tokens = model.batch as u64 * model.seq_len as u64;
    let mut ops = matmul_ops(model);
    ops.extend(attention_ops(model));
    ops.extend(memory_bound_ops(model));
    ops.push(OpSpec {
        op: "train_step",
        name: "plain",
        pass: "step",
        shape: vec![model.batch as u64, model.seq_len as u64],
        flops: Some(model.train_flops_per_token() * tokens as f64),
        elements_moved: None,
        calls_per_step: 1,
        burn_only: false,
    });
    ops
}

/// The matmuls of [`linears`]: forward, the input and weight gradients, and (for Burn only,
/// on a `[b, t, k]` input) the weight gradient as one flat product.
fn matmul_ops(model: &ModelConfig) -> Vec<OpSpec> {
    let tokens = model.batch as u64 * model.seq_len as u64;
    let mut ops = Vec::new();
    for (name, k, n, calls, three_d) in linears(model) {
        let mm = |pass, [x, y, z]: [u64; 3], burn_only| OpSpec {
            op: "matmul",
            name,
            pass,
            shape: vec![x, y, z],
            flops: Some(matmul_flops(x, y, z)),
            elements_moved: None,
            calls_per_step: calls,
            burn_only,
        };
        ops.push(mm("forward", [tokens, k, n], false));
        ops.push(mm("backward_input", [tokens, n, k], false));
        ops.push(mm("backward_weight", [k, tokens, n], false));
        if three_d {
            ops.push(mm("backward_weight_flat", [k, tokens, n], true));
        }
    }
    ops
}

/// Causal attention, memory-efficient and naive, forward and backward, once per layer.
fn attention_ops(model: &ModelConfig) -> Vec<OpSpec> {
    let (b, t, d, h) = (
        model.batch as u64,
        model.seq_len as u64,
        model.d_model as u64,
        model.heads as u64,
    );
    let dh = d / h.max(1);
    let mut ops = Vec::new();
    for op in ["attention", "attention_naive"] {
        for (pass, backward) in [("forward", false), ("backward", true)] {
            ops.push(OpSpec {
                op,
                name: "causal",
                pass,
                shape: vec![b, h, t, dh],
                flops: Some(attention_flops(b, h, t, dh, backward)),
                elements_moved: None,
                calls_per_step: model.layers as u64,
                burn_only: false,
            });
        }
    }
    ops
}

/// The memory-bound operations, with the elements they move instead of FLOPs: layer norm and
/// GELU (forward and backward) and the head merge's layout copy.
fn memory_bound_ops(model: &ModelConfig) -> Vec<OpSpec> {
    let (b, t, d, h, l) = (
        model.batch as u64,
        model.seq_len as u64,
        model.d_model as u64,
        model.heads as u64,
        model.layers as u64,
    );
    let tokens = b * t;
    let mut ops = Vec::new();
    for (pass, tensors) in [("forward", 2), ("backward", 3)] {
        ops.push(OpSpec {
            op: "layer_norm",
            name: "pre_norm",
            pass,
            shape: vec![tokens, d],
            flops: None,
            // forward reads x and writes y; backward reads x and dy and writes dx.
            elements_moved: Some(tensors * tokens * d),
            calls_per_step: 2 * l + 1,
            burn_only: false,
        });
    }
    for (pass, tensors) in [("forward", 2), ("backward", 3)] {
        ops.push(OpSpec {
            op: "gelu",
            name: "mlp",
            pass,
            shape: vec![tokens, model.d_ff as u64],
            flops: None,
            // forward reads x and writes y; backward reads x and dy and writes dx.
            elements_moved: Some(tensors * tokens * model.d_ff as u64),
            calls_per_step: l,
            burn_only: false,
        });
    }
    // Merging the heads ([b, h, t, dh] -> [b, t, h·dh]) copies a permuted tensor into a
    // contiguous one: once per block forward, and once per q, k, v in the backward of the split.
    ops.push(OpSpec {
        op: "head_merge",
        name: "layout_copy",
        pass: "forward",
        shape: vec![b, h, t, d / h.max(1)],
        flops: None,
        elements_moved: Some(2 * tokens * d),
        calls_per_step: 4 * l,
        burn_only: false,
    });
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ModelConfig {
        ModelConfig {
            layers: 2,
            d_model: 16,
            heads: 2,
            d_ff: 32,
            seq_len: 8,
            batch: 2,
            vocab: 300,
            tie_embeddings: true,
        }
    }

    fn row() -> AttributionRow {
        AttributionRow {
            format: ATTRIBUTION_FORMAT.into(),
            framework: "burn".into(),
            framework_version: "0.21.0".into(),
            backend: "flex".into(),
            device: "AMD EPYC".into(),
            op: "matmul".into(),
            name: "mlp_up".into(),
            shape: vec![16, 16, 32],
            dtype: "f32".into(),
            pass: "forward".into(),
            status: AttributionStatus::Ok,
            reason: None,
            median_s: Some(0.5),
            repeats: 3,
            flops: Some(matmul_flops(16, 16, 32)),
            tflops: Some(0.25),
            bytes: None,
            calls_per_step: Some(2),
            kernel_launches: None,
            note: None,
            model: model(),
        }
    }

    #[test]
    fn the_operations_cover_every_distinct_product_of_a_block_and_the_head() {
        let ops = operations(&model());
        let find = |op: &str, name: &str, pass: &str| {
            ops.iter()
                .find(|o| o.op == op && o.name == name && o.pass == pass)
                .unwrap_or_else(|| panic!("{op} {name} {pass}"))
        };
        // tokens m = 16, d = 16, f = 32, V = 300
        assert_eq!(find("matmul", "mlp_up", "forward").shape, [16, 16, 32]);
        assert_eq!(
            find("matmul", "mlp_up", "backward_input").shape,
            [16, 32, 16]
        );
        assert_eq!(
            find("matmul", "mlp_up", "backward_weight").shape,
            [16, 16, 32]
        );
        assert_eq!(find("matmul", "lm_head", "forward").shape, [16, 16, 300]);
        assert_eq!(find("matmul", "attn_qkvo", "forward").calls_per_step, 8);
        assert!(ops
            .iter()
            .all(|o| !(o.name == "lm_head" && o.pass == "backward_weight_flat")));
        let fwd = find("attention", "causal", "forward");
        assert_eq!(fwd.shape, [2, 2, 8, 8]);
        assert_eq!(fwd.flops, Some(4.0 * 2.0 * 2.0 * 64.0 * 8.0 / 2.0));
        assert_eq!(
            find("attention", "causal", "backward").flops,
            Some(2.5 * fwd.flops.unwrap())
        );
        assert_eq!(
            find("layer_norm", "pre_norm", "backward").elements_moved,
            Some(3 * 16 * 16)
        );
        assert_eq!(find("layer_norm", "pre_norm", "forward").calls_per_step, 5);
        for o in &ops {
            if o.op == "matmul" {
                let s = &o.shape;
                assert_eq!(o.flops, Some(2.0 * (s[0] * s[1] * s[2]) as f64), "{o:?}");
            }
        }
    }

    #[test]
    fn rows_round_trip_and_bad_lines_name_the_field() {
        let line = serde_json::to_string(&row()).unwrap();
        assert_eq!(parse_row(&line).unwrap(), row());
        let err = parse_row(&line.replace("\"repeats\":3", "\"repeats\":\"x\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`repeats`"), "{err}");
        let err = parse_row(&line.replace("\"status\":\"ok\"", "\"status\":\"great\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("field `status`"), "{err}");
        for (status, text) in [
            (AttributionStatus::Ok, "ok"),
            (AttributionStatus::Unsupported, "unsupported"),
            (AttributionStatus::Failed, "failed"),
        ] {
            assert_eq!(serde_json::to_value(status).unwrap(), text);
            assert_eq!((status.as_str(), status.to_string()), (text, text.into()));
        }
        let mut r = row();
        r.median_s = None;
        let err = parse_row(&serde_json::to_string(&r).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("`median_s`"), "{err}");
        r = row();
        r.dtype = "f64".into();
        let err = parse_row(&serde_json::to_string(&r).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("`dtype`"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("burn.x.jsonl");
        std::fs::write(&path, format!("{line}\n\n{{\"format\": 1}}\n")).unwrap();
        let (rows, bad) = read_rows(&path).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(bad.len(), 1);
        assert!(
            bad[0].contains("burn.x.jsonl:3: field `format`"),
            "{}",
            bad[0]
        );
    }

    #[test]
    fn file_names_are_framework_and_device() {
        assert_eq!(
            file_name("pytorch", "NVIDIA H100 80GB HBM3"),
            "pytorch.nvidia-h100-80gb-hbm3.jsonl"
        );
    }
}
