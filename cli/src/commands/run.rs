//! `memwall reproduce`, `run`, `sweep`, `list`, `doctor` and `export-jobs`: the run options
//! every study command shares ([`RunArgs`]) and the commands that run studies.

use super::*;

#[derive(Args, Clone)]
pub(crate) struct RunArgs {
    /// Size profile: smoke, cpu or full (default: full on a GPU, cpu otherwise).
    #[arg(long)]
    pub(crate) profile: Option<Profile>,
    /// Device: auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub(crate) device: String,
    /// CPU backend: flex or ndarray.
    #[arg(long, default_value = "flex")]
    pub(crate) backend: String,
    /// Corpus file (TinyStories .txt or .parquet); overrides the experiment file.
    #[arg(long, env = "MEMWALL_DATA")]
    pub(crate) data: Option<PathBuf>,
    /// A data folder searched first for the data sets the studies read (before the
    /// repository's `data/`, the user cache and `../shared/data`).
    #[arg(long, env = "MEMWALL_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Rerun jobs that already have a record.
    #[arg(long)]
    pub(crate) force: bool,
    /// Run only these configurations (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Record store: this machine's (`target/memwall/runs`, ignored by git) unless given; its
    /// reports show the published records of `runs/` beside this machine's.
    #[arg(long, default_value = memwall_driver::LOCAL_RUNS, env = "MEMWALL_RUNS")]
    pub(crate) runs: PathBuf,
    /// Write into the committed evidence, `runs/` and `reports/` (a maintainer's command:
    /// the book: docs/src/guide/publishing.md), instead of this machine's store.
    #[arg(long, conflicts_with_all = ["runs", "reports"])]
    pub(crate) publish: bool,
    /// Report output root (default: `reports` for the committed record store `runs`,
    /// `<RUNS>/reports` for any other, so a scratch run never overwrites the published reports).
    #[arg(long)]
    pub(crate) reports: Option<PathBuf>,
    /// Report templates.
    #[arg(long, default_value = "templates")]
    pub(crate) templates: PathBuf,
    /// CUDA: release the memory pool's free pages at every step boundary in every job (a
    /// recorded job setting; a configuration can also set `memory_cleanup = true`).
    #[arg(long)]
    pub(crate) memory_cleanup: bool,
    /// CUDA: the memory pool of every job, `exact_size` (memwall's default) or `sliced`
    /// (CubeCL's); a recorded job setting; a configuration can also set `memory_pool`.
    #[arg(long, value_enum)]
    pub(crate) memory_pool: Option<PoolArg>,
    /// Run jobs on these devices at once, one job per device (GPU ordinals, comma separated;
    /// default: every visible GPU with --device auto). On the CPU the ids name parallel job
    /// slots (which share the CPU: their times are not comparable with a one-job sweep).
    #[arg(long, value_delimiter = ',')]
    pub(crate) devices: Vec<String>,
    /// Run only the jobs with these job keys (comma separated), e.g. one Slurm array task.
    #[arg(long, value_delimiter = ',')]
    pub(crate) keys: Vec<String>,
    /// Runs of each configuration (interleaved), replacing the file's `[study] repeats`.
    #[arg(long)]
    pub(crate) repeats: Option<usize>,
    /// Fault injection, off by default: every step of STUDY/CONFIG takes FACTOR times as long
    /// (`memwall-job run-job --inject-slowdown`), as a real slowdown would; `memwall nightly`
    /// plants it in tonight's binary to check that the nightly flags exactly that
    /// configuration after its confirmation reruns.
    #[arg(long, value_name = "STUDY/CONFIG=FACTOR")]
    pub(crate) inject_slowdown: Option<String>,
}

pub(crate) fn options(a: &RunArgs) -> Result<(Paths, RunOptions)> {
    if let Some(dir) = &a.data_dir {
        // The search path reads the variable (here and in every job process started later);
        // set before any thread of this process starts.
        std::env::set_var(memwall_core::data_path::DATA_DIR_ENV, dir);
    }
    let device: DeviceRequest = a.device.parse()?;
    let cpu_backend: BackendKind = a.backend.parse()?;
    let (exe, mut runner_args) = memwall_runner::job::job_runner()?;
    if let Some(s) = &a.inject_slowdown {
        s.parse::<memwall_runner::train::slowdown::Slowdown>()
            .map_err(|e| anyhow::anyhow!("--inject-slowdown {e}"))?;
        runner_args.extend(["--inject-slowdown".to_string(), s.clone()]);
    }
    let runs = if a.publish {
        PathBuf::from(driver::PUBLISHED_RUNS)
    } else {
        a.runs.clone()
    };
    Ok((
        Paths {
            reports: driver::reports_root(&runs, a.reports.clone()),
            templates: a.templates.clone(),
            published: driver::published_beside(&runs),
            runs,
            ..Paths::default()
        },
        RunOptions {
            profile: a.profile,
            device,
            cpu_backend,
            data: a.data.clone(),
            force: a.force,
            only: a.only.clone(),
            runner: (exe, runner_args),
            progress: true,
            memory_cleanup: a.memory_cleanup,
            memory_pool: a.memory_pool.map(MemoryPool::from),
            devices: a.devices.clone(),
            keys: a.keys.clone(),
            repeats: a.repeats,
        },
    ))
}

/// `--memory-pool`: the CUDA memory pool of every job ([`MemoryPool`]).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum PoolArg {
    /// CubeCL's pages cut into slices ([`MemoryPool::Sliced`]).
    Sliced,
    /// One buffer of the exact size per allocation ([`MemoryPool::ExactSize`]).
    #[value(name = "exact_size")]
    ExactSize,
}

impl From<PoolArg> for MemoryPool {
    fn from(p: PoolArg) -> Self {
        match p {
            PoolArg::Sliced => MemoryPool::Sliced,
            PoolArg::ExactSize => MemoryPool::ExactSize,
        }
    }
}

pub(crate) fn run_study(path: &Path, paths: &Paths, opts: &RunOptions, render: bool) -> Result<()> {
    // An error that names the experiment file already is not prefixed with it again.
    let outcome = driver::sweep(path, paths, opts).map_err(|e| {
        let shown = path.display().to_string();
        if format!("{e}").contains(&shown) {
            anyhow::Error::new(e)
        } else {
            anyhow::Error::new(e).context(format!("running {shown}"))
        }
    })?;
    eprintln!(
        "{}: {} jobs run, {} already finished{}",
        path.display(),
        outcome.ran,
        outcome.skipped,
        unfinished_lines(&outcome.unfinished)
    );
    if render {
        report_study(path, paths)?;
    }
    Ok(())
}

/// One line per distinct (status, reason) of the jobs that did not finish, naming their
/// configurations; empty when every job finished.
pub(crate) fn unfinished_lines(unfinished: &[(String, JobStatus, String)]) -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for (c, s, r) in unfinished {
        let key = format!("{}: {r}", s.as_str());
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    groups
        .iter()
        .map(|(k, cs)| format!("\n  not finished ({k}): {}", cs.join(", ")))
        .collect::<String>()
}

/// Renders one study's report from its records and prints the Markdown and HTML paths.
pub(crate) fn report_study(path: &Path, paths: &Paths) -> Result<()> {
    let r = driver::report(path, paths).with_context(|| format!("reporting {}", path.display()))?;
    println!("{}", r.markdown.display());
    println!("{}", r.html.display());
    Ok(())
}

/// `memwall sweep`: runs the study's jobs without rendering the report, or with `--emit
/// slurm` writes the Slurm job array that runs them.
pub(crate) fn sweep(
    experiment: &Path,
    emit: Option<Emit>,
    slurm: &SlurmArgs,
    run: &RunArgs,
) -> Result<()> {
    let (paths, opts) = options(run)?;
    match emit {
        None => run_study(experiment, &paths, &opts, false),
        Some(Emit::Slurm) => {
            let workdir = std::env::current_dir().context("reading the working directory")?;
            let stem = experiment
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "study".into());
            let slurm = slurm.options(workdir, Path::new("slurm").join(stem))?;
            let s = memwall_lab::slurm::emit(experiment, &paths, &opts, &slurm)
                .with_context(|| format!("writing Slurm scripts for {}", experiment.display()))?;
            print_slurm(&s)
        }
    }
}

/// `memwall export-jobs`: writes the study's job files for the `target` backend under `out`.
pub(crate) fn export_jobs_cmd(
    experiment: &Path,
    target: &str,
    out: &Path,
    run: &RunArgs,
) -> Result<()> {
    let (paths, opts) = options(run)?;
    let backend: BackendKind = target.parse()?;
    let n = export_jobs(experiment, backend, out, &paths, &opts)?;
    println!("wrote {n} job files under {}", out.display());
    Ok(())
}

/// `memwall reproduce`: every study in `experiments`, going on past a failed one.
pub(crate) fn reproduce(experiments: &Path, run: &RunArgs) -> Result<()> {
    let (paths, opts) = options(run)?;
    let files = Study::discover(experiments)?;
    if files.is_empty() {
        bail!("no experiment files (*.toml) in {}", experiments.display());
    }
    // The data every study reads is found or fetched first; what cannot be had stops the run
    // here, before any record is written.
    ensure_data(&files, &opts)?;
    let mut failed = Vec::new();
    // Every file is checked before the first study runs: a wrong value in the last one is
    // reported now, not after the others have run; the valid studies still run.
    let mut valid = Vec::new();
    for f in &files {
        match driver::check_study(f, &opts) {
            Ok(()) => valid.push(f),
            Err(e) => {
                eprintln!(
                    "error: {}: {} (this study is skipped)",
                    f.display(),
                    crate::error_line(&e)
                );
                failed.push(f.display().to_string());
            }
        }
    }
    let mut rendered = Vec::new();
    for f in valid {
        match run_study(f, &paths, &opts, true) {
            Ok(()) => rendered.push(f.clone()),
            Err(e) => {
                eprintln!("error: {}", crate::error_line(e.as_ref()));
                failed.push(f.display().to_string());
            }
        }
    }
    let index =
        memwall_report::sinks::index::write_index(&rendered, &paths.reports, &paths.templates)?;
    println!("{}", index.display());
    if let Some(published) = &paths.published {
        print_claims_beside(&rendered, &paths.runs, published);
    }
    println!(
        "your report: {} (also as HTML: {}); records in {}",
        index.display(),
        index.with_file_name("index.html").display(),
        paths.runs.display()
    );
    if !failed.is_empty() {
        bail!(
            "{} of {} studies failed: {}",
            failed.len(),
            files.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// Prints every headline claim of the `studies` as measured in `runs` (this machine) beside the
/// published store `published`, as a Markdown table.
pub(crate) fn print_claims_beside(studies: &[PathBuf], runs: &Path, published: &Path) {
    let of: Vec<memwall_report::sections::reproduction::ClaimsOf> = studies
        .iter()
        .map(|f| memwall_report::sections::reproduction::ClaimsOf {
            study: f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            here: driver::glance(f, runs).unwrap_or_default(),
            published: driver::glance(f, published).unwrap_or_default(),
        })
        .collect();
    println!(
        "\nHeadline claims, this machine ({}) beside the published evidence ({}):\n\n{}",
        runs.display(),
        published.display(),
        memwall_report::sections::reproduction::claims_table(&of, 60)
    );
}

/// `memwall list`: each study, its model under `profile` and its configurations.
pub(crate) fn list(experiments: &Path, profile: Profile) -> Result<()> {
    for f in Study::discover(experiments)? {
        let s = Study::load(&f, profile, None)?;
        println!(
            "{} ({}) — {}  [source {}]",
            s.header.name,
            f.display(),
            s.header.title,
            s.header.source
        );
        if let Some(m) = s.model {
            println!(
                "  {profile} model: {} layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}, vocab {} ({} parameters)",
                m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, m.vocab, m.parameter_count()
            );
        }
        for (name, m) in &s.models {
            println!(
                "  {profile} model `{name}`: {} layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}, vocab {} ({} parameters)",
                m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, m.vocab, m.parameter_count()
            );
        }
        for c in &s.configs {
            println!(
                "  - {:<24} precision {:<4} checkpoint {:<5} fused_optimizer {:<5} fusion {}",
                c.name, c.precision, c.checkpoint, c.fused_optimizer, c.fusion
            );
        }
    }
    Ok(())
}

/// `memwall doctor`: versions, CPU, CUDA and what `--device auto` resolves to.
pub(crate) fn doctor() -> Result<()> {
    println!(
        "memwall {} (burn {})",
        env!("CARGO_PKG_VERSION"),
        memwall_runner::BURN_VERSION
    );
    println!(
        "CPU: {} ({} threads)",
        device::cpu_model(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!("cuda feature compiled: {}", device::CUDA_COMPILED);
    match device::probe_cuda() {
        Ok(info) => println!(
            "CUDA: {} device(s): {}",
            info.device_count,
            info.names.join(", ")
        ),
        Err(e) => println!("CUDA: unavailable ({e})"),
    }
    let dev = device::resolve(DeviceRequest::Auto, BackendKind::Flex)?;
    println!("--device auto resolves to: {} ({})", dev.backend, dev.name);
    match memwall_core::datasets::Manifest::load(Path::new(".")) {
        Ok(Some(m)) => {
            let intact = m
                .datasets
                .iter()
                .filter(|d| {
                    d.locate(Path::new("."))
                        .and_then(|l| d.check(&l.at).ok())
                        .is_some_and(|i| i == memwall_core::datasets::Integrity::Intact)
                })
                .count();
            println!(
                "data: {intact} of {} data sets of {} found with their checksums \
                 (`memwall data list` says where; `memwall data fetch` gets the others)",
                m.datasets.len(),
                m.path.display()
            );
        }
        Ok(None) => println!(
            "data: no {} here (run memwall doctor in the repository's root)",
            memwall_core::datasets::MANIFEST
        ),
        Err(e) => println!("data: {e}"),
    }
    Ok(())
}

/// Writes `<out>/<study>/<key>/job.json` for each job, with the tokenized corpus copied to
/// `<out>/data/<fingerprint>/` and referenced by a relative path.
pub(crate) fn export_jobs(
    experiment: &Path,
    backend: BackendKind,
    out: &Path,
    paths: &Paths,
    opts: &RunOptions,
) -> Result<usize> {
    let profile = opts
        .profile
        .unwrap_or_else(|| driver::default_profile(backend, Profile::Cpu));
    let study = Study::load(experiment, profile, opts.data.as_deref())?;
    if study.model.is_none() || study.data.is_none() {
        bail!("{} is not a training study", experiment.display());
    }
    let mut carried = memwall_core::spec::Corpora::new();
    for (vocab, prepared) in driver::prepare_corpora(&study, &paths.cache)? {
        let data_dir = out.join("data").join(&prepared.fingerprint);
        std::fs::create_dir_all(&data_dir)?;
        for f in ["train.tokens", "eval.tokens", "tokenizer.json", "meta.json"] {
            std::fs::copy(prepared.dir.join(f), data_dir.join(f))
                .with_context(|| format!("copying {f} to {}", data_dir.display()))?;
        }
        let mut corpus = prepared.clone();
        corpus.dir = data_dir;
        carried.insert(vocab, corpus);
    }
    // One kernel and autotune cache for every exported job, carried with them.
    let cache_dir = out.join("cache").join("cubecl");
    std::fs::create_dir_all(&cache_dir)?;
    let settings = driver::JobSettings {
        cache_dir: Some(cache_dir),
        memory_cleanup: opts.memory_cleanup,
        memory_pool: opts.memory_pool,
    };
    let jobs = driver::expand_jobs(
        &study, backend, 0, &carried, &settings, &opts.only, &opts.keys,
    )?;
    for job in &jobs {
        let dir = out.join(&job.study).join(job.key());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("job.json"), serde_json::to_vec_pretty(job)?)?;
    }
    Ok(jobs.len())
}
