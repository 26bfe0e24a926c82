//! `just bench-cpu`'s path at smoke size, memwall's side only (PyTorch is too heavy for CI):
//! a flex bundle of every configuration the recipe names, then `reference/bench_cpu.py
//! --memwall-only`, which runs each job as `memwall run` does (plan stage, then the job). Every
//! configuration must give a row: a job file that the runner refuses (as the checkpoint
//! configurations were when the bench handed the runner unplanned jobs) fails here.

mod common;

use common::{bundle_smoke, s, text};
use std::path::PathBuf;
use std::process::Command;

/// The configurations `just bench-cpu` measures (the justfile's `--only` list).
fn bench_configs() -> String {
    let justfile = std::fs::read_to_string(common::root().join("justfile")).unwrap();
    let line = justfile
        .lines()
        .skip_while(|l| !l.starts_with("bench-cpu"))
        .find(|l| l.contains("--only"))
        .expect("the bench-cpu recipe bundles with --only");
    let only = line
        .split("--only")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    only.to_string()
}

#[test]
fn every_configuration_of_the_cpu_bench_runs_through_the_plan_stage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_memwall")).with_file_name("memwall-job");
    let (out, only) = (dir.join("bench"), bench_configs());
    let extra = ["--no-archive", "--torch-script", "none"];
    let o = bundle_smoke(dir, &out, &runner, "flex", &only, &extra);
    assert!(o.status.success(), "{}", text(&o));
    let json = dir.join("bench.json");
    let o = Command::new("python3")
        .arg(common::root().join("reference/bench_cpu.py"))
        .args([
            "--bundle",
            s(&out),
            "--runner",
            s(&runner),
            "--rounds",
            "1",
            "--memwall-only",
        ])
        .args(["--json", s(&json)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let got: Vec<&str> = rows.iter().map(|r| r["config"].as_str().unwrap()).collect();
    let want: Vec<&str> = only.split(',').collect();
    assert_eq!(got.len(), want.len(), "rows {got:?} for {want:?}");
    for config in want {
        let row = rows
            .iter()
            .find(|r| r["config"] == config)
            .unwrap_or_else(|| panic!("no row for {config}"));
        assert!(
            row["memwall_samples_per_s"][0].as_f64().unwrap() > 0.0,
            "{row}"
        );
        assert!(
            row["memwall_peak_allocated_bytes"].as_u64().unwrap() > 0,
            "{row}"
        );
    }
}

/// `just bench-pair`'s path at smoke size: one runner as both A and B on one configuration,
/// one round (two pairs); each pair must print both rates and their ratio.
#[test]
fn the_paired_bench_runs_two_runners_at_once() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let taskset = Command::new("taskset").arg("--version").output();
    if cores < 2 || taskset.is_err() {
        eprintln!("bench_pair.py needs two cores and taskset: {cores} core(s) here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runner = PathBuf::from(env!("CARGO_BIN_EXE_memwall")).with_file_name("memwall-job");
    let out = dir.join("pair");
    let extra = ["--no-archive", "--torch-script", "none"];
    let o = bundle_smoke(dir, &out, &runner, "flex", "bfloat16", &extra);
    assert!(o.status.success(), "{}", text(&o));
    let o = Command::new("python3")
        .arg(common::root().join("reference/bench_pair.py"))
        .args(["--bundle", s(&out), "--config", "bfloat16", "--rounds", "1"])
        .args([s(&runner), s(&runner)])
        .output()
        .unwrap();
    let printed = text(&o);
    assert!(o.status.success(), "{printed}");
    assert_eq!(printed.matches("B / A ").count(), 3, "{printed}");
    assert!(printed.contains("2 pairs, one thread each"), "{printed}");
}
