//! `memwall-job sweep-dir`: every job of a bundle that has no record yet, one process each, in
//! the bundle's priority order, stopping cleanly before a deadline.
//!
//! A bundle's `jobs/queue.tsv` lists its jobs in the order they should run, one per line:
//! `<study>/<key>` and the job's expected seconds on the target device (from the last imported
//! records, or an estimate). Jobs under `jobs/` that the queue does not name run after it, in
//! path order. With `--until T` (Unix seconds) a job starts only when its expected seconds fit
//! before `T`; a job still running at `T` is killed and left without a record, so the next
//! `sweep-dir` (the bundle's `run.sh` run again) starts it afresh. No job's record is ever
//! half-written: a record exists only for a job that ended.
//!
//! May import: [`crate::job`], `memwall_core`.

use crate::job::{self, Outcome, Runner};
use memwall_core::record::RECORD_FILE;
use memwall_core::spec::JobSpec;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// File (under the jobs folder) listing the jobs in priority order with their expected seconds.
pub const QUEUE_FILE: &str = "queue.tsv";

/// One job of the queue: its folder and expected seconds (`None`: unknown, always started).
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    /// The job's folder (holding `job.json`).
    pub dir: PathBuf,
    /// Expected wall seconds of the job on the target device.
    pub expected_s: Option<f64>,
}

/// The jobs under `root` in run order: the queue file's order first, then every other
/// `<study>/<key>/job.json` in path order.
///
/// # Errors
/// A queue line that is not `<study>/<key>` TAB seconds, naming the file and line.
pub fn queue(root: &Path) -> Result<Vec<Queued>, String> {
    let mut out = Vec::new();
    let file = root.join(QUEUE_FILE);
    if let Ok(text) = std::fs::read_to_string(&file) {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (rel, secs) = line.split_once('\t').unwrap_or((line, ""));
            let expected_s = match secs.trim() {
                "" | "-" => None,
                s => Some(
                    s.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .ok_or_else(|| {
                            format!(
                                "{} line {}: expected seconds `{s}` is not a non-negative number \
                             (each line is `<study>/<key>` TAB seconds)",
                                file.display(),
                                i + 1
                            )
                        })?,
                ),
            };
            out.push(Queued {
                dir: root.join(rel.trim()),
                expected_s,
            });
        }
    }
    for dir in job_dirs(root) {
        if !out.iter().any(|q| q.dir == dir) {
            out.push(Queued {
                dir,
                expected_s: None,
            });
        }
    }
    Ok(out)
}

fn job_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Ok(studies) = std::fs::read_dir(root) else {
        return dirs;
    };
    for study in studies.flatten() {
        if let Ok(jobs) = std::fs::read_dir(study.path()) {
            for job in jobs.flatten() {
                if job.path().join("job.json").exists() {
                    dirs.push(job.path());
                }
            }
        }
    }
    dirs.sort();
    dirs
}

/// What [`sweep`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SweepSummary {
    /// Jobs that ended with a record in this sweep.
    pub finished: usize,
    /// Jobs that had their record before.
    pub skipped: usize,
    /// Jobs not started because their expected time did not fit before the deadline.
    pub deferred: usize,
    /// Jobs killed at the deadline (no record; they run again next time).
    pub interrupted: usize,
    /// `--only` names that match no job folder.
    pub unknown: usize,
}

/// The jobs of `queued` (under `root`) that `only` names as `<study>/<key>` (all when `only` is
/// empty), in queue order, and the names that match no job.
pub fn select(queued: Vec<Queued>, root: &Path, only: &[String]) -> (Vec<Queued>, Vec<String>) {
    if only.is_empty() {
        return (queued, Vec::new());
    }
    let unknown = only
        .iter()
        .filter(|name| !queued.iter().any(|q| q.dir == root.join(name)))
        .cloned()
        .collect();
    let kept = queued
        .into_iter()
        .filter(|q| only.iter().any(|name| q.dir == root.join(name)))
        .collect();
    (kept, unknown)
}

/// Runs every job of `root` without a record ([`queue`] order) through the plan stage and its
/// own process ([`job::run_planned`]); with `until`, only what fits before it.
pub fn sweep(root: &Path, runner: &Runner, until: Option<SystemTime>) -> SweepSummary {
    sweep_only(root, runner, until, &[])
}

/// [`sweep`] restricted to the jobs `only` names as `<study>/<key>` (relative to `root`; all
/// jobs when empty), in [`queue`] order. A bundle's `run.sh` runs one job at a time this way,
/// so that each source row is followed at once by its PyTorch twin. A name that matches no job
/// is reported and counted in [`SweepSummary::unknown`].
pub fn sweep_only(
    root: &Path,
    runner: &Runner,
    until: Option<SystemTime>,
    only: &[String],
) -> SweepSummary {
    let mut summary = SweepSummary::default();
    let queued = match queue(root) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("error: {e}");
            return summary;
        }
    };
    let (queued, unknown) = select(queued, root, only);
    for name in &unknown {
        eprintln!(
            "--only {name}: no job folder {} holding job.json",
            root.join(name).display()
        );
    }
    summary.unknown = unknown.len();
    eprintln!("{} job(s) under {}", queued.len(), root.display());
    for q in queued {
        let dir = &q.dir;
        if dir.join(RECORD_FILE).exists() {
            eprintln!("{}: finished before, skipped", dir.display());
            summary.skipped += 1;
            continue;
        }
        let left = until.map(|t| {
            t.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        });
        if let (Some(left), Some(expected)) = (left, q.expected_s) {
            if expected > left.as_secs_f64() {
                eprintln!(
                    "{}: expected {expected:.0} s, {:.0} s left before the deadline: left for the next run",
                    dir.display(),
                    left.as_secs_f64()
                );
                summary.deferred += 1;
                continue;
            }
        }
        if left.is_some_and(|l| l.is_zero()) {
            summary.deferred += 1;
            continue;
        }
        let job = match JobSpec::read(&dir.join("job.json")) {
            Ok(j) => j,
            Err(e) => {
                eprintln!("{}: {e}", dir.display());
                continue;
            }
        };
        let deadline = left.map(|l| Instant::now() + l);
        let started = Instant::now();
        match job::run_planned(&job, dir, runner, deadline) {
            Ok(Outcome::Finished(r)) => {
                summary.finished += 1;
                eprintln!(
                    "{}: {} in {:.0} s{}",
                    job.config,
                    r.status.as_str(),
                    started.elapsed().as_secs_f64(),
                    r.summary
                        .map(|s| format!(
                            ", peak {} MiB, {:.3} samples/s",
                            s.peak_allocated_bytes >> 20,
                            s.samples_per_s
                        ))
                        .unwrap_or_default()
                )
            }
            Ok(Outcome::Interrupted) => {
                summary.interrupted += 1;
                eprintln!(
                    "{}: still running at the deadline after {:.0} s: stopped, no record (it runs again next time)",
                    job.config,
                    started.elapsed().as_secs_f64()
                );
            }
            Err(e) => eprintln!("{}: {e}", dir.display()),
        }
    }
    eprintln!(
        "sweep: {} finished, {} finished before, {} left for the next run, {} stopped at the deadline",
        summary.finished, summary.skipped, summary.deferred, summary.interrupted
    );
    summary
}

/// The `sweep-dir DIR [--until UNIX_SECONDS]` subcommand (arguments after `sweep-dir`).
pub fn cli(args: &[String]) -> ExitCode {
    let Some(root) = args.first().map(PathBuf::from) else {
        eprintln!("usage: memwall-job sweep-dir DIR [--until UNIX_SECONDS] [--only STUDY/KEY]...");
        return ExitCode::from(2);
    };
    let mut only = Vec::new();
    let mut i = 1;
    while i < args.len() {
        if args[i] == "--only" {
            match args.get(i + 1) {
                Some(v) if !v.starts_with("--") => only.push(v.clone()),
                _ => {
                    eprintln!(
                        "error: --only takes a job as <study>/<key> (a folder under {} holding job.json)",
                        root.display()
                    );
                    return ExitCode::from(2);
                }
            }
            i += 1;
        }
        i += 1;
    }
    let until = match args.iter().position(|a| a == "--until") {
        None => None,
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<u64>().ok()) {
            Some(t) => Some(UNIX_EPOCH + Duration::from_secs(t)),
            None => {
                eprintln!(
                    "error: --until takes the deadline in whole Unix seconds (e.g. `--until $(( $(date +%s) + 600 ))`)"
                );
                return ExitCode::from(2);
            }
        },
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: locating memwall-job: {e}");
            return ExitCode::FAILURE;
        }
    };
    let summary = sweep_only(&root, &(exe, vec!["run-job".into()]), until, &only);
    if summary.unknown > 0 {
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three job folders (a/k1, a/k2, b/k3) and a queue naming b/k3 (12.5 s) and a/k2 (-).
    fn jobs_tree() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for rel in ["a/k1", "a/k2", "b/k3"] {
            std::fs::create_dir_all(root.path().join(rel)).unwrap();
            std::fs::write(root.path().join(rel).join("job.json"), "{}").unwrap();
        }
        std::fs::write(root.path().join(QUEUE_FILE), "b/k3\t12.5\na/k2\t-\n").unwrap();
        root
    }

    #[test]
    fn only_keeps_the_named_jobs_in_queue_order_and_reports_unknown_names() {
        let root = jobs_tree();
        let q = queue(root.path()).unwrap();
        let only = [
            "a/k1/".to_string(),
            "b/k3".to_string(),
            "a/nope".to_string(),
        ];
        let (kept, unknown) = select(q.clone(), root.path(), &only);
        let kept: Vec<_> = kept.iter().map(|j| j.dir.clone()).collect();
        assert_eq!(
            kept,
            [root.path().join("b/k3"), root.path().join("a/k1")],
            "queue order, a trailing slash accepted"
        );
        assert_eq!(unknown, ["a/nope"]);
        let (all, none) = select(q.clone(), root.path(), &[]);
        assert_eq!(all, q);
        assert!(none.is_empty());
        // A sweep restricted to an unknown name runs nothing and counts it.
        let s = sweep_only(
            root.path(),
            &(PathBuf::from("/bin/false"), Vec::new()),
            None,
            &["a/nope".to_string()],
        );
        assert_eq!((s.finished, s.unknown), (0, 1));
    }

    #[test]
    fn the_queue_orders_jobs_and_appends_the_unlisted_ones() {
        let root = jobs_tree();
        let q = queue(root.path()).unwrap();
        let rels: Vec<_> = q
            .iter()
            .map(|q| q.dir.strip_prefix(root.path()).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            rels,
            vec![
                PathBuf::from("b/k3"),
                PathBuf::from("a/k2"),
                PathBuf::from("a/k1")
            ]
        );
        assert_eq!(q[0].expected_s, Some(12.5));
        assert_eq!(q[1].expected_s, None);
    }

    #[test]
    fn a_bad_queue_line_names_the_file_and_line() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(QUEUE_FILE), "a/k1\t3\na/k2\tsoon\n").unwrap();
        let e = queue(root.path()).unwrap_err();
        assert!(e.contains("queue.tsv line 2"), "{e}");
        assert!(e.contains("`soon`"), "{e}");
    }

    #[test]
    fn jobs_that_do_not_fit_the_deadline_are_left_for_the_next_run() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("s/k")).unwrap();
        std::fs::write(root.path().join("s/k/job.json"), "{}").unwrap();
        std::fs::write(root.path().join(QUEUE_FILE), "s/k\t3600\n").unwrap();
        // The runner would fail on this job file; it must not even be started.
        let runner = (PathBuf::from("/nonexistent/memwall-job"), Vec::new());
        let s = sweep(
            root.path(),
            &runner,
            Some(SystemTime::now() + Duration::from_secs(60)),
        );
        assert_eq!(s.deferred, 1);
        assert_eq!(s.finished, 0);
        assert!(!root.path().join("s/k").join(RECORD_FILE).exists());
    }
}
