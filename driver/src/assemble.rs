//! A study's report assembled from its records: training sections, the PyTorch rows, kernel
//! attribution, the largest-input search, in-process studies' renderers; written by the sinks.

use super::*;

/// Renders the report of a study from its records: Markdown, HTML, figures and, for training
/// studies, the Parquet tables. Reads `runs/`, writes only `reports/<study>/`.
///
/// # Errors
/// [`Error::Records`] when the study has no records yet.
pub fn report(study_path: &Path, paths: &Paths) -> Result<Rendered> {
    // The report covers every profile with records: it reads the file's profile-free part
    // once; an in-process study's renderer gets the file at its record's profile.
    let study = Study::outline(study_path)?;
    if study.header.kind != StudyKind::Training {
        return report_in_process(&study.header, study_path, paths);
    }
    report_training(&study, study_path, paths)
}

/// The "Results at a glance" rows of the study at `study_path` from the records in `runs` (no
/// file is written): per headline claim, the source's value, ours, the device and the verdict.
///
/// # Errors
/// [`Error::Records`] when the study has no records in `runs`; a record that does not read.
pub fn glance(study_path: &Path, runs: &Path) -> Result<Vec<document::content::GlanceRow>> {
    let study = Study::outline(study_path)?;
    let paths = Paths {
        runs: runs.to_path_buf(),
        ..Paths::default()
    };
    if study.header.kind != StudyKind::Training {
        let stored = crate::studies::stored(runs, &study.header.name)?;
        let Some((rec, rec_path)) = stored.first() else {
            return Err(no_records(&paths, &study.header.name, study_path));
        };
        let at = Study::load(study_path, record_profile(rec, rec_path)?, None)?;
        return crate::studies::glance(&at, rec, rec_path);
    }
    let records = training_records(&study.header, study_path, &paths)?;
    if is_search(&study) {
        return Ok(search_parts(study_path, &records)?.2);
    }
    // The PyTorch twins give a claim its second verdict, as in the report.
    let (pytorch, _) = report::twin::load_rows(runs, &study.header.name);
    let (_, _, glance) = report::sections::training::sections(
        &records,
        &study.header,
        &study.configs,
        &study.goals,
        &study.claims,
        &pytorch,
    )?;
    Ok(glance)
}

/// The report of an in-process study: its sections from its stored result, and the host it
/// ran on.
fn report_in_process(
    header: &crate::spec::StudyHeader,
    study_path: &Path,
    paths: &Paths,
) -> Result<Rendered> {
    let stored = crate::studies::stored(&paths.runs, &header.name)?;
    let Some((rec, rec_path)) = stored.first() else {
        return Err(no_records(paths, &header.name, study_path));
    };
    // The file at the profile the record ran at: its claims, and what older records quote.
    let study = &Study::load(study_path, record_profile(rec, rec_path)?, None)?;
    let e = &rec.env;
    let environment = vec![document::content::Table {
        caption: format!("{} profile", rec.profile),
        columns: vec!["field".into(), "value".into()],
        rows: vec![
            vec![
                "CPU".into(),
                format!("{} ({} threads)", e.cpu_model, e.cpu_threads),
            ],
            vec!["OS".into(), e.os.clone()],
            vec!["git revision".into(), e.git_revision.clone()],
            vec!["run at".into(), rec.finished_at.clone()],
            vec!["study wall time".into(), format!("{:.2} s", rec.wall_s)],
        ],
        notes: Vec::new(),
    }];
    // What the report quotes: the record's own copy (what its run quoted), else the loaded
    // experiment file (records written before the copy existed).
    let sections = match rec.cited {
        Some(_) => crate::studies::sections(rec, rec_path)?,
        None => crate::studies::render_with(study, rec, rec_path)?,
    };
    let glance = crate::studies::glance(study, rec, rec_path)?;
    let date = record_date(&rec.finished_at);
    let doc = ReportDoc::new(header, sections, environment, date, glance);
    report::render(&doc, &paths.templates, &paths.reports.join(&header.name))
}

/// The records of a training study, or an error naming the store when it has none (or none
/// readable, listing the unreadable ones and how to rerun them).
fn training_records(
    header: &crate::spec::StudyHeader,
    study_path: &Path,
    paths: &Paths,
) -> Result<analysis::StudyRecords> {
    let name = &header.name;
    let records = analysis::StudyRecords::load(&paths.runs, name)?;
    if records.is_empty() && !records.unreadable.is_empty() {
        return Err(Error::Records {
            path: paths.runs.join(name),
            message: format!(
                "no readable record for study `{}`: {}; `memwall run {}` moves them aside and \
                 reruns their jobs",
                name,
                records
                    .unreadable
                    .iter()
                    .map(|(p, e)| format!("{} ({e})", p.display()))
                    .collect::<Vec<_>>()
                    .join("; "),
                study_path.display()
            ),
        });
    }
    if records.is_empty() {
        return Err(no_records(paths, name, study_path));
    }
    Ok(records)
}

/// The report of a training study: the analysis sections of its records, the PyTorch rows and
/// operation timings imported beside them, and the Parquet tables.
fn report_training(study: &StudyOutline, study_path: &Path, paths: &Paths) -> Result<Rendered> {
    let header = &study.header;
    let records = training_records(header, study_path, paths)?;
    if is_search(study) {
        return report_search(study, study_path, paths, &records);
    }
    // PyTorch rows (`runs/<study>/pytorch/`, from a bundle's import or `memwall twin
    // --device cpu`): the CPU ones in their CPU group's section, the others (and the rows that
    // do not read) in the section beside PyTorch below.
    let (pytorch, pytorch_unread) = report::twin::load_rows(&paths.runs, &header.name);
    let (mut sections, environment, glance) = report::sections::training::sections(
        &records,
        header,
        &study.configs,
        &study.goals,
        &study.claims,
        &pytorch,
    )?;
    let labels: Vec<(String, String)> = study
        .configs
        .iter()
        .map(|c| (c.name.clone(), c.label.clone()))
        .collect();
    sections.extend(report::sections::twin::section(
        &pytorch,
        &pytorch_unread,
        &records.records,
        &labels,
    ));
    // Operation timings of `memwall-job bench` and `reference/torch_attribution.py`
    // (`runs/<study>/attribution/`).
    if let Some((rows, bad)) = analysis::attribution::load(&paths.runs, &header.name) {
        sections.extend(report::sections::attribution::section(&rows, &bad));
    }
    // This machine's store: its measurements beside the published ones.
    if let Some(published) = &paths.published {
        let theirs = analysis::StudyRecords::load(published, &header.name)?;
        sections.extend(report::sections::reproduction::section(
            &records.records,
            &theirs.records,
            &labels,
        ));
    }
    write_report(paths, header, &records, sections, environment, glance)
}

/// The report of a study that searches the largest input ([`studies::largest_input`]): per profile of
/// its records, the search's tables and the glance from the first profile with answers (the
/// `cpu` profile first).
fn report_search(
    study: &StudyOutline,
    study_path: &Path,
    paths: &Paths,
    records: &analysis::StudyRecords,
) -> Result<Rendered> {
    let (sections, environment, glance) = search_parts(study_path, records)?;
    write_report(paths, &study.header, records, sections, environment, glance)
}

/// A search study's sections, environment tables and glance (see [`report_search`]).
fn search_parts(
    study_path: &Path,
    records: &analysis::StudyRecords,
) -> Result<(
    Vec<document::content::Section>,
    Vec<document::content::Table>,
    Vec<document::content::GlanceRow>,
)> {
    let mut profiles: Vec<Profile> = records.records.iter().map(|r| r.spec.profile).collect();
    profiles.sort_by_key(|p| (*p != Profile::Cpu, p.as_str()));
    profiles.dedup();
    let mut sections = Vec::new();
    let mut environment = Vec::new();
    let mut glance = Vec::new();
    for profile in profiles {
        let at = Study::load(study_path, profile, None)?;
        let Some(params) = crate::studies::largest_input::params(&at)? else {
            continue;
        };
        let rows = crate::studies::largest_input::summarize(&records.records, &at, &params);
        if let Some(mut section) = crate::studies::largest_input::section(&rows, &params, &at) {
            section.title = format!("{} ({} profile)", section.title, profile);
            sections.push(section);
            environment.extend(crate::studies::largest_input::environment(&rows, &at));
            if glance.is_empty() {
                glance = crate::studies::largest_input::glance(&at, &rows);
            }
        }
    }
    Ok((sections, environment, glance))
}

/// Renders a training study's report (dated by its newest record) into
/// `<reports>/<study>/` and writes its Parquet tables beside it.
fn write_report(
    paths: &Paths,
    header: &crate::spec::StudyHeader,
    records: &analysis::StudyRecords,
    sections: Vec<document::content::Section>,
    environment: Vec<document::content::Table>,
    glance: Vec<document::content::GlanceRow>,
) -> Result<Rendered> {
    let newest = records
        .records
        .iter()
        .map(|r| r.finished_at.as_str())
        .max()
        .unwrap_or_default();
    // The headline's device (the glance's first row, "NVIDIA H200, source's size (...)")
    // begins with the device name of the records it was measured on.
    let headline_device = glance.first().map(|g| g.device.clone()).unwrap_or_default();
    let measured = records
        .records
        .iter()
        .filter(|r| {
            !r.env.device_name.is_empty() && headline_device.starts_with(&r.env.device_name)
        })
        .map(|r| r.finished_at.as_str())
        .max()
        .map(record_date)
        .unwrap_or_default();
    let mut doc = ReportDoc::new(header, sections, environment, record_date(newest), glance);
    if measured != doc.date {
        doc.measured_date = measured;
    }
    if doc.glance.is_empty() {
        // No claim is judged: the device of the newest record (backend and profile beside it).
        if let Some(r) = records
            .records
            .iter()
            .max_by_key(|r| r.finished_at.as_str())
        {
            doc.measured_on = format!(
                "{} ({}), {} profile",
                r.env.device_name, r.env.backend, r.spec.profile
            );
        }
    }
    let out_dir = paths.reports.join(&header.name);
    report::sinks::render_study(
        &report::sinks::StudyReport {
            doc: &doc,
            records: Some(records),
        },
        &paths.templates,
        &out_dir,
    )
}

/// Where reports of the record store `runs` go: `reports` given, else `reports/` for the
/// committed store `runs/`, `<runs>/reports` for any other (a scratch store: its reports never
/// overwrite the published ones).
pub fn reports_root(runs: &Path, reports: Option<PathBuf>) -> PathBuf {
    match reports {
        Some(r) => r,
        None if is_published(runs) => "reports".into(),
        None => runs.join("reports"),
    }
}

/// The date (YYYY-MM-DD) of an RFC 3339 time stamp of a record.
fn record_date(finished_at: &str) -> String {
    finished_at.chars().take(10).collect()
}

/// Whether the training study searches the largest input (`[params.search]`, in the file or
/// a profile): its report is the search's ([`report_search`]).
fn is_search(study: &StudyOutline) -> bool {
    study.has_params(crate::studies::largest_input::PARAMS_KEY)
}

/// The profile an in-process study's record ran at, or an error naming the record.
fn record_profile(rec: &crate::studies::StudyRecord, path: &Path) -> Result<Profile> {
    rec.profile.parse().map_err(|e| Error::Records {
        path: path.to_path_buf(),
        message: format!("field `profile`: {e}"),
    })
}

fn no_records(paths: &Paths, study: &str, study_path: &Path) -> Error {
    Error::Records {
        path: paths.runs.join(study),
        message: format!(
            "no records for study `{study}`: run `memwall run {}` first",
            study_path.display()
        ),
    }
}
