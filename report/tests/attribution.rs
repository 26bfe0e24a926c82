//! Attribution: every value and quotation a committed report credits to its source document
//! occurs in that document (`memwall_report::source_check`), and every `[[claims]]` quotation of
//! every experiment file is the document's words.

use memwall_core::spec::claims::quote_occurs;
use memwall_core::spec::{Study, StudyOutline};
use std::path::PathBuf;

mod common {
    use std::path::PathBuf;

    /// The workspace root.
    pub fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// `../shared/data` beside the repository (or `MEMWALL_SHARED_DATA`).
    pub fn shared_data() -> PathBuf {
        std::env::var_os("MEMWALL_SHARED_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("../shared/data"))
    }
}

fn source_text(source: &str) -> String {
    let path = common::shared_data().join("../sources").join(source);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading the source document {}: {e}", path.display()))
}

fn studies() -> Vec<StudyOutline> {
    let files: Vec<PathBuf> = Study::discover(&common::root().join("experiments")).unwrap();
    assert!(files.len() >= 11, "expected the 11 experiment files");
    files.iter().map(|f| Study::outline(f).unwrap()).collect()
}

#[test]
fn claims_quote_their_source_documents_exactly() {
    let mut failures = Vec::new();
    for s in studies() {
        let doc = source_text(&s.header.source);
        if s.claims.is_empty() {
            failures.push(format!("{}: no [[claims]]", s.header.name));
        }
        for (i, c) in s.claims.iter().enumerate() {
            let quoted = c.document(&s.header.source);
            let doc = if quoted == s.header.source {
                doc.clone()
            } else {
                source_text(quoted)
            };
            if !quote_occurs(&c.quote, &doc) {
                failures.push(format!(
                    "{}: claims[{i}] ({}): the quotation is not in {}: {:?}",
                    s.header.name, c.id, quoted, c.quote
                ));
            }
            if let (Some(v), None) = (c.value, &c.derived) {
                let stated = memwall_report::source_check::numbers(&doc)
                    .iter()
                    .any(|d| (d - v).abs() <= 1e-9 * v.abs().max(1.0));
                if !stated {
                    failures.push(format!(
                        "{}: claims[{i}] ({}): value {v} is not a number of {}; say how it is \
                         derived (`derived = \"...\"`)",
                        s.header.name, c.id, quoted
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn committed_reports_credit_the_source_only_with_its_own_words_and_numbers() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for s in studies() {
        let md_path = common::root()
            .join("reports")
            .join(&s.header.name)
            .join("report.md");
        let md = std::fs::read_to_string(&md_path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", md_path.display()));
        let doc = source_text(&s.header.source);
        let other = |name: &str| {
            std::fs::read_to_string(common::shared_data().join("../sources").join(name)).ok()
        };
        for v in memwall_report::source_check::check_report_with(&md, &doc, other) {
            failures.push(format!("{}: {v}", md_path.display()));
        }
        checked += 1;
    }
    let files = std::fs::read_dir(common::root().join("experiments"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "toml"))
        })
        .count();
    assert_eq!(checked, files, "every study's report is checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
