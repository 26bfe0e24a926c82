//! Tests of the scalar checkpointing study.

use super::*;
use crate::InProcessStudy;

use crate::claim_checks::{assert_claims_have_measures, value};

#[test]
fn checkpoint_memory_is_depth_over_k() {
    let (v1, b_all) = compute_with_storage(1.001, 1.0, 10_000).unwrap();
    let (v2, b_k) = compute_with_checkpoints(1.001, 1.0, 10_000, 100).unwrap();
    assert_eq!(b_all, 10_001 * 8);
    assert_eq!(b_k, 101 * 8);
    assert!(v1.is_infinite() && v2.is_infinite());
}

#[test]
fn post_map_overflows_early() {
    let s = overflow_step(1.001, 1.0, 1000).unwrap();
    assert!((8..=12).contains(&s), "overflow at {s}");
    let mut x = 1.001f64;
    for _ in 0..s - 1 {
        x = x * x + 1.0;
    }
    assert!(x.is_finite());
}

#[test]
fn checkpointed_derivative_matches_full_storage() {
    for &(x0, c, n, k) in &[
        (0.1, 0.25, 100_000u64, 316u64),
        (0.1, 0.25, 1000, 7),
        (1.001, 1.0, 8, 3),
        (0.1, -0.5, 500, 22),
    ] {
        let f = grad_full_storage(x0, c, n).unwrap();
        let g = grad_checkpointed(x0, c, n, k).unwrap();
        assert!(f.grad.is_finite() && f.grad != 0.0, "{f:?}");
        assert_eq!(f.grad.to_bits(), g.grad.to_bits());
        assert_eq!(f.value.to_bits(), g.value.to_bits());
        assert!(g.bytes < f.bytes || n < 10);
        let fw = grad_forward_mode(x0, c, n);
        assert!(((fw - f.grad) / f.grad).abs() < 1e-9);
    }
    // Small hand check: x0 = 1.001, c = 1, n = 2: d = 2*x0 * 2*x1.
    let x1 = 1.001f64 * 1.001 + 1.0;
    let g = grad_checkpointed(1.001, 1.0, 2, 1).unwrap();
    assert!((g.grad - 4.0 * 1.001 * x1).abs() < 1e-12 * g.grad);
}

#[test]
fn checkpointed_derivative_counts_segments_of_every_k() {
    // 10 steps in segments of 4: checkpoints x_0, x_4, x_8, a 4-value segment buffer, and
    // every step evaluated once forward and once recomputed.
    let g = grad_checkpointed(0.1, 0.25, 10, 4).unwrap();
    assert_eq!(g.bytes, (3 + 4) * 8);
    assert_eq!(g.steps_evaluated, 20);
    let whole = grad_checkpointed(0.1, 0.25, 10, 50).unwrap();
    assert_eq!(whole.bytes, (1 + 10) * 8);
    assert_eq!(
        whole.grad.to_bits(),
        grad_full_storage(0.1, 0.25, 10).unwrap().grad.to_bits()
    );
}

fn small_params() -> CheckpointParams {
    CheckpointParams {
        depth: 100_000,
        ks: vec![10, 1000],
        ks_beyond: vec![50_000],
        repeats: 1,
        grad_depth: 10_000,
        ..Default::default()
    }
}

#[test]
fn run_small() {
    let p = small_params();
    let s = sections(
        &measure(&p).unwrap(),
        &crate::cited::from_experiment("scalar_checkpoint"),
    );
    assert_eq!(s.len(), 2);
    // Full storage, the two K of the table and the one past it.
    assert_eq!(s[0].tables[0].rows.len(), 4);
    assert!(s[0].tables[0].rows[3][0].ends_with("(past the post's table)"));
    let p: CheckpointParams = serde_json::from_str(r#"{"depth": 1000}"#).unwrap();
    assert_eq!(p.depth, 1000);
    assert!(serde_json::from_str::<CheckpointParams>(r#"{"dept": 1}"#).is_err());
}

#[test]
fn result_survives_json_and_renders_the_same() {
    let r = measure(&small_params()).unwrap();
    // Through a serde_json::Value, as the study runner stores it. (The record file's text
    // reads floats back exactly only with serde_json's `float_roundtrip` feature.)
    let json = serde_json::to_value(&r).unwrap();
    let back: CheckpointResult = serde_json::from_value(json).unwrap();
    assert_eq!(back.forward, r.forward);
    assert_eq!(back.derivative, r.derivative);
    assert_eq!(
        ScalarCheckpoint::sections(&back, &crate::cited::from_experiment("scalar_checkpoint")),
        ScalarCheckpoint::sections(&r, &crate::cited::from_experiment("scalar_checkpoint"))
    );
}

#[test]
fn non_finite_derivatives_survive_json() {
    // x <- x*x + 1 from 2 overflows: the derivative is +inf after a few hundred steps.
    let g = grad_full_storage(2.0, 1.0, 400).unwrap();
    assert!(g.value.is_infinite() && g.grad.is_infinite());
    let back: GradResult = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
    assert_eq!(back, g);
}

#[test]
fn invalid_params_are_rejected() {
    for p in [
        CheckpointParams {
            ks: vec![],
            ..small_params()
        },
        CheckpointParams {
            ks: vec![10, 0],
            ..small_params()
        },
        CheckpointParams {
            grad_depth: 0,
            ..small_params()
        },
        // Past the table means above its largest K and at most the depth.
        CheckpointParams {
            ks_beyond: vec![1000],
            ..small_params()
        },
        CheckpointParams {
            ks_beyond: vec![100_001],
            ..small_params()
        },
        CheckpointParams {
            x0: f64::NAN,
            ..small_params()
        },
    ] {
        assert!(matches!(measure(&p), Err(DemoError::Param(_))));
    }
}

#[test]
fn measures_answer_the_claims() {
    let m = assert_claims_have_measures::<ScalarCheckpoint>(
        "scalar_checkpoint",
        measure(&small_params()).unwrap(),
    );
    // 8 B per stored value at the post's 2e9 + 1 values, in MiB: the post's 15258.79.
    assert!((value(&m, "full_storage_mb_at_post_depth") - 15258.79).abs() < 0.01);
    // depth 100000: (100000 + 1) values over (10000 + 1) checkpoints at K = 10.
    let k10 = value(&m, "k10_memory_reduction");
    assert!((k10 - 100_001.0 / 10_001.0).abs() < 1e-9, "{k10}");
    assert!(value(&m, "max_speedup_vs_storage") >= value(&m, "min_speedup_vs_storage"));
    assert!(value(&m, "time_smallest_k_over_largest_k") > 0.0);
    assert!(value(&m, "time_beyond_table_over_table_end") > 0.0);
    // Without K = 10 the reduction is not measured.
    let r = measure(&CheckpointParams {
        ks: vec![1000],
        ..small_params()
    })
    .unwrap();
    assert!(value(&measures(&r), "k10_memory_reduction").is_nan());
    // Without K past the table there is no time to compare with the table's end.
    let r = measure(&CheckpointParams {
        ks_beyond: vec![],
        ..small_params()
    })
    .unwrap();
    assert!(value(&measures(&r), "time_beyond_table_over_table_end").is_nan());
    assert!(r.forward.beyond.is_empty());
}
