//! Running one job: in this process ([`run_job_file`], `memwall-job run-job`) or in a child
//! process with its log captured ([`run_in_process`]), so that a crash or an out-of-memory
//! costs one job and still leaves a record (`../shared/DESIGN.md` section 3). Every job is
//! planned first ([`run_planned`], [`plan_stage`]): where its plan needs measured costs (a
//! budget, Checkmate), its profiling pass in a child process on the job's device, then the one
//! planner of [`memwall_core::planner`]. `memwall run` and the slim runner's `sweep-dir`
//! (bundles on GPU machines) go through the same stage.
//!
//! May import: [`crate::train`], [`crate::measure`], `memwall_core`.

use crate::measure::fault;
use memwall_core::error::{Error, Result};
use memwall_core::measure::Environment;
use memwall_core::planner;
use memwall_core::record::{self as results, JobRecord, JobStatus};
use memwall_core::segment_memory::ExecutorProfile;
use memwall_core::segment_plan::{fraction_at_limit, PlanError};
use memwall_core::spec::{JobSpec, Recompute};
use memwall_core::units::{Estimate, Policy};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The job runner: a program and the arguments before `--job FILE --out DIR`.
pub type Runner = (PathBuf, Vec<String>);

/// The variable naming the job runner binary, in place of the `memwall-job` beside the running
/// executable ([`job_runner`]).
pub const JOB_RUNNER_ENV: &str = "MEMWALL_JOB";

/// The file name of the job runner binary (`memwall-job`, `memwall-job.exe` on Windows).
pub fn job_runner_name() -> String {
    format!("memwall-job{}", std::env::consts::EXE_SUFFIX)
}

/// The job runner every caller of the driver uses: `memwall-job run-job`, with `memwall-job`
/// taken from [`JOB_RUNNER_ENV`] when set, else from beside the running executable (as `cargo
/// build --bins` and an install put `memwall` and `memwall-job`), else, for a test binary in
/// cargo's `target/<profile>/deps`, from `target/<profile>`.
///
/// # Errors
/// [`Error::Job`] naming where it looked and how to build it, when no such file exists.
pub fn job_runner() -> Result<Runner> {
    let found = match std::env::var_os(JOB_RUNNER_ENV) {
        Some(p) => vec![PathBuf::from(p)],
        None => {
            let exe = std::env::current_exe().map_err(|e| Error::Job {
                job: "runner".into(),
                message: format!("cannot locate the running executable: {e}"),
            })?;
            let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
            let mut at = vec![dir.join(job_runner_name())];
            if dir.file_name().is_some_and(|n| n == "deps") {
                if let Some(up) = dir.parent() {
                    at.push(up.join(job_runner_name()));
                }
            }
            at
        }
    };
    match found.iter().find(|p| p.is_file()) {
        Some(p) => Ok((p.clone(), vec!["run-job".to_string()])),
        None => Err(Error::Job {
            job: "runner".into(),
            message: format!(
                "no job runner at {}: build it beside memwall with `cargo build --release \
                 --locked --bins` (or `just build`), or name one with {JOB_RUNNER_ENV}=PATH",
                found
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        }),
    }
}

/// Runs the job in `job_file` in this process and writes its record into `out_dir`
/// (`memwall-job run-job`).
pub fn run_job_file(job_file: &Path, out_dir: &Path) -> Result<JobRecord> {
    run_job_file_with(job_file, out_dir, None)
}

/// [`run_job_file`] with a planted slowdown ([`crate::train::slowdown`], `run-job
/// --inject-slowdown STUDY/CONFIG=FACTOR`): it takes effect only when it names this job.
///
/// # Errors
/// Those of [`run_job_file`].
pub fn run_job_file_with(
    job_file: &Path,
    out_dir: &Path,
    slowdown: Option<&crate::train::slowdown::Slowdown>,
) -> Result<JobRecord> {
    let job = JobSpec::read(job_file)?;
    if let Some(s) = slowdown {
        crate::train::slowdown::install(s, &job);
    }
    let load = crate::measure::LoadProbe::start_for(job.backend.is_gpu());
    let mut record = crate::train::run_job(&job);
    record.load = load.and_then(|p| p.finish());
    results::write_record(out_dir, &record)?;
    Ok(record)
}

/// How a job run under a deadline ended.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    /// The job ended (ok, failed, out of memory, ...) and `dir` holds its record.
    Finished(JobRecord),
    /// The deadline came first: the job's process was killed and no record was written, so a
    /// later run starts the job again from the beginning.
    Interrupted,
}

/// What the plan stage made of a job (one short-lived value per job, so its size is no
/// concern).
#[allow(clippy::large_enum_variant)]
pub enum Planned {
    /// The job to run, with its plan where it needs one.
    Job(JobSpec),
    /// The job cannot run: its record (the profiling pass failed, or no plan fits).
    Failed(JobRecord),
    /// The deadline came during the profiling pass.
    Interrupted,
}

/// Runs `job` in `dir` (plan stage, then the job in its own process), writing `dir/job.json`
/// (the planned job) and `dir/record.json`. With a `deadline`, a process still running at the
/// deadline is killed and the job left without a record ([`Outcome::Interrupted`]).
///
/// # Errors
/// I/O errors on `dir`, or a runner that cannot be started.
pub fn run_planned(
    job: &JobSpec,
    dir: &Path,
    runner: &Runner,
    deadline: Option<Instant>,
) -> Result<Outcome> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
    let job = match plan_stage(job, dir, runner, deadline)? {
        Planned::Job(job) => job,
        Planned::Failed(record) => {
            results::write_record(dir, &record)?;
            return Ok(Outcome::Finished(record));
        }
        Planned::Interrupted => return Ok(Outcome::Interrupted),
    };
    let json = serde_json::to_vec_pretty(&job).expect("job spec serializes");
    results::write_atomic(&dir.join("job.json"), &json)?;
    let _ = std::fs::remove_file(dir.join(results::RECORD_FILE));
    tracing::info!(
        "{}: running (log {})",
        job.config,
        dir.join("job.log").display()
    );
    run_in_process_until(&job, dir, runner, deadline)
}

/// The plan stage: every job gets its segment plan here, before it runs, from
/// [`memwall_core::planner::plan`]. A strategy whose plan depends on measured costs (a memory
/// budget, a Checkmate fraction) runs the job's profiling pass first, in its own process on the
/// job's device and precision (`<dir>/profile/`, [`JobSpec::profile_only`]); every K, sqrt, the
/// fused optimizer step's per-block plan and explicit plans need none. A job that already has
/// its plan passes through unchanged. No other job's record is read.
///
/// # Errors
/// I/O errors on the job folder, or a runner that cannot be started.
pub fn plan_stage(
    job: &JobSpec,
    dir: &Path,
    runner: &Runner,
    deadline: Option<Instant>,
) -> Result<Planned> {
    if job.plan.is_some() || !job.strategy.needs_plan() {
        return Ok(Planned::Job(job.clone()));
    }
    if !job.strategy.needs_profile() {
        return Ok(match planned(job, None) {
            Ok(job) => Planned::Job(job),
            Err((status, reason)) => Planned::Failed(unplanned(
                job,
                status,
                reason,
                crate::train::job_environment(job),
            )),
        });
    }
    let profile = match profile_pass(job, dir, runner, deadline)? {
        Outcome::Finished(r) => r,
        Outcome::Interrupted => return Ok(Planned::Interrupted),
    };
    let executor = match (&profile.status, &profile.executor_profile) {
        (JobStatus::Ok, Some(executor)) if !executor.blocks.is_empty() => executor,
        _ => {
            let reason = format!(
                "plan stage: the profiling pass ended {} ({}); log {}",
                profile.status.as_str(),
                profile.reason.as_deref().unwrap_or("no executor profile"),
                dir.join("profile").join("job.log").display()
            );
            return Ok(Planned::Failed(unplanned(
                job,
                profile.status,
                reason,
                profile.env,
            )));
        }
    };
    match planned(job, Some(executor)) {
        Ok(planned) => Ok(Planned::Job(planned)),
        Err((status, reason)) => Ok(Planned::Failed(unplanned(job, status, reason, profile.env))),
    }
}

/// Runs `job`'s profiling pass in `dir/profile/` and returns its record, or, where this process
/// has already measured a profiling pass that [`profile_identity`] says is the same
/// measurement, copies that one into `dir/profile/` (its job file and record name the job it
/// was measured for; its log says it was shared).
fn profile_pass(
    job: &JobSpec,
    dir: &Path,
    runner: &Runner,
    deadline: Option<Instant>,
) -> Result<Outcome> {
    let profile_dir = dir.join("profile");
    // The profiling pass measures every block's cost and calibrates the no-recomputation
    // plan: it runs without the job's memory limit, which holds for the job itself.
    let profile_job = JobSpec {
        profile_only: true,
        memory_limit_bytes: None,
        ..job.clone()
    };
    let identity = profile_identity(&profile_job);
    if let Some(record) = shared_profile(&identity, &profile_dir)? {
        tracing::info!(
            "{}: profiling pass shared with {} (the same model, data, device and strategy but \
             for what is recomputed)",
            job.config,
            record.spec.config
        );
        return Ok(Outcome::Finished(record));
    }
    let json = serde_json::to_vec_pretty(&profile_job).expect("job spec serializes");
    results::write_atomic(&profile_dir.join("job.json"), &json)?;
    let _ = std::fs::remove_file(profile_dir.join(results::RECORD_FILE));
    tracing::info!("{}: profiling pass for the plan", job.config);
    let outcome = run_in_process_until(&profile_job, &profile_dir, runner, deadline)?;
    if let Outcome::Finished(record) = &outcome {
        if record.status == JobStatus::Ok {
            MEASURED_PROFILES
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((identity, profile_dir));
        }
    }
    Ok(outcome)
}

/// The profiling passes this process ran to the end (`ok`): what they measured
/// ([`profile_identity`]) and their folder.
static MEASURED_PROFILES: std::sync::Mutex<Vec<(JobSpec, PathBuf)>> =
    std::sync::Mutex::new(Vec::new());

/// What a profiling pass measures, as a job: `profile_job` without what the pass does not read.
/// The pass ([`crate::train`]'s `profile_record`) runs the model, data, device, optimizer and
/// precision of the job with its attention, layer norm, head and fused optimizer step, the
/// per-block measurements and the calibration plans, and each unit's forward time when the
/// policy chooses by it; it never reads how the job recomputes (`recompute`, the nested
/// segments, a policy that does not need unit times) nor the configuration's name, label and
/// place. The repeat stays: a repeated job is measured again, profiling pass included.
pub fn profile_identity(profile_job: &JobSpec) -> JobSpec {
    let mut j = profile_job.clone();
    j.config = String::new();
    j.label = String::new();
    j.order = 0;
    j.control = false;
    j.plan = None;
    j.unit_plan = None;
    j.planned = None;
    j.strategy.recompute = Recompute::None;
    j.strategy.nested_checkpoint = None;
    j.strategy.policy = j
        .strategy
        .policy
        .take()
        .filter(|p| p.needs_profile())
        .map(|_| Policy::Budget(0.0, Estimate::Profile));
    j
}

/// The record of a profiling pass this process measured with `identity`, copied into
/// `profile_dir` with its job file and log, the log saying it was shared; `None` when there is
/// none (or its files are gone).
///
/// # Errors
/// I/O errors writing `profile_dir`.
fn shared_profile(identity: &JobSpec, profile_dir: &Path) -> Result<Option<JobRecord>> {
    let measured = MEASURED_PROFILES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(id, _)| id == identity)
        .map(|(_, dir)| dir.clone());
    let Some(from) = measured else {
        return Ok(None);
    };
    if from == profile_dir {
        return Ok(None);
    }
    let Ok(Some(record)) = results::read_record(&from) else {
        return Ok(None);
    };
    let read = |name: &str| std::fs::read(from.join(name)).unwrap_or_default();
    let job_json = read("job.json");
    let mut log = read("job.log");
    log.extend_from_slice(
        format!(
            "shared: this profiling pass was measured for {} in {}; this job's own pass would \
             measure the same (memwall_runner::job::profile_identity)\n",
            record.spec.config,
            from.display()
        )
        .as_bytes(),
    );
    std::fs::create_dir_all(profile_dir).map_err(|e| Error::io("creating", profile_dir, e))?;
    results::write_atomic(&profile_dir.join("job.json"), &job_json)?;
    results::write_atomic(&profile_dir.join("job.log"), &log)?;
    results::write_record(profile_dir, &record)?;
    Ok(Some(record))
}

/// The record of a job that did not run because its plan could not be made, in the environment
/// its profiling pass ran in (so it joins its study's group in the report).
fn unplanned(job: &JobSpec, status: JobStatus, reason: String, env: Environment) -> JobRecord {
    let status = if status == JobStatus::Ok {
        JobStatus::Failed
    } else {
        status
    };
    JobRecord::unfinished(job, status, reason, env)
}

/// `job` with its plan from [`memwall_core::planner::plan`] over `profile` (the job's own
/// profiling pass, where its strategy needs one). A Checkmate plan is the least recomputation
/// whose predicted peak fits its fraction of the no-recomputation peak (Jain et al.,
/// "Checkmate", MLSys 2020, eq. 1a and 1e; the model and solver in
/// [`memwall_core::segment_plan`]); a budget plan is the knapsack of [`memwall_core::budget`].
fn planned(
    job: &JobSpec,
    profile: Option<&ExecutorProfile>,
) -> std::result::Result<JobSpec, (JobStatus, String)> {
    // Under a memory limit a Checkmate plan is the one at that limit: its fraction is what
    // the limit leaves above the profiled steady state (memwall_core::segment_plan::fraction_at_limit).
    let mut strategy = job.strategy.clone();
    if let (Some(limit), Some(p), Recompute::Checkmate(f)) =
        (job.memory_limit_bytes, profile, &strategy.recompute)
    {
        strategy.recompute = Recompute::Checkmate(fraction_at_limit(p, *f, limit));
    }
    let plan = planner::plan_job(&strategy, &job.model, profile).map_err(|e| match e {
        PlanError::Infeasible { .. } => (
            JobStatus::Infeasible,
            format!(
                "budget {} of the no-recomputation peak: {e}",
                job.strategy.recompute.checkmate().unwrap_or(f64::NAN)
            ),
        ),
        e => (JobStatus::Failed, format!("plan stage: {e}")),
    })?;
    if let Some(s) = &plan.segments {
        tracing::info!(
            "{}: plan ({}): {} recomputed of {} blocks, predicted {} bytes, {} s recomputed per step",
            job.config,
            s.method.as_str(),
            s.segments.iter().filter(|x| x.recompute).map(|x| x.end - x.start).sum::<usize>(),
            job.model.layers,
            s.predicted_bytes.map_or("-".into(), |b| b.to_string()),
            s.predicted_recompute_s.map_or("-".into(), |t| format!("{t:.3}")),
        );
        if let Some(u) = &plan.units {
            tracing::info!(
                "{}: unit plan (policy {}): {} of {} unit outputs recomputed per step",
                job.config,
                u.policy,
                u.recomputed_units,
                8 * job.model.layers,
            );
        }
    }
    let mut planned = job.clone();
    planned.plan = plan.segments;
    planned.unit_plan = plan.units;
    planned.planned = plan.checkmate;
    Ok(planned)
}

/// The error of a job interrupted although it had no deadline (cannot happen: a job without a
/// deadline is never killed by this module).
pub fn interrupted(job: &JobSpec) -> Error {
    Error::Job {
        job: job.config.clone(),
        message: "interrupted at its deadline without a record".into(),
    }
}

/// [`run_in_process_until`] without a deadline.
///
/// # Errors
/// [`Error::Job`] when the runner cannot be started; I/O errors on `dir`.
pub fn run_in_process(job: &JobSpec, dir: &Path, runner: &Runner) -> Result<JobRecord> {
    match run_in_process_until(job, dir, runner, None)? {
        Outcome::Finished(r) => Ok(r),
        Outcome::Interrupted => Err(interrupted(job)),
    }
}

/// Runs the job whose `job.json` is in `dir` in a child process (`runner` program and leading
/// arguments, then `--job FILE --out DIR`), with its stderr in `dir/job.log`. If the process
/// dies without writing a record (a crash, an abort on out-of-memory), writes a `failed` or
/// `out_of_memory` record holding the end of its log. Returns the job's record, or
/// [`Outcome::Interrupted`] when the process was still running at `deadline` and was killed
/// (its log is kept as `job.log.interrupted`; no record is written).
///
/// # Errors
/// [`Error::Job`] when the runner cannot be started; I/O errors on `dir`.
pub fn run_in_process_until(
    job: &JobSpec,
    dir: &Path,
    runner: &Runner,
    deadline: Option<Instant>,
) -> Result<Outcome> {
    let job_file = dir.join("job.json");
    let log_path = dir.join("job.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io("creating", &log_path, e))?;
    let (program, pre_args) = runner;
    let mut child = Command::new(program)
        .args(pre_args)
        .arg("--job")
        .arg(&job_file)
        .arg("--out")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| Error::Job {
            job: job.config.clone(),
            message: format!("could not start the job runner {}: {e}", program.display()),
        })?;
    let waited = |e: std::io::Error| Error::Job {
        job: job.config.clone(),
        message: format!("waiting for the job runner {}: {e}", program.display()),
    };
    let status = match deadline {
        None => child.wait().map_err(waited)?,
        Some(deadline) => loop {
            if let Some(status) = child.try_wait().map_err(waited)? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(dir.join(results::RECORD_FILE));
                let _ = std::fs::rename(&log_path, dir.join("job.log.interrupted"));
                return Ok(Outcome::Interrupted);
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        },
    };
    let unreadable = match results::read_record(dir) {
        Ok(Some(r)) => return Ok(Outcome::Finished(r)),
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
    let limit = match (job.memory_limit_bytes, &oom) {
        (Some(l), Some(_)) => format!("out of memory under the job's limit of {l} bytes; "),
        _ => String::new(),
    };
    let mut r = JobRecord::unfinished(
        job,
        if oom.is_some() {
            JobStatus::OutOfMemory
        } else {
            JobStatus::Failed
        },
        format!(
            "{unreadable}{limit}job process exited with {status} and no record; log: {}",
            tail.join(" | ")
        ),
        env,
    );
    r.out_of_memory = oom;
    results::write_record(dir, &r)?;
    Ok(Outcome::Finished(r))
}
