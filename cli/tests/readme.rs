//! The README's results block is what the committed records give: `memwall report --check` on a
//! copy of the repository's README, records, reports, experiments and templates passes, and
//! fails, naming the README and the line, once the generated block is edited by hand; `memwall
//! report` writes it back.

mod common;

use common::{memwall, text};
use std::process::Command;

#[test]
fn report_check_fails_when_the_readme_block_is_edited() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = common::root();
    for d in ["runs", "reports", "experiments", "templates"] {
        let st = Command::new("cp")
            .args(["-r"])
            .arg(root.join(d))
            .arg(dir.join(d))
            .status()
            .unwrap();
        assert!(st.success(), "copying {d}");
    }
    std::fs::copy(root.join("README.md"), dir.join("README.md")).unwrap();
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        readme.contains(memwall_report::sinks::readme::BEGIN)
            && readme.contains(memwall_report::sinks::readme::END),
        "the README has the generated block's markers"
    );

    let o = memwall(dir, &["report", "--check"]);
    assert!(
        o.status.success(),
        "the committed README fails: {}",
        text(&o)
    );

    // A verdict edited by hand inside the block.
    let begin = readme.find(memwall_report::sinks::readme::BEGIN).unwrap();
    let in_block = readme[begin..]
        .find("| agree (")
        .expect("a verdict in the block")
        + begin;
    let edited = format!(
        "{}| disagree ({}",
        &readme[..in_block],
        &readme[in_block + "| agree (".len()..]
    );
    std::fs::write(dir.join("README.md"), &edited).unwrap();
    let o = memwall(dir, &["report", "--check"]);
    assert!(!o.status.success(), "an edited block passed: {}", text(&o));
    assert!(
        text(&o).contains("README.md: the results block differs") && text(&o).contains("line "),
        "{}",
        text(&o)
    );

    // `memwall report` writes the block back; outside the block the README is left as it was.
    let outside = edited.replace(
        "## Results at a glance",
        "## Results at a glance (an edit outside the block)",
    );
    std::fs::write(dir.join("README.md"), &outside).unwrap();
    let o = memwall(dir, &["report"]);
    assert!(o.status.success(), "{}", text(&o));
    let written = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert_eq!(
        written,
        readme.replace(
            "## Results at a glance",
            "## Results at a glance (an edit outside the block)"
        )
    );
    let o = memwall(dir, &["report", "--check"]);
    assert!(o.status.success(), "{}", text(&o));
}
