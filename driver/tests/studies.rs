//! Every non-training study in experiments/ runs at the smoke profile and renders a report
//! with its claim, our number and a figure; a rerun re-renders from the stored record.

mod common;

use memwall_core::spec::{Profile, Study, StudyKind};
use memwall_driver as driver;

#[test]
fn lecture_and_blog_studies_render() {
    let dir = tempfile::tempdir().unwrap();
    let paths = common::temp_paths(dir.path());
    let opts = common::smoke_options();
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
        // (minijinja writes the `/` of an attribute as `&#x2f;`, which the browser reads back)
        assert!(html.contains("<img src=\"figures"), "{}", f.display());
        // The page opens with the glance: the study's claims beside our numbers.
        assert!(
            md.contains("## Results at a glance") && html.contains("id=\"glance\""),
            "{}: no Results at a glance",
            f.display()
        );
        for r in &r.figures {
            let svg = std::fs::read_to_string(r).unwrap();
            assert!(
                !svg.contains("<text"),
                "{}: text left in {}",
                f.display(),
                r.display()
            );
        }
        n += 1;
    }
    assert!(n >= 7, "expected the seven lecture/blog studies, found {n}");
}
