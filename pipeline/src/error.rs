//! Typed errors of the memwall library. Every variant says what went wrong, where (file, field)
//! and, where there is one, the fix.

use std::path::PathBuf;

/// Result with memwall's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the memwall library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An experiment file is malformed (syntax, unknown field, wrong type).
    #[error("experiment file {path}: {message}")]
    Spec { path: PathBuf, message: String },
    /// An experiment file is well formed but a value is invalid.
    #[error("experiment file {path}, field `{field}`: {message}")]
    SpecField {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// A data file (corpus) is missing.
    #[error("data file {path} not found. {hint}")]
    MissingData { path: PathBuf, hint: String },
    /// A data file exists but cannot be used.
    #[error("data file {path}: {message}")]
    BadData { path: PathBuf, message: String },
    /// The device asked for cannot be used.
    #[error("device `{requested}`: {message}")]
    Device { requested: String, message: String },
    /// The tokenizer could not be trained, saved or loaded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A training job failed.
    #[error("job {job}: {message}")]
    Job { job: String, message: String },
    /// A record could not be (de)serialized or aggregated.
    #[error("records {path}: {message}")]
    Records { path: PathBuf, message: String },
    /// A report could not be rendered.
    #[error("report: {0}")]
    Report(String),
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
