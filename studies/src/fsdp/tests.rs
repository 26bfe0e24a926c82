//! Tests of the FSDP study.

use super::*;

use crate::claim_checks::{assert_claims_have_measures, value};

#[test]
fn slide_examples() {
    let ar = all_reduce(vec![vec![1.0, 2.0, 3.0], vec![1.0, 0.0, 1.0]]).unwrap();
    for (b, _) in &ar {
        assert_eq!(b, &vec![2.0, 2.0, 4.0]);
    }
    assert_eq!(
        reduce_scatter(vec![vec![1.0, 2.0, 3.0, 4.0], vec![1.0, 0.0, 1.0, 1.0]]).unwrap(),
        vec![vec![2.0, 2.0], vec![4.0, 5.0]]
    );
    for b in all_gather(vec![vec![1.0, 2.0], vec![3.0, 4.0]]).unwrap() {
        assert_eq!(b, vec![1.0, 2.0, 3.0, 4.0]);
    }
}

#[test]
fn all_reduce_many_workers_and_bytes() {
    for n in [1usize, 3, 5, 8] {
        let len = 40;
        let inputs: Vec<Vec<f32>> = (0..n)
            .map(|w| (0..len).map(|i| (i * (w + 1)) as f32).collect())
            .collect();
        let expect: Vec<f32> = (0..len)
            .map(|i| (0..n).map(|w| (i * (w + 1)) as f32).sum())
            .collect();
        let res = all_reduce(inputs).unwrap();
        let total: u64 = res.iter().map(|r| r.1).sum();
        for (b, _) in &res {
            assert_eq!(b, &expect);
        }
        // Every chunk travels N-1 hops in each phase: total = 2 (N-1) * buffer bytes.
        assert_eq!(total, 2 * (n as u64 - 1) * len as u64 * 4);
    }
}

#[test]
fn burn_collective_ring_matches_the_exact_sum() {
    for n in [2usize, 3, 4] {
        let len = 30;
        let inputs: Vec<Vec<f32>> = (0..n)
            .map(|w| (0..len).map(|i| ((i + 1) * (w + 2)) as f32).collect())
            .collect();
        let expect: Vec<f32> = (0..len)
            .map(|i| (0..n).map(|w| ((i + 1) * (w + 2)) as f32).sum())
            .collect();
        let (res, secs) = burn_ring_all_reduce(inputs).unwrap();
        assert!(secs >= 0.0);
        assert_eq!(res.len(), n);
        for b in &res {
            assert_eq!(b, &expect, "{n} peers");
        }
    }
}

#[test]
fn memory_model() {
    let p = FsdpParams::default();
    let m1 = fsdp_memory(&p, 1);
    assert!((m1.params + m1.grads + m1.optimizer - 16.0 * 1.6e9).abs() < 1.0);
    let m64 = fsdp_memory(&p, 64);
    assert!((m64.params + m64.grads + m64.optimizer - 16.0 * 1.6e9 / 64.0).abs() < 1.0);
    assert_eq!(m1.activations, m64.activations);
}

#[test]
fn run_small() {
    let s = sections(
        &measure(&FsdpParams {
            ring_elems: 1000,
            ring_workers: vec![2, 4],
            ..Default::default()
        })
        .unwrap(),
        &crate::cited::from_experiment("fsdp"),
    );
    assert_eq!(s.len(), 2);
}

#[test]
fn result_round_trips_through_json_and_renders_the_same() {
    let r = measure(&FsdpParams {
        ring_elems: 1001,
        ring_workers: vec![2, 3],
        ..Default::default()
    })
    .unwrap();
    let back: FsdpResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back.ring, r.ring);
    assert_eq!(back.memory, r.memory);
    assert_eq!(
        sections(&back, &crate::cited::from_experiment("fsdp")),
        sections(&r, &crate::cited::from_experiment("fsdp"))
    );
    // 1001 elements over 3 workers: chunks of 333, 334 and 334 elements.
    assert_eq!(r.ring[1].bytes_sent.iter().sum::<u64>(), 2 * 2 * 1001 * 4);
    // 2 workers: each sends one chunk of each half in each phase, 500 + 501 elements.
    assert_eq!(r.ring[0].bytes_sent, vec![1001 * 4, 1001 * 4]);
}

#[test]
fn measures_answer_the_claims() {
    let r = measure(&FsdpParams {
        ring_elems: 1000,
        ring_workers: vec![2, 3],
        ..Default::default()
    })
    .unwrap();
    let m = assert_claims_have_measures::<Fsdp>("fsdp", r);
    for name in [
        "allreduce_example_max_abs_error",
        "reduce_scatter_example_max_abs_error",
        "allgather_example_max_abs_error",
    ] {
        assert_eq!(value(&m, name), 0.0, "{name}");
    }
    // Every chunk travels N-1 hops per phase: exactly 2(N-1)/N of the buffer on average.
    assert!((value(&m, "ring_traffic_over_rs_plus_ag") - 1.0).abs() < 1e-12);
    // 1 to 64 devices: the sharded states shrink 64x.
    assert!((value(&m, "sharded_state_reduction") - 64.0).abs() < 1e-9);
    assert_eq!(slide_error(&[vec![1.0]], &[&[1.0, 2.0]]), f64::INFINITY);
    assert_eq!(slide_error(&[vec![1.0, 2.5]], &[&[1.0, 2.0]]), 0.5);
}
