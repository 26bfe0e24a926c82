//! `memwall nightly` (here or as a Slurm array) and `memwall history`: the nightly run, its
//! verdict options and the page from the history store.

use super::*;

/// `memwall history`: re-renders the nightly page from the history store, or with `export`
/// writes the history as one table.
pub(crate) fn history(
    action: Option<HistoryAction>,
    verdict: &NightlyVerdictArgs,
    reports: Option<PathBuf>,
    templates: PathBuf,
) -> Result<()> {
    if let Some(HistoryAction::Export { file }) = action {
        // Damaged entries are skipped with a warning naming each.
        memwall_lab::nightly::export(&verdict.history, &file)?;
        println!("{}", file.display());
        return Ok(());
    }
    check_noise(verdict.noise_threshold)?;
    let paths = Paths {
        reports: reports.unwrap_or_else(|| verdict.history.join("runs").join("reports")),
        templates,
        ..Paths::default()
    };
    let out = memwall_lab::nightly::render(&verdict.history, &paths, verdict.noise_threshold)?;
    nightly_verdict(&out, verdict)
}

/// What `--emit` writes instead of running (`memwall sweep`, `memwall nightly`).
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum Emit {
    /// A Slurm job array (one task per training job) and a final job after it.
    Slurm,
}

/// Where Slurm scripts go and what their `#SBATCH` lines ask for.
#[derive(Args, Clone)]
pub(crate) struct SlurmArgs {
    /// Folder of the Slurm scripts (default: slurm/<study file stem>, or slurm/nightly).
    #[arg(long)]
    pub(crate) slurm_dir: Option<PathBuf>,
    /// Slurm partition of the jobs.
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// Slurm time limit of each array task, e.g. 02:00:00.
    #[arg(long)]
    pub(crate) time: Option<String>,
}

impl SlurmArgs {
    /// The scripts' options: this `memwall` executable (whose array tasks find `memwall-job`
    /// beside it), `default_dir` without --slurm-dir.
    ///
    /// # Errors
    /// When the running executable cannot be located.
    pub(crate) fn options(
        &self,
        workdir: PathBuf,
        default_dir: PathBuf,
    ) -> Result<memwall_lab::slurm::SlurmOptions> {
        Ok(memwall_lab::slurm::SlurmOptions {
            out: self.slurm_dir.clone().unwrap_or(default_dir),
            memwall: std::env::current_exe().context("locating the memwall executable")?,
            workdir,
            partition: self.partition.clone(),
            time: self.time.clone(),
        })
    }
}

/// Where a nightly's history lives and what a regression does (`memwall nightly`, `memwall
/// history`, `memwall import --nightly`).
#[derive(Args, Clone)]
pub(crate) struct NightlyVerdictArgs {
    /// The history store (one JSON entry per run; keep it on durable storage).
    #[arg(long, default_value = "history", env = "MEMWALL_HISTORY")]
    pub(crate) history: PathBuf,
    /// Relative change below which a timing change is noise (0.05 = 5%); the floor of the
    /// threshold the history's night-to-night noise sets.
    #[arg(long, default_value_t = memwall_lab::nightly::DEFAULT_NOISE)]
    pub(crate) noise_threshold: f64,
    /// Exit non-zero when a metric regressed (or a configuration stopped finishing).
    #[arg(long)]
    pub(crate) fail_on_regression: bool,
    /// When something regressed, run this shell command with the path of the page's
    /// `summary.md` as its last argument (mail, a webhook, an issue comment).
    #[arg(long, value_name = "CMD")]
    pub(crate) on_regression: Option<String>,
}

/// What `memwall nightly` does besides running the nightly.
#[derive(Subcommand)]
pub(crate) enum NightlyAction {
    /// Write the scheduler's own files that run `memwall nightly` every night in this checkout
    /// (nothing is enabled: the command that enables them is printed).
    Install(Box<InstallArgs>),
}

/// What `memwall history` does besides rendering the page.
#[derive(Subcommand)]
pub(crate) enum HistoryAction {
    /// Write the whole history as one long table (one row per run, configuration and metric:
    /// median and interval) for a lab's own dashboards: Parquet when FILE ends in `.parquet`,
    /// else CSV.
    Export {
        /// The table to write (`.parquet` or `.csv`).
        file: PathBuf,
    },
}

/// Refuses a noise threshold outside [0, 1).
pub(crate) fn check_noise(noise: f64) -> Result<()> {
    if !(0.0..1.0).contains(&noise) {
        bail!("--noise-threshold {noise}: expected a relative change in [0, 1), e.g. 0.05 for 5%");
    }
    Ok(())
}

/// `memwall nightly`: runs the nightly here, writes it as a Slurm array (`--emit slurm`), or
/// is the final job of such an array (`--slurm-final DIR`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn nightly(
    experiments: Vec<PathBuf>,
    experiments_dir: &Path,
    cpu_profile: Profile,
    emit: Option<Emit>,
    slurm: &SlurmArgs,
    slurm_final: Option<&Path>,
    verdict: &NightlyVerdictArgs,
    mut run: RunArgs,
    confirm_runs: usize,
) -> Result<()> {
    check_noise(verdict.noise_threshold)?;
    if !matches!(cpu_profile, Profile::Smoke | Profile::Cpu) {
        bail!("--cpu-profile {cpu_profile}: expected `smoke` or `cpu`");
    }
    // A nightly's records are scratch, not the committed evidence in runs/: by default they go
    // to <history>/runs (and its reports to <history>/runs/reports).
    if run.runs == Path::new(memwall_driver::LOCAL_RUNS)
        && !run.publish
        && std::env::var_os("MEMWALL_RUNS").is_none()
    {
        run.runs = verdict.history.join("runs");
    }
    // The nightly plants a slowdown in tonight's jobs and reruns itself (NightlyOptions), not
    // through the run options' job runner flags.
    let inject_slowdown = run.inject_slowdown.take();
    if let Some(s) = &inject_slowdown {
        s.parse::<memwall_runner::train::slowdown::Slowdown>()
            .map_err(|e| anyhow::anyhow!("--inject-slowdown {e}"))?;
    }
    let (paths, opts) = options(&run)?;
    let nightly = memwall_lab::nightly::NightlyOptions {
        experiments: memwall_lab::nightly::experiment_files(experiments, experiments_dir)?,
        history: verdict.history.clone(),
        noise: verdict.noise_threshold,
        cpu_profile,
        memwall: std::env::current_exe().context("locating the memwall executable")?,
        inject_slowdown,
        confirm_runs,
    };
    if let Some(dir) = slurm_final {
        let out = memwall_lab::nightly::slurm_final(dir, &nightly, &paths, &opts)?;
        if let Some(entry) = &out.entry {
            eprintln!("history entry: {}", entry.display());
        }
        return nightly_verdict(&out, verdict);
    }
    if let Some(Emit::Slurm) = emit {
        let (resolved, _) = memwall_lab::nightly::nightly_run_options(&nightly, &opts)?;
        let workdir = std::env::current_dir().context("reading the working directory")?;
        let history = if verdict.history.is_absolute() {
            verdict.history.clone()
        } else {
            workdir.join(&verdict.history)
        };
        let mut final_flags = format!(
            "--history {} --noise-threshold {}",
            memwall_lab::install::sh_quote(&history.display().to_string()),
            verdict.noise_threshold
        );
        if verdict.fail_on_regression {
            final_flags += " --fail-on-regression";
        }
        if let Some(cmd) = &verdict.on_regression {
            final_flags += &format!(" --on-regression {}", memwall_lab::install::sh_quote(cmd));
        }
        let slurm = slurm.options(workdir, Path::new("slurm").join("nightly"))?;
        let s = memwall_lab::nightly::emit_nightly(
            &nightly.experiments,
            &paths,
            &resolved,
            &slurm,
            &final_flags,
        )
        .context("writing the nightly's Slurm scripts")?;
        return print_slurm(&s);
    }
    // The data the studies read, found or fetched before the first runs (as `reproduce` does).
    let (resolved, _) = memwall_lab::nightly::nightly_run_options(&nightly, &opts)?;
    ensure_data(&nightly.experiments, &resolved)?;
    let out = memwall_lab::nightly::run(&nightly, &paths, &opts)?;
    if let Some(entry) = &out.entry {
        eprintln!("history entry: {}", entry.display());
    }
    nightly_verdict(&out, verdict)
}

/// Prints the Slurm scripts written and how to submit them.
pub(crate) fn print_slurm(s: &memwall_lab::slurm::SlurmScripts) -> Result<()> {
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
pub(crate) fn nightly_verdict(
    out: &memwall_lab::nightly::NightlyOutcome,
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
