//! `memwall plan --solver staged` on a generated graph too large for the staged model, as a
//! user runs it. A test binary of its own: the bound it checks depends on the relaxation's LP
//! getting its share of the time limit, which the other planner tests, run in parallel in one
//! binary, would take.

mod common;
use common::plan;

/// A generated 500-node random layered graph (its staged model too large for HiGHS in the
/// time): `--solver staged` bounds it by the whole boundary relaxation beside the annealing,
/// reports a lower bound above the sum of node costs, and prints each stage with the share of
/// `--time-limit` it was given, the shares within the limit.
#[test]
fn the_time_limit_is_shared_by_the_stages_of_a_large_graph() {
    use memwall::remat::layered::{random_layered, LayeredParams};
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
    let cols: Vec<&str> = row.split_whitespace().collect();
    let bound: f64 = cols
        .iter()
        .rev()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{row}"));
    assert!(
        bound > g.total_cost() + 1.0,
        "bound {bound} vs sum C {} in {row}",
        g.total_cost()
    );
}
