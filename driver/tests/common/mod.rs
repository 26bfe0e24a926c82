//! Helpers shared by the driver's integration tests (`cli/tests/common` includes them too).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace root (parent of the crate's folder).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/data` beside the repository (or `MEMWALL_SHARED_DATA`).
pub fn shared_data() -> PathBuf {
    std::env::var_os("MEMWALL_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/data"))
}

/// The real TinyStories excerpt used by tests.
pub fn excerpt() -> PathBuf {
    shared_data().join("tinystories/TinyStories-valid-excerpt.txt")
}

/// The job runner the tests' sweeps use: `memwall-job run-job` of this build
/// ([`memwall_runner::job::job_runner`]: `target/<profile>/memwall-job`), which `cargo test`
/// of the workspace (`just test`, CI) builds with the tests. Where it is missing (`cargo test
/// -p <crate>` of a crate without the binary, on a fresh target folder) it is built first, once
/// per test process, through the `cargo` that runs the tests. After a change to the runner,
/// `cargo test -p <crate>` alone does not rebuild it: `cargo build --release --bins` does.
///
/// # Panics
/// When the build fails or no runner can be found (the message says how to build it).
pub fn job_runner() -> (PathBuf, Vec<String>) {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let (Err(_), Some(cargo)) = (memwall_runner::job::job_runner(), std::env::var_os("CARGO"))
        else {
            return;
        };
        let mut build = std::process::Command::new(cargo);
        build
            .current_dir(root())
            .args(["build", "--locked", "--bin", "memwall-job"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let st = build.status().expect("cargo starts");
        assert!(st.success(), "building memwall-job for the tests failed");
    });
    memwall_runner::job::job_runner().unwrap_or_else(|e| panic!("{e}"))
}

/// Smoke-profile run options on the CPU (flex), with this build's `memwall-job` as the job
/// runner.
pub fn smoke_options() -> memwall_driver::RunOptions {
    memwall_driver::RunOptions {
        profile: Some(memwall_core::spec::Profile::Smoke),
        device: memwall_runner::device::DeviceRequest::Cpu,
        cpu_backend: memwall_runner::device::BackendKind::Flex,
        data: None,
        force: false,
        only: Vec::new(),
        runner: job_runner(),
        progress: false,
        memory_cleanup: false,
        memory_pool: None,
        devices: Vec::new(),
        keys: Vec::new(),
        repeats: None,
    }
}

/// Record store, cache and reports under `dir`, with the repository's templates.
pub fn temp_paths(dir: &Path) -> memwall_driver::Paths {
    memwall_driver::Paths {
        runs: dir.join("runs"),
        cache: dir.join("cache"),
        reports: dir.join("reports"),
        templates: root().join("templates"),
        published: None,
    }
}

/// The committed experiment file `name` with `[params]` keys set (and removed from every
/// profile's params, which would mask them) or, with `profile`, keys of
/// `[profiles.<profile>.params]`, written under `dir/experiments/`.
pub fn edited_experiment(dir: &Path, name: &str, profile: Option<&str>, set: &str) -> PathBuf {
    let path = root().join("experiments").join(format!("{name}.toml"));
    let mut doc: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let edits: toml::Table = toml::from_str(set).unwrap_or_else(|e| panic!("{set}: {e}"));
    let table = match profile {
        None => doc.entry("params"),
        Some(p) => doc
            .entry("profiles")
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .as_table_mut()
            .unwrap()
            .entry(p)
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .as_table_mut()
            .unwrap()
            .entry("params"),
    }
    .or_insert_with(|| toml::Value::Table(Default::default()))
    .as_table_mut()
    .unwrap();
    let keys: Vec<String> = edits.keys().cloned().collect();
    for (k, v) in edits {
        table.insert(k, v);
    }
    if profile.is_none() {
        // a profile's value of the same key would mask the edit
        if let Some(profiles) = doc.get_mut("profiles").and_then(|p| p.as_table_mut()) {
            for (_, section) in profiles.iter_mut() {
                if let Some(params) = section.get_mut("params").and_then(|p| p.as_table_mut()) {
                    for k in &keys {
                        params.remove(k);
                    }
                }
            }
        }
    }
    let exp = dir.join("experiments");
    std::fs::create_dir_all(&exp).unwrap();
    let out = exp.join(format!("{name}.toml"));
    std::fs::write(&out, toml::to_string(&doc).unwrap()).unwrap();
    out
}

pub const SMALL_MODEL: &str =
    "layers = 2, d_model = 32, heads = 2, d_ff = 64, seq_len = 32, batch = 2, vocab = 300";

/// A smoke training study over `data` with the given model and configurations.
pub fn bad_input_study(dir: &Path, data: &Path, model: &str, configs: &str) -> PathBuf {
    let exp = dir.join("experiments");
    std::fs::create_dir_all(&exp).unwrap();
    let text = format!(
        r#"
[study]
name = "bad_input"
title = "Bad input"
source = "004_cef2fa4595315230.txt"
kind = "training"
[data]
path = "{}"
[profiles.smoke]
model = {{ {model} }}
train = {{ steps = 2, warmup_steps = 0, eval_batches = 1 }}
{configs}
"#,
        data.display()
    );
    let p = exp.join("bad_input.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// A smoke study of `n` layers and `n` configurations (checkpoint intervals 1 to `n`).
pub fn interval_study(dir: &Path, n: usize) -> PathBuf {
    let mut text = format!(
        r#"
[study]
name = "devices"
title = "Devices"
source = "004_cef2fa4595315230.txt"
kind = "training"
[train]
lr = 3e-3
[data]
path = "{}"
[profiles.smoke]
model = {{ layers = {n}, d_model = 32, heads = 2, d_ff = 64, seq_len = 32, batch = 2, vocab = 300 }}
train = {{ steps = 2, warmup_steps = 1, eval_batches = 1 }}
"#,
        excerpt().display()
    );
    for i in 0..n {
        text += &format!(
            "[[configs]]\nname = \"c{i}\"\ncontrol = {}\ncheckpoint = {}\n",
            i == 0,
            i + 1
        );
    }
    let path = dir.join("devices.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Copies the committed `peak_memory` records (record.json files only) into `<dir>/runs`.
pub fn copy_peak_memory_records(dir: &Path) -> PathBuf {
    let from = root().join("runs/peak_memory");
    let runs = dir.join("runs");
    for e in std::fs::read_dir(&from).unwrap().flatten() {
        let record = e.path().join("record.json");
        if record.is_file() {
            let to = runs.join("peak_memory").join(e.file_name());
            std::fs::create_dir_all(&to).unwrap();
            std::fs::copy(&record, to.join("record.json")).unwrap();
        }
    }
    runs
}

/// The newest finished `cpu`-profile record of `config` in `runs`.
pub fn cpu_record(runs: &Path, config: &str) -> memwall_core::record::JobRecord {
    let records = memwall_report::analysis::StudyRecords::load(runs, "peak_memory").unwrap();
    records
        .records
        .into_iter()
        .filter(|r| {
            r.spec.config == config
                && r.spec.profile.as_str() == "cpu"
                && r.status == memwall_core::record::JobStatus::Ok
        })
        .max_by(|a, b| a.finished_at.cmp(&b.finished_at))
        .unwrap_or_else(|| panic!("no finished cpu record of {config}"))
}

/// The text of the report section whose heading starts with `heading` (to the next `## `).
pub fn report_section<'a>(report: &'a str, heading: &str) -> &'a str {
    let start = report
        .find(&format!("## {heading}"))
        .unwrap_or_else(|| panic!("no section `{heading}` in the report"));
    let rest = &report[start + 3..];
    let end = rest.find("\n## ").map(|e| e + 1).unwrap_or(rest.len());
    &rest[..end]
}
