//! Every non-training study in experiments/ runs at the smoke profile and renders a report
//! with its claim, our number and a figure; a rerun re-renders from the stored record.

mod common;

use memwall::device::{BackendKind, DeviceRequest};
use memwall::driver::{self, Paths, RunOptions};
use memwall::spec::{Profile, Study, StudyKind};
use std::path::PathBuf;

#[test]
fn lecture_and_blog_studies_render() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths {
        runs: dir.path().join("runs"),
        cache: dir.path().join("cache"),
        reports: dir.path().join("reports"),
        templates: common::root().join("templates"),
    };
    let opts = RunOptions {
        profile: Some(Profile::Smoke),
        device: DeviceRequest::Cpu,
        cpu_backend: BackendKind::Flex,
        data: None,
        force: false,
        only: Vec::new(),
        runner: (
            PathBuf::from(env!("CARGO_BIN_EXE_memwall")),
            vec!["run-job".into()],
        ),
        progress: false,
    };
    let mut n = 0;
    for f in Study::discover(&common::root().join("experiments")).unwrap() {
        let study = Study::load(&f, Profile::Smoke, None).unwrap();
        if study.header.kind == StudyKind::Training {
            continue;
        }
        let out =
            driver::sweep(&f, &paths, &opts).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(out.ran, 1, "{}", f.display());
        let again = driver::sweep(&f, &paths, &opts).unwrap();
        assert_eq!(
            again.skipped,
            1,
            "{}: a rerun uses the stored record",
            f.display()
        );
        let r = driver::report(&f, &paths).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let md = std::fs::read_to_string(&r.markdown).unwrap();
        assert!(
            md.contains("**Claim.**") && md.contains("**Ours.**"),
            "{}",
            f.display()
        );
        assert!(!r.figures.is_empty(), "{} has no figure", f.display());
        let html = std::fs::read_to_string(&r.html).unwrap();
        assert!(html.contains("<svg"), "{}", f.display());
        n += 1;
    }
    assert!(n >= 7, "expected the seven lecture/blog studies, found {n}");
}
