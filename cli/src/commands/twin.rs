//! `memwall twin --device cpu`: PyTorch eager's rows re-measured on this CPU.

use super::*;

#[derive(Args)]
pub(crate) struct TwinArgs {
    /// Where PyTorch runs: `cpu` (this machine's CPU, where memwall's `cpu` records were
    /// measured). GPU rows come from a bundle: `memwall bundle`, its run.sh, `memwall import`.
    #[arg(long)]
    pub(crate) device: String,
    /// Studies (comma separated; default: peak_memory, checkpoint_interval, mixed_precision).
    #[arg(long, value_delimiter = ',')]
    pub(crate) study: Vec<String>,
    /// Only these configurations (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Record store the rows are stored into (`<RUNS>/<study>/pytorch/`).
    #[arg(long, default_value = "runs", env = "MEMWALL_RUNS")]
    pub(crate) runs: PathBuf,
    /// Directory of the experiment files.
    #[arg(long, default_value = "experiments")]
    pub(crate) experiments: PathBuf,
    /// Corpus file (TinyStories .txt or .parquet); overrides the experiment files.
    #[arg(long, env = "MEMWALL_DATA")]
    pub(crate) data: Option<PathBuf>,
    /// The PyTorch twin script.
    #[arg(long, default_value = "reference/torch_peak_memory.py")]
    pub(crate) script: PathBuf,
    /// The Python interpreter that has PyTorch.
    #[arg(long, default_value = "python3")]
    pub(crate) python: String,
    /// PyTorch's intra-op threads (default: the CPUs available to this process, the count
    /// memwall's flex backend runs on and its records carry as `cpu_threads`).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Print each study's plan (its configurations and those left out, with the reason) and
    /// run nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Scratch folder of the plans, the rows as the script writes them and its logs.
    #[arg(long, default_value = "target/memwall/twin-cpu")]
    pub(crate) work: PathBuf,
    /// Report output root (default: `reports` for the record store `runs`, `<RUNS>/reports`
    /// for any other).
    #[arg(long)]
    pub(crate) reports: Option<PathBuf>,
    #[arg(long, default_value = "templates")]
    pub(crate) templates: PathBuf,
    /// Store the rows without re-rendering the reports.
    #[arg(long)]
    pub(crate) no_report: bool,
    /// Also record PyTorch's memory-budget Pareto front (what PARTITIONER_MEMORY_BUDGET_PARETO=1
    /// plots) of each configuration with an activation memory budget; the peak-memory report
    /// draws it beside memwall's front. Slow: the partitioner's bisection runs in the first step.
    #[arg(long)]
    pub(crate) pareto: bool,
}

// `memwall import`'s arguments (its help is the `Import` command's).
/// `memwall twin --device cpu`: plans the studies' cpu-profile rows, measures each in
/// PyTorch on this CPU, stores the rows and re-renders the reports of the studies that got one.
/// Fails (after storing what finished) when a configuration wrote no row or did not finish.
pub(crate) fn twin_cpu(a: TwinArgs) -> Result<()> {
    use memwall_lab::twin_cpu::{self, CpuRequest};
    if a.device != "cpu" {
        bail!(
            "--device {}: `memwall twin` measures on this machine's CPU (--device cpu); \
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
        pareto: a.pareto,
    };
    let planned = twin_cpu::plans(&req)?;
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
    if let Some(e) = twin_cpu::script_missing(&req.script) {
        return Err(e.into());
    }
    let version = twin_cpu::torch_version(&req.python)?;
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
            match twin_cpu::measure(&req, p, &c.name) {
                Ok(m) => {
                    eprintln!(
                        "{}/{}: {} ({:.1} s) -> {}",
                        p.plan.study,
                        c.name,
                        twin_cpu::describe(&m.row),
                        m.wall_s,
                        m.stored.display()
                    );
                    if m.row.status != memwall_report::twin::TorchStatus::Ok {
                        problems.push(format!(
                            "{}/{}: {}",
                            p.plan.study,
                            c.name,
                            twin_cpu::describe(&m.row)
                        ));
                    }
                    stored = true;
                }
                Err(e @ twin_cpu::TwinCmdError::NoRow { .. }) => {
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
            if memwall_report::analysis::StudyRecords::load(&paths.runs, &p.plan.study)?.is_empty()
            {
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
            let files = memwall_lab::nightly::experiment_files(Vec::new(), &a.experiments)?;
            memwall_report::sinks::index::write_index(&files, &paths.reports, &paths.templates)?;
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
