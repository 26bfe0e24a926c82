//! `memwall plan` as a user runs it: the binary on every shared graph and on graphs the test
//! writes itself, each schedule it writes re-checked by the simulator.

mod common;
use common::plan;

use memwall_remat::graph_file::read_graph;
use memwall_remat::sim::{simulate, validate, Schedule};
use memwall_remat::Graph;
use std::path::{Path, PathBuf};

fn graphs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/remat-graphs")
}

/// The schedule of a `--out` file, rebuilt from its stage lists.
fn schedule_of(json: &serde_json::Value, n: usize) -> Schedule {
    let mut s = Schedule::empty(n);
    let stages = json["stages"].as_array().expect("stages");
    assert_eq!(stages.len(), n);
    for (t, st) in stages.iter().enumerate() {
        assert_eq!(st["stage"].as_u64(), Some(t as u64));
        for i in st["compute"].as_array().unwrap() {
            s.r[t][i.as_u64().unwrap() as usize] = true;
        }
        for i in st["resident"].as_array().unwrap() {
            s.s[t][i.as_u64().unwrap() as usize] = true;
        }
    }
    s
}

/// Plans `graph` with `solver` at `budget` (`--budget-fraction F` or `--budget BYTES`), then checks the written schedule with the
/// simulator: valid, within the budget, and with the cost and peak the command printed.
fn plan_and_check(graph: &Path, solver: &str, budget: [&str; 2], dir: &Path) -> serde_json::Value {
    let out = dir.join("schedule.json");
    let (ok, stdout, stderr) = plan(&[
        "--graph",
        graph.to_str().unwrap(),
        budget[0],
        budget[1],
        "--solver",
        solver,
        "--time-limit",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{}: {stderr}", graph.display());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    if json["status"] == "infeasible" || json["status"] == "not found" {
        // Proven infeasible, or no schedule within the time limit: the stated upper bound of
        // the smallest feasible budget must be feasible; plan there instead.
        assert!(stdout.contains("smallest feasible budget"), "{stdout}");
        let upper = json["smallest_feasible_budget"]["upper_bytes"]
            .as_u64()
            .unwrap();
        assert!(upper > json["budget_bytes"].as_u64().unwrap(), "{json}");
        return plan_and_check(graph, solver, ["--budget", &upper.to_string()], dir);
    }
    let g = read_graph(graph).unwrap();
    let sch = schedule_of(&json, g.len());
    validate(&g, &sch).unwrap_or_else(|e| panic!("{}: {e}", graph.display()));
    let sim = simulate(&g, &sch).unwrap();
    let budget = json["budget_bytes"].as_u64().unwrap();
    assert!(
        sim.peak_mem <= budget,
        "{}: {} > {budget}",
        graph.display(),
        sim.peak_mem
    );
    let outcome = &json["outcome"];
    assert_eq!(outcome["peak_bytes"].as_u64(), Some(sim.peak_mem));
    let cost = outcome["cost"].as_f64().unwrap();
    assert!((cost - sim.cost).abs() <= 1e-9 * sim.cost.max(1.0));
    assert_eq!(
        json["recomputations"].as_array().unwrap().len(),
        sim.recomputations
    );
    assert!(stdout.contains("cheapest:"), "{stdout}");
    json
}

#[test]
fn plan_on_every_shared_graph_through_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(graphs_dir())
        .expect("../shared/data/remat-graphs beside the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "{files:?}");
    for f in &files {
        let json = plan_and_check(f, "milp", ["--budget-fraction", "0.9"], dir.path());
        let status = json["outcome"]["status"].as_str().unwrap();
        assert!(!status.is_empty(), "{}", f.display());
    }
}

/// A small diamond network written by the test in memwall's format, and the same graph as a
/// Checkmate node-link file: every solver plans it, and both files give the same MILP cost.
#[test]
fn plan_on_graphs_written_by_the_test() {
    let dir = tempfile::tempdir().unwrap();
    // f0 -> f1 -> f3, f0 -> f2 -> f3, loss f3 -> g (backward reads f1, f2)
    let own = serde_json::json!({
        "format": "memwall-graph/1",
        "name": "diamond",
        "nodes": [
            {"name": "in", "cost": 1.0, "bytes": 400, "backward": false},
            {"name": "a", "cost": 3.0, "bytes": 800, "backward": false},
            {"name": "b", "cost": 2.0, "bytes": 800, "backward": false},
            {"name": "join", "cost": 1.0, "bytes": 200, "backward": false},
            {"name": "loss", "cost": 0.5, "bytes": 4, "backward": true},
            {"name": "grad_join", "cost": 1.0, "bytes": 200, "backward": true},
            {"name": "grad_ab", "cost": 4.0, "bytes": 400, "backward": true}
        ],
        "edges": [[0,1],[0,2],[1,3],[2,3],[3,4],[4,5],[3,5],[5,6],[1,6],[2,6]]
    });
    let own_path = dir.path().join("diamond.json");
    std::fs::write(&own_path, own.to_string()).unwrap();
    let g = read_graph(&own_path).unwrap();
    let nodes: Vec<serde_json::Value> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| serde_json::json!({"id": i, "name": n.name, "backward": n.backward, "cost_cpu": n.cost, "cost_ram": n.mem}))
        .collect();
    let links: Vec<serde_json::Value> = g
        .deps
        .iter()
        .enumerate()
        .flat_map(|(k, d)| {
            d.iter()
                .map(move |&i| serde_json::json!({"source": i, "target": k}))
        })
        .collect();
    let nx = serde_json::json!({"directed": true, "multigraph": false, "graph": {}, "nodes": nodes, "links": links});
    let nx_path = dir.path().join("diamond_nx.json");
    std::fs::write(&nx_path, nx.to_string()).unwrap();

    let a = plan_and_check(&own_path, "all", ["--budget-fraction", "0.75"], dir.path());
    let b = plan_and_check(&nx_path, "milp", ["--budget-fraction", "0.75"], dir.path());
    let cost = |j: &serde_json::Value| j["outcome"]["cost"].as_f64().unwrap();
    assert!((cost(&a) - cost(&b)).abs() < 1e-9, "{a} vs {b}");
    assert_eq!(Graph::read_node_link(&nx_path).unwrap().deps, g.deps);
}

#[test]
fn an_infeasible_budget_names_the_smallest_feasible_one() {
    let dir = tempfile::tempdir().unwrap();
    let f = graphs_dir().join("VGG16_256_224_224_3_train_nx.json");
    let out = dir.path().join("s.json");
    let (ok, stdout, stderr) = plan(&[
        "--graph",
        f.to_str().unwrap(),
        "--budget",
        "1000",
        "--out",
        out.to_str().unwrap(),
        "--time-limit",
        "20",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("infeasible"), "{stdout}");
    assert!(stdout.contains("smallest feasible budget"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let fb = &json["smallest_feasible_budget"];
    let upper = fb["upper_bytes"].as_u64().unwrap();
    assert!(fb["lower_bytes"].as_u64().unwrap() <= upper && upper > 1000);
    // the stated budget is feasible: planning at it finds a schedule
    let (ok, stdout, stderr) = plan(&[
        "--graph",
        f.to_str().unwrap(),
        "--budget",
        &upper.to_string(),
        "--solver",
        "all",
        "--time-limit",
        "10",
    ]);
    assert!(ok && stdout.contains("cheapest:"), "{stdout}{stderr}");
}

#[test]
fn bad_files_and_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 6] = [
        ("missing.json", &[], "cannot read graph file"),
        ("{not json", &[], "cannot parse graph file"),
        (
            r#"{"nodes":[{"id":0,"name":"a","backward":false,"cost_cpu":1}],"links":[]}"#,
            &[],
            "cost_ram",
        ),
        (
            r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":"1","bytes":4}],"edges":[]}"#,
            &[],
            "nodes[0].cost",
        ),
        (
            r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":4}],"edges":[]}"#,
            &["--budget-fraction", "1.5"],
            "--budget-fraction",
        ),
        (
            r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":4}],"edges":[]}"#,
            &["--solver", "cplex"],
            "--solver",
        ),
    ];
    for (i, (text, extra, needle)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("case{i}.json"));
        if *text != "missing.json" {
            std::fs::write(&path, text).unwrap();
        }
        let mut args = vec!["--graph", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (ok, _, stderr) = plan(&args);
        assert!(!ok, "case {i} must fail");
        assert!(stderr.contains(needle), "case {i}: {stderr}");
        assert!(!stderr.contains("panicked"), "case {i}: {stderr}");
    }
}

fn experiment(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../experiments")
        .join(name)
}

/// `memwall plan --transformer`: the front of an experiment file's model at both granularities;
/// the JSON's plans are on a front (bytes up, FLOPs down), span keeping only the outputs to
/// recomputing nothing, and the unit level is never worse than the block level at equal bytes.
#[test]
fn a_transformers_front_from_its_experiment_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("front.json");
    let file = experiment("selective_checkpointing.toml");
    let (ok, stdout, stderr) = plan(&[
        "--transformer",
        file.to_str().unwrap(),
        "--profile",
        "cpu",
        "--budgets",
        "0,0.05,1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("8 blocks, d_model 128"), "{stdout}");
    assert!(stdout.contains("0.05  unit"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let front = |level: &str| -> Vec<(u64, f64)> {
        json[level]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                assert_eq!(p["keeps"].as_array().unwrap().len(), 8, "{p}");
                (
                    p["kept_bytes"].as_u64().unwrap(),
                    p["recompute_flops"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let (block, unit) = (front("block"), front("unit"));
    assert_eq!(block.len(), 9, "k = 0..=8 blocks kept whole");
    for points in [&block, &unit] {
        assert!(points
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 > w[1].1));
        assert_eq!(points.last().unwrap().1, 0.0);
    }
    assert_eq!(
        block[0], unit[0],
        "budget 0 is checkpointing every block at both levels"
    );
    for (bytes, flops) in &block {
        let best = unit.iter().take_while(|u| u.0 <= *bytes).last().unwrap();
        assert!(
            best.1 <= *flops,
            "unit level worse than block level at {bytes} bytes"
        );
    }
    // Bad input names the flag or the file.
    let (ok, _, stderr) = plan(&["--transformer", file.to_str().unwrap(), "--budgets", "1.5"]);
    assert!(!ok && stderr.contains("--budgets 1.5"), "{stderr}");
    let missing = dir.path().join("nope.toml");
    let (ok, _, stderr) = plan(&["--transformer", missing.to_str().unwrap()]);
    assert!(!ok && stderr.contains("nope.toml"), "{stderr}");
    let (ok, _, stderr) = plan(&["--transformer", file.to_str().unwrap(), "--graph", "x.json"]);
    assert!(!ok && stderr.contains("cannot be used with"), "{stderr}");
}
