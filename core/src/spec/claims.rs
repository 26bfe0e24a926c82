//! `[[claims]]` of an experiment file: the source document's headline claims, each quoted
//! exactly, located in the document, and tied to the measurement of ours that answers it. The
//! report's "Results at a glance" block is built from them: per claim the quotation, our value,
//! the device and a verdict ([`Verdict`]).
//!
//! Claims live in the experiment files, not in code, so that a reader can check every quotation
//! against the document ([`normalize_quote`], [`SourceClaim::quote`]) and every rule against the
//! report.

use serde::{Deserialize, Serialize};

/// One claim of the source document (`[[claims]]`).
///
/// ```toml
/// [[claims]]
/// id = "bf16_reduction"
/// quote = "BFloat16 achieved 41.3% memory reduction"
/// where = "Analysis and Interpretation: Most Effective Individual Techniques, item 1"
/// value = 41.3
/// unit = "%"
/// measure = "bfloat16.reduction_pct"
/// agree = { within = 10.0 }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceClaim {
    /// Short name, unique within the study (letters, digits, `_`).
    pub id: String,
    /// The claim in the document's words: a verbatim passage of the source document once both
    /// are normalized by [`normalize_quote`] (Markdown emphasis and code marks removed,
    /// whitespace collapsed). The attribution test checks it.
    pub quote: String,
    /// Where in the document (section heading, table row and column).
    #[serde(rename = "where")]
    pub location: String,
    /// The number our measurement is compared with, in `unit`: a number the document states,
    /// or, with `derived`, one computed from the document's numbers.
    #[serde(default)]
    pub value: Option<f64>,
    /// Unit of `value` and of our measurement ("%", "x", "GiB", "s").
    #[serde(default)]
    pub unit: Option<String>,
    /// When `value` is not stated by the document: how it is computed from the document's
    /// numbers (e.g. "41 s / 100 s from the Relative Time column"). The report labels such a
    /// value "derived".
    #[serde(default)]
    pub derived: Option<String>,
    /// Which of our measurements answers the claim. For a training study: a metric
    /// ([`TrainingMetric`]) of the configuration `config` picks, a sweep metric
    /// ([`SweepMetric`]) of the sweep `sweep` picks, or `<configuration>.<metric>` naming a
    /// `[[configs]]` entry (not a grid's generated name: a grid's configuration is picked by
    /// its fields). Otherwise a measure name of the study's result. Empty with
    /// `not_comparable`.
    #[serde(default)]
    pub measure: String,
    /// The configuration of a training study that answers the claim, by its strategy fields
    /// (`config = { checkpoint = "sqrt" }`; fields left out at their defaults,
    /// [`crate::spec::ConfigSelector`]): exactly one configuration of the file must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<crate::spec::ConfigSelector>,
    /// The checkpoint-interval sweep of a training study that answers the claim: every
    /// configuration with these strategy fields, whatever its `checkpoint`
    /// (`sweep = { model = "deep", fused_optimizer = true }`); the one without checkpointing is
    /// the sweep's control. `measure` is then a [`SweepMetric`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::spec::ConfigSelector>,
    /// The rule under which ours agrees with the claim.
    #[serde(default)]
    pub agree: AgreeRule,
    /// Why no measurement of ours can answer the claim (the report says "not comparable" and
    /// this reason).
    #[serde(default)]
    pub not_comparable: Option<String>,
    /// What the claim states: about the world (the default), a computation or a definition,
    /// which decides the provenance of a measure that may judge it
    /// ([`crate::spec::provenance::ClaimAbout::admits`], `memwall claims --check`).
    #[serde(default)]
    pub about: crate::spec::provenance::ClaimAbout,
    /// Why the rule's band is as wide as it is: the document's own precision ("roughly",
    /// "~20%", a printed decimal) and the spread between neighbouring configurations that the
    /// band must separate. `memwall claims` prints it beside the rule (the report's glance
    /// stays one screen high without it).
    #[serde(default)]
    pub band: Option<String>,
    /// The rule between ours and PyTorch eager's twin of the same configuration on the same
    /// device, where one ran (a peak reduction or a step-time ratio on a GPU): the second
    /// verdict of the claim, like with like. Default: `agree` with PyTorch's value in place of
    /// the document's.
    #[serde(default)]
    pub twin: Option<AgreeRule>,
    /// The profile whose size the claim's number is about (`full`: the source's size): ours,
    /// measured at another profile, is shown but "not comparable", the difference named.
    #[serde(default)]
    pub profile: Option<crate::spec::Profile>,
    /// The source document quoted, when it is not the study's `source` (a file name of
    /// `../shared/sources/`): a claim of one document answered by another study's
    /// measurement. The attribution test checks the quote in this document.
    #[serde(default)]
    pub source: Option<String>,
    /// The configuration of the same training study that a relative metric
    /// (`reduction_pct`, `step_time_ratio`, `speedup`, `perplexity_ratio`) is taken against
    /// instead of the control: a claim about one option, judged on the pair of
    /// configurations that differ in that option alone (same model and optimizer, checked
    /// when the file loads). Measured in the same group (profile and device) as the
    /// configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<String>,
}

impl SourceClaim {
    /// The document the claim quotes: its own `source`, else `study_source`.
    pub fn document<'a>(&'a self, study_source: &'a str) -> &'a str {
        self.source.as_deref().unwrap_or(study_source)
    }

    /// What answers this claim of a training study whose configurations are `configs`.
    ///
    /// # Errors
    /// A message for the claim's `measure`, `config` or `sweep` field: both `config` and
    /// `sweep` given, a metric unknown for the form, a `config` selector matching no or several
    /// configurations, a named configuration not in `configs`, a sweep that names
    /// `checkpoint` (the field it varies).
    pub fn training_target<'a>(
        &'a self,
        configs: &'a [crate::spec::ConfigSpec],
    ) -> Result<TrainingTarget<'a>, String> {
        let training_names = || {
            TrainingMetric::ALL
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match (&self.config, &self.sweep) {
            (Some(_), Some(_)) => Err(
                "give `config` (one configuration) or `sweep` (a checkpoint-interval sweep),                  not both"
                    .into(),
            ),
            (None, Some(sweep)) => {
                if sweep.checkpoint.is_some() {
                    return Err(format!(
                        "`sweep = {}` names `checkpoint`, the field a sweep varies: leave it out",
                        sweep.describe()
                    ));
                }
                let metric = SweepMetric::parse(&self.measure).ok_or_else(|| {
                    format!(
                        "`{}` is not a sweep metric; with `sweep`, `measure` is one of {}",
                        self.measure,
                        SweepMetric::ALL
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
                Ok(TrainingTarget::Sweep(sweep, metric))
            }
            (Some(selector), None) => {
                let metric = TrainingMetric::parse(&self.measure).ok_or_else(|| {
                    format!(
                        "`{}` is not a training metric; with `config`, `measure` is one of {}",
                        self.measure,
                        training_names()
                    )
                })?;
                let found: Vec<&crate::spec::ConfigSpec> =
                    configs.iter().filter(|c| selector.matches(c)).collect();
                match found.as_slice() {
                    [one] => Ok(TrainingTarget::Config(one, metric)),
                    [] => Err(format!(
                        "`config = {}` matches no configuration of this file (fields left out                          are at their defaults: f32, no checkpointing, no fusion, the                          profile's model)",
                        selector.describe()
                    )),
                    several => Err(format!(
                        "`config = {}` matches {} configurations ({}): name the field that                          tells them apart",
                        selector.describe(),
                        several.len(),
                        several
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
            }
            (None, None) => {
                let Some((name, metric)) = self
                    .measure
                    .rsplit_once('.')
                    .and_then(|(c, m)| Some((c, TrainingMetric::parse(m)?)))
                else {
                    return Err(format!(
                        "`{}`: expected `<configuration>.<metric>` with a metric of {}, or a                          metric with `config = {{ ... }}` or (a sweep metric) `sweep = {{ ... }}`",
                        self.measure,
                        training_names()
                    ));
                };
                let config = configs.iter().find(|c| c.name == name).ok_or_else(|| {
                    format!(
                        "`{name}` is not a configuration of this file; configurations: {}",
                        configs
                            .iter()
                            .map(|k| k.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
                Ok(TrainingTarget::Config(config, metric))
            }
        }
    }

    /// The measure as a reader finds it in the experiment file: `measure`, with the
    /// configuration or sweep that answers it (`step_time_ratio of config = { checkpoint =
    /// "sqrt" }`).
    pub fn measure_label(&self) -> String {
        let label = match (&self.config, &self.sweep) {
            (Some(c), _) => format!("{} of config = {}", self.measure, c.describe()),
            (None, Some(s)) => format!("{} of sweep = {}", self.measure, s.describe()),
            (None, None) => self.measure.clone(),
        };
        match &self.against {
            Some(a) => format!("{label} against {a}"),
            None => label,
        }
    }

    /// The provenance of this claim's measure when it is a training metric or a sweep metric,
    /// known from the metric alone; `None` for another study's measure name.
    pub fn training_provenance(&self) -> Option<crate::spec::provenance::Provenance> {
        if self.sweep.is_some() {
            return SweepMetric::parse(&self.measure).map(SweepMetric::provenance);
        }
        let metric = match &self.config {
            Some(_) => TrainingMetric::parse(&self.measure),
            None => self
                .measure
                .rsplit_once('.')
                .and_then(|(_, m)| TrainingMetric::parse(m)),
        };
        metric.map(|m| match &self.against {
            Some(a) => m.provenance_against(a),
            None => m.provenance(),
        })
    }
}

/// What answers a claim of a training study ([`SourceClaim::training_target`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrainingTarget<'a> {
    /// A metric of one configuration.
    Config(&'a crate::spec::ConfigSpec, TrainingMetric),
    /// A metric of the checkpoint-interval sweep the selector picks.
    Sweep(&'a crate::spec::ConfigSelector, SweepMetric),
}

/// When our value agrees with a claim. Every rule given must hold; a claim without a rule
/// agrees when ours is within 10% of `value` (relative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgreeRule {
    /// `|ours - value| <= within` (absolute, in the claim's unit).
    #[serde(default)]
    pub within: Option<f64>,
    /// `|ours - value| <= within_rel * |value|`.
    #[serde(default)]
    pub within_rel: Option<f64>,
    /// `ours <= at_most`.
    #[serde(default)]
    pub at_most: Option<f64>,
    /// `ours >= at_least`.
    #[serde(default)]
    pub at_least: Option<f64>,
}

/// Relative tolerance of a claim whose `agree` names no rule.
pub const DEFAULT_WITHIN_REL: f64 = 0.10;

impl AgreeRule {
    fn is_empty(&self) -> bool {
        self.within.is_none()
            && self.within_rel.is_none()
            && self.at_most.is_none()
            && self.at_least.is_none()
    }

    /// Whether `ours` agrees with `value` under this rule (a rule that needs `value` and has
    /// none does not hold).
    pub fn holds(&self, ours: f64, value: Option<f64>) -> bool {
        let mut rule = *self;
        if rule.is_empty() {
            rule.within_rel = Some(DEFAULT_WITHIN_REL);
        }
        let near = |tol: f64| value.is_some_and(|v| (ours - v).abs() <= tol);
        rule.within.is_none_or(near)
            && rule
                .within_rel
                .is_none_or(|r| value.is_some_and(|v| near(r * v.abs())))
            && rule.at_most.is_none_or(|m| ours <= m)
            && rule.at_least.is_none_or(|m| ours >= m)
    }

    /// Two measurements that the rule judges differently, `(agrees, disagrees)`, against the
    /// claim's `value`: the proof that a verdict under this rule can fail. Candidates are the
    /// band's edges and the value, each moved by half, one and a half and three times the
    /// band's width, its own half and one unit, in that order; `None` when no candidate agrees (a rule that needs a value and has none) or
    /// none disagrees (a rule without a bound).
    pub fn cases(&self, value: Option<f64>) -> Option<(f64, f64)> {
        let mut anchors: Vec<f64> = [value, self.at_least, self.at_most]
            .into_iter()
            .flatten()
            .collect();
        if let (Some(lo), Some(hi)) = (self.at_least, self.at_most) {
            anchors.push((lo + hi) / 2.0);
        }
        let mut widths: Vec<f64> = self.within.into_iter().collect();
        if let (Some(r), Some(v)) = (self.within_rel, value) {
            widths.push(r * v.abs());
        }
        if self.is_empty() {
            widths.extend(value.map(|v| DEFAULT_WITHIN_REL * v.abs()));
        }
        let mut candidates = Vec::new();
        for &a in &anchors {
            candidates.push(a);
            // The band's own width first, so that the failing case lies just outside it.
            let mut steps = widths.clone();
            steps.extend([a.abs() / 2.0, 1.0]);
            for w in steps.into_iter().filter(|w| *w > 0.0) {
                for k in [0.5, 1.5, 3.0] {
                    candidates.push(a - k * w);
                    candidates.push(a + k * w);
                }
            }
        }
        let agrees = candidates.iter().copied().find(|&x| self.holds(x, value))?;
        let disagrees = candidates
            .iter()
            .copied()
            .find(|&x| !self.holds(x, value))?;
        Some((agrees, disagrees))
    }

    /// Whether the verdict on `ours` stands one `step` either side of it: a measurement that
    /// moves in steps (a search over integers) decides nothing when one step turns the rule.
    pub fn decided_within(&self, ours: f64, value: Option<f64>, step: f64) -> bool {
        let here = self.holds(ours, value);
        self.holds(ours - step, value) == here && self.holds(ours + step, value) == here
    }

    /// The measurements the rule agrees with, as the closed interval `(low, high)` (the rule is
    /// a conjunction of bands and bounds, so that set is an interval); `low > high` when none
    /// agrees (a rule that needs the claim's `value` and has none).
    pub fn agreeing_interval(&self, value: Option<f64>) -> (f64, f64) {
        let mut rule = *self;
        if rule.is_empty() {
            rule.within_rel = Some(DEFAULT_WITHIN_REL);
        }
        let (mut low, mut high) = (f64::NEG_INFINITY, f64::INFINITY);
        let mut band = |width: f64| match value {
            Some(v) => {
                low = low.max(v - width);
                high = high.min(v + width);
            }
            None => (low, high) = (f64::INFINITY, f64::NEG_INFINITY),
        };
        if let Some(w) = rule.within {
            band(w);
        }
        if let Some(r) = rule.within_rel {
            band(r * value.map_or(0.0, f64::abs));
        }
        if let Some(m) = rule.at_most {
            high = high.min(m);
        }
        if let Some(m) = rule.at_least {
            low = low.max(m);
        }
        (low, high)
    }

    /// Whether the rule judges every measurement in `[low, high]` alike: a quantity known only
    /// between two proven bounds (a solver's incumbent and its dual bound) decides the claim
    /// only when the whole interval agrees or the whole interval disagrees.
    pub fn decided_between(&self, low: f64, high: f64, value: Option<f64>) -> bool {
        let (a, b) = self.agreeing_interval(value);
        let all_agree = a <= low && high <= b;
        let none_agrees = a > b || high < a || low > b;
        all_agree || none_agrees
    }

    /// The rule in words, e.g. "within 10 of 41.3" or "at most 1".
    pub fn describe(&self, value: Option<f64>, unit: &str) -> String {
        let v = |x: f64| format!("{}{}", trim_number(x), unit_suffix(unit));
        let mut parts = Vec::new();
        let value_txt = value.map(v).unwrap_or_else(|| "the claim".into());
        if self.is_empty() {
            parts.push(format!(
                "within {}% of {value_txt}",
                trim_number(DEFAULT_WITHIN_REL * 100.0)
            ));
        }
        if let Some(w) = self.within {
            let by = if unit == "%" {
                format!("{} percentage points", trim_number(w))
            } else {
                v(w)
            };
            parts.push(format!("within {by} of {value_txt}"));
        }
        if let Some(r) = self.within_rel {
            parts.push(format!("within {}% of {value_txt}", trim_number(r * 100.0)));
        }
        if let Some(m) = self.at_most {
            parts.push(format!("at most {}", v(m)));
        }
        if let Some(m) = self.at_least {
            parts.push(format!("at least {}", v(m)));
        }
        parts.join(" and ")
    }
}

/// `x` with at most 4 decimals and no trailing zeros ("41.3", "0.5", "2"); a nonzero `x`
/// that 4 decimals would round to 0 in scientific notation ("1e-6", "2.5e-5"), so that a
/// bound such as "at most 1e-6" never reads "at most 0".
pub fn trim_number(x: f64) -> String {
    if x != 0.0 && x.abs() < 5e-5 {
        return format!("{x:e}");
    }
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// The unit as it follows a number: "%" and "x" attached, others after a space.
pub fn unit_suffix(unit: &str) -> String {
    match unit {
        "" => String::new(),
        "%" | "x" | "×" => unit.to_string(),
        u => format!(" {u}"),
    }
}

/// How our measurement stands against a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Ours satisfies the claim's rule.
    Agree,
    /// Ours was measured and does not satisfy the rule.
    Disagree,
    /// No measurement of ours answers the claim (not run, not finished, another scale).
    NotComparable,
}

impl Verdict {
    /// "agree", "disagree" or "not comparable".
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Agree => "agree",
            Verdict::Disagree => "disagree",
            Verdict::NotComparable => "not comparable",
        }
    }

    /// The verdict of `ours` (None: not measured) against `claim`.
    pub fn of(claim: &SourceClaim, ours: Option<f64>) -> Verdict {
        match ours {
            _ if claim.not_comparable.is_some() => Verdict::NotComparable,
            Some(x) if x.is_finite() => {
                if claim.agree.holds(x, claim.value) {
                    Verdict::Agree
                } else {
                    Verdict::Disagree
                }
            }
            _ => Verdict::NotComparable,
        }
    }
}

/// A metric of one configuration of a training study that a claim can name
/// (`measure = "<metric>"` with `config = { ... }`, or `measure = "<configuration>.<metric>"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainingMetric {
    /// Peak allocated memory, GiB.
    PeakGib,
    /// Peak-memory reduction against the control, percent.
    ReductionPct,
    /// Median step time over the control's (x).
    StepTimeRatio,
    /// The control's median step time over this configuration's (x): above 1 is faster.
    Speedup,
    /// Training throughput, sequences per second.
    SamplesPerS,
    /// Evaluation perplexity.
    Perplexity,
    /// Evaluation perplexity over the control's (x).
    PerplexityRatio,
    /// The largest batch that trains under the study's memory limit over the control's (x):
    /// a study with a largest-input search (`[params.search]`) only.
    LargestBatchRatio,
    /// The largest sequence length that trains under the study's memory limit over the
    /// control's (x): a study with a largest-input search only.
    LargestSeqLenRatio,
    /// Whether the step's peak falls in a forward phase of its memory timeline: 1 in the
    /// embedding, a block's forward or the head's forward and loss; 0 in a backward phase or
    /// the optimizer step ([`crate::timeline::Phase::is_forward`]).
    PeakInForward,
}

impl TrainingMetric {
    /// Every metric with its name in a `measure`.
    pub const ALL: [(&'static str, TrainingMetric); 10] = [
        ("peak_gib", TrainingMetric::PeakGib),
        ("reduction_pct", TrainingMetric::ReductionPct),
        ("step_time_ratio", TrainingMetric::StepTimeRatio),
        ("speedup", TrainingMetric::Speedup),
        ("samples_per_s", TrainingMetric::SamplesPerS),
        ("perplexity", TrainingMetric::Perplexity),
        ("perplexity_ratio", TrainingMetric::PerplexityRatio),
        ("largest_batch_ratio", TrainingMetric::LargestBatchRatio),
        ("largest_seq_len_ratio", TrainingMetric::LargestSeqLenRatio),
        ("peak_in_forward", TrainingMetric::PeakInForward),
    ];

    /// The metric named `name`.
    pub fn parse(name: &str) -> Option<TrainingMetric> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
    }

    /// The metric's name in a `measure` (`"reduction_pct"`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| *n)
    }

    /// The unit our value is printed in.
    pub fn unit(self) -> &'static str {
        match self {
            TrainingMetric::PeakGib => "GiB",
            TrainingMetric::ReductionPct => "%",
            TrainingMetric::StepTimeRatio
            | TrainingMetric::Speedup
            | TrainingMetric::PerplexityRatio
            | TrainingMetric::LargestBatchRatio
            | TrainingMetric::LargestSeqLenRatio => "x",
            TrainingMetric::SamplesPerS => "samples/s",
            TrainingMetric::Perplexity | TrainingMetric::PeakInForward => "",
        }
    }

    /// Where the metric's value comes from: every one is read from, or computed from, the
    /// records of real training runs (the allocator's peak, the step timer, the evaluation
    /// loss, the largest-input search's runs).
    pub fn provenance(self) -> crate::spec::provenance::Provenance {
        use crate::spec::provenance::Provenance::{Derived, Measured};
        match self {
            TrainingMetric::PeakGib => Measured(
                "peak allocated bytes of the training step, from the backend's allocator (exact, \
                 or a lower bound where the report's tables say so)"
                    .into(),
            ),
            TrainingMetric::ReductionPct => Derived(
                "100 x (1 - peak allocated / the control's peak allocated), both measured".into(),
            ),
            TrainingMetric::StepTimeRatio => Derived(
                "median timed step time / the control's median timed step time (wall clock, \
                 after warm-up steps)"
                    .into(),
            ),
            TrainingMetric::Speedup => Derived(
                "the control's median timed step time / this configuration's (wall clock)".into(),
            ),
            TrainingMetric::SamplesPerS => {
                Derived("batch / median timed step time (wall clock, after warm-up steps)".into())
            }
            TrainingMetric::Perplexity => {
                Measured("exp(mean evaluation cross-entropy) of the trained model".into())
            }
            TrainingMetric::PerplexityRatio => Derived(
                "evaluation perplexity / the control's (same optimizer), both measured".into(),
            ),
            TrainingMetric::PeakInForward => Measured(
                "the phase of the step's memory timeline (the allocator sampled per phase) that \
                 holds the step's peak: 1 for a forward phase, 0 for backward or the optimizer step"
                    .into(),
            ),
            TrainingMetric::LargestBatchRatio | TrainingMetric::LargestSeqLenRatio => Derived(
                "largest size that trained under the memory limit / the control's, each found by \
                 real training steps at growing sizes"
                    .into(),
            ),
        }
    }

    /// Whether the metric is taken against another configuration (the control, or a claim's
    /// [`SourceClaim::against`]): a reduction or a ratio.
    pub fn relative(self) -> bool {
        matches!(
            self,
            TrainingMetric::ReductionPct
                | TrainingMetric::StepTimeRatio
                | TrainingMetric::Speedup
                | TrainingMetric::PerplexityRatio
        )
    }

    /// [`TrainingMetric::provenance`] of a relative metric ([`TrainingMetric::relative`])
    /// taken against configuration `against` instead of the control.
    pub fn provenance_against(self, against: &str) -> crate::spec::provenance::Provenance {
        use crate::spec::provenance::Provenance::Derived;
        let a = format!("`{against}`");
        match self {
            TrainingMetric::ReductionPct => Derived(format!(
                "100 x (1 - peak allocated / {a}'s peak allocated), both measured in one group"
            )),
            TrainingMetric::StepTimeRatio => Derived(format!(
                "median timed step time / {a}'s (wall clock, after warm-up steps): the median \
                 over the repeats both ran of the ratio within one repeat (interleaved runs, a \
                 paired design), else the ratio of the two medians"
            )),
            TrainingMetric::Speedup => Derived(format!(
                "{a}'s median timed step time / this configuration's (wall clock): the median \
                 over the repeats both ran of the ratio within one repeat, else the ratio of the \
                 two medians"
            )),
            TrainingMetric::PerplexityRatio => Derived(format!(
                "evaluation perplexity / {a}'s, both measured in one group"
            )),
            other => other.provenance(),
        }
    }

    /// Decimals our value is printed with.
    pub fn decimals(self) -> usize {
        match self {
            TrainingMetric::PeakGib | TrainingMetric::SamplesPerS => 3,
            TrainingMetric::ReductionPct | TrainingMetric::Perplexity => 1,
            TrainingMetric::StepTimeRatio
            | TrainingMetric::Speedup
            | TrainingMetric::LargestBatchRatio
            | TrainingMetric::LargestSeqLenRatio => 2,
            TrainingMetric::PerplexityRatio => 3,
            TrainingMetric::PeakInForward => 0,
        }
    }
}

/// A metric of a checkpoint-interval sweep of a training study that a claim can name
/// (`sweep = { model = "deep", fused_optimizer = true }` with `measure = "<metric>"`: the
/// configurations with those fields at every `checkpoint`, [`SourceClaim::sweep`]).
///
/// Each is computed from the sweep's activation peak `y(K)` = peak allocated − steady state
/// (bytes live at the start of the step: parameters, optimizer state, batch), the memory the
/// slide's O(N/K) + O(K) is about, and from its least-squares fit
/// `y(K) = a * ceil(N / K) + b * K + c` (N layers; `ceil(N / K)` segments, each keeping its
/// input) with relative residuals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepMetric {
    /// Root-mean-square relative error of the fit over the sweep (%). A fit whose `a` or `b`
    /// is not positive does not have the claimed shape: the claim then disagrees whatever the
    /// error.
    FitRmsPct,
    /// How much more the measured peak is at the interval the fit puts lowest (of the sweep's
    /// intervals) than the measured minimum (%): 0 when the fit finds the measured best K.
    FitKExcessPct,
    /// How much more the measured peak is at K = ceil(sqrt(N)) than the measured minimum (%):
    /// 0 when sqrt(N) is the best interval.
    SqrtNExcessPct,
    /// How far the measured minimum lies below the lower of the two ends, K = 1 and K = N (%):
    /// 0 for a curve without a minimum inside.
    UDepthPct,
}

impl SweepMetric {
    /// Every sweep metric with its name in a `measure`.
    pub const ALL: [(&'static str, SweepMetric); 4] = [
        ("fit_rms_pct", SweepMetric::FitRmsPct),
        ("fit_k_excess_pct", SweepMetric::FitKExcessPct),
        ("sqrt_n_excess_pct", SweepMetric::SqrtNExcessPct),
        ("u_depth_pct", SweepMetric::UDepthPct),
    ];

    /// The metric named `name`.
    pub fn parse(name: &str) -> Option<SweepMetric> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
    }

    /// The metric's name in a `measure` (`"fit_rms_pct"`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| *n)
    }

    /// Where the metric's value comes from: derived from the measured activation peaks of the
    /// sweep's training runs (and their fit).
    pub fn provenance(self) -> crate::spec::provenance::Provenance {
        use crate::spec::provenance::Provenance::Derived;
        let peaks = "y(K) = peak allocated - steady state, measured per training run";
        Derived(match self {
            SweepMetric::FitRmsPct => format!(
                "RMS relative error of the least-squares fit y(K) = a ceil(N/K) + b K + c; {peaks}"
            ),
            SweepMetric::FitKExcessPct => {
                format!("100 x (y at the fit's lowest K / min y - 1); {peaks}")
            }
            SweepMetric::SqrtNExcessPct => {
                format!("100 x (y(ceil(sqrt N)) / min y - 1); {peaks}")
            }
            SweepMetric::UDepthPct => {
                format!("100 x (1 - min y / min(y(1), y(N))); {peaks}")
            }
        })
    }
}

/// A passage as the attribution check compares it: Markdown emphasis, code and escape marks
/// and LaTeX math delimiters (`*`, `_`, `` ` ``, `\`, `$`) removed, typographic quotes and dashes made plain, and every run
/// of whitespace collapsed to one space.
pub fn normalize_quote(text: &str) -> String {
    let plain: String = text
        .chars()
        .filter(|c| !matches!(c, '*' | '_' | '`' | '\\' | '$'))
        .map(|c| match c {
            '\u{2018}' | '\u{2019}' => '\'',
            '\u{201c}' | '\u{201d}' => '"',
            '\u{2013}' | '\u{2014}' => '-',
            c => c,
        })
        .collect();
    plain.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `quote` occurs in `document` once both are normalized ([`normalize_quote`]).
pub fn quote_occurs(quote: &str, document: &str) -> bool {
    let q = normalize_quote(quote);
    !q.is_empty() && normalize_quote(document).contains(&q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(value: Option<f64>, agree: AgreeRule) -> SourceClaim {
        SourceClaim {
            id: "c".into(),
            quote: "q".into(),
            location: "w".into(),
            value,
            unit: Some("%".into()),
            derived: None,
            measure: "a.reduction_pct".into(),
            agree,
            not_comparable: None,
            about: Default::default(),
            band: None,
            source: None,
            profile: None,
            twin: None,
            config: None,
            sweep: None,
            against: None,
        }
    }

    #[test]
    fn every_bounded_rule_has_a_case_on_each_side() {
        let rule = |toml: &str| -> AgreeRule { toml::from_str(toml).unwrap() };
        for (r, value) in [
            (rule("within = 10.0"), Some(41.3)),
            (rule("within_rel = 0.01"), Some(10.0)),
            (rule("at_most = 0.0"), None),
            (rule("at_least = 0.99\nat_most = 1.01"), None),
            (rule("at_least = 5.1"), Some(5.1)),
            (rule(""), Some(2.0)),
        ] {
            let (yes, no) = r.cases(value).expect("cases");
            assert!(r.holds(yes, value) && !r.holds(no, value), "{r:?}");
        }
        // A ratio of integers found by a search moves in steps: 20/4 = 5.0 against "at least
        // 5.1" is one step (1/4) from agreeing, so it decides nothing; 40/4 decides.
        let at_least = rule("at_least = 5.1");
        assert!(!at_least.decided_within(5.0, Some(5.1), 0.25));
        assert!(at_least.decided_within(10.0, Some(5.1), 0.25));
        assert!(at_least.decided_within(5.0, Some(5.1), 0.05));
        // No value for a relative rule: nothing agrees; no bound at all: nothing disagrees.
        assert_eq!(rule("within_rel = 0.1").cases(None), None);
        assert_eq!(rule("").cases(None), None);
    }

    /// A quantity known between two bounds decides a rule only when the rule judges the whole
    /// interval alike, for a bound and for a band.
    #[test]
    fn bounds_decide_only_when_the_rule_judges_them_alike() {
        let at_least = AgreeRule {
            at_least: Some(50.0),
            ..AgreeRule::default()
        };
        assert!(at_least.decided_between(50.0, 80.0, None));
        assert!(at_least.decided_between(10.0, 42.0, None));
        assert!(!at_least.decided_between(33.0, 50.0, None));
        let band = AgreeRule {
            within: Some(1.0),
            ..AgreeRule::default()
        };
        // Both ends outside the band, on either side: the band lies between them.
        assert!(!band.decided_between(0.0, 10.0, Some(5.0)));
        assert!(band.decided_between(4.5, 5.5, Some(5.0)));
        assert!(band.decided_between(7.0, 9.0, Some(5.0)));
        // A band with no value agrees with nothing: every interval disagrees.
        assert!(band.decided_between(0.0, 10.0, None));
        // The interval matches holds() at its ends.
        for x in [3.9, 4.0, 5.0, 6.0, 6.1] {
            let (a, b) = band.agreeing_interval(Some(5.0));
            assert_eq!(band.holds(x, Some(5.0)), a <= x && x <= b, "{x}");
        }
    }

    #[test]
    fn rules_decide_agree_and_disagree() {
        let within = AgreeRule {
            within: Some(10.0),
            ..Default::default()
        };
        assert_eq!(
            Verdict::of(&claim(Some(41.3), within), Some(35.0)),
            Verdict::Agree
        );
        assert_eq!(
            Verdict::of(&claim(Some(41.3), within), Some(20.0)),
            Verdict::Disagree
        );
        assert_eq!(
            Verdict::of(&claim(Some(41.3), within), None),
            Verdict::NotComparable
        );
        let at_most = AgreeRule {
            at_most: Some(1.0),
            ..Default::default()
        };
        assert_eq!(
            Verdict::of(&claim(None, at_most), Some(0.5)),
            Verdict::Agree
        );
        assert_eq!(
            Verdict::of(&claim(None, at_most), Some(1.5)),
            Verdict::Disagree
        );
        // No rule: within 10% of the value.
        let none = AgreeRule::default();
        assert_eq!(
            Verdict::of(&claim(Some(2.0), none), Some(2.15)),
            Verdict::Agree
        );
        assert_eq!(
            Verdict::of(&claim(Some(2.0), none), Some(2.5)),
            Verdict::Disagree
        );
        // A relative rule without a value cannot hold.
        assert_eq!(
            Verdict::of(&claim(None, none), Some(2.0)),
            Verdict::Disagree
        );
        let mut nc = claim(Some(2.0), none);
        nc.not_comparable = Some("another scale".into());
        assert_eq!(Verdict::of(&nc, Some(2.0)), Verdict::NotComparable);
    }

    #[test]
    fn rules_read_as_words() {
        let r = AgreeRule {
            within: Some(10.0),
            at_most: Some(50.0),
            ..Default::default()
        };
        assert_eq!(
            r.describe(Some(41.3), "%"),
            "within 10 percentage points of 41.3% and at most 50%"
        );
        assert_eq!(
            AgreeRule::default().describe(Some(2.0), "x"),
            "within 10% of 2x"
        );
    }

    #[test]
    fn quotes_match_through_markdown_and_whitespace() {
        let doc =
            "1. **BFloat16** achieved 41.3% memory reduction while\n**doubling training speed**";
        assert!(quote_occurs(
            "BFloat16 achieved 41.3% memory reduction while doubling training speed",
            doc
        ));
        assert!(!quote_occurs("BFloat16 achieved 42% memory reduction", doc));
        assert!(!quote_occurs("  ", doc));
    }

    /// The claims' forms against a grid's configurations: `cknone`, `ck3`, `cksqrt` of the
    /// profile's model and `deep-ck*-f32-fusedopt` of the deep one.
    fn grid() -> Vec<crate::spec::ConfigSpec> {
        use crate::spec::{CheckpointSpec, ConfigSpec};
        let mut out = Vec::new();
        for (deep, fo) in [(false, false), (true, true)] {
            for k in [
                CheckpointSpec::None,
                CheckpointSpec::Every(3),
                CheckpointSpec::Sqrt,
            ] {
                let prefix = if deep { "deep-" } else { "" };
                out.push(ConfigSpec {
                    name: format!("{prefix}ck{k}-f32{}", if fo { "-fusedopt" } else { "" }),
                    model: deep.then(|| "deep".to_string()),
                    checkpoint: k,
                    fused_optimizer: fo,
                    ..ConfigSpec::default()
                });
            }
        }
        out
    }

    fn with(measure: &str, fields: &str) -> SourceClaim {
        let mut c: SourceClaim = toml::from_str(&format!(
            "id = \"c\"\nquote = \"q\"\nwhere = \"w\"\nmeasure = \"{measure}\"\n{fields}"
        ))
        .unwrap();
        c.measure = measure.into();
        c
    }

    #[test]
    fn a_claim_picks_its_configuration_or_sweep_by_fields() {
        use crate::spec::CheckpointSpec;
        let configs = grid();
        let claim = with("step_time_ratio", "config = { checkpoint = \"sqrt\" }");
        match claim.training_target(&configs) {
            Ok(TrainingTarget::Config(c, TrainingMetric::StepTimeRatio)) => {
                assert_eq!(c.name, "cksqrt-f32")
            }
            other => panic!("{other:?}"),
        }
        let claim = with(
            "u_depth_pct",
            "sweep = { model = \"deep\", fused_optimizer = true }",
        );
        let Ok(TrainingTarget::Sweep(sweep, SweepMetric::UDepthPct)) =
            claim.training_target(&configs)
        else {
            panic!("{:?}", claim.training_target(&configs));
        };
        let members: Vec<CheckpointSpec> = configs
            .iter()
            .filter_map(|c| sweep.sweep_member(c))
            .collect();
        assert_eq!(members, [CheckpointSpec::Every(3), CheckpointSpec::Sqrt]);
        // A named [[configs]] entry keeps the `<configuration>.<metric>` form.
        let claim = with("ck3-f32.reduction_pct", "");
        assert!(matches!(
            claim.training_target(&configs),
            Ok(TrainingTarget::Config(c, TrainingMetric::ReductionPct)) if c.name == "ck3-f32"
        ));
        assert_eq!(
            claim.training_provenance(),
            Some(TrainingMetric::ReductionPct.provenance())
        );
        assert_eq!(
            with("fit_rms_pct", "sweep = { model = \"deep\" }").training_provenance(),
            Some(SweepMetric::FitRmsPct.provenance())
        );
    }

    #[test]
    fn a_wrong_selector_is_named_with_its_fix() {
        let configs = grid();
        for (measure, fields, says) in [
            (
                "step_time_ratio",
                "config = { checkpoint = 8 }",
                "matches no configuration",
            ),
            (
                "step_time_ratio",
                "config = { checkpoint = 3 }\nsweep = { model = \"deep\" }",
                "not both",
            ),
            (
                "fit_rms_pct",
                "sweep = { checkpoint = 3 }",
                "the field a sweep varies",
            ),
            (
                "step_time_ratio",
                "sweep = { model = \"deep\" }",
                "not a sweep metric",
            ),
            (
                "fit_rms_pct",
                "config = { checkpoint = 3 }",
                "not a training metric",
            ),
            ("nodot", "", "expected `<configuration>.<metric>`"),
            ("control.bogus", "", "expected `<configuration>.<metric>`"),
            (
                "ck12-f32.reduction_pct",
                "",
                "`ck12-f32` is not a configuration",
            ),
        ] {
            let err = with(measure, fields).training_target(&configs).unwrap_err();
            assert!(err.contains(says), "{measure} {fields}: {err}");
        }
        let mut twice = grid();
        twice.push(crate::spec::ConfigSpec {
            name: "again".into(),
            checkpoint: crate::spec::CheckpointSpec::Every(3),
            ..Default::default()
        });
        let err = with("step_time_ratio", "config = { checkpoint = 3 }")
            .training_target(&twice)
            .unwrap_err();
        assert!(
            err.contains("matches 2 configurations (ck3-f32, again)"),
            "{err}"
        );
        assert_eq!(trim_number(41.30), "41.3");
        assert_eq!(trim_number(2.0), "2");
        assert_eq!(trim_number(1e-6), "1e-6");
        assert_eq!(trim_number(-2.5e-5), "-2.5e-5");
        assert_eq!(trim_number(0.0001), "0.0001");
        assert_eq!(trim_number(0.0), "0");
    }
}
