//! The sweep: one process per job on each device slot, a finished job's record never recomputed
//! unless asked, in-process studies run and stored.

use super::*;

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
    /// The record of every job of the sweep, run now or finished before, in the order of its
    /// jobs (a job that stopped the sweep with an error has none).
    pub records: Vec<JobRecord>,
    /// An in-process study's stored record (computed now or read back).
    pub in_process: Option<crate::studies::StudyRecord>,
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
        return sweep_in_process(&study, paths, opts, out);
    }
    if jobs.is_empty() {
        return Ok(out);
    }
    if let Some(search) = crate::studies::largest_input::params(&study)? {
        tracing::info!(
            "study `{}` ({} profile): the largest input of {} configurations under {} bytes on {}",
            study.header.name,
            study.profile,
            jobs.len(),
            search.limit_bytes,
            dev.name
        );
        // Probes that run out of memory are the search's data, not unfinished jobs.
        crate::studies::largest_input::run_search(&search, &jobs, |job| {
            let record = run_one(job, paths, opts, &mut out)?;
            if let crate::studies::largest_input::Probe::Failed(why) =
                crate::studies::largest_input::Probe::of(&record)
            {
                out.unfinished
                    .push((job.config.clone(), record.status, why));
            }
            out.records.push(record.clone());
            Ok(record)
        })?;
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
    let bar = progress_bar(opts.progress, &study.header.name, jobs.len());
    let slots = device_slots(opts, &dev)?;
    if !slots.is_empty() {
        tracing::info!(
            "running on {} devices at once: {}",
            slots.len(),
            slots
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut out = sweep_devices(&jobs, &slots, paths, opts, out, &bar)?;
        bar.finish_and_clear();
        // The workers finish in any order: the records in the order of the jobs.
        out.records
            .sort_by_key(|r| jobs.iter().position(|j| j.key() == r.key));
        return Ok(out);
    }
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
        out.records.push(record);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Runs an in-process study (unless its result is stored and `opts.force` is unset) and
/// stores its result.
fn sweep_in_process(
    study: &Study,
    paths: &Paths,
    opts: &RunOptions,
    mut out: SweepOutcome,
) -> Result<SweepOutcome> {
    tracing::info!(
        "study `{}` ({} profile): running in-process",
        study.header.name,
        study.profile
    );
    let (rec, ran) = crate::studies::run_and_store(study, &paths.runs, opts.force)?;
    if ran {
        out.ran += 1;
        tracing::info!("study `{}` took {:.1} s", study.header.name, rec.wall_s);
    } else {
        out.skipped += 1;
    }
    out.in_process = Some(rec);
    Ok(out)
}

/// A progress bar over `jobs` jobs of study `name` (hidden unless `shown`).
fn progress_bar(shown: bool, name: &str, jobs: usize) -> indicatif::ProgressBar {
    if !shown {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(jobs as u64);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    b.set_prefix(name.to_string());
    b
}

/// Runs `jobs` on every slot at once: one worker thread per device takes the next job from a
/// shared queue, so a device is never given a second job before its first ends. The first
/// error (not a failed job, which is a record) stops the workers from taking new jobs.
fn sweep_devices(
    jobs: &[JobSpec],
    slots: &[DeviceSlot],
    paths: &Paths,
    opts: &RunOptions,
    out: SweepOutcome,
    bar: &indicatif::ProgressBar,
) -> Result<SweepOutcome> {
    use std::sync::Mutex;
    let queue = Mutex::new(jobs.iter().collect::<std::collections::VecDeque<_>>());
    let state = Mutex::new((out, None::<Error>));
    std::thread::scope(|s| {
        for slot in slots {
            let (queue, state) = (&queue, &state);
            s.spawn(move || {
                let opts = RunOptions {
                    runner: slot_runner(&opts.runner, slot),
                    ..opts.clone()
                };
                loop {
                    if state.lock().expect("sweep state").1.is_some() {
                        break;
                    }
                    let Some(job) = queue.lock().expect("job queue").pop_front() else {
                        break;
                    };
                    tracing::info!("{}: on {}", job.config, slot.name);
                    let mut mine = SweepOutcome::default();
                    let result = run_one(job, paths, &opts, &mut mine);
                    let mut st = state.lock().expect("sweep state");
                    st.0.ran += mine.ran;
                    st.0.skipped += mine.skipped;
                    match result {
                        Ok(record) => {
                            if record.status != JobStatus::Ok {
                                st.0.unfinished.push((
                                    job.config.clone(),
                                    record.status,
                                    record.reason.clone().unwrap_or_default(),
                                ));
                            }
                            st.0.records.push(record);
                        }
                        Err(e) => {
                            st.1.get_or_insert(e);
                        }
                    }
                    bar.inc(1);
                }
            });
        }
    });
    let (out, error) = state.into_inner().expect("sweep state");
    match error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Runs (or skips) one job and returns its record: the plan stage first where the job needs one
/// ([`memwall_runner::job::plan_stage`]), then the job in its own process.
fn run_one(
    job: &JobSpec,
    paths: &Paths,
    opts: &RunOptions,
    out: &mut SweepOutcome,
) -> Result<JobRecord> {
    let key = job.key();
    let dir = record::record_dir(&paths.runs, &job.study, &key);
    if !opts.force {
        match record::read_record(&dir) {
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
                let aside = record::set_aside(&dir)?;
                tracing::warn!(
                    "{}: {e}; moved to {} and running the job again",
                    job.config,
                    aside.display()
                );
            }
        }
    }
    out.ran += 1;
    let record = match memwall_runner::job::run_planned(job, &dir, &opts.runner, None)? {
        memwall_runner::job::Outcome::Finished(record) => record,
        memwall_runner::job::Outcome::Interrupted => {
            return Err(memwall_runner::job::interrupted(job))
        }
    };
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
