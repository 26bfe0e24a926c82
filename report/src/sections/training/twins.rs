//! A claim's second verdict: ours against PyTorch eager's twin of the same configuration on the
//! same GPU ([`crate::content::TwinVerdict`]), like with like beside the document's number.

use super::*;
use crate::content::TwinVerdict;
use crate::twin::TorchStatus;
use memwall_core::spec::claims::{unit_suffix, AgreeRule, Verdict};

/// Gives each glance row (one per claim, in order) whose claim is a peak reduction or a
/// step-time ratio of one configuration its twin verdict, where PyTorch eager ran that
/// configuration and its control on the GPU that answers the claim, with the same model shape:
/// PyTorch's reduction is `100 x (1 - max_memory_allocated / the control's)`, its ratio
/// `median step time / the control's`. The rule is the claim's `twin`, else
/// [`default_rule`]. CPU rows have no allocator peak and are left out.
pub(super) fn judge_twins(
    rows: &mut [GlanceRow],
    inputs: &StudyInputs,
    groups: &[Group],
    claims: &[SourceClaim],
) {
    for (row, claim) in rows.iter_mut().zip(claims) {
        if let Some(t) = twin_of(inputs, groups, claim) {
            row.twin = Some(t);
        }
    }
}

fn twin_of(inputs: &StudyInputs, groups: &[Group], claim: &SourceClaim) -> Option<TwinVerdict> {
    // A pair of our configurations (`against`) has no twin pair in the reference script's
    // terms: the twin verdict compares with the control only.
    if claim.not_comparable.is_some() || claim.against.is_some() {
        return None;
    }
    let Ok(TrainingTarget::Config(config, metric)) = claim.training_target(inputs.configs) else {
        return None;
    };
    if !matches!(
        metric,
        TrainingMetric::ReductionPct | TrainingMetric::StepTimeRatio
    ) {
        return None;
    }
    let g = answering_group(groups, claim, inputs.configs)?;
    if !g.gpu {
        return None;
    }
    let c = g.rows.iter().find(|c| c.ok && c.cfg.name == config.name)?;
    let k = control_of(g, c)?;
    let record = inputs.records.get(&c.s.key)?;
    let twin = |name: &str| {
        inputs.pytorch.iter().find(|r| {
            r.config == name
                && r.device == g.device
                && r.status == TorchStatus::Ok
                && !r.on_cpu()
                && crate::sections::twin::same_model(record, &r.model)
        })
    };
    let (tc, tk) = (twin(&c.cfg.name)?, twin(&k.cfg.name)?);
    let (value, ours) = match metric {
        TrainingMetric::ReductionPct => {
            let (a, b) = (
                tc.max_memory_allocated_bytes?,
                tk.max_memory_allocated_bytes?,
            );
            (b > 0)
                .then(|| 100.0 * (1.0 - a as f64 / b as f64))
                .zip(c.red)?
        }
        _ => {
            let (a, b) = (tc.median_step_s?, tk.median_step_s?);
            (b > 0.0).then(|| a / b).zip(c.rel)?
        }
    };
    let rule = claim.twin.unwrap_or_else(|| default_rule(&claim.agree));
    let unit = metric.unit();
    let mut shown = format!("{:.*}", metric.decimals(), value);
    if shown.parse::<f64>() == Ok(0.0) {
        // -0.0 when PyTorch's value rounds to zero from below.
        shown = shown.trim_start_matches('-').to_string();
    }
    Some(TwinVerdict {
        value: format!("{shown}{}", unit_suffix(unit)),
        rule: rule.describe(shown.parse().ok(), unit),
        verdict: if rule.holds(ours, Some(value)) {
            Verdict::Agree
        } else {
            Verdict::Disagree
        },
    })
}

/// The twin rule of a claim without `twin`: its band around PyTorch's value (`within`,
/// `within_rel`); a claim judged by bounds alone (`at_most`, `at_least`, which say nothing of
/// PyTorch's value) within 10% of it.
pub(super) fn default_rule(agree: &AgreeRule) -> AgreeRule {
    let mut rule = AgreeRule {
        within: agree.within,
        within_rel: agree.within_rel,
        ..Default::default()
    };
    if rule.within.is_none() && rule.within_rel.is_none() {
        rule.within_rel = Some(0.10);
    }
    rule
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_rule_compares_with_pytorch_by_ten_percent() {
        let bounds = AgreeRule {
            at_most: Some(0.5),
            ..Default::default()
        };
        let r = default_rule(&bounds);
        assert!(r.holds(0.22, Some(0.21)) && !r.holds(0.61, Some(0.21)));
        let band = AgreeRule {
            within: Some(10.0),
            at_least: Some(0.0),
            ..Default::default()
        };
        assert_eq!(
            default_rule(&band),
            AgreeRule {
                within: Some(10.0),
                ..Default::default()
            }
        );
    }
}
