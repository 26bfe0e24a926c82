//! Unit-level plans hold what they predict: real training steps on the CPU under every named
//! policy and two memory budgets, each step's measured peak above the steady state against the plan's kept bytes
//! (`UnitPlan::kept_bytes`, from the shapes). The counting allocator is process-wide, so this
//! file holds a single test.

mod common;

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamWConfig;
use memwall_core::strategy::{every_k, LayerNormSaving};
use memwall_core::units::{Estimate, Policy, Unit, UnitPlan, UnitSet, UnitShape};
use memwall_runner::measure::{allocated_bytes, peak_allocated_bytes, reset_peak, HeapProbe};
use memwall_runner::model::TransformerLm;
use memwall_runner::train::{train_step, unit_train_step, Inputs};

type B = Autodiff<Flex>;

/// Peak above the steady state (bytes) of the second of two steps, with the unit executor under
/// `keeps` or (`None`) the block-level segment executor checkpointing every block, and the unit
/// outputs the second step recomputed.
fn step_peak(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
    keeps: Option<&[UnitSet]>,
) -> (u64, usize) {
    let layers = model.blocks.len();
    let plan = every_k(layers, 1);
    let mut optim = AdamWConfig::new().init::<B, TransformerLm<B>>();
    let mut probe = HeapProbe::default();
    let mut step = |m: TransformerLm<B>| match keeps {
        Some(k) => {
            let (m, loss, recomputed) =
                unit_train_step(m, &mut optim, 1e-3, inputs, k, false, &mut probe);
            (m, loss, recomputed.len())
        }
        None => {
            let (m, loss) = train_step(m, &mut optim, 1e-3, inputs, Some(&plan), false, &mut probe);
            (m, loss, 0)
        }
    };
    let (m, _, _) = step(model.clone());
    reset_peak();
    let steady = allocated_bytes();
    let (m, loss, recomputed) = step(m);
    let peak = peak_allocated_bytes() - steady;
    drop((m, loss));
    (peak, recomputed)
}

#[test]
fn measured_peaks_follow_the_kept_bytes_of_every_policy() {
    let (cfg, model, inputs) = common::activation_dominated_model();
    let shape = UnitShape {
        d_model: cfg.d_model as u64,
        d_ff: cfg.d_ff as u64,
        heads: cfg.heads as u64,
        batch: cfg.batch as u64,
        seq_len: cfg.seq_len as u64,
        dtype_bytes: 4,
    };
    let segments = every_k(cfg.layers, 1);
    let policies = [
        Policy::SaveEverything,
        Policy::SaveMatmuls,
        Policy::Budget(0.6, Estimate::Flops),
        Policy::Budget(0.25, Estimate::Flops),
        Policy::Keep(UnitSet::of(&[Unit::Attention])),
        Policy::SaveNothing,
    ];
    // By decreasing kept bytes (the budgets' plans keep different units in different blocks).
    let mut plans: Vec<(Policy, UnitPlan)> = policies
        .into_iter()
        .map(|p| {
            let plan =
                UnitPlan::new(&segments, p, LayerNormSaving::SavesInput, &shape, None).unwrap();
            (p, plan)
        })
        .collect();
    plans.sort_by_key(|(_, plan)| std::cmp::Reverse(plan.kept_bytes));
    assert!(
        plans
            .iter()
            .any(|(_, plan)| plan.keeps.windows(2).any(|w| w[0] != w[1])),
        "no budget plan keeps different units in different blocks"
    );
    let mut rows = Vec::new();
    for (policy, plan) in plans {
        let kept = plan.kept_bytes;
        let (measured, recomputed) = step_peak(&model, &inputs, Some(&plan.keeps));
        assert_eq!(
            recomputed, plan.recomputed_units,
            "{policy}: recomputed units"
        );
        rows.push((policy, kept, measured));
    }
    let (block_level, _) = step_peak(&model, &inputs, None);
    // Everything one block's units produce, f32: what may be live beside the kept values while
    // a block's backward runs on its recomputed values.
    let one_block = shape.kept_bytes(UnitSet::ALL);
    let table: Vec<String> = rows
        .iter()
        .map(|(p, k, m)| format!("{p}: kept {k} B, measured peak above steady {m} B"))
        .collect();
    let table = format!("{}\nblock-level K = 1: {block_level} B", table.join("\n"));
    eprintln!("{table}");
    for w in rows.windows(2) {
        assert!(
            w[1].1 < w[0].1,
            "policies listed by decreasing kept bytes:\n{table}"
        );
        assert!(
            w[1].2 < w[0].2,
            "a policy keeping less must peak lower:\n{table}"
        );
    }
    // Each policy's saving against keeping everything is what it does not keep, less what one
    // block's backward holds while it recomputes.
    let (_, all_kept, all_measured) = rows[0];
    for (policy, kept, measured) in &rows[1..] {
        let predicted = (all_kept - kept) as f64;
        let saved = all_measured as f64 - *measured as f64;
        assert!(
            saved <= predicted * 1.05 && saved >= predicted - one_block as f64,
            "{policy}: saved {saved} B against save_everything, predicted {predicted} B (less at \
             most one block's {one_block} B):\n{table}"
        );
    }
    // Keeping nothing is the block-level plan: the same peak within 5%.
    let nothing = rows.last().expect("six policies").2 as f64;
    assert!(
        (nothing - block_level as f64).abs() <= 0.05 * block_level as f64,
        "save_nothing {nothing} B vs block-level checkpointing {block_level} B:\n{table}"
    );
}
