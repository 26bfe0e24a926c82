//! A bundle's run plan: every step `run.sh` runs (memwall jobs, their PyTorch twins, the
//! attribution benchmark, the fusion chains), in the order that answers most, cut into tiers
//! that each fit one GPU-session command, written to `plan.tsv` beside `run.sh`.
//!
//! GPU time is scarce and a session can end inside any step, so every step has a [`Stage`] and
//! the plan runs the stages in order, each memwall row followed at once by its PyTorch eager
//! twin (a twin measured in a later session on another GPU model never pairs: the report pairs
//! rows of one device model only):
//!
//! 1. the first study's **source rows** (configurations with a `claim` that train with the
//!    optimizer of the study's first control, i.e. the source's optimizer) with their twins,
//!    compiled ones (`torch.compile`, memory budgets) at the stage's end;
//! 2. the rows a later study's **claims measure** (`checkpoint_interval`'s deep sweep);
//! 3. each later study's **unfused rows**, f32 before 16-bit, in suite order;
//! 4. the **kernel-fusion rows** of every study;
//! 5. the attribution benchmark and `fusion_ir`'s chains;
//! 6. **last**: the first study's other rows (AdamW), Checkmate rows and the remaining compiled
//!    twins.
//!
//! With a budget (a GPU bundle: one command's minutes), the ordered steps are packed into
//! tiers of at most that many expected seconds, so that every command finishes at least a tier;
//! without one, each stage is a tier. `run.sh` packs what finished after every step, so a
//! session cut short keeps every finished row ([`super::script`]).
//!
//! May import: `super` (the bundle's types), `crate::spec`.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The plan file beside `run.sh`.
pub const PLAN_FILE: &str = "plan.tsv";

/// What a step answers, in the order the plan runs them (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The first study's source rows and their twins.
    SourceRows,
    /// Rows a later study's claims measure.
    Claimed,
    /// A later study's unfused rows (f32 first).
    Unfused,
    /// Kernel-fusion rows.
    Fusion,
    /// The attribution benchmark and the fusion chains.
    Extras,
    /// The first study's other rows, Checkmate rows, the remaining compiled twins.
    Last,
}

impl Stage {
    /// The stage's words in a tier's title.
    pub fn title(self) -> &'static str {
        match self {
            Stage::SourceRows => "the source's rows with their PyTorch twins",
            Stage::Claimed => "the rows the claims measure",
            Stage::Unfused => "the unfused rows, f32 then 16-bit",
            Stage::Fusion => "the kernel-fusion rows",
            Stage::Extras => "the attribution benchmark and the fusion chains",
            Stage::Last => "the other optimizer's rows, Checkmate rows and compiled twins",
        }
    }
}

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
    /// Where the job runs in the plan.
    pub stage: Stage,
    /// Order inside the stage (lower first; e.g. 0 for f32, 1 for 16-bit).
    pub sub: u8,
    /// The kernels it compiles and tunes on a GPU (`export::kernel_kind`); `None` on the CPU.
    pub kernels: Option<String>,
    /// Seconds of `expected_s` that are its kind's cold start (CubeCL's JIT compilation and
    /// autotuning), 0 for a job estimated warm.
    pub cold_s: f64,
}

/// A PyTorch twin row of the bundle.
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
    /// The stage of its memwall row (also when that row is stored and not bundled): an eager
    /// twin runs right after its row, a compiled one at the end of the source rows' stage or
    /// last.
    pub stage: Stage,
    /// Its row's order inside the stage.
    pub sub: u8,
    /// Seconds of `expected_s` that only a fresh Python process pays (Python, `import torch`,
    /// the CUDA context): a twin after the first of its tier runs in the tier's shared process
    /// and is planned without them. 0 where every twin has its own process (the CPU).
    pub start_s: f64,
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
        /// Expected seconds, its kind's cold start included when it is the first job of the
        /// kind in run order.
        expected_s: f64,
        /// The kernels it compiles and tunes on a GPU; `None` on the CPU (and in manifests
        /// written before it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kernels: Option<String>,
        /// Seconds of `expected_s` that are its kind's cold start: the first job of a kind in
        /// run order carries it, run.sh moves it to the next job of the kind when this one
        /// does not run.
        #[serde(default)]
        cold_s: f64,
    },
    /// A PyTorch twin row, `reference/results/<study>.<config>.json`.
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

/// Where a step sorts in the plan: (stage, study, sub, position in the bundle, 0 for a row and 1
/// for its twin).
type PlanKey = (Stage, usize, u8, usize, u8);

/// Puts each kernel kind's cold start on the first job of the kind in run order (`keyed`,
/// sorted): the estimates put it on the first in bundle order, which the stages reorder. A
/// kind's cold start is the largest any of its jobs carried (none for a kind whose jobs are all
/// estimated from their own records, which hold it).
fn move_cold_starts(keyed: &mut [(PlanKey, Step, f64)]) {
    let mut cold: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    for (_, step, _) in keyed.iter() {
        if let Step::Job {
            kernels: Some(k),
            cold_s,
            ..
        } = step
        {
            let c = cold.entry(k.clone()).or_insert(0.0);
            *c = c.max(*cold_s);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (_, step, _) in keyed.iter_mut() {
        if let Step::Job {
            kernels: Some(k),
            cold_s,
            expected_s,
            ..
        } = step
        {
            let owed = if seen.insert(k.clone()) {
                cold[k.as_str()]
            } else {
                0.0
            };
            *expected_s = (*expected_s - *cold_s).max(0.0) + owed;
            *cold_s = owed;
        }
    }
}

/// `jobs/queue.tsv` of a bundle planned as `tiers`: every job in run order with its expected
/// seconds as the plan has them (the runner's deadline check reads them).
pub fn queue_tsv(tiers: &[Tier]) -> String {
    let mut s = String::from(
        "# memwall bundle: the jobs and their expected seconds (run.sh runs them in plan.tsv's order)\n",
    );
    for t in tiers {
        for step in &t.steps {
            if let Step::Job {
                study,
                key,
                expected_s,
                ..
            } = step
            {
                let _ = writeln!(s, "{study}/{key}\t{:.0}", expected_s.ceil());
            }
        }
    }
    s
}

/// A tier being filled: its stages, the studies of its rows, its steps and their expected
/// seconds.
type TierDraft = (Vec<Stage>, Vec<String>, Vec<Step>, f64);

/// The tiers of a bundle with `jobs` (bundle order: studies in order, each study's jobs in file
/// order), PyTorch rows `torch` and `extras`: the steps in stage order (stable inside a stage:
/// studies in bundle order, then `sub`, then file order), each eager twin right after its row;
/// then cut into tiers of at most `budget_s` expected seconds (a step longer than that alone
/// in its tier), or one tier per stage without a budget. A twin after the first of its tier is
/// planned without its [`PlannedTorch::start_s`] (run.sh runs a tier's twins in one Python
/// process on CUDA); the first keeps it, as a tier may open a command. Tiers are numbered
/// from 1.
pub fn tiers(
    jobs: &[PlannedJob],
    torch: &[PlannedTorch],
    extras: &Extras,
    budget_s: Option<f64>,
) -> Vec<Tier> {
    let mut studies: Vec<&str> = Vec::new();
    for name in jobs
        .iter()
        .map(|j| j.study.as_str())
        .chain(torch.iter().map(|t| t.study.as_str()))
    {
        if !studies.contains(&name) {
            studies.push(name);
        }
    }
    let study_index = |s: &str| studies.iter().position(|x| *x == s).unwrap_or(0);
    // (stage, study, sub, position in the bundle, second) -> step; `second` puts an eager twin
    // right after its row, and a twin whose row is not bundled where that row would be.
    // Each step with the seconds a shared Python process saves it (a twin's start; else 0).
    let mut keyed: Vec<(PlanKey, Step, f64)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let study = if j.stage == Stage::SourceRows {
            0
        } else {
            study_index(&j.study)
        };
        keyed.push((
            (j.stage, study, j.sub, i, 0),
            Step::Job {
                study: j.study.clone(),
                config: j.config.clone(),
                key: j.key.clone(),
                expected_s: j.expected_s,
                kernels: j.kernels.clone(),
                cold_s: j.cold_s,
            },
            0.0,
        ));
    }
    for (n, t) in torch.iter().enumerate() {
        let row = jobs
            .iter()
            .position(|j| j.study == t.study && j.config == t.config)
            .unwrap_or(jobs.len() + n);
        let study = if t.stage == Stage::SourceRows {
            0
        } else {
            study_index(&t.study)
        };
        let key = if !t.compiled {
            (t.stage, study, t.sub, row, 1)
        } else if t.stage == Stage::SourceRows {
            // Compiled twins of the source rows complete the stage's comparison.
            (t.stage, study, u8::MAX, row, 1)
        } else {
            (Stage::Last, study, u8::MAX, row, 1)
        };
        keyed.push((
            key,
            Step::Torch {
                study: t.study.clone(),
                config: t.config.clone(),
                expected_s: t.expected_s,
                compiled: t.compiled,
            },
            t.start_s,
        ));
    }
    let mut extra_steps = Vec::new();
    if let Some((job, burn_s, torch_s)) = &extras.attribution {
        extra_steps.push(Step::AttributionBurn {
            job: job.clone(),
            expected_s: *burn_s,
        });
        if let Some(t) = torch_s {
            extra_steps.push(Step::AttributionTorch {
                job: job.clone(),
                expected_s: *t,
            });
        }
    }
    if let Some(s) = extras.chains {
        extra_steps.push(Step::Chains { expected_s: s });
    }
    for (i, step) in extra_steps.into_iter().enumerate() {
        keyed.push(((Stage::Extras, 0, 0, i, 0), step, 0.0));
    }
    keyed.sort_by_key(|k| k.0);
    move_cold_starts(&mut keyed);
    // Per tier: its stages, the studies of its rows, its steps and their expected seconds.
    let mut groups: Vec<TierDraft> = Vec::new();
    let has_twin = |steps: &[Step]| steps.iter().any(|s| matches!(s, Step::Torch { .. }));
    for ((stage, ..), mut step, start_s) in keyed {
        // The step's seconds in a tier whose shared Python process a twin started already.
        let served = if start_s > 0.0 {
            (step.expected_s() - start_s).max(1.0)
        } else {
            step.expected_s()
        };
        let new_tier = match (groups.last(), budget_s) {
            (None, _) => true,
            (Some((stages, ..)), None) => stages.last() != Some(&stage),
            (Some((_, _, steps, total)), Some(budget)) => {
                let s = if has_twin(steps) {
                    served
                } else {
                    step.expected_s()
                };
                !steps.is_empty() && total + s > budget
            }
        };
        if new_tier {
            groups.push((Vec::new(), Vec::new(), Vec::new(), 0.0));
        }
        let g = groups.last_mut().expect("pushed above");
        if has_twin(&g.2) {
            if let Step::Torch { expected_s, .. } = &mut step {
                *expected_s = served;
            }
        }
        let s = step.expected_s();
        if g.0.last() != Some(&stage) {
            g.0.push(stage);
        }
        if let Step::Job { study, .. } | Step::Torch { study, .. } = &step {
            if !g.1.contains(study) {
                g.1.push(study.clone());
            }
        }
        g.2.push(step);
        g.3 += s;
    }
    groups
        .into_iter()
        .enumerate()
        .map(|(i, (stages, studies, steps, _))| {
            let what = stages
                .iter()
                .map(|s| s.title())
                .collect::<Vec<_>>()
                .join("; ");
            Tier {
                number: i + 1,
                title: if studies.is_empty() {
                    what
                } else {
                    format!("{what} ({})", studies.join(", "))
                },
                steps,
            }
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
///
/// preceded by one `left  STUDY  WHAT  REASON` line per row left out because the record store
/// already holds it (`left_out`: study, "memwall CONFIG" or "pytorch CONFIG", reason), which the
/// dry run lists.
pub fn plan_tsv(tiers: &[Tier], left_out: &[(String, String, String)]) -> String {
    let mut s = String::from(
        "# memwall run plan: run.sh runs these steps in order, packing after each; a job's\n\
         # expected seconds are read from jobs/queue.tsv when it lists the job.\n",
    );
    let clean = |t: &str| t.replace(['\t', '\n'], " ");
    for (study, what, why) in left_out {
        let _ = writeln!(s, "left\t{}\t{}\t{}", clean(study), clean(what), clean(why));
    }
    for t in tiers {
        let _ = writeln!(s, "tier\t{}\t{}", t.number, t.title);
        for step in &t.steps {
            let line = match step {
                Step::Job {
                    study,
                    config,
                    key,
                    expected_s,
                    kernels,
                    cold_s,
                } => format!(
                    "job\t{study}/{key}\t{config}\t{:.0}\t{}\t{:.0}",
                    expected_s.ceil(),
                    kernels.as_deref().map_or("-".to_string(), clean),
                    cold_s.ceil()
                ),
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

    fn job(study: &str, config: &str, stage: Stage, sub: u8) -> PlannedJob {
        PlannedJob {
            study: study.into(),
            config: config.into(),
            key: format!("{config}-key"),
            expected_s: 20.0,
            stage,
            sub,
            kernels: None,
            cold_s: 0.0,
        }
    }

    fn twin(study: &str, config: &str, compiled: bool, stage: Stage) -> PlannedTorch {
        PlannedTorch {
            study: study.into(),
            config: config.into(),
            expected_s: 30.0,
            compiled,
            stage,
            sub: 0,
            start_s: 0.0,
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

    fn example() -> (Vec<PlannedJob>, Vec<PlannedTorch>, Extras) {
        let jobs = vec![
            job("pm", "control_adafactor", Stage::SourceRows, 0),
            job("pm", "budget_adafactor", Stage::SourceRows, 0),
            job("pm", "control", Stage::Last, 0),
            job("ci", "k1-bf16", Stage::Unfused, 1),
            job("ci", "k1-f32", Stage::Unfused, 0),
            job("ci", "k1-f32-fused", Stage::Fusion, 0),
            job("ci", "deep-k1", Stage::Claimed, 0),
        ];
        let torch = vec![
            twin("pm", "control_adafactor", false, Stage::SourceRows),
            twin("pm", "budget_adafactor", true, Stage::SourceRows),
            // A twin whose memwall row is stored (not bundled): still planned in its stage.
            twin("pm", "stored_adafactor", true, Stage::SourceRows),
            twin("pm", "control", false, Stage::Last),
            twin("ci", "k1-f32", false, Stage::Unfused),
            twin("ci", "k1-f32-compiled", true, Stage::Unfused),
        ];
        let extras = Extras {
            attribution: Some((PathBuf::from("jobs/pm/x/job.json"), 240.0, Some(90.0))),
            chains: Some(60.0),
        };
        (jobs, torch, extras)
    }

    #[test]
    fn a_kinds_cold_start_is_carried_by_its_first_job_in_run_order() {
        // Bundle order: the Last-stage job first (its estimate took the kind's cold start),
        // then a source row of the same kind, which runs first; a second kind, and a CPU job.
        let mut late = job("s", "late", Stage::Last, 0);
        late.kernels = Some("k".into());
        late.expected_s = 120.0;
        late.cold_s = 100.0;
        let mut early = job("s", "early", Stage::SourceRows, 0);
        early.kernels = Some("k".into());
        let mut other = job("s", "other", Stage::Claimed, 0);
        other.kernels = Some("k2".into());
        other.expected_s = 70.0;
        other.cold_s = 50.0;
        let cpu = job("s", "cpu", Stage::Claimed, 1);
        let t = tiers(&[late, early, other, cpu], &[], &Extras::default(), None);
        let planned: Vec<(String, f64, f64)> = t
            .iter()
            .flat_map(|t| &t.steps)
            .filter_map(|s| match s {
                Step::Job {
                    config,
                    expected_s,
                    cold_s,
                    ..
                } => Some((config.clone(), *expected_s, *cold_s)),
                _ => None,
            })
            .collect();
        assert_eq!(
            planned,
            [
                ("early".to_string(), 120.0, 100.0),
                ("other".to_string(), 70.0, 50.0),
                ("cpu".to_string(), 20.0, 0.0),
                ("late".to_string(), 20.0, 0.0),
            ]
        );
        let plan = plan_tsv(&t, &[]);
        assert!(
            plan.contains("job\ts/early-key\tearly\t120\tk\t100\n")
                && plan.contains("job\ts/cpu-key\tcpu\t20\t-\t0\n"),
            "{plan}"
        );
        let queue = queue_tsv(&t);
        let lines: Vec<&str> = queue.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "s/early-key\t120",
                "s/other-key\t70",
                "s/cpu-key\t20",
                "s/late-key\t20"
            ]
        );
    }

    #[test]
    fn without_a_budget_each_stage_is_a_tier_in_stage_order() {
        let (jobs, torch, extras) = example();
        let t = tiers(&jobs, &torch, &extras, None);
        let all: Vec<Vec<String>> = t.iter().map(names).collect();
        assert_eq!(
            all,
            [
                vec![
                    "job control_adafactor",
                    "torch control_adafactor",
                    "job budget_adafactor",
                    "torch budget_adafactor",
                    "torch stored_adafactor"
                ],
                vec!["job deep-k1"],
                vec!["job k1-f32", "torch k1-f32", "job k1-bf16"],
                vec!["job k1-f32-fused"],
                vec!["attr-burn", "attr-torch", "chains"],
                vec!["job control", "torch control", "torch k1-f32-compiled"],
            ],
            "{t:?}"
        );
        assert_eq!(
            t.iter().map(|t| t.number).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        assert!(
            t[0].title.starts_with("the source's rows"),
            "{}",
            t[0].title
        );
        assert!(t[0].title.ends_with("(pm)"), "{}", t[0].title);
        assert_eq!(t[0].expected_s(), 20.0 + 30.0 + 20.0 + 30.0 + 30.0);
    }

    #[test]
    fn a_budget_packs_the_ordered_steps_into_tiers_that_each_fit_it() {
        let (jobs, torch, extras) = example();
        let t = tiers(&jobs, &torch, &extras, Some(100.0));
        for tier in &t {
            // The attribution benchmark alone is over the budget: alone in its tier.
            assert!(
                tier.expected_s() <= 100.0 || tier.steps.len() == 1,
                "tier {} is {} s: {t:?}",
                tier.number,
                tier.expected_s()
            );
        }
        let flat: Vec<String> = t.iter().flat_map(names).collect();
        let unbudgeted: Vec<String> = tiers(&jobs, &torch, &extras, None)
            .iter()
            .flat_map(names)
            .collect();
        assert_eq!(flat, unbudgeted, "the budget cuts, it does not reorder");
        // Tier 1: 20 + 30 + 20 = 70 s; the compiled twin (30 s) would make 100: fits exactly.
        assert_eq!(
            names(&t[0]),
            [
                "job control_adafactor",
                "torch control_adafactor",
                "job budget_adafactor",
                "torch budget_adafactor"
            ]
        );
        // A tier that spans two stages names both.
        let spanning = t.iter().find(|t| t.title.contains("; ")).expect("{t:?}");
        assert!(spanning.steps.len() > 1);
    }

    #[test]
    fn a_twin_after_the_first_of_its_tier_is_planned_without_the_process_start() {
        let (jobs, mut torch, extras) = example();
        for t in &mut torch {
            t.start_s = 15.0;
        }
        let twins = |t: &Tier| -> Vec<f64> {
            t.steps
                .iter()
                .filter(|s| matches!(s, Step::Torch { .. }))
                .map(Step::expected_s)
                .collect()
        };
        let t = tiers(&jobs, &torch, &extras, None);
        // Tier 1: three twins of 30 s; the second and third share the first one's process.
        assert_eq!(twins(&t[0]), [30.0, 15.0, 15.0], "{t:?}");
        assert_eq!(t[0].expected_s(), 20.0 + 30.0 + 20.0 + 15.0 + 15.0);
        // Each tier's first twin pays the start again (a tier may open a command).
        assert_eq!(twins(&t[2]), [30.0]);
        assert_eq!(twins(&t[5]), [30.0, 15.0]);
        // Where every twin has its own process (start 0) nothing changes.
        let own = tiers(&jobs, &example().1, &extras, None);
        assert_eq!(twins(&own[0]), [30.0, 30.0, 30.0]);
        // The budget counts the shared seconds: 20 + 30 + 20 + 15 + 15 = 100 fits one tier of
        // 100 s, where twins of their own processes (130 s) do not.
        let budgeted = tiers(&jobs, &torch, &extras, Some(100.0));
        assert_eq!(names(&budgeted[0]).len(), 5, "{budgeted:?}");
        let own = tiers(&jobs, &example().1, &extras, Some(100.0));
        assert_eq!(names(&own[0]).len(), 4, "{own:?}");
    }

    #[test]
    fn the_plan_file_lists_what_was_left_out_and_every_step() {
        let (jobs, torch, extras) = example();
        let t = tiers(&jobs, &torch, &extras, None);
        let left = vec![(
            "pm".to_string(),
            "memwall stored_adafactor".to_string(),
            "stored:\tok record".to_string(),
        )];
        let tsv = plan_tsv(&t, &left);
        assert!(
            tsv.contains("left\tpm\tmemwall stored_adafactor\tstored: ok record\n"),
            "{tsv}"
        );
        assert!(tsv.contains("tier\t1\tthe source's rows"), "{tsv}");
        assert!(tsv.contains("job\tpm/control_adafactor-key\tcontrol_adafactor\t20\t-\t0\n"));
        assert!(tsv.contains("torch\tpm\tbudget_adafactor\t30\tcompiled\n"));
        assert!(tsv.contains("attr-torch\tjobs/pm/x/job.json\t90\n"));
    }
}
