//! "This machine beside the published evidence": in a report rendered from a store other than
//! the committed one (a newcomer's `memwall reproduce`, `target/memwall/runs`), each
//! configuration measured here beside the published record of the same configuration, profile
//! and backend (`runs/`), with both devices and the published date, so a user sees at once
//! whether their machine reproduces ours.
//!
//! Peak allocated bytes on the CPU are the process heap's exact high-water mark, so they should
//! agree across machines of one architecture; samples/s follow the machine (machines of the
//! same kind differ by 1.5x and more).
//!
//! May import: `crate::content`, `crate::analysis`.

use crate::analysis::{JobRecord, JobStatus};
use crate::content::{GlanceRow, Section, Table};

/// The section, or `None` when no configuration measured here has a published record of the
/// same configuration, profile and backend. `labels` maps configuration names to their labels.
pub fn section(
    here: &[JobRecord],
    published: &[JobRecord],
    labels: &[(String, String)],
) -> Option<Section> {
    let label = |config: &str| {
        labels
            .iter()
            .find(|(c, _)| c == config)
            .map(|(_, l)| l.clone())
            .unwrap_or_else(|| config.to_string())
    };
    let mib = |b: u64| format!("{:.1}", b as f64 / (1u64 << 20) as f64);
    let mut rows = Vec::new();
    let (mut mem, mut speed) = (Vec::new(), Vec::new());
    let mut considered = 0;
    // In the experiment file's order of configurations (records come in key order).
    let order = |r: &&JobRecord| {
        labels
            .iter()
            .position(|(c, _)| *c == r.spec.config)
            .unwrap_or(usize::MAX)
    };
    let mut ordered: Vec<&JobRecord> = here.iter().filter(|r| r.status == JobStatus::Ok).collect();
    ordered.sort_by_key(order);
    for r in ordered {
        let Some(s) = &r.summary else { continue };
        considered += 1;
        for p in published.iter().filter(|p| {
            p.status == JobStatus::Ok
                && p.spec.config == r.spec.config
                && p.spec.profile == r.spec.profile
                && p.spec.backend == r.spec.backend
        }) {
            let Some(ps) = &p.summary else { continue };
            let m = s.peak_allocated_bytes as f64 / ps.peak_allocated_bytes.max(1) as f64;
            let v = s.samples_per_s / ps.samples_per_s.max(f64::MIN_POSITIVE);
            mem.push(m);
            speed.push(v);
            rows.push(vec![
                label(&r.spec.config),
                r.spec.profile.to_string(),
                mib(s.peak_allocated_bytes),
                mib(ps.peak_allocated_bytes),
                format!("{m:.2}x"),
                format!("{:.2}", s.samples_per_s),
                format!("{:.2}", ps.samples_per_s),
                format!("{v:.2}x"),
                format!(
                    "{}, {}, revision {}",
                    p.env.device_name,
                    p.finished_at.chars().take(10).collect::<String>(),
                    p.env.git_revision
                ),
            ]);
        }
    }
    if rows.is_empty() {
        return None;
    }
    let device = here
        .iter()
        .find(|r| !r.env.device_name.is_empty())
        .map(|r| r.env.device_name.clone())
        .unwrap_or_else(|| "this machine".into());
    Some(Section {
        title: "This machine beside the published evidence".into(),
        claim: "The published reports (`reports/`) are rendered from the records committed in \
                `runs/`; this section puts each configuration measured here beside the \
                published record of the same configuration, profile and backend."
            .into(),
        ours: format!(
            "{} comparison(s) on {device} for {considered} finished configuration(s) here: peak \
             allocated here / published {}, samples/s here / published {} (each the median \
             and range over the rows).",
            rows.len(),
            spread(&mem),
            spread(&speed),
        ),
        notes: vec![format!(
            "On the CPU the peak is the process heap's exact high-water mark, so the same memwall \
             revision should give the same peak on machines of one architecture; a published \
             record of another revision (this run: {}) measured other code. Samples/s follow \
             the machine (the same kind of cloud machine differs by 1.5x and more).",
            here.first()
                .map(|r| r.env.git_revision.as_str())
                .unwrap_or("–")
        )],
        tables: vec![Table {
            caption: format!("{device} (here) beside the published records"),
            columns: vec![
                "Configuration".into(),
                "Profile".into(),
                "Peak allocated here (MiB)".into(),
                "Peak allocated, published (MiB)".into(),
                "Peak here / published".into(),
                "Samples/s here".into(),
                "Samples/s, published".into(),
                "Samples/s here / published".into(),
                "Published on (device, date, memwall revision)".into(),
            ],
            rows,
            notes: Vec::new(),
        }],
        figures: Vec::new(),
        details: None,
    })
}

/// One study's headline claims as measured here and as published (either may be empty: not
/// run here, or never published).
pub struct ClaimsOf {
    /// `[study] name`.
    pub study: String,
    /// The glance rows of this machine's store.
    pub here: Vec<GlanceRow>,
    /// The glance rows of the published store.
    pub published: Vec<GlanceRow>,
}

/// A Markdown table of every headline claim: the study, the claim (its quotation, shortened
/// to `quote_chars`), the source's value, the published value with its verdict and device,
/// and this machine's. Rows pair by quotation and rule (a claim can have several measures).
pub fn claims_table(studies: &[ClaimsOf], quote_chars: usize) -> String {
    let cell = |g: Option<&GlanceRow>| match g {
        Some(g) => format!("{} {} ({})", g.ours, g.verdict.as_str(), g.device),
        None => "–".to_string(),
    };
    let mut out =
        String::from("| study | claim | source | published | here |\n|---|---|--:|---|---|\n");
    for s in studies {
        let base = if s.here.is_empty() {
            &s.published
        } else {
            &s.here
        };
        for (i, g) in base.iter().enumerate() {
            let find = |rows: &[GlanceRow]| {
                rows.iter()
                    .find(|r| r.quote == g.quote && r.rule == g.rule)
                    .or_else(|| rows.get(i).filter(|r| r.quote == g.quote))
                    .cloned()
            };
            let (here, published) = (find(&s.here), find(&s.published));
            let mut quote: String = g.quote.chars().take(quote_chars).collect();
            if g.quote.chars().count() > quote_chars {
                quote.push('…');
            }
            out.push_str(&format!(
                "| {} | “{}” | {} | {} | {} |\n",
                s.study,
                quote.replace('|', "\\|"),
                g.claimed,
                cell(published.as_ref()),
                cell(here.as_ref()),
            ));
        }
    }
    out
}

/// "1.00x (0.98x-1.03x)": the median of `v` and its range.
fn spread(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match (s.first(), s.last()) {
        (Some(lo), Some(hi)) => {
            let median = if s.len() % 2 == 1 {
                s[s.len() / 2]
            } else {
                (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
            };
            format!("{median:.2}x ({lo:.2}x-{hi:.2}x)")
        }
        _ => "–".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(quote: &str, rule: &str, ours: &str, device: &str) -> GlanceRow {
        GlanceRow {
            quote: quote.into(),
            location: String::new(),
            claimed: "41.3%".into(),
            derived: None,
            ours: ours.into(),
            rule: rule.into(),
            device: device.into(),
            verdict: memwall_core::spec::claims::Verdict::Agree,
            why: None,
            about: Default::default(),
            provenance: None,
            twin: None,
        }
    }

    #[test]
    fn claims_pair_by_quotation_and_rule_and_a_missing_side_is_a_dash() {
        let t = claims_table(
            &[
                ClaimsOf {
                    study: "pm".into(),
                    here: vec![
                        row("BF16 | halves", "a.reduction_pct", "48.0%", "EPYC"),
                        row("BF16 | halves", "a.step_time_ratio", "0.70x", "EPYC"),
                    ],
                    published: vec![
                        row("BF16 | halves", "a.step_time_ratio", "0.61x", "H200"),
                        row("BF16 | halves", "a.reduction_pct", "49.9%", "H200"),
                    ],
                },
                ClaimsOf {
                    study: "new".into(),
                    here: vec![row("a claim that is long", "m", "1", "EPYC")],
                    published: Vec::new(),
                },
            ],
            13,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        assert_eq!(
            lines[2],
            "| pm | “BF16 \\| halves” | 41.3% | 49.9% agree (H200) | 48.0% agree (EPYC) |"
        );
        assert!(
            lines[3].contains("0.61x agree (H200) | 0.70x agree (EPYC)"),
            "{t}"
        );
        assert_eq!(
            lines[4],
            "| new | “a claim that …” | 41.3% | – | 1 agree (EPYC) |"
        );
    }

    #[test]
    fn a_configuration_measured_here_sits_beside_its_published_record() {
        // A committed record of the published store, and the same job measured "here" on
        // another machine with half the peak and twice the speed.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runs/peak_memory");
        let published = crate::analysis::read_record(&dir.join("a052c26a04125a3e"))
            .unwrap()
            .expect("a committed cpu-profile record");
        let mut here = published.clone();
        here.env.device_name = "Test CPU".into();
        here.env.git_revision = "abc123".into();
        let s = here.summary.as_mut().unwrap();
        s.peak_allocated_bytes /= 2;
        s.samples_per_s *= 2.0;
        let mut other_profile = published.clone();
        other_profile.spec.profile = crate::spec::Profile::Full;
        let labels = vec![(published.spec.config.clone(), "Control".to_string())];
        let sec = section(&[here], &[published.clone(), other_profile], &labels).unwrap();
        let t = &sec.tables[0];
        assert_eq!(t.rows.len(), 1, "only the same profile pairs: {:?}", t.rows);
        let row = &t.rows[0];
        assert_eq!(row[0], "Control");
        assert_eq!(row[4], "0.50x");
        assert_eq!(row[7], "2.00x");
        assert!(row[8].starts_with(&published.env.device_name), "{}", row[8]);
        assert!(row[8].ends_with(&format!("revision {}", published.env.git_revision)));
        assert!(
            sec.ours.contains("Test CPU") && sec.ours.contains("0.50x"),
            "{}",
            sec.ours
        );
        assert!(sec.notes[0].contains("abc123"));
        // Nothing published at this configuration: no section.
        assert!(section(&[], &[], &labels).is_none());
    }

    #[test]
    fn the_spread_is_the_median_and_the_range() {
        assert_eq!(spread(&[1.2, 0.8, 1.0]), "1.00x (0.80x-1.20x)");
        assert_eq!(spread(&[1.0, 2.0]), "1.50x (1.00x-2.00x)");
        assert_eq!(spread(&[]), "–");
    }
}
