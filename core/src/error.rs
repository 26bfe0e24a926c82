//! Typed errors of the memwall library. Every variant says what went wrong, where (file, field)
//! and, where there is one, the fix.

use std::path::PathBuf;

/// Any error, boxed, as the [`std::error::Error::source`] of a memwall [`Error`] variant that
/// wraps an error of another crate.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result with memwall's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the memwall library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done to the path, as the message's leading verb phrase (e.g. "reading",
        /// "creating", "renaming into").
        action: &'static str,
        /// The file or directory that could not be read or written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An experiment file is malformed (syntax, unknown field, wrong type).
    #[error("experiment file {path}: {source}")]
    Spec {
        /// The experiment file.
        path: PathBuf,
        /// What is malformed, as the TOML parser reports it (with the line and the field).
        #[source]
        source: toml::de::Error,
    },
    /// An experiment file is well formed but a value is invalid.
    #[error("experiment file {path}, field `{field}`: {message}")]
    SpecField {
        /// The experiment file.
        path: PathBuf,
        /// Dotted path of the invalid field (e.g. `configs[2].budget`, `profiles.cpu.model`).
        field: String,
        /// Why the value is invalid and how to fix it.
        message: String,
    },
    /// A data file (corpus) is missing.
    #[error("data file {path} not found. {hint}")]
    MissingData {
        /// The data file that was not found.
        path: PathBuf,
        /// How to obtain the file, or to point memwall at another one.
        hint: String,
    },
    /// A data file exists but cannot be used.
    #[error("data file {path}: {message}")]
    BadData {
        /// The data file that cannot be used.
        path: PathBuf,
        /// Why it cannot be used.
        message: String,
    },
    /// The device asked for cannot be used.
    #[error("device `{requested}`: {message}")]
    Device {
        /// The device or backend as requested (e.g. `cuda:1`, `flex`).
        requested: String,
        /// Why it cannot be used (for an unknown name, the accepted values).
        message: String,
    },
    /// The tokenizer could not be trained, saved or loaded.
    #[error("tokenizer: {what}{}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Tokenizer {
        /// What was being done (e.g. "training", "loading <file>"), or what is wrong.
        what: String,
        /// The tokenizer library's error, where there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A training job failed.
    #[error("job {job}: {message}")]
    Job {
        /// The job: its configuration name, or the path of a malformed job file.
        job: String,
        /// What failed.
        message: String,
    },
    /// A record could not be (de)serialized or aggregated.
    #[error("records {path}: {message}")]
    Records {
        /// The record file, record directory or study runs directory concerned.
        path: PathBuf,
        /// What went wrong (the serializer's or reader's message, or what is missing).
        message: String,
    },
    /// A record file (or another JSON file of the record store) does not read as what it should
    /// hold.
    #[error("records {path}: {what} ({source}){fix}")]
    MalformedRecord {
        /// The file.
        path: PathBuf,
        /// What the file should be (e.g. "malformed record", "not a study record").
        what: String,
        /// Why it does not read: the JSON field at fault, line and column.
        #[source]
        source: crate::json::JsonError,
        /// What to do about it, starting with "; " (empty when there is nothing to add).
        fix: String,
    },
    /// A report could not be rendered: a check of the report model failed.
    #[error("report: {0}")]
    Report(String),
    /// A library failed while a report was made: a template (minijinja, with its file, line and
    /// context), a figure (plotters), front matter (the YAML serializer) or the analysis stage's
    /// query (polars).
    #[error("report: {what}: {source:#}")]
    Render {
        /// What was being rendered (e.g. "rendering report.md.j2", "figure `peak`").
        what: String,
        /// The library's error.
        #[source]
        source: BoxError,
    },
    /// Records could not be aggregated into a table, or a table written (polars).
    #[error("records {path}: {what}{source}")]
    Table {
        /// The record store folder or table file concerned.
        path: PathBuf,
        /// What was being done, ending in ": " when given (e.g. "writing the history table: ").
        what: String,
        /// polars' error.
        #[source]
        source: BoxError,
    },
    /// An in-process study failed while it ran (a solver error, a failed allocation or
    /// consistency check); its `[params]` were valid.
    #[error("experiment file {path}: study `{study}` failed: {source}")]
    Study {
        /// The experiment file of the study.
        path: PathBuf,
        /// The study's name.
        study: String,
        /// The study's own error (e.g. the solver's).
        #[source]
        source: BoxError,
    },
    /// The data manifest (`datasets.toml`) cannot be read or checked.
    #[error(transparent)]
    Manifest(#[from] crate::datasets::ManifestError),
    /// A command-line option (or a value derived from one) is invalid.
    #[error("{option}: {message}")]
    InvalidOption {
        /// The option as given, with its value where it has one (e.g. `--at 25:00`).
        option: String,
        /// Why the value is invalid and the expected form.
        message: String,
    },
}

impl Error {
    /// An [`Error::Render`]: `what` was being rendered when the library failed with `source`.
    pub fn render(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Render {
            what: what.into(),
            source: source.into(),
        }
    }

    /// An [`Error::Tokenizer`] with the tokenizer library's error as its source.
    pub fn tokenizer(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Tokenizer {
            what: what.into(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Io`] for `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_library_error_is_the_source_of_memwall_s_and_stays_in_its_message() {
        let e = Error::render("figure `peak`", std::io::Error::other("no font"));
        assert_eq!(e.to_string(), "report: figure `peak`: no font");
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("no font")
        );
        let t = Error::tokenizer("training", std::io::Error::other("empty corpus"));
        assert_eq!(t.to_string(), "tokenizer: training: empty corpus");
        assert!(t.source().is_some());
        let plain = Error::Tokenizer {
            what: "trained vocabulary lacks `<|endoftext|>`".into(),
            source: None,
        };
        assert_eq!(
            plain.to_string(),
            "tokenizer: trained vocabulary lacks `<|endoftext|>`"
        );
        assert!(plain.source().is_none());
    }
}
