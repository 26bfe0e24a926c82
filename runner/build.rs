//! Embeds the revision the runner is built from (`MEMWALL_BUILD_REVISION`), so a job records the
//! code that ran it, not whatever `git rev-parse` prints where the job happens to run.
//!
//! The revision is `MEMWALL_BUILD_REVISION` when set at build time (a build outside git, e.g.
//! from a source archive), else `git rev-parse --short=12 HEAD`, with `-dirty` appended when the
//! runner's inputs (`core/`, `runner/`, `Cargo.toml`, `Cargo.lock`) differ from that commit, else
//! `unknown`. Cargo reruns this script when HEAD moves (a commit, a checkout) or those inputs
//! change.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=MEMWALL_BUILD_REVISION");
    for input in [
        "src",
        "../core/src",
        "../Cargo.lock",
        "../Cargo.toml",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        println!(
            "cargo:rerun-if-changed={}",
            git_dir.join("packed-refs").display()
        );
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", git_dir.join(branch).display());
        }
    }
    let revision = std::env::var("MEMWALL_BUILD_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(|| {
            let rev = git(&["rev-parse", "--short=12", "HEAD"]).filter(|r| !r.is_empty())?;
            let dirty = git(&[
                "status",
                "--porcelain",
                "--",
                "../core",
                "../runner",
                "../Cargo.toml",
                "../Cargo.lock",
            ])
            .is_some_and(|s| !s.is_empty());
            Some(if dirty { format!("{rev}-dirty") } else { rev })
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=MEMWALL_BUILD_REVISION={revision}");
}
