//! What an in-process study's report quotes from its source: the numbers and the name of the
//! source document that the renderers print beside ours. They live in the study's experiment
//! file, not in code: `[study] source` (the document's file) and the `[params.cited]` table
//! (the study's own [`InProcessStudy::Cited`](super::InProcessStudy::Cited)), checked when the
//! file loads, copied into the study's record when it runs (`crate::StudyRecord::cited`,
//! so that the record renders without the file) and quoted by the renderer, so that a reader
//! checks every quoted number against the document in one place.
//!
//! ```toml
//! [params.cited]
//! cite_as = "(blog \"Memory Optimization Demo\")"
//! ```

use serde::Deserialize;

/// The key of `[params]` that holds what the report quotes (`[params.cited]`); it is not a
/// parameter of the run.
pub const KEY: &str = "cited";

/// What a study's report quotes: the source document (`[study] source`) and the study's
/// `[params.cited]` values.
#[derive(Debug, Clone, PartialEq)]
pub struct Cited<T> {
    /// The source document's file (`[study] source`, e.g. `000_8cbb5ca41b7f2c4a.txt`).
    pub source: String,
    /// The study's `[params.cited]` table.
    pub values: T,
}

impl<T> Cited<T> {
    /// The source as the report names it: its file followed by `cite_as` (how the document
    /// names itself, and where), e.g. `000_8cbb5ca41b7f2c4a.txt (blog "Memory Optimization
    /// Demo")`.
    pub fn name(&self, cite_as: &str) -> String {
        format!("{} {cite_as}", self.source)
    }
}

/// `[params.cited]` of a study that quotes only the source's name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiteAs {
    /// What follows the file name when the report names the source: how the document names
    /// itself (and, for some studies, its section), e.g. `(blog "Memory Optimization Demo")`.
    pub cite_as: String,
}

impl Cited<CiteAs> {
    /// The source as the report names it ([`Cited::name`] with `cite_as`).
    pub fn src(&self) -> String {
        self.name(&self.values.cite_as)
    }
}

/// The cited values of `experiments/<study>.toml` (cpu profile), for tests.
#[cfg(test)]
pub(crate) fn from_experiment<T: serde::de::DeserializeOwned>(study: &str) -> Cited<T> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../experiments/{study}.toml"));
    let study = crate::spec::Study::load(&path, crate::spec::Profile::Cpu, None).unwrap();
    let table = study
        .params
        .get(KEY)
        .cloned()
        .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
    Cited {
        source: study.header.source.clone(),
        values: table.try_into().unwrap(),
    }
}
