//! Nightly runs: the history store, the change since the last run, and the exit status of
//! `--fail-on-regression`, through the real `memwall` binary.

mod common;

use memwall_core::spec::Profile;
use memwall_lab::nightly::{
    self, ChangeVerdict, ConfigEntry, ConfigKind, HistoryEntry, Metric, HISTORY_SCHEMA,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn memwall() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memwall"))
}

/// A history entry of one configuration whose step times spread 1% around `step_s`.
fn entry(id: &str, step_s: f64, peak: f64) -> HistoryEntry {
    let steps: Vec<f64> = (0..11)
        .map(|i| step_s * (1.0 + 0.01 * (i as f64 / 5.0 - 1.0)))
        .collect();
    HistoryEntry {
        schema: HISTORY_SCHEMA,
        id: id.into(),
        date: id[..10].into(),
        started_at: format!("{}T00:00:00+00:00", &id[..10]),
        finished_at: format!("{}T00:05:00+00:00", &id[..10]),
        git_revision: id[id.len() - 7..].into(),
        profile: Profile::Smoke,
        backend: "flex".into(),
        device: "test CPU".into(),
        configs: vec![ConfigEntry {
            study: "peak_memory".into(),
            config: "control".into(),
            kind: ConfigKind::Training,
            label: "control".into(),
            keys: vec!["0123456789abcdef".into()],
            status: memwall_core::record::JobStatus::Ok,
            reason: None,
            samples: "steps".into(),
            metrics: BTreeMap::from([
                (Metric::StepTime.name().to_string(), steps),
                (Metric::PeakAllocated.name().to_string(), vec![peak]),
            ]),
            load: None,
            memory_limit_bytes: None,
            confirmations: Vec::new(),
            boundary: None,
        }],
        errors: vec![],
        confirm_s: None,
    }
}

fn history_cmd(history: &Path, reports: &Path, fail: bool) -> std::process::Output {
    history_cmd_with(history, reports, fail, &[])
}

/// `memwall history` on `history` into `reports`, with `--fail-on-regression` when `fail` and
/// the `extra` arguments.
fn history_cmd_with(
    history: &Path,
    reports: &Path,
    fail: bool,
    extra: &[&str],
) -> std::process::Output {
    let mut c = memwall();
    c.arg("history")
        .arg("--history")
        .arg(history)
        .arg("--reports")
        .arg(reports)
        .arg("--templates")
        .arg(common::root().join("templates"));
    if fail {
        c.arg("--fail-on-regression");
    }
    c.args(extra);
    c.output().unwrap()
}

#[test]
fn fail_on_regression_sets_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let (history, reports) = (dir.path().join("history"), dir.path().join("reports"));
    // Four nights of the same code whose step time moves 1-2% from night to night: the
    // history a step-time verdict needs (nightly::MIN_NIGHTS).
    for (id, step) in [
        ("2026-11-19T020000Z-aaaaaaa", 0.100),
        ("2026-11-20T020000Z-aaaaaaa", 0.101),
        ("2026-11-21T020000Z-aaaaaaa", 0.099),
        ("2026-11-22T020000Z-bbbbbbb", 0.101),
    ] {
        nightly::append(&history, &entry(id, step, 1e8)).unwrap();
    }
    // Same speed, same memory: within noise, exit 0 even with --fail-on-regression.
    let out = history_cmd(&history, &reports, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = std::fs::read_to_string(reports.join("nightly/summary.md")).unwrap();
    assert!(
        summary.contains("0 regressed") && summary.contains("Nothing regressed."),
        "{summary}"
    );
    // 20% slower: a regression; the exit status says so only with --fail-on-regression.
    nightly::append(&history, &entry("2026-11-23T020000Z-ccccccc", 0.121, 1e8)).unwrap();
    let out = history_cmd(&history, &reports, false);
    assert!(out.status.success());
    let out = history_cmd(&history, &reports, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("peak_memory/control step_time_s: regressed (+19."),
        "{stderr}"
    );
    // summary.md: one paragraph with the counts and the worst regression, for a chat message.
    let summary = std::fs::read_to_string(reports.join("nightly/summary.md")).unwrap();
    assert!(summary.contains("1 regressed, 0 improved"), "{summary}");
    assert!(
        summary.contains("Worst regression: peak_memory/control step_time_s +19.8% ["),
        "{summary}"
    );
    // --on-regression runs its command with the summary's path.
    let inbox = dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let hook = format!("cp -t {}", inbox.display());
    let out = history_cmd_with(&history, &reports, false, &["--on-regression", &hook]);
    assert_ok(&out);
    assert_eq!(
        std::fs::read_to_string(inbox.join("summary.md")).unwrap(),
        summary
    );
    // The nightly page: the change table and a history figure per key metric.
    let page = std::fs::read_to_string(reports.join("nightly/report.md")).unwrap();
    assert!(page.contains("Change since the last run"), "{page}");
    assert!(page.contains("regressed"), "{page}");
    // Compared with the run before: number 4 of the runs table.
    assert!(page.contains("| run 4 (bbbbbbb) |"), "{page}");
    // The noise each verdict used is beside it: the peak exact, the step time from 4 nights.
    assert!(page.contains("(exact)"), "{page}");
    assert!(page.contains("(4 nights)"), "{page}");
    assert!(page.contains("2026-11-22T020000Z-bbbbbbb"), "{page}");
    for m in ["step_time_s", "peak_allocated_bytes"] {
        let svg = reports.join(format!("nightly/figures/history_peak_memory_{m}.svg"));
        assert!(svg.exists(), "{} missing", svg.display());
    }
}

#[test]
fn an_unreadable_history_entry_is_named_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history");
    let reports = dir.path().join("reports");
    std::fs::create_dir_all(&history).unwrap();
    std::fs::write(history.join("2026-11-23T000000Z-x.json"), "{\"schema\": 1}").unwrap();
    // Alone: no readable run, and the error names the damaged file.
    let out = history_cmd(&history, &reports, false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("2026-11-23T000000Z-x.json"), "{stderr}");
    // Beside readable runs: the page renders, and names it.
    nightly::append(&history, &entry("2026-11-21T020000Z-aaaaaaa", 0.100, 1e8)).unwrap();
    nightly::append(&history, &entry("2026-11-24T020000Z-bbbbbbb", 0.100, 1e8)).unwrap();
    let out = history_cmd(&history, &reports, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(reports.join("nightly/report.md")).unwrap();
    assert!(
        page.contains("Skipped the history entry `2026-11-23T000000Z-x.json`"),
        "{page}"
    );
    assert!(page.contains("2026-11-24T020000Z-bbbbbbb"), "{page}");
    // An empty history: a clear error, not an empty page.
    let out = history_cmd(&dir.path().join("none"), &dir.path().join("reports"), false);
    assert!(String::from_utf8_lossy(&out.stderr).contains("memwall nightly"));
}

/// The machine the nightlies of this file's tests share (tests run in parallel threads): the
/// test under a planted load holds it alone ([`machine_alone`]), so the load its reruns share
/// is the spinner's, held steady, not other tests' nightlies starting and stopping (which once
/// moved the reruns of one binary 4.6-33.2% apart from round to round on a 2-core CI machine);
/// every other test that runs nightlies holds a share ([`machine_shared`]).
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn machine_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

fn machine_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// A smoke-size training study `name` on the test corpus: `layers` blocks of d_model 32,
/// `steps` timed steps, a control and the configurations in `configs` (TOML).
fn smoke_study(name: &str, layers: usize, steps: usize, configs: &str) -> String {
    format!(
        r#"
[study]
name = "{name}"
title = "{name}"
source = "004_cef2fa4595315230.txt"
kind = "training"
[train]
lr = 3e-3
[data]
path = "{}"
[profiles.smoke]
model = {{ layers = {layers}, d_model = 32, heads = 2, d_ff = 64, seq_len = 32, batch = 2, vocab = 300 }}
train = {{ steps = {steps}, warmup_steps = 1, eval_batches = 1 }}
[[configs]]
name = "control"
control = true
{configs}
"#,
        common::excerpt().display()
    )
}

/// `memwall nightly --device cpu --cpu-profile smoke EXP` in `dir`; fails the test if it fails.
fn nightly_in(dir: &Path, exp: &Path) {
    nightly_with(dir, exp, &[]);
}

/// [`nightly_in`] with `extra` arguments.
fn nightly_with(dir: &Path, exp: &Path, extra: &[&str]) {
    let out = memwall()
        .current_dir(dir)
        .args(["nightly", "--device", "cpu", "--cpu-profile", "smoke"])
        .args(extra)
        .arg(exp)
        .arg("--templates")
        .arg(common::root().join("templates"))
        .output()
        .unwrap();
    assert_ok(&out);
}

/// Fails the test with the command's stderr unless it succeeded.
fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two real nightly runs of a one-configuration smoke study on the CPU: two history entries,
/// the second compared with the first.
#[test]
fn two_nightly_runs_append_and_compare() {
    let _machine = machine_shared();
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("nightly_smoke.toml");
    std::fs::write(&exp, smoke_study("nightly_smoke", 2, 6, "")).unwrap();
    for _ in 0..2 {
        nightly_in(dir.path(), &exp);
    }
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    assert_eq!(history.len(), 2);
    let last = &history[1];
    assert_eq!(last.profile, Profile::Smoke);
    let c = &last.configs[0];
    assert_eq!(
        (c.config.as_str(), c.status),
        ("control", memwall_core::record::JobStatus::Ok)
    );
    // One run: its 6 timed steps (the warm-up step excluded) are the step-time samples.
    assert_eq!(c.metrics[Metric::StepTime.name()].len(), 6);
    assert!(c.metrics[Metric::PeakAllocated.name()][0] > 0.0);
    let changes = nightly::changes(&history, nightly::DEFAULT_NOISE);
    assert_eq!(changes[0].against.as_deref(), Some(history[0].id.as_str()));
    // A nightly's records and reports are scratch: beside its history, never in the committed
    // record store `runs/` or the published `reports/`.
    let scratch = dir.path().join("history/runs");
    let page = std::fs::read_to_string(scratch.join("reports/nightly/report.md")).unwrap();
    assert!(page.contains(&last.id), "{page}");
    // The study's own report is rendered too.
    assert!(scratch.join("reports/nightly_smoke/index.html").exists());
    assert!(scratch.join("nightly_smoke").is_dir());
    assert!(!dir.path().join("runs").exists());
    assert!(!dir.path().join("reports").exists());
}

/// A/A and A/B through real nightly runs: two nightlies of the same revision flag nothing
/// (0 regressed, 0 improved over every configuration and metric: the peaks and eval losses
/// repeat within 0.1%, and two nights are too few to judge a step time); a third, where one
/// configuration's memory plan changed (its activation checkpointing removed), flags that
/// configuration's peak as regressed and nothing of the other.
#[test]
fn nightlies_of_one_revision_flag_nothing_and_a_changed_configuration_alone() {
    let _machine = machine_shared();
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("nightly_ab.toml");
    let write = |checkpointed: bool| {
        let config = if checkpointed {
            "[[configs]]\nname = \"checkpoint\"\ncheckpoint = 1"
        } else {
            "[[configs]]\nname = \"checkpoint\""
        };
        std::fs::write(&exp, smoke_study("nightly_ab", 4, 4, config)).unwrap();
    };
    let run = || nightly_in(dir.path(), &exp);
    let flags = |changes: &[nightly::ConfigChange], config: &str| -> Vec<String> {
        changes
            .iter()
            .filter(|c| c.config == config)
            .flat_map(|c| &c.metrics)
            .filter(|(_, k)| {
                matches!(
                    k.verdict,
                    ChangeVerdict::Regressed | ChangeVerdict::Improved
                )
            })
            .map(|(m, k)| format!("{} {}", m.name(), k.verdict.as_str()))
            .collect()
    };
    write(true);
    run();
    run();
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    assert_eq!(history.len(), 2);
    let aa = nightly::changes(&history, nightly::DEFAULT_NOISE);
    assert_eq!(aa.len(), 2);
    for c in ["control", "checkpoint"] {
        assert_eq!(flags(&aa, c), Vec::<String>::new(), "A/A flagged {c}");
    }
    // Every metric was judged: deterministic ones within noise, timings not enough history
    // (or noisy, when the other tests' jobs loaded the machine while these ran).
    for c in &aa {
        for (m, k) in &c.metrics {
            if m.deterministic() {
                assert_eq!(
                    k.verdict,
                    ChangeVerdict::WithinNoise,
                    "{} {}",
                    c.config,
                    m.name()
                );
            } else {
                assert_no_timing_verdict(c, *m, k);
            }
        }
    }
    // B: the checkpointed configuration keeps every activation now.
    write(false);
    run();
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    let ab = nightly::changes(&history, nightly::DEFAULT_NOISE);
    assert_eq!(flags(&ab, "control"), Vec::<String>::new());
    let flagged = flags(&ab, "checkpoint");
    assert!(
        flagged.contains(&"peak_allocated_bytes regressed".to_string()),
        "{flagged:?}"
    );
}

/// The slim runner `cargo test --all-targets` builds beside `memwall`.
fn runner() -> std::path::PathBuf {
    let runner = Path::new(env!("CARGO_BIN_EXE_memwall")).with_file_name("memwall-job");
    assert!(
        runner.is_file(),
        "{} is missing: build it with `cargo build --release --locked --bins`",
        runner.display()
    );
    runner
}

/// Two nightlies through the bundle path, as a lab without Rust on its GPU node runs them:
/// `memwall bundle` here, `run.sh` "there", `memwall import --nightly` here, twice (a fresh
/// bundle each night). Two history entries, the trend page comparing the second with the
/// first, the scratch index linking it, and nothing in the committed stores.
#[test]
fn two_nightlies_through_the_bundle_path_reach_the_history() {
    let _machine = machine_shared();
    let dir = tempfile::tempdir().unwrap();
    let experiments = dir.path().join("experiments");
    std::fs::create_dir_all(&experiments).unwrap();
    let exp = experiments.join("bundle_nightly.toml");
    std::fs::write(&exp, smoke_study("bundle_nightly", 2, 4, "")).unwrap();
    let templates = common::root().join("templates");
    // `memwall import RESULTS --nightly` in the test's folder (history/ and its scratch store).
    let import_nightly = |results: &Path| {
        memwall()
            .current_dir(dir.path())
            .env_remove("MEMWALL_RUNS")
            .env_remove("MEMWALL_HISTORY")
            .arg("import")
            .arg(results)
            .arg("--nightly")
            .arg("--experiments")
            .arg(&experiments)
            .arg("--templates")
            .arg(&templates)
            .output()
            .unwrap()
    };
    for night in 0..2 {
        let out = dir.path().join(format!("bundle-{night}"));
        let o = memwall()
            .current_dir(dir.path())
            .env_remove("MEMWALL_RUNS")
            .arg("bundle")
            .arg(&exp)
            .args(["--profile", "smoke", "--target", "flex", "--out"])
            .arg(&out)
            .arg("--runner")
            .arg(runner())
            .args(["--torch-script", "none"])
            .output()
            .unwrap();
        assert_ok(&o);
        let o = Command::new("bash")
            .arg(out.join("run.sh"))
            .env("MEMWALL_SKIP_TORCH", "1")
            .output()
            .unwrap();
        assert_ok(&o);
        let o = import_nightly(&out.join("results.tar.gz"));
        assert_ok(&o);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("history entry:"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    assert_eq!(history.len(), 2);
    for e in &history {
        assert_eq!((e.profile, e.backend.as_str()), (Profile::Smoke, "flex"));
        assert_eq!(e.configs.len(), 1);
        assert_eq!(e.configs[0].status, memwall_core::record::JobStatus::Ok);
        assert_eq!(e.configs[0].metrics[Metric::StepTime.name()].len(), 4);
    }
    assert!(history[0].id < history[1].id);
    let changes = nightly::changes(&history, nightly::DEFAULT_NOISE);
    assert_eq!(changes[0].against.as_deref(), Some(history[0].id.as_str()));
    // The same verdicts as a local nightly: nothing flagged between two runs of one revision.
    assert!(changes[0].metrics.iter().all(|(_, k)| !matches!(
        k.verdict,
        ChangeVerdict::Regressed | ChangeVerdict::Improved
    )));
    let scratch = dir.path().join("history/runs");
    let page = std::fs::read_to_string(scratch.join("reports/nightly/report.md")).unwrap();
    assert!(
        page.contains(&history[1].id) && page.contains("run 1 ("),
        "{page}"
    );
    let index = std::fs::read_to_string(scratch.join("reports/index.md")).unwrap();
    assert!(index.contains("(nightly/report.md)"), "{index}");
    assert!(index.contains("(bundle_nightly/report.md)"), "{index}");
    let html = std::fs::read_to_string(scratch.join("reports/index.html")).unwrap();
    assert!(html.contains("nightly/index.html"), "{html}");
    // Importing the same results again is the same run: refused, the history unchanged.
    let o = import_nightly(&dir.path().join("bundle-1/results.tar.gz"));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("exists already"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        nightly::load(&dir.path().join("history"))
            .unwrap()
            .entries
            .len(),
        2
    );
    assert!(!dir.path().join("runs").exists());
    assert!(!dir.path().join("reports").exists());
}

/// The in-process studies' key numbers through two real nightlies: Checkmate's solve time and
/// schedule cost per graph and budget, fusion_ir's kernel times, each a case of its own in the
/// history and on the page; the same code gives the same schedule cost (within noise), and
/// `memwall publish --nightly` puts the page in the blog's content as the last bundle.
#[test]
fn nightlies_track_the_in_process_studies_numbers() {
    let _machine = machine_shared();
    let dir = tempfile::tempdir().unwrap();
    let root = common::root();
    for _ in 0..2 {
        let out = memwall()
            .current_dir(dir.path())
            .env_remove("MEMWALL_RUNS")
            .env_remove("MEMWALL_HISTORY")
            .args(["nightly", "--device", "cpu", "--cpu-profile", "smoke"])
            .arg(root.join("experiments/checkmate.toml"))
            .arg(root.join("experiments/fusion_ir.toml"))
            .arg("--templates")
            .arg(root.join("templates"))
            .output()
            .unwrap();
        assert_ok(&out);
    }
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    assert_eq!(history.len(), 2);
    let cases = |study: &str| -> Vec<&ConfigEntry> {
        history[1]
            .configs
            .iter()
            .filter(|c| c.study == study && c.kind == ConfigKind::InProcess)
            .collect()
    };
    let checkmate = cases("checkmate");
    assert!(!checkmate.is_empty());
    for c in &checkmate {
        assert!(c.config.contains(" at budget "), "{}", c.config);
        assert!(c.metrics[Metric::SolveTime.name()][0] > 0.0);
        assert!(c.metrics[Metric::ScheduleCost.name()][0] > 0.0);
    }
    let fusion = cases("fusion_ir");
    assert!(
        fusion.iter().any(|c| c.config.ends_with(" fused")),
        "{fusion:?}"
    );
    assert!(fusion
        .iter()
        .all(|c| c.metrics[Metric::KernelTime.name()][0] > 0.0));
    let changes = nightly::changes(&history, nightly::DEFAULT_NOISE);
    for c in changes.iter().filter(|c| c.study == "checkmate") {
        for (m, k) in &c.metrics {
            if *m == Metric::ScheduleCost {
                assert_eq!(k.verdict, ChangeVerdict::WithinNoise, "{}", c.config);
            } else {
                assert_no_timing_verdict(c, *m, k);
            }
        }
    }
    let reports = dir.path().join("history/runs/reports");
    let page = std::fs::read_to_string(reports.join("nightly/report.md")).unwrap();
    assert!(
        page.contains("Numbers the in-process studies track"),
        "{page}"
    );
    assert!(page.contains("| checkmate | VGG16"), "{page}");
    for fig in [
        "history_checkmate_solve_time_s",
        "history_checkmate_schedule_cost",
        "history_fusion_ir_kernel_time_s",
    ] {
        assert!(
            reports.join(format!("nightly/figures/{fig}.svg")).is_file(),
            "{fig}"
        );
    }
    // Published beside the reports: the page bundle and the index's last line.
    let site = dir.path().join("site");
    let out = memwall()
        .arg("publish")
        .arg("--to")
        .arg(&site)
        .arg("--reports")
        .arg(&reports)
        .arg("--nightly")
        .arg(reports.join("nightly"))
        .output()
        .unwrap();
    assert_ok(&out);
    assert!(site.join("reports/nightly/index.md").is_file());
    assert!(site
        .join("reports/nightly/figures/history_checkmate_solve_time_s.svg")
        .is_file());
    let index = std::fs::read_to_string(site.join("reports/_index.md")).unwrap();
    let last = index.lines().rfind(|l| l.starts_with("| [")).unwrap();
    assert!(last.contains("(nightly/)"), "{index}");
    // A folder without a nightly page is a clear error.
    let out = memwall()
        .arg("publish")
        .arg("--to")
        .arg(&site)
        .arg("--reports")
        .arg(&reports)
        .arg("--nightly")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no nightly page"));
}

/// A process that keeps one CPU busy until dropped.
struct Spinner(std::process::Child);

impl Spinner {
    fn start() -> Spinner {
        Spinner(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("sh starts"),
        )
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Nightlies of one revision with a CPU-bound process beside them (issue 56): every job
/// records the load (up to a CPU busy with another process), every timing reads "noisy"
/// instead of a verdict (or is rerun beside the last night's binary, which shares the load,
/// and still reads noisy), and over five nights nothing is regressed, improved or missing; the
/// summary says how many comparisons were noisy. Then a sixth night, still under load, whose
/// binary makes every step of one configuration 3x slower (`--inject-slowdown`): that
/// configuration's timings, and nothing else, are flagged after the confirmation reruns.
#[test]
fn nightlies_under_load_raise_no_alarm() {
    let _machine = machine_alone();
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("nightly_load.toml");
    let configs = "[[configs]]\nname = \"checkpoint\"\ncheckpoint = 1";
    std::fs::write(&exp, smoke_study("nightly_load", 2, 12, configs)).unwrap();
    let spinner = Spinner::start();
    for _ in 0..5 {
        nightly_in(dir.path(), &exp);
    }
    // Tonight's binary is kept for tomorrow's confirmations.
    assert!(dir.path().join("history/bin").is_dir());
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    assert_eq!(history.len(), 5);
    for e in &history {
        for c in &e.configs {
            let load = c.load.expect("every job records its machine's load");
            // The spinner's CPU, or, on a virtual machine, the time the hypervisor stole.
            assert!(load.other_busy_cpus > 0.0 && c.loaded(), "{load:?}");
        }
    }
    let changes = nightly::changes(&history, nightly::DEFAULT_NOISE);
    for c in &changes {
        for (m, k) in &c.metrics {
            assert!(
                !matches!(
                    k.verdict,
                    ChangeVerdict::Regressed | ChangeVerdict::Improved | ChangeVerdict::Missing
                ),
                "{} {}: {:?} {:?}",
                c.config,
                m.name(),
                k.verdict,
                k.confirmation
            );
            if !m.deterministic() {
                assert_eq!(k.verdict, ChangeVerdict::Noisy, "{} {}", c.config, m.name());
            }
        }
    }
    let summary =
        std::fs::read_to_string(dir.path().join("history/runs/reports/nightly/summary.md"))
            .unwrap();
    assert!(
        summary.contains("0 regressed, 0 improved") && summary.contains("4 noisy"),
        "{summary}"
    );

    // Night 6: a real slowdown planted in one configuration of tonight's binary.
    nightly_with(
        dir.path(),
        &exp,
        &["--inject-slowdown", "nightly_load/checkpoint=3"],
    );
    drop(spinner);
    let history = nightly::load(&dir.path().join("history")).unwrap().entries;
    let changes = nightly::changes(&history, nightly::DEFAULT_NOISE);
    let mut alarms: Vec<String> = Vec::new();
    for c in &changes {
        for (m, k) in &c.metrics {
            if k.verdict.is_regression() || k.verdict == ChangeVerdict::Improved {
                alarms.push(format!("{} {} {}", c.config, m.name(), k.verdict.as_str()));
                let conf = k.confirmation.as_ref().expect("confirmed by reruns");
                assert!(conf.against.starts_with("previous binary"), "{conf:?}");
                assert_eq!(conf.runs, memwall_lab::nightly::confirm::CONFIRM_RUNS);
                // Confirmed in every round of interleaved reruns.
                assert_eq!(conf.rounds.len(), conf.runs, "{conf:?}");
                assert!(
                    conf.rounds.iter().all(|&d| d.abs() > conf.threshold),
                    "{conf:?}"
                );
            }
        }
    }
    alarms.sort();
    let every: Vec<String> = changes
        .iter()
        .flat_map(|c| {
            c.metrics.iter().map(move |(m, k)| {
                format!(
                    "{} {} {:?} suspected {:?} load {:?} confirmed {:?}",
                    c.config,
                    m.name(),
                    k.verdict,
                    k.suspected,
                    k.under_load.map(|l| l.other_busy_cpus),
                    k.confirmation.as_ref().map(|x| (
                        x.verdict,
                        x.previous.clone(),
                        x.current.clone()
                    ))
                )
            })
        })
        .collect();
    assert_eq!(
        alarms,
        vec![
            "checkpoint step_time_s regressed".to_string(),
            "checkpoint tokens_per_s regressed".to_string()
        ],
        "{every:#?}"
    );
    let last = history.last().unwrap();
    assert!(
        last.confirm_s.is_some_and(|t| t > 0.0),
        "{:?}",
        last.confirm_s
    );
    let summary =
        std::fs::read_to_string(dir.path().join("history/runs/reports/nightly/summary.md"))
            .unwrap();
    assert!(
        summary.contains("2 regressed") && summary.contains("rerun 3x to confirm"),
        "{summary}"
    );
    let page =
        std::fs::read_to_string(dir.path().join("history/runs/reports/nightly/report.md")).unwrap();
    assert!(page.contains("rerun 3x beside previous binary"), "{page}");
}

/// A timing of a young history: not enough history, or noisy when the other tests' jobs
/// loaded the machine while it was taken.
fn assert_no_timing_verdict(c: &nightly::ConfigChange, m: Metric, k: &nightly::Classified) {
    assert!(
        matches!(
            k.verdict,
            ChangeVerdict::NotEnoughHistory | ChangeVerdict::Noisy
        ),
        "{} {}: {:?}",
        c.config,
        m.name(),
        k.verdict
    );
}
