//! Tests of the fusion study.

use super::run::{bit_equal, measure_ir, measure_loops};
use super::*;

use crate::claim_checks::{assert_claims_have_measures, value};

fn small() -> FusionParams {
    FusionParams {
        n: 10_000,
        repeats: 1,
        ir_n: 100,
        matmul_size: 96,
        matmul_k: 24,
    }
}

#[test]
fn fusion_makes_one_fused_op_with_same_value() {
    let g = Graph::a_plus_b_times_c_plus_1();
    let f = g.fuse();
    assert_eq!(f.nodes.len(), 5); // a, b, c, Const 1, FusedOp
    assert!(matches!(f.nodes[f.output], Node::FusedOp { .. }));
    let a = [1.0f32, 2.0, -3.5];
    let b = [4.0f32, 0.5, 2.0];
    let c = [10.0f32, -2.0, 0.25];
    let vars = [("a", &a[..]), ("b", &b[..]), ("c", &c[..])];
    let (u, ku) = g.eval(&vars, 3).unwrap();
    let (v, kf) = f.eval(&vars, 3).unwrap();
    assert_eq!(u, vec![42.0, 2.0, -2.0]);
    assert_eq!(u, v);
    assert_eq!((ku, kf), (3, 1));
    // Post's (5 + 3) * 10 = 80.
    let g2 = Graph::a_plus_b_times_c();
    let (r, _) = g2
        .fuse()
        .eval(
            &[("a", &[5.0][..]), ("b", &[3.0][..]), ("c", &[10.0][..])],
            1,
        )
        .unwrap();
    assert_eq!(r, vec![80.0]);
}

#[test]
fn shared_intermediate_is_not_fused_away() {
    // t = a*b used twice: out = (t + a) * t. t must stay materialized.
    let g = Graph {
        nodes: vec![
            Node::Var("a".into()),
            Node::Var("b".into()),
            Node::Mul(0, 1),
            Node::Add(2, 0),
            Node::Mul(3, 2),
        ],
        output: 4,
    };
    let f = g.fuse();
    assert!(f.nodes.iter().any(|n| matches!(n, Node::FusedOp { .. })));
    assert_eq!(
        f.nodes
            .iter()
            .filter(|n| matches!(n, Node::FusedOp { .. }))
            .count(),
        2
    );
    let a = [1.5f32, -2.0];
    let b = [2.0f32, 3.0];
    let vars = [("a", &a[..]), ("b", &b[..])];
    assert_eq!(g.eval(&vars, 2).unwrap().0, f.eval(&vars, 2).unwrap().0);
}

#[test]
fn fused_loops_equal_unfused() {
    let mut rng = XorShift(7);
    let n = 1000;
    let (a, b, c) = (
        random_vec(&mut rng, n),
        random_vec(&mut rng, n),
        random_vec(&mut rng, n),
    );
    let (mut t1, mut t2, mut u, mut f) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    apb_c_unfused(&a, &b, &c, &mut t1, &mut u);
    apb_c_fused(&a, &b, &c, &mut f);
    assert_eq!(u, f);
    a_bc_1_unfused(&a, &b, &c, &mut t1, &mut t2, &mut u);
    a_bc_1_fused(&a, &b, &c, &mut f);
    assert_eq!(u, f);
}

#[test]
fn run_small() {
    let s = sections(
        &measure(&small()).unwrap(),
        &crate::cited::from_experiment("fusion_ir"),
    );
    assert_eq!(s.len(), 4, "the IR, the loops, Burn, the matrix product");
    assert_eq!(s[0].figures[1].nodes.len(), 5);
    assert_eq!(s[3].tables[0].rows.len(), 2);
    assert_eq!(s[1].figures.len(), 1);
    assert_eq!(
        s[2].figures[0].series.len(),
        3,
        "loops, fused loop, Burn flex"
    );
}

#[test]
fn burn_flex_chains_equal_the_fused_loops() {
    let n = 4096;
    let mut rng = XorShift(7);
    let (a, b, c) = (
        random_vec(&mut rng, n),
        random_vec(&mut rng, n),
        random_vec(&mut rng, n),
    );
    let (mut e1, mut e2) = (vec![0f32; n], vec![0f32; n]);
    apb_c_fused(&a, &b, &c, &mut e1);
    a_bc_1_fused(&a, &b, &c, &mut e2);
    let got =
        burn_chains::<burn::backend::Flex>(&Default::default(), [&a, &b, &c], [&e1, &e2], 2, true)
            .unwrap();
    assert_eq!(got.len(), 2);
    for g in &got {
        assert!(g.max_abs_diff <= 1e-6, "{}: {}", g.expr, g.max_abs_diff);
        assert!(g.time_s > 0.0 && g.alloc_bytes_per_element.is_some());
    }
    // A wrong expectation is detected.
    let wrong =
        burn_chains::<burn::backend::Flex>(&Default::default(), [&a, &b, &c], [&e2, &e1], 1, false)
            .unwrap();
    assert!(wrong[0].max_abs_diff > 1e-3 && wrong[0].alloc_bytes_per_element.is_none());
}

#[test]
fn result_survives_json_and_renders_the_same() {
    let fresh = measure(&small()).unwrap();
    let fresh_sections = sections(&fresh, &crate::cited::from_experiment("fusion_ir"));
    // Through a JSON value, as the study record holds it: exact.
    let value = serde_json::to_value(&fresh).unwrap();
    let stored: FusionResult = serde_json::from_value(value).unwrap();
    assert_eq!(
        sections(&stored, &crate::cited::from_experiment("fusion_ir")),
        fresh_sections
    );
    // Through JSON text: serde_json (without its `float_roundtrip` feature) may read an f64
    // one unit in the last place off, so figure points are compared to that precision.
    let text = serde_json::to_string(&fresh).unwrap();
    let stored: FusionResult = serde_json::from_str(&text).unwrap();
    assert_eq!(stored.params, fresh.params);
    assert_eq!(stored.ir.fused_graph, fresh.ir.fused_graph);
    assert_eq!(stored.loops.chains.len(), 2);
    let mut again = sections(&stored, &crate::cited::from_experiment("fusion_ir"));
    assert_eq!(again.len(), fresh_sections.len());
    for (a, b) in again.iter_mut().zip(&fresh_sections) {
        for (fa, fb) in a.figures.iter_mut().zip(&b.figures) {
            for (sa, sb) in fa.series.iter_mut().zip(&fb.series) {
                for (pa, pb) in sa.points.iter_mut().zip(&sb.points) {
                    assert!((pa.1 - pb.1).abs() <= 4.0 * f64::EPSILON * pb.1.abs());
                    *pa = *pb;
                }
            }
        }
    }
    assert_eq!(again, fresh_sections);
}

#[test]
fn cuda_rows_and_figure_render_when_measured() {
    let mut r = measure(&small()).unwrap();
    let flex = r.burn.flex.clone();
    if let Err(why) = &r.burn.cuda {
        let s = sections(&r, &crate::cited::from_experiment("fusion_ir"));
        assert_eq!(s[2].tables[0].rows.len(), 2);
        assert_eq!(s[2].figures.len(), 1);
        assert!(s[2].ours.contains(why.as_str()), "{}", s[2].ours);
    }
    r.burn.cuda = Ok(CudaChains {
        device: "Test GPU".into(),
        fused: flex.clone(),
        unfused: flex,
    });
    let s = sections(&r, &crate::cited::from_experiment("fusion_ir"));
    let rows = &s[2].tables[0].rows;
    assert_eq!(rows.len(), 6, "flex, CUDA unfused, CUDA fused per chain");
    assert_eq!(rows[1][1], "Burn CUDA without fusion (Test GPU)");
    assert_eq!(rows[2][2], "16 (floor, if fully fused)");
    assert_eq!(s[2].figures.len(), 2);
    assert_eq!(s[2].figures[1].series.len(), 2);
    assert!(s[2].ours.contains("`a+b*c+1` on CUDA"), "{}", s[2].ours);
}

#[test]
fn the_runners_inputs_and_reference_are_the_studys() {
    // The slim runner's `fusion-chains` regenerates the arrays the study times (same
    // generator, after the IR check's draws) and the fused loops' outputs.
    let p = small();
    let mut rng = XorShift(SEED);
    measure_ir(&p, &mut rng).unwrap();
    let (_, arrays) = measure_loops(&p, &mut rng).unwrap();
    let inputs = memwall_runner::fusion_chains::study_inputs(p.n, p.ir_n);
    assert!(bit_equal(&inputs[0], &arrays.a) && inputs[0].len() == p.n);
    assert!(bit_equal(&inputs[1], &arrays.b) && bit_equal(&inputs[2], &arrays.c));
    let [e1, e2] = memwall_runner::fusion_chains::expected([&arrays.a, &arrays.b, &arrays.c]);
    let mut apb_c = vec![0f32; p.n];
    apb_c_fused(&arrays.a, &arrays.b, &arrays.c, &mut apb_c);
    assert!(bit_equal(&e1, &apb_c) && bit_equal(&e2, &arrays.a_bc_1));
}

/// A record of the study without a CUDA measurement, stored in `runs/fusion_ir/` of a
/// temporary record store; returns the store, the record and its path.
fn stored_without_cuda() -> (tempfile::TempDir, crate::StudyRecord, std::path::PathBuf) {
    let mut r = measure(&small()).unwrap();
    r.burn.cuda = Err("no CUDA driver library (test)".into());
    let record = crate::StudyRecord {
        study: STUDY.into(),
        profile: "cpu".into(),
        kind: crate::spec::StudyKind::InProcess("fusion_ir".into()),
        params_hash: "test".into(),
        env: crate::measure::Environment {
            cpu_model: "Test CPU".into(),
            cpu_threads: 2,
            ..Default::default()
        },
        result: serde_json::to_value(&r).unwrap(),
        cited: None,
        wall_s: 1.0,
        finished_at: "2026-11-25T13:04:06+00:00".into(),
    };
    let runs = tempfile::tempdir().unwrap();
    let path = runs.path().join(STUDY).join("cpu.result.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    (runs, record, path)
}

/// The study's experiment file, loaded (its `[params.cited]` quoted by the renderer).
fn fusion_study() -> crate::spec::Study {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../experiments")
        .join(format!("{STUDY}.toml"));
    crate::spec::Study::load(&path, crate::spec::Profile::Cpu, None).unwrap()
}

/// The slim runner's run of the chains on a GPU, as `memwall-job fusion-chains` writes it.
fn gpu_run(n: usize, ir_n: usize) -> FusionChainsRun {
    let chain = |expr, time_s| BurnChain {
        expr,
        time_s,
        alloc_bytes_per_element: None,
        max_abs_diff: 0.0,
    };
    FusionChainsRun {
        format: memwall_runner::fusion_chains::FUSION_CHAINS_FORMAT.into(),
        backend: ChainsBackend::Cuda,
        n,
        ir_n,
        repeats: 5,
        finished_at: "2026-12-01T09:30:00+00:00".into(),
        wall_s: 20.0,
        runner_revision: "0123456789ab".into(),
        burn_version: "0.21.0".into(),
        chains: Ok(CudaChains {
            device: "NVIDIA H100 80GB HBM3".into(),
            fused: Chain::ALL.map(|c| chain(c, 2e-4)).to_vec(),
            unfused: vec![
                chain(Chain::APlusBTimesC, 5e-4),
                chain(Chain::APlusBTimesCPlus1, 7e-4),
            ],
        }),
    }
}

#[test]
fn an_imported_cuda_run_is_rendered_and_measured() {
    let (runs, record, path) = stored_without_cuda();
    let study_dir = path.parent().unwrap();
    let study = fusion_study();
    let speedup = |rows: &[crate::document::content::GlanceRow]| {
        let i = study
            .claims
            .iter()
            .position(|c| c.measure == "cuda_fusion_speedup")
            .unwrap();
        rows[i].ours.clone()
    };

    // Without the file: the stored result as it is, no CUDA rows, no speed-up.
    assert_eq!(read_cuda_chains(runs.path()).unwrap(), None);
    assert_eq!(with_imported_cuda(&record.result, study_dir).unwrap(), None);
    let before = crate::render_with(&study, &record, &path).unwrap();
    assert_eq!(before[2].tables[0].rows.len(), 2);
    let glance = crate::glance(&study, &record, &path).unwrap();
    assert_eq!(speedup(&glance), "–");
    assert!(!glance[0].device.contains("GPU bundle"));

    // With it: the CUDA rows, the figure and the speed-up, saying where they come from.
    let p = small();
    let run = gpu_run(p.n, p.ir_n);
    std::fs::write(
        study_dir.join(CUDA_CHAINS_FILE),
        serde_json::to_vec_pretty(&run).unwrap(),
    )
    .unwrap();
    assert_eq!(read_cuda_chains(runs.path()).unwrap(), Some(run.clone()));
    let s = crate::render_with(&study, &record, &path).unwrap();
    let rows = &s[2].tables[0].rows;
    assert_eq!(rows.len(), 6, "flex, CUDA unfused, CUDA fused per chain");
    assert_eq!(
        rows[1][1],
        "Burn CUDA without fusion (NVIDIA H100 80GB HBM3)"
    );
    assert_eq!(rows[1][5], "0.500");
    assert_eq!(s[2].figures.len(), 2);
    let ours = &s[2].ours;
    for part in [
        "measured on NVIDIA H100 80GB HBM3 by the slim runner",
        "revision 0123456789ab",
        "from a GPU bundle on 2026-12-01",
        "the same arrays as the rows above",
    ] {
        assert!(ours.contains(part), "`{part}` not in: {ours}");
    }
    let glance = crate::glance(&study, &record, &path).unwrap();
    assert_eq!(speedup(&glance), "2.50x", "min(5/2, 7/2)");
    assert!(
        glance[0].device.contains(
            "CUDA rows: NVIDIA H100 80GB HBM3 (slim runner from a GPU bundle, 2026-12-01)"
        ),
        "{}",
        glance[0].device
    );
    merged_measures_leave_the_record_unchanged(&record, study_dir);

    unmatched_runs_say_why(&study, &record, &path);
    let glance = crate::glance(&study, &record, &path).unwrap();
    assert_eq!(speedup(&glance), "–");
}

/// The measures of the stored result merged with the imported run answer the CUDA claim; the
/// stored record itself is unchanged.
fn merged_measures_leave_the_record_unchanged(
    record: &crate::StudyRecord,
    study_dir: &std::path::Path,
) {
    let merged: FusionResult = serde_json::from_value(
        with_imported_cuda(&record.result, study_dir)
            .unwrap()
            .unwrap()
            .0,
    )
    .unwrap();
    let m = measures(&merged);
    assert!(value(&m, "cuda_fusion_speedup").is_finite());
    // The stored record itself is unchanged (the merge happens when it is rendered).
    let stored: FusionResult = serde_json::from_value(record.result.clone()).unwrap();
    assert!(stored.burn.imported_cuda.is_none());
    assert!(value(&measures(&stored), "cuda_fusion_speedup").is_nan());
}

/// Imported runs that do not match the record: another size, no measurement, a flex run; each
/// rendered with the reason.
fn unmatched_runs_say_why(
    study: &crate::spec::Study,
    record: &crate::StudyRecord,
    path: &std::path::Path,
) {
    let study_dir = path.parent().unwrap();
    let p = small();
    // A run at another size says so.
    let other = gpu_run(1 << 24, 100_000);
    std::fs::write(
        study_dir.join(CUDA_CHAINS_FILE),
        serde_json::to_vec(&other).unwrap(),
    )
    .unwrap();
    let s = crate::render_with(study, record, path).unwrap();
    assert!(s[2].ours.contains("so the arrays differ"), "{}", s[2].ours);
    assert!(
        s[2].tables[0]
            .caption
            .contains("CUDA rows: 16777216 elements"),
        "{}",
        s[2].tables[0].caption
    );

    // A run that measured nothing, or timed flex: no CUDA rows, the reasons.
    let mut none = gpu_run(p.n, p.ir_n);
    none.chains = Err("no CUDA driver library (bundle)".into());
    std::fs::write(
        study_dir.join(CUDA_CHAINS_FILE),
        serde_json::to_vec(&none).unwrap(),
    )
    .unwrap();
    let s = crate::render_with(study, record, path).unwrap();
    assert_eq!(s[2].tables[0].rows.len(), 2);
    assert!(s[2]
        .ours
        .contains("measured none either: no CUDA driver library (bundle)"));
    let mut flex = gpu_run(p.n, p.ir_n);
    flex.backend = ChainsBackend::Flex;
    flex.chains.as_mut().unwrap().fused.clear();
    std::fs::write(
        study_dir.join(CUDA_CHAINS_FILE),
        serde_json::to_vec(&flex).unwrap(),
    )
    .unwrap();
    let s = crate::render_with(study, record, path).unwrap();
    assert_eq!(s[2].tables[0].rows.len(), 2);
    assert!(
        s[2].ours.contains("is a flex run of the slim runner"),
        "{}",
        s[2].ours
    );
}

#[test]
fn a_malformed_cuda_run_is_an_error_naming_file_and_field() {
    let (runs, record, path) = stored_without_cuda();
    let p = small();
    let text = serde_json::to_string_pretty(&gpu_run(p.n, p.ir_n)).unwrap();
    let file = path.parent().unwrap().join(CUDA_CHAINS_FILE);
    let cases = [
        (
            text.replace("\"repeats\": 5", "\"repeats\": \"five\""),
            "field `repeats`",
        ),
        (
            text.replace("\"time_s\": 0.0005", "\"time_s\": -1.0"),
            "field `chains.Ok.unfused[0].time_s`",
        ),
        (
            text.replace(
                "\"format\": \"memwall-fusion-chains/1\"",
                "\"format\": \"other\"",
            ),
            "field `format`",
        ),
        ("{}".to_string(), "field `format`"),
    ];
    for (bad, field) in cases {
        assert_ne!(bad, text, "{field}: the replacement must apply");
        std::fs::write(&file, &bad).unwrap();
        for e in [
            read_cuda_chains(runs.path()).unwrap_err(),
            crate::render_with(&fusion_study(), &record, &path).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.contains(&file.display().to_string()), "{e}");
            assert!(e.contains(field), "`{field}` not in: {e}");
        }
    }
}

#[test]
fn measures_answer_the_claims() {
    let m = assert_claims_have_measures::<FusionIr>("fusion_ir", measure(&small()).unwrap());
    assert_eq!(value(&m, "ir_fused_kernels"), 1.0);
    assert_eq!(value(&m, "ir_unfused_kernels"), 3.0);
    assert_eq!(value(&m, "ir_mismatches"), 0.0);
    assert_eq!(value(&m, "apb_c_bytes_ratio"), 1.5);
    assert_eq!(value(&m, "a_bc_1_bytes_ratio"), 2.0);
    assert!(value(&m, "apb_c_loop_speedup") > 0.0);
    assert!(value(&m, "a_bc_1_loop_speedup") > 0.0);
}

#[test]
fn the_fused_product_equals_the_product_and_a_separate_add() {
    let mut rng = XorShift(11);
    // Odd sizes: edge tiles of the GEMM's register blocks in both dimensions.
    let (m, n, k) = (37, 53, 19);
    let mm = measure_matmul((m, n, k), 3, &mut rng).unwrap();
    assert_eq!((mm.m, mm.n, mm.k), (m, n, k));
    assert_eq!(
        (mm.unfused_bytes_per_element, mm.fused_bytes_per_element),
        (16, 8)
    );
    assert_eq!(mm.max_abs_diff, 0.0, "one rounding either way: {mm:?}");
    assert!(mm.max_abs > 0.0 && mm.unfused_s > 0.0 && mm.fused_s > 0.0);
    // gemm_into against a naive triple loop, with and without accumulation.
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let mut naive = vec![1.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                naive[i * n + j] += a[i * k + l] * b[l * n + j];
            }
        }
    }
    let mut acc = vec![1.0f32; m * n];
    gemm_into(&mut acc, &a, &b, (m, n, k), true);
    assert_eq!(acc, naive, "small integers and halves: exact in f32");
    let mut fresh = vec![9.0f32; m * n];
    gemm_into(&mut fresh, &a, &b, (m, n, k), false);
    let plain: Vec<f32> = naive.iter().map(|x| x - 1.0).collect();
    assert_eq!(fresh, plain, "read_dst = false ignores what dst held");
    // The measures: the speed-up from the timings, the bytes ratio 2.
    let mut r = measure(&small()).unwrap();
    r.matmul = Some(MatmulChain {
        unfused_s: 3.0,
        fused_s: 2.0,
        ..mm
    });
    assert_eq!(value(&measures(&r), "matmul_epilogue_speedup"), 1.5);
    assert_eq!(value(&measures(&r), "matmul_epilogue_bytes_ratio"), 2.0);
    // A record written before the chain renders without its section.
    r.matmul = None;
    assert!(value(&measures(&r), "matmul_epilogue_speedup").is_nan());
    let s = sections(&r, &crate::cited::from_experiment("fusion_ir"));
    assert_eq!(s.len(), 3);
}
