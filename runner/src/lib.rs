//! memwall-runner: the training job. One job (a [`memwall_core::spec::JobSpec`]) trains the
//! transformer on Burn with its memory strategy and measures it, in its own process, and
//! writes one [`memwall_core::record::JobRecord`].
//!
//! - [`model`]: the decoder-only transformer and its memory-efficient attention (an autodiff
//!   operation with its own backward);
//! - [`train`]: the training loop and the strategies' executors (segment checkpointing, the
//!   fused optimizer step, mixed precision, the budget knapsack);
//! - [`measure`]: peak-memory probes (counting allocator, CUDA pool) and device faults;
//! - [`device`]: detecting a GPU before Burn's CUDA backend is touched;
//! - [`fusion_chains`]: the `fusion_ir` study's elementwise chains on Burn (`memwall-job
//!   fusion-chains`, the study's CUDA measurement from a GPU bundle);
//! - [`data`]: token streams and batches (the corpus is tokenized by the driver);
//! - [`kernels`]: memwall's CPU kernels for the model's hot operations on flex (GELU, the
//!   attention heads' layout, bf16 products with AVX512-BF16);
//! - [`job`]: running a job file, in this process or in a child process, and where every caller
//!   finds the job runner ([`job::job_runner`]: `memwall-job` beside it, or `MEMWALL_JOB`);
//! - [`sweep`]: `memwall-job sweep-dir`, a bundle's jobs one process each in priority order,
//!   stopping before a deadline;
//! - [`bench`]: the attribution benchmark (`memwall-job bench`), one operation of the model at
//!   a time.
//!
//! May import: `memwall-core` and Burn (with CubeCL for CUDA) only. No solver, no polars, no
//! renderer: this crate's `memwall-job` binary is what travels to GPU machines.

#![warn(missing_docs)]

pub mod bench;
pub mod data;
pub mod device;
pub mod fusion_chains;
pub mod job;
pub mod kernels;
pub mod measure;
pub mod model;
pub mod sweep;
pub mod train;

pub use memwall_core::error::{Error, Result};

/// The Burn version memwall is built against (pinned in the workspace `Cargo.toml`).
pub const BURN_VERSION: &str = "0.21.0";

/// Sends `tracing` logs to stderr (stdout carries the commands' results), with colors only on
/// a terminal; the filter comes from `MEMWALL_LOG` (default
/// `info,highs=error,usvg=error,burn_collective=warn`: HiGHS reports a solve stopped by its
/// time limit as a warning, and the commands print each solve's status; usvg notes the
/// zero-height bars of a figure it skips; burn-collective prints its configuration struct).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEMWALL_LOG").unwrap_or_else(|_| {
                // burn-collective logs its whole configuration as a multi-line struct at info
                // on every FSDP run: its warnings and errors only.
                tracing_subscriber::EnvFilter::new(
                    "info,highs=error,usvg=error,burn_collective=warn",
                )
            }),
        )
        .init();
}

/// Makes the calling (main) thread a worker of rayon's global pool, the pool flex's operations,
/// the gemm crate and memwall's kernels run on: `RAYON_NUM_THREADS` (default: the CPUs this
/// process may use) threads in all, this one included. Without it rayon starts that many
/// workers beside the main thread, which blocks while they run each parallel operation: on two
/// cores three threads, and every operation a hand-off to a sleeping worker and back. With it,
/// the main thread runs its share of every operation and wakes one worker. Measured on a 2-core
/// AMD EPYC (AVX512-BF16), `reference/bench_cpu.py` on the `peak_memory` `cpu` bundle, 3
/// alternating rounds, samples/s median: f32 control 64.0 to 74.1, bfloat16 71.9 to 83.3.
///
/// Call it first in `main`, before anything uses rayon. Where the global pool already exists
/// it changes nothing and logs why.
pub fn init_threads() {
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .use_current_thread()
        .build_global()
    {
        tracing::warn!("rayon's pool was already started, the main thread stays outside it: {e}");
    }
}
