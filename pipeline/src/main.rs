//! `memwall`: run the memory-wall studies and publish their reports.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use memwall::device::{self, BackendKind, DeviceRequest};
use memwall::driver::{self, Paths, RunOptions};
use memwall::results::JobStatus;
use memwall::spec::{MemoryPool, Profile, Study};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "memwall",
    version,
    about = "Reproduce, measure and publish the memory-wall experiments of deep-learning training"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Size profile: smoke, cpu or full (default: full on a GPU, cpu otherwise).
    #[arg(long)]
    profile: Option<Profile>,
    /// Device: auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    device: String,
    /// CPU backend: flex or ndarray.
    #[arg(long, default_value = "flex")]
    backend: String,
    /// Corpus file (TinyStories .txt or .parquet); overrides the experiment file.
    #[arg(long, env = "MEMWALL_DATA")]
    data: Option<PathBuf>,
    /// Rerun jobs that already have a record.
    #[arg(long)]
    force: bool,
    /// Run only these configurations (comma separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Record store: this machine's (`target/memwall/runs`, ignored by git) unless given; its
    /// reports show the published records of `runs/` beside this machine's.
    #[arg(long, default_value = memwall::driver::LOCAL_RUNS, env = "MEMWALL_RUNS")]
    runs: PathBuf,
    /// Write into the committed evidence, `runs/` and `reports/` (a maintainer's command:
    /// the book: docs/src/guide/publishing.md), instead of this machine's store.
    #[arg(long, conflicts_with_all = ["runs", "reports"])]
    publish: bool,
    /// Report output root (default: `reports` for the committed record store `runs`,
    /// `<RUNS>/reports` for any other, so a scratch run never overwrites the published reports).
    #[arg(long)]
    reports: Option<PathBuf>,
    /// Report templates.
    #[arg(long, default_value = "templates")]
    templates: PathBuf,
    /// CUDA: release the memory pool's free pages at every step boundary in every job (a
    /// recorded job setting; a configuration can also set `memory_cleanup = true`).
    #[arg(long)]
    memory_cleanup: bool,
    /// CUDA: the memory pool of every job, `exact_size` (memwall's default) or `sliced`
    /// (CubeCL's); a recorded job setting; a configuration can also set `memory_pool`.
    #[arg(long, value_enum)]
    memory_pool: Option<PoolArg>,
    /// Run jobs on these devices at once, one job per device (GPU ordinals, comma separated;
    /// default: every visible GPU with --device auto). On the CPU the ids name parallel job
    /// slots (which share the CPU: their times are not comparable with a one-job sweep).
    #[arg(long, value_delimiter = ',')]
    devices: Vec<String>,
    /// Run only the jobs with these job keys (comma separated), e.g. one Slurm array task.
    #[arg(long, value_delimiter = ',')]
    keys: Vec<String>,
    /// Runs of each configuration (interleaved), replacing the file's `[study] repeats`.
    #[arg(long)]
    repeats: Option<usize>,
}

#[derive(Args)]
struct BundleArgs {
    /// Experiment files (default: experiments/peak_memory.toml).
    experiments: Vec<PathBuf>,
    /// The whole GPU suite: every study whose experiment file gives it a `study.gpu_suite`
    /// place (peak_memory, checkpoint_interval, mixed_precision, then fusion_ir's chains), in
    /// that order, at the `full` profile unless --profile says otherwise.
    #[arg(long, conflicts_with = "experiments")]
    suite: bool,
    /// Directory of the experiment files the suite is read from.
    #[arg(long, default_value = "experiments")]
    experiments_dir: PathBuf,
    /// Size profile: smoke, cpu or full (default: full for cuda, cpu for flex/ndarray).
    #[arg(long)]
    profile: Option<Profile>,
    /// Backend the jobs run on there: cuda, flex or ndarray.
    #[arg(long, default_value = "cuda")]
    target: String,
    /// Bundle folder (the archive is written beside it as <out>.tar.gz).
    #[arg(long, default_value = "target/gpu-bundle")]
    out: PathBuf,
    /// Runner binary to carry (default: target/carry/memwall-job if built, else
    /// target/release/memwall-job).
    #[arg(long)]
    runner: Option<PathBuf>,
    /// CubeCL autotune cache (.tgz of a cache root holding cubecl/autotune/...) to carry
    /// besides the committed one (gpu-cache/cubecl) and the local one (.memwall/cache/cubecl),
    /// which are always carried.
    #[arg(long)]
    autotune_cache: Option<PathBuf>,
    /// Also carry the local cache's compiled kernels (large; NVRTC recompiles them in seconds).
    #[arg(long)]
    with_kernels: bool,
    /// PyTorch reference script to carry ("none" leaves the PyTorch column out).
    #[arg(long, default_value = "reference/torch_peak_memory.py")]
    torch_script: String,
    /// Write only the folder, no .tar.gz.
    #[arg(long)]
    no_archive: bool,
    /// Corpus file (TinyStories .txt or .parquet); overrides the experiment files.
    #[arg(long, env = "MEMWALL_DATA")]
    data: Option<PathBuf>,
    /// Bundle only these configurations (comma separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// CUDA: release the pool's free pages at every step boundary in every job.
    #[arg(long)]
    memory_cleanup: bool,
    /// CUDA: the memory pool of every job, `exact_size` or `sliced`.
    #[arg(long, value_enum)]
    memory_pool: Option<PoolArg>,
}

// `memwall plan`'s arguments (its help is the `Plan` command's).
#[derive(Args)]
struct PlanArgs {
    /// Graph file: memwall's format or a networkx node-link file (Checkmate's graphs, the
    /// random layered graphs).
    #[arg(long)]
    graph: PathBuf,
    /// Budget in bytes (fixed memory included).
    #[arg(long, conflicts_with = "budget_fraction")]
    budget: Option<u64>,
    /// Budget as a fraction of the checkpoint-all peak, in (0, 1] (default 0.8).
    #[arg(long)]
    budget_fraction: Option<f64>,
    /// milp, staged (the scalable MILP for large graphs), lp-rounding, greedy, sqrt, revolve,
    /// checkpoint-all, or all.
    #[arg(long, default_value = "milp")]
    solver: String,
    /// Time limit of the whole command, seconds: the solvers that solve LPs or MILPs share
    /// it; the staged solver splits its share among its stages and prints what each took.
    #[arg(long, default_value_t = 60.0)]
    time_limit: f64,
    /// Relative MIP gap at which the MILP stops (0.01 = 1%).
    #[arg(long, default_value_t = 0.01)]
    gap: f64,
    /// Threads: HiGHS' (with `staged` on a graph too large for its staged model, one of them
    /// runs the annealing beside the bound).
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// Write the schedule as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

// `memwall reference`'s arguments (its help is the `Reference` command's).
#[derive(Args)]
struct ReferenceArgs {
    /// Where PyTorch runs: `cpu` (this machine's CPU, where memwall's `cpu` records were
    /// measured). GPU rows come from a bundle: `memwall bundle`, its run.sh, `memwall import`.
    #[arg(long)]
    device: String,
    /// Studies (comma separated; default: peak_memory, checkpoint_interval, mixed_precision).
    #[arg(long, value_delimiter = ',')]
    study: Vec<String>,
    /// Only these configurations (comma separated).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Record store the rows are stored into (`<RUNS>/<study>/pytorch/`).
    #[arg(long, default_value = "runs", env = "MEMWALL_RUNS")]
    runs: PathBuf,
    /// Directory of the experiment files.
    #[arg(long, default_value = "experiments")]
    experiments: PathBuf,
    /// Corpus file (TinyStories .txt or .parquet); overrides the experiment files.
    #[arg(long, env = "MEMWALL_DATA")]
    data: Option<PathBuf>,
    /// The PyTorch reference script.
    #[arg(long, default_value = "reference/torch_peak_memory.py")]
    script: PathBuf,
    /// The Python interpreter that has PyTorch.
    #[arg(long, default_value = "python3")]
    python: String,
    /// PyTorch's intra-op threads (default: the CPUs available to this process, the count
    /// memwall's flex backend runs on and its records carry as `cpu_threads`).
    #[arg(long)]
    threads: Option<usize>,
    /// Print each study's plan (its configurations and those left out, with the reason) and
    /// run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Scratch folder of the plans, the rows as the script writes them and its logs.
    #[arg(long, default_value = "target/memwall/reference-cpu")]
    work: PathBuf,
    /// Report output root (default: `reports` for the record store `runs`, `<RUNS>/reports`
    /// for any other).
    #[arg(long)]
    reports: Option<PathBuf>,
    #[arg(long, default_value = "templates")]
    templates: PathBuf,
    /// Store the rows without re-rendering the reports.
    #[arg(long)]
    no_report: bool,
}

// `memwall import`'s arguments (its help is the `Import` command's).
#[derive(Args)]
struct ImportArgs {
    /// Bundle folders or archives: `<bundle>.tar.gz`, or what its run.sh packed
    /// (`results.tar.gz`, `cache.tar.gz`), imported in the order given.
    #[arg(required = true)]
    sources: Vec<PathBuf>,
    /// Record store.
    #[arg(long, default_value = "runs", env = "MEMWALL_RUNS")]
    runs: PathBuf,
    /// Directory of the local experiment files (a study is found by its name).
    #[arg(long, default_value = "experiments")]
    experiments: PathBuf,
    /// Report output root (default: `reports` for the record store `runs`, `<RUNS>/reports`
    /// for any other).
    #[arg(long)]
    reports: Option<PathBuf>,
    #[arg(long, default_value = "templates")]
    templates: PathBuf,
    /// Replace records already in the store.
    #[arg(long)]
    force: bool,
    /// Import the records that match and list the others (default: refuse the import).
    #[arg(long)]
    skip_mismatched: bool,
    /// The bundle's run is a nightly run: its records replace those in the store (default
    /// store `<HISTORY>/runs`, scratch, as `memwall nightly`'s), one entry is appended to
    /// the history store and the nightly page is rendered, as after `memwall nightly`.
    #[arg(long)]
    nightly: bool,
    #[command(flatten)]
    verdict: NightlyVerdictArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every study in the experiments directory and render their reports.
    Reproduce {
        /// Directory of experiment files.
        #[arg(long, default_value = "experiments")]
        experiments: PathBuf,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run one study (skipping finished jobs) and render its report.
    Run {
        /// Experiment file.
        experiment: PathBuf,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Run one study's jobs without rendering the report (or, with `--emit slurm`, write a
    /// Slurm job array that runs them).
    Sweep {
        experiment: PathBuf,
        /// `slurm`: write a Slurm job-array script (one array task per job key, records into
        /// --runs, a dependent final job that renders the report) instead of running.
        #[arg(long, value_enum)]
        emit: Option<Emit>,
        #[command(flatten)]
        slurm: SlurmArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Re-render reports from existing records (no job is run), and the index across studies.
    Report {
        /// Experiment files (default: every file in experiments/).
        experiments: Vec<PathBuf>,
        #[arg(long, default_value = "runs", env = "MEMWALL_RUNS")]
        runs: PathBuf,
        /// Report output root (default: `reports` for the record store `runs`, `<RUNS>/reports`
        /// for any other).
        #[arg(long)]
        reports: Option<PathBuf>,
        #[arg(long, default_value = "templates")]
        templates: PathBuf,
        /// Render into a temporary folder and compare with the reports folder instead of
        /// writing it: exit non-zero, naming each file and its first differing line, when a
        /// committed report is not what the records give.
        #[arg(long)]
        check: bool,
    },
    /// Write the reports as a Hugo site's content: `<TO>/reports/_index.md` (the index across
    /// studies) and one page bundle per study, `<TO>/reports/<study>/index.md` with its
    /// figures; build it with `hugo --source site --contentDir <TO>`.
    Publish {
        /// The content folder to write (created; its `reports/` is replaced).
        #[arg(long)]
        to: PathBuf,
        /// The rendered reports to publish.
        #[arg(long, default_value = "reports")]
        reports: PathBuf,
        /// Also publish this rendered nightly page (e.g. `history/runs/reports/nightly`, which
        /// `memwall nightly` writes) as `reports/nightly/`, last in the index.
        #[arg(long)]
        nightly: Option<PathBuf>,
    },
    /// List the studies and their configurations.
    List {
        #[arg(long, default_value = "experiments")]
        experiments: PathBuf,
        #[arg(long, default_value = "cpu")]
        profile: Profile,
    },
    /// Check the machine: devices, backends, data.
    Doctor,
    /// Write a study's job files (and its tokenized corpus) for another machine's
    /// `memwall-job sweep-dir`, e.g. a GPU machine without Rust.
    ExportJobs {
        experiment: PathBuf,
        /// Backend the jobs will run on there (cuda, flex, ndarray).
        #[arg(long, default_value = "cuda")]
        target: String,
        /// Output directory (relative paths inside the jobs are relative to the directory the
        /// runner is started in, so use a path inside the repository).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Plan rematerialization for a graph file at a memory budget (Checkmate MILP, LP rounding,
    /// greedy, sqrt(n), revolve): prints cost, overhead, peak, status, gap and solve time, and
    /// writes the cheapest schedule (R and S per stage, the recomputations) as JSON.
    Plan(PlanArgs),
    /// The nightly run: every study afresh (a GPU runs `full`, the CPU `--cpu-profile`), one
    /// entry appended to the history store (date and git revision), and the nightly page
    /// (`reports/nightly/`) with the change since the last run per configuration and metric;
    /// `memwall nightly install --scheduler X` schedules it.
    #[command(args_conflicts_with_subcommands = true)]
    Nightly {
        #[command(subcommand)]
        action: Option<NightlyAction>,
        /// Experiment files (default: every file in --experiments-dir).
        experiments: Vec<PathBuf>,
        /// Directory of experiment files.
        #[arg(long, default_value = "experiments")]
        experiments_dir: PathBuf,
        /// The profile where no GPU exists (smoke or cpu) when --profile is not given.
        #[arg(long, default_value = "smoke")]
        cpu_profile: Profile,
        /// Write the nightly as a Slurm job array instead of running it here: one array task
        /// per training job, then a final job (after the whole array) that runs the in-process
        /// studies, renders the reports, appends the history entry and renders the nightly
        /// page; `bash <SLURM_DIR>/submit.sh` submits both.
        #[arg(long, value_enum)]
        emit: Option<Emit>,
        #[command(flatten)]
        slurm: SlurmArgs,
        /// The final job of a Slurm nightly (written by `--emit slurm`, run by Slurm): collect
        /// the array's records listed in this folder's `nightly.json` into one history entry.
        #[arg(long, value_name = "SLURM_DIR", conflicts_with = "emit", hide = true)]
        slurm_final: Option<PathBuf>,
        #[command(flatten)]
        verdict: NightlyVerdictArgs,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Re-render the nightly page from the history store (no job is run, nothing is appended);
    /// `memwall history export FILE` writes the history as one table instead.
    History {
        #[command(subcommand)]
        action: Option<HistoryAction>,
        #[command(flatten)]
        verdict: NightlyVerdictArgs,
        /// Report output root (default `<HISTORY>/runs/reports`, where `memwall nightly`
        /// renders: the nightly page is scratch, never part of the published `reports/`).
        #[arg(long)]
        reports: Option<PathBuf>,
        #[arg(long, default_value = "templates")]
        templates: PathBuf,
    },
    /// Write a bundle for a machine without Rust (e.g. a GPU machine): the runner, the job
    /// files, the tokenized corpus, the kernel and autotune caches, the PyTorch reference and a
    /// run.sh that runs every job and packs the records; plus `<out>.tar.gz`.
    Bundle(BundleArgs),
    /// Merge the records of a bundle (folder, bundle archive or its results.tar.gz) into the
    /// record store, after checking each against the local experiment file, and re-render the
    /// reports of the studies it holds.
    Import(ImportArgs),
    /// Re-measure the PyTorch eager rows of the training studies' `cpu` profile on this CPU
    /// (`--device cpu`): plans each study's cpu-profile jobs as a flex bundle does, runs
    /// `reference/torch_peak_memory.py --device cpu` once per configuration, checks and stores
    /// each row into the record store (`<RUNS>/<study>/pytorch/`) and re-renders the reports,
    /// whose CPU section shows them beside memwall's records. Needs PyTorch for python3.
    Reference(ReferenceArgs),
    /// Run one job file in this process (used by the sweep driver).
    #[command(hide = true)]
    RunJob {
        #[arg(long)]
        job: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
}

fn options(a: &RunArgs) -> Result<(Paths, RunOptions)> {
    let device: DeviceRequest = a.device.parse()?;
    let cpu_backend: BackendKind = a.backend.parse()?;
    let exe = std::env::current_exe().context("locating the memwall executable")?;
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
            runner: (exe, vec!["run-job".into()]),
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
enum PoolArg {
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

fn run_study(path: &Path, paths: &Paths, opts: &RunOptions, render: bool) -> Result<()> {
    let outcome =
        driver::sweep(path, paths, opts).with_context(|| format!("running {}", path.display()))?;
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
fn unfinished_lines(unfinished: &[(String, JobStatus, String)]) -> String {
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
fn report_study(path: &Path, paths: &Paths) -> Result<()> {
    let r = driver::report(path, paths).with_context(|| format!("reporting {}", path.display()))?;
    println!("{}", r.markdown.display());
    println!("{}", r.html.display());
    Ok(())
}

/// Dispatches the command line to each command's function.
fn main() -> Result<()> {
    memwall::init_logging();
    let cli = Cli::parse();
    match cli.command {
        Cmd::Reproduce { experiments, run } => reproduce(&experiments, &run),
        Cmd::Run { experiment, run } => {
            let (paths, opts) = options(&run)?;
            run_study(&experiment, &paths, &opts, true)
        }
        Cmd::Sweep {
            experiment,
            emit,
            slurm,
            run,
        } => sweep(&experiment, emit, &slurm, &run),
        Cmd::Report {
            experiments,
            runs,
            reports,
            templates,
            check,
        } => report_cmd(experiments, runs, reports, templates, check),
        Cmd::Publish {
            to,
            reports,
            nightly,
        } => publish(&to, &reports, nightly.as_deref()),
        Cmd::List {
            experiments,
            profile,
        } => list(&experiments, profile),
        Cmd::Doctor => doctor(),
        Cmd::ExportJobs {
            experiment,
            target,
            out,
            run,
        } => export_jobs_cmd(&experiment, &target, &out, &run),
        Cmd::Plan(a) => plan(a),
        Cmd::Nightly {
            action: Some(NightlyAction::Install(args)),
            ..
        } => install(&args),
        Cmd::Nightly {
            action: None,
            experiments,
            experiments_dir,
            cpu_profile,
            emit,
            slurm,
            slurm_final,
            verdict,
            run,
        } => nightly(
            experiments,
            &experiments_dir,
            cpu_profile,
            emit,
            &slurm,
            slurm_final.as_deref(),
            &verdict,
            run,
        ),
        Cmd::History {
            action,
            verdict,
            reports,
            templates,
        } => history(action, &verdict, reports, templates),
        Cmd::Bundle(args) => bundle(&args),
        Cmd::Import(a) => import_cmd(a),
        Cmd::Reference(a) => reference_cpu(a),
        Cmd::RunJob { job, out } => {
            let record = memwall_runner::job::run_job_file(&job, &out)?;
            eprintln!("{}: {}", record.spec.config, record.status.as_str());
            Ok(())
        }
    }
}

/// `memwall sweep`: runs the study's jobs without rendering the report, or with `--emit
/// slurm` writes the Slurm job array that runs them.
fn sweep(experiment: &Path, emit: Option<Emit>, slurm: &SlurmArgs, run: &RunArgs) -> Result<()> {
    let (paths, opts) = options(run)?;
    match emit {
        None => run_study(experiment, &paths, &opts, false),
        Some(Emit::Slurm) => {
            let workdir = std::env::current_dir().context("reading the working directory")?;
            let stem = experiment
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "study".into());
            let slurm = slurm.options(&opts, workdir, Path::new("slurm").join(stem));
            let s = memwall::slurm::emit(experiment, &paths, &opts, &slurm)
                .with_context(|| format!("writing Slurm scripts for {}", experiment.display()))?;
            print_slurm(&s)
        }
    }
}

/// `memwall report`: re-renders the reports of `experiments` from the records in `runs`, or
/// with `check` compares them with the rendered reports.
fn report_cmd(
    experiments: Vec<PathBuf>,
    runs: PathBuf,
    reports: Option<PathBuf>,
    templates: PathBuf,
    check: bool,
) -> Result<()> {
    let paths = Paths {
        reports: driver::reports_root(&runs, reports),
        published: driver::published_beside(&runs),
        runs,
        templates,
        ..Paths::default()
    };
    if check {
        check_reports(experiments, &paths)
    } else {
        report(experiments, &paths)
    }
}

/// `memwall publish`: writes the rendered reports (and the nightly page) as a Hugo site's
/// content under `to`.
fn publish(to: &Path, reports: &Path, nightly: Option<&Path>) -> Result<()> {
    let n = memwall::publish::publish(reports, to, nightly)
        .with_context(|| format!("publishing {} into {}", reports.display(), to.display()))?;
    println!("{}", to.join("reports").display());
    eprintln!("{n} report page bundles and the index written");
    Ok(())
}

/// `memwall export-jobs`: writes the study's job files for the `target` backend under `out`.
fn export_jobs_cmd(experiment: &Path, target: &str, out: &Path, run: &RunArgs) -> Result<()> {
    let (paths, opts) = options(run)?;
    let backend: BackendKind = target.parse()?;
    let n = export_jobs(experiment, backend, out, &paths, &opts)?;
    println!("wrote {n} job files under {}", out.display());
    Ok(())
}

/// `memwall plan`: plans rematerialization for the graph file and prints the solvers' table.
fn plan(a: PlanArgs) -> Result<()> {
    let req = memwall::plan_cmd::PlanRequest {
        graph: a.graph,
        budget: match a.budget {
            Some(b) => memwall::remat::plan::Budget::Bytes(b),
            None => memwall::remat::plan::Budget::Fraction(a.budget_fraction.unwrap_or(0.8)),
        },
        solver: a.solver,
        options: memwall::remat::plan::PlanOptions {
            time_limit_s: a.time_limit,
            gap: a.gap,
            threads: a.threads,
        },
        out: a.out,
    };
    print!("{}", memwall::plan_cmd::run(&req)?);
    Ok(())
}

/// `memwall history`: re-renders the nightly page from the history store, or with `export`
/// writes the history as one table.
fn history(
    action: Option<HistoryAction>,
    verdict: &NightlyVerdictArgs,
    reports: Option<PathBuf>,
    templates: PathBuf,
) -> Result<()> {
    if let Some(HistoryAction::Export { file }) = action {
        // Damaged entries are skipped with a warning naming each.
        memwall::nightly::export(&verdict.history, &file)?;
        println!("{}", file.display());
        return Ok(());
    }
    check_noise(verdict.noise_threshold)?;
    let paths = Paths {
        reports: reports.unwrap_or_else(|| verdict.history.join("runs").join("reports")),
        templates,
        ..Paths::default()
    };
    let out = memwall::nightly::render(&verdict.history, &paths, verdict.noise_threshold)?;
    nightly_verdict(&out, verdict)
}

/// `memwall import`: the store and reports the arguments name (a nightly's default store is
/// the history's scratch store), then [`import`].
fn import_cmd(a: ImportArgs) -> Result<()> {
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
    for source in &a.sources {
        import(
            source,
            &a.experiments,
            &paths,
            a.force,
            a.skip_mismatched,
            nightly,
        )?;
    }
    Ok(())
}

/// `memwall reference --device cpu`: plans the studies' cpu-profile rows, measures each in
/// PyTorch on this CPU, stores the rows and re-renders the reports of the studies that got one.
/// Fails (after storing what finished) when a configuration wrote no row or did not finish.
fn reference_cpu(a: ReferenceArgs) -> Result<()> {
    use memwall::reference_cmd::{self, CpuRequest};
    if a.device != "cpu" {
        bail!(
            "--device {}: `memwall reference` measures on this machine's CPU (--device cpu); \
             GPU rows come from a bundle: `memwall bundle --suite`, its run.sh on the GPU \
             machine, then `memwall import`",
            a.device
        );
    }
    if a.threads == Some(0) {
        bail!("--threads 0: PyTorch needs at least 1 thread");
    }
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let req = CpuRequest {
        experiments: a.experiments.clone(),
        studies: a.study.clone(),
        only: a.only.clone(),
        data: a.data.clone(),
        cache: Paths::default().cache,
        runs: a.runs.clone(),
        script: a.script.clone(),
        python: a.python.clone(),
        threads,
        work: a.work.clone(),
    };
    let planned = reference_cmd::plans(&req)?;
    let cpu = device::cpu_model();
    for p in &planned {
        println!(
            "{}: {} configuration(s) in PyTorch on {cpu}, {threads} thread(s) (plan {})",
            p.plan.study,
            p.plan.configs.len(),
            p.plan_file.display()
        );
        for c in &p.plan.configs {
            println!("  run       {}", c.name);
        }
        for (name, why) in &p.plan.left_out {
            println!("  left out  {name}: {why}");
        }
    }
    if a.dry_run {
        return Ok(());
    }
    if let Some(e) = reference_cmd::script_missing(&req.script) {
        return Err(e.into());
    }
    let version = reference_cmd::torch_version(&req.python)?;
    eprintln!(
        "PyTorch {version} ({}); rows into {}",
        req.python,
        req.runs.join("<study>").join("pytorch").display()
    );
    let mut problems = Vec::new();
    let mut studies = Vec::new();
    for p in &planned {
        let mut stored = false;
        for c in &p.plan.configs {
            match reference_cmd::measure(&req, p, &c.name) {
                Ok(m) => {
                    eprintln!(
                        "{}/{}: {} ({:.1} s) -> {}",
                        p.plan.study,
                        c.name,
                        reference_cmd::describe(&m.row),
                        m.wall_s,
                        m.stored.display()
                    );
                    if m.row.status != memwall::reference::TorchStatus::Ok {
                        problems.push(format!(
                            "{}/{}: {}",
                            p.plan.study,
                            c.name,
                            reference_cmd::describe(&m.row)
                        ));
                    }
                    stored = true;
                }
                Err(e @ reference_cmd::ReferenceCmdError::NoRow { .. }) => {
                    eprintln!("{e}");
                    problems.push(e.to_string());
                }
                Err(e) => return Err(e.into()),
            }
        }
        if stored {
            studies.push(p);
        }
    }
    if !a.no_report {
        let paths = Paths {
            reports: driver::reports_root(&req.runs, a.reports.clone()),
            runs: req.runs.clone(),
            templates: a.templates.clone(),
            ..Paths::default()
        };
        let mut rendered = false;
        for p in &studies {
            if memwall::results::StudyRecords::load(&paths.runs, &p.plan.study)?.is_empty() {
                eprintln!(
                    "{}: no memwall record in {}: its report is not rendered",
                    p.plan.study,
                    paths.runs.display()
                );
                continue;
            }
            report_study(&p.experiment, &paths)?;
            rendered = true;
        }
        if rendered {
            // The index quotes each study's verdicts and date: re-rendered with the reports.
            let files = memwall::nightly::experiment_files(Vec::new(), &a.experiments)?;
            memwall::publish::write_index(&files, &paths.reports, &paths.templates)?;
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} configuration(s) gave no finished row (the others are stored):\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    Ok(())
}

/// What `--emit` writes instead of running (`memwall sweep`, `memwall nightly`).
#[derive(Clone, Copy, clap::ValueEnum)]
enum Emit {
    /// A Slurm job array (one task per training job) and a final job after it.
    Slurm,
}

/// Where Slurm scripts go and what their `#SBATCH` lines ask for.
#[derive(Args, Clone)]
struct SlurmArgs {
    /// Folder of the Slurm scripts (default: slurm/<study file stem>, or slurm/nightly).
    #[arg(long)]
    slurm_dir: Option<PathBuf>,
    /// Slurm partition of the jobs.
    #[arg(long)]
    partition: Option<String>,
    /// Slurm time limit of each array task, e.g. 02:00:00.
    #[arg(long)]
    time: Option<String>,
}

impl SlurmArgs {
    /// The scripts' options: memwall from `opts`' runner, `default_dir` without --slurm-dir.
    fn options(
        &self,
        opts: &RunOptions,
        workdir: PathBuf,
        default_dir: PathBuf,
    ) -> memwall::slurm::SlurmOptions {
        memwall::slurm::SlurmOptions {
            out: self.slurm_dir.clone().unwrap_or(default_dir),
            memwall: opts.runner.0.clone(),
            workdir,
            partition: self.partition.clone(),
            time: self.time.clone(),
        }
    }
}

/// Where a nightly's history lives and what a regression does (`memwall nightly`, `memwall
/// history`, `memwall import --nightly`).
#[derive(Args, Clone)]
struct NightlyVerdictArgs {
    /// The history store (one JSON entry per run; keep it on durable storage).
    #[arg(long, default_value = "history", env = "MEMWALL_HISTORY")]
    history: PathBuf,
    /// Relative change below which a timing change is noise (0.05 = 5%); the floor of the
    /// threshold the history's night-to-night noise sets.
    #[arg(long, default_value_t = memwall::nightly::DEFAULT_NOISE)]
    noise_threshold: f64,
    /// Exit non-zero when a metric regressed (or a configuration stopped finishing).
    #[arg(long)]
    fail_on_regression: bool,
    /// When something regressed, run this shell command with the path of the page's
    /// `summary.md` as its last argument (mail, a webhook, an issue comment).
    #[arg(long, value_name = "CMD")]
    on_regression: Option<String>,
}

/// What `memwall nightly` does besides running the nightly.
#[derive(Subcommand)]
enum NightlyAction {
    /// Write the scheduler's own files that run `memwall nightly` every night in this checkout
    /// (nothing is enabled: the command that enables them is printed).
    Install(Box<InstallArgs>),
}

#[derive(Args)]
struct InstallArgs {
    /// Every night: these experiment files only (default: every file in experiments/).
    experiments: Vec<PathBuf>,
    /// systemd: memwall-nightly.service and .timer (user units; --system for system units).
    /// cron: a crontab line with flock -n. slurm: a scrontab file and a launcher script.
    /// github: .github/workflows/memwall-nightly.yml for a self-hosted GPU runner.
    #[arg(long, value_enum)]
    scheduler: memwall::schedule::Scheduler,
    /// Print each file's path and contents instead of writing them.
    #[arg(long)]
    print: bool,
    /// Write the files into this folder instead of the scheduler's own place (systemd:
    /// ~/.config/systemd/user or /etc/systemd/system; cron, slurm: .memwall/; github: the
    /// checkout).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// When the nightly starts every day, HH:MM on the 24-hour clock (local time for systemd
    /// and cron, the cluster's for slurm, UTC for github).
    #[arg(long, default_value = "02:00", value_name = "HH:MM")]
    at: String,
    /// The history store (made absolute; default: history/ in this checkout, for github
    /// /var/lib/memwall/history, outside the runner's workspace).
    #[arg(long, value_name = "DIR")]
    history: Option<PathBuf>,
    /// The memwall executable the scheduler runs (default: this one).
    #[arg(long, value_name = "PATH")]
    memwall: Option<PathBuf>,
    /// systemd: system units in /etc/systemd/system, run as the current user.
    #[arg(long)]
    system: bool,
    /// slurm: the partition of the launcher job.
    #[arg(long)]
    partition: Option<String>,
    /// slurm: the time limit of the launcher job (default 01:00:00).
    #[arg(long, value_name = "HH:MM:SS")]
    time: Option<String>,
    /// Every night: the profile where no GPU exists (smoke or cpu).
    #[arg(long)]
    cpu_profile: Option<Profile>,
    /// Every night: auto, cpu, cuda or cuda:N.
    #[arg(long)]
    device: Option<String>,
    /// Every night: the corpus file (made absolute).
    #[arg(long, value_name = "FILE")]
    data: Option<PathBuf>,
    /// Every night: exit non-zero on a regression (always on for github).
    #[arg(long)]
    fail_on_regression: bool,
    /// Every night: run this shell command with summary.md's path when something regressed.
    #[arg(long, value_name = "CMD")]
    on_regression: Option<String>,
}

/// `memwall nightly install`: the scheduler's files for this checkout, written (or printed),
/// then the command that enables them.
fn install(a: &InstallArgs) -> Result<()> {
    use memwall::schedule::{self, InstallOptions, NightlyFlags, TimeOfDay};
    let at = TimeOfDay::parse(&a.at)?;
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let absolute = |p: &Path| -> Result<PathBuf> {
        std::path::absolute(p).with_context(|| format!("making {} absolute", p.display()))
    };
    let memwall = match &a.memwall {
        Some(m) => absolute(m)?,
        None => std::env::current_exe().context("locating the memwall executable")?,
    };
    let device = a
        .device
        .as_deref()
        .map(str::parse::<DeviceRequest>)
        .transpose()?;
    let user = if a.system { current_user() } else { None };
    let opts = InstallOptions {
        scheduler: a.scheduler,
        checkout: cwd.clone(),
        memwall,
        at,
        history: a.history.as_deref().map(absolute).transpose()?,
        out: a.out.as_deref().map(absolute).transpose()?,
        system: a.system,
        user,
        xdg_config_home: std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
        home: std::env::var_os("HOME").map(PathBuf::from),
        partition: a.partition.clone(),
        time: a.time.clone(),
        nightly: NightlyFlags {
            cpu_profile: a.cpu_profile,
            device,
            data: a.data.as_deref().map(absolute).transpose()?,
            fail_on_regression: a.fail_on_regression,
            on_regression: a.on_regression.clone(),
            // Every scheduler starts the nightly in the checkout: paths inside it stay relative.
            experiments: a
                .experiments
                .iter()
                .map(|e| {
                    let abs = absolute(e)?;
                    Ok(abs.strip_prefix(&cwd).map(Path::to_path_buf).unwrap_or(abs))
                })
                .collect::<Result<_>>()?,
        },
    };
    let install = schedule::generate(&opts)?;
    if a.print {
        for f in &install.files {
            println!("==> {} <==", f.path.display());
            print!("{}", f.contents);
            println!();
        }
    } else {
        schedule::write(&install)?;
        for f in &install.files {
            println!("{}", f.path.display());
        }
    }
    eprintln!(
        "to enable it{}:",
        if a.print {
            " (once the files are in place)"
        } else {
            ""
        }
    );
    for line in &install.next {
        eprintln!("  {line}");
    }
    Ok(())
}

/// The current user's name: $USER, $LOGNAME, else `id -un`.
fn current_user() -> Option<String> {
    ["USER", "LOGNAME"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|u| !u.is_empty())
        .or_else(|| {
            let out = std::process::Command::new("id").arg("-un").output().ok()?;
            let name = String::from_utf8(out.stdout).ok()?.trim().to_string();
            (out.status.success() && !name.is_empty()).then_some(name)
        })
}

/// What `memwall history` does besides rendering the page.
#[derive(Subcommand)]
enum HistoryAction {
    /// Write the whole history as one long table (one row per run, configuration and metric:
    /// median and interval) for a lab's own dashboards: Parquet when FILE ends in `.parquet`,
    /// else CSV.
    Export {
        /// The table to write (`.parquet` or `.csv`).
        file: PathBuf,
    },
}

/// Refuses a noise threshold outside [0, 1).
fn check_noise(noise: f64) -> Result<()> {
    if !(0.0..1.0).contains(&noise) {
        bail!("--noise-threshold {noise}: expected a relative change in [0, 1), e.g. 0.05 for 5%");
    }
    Ok(())
}

/// `memwall nightly`: runs the nightly here, writes it as a Slurm array (`--emit slurm`), or
/// is the final job of such an array (`--slurm-final DIR`).
#[allow(clippy::too_many_arguments)]
fn nightly(
    experiments: Vec<PathBuf>,
    experiments_dir: &Path,
    cpu_profile: Profile,
    emit: Option<Emit>,
    slurm: &SlurmArgs,
    slurm_final: Option<&Path>,
    verdict: &NightlyVerdictArgs,
    mut run: RunArgs,
) -> Result<()> {
    check_noise(verdict.noise_threshold)?;
    if !matches!(cpu_profile, Profile::Smoke | Profile::Cpu) {
        bail!("--cpu-profile {cpu_profile}: expected `smoke` or `cpu`");
    }
    // A nightly's records are scratch, not the committed evidence in runs/: by default they go
    // to <history>/runs (and its reports to <history>/runs/reports).
    if run.runs == Path::new(memwall::driver::LOCAL_RUNS)
        && !run.publish
        && std::env::var_os("MEMWALL_RUNS").is_none()
    {
        run.runs = verdict.history.join("runs");
    }
    let (paths, opts) = options(&run)?;
    let nightly = memwall::nightly::NightlyOptions {
        experiments: memwall::nightly::experiment_files(experiments, experiments_dir)?,
        history: verdict.history.clone(),
        noise: verdict.noise_threshold,
        cpu_profile,
    };
    if let Some(dir) = slurm_final {
        let out = memwall::nightly::slurm_final(dir, &nightly, &paths, &opts)?;
        if let Some(entry) = &out.entry {
            eprintln!("history entry: {}", entry.display());
        }
        return nightly_verdict(&out, verdict);
    }
    if let Some(Emit::Slurm) = emit {
        let (resolved, _) = memwall::nightly::nightly_run_options(&nightly, &opts)?;
        let workdir = std::env::current_dir().context("reading the working directory")?;
        let history = if verdict.history.is_absolute() {
            verdict.history.clone()
        } else {
            workdir.join(&verdict.history)
        };
        let mut final_flags = format!(
            "--history {} --noise-threshold {}",
            memwall::schedule::sh_quote(&history.display().to_string()),
            verdict.noise_threshold
        );
        if verdict.fail_on_regression {
            final_flags += " --fail-on-regression";
        }
        if let Some(cmd) = &verdict.on_regression {
            final_flags += &format!(" --on-regression {}", memwall::schedule::sh_quote(cmd));
        }
        let slurm = slurm.options(&resolved, workdir, Path::new("slurm").join("nightly"));
        let s = memwall::slurm::emit_nightly(
            &nightly.experiments,
            &paths,
            &resolved,
            &slurm,
            &final_flags,
        )
        .context("writing the nightly's Slurm scripts")?;
        return print_slurm(&s);
    }
    let out = memwall::nightly::run(&nightly, &paths, &opts)?;
    if let Some(entry) = &out.entry {
        eprintln!("history entry: {}", entry.display());
    }
    nightly_verdict(&out, verdict)
}

/// Prints the Slurm scripts written and how to submit them.
fn print_slurm(s: &memwall::slurm::SlurmScripts) -> Result<()> {
    if s.tasks > 0 {
        println!("{}", s.array.display());
    }
    println!("{}", s.final_job.display());
    println!("{}", s.submit.display());
    eprintln!(
        "{} array tasks; submit with `bash {}`",
        s.tasks,
        s.submit.display()
    );
    Ok(())
}

/// Prints the nightly page's paths and the regressions; when something regressed, runs
/// `--on-regression` (`sh -c`, the summary's path as its last argument); an error (exit status
/// 1) with `--fail-on-regression` when something regressed, or when the command failed.
fn nightly_verdict(
    out: &memwall::nightly::NightlyOutcome,
    verdict: &NightlyVerdictArgs,
) -> Result<()> {
    let (fail_on_regression, on_regression) =
        (verdict.fail_on_regression, verdict.on_regression.as_deref());
    println!("{}", out.rendered.markdown.display());
    println!("{}", out.rendered.html.display());
    println!("{}", out.summary.display());
    let regressions = out.regressions();
    for r in &regressions {
        eprintln!("regressed since the last run: {r}");
    }
    if let (Some(cmd), false) = (on_regression, regressions.is_empty()) {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{cmd} \"$1\""))
            .arg("sh")
            .arg(&out.summary)
            .status()
            .with_context(|| format!("--on-regression: could not start `sh -c {cmd}`"))?;
        if !status.success() {
            bail!(
                "--on-regression `{cmd}` failed ({status}) on {}",
                out.summary.display()
            );
        }
    }
    if fail_on_regression && !regressions.is_empty() {
        bail!(
            "{} regression(s) since the last run (--fail-on-regression)",
            regressions.len()
        );
    }
    Ok(())
}

/// `memwall reproduce`: every study in `experiments`, going on past a failed one.
fn reproduce(experiments: &Path, run: &RunArgs) -> Result<()> {
    let (paths, opts) = options(run)?;
    let files = Study::discover(experiments)?;
    if files.is_empty() {
        bail!("no experiment files (*.toml) in {}", experiments.display());
    }
    let mut failed = Vec::new();
    // Every file is checked before the first study runs: a wrong value in the last one is
    // reported now, not after the others have run; the valid studies still run.
    let mut valid = Vec::new();
    for f in &files {
        match driver::check_study(f, &opts) {
            Ok(()) => valid.push(f),
            Err(e) => {
                eprintln!("error: {}: {e:#} (this study is skipped)", f.display());
                failed.push(f.display().to_string());
            }
        }
    }
    let mut rendered = Vec::new();
    for f in valid {
        match run_study(f, &paths, &opts, true) {
            Ok(()) => rendered.push(f.clone()),
            Err(e) => {
                eprintln!("error: {e:#}");
                failed.push(f.display().to_string());
            }
        }
    }
    let index = memwall::publish::write_index(&rendered, &paths.reports, &paths.templates)?;
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
fn print_claims_beside(studies: &[PathBuf], runs: &Path, published: &Path) {
    let of: Vec<memwall::report::beside::ClaimsOf> = studies
        .iter()
        .map(|f| memwall::report::beside::ClaimsOf {
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
        memwall::report::beside::claims_table(&of, 60)
    );
}

/// `memwall report`: re-renders the reports of `experiments` (default: every file in
/// `experiments/`) and, for the whole set, the index across studies.
fn report(experiments: Vec<PathBuf>, paths: &Paths) -> Result<()> {
    render_reports(experiments, paths, true).map(drop)
}

/// Renders the reports of `experiments` (default: every file in `experiments/`) into
/// `paths.reports`, and for the whole set the index across studies (printing each path when
/// `print`). Returns the reports' folder names and whether the whole set was rendered.
fn render_reports(
    experiments: Vec<PathBuf>,
    paths: &Paths,
    print: bool,
) -> Result<(Vec<String>, bool)> {
    let all = experiments.is_empty();
    let files = memwall::nightly::experiment_files(experiments, Path::new("experiments"))?;
    let mut names = Vec::new();
    for f in &files {
        let r = driver::report(f, paths).with_context(|| format!("reporting {}", f.display()))?;
        if print {
            println!("{}", r.markdown.display());
            println!("{}", r.html.display());
        }
        if let Some(dir) = r.markdown.parent().and_then(|d| d.file_name()) {
            names.push(dir.to_string_lossy().into_owned());
        }
    }
    if all {
        let index = memwall::publish::write_index(&files, &paths.reports, &paths.templates)?;
        if print {
            println!("{}", index.display());
        }
    }
    Ok((names, all))
}

/// `memwall report --check`: renders every report into a temporary folder and compares it with
/// `paths.reports`; an error listing each differing file (with its first differing line).
fn check_reports(experiments: Vec<PathBuf>, paths: &Paths) -> Result<()> {
    let scratch = tempfile_dir()?;
    let rendered = Paths {
        reports: scratch.clone(),
        ..paths.clone()
    };
    let (names, all) = render_reports(experiments, &rendered, false)?;
    let mut diffs = memwall::publish::compare_reports(&scratch, &paths.reports, &names, all)?;
    if all {
        if let Some(block) = memwall::publish::readme_block(&scratch, &paths.reports)? {
            diffs.extend(memwall::report::readme::check(&paths.reports, &block)?);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if diffs.is_empty() {
        eprintln!(
            "{}: all {} reports are what the records in {} give",
            paths.reports.display(),
            names.len(),
            paths.runs.display()
        );
        return Ok(());
    }
    for d in &diffs {
        eprintln!("{d}");
    }
    bail!(
        "{} file(s) under {} differ from what the records give: run `memwall report` and commit \
         the result (or restore the records they were rendered from)",
        diffs.len(),
        paths.reports.display()
    )
}

/// A fresh temporary folder (removed by the caller).
fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "memwall-report-check-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// `memwall list`: each study, its model under `profile` and its configurations.
fn list(experiments: &Path, profile: Profile) -> Result<()> {
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
fn doctor() -> Result<()> {
    println!(
        "memwall {} (burn {})",
        env!("CARGO_PKG_VERSION"),
        memwall::BURN_VERSION
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
    Ok(())
}

/// Writes `<out>/<study>/<key>/job.json` for each job, with the tokenized corpus copied to
/// `<out>/data/<fingerprint>/` and referenced by a relative path.
fn export_jobs(
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
    let mut carried = memwall::spec::Corpora::new();
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

/// `memwall bundle`: writes the bundle and prints its size and what to do next.
fn bundle(a: &BundleArgs) -> Result<()> {
    let req = bundle_request(a)?;
    let s = memwall::bundle::bundle(&req, &Paths::default())?;
    print_bundle(&s, a.suite);
    Ok(())
}

/// The bundle the arguments ask for: the runner (the slim CUDA runner where built), the
/// PyTorch script (checked), and the experiment files (the suite's, or peak_memory's).
fn bundle_request(a: &BundleArgs) -> Result<memwall::bundle::BundleRequest> {
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
        memwall::bundle::suite_experiments(&a.experiments_dir)?
    } else if a.experiments.is_empty() {
        vec![PathBuf::from("experiments/peak_memory.toml")]
    } else {
        a.experiments.clone()
    };
    let target = a.target.parse()?;
    Ok(memwall::bundle::BundleRequest {
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
    })
}

/// Prints what was bundled: each study's jobs and expected time, the total (with a note when
/// a `suite` is over a session's minutes), the sizes and what to do on the other machine.
fn print_bundle(s: &memwall::bundle::BundleSummary, suite: bool) {
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
    }
    println!(
        "expected device time: {}",
        memwall::bundle::expected_line(&s.manifest)
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
    if suite && total_min > memwall::bundle::SUITE_MINUTES {
        println!(
            "note: more than one command's {} device minutes: run.sh runs the tiers in order, \
             packing after every step, and a second session goes on where it stopped \
             (`run.sh --dry-run --minutes N` shows what fits)",
            memwall::bundle::SUITE_MINUTES
        );
    }
    println!(
        "bundle {} ({:.1} MiB, runner {}stripped, {} file(s) of the committed and local CubeCL \
         caches; {:.1} MiB with the working tree that travels, of the {:.0} MiB a device session \
         carries)",
        s.dir.display(),
        mib(s.dir_bytes),
        if s.stripped { "" } else { "not " },
        s.cache_files,
        mib(s.dir_bytes + s.tree_bytes),
        mib(memwall::bundle::CARRY_LIMIT_BYTES)
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
        memwall::bundle::RESULTS_ARCHIVE,
        memwall::bundle::script::CACHE_ARCHIVE
    );
}

/// `memwall import`: merges a bundle's records and re-renders the reports of its studies.
/// With `nightly`, the bundle's run is a nightly: its records replace those in the store, and
/// one history entry is appended and the nightly page rendered, as after `memwall nightly`.
fn import(
    source: &Path,
    experiments: &Path,
    paths: &Paths,
    force: bool,
    skip_mismatched: bool,
    nightly: Option<&NightlyVerdictArgs>,
) -> Result<()> {
    let req = memwall::bundle::ImportRequest {
        source: source.to_path_buf(),
        runs: paths.runs.clone(),
        experiments: experiments.to_path_buf(),
        scratch: paths.cache.join("import"),
        // A nightly measures tonight's code: its records replace last night's.
        force: force || nightly.is_some(),
        skip_mismatched,
        cubecl_cache: paths.cache.join("cubecl"),
    };
    let s = memwall::bundle::import(&req)?;
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
        memwall::bundle::autotune_store(&paths.runs).display()
    );
    if let Some(m) = &s.fusion_chains {
        eprintln!("  {m}");
    }
    for (p, why) in &s.refused {
        eprintln!("  refused {}: {why}", p.display());
    }
    for f in &s.studies {
        report_study(f, paths)?;
    }
    if !s.studies.is_empty() {
        // The index quotes each study's verdicts and date: re-rendered with the reports, so
        // that `memwall report --check` holds right after an import.
        let files = memwall::nightly::experiment_files(Vec::new(), experiments)?;
        memwall::publish::write_index(&files, &paths.reports, &paths.templates)?;
    }
    if let Some(verdict) = nightly {
        let manifest = s.manifest.as_ref().context("the import read no manifest")?;
        let info = memwall::nightly::import_info(source, manifest, &s.records)?;
        let entry = memwall::nightly::entry_of(&info, &s.records, &[], Vec::new());
        let out = memwall::nightly::record(
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
