//! The checkout's git revision, named in bundles, Slurm plans and history entries.

/// The standard output of `git ARGS` in the current directory, `None` when git is missing or
/// the command fails.
pub fn git_output(args: &[&str]) -> Option<Vec<u8>> {
    std::process::Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| o.stdout)
}

/// `git rev-parse --short HEAD`, `-dirty` appended when the tree has uncommitted changes to
/// tracked files; "unknown" outside a git checkout.
pub fn git_revision() -> String {
    let git =
        |args: &[&str]| git_output(args).map(|o| String::from_utf8_lossy(&o).trim().to_string());
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) if !rev.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{rev}-dirty")
            } else {
                rev
            }
        }
        _ => "unknown".into(),
    }
}
