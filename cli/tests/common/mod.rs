//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod http;

// The driver's test helpers (the workspace root, the shared excerpt, smoke run options with
// this build's `memwall-job`, temporary paths, edited experiment files), shared by both.
#[path = "../../../driver/tests/common/mod.rs"]
mod driver_common;
pub use driver_common::*;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the built `memwall` in `dir` with `args` (without the record-store and corpus
/// overrides of the caller's environment).
pub fn memwall(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memwall"))
        .current_dir(dir)
        .args(args)
        .env_remove("MEMWALL_RUNS")
        .env_remove("MEMWALL_DATA")
        .output()
        .expect("memwall starts")
}

/// A command's standard output and error, in that order.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `memwall plan ARGS` (the built binary); returns (success, stdout, stderr).
pub fn plan(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .arg("plan")
        .args(args)
        .output()
        .expect("memwall runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A path as the `&str` an argument list takes.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `memwall bundle` of `peak_memory` at the smoke size for `target` with `runner` and the
/// shared excerpt, into `out`: the configurations `only`, then `extra` flags.
pub fn bundle_smoke(
    dir: &Path,
    out: &Path,
    runner: &Path,
    target: &str,
    only: &str,
    extra: &[&str],
) -> Output {
    let experiment = root().join("experiments/peak_memory.toml");
    let data = excerpt();
    let mut args = vec![
        "bundle",
        s(&experiment),
        "--profile",
        "smoke",
        "--target",
        target,
        "--out",
        s(out),
        "--runner",
        s(runner),
        "--data",
        s(&data),
        "--only",
        only,
    ];
    args.extend_from_slice(extra);
    memwall(dir, &args)
}

/// A command for the external tool `name`, which `scripts/setup.sh` installs from the Debian
/// and Ubuntu package `package`.
///
/// # Panics
/// When `name` is not on the PATH: the message names the tool, its package and the line that
/// installs it, so a test that needs it fails with what to do rather than "No such file".
#[track_caller]
pub fn tool(name: &str, package: &str) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|d| d.join(name).is_file()) {
        panic!(
            "this test needs `{name}` (Debian/Ubuntu package `{package}`), which is not on the \
             PATH: run `scripts/setup.sh` (it installs what `just test` needs), or \
             `sudo apt-get install -y {package}`"
        );
    }
    Command::new(name)
}

/// A copy of the repository's `dirs` and `files` (e.g. `experiments`, `datasets.toml`) in
/// `work`, as a clone has them, with no `../shared` beside it.
pub fn clone_alone(work: &Path, dirs: &[&str], files: &[&str]) {
    std::fs::create_dir_all(work).unwrap();
    for d in dirs {
        let st = Command::new("cp")
            .arg("-r")
            .arg(root().join(d))
            .arg(work.join(d))
            .status()
            .unwrap();
        assert!(st.success(), "copying {d}");
    }
    for f in files {
        std::fs::copy(root().join(f), work.join(f)).unwrap();
    }
}

/// `memwall args` in `repo` with the data search path cut off from this machine's folders:
/// the user cache in `sandbox/cache`, the shared data an empty `sandbox/no-shared-data`, no
/// `$MEMWALL_DATA_DIR`, and downloads from the mirror `mirror` only (none: offline).
pub fn memwall_alone(repo: &Path, sandbox: &Path, mirror: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memwall"));
    c.current_dir(repo)
        .args(args)
        .env_remove("MEMWALL_RUNS")
        .env_remove("MEMWALL_DATA")
        .env_remove("MEMWALL_DATA_DIR")
        .env_remove("MEMWALL_DATA_URL")
        .env_remove("MEMWALL_OFFLINE")
        .env("XDG_CACHE_HOME", sandbox.join("cache"))
        .env("MEMWALL_SHARED_DATA", sandbox.join("no-shared-data"));
    match mirror {
        Some(m) => c.env("MEMWALL_DATA_URL", m),
        None => c.env("MEMWALL_OFFLINE", "1"),
    };
    c.output().expect("memwall starts")
}
