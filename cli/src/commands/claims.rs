//! `memwall claims`: every headline claim of every study as a reader checks it (its quote and
//! place, the measure and its provenance, the rule and why its band, whether the rule can
//! fail, the verdict from the record store), and with `--check` a refusal of any claim whose
//! verdict could not have gone the other way.

use super::*;
use memwall_core::spec::claims::{unit_suffix, SourceClaim};
use memwall_document::content::GlanceRow;

/// One claim's lines of `memwall claims` and what `--check` finds wrong with it.
struct Checked {
    lines: Vec<String>,
    problems: Vec<String>,
}

/// The lines of claim `c` of a study quoting `source`, answered by `row` (the glance row of the
/// record store; `None` without records).
fn check_claim(c: &SourceClaim, source: &str, row: Option<&GlanceRow>) -> Checked {
    let mut lines = vec![format!(
        "- `{}`: “{}” ({}: {})",
        c.id,
        c.quote,
        c.document(source),
        c.location
    )];
    let mut problems = Vec::new();
    if let Some(why) = &c.not_comparable {
        lines.push(format!("  - verdict: not comparable: {why}"));
        return Checked { lines, problems };
    }
    let unit = c.unit.clone().unwrap_or_default();
    let provenance = row
        .and_then(|r| r.provenance.clone())
        .or_else(|| c.training_provenance());
    lines.push(format!("  - about: {}", c.about.as_str()));
    match &provenance {
        Some(p) => {
            lines.push(format!(
                "  - measure: `{}`, {}",
                c.measure_label(),
                p.describe()
            ));
            if let Some(why) = c.about.refusal(p) {
                problems.push(why);
            }
        }
        None => {
            lines.push(format!(
                "  - measure: `{}`, provenance unknown (no record answers it)",
                c.measure_label()
            ));
            problems.push(format!(
                "no record of the study answers `{}`, so its provenance is unknown: run the \
                 study (or point --runs at its records)",
                c.measure_label()
            ));
        }
    }
    lines.push(format!("  - rule: {}", c.agree.describe(c.value, &unit)));
    lines.push(format!(
        "  - band: {}",
        c.band.as_deref().unwrap_or("(no reason written yet)")
    ));
    let v = |x: f64| {
        format!(
            "{}{}",
            memwall_core::spec::claims::trim_number(x),
            unit_suffix(&unit)
        )
    };
    match c.agree.cases(c.value) {
        Some((yes, no)) => lines.push(format!(
            "  - can fail: yes, {} would disagree and {} agrees (the test \
             `every_claim_of_every_experiment_can_fail` feeds both)",
            v(no),
            v(yes)
        )),
        None => {
            lines.push("  - can fail: no measurement both agrees and disagrees".into());
            problems.push(
                "its rule has no measurement that agrees and one that disagrees (a relative \
                 band needs `value`)"
                    .into(),
            );
        }
    }
    match row {
        Some(r) => lines.push(format!(
            "  - verdict: {} (ours {}; {})",
            r.verdict.as_str(),
            r.ours,
            r.device
        )),
        None => lines.push("  - verdict: none yet (no records)".into()),
    }
    if let Some(t) = row.and_then(|r| r.twin.as_ref()) {
        lines.push(format!(
            "  - against PyTorch eager on the same device: {} (PyTorch {}; ours {})",
            t.verdict.as_str(),
            t.value,
            t.rule
        ));
    }
    Checked { lines, problems }
}

/// `memwall claims`: prints every claim of `experiments` (default: every file of `dir`) with
/// its verdict from `runs`; with `check`, fails naming each claim judged on a measure whose
/// provenance its `about` does not admit, or whose rule cannot fail.
pub(crate) fn claims(
    experiments: Vec<PathBuf>,
    dir: &Path,
    runs: &Path,
    check: bool,
) -> Result<()> {
    let files = if experiments.is_empty() {
        Study::discover(dir)?
    } else {
        experiments
    };
    let mut problems = Vec::new();
    let mut count = 0;
    for f in &files {
        let study = Study::outline(f).with_context(|| format!("reading {}", f.display()))?;
        let source = &study.header.source;
        println!(
            "## {} ({}; source {source})\n",
            study.header.name,
            f.display()
        );
        let rows = match driver::glance(f, runs) {
            Ok(rows) => rows,
            Err(e) => {
                println!("(no verdicts: {})\n", error_line(&e));
                Vec::new()
            }
        };
        for (i, c) in study.claims.iter().enumerate() {
            count += 1;
            let checked = check_claim(c, source, rows.get(i));
            println!("{}", checked.lines.join("\n"));
            problems.extend(
                checked
                    .problems
                    .into_iter()
                    .map(|p| format!("{}: claims[{i}] (`{}`): {p}", f.display(), c.id)),
            );
        }
        println!();
    }
    if check {
        if !problems.is_empty() {
            bail!(
                "{} of {count} claims fail the check:\n{}",
                problems.len(),
                problems.join("\n")
            );
        }
        println!(
            "claims --check: each of {count} claims is judged on a measure its `about` admits, \
             under a rule that can fail"
        );
    }
    Ok(())
}
