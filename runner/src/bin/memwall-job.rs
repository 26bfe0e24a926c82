//! `memwall-job`: the slim job runner carried to GPU machines (Burn and the job format only;
//! no polars, plotters or minijinja). Its records are ingested and reported by `memwall
//! report` on any machine.
//!
//! - `memwall-job run-job --job FILE --out DIR`: run one job in this process.
//! - `memwall-job sweep-dir DIR`: run every `DIR/<study>/<key>/job.json` without a
//!   `record.json`, each in its own process (a crash or out-of-memory costs one job).
//! - `memwall-job backends`: the backends this build runs, one per line (`flex`, and `ndarray`
//!   and `cuda` when built with them), so a bundle can refuse a runner without CUDA.

use memwall_core::record::RECORD_FILE;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: memwall-job run-job --job FILE --out DIR\n       memwall-job sweep-dir DIR\n       \
         memwall-job backends"
    );
    ExitCode::from(2)
}

fn job_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Ok(studies) = std::fs::read_dir(root) else {
        return dirs;
    };
    for study in studies.flatten() {
        if let Ok(jobs) = std::fs::read_dir(study.path()) {
            for job in jobs.flatten() {
                if job.path().join("job.json").exists() {
                    dirs.push(job.path());
                }
            }
        }
    }
    dirs.sort();
    dirs
}

fn main() -> ExitCode {
    memwall_runner::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run-job") => {
            let get = |flag: &str| {
                args.iter()
                    .position(|a| a == flag)
                    .and_then(|i| args.get(i + 1))
                    .map(PathBuf::from)
            };
            let (Some(job), Some(out)) = (get("--job"), get("--out")) else {
                return usage();
            };
            match memwall_runner::job::run_job_file(&job, &out) {
                Ok(r) => {
                    eprintln!("{}: {}", r.spec.config, r.status.as_str());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("sweep-dir") => {
            let Some(root) = args.get(1).map(PathBuf::from) else {
                return usage();
            };
            let exe = match std::env::current_exe() {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("error: locating memwall-job: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let dirs = job_dirs(&root);
            eprintln!("{} job(s) under {}", dirs.len(), root.display());
            for dir in dirs {
                if dir.join(RECORD_FILE).exists() {
                    eprintln!("{}: finished before, skipped", dir.display());
                    continue;
                }
                let job = match memwall_core::spec::JobSpec::read(&dir.join("job.json")) {
                    Ok(j) => j,
                    Err(e) => {
                        eprintln!("{}: {e}", dir.display());
                        continue;
                    }
                };
                match memwall_runner::job::run_in_process(
                    &job,
                    &dir,
                    &(exe.clone(), vec!["run-job".into()]),
                ) {
                    Ok(r) => eprintln!(
                        "{}: {}{}",
                        job.config,
                        r.status.as_str(),
                        r.summary
                            .map(|s| format!(
                                ", peak {} MiB, {:.3} samples/s",
                                s.peak_allocated_bytes >> 20,
                                s.samples_per_s
                            ))
                            .unwrap_or_default()
                    ),
                    Err(e) => eprintln!("{}: {e}", dir.display()),
                }
            }
            ExitCode::SUCCESS
        }
        Some("backends") => {
            println!("flex");
            if cfg!(feature = "ndarray") {
                println!("ndarray");
            }
            if cfg!(feature = "cuda") {
                println!("cuda");
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}
