//! `memwall run` on failing jobs and bad names: a study whose jobs all produced records (failed
//! or out of memory among them) reports them and exits 0; a scratch record store never renders
//! into the published reports; an unknown `--only` lists the configurations.

mod common;

use memwall_core::record::{record_dir, JobStatus};
use memwall_driver as driver;

/// `memwall run` exits 0 when every job produced a record, whatever their status: unsupported
/// and infeasible configurations are rows of the report.
#[test]
fn memwall_run_exits_0_when_every_job_produced_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::bad_input_study(
        dir.path(),
        &common::excerpt(),
        common::SMALL_MODEL,
        "[[configs]]\nname = \"control\"\n[[configs]]\nname = \"compile\"\nfusion = true\n\
         [[configs]]\nname = \"tight\"\ncheckmate = 0.05\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .arg("run")
        .arg(&exp)
        .args(["--profile", "smoke", "--device", "cpu"])
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
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    let md = std::fs::read_to_string(dir.path().join("reports/bad_input/report.md")).unwrap();
    for status in ["unsupported", "infeasible"] {
        assert!(md.contains(status), "{status} row missing: {md}");
    }
    // and invalid input is an error of the run itself: non-zero, naming the field
    std::fs::write(
        &exp,
        std::fs::read_to_string(&exp)
            .unwrap()
            .replace("eval_batches = 1", "eval_batches = 0"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .arg("run")
        .arg(&exp)
        .args(["--profile", "smoke", "--device", "cpu"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("profiles.smoke.train.eval_batches"),
        "{stderr}"
    );
}

/// Failed and out-of-memory jobs, with the empty environment the driver gives a job that
/// crashed before it reported one, are rows of the report (status word, reason in a note) and
/// not points of its figures; `memwall run` exits 0.
#[test]
fn failed_and_out_of_memory_jobs_are_rows_without_plot_points() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::bad_input_study(
        dir.path(),
        &common::excerpt(),
        common::SMALL_MODEL,
        "[[configs]]\nname = \"good\"\n[[configs]]\nname = \"crashed\"\ncheckpoint = 1\n\
         [[configs]]\nname = \"too_big\"\ncheckpoint = 2\n",
    );
    let paths = common::temp_paths(dir.path());
    let (_, _, jobs) = driver::plan_jobs(&exp, &paths, &common::smoke_options()).unwrap();
    let job = |name: &str| jobs.iter().find(|j| j.config == name).unwrap();
    let env = memwall_runner::train::job_environment(job("too_big"));
    let mut huge = job("too_big").clone();
    huge.model.layers = 1_000_000_000_000;
    let mut oom = memwall_runner::device::too_large(&huge, &env).expect("refused");
    oom.key = job("too_big").key();
    oom.spec = job("too_big").clone();
    let crashed = memwall_core::record::JobRecord::unfinished(
        job("crashed"),
        JobStatus::Failed,
        "the job process was killed by signal 9".into(),
        Default::default(),
    );
    for rec in [&oom, &crashed] {
        let d = record_dir(&paths.runs, "bad_input", &rec.key);
        memwall_core::record::write_record(&d, rec).unwrap();
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .arg("run")
        .arg(&exp)
        .args(["--profile", "smoke", "--device", "cpu"])
        .arg("--runs")
        .arg(&paths.runs)
        .arg("--reports")
        .arg(&paths.reports)
        .arg("--templates")
        .arg(&paths.templates)
        .env("MEMWALL_LOG", "warn")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("1 jobs run, 2 already finished"),
        "{stderr}"
    );
    let report = paths.reports.join("bad_input");
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    // one row per configuration, with its status word; the reasons are notes
    for (config, status) in [
        ("good", "ok"),
        ("crashed", "failed"),
        ("too_big", "out_of_memory"),
    ] {
        let row = md
            .lines()
            .find(|l| l.starts_with('|') && l.contains(config))
            .unwrap_or_else(|| panic!("no row for {config}: {md}"));
        assert!(row.contains(status), "{config}: {row}");
    }
    assert!(
        md.contains("signal 9"),
        "the failure's reason is kept: {md}"
    );
    assert!(
        md.contains("must be at most"),
        "the OOM's reason is kept: {md}"
    );
    // the figures plot the finished job only: the scatter of memory against time labels its
    // points, and has a point for `good` and none for the jobs without measurements (the bar
    // charts keep an empty slot per configuration)
    let figures = report.join("figures");
    let pareto = std::fs::read_dir(&figures)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("pareto_")
        })
        .expect("a memory-vs-time figure");
    let svg = std::fs::read_to_string(&pareto).unwrap();
    // The figure's text is outlines; its <desc> names the points drawn.
    let desc = svg
        .split("<desc>")
        .nth(1)
        .and_then(|d| d.split("</desc>").next())
        .unwrap_or_else(|| panic!("no <desc> in {}", pareto.display()));
    assert!(desc.contains("good"), "{desc}");
    for config in ["crashed", "too_big"] {
        assert!(
            !desc.contains(config),
            "{} plots {config}",
            pareto.display()
        );
    }
    assert!(!svg.contains("<text"), "{}: text left", pareto.display());
    // and no second group (with an empty device name) writes figures of the same name
    let groups = md
        .lines()
        .filter(|l| {
            [
                "## CPU stand-in",
                "## At the source's size",
                "## Scaled-down stand-in",
            ]
            .iter()
            .any(|h| l.starts_with(h))
        })
        .count();
    assert_eq!(groups, 1, "one group for one device: {md}");
}

/// A run with a scratch record store renders its reports beside that store: the published
/// `reports/` of the working directory are never touched (a smoke import once replaced the
/// committed GPU report that way).
#[test]
fn a_scratch_record_store_never_renders_into_the_published_reports() {
    let dir = tempfile::tempdir().unwrap();
    let published = dir.path().join("reports/autodiff_example");
    std::fs::create_dir_all(&published).unwrap();
    std::fs::write(published.join("report.md"), "the committed report").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .arg("run")
        .arg(common::root().join("experiments/autodiff_example.toml"))
        .args(["--profile", "smoke", "--device", "cpu", "--runs", "scratch"])
        .arg("--templates")
        .arg(common::root().join("templates"))
        .env_remove("MEMWALL_RUNS")
        .env("MEMWALL_LOG", "warn")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(published.join("report.md")).unwrap(),
        "the committed report"
    );
    assert!(dir
        .path()
        .join("scratch/reports/autodiff_example/report.md")
        .is_file());
}

/// An `--only` name that is no configuration of the study is an error listing the names, on
/// every path that expands jobs (run, export-jobs; bundle across its studies), never a silent
/// empty selection.
#[test]
fn an_unknown_only_name_is_an_error_listing_the_configurations() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = common::bad_input_study(
        d,
        &common::excerpt(),
        common::SMALL_MODEL,
        "[[configs]]\nname = \"control\"\ncontrol = true\n[[configs]]\nname = \"checkpoint\"\ncheckpoint = 1",
    );
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
            .current_dir(d)
            .args(args)
            .env_remove("MEMWALL_RUNS")
            .output()
            .unwrap()
    };
    let exp_s = exp.to_str().unwrap();
    for args in [
        vec![
            "run",
            exp_s,
            "--profile",
            "smoke",
            "--device",
            "cpu",
            "--only",
            "contrl",
        ],
        vec![
            "export-jobs",
            exp_s,
            "--target",
            "flex",
            "--profile",
            "smoke",
            "--out",
            "jobs",
            "--only",
            "contrl",
        ],
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted --only contrl");
        assert!(
            stderr.contains(
                "--only contrl: no configuration named `contrl` (have: control, checkpoint)"
            ),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("bad_input.toml"), "{args:?}: {stderr}");
    }
    // Nothing ran or was exported.
    assert!(!d.join("runs").exists());
    assert!(!d.join("jobs/bad_input").exists());
}

/// Without its job runner `memwall run` stops before any job, naming where it looked and how to
/// build it, and writes no record.
#[test]
fn a_missing_job_runner_is_named_with_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = common::bad_input_study(
        d,
        &common::excerpt(),
        common::SMALL_MODEL,
        "[[configs]]\nname = \"control\"\ncontrol = true",
    );
    let missing = d.join("no-such-memwall-job");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .current_dir(d)
        .args(["run", exp.to_str().unwrap(), "--profile", "smoke"])
        .args(["--device", "cpu", "--runs"])
        .arg(d.join("runs"))
        .env("MEMWALL_JOB", &missing)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&missing.display().to_string())
            && stderr.contains("cargo build --release --locked --bins"),
        "{stderr}"
    );
    assert!(!d.join("runs").exists(), "no job ran: {stderr}");
}
