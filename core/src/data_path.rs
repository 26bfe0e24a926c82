//! The data search path: where a data file or folder that an experiment names by a relative
//! path (`data.path = "tinystories/TinyStories-valid-excerpt.txt"`, Checkmate's
//! `remat-graphs/`) is looked up, so that a clone without `../shared` beside it runs once the
//! data sits in any of these places. In order:
//!
//! 1. the path as written, relative to the repository (the folder above `experiments/`), where
//!    it exists (older experiment files wrote `../shared/data/...`);
//! 2. `$MEMWALL_DATA_DIR`, when set;
//! 3. the repository's `data/` (ignored by git);
//! 4. the user cache, `$XDG_CACHE_HOME/memwall` (else `~/.cache/memwall`), where Hugging Face
//!    and pip keep theirs;
//! 5. `../shared/data` beside the repository (`$MEMWALL_SHARED_DATA` names another), where the
//!    project's own machines keep the test data.
//!
//! The first place that holds the path wins. A path found nowhere resolves to the path as
//! written, and [`not_found`] says in one line where it was looked for.
//!
//! May import: nothing of the crate.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming a data folder searched before the repository's own.
pub const DATA_DIR_ENV: &str = "MEMWALL_DATA_DIR";

/// The environment variable naming the shared data folder (default: `../shared/data` beside
/// the repository).
pub const SHARED_DATA_ENV: &str = "MEMWALL_SHARED_DATA";

/// A folder of the search path and why it is on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDir {
    /// The folder.
    pub dir: PathBuf,
    /// Its place in words, e.g. "the repository's data/".
    pub what: &'static str,
}

/// The folders searched for a relative data path of the repository `repo` (steps 2-5 of the
/// module's list), in order; a folder that does not exist is listed too.
pub fn search_dirs(repo: &Path) -> Vec<SearchDir> {
    search_dirs_with(repo, &|name| std::env::var_os(name))
}

/// [`search_dirs`] with the environment variables `env` gives.
fn search_dirs_with(repo: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> Vec<SearchDir> {
    let mut dirs = Vec::new();
    if let Some(d) = env(DATA_DIR_ENV).filter(|d| !d.is_empty()) {
        dirs.push(SearchDir {
            dir: PathBuf::from(d),
            what: "$MEMWALL_DATA_DIR",
        });
    }
    dirs.push(SearchDir {
        dir: repo.join("data"),
        what: "the repository's data/",
    });
    let cache = env("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")));
    if let Some(c) = cache {
        dirs.push(SearchDir {
            dir: c.join("memwall"),
            what: USER_CACHE,
        });
    }
    let shared = env(SHARED_DATA_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared/data"));
    dirs.push(SearchDir {
        dir: shared,
        what: "the shared data beside the repository",
    });
    dirs
}

/// Where the data path `written` (as an experiment file writes it) of the repository `repo`
/// is: an absolute path as it is; a relative one at the first place of the search path that
/// holds it (file or folder), else `None`.
pub fn locate(repo: &Path, written: &Path) -> Option<PathBuf> {
    locate_in(repo, written, &search_dirs(repo))
}

/// [`locate`], with the place that holds it in words ("the user cache"; "the repository" for
/// the path as written, "the path as written" for an absolute one).
pub fn locate_place(repo: &Path, written: &Path) -> Option<(PathBuf, &'static str)> {
    locate_place_in(repo, written, &search_dirs(repo))
}

/// The user cache, `$XDG_CACHE_HOME/memwall` (else `~/.cache/memwall`): where `memwall data
/// fetch` puts what it downloads. `None` when neither variable is set.
pub fn user_cache() -> Option<PathBuf> {
    search_dirs(Path::new("."))
        .into_iter()
        .find(|d| d.what == USER_CACHE)
        .map(|d| d.dir)
}

/// The user cache's place in words.
const USER_CACHE: &str = "the user cache";

/// [`locate`] over the folders `dirs`.
fn locate_in(repo: &Path, written: &Path, dirs: &[SearchDir]) -> Option<PathBuf> {
    locate_place_in(repo, written, dirs).map(|(p, _)| p)
}

/// [`locate_place`] over the folders `dirs`.
fn locate_place_in(
    repo: &Path,
    written: &Path,
    dirs: &[SearchDir],
) -> Option<(PathBuf, &'static str)> {
    if written.is_absolute() {
        return written
            .exists()
            .then(|| (written.to_path_buf(), "the path as written"));
    }
    let as_written = repo.join(written);
    if as_written.exists() {
        return Some((as_written, "the repository"));
    }
    dirs.iter()
        .map(|d| (d.dir.join(written), d.what))
        .find(|(p, _)| p.exists())
}

/// [`locate`], or the path as written (relative to `repo`) when it is nowhere, so that what
/// reads it reports it missing (with [`not_found`]).
pub fn resolve(repo: &Path, written: &Path) -> PathBuf {
    locate(repo, written).unwrap_or_else(|| {
        if written.is_absolute() {
            written.to_path_buf()
        } else {
            repo.join(written)
        }
    })
}

/// One line saying that `written` is in none of the search path's places, naming each, and
/// how to put it there.
pub fn not_found(repo: &Path, written: &Path) -> String {
    if written.is_absolute() {
        return format!("{} does not exist", written.display());
    }
    let places: Vec<String> = search_dirs(repo)
        .iter()
        .map(|d| format!("{} ({})", d.dir.display(), d.what))
        .collect();
    format!(
        "{} is not under {} nor in any data folder: {}; put it in one of them or set {} to the \
         folder that holds it",
        written.display(),
        repo.display(),
        places.join(", "),
        DATA_DIR_ENV,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search path in its order: the path as written first, then the repository's
    /// `data/` before the shared folder; nowhere gives the path as written and a message
    /// naming every place.
    #[test]
    fn the_first_place_that_holds_a_path_wins() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let shared = tmp.path().join("shared/data");
        std::fs::create_dir_all(repo.join("data/tinystories")).unwrap();
        std::fs::create_dir_all(shared.join("tinystories")).unwrap();
        std::fs::create_dir_all(shared.join("remat-graphs")).unwrap();
        std::fs::write(shared.join("tinystories/a.txt"), "shared").unwrap();
        let home = tmp.path().join("home");
        let env = |name: &str| (name == "HOME").then(|| home.clone().into_os_string());
        let dirs = search_dirs_with(&repo, &env);
        let locate = |repo: &Path, p: &Path| locate_in(repo, p, &dirs);
        assert_eq!(
            dirs.iter().map(|d| d.dir.clone()).collect::<Vec<_>>(),
            [
                repo.join("data"),
                home.join(".cache/memwall"),
                repo.join("../shared/data")
            ]
        );
        let rel = Path::new("tinystories/a.txt");
        // Only beside the repository: found there.
        assert_eq!(
            locate(&repo, rel),
            Some(repo.join("../shared/data/tinystories/a.txt"))
        );
        // The repository's data/ comes first.
        std::fs::write(repo.join("data/tinystories/a.txt"), "repo").unwrap();
        assert_eq!(
            locate(&repo, rel),
            Some(repo.join("data/tinystories/a.txt"))
        );
        // The path as written comes before every data folder (the old `../shared/data/...`).
        let old = Path::new("../shared/data/tinystories/a.txt");
        assert_eq!(locate(&repo, old), Some(repo.join(old)));
        // Folders are found too.
        assert_eq!(
            locate(&repo, Path::new("remat-graphs")),
            Some(repo.join("../shared/data/remat-graphs"))
        );
        // Nowhere: the path as written, and one line naming the places.
        let missing = Path::new("tinystories/b.txt");
        assert_eq!(locate(&repo, missing), None);
        let msg = not_found(&repo, missing);
        assert!(!msg.contains('\n'), "{msg}");
        for what in [
            "the repository's data/",
            "the shared data beside",
            DATA_DIR_ENV,
        ] {
            assert!(msg.contains(what), "{what} missing from: {msg}");
        }
    }
}
