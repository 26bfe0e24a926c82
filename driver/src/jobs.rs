//! A study's jobs: the profile and device resolved, the jobs expanded from the experiment file,
//! their corpora prepared and their memory windows checked against the device.

use super::*;

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
