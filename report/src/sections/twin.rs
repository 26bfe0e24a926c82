//! The report's PyTorch tables: memwall beside its PyTorch eager twin on the same device
//! ([`crate::twin`]'s rows), and the CPU table.

use crate::analysis::{JobRecord, JobStatus};
use crate::content::{Section, Table};
use crate::twin::{TorchModel, TorchRow, TorchStatus};
use std::path::PathBuf;

/// Bytes in `unit` (GiB or MiB) with two decimals, "–" when unknown.
fn in_unit(b: Option<u64>, unit: f64) -> String {
    b.map(|b| format!("{:.2}", b as f64 / unit))
        .unwrap_or_else(|| "–".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => format!("{:.2}x", a / b),
        _ => "–".into(),
    }
}

/// The latest finished memwall record (by `finished_at`) among `records` of the row's
/// configuration on its device, with the row's model shape (layers, widths, sequence, batch;
/// the vocabulary may differ where the row was run with another tokenizer). `None` where no
/// record matches: a row on another device shows no memwall number rather than a wrong one.
fn memwall_row<'a>(
    records: impl IntoIterator<Item = &'a JobRecord>,
    row: &TorchRow,
) -> Option<&'a JobRecord> {
    records
        .into_iter()
        .filter(|r| {
            r.spec.config == row.config
                && r.env.device_name == row.device
                && r.status == JobStatus::Ok
                && same_model(r, &row.model)
        })
        .max_by(|a, b| a.finished_at.cmp(&b.finished_at))
}

/// Whether record `r` ran the model shape `m` (the vocabulary aside: it follows the
/// tokenizer).
pub fn same_model(r: &JobRecord, m: &TorchModel) -> bool {
    let s = &r.spec.model;
    (s.layers, s.d_model, s.heads, s.d_ff, s.seq_len, s.batch)
        == (m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch)
}

/// Whether the CPU row `row` has a home in the report's CPU section: a memwall record of a
/// configuration in `labels` (the experiment file's) on a CPU backend, on the row's device and
/// with its model shape (then the training report's group of that record shows the row,
/// [`cpu_table`]). Rows without one are shown in [`section`], with no memwall number.
pub fn has_cpu_group(row: &TorchRow, records: &[JobRecord], labels: &[(String, String)]) -> bool {
    row.on_cpu()
        && records.iter().any(|r| {
            !r.spec.backend.is_gpu()
                && r.env.device_name == row.device
                && same_model(r, &row.model)
                && labels.iter().any(|(n, _)| *n == r.spec.config)
        })
}

/// The report section "memwall beside PyTorch on the same device": one table per device with
/// PyTorch rows. For a GPU, per configuration memwall's and PyTorch's peak reserved and
/// allocated memory (GiB, or MiB below 1 GiB) and samples/s, each with its ratio memwall /
/// PyTorch (memwall's latest finished record of the configuration on that device and model
/// shape); for a CPU, [`cpu_table`]'s columns. CPU rows with a group of memwall's records on
/// their CPU ([`has_cpu_group`]) are left to that group's section of the report. `None` when
/// the study has no rows left to show and none that failed to read. `labels` maps configuration
/// names to display labels, in report order.
pub fn section(
    rows: &[TorchRow],
    bad: &[(PathBuf, String)],
    records: &[JobRecord],
    labels: &[(String, String)],
) -> Option<Section> {
    let mut rows: Vec<TorchRow> = rows.to_vec();
    rows.retain(|r| !has_cpu_group(r, records, labels));
    if rows.is_empty() && bad.is_empty() {
        return None;
    }
    let mut devices: Vec<(&str, bool)> = rows
        .iter()
        .map(|r| (r.device.as_str(), r.on_cpu()))
        .collect();
    devices.sort();
    devices.dedup();
    let tables = devices
        .iter()
        .filter_map(|&(device, cpu)| {
            if cpu {
                cpu_table(&rows, records, labels, device)
            } else {
                Some(device_table(&rows, records, labels, device))
            }
        })
        .collect();
    let torch_versions = {
        let mut v: Vec<&str> = rows.iter().map(|r| r.torch_version.as_str()).collect();
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let mut names: Vec<&str> = devices.iter().map(|(d, _)| *d).collect();
    names.dedup();
    let mut notes = section_notes(bad);
    if devices.iter().any(|(_, cpu)| *cpu) {
        notes.insert(1, cpu_note());
    }
    Some(Section {
        details: None,
        title: "memwall beside PyTorch on the same device".into(),
        claim: "The source measures these configurations in PyTorch; this section runs them in \
                PyTorch eager on the device memwall ran on, so the two frameworks are compared \
                on equal hardware."
            .into(),
        ours: format!(
            "{} PyTorch row(s) on {} (PyTorch {}); ratios are memwall / PyTorch (below 1x: \
             memwall uses less memory or is slower).",
            rows.len(),
            names.join(", "),
            if torch_versions.is_empty() {
                "–".to_string()
            } else {
                torch_versions
            }
        ),
        notes,
        tables,
        figures: Vec::new(),
    })
}

/// The section's notes: how PyTorch's rows are measured, and the row files that did not read.
fn section_notes(bad: &[(PathBuf, String)]) -> Vec<String> {
    let mut notes = vec![
        "PyTorch: `reference/torch_peak_memory.py` (eager; `torch.utils.checkpoint` for \
         checkpointing, the job's optimizer step per parameter in \
         `register_post_accumulate_grad_hook` for the fused step, `torch.compile` for compile, \
         `torch._functorch.config.activation_memory_budget` (compiled) for the budgets), the \
         same model shape, optimizer (`torch.optim.AdamW`, or for Adafactor the script's own, \
         memwall's algorithm) and steps, random tokens, one process per configuration; f32 \
         matmuls at \"highest\" precision (no TF32), where memwall's may run on TF32. Its peaks are `torch.cuda.max_memory_allocated` \
         and `max_memory_reserved` over the whole run (exact high-water marks); memwall's \
         allocated peak on CUDA is a sampled lower bound, its reserved peak exact."
            .to_string(),
    ];
    for (p, e) in bad {
        notes.push(format!(
            "Left out: `{}` could not be read ({e}).",
            p.display()
        ));
    }
    notes
}

/// How the CPU rows are measured and what their columns are ([`cpu_table`]), for the section
/// that shows them.
pub fn cpu_note() -> String {
    "PyTorch on the CPU: `reference/torch_peak_memory.py --device cpu` (`memwall twin \
     --device cpu`), PyTorch eager, one process per configuration, with the model shape, \
     optimizer, warm-up and timed steps and seed of memwall's job, random tokens; \
     `torch.compile` (Inductor's C++ backend) only for the activation-memory budgets. \
     Samples/s is batch / median step time over the timed steps in both frameworks; the ratio \
     is memwall / PyTorch (below 1x: memwall is slower). Threads: memwall's flex backend runs \
     its operations on rayon's pool of every CPU available to the process (the record's \
     `cpu_threads`), PyTorch on `torch.set_num_threads(N)` with N that same count (the row's \
     `threads`); the last column shows both. Peaks: memwall's is the exact high-water mark of \
     its counting allocator (every heap byte of the job's process, over a step); PyTorch keeps \
     no allocator statistics on the CPU, so its number is the process's resident high-water \
     mark (`getrusage(RUSAGE_SELF).ru_maxrss`: the interpreter, libtorch and its kernels' code \
     and buffers included), an upper bound of what its training needs, beside the resident set \
     right after `import torch` (before the model exists). The two peaks are different \
     quantities, so no ratio is drawn between them."
        .into()
}

/// The table of the CPU rows on `device` (in `labels`' order): per configuration memwall's and
/// PyTorch's samples/s with their ratio memwall / PyTorch, memwall's peak allocated (MiB, with
/// its bound), PyTorch's process resident high-water mark and its resident set after `import
/// torch` (MiB; no ratio: different quantities), and the threads of each. memwall's numbers
/// are those of its latest finished record among `records` of the configuration, device and
/// model shape ("–" where there is none). `None` when no CPU row is on `device`.
pub fn cpu_table<'a>(
    rows: &[TorchRow],
    records: impl IntoIterator<Item = &'a JobRecord> + Clone,
    labels: &[(String, String)],
    device: &str,
) -> Option<Table> {
    let mut ordered: Vec<&TorchRow> = rows
        .iter()
        .filter(|r| r.on_cpu() && r.device == device)
        .collect();
    if ordered.is_empty() {
        return None;
    }
    ordered.sort_by_key(|r| {
        labels
            .iter()
            .position(|(n, _)| n == &r.config)
            .unwrap_or(usize::MAX)
    });
    let ours: Vec<Option<&JobRecord>> = ordered
        .iter()
        .map(|r| memwall_row(records.clone(), r))
        .collect();
    let bound = ours
        .iter()
        .flatten()
        .map(|m| {
            m.peak_bounds
                .map(|b| b.allocated)
                .unwrap_or(memwall_core::measure::Bound::Exact)
        })
        .next()
        .map(|b| format!(", {}", b.as_str()))
        .unwrap_or_default();
    let mut table = Table {
        caption: format!("{device}: memwall and PyTorch eager on the same CPU"),
        columns: vec![
            "configuration".into(),
            "memwall samples/s".into(),
            "PyTorch samples/s".into(),
            "throughput ratio".into(),
            format!("memwall peak allocated{bound} (MiB)"),
            "PyTorch process high-water RSS (MiB)".into(),
            "PyTorch RSS after import torch (MiB)".into(),
            "threads (memwall / PyTorch)".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mib = |b: Option<u64>| {
        b.map(|b| format!("{:.1}", b as f64 / (1u64 << 20) as f64))
            .unwrap_or_else(|| "–".into())
    };
    let dash = || "–".to_string();
    for (r, m) in ordered.into_iter().zip(ours) {
        let label = labels
            .iter()
            .find(|(n, _)| n == &r.config)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| r.config.clone());
        let s = m.and_then(|m| m.summary);
        let ok = r.status == TorchStatus::Ok;
        let threads = |t: Option<usize>| t.map(|t| t.to_string()).unwrap_or_else(dash);
        let row_index = table.rows.len();
        table.rows.push(vec![
            label,
            s.map(|s| format!("{:.2}", s.samples_per_s))
                .unwrap_or_else(dash),
            if ok {
                r.samples_per_s
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(dash)
            } else {
                r.status.to_string()
            },
            if ok {
                ratio(s.map(|s| s.samples_per_s), r.samples_per_s)
            } else {
                dash()
            },
            mib(s.map(|s| s.peak_allocated_bytes)),
            mib(r.max_rss_bytes),
            mib(r.rss_after_import_bytes),
            format!(
                "{} / {}",
                threads(m.map(|m| m.env.cpu_threads)),
                threads(r.threads)
            ),
        ]);
        if !ok {
            if let Some(reason) = &r.reason {
                table.note(row_index, 2, format!("PyTorch: {reason}"));
            }
        }
        if m.is_none() {
            table.note(
                row_index,
                1,
                "no finished memwall record of this configuration, CPU and model shape",
            );
        }
    }
    Some(table)
}

/// The unit of one device's table, as bytes per unit and its name: GiB where any peak of the
/// device's rows (or memwall's records on it) reaches 1 GiB, MiB otherwise (small models).
fn device_unit(rows: &[TorchRow], records: &[JobRecord], device: &str) -> (f64, &'static str) {
    let largest = rows
        .iter()
        .filter(|r| r.device == *device && !r.on_cpu())
        .flat_map(|r| [r.max_memory_reserved_bytes, r.max_memory_allocated_bytes])
        .chain(
            records
                .iter()
                .filter(|m| m.env.device_name == *device)
                .map(|m| m.summary.map(|s| s.peak_reserved_bytes)),
        )
        .flatten()
        .max()
        .unwrap_or(0);
    if largest >= 1 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    }
}

/// One device's table: per PyTorch row (in report order), memwall's and PyTorch's peaks and
/// samples/s with their ratios.
fn device_table(
    rows: &[TorchRow],
    records: &[JobRecord],
    labels: &[(String, String)],
    device: &str,
) -> Table {
    let (unit, unit_name) = device_unit(rows, records, device);
    let mut table = Table {
        caption: format!("{device}: memwall and PyTorch on the same device"),
        columns: vec![
            "configuration".into(),
            format!("memwall peak reserved ({unit_name})"),
            format!("PyTorch peak reserved ({unit_name})"),
            "reserved ratio".into(),
            format!("memwall peak allocated ({unit_name})"),
            format!("PyTorch peak allocated ({unit_name})"),
            "allocated ratio".into(),
            "memwall samples/s".into(),
            "PyTorch samples/s".into(),
            "throughput ratio".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut ordered: Vec<&TorchRow> = rows
        .iter()
        .filter(|r| r.device == *device && !r.on_cpu())
        .collect();
    ordered.sort_by_key(|r| {
        labels
            .iter()
            .position(|(n, _)| n == &r.config)
            .unwrap_or(usize::MAX)
    });
    for r in ordered {
        let label = labels
            .iter()
            .find(|(n, _)| n == &r.config)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| r.config.clone());
        let row_index = table.rows.len();
        table.rows.push(comparison_row(records, r, label, unit));
        if r.status != TorchStatus::Ok {
            if let Some(reason) = &r.reason {
                table.note(row_index, 2, format!("PyTorch: {reason}"));
            }
        }
    }
    table
}

/// The cells of one configuration's row of [`device_table`]: memwall's latest record beside
/// the PyTorch row `r`, peaks in `unit` bytes; a PyTorch row that did not run shows its status
/// and no ratios.
fn comparison_row(records: &[JobRecord], r: &TorchRow, label: String, unit: f64) -> Vec<String> {
    let gib = |b: Option<u64>| in_unit(b, unit);
    let ours = memwall_row(records, r).and_then(|m| m.summary);
    let torch_ok = r.status == TorchStatus::Ok;
    let mut cells = vec![
        label,
        gib(ours.map(|s| s.peak_reserved_bytes)),
        if torch_ok {
            gib(r.max_memory_reserved_bytes)
        } else {
            r.status.to_string()
        },
        ratio(
            ours.map(|s| s.peak_reserved_bytes as f64),
            r.max_memory_reserved_bytes.map(|b| b as f64),
        ),
        gib(ours.map(|s| s.peak_allocated_bytes)),
        if torch_ok {
            gib(r.max_memory_allocated_bytes)
        } else {
            r.status.to_string()
        },
        ratio(
            ours.map(|s| s.peak_allocated_bytes as f64),
            r.max_memory_allocated_bytes.map(|b| b as f64),
        ),
        ours.map(|s| format!("{:.2}", s.samples_per_s))
            .unwrap_or_else(|| "–".into()),
        r.samples_per_s
            .map(|v| format!("{v:.2}"))
            .unwrap_or_else(|| "–".into()),
        ratio(ours.map(|s| s.samples_per_s), r.samples_per_s),
    ];
    if !torch_ok {
        for c in [3, 6, 9] {
            cells[c] = "–".into();
        }
    }
    cells
}
