//! `memwall report` (and `--check`) and `memwall publish`: reports rendered from the records.

use super::*;

/// `memwall report`: re-renders the reports of `experiments` from the records in `runs`, or
/// with `check` compares them with the rendered reports.
pub(crate) fn report_cmd(
    experiments: Vec<PathBuf>,
    runs: PathBuf,
    reports: Option<PathBuf>,
    templates: PathBuf,
    check: bool,
) -> Result<()> {
    let paths = Paths {
        reports: driver::reports_root(&runs, reports),
        published: driver::published_beside(&runs),
        runs,
        templates,
        ..Paths::default()
    };
    if check {
        check_reports(experiments, &paths)
    } else {
        report(experiments, &paths)
    }
}

/// `memwall publish`: writes the rendered reports (and the nightly page) as a Hugo site's
/// content under `to`.
pub(crate) fn publish(to: &Path, reports: &Path, nightly: Option<&Path>) -> Result<()> {
    let n = memwall_report::sinks::hugo::publish(reports, to, nightly)
        .with_context(|| format!("publishing {} into {}", reports.display(), to.display()))?;
    println!("{}", to.join("reports").display());
    eprintln!("{n} report page bundles and the index written");
    Ok(())
}

/// `memwall report`: re-renders the reports of `experiments` (default: every file in
/// `experiments/`) and, for the whole set, the index across studies.
pub(crate) fn report(experiments: Vec<PathBuf>, paths: &Paths) -> Result<()> {
    render_reports(experiments, paths, true).map(drop)
}

/// Renders the reports of `experiments` (default: every file in `experiments/`) into
/// `paths.reports`, and for the whole set the index across studies (printing each path when
/// `print`). Returns the reports' folder names and whether the whole set was rendered.
pub(crate) fn render_reports(
    experiments: Vec<PathBuf>,
    paths: &Paths,
    print: bool,
) -> Result<(Vec<String>, bool)> {
    let all = experiments.is_empty();
    let files = memwall_lab::nightly::experiment_files(experiments, Path::new("experiments"))?;
    let mut names = Vec::new();
    for f in &files {
        let r = driver::report(f, paths).with_context(|| format!("reporting {}", f.display()))?;
        if print {
            println!("{}", r.markdown.display());
            println!("{}", r.html.display());
        }
        if let Some(dir) = r.markdown.parent().and_then(|d| d.file_name()) {
            names.push(dir.to_string_lossy().into_owned());
        }
    }
    if all {
        let index =
            memwall_report::sinks::index::write_index(&files, &paths.reports, &paths.templates)?;
        if print {
            println!("{}", index.display());
        }
    }
    Ok((names, all))
}

/// `memwall report --check`: renders every report into a temporary folder and compares it with
/// `paths.reports`; an error listing each differing file (with its first differing line).
pub(crate) fn check_reports(experiments: Vec<PathBuf>, paths: &Paths) -> Result<()> {
    let scratch = tempfile_dir()?;
    let rendered = Paths {
        reports: scratch.clone(),
        ..paths.clone()
    };
    let (names, all) = render_reports(experiments, &rendered, false)?;
    let mut diffs = memwall_report::check::compare_reports(&scratch, &paths.reports, &names, all)?;
    if all {
        let headline = memwall_core::spec::StudyRoles::discover(Path::new("experiments"))?.headline;
        if let Some(block) = memwall_report::sinks::readme::readme_block(
            &scratch,
            &paths.reports,
            headline.as_deref(),
        )? {
            diffs.extend(memwall_report::sinks::readme::check(
                &paths.reports,
                &block,
            )?);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if diffs.is_empty() {
        eprintln!(
            "{}: all {} reports are what the records in {} give",
            paths.reports.display(),
            names.len(),
            paths.runs.display()
        );
        return Ok(());
    }
    for d in &diffs {
        eprintln!("{d}");
    }
    bail!(
        "{} file(s) under {} differ from what the records give: run `memwall report` and commit \
         the result (or restore the records they were rendered from)",
        diffs.len(),
        paths.reports.display()
    )
}

/// A fresh temporary folder (removed by the caller).
pub(crate) fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "memwall-report-check-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
