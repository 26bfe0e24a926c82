//! `memwall reproduce` checks every experiment file's `[params]` before it runs anything: a bad
//! file is named first and skipped, the others run (the checks themselves:
//! `driver/tests/study_params.rs`).

mod common;

/// `memwall reproduce` checks every file before it runs the first: a bad file is named with
/// its key and skipped, the valid study still runs, and the run exits non-zero.
#[test]
fn reproduce_names_a_bad_file_before_running_and_runs_the_others() {
    let dir = tempfile::tempdir().unwrap();
    common::edited_experiment(dir.path(), "scalar_checkpoint", None, "ks = [10, 0]");
    common::edited_experiment(dir.path(), "sixteen_bit", None, "sum_entries = 1000");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .args(["reproduce", "--profile", "smoke", "--device", "cpu"])
        .arg("--experiments")
        .arg(dir.path().join("experiments"))
        .arg("--runs")
        .arg(dir.path().join("runs"))
        .arg("--reports")
        .arg(dir.path().join("reports"))
        .arg("--templates")
        .arg(common::root().join("templates"))
        .env("MEMWALL_LOG", "warn")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let first_line = stderr.lines().next().unwrap_or_default();
    assert!(
        first_line.contains("scalar_checkpoint.toml")
            && first_line.contains("`params.ks[1]`")
            && first_line.contains("skipped"),
        "the bad file is reported first: {stderr}"
    );
    assert!(!dir.path().join("runs/scalar_checkpoint").exists());
    assert!(
        dir.path().join("reports/sixteen_bit/report.md").exists(),
        "{stderr}"
    );
    assert!(stderr.contains("1 of 2 studies failed"), "{stderr}");
}
