use super::*;
use crate::analysis::{study_table, JobRecord, Summary};
use crate::spec::CheckpointSpec;

/// A finished (or failed) run of `job` of `peak_memory`'s full profile with step time `s`.
fn run(job: &JobSpec, repeat: usize, step_s: f64, status: JobStatus, at: u32) -> JobRecord {
    let spec = JobSpec {
        repeat,
        ..job.clone()
    };
    let mut r = JobRecord::unfinished(&spec, status, String::new(), Default::default());
    r.finished_at = format!("2026-01-01T00:00:{at:02}Z");
    if status == JobStatus::Ok {
        r.reason = None;
        r.summary = Some(Summary {
            parameters: 1000,
            median_step_s: step_s,
            samples_per_s: 8.0 / step_s,
            tokens_per_s: 1024.0 / step_s,
            peak_allocated_bytes: 1 << 30,
            peak_reserved_bytes: 1 << 31,
            baseline_bytes: 0,
            final_train_loss: 3.0,
            eval_loss: 3.1,
            eval_perplexity: 22.2,
            mfu: None,
            peak_flops: None,
            wall_s: 10.0,
            steady_bytes: 1 << 29,
            estimated_activation_bytes: 1 << 28,
            time_to_first_measured_step_s: Some(2.0),
        });
    }
    r
}

/// Three runs each of `checkpoint_adafactor` (K = 1; 1.2, 1.3, 1.4 s) and of its control
/// (no checkpointing; 0.8, 1.0, 1.0 s), and a failed fourth run of the first.
fn synthetic() -> StudyRecords {
    let (_, jobs) = crate::test_support::peak_memory_full();
    let job = |name: &str| jobs.iter().find(|j| j.config == name).unwrap().clone();
    let (k1, control) = (job("checkpoint_adafactor"), job("control_adafactor"));
    let mut records = vec![run(&k1, 3, f64::NAN, JobStatus::Failed, 0)];
    for (i, (a, b)) in [(1.2, 0.8), (1.3, 1.0), (1.4, 1.0)].into_iter().enumerate() {
        records.push(run(&k1, i, a, JobStatus::Ok, 1 + i as u32));
        records.push(run(&control, i, b, JobStatus::Ok, 11 + i as u32));
    }
    StudyRecords {
        dir: "runs/synthetic".into(),
        records,
        unreadable: Vec::new(),
    }
}

fn goal(at_most: f64) -> Goal {
    Goal {
        label: "K = 1 / none".into(),
        metric: GoalMetric::MedianStepS,
        numerator: ConfigSelector {
            checkpoint: Some(CheckpointSpec::Every(1)),
            ..ConfigSelector::default()
        },
        denominator: ConfigSelector::default(),
        at_most,
    }
}

/// The rows of `records`' study table, each with its configuration in `peak_memory`'s file.
fn rows_with_configs(records: &StudyRecords) -> Vec<(ConfigSummary, ConfigSpec)> {
    let (study, _) = crate::test_support::peak_memory_full();
    let rows = config_summaries(&study_table(records).unwrap(), "synthetic").unwrap();
    rows.into_iter()
        .map(|r| {
            let cfg = study
                .configs
                .iter()
                .find(|c| c.name == r.config)
                .unwrap()
                .clone();
            (r, cfg)
        })
        .collect()
}

#[test]
fn a_goal_outcome_is_the_ratio_of_the_medians_with_the_ratio_of_their_intervals() {
    let records = synthetic();
    let rows = rows_with_configs(&records);
    assert_eq!(rows.len(), 2, "one row per configuration");
    let rows: Vec<(&ConfigSummary, &ConfigSpec)> = rows.iter().map(|(r, c)| (r, c)).collect();
    let goals = [goal(1.1), goal(1.5), goal(2.0)];
    let out = goal_outcomes(&rows, &goals, &RepeatRuns::new(&records));
    assert_eq!(out.len(), 3);
    for o in &out {
        assert_eq!(o.precision, crate::spec::Precision::F32);
        assert_eq!(
            o.optimizer,
            OptimizerKind::Adafactor,
            "the group's optimizer"
        );
        // The failed fourth run is not a sample.
        assert_eq!(o.runs, (3, 3));
        assert!((o.median - 1.3).abs() < 1e-12, "{}", o.median);
        let i = o.interval.expect("three runs per side give an interval");
        // [1.2 / 1.0, 1.4 / 0.8]: three samples give [min, max], covering 75% each.
        assert!(
            (i.lo - 1.2).abs() < 1e-12 && (i.hi - 1.75).abs() < 1e-12,
            "{i:?}"
        );
        assert!((i.coverage - 0.5625).abs() < 1e-12);
    }
    let verdicts: Vec<GoalVerdict> = out.iter().map(|o| o.verdict).collect();
    assert_eq!(
        verdicts,
        [
            GoalVerdict::Missed,
            GoalVerdict::Undecided,
            GoalVerdict::Met
        ],
        "below the interval, inside it, above it"
    );
    assert_eq!(joint_coverage(&out), Some(0.5625));
}

#[test]
fn a_goal_compares_configurations_of_one_optimizer_and_names_fields_it_varies() {
    let mut records = synthetic();
    let (_, jobs) = crate::test_support::peak_memory_full();
    let job = |name: &str| jobs.iter().find(|j| j.config == name).unwrap().clone();
    // AdamW's K = 1 at 3.0 s over its control at 1.0 s, and its fused optimizer step at 0.5 s.
    for (name, s, at) in [
        ("checkpoint", 3.0, 30),
        ("control", 1.0, 31),
        ("fused", 0.5, 32),
    ] {
        records
            .records
            .push(run(&job(name), 0, s, JobStatus::Ok, at));
    }
    let rows = rows_with_configs(&records);
    let rows: Vec<(&ConfigSummary, &ConfigSpec)> = rows.iter().map(|(r, c)| (r, c)).collect();
    let fused = Goal {
        label: "fused / unfused".into(),
        numerator: ConfigSelector {
            fused_optimizer: Some(true),
            ..ConfigSelector::default()
        },
        ..goal(1.05)
    };
    let out = goal_outcomes(&rows, &[goal(2.0), fused], &RepeatRuns::new(&records));
    let mut got: Vec<(&str, &str, f64)> = out
        .iter()
        .map(|o| {
            (
                o.optimizer.as_str(),
                o.goal.label.as_str(),
                (o.median * 1e6).round() / 1e6,
            )
        })
        .collect();
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    // AdamW's rows never pair with Adafactor's; Adafactor has no fused row, so no outcome.
    assert_eq!(
        got,
        [
            ("adafactor", "K = 1 / none", 1.3),
            ("adamw", "K = 1 / none", 3.0),
            ("adamw", "fused / unfused", 0.5),
        ],
        "{out:#?}"
    );
}

#[test]
fn a_single_run_per_side_is_judged_by_its_ratio_alone() {
    let one = |v: f64| stats::median_interval(&[v], stats::LEVEL).unwrap();
    let r = stats::ratio(&one(1.3), &one(1.0)).unwrap();
    assert_eq!(GoalVerdict::of(&r, 1.3), GoalVerdict::Met);
    assert_eq!(GoalVerdict::of(&r, 1.29), GoalVerdict::Missed);
}

#[test]
fn a_missing_study_table_column_is_an_error_naming_it() {
    let records = synthetic();
    let mut df = study_table(&records).unwrap();
    let _ = df.drop_in_place("reduction_pct").unwrap();
    let err = config_summaries(&df, "synthetic").unwrap_err();
    assert!(
        matches!(
            &err,
            AnalysisError::MissingColumn { study, table: "study", column }
                if study == "synthetic" && column == "reduction_pct"
        ),
        "{err:?}"
    );
    let text = crate::Error::from(err).to_string();
    assert!(
        text.contains("`reduction_pct`") && text.contains("synthetic"),
        "{text}"
    );
}

#[test]
fn step_curves_keep_table_order_and_a_diverged_value() {
    let steps = df!(
        "config" => ["b", "a", "b", "a"],
        "step" => [0u32, 0, 1, 1],
        "loss" => [Some(2.0), Some(3.0), Some(f64::NAN), None],
    )
    .unwrap();
    let curves = step_curves(&steps, "synthetic", "loss").unwrap();
    assert_eq!(curves["a"], [(0.0, 3.0)], "a null loss gives no point");
    assert_eq!(curves["b"][0], (0.0, 2.0));
    assert!(curves["b"][1].1.is_nan(), "a diverged loss is drawn");
    let err = step_curves(&steps, "synthetic", "loss_scale").unwrap_err();
    assert!(matches!(err, AnalysisError::MissingColumn { .. }), "{err}");
}

#[test]
fn a_column_of_another_type_is_an_error_not_a_default() {
    let records = synthetic();
    let mut df = study_table(&records).unwrap();
    let n = df.height();
    df.with_column(Column::new("control".into(), vec!["yes"; n]))
        .unwrap();
    let err = config_summaries(&df, "synthetic").unwrap_err();
    assert!(
        matches!(&err, AnalysisError::ColumnType { column, expected: "boolean", .. } if column == "control"),
        "{err}"
    );
    let steps = df!("config" => ["a"], "skipped" => [false]).unwrap();
    let err = step_scaling(&steps, "synthetic").unwrap_err();
    assert!(
        matches!(&err, AnalysisError::MissingColumn { column, table: "steps", .. } if column == "grad_zero_fraction"),
        "{err}"
    );
}

#[test]
fn strategy_columns_are_read_as_typed_options_and_a_stray_spelling_is_named() {
    let records = synthetic();
    let df = study_table(&records).unwrap();
    let rows = config_summaries(&df, "synthetic").unwrap();
    for r in &rows {
        assert_eq!(r.strategy.precision, crate::spec::Precision::F32);
        assert_eq!(r.strategy.optimizer, crate::spec::OptimizerKind::Adafactor);
        assert_eq!(
            r.strategy.layer_norm,
            memwall_core::strategy::LayerNormSaving::SavesInput
        );
    }
    for (column, stray) in [
        ("precision", "fp32"),
        ("optimizer", "adam"),
        ("layer_norm", "apex"),
    ] {
        let mut df = df.clone();
        let n = df.height();
        df.with_column(Column::new(column.into(), vec![stray; n]))
            .unwrap();
        let err = config_summaries(&df, "synthetic").unwrap_err();
        assert!(
            matches!(&err, AnalysisError::BadCell { column: c, row: 0, message, .. }
                if c == column && message.contains(stray)),
            "{err:?}"
        );
    }
}

#[test]
fn paired_ratios_divide_runs_of_the_same_repeat_index() {
    let records = synthetic();
    let repeats = RepeatRuns::new(&records);
    let key = |name: &str| {
        records
            .records
            .iter()
            .find(|r| r.spec.config == name && r.status == JobStatus::Ok)
            .map(|r| (r.key.clone(), r.env.device_name.clone()))
            .unwrap()
    };
    let (a, b) = (key("checkpoint_adafactor"), key("control_adafactor"));
    let ratios = repeats.paired_ratios((&a.0, &a.1), (&b.0, &b.1), GoalMetric::MedianStepS);
    // Repeats 0, 1, 2 finished on both sides (3 failed on the first): 1.2/0.8, 1.3/1.0, 1.4/1.0.
    assert_eq!(ratios.len(), 3);
    for (got, want) in ratios.iter().zip([1.5, 1.3, 1.4]) {
        assert!((got - want).abs() < 1e-12, "{ratios:?}");
    }
    assert!(repeats
        .paired_ratios((&a.0, &a.1), ("no such job", &b.1), GoalMetric::MedianStepS)
        .is_empty());
}
