//! A bundle's `run.sh`: runs the bundle's [plan](super::tiers) on a machine without Rust, tier by
//! tier, packing what finished after every step into a folder the caller names, so that a GPU
//! session cut short by its limit loses at most the step in flight.
//!
//! What it packs (each archive written beside and renamed into place, checked against the
//! 16 MiB a GPU session brings back per file):
//! - `results.tar.gz`: the manifest, the plan, every job folder with a record (job file, record,
//!   log) and the PyTorch rows, attribution and chains files; after every step. Over 16 MiB, the
//!   job folders are split over `results.tar.gz`, `results-2.tar.gz`, ..., each importable
//!   alone.
//! - `logs.tar.gz`: the last 256 KiB of every log (jobs that failed or were stopped included);
//!   after every step.
//! - `cache.tar.gz`: the CubeCL cache files this run added or changed (autotune results only;
//!   compiled kernels too with `MEMWALL_PACK_KERNELS=1`), with the manifest so that `memwall
//!   import` takes it; what was carried in unchanged is not packed again; after every step, so
//!   a step stopped at the deadline keeps the tunings it made.
//!
//! May import: `super` (the manifest, the plan), `crate::install::sh_quote`.

use super::tiers::PLAN_FILE;
use super::{expected_line, Manifest, RESULTS_ARCHIVE};
use crate::install::sh_quote;

/// Seconds `run.sh --minutes N` keeps for packing the results before the N minutes end.
pub const PACK_S: u64 = 30;

/// The largest file a GPU session brings back from its output folder, bytes (docs/src/operations/gpu-runs.md).
pub const RETURN_LIMIT_BYTES: u64 = 16 << 20;

/// The archive of the logs' tails.
pub const LOGS_ARCHIVE: &str = "logs.tar.gz";

/// The archive of the CubeCL cache entries a run added.
pub const CACHE_ARCHIVE: &str = "cache.tar.gz";

/// What `run.sh` does after its settings (`run-steps.sh` beside this file, a shell file so that
/// it reads, and is checked, as one): its functions, packing, the device check, the steps of
/// the plan and the main loop.
const RUN_STEPS_SH: &str = include_str!("run-steps.sh");

/// The bundle's `run.sh`: its sections in the order they run. `default_minutes` is the
/// deadline without `--minutes` (`None`: no deadline).
pub fn run_script(m: &Manifest, default_minutes: Option<f64>) -> String {
    let mut s = header(m, default_minutes);
    s.push_str(&arguments(default_minutes));
    s.push_str(RUN_STEPS_SH);
    s
}

/// run.sh's head: what it is and how it is used (the comment `--help` prints), then the
/// settings the other sections read.
fn header(m: &Manifest, default_minutes: Option<f64>) -> String {
    let jobs: usize = m.studies.iter().map(|s| s.jobs.len()).sum();
    let default = match default_minutes {
        Some(min) => {
            format!("without --minutes it stops before {min} minutes (one GPU-session command)")
        }
        None => "without --minutes it runs everything".to_string(),
    };
    format!(
        r#"#!/usr/bin/env bash
# memwall bundle ({format}), written {created} at revision {rev}: {jobs} job(s) of {studies} on
# {target}, profile {profile}, run in the tiers of {plan}. Needs bash, coreutils, awk and tar; for
# CUDA the NVIDIA driver (nvidia-smi) and NVRTC (libnvrtc.so, e.g. /usr/local/cuda/lib64;
# CUDA_HOME or NVRTC_DIR names another folder). No Rust.
#
#   ./run.sh                  run the plan's steps in order, tier 1 first (each tier fits one
#                             command; every memwall row followed at once by its PyTorch eager
#                             twin), packing after every step; {default}; a rerun
#                             skips what finished; rows the record store held already{resumed}
#                             are not in the bundle (--dry-run lists them)
#   ./run.sh --minutes N      stop cleanly before N minutes: a step starts only when its
#                             expected seconds fit, one still running {pack_s} s before the end is
#                             stopped without a result, and what finished is packed
#   ./run.sh --results DIR    write the archives into DIR (default: this folder):
#                             {results} (records, PyTorch rows; split into results-2.tar.gz
#                             and on past 16 MiB), {logs} (every log's last 256 KiB), {cache}
#                             (CubeCL autotune entries this run added; compiled kernels too with
#                             MEMWALL_PACK_KERNELS=1), each under 16 MiB, after every step
#   ./run.sh --dry-run [--minutes N]
#                             print the plan: each tier's steps with their expected seconds, and
#                             what does not fit in N minutes; runs nothing
#   MEMWALL_SKIP_TORCH=1 ./run.sh     leave the PyTorch twin out
#   MEMWALL_TORCH_PROCESS=each|shared ./run.sh
#                             one Python process per twin, or one for all the twins of the run
#                             (the default on CUDA: Python, torch and the CUDA context start
#                             once; the process keeps its CUDA context, whose device memory is
#                             not memwall's, while memwall's jobs run); each on the CPU
#
# Expected device time: {expected}.
# Bring the archives back and run `memwall import` on every one of them in the repository (after
# each partial run too: the import takes what finished and skips what it already has).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
TARGET={target}
DEFAULT_MINUTES={default_minutes}
PACK_S={pack_s}
RETURN_LIMIT="${{MEMWALL_RETURN_LIMIT:-{return_limit}}}"
RESUME_GPU={resume_gpu}
RESULTS_ARCHIVE={results}
LOGS_ARCHIVE={logs}
CACHE_ARCHIVE={cache}
PLAN={plan}

die() {{ echo "run.sh: $*" >&2; exit 1; }}

"#,
        format = m.format,
        created = m.created_at,
        rev = m.git_revision,
        expected = expected_line(m),
        studies = m
            .studies
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        target = m.target.as_str(),
        profile = m.profile,
        results = RESULTS_ARCHIVE,
        logs = LOGS_ARCHIVE,
        cache = CACHE_ARCHIVE,
        plan = PLAN_FILE,
        pack_s = PACK_S,
        return_limit = RETURN_LIMIT_BYTES,
        default_minutes = sh_quote(&default_minutes.map(|m| m.to_string()).unwrap_or_default()),
        resumed = m
            .resume
            .as_ref()
            .map(|r| format!(" for the {}", r.gpu_model))
            .unwrap_or_default(),
        resume_gpu = sh_quote(
            m.resume
                .as_ref()
                .map(|r| r.gpu_model.as_str())
                .unwrap_or("")
        ),
    )
}

/// run.sh's argument parsing and the deadline it sets.
fn arguments(default_minutes: Option<f64>) -> String {
    let example = default_minutes.unwrap_or(9.0);
    format!(
        r#"MINUTES="$DEFAULT_MINUTES"
RESULTS=""
DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) MINUTES="${{2:-}}"; shift 2 || die "--minutes takes a number of minutes";;
        --minutes=*) MINUTES="${{1#*=}}"; shift;;
        --results) RESULTS="${{2:-}}"; shift 2 || die "--results takes a folder";;
        --results=*) RESULTS="${{1#*=}}"; shift;;
        --dry-run) DRY=1; shift;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0;;
        *) die "unknown argument \`$1\` (usage: ./run.sh [--minutes N] [--results DIR] [--dry-run])";;
    esac
done
if [ -n "$MINUTES" ]; then
    [[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--minutes $MINUTES: not a number of minutes (e.g. --minutes {example})"
fi
# The results folder, relative to where run.sh was called from.
if [ "$DRY" = 0 ]; then
    RESULTS="${{RESULTS:-$HERE}}"
    mkdir -p "$RESULTS" || die "--results $RESULTS: cannot create the folder"
    RESULTS="$(cd "$RESULTS" && pwd)"
fi
cd "$HERE"
RUNNER="${{MEMWALL_JOB:-./bin/memwall-job}}"
START=$(date +%s)
DEADLINE=""
if [ -n "$MINUTES" ]; then
    # What is left at the deadline goes to packing the results.
    DEADLINE=$(awk -v s="$START" -v m="$MINUTES" -v p="$PACK_S" 'BEGIN {{ printf "%d", s + m * 60 - p }}')
    if [ "$DRY" = 0 ]; then
        echo "deadline: $(date -d "@$DEADLINE" 2>/dev/null || echo "$DEADLINE") ($PACK_S s before the $MINUTES minutes end, for packing)"
    fi
fi
# Seconds left before the deadline (a large number without one).
left() {{ if [ -n "$DEADLINE" ]; then echo $(( DEADLINE - $(date +%s) )); else echo 999999999; fi; }}

"#
    )
}
