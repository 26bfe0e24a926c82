//! `memwall claims --check`: passes on the committed experiments and records, and fails, naming
//! the file, the claim and the measure's provenance, on a claim about the world judged on
//! arithmetic (the modelled 30% of the planner study, which any sqrt(n) plan gives).

mod common;

use common::{memwall, root, s, text};

#[test]
fn every_committed_claim_passes_the_check() {
    let out = memwall(&root(), &["claims", "--check"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("claims --check: each of "), "{t}");
    // Each claim says what it is about, where its number comes from, and whether it can fail.
    assert!(t.contains("- `time_increase_30pct`: “Training time roughly increases 30%.” (002_"));
    assert!(
        t.contains(
            "  - measure: `step_time_ratio of config = { checkpoint = \"sqrt\" }`, derived: "
        ),
        "{t}"
    );
    assert!(!t.contains("can fail: no"), "{t}");
}

#[test]
fn a_claim_about_the_world_judged_on_arithmetic_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("static_planning.toml");
    let mut text_of =
        std::fs::read_to_string(root().join("experiments/static_planning.toml")).unwrap();
    text_of.push_str(
        "\n[[claims]]\n\
         id = \"time_modelled\"\n\
         quote = \"Training time roughly increases 30%.\"\n\
         where = \"Slide 'Running different schemes on ResNet and LSTM'\"\n\
         value = 30\n\
         unit = \"%\"\n\
         measure = \"deep_modelled_time_increase_pct\"\n\
         agree = { within = 10.0 }\n",
    );
    std::fs::write(&file, text_of).unwrap();
    let runs = root().join("runs");
    let out = memwall(
        &root(),
        &["claims", "--check", s(&file), "--runs", s(&runs)],
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("1 of 4 claims fail the check"), "{t}");
    assert!(
        t.contains("claims[3] (`time_modelled`): the claim is about the world"),
        "{t}"
    );
    assert!(
        t.contains("arithmetic: the recomputed forward fraction x 100 / 3"),
        "{t}"
    );
    // Without --check the same file prints, verdict included, and succeeds.
    let out = memwall(&root(), &["claims", s(&file), "--runs", s(&runs)]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("  - verdict: agree (ours 32.2%"),
        "{}",
        text(&out)
    );
}
