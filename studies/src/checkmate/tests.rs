//! Tests of the Checkmate study.

use super::*;

use crate::claim_checks::{assert_claims_have_measures, value};

/// The committed result (`runs/checkmate/cpu.result.json`) reads with typed statuses
/// (among them "ReachedTimeLimit" and "Infeasible (working-set bound)") and writes every
/// status back as the text it had.
#[test]
fn the_committed_result_keeps_its_status_texts() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runs/checkmate/cpu.result.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let record: crate::StudyRecord = crate::record::parse_json(&text).unwrap();
    let r: CheckmateResult = serde_json::from_value(record.result.clone()).unwrap();
    let statuses: Vec<&SolveStatus> = budgets(&r)
        .flat_map(|(_, b)| {
            let staged = [&b.staged, &b.refined].into_iter().flatten();
            b.milp
                .iter()
                .map(|m| &m.status)
                .chain(staged.map(|s| &s.status))
                .chain(b.boundary.iter().map(|x| &x.status))
        })
        .chain(
            r.batch
                .iter()
                .chain(&r.batch_nets)
                .flat_map(|b| &b.milp_probes)
                .flat_map(|p| {
                    p.milp
                        .iter()
                        .map(|m| &m.status)
                        .chain(p.staged.iter().chain(&p.refined).map(|s| &s.status))
                }),
        )
        .collect();
    for s in [
        SolveStatus::Optimal,
        SolveStatus::ReachedTimeLimit,
        SolveStatus::InfeasibleWorkingSet,
        SolveStatus::OptimalBoundaryRelaxation,
    ] {
        assert!(statuses.contains(&&s), "{s} not in {statuses:?}");
    }
    assert!(
        !statuses.iter().any(|s| matches!(s, SolveStatus::Other(_))),
        "{statuses:?}"
    );
    // Every status string of the file, in order, is written back byte for byte.
    fn texts(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    match x {
                        serde_json::Value::String(s) if k == "status" => out.push(s.clone()),
                        _ => texts(x, out),
                    }
                }
            }
            serde_json::Value::Array(xs) => xs.iter().for_each(|x| texts(x, out)),
            _ => {}
        }
    }
    let (mut before, mut after) = (Vec::new(), Vec::new());
    texts(&record.result, &mut before);
    texts(&serde_json::to_value(&r).unwrap(), &mut after);
    assert_eq!(before.len(), statuses.len(), "{before:?}");
    assert_eq!(before, after);
}

#[test]
fn params_deny_unknown_fields() {
    let mut v = serde_json::to_value(serde_json::json!({})).unwrap();
    v["bogus"] = 1.into();
    assert!(serde_json::from_value::<CheckmateParams>(v).is_err());
}

#[test]
fn built_nets_out_of_range_name_their_field() {
    let chain = |layers: usize, source: &str| BuiltNet::TransformerChain {
        layers,
        activation_bytes: 1 << 20,
        head_bytes: 1 << 10,
        batch: 4,
        source: source.into(),
        divisions: 1,
    };
    let with = |nets: Vec<BuiltNet>| CheckmateParams {
        nets,
        ..CheckmateParams::smoke()
    };
    assert_eq!(validate(&with(vec![chain(100, "a record")])), Ok(()));
    let e = validate(&with(vec![chain(100, "a record"), chain(0, "a record")])).unwrap_err();
    assert_eq!(e.field, "nets[1].layers", "{e}");
    let e = validate(&with(vec![BuiltNet::TransformerChain {
        layers: 4,
        activation_bytes: 1,
        head_bytes: 1,
        batch: 1,
        source: "a record".into(),
        divisions: 8,
    }]))
    .unwrap_err();
    assert_eq!(e.field, "nets[0].divisions", "{e}");
    let e = validate(&with(vec![chain(3, " ")])).unwrap_err();
    assert_eq!(e.field, "nets[0].source", "{e}");
    let resnet = BuiltNet::Resnet {
        units: vec![3, 4, 6, 3, 3],
        image: 224,
        batch: 32,
    };
    let e = validate(&with(vec![resnet])).unwrap_err();
    assert_eq!(e.field, "nets[0].units", "{e}");
    let e = validate(&CheckmateParams {
        nets_time_limit_s: 0.0,
        ..CheckmateParams::smoke()
    })
    .unwrap_err();
    assert_eq!(e.field, "nets_time_limit_s", "{e}");
}

/// The shared data folder (`MEMWALL_SHARED_DATA` or `../shared/data` beside the workspace).
fn data_dir() -> std::path::PathBuf {
    match std::env::var_os("MEMWALL_SHARED_DATA") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data")),
    }
}

#[test]
fn budget_axis_unit_follows_the_peak() {
    assert_eq!(budget_axis(14_180_941_824), (1e9, "memory budget (GB)"));
    assert_eq!(budget_axis(146_840).1, "memory budget (kB)");
    assert_eq!(budget_axis(2_500_000).1, "memory budget (MB)");
    assert_eq!(budget_axis(999).1, "memory budget (bytes)");
}

#[test]
fn smoke_study() {
    let dir = data_dir();
    let result = run_study(&CheckmateParams::smoke(), &dir).unwrap();
    // Beside every MILP solve, the boundary relaxation: its bound never above the MILP's
    // schedule, its fitting schedule never below its bound nor above the MILP's dual bound
    // by more than the MILP's gap allows.
    let mut beside = 0;
    for g in &result.graphs {
        for b in &g.budgets {
            let (Some(m), Some(x)) = (&b.milp, &b.boundary) else {
                assert!(b.milp.is_none(), "{}: MILP without the relaxation", g.name);
                continue;
            };
            beside += 1;
            if let Some(ms) = m.best {
                assert!(
                    x.bound <= ms.cost + 1e-6,
                    "{}: bound {} > MILP {}",
                    g.name,
                    x.bound,
                    ms.cost
                );
            }
            if let Some(f) = x.fitting {
                assert!(f.cost >= x.bound - 1e-6 && f.peak_bytes <= b.budget_bytes);
                assert!(
                    f.cost >= m.dual_bound - 1e-6,
                    "{}: below the MILP's dual bound",
                    g.name
                );
            }
        }
    }
    assert!(beside > 0);
    let secs = sections(&result, &cited());
    assert!(secs[2]
        .tables
        .iter()
        .any(|t| t.caption.starts_with("Ours: the boundary-memory")));
    assert_eq!(secs.len(), 4);
    assert!(!secs[0].figures.is_empty());
    assert!(secs[3].claim.contains("289"));
    let missing = CheckmateParams {
        graphs: vec!["nope.json".into()],
        ..CheckmateParams::smoke()
    };
    let e = run_study(&missing, &dir).unwrap_err().to_string();
    assert!(e.contains("nope.json"), "{e}");
}

#[test]
fn generated_graph_gets_the_staged_milp_and_its_table() {
    let generated = GeneratedGraph {
        n: 40,
        w: 0.27,
        nlv: 0.75,
        ed: 0.2,
        scd: 0.14,
        seed: 3,
    };
    let params = CheckmateParams {
        graphs: Vec::new(),
        generated: vec![generated],
        milp_max_nodes: 20,
        staged_max_stages: 10,
        staged_time_limit_s: 5.0,
        batch_graph: None,
        ..CheckmateParams::smoke()
    };
    let r = run_study(&params, &data_dir()).unwrap();
    let b = &r.graphs[0].budgets[0];
    assert!(b.milp.is_none());
    let coarse = b.staged.as_ref().expect("staged solve");
    // ceil(m / 10) nodes per stage for the m nodes after the budget's checkpoint-all prefix.
    let g = random_layered(&generated.params()).unwrap();
    let prefix = g.fitting_prefix(b.budget_bytes);
    assert!(prefix >= 2, "the prefix stage is exercised");
    assert_eq!(coarse.stage_size, (40 - prefix).div_ceil(10));
    assert!(coarse.stage_size > 1, "a grouped model to refine");
    let fine = b.refined.as_ref().unwrap_or_else(|| {
        panic!(
            "40 nodes are refined; coarse: {} {:?}",
            coarse.status, coarse.best
        )
    });
    assert_eq!(fine.stage_size, 1);
    let best = fine
        .best
        .expect("a schedule at 0.9 of the checkpoint-all peak");
    assert!(best.peak_bytes <= b.budget_bytes);
    assert!(fine.valid_bound <= best.cost + 1e-6);
    let secs = sections(&r, &cited());
    let staged = &secs[2].tables[1];
    assert_eq!(staged.rows.len(), 2);
    assert_eq!(staged.rows[0][3], coarse.stage_size.to_string());
    let back: CheckmateResult = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(sections(&back, &cited()), secs);
}

#[test]
fn non_finite_bounds_survive_json() {
    let m = MilpSolve {
        status: SolveStatus::InfeasibleWorkingSet,
        solve_time_s: 0.0,
        best: None,
        objective: None,
        dual_bound: f64::INFINITY,
        mip_gap: f64::NAN,
    };
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(v["dual_bound"], "inf");
    assert_eq!(v["mip_gap"], "NaN");
    let back: MilpSolve = serde_json::from_value(v).unwrap();
    assert_eq!(back.dual_bound, f64::INFINITY);
    assert!(back.mip_gap.is_nan());
    let finite: MilpSolve = serde_json::from_value(
        serde_json::to_value(MilpSolve {
            dual_bound: 1.5,
            mip_gap: 0.25,
            ..m
        })
        .unwrap(),
    )
    .unwrap();
    assert_eq!((finite.dual_bound, finite.mip_gap), (1.5, 0.25));
}

#[test]
fn result_round_trips_through_json_and_renders_the_same() {
    // 0.8 of VGG16's checkpoint-all peak is below its largest working set (the MILP is not
    // called: infinite dual bound, NaN gap); 0.9 is solved.
    let params = CheckmateParams {
        budget_fractions: vec![0.8, 0.9],
        smallest_budget: false,
        batch_graph: None,
        ..CheckmateParams::smoke()
    };
    let r = run_study(&params, &data_dir()).unwrap();
    let low = r.graphs[0].budgets[0].milp.as_ref().unwrap();
    assert_eq!(low.status, SolveStatus::InfeasibleWorkingSet);
    assert_eq!(low.dual_bound, f64::INFINITY);
    let high = r.graphs[0].budgets[1].milp.as_ref().unwrap();
    let best = high.best.unwrap();
    assert!(best.peak_bytes <= r.graphs[0].budgets[1].budget_bytes);
    let back: CheckmateResult = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(back.graphs[0].budgets[1], r.graphs[0].budgets[1]);
    assert_eq!(back.params, r.params);
    let (fresh, stored) = (sections(&r, &cited()), sections(&back, &cited()));
    assert_eq!(fresh.len(), 3);
    assert_eq!(stored, fresh);
    assert_eq!(fresh[2].tables[0].rows[0][7], "inf");
    // VGG16's working-set bound is above 0.8 of its checkpoint-all peak: no schedule reaches
    // 2x, and the reduction table says why.
    let ws =
        r.graphs[0].working_set_bound_bytes as f64 / r.graphs[0].checkpoint_all_peak_bytes as f64;
    assert!(ws > 0.8, "{ws}");
    let why = overhead_at_reduction(&r.graphs[0], 0.5).unwrap_err();
    assert!(why.contains("working-set bound"), "{why}");
    assert_eq!(fresh[1].tables[0].rows[0][3], "none");
}

#[test]
fn measures_answer_the_claims() {
    // A 30-node random layered graph: Checkmate's MILP, the boundary relaxation and the LP
    // rounding at 0.9 of the checkpoint-all peak, in seconds.
    let params = CheckmateParams {
        graphs: Vec::new(),
        generated: vec![GeneratedGraph {
            n: 30,
            w: 0.27,
            nlv: 0.75,
            ed: 0.2,
            scd: 0.14,
            seed: 3,
        }],
        batch_graph: None,
        // The MILP solves this graph in seconds on a quiet machine; on a loaded one (a build
        // beside the tests) the smoke profile's 10 s ended once without an incumbent. The test
        // is of the measures' arithmetic, so its solve has room at any speed.
        time_limit_s: 300.0,
        ..CheckmateParams::smoke()
    };
    let r = run_study(&params, &data_dir()).unwrap();
    let m = assert_claims_have_measures::<Checkmate>("checkmate", r.clone());
    // No budget at half the peak, no graph of 100 layers, no batch search: not measured.
    assert!(value(&m, "milp_overhead_pct_at_2x_reduction").is_nan());
    assert!(value(&m, "milp_overhead_pct_at_3x_reduction").is_nan());
    assert_eq!(value(&m, "graphs_reaching_3x_pct"), 0.0);
    assert!(value(&m, "max_solve_s_100_plus_layers").is_nan());
    assert!(missing(&m, "max_solve_s_100_plus_layers").contains("no graph of at least 100 layers"));
    assert!(value(&m, "max_batch_milp_over_checkpoint_all").is_nan());
    let b = &r.graphs[0].budgets[0];
    let milp = b.milp.as_ref().unwrap();
    assert!((value(&m, "max_milp_solve_s") - milp.solve_time_s).abs() < 1e-12);
    if let (Some(l), Some(c)) = (b.lp.rounded, milp.best) {
        let excess = value(&m, "lp_rounding_max_excess_pct");
        assert!((excess - (l.cost / c.cost - 1.0) * 100.0).abs() < 1e-9);
    }
    // The same result read as a graph of 100 layers at half the peak answers the other two.
    let mut big = r.clone();
    // A random layered DAG has no backward pass, so no layers: not a network for the claim.
    assert_eq!(big.graphs[0].layers, None);
    big.graphs[0].layers = Some(100);
    big.graphs[0].budgets[0].fraction = 0.5;
    big.graphs[0].working_set_bound_bytes = 0;
    let m = measures(&big);
    let cost = milp.best.unwrap().cost;
    let overhead = (cost / r.graphs[0].forward_backward_cost - 1.0) * 100.0;
    assert!((value(&m, "milp_overhead_pct_at_2x_reduction") - overhead).abs() < 1e-9);
    // At half the peak the schedule is no 3x reduction; at 0.333 it is, and then both answer.
    assert!(value(&m, "milp_overhead_pct_at_3x_reduction").is_nan());
    big.graphs[0].budgets[0].fraction = 0.333;
    let m = measures(&big);
    assert!((value(&m, "milp_overhead_pct_at_3x_reduction") - overhead).abs() < 1e-9);
    assert!((value(&m, "milp_overhead_pct_at_2x_reduction") - overhead).abs() < 1e-9);
    assert_eq!(value(&m, "graphs_reaching_3x_pct"), 100.0);
    // A working-set bound above a third of the peak: no schedule can reach 3x, whatever the
    // budgets solved.
    big.graphs[0].working_set_bound_bytes = big.graphs[0].checkpoint_all_peak_bytes / 2;
    assert!(value(&measures(&big), "milp_overhead_pct_at_3x_reduction").is_nan());
    // The share of graphs under 10% overhead counts by what the solve proves: an incumbent
    // under 10% is under; one over 10% with a dual bound under it leaves the share open; a
    // dual bound over 10% or a budget no schedule fits is not under.
    let mut open = big.clone();
    open.graphs[0].working_set_bound_bytes = 0;
    open.graphs[0].budgets[0].fraction = 0.5;
    let fb = open.graphs[0].forward_backward_cost;
    let share = |r: &CheckmateResult| {
        let m = measures(r);
        let x = m
            .iter()
            .find(|x| x.name == "graphs_2x_under_10pct_pct")
            .unwrap();
        (x.value, x.bounds)
    };
    let solve = open.graphs[0].budgets[0].milp.as_mut().unwrap();
    solve.status = SolveStatus::ReachedTimeLimit;
    solve.best.as_mut().unwrap().cost = fb * 1.05;
    solve.dual_bound = fb * 1.01;
    let (low, high) = optimal_overhead_bounds(&open.graphs[0], 0.5);
    assert!(
        (low - 1.0).abs() < 1e-9 && (high - 5.0).abs() < 1e-9,
        "{low} {high}"
    );
    assert_eq!(share(&open), (100.0, Some((100.0, 100.0))));
    let solve = open.graphs[0].budgets[0].milp.as_mut().unwrap();
    solve.best.as_mut().unwrap().cost = fb * 1.5;
    assert_eq!(share(&open), (0.0, Some((0.0, 100.0))));
    let solve = open.graphs[0].budgets[0].milp.as_mut().unwrap();
    solve.dual_bound = fb * 1.2;
    assert_eq!(share(&open), (0.0, Some((0.0, 0.0))));
    let solve = open.graphs[0].budgets[0].milp.as_mut().unwrap();
    solve.best = None;
    solve.status = SolveStatus::Infeasible;
    assert_eq!(
        optimal_overhead_bounds(&open.graphs[0], 0.5),
        (f64::INFINITY, f64::INFINITY)
    );
    assert_eq!(share(&open), (0.0, Some((0.0, 0.0))));
    // A graph whose working set is over half the peak cannot reach 2x, whatever was solved.
    let mut cannot = big.clone();
    cannot.graphs[0].budgets[0].fraction = 0.5;
    cannot.graphs[0].working_set_bound_bytes = cannot.graphs[0].checkpoint_all_peak_bytes * 3 / 4;
    assert_eq!(share(&cannot).0, 0.0);
    // LP rounding counts a budget where no rounding fits as not within 10%.
    let mut rounding = big.clone();
    rounding.graphs[0].budgets.truncate(1);
    let b = &mut rounding.graphs[0].budgets[0];
    let milp = b.milp.as_mut().unwrap();
    milp.status = SolveStatus::Optimal;
    milp.best.as_mut().unwrap().cost = 100.0;
    milp.dual_bound = 95.0;
    b.lp.lp_bound = Some(90.0);
    b.lp.rounded = Some(ScheduleStats {
        cost: 108.0,
        peak_bytes: 1,
        recomputations: 0,
    });
    // 8% over the incumbent, up to 13.7% over the optimum: within by the incumbent only.
    assert_eq!(lp_rounding_within(&rounding, 10.0), (100.0, 0.0, 100.0));
    rounding.graphs[0].budgets[0].lp.rounded = None;
    assert_eq!(lp_rounding_within(&rounding, 10.0), (0.0, 0.0, 0.0));
    rounding.graphs[0].budgets[0].lp.lp_bound = None;
    assert!(lp_rounding_within(&rounding, 10.0).0.is_nan());
    // The solve-time claim: a finished solve gives its time; one stopped at a limit under an
    // hour decides nothing; one stopped at an hour or more decides against the claim.
    let mut timed = big.clone();
    timed.params.budget_fractions = vec![timed.graphs[0].budgets[0].fraction];
    let solve = timed.graphs[0].budgets[0].milp.as_mut().unwrap();
    solve.status = SolveStatus::Optimal;
    solve.solve_time_s = 42.0;
    assert_eq!(
        value(&measures(&timed), "max_solve_s_100_plus_layers"),
        42.0
    );
    let solve = timed.graphs[0].budgets[0].milp.as_mut().unwrap();
    solve.status = SolveStatus::ReachedTimeLimit;
    solve.solve_time_s = 60.0;
    let m = measures(&timed);
    assert!(value(&m, "max_solve_s_100_plus_layers").is_nan());
    let why = missing(&m, "max_solve_s_100_plus_layers");
    assert!(
        why.starts_with("not decided") && why.contains("after 60.0 s"),
        "{why}"
    );
    timed.graphs[0].budgets[0]
        .milp
        .as_mut()
        .unwrap()
        .solve_time_s = 3600.5;
    assert_eq!(
        value(&measures(&timed), "max_solve_s_100_plus_layers"),
        3600.5
    );
    // A budget that is not one of the fractions (the smallest-budget probe) does not count.
    timed.params.budget_fractions = vec![0.9];
    let m = measures(&timed);
    assert!(value(&m, "max_solve_s_100_plus_layers").is_nan());
    assert!(missing(&m, "max_solve_s_100_plus_layers").starts_with("not measured"));
}

/// The reason `name` of `m` gives for its missing value ("" when it gives none).
fn missing(m: &[Measure], name: &str) -> String {
    m.iter()
        .find(|x| x.name == name)
        .and_then(|x| x.missing.clone())
        .unwrap_or_default()
}

/// The study's `[params.cited]` from `experiments/checkmate.toml`.
fn cited() -> CheckmateCited {
    crate::cited::from_experiment::<CheckmateCited>("checkmate").values
}

#[test]
fn resnet50_counts_173_layers() {
    // ResNet-50 as the budget sweep builds it: a training graph whose forward operations (the
    // data input excluded) are the layers the solve-time claim counts.
    let net = BuiltNet::Resnet {
        units: vec![3, 4, 6, 3],
        image: 224,
        batch: 32,
    };
    let (g, batch) = net.graph().unwrap();
    assert_eq!(batch, 32);
    assert!(g.first_backward() < g.len());
    // conv0, bn0, relu0, pool0; 16 units of 10 operations and 4 projections; the head's 5.
    assert_eq!(g.forward_ops().len(), 4 + 16 * 10 + 4 + 5);
    assert_eq!(g.name, "ResNet-50 (224x224)");
}

/// The batch search on the transformer's chain in eighths of a sequence refines the search in
/// whole sequences: each strategy's largest input lies within one sequence above the coarse
/// one, and the ratio's step shrinks eightfold.
#[test]
fn a_finer_batch_search_refines_the_whole_sample_one() {
    let chain = |divisions: u32| BuiltNet::TransformerChain {
        layers: 8,
        activation_bytes: 1 << 20,
        head_bytes: 1 << 16,
        batch: 4,
        source: "a test".into(),
        divisions,
    };
    let run = |divisions: u32| {
        let params = CheckmateParams {
            graphs: Vec::new(),
            generated: vec![tiny()],
            batch_graph: None,
            batch_nets: vec![chain(divisions)],
            batch_memory_bytes: 21 << 20,
            batch_max: 512,
            batch_time_limit_s: 30.0,
            ..CheckmateParams::smoke()
        };
        run_study(&params, &data_dir())
            .unwrap()
            .batch_nets
            .remove(0)
    };
    let (coarse, fine) = (run(1), run(8));
    assert_eq!((coarse.divisions, fine.divisions), (1, 8));
    for (c, f) in coarse.baselines.iter().zip(&fine.baselines) {
        assert!(*c > 0, "{coarse:?}");
        assert!(
            c * 8 <= *f && *f < (c + 1) * 8,
            "{c} samples vs {f} eighths"
        );
    }
    // The MILP's batch is a lower bound: the finer one is at least the coarse one.
    assert!(
        fine.milp >= coarse.milp * 8,
        "{} vs {}",
        fine.milp,
        coarse.milp
    );
    let all = fine.baselines[0];
    assert_eq!(fine.samples_text(all), trim(f64::from(all) / 8.0));
    assert_eq!(fine.samples_text(16), "2");
    let m = measures(&CheckmateResult {
        batch_nets: vec![fine.clone()],
        ..run_study(
            &CheckmateParams {
                graphs: Vec::new(),
                generated: vec![tiny()],
                batch_graph: None,
                ..CheckmateParams::smoke()
            },
            &data_dir(),
        )
        .unwrap()
    });
    let ratio = m
        .iter()
        .find(|x| x.name == "max_batch_milp_over_checkpoint_all")
        .unwrap();
    assert_eq!(ratio.resolution, Some(1.0 / f64::from(all)));
    assert_eq!(ratio.value, f64::from(fine.milp) / f64::from(all));
}

fn trim(x: f64) -> String {
    memwall_core::spec::claims::trim_number(x)
}

/// A small random layered graph: the study needs one graph beside its batch searches.
fn tiny() -> GeneratedGraph {
    GeneratedGraph {
        n: 12,
        w: 0.27,
        nlv: 0.75,
        ed: 0.2,
        scd: 0.14,
        seed: 3,
    }
}
