//! `memwall bundle`: the folder (and `.tar.gz`) a GPU machine runs: the runner, the jobs of each
//! study, corpora, caches, the PyTorch twin and attribution scripts, the manifest and
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
    /// The PyTorch twin script to carry (`reference/torch_peak_memory.py`); `None` leaves
    /// the PyTorch column out.
    pub torch_script: Option<PathBuf>,
    /// Also write `<out>.tar.gz`.
    pub archive: bool,
    /// The GPU model the bundle resumes for (`env.device_name`, e.g. "NVIDIA H200"): jobs and
    /// twins the record store holds for it are left out. `None`: the GPU of the newest CUDA
    /// record of the bundled studies ([`resume_model`]).
    pub gpu_model: Option<String>,
    /// Bundle every job and twin, also those the record store holds for the GPU model.
    pub rerun_stored: bool,
    /// Carry a runner built from a tree with uncommitted changes (refused otherwise: its
    /// records would name a revision that does not exist).
    pub allow_dirty: bool,
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
    /// (configuration, reason) of configurations left out (not training jobs, or stored for
    /// the GPU model the bundle resumes for).
    pub left_out: Vec<(String, String)>,
    /// (configuration, reason) of PyTorch twins left out because the record store holds them
    /// for the GPU model the bundle resumes for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out_twins: Vec<(String, String)>,
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

/// Writes a bundle: `<out>/{manifest.json, run.sh, bin/memwall-job (a GPU bundle's as
/// bin/memwall-job.gz), jobs/<study>/<key>/job.json,
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
    let (stripped, cache_files, runner_revision) = write_runner_and_caches(req, paths)?;
    // The records of every study bundled (the suite's share one model family), read once.
    let names: Vec<String> = req
        .experiments
        .iter()
        .filter_map(|e| e.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    let stored = store_records(&paths.runs, &names);
    let resume = if req.target.is_gpu() {
        resume_model(&stored, req.gpu_model.as_deref())
    } else {
        None
    };
    let ctx = StudyCtx {
        req,
        paths,
        cache_rel: PathBuf::from("cache").join("cubecl"),
        rates: crate::estimate::Rates::from_records(&stored),
        resume: resume.clone(),
    };
    let mut g = Gathered::new(req.only.len());
    g.warmed = warm_kinds(&stored, resume.as_ref());
    for experiment in &req.experiments {
        let study = Study::load(experiment, profile, req.data.as_deref())?;
        if study.header.gpu_job == Some(memwall_core::spec::GpuJob::FusionChains) {
            // Its declared GPU job runs in the slim runner (`memwall-job fusion-chains`); the
            // rest of the study is CPU-only and runs in memwall.
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
    let torch_configs = match &req.torch_script {
        Some(script) if !g.torch_plans.is_empty() => {
            let resume = resume.as_ref().filter(|_| !req.rerun_stored);
            let shared = req.target.is_gpu();
            write_torch_reference(out, script, &mut g, resume, &paths.runs, shared)?
        }
        _ => Vec::new(),
    };
    if g.planned.is_empty() && torch_configs.is_empty() && !g.fusion_chains {
        refuse!(
            "nothing left to run: the record store {} holds every job and PyTorch twin of {} \
             for {}; pass --rerun-stored to measure them again, or --gpu-model to bundle for \
             another GPU",
            paths.runs.display(),
            names.join(", "),
            resume
                .as_ref()
                .map(|r| r.gpu_model.as_str())
                .unwrap_or("this GPU")
        );
    }
    let mut manifest = new_manifest(req, profile, g, &torch_configs);
    // The queue in the plan's run order, with the plan's expected seconds (a kind's cold start
    // on the first job of the kind that runs).
    record::write_atomic(
        &out.join("jobs").join(memwall_runner::sweep::QUEUE_FILE),
        tiers::queue_tsv(&manifest.tiers).as_bytes(),
    )?;
    manifest.resume = if req.rerun_stored { None } else { resume };
    manifest.runner_revision = runner_revision;
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
    torch_configs: &[tiers::PlannedTorch],
) -> Manifest {
    let attribution_job = g
        .attribution_jobs
        .first()
        .map(|(study, key)| PathBuf::from("jobs").join(study).join(key).join("job.json"));
    let (burn_s, torch_s) = attribution_seconds(req.target);
    let extras = tiers::Extras {
        attribution: attribution_job.as_ref().map(|job| {
            (
                job.clone(),
                burn_s as f64,
                req.torch_script.is_some().then_some(torch_s as f64),
            )
        }),
        chains: g.fusion_chains.then_some(CHAINS_S as f64),
    };
    // A GPU bundle's tiers each fit one command (its minutes less the packing and the device
    // check); a CPU bundle runs where it was made, one tier per stage.
    let budget = req
        .target
        .is_gpu()
        .then_some(SUITE_MINUTES * 60.0 - script::PACK_S as f64 - DEVICE_CHECK_S);
    let tiers = tiers::tiers(&g.planned, torch_configs, &extras, budget);
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
            &tiers,
            attribution_job.is_some(),
        ),
        attribution_job,
        fusion_chains: g.fusion_chains,
        tiers,
        resume: None,
        runner_revision: String::new(),
    }
}

/// Seconds `run.sh` spends before its first step on a GPU machine (the device check, NVRTC's
/// search, `import torch` to ask PyTorch's version, the first packing): at most 15 s on the
/// H200 run of 2026-11-27; kept out of every tier's budget.
pub const DEVICE_CHECK_S: f64 = 15.0;

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

/// Copies the runner into `<out>/bin` (after checking it runs the target's backend; a GPU
/// bundle's gzip-compressed as `bin/memwall-job.gz`, [`compress_runner`]) and the
/// kernel caches into `<out>/cache`: the committed autotune cache ([`autotune_store`]), the
/// local CubeCL cache (its autotune results; its compiled kernels too with `with_kernels`) and
/// the `--autotune-cache` archive. Returns whether the runner was stripped and the cache files
/// copied from the committed and local caches, and the runner's revision
/// ([`check_runner_revision`]).
pub(super) fn write_runner_and_caches(
    req: &BundleRequest,
    paths: &Paths,
) -> Result<(bool, usize, String)> {
    let out = &req.out;
    std::fs::create_dir_all(out.join("bin"))
        .doing(|| format!("creating {}", out.join("bin").display()))?;
    check_runner_backend(&req.runner, req.target)?;
    // A CPU bundle runs where it was made (`just bench-cpu` measures uncommitted changes);
    // a GPU bundle's records are committed as evidence.
    let revision = check_runner_revision(&req.runner, req.allow_dirty || !req.target.is_gpu())?;
    let bin = out.join("bin").join("memwall-job");
    let _ = std::fs::remove_file(bin.with_extension("gz"));
    let stripped = copy_runner(&req.runner, &bin)?;
    if req.target.is_gpu() {
        // It travels compressed; run.sh unpacks it there (`unpack_runner`).
        compress_runner(&bin)?;
    }
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
    Ok((stripped, cache_files, revision))
}

/// The revision `runner` was built from (`memwall-job version`: `memwall-job VERSION
/// REVISION`), refusing one built from a tree with uncommitted changes (`-dirty`) unless
/// `allow_dirty`: its records would name a revision that does not exist. A runner that cannot
/// be asked gives "unknown".
pub(super) fn check_runner_revision(runner: &Path, allow_dirty: bool) -> Result<String> {
    let revision = std::process::Command::new(runner)
        .arg("version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(2)
                .map(String::from)
        })
        .unwrap_or_else(|| "unknown".into());
    if revision.ends_with("-dirty") && !allow_dirty {
        refuse!(
            "runner {}: built from a tree with uncommitted changes (revision {revision}), so \
             its records would name a revision that does not exist; commit the changes and \
             rebuild it (`just carry`), or pass --allow-dirty (each record then says which \
             files differed from the commit, `env.source_changes`)",
            runner.display()
        );
    }
    Ok(revision)
}

/// What every training study of a bundle is written with.
pub(super) struct StudyCtx<'a> {
    req: &'a BundleRequest,
    paths: &'a Paths,
    /// The jobs' CubeCL cache folder, relative to the bundle.
    cache_rel: PathBuf,
    /// FLOP rates of the store's records, for the expected times.
    rates: crate::estimate::Rates,
    /// The GPU model whose stored rows are left out (unless `--rerun-stored`).
    resume: Option<ResumeFor>,
}

/// What [`bundle`] gathers study by study, for the manifest, run.sh and the PyTorch twin.
pub(super) struct Gathered {
    studies: Vec<BundledStudy>,
    torch_plans: Vec<twin::TwinJobs>,
    /// Per `--only` name, whether a bundled study has it.
    matched_only: Vec<bool>,
    /// Expected warm seconds of each (study, configuration)'s job.
    job_seconds: std::collections::BTreeMap<(String, String), f64>,
    /// (study, key) of the attribution study's control jobs.
    attribution_jobs: Vec<(String, String)>,
    /// Whether `fusion_ir`'s chains are bundled.
    fusion_chains: bool,
    /// The kernel kinds ([`kernel_kind`]) the carried cache holds tunings for (a record of
    /// the GPU model has them) or whose cold start an earlier estimate already counted
    /// ([`estimate_jobs`]).
    warmed: std::collections::BTreeSet<String>,
    /// Stage and order of every expanded job, bundled or stored: (study, configuration) ->
    /// (stage, sub), for the PyTorch twins' place in the plan.
    stages: std::collections::BTreeMap<(String, String), (tiers::Stage, u8)>,

    /// Every job with its expected seconds and whether it is a source row, for the run plan.
    planned: Vec<tiers::PlannedJob>,
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
            stages: std::collections::BTreeMap::new(),
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
        left_out_twins: Vec::new(),
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
    let claimed = claimed_configs(study);
    let first = g.studies.is_empty();
    let source_optimizer = study
        .configs
        .iter()
        .find(|c| c.control)
        .map(|c| c.optimizer.unwrap_or(study.train.optimizer));
    let resume = ctx.resume.as_ref().filter(|_| !req.rerun_stored);
    // Every expanded job (stored ones too: the PyTorch plan pairs twins with them) and the
    // bundled ones.
    let mut all = Vec::new();
    let mut jobs = Vec::new();
    for job in expanded {
        let source_row = first
            && study
                .configs
                .iter()
                .any(|c| c.name == job.config && c.claim.is_some())
            && source_optimizer == Some(job.train.optimizer);
        let stage = stage_of(&job, first, source_row, &claimed);
        g.stages
            .insert((job.study.clone(), job.config.clone()), stage);
        let stored = resume
            .and_then(|r| stored_record(&ctx.paths.runs, &job.study, &job.key(), &r.gpu_model));
        if let Some(r) = stored {
            let e = crate::estimate::estimate(&job, Some(&r), &ctx.rates);
            g.job_seconds
                .insert((job.study.clone(), job.config.clone()), e.seconds);
            bundled
                .left_out
                .push((job.config.clone(), record_reason(&r)));
            all.push(job);
            continue;
        }
        let dir = out.join("jobs").join(&job.study).join(job.key());
        std::fs::create_dir_all(&dir).doing(|| format!("creating {}", dir.display()))?;
        record::write_atomic(&dir.join("job.json"), &serde_json::to_vec_pretty(&job)?)?;
        bundled.jobs.push((job.config.clone(), job.key()));
        if study.header.kernel_attribution && job.control && !job.strategy.fusion {
            g.attribution_jobs.push((job.study.clone(), job.key()));
        }
        jobs.push(job.clone());
        all.push(job);
    }
    let estimates = estimate_jobs(&jobs, &ctx.paths.runs, &ctx.rates, &mut g.warmed);
    for (job, e) in jobs.iter().zip(&estimates) {
        // Warm: PyTorch's rows do not pay CubeCL's cold start.
        let warm = e.seconds - e.cold_start_s;
        g.job_seconds
            .insert((job.study.clone(), job.config.clone()), warm);
        let (stage, sub) = g.stages[&(job.study.clone(), job.config.clone())];
        g.planned.push(tiers::PlannedJob {
            study: job.study.clone(),
            config: job.config.clone(),
            key: job.key(),
            expected_s: e.seconds.ceil(),
            stage,
            sub,
            kernels: job.backend.is_gpu().then(|| kernel_kind(job)),
            cold_s: e.cold_start_s,
        });
    }
    bundled.expected_s = estimates.iter().map(|e| e.seconds).sum();
    bundled.expected_basis = basis_counts(&estimates);
    if let Some(plan) = twin::jobs(study, &all) {
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
    if g.studies
        .iter()
        .all(|s| s.jobs.is_empty() && s.left_out.is_empty())
    {
        refuse!("nothing to bundle: no training job in the given experiment files");
    }
    Ok(())
}

/// Writes the PyTorch twin into `<out>/reference/`: the script (and the attribution
/// benchmark's script beside it, if there) and one plan per study. Returns each PyTorch row
/// to run with its expected seconds and its place in the run plan; a twin the store holds for
/// the GPU model of `resume` is not run, and its study's `left_out_twins` says why. `shared`:
/// run.sh runs a tier's twins in one Python process (a GPU target), so each twin's
/// [`TORCH_PROCESS_START_S`] is paid once per tier ([`tiers::PlannedTorch::start_s`]).
pub(super) fn write_torch_reference(
    out: &Path,
    script: &Path,
    g: &mut Gathered,
    resume: Option<&ResumeFor>,
    runs: &Path,
    shared: bool,
) -> Result<Vec<tiers::PlannedTorch>> {
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
    for plan in &g.torch_plans {
        let file = dir.join(format!("{}.plan.json", plan.study));
        record::write_atomic(&file, &serde_json::to_vec_pretty(plan)?)?;
        let (stored, _) = twin::load_rows(runs, &plan.study);
        for c in &plan.configs {
            let compiled = c.compile || c.activation_memory_budget.is_some();
            if let Some(row) =
                resume.and_then(|r| stored_twin(&stored, plan, &c.name, &r.gpu_model))
            {
                if let Some(st) = g.studies.iter_mut().find(|s| s.name == plan.study) {
                    st.left_out_twins.push((c.name.clone(), twin_reason(row)));
                }
                continue;
            }
            // From a stored row of the same shape (any device); else Python's start and
            // memwall's warm job time (the H200 run of 2026-11-27: the eager twins' steps, the
            // first and 8 at the median, took 3-9 s beside memwall jobs of 10-15 s wall, so
            // this errs long), plus 60 s of compilation for torch.compile (a memory budget
            // compiles too; 44-57 s on an H100, first steps of 39 s and 51 s on the H200).
            let expected_s = torch_seconds_of_rows(&stored, plan, &c.name).unwrap_or_else(|| {
                let memwall_s = g
                    .job_seconds
                    .get(&(plan.study.clone(), c.name.clone()))
                    .copied()
                    .unwrap_or(60.0);
                TORCH_STARTUP_S + memwall_s + if compiled { 60.0 } else { 0.0 }
            });
            let (stage, sub) = g
                .stages
                .get(&(plan.study.clone(), c.name.clone()))
                .copied()
                .unwrap_or((tiers::Stage::Last, 0));
            names.push(tiers::PlannedTorch {
                study: plan.study.clone(),
                config: c.name.clone(),
                expected_s: expected_s.ceil(),
                compiled,
                stage,
                sub,
                start_s: if shared { TORCH_PROCESS_START_S } else { 0.0 },
            });
        }
    }
    Ok(names)
}

/// Seconds of a PyTorch twin process besides its steps: Python, `import torch`, the CUDA
/// context, the model's construction and its evaluation. Measured on the H200 run of
/// 2026-11-27 (`peak_memory`, full profile): each row's wall time less its first step and its
/// timed and warm-up steps at the median came to 17-21 s in all 8 rows.
pub const TORCH_STARTUP_S: f64 = 20.0;

/// Of [`TORCH_STARTUP_S`], the seconds only a fresh process pays (Python, `import torch`, the
/// CUDA context), which a twin served after another in the same process
/// (`torch_peak_memory.py --serve`) does not; the rest (building the model, evaluating it) it
/// pays again. An assumption, not a measurement: the H200 rows of 2026-11-27 give the 17-21 s
/// whole, not split. The rows now carry `process_order` and `wall_s`, from which the next GPU
/// run measures the split.
pub const TORCH_PROCESS_START_S: f64 = 15.0;

/// A PyTorch row's expected seconds from the finished rows `stored` of the same configuration
/// and model shape (the slowest, so the plan errs long): [`TORCH_STARTUP_S`] + the first step
/// (compilation included) + the warm-up and timed steps at the median step time. `None` when
/// no such row is stored.
pub(super) fn torch_seconds_of_rows(
    stored: &[TorchRow],
    plan: &twin::TwinJobs,
    config: &str,
) -> Option<f64> {
    stored
        .iter()
        .filter(|r| {
            r.config == config && r.status == twin::TorchStatus::Ok && r.model == plan.model
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
    record::write_atomic(
        &out.join("manifest.json"),
        &serde_json::to_vec_pretty(manifest)?,
    )?;
    record::write_atomic(
        &out.join(tiers::PLAN_FILE),
        tiers::plan_tsv(&manifest.tiers, &left_out_lines(manifest)).as_bytes(),
    )?;
    let default_minutes = manifest.target.is_gpu().then_some(SUITE_MINUTES);
    let script = script::run_script(manifest, default_minutes);
    let run_sh = out.join("run.sh");
    record::write_atomic(&run_sh, script.as_bytes())?;
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

/// Every record of `studies` in the store `runs` (a study that does not load gives none), read
/// once per bundle for its FLOP rates, the GPU model it resumes for and the warm kernel kinds.
pub(super) fn store_records(runs: &Path, studies: &[String]) -> Vec<JobRecord> {
    studies
        .iter()
        .filter_map(|name| crate::analysis::StudyRecords::load(runs, name).ok())
        .flat_map(|r| r.records)
        .collect()
}

/// Each job's expected seconds: its own last record in `runs`, or the FLOP rates. A GPU job
/// whose kernel kind ([`kernel_kind`]) is not in `warmed` pays CubeCL's cold start
/// ([`crate::estimate::COLD_CACHE_S`]: JIT compilation and autotuning of every new shape and
/// dtype) and warms the kind for the jobs after it; an estimate from the job's own record
/// already holds its cold start, if any.
pub(super) fn estimate_jobs(
    jobs: &[JobSpec],
    runs: &Path,
    rates: &crate::estimate::Rates,
    warmed: &mut std::collections::BTreeSet<String>,
) -> Vec<crate::estimate::TimeEstimate> {
    jobs.iter()
        .map(|job| {
            let own = record::read_record(&record::record_dir(runs, &job.study, &job.key()))
                .ok()
                .flatten();
            let mut e = crate::estimate::estimate(job, own.as_ref(), rates);
            let new_kind = warmed.insert(kernel_kind(job));
            if job.backend.is_gpu() && new_kind && e.basis != crate::estimate::Basis::Record {
                e.seconds += crate::estimate::COLD_CACHE_S;
                e.cold_start_s = crate::estimate::COLD_CACHE_S;
            }
            e
        })
        .collect()
}

/// The kernels a job compiles and tunes, as a key: the model's shapes (every dimension but the
/// depth, which repeats the same kernels), the precision, Burn's fusion and the attention.
/// Jobs of one kind share their CubeCL autotune entries; a new kind tunes again.
pub fn kernel_kind(job: &JobSpec) -> String {
    let m = &job.model;
    format!(
        "d{}-h{}-ff{}-s{}-b{}-v{}-{}-{}-{:?}",
        m.d_model,
        m.heads,
        m.d_ff,
        m.seq_len,
        m.batch,
        m.vocab,
        job.strategy.precision.as_str(),
        if job.strategy.fusion {
            "fusion"
        } else {
            "nofusion"
        },
        job.strategy.attention
    )
}

/// The kernel kinds the carried autotune cache holds: those of every record in `stored`
/// measured on the GPU model of `resume` (importing a run merges its tunings into the
/// committed cache). Empty without a GPU model.
pub(super) fn warm_kinds(
    stored: &[JobRecord],
    resume: Option<&ResumeFor>,
) -> std::collections::BTreeSet<String> {
    let Some(r) = resume else {
        return std::collections::BTreeSet::new();
    };
    stored
        .iter()
        .filter(|rec| rec.env.device_name == r.gpu_model)
        .map(|rec| kernel_kind(&rec.spec))
        .collect()
}

/// The configurations of `study` that its claims measure: a sweep's points (every interval,
/// its control without checkpointing included), a training measure's configuration, and the
/// study's controls (the denominators of its ratios).
pub fn claimed_configs(study: &Study) -> std::collections::BTreeSet<String> {
    use memwall_core::spec::claims::TrainingTarget;
    let mut out = std::collections::BTreeSet::new();
    for claim in &study.claims {
        match claim.training_target(&study.configs) {
            Ok(TrainingTarget::Sweep(sweep, _)) => out.extend(
                study
                    .configs
                    .iter()
                    .filter(|c| sweep.sweep_point(c).is_some())
                    .map(|c| c.name.clone()),
            ),
            Ok(TrainingTarget::Config(config, _)) => {
                out.insert(config.name.clone());
                out.extend(claim.against.clone());
            }
            Err(_) => {}
        }
    }
    if !out.is_empty() {
        out.extend(
            study
                .configs
                .iter()
                .filter(|c| c.control)
                .map(|c| c.name.clone()),
        );
    }
    out
}

/// Where `job` runs in the plan ([`tiers::Stage`]) and its order inside the stage (f32 before
/// 16-bit): Checkmate rows last; in the first study its source rows first and its other rows
/// last; in a later study the rows its claims measure, then unfused rows, then fused ones.
pub fn stage_of(
    job: &JobSpec,
    first: bool,
    source_row: bool,
    claimed: &std::collections::BTreeSet<String>,
) -> (tiers::Stage, u8) {
    use tiers::Stage;
    let sub = u8::from(job.strategy.precision != crate::spec::Precision::F32);
    let stage = if job.strategy.recompute.checkmate().is_some() {
        Stage::Last
    } else if first {
        if source_row {
            Stage::SourceRows
        } else {
            Stage::Last
        }
    } else if claimed.contains(&job.config) {
        Stage::Claimed
    } else if job.strategy.fusion {
        Stage::Fusion
    } else {
        Stage::Unfused
    };
    (stage, sub)
}

/// What the record store already held, per study, for `plan.tsv`: (study, "memwall CONFIG" or
/// "pytorch CONFIG", reason).
pub(super) fn left_out_lines(m: &Manifest) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for st in &m.studies {
        for (c, why) in &st.left_out {
            out.push((st.name.clone(), format!("memwall {c}"), why.clone()));
        }
        for (c, why) in &st.left_out_twins {
            out.push((st.name.clone(), format!("pytorch {c}"), why.clone()));
        }
    }
    out
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
