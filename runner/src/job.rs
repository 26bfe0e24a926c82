//! Running one job: in this process ([`run_job_file`], the `run-job` subcommand) or in a child
//! process with its log captured ([`run_in_process`]), so that a crash or an out-of-memory
//! costs one job and still leaves a record (`../shared/DESIGN.md` section 3).
//!
//! May import: [`crate::train`], [`crate::measure`], `memwall_core`.

use crate::measure::fault;
use memwall_core::error::{Error, Result};
use memwall_core::record::{self as results, JobRecord, JobStatus};
use memwall_core::spec::JobSpec;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs the job in `job_file` in this process and writes its record into `out_dir`
/// (the `run-job` subcommand).
pub fn run_job_file(job_file: &Path, out_dir: &Path) -> Result<JobRecord> {
    let job = JobSpec::read(job_file)?;
    let record = crate::train::run_job(&job);
    results::write_record(out_dir, &record)?;
    Ok(record)
}

/// Runs the job whose `job.json` is in `dir` in a child process (`runner` program and leading
/// arguments, then `--job FILE --out DIR`), with its stderr in `dir/job.log`. If the process
/// dies without writing a record (a crash, an abort on out-of-memory), writes a `failed` or
/// `out_of_memory` record holding the end of its log. Returns the job's record.
///
/// # Errors
/// [`Error::Job`] when the runner cannot be started; I/O errors on `dir`.
pub fn run_in_process(
    job: &JobSpec,
    dir: &Path,
    runner: &(PathBuf, Vec<String>),
) -> Result<JobRecord> {
    let job_file = dir.join("job.json");
    let log_path = dir.join("job.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io("creating", &log_path, e))?;
    let (program, pre_args) = runner;
    let status = Command::new(program)
        .args(pre_args)
        .arg("--job")
        .arg(&job_file)
        .arg("--out")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .status()
        .map_err(|e| Error::Job {
            job: job.config.clone(),
            message: format!("could not start the job runner {}: {e}", program.display()),
        })?;
    let unreadable = match results::read_record(dir) {
        Ok(Some(r)) => return Ok(r),
        Ok(None) => String::new(),
        // A record this memwall cannot read (a runner of another version): kept aside, and
        // the job's record says why.
        Err(e) => {
            let aside = results::set_aside(dir)?;
            format!(
                "its record could not be read ({e}; moved to {}); ",
                aside.display()
            )
        }
    };
    let log_text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let tail: Vec<&str> = log_text.lines().rev().take(8).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    let oom = fault::from_lines(log_text.lines());
    let env = crate::train::job_environment(job);
    let mut r = JobRecord::unfinished(
        job,
        if oom.is_some() {
            JobStatus::OutOfMemory
        } else {
            JobStatus::Failed
        },
        format!(
            "{unreadable}job process exited with {status} and no record; log: {}",
            tail.join(" | ")
        ),
        env,
    );
    r.out_of_memory = oom;
    results::write_record(dir, &r)?;
    Ok(r)
}

/// The record of a job whose sizes cannot fit its device, refused before anything is
/// allocated: status `out_of_memory` (the configuration did not fit, a result) with the
/// estimate and the model field to lower ([`memwall_core::spec::check_fits`]). `None` when the
/// estimate fits or the device's memory is unknown.
pub fn too_large(spec: &JobSpec, env: &memwall_core::measure::Environment) -> Option<JobRecord> {
    let device = crate::device::device_memory(spec.backend, spec.device_index)?;
    let too = memwall_core::spec::check_fits(&spec.model, &spec.strategy, &device).err()?;
    let reason = format!(
        "not run: the estimate exceeds the device (model field `{}`): {}",
        too.field, too.message
    );
    let mut record = JobRecord::unfinished(spec, JobStatus::OutOfMemory, reason, env.clone());
    record.out_of_memory = Some(memwall_core::measure::OutOfMemory {
        requested_bytes: Some(too.estimate.total().min(u64::MAX as f64) as u64),
        message: format!("memory estimate {} before allocation", too.estimate),
        follow_on_failures: 0,
        pool_in_use_bytes: None,
        pool_reserved_bytes: None,
    });
    Some(record)
}
