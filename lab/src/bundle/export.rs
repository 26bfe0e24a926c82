//! `memwall bundle`: the folder (and `.tar.gz`) a GPU machine runs: the runner, the jobs of each
//! study, corpora, caches, the PyTorch reference and attribution scripts, the manifest and
//! `run.sh`, checked against the carry limit.

use super::*;

/// What to bundle.
#[derive(Debug, Clone)]
pub struct BundleRequest {
    /// Experiment files (training studies; others are left out with a note).
    pub experiments: Vec<PathBuf>,
    /// Size profile (`None`: `full` for CUDA, `cpu` for a CPU backend).
    pub profile: Option<Profile>,
    /// Backend the jobs run on there.
    pub target: BackendKind,
    /// The bundle folder; the archive is written beside it as `<out>.tar.gz`.
    pub out: PathBuf,
    /// The runner binary to carry (`memwall-job`); stripped into the bundle when `strip` exists.
    pub runner: PathBuf,
    /// Corpus override (`--data`), as for `memwall run`.
    pub data: Option<PathBuf>,
    /// Only these configurations (all when empty).
    pub only: Vec<String>,
    /// Release the pool's free pages at every step boundary in every job (a key field on CUDA).
    pub memory_cleanup: bool,
    /// The memory pool of every job (a key field on CUDA).
    pub memory_pool: Option<MemoryPool>,
    /// A `.tgz` of a CubeCL cache root (holding `cubecl/autotune/...`) unpacked into the
    /// bundle's cache folder, e.g. the H100 run's `cubecl-autotune-cache-h100.tgz`, besides
    /// the committed autotune cache ([`autotune_store`]) and the local one, which are always
    /// carried.
    pub autotune_cache: Option<PathBuf>,
    /// Also carry the local cache's compiled kernels (by default only autotune results travel:
    /// kernels are large and recompile in seconds).
    pub with_kernels: bool,
    /// The PyTorch reference script to carry (`reference/torch_peak_memory.py`); `None` leaves
    /// the PyTorch column out.
    pub torch_script: Option<PathBuf>,
    /// Also write `<out>.tar.gz`.
    pub archive: bool,
}

/// One study of a bundle, as recorded in its manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BundledStudy {
    /// `[study] name`.
    pub name: String,
    /// The experiment file the jobs were expanded from (as given on the command line).
    pub experiment: PathBuf,
    /// Fingerprint of the tokenized corpus the jobs train on (the profile model's vocabulary).
    pub fingerprint: String,
    /// Fingerprints of the corpora tokenized for the other vocabularies of the study's named
    /// models (`[profiles.<p>] models.<name>`), if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_fingerprints: Vec<String>,
    /// (configuration, job key) of every bundled job.
    pub jobs: Vec<(String, String)>,
    /// (configuration, reason) of configurations left out.
    pub left_out: Vec<(String, String)>,
    /// Expected device seconds of the study's jobs ([`crate::estimate`]).
    #[serde(default)]
    pub expected_s: f64,
    /// What the estimates rest on: (basis, jobs), e.g. ("its last record", 13).
    #[serde(default)]
    pub expected_basis: Vec<(String, usize)>,
}

/// What [`bundle`] wrote.
#[derive(Debug, Clone)]
pub struct BundleSummary {
    /// The bundle folder.
    pub dir: PathBuf,
    /// The archive, when asked for.
    pub archive: Option<PathBuf>,
    /// Bytes of the folder's files.
    pub dir_bytes: u64,
    /// Bytes of the working tree that travels with it to a GPU machine (the git repository's
    /// tracked and untracked-not-ignored files around the current directory; 0 outside git).
    pub tree_bytes: u64,
    /// Bytes of the archive (0 without one).
    pub archive_bytes: u64,
    /// The manifest written.
    pub manifest: Manifest,
    /// Whether the runner was stripped.
    pub stripped: bool,
    /// Files of the local CubeCL cache (`<cache>/cubecl`: compiled kernels and autotune
    /// results of earlier GPU runs, brought back by [`import`]) copied into the bundle.
    pub cache_files: usize,
}

/// Writes a bundle: `<out>/{manifest.json, run.sh, bin/memwall-job, jobs/<study>/<key>/job.json,
/// data/<fingerprint>/, cache/cubecl/, reference/}` and, when asked, `<out>.tar.gz`.
///
/// Checkmate configurations are left out (their plan stage needs `memwall`'s solver, which the
/// slim runner lacks) and so are configurations of non-training studies; the manifest lists
/// them with the reason.
///
/// # Errors
/// Invalid experiment files (naming file and field), a missing corpus or runner, an `--only`
/// name that no study has, and I/O errors naming the path.
pub fn bundle(req: &BundleRequest, paths: &Paths) -> Result<BundleSummary> {
    check_request(req)?;
    let profile = req
        .profile
        .unwrap_or_else(|| driver::default_profile(req.target, Profile::Cpu));
    let out = &req.out;
    if out.join("manifest.json").exists() {
        // A previous bundle: rewritten in place, its records (if any) are kept.
        tracing::info!("{}: rewriting the bundle in place", out.display());
    }
    let (stripped, cache_files) = write_runner_and_caches(req, paths)?;
    // Rates from every training study bundled (the suite's share one model family).
    let names: Vec<String> = req
        .experiments
        .iter()
        .filter_map(|e| e.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    let ctx = StudyCtx {
        req,
        paths,
        cache_rel: PathBuf::from("cache").join("cubecl"),
        cold: cache_files == 0 && req.autotune_cache.is_none(),
        rates: rates_of_store(&paths.runs, &names),
    };
    let mut g = Gathered::new(req.only.len());
    for experiment in &req.experiments {
        let study = Study::load(experiment, profile, req.data.as_deref())?;
        if study.header.kind == StudyKind::FusionIr {
            // Its CUDA chains run in the slim runner (`memwall-job fusion-chains`); the rest of
            // the study is CPU-only and runs in memwall.
            g.fusion_chains = true;
            continue;
        }
        if study.header.kind != StudyKind::Training {
            eprintln!(
                "{}: `{}` runs in-process in memwall, not as jobs: left out of the bundle",
                experiment.display(),
                study.header.name
            );
            continue;
        }
        bundle_study(&ctx, &mut g, experiment, &study)?;
    }
    check_bundled(req, &g)?;
    std::fs::create_dir_all(out.join("jobs"))
        .doing(|| format!("creating {}", out.join("jobs").display()))?;
    results::write_atomic(
        &out.join("jobs").join(memwall_runner::sweep::QUEUE_FILE),
        g.queue.as_bytes(),
    )?;
    let torch_configs = match &req.torch_script {
        Some(script) if !g.torch_plans.is_empty() => {
            write_torch_reference(out, script, &g.torch_plans, &g.job_seconds, &paths.runs)?
        }
        _ => Vec::new(),
    };
    let manifest = new_manifest(req, profile, g, &torch_configs);
    let (dir_bytes, tree_bytes, archive, archive_bytes) =
        write_manifest_and_script(req, &manifest)?;
    Ok(BundleSummary {
        dir: out.clone(),
        archive,
        dir_bytes,
        tree_bytes,
        archive_bytes,
        manifest,
        stripped,
        cache_files,
    })
}

/// The manifest of a bundle of the gathered studies `g` at `profile`, with the PyTorch rows
/// `torch_configs` and the run plan of all of it.
pub(super) fn new_manifest(
    req: &BundleRequest,
    profile: Profile,
    g: Gathered,
    torch_configs: &[plan::PlannedTorch],
) -> Manifest {
    let attribution_job = g
        .attribution_jobs
        .first()
        .map(|(study, key)| PathBuf::from("jobs").join(study).join(key).join("job.json"));
    let (burn_s, torch_s) = attribution_seconds(req.target);
    let extras = plan::Extras {
        attribution: attribution_job.as_ref().map(|job| {
            (
                job.clone(),
                burn_s as f64,
                req.torch_script.is_some().then_some(torch_s as f64),
            )
        }),
        chains: g.fusion_chains.then_some(CHAINS_S as f64),
    };
    let tiers = plan::tiers(&g.planned, torch_configs, &extras);
    Manifest {
        format: MANIFEST_FORMAT.into(),
        created_at: chrono::Utc::now().to_rfc3339(),
        git_revision: crate::git::git_revision(),
        memwall_version: env!("CARGO_PKG_VERSION").into(),
        target: req.target,
        profile,
        memory_cleanup: req.memory_cleanup,
        memory_pool: req.memory_pool,
        studies: g.studies,
        extra_expected_s: extra_expected(
            req.target,
            g.fusion_chains,
            torch_configs,
            attribution_job.is_some(),
        ),
        attribution_job,
        fusion_chains: g.fusion_chains,
        tiers,
    }
}

/// Refuses a request without experiment files or without a runner binary.
pub(super) fn check_request(req: &BundleRequest) -> Result<()> {
    if req.experiments.is_empty() {
        refuse!("no experiment files to bundle");
    }
    if !req.runner.is_file() {
        refuse!(
            "runner {} not found: build it with `just carry` (slim CUDA runner) or `cargo build \
             --release --locked --bin memwall-job`, or name one with --runner",
            req.runner.display()
        );
    }
    Ok(())
}

/// Copies the runner into `<out>/bin` (after checking it runs the target's backend) and the
/// kernel caches into `<out>/cache`: the committed autotune cache ([`autotune_store`]), the
/// local CubeCL cache (its autotune results; its compiled kernels too with `with_kernels`) and
/// the `--autotune-cache` archive. Returns whether the runner was stripped and the cache files
/// copied from the committed and local caches.
pub(super) fn write_runner_and_caches(req: &BundleRequest, paths: &Paths) -> Result<(bool, usize)> {
    let out = &req.out;
    std::fs::create_dir_all(out.join("bin"))
        .doing(|| format!("creating {}", out.join("bin").display()))?;
    check_runner_backend(&req.runner, req.target)?;
    let stripped = copy_runner(&req.runner, &out.join("bin").join("memwall-job"))?;
    let cache_rel = PathBuf::from("cache").join("cubecl");
    std::fs::create_dir_all(out.join(&cache_rel))
        .doing(|| format!("creating {}", out.join(&cache_rel).display()))?;
    // The kernels and tunings of earlier GPU runs (imported with their records) go along, so
    // the jobs there start warm.
    let mut cache_files = 0;
    for (from, autotune_only) in [
        (autotune_store(&paths.runs), true),
        (paths.cache.join("cubecl"), !req.with_kernels),
    ] {
        if from.is_dir() {
            cache_files += copy_cache(&from, &out.join(&cache_rel), autotune_only)?;
        }
    }
    if let Some(tgz) = &req.autotune_cache {
        unpack_tgz(tgz, &out.join("cache"))
            .doing(|| format!("unpacking the autotune cache {}", tgz.display()))?;
    }
    Ok((stripped, cache_files))
}

/// What every training study of a bundle is written with.
pub(super) struct StudyCtx<'a> {
    req: &'a BundleRequest,
    paths: &'a Paths,
    /// The jobs' CubeCL cache folder, relative to the bundle.
    cache_rel: PathBuf,
    /// Whether the bundle carries no compiled kernels (the first job of each kind pays
    /// CubeCL's cold start).
    cold: bool,
    /// FLOP rates of the store's records, for the expected times.
    rates: crate::estimate::Rates,
}

/// What [`bundle`] gathers study by study, for the manifest, run.sh and the PyTorch reference.
pub(super) struct Gathered {
    studies: Vec<BundledStudy>,
    torch_plans: Vec<reference::TorchPlan>,
    /// Per `--only` name, whether a bundled study has it.
    matched_only: Vec<bool>,
    /// Expected warm seconds of each (study, configuration)'s job.
    job_seconds: std::collections::BTreeMap<(String, String), f64>,
    /// (study, key) of the attribution study's control jobs.
    attribution_jobs: Vec<(String, String)>,
    /// Whether `fusion_ir`'s chains are bundled.
    fusion_chains: bool,
    /// The kinds of job whose cold start an estimate already counted ([`estimate_jobs`]).
    warmed: std::collections::BTreeSet<(&'static str, bool)>,
    /// `jobs/queue.tsv`: the jobs in run order with their expected seconds.
    queue: String,
    /// Every job with its expected seconds and whether it is a source row, for the run plan.
    planned: Vec<plan::PlannedJob>,
}

impl Gathered {
    fn new(only: usize) -> Self {
        Gathered {
            studies: Vec::new(),
            torch_plans: Vec::new(),
            matched_only: vec![false; only],
            job_seconds: std::collections::BTreeMap::new(),
            attribution_jobs: Vec::new(),
            fusion_chains: false,
            warmed: std::collections::BTreeSet::new(),
            queue: String::from(
                "# memwall bundle: the jobs and their expected seconds (run.sh runs them in plan.tsv's order)\n",
            ),
            planned: Vec::new(),
        }
    }
}

/// Bundles one training study: its tokenized corpus under `data/<fingerprint>/`, its job files
/// under `jobs/<study>/<key>/`, their expected times and its PyTorch plan (a study without a
/// model or corpus is skipped).
pub(super) fn bundle_study(
    ctx: &StudyCtx,
    g: &mut Gathered,
    experiment: &Path,
    study: &Study,
) -> Result<()> {
    let (req, out) = (ctx.req, &ctx.req.out);
    let (Some(model), Some(_)) = (study.model, study.data.as_ref()) else {
        return Ok(());
    };
    let prepared = driver::prepare_corpora(study, &ctx.paths.cache)?;
    let mut carried = crate::spec::Corpora::new();
    for (vocab, corpus) in &prepared {
        carried.insert(*vocab, copy_corpus(out, corpus)?);
    }
    let fingerprint = |v: &usize| prepared[v].fingerprint.clone();
    let mut bundled = BundledStudy {
        name: study.header.name.clone(),
        experiment: experiment.to_path_buf(),
        fingerprint: fingerprint(&model.vocab),
        other_fingerprints: prepared
            .keys()
            .filter(|v| **v != model.vocab)
            .map(fingerprint)
            .collect(),
        jobs: Vec::new(),
        left_out: Vec::new(),
        expected_s: 0.0,
        expected_basis: Vec::new(),
    };
    // `--only` spans the bundled studies: each study takes the names it has, and a name no
    // study has is refused below.
    let only: Vec<String> = req
        .only
        .iter()
        .enumerate()
        .filter(|(_, o)| study.configs.iter().any(|c| &c.name == *o))
        .map(|(i, o)| {
            g.matched_only[i] = true;
            o.clone()
        })
        .collect();
    let settings = driver::JobSettings {
        cache_dir: Some(ctx.cache_rel.clone()),
        memory_cleanup: req.memory_cleanup,
        memory_pool: req.memory_pool,
    };
    let expanded = if !req.only.is_empty() && only.is_empty() {
        Vec::new()
    } else {
        driver::expand_jobs(study, req.target, 0, &carried, &settings, &only, &[])?
    };
    let mut jobs = Vec::new();
    for job in expanded {
        let dir = out.join("jobs").join(&job.study).join(job.key());
        std::fs::create_dir_all(&dir).doing(|| format!("creating {}", dir.display()))?;
        results::write_atomic(&dir.join("job.json"), &serde_json::to_vec_pretty(&job)?)?;
        bundled.jobs.push((job.config.clone(), job.key()));
        if study.header.kernel_attribution && job.control && !job.strategy.fusion {
            g.attribution_jobs.push((job.study.clone(), job.key()));
        }
        jobs.push(job);
    }
    let estimates = estimate_jobs(&jobs, &ctx.paths.runs, &ctx.rates, ctx.cold, &mut g.warmed);
    let source_optimizer = study
        .configs
        .iter()
        .find(|c| c.control)
        .map(|c| c.optimizer.unwrap_or(study.train.optimizer));
    for (job, e) in jobs.iter().zip(&estimates) {
        // Warm: PyTorch's rows do not pay CubeCL's cold start.
        let warm = e.seconds - e.cold_start_s;
        g.job_seconds
            .insert((job.study.clone(), job.config.clone()), warm);
        g.queue.push_str(&format!(
            "{}/{}\t{:.0}\n",
            job.study,
            job.key(),
            e.seconds.ceil()
        ));
        let claimed = study
            .configs
            .iter()
            .any(|c| c.name == job.config && c.claim.is_some());
        g.planned.push(plan::PlannedJob {
            study: job.study.clone(),
            config: job.config.clone(),
            key: job.key(),
            expected_s: e.seconds.ceil(),
            source_row: claimed && source_optimizer == Some(job.train.optimizer),
        });
    }
    bundled.expected_s = estimates.iter().map(|e| e.seconds).sum();
    bundled.expected_basis = basis_counts(&estimates);
    if let Some(plan) = reference::plan(study, &jobs) {
        g.torch_plans.push(plan);
    }
    g.studies.push(bundled);
    Ok(())
}

/// Copies the tokenized corpus `prepared` into `<out>/data/<fingerprint>/` and returns it as
/// the jobs there see it (its folder relative to the bundle).
pub(super) fn copy_corpus(
    out: &Path,
    prepared: &crate::spec::PreparedData,
) -> Result<crate::spec::PreparedData> {
    let data_rel = PathBuf::from("data").join(&prepared.fingerprint);
    std::fs::create_dir_all(out.join(&data_rel))
        .doing(|| format!("creating {}", out.join(&data_rel).display()))?;
    for f in ["train.tokens", "eval.tokens", "tokenizer.json", "meta.json"] {
        let to = out.join(&data_rel).join(f);
        std::fs::copy(prepared.dir.join(f), &to)
            .doing(|| format!("copying {f} to {}", to.display()))?;
    }
    let mut carried = prepared.clone();
    carried.dir = data_rel;
    Ok(carried)
}

/// Refuses an `--only` name that no bundled study has, and a bundle without a training job.
pub(super) fn check_bundled(req: &BundleRequest, g: &Gathered) -> Result<()> {
    if let Some(i) = g.matched_only.iter().position(|m| !m) {
        refuse!(
            "--only {}: no configuration of that name in {}",
            req.only[i],
            req.experiments
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if g.studies.iter().all(|s| s.jobs.is_empty()) {
        refuse!("nothing to bundle: no training job in the given experiment files");
    }
    Ok(())
}

/// Writes the PyTorch reference into `<out>/reference/`: the script (and the attribution
/// benchmark's script beside it, if there) and one plan per study. Returns each PyTorch row
/// with its expected seconds for the run plan.
pub(super) fn write_torch_reference(
    out: &Path,
    script: &Path,
    torch_plans: &[reference::TorchPlan],
    job_seconds: &std::collections::BTreeMap<(String, String), f64>,
    runs: &Path,
) -> Result<Vec<plan::PlannedTorch>> {
    let dir = out.join(REFERENCE_DIR);
    std::fs::create_dir_all(&dir).doing(|| format!("creating {}", dir.display()))?;
    std::fs::copy(script, dir.join("torch_peak_memory.py"))
        .doing(|| format!("copying {}", script.display()))?;
    // The attribution benchmark's PyTorch side sits beside the reference script.
    let attribution = script.with_file_name(ATTRIBUTION_SCRIPT);
    if attribution.is_file() {
        std::fs::copy(&attribution, dir.join(ATTRIBUTION_SCRIPT))
            .doing(|| format!("copying {}", attribution.display()))?;
    }
    let mut names = Vec::new();
    for plan in torch_plans {
        let file = dir.join(format!("{}.plan.json", plan.study));
        results::write_atomic(&file, &serde_json::to_vec_pretty(plan)?)?;
        let (stored, _) = reference::load_rows(runs, &plan.study);
        for c in &plan.configs {
            let compiled = c.compile || c.activation_memory_budget.is_some();
            if let Some(secs) = torch_seconds_of_rows(&stored, plan, &c.name) {
                names.push(plan::PlannedTorch {
                    study: plan.study.clone(),
                    config: c.name.clone(),
                    expected_s: secs.ceil(),
                    compiled,
                });
                continue;
            }
            // PyTorch's eager steps take about memwall's (docs/src/operations/gpu-runs.md), 1.5x
            // for margin; torch.compile (a memory budget compiles too) adds 44-57 s of
            // compilation on an H100.
            let memwall_s = job_seconds
                .get(&(plan.study.clone(), c.name.clone()))
                .copied()
                .unwrap_or(60.0);
            let secs = 1.5 * memwall_s + if compiled { 60.0 } else { 0.0 };
            names.push(plan::PlannedTorch {
                study: plan.study.clone(),
                config: c.name.clone(),
                expected_s: secs.ceil(),
                compiled,
            });
        }
    }
    Ok(names)
}

/// Seconds of a PyTorch reference process besides its steps: Python, `import torch`, the CUDA
/// context, the model's construction and its evaluation. Measured on the H200 run of
/// 2026-11-27 (`peak_memory`, full profile): each row's wall time less its first step and its
/// timed and warm-up steps at the median came to 17-21 s in all 8 rows.
pub const TORCH_STARTUP_S: f64 = 20.0;

/// A PyTorch row's expected seconds from the finished rows `stored` of the same configuration
/// and model shape (the slowest, so the plan errs long): [`TORCH_STARTUP_S`] + the first step
/// (compilation included) + the warm-up and timed steps at the median step time. `None` when
/// no such row is stored.
pub(super) fn torch_seconds_of_rows(
    stored: &[TorchRow],
    plan: &reference::TorchPlan,
    config: &str,
) -> Option<f64> {
    stored
        .iter()
        .filter(|r| {
            r.config == config && r.status == reference::TorchStatus::Ok && r.model == plan.model
        })
        .filter_map(|r| {
            let (first, median) = (r.first_step_s?, r.median_step_s?);
            let steps = (plan.train.warmup_steps + plan.train.steps) as f64;
            Some(TORCH_STARTUP_S + first + steps * median)
        })
        .max_by(f64::total_cmp)
}

/// Writes `manifest.json`, `plan.tsv` and `run.sh` (a CUDA bundle's stops before
/// [`SUITE_MINUTES`] unless told otherwise), refuses a GPU bundle that would not travel
/// ([`check_carry`]; a flex bundle runs where it was made, as `just bench-cpu` does), and writes the archive when asked. Returns the folder's bytes, the working
/// tree's, the archive and its bytes (0 without one).
pub(super) fn write_manifest_and_script(
    req: &BundleRequest,
    manifest: &Manifest,
) -> Result<(u64, u64, Option<PathBuf>, u64)> {
    let out = &req.out;
    results::write_atomic(
        &out.join("manifest.json"),
        &serde_json::to_vec_pretty(manifest)?,
    )?;
    results::write_atomic(
        &out.join(plan::PLAN_FILE),
        plan::plan_tsv(&manifest.tiers).as_bytes(),
    )?;
    let default_minutes = manifest.target.is_gpu().then_some(SUITE_MINUTES);
    let script = script::run_script(manifest, default_minutes);
    let run_sh = out.join("run.sh");
    results::write_atomic(&run_sh, script.as_bytes())?;
    set_executable(&run_sh)?;
    let dir_bytes = dir_size(out)?;
    let tree_bytes = travelling_tree_bytes();
    if manifest.target.is_gpu() {
        check_carry(out, dir_bytes, tree_bytes)?;
    }
    let archive = if req.archive {
        let file = archive_path(out);
        pack_dir(out, &file)?;
        Some(file)
    } else {
        None
    };
    let archive_bytes = match &archive {
        Some(a) => std::fs::metadata(a)
            .doing(|| format!("reading {}", a.display()))?
            .len(),
        None => 0,
    };
    Ok((dir_bytes, tree_bytes, archive, archive_bytes))
}

/// Refuses a bundle folder of `dir_bytes` that, with the `tree_bytes` of the working tree that
/// travels beside it, is over [`CARRY_LIMIT_BYTES`], with the figures and what to leave out.
pub(super) fn check_carry(out: &Path, dir_bytes: u64, tree_bytes: u64) -> Result<()> {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    if dir_bytes + tree_bytes > CARRY_LIMIT_BYTES {
        refuse!(
            "bundle {} is {:.1} MiB and the working tree that travels with it {:.1} MiB: {:.1} \
             MiB, over the {:.0} MiB a GPU session carries; bundle fewer configurations \
             (--only) or studies, leave the compiled kernels out (no --with-kernels), or carry \
             a smaller runner (`just carry`)",
            out.display(),
            mib(dir_bytes),
            mib(tree_bytes),
            mib(dir_bytes + tree_bytes),
            mib(CARRY_LIMIT_BYTES)
        );
    }
    Ok(())
}

/// Bytes of the files a device session sends besides what it is told to carry: the git
/// repository around the current directory, tracked and untracked-not-ignored files (0 when
/// git is missing or this is no repository).
pub(super) fn travelling_tree_bytes() -> u64 {
    let git = crate::git::git_output;
    let Some(top) = git(&["rev-parse", "--show-toplevel"]) else {
        return 0;
    };
    let top = String::from_utf8_lossy(&top).trim().to_string();
    let Some(files) = git(&[
        "-C",
        &top,
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ]) else {
        return 0;
    };
    files
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            std::fs::metadata(Path::new(&top).join(String::from_utf8_lossy(p).as_ref())).ok()
        })
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The finished records of `studies` in the store, as FLOP rates ([`crate::estimate::Rates`]).
pub(super) fn rates_of_store(runs: &Path, studies: &[String]) -> crate::estimate::Rates {
    let mut all = Vec::new();
    for name in studies {
        if let Ok(r) = results::StudyRecords::load(runs, name) {
            all.extend(r.records);
        }
    }
    crate::estimate::Rates::from_records(&all)
}

/// Each job's expected seconds: its own last record in `runs`, or the FLOP rates. Without a
/// carried kernel cache the first job of each (precision, fusion) of the bundle (`warmed`
/// holds those seen in earlier studies) pays the cold start.
pub(super) fn estimate_jobs(
    jobs: &[JobSpec],
    runs: &Path,
    rates: &crate::estimate::Rates,
    cold: bool,
    warmed: &mut std::collections::BTreeSet<(&'static str, bool)>,
) -> Vec<crate::estimate::TimeEstimate> {
    jobs.iter()
        .map(|job| {
            let own = results::read_record(&results::record_dir(runs, &job.study, &job.key()))
                .ok()
                .flatten();
            let mut e = crate::estimate::estimate(job, own.as_ref(), rates);
            let first = warmed.insert((job.strategy.precision.as_str(), job.strategy.fusion));
            if cold && job.backend.is_gpu() && first && e.basis != crate::estimate::Basis::Record {
                e.seconds += crate::estimate::COLD_CACHE_S;
                e.cold_start_s = crate::estimate::COLD_CACHE_S;
            }
            e
        })
        .collect()
}

/// (basis, number of jobs) of `estimates`, most certain basis first.
pub(super) fn basis_counts(estimates: &[crate::estimate::TimeEstimate]) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for e in estimates {
        *counts.entry(e.basis).or_insert(0usize) += 1;
    }
    counts
        .into_iter()
        .map(|(b, n)| (b.as_str().to_string(), n))
        .collect()
}

/// Refuses a runner that cannot run `target`'s jobs, by asking it (`memwall-job backends`).
/// A runner that cannot be asked (another processor, an older build) is carried with a warning.
pub(super) fn check_runner_backend(runner: &Path, target: BackendKind) -> Result<()> {
    let asked = std::process::Command::new(runner).arg("backends").output();
    let listed = match asked {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(_) | Err(_) => {
            tracing::warn!(
                "could not ask the runner {} which backends it was built with (`memwall-job \
                 backends`): carried unchecked",
                runner.display()
            );
            return Ok(());
        }
    };
    if !listed.lines().any(|l| l.trim() == target.as_str()) {
        refuse!(
            "runner {}: built without the {} backend (it runs: {}); build one with `just carry` \
             (the slim CUDA runner) or `cargo build --release --locked --bin memwall-job` with \
             the default features, or name another with --runner",
            runner.display(),
            target.as_str(),
            listed.split_whitespace().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}
