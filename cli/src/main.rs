//! `memwall`: run the memory-wall studies and publish their reports.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use memwall_core::record::JobStatus;
use memwall_core::spec::{MemoryPool, Profile, Study};
use memwall_driver::{self as driver, Paths, RunOptions};
use memwall_runner::device::{self, BackendKind, DeviceRequest};
use std::path::{Path, PathBuf};

mod commands;
use commands::*;

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
    /// Print every headline claim of the studies: its quotation and place, the measure and its
    /// provenance (measured, derived, computed, arithmetic), the rule and why its band, whether
    /// the rule can fail, and the verdict from the record store.
    Claims {
        /// Experiment files (default: every file in --experiments-dir).
        experiments: Vec<PathBuf>,
        #[arg(long, default_value = "experiments")]
        experiments_dir: PathBuf,
        #[arg(long, default_value = "runs", env = "MEMWALL_RUNS")]
        runs: PathBuf,
        /// Exit non-zero, naming each claim, when a claim about the world is judged on
        /// arithmetic or an algorithm's output, a claim about a computation on arithmetic, a
        /// measure's provenance is unknown, or a rule cannot fail.
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
    /// The data sets the studies read (`datasets.toml`): where the data search path finds each
    /// and whether its checksum holds (`list`), or download what is missing into the user
    /// cache (`fetch`).
    Data {
        #[command(subcommand)]
        action: DataAction,
    },
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
        /// Reruns of each side (tonight's binary, the last night's) that confirm a flagged
        /// change before it is reported; 0 reports every flag as first measured.
        #[arg(long, default_value_t = memwall_lab::nightly::confirm::CONFIRM_RUNS)]
        confirm_runs: usize,
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
    /// files, the tokenized corpus, the kernel and autotune caches, the PyTorch twin and a
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
    /// (`memwall reference`, its name before, still runs it.)
    #[command(visible_alias = "reference")]
    Twin(TwinArgs),
}

/// Runs the command line; an error is printed as one line (`error: a: b: c`, each cause once:
/// [`error_line`]) and the exit status is 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `e` and its causes in one line, `a: b: c`, naming each cause once: a cause whose text the
/// line already holds (an error whose own message prints its source) is not repeated, so
/// "cannot read graph file X: No such file or directory (os error 2)" is not followed by its
/// I/O error again.
pub(crate) fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    for cause in std::iter::successors(Some(e), |e| e.source()) {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Dispatches the command line to each command's function.
fn run() -> Result<()> {
    memwall_runner::init_logging();
    let cli = Cli::parse();
    match cli.command {
        Cmd::Reproduce { experiments, run } => reproduce(&experiments, &run),
        Cmd::Run { experiment, run } => {
            let (paths, opts) = options(&run)?;
            ensure_data(std::slice::from_ref(&experiment), &opts)?;
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
        Cmd::Claims {
            experiments,
            experiments_dir,
            runs,
            check,
        } => claims(experiments, &experiments_dir, &runs, check),
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
        Cmd::Data { action } => data(action),
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
            confirm_runs,
        } => nightly(
            experiments,
            &experiments_dir,
            cpu_profile,
            emit,
            &slurm,
            slurm_final.as_deref(),
            &verdict,
            run,
            confirm_runs,
        ),
        Cmd::History {
            action,
            verdict,
            reports,
            templates,
        } => history(action, &verdict, reports, templates),
        Cmd::Bundle(args) => bundle(&args),
        Cmd::Import(a) => import_cmd(a),
        Cmd::Twin(a) => twin_cpu(a),
    }
}

#[cfg(test)]
mod error_line_tests {
    use super::error_line;

    /// An error that prints its source in its own message, as many of ours do.
    #[derive(Debug)]
    struct Unreadable(std::io::Error);
    impl std::fmt::Display for Unreadable {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot read graph file g.json: {}", self.0)
        }
    }
    impl std::error::Error for Unreadable {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_named_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(Unreadable(io)).context("study `checkmate` failed");
        let line = error_line(e.as_ref());
        assert_eq!(
            line,
            "study `checkmate` failed: cannot read graph file g.json: No such file or directory"
        );
        // anyhow's own `{:#}` repeats the I/O error: what this replaces.
        assert_eq!(format!("{e:#}").matches("No such file").count(), 2);
    }
}

#[cfg(test)]
mod command_line_tests {
    /// Every long option is unique within its command, flattened arguments included: `memwall
    /// nightly` once had two `--inject-slowdown`, its own and the run arguments', and its own
    /// was never set. (clap's `Command::debug_assert` checks this only where clap itself is
    /// built with debug assertions, not in the release builds the tests run in.)
    #[test]
    fn every_long_option_is_unique_in_its_command() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
            let mut seen = std::collections::BTreeSet::new();
            for a in cmd.get_arguments() {
                if let Some(long) = a.get_long() {
                    if !seen.insert(long) {
                        found.push(format!("{path}: --{long} twice"));
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), found);
            }
        }
        let cmd = super::Cli::command();
        let mut found = Vec::new();
        walk(&cmd, "memwall", &mut found);
        assert!(cmd.get_subcommands().count() > 10, "subcommands not found");
        assert!(found.is_empty(), "{found:?}");
        // The walk finds a planted duplicate, one subcommand down.
        let planted = clap::Command::new("m").subcommand(
            clap::Command::new("nightly")
                .arg(clap::Arg::new("a").long("inject-slowdown"))
                .arg(clap::Arg::new("b").long("inject-slowdown")),
        );
        let mut found = Vec::new();
        walk(&planted, "m", &mut found);
        assert_eq!(
            found,
            vec!["m nightly: --inject-slowdown twice".to_string()]
        );
    }

    /// `memwall twin` was `memwall reference`: the old name parses as the same command, and
    /// `memwall --help` shows it beside the new one.
    #[test]
    fn the_twin_command_answers_to_its_old_name() {
        use clap::{CommandFactory, Parser};
        for name in ["twin", "reference"] {
            let cli = super::Cli::try_parse_from(["memwall", name, "--device", "cpu"])
                .unwrap_or_else(|e| panic!("memwall {name}: {e}"));
            assert!(matches!(cli.command, super::Cmd::Twin(_)), "memwall {name}");
        }
        let cmd = super::Cli::command();
        let twin = cmd.find_subcommand("twin").expect("memwall twin");
        assert!(twin.get_visible_aliases().any(|a| a == "reference"));
        assert!(super::Cli::try_parse_from(["memwall", "referenc"]).is_err());
    }
}
