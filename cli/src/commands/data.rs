//! `memwall data list` and `memwall data fetch` over the data manifest (`datasets.toml`), and
//! the data check that `memwall reproduce` and `memwall run` make before the first study runs
//! ([`ensure_data`]): what is missing is fetched, or named in one line each with the command
//! that gets it, and no study runs.

use super::*;
use memwall_core::data_path;
use memwall_core::datasets::{self, Dataset, Integrity, Manifest};
use memwall_driver::data::fetch::{self, FetchError};

/// `memwall data`'s actions.
#[derive(Subcommand)]
pub(crate) enum DataAction {
    /// Every data set of `datasets.toml`: its size, where the data search path finds it (or
    /// where it would be fetched from), and whether its size and SHA-256 are the manifest's.
    List,
    /// Download the data sets that no folder of the search path holds (every one, or those
    /// named) into the user cache, resuming a partial download and refusing a file whose size
    /// or SHA-256 differs from the manifest's; a cached copy that differs is fetched again.
    Fetch {
        /// Data sets: a path of `datasets.toml` or a folder holding some (e.g. `remat-graphs`);
        /// default: every one.
        names: Vec<String>,
        /// A mirror that serves every data set at `<URL>/<path>` (e.g. any HTTP server over a
        /// copy of a data folder), instead of each data set's own origin.
        #[arg(long, env = "MEMWALL_DATA_URL")]
        from: Option<String>,
        /// Folder to download into (default: the user cache, `$XDG_CACHE_HOME/memwall`, else
        /// `~/.cache/memwall`).
        #[arg(long)]
        to: Option<PathBuf>,
    },
}

/// Runs `memwall data <action>` in the repository in the current folder.
pub(crate) fn data(action: DataAction) -> Result<()> {
    let repo = Path::new(".");
    let manifest = Manifest::load(repo)?.with_context(|| {
        format!(
            "no {} in this folder: run `memwall data` in the repository's root",
            datasets::MANIFEST
        )
    })?;
    match action {
        DataAction::List => {
            list_data(repo, &manifest);
            Ok(())
        }
        DataAction::Fetch { names, from, to } => {
            let selected = manifest.select(&names).map_err(anyhow::Error::msg)?;
            let to = cache_dir(to)?;
            let mut failed = 0;
            for d in selected {
                match get(repo, &manifest, d, from.as_deref(), &to) {
                    Ok(line) => println!("{line}"),
                    Err(why) => {
                        eprintln!("error: {}: {why}", d.path);
                        if why.contains("no public origin") {
                            eprintln!(
                                "  fetch it from a mirror (--from URL or {}), or put it on the \
                                 data search path",
                                datasets::DATA_URL_ENV
                            );
                        }
                        failed += 1;
                    }
                }
            }
            if failed > 0 {
                bail!("{failed} data set(s) not fetched");
            }
            Ok(())
        }
    }
}

/// The folder downloads go to: `to`, else the user cache.
fn cache_dir(to: Option<PathBuf>) -> Result<PathBuf> {
    to.or_else(data_path::user_cache)
        .context("no user cache: neither XDG_CACHE_HOME nor HOME is set; give a folder with --to")
}

/// Prints one line per data set: path, size, where it is found and whether its checksum holds,
/// or where it would be fetched from.
fn list_data(repo: &Path, manifest: &Manifest) {
    let mirror = datasets::mirror_from_env();
    let width = manifest
        .datasets
        .iter()
        .map(|d| d.path.len())
        .max()
        .unwrap_or(0);
    println!("{:width$}  {:>9}  found", "data set", "bytes");
    for d in &manifest.datasets {
        let found = match d.locate(repo) {
            Some(loc) => {
                let state = match d.check(&loc.at) {
                    Ok(i) => i.describe(d),
                    Err(e) => format!("unreadable: {e}"),
                };
                // The folder of the search path that holds it: the file less the data set's path.
                let mut folder = loc.at.clone();
                for _ in Path::new(&d.path).components() {
                    folder.pop();
                }
                format!("in {} ({}), {state}", folder.display(), loc.place)
            }
            None => match d.origin(mirror.as_deref()) {
                Some(o) => format!("missing: `memwall data fetch` gets it from {}", o.url),
                None => format!(
                    "missing, no public origin recorded: set {} to a mirror",
                    datasets::DATA_URL_ENV
                ),
            },
        };
        println!("{:width$}  {:>9}  {found}", d.path, d.bytes);
    }
}

/// Makes `d` present on the search path: nothing when a folder holds it intact, else a download
/// into `to` (a copy in `to` that differs is deleted and fetched again; one that differs in
/// another folder is left to its owner). The line to print, or why it is not there.
fn get(
    repo: &Path,
    manifest: &Manifest,
    d: &Dataset,
    mirror: Option<&str>,
    to: &Path,
) -> std::result::Result<String, String> {
    if let Some(loc) = d.locate(repo) {
        let integrity = d
            .check(&loc.at)
            .map_err(|e| format!("{}: {e}", loc.at.display()))?;
        if integrity == Integrity::Intact {
            return Ok(format!(
                "{}: present at {} ({})",
                d.path,
                loc.at.display(),
                loc.place
            ));
        }
        if !loc.at.starts_with(to) {
            return Err(format!(
                "{} ({}) holds {}, and memwall reads that copy first: replace or remove it",
                loc.at.display(),
                loc.place,
                integrity.describe(d)
            ));
        }
        eprintln!(
            "{}: the cached copy {} was refused ({}); fetching it again",
            d.path,
            loc.at.display(),
            integrity.describe(d)
        );
        std::fs::remove_file(&loc.at).map_err(|e| format!("{}: {e}", loc.at.display()))?;
    }
    let fetched = download(manifest, d, mirror, to).map_err(|e| e.to_string())?;
    let resumed = if fetched.resumed_from > 0 {
        format!(", resumed at byte {}", fetched.resumed_from)
    } else {
        String::new()
    };
    Ok(format!(
        "{}: fetched into {} ({} bytes downloaded{resumed}; size and SHA-256 hold)",
        d.path,
        fetched.at.display(),
        fetched.downloaded
    ))
}

/// Downloads `d` from the mirror or its origin into `to`, unless downloads are forbidden.
fn download(
    manifest: &Manifest,
    d: &Dataset,
    mirror: Option<&str>,
    to: &Path,
) -> std::result::Result<fetch::Fetched, FetchError> {
    if datasets::offline_from_env() {
        return Err(FetchError::Offline);
    }
    let origin = d.origin(mirror).ok_or_else(|| FetchError::NoOrigin {
        source_text: d.source.clone(),
    })?;
    fetch::fetch(d, &origin, &manifest.path, to, true)
}

/// Before a run of the experiment files `files`: every data set of the manifest they read at
/// the run's profile is found on the search path or fetched into the user cache (from
/// `$MEMWALL_DATA_URL` or its origin). A copy that differs from the manifest is reported and
/// used. What cannot be had is named, one line each with the command that gets it, and the run
/// stops before any study runs, so no record store is written.
pub(crate) fn ensure_data(files: &[PathBuf], opts: &RunOptions) -> Result<()> {
    let (_, profile) = driver::resolve(opts)?;
    let Some((manifest, needed)) = fetch::needed(files, profile, opts.data.as_deref())? else {
        return Ok(());
    };
    let Some(repo) = files.first().map(|f| Study::base_dir(f)) else {
        return Ok(());
    };
    let mirror = datasets::mirror_from_env();
    let to = cache_dir(None);
    let mut missing = 0;
    for n in &needed {
        let d = &n.dataset;
        if let Some(loc) = d.locate(&repo) {
            match d.check(&loc.at) {
                Ok(Integrity::Intact) => {}
                Ok(i) => eprintln!(
                    "warning: {} ({}) holds {}: results read from it will not match the \
                     published records",
                    loc.at.display(),
                    loc.place,
                    i.describe(d)
                ),
                Err(e) => eprintln!("warning: {}: {e}", loc.at.display()),
            }
            continue;
        }
        let outcome = match &to {
            Ok(to) => download(&manifest, d, mirror.as_deref(), to),
            Err(e) => Err(FetchError::Io {
                path: PathBuf::from("~/.cache/memwall"),
                source: std::io::Error::other(e.to_string()),
            }),
        };
        match outcome {
            Ok(f) => eprintln!(
                "fetched {} into {} ({} bytes; size and SHA-256 hold)",
                d.path,
                f.at.display(),
                d.bytes
            ),
            Err(e) => {
                let readers: Vec<String> =
                    n.read_by.iter().map(|f| f.display().to_string()).collect();
                eprintln!(
                    "error: missing {} ({} bytes, read by {}): {e}; {}",
                    d.path,
                    d.bytes,
                    readers.join(", "),
                    hint(&e, &d.path)
                );
                missing += 1;
            }
        }
    }
    if missing > 0 {
        bail!("{missing} data set(s) missing: no study was run");
    }
    Ok(())
}

/// How to get the data set `path` that could not be fetched for the reason `e`.
fn hint(e: &FetchError, path: &str) -> String {
    let or = "or put it on the data search path (`memwall data list` names the folders)";
    match e {
        FetchError::NoOrigin { .. } => {
            format!("get it from a mirror with `memwall data fetch {path} --from URL`, {or}")
        }
        FetchError::Offline => format!(
            "get it with `memwall data fetch {path}` where downloads are allowed (without {}), {or}",
            datasets::OFFLINE_ENV
        ),
        _ => format!(
            "get it with `memwall data fetch {path}` once its origin answers (`--from URL` for \
             a mirror), {or}"
        ),
    }
}
