//! The attribution check: every value and quotation a report credits to its source document
//! occurs in that document.
//!
//! In a rendered `report.md` a value is credited to the source when it stands in a table
//! column whose header names the source ("Peak, source (GiB)", "Source value", "Relative Time,
//! source") unless the header or the cell says "derived"; a quotation is credited when it
//! stands between “ and ” in the glance's "Claim (quoted from ...)" column. Quotations are
//! compared after [`normalize_quote`] (Markdown marks and whitespace); values as numbers (every
//! number of the cell must be a number the document prints) or as the literal text.

use memwall_core::spec::claims::normalize_quote;

/// One credited value or quotation that the document does not contain.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// 1-based line of `report.md`.
    pub line: usize,
    /// The column header.
    pub column: String,
    /// The cell as written.
    pub cell: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}: column `{}` credits `{}` to the source document, which does not contain it",
            self.line, self.column, self.cell
        )
    }
}

/// Every number printed in `text`: runs of digits with at most one decimal point; a comma
/// joins digits only as a thousands separator (followed by exactly three digits, as in
/// "1,000"), so "10,1525.88" is two numbers.
pub fn numbers(text: &str) -> Vec<f64> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<f64>| {
        let t = cur.trim_end_matches('.');
        if t.chars().any(|c| c.is_ascii_digit()) {
            if let Ok(v) = t.parse::<f64>() {
                out.push(v);
            }
        }
        cur.clear();
    };
    let thousands = |i: usize| {
        (1..=3).all(|k| chars.get(i + k).is_some_and(char::is_ascii_digit))
            && !chars.get(i + 4).is_some_and(char::is_ascii_digit)
    };
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_digit() || (c == '.' && !cur.contains('.') && !cur.is_empty()) {
            cur.push(c);
        } else if c == ',' && !cur.is_empty() && !cur.contains('.') && thousands(i) {
            // a thousands separator: "1,000"
        } else {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// The cells of a Markdown table row, unescaped (`\|` stays inside its cell).
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(s)) = (chars.next(), out.last_mut()) {
                    s.push(n);
                }
            }
            '|' => out.push(String::new()),
            c => {
                if let Some(s) = out.last_mut() {
                    s.push(c);
                }
            }
        }
    }
    out.into_iter().map(|s| strip_refs(s.trim())).collect()
}

/// `cell` without Markdown footnote references (`[^t1-2-3]`).
fn strip_refs(cell: &str) -> String {
    let mut out = String::new();
    let mut rest = cell;
    while let Some(i) = rest.find("[^") {
        out.push_str(&rest[..i]);
        match rest[i..].find(']') {
            Some(j) => rest = &rest[i + j + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

fn is_missing(cell: &str) -> bool {
    matches!(cell.trim(), "" | "–" | "-" | "—" | "n/a")
}

/// Whether `cell`, credited to the document, is in it: its text literally (after
/// normalization), or each of its numbers among the document's numbers.
fn value_in(cell: &str, doc_norm: &str, doc_numbers: &[f64]) -> bool {
    let norm = normalize_quote(cell);
    if doc_norm.contains(&norm) {
        return true;
    }
    let ns = numbers(cell);
    !ns.is_empty()
        && ns.iter().all(|n| {
            doc_numbers
                .iter()
                .any(|d| (d - n).abs() <= 1e-9 * n.abs().max(1.0))
        })
}

/// The violations of `report_md` against its source document `document` (a quotation of
/// another document, which the glance names first in the place, counts as one).
pub fn check_report(report_md: &str, document: &str) -> Vec<Violation> {
    check_report_with(report_md, document, |_| None)
}

/// The document a glance cell names for its quotation when it is not the study's source: the
/// place after the closing quote starts with `(<file>.txt: `.
fn quoted_document(cell: &str) -> Option<&str> {
    let after = &cell[cell.rfind('”')? + '”'.len_utf8()..];
    let name = after
        .trim_start()
        .strip_prefix('(')?
        .split_once(".txt: ")?
        .0;
    (!name.is_empty() && !name.contains(['/', ' '])).then_some(name)
}

/// [`check_report`] where a glance quotation may come from another document: `other(file)`
/// gives that document's text (`file` as `../shared/sources/` names it, e.g.
/// `002_0a85d22a30039616.txt`); a quotation of a document it does not give is a violation.
pub fn check_report_with(
    report_md: &str,
    document: &str,
    other: impl Fn(&str) -> Option<String>,
) -> Vec<Violation> {
    let doc_norm = normalize_quote(document);
    let doc_numbers = numbers(document);
    let lines: Vec<&str> = report_md.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let is_table = lines[i].trim_start().starts_with('|')
            && lines
                .get(i + 1)
                .is_some_and(|l| l.trim_start().starts_with("|-") || l.contains("|--"));
        if !is_table {
            i += 1;
            continue;
        }
        let header = cells(lines[i]);
        let mut j = i + 2;
        while j < lines.len() && lines[j].trim_start().starts_with('|') {
            let row = cells(lines[j]);
            for (k, h) in header.iter().enumerate() {
                let Some(cell) = row.get(k) else { continue };
                let lower = h.to_lowercase();
                if lower.starts_with("claim (quoted from") {
                    let elsewhere = quoted_document(cell).map(|name| {
                        other(&format!("{name}.txt"))
                            .map(|text| normalize_quote(&text))
                            .unwrap_or_default()
                    });
                    let source = elsewhere.as_deref().unwrap_or(&doc_norm);
                    for quote in quotations(cell) {
                        if !source.contains(&normalize_quote(&quote)) {
                            out.push(Violation {
                                line: j + 1,
                                column: h.clone(),
                                cell: quote,
                            });
                        }
                    }
                    continue;
                }
                let credited = lower.contains("source") && !lower.contains("derived");
                if !credited || is_missing(cell) || cell.to_lowercase().contains("derived") {
                    continue;
                }
                if !value_in(cell, &doc_norm, &doc_numbers) {
                    out.push(Violation {
                        line: j + 1,
                        column: h.clone(),
                        cell: cell.clone(),
                    });
                }
            }
            j += 1;
        }
        i = j;
    }
    out
}

/// The passages of `cell` between “ and ”.
fn quotations(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = cell;
    while let Some(a) = rest.find('“') {
        let after = &rest[a + '“'.len_utf8()..];
        match after.find('”') {
            Some(b) => {
                out.push(after[..b].to_string());
                rest = &after[b + '”'.len_utf8()..];
            }
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "| **BFloat16** | 12.418 | **41.3%** | 6.79 | 41s | 180.0 |\n\
                       1. **BFloat16** achieved 41.3% memory reduction while **doubling training speed**";

    #[test]
    fn stated_values_and_quotes_pass() {
        let md = "| Configuration | Peak, source (GiB) | Relative Time, source | Relative Time / control, derived from the source |\n\
                  |---|--:|---|--:|\n\
                  | BFloat16 | 12.418 | 41s | 0.41x[^t1-1-1] |\n\
                  | Control | – | – | – |\n\n\
                  | Claim (quoted from doc.txt) | Source value | Ours |\n|---|---|---|\n\
                  | “BFloat16 achieved 41.3% memory reduction” (Analysis) | 41.3% | 36.0% |\n\
                  | “doubling training speed” (Analysis) | 2x (derived) | 1.8x |\n";
        assert_eq!(check_report(md, DOC), vec![]);
    }

    #[test]
    fn a_derived_value_in_a_source_column_fails() {
        let md =
            "| Configuration | Step time / control, source |\n|---|--:|\n| BFloat16 | 0.41x |\n";
        let v = check_report(md, DOC);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].line, 3);
        assert_eq!(v[0].cell, "0.41x");
        assert!(v[0].to_string().contains("does not contain it"));
    }

    #[test]
    fn a_quotation_of_another_document_is_checked_in_that_document() {
        let md = "| Claim (quoted from doc.txt) | Source value | Ours |\n|---|---|---|\n\
                  | “Training time roughly increases 30%.” (002_x.txt: Slide 5) | 1.3x (derived) | 1.25x |\n";
        let other = |name: &str| {
            (name == "002_x.txt").then(|| "Training time roughly increases 30%.".to_string())
        };
        assert_eq!(check_report_with(md, DOC, other), vec![]);
        // Not in the study's own document, nor given: both fail.
        assert_eq!(check_report(md, DOC).len(), 1);
        let wrong = |_: &str| Some("Training time roughly doubles.".to_string());
        assert_eq!(check_report_with(md, DOC, wrong).len(), 1);
    }

    #[test]
    fn a_misquotation_fails() {
        let md = "| Claim (quoted from doc.txt) | Source value |\n|---|---|\n\
                  | “BFloat16 achieved 48% memory reduction” (Analysis) | 48% |\n";
        let v = check_report(md, DOC);
        assert_eq!(v.len(), 2, "{v:?}");
    }

    #[test]
    fn numbers_are_read_as_printed() {
        assert_eq!(
            numbers("2m 15s, 41.3%, 1,000 and 5.834 ↑."),
            [2.0, 15.0, 41.3, 1000.0, 5.834]
        );
        assert_eq!(numbers("10,1525.88,7.10"), [10.0, 1525.88, 7.10]);
        assert_eq!(cells("| a \\| b | c[^t1-1-2] |"), ["a | b", "c"]);
    }
}
