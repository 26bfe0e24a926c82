//! Renders a report (Markdown with front matter, a standalone HTML page with inline SVG
//! figures, and the SVG files) from minijinja templates.

use super::figures;
use super::model::{Section, Table};
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The Markdown template memwall reads from the templates directory.
pub const MARKDOWN_TEMPLATE: &str = "report.md.j2";
/// The HTML template memwall reads from the templates directory.
pub const HTML_TEMPLATE: &str = "report.html.j2";

/// A report: the study's header, its sections and the environment it ran in.
#[derive(Debug, Clone, Serialize)]
pub struct ReportDoc {
    /// Folder name under `reports/`.
    pub name: String,
    /// The study's title (the page's heading).
    pub title: String,
    /// Date of rendering (YYYY-MM-DD), for the front matter.
    pub date: String,
    /// The source document whose claims are checked.
    pub source: String,
    /// The introduction (Markdown).
    pub description: String,
    /// Notes printed under the introduction (Markdown).
    pub notes: Vec<String>,
    /// Front-matter tags.
    pub tags: Vec<String>,
    /// The study's sections, in order.
    pub sections: Vec<Section>,
    /// Environment tables (one per device the study ran on).
    pub environment: Vec<Table>,
}

impl ReportDoc {
    /// A report of `header`'s study, dated today.
    pub fn new(
        header: &crate::spec::StudyHeader,
        sections: Vec<Section>,
        environment: Vec<Table>,
    ) -> Self {
        ReportDoc {
            name: header.name.clone(),
            title: header.title.clone(),
            date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
            source: header.source.clone(),
            description: header.description.clone(),
            notes: header.notes.clone(),
            tags: header.tags.clone(),
            sections,
            environment,
        }
    }
}

#[derive(Serialize)]
struct FigureCtx {
    name: String,
    title: String,
    file: String,
    svg: String,
}

#[derive(Serialize)]
struct SectionCtx<'a> {
    #[serde(flatten)]
    section: &'a Section,
    rendered_figures: Vec<FigureCtx>,
}

/// Paths written by [`render`].
#[derive(Debug, Clone)]
pub struct Rendered {
    /// `report.md`.
    pub markdown: PathBuf,
    /// `index.html`.
    pub html: PathBuf,
    /// `figures/<name>.svg`, one per figure.
    pub figures: Vec<PathBuf>,
}

fn load_env(templates: &Path) -> Result<minijinja::Environment<'static>> {
    let mut env = minijinja::Environment::new();
    for name in [MARKDOWN_TEMPLATE, HTML_TEMPLATE] {
        let path = templates.join(name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| Error::io("reading template", &path, e))?;
        env.add_template_owned(name.to_string(), text)
            .map_err(|e| Error::Report(format!("template {}: {e}", path.display())))?;
    }
    Ok(env)
}

/// Renders `doc` into `out_dir` (`report.md`, `index.html`, `figures/*.svg`) with the templates
/// in `templates`.
///
/// # Errors
/// [`Error::Io`] for unreadable templates or unwritable outputs, [`Error::Report`] for template
/// and figure errors.
pub fn render(doc: &ReportDoc, templates: &Path, out_dir: &Path) -> Result<Rendered> {
    let env = load_env(templates)?;
    let fig_dir = out_dir.join("figures");
    std::fs::create_dir_all(&fig_dir).map_err(|e| Error::io("creating", &fig_dir, e))?;
    let mut files = Vec::new();
    let mut sections = Vec::with_capacity(doc.sections.len());
    for section in &doc.sections {
        let mut rendered = Vec::new();
        for fig in &section.figures {
            if !figures::is_drawable(fig) {
                // e.g. reductions in a group without a finished control: the table says why.
                tracing::warn!("figure `{}` has no finite point: left out", fig.name);
                continue;
            }
            let svg = figures::svg(fig)?;
            let path = fig_dir.join(format!("{}.svg", fig.name));
            crate::results::write_atomic(&path, svg.as_bytes())?;
            files.push(path);
            rendered.push(FigureCtx {
                name: fig.name.clone(),
                title: fig.title.clone(),
                file: format!("figures/{}.svg", fig.name),
                svg,
            });
        }
        sections.push(SectionCtx {
            section,
            rendered_figures: rendered,
        });
    }
    let ctx = minijinja::context! {
        doc => minijinja::Value::from(minijinja::value::Serde(doc)),
        sections => minijinja::Value::from(minijinja::value::Serde(&sections)),
    };
    let md = env
        .get_template(MARKDOWN_TEMPLATE)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| Error::Report(format!("rendering {MARKDOWN_TEMPLATE}: {e:#}")))?;
    let html = env
        .get_template(HTML_TEMPLATE)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| Error::Report(format!("rendering {HTML_TEMPLATE}: {e:#}")))?;
    let markdown = out_dir.join("report.md");
    let html_path = out_dir.join("index.html");
    crate::results::write_atomic(&markdown, md.as_bytes())?;
    crate::results::write_atomic(&html_path, html.as_bytes())?;
    Ok(Rendered {
        markdown,
        html: html_path,
        figures: files,
    })
}
