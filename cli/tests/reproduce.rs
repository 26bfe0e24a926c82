//! A newcomer's `memwall reproduce` in a clone of the repository with nothing beside it (no
//! `../shared`): it fetches the data sets of `datasets.toml` into the user cache from a mirror
//! (a file server on the loopback address here), resuming a download that broke off, once;
//! trains into this machine's store (`target/memwall/runs`, ignored by git), renders its own
//! reports there, ends with the report's path and the headline claims beside the published
//! ones, and leaves the committed evidence (`runs/`, `reports/`, the README) byte for byte as
//! it was. A second run fetches nothing.

mod common;

use common::{http, memwall_alone, text};
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
    let sandbox = tmp.path();
    let work = sandbox.join("work");
    common::clone_alone(
        &work,
        &["runs", "reports", "experiments", "templates"],
        &["README.md", "datasets.toml"],
    );
    // The mirror: the shared data folder behind a loopback server, whose first answer for the
    // corpus breaks off after 100,000 of its 206,957 bytes.
    let server = http::Server::start(&common::shared_data());
    let excerpt = "tinystories/TinyStories-valid-excerpt.txt";
    server
        .faults
        .lock()
        .unwrap()
        .cut_once
        .insert(excerpt.into(), 100_000);
    let (runs_before, reports_before) = (tree(&work.join("runs")), tree(&work.join("reports")));
    let readme_before = std::fs::read(work.join("README.md")).unwrap();

    let reproduce = || {
        memwall_alone(
            &work,
            sandbox,
            Some(&server.url),
            &["reproduce", "--profile", "smoke"],
        )
    };
    let o = reproduce();
    assert!(o.status.success(), "reproduce failed: {}", text(&o));
    let out = text(&o);
    // No line of its standard output is a dependency's debug print (burn-collective printed
    // its `CollectiveConfig { .. }` at every FSDP run).
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        !stdout.lines().any(|l| {
            let t = l.trim_end();
            t.ends_with(" {") && t.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        }),
        "{stdout}"
    );

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
    let records = memwall_report::analysis::StudyRecords::load(&local, "peak_memory").unwrap();
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

    // Every data set was fetched into the user cache once, intact; the corpus in two requests,
    // the second resuming where the first broke off.
    let manifest = memwall_core::datasets::Manifest::load(&work)
        .unwrap()
        .unwrap();
    let requests = server.requests();
    let cache = sandbox.join("cache/memwall");
    for d in &manifest.datasets {
        let asked: Vec<_> = requests.iter().filter(|r| r.path == d.path).collect();
        let at = cache.join(&d.path);
        assert_eq!(
            d.check(&at).unwrap(),
            memwall_core::datasets::Integrity::Intact,
            "{}",
            d.path
        );
        if d.path == excerpt {
            assert_eq!(asked.len(), 2, "{asked:?}");
            assert_eq!(asked[0].range_start, Some(0));
            assert_eq!(asked[1].range_start, Some(100_000), "resumed: {asked:?}");
        } else {
            assert_eq!(asked.len(), 1, "{}: {asked:?}", d.path);
        }
    }
    assert!(out.contains(&format!("fetched {excerpt} into")), "{out}");

    // A second run finds everything in the cache and fetches nothing.
    let o = reproduce();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(server.requests().len(), requests.len(), "{}", text(&o));
    assert!(!text(&o).contains("fetched "), "{}", text(&o));
}
