//! The study driver: experiment file -> prepared data -> one process per job -> records ->
//! Parquet -> report. A finished job's record is never recomputed unless asked (`force`), a
//! crashed job costs only itself, and a killed sweep resumes where it stopped.

use crate::data;
use crate::device::{self, BackendKind, DeviceRequest, ResolvedDevice};
use crate::error::{Error, Result};
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
    pub device: DeviceRequest,
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
    pub ran: usize,
    pub skipped: usize,
    /// (configuration, status, reason) of jobs that did not finish.
    pub unfinished: Vec<(String, JobStatus, String)>,
    pub profile: Option<Profile>,
}

/// Resolves the device and the profile of a run.
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
    let prepared = data::prepare(data_cfg, model.vocab, &paths.cache)?;
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

/// Runs the jobs of a training study, one process each, skipping jobs that have a record.
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

/// Runs (or skips) one job and returns its record, ingested into Parquet.
fn run_one(
    job: &JobSpec,
    paths: &Paths,
    opts: &RunOptions,
    out: &mut SweepOutcome,
) -> Result<JobRecord> {
    let key = job.key();
    let dir = results::record_dir(&paths.runs, &job.study, &key);
    if !opts.force {
        if let Some(record) = results::read_record(&dir)? {
            tracing::info!(
                "{}: finished before ({}), skipped",
                job.config,
                record.status.as_str()
            );
            if !dir.join(results::SUMMARY_FILE).exists() {
                results::ingest(&dir, &record)?;
            }
            out.skipped += 1;
            return Ok(record);
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating", &dir, e))?;
    let mut planned_job;
    let job = if job.strategy.checkmate.is_some() && job.strategy.segments.is_none() {
        planned_job = job.clone();
        if let Err(reason) = plan_checkmate(&mut planned_job, paths) {
            let mut env = memwall_runner::measure::host_environment();
            env.backend = job.backend.to_string();
            let r = JobRecord::unfinished(job, JobStatus::Failed, reason, env);
            results::write_record(&dir, &r)?;
            results::ingest(&dir, &r)?;
            out.ran += 1;
            return Ok(r);
        }
        &planned_job
    } else {
        job
    };
    let job_file = dir.join("job.json");
    let json = serde_json::to_vec_pretty(job).expect("job spec serializes");
    results::write_atomic(&job_file, &json)?;
    let _ = std::fs::remove_file(dir.join(results::RECORD_FILE));
    tracing::info!(
        "{}: running (log {})",
        job.config,
        dir.join("job.log").display()
    );
    let record = memwall_runner::job::run_in_process(job, &dir, &opts.runner)?;
    out.ran += 1;
    results::ingest(&dir, &record)?;
    if record.status == JobStatus::Ok {
        if let Some(s) = &record.summary {
            tracing::info!(
                "{}: peak {} MiB, {:.2} samples/s, eval ppl {:.1}",
                job.config,
                s.peak_allocated_bytes / (1 << 20),
                s.samples_per_s,
                s.eval_perplexity
            );
        }
    } else {
        tracing::warn!(
            "{}: {} ({})",
            job.config,
            record.status.as_str(),
            record.reason.as_deref().unwrap_or("")
        );
    }
    Ok(record)
}

/// Renders the report of a study from its records (re-ingesting records without Parquet).
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
        }];
        let sections = crate::studies::render(rec, rec_path)?;
        let doc = ReportDoc::new(header, sections, environment);
        return report::render(&doc, &paths.templates, &paths.reports.join(&header.name));
    }
    results::ingest_all(&paths.runs, &header.name)?;
    let has_records = std::fs::read_dir(paths.runs.join(&header.name))
        .map(|mut d| {
            d.any(|e| {
                e.map(|e| e.path().join(results::SUMMARY_FILE).exists())
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false);
    if !has_records {
        return Err(no_records(paths, &header.name, study_path));
    }
    let (sections, environment) =
        report::training::sections(&paths.runs, header, &study.configs, &study.goals)?;
    let doc = ReportDoc::new(header, sections, environment);
    report::render(&doc, &paths.templates, &paths.reports.join(&header.name))
}

/// Plans a Checkmate configuration: the MILP over the transformer's chain graph, with per-block
/// costs measured by the newest finished job of the same study, profile, backend, model and
/// precision (an earlier configuration in the file).
fn plan_checkmate(job: &mut JobSpec, paths: &Paths) -> std::result::Result<(), String> {
    let fraction = job.strategy.checkmate.unwrap_or(1.0);
    let dir = paths.runs.join(&job.study);
    let mut best: Option<JobRecord> = None;
    for entry in std::fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .flatten()
    {
        let Ok(Some(r)) = results::read_record(&entry.path()) else {
            continue;
        };
        let s = &r.spec;
        if r.status == JobStatus::Ok
            && !r.block_costs.is_empty()
            && s.profile == job.profile
            && s.backend == job.backend
            && s.model == job.model
            && s.strategy.precision == job.strategy.precision
            && s.strategy.attention == job.strategy.attention
            && best.as_ref().is_none_or(|b| r.finished_at > b.finished_at)
        {
            best = Some(r);
        }
    }
    let costs = best
        .map(|r| r.block_costs)
        .ok_or("no measured block costs for this model: put a configuration without `checkmate` (same precision) before it in the experiment file")?;
    let opts = crate::remat::milp::MilpOptions {
        time_limit_s: 30.0,
        ..Default::default()
    };
    let plan = crate::remat::execute::plan_transformer(&costs, fraction, &opts)
        .map_err(|e| e.to_string())?;
    tracing::info!(
        "{}: Checkmate plan at {fraction} of the peak: {} recomputed of {} blocks, predicted cost {:.3}x ({} in {:.2} s)",
        job.config,
        plan.segments.iter().filter(|s| s.recompute).map(|s| s.end - s.start).sum::<usize>(),
        costs.len(),
        plan.predicted_cost_ratio,
        plan.solver_status,
        plan.solve_time_s
    );
    job.strategy.segments = Some(plan.segments.clone());
    job.planned = Some(plan);
    Ok(())
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
