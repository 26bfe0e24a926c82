use super::*;

#[test]
fn parses_source_durations() {
    assert_eq!(parse_duration("1m 40s"), Some(100.0));
    assert_eq!(parse_duration("41s"), Some(41.0));
    assert_eq!(parse_duration("2m 5s"), Some(125.0));
    assert_eq!(parse_duration("soon"), None);
}

#[test]
fn formats_bytes_with_binary_units() {
    assert_eq!(format_bytes(1536.0), "1.5 KiB");
    assert_eq!(format_bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
    assert_eq!(
        format_bytes(21.165 * 1024.0 * 1024.0 * 1024.0),
        "21.165 GiB"
    );
}

/// `experiments/checkpoint_interval.toml` at the cpu profile and records of its deep model's
/// sweep on flex, each with the activation peak `activation(K)` MiB above a steady state of
/// 40 MiB (the `none` control at the whole model's).
fn deep_sweep(activation: impl Fn(usize) -> f64) -> (crate::spec::Study, StudyRecords) {
    synthetic("checkpoint_interval.toml", |config, job| {
        if config.model.as_deref() != Some("deep") {
            return None;
        }
        let n = job.model.layers;
        let k = config.checkpoint.segment_len(n).unwrap_or(n);
        Some((40.0 * MIB + activation(k) * MIB, 0.1))
    })
}

/// `experiments/<file>` at the cpu profile and one finished flex record per job that
/// `measure(configuration, job)` gives a peak (bytes) and a median step time (seconds); a
/// steady state of 40 MiB.
fn synthetic(
    file: &str,
    measure: impl Fn(&ConfigSpec, &memwall_core::spec::JobSpec) -> Option<(f64, f64)>,
) -> (crate::spec::Study, StudyRecords) {
    use crate::analysis::{JobRecord, Summary};
    use crate::device::BackendKind;
    use crate::spec::{PreparedData, Profile, Study};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../experiments")
        .join(file);
    let study = Study::load(&path, Profile::Cpu, None).unwrap();
    let corpora = study
        .vocabularies()
        .into_iter()
        .map(|v| {
            let data = PreparedData {
                dir: "data/x".into(),
                fingerprint: format!("v{v}"),
                vocab_size: v,
                eos_id: 0,
            };
            (v, data)
        })
        .collect();
    let mut records = Vec::new();
    for job in study.jobs(BackendKind::Flex, 0, &corpora) {
        let Some(config) = study.configs.iter().find(|c| c.name == job.config) else {
            continue;
        };
        let Some((peak, step_s)) = measure(config, &job) else {
            continue;
        };
        let steady = 40.0 * MIB;
        let mut r = JobRecord::unfinished(&job, JobStatus::Ok, String::new(), Default::default());
        r.reason = None;
        r.env.device_name = "Test CPU".into();
        r.env.backend = "flex".into();
        r.finished_at = "2026-01-01T00:00:00Z".into();
        r.summary = Some(Summary {
            parameters: 1000,
            median_step_s: step_s,
            samples_per_s: 8.0 / step_s,
            tokens_per_s: 1024.0 / step_s,
            peak_allocated_bytes: peak as u64,
            peak_reserved_bytes: peak as u64,
            baseline_bytes: 0,
            final_train_loss: 3.0,
            eval_loss: 3.1,
            eval_perplexity: 22.2,
            mfu: None,
            peak_flops: None,
            wall_s: 1.0,
            steady_bytes: steady as u64,
            estimated_activation_bytes: 0,
            time_to_first_measured_step_s: Some(0.5),
        });
        records.push(r);
    }
    let records = StudyRecords {
        dir: format!("runs/{}", study.header.name).into(),
        records,
        unreadable: Vec::new(),
    };
    (study, records)
}

/// The glance's verdicts of the study's claims, by claim id (the deep sweep's section first).
fn verdicts(
    study: &crate::spec::Study,
    records: &StudyRecords,
) -> BTreeMap<String, (memwall_core::spec::claims::Verdict, String)> {
    let (sections, glance) = glance_of(study, records);
    assert!(
        sections[0].title.contains("model `deep`"),
        "{}",
        sections[0].title
    );
    study
        .claims
        .iter()
        .zip(glance)
        .map(|(c, row)| (c.id.clone(), (row.verdict, row.ours)))
        .collect()
}

/// The report's sections and glance rows of `study` from `records`.
fn glance_of(study: &crate::spec::Study, records: &StudyRecords) -> (Vec<Section>, Vec<GlanceRow>) {
    let (sections, _, glance) = sections(
        records,
        &study.header,
        &study.configs,
        &study.goals,
        &study.claims,
        &[],
    )
    .unwrap();
    (sections, glance)
}

#[test]
fn a_claim_against_another_configuration_takes_its_ratio_from_that_pair() {
    use memwall_core::spec::claims::Verdict::{Agree, Disagree};
    // Peaks in MiB and step times in ms per configuration; everything else as the control.
    let run = |ln_peak: f64, save_nothing_ms: f64| {
        synthetic("selective_checkpointing.toml", move |config, _| {
            let (peak, ms) = match config.name.as_str() {
                "save_attention" => (58.0, 87.0),
                "layer_norm_boundaries" => (ln_peak, 88.0),
                "save_nothing" => (54.0, save_nothing_ms),
                _ => (54.0, 100.0),
            };
            Some((peak * MIB, ms / 1000.0))
        })
    };
    let of = |study: &crate::spec::Study, records: &StudyRecords, id: &str| {
        let (_, glance) = glance_of(study, records);
        let i = study.claims.iter().position(|c| c.id == id).unwrap();
        (glance[i].verdict, glance[i].ours.clone())
    };
    let (study, records) = run(57.9, 98.0);
    // 100 x (1 - 57.9 / 58.0), not against the control's 54 MiB.
    assert_eq!(
        of(&study, &records, "layer_norm_checkpoint_memory"),
        (Agree, "0.2%".into())
    );
    // 88 / 87 and 98 / 87: the pair's ratio, the control's 100 ms cancels.
    assert_eq!(
        of(&study, &records, "layer_norm_checkpoint_time"),
        (Agree, "1.01x".into())
    );
    assert_eq!(
        of(&study, &records, "attention_cheap_to_recompute"),
        (Disagree, "1.13x".into())
    );
    // A checkpoint dearer than the attention output's, and a cheap recomputation.
    let (study, records) = run(66.0, 90.0);
    assert_eq!(
        of(&study, &records, "layer_norm_checkpoint_memory").0,
        Disagree
    );
    assert_eq!(
        of(&study, &records, "attention_cheap_to_recompute"),
        (Agree, "1.03x".into())
    );
    // Without the configuration compared with, the claim is not comparable.
    let (study, mut records) = run(57.9, 98.0);
    records
        .records
        .retain(|r| r.spec.config != "save_attention");
    assert_eq!(
        of(&study, &records, "attention_cheap_to_recompute").0,
        memwall_core::spec::claims::Verdict::NotComparable
    );
}

#[test]
fn the_sublinear_claims_are_answered_by_the_deep_sweep_and_fail_a_wrong_one() {
    use memwall_core::spec::claims::Verdict::{Agree, Disagree};
    let layers: usize = 128;
    // The model itself: a = 0.25 MiB per checkpoint, b = 4.5 MiB per block, c = 3 MiB;
    // lowest at K = 3, against sqrt(N) = 12.
    let model = |k: usize| 0.25 * layers.div_ceil(k) as f64 + 4.5 * k as f64 + 3.0;
    let (study, records) = deep_sweep(model);
    let v = verdicts(&study, &records);
    assert_eq!(v["sublinear_model"].0, Agree, "{v:?}");
    assert_eq!(v["sublinear_minimizer"], (Agree, "0.0%".into()), "{v:?}");
    assert_eq!(
        v["sqrt_n_segments"].0, Disagree,
        "K = 12 is not the minimum: {v:?}"
    );
    assert_eq!(v["sublinear_u_shape"].0, Agree, "{v:?}");
    let (sections, _) = glance_of(&study, &records);
    let deep = &sections[0];
    assert!(deep
        .figures
        .iter()
        .any(|f| f.name.starts_with("sublinear_") && f.series.len() >= 4));
    let table = deep
        .tables
        .iter()
        .find(|t| t.caption.starts_with("Activation peak vs K"))
        .expect("the sweep's table");
    assert_eq!(table.rows.len(), 11, "K = 1 ... 128, sqrt resolving to 12");
    assert!(
        table.rows[2][7].contains("measured minimum"),
        "{:?}",
        table.rows[2]
    );
    // Checkpointing that saves nothing (the peak only grows with K): the model and the U
    // disagree.
    let (study, records) = deep_sweep(|k| 20.0 + 4.5 * k as f64);
    let v = verdicts(&study, &records);
    assert_eq!(v["sublinear_model"].0, Disagree, "{v:?}");
    assert_eq!(v["sublinear_u_shape"].0, Disagree, "{v:?}");
    // A minimum at an interval the model cannot put it (a dip at K = 32).
    let (study, records) = deep_sweep(|k| if k == 32 { 10.0 } else { model(k) });
    let v = verdicts(&study, &records);
    assert_eq!(v["sublinear_model"].0, Disagree, "{v:?}");
}

#[test]
fn formats_diverged_perplexity_in_scientific_notation() {
    assert_eq!(fmt_ppl(Some(398.04)), "398.0");
    assert_eq!(fmt_ppl(Some(21138645933.0)), "2.11e10");
    assert_eq!(fmt_ppl(None), "–");
}

#[test]
fn a_plans_unit_times_are_the_median_over_its_runs() {
    let (_, mut records) = synthetic("selective_checkpointing.toml", |_, _| {
        Some((54.0 * MIB, 0.1))
    });
    let first = records
        .records
        .iter()
        .position(|r| r.spec.config == "save_nothing")
        .unwrap();
    // Three runs of one job: one slow, as on a loaded moment, and two alike.
    let mut runs = Vec::new();
    for (repeat, scale) in [(0, 1.0), (1, 3.0), (2, 1.1)] {
        let mut r = records.records[first].clone();
        r.spec.repeat = repeat;
        r.unit_forward_s = Some([scale * 1e-3; 8]);
        let layers = r.spec.model.layers;
        r.block_costs = vec![
            memwall_core::strategy::BlockCost {
                activation_bytes: 1,
                boundary_bytes: 1,
                forward_s: scale * 2e-3,
            };
            layers
        ];
        runs.push(r);
    }
    records.records.retain(|r| r.spec.config != "save_nothing");
    records.records.extend(runs);
    let one = records
        .records
        .iter()
        .find(|r| r.spec.config == "save_nothing" && r.spec.repeat == 1)
        .unwrap()
        .clone();
    let one = &one;
    let median = inside::median_unit_forward(&records, one).unwrap();
    assert!((median[0] - 1.1e-3).abs() < 1e-12, "{median:?}");
    let blocks = inside::median_block_forward(&records, one);
    assert_eq!(blocks.len(), one.spec.model.layers);
    assert!(
        blocks.iter().all(|b| (b - 2.2e-3).abs() < 1e-12),
        "{blocks:?}"
    );
    // A run whose profiling pass has another number of blocks is not counted.
    let mut short = one.clone();
    short.spec.repeat = 3;
    short.block_costs.truncate(1);
    records.records.push(short);
    assert_eq!(inside::median_block_forward(&records, one), blocks);
    // Another device's runs of the job are not its runs.
    let mut other = records.records.last().unwrap().clone();
    other.env.device_name = "Other CPU".into();
    other.unit_forward_s = None;
    assert_eq!(inside::median_unit_forward(&records, &other), None);
}

#[test]
fn a_profiled_budget_is_shown_beside_its_flop_twin_and_runs_that_planned_differently_are_named() {
    use memwall_core::strategy::every_k;
    use memwall_core::units::UnitPlan;
    // Unit times where the elementwise units are dear, the opposite of the FLOP count's order.
    let times = [9e-3, 1e-3, 2e-3, 1e-3, 9e-3, 1e-3, 9e-3, 1e-3];
    let (study, mut records) = synthetic("selective_checkpointing.toml", |config, _| {
        let ms = match config.name.as_str() {
            "budget_20" => 100.0,
            "budget_20_profile" => 90.0,
            _ => 110.0,
        };
        Some((60.0 * MIB, ms / 1000.0))
    });
    // Each unit-level record gets the plan its policy makes from those times.
    let plan_of = |r: &crate::analysis::JobRecord, policy| {
        let spec = &r.spec;
        let shape = spec.model.unit_shape(spec.strategy.precision);
        let segments = every_k(spec.model.layers, 1);
        match policy {
            // Planned from an executor profile, which these records do not have: keep only
            // the outputs (the plan's choice does not matter to this table).
            memwall_core::units::Policy::Checkmate(_) => UnitPlan::from_keeps(
                policy,
                memwall_core::units::block_keeps(&segments, memwall_core::units::UnitSet::NONE),
                spec.strategy.layer_norm,
                &shape,
                Some(&times),
            ),
            _ => UnitPlan::new(
                &segments,
                policy,
                spec.strategy.layer_norm,
                &shape,
                Some(&times),
            )
            .unwrap(),
        }
    };
    for r in records.records.iter_mut() {
        if let Some(policy) = r.spec.strategy.policy {
            r.spec.unit_plan = Some(plan_of(r, policy));
            r.unit_forward_s = Some(times);
        }
    }
    let table = |records: &StudyRecords| {
        let (sections, _) = glance_of(&study, records);
        sections
            .iter()
            .flat_map(|s| &s.tables)
            .find(|t| t.caption.starts_with("The knapsack's cost model"))
            .cloned()
            .expect("the estimator table")
    };
    let t = table(&records);
    let row = t
        .rows
        .iter()
        .position(|r| r[1] == "budget_20 / budget_20_profile")
        .unwrap_or_else(|| panic!("{:?}", t.rows));
    assert_eq!(t.rows.len(), 3, "budgets 0.05, 0.2 and 0.6: {:?}", t.rows);
    assert!(t.rows[row][8].starts_with("0.900x"), "{:?}", t.rows[row]);
    // The profile plan recomputes fewer measured seconds for the same bytes' budget.
    let ms: Vec<f64> = t.rows[row][4]
        .split(" / ")
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(ms[1] < ms[0], "{:?}", t.rows[row]);
    assert!(t.notes.is_empty(), "{:?}", t.notes);
    // A second run of the profiled budget whose own profiling pass chose the FLOP plan.
    let first = records
        .records
        .iter()
        .find(|r| r.spec.config == "budget_20_profile")
        .unwrap()
        .clone();
    let mut second = first.clone();
    second.spec.repeat = 1;
    let flop_plan = plan_of(
        &first,
        memwall_core::units::Policy::Budget(0.2, memwall_core::units::Estimate::Flops),
    );
    second.spec.unit_plan.as_mut().unwrap().keeps = flop_plan.keeps;
    records.records.push(second);
    let t = table(&records);
    assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
    assert!(
        t.notes[0].text.contains("chose 2 different plans"),
        "{:?}",
        t.notes
    );
}

#[test]
fn checkmate_at_both_granularities_is_one_row_per_budget_with_predicted_and_measured_peaks() {
    use memwall_core::strategy::{every_k, TransformerPlan};
    use memwall_core::units::{block_keeps, Policy, UnitPlan, UnitSet};
    let (study, mut records) = synthetic("selective_checkpointing.toml", |config, _| {
        let (peak, ms) = match config.name.as_str() {
            "checkmate_40" => (75.0, 200.0),
            "checkmate_40_units" => (77.0, 180.0),
            "checkmate_60" => (90.0, 190.0),
            "checkmate_60_units" => (94.0, 190.0),
            _ => (100.0, 210.0),
        };
        Some((peak * MIB, ms / 1000.0))
    });
    for r in records.records.iter_mut() {
        let spec = &mut r.spec;
        let shape = spec.model.unit_shape(spec.strategy.precision);
        let layers = spec.model.layers;
        if let Some(f) = spec.strategy.recompute.checkmate() {
            spec.plan = Some(memwall_core::strategy::SegmentPlan {
                segments: every_k(layers, 1),
                method: memwall_core::strategy::PlanMethod::CheckmateDp,
                predicted_bytes: Some((f * 90.0 * MIB) as u64),
                predicted_recompute_s: None,
            });
            spec.planned = Some(TransformerPlan {
                segments: every_k(layers, 1),
                budget_fraction: f,
                budget_bytes: (f * 100.0 * MIB) as u64,
                predicted_peak_bytes: (f * 90.0 * MIB) as u64,
                predicted_cost_ratio: 1.3,
                solver_status: memwall_core::solve_status::SolveStatus::OptimalSegmentPlan,
                solve_time_s: 0.0,
            });
        }
        if let Some(Policy::Checkmate(f)) = spec.strategy.policy {
            let mut plan = UnitPlan::from_keeps(
                Policy::Checkmate(f),
                block_keeps(&every_k(layers, 1), UnitSet::NONE),
                spec.strategy.layer_norm,
                &shape,
                None,
            );
            plan.budget_bytes = Some((f * 100.0 * MIB) as u64);
            plan.predicted_peak_bytes = Some((f * 95.0 * MIB) as u64);
            spec.unit_plan = Some(plan);
        }
    }
    let (sections, _) = glance_of(&study, &records);
    let t = sections
        .iter()
        .flat_map(|s| &s.tables)
        .find(|t| t.caption.starts_with("Checkmate at both granularities"))
        .cloned()
        .expect("the Checkmate table");
    assert_eq!(t.rows.len(), 2, "{:?}", t.rows);
    let row = |name: &str| {
        t.rows
            .iter()
            .find(|r| r[1] == name)
            .unwrap_or_else(|| panic!("{name}: {:?}", t.rows))
    };
    let at_40 = row("checkmate_40 / checkmate_40_units");
    assert_eq!(at_40[0], "0.4, 40.00");
    assert_eq!(at_40[2], "36.00 / 38.00", "predicted peaks: {at_40:?}");
    // Measured above the steady state (40 MiB in these records).
    assert_eq!(at_40[3], "35.00 / 37.00", "measured peaks: {at_40:?}");
    assert!(at_40[7].starts_with("0.900x"), "{at_40:?}");
    assert_eq!(at_40[8], "yes");
    let at_60 = row("checkmate_60 / checkmate_60_units");
    assert!(at_60[7].starts_with("1.000x"), "{at_60:?}");
}
