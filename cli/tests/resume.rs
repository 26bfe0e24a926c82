//! Every GPU draw adds evidence: a GPU bundle leaves out what the record store holds for its GPU
//! model (jobs and PyTorch twins, its dry run listing them), refuses a runner built from a tree
//! with uncommitted changes without `--allow-dirty`, and `memwall import` of several archives
//! imports every good one and never replaces a finished PyTorch row by a failed one. All of it
//! without a GPU: the bundles are written for CUDA by a runner stand-in and never run.

mod common;

use common::{bundle_smoke, memwall, s, text};
use memwall_core::record::{JobRecord, JobStatus};
use memwall_core::spec::JobSpec;
use memwall_lab::bundle::Manifest;
use memwall_report::twin::{TorchRow, TorchStatus, TwinJobs, ROW_FORMAT};

use std::path::{Path, PathBuf};
use std::process::Command;

const H200: &str = "NVIDIA H200";
const H100: &str = "NVIDIA H100 80GB HBM3";

/// A runner stand-in that answers `backends` (flex and cuda) and `version` with `revision`.
fn fake_runner(dir: &Path, revision: &str) -> PathBuf {
    let path = dir.join(format!("memwall-job-{}", revision.replace('-', "_")));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  backends) printf 'flex\\ncuda\\n';;\n  version) echo \
             'memwall-job 0.1.0 {revision}';;\nesac\nexit 0\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn manifest(out: &Path) -> Manifest {
    serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap()
}

/// The job file of `config` in a bundle.
fn job_of(out: &Path, config: &str) -> JobSpec {
    let m = manifest(out);
    let (_, key) = m.studies[0]
        .jobs
        .iter()
        .find(|(c, _)| c == config)
        .unwrap_or_else(|| panic!("{config} not bundled: {m:?}"));
    let file = out.join("jobs/peak_memory").join(key).join("job.json");
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

/// Stores a record of `job` measured on `device` with `status`, finished at `at`.
fn store_record(runs: &Path, job: &JobSpec, device: &str, status: JobStatus, at: &str) {
    let env = memwall_runner::measure::Environment {
        device_name: device.into(),
        backend: "cuda".into(),
        ..Default::default()
    };
    let mut rec = JobRecord::unfinished(job, status, "stand-in".into(), env);
    rec.finished_at = at.into();
    let dir = runs.join("peak_memory").join(&rec.key);
    memwall_core::record::write_record(&dir, &rec).unwrap();
}

/// A PyTorch row of `config` at the plan's shape on `device`.
fn twin(plan: &TwinJobs, config: &str, device: &str, status: TorchStatus) -> TorchRow {
    let ok = status == TorchStatus::Ok;
    TorchRow {
        format: ROW_FORMAT.into(),
        study: plan.study.clone(),
        config: config.into(),
        status,
        reason: (!ok).then(|| "CUDA error: stand-in".into()),
        device: device.into(),
        device_type: None,
        threads: None,
        torch_version: "2.11".into(),
        parameters: None,
        max_memory_allocated_bytes: ok.then_some(1 << 30),
        max_memory_reserved_bytes: ok.then_some(1 << 30),
        max_rss_bytes: None,
        rss_after_import_bytes: None,
        median_step_s: ok.then_some(0.5),
        samples_per_s: ok.then_some(8.0),
        first_step_s: ok.then_some(2.0),
        final_loss: None,
        model: plan.model,
        train: plan.train,
        finished_at: "2026-11-27T10:00:00+00:00".into(),
        process_order: None,
        wall_s: None,
        memory_budget_pareto: Vec::new(),
    }
}

fn plan_of(out: &Path) -> TwinJobs {
    serde_json::from_slice(&std::fs::read(out.join("reference/peak_memory.plan.json")).unwrap())
        .unwrap()
}

const ONLY: &str = "control_adafactor,checkpoint_adafactor,bfloat16_adafactor,fused_adafactor";

#[test]
fn a_gpu_bundle_leaves_out_what_the_store_holds_for_its_gpu_and_its_dry_run_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runner = fake_runner(dir, "0123456789ab");
    let script = common::root().join("reference/torch_peak_memory.py");
    let bundle = |out: &Path, extra: &[&str]| {
        let mut args = vec!["--torch-script", s(&script), "--no-archive"];
        args.extend_from_slice(extra);
        bundle_smoke(dir, out, &runner, "cuda", ONLY, &args)
    };
    // 1. With an empty store: every job and twin is bundled, nothing is left out.
    let first = dir.join("first");
    let o = bundle(&first, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(manifest(&first).studies[0].jobs.len(), 4);
    assert_eq!(manifest(&first).resume, None);

    // 2. The store as a GPU run leaves it: on the H200 the control answered (out of memory is
    // an answer), the checkpoint row crashed (not an answer); bf16 ran on an H100 only; the
    // control's twin finished on the H200, the checkpoint's twin failed there.
    let runs = dir.join("runs");
    let at = "2026-11-27T10:00:00+00:00";
    store_record(
        &runs,
        &job_of(&first, "control_adafactor"),
        H200,
        JobStatus::OutOfMemory,
        at,
    );
    store_record(
        &runs,
        &job_of(&first, "checkpoint_adafactor"),
        H200,
        JobStatus::Failed,
        at,
    );
    store_record(
        &runs,
        &job_of(&first, "bfloat16_adafactor"),
        H100,
        JobStatus::OutOfMemory,
        "2026-11-22T10:00:00+00:00",
    );
    let plan = plan_of(&first);
    for row in [
        twin(&plan, "control_adafactor", H200, TorchStatus::Ok),
        twin(&plan, "checkpoint_adafactor", H200, TorchStatus::Failed),
        twin(&plan, "bfloat16_adafactor", H100, TorchStatus::Ok),
    ] {
        memwall_report::twin::store_row(&runs, "peak_memory", &row).unwrap();
    }

    // 3. The next bundle resumes for the GPU of the newest CUDA record (the H200).
    let next = dir.join("next");
    let o = bundle(&next, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let listing = text(&o);
    assert!(
        listing.contains("resuming for NVIDIA H200 (the GPU of the newest CUDA record"),
        "{listing}"
    );
    let m = manifest(&next);
    let bundled: Vec<&str> = m.studies[0].jobs.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        bundled,
        [
            "bfloat16_adafactor",
            "checkpoint_adafactor",
            "fused_adafactor"
        ],
        "the H200's answered row is left out; its crash and the H100's row are not"
    );
    let left: Vec<&str> = m.studies[0]
        .left_out
        .iter()
        .map(|(c, _)| c.as_str())
        .collect();
    assert_eq!(left, ["control_adafactor"]);
    assert!(m.studies[0].left_out[0]
        .1
        .starts_with("stored: out_of_memory record of NVIDIA H200"));
    let twins: Vec<&str> = m.studies[0]
        .left_out_twins
        .iter()
        .map(|(c, _)| c.as_str())
        .collect();
    assert_eq!(twins, ["control_adafactor"], "{m:?}");
    let tsv = std::fs::read_to_string(next.join("plan.tsv")).unwrap();
    assert!(
        !tsv.contains("torch\tpeak_memory\tcontrol_adafactor\t"),
        "{tsv}"
    );
    assert!(
        tsv.contains("torch\tpeak_memory\tcheckpoint_adafactor\t"),
        "{tsv}"
    );
    assert!(
        tsv.contains("torch\tpeak_memory\tbfloat16_adafactor\t"),
        "{tsv}"
    );
    assert!(
        tsv.contains("left\tpeak_memory\tmemwall control_adafactor\tstored:"),
        "{tsv}"
    );
    assert!(
        tsv.contains("left\tpeak_memory\tpytorch control_adafactor\tstored:"),
        "{tsv}"
    );
    // Every tier of a GPU bundle fits one command's 9 minutes less packing and the device check.
    for t in &m.tiers {
        assert!(
            t.expected_s() <= 9.0 * 60.0 - 45.0 || t.steps.len() == 1,
            "tier {} expects {} s: {:?}",
            t.number,
            t.expected_s(),
            m.tiers
        );
    }
    // The dry run says what was left out and why, and plans the rest.
    let o = Command::new("bash")
        .arg(next.join("run.sh"))
        .args(["--dry-run", "--minutes", "9"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let dry = text(&o);
    assert!(
        dry.contains("left out, stored already for the NVIDIA H200 (2):"),
        "{dry}"
    );
    assert!(
        dry.contains(
            "peak_memory memwall control_adafactor: stored: out_of_memory record of NVIDIA H200"
        ),
        "{dry}"
    );
    assert!(
        dry.contains("peak_memory pytorch control_adafactor: stored: PyTorch ok row"),
        "{dry}"
    );
    assert!(dry.contains("memwall checkpoint_adafactor"), "{dry}");
    assert!(!dry.contains("memwall control_adafactor "), "{dry}");

    // 4. Named GPU model: for the H100 the bf16 row is stored and the control is not.
    let h100 = dir.join("h100");
    let o = bundle(&h100, &["--gpu-model", H100]);
    assert!(o.status.success(), "{}", text(&o));
    let bundled: Vec<String> = manifest(&h100).studies[0]
        .jobs
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    assert!(
        !bundled.contains(&"bfloat16_adafactor".to_string()),
        "{bundled:?}"
    );
    assert!(
        bundled.contains(&"control_adafactor".to_string()),
        "{bundled:?}"
    );

    // 5. --rerun-stored puts everything back.
    let all = dir.join("all");
    let o = bundle(&all, &["--rerun-stored"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&all);
    assert_eq!(m.studies[0].jobs.len(), 4);
    assert!(m.studies[0].left_out.is_empty() && m.studies[0].left_out_twins.is_empty());
    assert_eq!(m.resume, None);
}

#[test]
fn a_gpu_bundle_refuses_a_runner_built_from_a_changed_tree_unless_told() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let dirty = fake_runner(dir, "0123456789ab-dirty");
    let args = ["--torch-script", "none", "--no-archive"];
    let o = bundle_smoke(dir, &dir.join("b1"), &dirty, "cuda", "control", &args);
    assert!(!o.status.success(), "accepted: {}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("built from a tree with uncommitted changes (revision 0123456789ab-dirty)")
            && msg.contains("--allow-dirty"),
        "{msg}"
    );
    assert!(!dir.join("b1/manifest.json").exists());
    let mut told = args.to_vec();
    told.push("--allow-dirty");
    let o = bundle_smoke(dir, &dir.join("b2"), &dirty, "cuda", "control", &told);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        manifest(&dir.join("b2")).runner_revision,
        "0123456789ab-dirty"
    );
    // A CPU bundle runs where it was made (`just bench-cpu` on uncommitted changes).
    let o = bundle_smoke(dir, &dir.join("b3"), &dirty, "flex", "control", &args);
    assert!(o.status.success(), "{}", text(&o));
    // A clean runner is carried and named.
    let clean = fake_runner(dir, "0123456789ab");
    let o = bundle_smoke(dir, &dir.join("b4"), &clean, "cuda", "control", &args);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(manifest(&dir.join("b4")).runner_revision, "0123456789ab");
}

/// `results.tar.gz`-shaped archive holding `manifest.json` and the given PyTorch rows.
fn rows_archive(dir: &Path, name: &str, manifest: &Path, rows: &[TorchRow]) -> PathBuf {
    let src = dir.join(format!("{name}-src"));
    let results = src.join("reference/results");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::copy(manifest, src.join("manifest.json")).unwrap();
    for r in rows {
        std::fs::write(
            results.join(format!("{}.{}.json", r.study, r.config)),
            serde_json::to_vec_pretty(r).unwrap(),
        )
        .unwrap();
    }
    let archive = dir.join(format!("{name}.tar.gz"));
    let st = Command::new("tar")
        .args(["czf", s(&archive), "-C", s(&src), "."])
        .status()
        .unwrap();
    assert!(st.success());
    archive
}

#[test]
fn import_takes_every_good_archive_and_keeps_a_finished_twin_over_a_failed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = common::root();
    let runner = fake_runner(dir, "0123456789ab");
    let script = root.join("reference/torch_peak_memory.py");
    let out = dir.join("bundle");
    let o = bundle_smoke(
        dir,
        &out,
        &runner,
        "cuda",
        ONLY,
        &["--torch-script", s(&script), "--no-archive"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let plan = plan_of(&out);
    let m = out.join("manifest.json");
    let a = rows_archive(
        dir,
        "a",
        &m,
        &[twin(&plan, "control_adafactor", H200, TorchStatus::Ok)],
    );
    let damaged = dir.join("b.tar.gz");
    std::fs::write(&damaged, b"\x1f\x8b this is not a gzip stream").unwrap();
    let c = rows_archive(
        dir,
        "c",
        &m,
        &[twin(&plan, "checkpoint_adafactor", H200, TorchStatus::Ok)],
    );
    // The store holds the H200's records (the report of an import renders from them).
    let runs = dir.join("runs");
    let at = "2026-11-27T10:00:00+00:00";
    for config in ["control_adafactor", "checkpoint_adafactor"] {
        store_record(
            &runs,
            &job_of(&out, config),
            H200,
            JobStatus::OutOfMemory,
            at,
        );
    }
    let (experiments, templates) = (root.join("experiments"), root.join("templates"));
    let import = |archives: &[&Path]| {
        let mut args = vec!["import"];
        args.extend(archives.iter().map(|p| s(p)));
        args.extend([
            "--runs",
            s(&runs),
            "--experiments",
            s(&experiments),
            "--templates",
            s(&templates),
        ]);
        memwall(dir, &args)
    };
    let o = import(&[&a, &damaged, &c]);
    let msg = text(&o);
    assert!(!o.status.success(), "a damaged archive passed: {msg}");
    assert!(msg.contains("1 of 3 archive(s) not imported"), "{msg}");
    assert!(msg.contains(&format!("{}:", damaged.display())), "{msg}");
    let stored = |config: &str| {
        memwall_report::twin::stored_row(&runs, "peak_memory", H200, config)
            .unwrap_or_else(|| panic!("no stored row of {config}: {msg}"))
    };
    assert_eq!(stored("control_adafactor").status, TorchStatus::Ok);
    assert_eq!(
        stored("checkpoint_adafactor").status,
        TorchStatus::Ok,
        "the archive after the damaged one"
    );

    // A later failure of the same row does not replace the finished one; a failure where no
    // finished row is stored is kept as what happened.
    let d = rows_archive(
        dir,
        "d",
        &m,
        &[
            twin(&plan, "control_adafactor", H200, TorchStatus::Failed),
            twin(&plan, "bfloat16_adafactor", H200, TorchStatus::Failed),
        ],
    );
    let o = import(&[&d]);
    let msg = text(&o);
    assert!(o.status.success(), "{msg}");
    assert!(msg.contains("the stored `ok` row"), "{msg}");
    assert_eq!(stored("control_adafactor").status, TorchStatus::Ok);
    assert_eq!(stored("bfloat16_adafactor").status, TorchStatus::Failed);
}

/// A stand-in for PyTorch on `PYTHONPATH`: `import torch` works, a device is named, and
/// building the model fails, so every twin ends as a `failed` row saying why, in seconds.
fn fake_torch(dir: &Path) -> PathBuf {
    let root = dir.join("fake-python");
    std::fs::create_dir_all(root.join("torch")).unwrap();
    std::fs::write(
        root.join("torch/__init__.py"),
        r#"from types import SimpleNamespace
__version__ = "0+memwall-test"
cuda = SimpleNamespace(is_available=lambda: False)
backends = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace()), cudnn=SimpleNamespace())
float32, float16, bfloat16 = "float32", "float16", "bfloat16"
device = lambda kind: SimpleNamespace(type=kind)
set_num_threads = lambda n: None
get_num_threads = lambda: 1
set_float32_matmul_precision = lambda _: None
manual_seed = lambda _: None
"#,
    )
    .unwrap();
    root
}

/// The PyTorch twins of a run share one Python process when asked (the default on CUDA): each
/// twin still gets its own row, numbered by its place in the process, and the process's
/// high-water mark stays on the first row only; with `each`, every twin is a process's first.
#[test]
fn the_twins_of_a_run_share_one_python_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let runner = fake_runner(dir, "0123456789ab");
    let script = common::root().join("reference/torch_peak_memory.py");
    let python_path = fake_torch(dir);
    for (mode, orders) in [("shared", vec![1, 2, 3, 4]), ("each", vec![1, 1, 1, 1])] {
        let out = dir.join(format!("bundle-{mode}"));
        let o = bundle_smoke(
            dir,
            &out,
            &runner,
            "flex",
            ONLY,
            &["--torch-script", s(&script), "--no-archive"],
        );
        assert!(o.status.success(), "{}", text(&o));
        let o = Command::new("bash")
            .arg(out.join("run.sh"))
            .env("PYTHONPATH", &python_path)
            .env("MEMWALL_TORCH_PROCESS", mode)
            .env("MEMWALL_JOB", &runner)
            .output()
            .unwrap();
        let log = text(&o);
        assert!(o.status.success(), "{log}");
        assert!(log.contains("PyTorch: 0+memwall-test"), "{log}");
        assert_eq!(
            log.contains("started for the twins"),
            mode == "shared",
            "{log}"
        );
        let mut rows: Vec<TorchRow> = ONLY
            .split(',')
            .map(|c| {
                let file = out.join(format!("reference/results/peak_memory.{c}.json"));
                let bytes = std::fs::read(&file)
                    .unwrap_or_else(|e| panic!("{}: {e}\n{log}", file.display()));
                serde_json::from_slice(&bytes).unwrap()
            })
            .collect();
        rows.sort_by_key(|r| r.process_order);
        let got: Vec<u32> = rows.iter().map(|r| r.process_order.unwrap()).collect();
        assert_eq!(got, orders, "{mode}: {log}");
        for r in &rows {
            assert_eq!(r.status, TorchStatus::Failed, "{r:?}");
            let reason = r.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("has no attribute 'nn'"), "{reason}");
            assert!(r.wall_s.is_some_and(|w| w >= 0.0), "{r:?}");
            // The process's resident high-water mark belongs to its first configuration only.
            assert_eq!(
                r.max_rss_bytes.is_some(),
                r.process_order == Some(1),
                "{r:?}"
            );
        }
    }
}
