//! Fetching the data sets of the manifest ([`memwall_core::datasets`]) into the user cache:
//! over HTTP(S) from each data set's origin or a mirror, resuming a partial download with a
//! Range request, refusing a file whose size or SHA-256 differs from the manifest's; and what
//! the studies of a run need before it starts ([`needed`]).
//!
//! A download goes to `<cache>/<path>.part` and becomes `<cache>/<path>` only once its size and
//! checksum are the manifest's, so a reader never sees a partial or a wrong file. A `.part` left
//! by an interrupted download is resumed by the next attempt (three in one call, and any later
//! call), from its length, with `Range: bytes=<length>-<size-1>`; a server that ignores the
//! range (status 200) is read from the start again.

use crate::error::Result;
use crate::spec::{Study, StudyKind};
use memwall_core::datasets::{Dataset, Manifest, Origin};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Attempts of one download: the first and two resumptions after an interruption.
const ATTEMPTS: u32 = 3;

/// Why a data set could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The data set has no `url` and no mirror is named.
    #[error("no public origin is recorded for it ({source_text})")]
    NoOrigin {
        /// The data set's `source`.
        source_text: String,
    },
    /// Downloads are forbidden (`$MEMWALL_OFFLINE`).
    #[error("offline ({} is set)", memwall_core::datasets::OFFLINE_ENV)]
    Offline,
    /// The request failed or the server answered with an error status.
    #[error("{url}: {message}")]
    Http {
        /// The URL.
        url: String,
        /// What failed (the client's error, or the status).
        message: String,
    },
    /// The connection broke every time before the whole file arrived; the part stays for the
    /// next call to resume.
    #[error(
        "{url}: the download broke off at {have} of {bytes} bytes {ATTEMPTS} times; {part} is \
         kept and the next fetch resumes it"
    )]
    Interrupted {
        /// The URL.
        url: String,
        /// Bytes held in the part.
        have: u64,
        /// The data set's size.
        bytes: u64,
        /// The partial file.
        part: String,
    },
    /// The whole file arrived and its size or SHA-256 is not the manifest's; it was deleted.
    #[error(
        "{url} gave {what} {got} where the manifest ({manifest}) says {expected}: the file was \
         refused and deleted"
    )]
    Mismatch {
        /// The URL.
        url: String,
        /// `bytes` or `SHA-256`.
        what: &'static str,
        /// What the download had.
        got: String,
        /// What the manifest says.
        expected: String,
        /// The manifest's file.
        manifest: String,
    },
    /// A local file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A finished download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Where the data set now is.
    pub at: PathBuf,
    /// Bytes downloaded by this call (less than the size when a part was resumed).
    pub downloaded: u64,
    /// Bytes of a part left by an earlier interrupted download that this call kept.
    pub resumed_from: u64,
}

/// Downloads the data set `d` from `origin` into `to/<path>` (creating folders), showing a
/// progress bar on a terminal's standard error when `progress`.
///
/// # Errors
/// [`FetchError::Http`] for a refused connection or an error status,
/// [`FetchError::Interrupted`] when [`ATTEMPTS`] tries broke off (the part is kept),
/// [`FetchError::Mismatch`] naming both sizes or both checksums (the file is deleted),
/// [`FetchError::Io`] when the cache cannot be written.
pub fn fetch(
    d: &Dataset,
    origin: &Origin,
    manifest: &Path,
    to: &Path,
    progress: bool,
) -> std::result::Result<Fetched, FetchError> {
    let dest = to.join(&d.path);
    let part = PathBuf::from(format!("{}.part", dest.display()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let http = |message: String| FetchError::Http {
        url: origin.url.clone(),
        message,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| http(format!("cannot start the HTTP runtime: {e}")))?;
    let client = reqwest::Client::builder()
        .user_agent(concat!("memwall/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| http(format!("cannot build the HTTP client: {e}")))?;
    let bar = progress_bar(d, progress);
    let resumed_from = part_len(&part).min(d.bytes);
    let mut downloaded = 0;
    for _ in 0..ATTEMPTS {
        let have = part_len(&part);
        if have >= d.bytes {
            break;
        }
        bar.set_position(have);
        match runtime.block_on(attempt(&client, d, origin, &part, have, &bar)) {
            Ok(n) | Err(Attempt::Broke(n)) => downloaded += n,
            Err(Attempt::Failed(e)) => {
                bar.finish_and_clear();
                return Err(e);
            }
        }
    }
    bar.finish_and_clear();
    let have = part_len(&part);
    if have < d.bytes {
        return Err(FetchError::Interrupted {
            url: origin.url.clone(),
            have,
            bytes: d.bytes,
            part: part.display().to_string(),
        });
    }
    let refuse = |what, got: String, expected: String| {
        let _ = std::fs::remove_file(&part);
        FetchError::Mismatch {
            url: origin.url.clone(),
            what,
            got,
            expected,
            manifest: manifest.display().to_string(),
        }
    };
    if have > d.bytes {
        return Err(refuse("bytes", have.to_string(), d.bytes.to_string()));
    }
    let sum = memwall_core::datasets::sha256_file(&part).map_err(io(&part))?;
    if sum != d.sha256 {
        return Err(refuse("SHA-256", sum, d.sha256.clone()));
    }
    std::fs::rename(&part, &dest).map_err(io(&dest))?;
    Ok(Fetched {
        at: dest,
        downloaded,
        resumed_from,
    })
}

/// How one attempt ended short of the whole file.
enum Attempt {
    /// The connection broke after this many bytes were written; the next attempt resumes.
    Broke(u64),
    /// An error that another attempt would not change.
    Failed(FetchError),
}

/// One request for bytes `have..bytes` of `d`, appended to `part`; the bytes written.
async fn attempt(
    client: &reqwest::Client,
    d: &Dataset,
    origin: &Origin,
    part: &Path,
    have: u64,
    bar: &indicatif::ProgressBar,
) -> std::result::Result<u64, Attempt> {
    let failed = |message: String| {
        Attempt::Failed(FetchError::Http {
            url: origin.url.clone(),
            message,
        })
    };
    let io = |source| {
        Attempt::Failed(FetchError::Io {
            path: part.to_path_buf(),
            source,
        })
    };
    let mut resp = client
        .get(&origin.url)
        .header(
            reqwest::header::RANGE,
            format!("bytes={have}-{}", d.bytes - 1),
        )
        .send()
        .await
        .map_err(|e| failed(client_error(&e.without_url())))?;
    let status = resp.status();
    // 206: the range asked for; 200: the whole file (a server without ranges), read from the
    // start; 416: the part is not a start of the file, so it goes.
    let (mut file, mut at) = match status.as_u16() {
        206 => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(part)
                .map_err(io)?;
            (f, have)
        }
        200 => (std::fs::File::create(part).map_err(io)?, 0),
        416 => {
            std::fs::remove_file(part).map_err(io)?;
            return Err(Attempt::Broke(0));
        }
        _ => return Err(failed(format!("the server answered {status}"))),
    };
    // A prefix data set stops at its size; any other reads one byte past it, to see a file
    // that is too long.
    let limit = if origin.prefix { d.bytes } else { d.bytes + 1 };
    let mut written = 0;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let take = (limit.saturating_sub(at) as usize).min(chunk.len());
                file.write_all(&chunk[..take]).map_err(io)?;
                at += take as u64;
                written += take as u64;
                bar.set_position(at.min(d.bytes));
                if at >= limit {
                    break;
                }
            }
            Ok(None) => break,
            Err(_) => {
                file.flush().map_err(io)?;
                return Err(Attempt::Broke(written));
            }
        }
    }
    file.flush().map_err(io)?;
    if at < d.bytes {
        return Err(Attempt::Broke(written));
    }
    Ok(written)
}

/// The client's error and its causes in one line, each once ("error sending request: client
/// error (Connect): tcp connect error: Connection refused (os error 111)").
fn client_error(e: &reqwest::Error) -> String {
    let mut line = String::new();
    let mut cause: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// The length of `part`, 0 when it does not exist.
fn part_len(part: &Path) -> u64 {
    std::fs::metadata(part).map(|m| m.len()).unwrap_or(0)
}

/// A byte progress bar for `d` on standard error (hidden unless `show` and a terminal).
fn progress_bar(d: &Dataset, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(d.bytes),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec}, {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(d.path.clone());
    bar
}

/// A data set a run needs and what reads it.
#[derive(Debug, Clone)]
pub struct Needed {
    /// The data set.
    pub dataset: Dataset,
    /// The experiment files that read it.
    pub read_by: Vec<PathBuf>,
}

/// The manifest of the repository holding the experiment files `files` and the data sets of it
/// that the studies read at `profile` (with `data` replacing every training study's corpus, as
/// `--data` does): a training study's corpus, an in-process study's data folder. `None` when
/// the repository has no manifest.
///
/// An experiment file that does not load (or names an unknown in-process kind) is passed over:
/// checking it is the caller's, which reports it.
///
/// # Errors
/// A manifest that cannot be read or checked.
pub fn needed(
    files: &[PathBuf],
    profile: crate::spec::Profile,
    data: Option<&Path>,
) -> Result<Option<(Manifest, Vec<Needed>)>> {
    let Some(first) = files.first() else {
        return Ok(None);
    };
    let repo = Study::base_dir(first);
    let Some(manifest) = Manifest::load(&repo)? else {
        return Ok(None);
    };
    let mut needed: Vec<Needed> = Vec::new();
    for f in files {
        let Ok(study) = Study::load(f, profile, data) else {
            continue;
        };
        let reads: Vec<&Dataset> = match &study.header.kind {
            StudyKind::Training => study
                .data
                .as_ref()
                .map(|c| manifest.for_file(&c.path))
                .unwrap_or_default(),
            StudyKind::InProcess(_) => match crate::studies::data_folder(&study) {
                Ok(Some(folder)) => manifest.under(Path::new(folder)),
                Ok(None) | Err(_) => Vec::new(),
            },
        };
        for d in reads {
            match needed.iter_mut().find(|n| n.dataset.path == d.path) {
                Some(n) => n.read_by.push(f.clone()),
                None => needed.push(Needed {
                    dataset: d.clone(),
                    read_by: vec![f.clone()],
                }),
            }
        }
    }
    Ok(Some((manifest, needed)))
}
