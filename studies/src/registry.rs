//! The registry of in-process studies: each study's steps (check its `[params]`, run to a
//! typed result, sections, glance, tracked numbers), looked up by the name an experiment file's
//! `kind` gives ([`StudyKind::InProcess`]); adding a study is its folder and one line of
//! `STUDIES` ([`in_process_studies`] lists them). A study's result
//! is stored as a record ([`crate::store`]) and its renderer turns the stored result into report
//! sections, so `memwall report` re-renders without re-running.

use crate::cited::{self, Cited};
use crate::document::content::{GlanceRow, Measure, Section};
use crate::document::glance::{self, Answer};
use crate::error::{Error, Result};
use crate::spec::{Study, StudyKind};
use crate::store::{params_hash, record_path, RecordedCitation, StudyRecord};
use crate::{InProcessStudy, Tracked};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Why a stored result did not sections: what it quotes does not read as the study's
/// [`InProcessStudy::Cited`] (at this key), or the result does not read as its output.
enum RenderFailure {
    Cited { key: String, message: String },
    Result(serde_json::Error),
}

/// An in-process study's steps, type-erased: check the parameters, run to a JSON result, sections a
/// JSON result.
struct Entry {
    check: fn(&Study) -> Result<()>,
    run: fn(&Study, &Path) -> Result<serde_json::Value>,
    /// The data folder it reads ([`InProcessStudy::DATA`]).
    data: Option<&'static str>,
    sections: fn(
        &RecordedCitation,
        &serde_json::Value,
    ) -> std::result::Result<Vec<Section>, RenderFailure>,
    measures: fn(&serde_json::Value) -> std::result::Result<Vec<Measure>, serde_json::Error>,
    tracked: fn(&serde_json::Value) -> std::result::Result<Vec<Tracked>, serde_json::Error>,
    /// The stored result with what a bundle's import put beside it ([`InProcessStudy::with_imports`]).
    imports: fn(&serde_json::Value, &Path) -> Result<crate::Imported>,
}

fn entry<S: InProcessStudy>() -> Entry {
    Entry {
        check: |study| params::<S>(study).and(cited::<S>(study).map(drop)),
        run: run_typed::<S>,
        data: S::DATA,
        sections: render_typed::<S>,
        measures: |v| Ok(S::measures(&S::Output::deserialize(v)?)),
        tracked: |v| Ok(S::tracked(&S::Output::deserialize(v)?)),
        imports: S::with_imports,
    }
}

/// The in-process studies by the name an experiment file's `kind` gives them (the name of
/// their folder under `studies/src/`). Adding a study is adding its folder (a type that
/// implements [`InProcessStudy`]), its experiment file and one line here.
/// A study's registry line: its name and its steps.
type Registration = (&'static str, fn() -> Entry);

// ANCHOR: studies
#[rustfmt::skip]
const STUDIES: &[Registration] = &[
    ("scalar_checkpoint", entry::<crate::scalar_checkpoint::ScalarCheckpoint>),
    ("fusion_ir", entry::<crate::fusion_ir::FusionIr>),
    ("static_planning", entry::<crate::static_planning::StaticPlanning>),
    ("two_buffer_inference", entry::<crate::two_buffer_inference::TwoBufferInference>),
    ("sixteen_bit", entry::<crate::sixteen_bit::SixteenBit>),
    ("fp16_range", entry::<crate::fp16_range::Fp16Range>),
    ("fsdp", entry::<crate::fsdp::Fsdp>),
    ("autodiff_example", entry::<crate::autodiff_example::AutodiffExample>),
    ("checkmate", entry::<crate::checkmate::Checkmate>),
];
// ANCHOR_END: studies

/// The names of the in-process studies, in the registry's order.
pub fn in_process_studies() -> Vec<&'static str> {
    STUDIES.iter().map(|(n, _)| *n).collect()
}

/// The in-process study `kind` names: `Ok(None)` for a training study (a sweep of jobs);
/// an error message naming the known studies for a name the registry does not hold.
fn registry(kind: &StudyKind) -> std::result::Result<Option<Entry>, String> {
    let StudyKind::InProcess(name) = kind else {
        return Ok(None);
    };
    STUDIES
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, entry)| Some(entry()))
        .ok_or_else(|| {
            format!(
                "no in-process study is named `{name}`: `kind` is \"training\" or one of {} \
                 (a new study is a folder under studies/src/ and a line of its registry, \
                 memwall_studies::registry::STUDIES)",
                STUDIES
                    .iter()
                    .map(|(n, _)| format!("\"{n}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The in-process study of a stored record: an error naming the record for a kind this
/// version does not hold.
fn recorded(record: &StudyRecord, path: &Path) -> Result<Option<Entry>> {
    registry(&record.kind).map_err(|why| Error::Records {
        path: path.to_path_buf(),
        message: format!("the record of `{}`: {why}", record.study),
    })
}

/// The in-process study of an experiment file: an error naming its `study.kind`.
fn declared(study: &Study) -> Result<Option<Entry>> {
    registry(&study.header.kind).map_err(|message| Error::SpecField {
        path: study.path.clone(),
        field: "study.kind".into(),
        message,
    })
}

/// The study's `[params]` (merged with its profile's `[profiles.<p>.params]`), parsed and
/// range-checked by the study's [`InProcessStudy::validate`].
///
/// # Errors
/// [`Error::SpecField`] naming `params.<key>` (with list indices) for a wrong type, an unknown
/// key or a value out of range, with the accepted range.
fn params<S: InProcessStudy>(study: &Study) -> Result<S::Params> {
    let field = |key: &str| {
        if key.is_empty() || key == "." {
            "params".to_string()
        } else {
            format!("params.{key}")
        }
    };
    let profile = study.profile;
    let invalid = |key: &str, message: String| Error::SpecField {
        path: study.path.clone(),
        field: field(key),
        message: format!(
            "{message} (profile {profile}: `[params]` with `[profiles.{profile}.params]` over it)"
        ),
    };
    let mut table = study.params.clone();
    table.remove(cited::KEY);
    let params: S::Params =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let key = e.path().to_string();
            invalid(&key, e.into_inner().to_string())
        })?;
    S::validate(&params).map_err(|e| invalid(&e.field, e.message))?;
    Ok(params)
}

/// What the study's report quotes from its source ([`InProcessStudy::Cited`]): `[study] source`
/// and the `[params.cited]` table (absent: an empty table).
///
/// # Errors
/// [`Error::SpecField`] naming `params.cited` (or `params.cited.<key>`) for a missing or wrongly
/// typed value or an unknown key.
fn cited<S: InProcessStudy>(study: &Study) -> Result<Cited<S::Cited>> {
    let invalid = |key: &str, message: String| Error::SpecField {
        path: study.path.clone(),
        field: if key.is_empty() || key == "." {
            format!("params.{}", cited::KEY)
        } else {
            format!("params.{}.{key}", cited::KEY)
        },
        message: format!("{message} (what the report quotes from the source)"),
    };
    let table = match study.params.get(cited::KEY) {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t.clone(),
        Some(other) => {
            return Err(invalid(
                "",
                format!("expected a table, found {}", other.type_str()),
            ))
        }
    };
    let values = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let key = e.path().to_string();
        invalid(&key, e.into_inner().to_string())
    })?;
    Ok(Cited {
        source: study.header.source.clone(),
        values,
    })
}

/// Renders a stored result of study kind `S`, quoting `citation`.
fn render_typed<S: InProcessStudy>(
    citation: &RecordedCitation,
    result: &serde_json::Value,
) -> std::result::Result<Vec<Section>, RenderFailure> {
    let values: S::Cited =
        serde_path_to_error::deserialize(&citation.values).map_err(|e| RenderFailure::Cited {
            key: e.path().to_string(),
            message: e.into_inner().to_string(),
        })?;
    let output = S::Output::deserialize(result).map_err(RenderFailure::Result)?;
    let cited = Cited {
        source: citation.source.clone(),
        values,
    };
    Ok(S::sections(&output, &cited))
}

/// Checks a non-training study's `[params]` (types, unknown keys, ranges) without running it;
/// `Ok` for training studies. Called when an experiment file is loaded.
///
/// # Errors
/// [`Error::SpecField`] naming `params.<key>`, the accepted range and the value found.
pub fn check(study: &Study) -> Result<()> {
    match declared(study)? {
        Some(e) => (e.check)(study),
        None => Ok(()),
    }
}

/// The data folder an in-process study reads (its [`InProcessStudy::DATA`], relative to a
/// folder of the data search path, e.g. `remat-graphs`); `None` for a study that reads none
/// and for a training study.
///
/// # Errors
/// [`Error::SpecField`] naming `study.kind` when no in-process study has the file's kind.
pub fn data_folder(study: &Study) -> Result<Option<&'static str>> {
    Ok(declared(study)?.and_then(|e| e.data))
}

/// Parses and checks the study's `[params]`, runs it and returns its result as JSON.
fn run_typed<S: InProcessStudy>(study: &Study, data_dir: &Path) -> Result<serde_json::Value> {
    let failed = |source: memwall_core::BoxError| Error::Study {
        path: study.path.clone(),
        study: study.header.name.clone(),
        source,
    };
    let params = params::<S>(study)?;
    let output = S::run(&params, data_dir).map_err(|e| failed(e.into()))?;
    serde_json::to_value(&output).map_err(|e| failed(e.into()))
}

/// Runs a non-training study and returns its result as JSON.
///
/// # Errors
/// [`Error::SpecField`] naming `params` for invalid parameters; [`Error::Study`] for the
/// study's own failures (a solver error, a failed check), with that error as its source.
pub fn run(study: &Study) -> Result<serde_json::Value> {
    match declared(study)? {
        Some(e) => (e.run)(study, &data_dir(study, e.data)?),
        None => Ok(serde_json::Value::Null),
    }
}

/// Renders a stored study record as report sections, quoting what the record stored of its
/// experiment file ([`StudyRecord::cited`]); a record without it (written before memwall
/// stored it) quotes the experiment file beside the record store
/// (`<root>/runs/<study>/<profile>.result.json` -> `<root>/experiments/<study>.toml`).
///
/// # Errors
/// For an older record, the experiment file's errors ([`Error::Io`], [`Error::SpecField`]);
/// [`Error::Records`] when the record's result, or what it quotes, does not match its kind's
/// types (a record written by another version of memwall: rerun the study).
pub fn sections(record: &StudyRecord, path: &Path) -> Result<Vec<Section>> {
    if recorded(record, path)?.is_none() {
        return Ok(Vec::new());
    }
    if let Some(citation) = &record.cited {
        return render_cited(citation, None, record, path);
    }
    let runs = path
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let file = runs
        .parent()
        .unwrap_or(Path::new(""))
        .join("experiments")
        .join(format!("{}.toml", record.study));
    let profile = record.profile.parse().map_err(|e| Error::Records {
        path: path.to_path_buf(),
        message: format!("field `profile`: {e}"),
    })?;
    let study = Study::load(&file, profile, None)?;
    render_with(&study, record, path)
}

/// Renders a stored study record of `study` as report sections, quoting the study's
/// experiment file (`[study] source`, `[params.cited]`) rather than what the record stored.
///
/// # Errors
/// [`Error::SpecField`] naming `params.cited.<key>` for what the file quotes;
/// [`Error::Records`] when the record's result does not match its kind's result type (a record
/// written by another version of memwall: rerun the study).
pub fn render_with(study: &Study, record: &StudyRecord, path: &Path) -> Result<Vec<Section>> {
    render_cited(&RecordedCitation::of(study), Some(study), record, path)
}

/// Renders `record` quoting `citation`, which comes from `study`'s file or, without it, from
/// the record.
fn render_cited(
    citation: &RecordedCitation,
    study: Option<&Study>,
    record: &StudyRecord,
    path: &Path,
) -> Result<Vec<Section>> {
    let Some(e) = recorded(record, path)? else {
        return Ok(Vec::new());
    };
    let (result, _) = with_imports(&e, record, path)?;
    (e.sections)(citation, &result).map_err(|failure| match failure {
        RenderFailure::Cited { key, message } => {
            let key = if key.is_empty() || key == "." {
                String::new()
            } else {
                format!(".{key}")
            };
            match study {
                Some(s) => Error::SpecField {
                    path: s.path.clone(),
                    field: format!("params.{}{key}", cited::KEY),
                    message: format!("{message} (what the report quotes from the source)"),
                },
                None => Error::Records {
                    path: path.to_path_buf(),
                    message: format!(
                        "field `cited.values{key}` of the record of `{}`: {message}; run the \
                         study again with --force",
                        record.study
                    ),
                },
            }
        }
        RenderFailure::Result(err) => Error::Records {
            path: path.to_path_buf(),
            message: format!(
                "the stored result of `{}` does not match this version's `{}` result ({err}); \
                 run the study again with --force",
                record.study, record.kind
            ),
        },
    })
}

/// The numbers of a stored study record that the nightly run tracks
/// ([`InProcessStudy::tracked`]), from the record as this run stored it (no imported
/// measurement merged in); empty for a training study.
///
/// # Errors
/// [`Error::Records`] when the record's result does not match its kind's result type.
pub fn tracked(record: &StudyRecord, path: &Path) -> Result<Vec<Tracked>> {
    let Some(e) = recorded(record, path)? else {
        return Ok(Vec::new());
    };
    (e.tracked)(&record.result).map_err(|err| Error::Records {
        path: path.to_path_buf(),
        message: format!(
            "the stored result of `{}` does not match this version's `{}` result ({err}); run \
             the study again with --force",
            record.study, record.kind
        ),
    })
}

/// The "Results at a glance" rows of a stored study record: each of `study`'s `[[claims]]`
/// answered by the measure of the record's result it names.
///
/// # Errors
/// [`Error::SpecField`] naming `claims[i].measure` when the result has no such measure (with
/// the measures it has); [`Error::Records`] when the stored result does not match its kind.
pub fn glance(study: &Study, record: &StudyRecord, path: &Path) -> Result<Vec<GlanceRow>> {
    let Some(e) = recorded(record, path)? else {
        return Ok(Vec::new());
    };
    let (result, imported_on) = with_imports(&e, record, path)?;
    let measures = (e.measures)(&result).map_err(|err| Error::Records {
        path: path.to_path_buf(),
        message: format!(
            "the stored result of `{}` does not match this version's `{}` result ({err}); run \
             the study again with --force",
            record.study, record.kind
        ),
    })?;
    for (i, c) in study.claims.iter().enumerate() {
        if c.not_comparable.is_none() && !measures.iter().any(|m| m.name == c.measure) {
            return Err(Error::SpecField {
                path: study.path.clone(),
                field: format!("claims[{i}].measure"),
                message: format!(
                    "`{}` is not a measure of the `{}` study's result; its measures: {}",
                    c.measure,
                    record.kind,
                    measures
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    let mut device = format!(
        "{} ({} threads), {} profile",
        record.env.cpu_model, record.env.cpu_threads, record.profile
    );
    if let Some(on) = imported_on {
        device.push_str(&format!("; {on}"));
    }
    let mut rows = glance::rows(&study.claims, &device, |c| {
        match measures.iter().find(|m| m.name == c.measure) {
            Some(m) if m.value.is_finite() => Answer::Measured(m.clone()),
            Some(Measure {
                missing: Some(why), ..
            }) => Answer::Missing(why.clone()),
            Some(_) => Answer::Missing(format!(
                "not measured in this run: `{}` has no value (the study's parameters or this \
                 machine do not give one; see its section)",
                c.measure
            )),
            None => Answer::Missing(format!("no measure `{}`", c.measure)),
        }
    });
    glance::fill_provenance(&mut rows, &study.claims, |c| {
        measures
            .iter()
            .find(|m| m.name == c.measure)
            .map(|m| m.provenance.clone())
    });
    Ok(rows)
}

/// A stored record's result with what a bundle's import put beside it in its folder
/// (`runs/<study>/`, the folder of `path`), and where those numbers were measured when the
/// report shows them: the study's own [`InProcessStudy::with_imports`] (today `fusion_ir`'s CUDA
/// chains, measured by the slim runner on GPU machines). A result without such a file is the
/// stored one unchanged.
///
/// # Errors
/// [`Error::Records`] naming the imported file and its field at fault.
fn with_imports<'a>(
    e: &Entry,
    record: &'a StudyRecord,
    path: &Path,
) -> Result<(std::borrow::Cow<'a, serde_json::Value>, Option<String>)> {
    use std::borrow::Cow;
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(match (e.imports)(&record.result, dir)? {
        Some((merged, measured_on)) => (Cow::Owned(merged), measured_on),
        None => (Cow::Borrowed(&record.result), None),
    })
}

/// The data folder handed to a study that reads the folder `data` (relative to a data
/// folder): the first folder of the data search path ([`memwall_core::data_path`]) that holds
/// it. `None` (a study that reads nothing): the repository's `data/`.
///
/// # Errors
/// [`Error::Study`] when no folder of the search path holds `data`, naming every place.
fn data_dir(study: &Study, data: Option<&str>) -> Result<PathBuf> {
    use memwall_core::data_path;
    let repo = Study::base_dir(&study.path);
    let Some(data) = data else {
        return Ok(repo.join("data"));
    };
    data_path::search_dirs(&repo)
        .into_iter()
        .map(|d| d.dir)
        .find(|d| d.join(data).is_dir())
        .ok_or_else(|| Error::Study {
            path: study.path.clone(),
            study: study.header.name.clone(),
            source: data_path::not_found(&repo, Path::new(data)).into(),
        })
}

/// Runs the study unless a record with the same parameters and build exists (or `force`), and
/// stores it.
/// Returns the record and whether it was computed now.
pub fn run_and_store(study: &Study, runs: &Path, force: bool) -> Result<(StudyRecord, bool)> {
    let path = record_path(runs, study);
    let hash = params_hash(study);
    if !force {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(rec) = serde_json::from_str::<StudyRecord>(&text) {
                if rec.params_hash == hash {
                    return Ok((rec, false));
                }
            }
        }
    }
    let t = std::time::Instant::now();
    let result = run(study)?;
    let rec = StudyRecord {
        study: study.header.name.clone(),
        profile: study.profile.to_string(),
        kind: study.header.kind.clone(),
        params_hash: hash,
        env: memwall_runner::measure::host_environment(),
        result,
        cited: Some(RecordedCitation::of(study)),
        wall_s: t.elapsed().as_secs_f64(),
        finished_at: chrono::Utc::now().to_rfc3339(),
    };
    let json = serde_json::to_vec_pretty(&rec).map_err(|e| Error::Records {
        path: path.clone(),
        message: e.to_string(),
    })?;
    // Checked before it is stored: a record that would not read back is not written.
    let text = String::from_utf8_lossy(&json);
    crate::record::parse_json::<StudyRecord>(&text).map_err(|source| Error::MalformedRecord {
        path: path.clone(),
        what: "study record not written: it would not read back".into(),
        source,
        fix: String::new(),
    })?;
    crate::record::write_atomic(&path, &json)?;
    Ok((rec, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Profile;
    use std::error::Error as _;

    #[test]
    fn a_failing_study_is_a_study_error_with_its_own_error_as_source() {
        let tmp = tempfile::tempdir().unwrap();
        let header = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/checkmate.toml"),
        )
        .unwrap();
        let header = &header[..header.find("[params]").unwrap()];
        let path = tmp.path().join("checkmate.toml");
        std::fs::write(
            &path,
            format!("{header}[params]\ngraphs = [\"missing_nx.json\"]\nbudget_fractions = [0.8]\n"),
        )
        .unwrap();
        let study = Study::load(&path, Profile::Smoke, None).unwrap();
        let err = run_typed::<crate::checkmate::Checkmate>(&study, tmp.path()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "experiment file {}: study `checkmate` failed: ",
                path.display()
            )),
            "{msg}"
        );
        assert!(msg.contains("missing_nx.json"), "{msg}");
        assert!(
            !msg.contains("field `params`"),
            "not an experiment-file field: {msg}"
        );
        let source = err.source().expect("the study's error is the source");
        assert!(
            source.downcast_ref::<crate::remat::RematError>().is_some(),
            "{source:?}"
        );
    }

    /// `experiments/static_planning.toml` with `edit` applied, written under `dir`, loaded.
    fn edited_static_planning(dir: &Path, edit: impl Fn(String) -> String) -> Study {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/static_planning.toml"),
        )
        .unwrap();
        let path = dir.join("static_planning.toml");
        std::fs::write(&path, edit(text)).unwrap();
        Study::load(&path, Profile::Cpu, None).unwrap()
    }

    #[test]
    fn a_missing_or_unknown_cited_value_names_the_file_and_its_field() {
        let tmp = tempfile::tempdir().unwrap();
        let study = edited_static_planning(tmp.path(), |t| {
            t.replace("chen_2016_gb = [48.0, 7.0]\n", "")
        });
        let msg = check(&study).unwrap_err().to_string();
        assert!(msg.contains(&study.path.display().to_string()), "{msg}");
        assert!(msg.contains("`params.cited`"), "{msg}");
        assert!(msg.contains("chen_2016_gb"), "{msg}");
        let study = edited_static_planning(tmp.path(), |t| {
            t.replace("chen_2016_gb = [48.0, 7.0]", "chen_2016_gb = [48.0, \"7\"]")
        });
        let msg = check(&study).unwrap_err().to_string();
        assert!(msg.contains("`params.cited.chen_2016_gb"), "{msg}");
        let study = edited_static_planning(tmp.path(), |t| {
            t.replace("[params.cited]\n", "[params.cited]\npaper_gb = 1.0\n")
        });
        let msg = check(&study).unwrap_err().to_string();
        assert!(
            msg.contains("`params.cited") && msg.contains("paper_gb"),
            "{msg}"
        );
    }

    /// A committed record renders the same from the experiment file beside the record store, from
    /// a loaded study, and (copied to a scratch store with what it quotes) from the record alone;
    /// a record whose quoted values do not read names the record and the field.
    #[test]
    fn a_record_renders_with_what_it_quotes_from_its_file_or_its_own_copy() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let study = Study::load(
            &root.join("experiments/static_planning.toml"),
            Profile::Cpu,
            None,
        )
        .unwrap();
        let path = record_path(&root.join("runs"), &study);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut record: StudyRecord = crate::record::parse_json(&text).unwrap();
        // The committed record renders as it is (with its copy of what it quotes when it was
        // written after the copy existed), and the same without the copy, from the file.
        let committed = sections(&record, &path).unwrap();
        record.cited = None;
        let from_file = sections(&record, &path).unwrap();
        assert_eq!(committed, from_file);
        assert_eq!(render_with(&study, &record, &path).unwrap(), from_file);

        let tmp = tempfile::tempdir().unwrap();
        let scratch = record_path(&tmp.path().join("scratch"), &study);
        record.cited = Some(RecordedCitation::of(&study));
        assert_eq!(sections(&record, &scratch).unwrap(), from_file);
        let back: StudyRecord =
            serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap();
        assert_eq!(back.cited, record.cited);

        let values = &mut record.cited.as_mut().unwrap().values;
        values.as_object_mut().unwrap().remove("chen_2016_claim");
        let msg = sections(&record, &scratch).unwrap_err().to_string();
        assert!(msg.contains(&scratch.display().to_string()), "{msg}");
        assert!(
            msg.contains("cited.values") && msg.contains("chen_2016_claim"),
            "{msg}"
        );
    }
}
