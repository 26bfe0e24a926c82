//! A newcomer's `memwall reproduce` in a copy of the repository: it trains into this machine's
//! store (`target/memwall/runs`, ignored by git), renders its own reports there, ends with the
//! report's path and the headline claims beside the published ones, and leaves the committed
//! evidence (`runs/`, `reports/`, the README) byte for byte as it was.

mod common;

use common::{memwall, text};
use std::path::{Path, PathBuf};

/// Every file under `dir` with its bytes, by path relative to `dir`.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push((
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn reproduce_measures_this_machine_and_leaves_the_published_evidence_alone() {
    let tmp = tempfile::tempdir().unwrap();
    // The experiment files name `../shared/data/...`: the copy sits beside a `shared` link.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let shared = common::shared_data().join("..");
    std::os::unix::fs::symlink(
        std::fs::canonicalize(&shared).unwrap(),
        tmp.path().join("shared"),
    )
    .unwrap();
    let root = common::root();
    for d in ["runs", "reports", "experiments", "templates"] {
        let st = std::process::Command::new("cp")
            .arg("-r")
            .arg(root.join(d))
            .arg(work.join(d))
            .status()
            .unwrap();
        assert!(st.success(), "copying {d}");
    }
    std::fs::copy(root.join("README.md"), work.join("README.md")).unwrap();
    let (runs_before, reports_before) = (tree(&work.join("runs")), tree(&work.join("reports")));
    let readme_before = std::fs::read(work.join("README.md")).unwrap();

    let o = memwall(&work, &["reproduce", "--profile", "smoke"]);
    assert!(o.status.success(), "reproduce failed: {}", text(&o));
    let out = text(&o);

    // The committed evidence is untouched.
    assert!(
        tree(&work.join("runs")) == runs_before,
        "reproduce changed runs/"
    );
    assert!(
        tree(&work.join("reports")) == reports_before,
        "reproduce changed reports/"
    );
    assert_eq!(
        std::fs::read(work.join("README.md")).unwrap(),
        readme_before
    );

    // This machine's store and reports, named at the end.
    let local = work.join("target/memwall/runs");
    let index = local.join("reports/index.md");
    assert!(index.is_file(), "no local index: {out}");
    assert!(
        out.contains("your report: target/memwall/runs/reports/index.md"),
        "{out}"
    );
    let records = memwall::results::StudyRecords::load(&local, "peak_memory").unwrap();
    assert!(!records.records.is_empty(), "no local peak_memory record");
    let device = records.records[0].env.device_name.clone();
    assert!(!device.is_empty());
    let report = std::fs::read_to_string(local.join("reports/peak_memory/report.md")).unwrap();
    assert!(report.contains(&device), "the local report names {device}");
    assert!(
        records
            .records
            .iter()
            .all(|r| r.spec.profile.to_string() == "smoke"),
        "every local record is this run's"
    );

    // The headline claims: published beside this machine's, per study.
    assert!(
        out.contains("Headline claims, this machine (target/memwall/runs) beside the published evidence (runs)"),
        "{out}"
    );
    let claims: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("| peak_memory |"))
        .collect();
    let in_file = std::fs::read_to_string(common::root().join("experiments/peak_memory.toml"))
        .unwrap()
        .matches("[[claims]]")
        .count();
    assert!(in_file >= 10, "{in_file}");
    assert_eq!(claims.len(), in_file, "{out}");
    // The last cell is this machine's, measured at the smoke size; the published one is not.
    assert!(
        claims.iter().all(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            cells[cells.len() - 1].contains("smoke profile")
                && !cells[cells.len() - 2].contains("smoke profile")
        }),
        "{claims:?}"
    );
}
