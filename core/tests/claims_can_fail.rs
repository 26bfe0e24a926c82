//! Every verdict can fail: for every `[[claims]]` entry of every experiment file, a measurement
//! inside the rule's band agrees and one outside it disagrees ([`AgreeRule::cases`]). A claim
//! added with a rule that no measurement can fail (a relative band without `value`) fails this
//! test; whether its measure could take the failing value is `memwall claims --check`'s
//! question (its provenance against what the claim is about).

use memwall_core::spec::claims::{AgreeRule, Verdict};
use memwall_core::spec::Study;
use std::path::Path;

#[test]
fn every_claim_of_every_experiment_can_fail() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments");
    let files = Study::discover(&dir).unwrap();
    assert!(files.len() >= 12, "the experiment files: {files:?}");
    let (mut judged, mut failures) = (0, Vec::new());
    for f in &files {
        let study = Study::outline(f).unwrap();
        for c in study.claims.iter().filter(|c| c.not_comparable.is_none()) {
            let name = format!("{}: {}", study.header.name, c.id);
            let Some((agrees, disagrees)) = c.agree.cases(c.value) else {
                failures.push(format!("{name}: no measurement both agrees and disagrees"));
                continue;
            };
            judged += 1;
            let verdicts = (
                Verdict::of(c, Some(agrees)),
                Verdict::of(c, Some(disagrees)),
            );
            if verdicts != (Verdict::Agree, Verdict::Disagree) {
                failures.push(format!(
                    "{name}: {agrees} gives {:?}, {disagrees} gives {:?}",
                    verdicts.0, verdicts.1
                ));
            }
            // A non-finite measurement is never a verdict either way.
            assert_eq!(
                Verdict::of(c, Some(f64::NAN)),
                Verdict::NotComparable,
                "{name}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(judged >= 40, "only {judged} claims judged");
}

#[test]
fn a_rule_that_cannot_fail_is_found() {
    let relative_without_value: AgreeRule = toml::from_str("within_rel = 0.1").unwrap();
    assert_eq!(relative_without_value.cases(None), None);
}

/// Every claim of every experiment file says why its band is where it is (`band`: the
/// document's precision and the neighbouring configurations the band separates), so that a
/// claim added with a tolerance and no reason fails here; a claim judged "not comparable"
/// needs none.
#[test]
fn every_claim_says_why_its_band() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments");
    let mut missing = Vec::new();
    for f in Study::discover(&dir).unwrap() {
        let study = Study::outline(&f).unwrap();
        for c in study.claims.iter().filter(|c| c.not_comparable.is_none()) {
            if c.band.as_deref().is_none_or(|b| b.trim().len() < 20) {
                missing.push(format!("{}: {}", study.header.name, c.id));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "claims without the reason for their band (`band = \"...\"`): {missing:?}"
    );
}
