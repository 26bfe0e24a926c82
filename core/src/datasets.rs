//! The data manifest: every data set an experiment reads, in `datasets.toml` at the
//! repository's root, each with its path on the data search path ([`crate::data_path`]), its
//! size and SHA-256, what it is, its licence and source, and where it can be fetched (its public
//! origin, or a mirror named by `$MEMWALL_DATA_URL`). What fetches is the driver's
//! (`memwall data fetch`); this module reads the manifest, finds each data set on the search
//! path and checks a file against its size and checksum.
//!
//! May import: [`crate::data_path`].

use crate::data_path;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The manifest's file name, at the repository's root (the folder above `experiments/`).
pub const MANIFEST: &str = "datasets.toml";

/// The environment variable naming a mirror: a base URL that serves every data set at
/// `<URL>/<path>`; when set it replaces every data set's own `url`.
pub const DATA_URL_ENV: &str = "MEMWALL_DATA_URL";

/// The environment variable that, set to anything but empty or `0`, forbids every download
/// (a missing data set is then reported with the command that gets it).
pub const OFFLINE_ENV: &str = "MEMWALL_OFFLINE";

/// One data set of the manifest.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    /// Its relative path on the data search path, e.g.
    /// `tinystories/TinyStories-valid-excerpt.txt`; also its name on the command line.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its SHA-256, 64 lowercase hexadecimal digits.
    pub sha256: String,
    /// What it is, in one sentence.
    pub what: String,
    /// Its licence (SPDX identifier), where known.
    #[serde(default)]
    pub license: Option<String>,
    /// Where it comes from: the paper or data set it is part of.
    pub source: String,
    /// Its public origin (HTTP or HTTPS), where one is known.
    #[serde(default)]
    pub url: Option<String>,
    /// The data set is the first [`Dataset::bytes`] bytes of the file at `url` (fetched with a
    /// Range request).
    #[serde(default)]
    pub prefix: bool,
}

/// Where a data set is fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The URL.
    pub url: String,
    /// The data set is the first `bytes` bytes of what the URL serves.
    pub prefix: bool,
    /// The URL is a mirror's (`$MEMWALL_DATA_URL` or `--from`), not the data set's own.
    pub mirror: bool,
}

/// What a file holds compared with its data set's size and checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// Size and SHA-256 are the manifest's.
    Intact,
    /// The file has another size (bytes); its checksum was not computed.
    Size(u64),
    /// The file has the manifest's size and another SHA-256.
    Sha256(String),
}

impl Integrity {
    /// One phrase for a listing: "checksum holds", "17 bytes, the manifest says 20".
    pub fn describe(&self, d: &Dataset) -> String {
        match self {
            Integrity::Intact => "checksum holds".into(),
            Integrity::Size(n) => format!("{n} bytes, the manifest says {}", d.bytes),
            Integrity::Sha256(s) => format!("SHA-256 {s}, the manifest says {}", d.sha256),
        }
    }
}

/// A data set found on the search path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The file.
    pub at: PathBuf,
    /// The search path's place that holds it, in words (e.g. "the user cache").
    pub place: &'static str,
}

/// The manifest of one repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its data sets, in the file's order.
    pub datasets: Vec<Dataset>,
}

/// A manifest that cannot be used, naming the file, the field and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file exists and cannot be read.
    #[error("cannot read the data manifest {path}: {source}")]
    Read {
        /// The manifest.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not TOML of the manifest's shape.
    #[error("data manifest {path}: {message}")]
    Parse {
        /// The manifest.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A field holds a value the manifest cannot use.
    #[error("data manifest {path}, field `{field}`: {message}")]
    Field {
        /// The manifest.
        path: PathBuf,
        /// The field, e.g. `dataset[2].sha256`.
        field: String,
        /// What is wrong and the fix.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    dataset: Vec<Dataset>,
}

impl Manifest {
    /// The manifest of the repository `repo` (`<repo>/datasets.toml`), `None` when it has none.
    ///
    /// # Errors
    /// [`ManifestError`] when the file exists and cannot be read or checked ([`Manifest::parse`]).
    pub fn load(repo: &Path) -> Result<Option<Manifest>, ManifestError> {
        let path = repo.join(MANIFEST);
        match std::fs::read_to_string(&path) {
            Ok(text) => Manifest::parse(&path, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ManifestError::Read { path, source }),
        }
    }

    /// Parses and checks the manifest text `text` of the file `path`: every path relative,
    /// without `..`, and named once; sizes above zero; checksums of 64 lowercase hexadecimal
    /// digits; URLs of HTTP or HTTPS; `prefix` only with a `url`.
    ///
    /// # Errors
    /// [`ManifestError::Parse`] for TOML that is not of the manifest's shape (an unknown field
    /// included), [`ManifestError::Field`] naming the first field that fails a check.
    pub fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let file: File = toml::from_str(text).map_err(|e| ManifestError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        let field = |i: usize, name: &str, message: String| ManifestError::Field {
            path: path.to_path_buf(),
            field: format!("dataset[{i}].{name}"),
            message,
        };
        for (i, d) in file.dataset.iter().enumerate() {
            let p = Path::new(&d.path);
            if d.path.is_empty()
                || p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(field(
                    i,
                    "path",
                    format!(
                        "`{}` is not a relative path inside a data folder: write it as the \
                         search path finds it, e.g. \"tinystories/TinyStories-valid-excerpt.txt\"",
                        d.path
                    ),
                ));
            }
            if let Some(j) = file.dataset[..i].iter().position(|o| o.path == d.path) {
                return Err(field(
                    i,
                    "path",
                    format!(
                        "`{}` is also dataset[{j}]'s: name each data set once",
                        d.path
                    ),
                ));
            }
            if d.bytes == 0 {
                return Err(field(
                    i,
                    "bytes",
                    "is 0: give the file's size in bytes (`stat -c %s FILE`)".into(),
                ));
            }
            if d.sha256.len() != 64
                || !d
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(field(
                    i,
                    "sha256",
                    format!(
                        "`{}` is not a SHA-256: give 64 lowercase hexadecimal digits \
                         (`sha256sum FILE`)",
                        d.sha256
                    ),
                ));
            }
            if let Some(u) = &d.url {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(field(
                        i,
                        "url",
                        format!("`{u}` is not an http:// or https:// URL"),
                    ));
                }
            } else if d.prefix {
                return Err(field(
                    i,
                    "prefix",
                    "is set without a `url`: name the file the data set is the start of, or \
                     remove `prefix`"
                        .into(),
                ));
            }
        }
        Ok(Manifest {
            path: path.to_path_buf(),
            datasets: file.dataset,
        })
    }

    /// The data sets a study reads when it reads the file `read` (a corpus, as the
    /// experiment file resolves it: on the search path or under the repository): those whose
    /// path ends `read` (component by component).
    pub fn for_file(&self, read: &Path) -> Vec<&Dataset> {
        self.datasets
            .iter()
            .filter(|d| read.ends_with(&d.path))
            .collect()
    }

    /// The data sets inside the folder `folder` (relative, as a study declares the folder it
    /// reads, e.g. `remat-graphs`), or the one whose path is `folder`.
    pub fn under(&self, folder: &Path) -> Vec<&Dataset> {
        self.datasets
            .iter()
            .filter(|d| Path::new(&d.path).starts_with(folder))
            .collect()
    }

    /// The data sets named by `names` (each a data set's path or a folder holding some, e.g.
    /// `remat-graphs`), in the manifest's order, each once; every data set when `names` is
    /// empty.
    ///
    /// # Errors
    /// A name that selects nothing, with the names there are.
    pub fn select(&self, names: &[String]) -> Result<Vec<&Dataset>, String> {
        if names.is_empty() {
            return Ok(self.datasets.iter().collect());
        }
        for n in names {
            if self.under(Path::new(n.trim_end_matches('/'))).is_empty() {
                let mut folders: Vec<String> = self
                    .datasets
                    .iter()
                    .filter_map(|d| d.path.split_once('/').map(|(f, _)| format!("{f}/")))
                    .collect();
                folders.dedup();
                return Err(format!(
                    "no data set of {} is `{n}`: name a data set's path or one of the folders {}",
                    self.path.display(),
                    folders.join(", ")
                ));
            }
        }
        Ok(self
            .datasets
            .iter()
            .filter(|d| {
                names
                    .iter()
                    .any(|n| Path::new(&d.path).starts_with(n.trim_end_matches('/')))
            })
            .collect())
    }
}

impl Dataset {
    /// Where to fetch it: the mirror `<mirror>/<path>` when one is named, else its own `url`;
    /// `None` when it has neither.
    pub fn origin(&self, mirror: Option<&str>) -> Option<Origin> {
        match mirror.filter(|m| !m.is_empty()) {
            Some(m) => Some(Origin {
                url: format!("{}/{}", m.trim_end_matches('/'), self.path),
                prefix: false,
                mirror: true,
            }),
            None => self.url.as_ref().map(|u| Origin {
                url: u.clone(),
                prefix: self.prefix,
                mirror: false,
            }),
        }
    }

    /// The first place of the search path of the repository `repo` that holds it.
    pub fn locate(&self, repo: &Path) -> Option<Located> {
        data_path::locate_place(repo, Path::new(&self.path))
            .map(|(at, place)| Located { at, place })
    }

    /// What the file `file` holds against this data set's size and SHA-256.
    ///
    /// # Errors
    /// The I/O error of reading `file`.
    pub fn check(&self, file: &Path) -> std::io::Result<Integrity> {
        let len = std::fs::metadata(file)?.len();
        if len != self.bytes {
            return Ok(Integrity::Size(len));
        }
        let sum = sha256_file(file)?;
        Ok(if sum == self.sha256 {
            Integrity::Intact
        } else {
            Integrity::Sha256(sum)
        })
    }
}

/// The SHA-256 of the file `path`, as 64 lowercase hexadecimal digits.
///
/// # Errors
/// The I/O error of reading it.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// The mirror `$MEMWALL_DATA_URL` names, if set and not empty.
pub fn mirror_from_env() -> Option<String> {
    std::env::var(DATA_URL_ENV).ok().filter(|s| !s.is_empty())
}

/// Whether `$MEMWALL_OFFLINE` forbids downloads (set to anything but empty or `0`).
pub fn offline_from_env() -> bool {
    std::env::var(OFFLINE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[[dataset]]
path = "tinystories/a.txt"
bytes = 3
sha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
what = "three letters"
source = "a test"
url = "https://example.org/a.txt"
prefix = true

[[dataset]]
path = "graphs/g.json"
bytes = 2
sha256 = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
what = "a graph"
source = "a test"
"#;

    fn manifest(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(Path::new("datasets.toml"), text)
    }

    /// Each bad field is refused naming the file, the field and the fix.
    #[test]
    fn a_bad_field_names_the_file_the_field_and_the_fix() {
        assert_eq!(manifest(ONE).unwrap().datasets.len(), 2);
        let cases = [
            (
                "\"tinystories/a.txt\"",
                "\"../a.txt\"",
                "dataset[0].path",
                "relative path",
            ),
            (
                "\"graphs/g.json\"",
                "\"tinystories/a.txt\"",
                "dataset[1].path",
                "once",
            ),
            ("bytes = 3", "bytes = 0", "dataset[0].bytes", "stat"),
            ("\"ba7816bf", "\"BA7816bf", "dataset[0].sha256", "sha256sum"),
            (
                "https://example.org",
                "ftp://example.org",
                "dataset[0].url",
                "http",
            ),
            (
                "url = \"https://example.org/a.txt\"\n",
                "",
                "dataset[0].prefix",
                "without a `url`",
            ),
        ];
        for (from, to, field, fix) in cases {
            let text = ONE.replacen(from, to, 1);
            let e = manifest(&text).unwrap_err().to_string();
            assert!(
                e.contains("datasets.toml") && e.contains(field) && e.contains(fix),
                "{from} -> {to}: {e}"
            );
        }
        let e = manifest(&ONE.replace("what =", "wat ="))
            .unwrap_err()
            .to_string();
        assert!(e.contains("datasets.toml") && e.contains("wat"), "{e}");
    }

    /// The mirror replaces a data set's own URL (and serves the data set itself, not a file it
    /// is the start of); without either there is no origin. A selection by folder picks what is
    /// inside; an unknown name lists the folders.
    #[test]
    fn origins_and_selection() {
        let m = manifest(ONE).unwrap();
        let (a, g) = (&m.datasets[0], &m.datasets[1]);
        assert_eq!(
            a.origin(None),
            Some(Origin {
                url: "https://example.org/a.txt".into(),
                prefix: true,
                mirror: false
            })
        );
        assert_eq!(
            a.origin(Some("http://127.0.0.1:9/data/")).unwrap().url,
            "http://127.0.0.1:9/data/tinystories/a.txt"
        );
        assert!(!a.origin(Some("http://m")).unwrap().prefix);
        assert_eq!(g.origin(None), None);
        assert_eq!(m.select(&["graphs/".into()]).unwrap(), vec![g]);
        assert_eq!(m.select(&[]).unwrap().len(), 2);
        let e = m.select(&["graph".into()]).unwrap_err();
        assert!(e.contains("tinystories/, graphs/"), "{e}");
        assert_eq!(m.under(Path::new("graphs")), vec![g]);
        assert_eq!(
            m.for_file(Path::new("/home/u/.cache/memwall/tinystories/a.txt")),
            vec![a]
        );
        assert!(m.for_file(Path::new("/x/a.txt")).is_empty());
    }

    /// A file is intact only with the manifest's size and checksum.
    #[test]
    fn integrity_compares_size_then_checksum() {
        let m = manifest(ONE).unwrap();
        let a = &m.datasets[0];
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "abc").unwrap();
        assert_eq!(a.check(&f).unwrap(), Integrity::Intact);
        std::fs::write(&f, "abd").unwrap();
        let Integrity::Sha256(s) = a.check(&f).unwrap() else {
            panic!("not a checksum difference")
        };
        assert_eq!(s, sha256_file(&f).unwrap());
        assert!(Integrity::Sha256(s.clone()).describe(a).contains(&a.sha256));
        std::fs::write(&f, "abcd").unwrap();
        assert_eq!(a.check(&f).unwrap(), Integrity::Size(4));
    }
}
