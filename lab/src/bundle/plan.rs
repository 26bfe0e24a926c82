//! A bundle's run plan: every step `run.sh` runs (memwall jobs, their PyTorch twins, the
//! attribution benchmark, the fusion chains), grouped in tiers in the order a GPU session runs
//! them, written to `plan.tsv` beside `run.sh`.
//!
//! GPU time is scarce and a session can end inside any step, so the plan puts first what
//! answers the source document at its own size, and pairs every memwall row with its PyTorch
//! twin at once (a twin measured in a later session on another GPU model never pairs: the report
//! pairs rows of one device model only):
//!
//! 1. the first study's **source rows** (configurations with a `claim` that train with the
//!    optimizer of the study's first control, i.e. the source's optimizer), each followed by its
//!    PyTorch **eager** twin;
//! 2. the compiled twins of tier 1 (`torch.compile`, memory budgets: 45-60 s of compilation
//!    each), then the first study's other rows, each followed by its twin;
//! 3. and on: each later study in bundle order (the suite: `checkpoint_interval`, then
//!    `mixed_precision`), rows and twins;
//! 4. last: the attribution benchmark and `fusion_ir`'s chains.
//!
//! `run.sh` packs what finished after every step, so a session cut short keeps every finished
//! row ([`super::script`]).
//!
//! May import: `super` (the bundle's types), `crate::spec`.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The plan file beside `run.sh`.
pub const PLAN_FILE: &str = "plan.tsv";

/// A memwall job of the bundle, as the plan sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedJob {
    /// `[study] name`.
    pub study: String,
    /// Configuration name.
    pub config: String,
    /// Job key (its folder under `jobs/<study>/`).
    pub key: String,
    /// Expected seconds on the target (as in `jobs/queue.tsv`).
    pub expected_s: f64,
    /// A source row: the configuration has a claim and trains with the optimizer of the study's
    /// first control.
    pub source_row: bool,
}

/// A PyTorch reference row of the bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTorch {
    /// The study.
    pub study: String,
    /// The configuration (the twin of the memwall job of this name).
    pub config: String,
    /// Expected seconds (compilation included).
    pub expected_s: f64,
    /// `torch.compile` (a compiled configuration or a memory budget).
    pub compiled: bool,
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// A memwall job, `jobs/<study>/<key>/`.
    Job {
        /// The study.
        study: String,
        /// The configuration.
        config: String,
        /// The job key.
        key: String,
        /// Expected seconds.
        expected_s: f64,
    },
    /// A PyTorch reference row, `reference/results/<study>.<config>.json`.
    Torch {
        /// The study.
        study: String,
        /// The configuration.
        config: String,
        /// Expected seconds.
        expected_s: f64,
        /// Whether the twin is compiled.
        compiled: bool,
    },
    /// The attribution benchmark's Burn side on a job file (relative to the bundle).
    AttributionBurn {
        /// The job file.
        job: PathBuf,
        /// Expected seconds.
        expected_s: f64,
    },
    /// The attribution benchmark's PyTorch side.
    AttributionTorch {
        /// The job file.
        job: PathBuf,
        /// Expected seconds.
        expected_s: f64,
    },
    /// `fusion_ir`'s elementwise chains.
    Chains {
        /// Expected seconds.
        expected_s: f64,
    },
}

impl Step {
    /// Expected seconds of the step.
    pub fn expected_s(&self) -> f64 {
        match self {
            Step::Job { expected_s, .. }
            | Step::Torch { expected_s, .. }
            | Step::AttributionBurn { expected_s, .. }
            | Step::AttributionTorch { expected_s, .. }
            | Step::Chains { expected_s } => *expected_s,
        }
    }
}

/// A tier: steps that run together, packed when each ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    /// 1 for the first tier.
    pub number: usize,
    /// What the tier holds, e.g. "the source's rows of peak_memory, each with its PyTorch eager
    /// twin".
    pub title: String,
    /// The steps in run order.
    pub steps: Vec<Step>,
}

impl Tier {
    /// Expected seconds of the whole tier.
    pub fn expected_s(&self) -> f64 {
        self.steps.iter().map(Step::expected_s).sum()
    }
}

/// The extras run after the studies: the attribution benchmark (job file, Burn seconds,
/// PyTorch seconds; PyTorch's side only with a reference script) and the chains' seconds.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// The attribution benchmark: its job file, Burn's and PyTorch's expected seconds (`None`
    /// for PyTorch when the bundle carries no reference).
    pub attribution: Option<(PathBuf, f64, Option<f64>)>,
    /// `fusion_ir`'s chains: expected seconds.
    pub chains: Option<f64>,
}

/// The tiers of a bundle with `jobs` (bundle order: studies in order, each study's jobs in file
/// order), PyTorch rows `torch` and `extras`. Empty tiers are left out and the others numbered
/// from 1.
pub fn tiers(jobs: &[PlannedJob], torch: &[PlannedTorch], extras: &Extras) -> Vec<Tier> {
    let mut studies: Vec<&str> = Vec::new();
    for j in jobs {
        if !studies.contains(&j.study.as_str()) {
            studies.push(&j.study);
        }
    }
    let twin = |j: &PlannedJob| {
        torch
            .iter()
            .find(|t| t.study == j.study && t.config == j.config)
    };
    let job_step = |j: &PlannedJob| Step::Job {
        study: j.study.clone(),
        config: j.config.clone(),
        key: j.key.clone(),
        expected_s: j.expected_s,
    };
    let torch_step = |t: &PlannedTorch| Step::Torch {
        study: t.study.clone(),
        config: t.config.clone(),
        expected_s: t.expected_s,
        compiled: t.compiled,
    };
    let mut out: Vec<(String, Vec<Step>)> = Vec::new();
    for (i, study) in studies.iter().enumerate() {
        let of: Vec<&PlannedJob> = jobs.iter().filter(|j| j.study == *study).collect();
        let mut first = Vec::new();
        let mut rest = Vec::new();
        let mut later_twins = Vec::new();
        let split = i == 0 && of.iter().any(|j| j.source_row);
        for j in &of {
            if split && j.source_row {
                first.push(job_step(j));
                match twin(j) {
                    Some(t) if !t.compiled => first.push(torch_step(t)),
                    Some(t) => later_twins.push(torch_step(t)),
                    None => {}
                }
            } else {
                rest.push(job_step(j));
                if let Some(t) = twin(j) {
                    rest.push(torch_step(t));
                }
            }
        }
        // PyTorch rows whose memwall job is not bundled still run (after the jobs).
        for t in torch.iter().filter(|t| t.study == *study) {
            if !of.iter().any(|j| j.config == t.config) {
                rest.push(torch_step(t));
            }
        }
        if split {
            out.push((
                format!("the source's rows of {study}, each with its PyTorch eager twin"),
                first,
            ));
            // The source rows' compiled twins first: they complete tier 1's comparison.
            later_twins.extend(rest);
            out.push((
                format!("the rest of {study}: the compiled PyTorch twins, then its other rows"),
                later_twins,
            ));
        } else {
            out.push((format!("{study}: every row with its PyTorch twin"), rest));
        }
    }
    let mut last = Vec::new();
    if let Some((job, burn_s, torch_s)) = &extras.attribution {
        last.push(Step::AttributionBurn {
            job: job.clone(),
            expected_s: *burn_s,
        });
        if let Some(t) = torch_s {
            last.push(Step::AttributionTorch {
                job: job.clone(),
                expected_s: *t,
            });
        }
    }
    if let Some(s) = extras.chains {
        last.push(Step::Chains { expected_s: s });
    }
    out.push((
        "the attribution benchmark and the fusion chains".to_string(),
        last,
    ));
    out.into_iter()
        .filter(|(_, steps)| !steps.is_empty())
        .enumerate()
        .map(|(i, (title, steps))| Tier {
            number: i + 1,
            title,
            steps,
        })
        .collect()
}

/// `plan.tsv`: a comment head, then per tier a `tier` line and one line per step, fields
/// separated by tabs (what `run.sh` reads):
///
/// - `tier  N  TITLE`
/// - `job  STUDY/KEY  CONFIG  EXPECTED_S`
/// - `torch  STUDY  CONFIG  EXPECTED_S  eager|compiled`
/// - `attr-burn  JOB_FILE  EXPECTED_S` and `attr-torch  JOB_FILE  EXPECTED_S`
/// - `chains  EXPECTED_S`
pub fn plan_tsv(tiers: &[Tier]) -> String {
    let mut s = String::from(
        "# memwall run plan: run.sh runs these steps in order, packing after each; a job's\n\
         # expected seconds are read from jobs/queue.tsv when it lists the job.\n",
    );
    for t in tiers {
        let _ = writeln!(s, "tier\t{}\t{}", t.number, t.title);
        for step in &t.steps {
            let line = match step {
                Step::Job {
                    study,
                    config,
                    key,
                    expected_s,
                } => format!("job\t{study}/{key}\t{config}\t{:.0}", expected_s.ceil()),
                Step::Torch {
                    study,
                    config,
                    expected_s,
                    compiled,
                } => format!(
                    "torch\t{study}\t{config}\t{:.0}\t{}",
                    expected_s.ceil(),
                    if *compiled { "compiled" } else { "eager" }
                ),
                Step::AttributionBurn { job, expected_s } => {
                    format!("attr-burn\t{}\t{:.0}", job.display(), expected_s.ceil())
                }
                Step::AttributionTorch { job, expected_s } => {
                    format!("attr-torch\t{}\t{:.0}", job.display(), expected_s.ceil())
                }
                Step::Chains { expected_s } => format!("chains\t{:.0}", expected_s.ceil()),
            };
            s.push_str(&line);
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(study: &str, config: &str, source_row: bool) -> PlannedJob {
        PlannedJob {
            study: study.into(),
            config: config.into(),
            key: format!("{config}-key"),
            expected_s: 20.0,
            source_row,
        }
    }

    fn twin(study: &str, config: &str, compiled: bool) -> PlannedTorch {
        PlannedTorch {
            study: study.into(),
            config: config.into(),
            expected_s: 30.0,
            compiled,
        }
    }

    fn names(t: &Tier) -> Vec<String> {
        t.steps
            .iter()
            .map(|s| match s {
                Step::Job { config, .. } => format!("job {config}"),
                Step::Torch { config, .. } => format!("torch {config}"),
                Step::AttributionBurn { .. } => "attr-burn".into(),
                Step::AttributionTorch { .. } => "attr-torch".into(),
                Step::Chains { .. } => "chains".into(),
            })
            .collect()
    }

    #[test]
    fn source_rows_come_first_each_followed_by_its_eager_twin() {
        let jobs = vec![
            job("pm", "control_adafactor", true),
            job("pm", "budget_adafactor", true),
            job("pm", "control", false),
            job("ci", "k1", false),
        ];
        let torch = vec![
            twin("pm", "control_adafactor", false),
            twin("pm", "budget_adafactor", true),
            twin("pm", "control", false),
        ];
        let extras = Extras {
            attribution: Some((PathBuf::from("jobs/pm/x/job.json"), 240.0, Some(90.0))),
            chains: Some(60.0),
        };
        let t = tiers(&jobs, &torch, &extras);
        assert_eq!(t.len(), 4, "{t:?}");
        assert_eq!(
            names(&t[0]),
            [
                "job control_adafactor",
                "torch control_adafactor",
                "job budget_adafactor"
            ]
        );
        assert_eq!(
            names(&t[1]),
            ["torch budget_adafactor", "job control", "torch control"]
        );
        assert_eq!(names(&t[2]), ["job k1"]);
        assert_eq!(names(&t[3]), ["attr-burn", "attr-torch", "chains"]);
        assert_eq!(t.iter().map(|t| t.number).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(t[0].expected_s(), 70.0);
        let tsv = plan_tsv(&t);
        assert!(tsv.contains("tier\t1\tthe source's rows of pm"), "{tsv}");
        assert!(tsv.contains("job\tpm/control_adafactor-key\tcontrol_adafactor\t20\n"));
        assert!(tsv.contains("torch\tpm\tbudget_adafactor\t30\tcompiled\n"));
        assert!(tsv.contains("attr-torch\tjobs/pm/x/job.json\t90\n"));
    }

    #[test]
    fn a_study_without_source_rows_is_one_tier_and_empty_tiers_are_left_out() {
        let jobs = vec![job("ci", "k1", false), job("ci", "k2", false)];
        let t = tiers(&jobs, &[twin("ci", "k2", false)], &Extras::default());
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(names(&t[0]), ["job k1", "job k2", "torch k2"]);
    }
}
