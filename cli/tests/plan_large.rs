//! `memwall plan --solver staged` on a generated graph too large for the staged model, as a
//! user runs it. A test binary of its own, so the other planner tests do not share its CPU.
//!
//! It asserts only what holds at any machine speed: how far the relaxation's LP gets within
//! its share of the time limit depends on the machine (on a 2-core runner it finished in time
//! one run in three), so the bound is checked against what it can never cross (the sum of
//! node costs below, the schedule found above), not against how tight it got. Timings belong
//! to `remat/examples/plan_scale.rs`.

mod common;
use common::plan;

/// A generated 500-node random layered graph (its staged model too large for HiGHS in the
/// time): `--solver staged` runs the whole boundary relaxation beside the annealing, finds a
/// schedule, reports a lower bound between the sum of node costs and the schedule's cost, and
/// prints each stage with the share of `--time-limit` it was given, each share within the
/// limit.
#[test]
fn the_time_limit_is_shared_by_the_stages_of_a_large_graph() {
    use memwall_remat::layered::{random_layered, LayeredParams};
    let dir = tempfile::tempdir().unwrap();
    let g = random_layered(&LayeredParams::shared(500, 0.36, 3)).unwrap();
    let nodes: Vec<serde_json::Value> = g
        .nodes
        .iter()
        .map(|n| serde_json::json!({"name": n.name, "cost": n.cost, "bytes": n.mem, "backward": n.backward}))
        .collect();
    let edges: Vec<[usize; 2]> = g
        .deps
        .iter()
        .enumerate()
        .flat_map(|(k, d)| d.iter().map(move |&i| [i, k]))
        .collect();
    let file = dir.path().join("n500.json");
    let json = serde_json::json!({"format": "memwall-graph/1", "name": "n500", "nodes": nodes, "edges": edges});
    std::fs::write(&file, json.to_string()).unwrap();
    let limit = 30.0;
    let (ok, stdout, stderr) = plan(&[
        "--graph",
        file.to_str().unwrap(),
        "--solver",
        "staged",
        "--time-limit",
        &limit.to_string(),
    ]);
    assert!(ok, "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("staged stages:"))
        .unwrap_or_else(|| panic!("no stage line: {stdout}"));
    assert!(
        line.contains("boundary relaxation") && line.contains("annealing"),
        "{line}"
    );
    // Every stage's share ("X of Y s") is within the limit.
    for part in line.split("; ") {
        if let Some(of) = part.split(" of ").nth(1) {
            let given: f64 = of.split(' ').next().unwrap().parse().unwrap();
            assert!(given <= limit + 1e-9, "{part}");
        }
    }
    let row = stdout
        .lines()
        .find(|l| l.starts_with("staged "))
        .expect("the solver's row");
    // Columns from the right: time, gap, lower bound, recomputations, peak, overhead, cost.
    let cols: Vec<&str> = row.split_whitespace().collect();
    let col = |from_right: usize| -> f64 {
        cols.iter()
            .rev()
            .nth(from_right)
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("column {from_right} from the right of {row}"))
    };
    let (cost, bound) = (col(6), col(2));
    assert!(
        bound >= g.total_cost() - 1e-6 * g.total_cost(),
        "a lower bound below the sum of node costs {}: {row}",
        g.total_cost()
    );
    assert!(
        bound <= cost + 1e-6 * cost,
        "the lower bound is above the schedule's cost: {row}"
    );
    assert!(
        cost >= g.total_cost() - 1e-6 * g.total_cost(),
        "a schedule cheaper than computing each node once: {row}"
    );
}
