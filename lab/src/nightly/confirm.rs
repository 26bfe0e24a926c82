//! Confirm before an alarm (issue 56): every change a nightly would report as regressed or
//! improved (and every timing taken under load whose change against the last run is beyond the
//! noise floor) is measured again at once, before the history entry is written:
//! [`CONFIRM_RUNS`] rounds, each a rerun of the configuration with tonight's binary beside a
//! rerun with the binary kept from the last night (`<history>/bin/<revision>/memwall`, which
//! plans and runs the configuration with its own code: `memwall sweep EXP --only CONFIG`), the
//! two in alternating order from round to round, so both sides share the machine's state and
//! its load and neither always runs second. The change is reported only if the reruns show it
//! in the same direction, a timing's in every round ([`Confirmation::rounds`];
//! [`super::changes`] reads the reruns from the entry); the page says what was rerun and what
//! it gave.
//!
//! - A deterministic metric (peak bytes, eval loss) is a function of the code and the
//!   experiment file, not of the machine: tonight's reruns are compared with the values of
//!   the last nights (up to [`NOISE_WINDOW`]), against the exact tolerance widened to the
//!   spread the reruns of one binary show and to that of the last three nights.
//! - A timing is compared with the last night's binary's interleaved reruns, against the noise
//!   floor; where no binary is kept (the first night, a Slurm array, an imported bundle), with
//!   the last run's samples against the threshold it was flagged at, and a timing taken under
//!   load is then not rerun (nothing would share its load). A timing that moved because the
//!   experiment file changed, not the code, shows on both sides and is not confirmed.
//! - A configuration that stopped fitting under its memory limit is rerun the same way: if
//!   tonight's binary fits in some of the reruns, or the last night's binary no longer fits
//!   either, it is *at the limit* ([`ChangeVerdict::AtLimit`]), not missing.

use super::*;
use std::time::Instant;

/// Reruns of each side of a confirmation by default (`memwall nightly --confirm-runs N`; 0
/// turns confirmation off).
pub const CONFIRM_RUNS: usize = 3;

/// The history store's folder of the binaries kept from the last nightly.
pub const BINARY_DIR: &str = "bin";

/// The `memwall` binary kept from the last nightly, with its job runner beside it.
#[derive(Debug, Clone)]
pub struct KeptBinary {
    /// The `memwall` binary (`<history>/bin/<revision>/<file name>`); `memwall-job` of the same
    /// build lies beside it, where that `memwall`'s `sweep` finds its job runner.
    pub path: PathBuf,
    /// The revision it was built from (its folder's name).
    pub revision: String,
}

/// The binary the last nightly kept in `history`, if any: the kept file other than the job
/// runner (`memwall-job`).
pub fn kept_binary(history: &Path) -> Option<KeptBinary> {
    let dirs = std::fs::read_dir(history.join(BINARY_DIR)).ok()?;
    let dir = dirs
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))?;
    let runner = memwall_runner::job::job_runner_name();
    let file = std::fs::read_dir(dir.path())
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_file() && e.file_name() != runner.as_str())?;
    Some(KeptBinary {
        path: file.path(),
        revision: dir.file_name().to_string_lossy().into_owned(),
    })
}

/// Keeps tonight's `memwall` binary and its job runner `runner` (`memwall-job`, kept under
/// that name so the kept `memwall` finds it beside itself) as the binaries of `revision` for
/// the next night's confirmations, replacing the ones kept before. The copies are made in a
/// temporary folder moved into place, so a nightly stopped halfway leaves the old binaries or
/// the new ones.
///
/// # Errors
/// I/O errors naming the file.
pub fn keep_binary(
    history: &Path,
    memwall: &Path,
    runner: &Path,
    revision: &str,
) -> Result<PathBuf> {
    let dir = history.join(BINARY_DIR);
    let partial = dir.join(format!(".{revision}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| Error::io("creating", &partial, e))?;
    let name = memwall.file_name().unwrap_or_else(|| "memwall".as_ref());
    let copy = partial.join(name);
    std::fs::copy(memwall, &copy).map_err(|e| Error::io("copying memwall to", &copy, e))?;
    let beside = partial.join(memwall_runner::job::job_runner_name());
    std::fs::copy(runner, &beside)
        .map_err(|e| Error::io("copying the job runner to", &beside, e))?;
    for old in std::fs::read_dir(&dir)
        .map_err(|e| Error::io("reading", &dir, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path() != partial)
    {
        let _ = std::fs::remove_dir_all(old.path());
    }
    let kept = dir.join(revision);
    std::fs::rename(&partial, &kept).map_err(|e| Error::io("moving into place", &kept, e))?;
    Ok(kept.join(name))
}

/// What one configuration needs measured again.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    /// Study name.
    pub study: String,
    /// Configuration name.
    pub config: String,
    /// The metrics whose change is suspected ([`Classified::suspected`] regressed or improved),
    /// each with the relative threshold it was flagged at.
    pub metrics: Vec<(Metric, f64)>,
    /// Whether it stopped fitting under its memory limit (out of memory now, finished last
    /// time).
    pub status: bool,
    /// Whether a suspected change is a timing taken under load.
    pub under_load: bool,
}

/// The configurations of the last entry of `history` to measure again: training
/// configurations with a suspected regression or improvement, or out of memory under a limit
/// they fitted last time. Timings taken under load only when `binary_kept` (only reruns beside
/// the last night's binary share their load).
pub fn suspects(history: &[HistoryEntry], noise: f64, binary_kept: bool) -> Vec<Suspect> {
    let Some(last) = history.last() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in changes(history, noise) {
        if c.kind != ConfigKind::Training {
            continue;
        }
        let entry = last
            .configs
            .iter()
            .find(|e| e.study == c.study && e.config == c.config);
        let mut s = Suspect {
            study: c.study.clone(),
            config: c.config.clone(),
            metrics: Vec::new(),
            status: false,
            under_load: false,
        };
        for (m, k) in &c.metrics {
            let suspected = matches!(
                k.suspected,
                Some(ChangeVerdict::Regressed | ChangeVerdict::Improved)
            );
            let loaded = k.verdict == ChangeVerdict::Noisy;
            if suspected && (!loaded || binary_kept) {
                let threshold = k.noise.map_or(noise, |n| n.threshold);
                s.metrics.push((*m, threshold));
                s.under_load |= loaded;
            }
        }
        s.status = c.status == JobStatus::OutOfMemory
            && entry.is_some_and(|e| e.memory_limit_bytes.is_some())
            && c.metrics
                .iter()
                .any(|(_, k)| k.verdict == ChangeVerdict::Missing);
        if !s.metrics.is_empty() || s.status {
            out.push(s);
        }
    }
    out
}

/// One rerun's samples of a configuration: its status and, where it finished, its samples per
/// metric ([`config_entries`] of its records).
type Rerun = (JobStatus, BTreeMap<String, Vec<f64>>);

/// Runs configuration `config` of `study` in `exp` once with the `memwall` binary `bin`
/// (`memwall sweep EXP --only CONFIG --force --repeats 1 EXTRA...`: its own planner and job
/// runner), its records in a scratch store `runs` (emptied first; its log beside them), at the
/// nightly's profile, device, backend and corpus. Both sides of the reruns, tonight's binary
/// and the last night's, run this way: the same processes in the same arrangement, so a
/// difference between them is the binaries' (tonight's run in this process measured 15-20%
/// faster than the same binary under `memwall sweep` on a loaded 2-core machine).
///
/// # Errors
/// [`Error::Records`] naming the binary when it fails or writes no record of `config` (a
/// binary too old for tonight's experiment file, say), with the end of its log.
fn rerun_binary(
    bin: &Path,
    extra: &[String],
    exp: &Path,
    study: &str,
    config: &str,
    runs: &Path,
    run: &RunOptions,
) -> Result<Rerun> {
    let _ = std::fs::remove_dir_all(runs);
    std::fs::create_dir_all(runs).map_err(|e| Error::io("creating", runs, e))?;
    let log_path = runs.join("sweep.log");
    let log = std::fs::File::create(&log_path).map_err(|e| Error::io("creating", &log_path, e))?;
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("sweep")
        .arg(exp)
        .args(["--only", config, "--force", "--repeats", "1"])
        .arg("--runs")
        .arg(runs)
        .arg("--device")
        .arg(run.device.to_string())
        .arg("--backend")
        .arg(run.cpu_backend.as_str());
    if let Some(p) = run.profile {
        cmd.arg("--profile").arg(p.to_string());
    }
    if let Some(d) = &run.data {
        cmd.arg("--data").arg(d);
    }
    cmd.args(extra);
    let status = cmd
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .status()
        .map_err(|e| Error::io("starting the last night's binary", bin, e))?;
    let failed = |why: String| {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Error::Records {
            path: bin.to_path_buf(),
            message: format!("{why}: {}", tail.join(" / ")),
        }
    };
    if !status.success() {
        return Err(failed(format!(
            "the last night's binary exited with {status}"
        )));
    }
    let mut records = Vec::new();
    let study_dir = runs.join(study);
    if let Ok(dirs) = std::fs::read_dir(&study_dir) {
        for d in dirs.filter_map(|e| e.ok()) {
            if let Ok(Some(r)) = record::read_record(&d.path()) {
                records.push(r);
            }
        }
    }
    config_entries(&records)
        .into_iter()
        .find(|e| e.config == config)
        .map(|e| (e.status, e.metrics))
        .ok_or_else(|| {
            failed(format!(
                "the last night's binary wrote no record of `{config}`"
            ))
        })
}

/// Where tonight's and the last night's binaries are, and what each is run with.
#[derive(Debug, Clone)]
pub struct Sides {
    /// Tonight's `memwall` binary and the flags of its `memwall sweep` reruns (a planted
    /// slowdown where the nightly was given one).
    pub tonight: memwall_runner::job::Runner,
    /// The last night's `memwall` binary and its revision ([`kept_binary`]).
    pub previous: Option<KeptBinary>,
}

/// How the confirmation reruns run: where, with which binaries, how many, and the timings'
/// noise floor.
#[derive(Debug, Clone, Copy)]
pub struct Reruns<'a> {
    /// The nightly's run options (profile, device, backend, corpus).
    pub run: &'a RunOptions,
    /// Tonight's runner and the binary kept from the last night.
    pub sides: &'a Sides,
    /// Relative noise floor of the timings (0.05 = 5%).
    pub noise: f64,
    /// Scratch folder of the reruns' records (removed afterwards).
    pub scratch: &'a Path,
    /// Reruns of each side (0: no confirmation).
    pub runs: usize,
}

/// Measures every suspect of `entry` (the run just made, not yet in `history`) again, `runs`
/// times a side (none when 0), and
/// stores the reruns in it ([`ConfigEntry::confirmations`], [`HistoryEntry::confirm_s`]). A
/// study whose reruns fail is logged and its suspects left as they were.
///
/// Returns how many configurations were rerun.
pub fn confirm(
    history: &[HistoryEntry],
    entry: &mut HistoryEntry,
    experiments: &[PathBuf],
    how: &Reruns,
) -> usize {
    let (noise, scratch) = (how.noise, how.scratch);
    if how.runs == 0 {
        return 0;
    }
    let mut all = history.to_vec();
    all.push(entry.clone());
    let found = suspects(&all, noise, how.sides.previous.is_some());
    if found.is_empty() {
        return 0;
    }
    let started = Instant::now();
    tracing::info!(
        "confirming {} configuration(s) with a flagged change: {}",
        found.len(),
        found
            .iter()
            .map(|s| format!("{}/{}", s.study, s.config))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The experiment file of each study.
    let files: BTreeMap<String, PathBuf> = experiments
        .iter()
        .filter_map(|p| Study::outline(p).ok().map(|o| (o.header.name, p.clone())))
        .collect();
    let mut rerun_count = 0;
    for s in &found {
        let Some(exp) = files.get(&s.study) else {
            continue;
        };
        match confirm_one(&all, s, exp, how) {
            Ok(confs) => {
                if let Some(c) = entry
                    .configs
                    .iter_mut()
                    .find(|c| c.study == s.study && c.config == s.config)
                {
                    c.confirmations = confs;
                    rerun_count += 1;
                }
            }
            Err(e) => tracing::error!(
                "confirming {}/{}: {e} (the change is reported as first measured)",
                s.study,
                s.config
            ),
        }
    }
    let _ = std::fs::remove_dir_all(scratch);
    entry.confirm_s = Some(started.elapsed().as_secs_f64());
    rerun_count
}

/// The reruns of one suspect, interleaved in `runs` rounds of one rerun of each binary (last
/// night's first in even rounds, tonight's first in odd ones), as one [`Confirmation`] per
/// suspected metric (and one of the status), a timing's with the change of each round.
fn confirm_one(
    all: &[HistoryEntry],
    s: &Suspect,
    exp: &Path,
    how: &Reruns,
) -> Result<Vec<Confirmation>> {
    let Reruns {
        run,
        sides,
        noise,
        scratch,
        runs,
    } = *how;
    let mut tonight: Vec<Rerun> = Vec::new();
    let mut previous: Vec<Rerun> = Vec::new();
    let tonight_flags = &sides.tonight.1;
    let side = |bin: &Path, flags: &[String], dir: String| {
        rerun_binary(
            bin,
            flags,
            exp,
            &s.study,
            &s.config,
            &scratch.join(dir),
            run,
        )
    };
    // Rounds in alternating order (previous then tonight, tonight then previous, ...), so
    // neither side always runs second, after the other has warmed the machine.
    for r in 0..runs {
        let mut last_night = || -> Result<()> {
            if let Some(kept) = &sides.previous {
                previous.push(side(&kept.path, &[], format!("previous-{r}"))?);
            }
            Ok(())
        };
        let last_night_first = r % 2 == 0;
        if last_night_first {
            last_night()?;
        }
        tonight.push(side(
            &sides.tonight.0,
            tonight_flags,
            format!("tonight-{r}"),
        )?);
        if !last_night_first {
            last_night()?;
        }
    }
    // The last run that measured the configuration (before tonight's entry).
    let (_, earlier) = all.split_last().expect("tonight's entry is last");
    // The configuration in the earlier comparable runs, latest first.
    let cur = all.last().expect("tonight's entry");
    let before: Vec<&ConfigEntry> = earlier
        .iter()
        .rev()
        .filter(|e| e.profile == cur.profile && e.backend == cur.backend)
        .filter_map(|e| {
            e.configs
                .iter()
                .find(|c| c.study == s.study && c.config == s.config)
        })
        .collect();
    let last = before.first().copied();
    // A deterministic metric's values of the last `n` nights that measured it, latest first.
    let nights = |name: &str, n: usize| -> Vec<f64> {
        before
            .iter()
            .filter_map(|c| c.metrics.get(name).filter(|v| !v.is_empty()))
            .take(n)
            .flatten()
            .copied()
            .collect()
    };
    let binary = match &sides.previous {
        Some(k) => format!("previous binary {}", k.revision),
        None => LAST_RUN.to_string(),
    };
    let pooled = |runs: &[Rerun], name: &str| -> Vec<f64> {
        runs.iter()
            .filter(|(st, _)| *st == JobStatus::Ok)
            .flat_map(|(_, m)| m.get(name).cloned().unwrap_or_default())
            .collect()
    };
    let last_samples = |name: &str| -> Vec<f64> {
        last.and_then(|c| c.metrics.get(name).cloned())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for &(m, flagged_at) in &s.metrics {
        let current = pooled(&tonight, m.name());
        let (against, prev, threshold) = if m.deterministic() {
            // Against the values of the last nights (up to NOISE_WINDOW: a last value that was
            // itself a chance high is then no change), at the exact tolerance widened to the
            // spread the reruns of one binary show and to that of the last three nights. The
            // last night's binary's reruns give only a spread: they run tonight's experiment
            // file, so a changed configuration shows on both sides.
            let prev = nights(m.name(), NOISE_WINDOW);
            let median = stats::median_interval(&prev, stats::LEVEL).map_or(0.0, |e| e.median);
            let mut t = EXACT_TOLERANCE;
            if matches!(m, Metric::PeakAllocated | Metric::PeakReserved) && median > 0.0 {
                t = t.max(EXACT_SLACK_BYTES / median);
            }
            let spread = relative_range(&current)
                .max(relative_range(&pooled(&previous, m.name())))
                .max(relative_range(&nights(m.name(), 3)));
            let against = format!("the last {} night(s)", before.len().min(NOISE_WINDOW));
            (against, prev, t.max(spread))
        } else if sides.previous.is_some() {
            (binary.clone(), pooled(&previous, m.name()), noise)
        } else {
            (LAST_RUN.to_string(), last_samples(m.name()), flagged_at)
        };
        // Under load, both sides' timings carry the load's added time: judged on their
        // faster halves.
        let faster = !m.deterministic() && sides.previous.is_some() && s.under_load;
        // A timing's change round by round: each tonight's rerun against the previous
        // binary's rerun beside it.
        let rounds: Vec<f64> = if m.deterministic() {
            Vec::new()
        } else {
            let sample = |r: &Rerun| match r {
                (JobStatus::Ok, samples) => samples.get(m.name()).cloned().unwrap_or_default(),
                _ => Vec::new(),
            };
            previous
                .iter()
                .zip(&tonight)
                .filter_map(|(p, t)| {
                    Confirmation::round_change(&sample(p), &sample(t), m.lower_is_better(), faster)
                })
                .collect()
        };
        let mut c = Confirmation {
            metric: m.name().to_string(),
            against,
            runs,
            current,
            previous: prev,
            threshold,
            verdict: ChangeVerdict::WithinNoise,
            faster_half: faster,
            rounds,
        };
        c.verdict = c.classified(m.lower_is_better()).verdict;
        out.push(c);
    }
    if s.status {
        // The peaks of the reruns that fit, on each side.
        let name = Metric::PeakAllocated.name();
        let current = pooled(&tonight, name);
        let prev = if sides.previous.is_some() {
            pooled(&previous, name)
        } else {
            last_samples(name)
        };
        let fits = current.len();
        out.push(Confirmation {
            metric: STATUS_METRIC.to_string(),
            against: binary,
            runs,
            current,
            previous: prev,
            threshold: 0.0,
            verdict: if fits == 0 {
                ChangeVerdict::Missing
            } else {
                ChangeVerdict::WithinNoise
            },
            faster_half: false,
            rounds: Vec::new(),
        });
    }
    Ok(out)
}

/// `(max - min) / max` of `v` (0 for fewer than two values or a zero maximum).
fn relative_range(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    if hi > 0.0 {
        (hi - lo) / hi
    } else {
        0.0
    }
}
