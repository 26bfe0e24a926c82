//! The "Results at a glance" block that opens every report: per `[[claims]]` entry of the
//! experiment file, the document's words, the number it states (or one derived from its
//! numbers, labelled so), ours with its provenance (measured, derived, computed, arithmetic),
//! the device and the verdict ("by definition" where a claim about a definition is judged on
//! arithmetic).

use crate::content::{GlanceRow, Measure, Table};
use memwall_core::spec::claims::{unit_suffix, SourceClaim, Verdict};
use memwall_core::spec::provenance::{ClaimAbout, Provenance};

/// What a study answers for one claim's `measure`.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Our value.
    Measured(Measure),
    /// Our value and what it rests on (e.g. a fit's coefficients), printed as the verdict's
    /// footnote; the claim's rule decides the verdict.
    Explained(Measure, String),
    /// Our value, measured, and why it contradicts the claim whatever the rule says of the
    /// number (e.g. a fit of the claimed model whose coefficient has the wrong sign): the
    /// verdict is "disagree", the reason its footnote.
    Contradicted(Measure, String),
    /// The measurement exists in the study but has no value here (the configuration did not
    /// finish, did not run on this device): the reason.
    Missing(String),
    /// Our value, measured in a setting unlike the claim's (another model size, another
    /// profile): shown, but the verdict is "not comparable", the difference its footnote.
    Unlike(Measure, String),
}

impl Answer {
    /// This answer, or [`Answer::Unlike`] when `claim` names the profile its number is about
    /// (`profile`) and ours was measured at `measured` (a profile's name); `setting` says what
    /// was measured there (e.g. "8 layers, 1.9M parameters under a 128 MiB limit").
    pub fn at_profile(self, claim: &SourceClaim, measured: &str, setting: &str) -> Answer {
        let Some(wanted) = claim.profile else {
            return self;
        };
        if wanted.as_str() == measured {
            return self;
        }
        let why = format!(
            "measured at the {measured} profile ({setting}), not at the {} profile the claim's \
             number is about: the setups differ",
            wanted.as_str()
        );
        match self {
            Answer::Measured(m) | Answer::Explained(m, _) | Answer::Contradicted(m, _) => {
                Answer::Unlike(m, why)
            }
            other => other,
        }
    }
}

/// The glance rows of `claims`, each answered by `answer(measure)`; `device` names where the
/// study ran.
pub fn rows(
    claims: &[SourceClaim],
    device: &str,
    mut answer: impl FnMut(&SourceClaim) -> Answer,
) -> Vec<GlanceRow> {
    claims
        .iter()
        .map(|c| {
            let unit = c.unit.clone().unwrap_or_default();
            let claimed = c
                .value
                .map(|v| {
                    format!(
                        "{}{}",
                        memwall_core::spec::claims::trim_number(v),
                        unit_suffix(&unit)
                    )
                })
                .unwrap_or_else(|| "–".into());
            let mut contradicted = false;
            let mut unlike = false;
            let mut resolution = None;
            let mut bounds = None;
            let mut provenance = None;
            let mut shown: Option<Measure> = None;
            let (mut ours, value, why) = match &c.not_comparable {
                Some(reason) => ("–".to_string(), None, Some(reason.clone())),
                None => match answer(c) {
                    Answer::Measured(m) => {
                        provenance = Some(m.provenance.clone());
                        resolution = m.resolution;
                        bounds = m.bounds;
                        shown = Some(m.clone());
                        (m.text(), Some(m.value), None)
                    }
                    Answer::Explained(m, note) => {
                        provenance = Some(m.provenance.clone());
                        resolution = m.resolution;
                        bounds = m.bounds;
                        shown = Some(m.clone());
                        (m.text(), Some(m.value), Some(note))
                    }
                    Answer::Unlike(m, reason) => {
                        unlike = true;
                        provenance = Some(m.provenance.clone());
                        (m.text(), Some(m.value), Some(reason))
                    }
                    Answer::Contradicted(m, reason) => {
                        contradicted = true;
                        provenance = Some(m.provenance.clone());
                        (m.text(), Some(m.value), Some(reason))
                    }
                    Answer::Missing(reason) => ("–".to_string(), None, Some(reason)),
                },
            };
            let mut why = why;
            let verdict = if unlike {
                Verdict::NotComparable
            } else if contradicted && value.is_some_and(f64::is_finite) {
                Verdict::Disagree
            } else {
                match (value, resolution, bounds) {
                    (Some(_), _, Some((low, high)))
                        if !c.agree.decided_between(low, high, c.value) =>
                    {
                        let text = |x: f64| {
                            format!(
                                "{}{}",
                                memwall_core::spec::claims::trim_number(x),
                                unit_suffix(&unit)
                            )
                        };
                        let undecided = format!(
                            "undecided: ours is proven only between {} and {}, and the rule \
                             judges the two ends differently",
                            text(low),
                            text(high)
                        );
                        why = Some(match why {
                            Some(w) => format!("{undecided}; {w}"),
                            None => undecided,
                        });
                        Verdict::NotComparable
                    }
                    (Some(v), Some(step), _) if !c.agree.decided_within(v, c.value, step) => {
                        let step_text = format!(
                            "{}{}",
                            memwall_core::spec::claims::trim_number(step),
                            unit_suffix(&unit)
                        );
                        let undecided = format!(
                            "undecided: the measurement moves in steps of {step_text}, and one \
                             step from ours the rule would judge otherwise"
                        );
                        why = Some(match why {
                            Some(w) => format!("{undecided}; {w}"),
                            None => undecided,
                        });
                        Verdict::NotComparable
                    }
                    _ => Verdict::of(c, value),
                }
            };
            // A value whose printed digits the rule would judge otherwise (1.031 printed as
            // "1.03" beside "at most 1.03", a disagreement) is printed with the digits that
            // show which side of the bound it is on.
            if let (Some(m), Verdict::Agree | Verdict::Disagree) = (&shown, verdict) {
                ours = m.text_judged_as(|printed| Verdict::of(c, Some(printed)) == verdict);
            }
            let rule = if c.not_comparable.is_some() {
                String::new()
            } else {
                format!("{} {}", c.measure, c.agree.describe(c.value, &unit))
            };
            let location = match &c.source {
                // Another document than the study's: named first, which the attribution check
                // reads ([`memwall_core::spec::claims::SourceClaim::source`]).
                Some(doc) => format!("{doc}: {}", c.location),
                None => c.location.clone(),
            };
            GlanceRow {
                quote: c.quote.clone(),
                location,
                claimed,
                derived: c.derived.clone(),
                ours,
                rule,
                device: device.to_string(),
                verdict,
                why,
                about: c.about,
                provenance,
                twin: None,
            }
        })
        .collect()
}

/// Gives each row of `rows` (one per claim of `claims`, in order) that has no provenance, as a
/// missing value has none, the provenance `of(claim)` returns: what would judge it.
pub fn fill_provenance(
    rows: &mut [GlanceRow],
    claims: &[SourceClaim],
    of: impl Fn(&SourceClaim) -> Option<Provenance>,
) {
    for (row, c) in rows.iter_mut().zip(claims) {
        if row.provenance.is_none() && c.not_comparable.is_none() {
            row.provenance = of(c);
        }
    }
}

/// The glance rows as a table: the quotation (with its place in `source`), the document's
/// number, ours, and the verdict with its rule; the device in the caption (every row of a
/// study is measured in the same place); a derivation or the reason a claim is not comparable
/// as the cell's footnote.
pub fn table(rows: &[GlanceRow], source: &str) -> Table {
    let mut t = Table {
        caption: rows
            .first()
            .map(|r| format!("Measured on {}", r.device))
            .unwrap_or_default(),
        columns: [
            &format!("Claim (quoted from {source})"),
            "Source value",
            "Ours",
            "Verdict (rule)",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for (i, r) in rows.iter().enumerate() {
        let claimed = match &r.derived {
            Some(_) => format!("{} (derived)", r.claimed),
            None => r.claimed.clone(),
        };
        let by_definition = match (&r.provenance, r.about) {
            (Some(Provenance::Arithmetic(_)), ClaimAbout::Definition) => " by definition",
            _ => "",
        };
        // The rule in words; its measure's name is `memwall claims`'s to print, so that the
        // glance stays one screen high.
        let words = r.rule.split_once(' ').map_or(r.rule.as_str(), |(_, w)| w);
        let mut verdict = if r.rule.is_empty() {
            r.verdict.as_str().to_string()
        } else {
            format!("{}{by_definition} ({words})", r.verdict.as_str())
        };
        if let Some(tw) = &r.twin {
            // The twin's rule is `memwall claims`'s to print: the cell stays short.
            verdict.push_str(&format!(
                "; PyTorch, same GPU: {}, {}",
                tw.value,
                tw.verdict.as_str()
            ));
        }
        let ours = match &r.provenance {
            Some(p) if r.ours != "–" => format!("{} ({})", r.ours, p.kind()),
            _ => r.ours.clone(),
        };
        t.rows.push(vec![
            format!("“{}” ({})", r.quote, r.location),
            claimed,
            ours,
            verdict,
        ]);
        if let Some(d) = &r.derived {
            t.note(i, 1, format!("Derived from the document's numbers: {d}"));
        }
        if let Some(w) = &r.why {
            t.note(i, 3, w.clone());
        }
    }
    t
}

/// The glance in one sentence: how many claims agree, disagree and are not comparable, and
/// where the first row was measured, e.g. "Of 6 headline claims of the source, 4 agree with
/// our measurement, 1 disagrees, 1 is not comparable (NVIDIA H100 80GB HBM3)." Empty without
/// rows.
pub fn summary(rows: &[GlanceRow]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v).count();
    let (a, d, n) = (
        count(Verdict::Agree),
        count(Verdict::Disagree),
        count(Verdict::NotComparable),
    );
    let mut parts = vec![format!("{a} agree{}", if a == 1 { "s" } else { "" })];
    if d > 0 {
        parts.push(format!("{d} disagree{}", if d == 1 { "s" } else { "" }));
    }
    if n > 0 {
        parts.push(format!(
            "{n} {} not comparable",
            if n == 1 { "is" } else { "are" }
        ));
    }
    let last = parts.pop().unwrap_or_default();
    let list = if parts.is_empty() {
        last
    } else {
        format!("{} and {last}", parts.join(", "))
    };
    format!(
        "Of {} headline claim{} of the source, {list} with our measurement ({}).",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        first.device
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwall_core::spec::claims::AgreeRule;

    fn claim(id: &str, measure: &str) -> SourceClaim {
        SourceClaim {
            id: id.into(),
            quote: "BFloat16 achieved 41.3% memory reduction".into(),
            location: "Analysis".into(),
            value: Some(41.3),
            unit: Some("%".into()),
            derived: None,
            measure: measure.into(),
            agree: AgreeRule {
                within: Some(10.0),
                ..Default::default()
            },
            not_comparable: None,
            about: ClaimAbout::World,
            band: None,
            source: None,
            profile: None,
            twin: None,
            config: None,
            sweep: None,
            against: None,
        }
    }

    fn timed() -> Provenance {
        Provenance::Measured("exact peak allocated bytes".into())
    }

    #[test]
    fn a_value_a_hair_past_its_bound_prints_the_digits_that_show_it() {
        let mut c = claim("a", "x.step_time_ratio");
        c.agree = AgreeRule {
            at_most: Some(1.03),
            ..Default::default()
        };
        let ours = |v: f64| {
            let r = rows(std::slice::from_ref(&c), "cpu", |_| {
                Answer::Measured(Measure::new("a", v, "x", 2, timed()))
            });
            (r[0].ours.clone(), r[0].verdict)
        };
        // 1.031 would print as the bound it exceeds.
        assert_eq!(ours(1.031), ("1.031x".into(), Verdict::Disagree));
        assert_eq!(ours(1.0302), ("1.0302x".into(), Verdict::Disagree));
        // Printed at its decimals when they already tell.
        assert_eq!(ours(1.06), ("1.06x".into(), Verdict::Disagree));
        assert_eq!(ours(1.029), ("1.03x".into(), Verdict::Agree));
    }

    #[test]
    fn each_claim_gets_ours_and_a_verdict() {
        let claims = [
            claim("a", "bfloat16.reduction_pct"),
            claim("b", "x.reduction_pct"),
        ];
        let rows = rows(&claims, "H100", |c| {
            if c.id == "a" {
                Answer::Measured(Measure::new("a", 36.04, "%", 1, timed()))
            } else {
                Answer::Missing("`x` did not finish (out_of_memory)".into())
            }
        });
        let within = rows[0].clone();
        assert_eq!(rows[0].ours, "36.0%");
        assert_eq!(rows[0].provenance, Some(timed()));
        assert_eq!(rows[1].provenance, None);
        assert_eq!(rows[0].claimed, "41.3%");
        assert_eq!(rows[0].verdict, Verdict::Agree);
        assert_eq!(rows[1].verdict, Verdict::NotComparable);
        let t = table(&rows, "doc.txt");
        assert_eq!(t.caption, "Measured on H100");
        assert_eq!(
            t.rows[0][0],
            "“BFloat16 achieved 41.3% memory reduction” (Analysis)"
        );
        assert_eq!(t.rows[0][2], "36.0% (measured)");
        // The rule in words (the row keeps the measure's name for pairing).
        assert_eq!(t.rows[0][3], "agree (within 10 percentage points of 41.3%)");
        assert_eq!(
            rows[0].rule,
            "bfloat16.reduction_pct within 10 percentage points of 41.3%"
        );
        assert!(
            t.rows[1][3].starts_with("not comparable"),
            "{:?}",
            t.rows[1]
        );
        assert!(t.notes.iter().any(|n| n.text.contains("did not finish")));
        // A value within the rule that contradicts the claim another way disagrees, and says
        // why; an explained value is judged by the rule, with its footnote.
        let claims = [claim("a", "bfloat16.reduction_pct")];
        let m = || Measure::new("a", 36.04, "%", 1, timed());
        let against = super::rows(&claims, "H100", |_| {
            Answer::Contradicted(m(), "the fit's a is negative".into())
        });
        assert_eq!(against[0].verdict, Verdict::Disagree);
        assert_eq!(against[0].ours, within.ours);
        assert_eq!(against[0].why.as_deref(), Some("the fit's a is negative"));
        let explained = super::rows(&claims, "H100", |_| {
            Answer::Explained(m(), "a = 1, b = 2".into())
        });
        assert_eq!(explained[0].verdict, Verdict::Agree);
        assert_eq!(explained[0].why.as_deref(), Some("a = 1, b = 2"));
        // Measured at a smaller profile than the one the claim is about: shown, not comparable,
        // the difference named.
        let mut full = claim("a", "bfloat16.reduction_pct");
        full.profile = Some(memwall_core::spec::Profile::Full);
        let stand_in = super::rows(std::slice::from_ref(&full), "CPU", |c| {
            Answer::Measured(m()).at_profile(c, "cpu", "8 layers")
        });
        assert_eq!(stand_in[0].verdict, Verdict::NotComparable);
        assert_eq!(stand_in[0].ours, "36.0%");
        assert!(stand_in[0]
            .why
            .as_deref()
            .unwrap()
            .contains("at the cpu profile (8 layers), not at the full profile"));
        let at_size = super::rows(&[full], "H200", |c| {
            Answer::Measured(m()).at_profile(c, "full", "32 layers")
        });
        assert_eq!(at_size[0].verdict, Verdict::Agree);
        // A measurement that moves in steps decides nothing where one step turns the rule
        // (36.0% is 4.7 points inside the band: steps of 5 leave it undecided, of 1 agree).
        let coarse = super::rows(&claims, "H100", |_| {
            Answer::Measured(m().with_resolution(5.0))
        });
        assert_eq!(coarse[0].verdict, Verdict::NotComparable);
        assert!(coarse[0]
            .why
            .as_deref()
            .unwrap()
            .starts_with("undecided: the measurement moves in steps of 5%"));
        let fine = super::rows(&claims, "H100", |_| {
            Answer::Measured(m().with_resolution(1.0))
        });
        assert_eq!(fine[0].verdict, Verdict::Agree);
        // A quantity proven only between two bounds decides where the rule judges the whole
        // interval alike (the band here is 31.3-51.3%).
        let inside = super::rows(&claims, "H100", |_| {
            Answer::Measured(m().with_bounds(35.0, 45.0))
        });
        assert_eq!(inside[0].verdict, Verdict::Agree);
        let across = super::rows(&claims, "H100", |_| {
            Answer::Measured(m().with_bounds(30.0, 45.0))
        });
        assert_eq!(across[0].verdict, Verdict::NotComparable);
        assert!(across[0]
            .why
            .as_deref()
            .unwrap()
            .starts_with("undecided: ours is proven only between 30% and 45%"));
        // Bounds that do not hold the value are not bounds of it.
        assert_eq!(m().with_bounds(40.0, 45.0).bounds, None);
        let beyond = super::rows(&claims, "H100", |_| {
            Answer::Measured(Measure::new("a", 60.0, "%", 1, timed()).with_bounds(55.0, 70.0))
        });
        assert_eq!(beyond[0].verdict, Verdict::Disagree);
        // A twin verdict follows the verdict in its cell.
        let mut with_twin = rows.clone();
        with_twin[0].twin = Some(crate::content::TwinVerdict {
            value: "31.7%".into(),
            rule: "within 10 percentage points of 31.7%".into(),
            verdict: Verdict::Agree,
        });
        let t = table(&with_twin, "doc.txt");
        assert_eq!(t.columns.len(), 4);
        assert!(t.rows[0][3].ends_with("; PyTorch, same GPU: 31.7%, agree"));
        assert!(!t.rows[1][3].contains("PyTorch"));
        // A claim about a definition judged on arithmetic says so beside its verdict.
        let mut format = claim("a", "f16_minus_bf16_fraction_bits");
        format.about = ClaimAbout::Definition;
        let by_definition = super::rows(&[format], "H100", |_| {
            let constant = Provenance::Arithmetic("10 - 7 mantissa bits".into());
            Answer::Measured(Measure::new("a", 36.04, "%", 1, constant))
        });
        let t = table(&by_definition, "doc.txt");
        assert!(
            t.rows[0][3].starts_with("agree by definition ("),
            "{:?}",
            t.rows[0]
        );
        assert_eq!(t.rows[0][2], "36.0% (arithmetic)");
    }
}
