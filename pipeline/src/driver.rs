//! The study driver: experiment file -> prepared data -> plan stage -> one process per job ->
//! records -> analysis -> report. A finished job's record is never recomputed unless asked (`force`), a
//! crashed job costs only itself, and a killed sweep resumes where it stopped.

use crate::data;
use crate::device::{self, BackendKind, DeviceRequest, ResolvedDevice};
use crate::error::{Error, Result};
use crate::report::{self, Rendered, ReportDoc};
use crate::results::{self, JobRecord, JobStatus};
use crate::spec::{JobSpec, Profile, Study, StudyKind};
use std::path::{Path, PathBuf};

/// The committed evidence: the record store the published reports (`reports/`) are rendered
/// from. Only a maintainer's explicit command writes it (`memwall reproduce --publish`,
/// `memwall import`); `memwall report` renders it.
pub const PUBLISHED_RUNS: &str = "runs";

/// This machine's record store, ignored by git: where `memwall reproduce`, `run`, `sweep` and
/// `export-jobs` write unless told otherwise (its reports go to `<store>/reports`).
pub const LOCAL_RUNS: &str = "target/memwall/runs";

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
    /// The published record store to show beside this one in its reports (this machine's
    /// numbers beside the committed evidence); `None` when `runs` is itself the published
    /// store or there is none.
    pub published: Option<PathBuf>,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            runs: PUBLISHED_RUNS.into(),
            cache: ".memwall/cache".into(),
            reports: "reports".into(),
            templates: "templates".into(),
            published: None,
        }
    }
}

/// The published store to show beside `runs` in its reports: [`PUBLISHED_RUNS`] when `runs` is
/// another store and the published one exists here.
pub fn published_beside(runs: &Path) -> Option<PathBuf> {
    let published = Path::new(PUBLISHED_RUNS);
    (!is_published(runs) && published.is_dir()).then(|| published.to_path_buf())
}

/// Whether `runs` names the published store ([`PUBLISHED_RUNS`]).
pub fn is_published(runs: &Path) -> bool {
    runs == Path::new(PUBLISHED_RUNS) || runs == Path::new("./runs")
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
    /// Devices to run jobs on at once (`--devices 0,1,...`): one job per device at a time, a
    /// queue across devices. On CUDA each id is a GPU ordinal and each job process sees only
    /// its GPU (`CUDA_VISIBLE_DEVICES`, so its job says `cuda:0` and keeps the key of a
    /// one-GPU run); on the CPU the ids only name parallel job slots. Every job process gets
    /// `MEMWALL_DEVICE=<backend>:<id>`. Empty: every visible GPU when the device is `auto` and
    /// more than one GPU is visible, else one job at a time on the resolved device.
    pub devices: Vec<String>,
    /// Run only the jobs with these keys (all when empty): one Slurm array task per key.
    pub keys: Vec<String>,
    /// Runs of each configuration, replacing the experiment file's `[study] repeats`.
    pub repeats: Option<usize>,
}

/// One device of a multi-device sweep: its name for logs and the environment of its job
/// processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSlot {
    /// `cuda:N` or `cpu:<id>`.
    pub name: String,
    /// Variables set for the job processes on this device.
    pub env: Vec<(String, String)>,
}

/// The devices a sweep runs its jobs on at once ([`RunOptions::devices`]); empty for the
/// one-job-at-a-time sweep.
///
/// # Errors
/// [`Error::Device`] for a CUDA id that is not a GPU ordinal, an id given twice, or `--devices`
/// with `--device cuda:N` (choose one).
pub fn device_slots(opts: &RunOptions, dev: &ResolvedDevice) -> Result<Vec<DeviceSlot>> {
    let bad = |message: String| Error::Device {
        requested: opts.devices.join(","),
        message,
    };
    let gpu = dev.backend.is_gpu();
    let ids: Vec<String> = if !opts.devices.is_empty() {
        if let DeviceRequest::Cuda(n) = opts.device {
            if n != 0 {
                return Err(bad(format!(
                    "--devices with --device cuda:{n}: give the GPUs in --devices only"
                )));
            }
        }
        opts.devices.clone()
    } else if gpu && opts.device == DeviceRequest::Auto {
        let count = device::probe_cuda().map(|i| i.device_count).unwrap_or(1);
        if count < 2 {
            return Ok(Vec::new());
        }
        (0..count).map(|i| i.to_string()).collect()
    } else {
        return Ok(Vec::new());
    };
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    slots_for(&ids, gpu, visible.as_deref()).map_err(bad)
}

/// The slots of `ids` (GPU ordinals when `gpu`, mapped through the parent's
/// `CUDA_VISIBLE_DEVICES` list `visible`), or the message of a bad id.
fn slots_for(
    ids: &[String],
    gpu: bool,
    visible: Option<&str>,
) -> std::result::Result<Vec<DeviceSlot>, String> {
    let visible: Option<Vec<String>> =
        visible.map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let bad = |m: String| m;
    let mut slots = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if id.is_empty() || ids[..i].contains(id) {
            return Err(bad(format!(
                "device id `{id}` is empty or given twice: expected distinct ids, e.g. 0,1,2"
            )));
        }
        if gpu {
            let n: usize = id.parse().map_err(|_| {
                bad(format!(
                    "`{id}` is not a GPU ordinal: expected numbers, e.g. --devices 0,1"
                ))
            })?;
            // Ordinals count the GPUs this process sees: map them through its own
            // CUDA_VISIBLE_DEVICES, if set.
            let physical = match &visible {
                Some(v) => v.get(n).cloned().ok_or_else(|| {
                    bad(format!(
                        "GPU {n} is not among the {} of CUDA_VISIBLE_DEVICES={}",
                        v.len(),
                        v.join(",")
                    ))
                })?,
                None => id.clone(),
            };
            slots.push(DeviceSlot {
                name: format!("cuda:{n}"),
                env: vec![
                    ("CUDA_VISIBLE_DEVICES".into(), physical),
                    ("MEMWALL_DEVICE".into(), format!("cuda:{n}")),
                ],
            });
        } else {
            slots.push(DeviceSlot {
                name: format!("cpu:{id}"),
                env: vec![("MEMWALL_DEVICE".into(), format!("cpu:{id}"))],
            });
        }
    }
    Ok(slots)
}

/// `runner` started through `env` with the slot's variables set.
fn slot_runner(runner: &(PathBuf, Vec<String>), slot: &DeviceSlot) -> (PathBuf, Vec<String>) {
    let mut args: Vec<String> = slot.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    args.push(runner.0.display().to_string());
    args.extend(runner.1.iter().cloned());
    (PathBuf::from("env"), args)
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
    /// The record of every job of the sweep, run now or finished before, in the order of its
    /// jobs (a job that stopped the sweep with an error has none).
    pub records: Vec<JobRecord>,
    /// An in-process study's stored record (computed now or read back).
    pub in_process: Option<crate::studies::StudyRecord>,
}

/// The size profile where none is given: `full` on a GPU backend, `on_cpu` otherwise (`cpu`
/// for a study run, `--cpu-profile` for a nightly). The one place this default is decided
/// (run, sweep, bundle, export-jobs, nightly).
pub fn default_profile(backend: BackendKind, on_cpu: Profile) -> Profile {
    if backend.is_gpu() {
        Profile::Full
    } else {
        on_cpu
    }
}

/// Settings applied to every job a study expands to, whatever path runs it.
#[derive(Debug, Clone, Default)]
pub struct JobSettings {
    /// The kernel and autotune cache of the jobs (CubeCL's cache folder).
    pub cache_dir: Option<PathBuf>,
    /// CUDA: release the pool's free pages at every step boundary (added to the
    /// configurations' own setting).
    pub memory_cleanup: bool,
    /// CUDA: the memory pool, replacing the configurations' own.
    pub memory_pool: Option<crate::spec::MemoryPool>,
}

/// The jobs of a training study on `target` (device `index`) over its tokenized corpora `data`
/// (one per vocabulary, [`prepare_corpora`]), with `settings`
/// applied, then narrowed to the configurations `only` and the job keys `keys` (each: all when
/// empty): the one job expansion of memwall (run, sweep, Slurm, bundle, export-jobs, nightly).
///
/// # Errors
/// [`Error::SpecField`] naming the experiment file's `configs` for a name of `only` that is no
/// configuration of the study (listing the names it has), and for a key of `keys` that is no
/// job of the study at this profile, backend and data.
pub fn expand_jobs(
    study: &Study,
    target: BackendKind,
    index: usize,
    data: &crate::spec::Corpora,
    settings: &JobSettings,
    only: &[String],
    keys: &[String],
) -> Result<Vec<JobSpec>> {
    let mut jobs = study.jobs(target, index, data);
    for job in &mut jobs {
        if let Some(dir) = &settings.cache_dir {
            job.device_settings.cache_dir = Some(dir.clone());
        }
        job.device_settings.memory_cleanup |= settings.memory_cleanup;
        if let Some(pool) = settings.memory_pool {
            job.device_settings.memory_pool = pool;
        }
    }
    if let Some(name) = only.iter().find(|n| !jobs.iter().any(|j| &j.config == *n)) {
        return Err(unknown_config(study, name));
    }
    if !only.is_empty() {
        jobs.retain(|j| only.contains(&j.config));
    }
    if let Some(key) = keys.iter().find(|k| !jobs.iter().any(|j| &j.key() == *k)) {
        return Err(Error::SpecField {
            path: study.path.clone(),
            field: "configs".into(),
            message: format!(
                "no job with key `{key}` at the {} profile on {target} (keys change with the \
                 profile, device and data: write the Slurm script again)",
                study.profile
            ),
        });
    }
    if !keys.is_empty() {
        jobs.retain(|j| keys.contains(&j.key()));
    }
    Ok(jobs)
}

/// The error for `--only NAME` when `NAME` is no configuration of `study`, listing its names.
pub fn unknown_config(study: &Study, name: &str) -> Error {
    Error::SpecField {
        path: study.path.clone(),
        field: "configs".into(),
        message: format!(
            "--only {name}: no configuration named `{name}` (have: {})",
            study
                .configs
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Resolves the device and the profile of a run.
///
/// # Errors
/// [`Error::Device`] when the requested device is not available (e.g. `cuda:0` without a GPU).
pub fn resolve(opts: &RunOptions) -> Result<(ResolvedDevice, Profile)> {
    let dev = device::resolve(opts.device, opts.cpu_backend)?;
    let profile = opts
        .profile
        .unwrap_or_else(|| default_profile(dev.backend, Profile::Cpu));
    Ok((dev, profile))
}

/// Loads a study and checks it without running, allocating or tokenizing anything: the
/// experiment file's fields, a training model against the device's memory, an in-process
/// study's `[params]` ranges. `memwall reproduce` checks every file this way before it runs the
/// first, so that a wrong value in the last file is reported in seconds.
///
/// # Errors
/// The errors of [`plan_jobs`] that need no data: invalid fields (naming file, field and the
/// accepted range), a model that cannot fit, an unavailable device.
pub fn check_study(study_path: &Path, opts: &RunOptions) -> Result<()> {
    let (dev, profile) = resolve(opts)?;
    let study = Study::load(study_path, profile, opts.data.as_deref())?;
    if study.header.kind == StudyKind::Training {
        if study.model.is_some() {
            check_fits(&study, &dev)?;
        }
        Ok(())
    } else {
        crate::studies::check(&study)
    }
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
    let mut study = Study::load(study_path, profile, opts.data.as_deref())?;
    if let Some(n) = opts.repeats {
        if n == 0 {
            return Err(Error::SpecField {
                path: study_path.to_path_buf(),
                field: "study.repeats".into(),
                message: "--repeats 0: expected at least 1 run per configuration".into(),
            });
        }
        study.header.repeats = n;
    }
    if study.header.kind != StudyKind::Training {
        crate::studies::check(&study)?;
        return Ok((study, dev, Vec::new()));
    }
    if study.model.is_none() || study.data.is_none() {
        return Ok((study, dev, Vec::new()));
    }
    check_fits(&study, &dev)?;
    let prepared = prepare_corpora(&study, &paths.cache)?;
    // A multi-device sweep shows each job process only its GPU, as ordinal 0.
    let multi = !device_slots(opts, &dev)?.is_empty();
    let index = if multi && dev.backend.is_gpu() {
        0
    } else {
        dev.index
    };
    let settings = JobSettings {
        cache_dir: Some(paths.cache.join("cubecl")),
        memory_cleanup: opts.memory_cleanup,
        memory_pool: opts.memory_pool,
    };
    let jobs = expand_jobs(
        &study,
        dev.backend,
        index,
        &prepared,
        &settings,
        &opts.only,
        &opts.keys,
    )?;
    Ok((study, dev, jobs))
}

/// Tokenizes the study's corpus once per vocabulary its models ask for
/// ([`Study::vocabularies`]) and checks each model's `seq_len` against its corpus's splits.
///
/// # Errors
/// Those of [`data::prepare`], and a `seq_len` longer than a split (naming the field).
pub fn prepare_corpora(study: &Study, cache: &Path) -> Result<crate::spec::Corpora> {
    let Some(data_cfg) = study.data.as_ref() else {
        return Ok(Default::default());
    };
    let mut corpora = crate::spec::Corpora::new();
    for vocab in study.vocabularies() {
        corpora.insert(vocab, data::prepare(data_cfg, vocab, cache)?);
    }
    for (at, model) in study.trained_models() {
        check_windows(study, &corpora[&model.vocab], &model, &at)?;
    }
    Ok(corpora)
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
    at: &str,
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
                field: format!("{at}.seq_len"),
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
        return sweep_in_process(&study, paths, opts, out);
    }
    if jobs.is_empty() {
        return Ok(out);
    }
    if let Some(search) = crate::search::params(&study)? {
        tracing::info!(
            "study `{}` ({} profile): the largest input of {} configurations under {} bytes on {}",
            study.header.name,
            study.profile,
            jobs.len(),
            search.limit_bytes,
            dev.name
        );
        // Probes that run out of memory are the search's data, not unfinished jobs.
        crate::search::run_search(&search, &jobs, |job| {
            let record = run_one(job, paths, opts, &mut out)?;
            if let crate::search::Probe::Failed(why) = crate::search::Probe::of(&record) {
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

/// Renders the report of a study from its records: Markdown, HTML, figures and, for training
/// studies, the Parquet tables. Reads `runs/`, writes only `reports/<study>/`.
///
/// # Errors
/// [`Error::Records`] when the study has no records yet.
pub fn report(study_path: &Path, paths: &Paths) -> Result<Rendered> {
    // The profile does not matter for the report: it covers every profile with records.
    let study = Study::load(study_path, Profile::Cpu, None)
        .or_else(|_| Study::load(study_path, Profile::Smoke, None))?;
    if study.header.kind != StudyKind::Training {
        return report_in_process(&study, study_path, paths);
    }
    report_training(&study, study_path, paths)
}

/// The "Results at a glance" rows of the study at `study_path` from the records in `runs` (no
/// file is written): per headline claim, the source's value, ours, the device and the verdict.
///
/// # Errors
/// [`Error::Records`] when the study has no records in `runs`; a record that does not read.
pub fn glance(study_path: &Path, runs: &Path) -> Result<Vec<report::model::GlanceRow>> {
    let study = Study::load(study_path, Profile::Cpu, None)
        .or_else(|_| Study::load(study_path, Profile::Smoke, None))?;
    let paths = Paths {
        runs: runs.to_path_buf(),
        ..Paths::default()
    };
    if study.header.kind != StudyKind::Training {
        let stored = crate::studies::stored(runs, &study.header.name)?;
        let Some((rec, rec_path)) = stored.first() else {
            return Err(no_records(&paths, &study.header.name, study_path));
        };
        return crate::studies::glance(&study, rec, rec_path);
    }
    let records = training_records(&study, study_path, &paths)?;
    if crate::search::params(&study)?.is_some() {
        return Ok(search_parts(study_path, &records)?.2);
    }
    // The glance reads memwall's records only (no PyTorch rows).
    let (_, _, glance) = report::training::sections(
        &records,
        &study.header,
        &study.configs,
        &study.goals,
        &study.claims,
        &[],
    )?;
    Ok(glance)
}

/// The report of an in-process study: its sections from its stored result, and the host it
/// ran on.
fn report_in_process(study: &Study, study_path: &Path, paths: &Paths) -> Result<Rendered> {
    let header = &study.header;
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
    // What the report quotes: the record's own copy (what its run quoted), else the loaded
    // experiment file (records written before the copy existed).
    let sections = match rec.cited {
        Some(_) => crate::studies::render(rec, rec_path)?,
        None => crate::studies::render_with(study, rec, rec_path)?,
    };
    let glance = crate::studies::glance(study, rec, rec_path)?;
    let date = record_date(&rec.finished_at);
    let doc = ReportDoc::new(header, sections, environment, date, glance);
    report::render(&doc, &paths.templates, &paths.reports.join(&header.name))
}

/// The records of a training study, or an error naming the store when it has none (or none
/// readable, listing the unreadable ones and how to rerun them).
fn training_records(
    study: &Study,
    study_path: &Path,
    paths: &Paths,
) -> Result<results::StudyRecords> {
    let name = &study.header.name;
    let records = results::StudyRecords::load(&paths.runs, name)?;
    if records.is_empty() && !records.unreadable.is_empty() {
        return Err(Error::Records {
            path: paths.runs.join(name),
            message: format!(
                "no readable record for study `{}`: {}; `memwall run {}` moves them aside and \
                 reruns their jobs",
                name,
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
        return Err(no_records(paths, name, study_path));
    }
    Ok(records)
}

/// The report of a training study: the analysis sections of its records, the PyTorch rows and
/// operation timings imported beside them, and the Parquet tables.
fn report_training(study: &Study, study_path: &Path, paths: &Paths) -> Result<Rendered> {
    let header = &study.header;
    let records = training_records(study, study_path, paths)?;
    if crate::search::params(study)?.is_some() {
        return report_search(study, study_path, paths, &records);
    }
    // PyTorch rows (`runs/<study>/pytorch/`, from a bundle's import or `memwall reference
    // --device cpu`): the CPU ones in their CPU group's section, the others (and the rows that
    // do not read) in the section beside PyTorch below.
    let (pytorch, _) = crate::reference::load_rows(&paths.runs, &header.name);
    let (mut sections, environment, glance) = report::training::sections(
        &records,
        header,
        &study.configs,
        &study.goals,
        &study.claims,
        &pytorch,
    )?;
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
    // Operation timings of `memwall-job bench` and `reference/torch_attribution.py`
    // (`runs/<study>/attribution/`).
    sections.extend(report::attribution::section(&paths.runs, &header.name));
    // This machine's store: its measurements beside the published ones.
    if let Some(published) = &paths.published {
        let theirs = results::StudyRecords::load(published, &header.name)?;
        sections.extend(report::beside::section(
            &records.records,
            &theirs.records,
            &labels,
        ));
    }
    write_report(paths, header, &records, sections, environment, glance)
}

/// The report of a study that searches the largest input ([`crate::search`]): per profile of
/// its records, the search's tables and the glance from the first profile with answers (the
/// `cpu` profile first).
fn report_search(
    study: &Study,
    study_path: &Path,
    paths: &Paths,
    records: &results::StudyRecords,
) -> Result<Rendered> {
    let (sections, environment, glance) = search_parts(study_path, records)?;
    write_report(paths, &study.header, records, sections, environment, glance)
}

/// A search study's sections, environment tables and glance (see [`report_search`]).
fn search_parts(
    study_path: &Path,
    records: &results::StudyRecords,
) -> Result<(
    Vec<report::model::Section>,
    Vec<report::model::Table>,
    Vec<report::model::GlanceRow>,
)> {
    let mut profiles: Vec<Profile> = records.records.iter().map(|r| r.spec.profile).collect();
    profiles.sort_by_key(|p| (*p != Profile::Cpu, p.as_str()));
    profiles.dedup();
    let mut sections = Vec::new();
    let mut environment = Vec::new();
    let mut glance = Vec::new();
    for profile in profiles {
        let at = Study::load(study_path, profile, None)?;
        let Some(params) = crate::search::params(&at)? else {
            continue;
        };
        let rows = crate::search::summarize(&records.records, &at, &params);
        if let Some(mut section) = crate::search::section(&rows, &params, &at) {
            section.title = format!("{} ({} profile)", section.title, profile);
            sections.push(section);
            environment.extend(crate::search::environment(&rows, &at));
            if glance.is_empty() {
                glance = crate::search::glance(&at, &rows);
            }
        }
    }
    Ok((sections, environment, glance))
}

/// Renders a training study's report (dated by its newest record) into
/// `<reports>/<study>/` and writes its Parquet tables beside it.
fn write_report(
    paths: &Paths,
    header: &crate::spec::StudyHeader,
    records: &results::StudyRecords,
    sections: Vec<report::model::Section>,
    environment: Vec<report::model::Table>,
    glance: Vec<report::model::GlanceRow>,
) -> Result<Rendered> {
    let newest = records
        .records
        .iter()
        .map(|r| r.finished_at.as_str())
        .max()
        .unwrap_or_default();
    let doc = ReportDoc::new(header, sections, environment, record_date(newest), glance);
    let out_dir = paths.reports.join(&header.name);
    let rendered = report::render(&doc, &paths.templates, &out_dir)?;
    results::write_parquet_tables(records, &out_dir)?;
    Ok(rendered)
}

/// Where reports of the record store `runs` go: `reports` given, else `reports/` for the
/// committed store `runs/`, `<runs>/reports` for any other (a scratch store: its reports never
/// overwrite the published ones).
pub fn reports_root(runs: &Path, reports: Option<PathBuf>) -> PathBuf {
    match reports {
        Some(r) => r,
        None if is_published(runs) => "reports".into(),
        None => runs.join("reports"),
    }
}

/// The date (YYYY-MM-DD) of an RFC 3339 time stamp of a record.
fn record_date(finished_at: &str) -> String {
    finished_at.chars().take(10).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_scratch_record_store_renders_beside_itself() {
        assert_eq!(reports_root(Path::new("runs"), None), Path::new("reports"));
        assert_eq!(
            reports_root(Path::new("/tmp/scratch"), None),
            Path::new("/tmp/scratch/reports")
        );
        assert_eq!(
            reports_root(Path::new("/tmp/scratch"), Some("out".into())),
            Path::new("out")
        );
    }

    #[test]
    fn gpu_slots_show_each_job_its_own_gpu() {
        let slots = slots_for(&ids(&["0", "1"]), true, None).unwrap();
        assert_eq!(slots[1].name, "cuda:1");
        assert!(slots[1]
            .env
            .contains(&("CUDA_VISIBLE_DEVICES".into(), "1".into())));
        // Ordinals count the GPUs this process sees.
        let slots = slots_for(&ids(&["0", "1"]), true, Some("4,6")).unwrap();
        assert!(slots[1]
            .env
            .contains(&("CUDA_VISIBLE_DEVICES".into(), "6".into())));
        let e = slots_for(&ids(&["2"]), true, Some("4,6")).unwrap_err();
        assert!(e.contains("CUDA_VISIBLE_DEVICES=4,6"), "{e}");
    }

    #[test]
    fn bad_device_ids_are_refused() {
        assert!(slots_for(&ids(&["0", "x"]), true, None)
            .unwrap_err()
            .contains("not a GPU ordinal"));
        assert!(slots_for(&ids(&["a", "a"]), false, None)
            .unwrap_err()
            .contains("given twice"));
        let cpu = slots_for(&ids(&["a", "b"]), false, None).unwrap();
        assert_eq!(cpu[1].env, vec![("MEMWALL_DEVICE".into(), "cpu:b".into())]);
    }
}
