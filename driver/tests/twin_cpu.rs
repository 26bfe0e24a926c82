//! PyTorch's CPU rows beside memwall's CPU records: a row stored into a copy of the committed
//! `peak_memory` records is rendered in the report's CPU section (samples/s side by side and
//! the ratio, PyTorch's peak labelled as the process high-water mark); a row on another CPU
//! shows no memwall number; a malformed CPU row is refused naming the file and the field.

mod common;

use memwall_core::record::JobRecord;
use memwall_driver::Paths;
use memwall_report::twin::{self, TorchDeviceType, TorchRow, TorchStatus};
use std::path::Path;

/// A finished CPU row of `record`'s configuration and model on `device`, at `samples_per_s`.
fn cpu_row(record: &JobRecord, device: &str, samples_per_s: f64) -> TorchRow {
    let m = record.spec.model;
    let t = record.spec.train;
    TorchRow {
        format: twin::ROW_FORMAT.into(),
        study: "peak_memory".into(),
        config: record.spec.config.clone(),
        status: TorchStatus::Ok,
        reason: None,
        device: device.into(),
        device_type: Some(TorchDeviceType::Cpu),
        threads: Some(record.env.cpu_threads + 1),
        torch_version: "2.x (test row)".into(),
        parameters: Some(1),
        max_memory_allocated_bytes: None,
        max_memory_reserved_bytes: None,
        max_rss_bytes: Some(900 << 20),
        rss_after_import_bytes: Some(400 << 20),
        median_step_s: Some(m.batch as f64 / samples_per_s),
        samples_per_s: Some(samples_per_s),
        first_step_s: Some(1.0),
        final_loss: Some(7.0),
        model: twin::TorchModel {
            layers: m.layers,
            d_model: m.d_model,
            heads: m.heads,
            d_ff: m.d_ff,
            seq_len: m.seq_len,
            batch: m.batch,
            vocab: m.vocab,
            tie_embeddings: m.tie_embeddings,
        },
        train: twin::TorchTrain {
            steps: t.steps,
            warmup_steps: t.warmup_steps,
            lr: t.lr,
            weight_decay: t.weight_decay,
            seed: t.seed,
        },
        finished_at: "2026-11-27T00:00:00Z".into(),
        process_order: None,
        wall_s: None,
        memory_budget_pareto: Vec::new(),
    }
}

/// The table line of `label` in `text` (the first one).
fn table_line<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row `{label}` in {text}"))
}

fn paths(dir: &Path, runs: &Path) -> Paths {
    Paths {
        runs: runs.to_path_buf(),
        reports: dir.join("reports"),
        templates: common::root().join("templates"),
        ..Paths::default()
    }
}

#[test]
fn a_cpu_row_is_rendered_in_the_cpu_section_beside_memwalls_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = common::copy_peak_memory_records(dir);
    let experiment = common::root().join("experiments/peak_memory.toml");
    let glance_before = memwall_driver::glance(&experiment, &runs).unwrap();

    let record = common::cpu_record(&runs, "control");
    let ours = record.summary.unwrap();
    let cpu = record.env.device_name.clone();
    // PyTorch at half memwall's throughput: the ratio memwall / PyTorch is 2.00x.
    let here = cpu_row(&record, &cpu, ours.samples_per_s / 2.0);
    let stored = twin::store_row(&runs, "peak_memory", &here).unwrap();
    assert!(
        stored.starts_with(runs.join("peak_memory/pytorch")),
        "{stored:?}"
    );
    // The same configuration on another CPU: no memwall record there.
    let elsewhere = cpu_row(&record, "Other CPU 9000", 50.0);
    twin::store_row(&runs, "peak_memory", &elsewhere).unwrap();

    let rendered = memwall_driver::report(&experiment, &paths(dir, &runs)).unwrap();
    let report = std::fs::read_to_string(&rendered.markdown).unwrap();

    let cpu_section = common::report_section(&report, "CPU stand-in (cpu profile)");
    assert!(
        cpu_section.contains(&format!("{cpu}: memwall and PyTorch eager on the same CPU")),
        "{cpu_section}"
    );
    let line = table_line(
        cpu_section
            .split("memwall and PyTorch eager on the same CPU")
            .nth(1)
            .unwrap(),
        &record.spec.label,
    );
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    // | label | memwall samples/s | PyTorch samples/s | ratio | memwall peak | RSS | RSS after
    // import | threads |
    assert_eq!(cells[2], format!("{:.2}", ours.samples_per_s), "{line}");
    assert_eq!(
        cells[3],
        format!("{:.2}", ours.samples_per_s / 2.0),
        "{line}"
    );
    assert_eq!(cells[4], "2.00x", "{line}");
    assert_eq!(
        cells[5],
        format!(
            "{:.1}",
            ours.peak_allocated_bytes as f64 / (1u64 << 20) as f64
        ),
        "{line}"
    );
    assert_eq!((cells[6], cells[7]), ("900.0", "400.0"), "{line}");
    assert_eq!(
        cells[8],
        format!(
            "{} / {}",
            record.env.cpu_threads,
            record.env.cpu_threads + 1
        ),
        "{line}"
    );
    // PyTorch's peak is labelled as what it is, with no ratio to memwall's, and no CUDA
    // column.
    assert!(cpu_section.contains("PyTorch process high-water RSS (MiB)"));
    assert!(
        cpu_section.contains("ru_maxrss"),
        "the note on PyTorch's CPU peak"
    );
    assert!(cpu_section.contains("no ratio is drawn between them"));
    let header = cpu_section
        .lines()
        .find(|l| l.contains("PyTorch process high-water RSS"))
        .unwrap();
    assert!(!header.contains("reserved"), "{header}");
    // The other CPU's row: in the section beside PyTorch, with no memwall number.
    let beside = common::report_section(&report, "memwall beside PyTorch on the same device");
    assert!(beside.contains("Other CPU 9000: memwall and PyTorch eager on the same CPU"));
    assert!(!beside.contains(&format!("{cpu}:")), "{beside}");
    let line = table_line(beside, &record.spec.label);
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    assert!(cells[2].starts_with('–'), "memwall's cell: {line}");
    assert_eq!((cells[3], cells[4]), ("50.00", "–"), "{line}");
    assert!(!cpu_section.contains("Other CPU 9000"));
    // The glance reads memwall's records only.
    assert_eq!(
        memwall_driver::glance(&experiment, &runs).unwrap(),
        glance_before
    );
}

#[test]
fn a_malformed_cpu_row_is_refused_naming_the_file_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runs = common::copy_peak_memory_records(dir);
    let record = common::cpu_record(&runs, "control");
    let good = serde_json::to_value(cpu_row(&record, &record.env.device_name, 10.0)).unwrap();
    let results = dir.join("results");
    std::fs::create_dir_all(&results).unwrap();
    let file = results.join("peak_memory.control.json");
    for (field, value, expect) in [
        (
            "max_memory_allocated_bytes",
            serde_json::json!(5),
            "field `max_memory_allocated_bytes`",
        ),
        ("device_type", serde_json::json!("tpu"), "device_type"),
        (
            "max_rss_bytes",
            serde_json::json!(null),
            "field `max_rss_bytes`",
        ),
        ("threads", serde_json::json!(0), "field `threads`"),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        std::fs::write(&file, serde_json::to_vec_pretty(&bad).unwrap()).unwrap();
        let err = twin::read_rows(&results, "peak_memory")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&file.display().to_string()) && err.contains(expect),
            "{field}: {err}"
        );
    }
    // In the record store the report names it instead of showing it.
    let mut bad = good.clone();
    bad["max_memory_reserved_bytes"] = serde_json::json!(7);
    let stored = runs.join("peak_memory/pytorch/bad.control.json");
    std::fs::create_dir_all(stored.parent().unwrap()).unwrap();
    std::fs::write(&stored, serde_json::to_vec_pretty(&bad).unwrap()).unwrap();
    let experiment = common::root().join("experiments/peak_memory.toml");
    let rendered = memwall_driver::report(&experiment, &paths(dir, &runs)).unwrap();
    let report = std::fs::read_to_string(&rendered.markdown).unwrap();
    let beside = common::report_section(&report, "memwall beside PyTorch on the same device");
    assert!(
        beside.contains("bad.control.json") && beside.contains("field `max_memory_reserved_bytes`"),
        "{beside}"
    );
    assert!(
        !common::report_section(&report, "CPU stand-in (cpu profile)")
            .contains("eager on the same CPU")
    );
}
