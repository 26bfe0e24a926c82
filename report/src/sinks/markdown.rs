//! Markdown for the Markdown and HTML sinks: Markdown rendered to HTML by comrak (CommonMark
//! with GFM tables), and the YAML front matter written by a YAML serializer (serde_norway).
//!
//! The report model has two kinds of text. *Markdown* fields (a study's description and notes,
//! a section's claim, ours and notes) are written by the study and may use emphasis and code
//! spans; they are pasted into `report.md` and rendered to HTML with [`to_html`]. *Plain* fields
//! (titles, captions, column headers, table cells, labels) are user strings:
//! [`memwall_document::text::escape`] makes them literal text in Markdown, and the HTML
//! template escapes them as HTML; the tests here check that comrak reads the escaped text back.

use crate::error::{Error, Result};
#[cfg(test)]
use memwall_document::text::escape;
use serde::Serialize;

/// The comrak options memwall renders Markdown with: CommonMark plus GFM tables and
/// strike-through; raw HTML in the source is escaped (shown as text), never passed through.
fn options() -> comrak::Options<'static> {
    let mut o = comrak::Options::default();
    o.extension.table = true;
    o.extension.strikethrough = true;
    o.extension.footnotes = true;
    o.render.escape = true;
    o
}

/// `markdown` rendered to an HTML fragment (paragraphs, emphasis, code, lists, tables); HTML
/// tags written in the Markdown appear as text.
pub fn to_html(markdown: &str) -> String {
    comrak::markdown_to_html(markdown, &options())
}

/// `markdown` rendered to HTML without the enclosing `<p>` of a single paragraph, for text
/// inside a table cell or list item.
pub fn to_inline_html(markdown: &str) -> String {
    let html = to_html(markdown);
    let trimmed = html.trim_end();
    match trimmed
        .strip_prefix("<p>")
        .and_then(|s| s.strip_suffix("</p>"))
    {
        Some(inner) if !inner.contains("<p>") => inner.to_string(),
        _ => html,
    }
}

/// The YAML front matter of `report.md`: the fields the blog reads.
#[derive(Debug, Serialize)]
pub struct FrontMatter<'a> {
    /// The page title.
    pub title: &'a str,
    /// Date of the newest record, YYYY-MM-DD.
    pub date: &'a str,
    /// Date of the newest record measured where the headline was (`measured_on`), when that
    /// differs from `date`'s.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub measured_date: &'a str,
    /// The headline result in one sentence (a blog shows it under the title and in lists).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub description: &'a str,
    /// Tags of the study.
    pub tags: &'a [String],
    /// The source document whose claims are checked.
    pub source: &'a str,
    /// The source document's own title.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub source_title: &'a str,
    /// Where the headline results were measured (the glance's device).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub measured_on: &'a str,
}

/// `fm` serialized as a YAML document between `---` lines (every string quoted and escaped as
/// the YAML 1.2 spec requires, by serde_norway).
///
/// # Errors
/// [`Error::Report`] if the serializer fails (it does not for strings).
pub fn front_matter(fm: &FrontMatter) -> Result<String> {
    let yaml = serde_norway::to_string(fm).map_err(|e| Error::render("report front matter", e))?;
    Ok(format!("---\n{yaml}---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings a user could put into a label, title or caption.
    const NASTY: [&str; 20] = [
        "plain label",
        "*not emphasis* and _not_ either",
        "<script>alert(1)</script>",
        "a | b | c",
        "[link](http://example.com) ![img](x.png)",
        "`code` and ``double``",
        "# not a heading",
        "- not a list",
        "1. not a list",
        "back\\slash at end\\",
        "&amp; &lt;b&gt; entity",
        "~~strike~~ and $math$",
        "quote \"double\" and 'single': colon",
        "+ plus and = equals",
        "---",
        "-3.4",
        "== x",
        "<= 1.4x and a > b",
        "> quoted",
        "<http://example.com> <a@b.c>",
    ];

    /// The HTML comrak makes of a paragraph holding exactly `text`.
    fn html_paragraph(text: &str) -> String {
        let e = text
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        format!("<p>{e}</p>\n")
    }

    #[test]
    fn escaped_text_parses_back_to_itself() {
        for s in NASTY {
            assert_eq!(to_html(&escape(s)), html_paragraph(s), "escaping {s:?}");
        }
    }

    #[test]
    fn escaped_cells_stay_in_their_table_cell() {
        for s in NASTY {
            let md = format!("| a | b |\n|---|---|\n| {} | x |\n", escape(s));
            let html = to_html(&md);
            assert_eq!(html.matches("<td>").count(), 2, "{s:?} gave {html}");
            assert!(html.contains("<td>x</td>"), "{s:?} gave {html}");
        }
    }

    #[test]
    fn line_breaks_become_spaces() {
        assert_eq!(escape("two\nlines"), "two lines");
        assert_eq!(to_html(&escape("a\r\n# b")), html_paragraph("a  # b"));
    }

    #[test]
    fn markdown_is_rendered_and_raw_html_is_shown_as_text() {
        let html = to_html("Uses *emphasis* and `code`; <b>bold</b> stays text.");
        assert!(html.contains("<em>emphasis</em>"), "{html}");
        assert!(html.contains("<code>code</code>"), "{html}");
        assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
    }

    #[test]
    fn inline_html_drops_the_single_paragraph() {
        assert_eq!(to_inline_html("*a*"), "<em>a</em>");
        let two = to_inline_html("a\n\nb");
        assert!(
            two.contains("<p>a</p>") && two.contains("<p>b</p>"),
            "{two}"
        );
    }

    #[test]
    fn front_matter_survives_quotes_colons_and_newlines() {
        let tags = vec!["a \"quoted\" tag".to_string(), "key: value".to_string()];
        let title = "Peak \"memory\": a 'study'\n# with a hash\u{7f}";
        let fm = FrontMatter {
            title,
            date: "2026-11-23",
            measured_date: "",
            description: "Of 2 claims: 1 agrees",
            tags: &tags,
            source: "file: `x.txt` - [1]",
            source_title: "",
            measured_on: "",
        };
        let text = front_matter(&fm).unwrap();
        assert!(
            text.starts_with("---\n") && text.ends_with("---\n"),
            "{text}"
        );
        let body = text.trim_start_matches("---\n").trim_end_matches("---\n");
        let back: serde_norway::Value = serde_norway::from_str(body).unwrap();
        assert_eq!(back["title"].as_str(), Some(title));
        assert_eq!(back["date"].as_str(), Some("2026-11-23"));
        assert_eq!(back["source"].as_str(), Some("file: `x.txt` - [1]"));
        assert_eq!(back["tags"][0].as_str(), Some("a \"quoted\" tag"));
        assert_eq!(back["tags"][1].as_str(), Some("key: value"));
    }
}
