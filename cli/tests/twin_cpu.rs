//! `memwall twin --device cpu` with a fake PyTorch: it measures, checks and stores the CPU
//! rows of the training studies (how the rows are rendered: `driver/tests/twin_cpu.rs`).

mod common;

use common::{memwall, text};
use memwall_report::twin;
use std::path::{Path, PathBuf};

/// A stand-in for python3: answers the torch probe with `probe` (a shell snippet) and, run as
/// the reference script, writes `row` (a JSON template whose `CONFIG` is the configuration
/// asked for) to `--out`.
fn fake_python(dir: &Path, probe: &str, row: &str) -> PathBuf {
    let path = dir.join("python3");
    let row_file = dir.join("row.template.json");
    std::fs::write(&row_file, row).unwrap();
    let script = format!(
        "#!/bin/bash\nif [ \"$1\" = -c ]; then {probe}; fi\nout=''; config=''\n\
         while [ $# -gt 0 ]; do case \"$1\" in --out) out=\"$2\"; shift;; --config) config=\"$2\"; shift;; esac; shift; done\n\
         sed \"s/CONFIG/$config/\" '{}' > \"$out\"\n",
        row_file.display()
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn memwall_twin_measures_checks_and_stores_cpu_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = common::root();
    let runs = common::copy_peak_memory_records(dir);
    let before: Vec<_> = std::fs::read_dir(runs.join("peak_memory"))
        .unwrap()
        .collect();
    let args = |python: &Path| -> Vec<String> {
        [
            "twin",
            "--device",
            "cpu",
            "--study",
            "peak_memory",
            "--only",
            "control",
            "--runs",
            runs.to_str().unwrap(),
            "--experiments",
            root.join("experiments").to_str().unwrap(),
            "--script",
            root.join("reference/torch_peak_memory.py")
                .to_str()
                .unwrap(),
            "--templates",
            root.join("templates").to_str().unwrap(),
            "--data",
            common::excerpt().to_str().unwrap(),
            "--work",
            dir.join("work").to_str().unwrap(),
            "--threads",
            "2",
            "--python",
            python.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |python: &Path, extra: &[&str]| {
        let mut a = args(python);
        a.extend(extra.iter().map(|s| s.to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        memwall(dir, &a)
    };

    // The plan: fusion has no memwall number on the CPU and is left out, with the reason.
    let o = run(Path::new("python3"), &["--dry-run", "--only", "compile"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("run       control"), "{}", text(&o));
    assert!(
        text(&o).contains("left out  compile: kernel fusion"),
        "{}",
        text(&o)
    );

    // No PyTorch: said so, with the fix, and nothing stored.
    let no_torch = fake_python(dir, "echo 'ModuleNotFoundError: torch' >&2; exit 1", "{}");
    let o = run(&no_torch, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("PyTorch is not installed") && text(&o).contains("pip install"),
        "{}",
        text(&o)
    );
    assert!(!runs.join("peak_memory/pytorch").exists());

    // A row of another CPU: refused, naming the row file and the field; nothing stored.
    let plan: serde_json::Value = {
        let o = run(Path::new("python3"), &["--dry-run"]);
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice(&std::fs::read(dir.join("work/peak_memory.plan.json")).unwrap())
            .unwrap()
    };
    let row = |device: &str| {
        serde_json::json!({
            "format": twin::ROW_FORMAT, "study": "peak_memory", "config": "CONFIG",
            "status": "ok", "reason": null, "device": device, "device_type": "cpu",
            "threads": 2, "torch_version": "2.x (stand-in)", "parameters": 1,
            "max_memory_allocated_bytes": null, "max_memory_reserved_bytes": null,
            "max_rss_bytes": 943718400u64, "rss_after_import_bytes": 419430400u64,
            "median_step_s": 0.2, "samples_per_s": 40.0, "first_step_s": 0.5,
            "final_loss": 7.0, "model": plan["model"], "train": plan["train"],
            "finished_at": "2026-11-27T00:00:00Z"
        })
        .to_string()
    };
    let probe = "echo 2.x; exit 0";
    let wrong = fake_python(dir, probe, &row("Other CPU 9000"));
    let o = run(&wrong, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("peak_memory.control.json") && text(&o).contains("field `device`"),
        "{}",
        text(&o)
    );
    assert!(!runs.join("peak_memory/pytorch").exists());

    // A good row: stored under this CPU's name and rendered in the CPU section.
    let cpu = memwall_runner::device::cpu_model();
    let good = fake_python(dir, probe, &row(&cpu));
    let o = run(&good, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (rows, bad) = twin::load_rows(&runs, "peak_memory");
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].config.as_str(),
            rows[0].device.as_str(),
            rows[0].on_cpu()
        ),
        ("control", cpu.as_str(), true)
    );
    assert!(
        text(&o).contains("ok, 40.00 samples/s, high-water RSS 900 MiB"),
        "{}",
        text(&o)
    );
    // No record was touched.
    let after: Vec<_> = std::fs::read_dir(runs.join("peak_memory"))
        .unwrap()
        .collect();
    assert_eq!(after.len(), before.len() + 1, "only pytorch/ was added");
    let report = std::fs::read_to_string(runs.join("reports/peak_memory/report.md")).unwrap();
    let has_cpu_records = cpu == common::cpu_record(&runs, "control").env.device_name;
    assert_eq!(
        common::report_section(&report, "CPU stand-in (cpu profile)")
            .contains("memwall and PyTorch eager on the same CPU"),
        has_cpu_records,
        "the row is in the CPU section exactly where memwall's records name this CPU"
    );
}
