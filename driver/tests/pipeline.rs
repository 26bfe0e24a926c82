//! End to end: a smoke study runs as real Burn jobs in their own processes, a rerun skips the
//! finished jobs, and the report holds the table and the SVG figures.

mod common;

use memwall_core::record::{read_record, record_dir, JobStatus};
use memwall_driver::{self as driver, Paths, RunOptions};
use memwall_report::sinks::parquet::{STEPS_FILE, SUMMARY_FILE};
use memwall_runner::device::DeviceRequest;
use std::path::PathBuf;

fn setup(dir: &std::path::Path, configs: &str) -> PathBuf {
    let exp_dir = dir.join("experiments");
    std::fs::create_dir_all(&exp_dir).unwrap();
    let text = format!(
        r#"
[study]
name = "smoke_e2e"
title = "End-to-end smoke study"
source = "004_cef2fa4595315230.txt"
kind = "training"
tags = ["test"]
[train]
lr = 3e-3
[data]
path = "{}"
[profiles.smoke]
model = {{ layers = 4, d_model = 32, heads = 2, d_ff = 64, seq_len = 32, batch = 2, vocab = 300 }}
train = {{ steps = 3, warmup_steps = 1, eval_batches = 1 }}
{configs}
"#,
        common::excerpt().display()
    );
    let path = exp_dir.join("smoke_e2e.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn opts() -> RunOptions {
    common::smoke_options()
}

/// Every file below `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn paths(dir: &std::path::Path) -> Paths {
    common::temp_paths(dir)
}

/// One scenario on purpose (over 80 lines): the sweep of real training jobs is the expensive
/// part, so the resume, report, goal and stale-record checks share it in order.
#[test]
fn smoke_study_runs_resumes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let exp = setup(
        dir.path(),
        r#"
[[configs]]
name = "control"
control = true
[[configs]]
name = "checkpoint"
checkpoint = 1
fused_optimizer = true
[[configs]]
name = "bf16"
precision = "bf16"
[[configs]]
name = "compile"
fusion = true
[[configs]]
name = "checkmate"
checkmate = 0.9
[[configs]]
name = "budget"
budget = 0.5
[[configs]]
name = "mixed"
precision = "f16"
master_weights = true
loss_scale = { init = 1024.0, growth_interval = 2 }
[[goals]]
label = "fused checkpointed step / plain step"
numerator = { checkpoint = 1, fused_optimizer = true }
denominator = { checkpoint = "none" }
at_most = 1000.0
"#,
    );
    let p = paths(dir.path());
    let o = opts();

    let first = driver::sweep(&exp, &p, &o).unwrap();
    assert_eq!(first.ran, 7);
    assert_eq!(first.skipped, 0);
    // fusion has no CPU backend: recorded as unsupported with the reason, not dropped
    assert_eq!(first.unfinished.len(), 1, "{:?}", first.unfinished);
    assert_eq!(first.unfinished[0].0, "compile");
    assert_eq!(first.unfinished[0].1, JobStatus::Unsupported);

    // every job wrote a record with measurements from the run
    let (_, _, jobs) = driver::plan_jobs(&exp, &p, &o).unwrap();
    for job in jobs.iter().filter(|j| j.config != "compile") {
        let rec = read_record(&record_dir(&p.runs, "smoke_e2e", &job.key()))
            .unwrap()
            .unwrap();
        assert_eq!(
            rec.status,
            JobStatus::Ok,
            "{}: {:?}",
            job.config,
            rec.reason
        );
        let s = rec.summary.unwrap();
        assert_eq!(rec.steps.len(), 4);
        assert!(s.peak_allocated_bytes > 0 && s.samples_per_s > 0.0);
        assert!(s.eval_perplexity.is_finite() && s.eval_perplexity > 1.0);
        assert_eq!(rec.env.backend, "flex");
        assert_eq!(rec.env.dtype, job.strategy.precision.as_str());
    }

    // the Checkmate configuration ran its plan, solved from its own profiling pass
    let cm = jobs.iter().find(|j| j.config == "checkmate").unwrap();
    let rec = read_record(&record_dir(&p.runs, "smoke_e2e", &cm.key()))
        .unwrap()
        .unwrap();
    let planned = rec.spec.planned.expect("the driver planned it");
    assert_eq!(rec.plan.as_ref(), Some(&planned.segments));
    assert!(planned.predicted_peak_bytes <= planned.budget_bytes);
    // ... solved from the job's own profiling pass, recorded in the job's folder
    let profile = read_record(&record_dir(&p.runs, "smoke_e2e", &cm.key()).join("profile"))
        .unwrap()
        .expect("the plan stage's profiling record");
    assert!(profile.spec.profile_only && profile.status == JobStatus::Ok);
    assert_eq!(profile.block_costs.len(), cm.model.layers);
    assert!(profile.block_costs.iter().all(|b| b.activation_bytes > 0));
    let executor = profile.executor_profile.expect("the executor profile");
    assert_eq!(executor.blocks.len(), cm.model.layers);
    assert_eq!(executor.calibration.len(), 3, "three calibration steps");
    assert!(executor.tail_peak_bytes > 0 && executor.head_peak_bytes > 0);
    // ... and the budget configuration, whose profiling pass would measure the same (only what
    // is recomputed differs), planned from a copy of it, its log saying so
    let bu = jobs.iter().find(|j| j.config == "budget").unwrap();
    let bu_dir = record_dir(&p.runs, "smoke_e2e", &bu.key()).join("profile");
    let shared = read_record(&bu_dir)
        .unwrap()
        .expect("the shared profiling record");
    assert_eq!(shared.spec.config, "checkmate");
    assert_eq!(shared.executor_profile.as_ref(), Some(&executor));
    let log = std::fs::read_to_string(bu_dir.join("job.log")).unwrap();
    assert!(
        log.contains("shared: this profiling pass was measured for checkmate"),
        "{log}"
    );

    // the mixed-precision job recorded its loss scale and gradient underflow per step
    let mx = jobs.iter().find(|j| j.config == "mixed").unwrap();
    let rec = read_record(&record_dir(&p.runs, "smoke_e2e", &mx.key()))
        .unwrap()
        .unwrap();
    assert_eq!(rec.steps[0].loss_scale, Some(1024.0));
    assert!(rec.steps.iter().all(|s| s
        .grad_zero_fraction
        .is_some_and(|z| (0.0..=1.0).contains(&z))));

    // a rerun skips every finished job
    let second = driver::sweep(&exp, &p, &o).unwrap();
    assert_eq!(second.ran, 0);
    assert_eq!(second.skipped, 7);

    // the report holds the table and the figures
    let r = driver::report(&exp, &p).unwrap();
    let md = std::fs::read_to_string(&r.markdown).unwrap();
    assert!(
        md.starts_with("---\ntitle: End-to-end smoke study\n"),
        "{md}"
    );
    assert!(
        md.contains("| Configuration | Status | Peak allocated, ours, exact (MiB) |"),
        "{md}"
    );
    assert!(md.contains("figures/loss_smoke_flex.svg"), "{md}");
    // an unsupported job: not a row of dashes but one sentence naming it and the reason
    assert!(!md.contains("| unsupported"), "{md}");
    assert!(
        md.contains("Kernel fusion") && md.contains("not run, unsupported on flex"),
        "{md}"
    );
    assert!(
        md.contains("Mixed precision: loss scaling and gradient underflow")
            && md.contains("figures/loss_scale_smoke_flex.svg"),
        "{md}"
    );
    let html = std::fs::read_to_string(&r.html).unwrap();
    // figures are files beside the page (`figures&#x2f;...` is minijinja's escaped `/`)
    assert!(html.contains("<img src=\"figures") && html.contains("<table class=\"results\""));
    // the Parquet sink writes the study's tables beside the report, never into the store
    let out = r.markdown.parent().unwrap();
    for file in [SUMMARY_FILE, STEPS_FILE] {
        assert!(
            out.join(file).exists(),
            "{file} missing in {}",
            out.display()
        );
    }
    assert!(
        files_under(&p.runs)
            .iter()
            .all(|f| f.extension().is_none_or(|e| e != "parquet")),
        "{:?}",
        files_under(&p.runs)
    );
    assert!(!r.figures.is_empty());
    for f in &r.figures {
        let svg = std::fs::read_to_string(f).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("</svg>"),
            "{}",
            f.display()
        );
    }
    // the experiment file's goal is evaluated on the records
    assert!(
        md.contains("| fused checkpointed step / plain step | f32 |")
            && md.contains("<= 1000x | yes |"),
        "{md}"
    );
    assert!(!md.contains("Records not in the experiment file"), "{md}");
    // every record ran its configuration's layer norm: no note says otherwise
    assert!(!md.contains("Layer norm of these records"), "{md}");

    // a configuration removed from the file: its record is listed, not dropped
    let exp = setup(
        dir.path(),
        r#"
[[configs]]
name = "control"
control = true
"#,
    );
    let r = driver::report(&exp, &p).unwrap();
    let md = std::fs::read_to_string(&r.markdown).unwrap();
    let stale = md
        .split("## Records not in the experiment file")
        .nth(1)
        .unwrap_or_else(|| panic!("no stale-record section: {md}"));
    for name in ["checkpoint", "bf16", "compile", "checkmate", "mixed"] {
        assert!(
            stale.contains(&format!("| {name} | smoke | flex |")),
            "{name}: {stale}"
        );
    }
    assert!(!stale.contains("| control |"), "{stale}");

    // the control's configuration now names Burn's composed layer norm, its record ran the
    // default one: the report says so under the group, naming the row and what it ran
    let exp = setup(
        dir.path(),
        r#"
[[configs]]
name = "control"
control = true
layer_norm = "composed"
"#,
    );
    let r = driver::report(&exp, &p).unwrap();
    let md = std::fs::read_to_string(&r.markdown).unwrap();
    assert!(
        md.contains("Layer norm of these records*: 1 of this group's records")
            && md.contains("control (`saves_input`)"),
        "{md}"
    );
}

#[test]
fn missing_data_and_unknown_configuration_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let exp = setup(dir.path(), "[[configs]]\nname = \"control\"\n");
    let p = paths(dir.path());
    let mut o = opts();
    o.data = Some(dir.path().join("nope/TinyStories-valid.txt"));
    let msg = driver::sweep(&exp, &p, &o).unwrap_err().to_string();
    assert!(
        msg.contains("nope/TinyStories-valid.txt") && msg.contains("MEMWALL_DATA_DIR"),
        "{msg}"
    );

    let mut o = opts();
    o.only = vec!["contrl".into()];
    let msg = driver::sweep(&exp, &p, &o).unwrap_err().to_string();
    assert!(msg.contains("contrl") && msg.contains("control"), "{msg}");
}

/// A Checkmate configuration alone in an empty record store plans itself: its block costs come
/// from its own profiling pass, not from an earlier configuration's record. A budget below what
/// any plan needs is an `infeasible` record naming the smallest feasible budget, and the sweep
/// goes on.
#[test]
fn a_checkmate_job_plans_from_its_own_profile() {
    let dir = tempfile::tempdir().unwrap();
    let exp = setup(
        dir.path(),
        "[[configs]]\nname = \"control\"\ncontrol = true\n[[configs]]\nname = \"checkmate\"\ncheckmate = 0.9\n[[configs]]\nname = \"tight\"\ncheckmate = 0.05\n",
    );
    let p = paths(dir.path());
    let mut o = opts();
    o.only = vec!["checkmate".into(), "tight".into()];
    let out = driver::sweep(&exp, &p, &o).unwrap();
    assert_eq!(out.ran, 2);
    assert_eq!(out.unfinished.len(), 1, "{:?}", out.unfinished);
    assert_eq!(out.unfinished[0].0, "tight");
    assert_eq!(out.unfinished[0].1, JobStatus::Infeasible);
    assert!(
        out.unfinished[0].2.contains("smallest feasible budget"),
        "{:?}",
        out.unfinished
    );
    let (_, _, jobs) = driver::plan_jobs(&exp, &p, &o).unwrap();
    let cm = jobs.iter().find(|j| j.config == "checkmate").unwrap();
    let rec = read_record(&record_dir(&p.runs, "smoke_e2e", &cm.key()))
        .unwrap()
        .unwrap();
    assert_eq!(rec.status, JobStatus::Ok, "{:?}", rec.reason);
    assert!(rec.spec.planned.is_some());
    // only the two Checkmate jobs' folders exist: no other job ran or was read
    let folders: Vec<_> = std::fs::read_dir(p.runs.join("smoke_e2e"))
        .unwrap()
        .collect();
    assert_eq!(folders.len(), 2);
    // the infeasible record joins its study's group (device named) and the report renders
    let tight = jobs.iter().find(|j| j.config == "tight").unwrap();
    let rec = read_record(&record_dir(&p.runs, "smoke_e2e", &tight.key()))
        .unwrap()
        .unwrap();
    assert!(!rec.env.device_name.is_empty());
    let r = driver::report(&exp, &p).unwrap();
    let md = std::fs::read_to_string(&r.markdown).unwrap();
    // the status is one word; the reason is the cell's footnote under the table
    assert!(md.contains("| infeasible[^t"), "{md}");
    assert!(
        md.lines()
            .any(|l| l.starts_with("[^t") && l.contains("]: budget 0.05")),
        "{md}"
    );
}

#[test]
fn a_crashing_job_is_recorded_and_the_sweep_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let exp = setup(
        dir.path(),
        "[[configs]]\nname = \"a\"\n[[configs]]\nname = \"b\"\n",
    );
    let p = paths(dir.path());
    let mut o = opts();
    // a runner that dies without writing a record
    o.runner = (
        PathBuf::from("/bin/sh"),
        vec![
            "-c".into(),
            "echo 'CUDA_ERROR_OUT_OF_MEMORY' >&2; exit 3".into(),
            "sh".into(),
        ],
    );
    let out = driver::sweep(&exp, &p, &o).unwrap();
    assert_eq!(out.ran, 2);
    assert_eq!(out.unfinished.len(), 2);
    assert!(
        out.unfinished.iter().all(|u| u.1 == JobStatus::OutOfMemory),
        "{:?}",
        out.unfinished
    );
}

#[test]
fn cuda_request_without_gpu_is_an_error() {
    if memwall_runner::device::probe_cuda().is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = setup(dir.path(), "[[configs]]\nname = \"a\"\n");
    let mut o = opts();
    o.device = DeviceRequest::Cuda(0);
    let msg = driver::sweep(&exp, &paths(dir.path()), &o)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("cuda:0"), "{msg}");
}

/// Every job of a sweep shares one CubeCL cache directory under the cache root (kernels and
/// autotune results compiled by the first job are found by the next), and the pool cleanup
/// option reaches each job.
#[test]
fn jobs_of_a_sweep_share_the_kernel_cache() {
    let dir = tempfile::tempdir().unwrap();
    let exp = setup(
        dir.path(),
        "[[configs]]\nname = \"a\"\n[[configs]]\nname = \"b\"\nprecision = \"bf16\"\n",
    );
    let paths = paths(dir.path());
    let mut opts = opts();
    opts.memory_cleanup = true;
    let (_, _, jobs) = driver::plan_jobs(&exp, &paths, &opts).unwrap();
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        assert_eq!(
            job.device_settings.cache_dir.as_deref(),
            Some(paths.cache.join("cubecl").as_path())
        );
        assert!(job.device_settings.memory_cleanup);
    }
}
