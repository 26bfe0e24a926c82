//! Renders a report (Markdown with YAML front matter, a standalone HTML page with inline SVG
//! figures, and the SVG files) from minijinja templates.
//!
//! The templates get plain text (titles, captions, cells) and Markdown (descriptions, notes,
//! claims) apart: the `md` filter escapes plain text for Markdown, `markdown` and
//! `markdown_inline` render Markdown to HTML with comrak, and minijinja escapes the rest of the
//! HTML page. Tables arrive with their column alignment and numbered footnotes.

use crate::content::{GlanceRow, Section, Table};
use crate::error::{Error, Result};
use crate::figures;
use crate::markdown;
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
    /// Date of the newest record the report shows (YYYY-MM-DD), for the front matter: the same
    /// records give the same report on any day.
    pub date: String,
    /// The source document whose claims are checked.
    pub source: String,
    /// The source document's own title (empty when the file gives none).
    pub source_title: String,
    /// The headline in one sentence (front matter `description`, the index's result column).
    pub summary: String,
    /// The "Results at a glance" rows: the source's headline claims beside ours.
    pub glance: Vec<GlanceRow>,
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
    /// Where the numbers come from, as the page names it (`runs/<study>/` for a study; the
    /// history store for the nightly page).
    pub records: String,
    /// Whether the page quotes a source document's numbers beside its own (every study; not
    /// the nightly page, whose "source" is memwall's own history).
    pub quotes_source: bool,
    /// Date (YYYY-MM-DD) of the newest record measured where the headline was (the glance's
    /// device), which the index and the README show beside that device; empty: `date`.
    pub measured_date: String,
    /// Where the rows were measured when no claim is judged (the glance's device otherwise):
    /// the index and the README show it in their device column; empty: unknown.
    pub measured_on: String,
}

impl ReportDoc {
    /// A report of `header`'s study dated `date` (YYYY-MM-DD, the newest record's), opening
    /// with `glance`.
    pub fn new(
        header: &crate::spec::StudyHeader,
        sections: Vec<Section>,
        environment: Vec<Table>,
        date: String,
        glance: Vec<GlanceRow>,
    ) -> Self {
        ReportDoc {
            name: header.name.clone(),
            title: header.title.clone(),
            date,
            summary: if glance.is_empty() {
                "No headline claim of the source is judged here: the rows are memwall's own \
                 measurements."
                    .into()
            } else {
                crate::glance::summary(&glance)
            },
            glance,
            source: header.source.clone(),
            source_title: header.source_title.clone(),
            description: header.description.clone(),
            notes: header.notes.clone(),
            tags: header.tags.clone(),
            sections,
            environment,
            records: format!("runs/{}/", header.name),
            quotes_source: true,
            measured_date: String::new(),
            measured_on: String::new(),
        }
    }
}

impl ReportDoc {
    /// The sentence that says where the numbers come from.
    pub fn evidence(&self) -> String {
        if self.quotes_source {
            format!(
                "Every number under \"ours\" comes from the run records committed in {}; the \
                 source document's numbers are quoted beside them, and a number computed from \
                 them is labelled derived.",
                self.records
            )
        } else {
            format!("Every number comes from {}.", self.records)
        }
    }
}

#[derive(Serialize)]
struct FigureCtx {
    name: String,
    title: String,
    file: String,
}

/// A section as the templates see it: the model's fields with its tables prepared.
#[derive(Serialize)]
struct SectionCtx<'a> {
    title: &'a str,
    claim: &'a str,
    ours: &'a str,
    notes: &'a [String],
    tables: Vec<TableCtx>,
    rendered_figures: Vec<FigureCtx>,
    details: Option<&'a crate::content::Details>,
}

/// A table as the templates see it: per column its alignment, per cell its footnote numbers,
/// the footnotes numbered in the order of their first cell.
#[derive(Debug, Serialize)]
struct TableCtx {
    /// Anchor prefix, unique within the page, e.g. "t2-1".
    id: String,
    caption: String,
    columns: Vec<ColumnCtx>,
    rows: Vec<Vec<CellCtx>>,
    notes: Vec<NoteCtx>,
}

#[derive(Debug, Serialize)]
struct ColumnCtx {
    header: String,
    /// Right-aligned: every cell is a number (or a missing value).
    numeric: bool,
}

#[derive(Debug, Serialize)]
struct CellCtx {
    text: String,
    /// Footnote numbers of the cell.
    notes: Vec<usize>,
    /// The footnote texts joined, for a tooltip.
    title: String,
    /// The footnote references in Markdown (`[^t1-2-1]`).
    refs: String,
}

#[derive(Debug, Serialize)]
struct NoteCtx {
    number: usize,
    /// The Markdown footnote label, unique in the page (`t1-2-1`).
    label: String,
    text: String,
}

/// Whether a cell reads as a number: `None` for a missing value ("–", "-", "n/a" or empty),
/// otherwise whether every " / "-separated part is a number with an optional unit suffix.
fn numeric_cell(cell: &str) -> Option<bool> {
    let cell = cell.trim();
    if matches!(cell, "" | "–" | "-" | "—" | "n/a") {
        return None;
    }
    const UNITS: [&str; 14] = [
        " GiB", " MiB", " KiB", " GB", " MB", " kB", " B", " ms", " s", "%", "x", "×", " h", " min",
    ];
    let number = |part: &str| {
        let part = part.trim();
        let bare = UNITS
            .iter()
            .find_map(|u| part.strip_suffix(u))
            .unwrap_or(part)
            .trim_start_matches(['+', '−'])
            .replace(',', "");
        let bare = bare.trim_start_matches('-');
        matches!(bare, "inf" | "NaN")
            || (bare.starts_with(|c: char| c.is_ascii_digit() || c == '.')
                && bare.parse::<f64>().is_ok())
    };
    Some(cell.split(" / ").all(number))
}

/// Prepares `t` for the templates: column alignment, footnotes numbered by first use (equal
/// texts share a number).
///
/// # Errors
/// [`Error::Report`] when a row's length differs from the header's or a note points outside
/// the table.
fn table_ctx(t: &Table, id: String) -> Result<TableCtx> {
    let width = t.columns.len();
    if let Some((i, r)) = t.rows.iter().enumerate().find(|(_, r)| r.len() != width) {
        return Err(Error::Report(format!(
            "table `{}`: row {i} has {} cells for {width} columns",
            t.caption,
            r.len()
        )));
    }
    let columns = t
        .columns
        .iter()
        .enumerate()
        .map(|(j, h)| {
            let kinds: Vec<bool> = t.rows.iter().filter_map(|r| numeric_cell(&r[j])).collect();
            ColumnCtx {
                header: h.clone(),
                numeric: !kinds.is_empty() && kinds.iter().all(|k| *k),
            }
        })
        .collect();
    let mut rows: Vec<Vec<CellCtx>> = t
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| CellCtx {
                    text: c.clone(),
                    notes: Vec::new(),
                    title: String::new(),
                    refs: String::new(),
                })
                .collect()
        })
        .collect();
    let mut notes: Vec<NoteCtx> = Vec::new();
    let mut ordered: Vec<&crate::content::CellNote> = t.notes.iter().collect();
    ordered.sort_by_key(|n| (n.row, n.column));
    for n in ordered {
        let cell = rows
            .get_mut(n.row)
            .and_then(|r| r.get_mut(n.column))
            .ok_or_else(|| {
                Error::Report(format!(
                    "table `{}`: note on cell ({}, {}) outside its {} rows x {width} columns",
                    t.caption,
                    n.row,
                    n.column,
                    t.rows.len()
                ))
            })?;
        let number = match notes.iter().find(|x| x.text == n.text) {
            Some(x) => x.number,
            None => {
                let number = notes.len() + 1;
                notes.push(NoteCtx {
                    number,
                    label: format!("{id}-{number}"),
                    text: n.text.clone(),
                });
                number
            }
        };
        if !cell.notes.contains(&number) {
            cell.notes.push(number);
            if !cell.title.is_empty() {
                cell.title.push_str("; ");
            }
            cell.title.push_str(&n.text);
            cell.refs.push_str(&format!("[^{id}-{number}]"));
        }
    }
    Ok(TableCtx {
        id,
        caption: t.caption.clone(),
        columns,
        rows,
        notes,
    })
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
    // Plain text as literal Markdown; Markdown fields as HTML (comrak); no raw HTML passes.
    env.add_filter("md", |s: String| markdown::escape(&s));
    env.add_filter("alt", |s: String| markdown::alt_text(&s));
    env.add_filter("markdown", |s: String| {
        minijinja::Value::from_safe_string(markdown::to_html(&s))
    });
    env.add_filter("markdown_inline", |s: String| {
        minijinja::Value::from_safe_string(markdown::to_inline_html(&s))
    });
    for name in [MARKDOWN_TEMPLATE, HTML_TEMPLATE] {
        let path = templates.join(name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| Error::io("reading template", &path, e))?;
        env.add_template_owned(name.to_string(), text)
            .map_err(|e| Error::render(format!("template {}", path.display()), e))?;
    }
    Ok(env)
}

/// Removes the SVG files of `fig_dir` that this rendering did not write (`kept`): a figure the
/// records no longer give must not stay beside the report as if it were evidence.
fn remove_stale_figures(fig_dir: &Path, kept: &[PathBuf]) -> Result<()> {
    let entries = std::fs::read_dir(fig_dir).map_err(|e| Error::io("listing", fig_dir, e))?;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "svg") && !kept.contains(&p) {
            std::fs::remove_file(&p).map_err(|e| Error::io("removing", &p, e))?;
        }
    }
    Ok(())
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
        let rendered = write_figures(section, &fig_dir, &mut files)?;
        let si = sections.len() + 1;
        sections.push(section_ctx(section, si, rendered)?);
    }
    let environment = doc
        .environment
        .iter()
        .enumerate()
        .map(|(ti, t)| table_ctx(t, format!("env-{}", ti + 1)))
        .collect::<Result<Vec<_>>>()?;
    let ctx = template_context(doc, &sections, &environment)?;
    let md = env
        .get_template(MARKDOWN_TEMPLATE)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| Error::render(format!("rendering {MARKDOWN_TEMPLATE}"), e))?;
    let html = env
        .get_template(HTML_TEMPLATE)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| Error::render(format!("rendering {HTML_TEMPLATE}"), e))?;
    remove_stale_figures(&fig_dir, &files)?;
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

/// Writes the drawable figures of `section` as `fig_dir/<name>.svg` (adding their paths to
/// `files`) and returns them as the templates see them; a figure without a finite point is
/// left out with a warning.
fn write_figures(
    section: &Section,
    fig_dir: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<Vec<FigureCtx>> {
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
        });
    }
    Ok(rendered)
}

/// The `si`-th section (from 1) as the templates see it, its tables anchored `t<si>-<n>`.
fn section_ctx(section: &Section, si: usize, rendered: Vec<FigureCtx>) -> Result<SectionCtx<'_>> {
    Ok(SectionCtx {
        title: &section.title,
        claim: &section.claim,
        ours: &section.ours,
        notes: &section.notes,
        tables: section
            .tables
            .iter()
            .enumerate()
            .map(|(ti, t)| table_ctx(t, format!("t{si}-{}", ti + 1)))
            .collect::<Result<_>>()?,
        rendered_figures: rendered,
        details: section.details.as_ref(),
    })
}

/// The templates' context: the report model (with its evidence line), the at-a-glance table,
/// the sections, the environment tables and the Hugo front matter.
fn template_context(
    doc: &ReportDoc,
    sections: &[SectionCtx],
    environment: &[TableCtx],
) -> Result<minijinja::Value> {
    let front_matter = markdown::front_matter(&markdown::FrontMatter {
        title: &doc.title,
        date: &doc.date,
        measured_date: &doc.measured_date,
        description: &doc.summary,
        tags: &doc.tags,
        source: &doc.source,
        source_title: &doc.source_title,
        measured_on: doc
            .glance
            .first()
            .map(|g| g.device.as_str())
            .unwrap_or(&doc.measured_on),
    })?;
    let glance = (!doc.glance.is_empty())
        .then(|| {
            table_ctx(
                &crate::glance::table(&doc.glance, &doc.source),
                "glance".into(),
            )
        })
        .transpose()?;
    let mut doc_value = serde_json::to_value(doc)
        .map_err(|e| Error::render("report model does not serialize", e))?;
    doc_value["evidence"] = serde_json::Value::String(doc.evidence());
    Ok(minijinja::context! {
        doc => minijinja::Value::from(minijinja::value::Serde(&doc_value)),
        glance => glance.map(|g| minijinja::Value::from(minijinja::value::Serde(g))),
        sections => minijinja::Value::from(minijinja::value::Serde(&sections)),
        environment => minijinja::Value::from(minijinja::value::Serde(&environment)),
        front_matter => front_matter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_units_are_numeric_and_words_are_not() {
        for n in [
            "133.7",
            "-3.4",
            "1.278x",
            "41.3%",
            "2.11e10",
            "1.2660e10",
            "65536 / 1024",
        ] {
            assert_eq!(numeric_cell(n), Some(true), "{n}");
        }
        for n in ["12.5 MiB", "0.35 s", "inf", "1,024"] {
            assert_eq!(numeric_cell(n), Some(true), "{n}");
        }
        for t in [
            "ok",
            "f32",
            "<= 1.4x",
            "unsupported",
            "Optimal",
            "K = 1",
            "2^-10",
        ] {
            assert_eq!(numeric_cell(t), Some(false), "{t}");
        }
        for m in ["–", "-", ""] {
            assert_eq!(numeric_cell(m), None, "{m:?}");
        }
    }

    fn table() -> Table {
        Table {
            caption: "t".into(),
            columns: vec!["config".into(), "status".into(), "peak (MiB)".into()],
            rows: vec![
                vec!["a".into(), "ok".into(), "1.5".into()],
                vec!["b".into(), "failed".into(), "–".into()],
                vec!["c".into(), "oom".into(), "–".into()],
                vec!["d".into(), "failed".into(), "–".into()],
            ],
            notes: Vec::new(),
        }
    }

    #[test]
    fn columns_align_by_their_cells() {
        let ctx = table_ctx(&table(), "t1-1".into()).unwrap();
        let numeric: Vec<bool> = ctx.columns.iter().map(|c| c.numeric).collect();
        assert_eq!(numeric, [false, false, true]);
    }

    #[test]
    fn footnotes_are_numbered_by_first_use_and_shared_by_equal_texts() {
        let mut t = table();
        t.note(3, 1, "the runner crashed");
        t.note(1, 1, "the runner crashed");
        t.note(2, 1, "out of memory at step 3");
        let ctx = table_ctx(&t, "t1-1".into()).unwrap();
        let texts: Vec<&str> = ctx.notes.iter().map(|n| n.text.as_str()).collect();
        assert_eq!(texts, ["the runner crashed", "out of memory at step 3"]);
        assert_eq!(ctx.rows[1][1].notes, [1]);
        assert_eq!(ctx.rows[2][1].notes, [2]);
        assert_eq!(ctx.rows[3][1].notes, [1]);
        assert_eq!(ctx.rows[3][1].refs, "[^t1-1-1]");
        assert_eq!(ctx.notes[1].label, "t1-1-2");
        assert_eq!(ctx.rows[2][1].title, "out of memory at step 3");
        assert!(ctx.rows[0][1].notes.is_empty());
    }

    #[test]
    fn a_note_outside_the_table_or_a_short_row_is_an_error() {
        let mut t = table();
        t.note(9, 0, "nowhere");
        let e = table_ctx(&t, "x".into()).unwrap_err().to_string();
        assert!(e.contains("(9, 0)") && e.contains("4 rows"), "{e}");
        let mut t = table();
        t.rows[2].pop();
        let e = table_ctx(&t, "x".into()).unwrap_err().to_string();
        assert!(e.contains("row 2 has 2 cells for 3 columns"), "{e}");
    }

    #[test]
    fn user_strings_are_escaped_in_markdown_and_html() {
        let dir = tempfile::tempdir().unwrap();
        let templates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../templates");
        let label = "<b>bold</b> *star* | \"quoted\": x";
        let mut t = table();
        t.rows[0][0] = label.into();
        t.note(1, 1, "reason with <i>html</i> and | pipe");
        let doc = ReportDoc {
            name: "esc".into(),
            title: format!("Title {label}"),
            date: "2026-11-23".into(),
            source: "src: \"x\".txt".into(),
            source_title: String::new(),
            summary: String::new(),
            glance: Vec::new(),
            description: "Uses *emphasis* and <script>alert(1)</script>.".into(),
            notes: vec!["a `code` note".into()],
            tags: vec!["tag: \"q\"".into()],
            sections: vec![Section {
                title: "Section *one*".into(),
                claim: "The source says **this**.".into(),
                ours: "We measured `that`.".into(),
                tables: vec![t],
                ..Default::default()
            }],
            environment: Vec::new(),
            records: "runs/esc/".into(),
            quotes_source: true,
            measured_date: String::new(),
            measured_on: String::new(),
        };
        let r = render(&doc, &templates, dir.path()).unwrap();
        let md = std::fs::read_to_string(&r.markdown).unwrap();
        let front = md.split("---\n").nth(1).unwrap();
        let fm: serde_norway::Value = serde_norway::from_str(front).unwrap();
        assert_eq!(fm["title"].as_str(), Some(doc.title.as_str()));
        assert_eq!(fm["source"].as_str(), Some("src: \"x\".txt"));
        // The Markdown of report.md, rendered by a CommonMark renderer, shows the label as text
        // in its own cell, and the section title without emphasis.
        let body = md.splitn(3, "---\n").nth(2).unwrap();
        let html = markdown::to_html(body);
        assert!(
            html.contains("<td>&lt;b&gt;bold&lt;/b&gt; *star* | &quot;quoted&quot;: x</td>"),
            "{html}"
        );
        assert!(html.contains("<h2>Section *one*</h2>"), "{html}");
        // Table notes are Markdown footnotes.
        assert!(
            html.contains("<td>failed<sup class=\"footnote-ref\">"),
            "{html}"
        );
        assert!(
            html.contains("reason with &lt;i&gt;html&lt;/i&gt; and | pipe"),
            "{html}"
        );
        // The title is the front matter's: the body does not repeat it as a heading.
        assert!(!body.contains("\n# "), "{body}");
        // index.html: plain text escaped, Markdown rendered, raw HTML shown as text.
        let page = std::fs::read_to_string(&r.html).unwrap();
        assert!(
            page.contains("&lt;b&gt;bold&lt;&#x2f;b&gt;")
                || page.contains("&lt;b&gt;bold&lt;/b&gt;"),
            "{page}"
        );
        assert!(!page.contains("<b>bold</b>"), "{page}");
        assert!(page.contains("<em>emphasis</em>"), "{page}");
        assert!(!page.contains("<script>alert(1)"), "{page}");
        assert!(page.contains("<strong>this</strong>") && page.contains("<code>that</code>"));
        assert!(page.contains("class=\"claim-ours\""), "{page}");
        assert!(page.contains("title=\"reason with"), "{page}");
        assert!(
            page.contains("<th class=\"num\" scope=\"col\">peak (MiB)</th>"),
            "{page}"
        );
    }
}
