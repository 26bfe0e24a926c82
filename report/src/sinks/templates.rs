//! The Markdown and HTML sinks: a report as Markdown with YAML front matter (`report.md`) and as
//! a standalone HTML page with its figures inline (`index.html`), from minijinja templates.
//!
//! The templates get plain text (titles, captions, cells) and Markdown (descriptions, notes,
//! claims) apart: the `md` filter escapes plain text for Markdown, `markdown` and
//! `markdown_inline` render Markdown to HTML with comrak, and minijinja escapes the rest of the
//! HTML page. Tables arrive with their column alignment and numbered footnotes.

use super::{Sink, StudyReport};
use crate::content::{Section, Table};
use crate::error::{Error, Result};
use crate::sections::ReportDoc;
use crate::sinks::figures;
use crate::sinks::markdown;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The Markdown template memwall reads from the templates directory.
pub const MARKDOWN_TEMPLATE: &str = "report.md.j2";
/// The Markdown report's file name in a study's report folder.
pub const REPORT_MD: &str = "report.md";
/// The HTML report's file name in a study's report folder.
pub const REPORT_HTML: &str = "index.html";
/// The HTML template memwall reads from the templates directory.
pub const HTML_TEMPLATE: &str = "report.html.j2";

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

fn load_env(templates: &Path) -> Result<minijinja::Environment<'static>> {
    let mut env = minijinja::Environment::new();
    // Plain text as literal Markdown; Markdown fields as HTML (comrak); no raw HTML passes.
    env.add_filter("md", |s: String| crate::text::escape(&s));
    env.add_filter("alt", |s: String| crate::text::alt_text(&s));
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

/// The drawable figures of `section` as the templates see them (the files the figures sink
/// writes); a figure without a finite point is left out.
fn figure_ctx(section: &Section) -> Vec<FigureCtx> {
    section
        .figures
        .iter()
        .filter(|fig| figures::is_drawable(fig))
        .map(|fig| FigureCtx {
            name: fig.name.clone(),
            title: fig.title.clone(),
            file: format!("figures/{}.svg", fig.name),
        })
        .collect()
}

/// `doc` rendered with the template `name` of `templates`.
fn render_template(doc: &ReportDoc, templates: &Path, name: &str) -> Result<String> {
    let env = load_env(templates)?;
    let sections = doc
        .sections
        .iter()
        .enumerate()
        .map(|(i, section)| section_ctx(section, i + 1, figure_ctx(section)))
        .collect::<Result<Vec<_>>>()?;
    let environment = doc
        .environment
        .iter()
        .enumerate()
        .map(|(ti, t)| table_ctx(t, format!("env-{}", ti + 1)))
        .collect::<Result<Vec<_>>>()?;
    let ctx = template_context(doc, &sections, &environment)?;
    env.get_template(name)
        .and_then(|t| t.render(&ctx))
        .map_err(|e| Error::render(format!("rendering {name}"), e))
}

/// `doc` rendered with the template `name` of `templates`, written to `path` atomically.
fn write_template(
    doc: &ReportDoc,
    templates: &Path,
    name: &str,
    path: &Path,
) -> Result<Vec<PathBuf>> {
    let text = render_template(doc, templates, name)?;
    crate::analysis::write_atomic(path, text.as_bytes())?;
    Ok(vec![path.to_path_buf()])
}

/// The Markdown sink: `report.md` from the template [`MARKDOWN_TEMPLATE`] of its folder.
#[derive(Debug, Clone)]
pub struct Markdown {
    /// The templates folder.
    pub templates: PathBuf,
}

impl Sink for Markdown {
    fn name(&self) -> &'static str {
        "markdown"
    }

    fn study(&self, report: &StudyReport<'_>, out_dir: &Path) -> Result<Vec<PathBuf>> {
        write_template(
            report.doc,
            &self.templates,
            MARKDOWN_TEMPLATE,
            &out_dir.join(REPORT_MD),
        )
    }
}

/// The HTML sink: `index.html` (a standalone page, its figures inline) from the template
/// [`HTML_TEMPLATE`] of its folder.
#[derive(Debug, Clone)]
pub struct Html {
    /// The templates folder.
    pub templates: PathBuf,
}

impl Sink for Html {
    fn name(&self) -> &'static str {
        "html"
    }

    fn study(&self, report: &StudyReport<'_>, out_dir: &Path) -> Result<Vec<PathBuf>> {
        write_template(
            report.doc,
            &self.templates,
            HTML_TEMPLATE,
            &out_dir.join(REPORT_HTML),
        )
    }
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
    use crate::sinks::render;

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
