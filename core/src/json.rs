//! JSON read as a typed value, with the field at fault named: what every record, job file and
//! bundle file of memwall is read with.
//!
//! May import: serde and serde_json only.

use serde::de::DeserializeOwned;

/// Why a JSON text does not read as the type asked for ([`parse_json`]). Its message names the
/// JSON field at fault (e.g. `summary.eval_perplexity`) and the line and column; the caller
/// wraps it with the file's path.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// The text is empty (or only white space).
    #[error("the file is empty")]
    Empty,
    /// A field has the wrong type or value, is unknown, or is missing.
    #[error("field `{field}`: {source}")]
    Field {
        /// Dotted path of the field (e.g. `summary.eval_perplexity`, `steps[3].loss`).
        field: String,
        /// The JSON parser's error (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// The text is not JSON, or not the type asked for at its top.
    #[error("{0}")]
    Syntax(#[source] serde_json::Error),
}

/// Parses `text` as a `T`, naming the JSON field at fault (e.g. `summary.eval_perplexity`) and
/// the line and column in the error message.
///
/// # Errors
/// [`JsonError`], for the caller to wrap with the file's path.
pub fn parse_json<T: DeserializeOwned>(text: &str) -> std::result::Result<T, JsonError> {
    if text.trim().is_empty() {
        return Err(JsonError::Empty);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        let source = e.into_inner();
        if at.is_empty() || at == "." {
            JsonError::Syntax(source)
        } else {
            JsonError::Field { field: at, source }
        }
    })?;
    de.end().map_err(JsonError::Syntax)?;
    Ok(value)
}
