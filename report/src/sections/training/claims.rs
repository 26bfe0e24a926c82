//! The glance of a training study: which group and row answer each claim, and the value
//! they give (a metric of one configuration, against the control or against the
//! configuration a claim's `against` names, or a sweep metric).

use super::*;

/// A glance row that disagrees on a memory number (a configuration's peak or reduction, or a
/// sweep's) points to the timeline section of the group that answers it: where the peak comes
/// from, with the configuration's peak phase when the claim names one configuration.
pub(super) fn point_to_timelines(
    glance: &mut [GlanceRow],
    inputs: &StudyInputs,
    groups: &[Group],
    claims: &[SourceClaim],
) {
    for (row, claim) in glance.iter_mut().zip(claims) {
        if row.verdict != memwall_core::spec::claims::Verdict::Disagree {
            continue;
        }
        let config = match claim.training_target(inputs.configs) {
            Ok(TrainingTarget::Config(
                c,
                TrainingMetric::PeakGib
                | TrainingMetric::ReductionPct
                | TrainingMetric::PeakInForward,
            )) => Some(c.name.as_str()),
            Ok(TrainingTarget::Sweep(..)) => None,
            _ => continue,
        };
        let Some(g) = groups
            .iter()
            .filter(|g| !g.secondary)
            .find(|g| answers_claim(g, claim, inputs.configs))
        else {
            continue;
        };
        let lines = timeline_lines(inputs, g);
        if lines.is_empty() {
            continue;
        }
        let mut pointer = format!(
            "where the peak comes from: \"Memory timeline of one step: {}\"",
            g.heading()
        );
        let peak = config
            .and_then(|c| lines.iter().find(|l| l.name == c))
            .and_then(|l| l.record.timeline.as_ref())
            .and_then(|t| t.peak_phase().map(|i| t.phases[i].phase.label()));
        if let (Some(c), Some(phase)) = (config, peak) {
            pointer.push_str(&format!(" (`{c}` peaks in \"{phase}\")"));
        }
        row.why = Some(match row.why.take() {
            Some(w) => format!("{w}; {pointer}"),
            None => pointer,
        });
    }
}

/// The group that answers `claim` in the glance: the first of the first group's profile, device
/// and GPU settings whose finished rows hold its configuration or sweep.
pub(super) fn answering_group<'g, 'a>(
    groups: &'g [Group<'a>],
    claim: &SourceClaim,
    configs: &[ConfigSpec],
) -> Option<&'g Group<'a>> {
    let first = groups.first()?;
    groups
        .iter()
        .filter(|g| {
            (&g.profile, &g.device, &g.backend_label)
                == (&first.profile, &first.device, &first.backend_label)
        })
        .find(|g| answers_claim(g, claim, configs))
}

/// The finished control of row `c`'s group with `c`'s optimizer (the reductions' and ratios'
/// denominator).
pub(super) fn control_of<'g, 'a>(g: &'g Group<'a>, c: &ConfigRow) -> Option<&'g ConfigRow<'a>> {
    g.rows
        .iter()
        .find(|k| k.ok && k.s.strategy.control && k.s.strategy.optimizer == c.s.strategy.optimizer)
}

/// Whether a finished row of group `g` answers `claim` (of a study whose configurations are
/// `configs`): its configuration, or a configuration of its sweep.
pub(super) fn answers_claim(g: &Group, claim: &SourceClaim, configs: &[ConfigSpec]) -> bool {
    match claim.training_target(configs) {
        Ok(TrainingTarget::Sweep(sweep, _)) => g
            .rows
            .iter()
            .any(|c| c.ok && sweep.sweep_member(c.cfg).is_some()),
        Ok(TrainingTarget::Config(config, _)) => [Some(&config.name), claim.against.as_ref()]
            .into_iter()
            .flatten()
            .all(|name| g.rows.iter().any(|c| c.ok && &c.cfg.name == name)),
        Err(_) => false,
    }
}

/// The glance rows of `claims` measured where the report's first group ran (the first group in
/// which a claim's configuration finished: the source's size where it ran, else the
/// stand-in): each claim answered by the first group of that profile and device whose rows
/// hold its configuration or sweep (a study's models are groups of their own).
pub(super) fn glance_rows(
    inputs: &StudyInputs,
    groups: &[Group],
    claims: &[SourceClaim],
) -> Vec<GlanceRow> {
    let Some(first) = groups.first() else {
        return Vec::new();
    };
    let mut rows = glance::rows(claims, &first.device_text(), |claim| {
        let g = answering_group(groups, claim, inputs.configs).unwrap_or(first);
        let (config, metric) = match claim.training_target(inputs.configs) {
            Ok(TrainingTarget::Sweep(sweep, metric)) => {
                return sweep_answer(g, &claim.measure, sweep, metric);
            }
            Ok(TrainingTarget::Config(c, metric)) => (c.name.as_str(), metric),
            Err(why) => return Answer::Missing(why),
        };
        let measure = match &claim.against {
            Some(a) => format!("{config}.{} against {a}", metric.name()),
            None => format!("{config}.{}", metric.name()),
        };
        let row = g
            .rows
            .iter()
            .chain(&g.unsupported)
            .find(|c| c.cfg.name == config);
        let Some(c) = row else {
            return Answer::Missing(format!(
                "configuration `{config}` has no record on {}",
                g.device
            ));
        };
        if !c.ok {
            return Answer::Missing(format!(
                "configuration `{config}` did not finish on {} ({})",
                g.device,
                c.status.as_str()
            ));
        }
        let value = if let Some(a) = &claim.against {
            let Some(k) = g.rows.iter().find(|k| k.ok && &k.cfg.name == a) else {
                return Answer::Missing(format!(
                    "configuration `{a}`, which `{config}` is compared with, has no finished \
                     record on {}",
                    g.device
                ));
            };
            against_value(inputs, metric, c, k)
        } else {
            match metric {
                TrainingMetric::PeakGib => c.peak.map(|p| p / (MIB * 1024.0)),
                TrainingMetric::ReductionPct => c.red,
                TrainingMetric::StepTimeRatio => c.rel,
                TrainingMetric::Speedup => c.rel.filter(|r| *r > 0.0).map(|r| 1.0 / r),
                TrainingMetric::SamplesPerS => c.s.measured.samples_per_s,
                TrainingMetric::Perplexity => c.s.measured.eval_perplexity,
                // Answered by the largest-input search's report (memwall_studies::largest_input::glance).
                TrainingMetric::LargestBatchRatio | TrainingMetric::LargestSeqLenRatio => None,
                TrainingMetric::PeakInForward => inputs
                    .records
                    .get(&c.s.key)
                    .and_then(|r| r.timeline.as_ref())
                    .and_then(|t| t.peak_phase().map(|i| t.phases[i].phase.is_forward()))
                    .map(|forward| if forward { 1.0 } else { 0.0 }),
                TrainingMetric::PerplexityRatio => {
                    let control = control_of(g, c);
                    match (
                        c.s.measured.eval_perplexity,
                        control.and_then(|k| k.s.measured.eval_perplexity),
                    ) {
                        (Some(p), Some(k)) if k > 0.0 => Some(p / k),
                        _ => None,
                    }
                }
            }
        };
        let setting = format!(
            "{} layers, d_model {}, {} timed steps",
            c.s.size.layers, c.s.size.d_model, c.s.size.measured_steps
        );
        match value {
            Some(v) => Answer::Measured(Measure::new(
                &measure,
                v,
                metric.unit(),
                metric.decimals(),
                match &claim.against {
                    Some(a) => metric.provenance_against(a),
                    None => metric.provenance(),
                },
            ))
            .at_profile(claim, &g.profile, &setting),
            None => Answer::Missing(format!(
                "`{measure}` has no value for `{config}` on {} (no finished control?)",
                g.device
            )),
        }
    });
    glance::fill_provenance(&mut rows, claims, SourceClaim::training_provenance);
    rows
}

/// A relative metric of row `c` taken against row `k` of the same group (a claim's `against`):
/// the reduction of `c`'s peak allocated bytes below `k`'s, percent, or the ratio of their
/// median step times (both over the same control, so the control's time cancels) or of their
/// evaluation perplexities. `None` for a metric that is not relative or a value not measured.
pub(super) fn against_value(
    inputs: &StudyInputs,
    metric: TrainingMetric,
    c: &ConfigRow,
    k: &ConfigRow,
) -> Option<f64> {
    let positive = |x: Option<f64>| x.filter(|v| *v > 0.0);
    // Step times: the median of the per-repeat ratios where the two share repeat indices (run
    // r of each ran interleaved, a paired design), else the ratio of the rows' own values.
    let step_ratio = || -> Option<f64> {
        let paired = inputs.repeats.paired_ratios(
            (&c.s.key, &c.s.device_name),
            (&k.s.key, &k.s.device_name),
            GoalMetric::MedianStepS,
        );
        match stats::median_interval(&paired, stats::LEVEL) {
            Some(r) => Some(r.median),
            None => Some(positive(c.rel)? / positive(k.rel)?),
        }
    };
    match metric {
        TrainingMetric::ReductionPct => {
            let (p, q) = (c.peak?, positive(k.peak)?);
            Some(100.0 * (1.0 - p / q))
        }
        TrainingMetric::StepTimeRatio => step_ratio(),
        TrainingMetric::Speedup => step_ratio().filter(|r| *r > 0.0).map(|r| 1.0 / r),
        TrainingMetric::PerplexityRatio => {
            Some(positive(c.s.measured.eval_perplexity)? / positive(k.s.measured.eval_perplexity)?)
        }
        _ => None,
    }
}
