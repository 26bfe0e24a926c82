//! `memwall bundle` and `memwall import`: a bundle for a machine without Rust, and its results
//! merged back into the record store.

use super::*;

#[derive(Args)]
pub(crate) struct BundleArgs {
    /// Experiment files (default: experiments/peak_memory.toml).
    pub(crate) experiments: Vec<PathBuf>,
    /// The whole GPU suite: every study whose experiment file gives it a `study.gpu_suite`
    /// place (peak_memory, checkpoint_interval, mixed_precision, then fusion_ir's chains), in
    /// that order, at the `full` profile unless --profile says otherwise.
    #[arg(long, conflicts_with = "experiments")]
    pub(crate) suite: bool,
    /// Directory of the experiment files the suite is read from.
    #[arg(long, default_value = "experiments")]
    pub(crate) experiments_dir: PathBuf,
    /// Size profile: smoke, cpu or full (default: full for cuda, cpu for flex/ndarray).
    #[arg(long)]
    pub(crate) profile: Option<Profile>,
    /// Backend the jobs run on there: cuda, flex or ndarray.
    #[arg(long, default_value = "cuda")]
    pub(crate) target: String,
    /// Bundle folder (the archive is written beside it as <out>.tar.gz).
    #[arg(long, default_value = "target/gpu-bundle")]
    pub(crate) out: PathBuf,
    /// Runner binary to carry (default: target/carry/memwall-job if built, else
    /// target/release/memwall-job).
    #[arg(long)]
    pub(crate) runner: Option<PathBuf>,
    /// CubeCL autotune cache (.tgz of a cache root holding cubecl/autotune/...) to carry
    /// besides the committed one (gpu-cache/cubecl) and the local one (.memwall/cache/cubecl),
    /// which are always carried.
    #[arg(long)]
    pub(crate) autotune_cache: Option<PathBuf>,
    /// Also carry the local cache's compiled kernels (large; NVRTC recompiles them in seconds).
    #[arg(long)]
    pub(crate) with_kernels: bool,
    /// PyTorch twin script to carry ("none" leaves the PyTorch column out).
    #[arg(long, default_value = "reference/torch_peak_memory.py")]
    pub(crate) torch_script: String,
    /// Write only the folder, no .tar.gz.
    #[arg(long)]
    pub(crate) no_archive: bool,
    /// Corpus file (TinyStories .txt or .parquet); overrides the experiment files.
    #[arg(long, env = "MEMWALL_DATA")]
    pub(crate) data: Option<PathBuf>,
    /// Bundle only these configurations (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// CUDA: release the pool's free pages at every step boundary in every job.
    #[arg(long)]
    pub(crate) memory_cleanup: bool,
    /// CUDA: the memory pool of every job, `exact_size` or `sliced`.
    #[arg(long, value_enum)]
    pub(crate) memory_pool: Option<PoolArg>,
    /// The GPU model to resume for, as records name it (e.g. "NVIDIA H200"): jobs and PyTorch
    /// twins the record store holds for it are left out (default: the GPU of the newest CUDA
    /// record of the bundled studies).
    #[arg(long)]
    pub(crate) gpu_model: Option<String>,
    /// Bundle every job and twin, also those the record store holds for the GPU model.
    #[arg(long)]
    pub(crate) rerun_stored: bool,
    /// Carry a runner built from a tree with uncommitted changes (refused by default: its
    /// records would name a revision that does not exist; with this flag each record lists the
    /// files that differed).
    #[arg(long)]
    pub(crate) allow_dirty: bool,
}

// `memwall plan`'s arguments (its help is the `Plan` command's).
#[derive(Args)]
pub(crate) struct ImportArgs {
    /// Bundle folders or archives: `<bundle>.tar.gz`, or what its run.sh packed
    /// (`results.tar.gz`, `cache.tar.gz`), imported in the order given.
    #[arg(required = true)]
    pub(crate) sources: Vec<PathBuf>,
    /// Record store.
    #[arg(long, default_value = "runs", env = "MEMWALL_RUNS")]
    pub(crate) runs: PathBuf,
    /// Directory of the local experiment files (a study is found by its name).
    #[arg(long, default_value = "experiments")]
    pub(crate) experiments: PathBuf,
    /// Report output root (default: `reports` for the record store `runs`, `<RUNS>/reports`
    /// for any other).
    #[arg(long)]
    pub(crate) reports: Option<PathBuf>,
    #[arg(long, default_value = "templates")]
    pub(crate) templates: PathBuf,
    /// Replace records already in the store.
    #[arg(long)]
    pub(crate) force: bool,
    /// Import the records that match and list the others (default: refuse the import).
    #[arg(long)]
    pub(crate) skip_mismatched: bool,
    /// The bundle's run is a nightly run: its records replace those in the store (default
    /// store `<HISTORY>/runs`, scratch, as `memwall nightly`'s), one entry is appended to
    /// the history store and the nightly page is rendered, as after `memwall nightly`.
    #[arg(long)]
    pub(crate) nightly: bool,
    #[command(flatten)]
    pub(crate) verdict: NightlyVerdictArgs,
}

/// `memwall import`: the store and reports the arguments name (a nightly's default store is
/// the history's scratch store), then [`import`].
pub(crate) fn import_cmd(a: ImportArgs) -> Result<()> {
    let mut runs = a.runs;
    if a.nightly {
        check_noise(a.verdict.noise_threshold)?;
        // A nightly's records are scratch, as `memwall nightly`'s.
        if runs == Path::new("runs") && std::env::var_os("MEMWALL_RUNS").is_none() {
            runs = a.verdict.history.join("runs");
        }
    }
    let paths = Paths {
        reports: driver::reports_root(&runs, a.reports),
        runs,
        templates: a.templates,
        ..Paths::default()
    };
    let nightly = a.nightly.then_some(&a.verdict);
    if nightly.is_some() && a.sources.len() > 1 {
        bail!("--nightly imports one run: name its results.tar.gz alone (then `memwall import cache.tar.gz`)");
    }
    // Every archive is imported even when another is damaged: what one command brought back
    // (results, cache, a split part) is independent of the others.
    let mut failed = Vec::new();
    for source in &a.sources {
        if let Err(e) = import(
            source,
            &a.experiments,
            &paths,
            a.force,
            a.skip_mismatched,
            nightly,
        ) {
            let line = format!("{}: {}", source.display(), crate::error_line(e.as_ref()));
            eprintln!("error: {line}");
            failed.push(line);
        }
    }
    match failed.len() {
        0 => Ok(()),
        n => bail!(
            "{n} of {} archive(s) not imported (the others were):\n  {}",
            a.sources.len(),
            failed.join("\n  ")
        ),
    }
}

/// `memwall bundle`: writes the bundle and prints its size and what to do next.
pub(crate) fn bundle(a: &BundleArgs) -> Result<()> {
    let req = bundle_request(a)?;
    let s = memwall_lab::bundle::bundle(&req, &Paths::default())?;
    print_bundle(&s, a.suite);
    Ok(())
}

/// The bundle the arguments ask for: the runner (the slim CUDA runner where built), the
/// PyTorch script (checked), and the experiment files (the suite's, or peak_memory's).
pub(crate) fn bundle_request(a: &BundleArgs) -> Result<memwall_lab::bundle::BundleRequest> {
    let runner = a.runner.clone().unwrap_or_else(|| {
        let carry = PathBuf::from("target/carry/memwall-job");
        if carry.is_file() {
            carry
        } else {
            PathBuf::from("target/release/memwall-job")
        }
    });
    let torch_script = (a.torch_script != "none").then(|| PathBuf::from(&a.torch_script));
    if let Some(s) = &torch_script {
        if !s.is_file() {
            bail!(
                "--torch-script {}: no such file (\"none\" leaves the PyTorch column out)",
                s.display()
            );
        }
    }
    let experiments = if a.suite {
        memwall_lab::bundle::suite_experiments(&a.experiments_dir)?
    } else if a.experiments.is_empty() {
        vec![PathBuf::from("experiments/peak_memory.toml")]
    } else {
        a.experiments.clone()
    };
    let target = a.target.parse()?;
    Ok(memwall_lab::bundle::BundleRequest {
        experiments,
        // None: `full` for a GPU target, `cpu` otherwise (driver::default_profile).
        profile: a.profile,
        target,
        out: a.out.clone(),
        runner,
        data: a.data.clone(),
        only: a.only.clone(),
        memory_cleanup: a.memory_cleanup,
        memory_pool: a.memory_pool.map(MemoryPool::from),
        autotune_cache: a.autotune_cache.clone(),
        with_kernels: a.with_kernels,
        torch_script,
        archive: !a.no_archive,
        gpu_model: a.gpu_model.clone(),
        rerun_stored: a.rerun_stored,
        allow_dirty: a.allow_dirty,
    })
}

/// Prints what was bundled: each study's jobs and expected time, the total (with a note when
/// a `suite` is over a session's minutes), the sizes and what to do on the other machine.
pub(crate) fn print_bundle(s: &memwall_lab::bundle::BundleSummary, suite: bool) {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    for st in &s.manifest.studies {
        let basis: Vec<String> = st
            .expected_basis
            .iter()
            .map(|(b, n)| format!("{n} from {b}"))
            .collect();
        println!(
            "{}: {} job(s), expected {:.1} device minutes ({})",
            st.name,
            st.jobs.len(),
            st.expected_s / 60.0,
            basis.join(", ")
        );
        for (c, why) in &st.left_out {
            println!("  left out {c}: {why}");
        }
        for (c, why) in &st.left_out_twins {
            println!("  left out the PyTorch twin of {c}: {why}");
        }
    }
    if let Some(r) = &s.manifest.resume {
        println!(
            "resuming for {} ({}): what the record store holds for it is left out",
            r.gpu_model, r.chosen_by
        );
    }
    println!(
        "expected device time: {}",
        memwall_lab::bundle::expected_line(&s.manifest)
    );
    for t in &s.manifest.tiers {
        println!(
            "tier {}: {} ({} step(s), expected {:.1} min)",
            t.number,
            t.title,
            t.steps.len(),
            t.expected_s() / 60.0
        );
    }
    let total_min = s.manifest.expected_total_s() / 60.0;
    if suite && total_min > memwall_lab::bundle::SUITE_MINUTES {
        println!(
            "note: more than one command's {} device minutes: run.sh runs the tiers in order, \
             packing after every step, and a second session goes on where it stopped \
             (`run.sh --dry-run --minutes N` shows what fits)",
            memwall_lab::bundle::SUITE_MINUTES
        );
    }
    println!(
        "bundle {} ({:.1} MiB, runner {}stripped{}, {} file(s) of the committed and local \
         CubeCL caches; {:.1} MiB with the working tree that travels, of the {:.0} MiB a device \
         session carries)",
        s.dir.display(),
        mib(s.dir_bytes),
        if s.stripped { "" } else { "not " },
        if s.dir.join("bin/memwall-job.gz").is_file() {
            " and gzip-compressed (run.sh unpacks it)"
        } else {
            ""
        },
        s.cache_files,
        mib(s.dir_bytes + s.tree_bytes),
        mib(memwall_lab::bundle::CARRY_LIMIT_BYTES)
    );
    if let Some(a) = &s.archive {
        println!("archive {} ({:.1} MiB)", a.display(), mib(s.archive_bytes));
    }
    let name = s
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    println!(
        "on the other machine: `./{name}/run.sh --results DIR` (`--dry-run` first shows the \
         plan); bring back DIR's {} and {} and run `memwall import` on them",
        memwall_lab::bundle::RESULTS_ARCHIVE,
        memwall_lab::bundle::script::CACHE_ARCHIVE
    );
}

/// `memwall import`: merges a bundle's records and re-renders the reports of its studies.
/// With `nightly`, the bundle's run is a nightly: its records replace those in the store, and
/// one history entry is appended and the nightly page rendered, as after `memwall nightly`.
pub(crate) fn import(
    source: &Path,
    experiments: &Path,
    paths: &Paths,
    force: bool,
    skip_mismatched: bool,
    nightly: Option<&NightlyVerdictArgs>,
) -> Result<()> {
    let req = memwall_lab::bundle::ImportRequest {
        source: source.to_path_buf(),
        runs: paths.runs.clone(),
        experiments: experiments.to_path_buf(),
        scratch: paths.cache.join("import"),
        // A nightly measures tonight's code: its records replace last night's.
        force: force || nightly.is_some(),
        skip_mismatched,
        cubecl_cache: paths.cache.join("cubecl"),
    };
    let s = memwall_lab::bundle::import(&req)?;
    eprintln!(
        "{}: {} record(s) imported, {} already in {}, {} PyTorch row(s), {} attribution file(s), \
         {} CubeCL cache file(s) into {} ({} autotune file(s) into {})",
        source.display(),
        s.imported,
        s.already,
        paths.runs.display(),
        s.torch_rows,
        s.attribution_files,
        s.cache_files,
        req.cubecl_cache.display(),
        s.autotune_files,
        memwall_lab::bundle::autotune_store(&paths.runs).display()
    );
    if let Some(m) = &s.fusion_chains {
        eprintln!("  {m}");
    }
    for (p, why) in &s.refused {
        eprintln!("  refused {}: {why}", p.display());
    }
    for (p, why) in &s.kept_twins {
        eprintln!("  kept {}: {why}", p.display());
    }
    for f in &s.studies {
        report_study(f, paths)?;
    }
    if !s.studies.is_empty() {
        // The index quotes each study's verdicts and date: re-rendered with the reports, so
        // that `memwall report --check` holds right after an import.
        let files = memwall_lab::nightly::experiment_files(Vec::new(), experiments)?;
        memwall_report::sinks::index::write_index(&files, &paths.reports, &paths.templates)?;
    }
    if let Some(verdict) = nightly {
        let manifest = s.manifest.as_ref().context("the import read no manifest")?;
        let info = memwall_lab::nightly::import_info(source, manifest, &s.records)?;
        let entry = memwall_lab::nightly::entry_of(&info, &s.records, &[], Vec::new());
        let out = memwall_lab::nightly::record(
            &verdict.history,
            &entry,
            paths,
            verdict.noise_threshold,
            &s.studies,
        )
        .with_context(|| {
            format!(
                "appending the imported run to the history {}",
                verdict.history.display()
            )
        })?;
        if let Some(entry) = &out.entry {
            eprintln!("history entry: {}", entry.display());
        }
        nightly_verdict(&out, verdict)?;
    }
    if !s.refused.is_empty() {
        bail!("{} record(s) refused", s.refused.len());
    }
    Ok(())
}
