//! Peak-memory measurements. The counting allocator is process-wide, so this file holds a
//! single test (its own process, nothing else allocating concurrently).

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamWConfig;
use burn::tensor::backend::Backend;
use memwall_core::spec::ModelConfig;
use memwall_runner::data::Batch;
use memwall_runner::measure::{
    allocated_bytes, peak_allocated_bytes, reset_peak, HeapProbe, MemoryProbe,
};
use memwall_runner::model::{InitModel, TransformerLm};
use memwall_runner::train::{segment, train_step, Inputs};

type B = Autodiff<Flex>;

#[test]
fn heap_probe_and_checkpointing_peaks() {
    // 1. The probe sees a 64 MiB allocation that is freed before the step ends.
    let mut probe = HeapProbe;
    probe.begin_step();
    let before = allocated_bytes();
    let v = vec![1u8; 64 << 20];
    std::hint::black_box(&v);
    drop(v);
    let s = probe.end_step();
    assert!(
        s.peak_allocated_bytes >= before + (64 << 20),
        "{} < {before} + 64 MiB",
        s.peak_allocated_bytes
    );

    // 2. Checkpointing every block lowers the step's peak on an activation-dominated shape.
    let cfg = ModelConfig {
        layers: 6,
        d_model: 32,
        heads: 2,
        d_ff: 64,
        seq_len: 128,
        batch: 8,
        vocab: 300,
        tie_embeddings: true,
    };
    let n = cfg.batch * cfg.seq_len;
    let ids: Vec<i64> = (0..n as i64 + 1).map(|i| (i * 37 + 11) % 300).collect();
    let batch = Batch {
        batch: cfg.batch,
        seq_len: cfg.seq_len,
        inputs: ids[..n].to_vec(),
        targets: ids[1..].to_vec(),
        positions: (0..n as i64).map(|i| i % cfg.seq_len as i64).collect(),
    };
    let device = Default::default();
    B::seed(&device, 5);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch, &device);
    let step_peak = |plan: Option<Vec<segment::Segment>>| {
        let mut optim = AdamWConfig::new().init::<B, TransformerLm<B>>();
        let mut probe = HeapProbe;
        // the first step allocates the optimizer state
        let (m, _) = train_step(
            model.clone(),
            &mut optim,
            1e-3,
            &inputs,
            plan.as_deref(),
            false,
            &mut probe,
        );
        reset_peak();
        let base = allocated_bytes();
        let (_m, _) = train_step(
            m,
            &mut optim,
            1e-3,
            &inputs,
            plan.as_deref(),
            false,
            &mut probe,
        );
        peak_allocated_bytes() - base
    };
    let none = step_peak(None);
    let every = step_peak(Some(segment::every_k(6, 1)));
    let sqrt = step_peak(Some(segment::every_k(6, 3)));
    assert!(
        (every as f64) < 0.7 * none as f64,
        "every block: {every} B vs {none} B without"
    );
    assert!(sqrt < none, "sqrt(n): {sqrt} B vs {none} B without");
}
