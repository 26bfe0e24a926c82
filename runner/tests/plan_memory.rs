//! Plans execute as planned: the executor's memory model, measured by the profiling pass,
//! planned at three budgets, then the plans run as real training steps on the CPU. The
//! counting allocator is process-wide, so this file holds a single test.

mod common;

use burn::backend::{Autodiff, Flex};
use burn::optim::AdamWConfig;
use memwall_remat::segment_plan::{no_recompute_peak, plan_transformer, smallest_feasible_budget};
use memwall_runner::measure::HeapProbe;
use memwall_runner::model::TransformerLm;
use memwall_runner::train::profile::profile_executor;

type B = Autodiff<Flex>;

#[test]
fn measured_peaks_follow_the_plans_at_three_budgets() {
    let (_, model, inputs) = common::activation_dominated_model();
    let device = Default::default();
    let profile = profile_executor(
        &model,
        &inputs,
        &device,
        &mut HeapProbe::default(),
        false,
        || AdamWConfig::new().init::<B, TransformerLm<B>>(),
    );
    let top = no_recompute_peak(&profile);
    let low = smallest_feasible_budget(&profile);
    assert!(
        low < top,
        "some recomputation must save memory: {low} vs {top}"
    );
    let mut rows = Vec::new();
    for k in [2.0, 1.0, 0.0] {
        let budget = low as f64 + k / 3.0 * (top - low) as f64;
        let plan = plan_transformer(&profile, (budget / top as f64).min(1.0)).unwrap();
        let measured = common::step_peak(&model, &inputs, Some(&plan.segments));
        rows.push((
            plan.budget_bytes,
            plan.predicted_peak_bytes,
            measured,
            plan.segments,
        ));
    }
    let table: Vec<String> = rows
        .iter()
        .map(|(b, p, m, s)| format!("budget {b} planned {p} measured {m} segments {s:?}"))
        .collect();
    let table = table.join("\n");
    for (budget, planned, measured, _) in &rows {
        assert!(planned <= budget, "{table}");
        assert!(
            (*measured as f64) <= *planned as f64 * 1.10,
            "measured above planned + 10%:\n{table}"
        );
    }
    for w in rows.windows(2) {
        assert!(
            w[1].2 <= w[0].2,
            "measured peaks must not grow as the budget tightens:\n{table}"
        );
    }
    assert_ne!(
        rows[0].3, rows[2].3,
        "the budgets must give different plans:\n{table}"
    );
    eprintln!("{table}");
}
