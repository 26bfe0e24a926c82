//! `memwall nightly install`: the scheduler's files for the nightly (systemd, cron, scrontab).

use super::*;

#[derive(Args)]
pub(crate) struct InstallArgs {
    /// Every night: these experiment files only (default: every file in experiments/).
    pub(crate) experiments: Vec<PathBuf>,
    /// systemd: memwall-nightly.service and .timer (user units; --system for system units).
    /// cron: a crontab line with flock -n. slurm: a scrontab file and a launcher script.
    /// github: .github/workflows/memwall-nightly.yml for a self-hosted GPU runner.
    #[arg(long, value_enum)]
    pub(crate) scheduler: memwall_lab::install::Scheduler,
    /// Print each file's path and contents instead of writing them.
    #[arg(long)]
    pub(crate) print: bool,
    /// Write the files into this folder instead of the scheduler's own place (systemd:
    /// ~/.config/systemd/user or /etc/systemd/system; cron, slurm: .memwall/; github: the
    /// checkout).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// When the nightly starts every day, HH:MM on the 24-hour clock (local time for systemd
    /// and cron, the cluster's for slurm, UTC for github).
    #[arg(long, default_value = "02:00", value_name = "HH:MM")]
    pub(crate) at: String,
    /// The history store (made absolute; default: history/ in this checkout, for github
    /// /var/lib/memwall/history, outside the runner's workspace).
    #[arg(long, value_name = "DIR")]
    pub(crate) history: Option<PathBuf>,
    /// The memwall executable the scheduler runs (default: this one).
    #[arg(long, value_name = "PATH")]
    pub(crate) memwall: Option<PathBuf>,
    /// systemd: system units in /etc/systemd/system, run as the current user.
    #[arg(long)]
    pub(crate) system: bool,
    /// slurm: the partition of the launcher job.
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// slurm: the time limit of the launcher job (default 01:00:00).
    #[arg(long, value_name = "HH:MM:SS")]
    pub(crate) time: Option<String>,
    /// Every night: the profile where no GPU exists (smoke or cpu).
    #[arg(long)]
    pub(crate) cpu_profile: Option<Profile>,
    /// Every night: auto, cpu, cuda or cuda:N.
    #[arg(long)]
    pub(crate) device: Option<String>,
    /// Every night: the corpus file (made absolute).
    #[arg(long, value_name = "FILE")]
    pub(crate) data: Option<PathBuf>,
    /// Every night: exit non-zero on a regression (always on for github).
    #[arg(long)]
    pub(crate) fail_on_regression: bool,
    /// Every night: run this shell command with summary.md's path when something regressed.
    #[arg(long, value_name = "CMD")]
    pub(crate) on_regression: Option<String>,
}

/// `memwall nightly install`: the scheduler's files for this checkout, written (or printed),
/// then the command that enables them.
pub(crate) fn install(a: &InstallArgs) -> Result<()> {
    use memwall_lab::install::{self, InstallOptions, NightlyFlags, TimeOfDay};
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
    let install = install::generate(&opts)?;
    if a.print {
        for f in &install.files {
            println!("==> {} <==", f.path.display());
            print!("{}", f.contents);
            println!();
        }
    } else {
        install::write(&install)?;
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
pub(crate) fn current_user() -> Option<String> {
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
