//! The in-process study's trait ([`InProcessStudy`]), what a night tracks of a study
//! ([`Tracked`]), and the helpers every study shares.

use crate::cited::Cited;
use crate::document::content::{Measure, Section};
use crate::params::ParamError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// An in-process study: parameters -> a typed result -> report sections.
///
/// [`run`](InProcessStudy::run) measures and returns an [`Output`](InProcessStudy::Output) that
/// holds numbers only (and the parameters it ran with, so that it renders alone);
/// [`sections`](InProcessStudy::sections) is the renderer: it turns an output, fresh or read back
/// from the record store, into sections. A renderer never measures.
pub trait InProcessStudy {
    /// The experiment file's `[params]` table.
    type Params: DeserializeOwned;
    /// What the study measured.
    type Output: Serialize + DeserializeOwned;
    /// Why a run failed (reported as the study's failure, [`crate::Error::Study`], with this
    /// error as its source).
    type Error: std::error::Error + Send + Sync + 'static;
    /// Checks every parameter's range and their consistency before anything runs (called when
    /// the experiment file is loaded, and again by `run`).
    ///
    /// # Errors
    /// The first [`ParamError`]: the key (with list indices), the accepted range, the value.
    fn validate(params: &Self::Params) -> Result<(), ParamError>;
    /// The folder of data files the study reads (e.g. `remat-graphs`), looked up on the data
    /// search path ([`memwall_core::data_path`]); `None` for a study that reads no file.
    const DATA: Option<&'static str> = None;
    /// Runs the study. `data_dir` is the data folder that holds [`Self::DATA`] (the first of
    /// the search path that does).
    ///
    /// # Errors
    /// Parameters out of range (e.g. [`DemoError::InvalidParam`]); the study's own failures.
    fn run(params: &Self::Params, data_dir: &Path) -> Result<Self::Output, Self::Error>;
    /// What the report quotes from the source: the experiment file's `[params.cited]` table
    /// ([`cited`]; [`CiteAs`] for a study that quotes only the source's name). Not a parameter
    /// of the run: it is checked when the file loads and copied into the study's record beside
    /// the result (`crate::StudyRecord::cited`), never into the result.
    type Cited: DeserializeOwned;
    /// Presents `output` as report sections (claim, our numbers, tables, figures), quoting
    /// the source's numbers and name from `cited`.
    fn sections(output: &Self::Output, cited: &Cited<Self::Cited>) -> Vec<Section>;
    /// The named numbers of `output` that the experiment file's `[[claims]]` can name as their
    /// `measure` (the report's "Results at a glance" block).
    fn measures(output: &Self::Output) -> Vec<Measure> {
        let _ = output;
        Vec::new()
    }
    /// The numbers of `output` that the nightly run tracks from night to night (the history
    /// store, `memwall nightly`): solve times, schedule costs, kernel timings. Empty for a
    /// study with nothing whose change would mean a change of the code.
    fn tracked(output: &Self::Output) -> Vec<Tracked> {
        let _ = output;
        Vec::new()
    }
    /// The stored `result` (JSON of [`Self::Output`]) with what a bundle's import put beside
    /// it in `study_dir` (`runs/<study>/`), and where those numbers were measured; `None` when
    /// nothing changes (the default: a study whose numbers are all measured in its own run).
    ///
    /// # Errors
    /// An imported file that does not read, naming it and its field.
    fn with_imports(
        result: &serde_json::Value,
        study_dir: &Path,
    ) -> crate::error::Result<Imported> {
        let _ = (result, study_dir);
        Ok(None)
    }
}

/// A stored result merged with what an import put beside it, and where the imported numbers
/// were measured (for the glance's device); `None` when nothing was imported
/// ([`InProcessStudy::with_imports`]).
pub type Imported = Option<(serde_json::Value, Option<String>)>;

/// What kind of number a [`Tracked`] value is: it decides its unit, which direction is better
/// and how its night-to-night change is judged (`memwall_lab::nightly`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackedKind {
    /// Wall time of a solver (model build and solve), seconds; a timing.
    SolveTime,
    /// Total compute cost of the best schedule found, in the graph's cost units (Jain et al.
    /// 2020, eq. 1a); repeats at a fixed revision unless a time limit cut the solve short.
    ScheduleCost,
    /// Median wall time of one kernel or loop chain, seconds; a timing.
    KernelTime,
}

/// One number an in-process study tracks from night to night: `case` names what was measured
/// (e.g. "VGG19 at budget 0.8", "loops (a+b)*c fused"), stable from run to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracked {
    /// What was measured; the nightly page's configuration column.
    pub case: String,
    /// The kind of number.
    pub kind: TrackedKind,
    /// The value, in the kind's unit.
    pub value: f64,
}

/// Implements [`InProcessStudy`] for `$study`, a demo that reads no data files and quotes
/// `$cited` (its `[params.cited]`): `validate` returns `$validate(params)`, `run` returns
/// `$measure(params)` (a `Result<$output, DemoError>`) and `sections` returns
/// `$sections(output, cited)`; optionally `measures` returns `$measures(output)`, `tracked`
/// `$tracked(output)` and `with_imports` `$imports(result, study_dir)`.
///
/// `demo_study!(ScalarCheckpoint: CheckpointParams => CheckpointResult, cited CiteAs, validate, measure, sections);`
macro_rules! demo_study {
    ($study:ty: $params:ty => $output:ty, cited $cited:ty, $validate:expr, $measure:expr,
     $sections:expr) => {
        $crate::demo_study!($study: $params => $output, cited $cited, $validate, $measure,
            $sections, |_: &$output| ::std::vec::Vec::new());
    };
    ($study:ty: $params:ty => $output:ty, cited $cited:ty, $validate:expr, $measure:expr,
     $sections:expr, $measures:expr) => {
        $crate::demo_study!($study: $params => $output, cited $cited, $validate, $measure,
            $sections, $measures, |_: &$output| ::std::vec::Vec::new());
    };
    ($study:ty: $params:ty => $output:ty, cited $cited:ty, $validate:expr, $measure:expr,
     $sections:expr, $measures:expr, $tracked:expr) => {
        $crate::demo_study!($study: $params => $output, cited $cited, $validate, $measure,
            $sections, $measures, $tracked, imports |_: &::serde_json::Value, _: &::std::path::Path| Ok(None));
    };
    ($study:ty: $params:ty => $output:ty, cited $cited:ty, $validate:expr, $measure:expr,
     $sections:expr, $measures:expr, $tracked:expr, imports $imports:expr) => {
        impl $crate::InProcessStudy for $study {
            type Params = $params;
            type Output = $output;
            type Error = $crate::DemoError;
            type Cited = $cited;
            fn validate(
                params: &$params,
            ) -> ::std::result::Result<(), $crate::params::ParamError> {
                $validate(params)
            }
            fn run(
                params: &$params,
                _data_dir: &::std::path::Path,
            ) -> ::std::result::Result<$output, $crate::DemoError> {
                $measure(params)
            }
            fn sections(
                output: &$output,
                cited: &$crate::Cited<$cited>,
            ) -> ::std::vec::Vec<$crate::document::content::Section> {
                $sections(output, cited)
            }
            fn measures(output: &$output) -> ::std::vec::Vec<$crate::document::content::Measure> {
                $measures(output)
            }
            fn tracked(output: &$output) -> ::std::vec::Vec<$crate::Tracked> {
                $tracked(output)
            }
            fn with_imports(
                result: &::serde_json::Value,
                study_dir: &::std::path::Path,
            ) -> $crate::error::Result<$crate::Imported> {
                $imports(result, study_dir)
            }
        }
    };
}
pub(crate) use demo_study;

/// Errors of the demo studies.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A parameter is out of its valid range (found by the study's `validate`).
    #[error("invalid parameter {0}")]
    Param(#[from] ParamError),
    /// A parameter is out of its valid range.
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParam {
        /// Field name in the params struct.
        name: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A buffer could not be allocated (e.g. `depth` too large for this machine's memory).
    #[error("could not allocate {bytes} bytes for {what}")]
    Alloc {
        /// Requested size in bytes.
        bytes: u64,
        /// What the buffer was for.
        what: &'static str,
    },
    /// A worker thread of a collective panicked or a channel closed early.
    #[error("collective worker failed: {0}")]
    Worker(String),
    /// An internal consistency check failed (e.g. fused != unfused result).
    #[error("check failed: {0}")]
    Check(String),
}

/// Returns `Err(InvalidParam)` unless `ok`.
pub(crate) fn ensure(
    ok: bool,
    name: &'static str,
    reason: impl Into<String>,
) -> Result<(), DemoError> {
    if ok {
        Ok(())
    } else {
        Err(DemoError::InvalidParam {
            name,
            reason: reason.into(),
        })
    }
}

/// Runs `f` `repeats` times (at least once) and returns the median wall time in seconds and the
/// last result.
pub(crate) fn median_time<T>(repeats: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::with_capacity(repeats.max(1));
    let mut last = None;
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        let r = f();
        times.push(t.elapsed().as_secs_f64());
        last = Some(std::hint::black_box(r));
    }
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let med = if n % 2 == 1 {
        times[n / 2]
    } else {
        0.5 * (times[n / 2 - 1] + times[n / 2])
    };
    (med, last.expect("at least one repeat"))
}

/// Formats a byte count in decimal units (kB, MB, GB = 1e3, 1e6, 1e9 bytes).
pub(crate) fn fmt_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.2} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// Deterministic xorshift64* generator for reproducible test data (no `rand` dependency); it
/// lives in the runner, which generates the fusion study's inputs on GPU machines too.
pub(crate) use memwall_runner::fusion_chains::XorShift;

/// Test helpers shared by the studies' tests: every `[[claims]]` measure of an experiment file
/// is among its study's measures.
#[cfg(test)]
pub(crate) mod claim_checks {
    /// Every claim of `experiments/<name>.toml` that is not marked not comparable names a
    /// measure of `S::measures`, for `fresh` and for the stored cpu result when there is one
    /// (`runs/<name>/cpu.result.json`, which must still read back as this version's output).
    /// Returns the fresh output's measures.
    pub(crate) fn assert_claims_have_measures<S: crate::InProcessStudy>(
        name: &str,
        fresh: S::Output,
    ) -> Vec<crate::document::content::Measure> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let file = root.join(format!("experiments/{name}.toml"));
        let study = crate::spec::Study::load(&file, crate::spec::Profile::Cpu, None).unwrap();
        assert!(!study.claims.is_empty(), "{name}: no [[claims]]");
        let mut outputs = vec![fresh];
        let stored = root.join(format!("runs/{name}/cpu.result.json"));
        if let Ok(text) = std::fs::read_to_string(&stored) {
            let record: crate::StudyRecord = crate::record::parse_json(&text).unwrap();
            outputs.push(serde_json::from_value(record.result).unwrap());
        }
        for out in &outputs {
            let names: Vec<String> = S::measures(out).into_iter().map(|m| m.name).collect();
            for c in study.claims.iter().filter(|c| c.not_comparable.is_none()) {
                assert!(
                    names.contains(&c.measure),
                    "{name}: claim `{}` names the measure `{}`, not among {names:?}",
                    c.id,
                    c.measure
                );
            }
        }
        S::measures(&outputs[0])
    }

    /// The value of the measure `name` in `measures`.
    pub(crate) fn value(measures: &[crate::document::content::Measure], name: &str) -> f64 {
        measures
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no measure `{name}`"))
            .value
    }
}
