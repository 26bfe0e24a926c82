//! `repeats = N`: interleaved reruns of each configuration, each its own job and record, and
//! the goals of the report stated as a ratio of medians with an interval.

mod common;

use memwall_driver as driver;
use std::path::{Path, PathBuf};

fn study(dir: &Path, repeats: &str) -> PathBuf {
    let text = format!(
        r#"
[study]
name = "repeats"
title = "Repeats"
source = "004_cef2fa4595315230.txt"
kind = "training"
{repeats}
[train]
lr = 3e-3
[data]
path = "{}"
[profiles.smoke]
model = {{ layers = 2, d_model = 32, heads = 2, d_ff = 64, seq_len = 32, batch = 2, vocab = 300 }}
train = {{ steps = 2, warmup_steps = 1, eval_batches = 1 }}
[[configs]]
name = "control"
control = true
[[configs]]
name = "checkpoint"
checkpoint = 1
[[goals]]
label = "checkpointed step / plain step"
numerator = {{ checkpoint = 1 }}
denominator = {{ checkpoint = "none" }}
at_most = 1000.0
"#,
        common::excerpt().display()
    );
    let path = dir.join("repeats.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn repeats_are_interleaved_jobs_with_their_own_keys() {
    let dir = tempfile::tempdir().unwrap();
    let paths = common::temp_paths(dir.path());
    let opts = common::smoke_options();
    let (_, _, once) = driver::plan_jobs(&study(dir.path(), ""), &paths, &opts).unwrap();
    let (_, _, jobs) = driver::plan_jobs(&study(dir.path(), "repeats = 3"), &paths, &opts).unwrap();
    let order: Vec<(String, usize)> = jobs.iter().map(|j| (j.config.clone(), j.repeat)).collect();
    let expect: Vec<(String, usize)> = (0..3)
        .flat_map(|r| [("control".to_string(), r), ("checkpoint".to_string(), r)])
        .collect();
    assert_eq!(order, expect);
    let keys: std::collections::BTreeSet<String> = jobs.iter().map(|j| j.key()).collect();
    assert_eq!(keys.len(), 6);
    // The first run keeps the key of the study without repeats: raising `repeats` adds jobs.
    assert_eq!(jobs[0].key(), once[0].key());
    assert_eq!(jobs[1].key(), once[1].key());
    // --repeats replaces the file's value.
    let mut o = common::smoke_options();
    o.repeats = Some(2);
    let (_, _, two) = driver::plan_jobs(&study(dir.path(), "repeats = 3"), &paths, &o).unwrap();
    assert_eq!(two.len(), 4);
    // repeats = 0 is refused by name.
    let e = driver::plan_jobs(&study(dir.path(), "repeats = 0"), &paths, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("study.repeats"), "{e}");
}

#[test]
fn goals_use_every_repeat_with_an_interval() {
    let dir = tempfile::tempdir().unwrap();
    let paths = common::temp_paths(dir.path());
    let exp = study(dir.path(), "repeats = 3");
    let out = driver::sweep(&exp, &paths, &common::smoke_options()).unwrap();
    assert_eq!(
        (out.ran, out.unfinished.len()),
        (6, 0),
        "{:?}",
        out.unfinished
    );
    driver::report(&exp, &paths).unwrap();
    let md = std::fs::read_to_string(paths.reports.join("repeats/report.md")).unwrap();
    // ratio of medians over 3 runs each, with its interval: "1.234x [1.100, 1.400]"
    let row = md
        .lines()
        .find(|l| l.contains("checkpointed step / plain step"))
        .unwrap_or_else(|| panic!("{md}"));
    // (Markdown escapes the brackets.)
    let row = row.replace('\\', "");
    assert!(row.contains("x [") && row.contains("| 3 / 3 |"), "{row}");
    assert!(md.contains("order-statistic"), "{md}");
}
