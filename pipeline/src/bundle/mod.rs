//! GPU bundles and their import: two stages of the pipeline for a machine without Rust.
//!
//! - [`bundle`] writes one folder (and a `.tar.gz` of it) holding the runner binary, the job
//!   files of one or more studies, their tokenized corpus, the CubeCL kernel and autotune
//!   caches, the PyTorch reference script with its configurations, a `manifest.json` and a
//!   `run.sh`. On the other machine `run.sh` checks the device (and NVRTC for CUDA), runs every
//!   job that has no record yet (one process each, resuming), runs the PyTorch reference when
//!   `python3 -c "import torch"` works, and packs the records into `results.tar.gz`.
//! - [`import`] reads that archive (or the bundle folder itself), checks every record against
//!   the job the local experiment file produces (same key, readable as this memwall's record
//!   schema), and writes the records into the record store (`runs/<study>/<key>/`) through
//!   [`results::write_record`], as the sweep does; PyTorch reference rows go to
//!   `runs/<study>/pytorch/` ([`crate::reference`]). The caller then re-renders the reports.
//!
//! Paths inside the bundle's job files are relative to the bundle folder (`run.sh` starts the
//! runner there), so the folder can be copied anywhere.

pub mod plan;
pub mod script;

use crate::device::BackendKind;
use crate::driver::{self, Paths};
use crate::reference::{self, TorchRow};
use crate::results::{self, JobRecord};
use crate::spec::{JobSpec, MemoryPool, Profile, Study, StudyKind, StudyRoles};
use memwall_core::record::{JsonError, RecordFileError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Why a bundle could not be written or imported. Every message names the file (or flag) and,
/// where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file or folder could not be read, written, copied, packed or unpacked.
    #[error("{action}: {source}")]
    Io {
        /// What was being done, naming the paths (e.g. "copying a to b").
        action: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A step failed; `action` says which (e.g. "unpacking the autotune cache x.tgz").
    #[error("{action}: {source}")]
    Context {
        /// What was being done.
        action: String,
        /// Why it failed.
        #[source]
        source: Box<BundleError>,
    },
    /// The request or the bundle is refused: what is wrong, naming the file or flag, and the fix.
    #[error("{0}")]
    Refused(String),
    /// The source has no readable `manifest.json`.
    #[error(
        "{path}: {source}; not a memwall bundle or results archive (expected manifest.json at \
         its top, as `memwall bundle` and its run.sh write)"
    )]
    NoManifest {
        /// Where the manifest was looked for.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `manifest.json` does not read as a bundle manifest.
    #[error("{path}: not a bundle manifest ({source})")]
    NotAManifest {
        /// The manifest file.
        path: PathBuf,
        /// The JSON field at fault, line and column.
        #[source]
        source: JsonError,
    },
    /// A bundle file (job, plan, record) does not serialize.
    #[error("serializing a bundle file: {0}")]
    Serialize(#[from] serde_json::Error),
    /// An experiment file, corpus, job expansion or record store error (naming file and field).
    #[error(transparent)]
    Core(#[from] crate::Error),
    /// A PyTorch reference row that does not read or store (naming the file).
    #[error(transparent)]
    Reference(#[from] reference::ReferenceError),
    /// A results file (fusion chains run, attribution rows) that does not read (naming the file).
    #[error(transparent)]
    Record(#[from] RecordFileError),
}

type Result<T, E = BundleError> = std::result::Result<T, E>;

/// `Err(BundleError::Refused(..))` with a formatted message.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err(BundleError::Refused(format!($($arg)*)))
    };
}

/// Names what was being done when an I/O step or a bundle step fails.
trait Doing<T> {
    fn doing(self, action: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Doing<T> for std::io::Result<T> {
    fn doing(self, action: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| BundleError::Io {
            action: action(),
            source,
        })
    }
}

impl<T> Doing<T> for Result<T> {
    fn doing(self, action: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| BundleError::Context {
            action: action(),
            source: Box::new(e),
        })
    }
}

/// `format` field of a bundle's `manifest.json`.
pub const MANIFEST_FORMAT: &str = "memwall-bundle/1";
/// Name of the archive `run.sh` packs the records into.
pub const RESULTS_ARCHIVE: &str = "results.tar.gz";
/// Folder (inside the bundle) of the PyTorch reference script, its plan and its results.
const REFERENCE_DIR: &str = "reference";

// The GPU suite (`memwall bundle --suite`, `just gpu-suite`) is named by the experiment files:
// each study's `study.gpu_suite` is its place in the order a GPU session runs them (the first
// matters most when its minutes run out), read by `StudyRoles::discover`; the suite's
// `fusion_ir` study carries its elementwise chains with and without Burn's fusion backend
// (`memwall-job fusion-chains`) and the `kernel_attribution` study its control's operation
// timings.

/// Where run.sh writes the chains' run inside the bundle.
const CHAINS_FILE: &str = "fusion_ir/chains.json";

/// The experiment files of the GPU suite in `experiments`, in suite order (`study.gpu_suite`).
///
/// # Errors
/// Experiment files whose headers do not read ([`StudyRoles::discover`]), or none in the suite.
pub fn suite_experiments(experiments: &Path) -> Result<Vec<PathBuf>> {
    let roles = StudyRoles::discover(experiments)?;
    if roles.suite.is_empty() {
        refuse!(
            "no experiment file in {} has `study.gpu_suite`: the GPU suite is empty (give the \
             studies a GPU session should run their places, 1 first)",
            experiments.display()
        );
    }
    Ok(roles.suite.into_iter().map(|(_, _, path)| path).collect())
}

/// The attribution benchmark's PyTorch script, beside the reference script.
const ATTRIBUTION_SCRIPT: &str = "torch_attribution.py";
/// Expected seconds of the attribution benchmark's Burn side on a GPU: about 30 operations x 2
/// dtypes x 13 timed runs, plus the autotuning of the shapes a warm cache lacks (20-30 s each,
/// docs/src/operations/gpu-runs.md) and one profiled step per dtype; a guess until a GPU run measures it.
const ATTRIBUTION_BURN_S: u64 = 240;
/// Expected seconds of its PyTorch side (cuBLAS and SDPA need no tuning).
const ATTRIBUTION_TORCH_S: u64 = 90;
/// Folder (inside the bundle) of the attribution benchmark's rows.
const ATTRIBUTION_DIR: &str = "attribution";

/// Bytes a device session carries to the GPU machine, the bundle and the repository's working
/// tree together (docs/src/operations/gpu-runs.md).
pub const CARRY_LIMIT_BYTES: u64 = 64 << 20;

/// The committed CubeCL autotune cache, beside the record store (`gpu-cache/cubecl` for
/// `runs/`): the tunings of every GPU run imported so far (`autotune/<cubecl version>/<device
/// folder>/*.json.log`), carried by every bundle so that a GPU job starts in seconds rather than
/// the 41-159 s of cold tuning (docs/src/operations/gpu-runs.md). Compiled kernels are not kept: they are
/// large (83 MB for 13 configurations) and NVRTC recompiles them in seconds.
pub fn autotune_store(runs: &Path) -> PathBuf {
    runs.parent()
        .unwrap_or(Path::new(""))
        .join("gpu-cache")
        .join("cubecl")
}

/// The minutes one command of a GPU session may run, with a margin for the machine's transfers
/// (a command runs at most 10 minutes, a session has 15 device minutes with the machine's start
/// of 2-4 minutes; docs/src/operations/gpu-runs.md): a CUDA bundle's `run.sh` stops before them unless
/// `--minutes` says otherwise.
pub const SUITE_MINUTES: f64 = 9.0;

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

/// `manifest.json` of a bundle (also packed into `results.tar.gz`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// RFC 3339 time the bundle was written.
    pub created_at: String,
    /// `git rev-parse --short HEAD` of the repository it was written from, `-dirty` appended
    /// when tracked files had uncommitted changes (`unknown` outside git). Each job records the
    /// revision its runner was built from (embedded at build time), which can differ.
    pub git_revision: String,
    /// memwall's version.
    pub memwall_version: String,
    /// Backend of the jobs.
    pub target: BackendKind,
    /// Size profile of the jobs.
    pub profile: Profile,
    /// `--memory-cleanup` applied to every job.
    pub memory_cleanup: bool,
    /// `--memory-pool` applied to every job.
    pub memory_pool: Option<MemoryPool>,
    /// The studies.
    pub studies: Vec<BundledStudy>,
    /// The job file (relative to the bundle) whose model and device the attribution benchmark
    /// times (`memwall-job bench`, `reference/torch_attribution.py`): the first control of
    /// `peak_memory` without kernel fusion; `None` when that study is not bundled.
    #[serde(default)]
    pub attribution_job: Option<PathBuf>,
    /// Whether run.sh runs `fusion_ir`'s chains (`memwall-job fusion-chains`).
    #[serde(default)]
    pub fusion_chains: bool,
    /// Expected device seconds of what run.sh runs after the jobs: (part, seconds), e.g.
    /// ("PyTorch reference", 606.0).
    #[serde(default)]
    pub extra_expected_s: Vec<(String, f64)>,
    /// The run plan: every step in tiers, in the order run.sh runs them (`plan.tsv`; empty in
    /// bundles written before the plan existed).
    #[serde(default)]
    pub tiers: Vec<plan::Tier>,
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
fn new_manifest(
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
        git_revision: crate::nightly::git_revision(),
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
fn check_request(req: &BundleRequest) -> Result<()> {
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
fn write_runner_and_caches(req: &BundleRequest, paths: &Paths) -> Result<(bool, usize)> {
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
struct StudyCtx<'a> {
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
struct Gathered {
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
fn bundle_study(ctx: &StudyCtx, g: &mut Gathered, experiment: &Path, study: &Study) -> Result<()> {
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
fn copy_corpus(
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
fn check_bundled(req: &BundleRequest, g: &Gathered) -> Result<()> {
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
fn write_torch_reference(
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
fn torch_seconds_of_rows(
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
fn write_manifest_and_script(
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
fn check_carry(out: &Path, dir_bytes: u64, tree_bytes: u64) -> Result<()> {
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
fn travelling_tree_bytes() -> u64 {
    let git = crate::nightly::git_output;
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
fn rates_of_store(runs: &Path, studies: &[String]) -> crate::estimate::Rates {
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
fn estimate_jobs(
    jobs: &[JobSpec],
    runs: &Path,
    rates: &crate::estimate::Rates,
    cold: bool,
    warmed: &mut std::collections::BTreeSet<(&'static str, bool)>,
) -> Vec<crate::estimate::Estimate> {
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
fn basis_counts(estimates: &[crate::estimate::Estimate]) -> Vec<(String, usize)> {
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
fn check_runner_backend(runner: &Path, target: BackendKind) -> Result<()> {
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

/// Copies a CubeCL cache root `from` into `to` ([`copy_tree`]); with `autotune_only`, only the
/// files under an `autotune` folder (the tunings, not the compiled kernels).
fn copy_cache(from: &Path, to: &Path, autotune_only: bool) -> Result<usize> {
    if !autotune_only {
        return copy_tree(from, to);
    }
    let mut n = 0;
    for entry in std::fs::read_dir(from).doing(|| format!("listing {}", from.display()))? {
        let entry = entry.doing(|| format!("listing {}", from.display()))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_name() == "autotune" && src.is_dir() {
            n += copy_tree(&src, &dst)?;
        } else if src.is_dir() {
            n += copy_cache(&src, &dst, true)?;
        }
    }
    Ok(n)
}

/// Copies the files under `from` into `to` (folders created, files overwritten); returns how
/// many files it copied.
fn copy_tree(from: &Path, to: &Path) -> Result<usize> {
    std::fs::create_dir_all(to).doing(|| format!("creating {}", to.display()))?;
    let mut n = 0;
    for entry in std::fs::read_dir(from).doing(|| format!("listing {}", from.display()))? {
        let entry = entry.doing(|| format!("listing {}", from.display()))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            n += copy_tree(&src, &dst)?;
        } else if src.is_file() {
            std::fs::copy(&src, &dst)
                .doing(|| format!("copying {} to {}", src.display(), dst.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

/// `<out>.tar.gz` beside the folder `out`.
pub fn archive_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle".into());
    out.with_file_name(format!("{name}.tar.gz"))
}

/// Copies the runner to `to`, stripped when a `strip` program exists; returns whether it was.
fn copy_runner(from: &Path, to: &Path) -> Result<bool> {
    let _ = std::fs::remove_file(to);
    let stripped = std::process::Command::new("strip")
        .arg("-o")
        .arg(to)
        .arg(from)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !stripped {
        std::fs::copy(from, to)
            .doing(|| format!("copying the runner {} to {}", from.display(), to.display()))?;
    }
    set_executable(to)?;
    Ok(stripped)
}

fn set_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .doing(|| format!("making {} executable", path.display()))
}

/// Total bytes of the regular files under `dir`.
fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).doing(|| format!("listing {}", dir.display()))? {
        let entry = entry.doing(|| format!("listing {}", dir.display()))?;
        let meta = entry
            .metadata()
            .doing(|| format!("reading {}", entry.path().display()))?;
        if meta.is_dir() {
            total += dir_size(&entry.path())?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

/// Packs the folder `dir` into the gzip-compressed tar `file`, under the folder's own name
/// (so unpacking it recreates the folder). The archive is written beside and renamed into place.
fn pack_dir(dir: &Path, file: &Path) -> Result<()> {
    let tmp = file.with_extension("gz.partial");
    let f = std::fs::File::create(&tmp).doing(|| format!("creating {}", tmp.display()))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    let name = dir
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| "bundle".into());
    tar.append_dir_all(&name, dir)
        .doing(|| format!("packing {}", dir.display()))?;
    tar.into_inner()
        .and_then(|gz| gz.finish())
        .doing(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).doing(|| format!("writing {}", file.display()))?;
    Ok(())
}

/// Unpacks the gzip-compressed tar `file` into `into` (entries that would leave `into` are
/// refused by the `tar` crate's `unpack_in`).
fn unpack_tgz(file: &Path, into: &Path) -> Result<()> {
    let f = std::fs::File::open(file).doing(|| format!("opening {}", file.display()))?;
    let mut magic = [0u8; 2];
    {
        use std::io::Read;
        let mut probe =
            std::fs::File::open(file).doing(|| format!("opening {}", file.display()))?;
        probe
            .read_exact(&mut magic)
            .doing(|| format!("reading {}", file.display()))?;
    }
    if magic != [0x1f, 0x8b] {
        refuse!(
            "{} is not a gzip-compressed tar archive (expected a .tar.gz/.tgz, e.g. {RESULTS_ARCHIVE})",
            file.display()
        );
    }
    std::fs::create_dir_all(into).doing(|| format!("creating {}", into.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(f));
    for entry in archive
        .entries()
        .doing(|| format!("reading {}", file.display()))?
    {
        let mut entry = entry.doing(|| format!("reading {}", file.display()))?;
        entry
            .unpack_in(into)
            .doing(|| format!("unpacking {} into {}", file.display(), into.display()))?;
    }
    Ok(())
}

impl Manifest {
    /// Expected device seconds of the whole bundle: its studies' jobs and what run.sh runs
    /// after them.
    pub fn expected_total_s(&self) -> f64 {
        self.studies.iter().map(|s| s.expected_s).sum::<f64>()
            + self.extra_expected_s.iter().map(|(_, s)| s).sum::<f64>()
    }
}

/// Expected seconds of run.sh's parts after the jobs, as run.sh budgets them.
fn extra_expected(
    target: BackendKind,
    chains: bool,
    torch: &[plan::PlannedTorch],
    attribution: bool,
) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    if chains {
        out.push(("fusion_ir chains".to_string(), CHAINS_S as f64));
    }
    if !torch.is_empty() {
        let s: f64 = torch.iter().map(|t| t.expected_s).sum();
        out.push((format!("{} PyTorch reference rows", torch.len()), s));
    }
    if attribution {
        let (b, t) = attribution_seconds(target);
        let t = if torch.is_empty() { 0 } else { t };
        out.push(("attribution benchmark".to_string(), (b + t) as f64));
    }
    out
}

/// Expected seconds of the attribution benchmark's Burn and PyTorch sides on `target`.
fn attribution_seconds(target: BackendKind) -> (u64, u64) {
    if target.is_gpu() {
        (ATTRIBUTION_BURN_S, ATTRIBUTION_TORCH_S)
    } else {
        (30, 60)
    }
}

/// Expected seconds of `fusion_ir`'s chains (a CUDA start-up and two kernel compilations).
const CHAINS_S: u64 = 60;

/// The expected device time of a bundle, for its run.sh and `memwall bundle`'s output, e.g.
/// `peak_memory 9.5 min, checkpoint_interval 7.1 min; 16.6 min in all`.
pub fn expected_line(m: &Manifest) -> String {
    let per: Vec<String> = m
        .studies
        .iter()
        .map(|s| format!("{} {:.1} min", s.name, s.expected_s / 60.0))
        .collect();
    let extras = m
        .extra_expected_s
        .iter()
        .map(|(part, s)| format!("{part} {:.1} min", s / 60.0));
    let per: Vec<String> = per.into_iter().chain(extras).collect();
    format!(
        "{}; {:.1} min in all",
        per.join(", "),
        m.expected_total_s() / 60.0
    )
}

/// What [`import`] did.
#[derive(Debug, Clone, Default)]
pub struct ImportSummary {
    /// Records written into the store.
    pub imported: usize,
    /// Records already in the store (same key), left as they were.
    pub already: usize,
    /// PyTorch reference rows written.
    pub torch_rows: usize,
    /// Attribution benchmark files copied into `runs/<study>/attribution/`.
    pub attribution_files: usize,
    /// What became of the bundle's `fusion_ir` chains run (imported, or why not); `None`
    /// without one.
    pub fusion_chains: Option<String>,
    /// Files of the bundle's CubeCL cache merged into the local one.
    pub cache_files: usize,
    /// Autotune files of the bundle's cache merged into the committed autotune cache
    /// ([`autotune_store`] of the record store).
    pub autotune_files: usize,
    /// Studies with new rows (their reports to re-render), by experiment file.
    pub studies: Vec<PathBuf>,
    /// Records refused (path, reason); non-empty only with `skip_mismatched`.
    pub refused: Vec<(PathBuf, String)>,
    /// Every accepted record of the bundle (imported now or already in the store), in the
    /// order of its manifest: what `memwall import --nightly` makes a history entry of.
    pub records: Vec<JobRecord>,
    /// The bundle's manifest (`None` only in a default value).
    pub manifest: Option<Manifest>,
}

/// Where an import reads from and writes to.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    /// A bundle folder, a bundle archive (`<bundle>.tar.gz`) or `results.tar.gz`.
    pub source: PathBuf,
    /// The record store (`runs/`).
    pub runs: PathBuf,
    /// Where the local experiment files are (`experiments/`); a study is found by its name.
    pub experiments: PathBuf,
    /// Scratch folder an archive is unpacked into.
    pub scratch: PathBuf,
    /// Replace records already in the store.
    pub force: bool,
    /// Import the matching records and list the others, instead of refusing the whole import.
    pub skip_mismatched: bool,
    /// The local CubeCL cache (`.memwall/cache/cubecl`) that the bundle's `cache/cubecl`
    /// (compiled kernels, autotune results) is merged into, for the next bundle to carry.
    pub cubecl_cache: PathBuf,
}

/// Imports the records of a bundle (folder or archive) into the record store.
///
/// Every `jobs/<study>/<key>/record.json` must read as this memwall's record schema, carry the
/// key of its own job, sit in the folder of that key, and have the key of the job the local
/// experiment file (found by study name in `experiments`) produces for its configuration at the
/// bundle's profile, backend, corpus and settings. Otherwise nothing is written (or, with
/// `skip_mismatched`, that record is left out) and the error names each file and why.
///
/// # Errors
/// A source that is not a bundle (no `manifest.json`), an unknown manifest format, a study with
/// no local experiment file, refused records, and I/O errors naming the path.
pub fn import(req: &ImportRequest) -> Result<ImportSummary> {
    let root = open_source(req)?;
    let manifest = read_manifest(&root)?;
    let mut summary = ImportSummary::default();
    let (accepted, torch) = check_bundle(req, &root, &manifest, &mut summary)?;
    if !summary.refused.is_empty() && !req.skip_mismatched {
        refuse!(
            "refused {} record(s) of {} (nothing imported; `--skip-mismatched` imports the \
             others):\n{}",
            summary.refused.len(),
            req.source.display(),
            summary
                .refused
                .iter()
                .map(|(p, r)| format!("  {}: {r}", p.display()))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    store_records(req, &accepted, &mut summary)?;
    summary.records = accepted.into_iter().map(|(_, r)| r).collect();
    for (study, row) in &torch {
        reference::store_row(&req.runs, study, row)?;
        summary.torch_rows += 1;
    }
    import_extras(req, &root, &mut summary)?;
    summary.manifest = Some(manifest);
    Ok(summary)
}

/// The bundle's `manifest.json` under `root`.
///
/// # Errors
/// A missing or unreadable manifest, and one of another format.
fn read_manifest(root: &Path) -> Result<Manifest> {
    let manifest_path = root.join("manifest.json");
    let text =
        std::fs::read_to_string(&manifest_path).map_err(|source| BundleError::NoManifest {
            path: manifest_path.clone(),
            source,
        })?;
    let manifest: Manifest =
        results::parse_json(&text).map_err(|source| BundleError::NotAManifest {
            path: manifest_path.clone(),
            source,
        })?;
    if manifest.format != MANIFEST_FORMAT {
        refuse!(
            "{}: field `format`: {} is not {MANIFEST_FORMAT}; import it with the memwall that \
             wrote it",
            manifest_path.display(),
            manifest.format
        );
    }
    Ok(manifest)
}

/// A record of the bundle that passed [`check_record`] (its file and the record).
type Accepted = Vec<(PathBuf, JobRecord)>;

/// Checks every record of the bundle at `root` against its local experiment file and reads its
/// PyTorch rows: returns the accepted records and the rows (by study), and adds the refused
/// records and the studies with new rows to `summary`.
///
/// # Errors
/// A study with no local experiment file, unreadable experiment files, record folders or rows.
fn check_bundle(
    req: &ImportRequest,
    root: &Path,
    manifest: &Manifest,
    summary: &mut ImportSummary,
) -> Result<(Accepted, Vec<(String, TorchRow)>)> {
    let mut accepted = Vec::new();
    let mut torch = Vec::new();
    for bundled in &manifest.studies {
        let experiment = find_experiment(&req.experiments, &bundled.name)?;
        let study = Study::load(&experiment, manifest.profile, None)?;
        let dir = root.join("jobs").join(&bundled.name);
        let mut found = false;
        for record_file in record_files(&dir)? {
            found = true;
            match check_record(&record_file, &study, &experiment, manifest, bundled) {
                Ok(record) => accepted.push((record_file, record)),
                Err(reason) => summary.refused.push((record_file, reason)),
            }
        }
        let rows = reference::read_rows(&root.join(REFERENCE_DIR).join("results"), &bundled.name)?;
        if found || !rows.is_empty() {
            summary.studies.push(experiment.clone());
        }
        torch.extend(rows.into_iter().map(|r| (bundled.name.clone(), r)));
    }
    Ok((accepted, torch))
}

/// The folder of `record` in the store `runs`: `<study>/<key>`, or `<study>/<key>.<device>`
/// when `<key>` holds the same job measured on another device model (peaks and speed differ by
/// card: CubeCL's pool pages follow the device's memory), so that each model keeps its row.
pub fn store_dir(runs: &Path, record: &JobRecord) -> PathBuf {
    let dir = results::record_dir(runs, &record.spec.study, &record.key);
    match results::read_record(&dir) {
        Ok(Some(there))
            if !record.env.device_name.is_empty()
                && there.env.device_name != record.env.device_name =>
        {
            dir.with_file_name(format!(
                "{}.{}",
                record.key,
                memwall_core::record::attribution::slug(&record.env.device_name)
            ))
        }
        _ => dir,
    }
}

/// Writes the `accepted` records (with their job file and log) into the store, leaving a
/// record already there (same key, same device model) as it is unless `req.force`; a record
/// of the same key from another device model is kept beside it ([`store_dir`]). Counts both
/// in `summary`.
fn store_records(
    req: &ImportRequest,
    accepted: &[(PathBuf, JobRecord)],
    summary: &mut ImportSummary,
) -> Result<()> {
    for (file, record) in accepted {
        let dir = store_dir(&req.runs, record);
        if !req.force {
            if let Ok(Some(_)) = results::read_record(&dir) {
                summary.already += 1;
                continue;
            }
        }
        std::fs::create_dir_all(&dir).doing(|| format!("creating {}", dir.display()))?;
        results::write_atomic(
            &dir.join("job.json"),
            &serde_json::to_vec_pretty(&record.spec)?,
        )?;
        if let Some(src) = file.parent().map(|p| p.join("job.log")) {
            if src.is_file() {
                std::fs::copy(&src, dir.join("job.log"))
                    .doing(|| format!("copying {}", src.display()))?;
            }
        }
        results::write_record(&dir, record)?;
        summary.imported += 1;
    }
    Ok(())
}

/// Imports what the bundle at `root` carries besides records and PyTorch rows: the
/// `fusion_ir` chains run, the attribution benchmark's files (adding their studies to
/// `summary.studies`) and the CubeCL cache.
fn import_extras(req: &ImportRequest, root: &Path, summary: &mut ImportSummary) -> Result<()> {
    let chains = root.join(CHAINS_FILE);
    let attribution = root.join(ATTRIBUTION_DIR);
    if chains.is_file() || attribution.is_dir() {
        let roles = StudyRoles::discover(&req.experiments)?;
        // The study that claims a carried file (`role` says how a file claims it).
        let claimant = |name: Option<&str>, what: &str, role: &str| -> Result<(String, PathBuf)> {
            match name.and_then(|n| Some((n, roles.file(n)?))) {
                Some((n, file)) => Ok((n.to_string(), file.to_path_buf())),
                None => refuse!(
                    "the bundle carries {what}, but no experiment file in {} claims it (`{role}`)",
                    req.experiments.display()
                ),
            }
        };
        if chains.is_file() {
            let (name, file) = claimant(
                roles.chains(),
                "fusion chains",
                "study.gpu_suite on the fusion_ir study",
            )?;
            summary.fusion_chains = import_chains(&chains, &req.runs.join(&name))?;
            if summary
                .fusion_chains
                .as_deref()
                .is_some_and(|m| m.starts_with("imported"))
            {
                summary.studies.push(file);
            }
        }
        if attribution.is_dir() {
            let (name, file) = claimant(
                roles.attribution.as_deref(),
                "attribution rows",
                "study.kernel_attribution = true",
            )?;
            summary.attribution_files = import_attribution(&attribution, &req.runs.join(&name))?;
            if summary.attribution_files > 0 && !summary.studies.contains(&file) {
                summary.studies.push(file);
            }
        }
    }
    let cache = root.join("cache").join("cubecl");
    if cache.is_dir() {
        summary.cache_files = copy_tree(&cache, &req.cubecl_cache)?;
        // The tunings also go to the committed autotune cache, for the next bundle of any
        // checkout.
        summary.autotune_files = copy_cache(&cache, &autotune_store(&req.runs), true)?;
    }
    Ok(())
}

/// Imports a bundle's `fusion_ir` chains run: a CUDA run that measured becomes
/// `<study_runs>/cuda_chains.json` (`runs/fusion_ir/`, which the study's report then shows); a
/// CPU run or one that could not measure is not imported, and the message says why.
///
/// # Errors
/// A file that does not read as a chains run (naming the file and the field), and I/O errors.
fn import_chains(file: &Path, study_runs: &Path) -> Result<Option<String>> {
    use memwall_core::record::fusion_chains::{read_run, ChainsBackend, CUDA_CHAINS_FILE};
    let Some(run) = read_run(file)? else {
        return Ok(None);
    };
    if run.backend != ChainsBackend::Cuda {
        return Ok(Some(format!(
            "fusion chains ran on {:?}, not CUDA: not imported as the study's CUDA measurement",
            run.backend
        )));
    }
    if let Err(why) = &run.chains {
        return Ok(Some(format!("fusion chains did not measure: {why}")));
    }
    let to = study_runs.join(CUDA_CHAINS_FILE);
    let dir = to.parent().expect("has a parent");
    std::fs::create_dir_all(dir).doing(|| format!("creating {}", dir.display()))?;
    std::fs::copy(file, &to).doing(|| format!("copying {} to {}", file.display(), to.display()))?;
    Ok(Some(format!("imported as {}", to.display())))
}

/// Copies the attribution benchmark's `*.jsonl` of a results folder into
/// `<study_runs>/attribution/` (`runs/peak_memory/attribution/`), named by framework and device
/// ([`memwall_core::record::attribution::file_name`]) so a later run on the same device replaces
/// its file and another device's stays; returns the files copied.
///
/// # Errors
/// A file none of whose lines reads as an attribution row (naming the file and the first
/// reason), and I/O errors.
fn import_attribution(dir: &Path, study_runs: &Path) -> Result<usize> {
    use memwall_core::record::attribution;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let to_dir = study_runs.join(ATTRIBUTION_DIR);
    let mut n = 0;
    for f in files {
        let (rows, bad) = attribution::read_rows(&f)?;
        let Some(first) = rows.first() else {
            refuse!(
                "{}: no attribution row ({})",
                f.display(),
                bad.first().map(String::as_str).unwrap_or("empty file")
            );
        };
        std::fs::create_dir_all(&to_dir).doing(|| format!("creating {}", to_dir.display()))?;
        let to = to_dir.join(attribution::file_name(&first.framework, &first.device));
        std::fs::copy(&f, &to).doing(|| format!("copying {} to {}", f.display(), to.display()))?;
        n += 1;
    }
    Ok(n)
}

/// The bundle folder of `req.source`: the folder itself, or an archive unpacked into
/// `req.scratch` (a bundle archive holds one top folder; `results.tar.gz` holds the files).
fn open_source(req: &ImportRequest) -> Result<PathBuf> {
    let src = &req.source;
    if src.is_dir() {
        return Ok(src.clone());
    }
    if !src.is_file() {
        refuse!("{}: no such bundle folder or archive", src.display());
    }
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .trim_end_matches(".gz")
        .trim_end_matches(".tar")
        .trim_end_matches(".tgz");
    let into = req
        .scratch
        .join(if stem.is_empty() { "import" } else { stem });
    if into.exists() {
        std::fs::remove_dir_all(&into).doing(|| format!("clearing {}", into.display()))?;
    }
    unpack_tgz(src, &into)?;
    if into.join("manifest.json").is_file() {
        return Ok(into);
    }
    // A bundle archive: one top folder.
    let tops: Vec<PathBuf> = std::fs::read_dir(&into)
        .doing(|| format!("listing {}", into.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    match tops.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(BundleError::Refused(format!(
            "{}: no manifest.json at its top or in one top folder; not a memwall bundle or \
             results archive",
            src.display()
        ))),
    }
}

/// The experiment file in `dir` whose `[study] name` is `name`.
fn find_experiment(dir: &Path, name: &str) -> Result<PathBuf> {
    for f in Study::discover(dir)? {
        // Names only: an experiment file that does not load is reported by `memwall run`.
        if let Ok(s) = Study::load(&f, Profile::Smoke, None)
            .or_else(|_| Study::load(&f, Profile::Cpu, None))
            .or_else(|_| Study::load(&f, Profile::Full, None))
        {
            if s.header.name == name {
                return Ok(f);
            }
        }
    }
    refuse!(
        "study `{name}` of the bundle has no experiment file in {} (its records can only be \
         checked against the experiment file they were made from)",
        dir.display()
    )
}

/// `dir/<key>/record.json` for every job folder of a study in a bundle, sorted.
fn record_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(files);
    };
    for e in entries {
        let p = e
            .doing(|| format!("listing {}", dir.display()))?
            .path()
            .join(results::RECORD_FILE);
        if p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Checks one bundled record against the job the local experiment file produces; the reason
/// when it does not match.
fn check_record(
    file: &Path,
    study: &Study,
    experiment: &Path,
    manifest: &Manifest,
    bundled: &BundledStudy,
) -> std::result::Result<JobRecord, String> {
    let record = read_bundled_record(file)?;
    check_filing(file, &record, bundled)?;
    check_local_key(&record, study, experiment, manifest)?;
    Ok(record)
}

/// The record in `file`, or why it does not read (naming the memwall-job version that wrote
/// it, where the file says).
fn read_bundled_record(file: &Path) -> std::result::Result<JobRecord, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot be read ({e})"))?;
    results::parse_json(&text).map_err(|e| {
        format!(
            "not a record of this memwall's schema ({e}); it was written by memwall-job {} or \
             is damaged",
            serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["env"]["memwall_version"].as_str().map(String::from))
                .unwrap_or_else(|| "of an unknown version".into())
        )
    })
}

/// Checks that `record` (read from `file`) is filed where it belongs: its key is its job's
/// and its folder's, and its study and corpus are those of `bundled`.
fn check_filing(
    file: &Path,
    record: &JobRecord,
    bundled: &BundledStudy,
) -> std::result::Result<(), String> {
    let folder = file
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let own = record.spec.key();
    if record.key != own || folder != own {
        return Err(format!(
            "field `key`: {} (folder {folder}) is not the key of the job it holds ({own}): the \
             record or its job was edited",
            record.key
        ));
    }
    if record.spec.study != bundled.name {
        return Err(format!(
            "field `spec.study`: `{}` is not the study `{}` it is filed under",
            record.spec.study, bundled.name
        ));
    }
    let fingerprint = &record.spec.data.fingerprint;
    if *fingerprint != bundled.fingerprint && !bundled.other_fingerprints.contains(fingerprint) {
        return Err(format!(
            "field `spec.data.fingerprint`: {fingerprint} is not a bundled corpus ({})",
            std::iter::once(&bundled.fingerprint)
                .chain(&bundled.other_fingerprints)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

/// Checks that `record`'s key is the key that the local experiment file (`study`, read from
/// `experiment`) gives its configuration with the bundle's settings: the record must be one of
/// those jobs (one per repeat).
fn check_local_key(
    record: &JobRecord,
    study: &Study,
    experiment: &Path,
    manifest: &Manifest,
) -> std::result::Result<(), String> {
    // The jobs the local file gives this configuration with the bundle's settings (one per
    // repeat): the record must be one of them.
    let settings = driver::JobSettings {
        cache_dir: None,
        memory_cleanup: manifest.memory_cleanup,
        memory_pool: manifest.memory_pool,
    };
    // The record's corpus stands for every vocabulary: only its own configuration is kept.
    let corpora: crate::spec::Corpora = study
        .vocabularies()
        .into_iter()
        .map(|v| (v, record.spec.data.clone()))
        .collect();
    let expected: Vec<JobSpec> = driver::expand_jobs(
        study,
        record.spec.backend,
        record.spec.device_index,
        &corpora,
        &settings,
        &[],
        &[],
    )
    .map_err(|e| e.to_string())?
    .into_iter()
    .filter(|j| j.config == record.spec.config)
    .collect();
    let Some(expected) = expected
        .iter()
        .find(|j| j.key() == record.key)
        .or(expected.first())
    else {
        return Err(format!(
            "configuration `{}` is not in {} any more",
            record.spec.config,
            experiment.display()
        ));
    };
    if expected.key() != record.key {
        return Err(format!(
            "job key {} is not the key {} that {} gives configuration `{}` at profile {} on {} \
             (the experiment file or memwall changed since the bundle was written: rerun \
             `memwall bundle`, or import with the revision {} that wrote it)",
            record.key,
            expected.key(),
            experiment.display(),
            record.spec.config,
            manifest.profile,
            record.spec.backend,
            manifest.git_revision
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_twin_is_expected_from_its_stored_row_of_the_same_model() {
        let (study, jobs) = crate::test_support::peak_memory_full();
        let plan = reference::plan(&study, &jobs).expect("peak_memory has a PyTorch plan");
        let config = plan.configs[0].name.clone();
        let row = |model: reference::TorchModel, first: f64, median: f64| TorchRow {
            format: reference::ROW_FORMAT.into(),
            study: plan.study.clone(),
            config: config.clone(),
            status: reference::TorchStatus::Ok,
            reason: None,
            device: "NVIDIA H200".into(),
            device_type: None,
            threads: None,
            torch_version: "2.11".into(),
            parameters: None,
            max_memory_allocated_bytes: None,
            max_memory_reserved_bytes: None,
            max_rss_bytes: None,
            rss_after_import_bytes: None,
            median_step_s: Some(median),
            samples_per_s: None,
            first_step_s: Some(first),
            final_loss: None,
            model,
            train: plan.train,
            finished_at: String::new(),
        };
        let steps = (plan.train.warmup_steps + plan.train.steps) as f64;
        let mut other = plan.model;
        other.layers += 1;
        let stored = vec![
            row(plan.model, 2.0, 0.5),
            row(plan.model, 40.0, 0.75),
            row(other, 500.0, 9.0),
        ];
        let got = torch_seconds_of_rows(&stored, &plan, &config).unwrap();
        // The slowest row of the same model; the other model's row is not used.
        assert_eq!(got, TORCH_STARTUP_S + 40.0 + steps * 0.75);
        assert_eq!(
            torch_seconds_of_rows(&stored, &plan, "no-such-config"),
            None
        );
        assert_eq!(torch_seconds_of_rows(&stored[2..], &plan, &config), None);
    }

    fn request(source: PathBuf, tmp: &Path) -> ImportRequest {
        ImportRequest {
            source,
            runs: tmp.join("runs"),
            experiments: tmp.join("experiments"),
            scratch: tmp.join("scratch"),
            force: false,
            skip_mismatched: false,
            cubecl_cache: tmp.join("cubecl"),
        }
    }

    #[test]
    fn a_bad_manifest_names_the_file_and_keeps_the_parser_error_as_source() {
        let tmp = tempfile::tempdir().unwrap();
        let bundle = tmp.path().join("bundle");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(bundle.join("manifest.json"), "{\"format\": 3}").unwrap();
        let err = import(&request(bundle.clone(), tmp.path())).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("manifest.json: not a bundle manifest"),
            "{msg}"
        );
        assert!(msg.contains("field `format`"), "{msg}");
        assert!(matches!(err, BundleError::NotAManifest { .. }), "{err:?}");
        let json = err.source().expect("the JSON error is the source");
        assert!(json.source().is_some(), "serde_json's error under it");

        std::fs::remove_file(bundle.join("manifest.json")).unwrap();
        let err = import(&request(bundle, tmp.path())).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("manifest.json") && msg.contains("not a memwall bundle"),
            "{msg}"
        );
        let io = err.source().expect("the I/O error is the source");
        assert!(io.downcast_ref::<std::io::Error>().is_some(), "{io:?}");
    }

    #[test]
    fn an_unreadable_archive_names_the_step_and_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nothing.tar.gz");
        let msg = import(&request(missing, tmp.path()))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("nothing.tar.gz: no such bundle folder or archive"),
            "{msg}"
        );
        let not_gz = tmp.path().join("results.tar.gz");
        std::fs::write(&not_gz, "plain text").unwrap();
        let msg = import(&request(not_gz, tmp.path()))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("is not a gzip-compressed tar archive"),
            "{msg}"
        );
    }
}
