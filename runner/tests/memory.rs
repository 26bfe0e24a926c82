//! Peak-memory measurements. The counting allocator is process-wide, so this file holds a
//! single test (its own process, nothing else allocating concurrently).

mod common;

use burn::backend::{Autodiff, Flex};
use memwall_runner::measure::{allocated_bytes, HeapProbe, MemoryProbe};
use memwall_runner::train::segment;

type B = Autodiff<Flex>;

#[test]
fn heap_probe_and_checkpointing_peaks() {
    // 1. The probe sees a 64 MiB allocation that is freed before the step ends.
    let mut probe = HeapProbe::default();
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
    let (cfg, model, inputs) = common::activation_dominated_model();
    let device = Default::default();
    let step_peak =
        |plan: Option<Vec<segment::Segment>>| common::step_peak(&model, &inputs, plan.as_deref());
    let none = step_peak(None);
    let every = step_peak(Some(segment::every_k(6, 1)));
    let sqrt = step_peak(Some(segment::every_k(6, 3)));
    assert!(
        (every as f64) < 0.7 * none as f64,
        "every block: {every} B vs {none} B without"
    );
    assert!(sqrt < none, "sqrt(n): {sqrt} B vs {none} B without");

    // 3. Nested checkpointing: one 6-block segment recomputed as 1-block inner segments holds
    // one block's activations (and five inner checkpoints) instead of six blocks'.
    let whole = step_peak(Some(segment::every_k(6, 6)));
    let nested = step_peak(Some(segment::every_k_nested(6, 6, 1)));
    let x = burn::tensor::Tensor::<B, 3>::ones([cfg.batch, cfg.seq_len, cfg.d_model], &device);
    let (_, act) = common::block_memory(&model.blocks[0], &x);
    assert!(
        nested + 3 * act < whole,
        "nested: {nested} B vs {whole} B for the segment in one piece (one block keeps about {act} B)"
    );
}
