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
    // The runner's inputs that differ from HEAD (paths relative to the repository's top).
    let changed = || -> Vec<String> {
        git(&[
            "status",
            "--porcelain",
            "--",
            "../core",
            "../runner",
            "../Cargo.toml",
            "../Cargo.lock",
        ])
        .map(|s| {
            s.lines()
                // `XY path`; `git` trims the output, so the first line may have lost the
                // blank of an unstaged change (` M path` reads `M path`).
                .filter_map(|l| l.trim_start().split_once(' '))
                .map(|(_, p)| p.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
    };
    let mut changes = String::new();
    let revision = std::env::var("MEMWALL_BUILD_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(|| {
            let rev = git(&["rev-parse", "--short=12", "HEAD"]).filter(|r| !r.is_empty())?;
            let files = changed();
            if files.is_empty() {
                return Some(rev);
            }
            const SHOWN: usize = 12;
            let more = files.len().saturating_sub(SHOWN);
            changes = format!(
                "built from {rev} with uncommitted changes to {}{}",
                files[..files.len().min(SHOWN)].join(", "),
                if more > 0 {
                    format!(" and {more} more file(s)")
                } else {
                    String::new()
                }
            );
            Some(format!("{rev}-dirty"))
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=MEMWALL_BUILD_REVISION={revision}");
    println!("cargo:rustc-env=MEMWALL_BUILD_CHANGES={changes}");
}
