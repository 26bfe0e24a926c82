//! `memwall-job`: the slim job runner carried to GPU machines (Burn and the job format only;
//! no polars, plotters or minijinja). Its records are ingested and reported by `memwall
//! report` on any machine.
//!
//! - `memwall-job run-job --job FILE --out DIR [--inject-slowdown STUDY/CONFIG=FACTOR]`: run one
//!   job in this process (the slowdown: fault injection for the nightly's tests, off by default).
//! - `memwall-job sweep-dir DIR [--until UNIX_SECONDS] [--only STUDY/KEY]...`: run every
//!   `DIR/<study>/<key>/job.json` (or only those named) without a `record.json`, each in its own
//!   process (a crash or out-of-memory costs one job),
//!   Checkmate configurations planned first, in `DIR/queue.tsv`'s order, stopping cleanly
//!   before the deadline ([`memwall_runner::sweep`]).
//! - `memwall-job version`: the version and the revision the runner was built from (what its
//!   records carry as `env.git_revision`).
//! - `memwall-job backends`: the backends this build runs, one per line (`flex`, and `ndarray`
//!   and `cuda` when built with them), so a bundle can refuse a runner without CUDA.

use std::path::PathBuf;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: memwall-job run-job --job FILE --out DIR [--inject-slowdown STUDY/CONFIG=FACTOR]\n       memwall-job sweep-dir DIR [--until UNIX_SECONDS] [--only STUDY/KEY]...\n       \
         memwall-job backends\n       memwall-job version"
    );
    eprintln!("       memwall-job bench --job FILE --out FILE.jsonl [--repeats N] [--warmup N]");
    eprintln!("       memwall-job fusion-chains [--n N] [--repeats R] [--ir-n N] [--backend cuda|flex] --out FILE.json");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    memwall_runner::init_logging();
    memwall_runner::init_threads();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run-job") => {
            let get = |flag: &str| {
                args.iter()
                    .position(|a| a == flag)
                    .and_then(|i| args.get(i + 1))
                    .map(PathBuf::from)
            };
            let (Some(job), Some(out)) = (get("--job"), get("--out")) else {
                return usage();
            };
            // Fault injection for the nightly's tests (off unless given).
            let slowdown = match get("--inject-slowdown") {
                Some(s) => match s.to_string_lossy().parse() {
                    Ok(s) => Some(s),
                    Err(e) => {
                        eprintln!("error: --inject-slowdown {e}");
                        return ExitCode::from(2);
                    }
                },
                None => None,
            };
            match memwall_runner::job::run_job_file_with(&job, &out, slowdown.as_ref()) {
                Ok(r) => {
                    eprintln!("{}: {}", r.spec.config, r.status.as_str());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("sweep-dir") => memwall_runner::sweep::cli(&args[1..]),
        Some("fusion-chains") => memwall_runner::fusion_chains::cli(&args[1..]),
        Some("version") => {
            println!(
                "memwall-job {} {}",
                env!("CARGO_PKG_VERSION"),
                memwall_runner::measure::BUILD_REVISION
            );
            ExitCode::SUCCESS
        }
        Some("bench") => memwall_runner::bench::cli(&args[1..]),
        Some("backends") => {
            println!("flex");
            if cfg!(feature = "ndarray") {
                println!("ndarray");
            }
            if cfg!(feature = "cuda") {
                println!("cuda");
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}
