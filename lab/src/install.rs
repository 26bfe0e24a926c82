//! `memwall nightly install`: the scheduler's own files for running `memwall nightly` every
//! night from one checkout, generated as text (path and contents) by pure functions, so that
//! they can be printed, tested and written without touching the system.
//!
//! - [`Scheduler::Systemd`]. `memwall-nightly.service` (`Type=oneshot`, run in the checkout)
//!   and `memwall-nightly.timer` (`OnCalendar` at the chosen time, `Persistent=true`), user
//!   units by default, system units (with `User=`) on request.
//! - [`Scheduler::Cron`]. `memwall-nightly.crontab`, one line that runs the nightly under
//!   `flock -n`, so that two nights never overlap, its output appended to a log.
//! - [`Scheduler::Slurm`]. `memwall-nightly.scrontab` (`#SCRON` options and one schedule line)
//!   and `memwall-nightly-slurm.sh` (the same command as a script): `memwall nightly --emit
//!   slurm` writes tonight's job array, then its `submit.sh` submits it.
//! - [`Scheduler::Github`]. `.github/workflows/memwall-nightly.yml`, a GitHub Actions workflow
//!   for a self-hosted GPU runner, the history kept outside the runner's workspace.
//!
//! Every path inside the files is absolute. Nothing here runs `systemctl`, `crontab` or
//! `scrontab`: [`Install::next`] says which command enables the files.

use crate::device::DeviceRequest;
use crate::error::{Error, Result};
use crate::spec::Profile;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The history store of the GitHub workflow when `--history` is not given: outside the
/// runner's workspace, which `actions/checkout` may clean.
pub const GITHUB_HISTORY: &str = "/var/lib/memwall/history";

/// The GitHub job's time limit, minutes (GitHub cancels the job after it).
pub const GITHUB_TIMEOUT_MINUTES: u32 = 360;

/// `#SCRON --time` of the Slurm launcher job when `--time` is not given (it only writes and
/// submits the job array).
pub const SLURM_LAUNCHER_TIME: &str = "01:00:00";

/// Base name of every generated file and of the systemd units.
pub const NAME: &str = "memwall-nightly";

/// The scheduler whose files [`generate`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduler {
    /// A systemd service and timer.
    Systemd,
    /// A crontab line (with `flock -n`).
    Cron,
    /// A Slurm `scrontab` file and a launcher script.
    Slurm,
    /// A GitHub Actions workflow for a self-hosted GPU runner.
    Github,
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheduler::Systemd => "systemd",
            Scheduler::Cron => "cron",
            Scheduler::Slurm => "slurm",
            Scheduler::Github => "github",
        })
    }
}

/// A time of day on the 24-hour clock (`--at HH:MM`), in the scheduler's time zone: the
/// machine's local time for systemd and cron, the cluster's for Slurm, UTC for GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeOfDay {
    /// Hour, 0 to 23.
    pub hour: u8,
    /// Minute, 0 to 59.
    pub minute: u8,
}

impl TimeOfDay {
    /// Parses `HH:MM` (or `H:MM`), 00:00 to 23:59.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming `--at` and the expected form for anything else (`25:00`,
    /// `2am`, `02:00:00`).
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || Error::InvalidOption {
            option: format!("--at {s}"),
            message: "expected a time of day HH:MM on the 24-hour clock (00:00 to 23:59), \
                      e.g. 02:00"
                .into(),
        };
        let (h, m) = s.split_once(':').ok_or_else(bad)?;
        let digits = |t: &str, max_len: usize| {
            !t.is_empty() && t.len() <= max_len && t.bytes().all(|b| b.is_ascii_digit())
        };
        if !digits(h, 2) || !digits(m, 2) || m.len() != 2 {
            return Err(bad());
        }
        let (hour, minute): (u8, u8) =
            (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if hour > 23 || minute > 59 {
            return Err(bad());
        }
        Ok(TimeOfDay { hour, minute })
    }

    /// The five cron fields of a daily run at this time: `MM HH * * *`.
    pub fn cron(&self) -> String {
        format!("{} {} * * *", self.minute, self.hour)
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.hour, self.minute)
    }
}

/// The `memwall nightly` flags passed through to every night's run.
#[derive(Debug, Clone, Default)]
pub struct NightlyFlags {
    /// `--cpu-profile` (smoke or cpu), if given.
    pub cpu_profile: Option<Profile>,
    /// `--device`, if given.
    pub device: Option<DeviceRequest>,
    /// `--data FILE` (absolute), if given.
    pub data: Option<PathBuf>,
    /// `--fail-on-regression` (always on for GitHub, whose job then fails).
    pub fail_on_regression: bool,
    /// `--on-regression CMD`, if given.
    pub on_regression: Option<String>,
    /// The experiment files the nightly runs (relative to the checkout, where every scheduler
    /// starts it, or absolute); empty: every file of `experiments/`.
    pub experiments: Vec<PathBuf>,
}

/// What [`generate`] needs: the scheduler, the checkout, the executable and the night's flags.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// The scheduler.
    pub scheduler: Scheduler,
    /// The checkout the nightly runs in (its working directory; absolute).
    pub checkout: PathBuf,
    /// The `memwall` executable the scheduler runs (absolute; GitHub builds its own).
    pub memwall: PathBuf,
    /// When the nightly starts.
    pub at: TimeOfDay,
    /// The history store (absolute); `None`: `<checkout>/history`, for GitHub
    /// [`GITHUB_HISTORY`].
    pub history: Option<PathBuf>,
    /// Folder the files go to; `None`: the scheduler's own place (see [`default_out`]).
    pub out: Option<PathBuf>,
    /// systemd: system units (`/etc/systemd/system`, with `User=`) instead of user units.
    pub system: bool,
    /// systemd system units: the user the service runs as.
    pub user: Option<String>,
    /// `$XDG_CONFIG_HOME`, where user units go (`<it>/systemd/user`).
    pub xdg_config_home: Option<PathBuf>,
    /// `$HOME`, where user units go without `$XDG_CONFIG_HOME` (`~/.config/systemd/user`).
    pub home: Option<PathBuf>,
    /// Slurm: `#SCRON --partition` of the launcher job, if given.
    pub partition: Option<String>,
    /// Slurm: `#SCRON --time` of the launcher job (default [`SLURM_LAUNCHER_TIME`]).
    pub time: Option<String>,
    /// The flags of every night's `memwall nightly`.
    pub nightly: NightlyFlags,
}

/// One generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallFile {
    /// Where it goes (absolute when the options' paths are).
    pub path: PathBuf,
    /// Its text.
    pub contents: String,
    /// Whether it is a script (mode 0755).
    pub executable: bool,
}

/// What [`generate`] returns: the files and what to run afterwards.
#[derive(Debug, Clone)]
pub struct Install {
    /// The files, in the order they are printed and written.
    pub files: Vec<InstallFile>,
    /// The commands (and notes, as `#` lines) that enable the files: nothing here runs them.
    pub next: Vec<String>,
}

/// The folder the files of `scheduler` go to without `--out`: systemd user units
/// `$XDG_CONFIG_HOME/systemd/user` (or `$HOME/.config/systemd/user`), system units
/// `/etc/systemd/system`; cron and Slurm `<checkout>/.memwall` (ignored by git); GitHub the
/// checkout itself (the workflow goes to `.github/workflows/` under it).
///
/// # Errors
/// [`Error::InvalidOption`] for systemd user units when neither an absolute
/// `$XDG_CONFIG_HOME` nor `$HOME` is known (pass `--out`).
pub fn default_out(opts: &InstallOptions) -> Result<PathBuf> {
    Ok(match opts.scheduler {
        Scheduler::Systemd if opts.system => PathBuf::from("/etc/systemd/system"),
        Scheduler::Systemd => match (&opts.xdg_config_home, &opts.home) {
            (Some(x), _) if x.is_absolute() => x.join("systemd/user"),
            (_, Some(h)) if h.is_absolute() => h.join(".config/systemd/user"),
            _ => {
                return Err(Error::InvalidOption {
                    option: "--scheduler systemd".into(),
                    message: "neither $XDG_CONFIG_HOME nor $HOME is set to an absolute path, so \
                              the user unit folder is unknown: pass --out DIR"
                        .into(),
                })
            }
        },
        Scheduler::Cron | Scheduler::Slurm => opts.checkout.join(".memwall"),
        Scheduler::Github => opts.checkout.clone(),
    })
}

/// The scheduler's files for `opts` and the commands that enable them.
///
/// # Errors
/// [`Error::InvalidOption`] when the checkout, the executable, the history, the data file or
/// the output folder is not absolute, is not UTF-8 or contains a newline; when a value cannot
/// be written in the scheduler's syntax (a newline anywhere; for cron a `%` after a backslash;
/// for Slurm any `%`, which `#SCRON --output` and Slurm read as a pattern); for an option of
/// another scheduler (`--system` without systemd, `--partition`/`--time` without Slurm); for
/// Slurm, an output folder with spaces (the launcher's log is an `#SCRON` option); for
/// `--cpu-profile full`; and as [`default_out`].
pub fn generate(opts: &InstallOptions) -> Result<Install> {
    check_options(opts)?;
    let out = match &opts.out {
        Some(o) => o.clone(),
        None => default_out(opts)?,
    };
    path_str("--out", &out)?;
    let checkout = path_str("the checkout", &opts.checkout)?;
    let memwall = path_str("--memwall", &opts.memwall)?;
    let history = match (&opts.history, opts.scheduler) {
        (Some(h), _) => path_str("--history", h)?,
        (None, Scheduler::Github) => GITHUB_HISTORY.to_string(),
        (None, _) => path_str("the checkout", &opts.checkout.join("history"))?,
    };
    let data = match &opts.nightly.data {
        Some(d) => Some(path_str("--data", d)?),
        None => None,
    };
    if let Some(c) = &opts.nightly.on_regression {
        no_newline("--on-regression", c)?;
    }
    let flags = Flags {
        history: history.clone(),
        data,
        nightly: &opts.nightly,
    };
    match opts.scheduler {
        Scheduler::Systemd => systemd(opts, &out, &checkout, &memwall, &flags),
        Scheduler::Cron => cron(opts, &out, &checkout, &memwall, &flags),
        Scheduler::Slurm => slurm(opts, &out, &checkout, &memwall, &flags),
        Scheduler::Github => github(opts, &out, &flags),
    }
}

/// Writes each file of `install` (creating its folder; scripts with mode 0755), replacing a
/// file already there.
///
/// # Errors
/// [`Error::Io`] naming the folder or file that could not be created or written.
pub fn write(install: &Install) -> Result<()> {
    for f in &install.files {
        if let Some(dir) = f.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        }
        std::fs::write(&f.path, &f.contents).map_err(|e| Error::io("writing", &f.path, e))?;
        if f.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f.path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| Error::io("making executable", &f.path, e))?;
        }
    }
    Ok(())
}

/// Single-quotes `s` for a POSIX shell (`'` becomes `'\''`).
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `command` as the command field of a crontab line: every `%` (which cron turns into a
/// newline, the rest going to standard input) escaped as `\%`.
///
/// # Errors
/// [`Error::InvalidOption`] for a newline, and for a `%` right after a backslash: cron reads
/// `\\%` as a backslash and a newline, so no crontab line can pass `\%` on.
pub fn cron_escape(command: &str) -> Result<String> {
    no_newline("the cron command", command)?;
    let mut out = String::with_capacity(command.len());
    let mut prev = None;
    for c in command.chars() {
        if c == '%' {
            if prev == Some('\\') {
                return Err(Error::InvalidOption {
                    option: "the cron command".into(),
                    message: format!(
                        "`\\%` cannot be written in a crontab line (cron reads `\\\\%` as a \
                         backslash and a line break): {command}"
                    ),
                });
            }
            out.push('\\');
        }
        out.push(c);
        prev = Some(c);
    }
    Ok(out)
}

/// One word of a systemd `ExecStart=` line: as is when it holds only characters systemd reads
/// literally, else double-quoted with `\`, `"` escaped, `%` as `%%` (specifiers) and `$` as
/// `$$` (variables).
pub fn systemd_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,+@".contains(c));
    if plain {
        return s.to_string();
    }
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => q.push_str("\\\\"),
            '"' => q.push_str("\\\""),
            '%' => q.push_str("%%"),
            '$' => q.push_str("$$"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// A systemd setting's value outside `ExecStart=`: `%` escaped as `%%`.
fn systemd_value(s: &str) -> String {
    s.replace('%', "%%")
}

/// The path as text: absolute, UTF-8, without a newline.
fn path_str(what: &str, p: &Path) -> Result<String> {
    let bad = |message: String| Error::InvalidOption {
        option: format!("{what} {}", p.display()),
        message,
    };
    let s = p
        .to_str()
        .ok_or_else(|| bad("not valid UTF-8: use a path the scheduler's files can name".into()))?;
    no_newline(what, s)?;
    if !p.is_absolute() {
        return Err(bad(
            "not an absolute path: the scheduler runs from another folder, so every path in \
             its files must be absolute"
                .into(),
        ));
    }
    Ok(s.to_string())
}

fn no_newline(what: &str, s: &str) -> Result<()> {
    if s.contains(['\n', '\r']) {
        return Err(Error::InvalidOption {
            option: format!("{what} {s:?}"),
            message: "contains a line break, which no scheduler file can hold".into(),
        });
    }
    Ok(())
}

/// Options of one scheduler given with another, `--cpu-profile full`, and values the Slurm
/// files cannot hold.
fn check_options(opts: &InstallOptions) -> Result<()> {
    let only = |option: &str, scheduler: &str| Error::InvalidOption {
        option: option.into(),
        message: format!(
            "only for --scheduler {scheduler} (this is {})",
            opts.scheduler
        ),
    };
    if opts.system && opts.scheduler != Scheduler::Systemd {
        return Err(only("--system", "systemd"));
    }
    if opts.scheduler != Scheduler::Slurm {
        if opts.partition.is_some() {
            return Err(only("--partition", "slurm"));
        }
        if opts.time.is_some() {
            return Err(only("--time", "slurm"));
        }
    }
    if let Some(p) = opts.nightly.cpu_profile {
        if !matches!(p, Profile::Smoke | Profile::Cpu) {
            return Err(Error::InvalidOption {
                option: format!("--cpu-profile {p}"),
                message: "expected `smoke` or `cpu`".into(),
            });
        }
    }
    if opts.scheduler == Scheduler::Systemd && opts.system {
        match &opts.user {
            Some(u) if !u.is_empty() && !u.chars().any(|c| c.is_whitespace() || c == '%') => {}
            _ => {
                return Err(Error::InvalidOption {
                    option: "--system".into(),
                    message: format!(
                        "the current user is unknown or not a plain name ({:?}): system units \
                         need a `User=`",
                        opts.user
                    ),
                })
            }
        }
    }
    for (option, value) in [("--partition", &opts.partition), ("--time", &opts.time)] {
        if let Some(v) = value {
            if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c == '%') {
                return Err(Error::InvalidOption {
                    option: format!("{option} {v:?}"),
                    message: "expected one word without `%` (e.g. `gpu`, `02:00:00`)".into(),
                });
            }
        }
    }
    Ok(())
}

/// The resolved paths and flags shared by the schedulers.
struct Flags<'a> {
    /// The history store (absolute).
    history: String,
    /// `--data` (absolute), if given.
    data: Option<String>,
    nightly: &'a NightlyFlags,
}

impl Flags<'_> {
    /// The `memwall nightly` arguments after `nightly` (unquoted words), `--history` first;
    /// `fail` adds `--fail-on-regression` whatever the flags say.
    fn words(&self, fail: bool) -> Vec<String> {
        let mut w = vec!["--history".to_string(), self.history.clone()];
        w.extend(self.rest(fail));
        w
    }

    /// [`Flags::words`] without `--history`.
    fn rest(&self, fail: bool) -> Vec<String> {
        let mut w = Vec::new();
        let n = self.nightly;
        if let Some(p) = n.cpu_profile {
            w.extend(["--cpu-profile".into(), p.to_string()]);
        }
        if let Some(d) = n.device {
            w.extend(["--device".into(), d.to_string()]);
        }
        if let Some(d) = &self.data {
            w.extend(["--data".into(), d.clone()]);
        }
        if n.fail_on_regression || fail {
            w.push("--fail-on-regression".into());
        }
        if let Some(c) = &n.on_regression {
            w.extend(["--on-regression".into(), c.clone()]);
        }
        w.extend(n.experiments.iter().map(|e| e.display().to_string()));
        w
    }

    /// [`Flags::words`] quoted for a POSIX shell.
    fn sh(&self, fail: bool) -> String {
        self.words(fail)
            .iter()
            .map(|w| sh_word(w))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `w` as is when it holds only characters a shell reads literally, else [`sh_quote`]d.
fn sh_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,+@".contains(c))
    {
        w.to_string()
    } else {
        sh_quote(w)
    }
}

fn header(scheduler: Scheduler) -> String {
    format!(
        "# Written by `memwall nightly install --scheduler {scheduler}`; run it again \
         rather than editing by hand.\n"
    )
}

fn systemd(
    opts: &InstallOptions,
    out: &Path,
    checkout: &str,
    memwall: &str,
    flags: &Flags,
) -> Result<Install> {
    let mut exec = vec![systemd_word(memwall), "nightly".to_string()];
    exec.extend(flags.words(false).iter().map(|w| systemd_word(w)));
    let mut service = header(Scheduler::Systemd);
    service += &format!(
        "[Unit]\nDescription=memwall nightly run in {}\n\n[Service]\nType=oneshot\n",
        systemd_value(checkout)
    );
    if opts.system {
        let user = opts.user.as_deref().unwrap_or_default();
        service += &format!("User={}\n", systemd_value(user));
    }
    service += &format!(
        "WorkingDirectory={}\nExecStart={}\n",
        systemd_value(checkout),
        exec.join(" ")
    );
    let timer = format!(
        "{}[Unit]\nDescription=memwall nightly run at {} every day\n\n[Timer]\n\
         OnCalendar=*-*-* {:02}:{:02}:00\nPersistent=true\nUnit={NAME}.service\n\n\
         [Install]\nWantedBy=timers.target\n",
        header(Scheduler::Systemd),
        opts.at,
        opts.at.hour,
        opts.at.minute
    );
    let service_path = out.join(format!("{NAME}.service"));
    let timer_path = out.join(format!("{NAME}.timer"));
    let ctl = if opts.system {
        "systemctl"
    } else {
        "systemctl --user"
    };
    let mut next = Vec::new();
    if opts.out.is_some() && Some(out) != default_out(opts).ok().as_deref() {
        next.push("# the units are not in systemd's unit folder: link them there first".into());
        next.push(format!(
            "{ctl} link {} {}",
            sh_word(&service_path.display().to_string()),
            sh_word(&timer_path.display().to_string())
        ));
    }
    next.push(format!(
        "{ctl} daemon-reload && {ctl} enable --now {NAME}.timer"
    ));
    next.push(format!(
        "# check: {ctl} list-timers {NAME}.timer; logs: journalctl{} -u {NAME}.service",
        if opts.system { "" } else { " --user" }
    ));
    if !opts.system {
        next.push(
            "# user timers run only while you are logged in unless lingering is on: \
             loginctl enable-linger \"$USER\""
                .into(),
        );
    }
    Ok(Install {
        files: vec![
            InstallFile {
                path: service_path,
                contents: service,
                executable: false,
            },
            InstallFile {
                path: timer_path,
                contents: timer,
                executable: false,
            },
        ],
        next,
    })
}

fn cron(
    opts: &InstallOptions,
    out: &Path,
    checkout: &str,
    memwall: &str,
    flags: &Flags,
) -> Result<Install> {
    let state = Path::new(checkout).join(".memwall");
    let state_s = state.display().to_string();
    let lock = state.join("nightly.lock").display().to_string();
    let log = state.join("nightly.log").display().to_string();
    let command = format!(
        "cd {} && mkdir -p {} && flock -n {} {} nightly {} >> {} 2>&1",
        sh_quote(checkout),
        sh_quote(&state_s),
        sh_quote(&lock),
        sh_quote(memwall),
        flags.sh(false),
        sh_quote(&log)
    );
    let line = format!("{} {}", opts.at.cron(), cron_escape(&command)?);
    let file = out.join(format!("{NAME}.crontab"));
    let file_s = file.display().to_string();
    let contents = format!(
        "{}# memwall nightly at {} (this machine's local time) in {checkout}; flock -n skips a \
         night\n# while the last one still runs; the output is appended to {log}.\n{line}\n",
        header(Scheduler::Cron),
        opts.at
    );
    Ok(Install {
        files: vec![InstallFile {
            path: file,
            contents,
            executable: false,
        }],
        next: vec![
            "# add the line to your crontab, keeping the lines already there (once):".into(),
            format!(
                "(crontab -l 2>/dev/null; cat {}) | crontab -",
                sh_word(&file_s)
            ),
            format!("# check: crontab -l; the log: {}", sh_word(&log)),
        ],
    })
}

/// Refuses what scrontab cannot carry: a `%` in the launcher's command or log path (Slurm
/// reads it as a file-name pattern) and a log path (under `out`) with spaces or quotes.
fn check_scron_values(command: &str, log: &str, out: &Path) -> Result<()> {
    for (what, s) in [("the command", command), ("--out", log)] {
        if s.contains('%') {
            return Err(Error::InvalidOption {
                option: format!("{what} {s}"),
                message: "contains `%`, which Slurm reads as a file-name pattern and scrontab \
                          may not pass on: use paths and values without `%`"
                    .into(),
            });
        }
    }
    if log.contains(char::is_whitespace) || log.contains('"') {
        return Err(Error::InvalidOption {
            option: format!("--out {}", out.display()),
            message: "the launcher's log goes there (`#SCRON --output`), and an `#SCRON` option \
                      cannot hold a path with spaces: pass --out DIR without spaces"
                .into(),
        });
    }
    Ok(())
}

/// The scrontab file: the launcher's `#SCRON` options and its line running `command` daily.
fn scrontab(
    opts: &InstallOptions,
    checkout: &str,
    slurm_dir_s: &str,
    log: &str,
    command: &str,
) -> String {
    let mut scron = header(Scheduler::Slurm);
    scron += &format!(
        "# memwall nightly at {} (the cluster's time zone) in {checkout}: writes tonight's job\n\
         # array into {slurm_dir_s} and submits it; its final job appends the history entry.\n",
        opts.at
    );
    scron += &format!("#SCRON --job-name={NAME}\n");
    scron += &format!(
        "#SCRON --time={}\n",
        opts.time.as_deref().unwrap_or(SLURM_LAUNCHER_TIME)
    );
    if let Some(p) = &opts.partition {
        scron += &format!("#SCRON --partition={p}\n");
    }
    scron += &format!("#SCRON --output={log}\n#SCRON --open-mode=append\n");
    scron += &format!("{} {command}\n", opts.at.cron());
    scron
}

/// `memwall nightly install --scheduler slurm`: a scrontab file and a launcher script that
/// write tonight's job array with `memwall nightly --emit slurm` and submit it.
fn slurm(
    opts: &InstallOptions,
    out: &Path,
    checkout: &str,
    memwall: &str,
    flags: &Flags,
) -> Result<Install> {
    let slurm_dir = Path::new(checkout).join("slurm").join("nightly");
    let slurm_dir_s = slurm_dir.display().to_string();
    let submit = slurm_dir.join("submit.sh").display().to_string();
    let log = out.join(format!("{NAME}-slurm.log")).display().to_string();
    // The array and its final job go to the same partition as the launcher.
    let partition = opts
        .partition
        .as_deref()
        .map_or(String::new(), |p| format!(" --partition {}", sh_quote(p)));
    let command = format!(
        "cd {} && {} nightly --emit slurm --slurm-dir {}{partition} {} && bash {}",
        sh_quote(checkout),
        sh_quote(memwall),
        sh_quote(&slurm_dir_s),
        flags.sh(false),
        sh_quote(&submit)
    );
    check_scron_values(&command, &log, out)?;
    let scron = scrontab(opts, checkout, &slurm_dir_s, &log, &command);
    let script = format!(
        "#!/bin/bash\n{}# memwall nightly on Slurm in {checkout}: writes tonight's job array and \
         submits it\n# (the final job appends the history entry). scrontab runs the same \
         command; without\n# scrontab: `sbatch --begin=HH:MM` this script, or run it from cron \
         or by hand.\nset -euo pipefail\n{command}\n",
        header(Scheduler::Slurm)
    );
    let scron_path = out.join(format!("{NAME}.scrontab"));
    let script_path = out.join(format!("{NAME}-slurm.sh"));
    let scron_s = scron_path.display().to_string();
    Ok(Install {
        files: vec![
            InstallFile {
                path: scron_path,
                contents: scron,
                executable: false,
            },
            InstallFile {
                path: script_path,
                contents: script,
                executable: true,
            },
        ],
        next: vec![
            format!("scrontab {}", sh_word(&scron_s)),
            "# this replaces your scrontab: if `scrontab -l` lists entries, add the file's lines \
             with `scrontab -e` instead"
                .into(),
            format!(
                "# the checkout, {} and the history must be on storage every node sees",
                sh_word(&slurm_dir_s)
            ),
        ],
    })
}

/// A GitHub Actions workflow, serialized with serde_norway.
#[derive(Serialize)]
struct Workflow {
    name: String,
    on: On,
    concurrency: Concurrency,
    env: BTreeMap<String, String>,
    jobs: BTreeMap<String, Job>,
}

#[derive(Serialize)]
struct On {
    schedule: Vec<CronEntry>,
    workflow_dispatch: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct CronEntry {
    cron: String,
}

#[derive(Serialize)]
struct Concurrency {
    group: String,
    #[serde(rename = "cancel-in-progress")]
    cancel_in_progress: bool,
}

#[derive(Serialize)]
struct Job {
    #[serde(rename = "runs-on")]
    runs_on: Vec<String>,
    #[serde(rename = "timeout-minutes")]
    timeout_minutes: u32,
    steps: Vec<Step>,
}

#[derive(Serialize, Default)]
struct Step {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(rename = "if", skip_serializing_if = "Option::is_none")]
    if_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uses: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    with: Option<BTreeMap<String, serde_norway::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<String>,
}

/// The GitHub workflow's steps: check out (keeping target/), build memwall, run the nightly
/// with `flags` (the history from the workflow's env), add the page's summary to the run's
/// summary and upload the page.
fn github_steps(flags: &Flags) -> Vec<Step> {
    // The nightly's page is under <history>/runs/reports/nightly (nightly's default record
    // store is <history>/runs, its reports <runs>/reports).
    let page = "runs/reports/nightly";
    // The history comes from the workflow's env, so that it is set in one place.
    let mut run_flags = vec!["--history".to_string(), "\"$MEMWALL_HISTORY\"".into()];
    run_flags.extend(flags.rest(true).iter().map(|w| sh_word(w)));
    vec![
        Step {
            uses: Some("actions/checkout@v4".into()),
            // Keep target/ between nights: a clean checkout would rebuild from scratch.
            with: Some(BTreeMap::from([(
                "clean".to_string(),
                serde_norway::Value::Bool(false),
            )])),
            ..Step::default()
        },
        Step {
            name: Some("Build memwall".into()),
            run: Some("cargo build --release --locked --bin memwall".into()),
            ..Step::default()
        },
        Step {
            name: Some("Nightly run".into()),
            run: Some(format!(
                "./target/release/memwall nightly {}",
                run_flags.join(" ")
            )),
            ..Step::default()
        },
        Step {
            name: Some("Summary".into()),
            if_: Some("always()".into()),
            run: Some(format!(
                "summary=\"$MEMWALL_HISTORY/{page}/summary.md\"\n\
                 if [ -f \"$summary\" ]; then cat \"$summary\" >> \"$GITHUB_STEP_SUMMARY\"; fi\n"
            )),
            ..Step::default()
        },
        Step {
            name: Some("Upload the nightly page".into()),
            if_: Some("always()".into()),
            uses: Some("actions/upload-artifact@v4".into()),
            with: Some(BTreeMap::from([
                ("name".to_string(), serde_norway::Value::from(NAME)),
                (
                    "path".to_string(),
                    serde_norway::Value::from(format!("${{{{ env.MEMWALL_HISTORY }}}}/{page}")),
                ),
                (
                    "if-no-files-found".to_string(),
                    serde_norway::Value::from("warn"),
                ),
            ])),
            ..Step::default()
        },
    ]
}

/// The GitHub workflow as YAML: the nightly job on a self-hosted GPU runner at `opts.at` (UTC).
fn github_workflow(opts: &InstallOptions, flags: &Flags) -> Result<String> {
    let steps = github_steps(flags);
    let workflow = Workflow {
        name: "memwall nightly".into(),
        on: On {
            schedule: vec![CronEntry {
                cron: opts.at.cron(),
            }],
            workflow_dispatch: BTreeMap::new(),
        },
        concurrency: Concurrency {
            group: NAME.into(),
            cancel_in_progress: false,
        },
        env: BTreeMap::from([("MEMWALL_HISTORY".to_string(), flags.history.clone())]),
        jobs: BTreeMap::from([(
            "nightly".to_string(),
            Job {
                runs_on: vec!["self-hosted".into(), "gpu".into()],
                timeout_minutes: GITHUB_TIMEOUT_MINUTES,
                steps,
            },
        )]),
    };
    let yaml = serde_norway::to_string(&workflow)
        .map_err(|e| Error::render("serializing the GitHub workflow", e))?;
    // serde_norway writes the key `on` plain, which YAML 1.1 readers take for `true`: quoted,
    // every reader (GitHub's included) reads the string `on`.
    let yaml = yaml.replacen("\non:\n", "\n\"on\":\n", 1);
    if !yaml.contains("\n\"on\":\n") {
        return Err(Error::Report(
            "serializing the GitHub workflow: no top-level `on` key".into(),
        ));
    }
    Ok(yaml)
}

/// `memwall nightly install --scheduler github`: the workflow file under `out` and the commands
/// that commit it and prepare the runner.
fn github(opts: &InstallOptions, out: &Path, flags: &Flags) -> Result<Install> {
    let yaml = github_workflow(opts, flags)?;
    let contents = format!(
        "{}# memwall nightly at {} UTC (GitHub's schedules are UTC) on a self-hosted runner\n\
         # labelled `self-hosted` and `gpu`. The history lives outside the workspace, in\n\
         # MEMWALL_HISTORY ({}): the runner's user must be able to write there.\n{yaml}",
        header(Scheduler::Github),
        opts.at,
        flags.history
    );
    let path = out.join(".github/workflows").join(format!("{NAME}.yml"));
    let mut next = Vec::new();
    let rel = match path.strip_prefix(&opts.checkout) {
        Ok(rel) => rel.to_path_buf(),
        Err(_) => {
            next.push(format!(
                "# the workflow is outside the checkout: copy it to .github/workflows/{NAME}.yml \
                 in the repository, then"
            ));
            PathBuf::from(format!(".github/workflows/{NAME}.yml"))
        }
    };
    next.push(format!(
        "git add {} && git commit -m 'memwall nightly workflow' && git push",
        sh_word(&rel.display().to_string())
    ));
    next.push(format!(
        "# on the runner's machine: mkdir -p {} (writable by the runner's user); the runner \
         needs the labels self-hosted and gpu, and Rust",
        sh_word(&flags.history)
    ));
    Ok(Install {
        files: vec![InstallFile {
            path,
            contents,
            executable: false,
        }],
        next,
    })
}

#[cfg(test)]
mod tests;
