//! The report section "Where the time goes: kernels, memwall (Burn) beside PyTorch": the rows of
//! the attribution benchmark (`memwall-job bench` for Burn, `reference/torch_attribution.py`
//! for PyTorch; [`memwall_core::record::attribution`]) stored as
//! `runs/<study>/attribution/<framework>.<device>.jsonl`, one table per device (and model and
//! Burn backend) with each operation's time and TFLOP/s in both frameworks and their ratio, a
//! table of where one training step's time goes (each operation's time times its calls per
//! step), and, where the CUDA runner profiled a step, its kernel categories.

use crate::content::{Section, Table};
use memwall_core::record::attribution::{AttributionRow, AttributionStatus};
use memwall_core::spec::ModelConfig;
use std::collections::BTreeMap;

/// The section of a study's attribution rows (`rows`, with `bad`, one message per line or
/// file that did not read: [`crate::analysis::attribution::load`]), or `None` when there is
/// neither (see the module documentation). Lines that did not read are named in the
/// section's notes.
pub fn section(rows: &[AttributionRow], bad: &[String]) -> Option<Section> {
    for b in bad {
        tracing::warn!("attribution rows: leaving out {b}");
    }
    if rows.is_empty() && bad.is_empty() {
        return None;
    }
    Some(build(rows, bad))
}

fn rank(list: &[&str], x: &str) -> usize {
    list.iter().position(|y| *y == x).unwrap_or(list.len())
}

const OPS: &[&str] = &[
    "matmul",
    "attention",
    "attention_naive",
    "layer_norm",
    "gelu",
    "head_merge",
    "train_step",
];
const NAMES: &[&str] = &["attn_qkvo", "mlp_up", "mlp_down", "lm_head"];
const PASSES: &[&str] = &[
    "forward",
    "backward_input",
    "backward_weight",
    "backward_weight_flat",
    "backward",
    "step",
];
const DTYPES: &[&str] = &["f32", "bf16", "f16"];

/// The operation as the table names it.
fn op_label(op: &str, name: &str) -> String {
    match (op, name) {
        ("matmul", "attn_qkvo") => "matmul, q/k/v/o".into(),
        ("matmul", "mlp_up") => "matmul, MLP up".into(),
        ("matmul", "mlp_down") => "matmul, MLP down".into(),
        ("matmul", "lm_head") => "matmul, LM head".into(),
        ("attention", _) => "attention".into(),
        ("attention_naive", _) => "attention, naive".into(),
        ("layer_norm", _) => "layer norm".into(),
        ("gelu", _) => "GELU".into(),
        ("head_merge", _) => "head merge (layout copy)".into(),
        ("train_step", _) => "training step".into(),
        (op, name) => format!("{op}, {name}"),
    }
}

fn pass_label(pass: &str) -> &str {
    match pass {
        "backward_input" => "backward dX",
        "backward_weight" => "backward dW",
        "backward_weight_flat" => "backward dW, flat",
        other => other,
    }
}

fn ms(s: Option<f64>) -> String {
    s.map(|s| format!("{:.3}", s * 1e3))
        .unwrap_or_else(|| "–".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "–".into(),
    }
}

fn is_op_row(r: &AttributionRow) -> bool {
    r.op != "kernels" && r.op != "kernel"
}

/// The time of an `ok` row, else `None`.
fn time(r: Option<&&AttributionRow>) -> Option<f64> {
    r.filter(|r| r.status == AttributionStatus::Ok)
        .and_then(|r| r.median_s)
}

type Key = (String, String, String, String, Vec<u64>);

/// Per step, by operation group: the time of each group's operations times their calls per
/// step, for one framework's rows of one dtype. Groups: matmuls (without Burn's flat weight
/// gradient, which the model does not run), attention (memwall's / SDPA), layer norm, and GELU
/// and the head merge (`None` where the rows do not have them: they joined the benchmark later);
/// `None` when an operation of the group is missing or not `ok`.
fn per_step(
    rows: &BTreeMap<Key, &AttributionRow>,
    dtype: &str,
) -> Vec<(&'static str, Option<f64>)> {
    let group = |ops: &[&str]| -> Option<f64> {
        let mut total = 0.0;
        let mut any = false;
        for ((op, _, pass, d, _), r) in rows {
            if d != dtype || !ops.contains(&op.as_str()) || pass == "backward_weight_flat" {
                continue;
            }
            any = true;
            total += time(Some(r))? * r.calls_per_step? as f64;
        }
        any.then_some(total)
    };
    let matmul = group(&["matmul"]);
    let attention = group(&["attention"]);
    let norm = group(&["layer_norm"]);
    let step = group(&["train_step"]);
    // GELU and the head merge joined the benchmark later (issue 28): rows without them still
    // sum the three groups above.
    let has = |op: &str| rows.keys().any(|(o, _, _, d, _)| o == op && d == dtype);
    let optional = |op: &str| if has(op) { group(&[op]) } else { Some(0.0) };
    let (gelu, merge) = (optional("gelu"), optional("head_merge"));
    let sum = match (matmul, attention, norm, gelu, merge) {
        (Some(a), Some(b), Some(c), Some(g), Some(h)) => Some(a + b + c + g + h),
        _ => None,
    };
    let rest = match (step, sum) {
        (Some(s), Some(o)) => Some(s - o),
        _ => None,
    };
    vec![
        ("matmuls", matmul),
        ("attention", attention),
        ("layer norms", norm),
        ("GELUs", gelu.filter(|_| has("gelu"))),
        (
            "head merges (layout copies)",
            merge.filter(|_| has("head_merge")),
        ),
        ("sum of the above", sum),
        (STEP, step),
        ("rest (step − sum)", rest),
    ]
}

/// The label of the measured training step in [`per_step`]'s list.
const STEP: &str = "training step, measured";

/// The rows of one device and model, keyed by operation, of one framework (and backend).
type OpRows<'a> = BTreeMap<Key, &'a AttributionRow>;

/// The rows grouped by device and model: each group's model and its Burn backends in name
/// order (one empty name where the group has no Burn rows, so PyTorch's rows still get tables).
fn groups(rows: &[AttributionRow]) -> BTreeMap<(String, String), (ModelConfig, Vec<String>)> {
    let mut groups: BTreeMap<(String, String), (ModelConfig, Vec<String>)> = BTreeMap::new();
    for r in rows {
        let key = (r.device.clone(), format!("{:?}", r.model));
        let e = groups.entry(key).or_insert((r.model, Vec::new()));
        if r.framework == "burn" && !e.1.contains(&r.backend) {
            e.1.push(r.backend.clone());
        }
    }
    for (_, backends) in groups.values_mut() {
        backends.sort();
        if backends.is_empty() {
            backends.push(String::new());
        }
    }
    groups
}

/// The model as a table caption describes it.
fn model_text(m: &ModelConfig) -> String {
    format!(
        "{} layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}, vocab {}",
        m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, m.vocab
    )
}

/// One Burn backend's operation rows beside PyTorch's, for one device and model: what the
/// tables of [`build`] are made from.
struct Pair<'a> {
    device: &'a str,
    backend: &'a str,
    /// "Burn <backend>", or "no Burn rows".
    burn_name: String,
    /// "PyTorch <version>", or "no PyTorch rows".
    torch_version: &'a str,
    burn: OpRows<'a>,
    torch: &'a OpRows<'a>,
}

/// The table of every operation's time and TFLOP/s in both frameworks and their ratio, in the
/// order of [`OPS`], [`NAMES`], [`PASSES`] and [`DTYPES`]; a cell that did not run carries its
/// reason as a note.
fn operations_table(p: &Pair, model_text: &str) -> Table {
    let mut keys: Vec<&Key> = p.burn.keys().chain(p.torch.keys()).collect();
    keys.sort_by_key(|(op, name, pass, dtype, shape)| {
        (
            rank(OPS, op),
            rank(NAMES, name),
            rank(PASSES, pass),
            rank(DTYPES, dtype),
            shape.clone(),
        )
    });
    keys.dedup();
    let mut table = Table {
        caption: format!(
            "{}: {} beside {} ({model_text})",
            p.device, p.burn_name, p.torch_version
        ),
        columns: vec![
            "operation".into(),
            "pass".into(),
            "shape".into(),
            "dtype".into(),
            "calls/step".into(),
            "Burn ms".into(),
            "Burn TFLOP/s".into(),
            "PyTorch ms".into(),
            "PyTorch TFLOP/s".into(),
            "Burn/PyTorch time".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for key in keys {
        operation_row(&mut table, key, p.burn.get(key), p.torch.get(key));
    }
    table
}

/// Adds the row of one operation (Burn's row `b`, PyTorch's `t`) to [`operations_table`]'s
/// table, with the reasons of cells that are not `ok` as notes.
fn operation_row(
    table: &mut Table,
    key: &Key,
    b: Option<&&AttributionRow>,
    t: Option<&&AttributionRow>,
) {
    let (op, name, pass, dtype, shape) = key;
    let cell_ms = |r: Option<&&AttributionRow>| match r {
        None => "–".to_string(),
        Some(r) if r.status == AttributionStatus::Ok => ms(r.median_s),
        Some(r) => r.status.to_string(),
    };
    let cell_tflops = |r: Option<&&AttributionRow>| {
        r.filter(|r| r.status == AttributionStatus::Ok)
            .and_then(|r| r.tflops)
            .map(|t| format!("{t:.2}"))
            .unwrap_or_else(|| "–".into())
    };
    let calls = b
        .or(t)
        .and_then(|r| r.calls_per_step)
        .map(|c| c.to_string())
        .unwrap_or_else(|| "–".into());
    let row_index = table.rows.len();
    table.rows.push(vec![
        op_label(op, name),
        pass_label(pass).into(),
        shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("×"),
        dtype.clone(),
        calls,
        cell_ms(b),
        cell_tflops(b),
        cell_ms(t),
        cell_tflops(t),
        ratio(time(b), time(t)),
    ]);
    for (column, r, who) in [(5, b, "Burn"), (7, t, "PyTorch")] {
        if let Some(r) = r.filter(|r| r.status != AttributionStatus::Ok) {
            if let Some(reason) = &r.reason {
                table.note(row_index, column, format!("{who}: {reason}"));
            }
        }
    }
}

/// The table of where one training step goes, per dtype ([`per_step`] in both frameworks), and
/// one summary sentence per dtype where both frameworks measured the step.
fn step_table(p: &Pair) -> (Table, Vec<String>) {
    let device = p.device;
    let dtypes: Vec<&str> = DTYPES
        .iter()
        .copied()
        .filter(|d| p.burn.keys().chain(p.torch.keys()).any(|k| k.3 == *d))
        .collect();
    let mut table = Table {
        caption: format!(
            "{device}: one training step by operation, each operation's time times its \
             calls per step ({} beside {})",
            p.burn_name, p.torch_version
        ),
        columns: vec![
            "operations".into(),
            "dtype".into(),
            "Burn ms per step".into(),
            "PyTorch ms per step".into(),
            "Burn/PyTorch".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut summary = Vec::new();
    for dtype in dtypes {
        let ours = per_step(&p.burn, dtype);
        let theirs = per_step(p.torch, dtype);
        for ((label, a), (_, b)) in ours.iter().zip(&theirs) {
            table.rows.push(vec![
                (*label).into(),
                dtype.into(),
                ms(*a),
                ms(*b),
                ratio(*a, *b),
            ]);
        }
        summary.extend(step_sentence(p, dtype, &ours, &theirs));
    }
    (table, summary)
}

/// The summary sentence of one dtype's step in both frameworks (`ours` is Burn's
/// [`per_step`], `theirs` PyTorch's), or `None` where either did not measure the step.
fn step_sentence(
    p: &Pair,
    dtype: &str,
    ours: &[(&str, Option<f64>)],
    theirs: &[(&str, Option<f64>)],
) -> Option<String> {
    let step_of =
        |v: &[(&str, Option<f64>)]| v.iter().find(|(l, _)| *l == STEP).and_then(|(_, t)| *t);
    let (a, b) = (step_of(ours)?, step_of(theirs)?);
    let part = |i: usize| {
        format!(
            "{} {} against {} ms",
            ours[i].0,
            ms(ours[i].1),
            ms(theirs[i].1)
        )
    };
    Some(format!(
        "{}, {dtype}: a training step takes {} ms in Burn ({}) and \
         {} ms in PyTorch ({}); per step, {}, {}, {}.",
        p.device,
        ms(Some(a)),
        p.backend,
        ms(Some(b)),
        ratio(Some(a), Some(b)),
        part(0),
        part(1),
        part(2)
    ))
}

/// The table of the kernel categories of one profiled step (CUDA) from Burn's `kernels` rows,
/// or `None` where there are none.
fn kernel_table(device: &str, backend: &str, kernels: &[&AttributionRow]) -> Option<Table> {
    if kernels.is_empty() {
        return None;
    }
    let mut categories: Vec<&str> = Vec::new();
    for r in kernels {
        if !categories.contains(&r.name.as_str()) {
            categories.push(&r.name);
        }
    }
    let find = |c: &str, d: &str| {
        kernels
            .iter()
            .find(|r| r.name == c && r.dtype == d && r.status == AttributionStatus::Ok)
    };
    let total = |d: &str| find("total", d).and_then(|r| r.median_s);
    let mut kt = Table {
        caption: format!(
            "{device}: kernels of one profiled training step by category (Burn \
             {backend}, CubeCL's profiler)"
        ),
        columns: vec![
            "kernel category".into(),
            "f32 launches".into(),
            "f32 ms".into(),
            "bf16 launches".into(),
            "bf16 ms".into(),
            "bf16 share".into(),
            "bf16/f32 time".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for c in categories {
        let (f, h) = (find(c, "f32"), find(c, "bf16"));
        let launches = |r: Option<&&AttributionRow>| {
            r.and_then(|r| r.kernel_launches)
                .map(|n| n.to_string())
                .unwrap_or_else(|| "–".into())
        };
        let (fs, hs) = (f.and_then(|r| r.median_s), h.and_then(|r| r.median_s));
        kt.rows.push(vec![
            c.into(),
            launches(f),
            ms(fs),
            launches(h),
            ms(hs),
            match (hs, total("bf16")) {
                (Some(s), Some(t)) if t > 0.0 => format!("{:.1}%", 100.0 * s / t),
                _ => "–".into(),
            },
            ratio(hs, fs),
        ]);
    }
    for r in kernels.iter().filter(|r| r.status != AttributionStatus::Ok) {
        if let Some(reason) = &r.reason {
            let i = kt.rows.iter().position(|row| row[0] == r.name);
            if let Some(i) = i {
                let column = if r.dtype == "f32" { 2 } else { 4 };
                kt.note(i, column, reason.clone());
            }
        }
    }
    Some(kt)
}

/// The section's notes: how each framework measures, how FLOPs are counted, and the lines
/// left out (`bad`).
fn notes(bad: &[String]) -> Vec<String> {
    let mut notes = vec![
        "Burn: `memwall-job bench` (the job's backend and device; matmuls as the model calls \
         them on the inner backend: a linear layer's `linear`, `linear_x_backward` and \
         `linear_weight_backward` on the `[batch, seq, k]` input; memwall's memory-efficient \
         attention, Burn's naive attention and memwall's layer norm through autodiff, backward \
         seeded with ones; one whole training step with AdamW). PyTorch: \
         `reference/torch_attribution.py` (`torch.matmul`, cuBLAS on CUDA; \
         `F.scaled_dot_product_attention`; `F.layer_norm`; f32 matmuls at highest precision, no \
         TF32). Each operation runs untimed warm-up repeats, then timed repeats between two \
         device synchronizations; times are medians."
            .to_string(),
        "FLOPs: `2·M·K·N` for a matmul of shape `M×K×N` (dX: `dY·Wᵀ`, dW: `Xᵀ·dY`); causal \
         attention over `b×h×t×d_head` as FlashAttention-2 counts it (Dao 2023, section 4.1): \
         forward `4·b·h·t²·d_head / 2`, backward 2.5 times the forward; the training step \
         `6N + 6·layers·seq·d_model` per token. Layer norm is memory-bound: its rows carry the \
         bytes it moves instead."
            .to_string(),
        "Burn computes a linear layer's weight gradient on a `[batch, seq, k]` input as a \
         batched product summed over the batch (`backward dW`); `backward dW, flat` times the \
         flattened product PyTorch computes, for Burn only."
            .to_string(),
        "Kernel categories: CubeCL's profiler times each kernel between two stream \
         synchronizations, so every kernel carries a launch and a synchronization (tens of \
         microseconds): small kernels weigh more than in an unprofiled step."
            .to_string(),
    ];
    for b in bad {
        notes.push(format!("Left out: {b}."));
    }
    notes
}

/// The section's "ours" paragraph: the summary sentences, or the number of rows and their
/// devices where no step was measured in both frameworks.
fn ours(rows: &[AttributionRow], summary: &[String]) -> String {
    if !summary.is_empty() {
        return format!(
            "{} Ratios are Burn / PyTorch time (above 1x: Burn is slower).",
            summary.join(" ")
        );
    }
    let mut devices: Vec<&str> = rows.iter().map(|r| r.device.as_str()).collect();
    devices.sort();
    devices.dedup();
    format!(
        "{} row(s) on {}; ratios are Burn / PyTorch time (above 1x: Burn is slower).",
        rows.len(),
        if devices.is_empty() {
            "–".to_string()
        } else {
            devices.join(", ")
        }
    )
}

/// The section from `rows` and the messages of lines that did not read: per device, model and
/// Burn backend, the operations table, the step table and (where profiled) the kernel table.
pub fn build(rows: &[AttributionRow], bad: &[String]) -> Section {
    let mut tables = Vec::new();
    let mut summary = Vec::new();
    for ((device, model_key), (model, backends)) in groups(rows) {
        let same =
            |r: &&AttributionRow| r.device == device && format!("{:?}", r.model) == model_key;
        let torch: OpRows = rows
            .iter()
            .filter(same)
            .filter(|r| r.framework == "pytorch" && is_op_row(r))
            .map(|r| (r.key(), r))
            .collect();
        let torch_version = torch
            .values()
            .next()
            .map(|r| format!("PyTorch {}", r.framework_version))
            .unwrap_or_else(|| "no PyTorch rows".into());
        let model_text = model_text(&model);
        for backend in &backends {
            let burn_rows = || {
                rows.iter()
                    .filter(same)
                    .filter(|r| r.framework == "burn" && &r.backend == backend)
            };
            let pair = Pair {
                device: &device,
                backend,
                burn_name: if backend.is_empty() {
                    "no Burn rows".to_string()
                } else {
                    format!("Burn {backend}")
                },
                torch_version: &torch_version,
                burn: burn_rows()
                    .filter(|r| is_op_row(r))
                    .map(|r| (r.key(), r))
                    .collect(),
                torch: &torch,
            };
            tables.push(operations_table(&pair, &model_text));
            let (table, sentences) = step_table(&pair);
            tables.push(table);
            summary.extend(sentences);
            let kernels: Vec<&AttributionRow> = burn_rows().filter(|r| r.op == "kernels").collect();
            tables.extend(kernel_table(&device, backend, &kernels));
        }
    }
    Section {
        title: "Where the time goes: kernels, memwall (Burn) beside PyTorch".into(),
        claim: "The source's frameworks run each operation on vendor kernels (cuBLAS matmuls, \
                fused attention); this section times every operation of the model's block and \
                head in Burn and in PyTorch on the same device, so a gap in step time is \
                attributed operation by operation."
            .into(),
        ours: ours(rows, &summary),
        notes: notes(bad),
        tables,
        figures: Vec::new(),
        details: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::attribution::load;
    use memwall_core::record::attribution::ATTRIBUTION_DIR;
    use memwall_core::record::attribution::{operations, ATTRIBUTION_FORMAT};
    use std::path::Path;

    fn model() -> ModelConfig {
        ModelConfig {
            layers: 2,
            d_model: 32,
            heads: 2,
            d_ff: 64,
            seq_len: 32,
            batch: 2,
            vocab: 320,
            tie_embeddings: true,
        }
    }

    /// Rows of every operation for `framework`, each taking `scale` times a fixed time.
    fn rows(framework: &str, scale: f64) -> Vec<AttributionRow> {
        let mut out = Vec::new();
        for dtype in ["f32", "bf16"] {
            for (i, spec) in operations(&model()).into_iter().enumerate() {
                if framework == "pytorch" && spec.burn_only {
                    continue;
                }
                let s = scale * 1e-3 * (i + 1) as f64;
                out.push(AttributionRow {
                    format: ATTRIBUTION_FORMAT.into(),
                    framework: framework.into(),
                    framework_version: "1".into(),
                    backend: "cuda".into(),
                    device: "GPU X".into(),
                    op: spec.op.into(),
                    name: spec.name.into(),
                    shape: spec.shape.clone(),
                    dtype: dtype.into(),
                    pass: spec.pass.into(),
                    status: AttributionStatus::Ok,
                    reason: None,
                    median_s: Some(s),
                    repeats: 3,
                    flops: spec.flops,
                    tflops: spec.flops.map(|f| f / s / 1e12),
                    bytes: None,
                    calls_per_step: Some(spec.calls_per_step),
                    kernel_launches: None,
                    note: None,
                    model: model(),
                });
            }
        }
        out
    }

    fn write(dir: &Path, name: &str, rows: &[AttributionRow], extra: &str) {
        let mut text: String = rows
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect();
        text.push_str(extra);
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn the_section_sets_burn_beside_pytorch_per_operation_and_per_step() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(
            load(tmp.path(), "peak_memory").is_none(),
            "no folder, no rows"
        );
        assert!(section(&[], &[]).is_none(), "no rows, no section");
        let dir = tmp.path().join("peak_memory").join(ATTRIBUTION_DIR);
        std::fs::create_dir_all(&dir).unwrap();
        let mut burn = rows("burn", 2.0);
        // bf16 q/k/v/o forward unsupported in Burn: a status cell with the reason as a note.
        let i = burn
            .iter()
            .position(|r| r.dtype == "bf16" && r.name == "attn_qkvo" && r.pass == "forward")
            .unwrap();
        burn[i].status = AttributionStatus::Unsupported;
        burn[i].median_s = None;
        burn[i].tflops = None;
        burn[i].reason = Some("no bf16 here".into());
        // A profiled step's kernel categories.
        let mut kernel = burn[0].clone();
        kernel.op = "kernels".into();
        kernel.name = "matmul".into();
        kernel.pass = "step".into();
        kernel.dtype = "bf16".into();
        kernel.kernel_launches = Some(7);
        kernel.median_s = Some(0.004);
        kernel.flops = None;
        kernel.tflops = None;
        let mut total = kernel.clone();
        total.name = "total".into();
        total.median_s = Some(0.008);
        burn.extend([total, kernel]);
        write(&dir, "burn.gpu-x.jsonl", &burn, "");
        write(
            &dir,
            "pytorch.gpu-x.jsonl",
            &rows("pytorch", 1.0),
            "{\"format\": \"memwall-attribution/1\", \"framework\": 3}\nnot json\n",
        );
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();

        let (all, bad) = load(tmp.path(), "peak_memory").unwrap();
        assert_eq!(bad.len(), 2, "{bad:?}");
        let n = operations(&model()).len();
        assert_eq!(all.len(), 2 * n + 2 + 2 * (n - 3));
        assert!(
            bad[0].contains("pytorch.gpu-x.jsonl:")
                && bad[0].contains(&format!(":{}:", 2 * (n - 3) + 1))
                && bad[0].contains("field `framework`"),
            "{}",
            bad[0]
        );

        let s = section(&all, &bad).unwrap();
        assert_eq!(
            s.title,
            "Where the time goes: kernels, memwall (Burn) beside PyTorch"
        );
        assert_eq!(s.tables.len(), 3, "operations, per step, kernels");
        let ops = &s.tables[0];
        assert!(ops.caption.starts_with("GPU X: Burn cuda beside PyTorch 1"));
        assert_eq!(ops.columns.len(), 10);
        assert_eq!(ops.rows.len(), 2 * n);
        let row = |op: &str, pass: &str, dtype: &str| {
            ops.rows
                .iter()
                .position(|r| r[0] == op && r[1] == pass && r[3] == dtype)
                .unwrap_or_else(|| panic!("{op} {pass} {dtype}"))
        };
        // Every operation: Burn takes twice PyTorch's time.
        let up = &ops.rows[row("matmul, MLP up", "forward", "f32")];
        assert_eq!(up[2], "64×32×64");
        assert_eq!(up[4], "2");
        assert_eq!(up[9], "2.00x");
        let flat = &ops.rows[row("matmul, MLP up", "backward dW, flat", "f32")];
        assert_eq!((flat[7].as_str(), flat[9].as_str()), ("–", "–"));
        let unsupported = row("matmul, q/k/v/o", "forward", "bf16");
        assert_eq!(ops.rows[unsupported][5], "unsupported");
        assert!(ops
            .notes
            .iter()
            .any(|n| n.row == unsupported && n.column == 5 && n.text.contains("no bf16 here")));
        // f32 rows come before bf16 rows of the same operation, matmuls first, the step last.
        assert!(row("matmul, q/k/v/o", "forward", "f32") < unsupported);
        assert_eq!(ops.rows.last().unwrap()[0], "training step");

        let step = &s.tables[1];
        let f32_step = step
            .rows
            .iter()
            .find(|r| r[0] == "training step, measured" && r[1] == "f32")
            .unwrap();
        assert_eq!(f32_step[4], "2.00x");
        let f32_matmuls = step
            .rows
            .iter()
            .find(|r| r[0] == "matmuls" && r[1] == "f32")
            .unwrap();
        assert_eq!(f32_matmuls[4], "2.00x");
        // bf16 matmuls: one Burn operation is not ok, so no per-step sum.
        let bf16_matmuls = step
            .rows
            .iter()
            .find(|r| r[0] == "matmuls" && r[1] == "bf16")
            .unwrap();
        assert_eq!(bf16_matmuls[2], "–");
        assert!(
            s.ours.contains("GPU X, f32: a training step takes"),
            "{}",
            s.ours
        );

        let kernels = &s.tables[2];
        assert_eq!(kernels.rows[0][0], "total");
        let matmul = kernels.rows.iter().find(|r| r[0] == "matmul").unwrap();
        assert_eq!(
            (matmul[3].as_str(), matmul[4].as_str(), matmul[5].as_str()),
            ("7", "4.000", "50.0%")
        );
        assert_eq!(
            s.notes.iter().filter(|n| n.starts_with("Left out")).count(),
            2
        );
    }
}
