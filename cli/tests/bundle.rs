//! The GPU bundle's round trip on the CPU: `memwall bundle --target flex` a smoke-size study,
//! unpack the archive elsewhere, run its `run.sh` with the CPU runner (twice: the second run
//! resumes), `memwall import` the packed records, and read the report. Then the refusals (a
//! changed experiment file, a damaged record) and a PyTorch twin row beside memwall's.

mod common;

use common::{bundle_smoke, memwall, s, text};

use std::path::{Path, PathBuf};
use std::process::Command;

/// The slim runner `cargo test --all-targets` builds beside `memwall`.
fn runner() -> PathBuf {
    let memwall = PathBuf::from(env!("CARGO_BIN_EXE_memwall"));
    let runner = memwall.with_file_name("memwall-job");
    assert!(
        runner.is_file(),
        "{} is missing: build it with `cargo build --release --locked --bins` (the test suite's \
         `cargo test --all-targets` does)",
        runner.display()
    );
    runner
}

/// One scenario on purpose: bundling and running the jobs is the expensive part, and every
/// later step (resume, import, re-import, refusals, the PyTorch row) reads what it left.
#[test]
fn bundle_run_import_round_trip_on_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = common::root();
    let experiments = root.join("experiments");
    let templates = root.join("templates");
    let out = dir.join("gpu-bundle");

    // 0. A CubeCL cache left by an earlier GPU run (as `memwall import` merges it): the bundle
    // carries it, so the jobs there start warm.
    let tuned = Path::new("autotune/0.10.0/device-0-0-cuda/matmul.json.log");
    let local_cache = dir.join(".memwall/cache/cubecl");
    std::fs::create_dir_all(local_cache.join(tuned).parent().unwrap()).unwrap();
    std::fs::write(local_cache.join(tuned), "{\"earlier\": \"tuning\"}\n").unwrap();

    // 1. The bundle: folder + archive, two configurations of the peak-memory study.
    let script = root.join("reference/torch_peak_memory.py");
    let o = bundle_smoke(
        dir,
        &out,
        &runner(),
        "flex",
        "control,checkpoint",
        &["--torch-script", s(&script)],
    );
    assert!(o.status.success(), "bundle failed: {}", text(&o));
    let archive = dir.join("gpu-bundle.tar.gz");
    assert!(archive.is_file(), "no archive: {}", text(&o));
    let manifest: memwall_lab::bundle::Manifest =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let keys: Vec<String> = manifest.studies[0]
        .jobs
        .iter()
        .map(|(_, k)| k.clone())
        .collect();
    assert_eq!(keys.len(), 2, "{manifest:?}");
    let plan = out.join("reference/peak_memory.plan.json");
    assert!(plan.is_file(), "the PyTorch plan is bundled");
    assert_eq!(
        std::fs::read_to_string(out.join("cache/cubecl").join(tuned)).unwrap(),
        "{\"earlier\": \"tuning\"}\n",
        "the local CubeCL cache is carried: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("1 file(s) of the committed and local CubeCL caches"),
        "{}",
        text(&o)
    );

    // 2. On "the other machine": the archive unpacked elsewhere, run.sh run there (the
    // PyTorch twin left out: it is checked with a row below).
    let there = dir.join("elsewhere");
    std::fs::create_dir_all(&there).unwrap();
    let st = Command::new("tar")
        .args(["xzf", s(&archive), "-C", s(&there)])
        .status()
        .unwrap();
    assert!(st.success());
    let run_sh = there.join("gpu-bundle/run.sh");
    // What a GPU job there adds to the cache, written by a runner stand-in while run.sh runs
    // (a tuning and a compiled kernel): the tuning comes back in cache.tar.gz, the kernel does
    // not (kernels are large and recompile in seconds), and neither does the carried tuning.
    let compiled = Path::new("ptx/0.10.0/kernel-1234.ptx");
    let new_tuning = Path::new("autotune/0.10.0/device-0-0-cuda/attention.json.log");
    let there_cache = there.join("gpu-bundle/cache/cubecl");
    let wrapper = dir.join("runner-that-tunes.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh
mkdir -p {c}/ptx/0.10.0 {c}/autotune/0.10.0/device-0-0-cuda
             echo '// ptx' > {c}/{k}
echo '{{\"new\": \"tuning\"}}' > {c}/{t}
exec {r} \"$@\"
",
            c = s(&there_cache),
            k = s(compiled),
            t = s(new_tuning),
            r = s(&there.join("gpu-bundle/bin/memwall-job")),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let back = dir.join("brought-back");
    let run = || {
        Command::new("bash")
            .arg(&run_sh)
            .args(["--results", s(&back)])
            .env("MEMWALL_SKIP_TORCH", "1")
            .env("MEMWALL_JOB", &wrapper)
            .output()
            .unwrap()
    };
    let o = run();
    assert!(o.status.success(), "run.sh failed: {}", text(&o));
    let results = back.join("results.tar.gz");
    assert!(results.is_file(), "run.sh packed nothing: {}", text(&o));
    assert!(back.join("logs.tar.gz").is_file(), "no logs: {}", text(&o));
    let cache_back = back.join("cache.tar.gz");
    assert!(cache_back.is_file(), "no cache archive: {}", text(&o));
    let listed = Command::new("tar")
        .args(["tzf", s(&cache_back)])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains("attention.json.log"), "{listed}");
    assert!(
        !listed.contains("kernel-1234.ptx"),
        "kernels packed: {listed}"
    );
    assert!(
        !listed.contains("matmul.json.log"),
        "carried tuning packed again: {listed}"
    );
    for k in &keys {
        assert!(
            there
                .join("gpu-bundle/jobs/peak_memory")
                .join(k)
                .join("record.json")
                .is_file(),
            "job {k} has no record: {}",
            text(&o)
        );
    }
    // A second run resumes: both jobs are skipped.
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    let resumed = text(&o)
        .lines()
        .filter(|l| l.starts_with("jobs/") && l.ends_with("finished before, skipped"))
        .count();
    assert_eq!(resumed, 2, "{}", text(&o));

    // 3. Import the packed records: they land in the store, the report has both rows.
    let runs = dir.join("runs");
    let reports = dir.join("reports");
    let import = |source: &Path, runs: &Path, experiments: &Path| {
        memwall(
            dir,
            &[
                "import",
                s(source),
                "--runs",
                s(runs),
                "--experiments",
                s(experiments),
                "--reports",
                s(&reports),
                "--templates",
                s(&templates),
            ],
        )
    };
    let o = import(&results, &runs, &experiments);
    assert!(o.status.success(), "import failed: {}", text(&o));
    assert!(text(&o).contains("2 record(s) imported"), "{}", text(&o));
    // The new tuning came back and was merged into the local cache, beside the earlier one,
    // and into the committed autotune cache beside the record store.
    let o = import(&cache_back, &runs, &experiments);
    assert!(o.status.success(), "cache import failed: {}", text(&o));
    assert!(text(&o).contains("0 record(s) imported"), "{}", text(&o));
    assert!(text(&o).contains("1 CubeCL cache file(s)"), "{}", text(&o));
    assert!(text(&o).contains("1 autotune file(s)"), "{}", text(&o));
    assert!(local_cache.join(new_tuning).is_file());
    assert!(local_cache.join(tuned).is_file());
    assert!(dir.join("gpu-cache/cubecl").join(new_tuning).is_file());
    assert!(!local_cache.join(compiled).exists());
    for k in &keys {
        let r = memwall_core::record::read_record(&runs.join("peak_memory").join(k))
            .unwrap()
            .expect("imported record");
        assert_eq!(
            r.status,
            memwall_core::record::JobStatus::Ok,
            "{:?}",
            r.reason
        );
        assert_eq!(r.spec.backend, memwall_runner::device::BackendKind::Flex);
    }
    let report = std::fs::read_to_string(reports.join("peak_memory/report.md")).unwrap();
    for label in ["Control (FP32 baseline)", "Activation Checkpoint"] {
        assert!(report.contains(label), "report lacks {label}");
    }
    assert!(
        !report.contains("memwall beside PyTorch"),
        "no PyTorch rows yet"
    );
    // Importing again keeps the records there.
    let o = import(&results, &runs, &experiments);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("0 record(s) imported, 2 already"),
        "{}",
        text(&o)
    );

    // 3b. The same job measured on another device model (its record names another device):
    // kept as a record of its own beside the first, and the report shows both devices' groups.
    let other = dir.join("other-device");
    let o = Command::new("cp")
        .args(["-r", s(&there.join("gpu-bundle")), s(&other)])
        .status()
        .unwrap();
    assert!(o.success());
    let moved = other
        .join("jobs/peak_memory")
        .join(&keys[0])
        .join("record.json");
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&moved).unwrap()).unwrap();
    let first_device = rec["env"]["device_name"].as_str().unwrap().to_string();
    rec["env"]["device_name"] = serde_json::json!("Other CPU 9000 (flex)");
    std::fs::write(&moved, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
    let o = import(&other, &runs, &experiments);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("1 record(s) imported, 1 already"),
        "{}",
        text(&o)
    );
    let beside = runs
        .join("peak_memory")
        .join(format!("{}.other-cpu-9000-flex", keys[0]));
    let kept = memwall_core::record::read_record(&beside)
        .unwrap()
        .expect("kept beside");
    assert_eq!(kept.env.device_name, "Other CPU 9000 (flex)");
    let first = memwall_core::record::read_record(&runs.join("peak_memory").join(&keys[0]))
        .unwrap()
        .unwrap();
    assert_eq!(first.env.device_name, first_device);
    let report = std::fs::read_to_string(reports.join("peak_memory/report.md")).unwrap();
    assert!(
        report.contains("Other CPU 9000 (flex)") && report.contains(&first_device),
        "both devices' groups are shown"
    );
    std::fs::remove_dir_all(&beside).unwrap();

    // 4. Refused: the local experiment file changed since the bundle (another learning rate),
    // so the records are not the jobs it produces. Nothing is written.
    let changed = dir.join("experiments-changed");
    std::fs::create_dir_all(&changed).unwrap();
    let toml = std::fs::read_to_string(experiments.join("peak_memory.toml")).unwrap();
    assert!(toml.contains("lr = 3e-4"));
    std::fs::write(
        changed.join("peak_memory.toml"),
        toml.replacen("lr = 3e-4", "lr = 1e-4", 1),
    )
    .unwrap();
    let runs2 = dir.join("runs2");
    let o = import(&results, &runs2, &changed);
    assert!(!o.status.success(), "a changed experiment was accepted");
    let msg = text(&o);
    assert!(msg.contains("refused 2 record(s)"), "{msg}");
    assert!(
        msg.contains("record.json") && msg.contains("job key"),
        "{msg}"
    );
    assert!(
        !runs2.join("peak_memory").exists(),
        "refused records were written"
    );

    // 5. Refused: a damaged record (a status no memwall writes), named with its field.
    let bundle_dir = there.join("gpu-bundle");
    let damaged = bundle_dir
        .join("jobs/peak_memory")
        .join(&keys[0])
        .join("record.json");
    let good = std::fs::read_to_string(&damaged).unwrap();
    std::fs::write(
        &damaged,
        good.replacen("\"status\": \"ok\"", "\"status\": \"great\"", 1),
    )
    .unwrap();
    let o = import(&bundle_dir, &runs2, &experiments);
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(
        msg.contains(&keys[0]) && msg.contains("field `status`"),
        "{msg}"
    );
    std::fs::write(&damaged, good).unwrap();

    // 6. A PyTorch twin row (as the script writes it) beside memwall's on the same
    // device: imported into runs/peak_memory/pytorch/ and shown with ratios.
    let record = memwall_core::record::read_record(&runs.join("peak_memory").join(&keys[0]))
        .unwrap()
        .unwrap();
    let summary = record.summary.unwrap();
    let plan_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&plan).unwrap()).unwrap();
    let row = serde_json::json!({
        "format": memwall_report::twin::ROW_FORMAT, "study": "peak_memory",
        "config": record.spec.config, "status": "ok", "reason": null,
        "device": record.env.device_name, "torch_version": "2.x (test row)",
        "parameters": summary.parameters,
        "max_memory_allocated_bytes": summary.peak_allocated_bytes / 2,
        "max_memory_reserved_bytes": summary.peak_reserved_bytes / 2,
        "median_step_s": summary.median_step_s / 4.0,
        "samples_per_s": summary.samples_per_s * 4.0,
        "first_step_s": 1.0, "final_loss": 5.0,
        "model": plan_json["model"], "train": plan_json["train"],
        "finished_at": "2026-11-23T00:00:00Z"
    });
    let rows = bundle_dir.join("reference/results");
    std::fs::create_dir_all(&rows).unwrap();
    std::fs::write(
        rows.join(format!("peak_memory.{}.json", record.spec.config)),
        serde_json::to_vec_pretty(&row).unwrap(),
    )
    .unwrap();
    let o = import(&bundle_dir, &runs, &experiments);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 PyTorch row(s)"), "{}", text(&o));
    let report = std::fs::read_to_string(reports.join("peak_memory/report.md")).unwrap();
    assert!(
        report.contains("memwall beside PyTorch"),
        "no PyTorch section"
    );
    // memwall / PyTorch: twice the allocated memory, a quarter of the throughput, in the
    // configuration's row of the side-by-side table.
    let side = report
        .split("memwall beside PyTorch")
        .nth(1)
        .expect("the section's text");
    let line = side
        .lines()
        .find(|l| l.starts_with('|') && l.contains(&record.spec.label))
        .unwrap_or_else(|| panic!("no row for {} in {side}", record.spec.label));
    assert!(line.contains("2.00x"), "no allocated ratio 2.00x: {line}");
    assert!(line.contains("0.25x"), "no throughput ratio 0.25x: {line}");
}

/// A runner built without CUDA is refused for a CUDA bundle, naming what it runs and the fix.
#[test]
fn a_cuda_bundle_refuses_a_runner_without_cuda() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fake = dir.join("memwall-job");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = backends ] && echo flex && echo ndarray\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = common::root();
    let o = memwall(
        dir,
        &[
            "bundle",
            s(&root.join("experiments/peak_memory.toml")),
            "--target",
            "cuda",
            "--out",
            s(&dir.join("gpu-bundle")),
            "--runner",
            s(&fake),
            "--data",
            s(&common::excerpt()),
            "--torch-script",
            "none",
        ],
    );
    assert!(!o.status.success(), "accepted: {}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("built without the cuda backend") && msg.contains("flex, ndarray"),
        "{msg}"
    );
    assert!(msg.contains("just carry"), "{msg}");
    // The real runner of this build has CUDA compiled in (the default features).
    let listed = Command::new(runner()).arg("backends").output().unwrap();
    assert!(listed.status.success());
    assert!(String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l == "cuda"));
}

/// The GPU suite at smoke size on flex, through the path a GPU session takes: `memwall bundle
/// --suite`, `run.sh --minutes` stopped by its deadline partway, `run.sh --minutes 2` again
/// (resuming where it stopped), `memwall import` and the reports. The bundled Checkmate jobs plan
/// themselves in the slim runner.
#[test]
fn the_gpu_suite_runs_at_smoke_size_stopping_and_resuming() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = common::root();
    let out = dir.join("suite");
    let o = memwall(
        dir,
        &[
            "bundle",
            "--suite",
            "--experiments-dir",
            s(&root.join("experiments")),
            "--profile",
            "smoke",
            "--target",
            "flex",
            "--out",
            s(&out),
            "--runner",
            s(&runner()),
            "--data",
            s(&common::excerpt()),
            "--torch-script",
            "none",
            "--no-archive",
        ],
    );
    assert!(o.status.success(), "bundle failed: {}", text(&o));
    let listing = text(&o);
    // The suite is what the experiment files' `study.gpu_suite` say, training studies first in
    // their places, the fusion_ir chains last.
    let roles =
        memwall_core::spec::StudyRoles::discover(&common::root().join("experiments")).unwrap();
    let suite: Vec<&str> = roles
        .suite
        .iter()
        .filter(|(_, k, _)| *k == memwall_core::spec::StudyKind::Training)
        .map(|(n, _, _)| n.as_str())
        .collect();
    assert_eq!(
        suite,
        ["peak_memory", "checkpoint_interval", "mixed_precision"]
    );
    assert_eq!(roles.chains(), Some("fusion_ir"));
    for study in &suite {
        assert!(
            listing.contains(&format!("{study}: ")) && listing.contains("expected"),
            "{study} missing from {listing}"
        );
    }
    let manifest: memwall_lab::bundle::Manifest =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let names: Vec<&str> = manifest.studies.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, suite, "suite order");
    assert!(manifest.studies.iter().all(|s| s.expected_s > 0.0));
    let pm = &manifest.studies[0];
    assert!(
        pm.jobs.iter().any(|(c, _)| c == "checkmate_80"),
        "Checkmate configurations are bundled: {:?}",
        pm.left_out
    );
    let total: usize = manifest.studies.iter().map(|s| s.jobs.len()).sum();
    let queue = std::fs::read_to_string(out.join("jobs/queue.tsv")).unwrap();
    let queued: Vec<&str> = queue.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(queued.len(), total, "{queue}");
    assert!(
        queued[0].starts_with("peak_memory/"),
        "priority order: {queue}"
    );
    // The queue lists the jobs in the plan's run order, with the plan's expected seconds.
    let plan = std::fs::read_to_string(out.join("plan.tsv")).unwrap();
    let planned: Vec<String> = plan
        .lines()
        .filter(|l| l.starts_with("job\t"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("{}\t{}", f[1], f[3])
        })
        .collect();
    assert_eq!(queued, planned, "{queue}\n{plan}");

    let records = || {
        std::fs::read_dir(out.join("jobs"))
            .unwrap()
            .flatten()
            .filter(|s| s.path().is_dir())
            .flat_map(|s| std::fs::read_dir(s.path()).unwrap().flatten())
            .filter(|j| j.path().join("record.json").is_file())
            .count()
    };
    // 1. A deadline that leaves no time for the later jobs: every job whose expected seconds do
    // not fit is left for the next run, and what finished is packed.
    let mut queue_long = String::new();
    for (i, line) in queued.iter().enumerate() {
        let rel = line.split('\t').next().unwrap();
        // The first three jobs fit; every later one "takes an hour".
        queue_long.push_str(&format!("{rel}\t{}\n", if i < 3 { 1 } else { 3600 }));
    }
    std::fs::write(out.join("jobs/queue.tsv"), &queue_long).unwrap();
    let run = |minutes: &str| {
        Command::new("bash")
            .arg(out.join("run.sh"))
            .args(["--minutes", minutes])
            .output()
            .unwrap()
    };
    let o = run("2");
    assert!(o.status.success(), "run.sh failed: {}", text(&o));
    assert_eq!(records(), 3, "{}", text(&o));
    assert!(
        text(&o).contains(&format!("3 of {total} job(s) have a record")),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("run ./run.sh --minutes N again"),
        "{}",
        text(&o)
    );
    assert!(out.join("results.tar.gz").is_file());
    // A partial result imports.
    let scratch = dir.join("runs");
    let import = |from: &Path| {
        memwall(
            dir,
            &[
                "import",
                s(from),
                "--runs",
                s(&scratch),
                "--experiments",
                s(&root.join("experiments")),
                "--templates",
                s(&root.join("templates")),
            ],
        )
    };
    let o = import(&out.join("results.tar.gz"));
    assert!(o.status.success(), "partial import failed: {}", text(&o));
    assert!(text(&o).contains("3 record(s) imported"), "{}", text(&o));

    // 2. The second run resumes: the finished jobs are skipped, the others run. Its deadline
    // is far past what the smoke suite takes on a slow, loaded CI machine (it took 2 min 10 s on
    // one), so that every job runs whatever the machine's speed.
    std::fs::write(out.join("jobs/queue.tsv"), &queue).unwrap();
    let o = run("60");
    assert!(o.status.success(), "run.sh failed: {}", text(&o));
    assert!(text(&o).contains("3 finished before"), "{}", text(&o));
    assert_eq!(records(), total, "{}", text(&o));
    let o = import(&out.join("results.tar.gz"));
    assert!(o.status.success(), "import failed: {}", text(&o));
    assert!(
        text(&o).contains(&format!("{} record(s) imported, 3 already", total - 3)),
        "{}",
        text(&o)
    );
    for study in ["peak_memory", "checkpoint_interval", "mixed_precision"] {
        assert!(
            scratch
                .join("reports")
                .join(study)
                .join("index.html")
                .is_file(),
            "no report for {study}"
        );
    }
    // The attribution benchmark ran on the bundle's control job (Burn's side; PyTorch's where
    // it imports) and its table is in the peak_memory report.
    let attribution = scratch.join("peak_memory/attribution");
    let burn_rows: Vec<_> = std::fs::read_dir(&attribution)
        .unwrap_or_else(|e| panic!("{}: {e}; {}", attribution.display(), text(&o)))
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with("burn."))
        .collect();
    assert_eq!(burn_rows.len(), 1, "{}", text(&o));
    let report = std::fs::read_to_string(scratch.join("reports/peak_memory/report.md")).unwrap();
    assert!(
        report.contains("Where the time goes"),
        "no attribution section"
    );
    // fusion_ir's chains ran in the slim runner; a CPU run is not imported as the CUDA one.
    assert!(
        out.join("fusion_ir/chains.json").is_file(),
        "no fusion chains run"
    );
    assert!(!scratch.join("fusion_ir/cuda_chains.json").exists());

    // 3. The bundled Checkmate job planned itself in the slim runner: its record carries the
    // plan of the exact planner and its own profiling pass, or says which budget is infeasible.
    let checkmate: Vec<memwall_core::record::JobRecord> = pm
        .jobs
        .iter()
        .filter(|(c, _)| c.starts_with("checkmate_"))
        .map(|(_, k)| {
            serde_json::from_slice(
                &std::fs::read(scratch.join("peak_memory").join(k).join("record.json")).unwrap(),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(checkmate.len(), 4);
    let planned = checkmate
        .iter()
        .find(|r| r.spec.config == "checkmate_80")
        .unwrap();
    assert_eq!(
        planned.status,
        memwall_core::record::JobStatus::Ok,
        "{:?}",
        planned.reason
    );
    let plan = planned
        .spec
        .planned
        .as_ref()
        .expect("the record holds its plan");
    assert!(plan.predicted_peak_bytes <= plan.budget_bytes);
    assert_eq!(
        planned.spec.plan.as_ref().map(|p| &p.segments),
        Some(&plan.segments),
        "the plan the job ran is the Checkmate solver's"
    );
    for r in &checkmate {
        assert!(
            matches!(
                r.status,
                memwall_core::record::JobStatus::Ok | memwall_core::record::JobStatus::Infeasible
            ),
            "{}: {:?} {:?}",
            r.spec.config,
            r.status,
            r.reason
        );
    }
    // The runner's build revision, not a working directory's.
    let version = Command::new(runner()).arg("version").output().unwrap();
    let built_from = String::from_utf8_lossy(&version.stdout)
        .split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string();
    assert!(
        !built_from.is_empty() && built_from != "unknown",
        "{version:?}"
    );
    assert_eq!(planned.env.git_revision, built_from);
}

/// A smoke bundle of peak_memory's control_adafactor, checkpoint_adafactor and control on flex
/// in `dir/bundle` (no PyTorch twin, no archive), and memwall's output.
fn three_row_bundle(dir: &Path) -> (PathBuf, std::process::Output) {
    let out = dir.join("bundle");
    let o = bundle_smoke(
        dir,
        &out,
        &runner(),
        "flex",
        "control_adafactor,checkpoint_adafactor,control",
        &["--torch-script", "none", "--no-archive"],
    );
    assert!(o.status.success(), "bundle failed: {}", text(&o));
    (out, o)
}

/// The line of a `run.sh --dry-run` output `dry` that plans memwall's `config`.
fn dry_line(dry: &str, config: &str) -> String {
    dry.lines()
        .find(|l| l.contains(&format!("memwall {config} ")))
        .unwrap_or_else(|| panic!("no line for {config}: {dry}"))
        .to_string()
}

/// A kernel kind's cold start moves on with the kind: when the plan's first job of a kind does
/// not run in this session (it does not fit, or it finished before), the next job of the kind
/// is expected with the cold start instead of warm; once one has run, the rest are warm. The
/// kinds are written into a smoke bundle's plan by hand (a CPU bundle has none), as a GPU
/// bundle's plan carries them.
#[test]
fn run_sh_moves_a_kinds_cold_start_to_the_next_job_of_the_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (out, _) = three_row_bundle(dir);
    // Run order: control_adafactor (the kind's cold start, 100 s, and an hour besides: it
    // does not fit), checkpoint_adafactor (5 s warm), control (5 s warm), all of kind "k".
    let plan = std::fs::read_to_string(out.join("plan.tsv")).unwrap();
    let mut queue = String::new();
    let plan: String = plan
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f[0] != "job" {
                return format!("{l}\n");
            }
            let (expected, cold) = if f[2] == "control_adafactor" {
                (3700, 100)
            } else {
                (5, 0)
            };
            queue.push_str(&format!("{}\t{expected}\n", f[1]));
            format!("job\t{}\t{}\t{expected}\tk\t{cold}\n", f[1], f[2])
        })
        .collect();
    std::fs::write(out.join("plan.tsv"), plan).unwrap();
    std::fs::write(out.join("jobs/queue.tsv"), &queue).unwrap();
    let dry = || {
        let o = Command::new("bash")
            .arg(out.join("run.sh"))
            .args(["--dry-run", "--minutes", "4"])
            .output()
            .unwrap();
        assert!(o.status.success(), "dry run failed: {}", text(&o));
        text(&o)
    };
    let line = dry_line;
    let d = dry();
    assert!(
        line(&d, "control_adafactor").contains("does not fit"),
        "{d}"
    );
    assert!(
        line(&d, "checkpoint_adafactor").contains(" 105 s  fits"),
        "owed the cold start: {d}"
    );
    assert!(line(&d, "control").contains("   5 s  fits"), "warm: {d}");
    // The first job of the kind finished in an earlier session: its kernels were compiled
    // there, not here, so the next job still pays them.
    let first = queue.lines().next().unwrap().split('\t').next().unwrap();
    std::fs::write(out.join("jobs").join(first).join("record.json"), "{}").unwrap();
    let d = dry();
    assert!(
        line(&d, "control_adafactor").contains("finished before"),
        "{d}"
    );
    assert!(
        line(&d, "checkpoint_adafactor").contains(" 105 s  fits"),
        "{d}"
    );
    assert!(line(&d, "control").contains("   5 s  fits"), "{d}");
}

/// `run.sh` under a GPU session's limits, on the CPU with a smoke bundle: `--dry-run` prints the
/// tiers and what does not fit without running anything; a tier in which no job finishes still
/// packs (the manifest and plan come back); a job still running at the deadline is killed and
/// the finished one comes back in `results.tar.gz` in the folder `--results` names.
#[test]
fn run_sh_plans_packs_an_empty_tier_and_keeps_what_finished_at_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (out, o) = three_row_bundle(dir);
    // The source's rows (a claim, the source's optimizer) form tier 1, the attribution
    // benchmark tier 2, the AdamW control the last tier.
    assert!(
        text(&o).contains("tier 1: the source's rows with their PyTorch twins (peak_memory)"),
        "{}",
        text(&o)
    );
    let plan = std::fs::read_to_string(out.join("plan.tsv")).unwrap();
    let order: Vec<&str> = plan
        .lines()
        .filter(|l| l.starts_with("job\t") || l.starts_with("tier\t"))
        .map(|l| {
            l.split('\t')
                .nth(if l.starts_with("job") { 2 } else { 1 })
                .unwrap()
        })
        .collect();
    assert_eq!(
        order,
        [
            "1",
            "control_adafactor",
            "checkpoint_adafactor",
            "2",
            "3",
            "control"
        ],
        "{plan}"
    );
    let manifest: memwall_lab::bundle::Manifest =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let key = |config: &str| {
        manifest.studies[0]
            .jobs
            .iter()
            .find(|(c, _)| c == config)
            .map(|(_, k)| k.clone())
            .unwrap()
    };
    let queue = std::fs::read_to_string(out.join("jobs/queue.tsv")).unwrap();
    let set_seconds = |seconds: &dyn Fn(&str) -> u64| {
        let text: String = queue
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let rel = l.split('\t').next().unwrap();
                format!("{rel}\t{}\n", seconds(rel))
            })
            .collect();
        std::fs::write(out.join("jobs/queue.tsv"), text).unwrap();
    };
    let run = |args: &[&str], runner: Option<&Path>| {
        let mut c = Command::new("bash");
        c.arg(out.join("run.sh")).args(args);
        if let Some(r) = runner {
            c.env("MEMWALL_JOB", r);
        }
        c.output().unwrap()
    };
    let records = || {
        std::fs::read_dir(out.join("jobs/peak_memory"))
            .unwrap()
            .flatten()
            .filter(|j| j.path().join("record.json").is_file())
            .count()
    };
    let packed = |archive: &Path| {
        let o = Command::new("tar")
            .args(["tzf", s(archive)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    // 1. The dry run: the checkpoint row "takes an hour" and does not fit in 2 minutes; nothing
    // runs and nothing is packed.
    let ckpt = key("checkpoint_adafactor");
    set_seconds(&|rel| if rel.ends_with(&ckpt) { 3600 } else { 5 });
    let o = run(&["--dry-run", "--minutes", "2"], None);
    assert!(o.status.success(), "dry run failed: {}", text(&o));
    let dry = text(&o);
    assert!(dry.contains("== tier 1: the source's rows"), "{dry}");
    let line = |config: &str| dry_line(&dry, config);
    assert!(line("control_adafactor").ends_with("fits"), "{dry}");
    assert!(
        line("checkpoint_adafactor").contains("does not fit"),
        "{dry}"
    );
    assert!(line("control").ends_with("fits"), "{dry}");
    assert!(
        dry.contains("1 step(s) do not fit: memwall checkpoint_adafactor"),
        "{dry}"
    );
    assert_eq!(records(), 0);
    assert!(!out.join("results.tar.gz").exists(), "a dry run packed");

    // 2. A run in which no job fits: every tier still packs; the archive holds the manifest and
    // the plan and no record.
    set_seconds(&|_| 3600);
    let back = dir.join("back-empty");
    let o = run(&["--minutes", "1", "--results", s(&back)], None);
    assert!(o.status.success(), "run.sh failed: {}", text(&o));
    assert_eq!(records(), 0, "{}", text(&o));
    let listed = packed(&back.join("results.tar.gz"));
    assert!(
        listed.contains("manifest.json") && listed.contains("plan.tsv"),
        "{listed}"
    );
    assert!(!listed.contains("record.json"), "{listed}");
    assert!(
        text(&o).contains("0 of 3 job(s) have a record"),
        "{}",
        text(&o)
    );
    assert!(back.join("logs.tar.gz").is_file());

    // 3. The checkpoint row hangs past the deadline (a runner stand-in that sleeps for it; 60 s
    // of budget, so that the control finishes first on a loaded machine): it is
    // killed with its process group, and the control's record comes back.
    set_seconds(&|_| 5);
    // Before it hangs it tunes a kernel, as a CUDA job does first: the tuning comes back
    // although the step never finishes.
    let hang = dir.join("hanging-runner.sh");
    std::fs::write(
        &hang,
        format!(
            "#!/bin/sh\ncase \"$*\" in *{ckpt}*) mkdir -p {c} && echo '{{\"tuned\": 1}}' > \
             {c}/matmul.json.log && exec sleep 600;; esac\nexec {r} \"$@\"\n",
            c = s(&out.join("cache/cubecl/autotune/0.10.0/device-0-0-cuda")),
            r = s(&out.join("bin/memwall-job"))
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hang, std::fs::Permissions::from_mode(0o755)).unwrap();
    let back = dir.join("back-deadline");
    let started = std::time::Instant::now();
    let o = run(&["--minutes", "1.5", "--results", s(&back)], Some(&hang));
    assert!(o.status.success(), "run.sh failed: {}", text(&o));
    assert!(
        started.elapsed().as_secs() < 120,
        "the hanging job was not stopped: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("memwall checkpoint_adafactor: still running after the deadline"),
        "{}",
        text(&o)
    );
    let listed = packed(&back.join("results.tar.gz"));
    assert!(
        listed.contains(&format!("{}/record.json", key("control_adafactor"))),
        "{listed}"
    );
    assert!(!listed.contains(&format!("{ckpt}/record.json")), "{listed}");
    assert!(!out
        .join("jobs/peak_memory")
        .join(&ckpt)
        .join("record.json")
        .exists());
    let cache = packed(&back.join("cache.tar.gz"));
    assert!(
        cache.contains("autotune/0.10.0/device-0-0-cuda/matmul.json.log"),
        "the stopped step's tuning is not packed: {cache}"
    );

    // 4. Results over what a GPU session brings back per file (a 4 KiB limit here) are split
    // into parts that each import alone.
    let back = dir.join("back-split");
    let o = Command::new("bash")
        .arg(out.join("run.sh"))
        .args(["--results", s(&back)])
        .env("MEMWALL_RETURN_LIMIT", "4096")
        .output()
        .unwrap();
    assert!(o.status.success(), "run.sh failed: {}", text(&o));
    assert_eq!(records(), 3, "{}", text(&o));
    let first = back.join("results.tar.gz");
    let second = back.join("results-2.tar.gz");
    assert!(second.is_file(), "not split: {}", text(&o));
    let mut in_parts = 0;
    for part in [&first, &second] {
        let listed = packed(part);
        assert!(listed.contains("manifest.json"), "{listed}");
        in_parts += listed.matches("/record.json").count();
    }
    for n in 3..10 {
        let part = back.join(format!("results-{n}.tar.gz"));
        if part.is_file() {
            in_parts += packed(&part).matches("/record.json").count();
        }
    }
    assert_eq!(in_parts, 3, "every record in one part: {}", text(&o));
    assert!(
        text(&o)
            .contains("next, in the repository: memwall import results.tar.gz results-2.tar.gz"),
        "{}",
        text(&o)
    );
}

/// A GPU bundle that would not travel to a GPU machine (over 64 MiB with the working tree) is
/// refused with its size and what to leave out; a flex bundle of the same size, which runs
/// where it was made (`just bench-cpu`), is written.
#[test]
fn a_gpu_bundle_over_the_carry_limit_is_refused_with_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A runner stand-in of 65 MiB that answers `backends` (a shell script with padding that
    // gzip cannot shrink: pseudo-random bytes after `exit 0`, xorshift64).
    let script = b"#!/bin/sh\n[ \"$1\" = backends ] && printf 'flex\\ncuda\\n'\nexit 0\n";
    let fake_runner = |name: &str, random: bool| {
        let mut body = script.to_vec();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        while body.len() < 65 << 20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            body.push(if random { x as u8 } else { b'#' });
        }
        let path = dir.join(name);
        std::fs::write(&path, &body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (path, body)
    };
    let (fake, _) = fake_runner("memwall-job", true);
    let bundle_with = |runner: &Path, target: &str, out: &Path| {
        bundle_smoke(
            dir,
            out,
            runner,
            target,
            "control",
            &["--torch-script", "none"],
        )
    };
    let bundle = |target: &str, out: &Path| bundle_with(&fake, target, out);
    let out = dir.join("gpu-bundle");
    let o = bundle("cuda", &out);
    assert!(!o.status.success(), "accepted: {}", text(&o));
    let msg = text(&o);
    assert!(
        msg.contains("over the 64 MiB a GPU session carries") && msg.contains("65."),
        "{msg}"
    );
    assert!(
        !dir.join("gpu-bundle.tar.gz").exists(),
        "an archive was written"
    );
    let flex = bundle("flex", &dir.join("cpu-bundle"));
    assert!(flex.status.success(), "{}", text(&flex));

    // A GPU bundle carries its runner gzip-compressed: a 65 MiB runner that compresses well
    // fits, as bin/memwall-job.gz only, and run.sh unpacks it before its first job, byte for
    // byte (it then stops at the device checks on a machine without a GPU, or runs the
    // stand-in's empty jobs on one with).
    let (small, body) = fake_runner("memwall-job-compressible", false);
    let out = dir.join("gpu-bundle-compressed");
    let o = bundle_with(&small, "cuda", &out);
    assert!(o.status.success(), "refused: {}", text(&o));
    assert!(out.join("bin/memwall-job.gz").is_file(), "{}", text(&o));
    assert!(
        !out.join("bin/memwall-job").exists(),
        "the runner travels uncompressed"
    );
    let gz = std::fs::metadata(out.join("bin/memwall-job.gz"))
        .unwrap()
        .len();
    assert!(gz < 1 << 20, "{gz} bytes");
    let o = Command::new("bash")
        .arg(out.join("run.sh"))
        .args([
            "--minutes",
            "1",
            "--results",
            s(&dir.join("back-compressed")),
        ])
        .env("MEMWALL_SKIP_TORCH", "1")
        .output()
        .unwrap();
    assert!(
        text(&o).contains("runner: unpacked bin/memwall-job"),
        "{}",
        text(&o)
    );
    assert!(std::fs::read(out.join("bin/memwall-job")).unwrap() == body);
}
