//! The study driver: experiment file -> prepared data -> plan stage -> one process per job ->
//! records -> analysis -> report. A finished job's record is never recomputed unless asked (`force`), a
//! crashed job costs only itself, and a killed sweep resumes where it stopped.

use crate::data;
use crate::device::{self, BackendKind, DeviceRequest, ResolvedDevice};
use crate::error::{Error, Result};
use crate::measure::Environment;
use crate::report::{self, Rendered, ReportDoc};
use crate::results::{self, JobRecord, JobStatus};
use crate::spec::{JobSpec, Profile, Study, StudyKind};
use std::path::{Path, PathBuf};

/// Where things live and how to run jobs.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Record store root (`runs/`).
    pub runs: PathBuf,
    /// Tokenized-corpus cache (`.memwall/cache/`).
    pub cache: PathBuf,
    /// Report output root (`reports/`).
    pub reports: PathBuf,
    /// Templates directory (`templates/`).
    pub templates: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            runs: "runs".into(),
            cache: ".memwall/cache".into(),
            reports: "reports".into(),
            templates: "templates".into(),
        }
    }
}

/// How to run one study.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `None`: `full` on a GPU, `cpu` otherwise.
    pub profile: Option<Profile>,
    /// The device to run on (`--device`: auto, cpu, cuda:N).
    pub device: DeviceRequest,
    /// The CPU backend when the device is the CPU (`--cpu-backend`: flex or ndarray).
    pub cpu_backend: BackendKind,
    /// Replaces the experiment file's data path (`--data`, `MEMWALL_DATA`).
    pub data: Option<PathBuf>,
    /// Rerun jobs that already have a record.
    pub force: bool,
    /// Run only these configurations (all when empty).
    pub only: Vec<String>,
    /// The job runner: a program and the arguments before `--job FILE --out DIR`
    /// (normally this executable and `run-job`).
    pub runner: (PathBuf, Vec<String>),
    /// Show a progress bar.
    pub progress: bool,
    /// CUDA: release the pool's free pages at every step boundary in every job
    /// ([`crate::spec::DeviceSettings::memory_cleanup`]).
    pub memory_cleanup: bool,
    /// CUDA: the memory pool of every job, replacing the configurations' own.
    pub memory_pool: Option<crate::spec::MemoryPool>,
}

/// What a sweep did.
#[derive(Debug, Clone, Default)]
pub struct SweepOutcome {
    /// Jobs run now (their plan stage included).
    pub ran: usize,
    /// Jobs skipped because their record was already in the store.
    pub skipped: usize,
    /// (configuration, status, reason) of jobs that did not finish.
    pub unfinished: Vec<(String, JobStatus, String)>,
    /// The profile the study ran at (`None` before the study was resolved).
    pub profile: Option<Profile>,
}

/// Resolves the device and the profile of a run.
///
/// # Errors
/// [`Error::Device`] when the requested device is not available (e.g. `cuda:0` without a GPU).
pub fn resolve(opts: &RunOptions) -> Result<(ResolvedDevice, Profile)> {
    let dev = device::resolve(opts.device, opts.cpu_backend)?;
    let profile = opts.profile.unwrap_or(if dev.backend.is_gpu() {
        Profile::Full
    } else {
        Profile::Cpu
    });
    Ok((dev, profile))
}

/// Loads a study and expands its jobs for the resolved device (tokenizing the corpus if
/// needed).
///
/// # Errors
/// Invalid experiment files and data (naming file and field), an unavailable device, and an
/// `--only` name that is not a configuration of the file.
pub fn plan_jobs(
    study_path: &Path,
    paths: &Paths,
    opts: &RunOptions,
) -> Result<(Study, ResolvedDevice, Vec<JobSpec>)> {
    let (dev, profile) = resolve(opts)?;
    let study = Study::load(study_path, profile, opts.data.as_deref())?;
    if study.header.kind != StudyKind::Training {
        return Ok((study, dev, Vec::new()));
    }
    let (Some(model), Some(data_cfg)) = (study.model, study.data.as_ref()) else {
        return Ok((study, dev, Vec::new()));
    };
    check_fits(&study, &dev)?;
    let prepared = data::prepare(data_cfg, model.vocab, &paths.cache)?;
    check_windows(&study, &prepared, &model)?;
    let mut jobs = study.jobs(dev.backend, dev.index, &prepared);
    for job in &mut jobs {
        job.device_settings.cache_dir = Some(paths.cache.join("cubecl"));
        job.device_settings.memory_cleanup |= opts.memory_cleanup;
        if let Some(pool) = opts.memory_pool {
            job.device_settings.memory_pool = pool;
        }
    }
    if !opts.only.is_empty() {
        for name in &opts.only {
            if !jobs.iter().any(|j| &j.config == name) {
                return Err(Error::SpecField {
                    path: study_path.to_path_buf(),
                    field: "configs".into(),
                    message: format!(
                        "no configuration named `{name}` (have: {})",
                        study
                            .configs
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        jobs.retain(|j| opts.only.contains(&j.config));
    }
    Ok((study, dev, jobs))
}

/// Refuses, before the corpus is tokenized or any job starts, a study whose model cannot fit the
/// device under any of its configurations, or whose tokenizer cannot be trained in host RAM
/// ([`Study::check_fits`]). Where a memory cannot be known, it is not checked.
///
/// # Errors
/// [`Error::SpecField`] naming the model field, the estimate and the largest value that fits.
pub fn check_fits(study: &Study, dev: &ResolvedDevice) -> Result<()> {
    let unknown = || crate::spec::DeviceMemory {
        total_bytes: u64::MAX,
        what: "unknown memory".into(),
    };
    let host = device::host_memory().unwrap_or_else(unknown);
    let memory = device::device_memory(dev.backend, dev.index).unwrap_or_else(unknown);
    study.check_fits(&memory, &host)
}

/// Refuses a `seq_len` longer than the tokenized corpus's held-out or training split (every
/// batch is `seq_len + 1` consecutive tokens), naming the field and the longest that fits.
fn check_windows(
    study: &Study,
    prepared: &crate::spec::PreparedData,
    model: &crate::spec::ModelConfig,
) -> Result<()> {
    for split in ["train", "eval"] {
        let file = prepared.dir.join(format!("{split}.tokens"));
        let tokens = std::fs::metadata(&file)
            .map_err(|e| Error::io("reading", &file, e))?
            .len()
            / 4;
        if tokens < model.seq_len as u64 + 1 {
            let corpus = study
                .data
                .as_ref()
                .map(|d| d.path.display().to_string())
                .unwrap_or_default();
            return Err(Error::SpecField {
                path: study.path.clone(),
                field: format!("profiles.{}.model.seq_len", study.profile),
                message: format!(
                    "{} tokens per sequence (+1 target) is longer than the {tokens} tokens of the \
                     {split} split of {corpus}: use seq_len <= {}, a larger corpus, or (for the \
                     held-out split) a larger `data.eval_fraction`",
                    model.seq_len,
                    tokens.saturating_sub(1)
                ),
            });
        }
    }
    Ok(())
}

/// Runs the jobs of a training study, one process each, skipping jobs that have a record (an
/// in-process study runs in this process and stores its typed result).
///
/// # Errors
/// Those of [`plan_jobs`], I/O errors on the record store, and a job runner that cannot be
/// started. A job that fails, crashes or runs out of memory is a record, not an error.
pub fn sweep(study_path: &Path, paths: &Paths, opts: &RunOptions) -> Result<SweepOutcome> {
    let (study, dev, jobs) = plan_jobs(study_path, paths, opts)?;
    let mut out = SweepOutcome {
        profile: Some(study.profile),
        ..Default::default()
    };
    if study.header.kind != StudyKind::Training {
        tracing::info!(
            "study `{}` ({} profile): running in-process",
            study.header.name,
            study.profile
        );
        let (rec, ran) = crate::studies::run_and_store(&study, &paths.runs, opts.force)?;
        if ran {
            out.ran += 1;
            tracing::info!("study `{}` took {:.1} s", study.header.name, rec.wall_s);
        } else {
            out.skipped += 1;
        }
        return Ok(out);
    }
    if jobs.is_empty() {
        return Ok(out);
    }
    tracing::info!(
        "study `{}` ({} profile): {} jobs on {} ({})",
        study.header.name,
        study.profile,
        jobs.len(),
        dev.name,
        dev.backend
    );
    let bar = if opts.progress {
        let b = indicatif::ProgressBar::new(jobs.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed})",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        b.set_prefix(study.header.name.clone());
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    for job in &jobs {
        bar.set_message(job.config.clone());
        let record = run_one(job, paths, opts, &mut out)?;
        if record.status != JobStatus::Ok {
            out.unfinished.push((
                job.config.clone(),
                record.status,
                record.reason.clone().unwrap_or_default(),
            ));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Runs (or skips) one job and returns its record: the plan stage first where the job needs one
/// ([`plan_stage`]), then the job in its own process.
fn run_one(
    job: &JobSpec,
    paths: &Paths,
    opts: &RunOptions,
    out: &mut SweepOutcome,
) -> Result<JobRecord> {
    let key = job.key();
    let dir = results::record_dir(&paths.runs, &job.study, &key);
    if !opts.force {
        match results::read_record(&dir) {
            Ok(Some(record)) => {
                tracing::info!(
                    "{}: finished before ({}), skipped",
                    job.config,
                    record.status.as_str()
                );
                out.skipped += 1;
                return Ok(record);
            }
            Ok(None) => {}
            // A damaged record or one of another memwall version: moved aside (kept for
            // diagnosis) and the job runs again.
            Err(e) => {
                let aside = results::set_aside(&dir)?;
                tracing::warn!(
                    "{}: {e}; moved to {} and running the job again",
                    job.config,
                    aside.display()
                );
            }
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    out.ran += 1;
    let job = match plan_stage(job, &dir, opts)? {
        Planned::Job(job) => job,
        Planned::Failed(record) => {
            results::write_record(&dir, &record)?;
            return Ok(record);
        }
    };
    let job_file = dir.join("job.json");
    let json = serde_json::to_vec_pretty(&job).expect("job spec serializes");
    results::write_atomic(&job_file, &json)?;
    let _ = std::fs::remove_file(dir.join(results::RECORD_FILE));
    tracing::info!(
        "{}: running (log {})",
        job.config,
        dir.join("job.log").display()
    );
    let record = memwall_runner::job::run_in_process(&job, &dir, &opts.runner)?;
    log_outcome(&record);
    Ok(record)
}

fn log_outcome(record: &JobRecord) {
    let config = &record.spec.config;
    match (&record.status, &record.summary) {
        (JobStatus::Ok, Some(s)) => tracing::info!(
            "{config}: peak {} MiB, {:.2} samples/s, eval ppl {:.1}",
            s.peak_allocated_bytes / (1 << 20),
            s.samples_per_s,
            s.eval_perplexity
        ),
        _ => tracing::warn!(
            "{config}: {} ({})",
            record.status.as_str(),
            record.reason.as_deref().unwrap_or("")
        ),
    }
}

/// What the plan stage made of a job (one short-lived value per job, so its size is no
/// concern).
#[allow(clippy::large_enum_variant)]
enum Planned {
    /// The job to run, with its plan where it needs one.
    Job(JobSpec),
    /// The job cannot run: its record (the profiling pass failed, or no plan fits).
    Failed(JobRecord),
}

/// The plan stage: a Checkmate configuration (`checkmate = F` without segments) is planned from
/// its own inputs. The job's profiling pass runs in its own process on the job's device and
/// precision (`<job dir>/profile/`, [`JobSpec::profile_only`]), and the Checkmate MILP is
/// solved over the transformer chain with those block costs at the budget fraction `F`. Other
/// jobs pass through unchanged. No other job's record is read.
///
/// # Errors
/// I/O errors on the job folder, or a runner that cannot be started.
fn plan_stage(job: &JobSpec, dir: &Path, opts: &RunOptions) -> Result<Planned> {
    let Some(fraction) = job.strategy.checkmate else {
        return Ok(Planned::Job(job.clone()));
    };
    if job.strategy.segments.is_some() {
        return Ok(Planned::Job(job.clone()));
    }
    let profile = profile_pass(job, dir, opts)?;
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
    match plan_checkmate(job, fraction, executor) {
        Ok(planned) => Ok(Planned::Job(planned)),
        Err((status, reason)) => Ok(Planned::Failed(unplanned(job, status, reason, profile.env))),
    }
}

/// Runs `job`'s profiling pass in `dir/profile/` and returns its record.
fn profile_pass(job: &JobSpec, dir: &Path, opts: &RunOptions) -> Result<JobRecord> {
    let profile_dir = dir.join("profile");
    let profile_job = JobSpec {
        profile_only: true,
        ..job.clone()
    };
    let json = serde_json::to_vec_pretty(&profile_job).expect("job spec serializes");
    results::write_atomic(&profile_dir.join("job.json"), &json)?;
    let _ = std::fs::remove_file(profile_dir.join(results::RECORD_FILE));
    tracing::info!("{}: profiling pass for the plan", job.config);
    memwall_runner::job::run_in_process(&profile_job, &profile_dir, &opts.runner)
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

/// Renders the report of a study from its records: Markdown, HTML, figures and, for training
/// studies, the Parquet tables. Reads `runs/`, writes only `reports/<study>/`.
///
/// # Errors
/// [`Error::Records`] when the study has no records yet.
pub fn report(study_path: &Path, paths: &Paths) -> Result<Rendered> {
    // The profile does not matter for the report: it covers every profile with records.
    let study = Study::load(study_path, Profile::Cpu, None)
        .or_else(|_| Study::load(study_path, Profile::Smoke, None))?;
    let header = &study.header;
    if header.kind != StudyKind::Training {
        let stored = crate::studies::stored(&paths.runs, &header.name)?;
        let Some((rec, rec_path)) = stored.first() else {
            return Err(no_records(paths, &header.name, study_path));
        };
        let e = &rec.env;
        let environment = vec![report::model::Table {
            caption: format!("{} profile", rec.profile),
            columns: vec!["field".into(), "value".into()],
            rows: vec![
                vec![
                    "CPU".into(),
                    format!("{} ({} threads)", e.cpu_model, e.cpu_threads),
                ],
                vec!["OS".into(), e.os.clone()],
                vec!["git revision".into(), e.git_revision.clone()],
                vec!["run at".into(), rec.finished_at.clone()],
                vec!["study wall time".into(), format!("{:.2} s", rec.wall_s)],
            ],
            notes: Vec::new(),
        }];
        let sections = crate::studies::render(rec, rec_path)?;
        let doc = ReportDoc::new(header, sections, environment);
        return report::render(&doc, &paths.templates, &paths.reports.join(&header.name));
    }
    let records = results::StudyRecords::load(&paths.runs, &header.name)?;
    if records.is_empty() && !records.unreadable.is_empty() {
        return Err(Error::Records {
            path: paths.runs.join(&header.name),
            message: format!(
                "no readable record for study `{}`: {}; `memwall run {}` moves them aside and \
                 reruns their jobs",
                header.name,
                records
                    .unreadable
                    .iter()
                    .map(|(p, e)| format!("{} ({e})", p.display()))
                    .collect::<Vec<_>>()
                    .join("; "),
                study_path.display()
            ),
        });
    }
    if records.is_empty() {
        return Err(no_records(paths, &header.name, study_path));
    }
    let (mut sections, environment) =
        report::training::sections(&records, header, &study.configs, &study.goals)?;
    // PyTorch rows imported from a bundle (`runs/<study>/pytorch/`), beside memwall's.
    let labels: Vec<(String, String)> = study
        .configs
        .iter()
        .map(|c| (c.name.clone(), c.label.clone()))
        .collect();
    sections.extend(crate::reference::section(
        &paths.runs,
        &header.name,
        &records.records,
        &labels,
    ));
    let doc = ReportDoc::new(header, sections, environment);
    let out_dir = paths.reports.join(&header.name);
    let rendered = report::render(&doc, &paths.templates, &out_dir)?;
    results::write_parquet_tables(&records, &out_dir)?;
    Ok(rendered)
}

/// `job` with its Checkmate plan: the least recomputation whose predicted peak fits `fraction`
/// of the no-recomputation peak, over the segment plans the executor runs, with the job's own
/// measured executor profile (Jain et al., "Checkmate", MLSys 2020, eq. 1a and 1e; the model and
/// solver in `memwall_remat::execute`).
fn plan_checkmate(
    job: &JobSpec,
    fraction: f64,
    profile: &memwall_core::segment_memory::ExecutorProfile,
) -> std::result::Result<JobSpec, (JobStatus, String)> {
    let plan = crate::remat::execute::plan_transformer(profile, fraction).map_err(|e| match e {
        crate::remat::RematError::Infeasible { .. } => (
            JobStatus::Infeasible,
            format!("budget {fraction} of the no-recomputation peak: {e}"),
        ),
        e => (JobStatus::Failed, format!("plan stage: {e}")),
    })?;
    tracing::info!(
        "{}: plan at {fraction} of the no-recomputation peak: {} recomputed of {} blocks, predicted peak {} bytes above steady state, cost {:.3}x ({:.3} s)",
        job.config,
        plan.segments.iter().filter(|s| s.recompute).map(|s| s.end - s.start).sum::<usize>(),
        profile.blocks.len(),
        plan.predicted_peak_bytes,
        plan.predicted_cost_ratio,
        plan.solve_time_s
    );
    let mut planned = job.clone();
    planned.strategy.segments = Some(plan.segments.clone());
    planned.planned = Some(plan);
    Ok(planned)
}

fn no_records(paths: &Paths, study: &str, study_path: &Path) -> Error {
    Error::Records {
        path: paths.runs.join(study),
        message: format!(
            "no records for study `{study}`: run `memwall run {}` first",
            study_path.display()
        ),
    }
}
