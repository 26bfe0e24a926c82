//! The Checkmate study's report sections from a stored result: compute overhead against the
//! memory budget, solve times and gaps, and the largest batch size.

use super::*;

/// The figures' budget axis for a graph whose checkpoint-all peak is `peak` bytes: the
/// decimal unit (GB, MB, kB or bytes) in which the peak reads at least 1, as (divisor, axis
/// label). The Checkmate graphs' budgets are gigabytes; the random layered graphs' are tens of
/// thousands of their units, which on a GB axis all printed as the same tick.
pub(super) fn budget_axis(peak: u64) -> (f64, &'static str) {
    [
        (1e9, "memory budget (GB)"),
        (1e6, "memory budget (MB)"),
        (1e3, "memory budget (kB)"),
    ]
    .into_iter()
    .find(|(d, _)| peak as f64 >= *d)
    .unwrap_or((1.0, "memory budget (bytes)"))
}

/// The study's sections: compute overhead vs budget, MILP solve times and gaps, and (when the
/// batch search ran) the maximum batch size.
pub fn sections(r: &CheckmateResult, cited: &CheckmateCited) -> Vec<Section> {
    let mut sections = vec![overhead_section(r), reduction_section(r), solve_section(r)];
    if let Some(b) = &r.batch {
        sections.push(batch_section(&r.params, b, &cited.fig6_vgg19_max_batch));
    }
    if !r.batch_nets.is_empty() {
        sections.push(batch_nets_section(r));
    }
    sections
}

/// The notes' "2-3x memory reduction: Typical savings with <10% time overhead": per graph, the
/// smallest possible budget (the working-set bound), the overhead of the MILP's schedule at a
/// 2x and a 3x reduction, and the smallest budget with a schedule.
fn reduction_section(r: &CheckmateResult) -> Section {
    let cell = |x: Result<f64, String>| match x {
        Ok(v) => (format!("{v:.1}"), None),
        Err(why) => ("none".to_string(), Some(why)),
    };
    let mut table = Table {
        caption: "Compute overhead of the optimal (MILP) schedule at a 2x and a 3x memory reduction against checkpoint-all, per graph"
            .into(),
        columns: vec![
            "graph".into(),
            "nodes".into(),
            "working-set bound (fraction of checkpoint-all)".into(),
            "overhead at 2x (%)".into(),
            "overhead at 3x (%)".into(),
            "smallest budget with a schedule (fraction)".into(),
        ],
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut no_3x = Vec::new();
    for g in &r.graphs {
        let ws = if g.working_set_bound_bytes > 0 {
            format!(
                "{:.3}",
                g.working_set_bound_bytes as f64 / g.checkpoint_all_peak_bytes.max(1) as f64
            )
        } else {
            "–".into()
        };
        let (two, two_why) = cell(overhead_at_reduction(g, TWO_X_FRACTION));
        let (three, three_why) = cell(overhead_at_reduction(g, THREE_X_FRACTION));
        if three_why.is_some() {
            no_3x.push(short_graph_name(&g.name));
        }
        let smallest = g
            .budgets
            .iter()
            .filter(|b| milp_cost(b).is_some())
            .map(|b| b.fraction)
            .min_by(f64::total_cmp)
            .map_or("none".into(), |f| format!("{f:.3}"));
        let i = table.rows.len();
        table.rows.push(vec![
            short_graph_name(&g.name),
            g.nodes.to_string(),
            ws,
            two,
            three,
            smallest,
        ]);
        if let Some(w) = two_why.or_else(|| overhead_bound_note(g, TWO_X_FRACTION)) {
            table.note(i, 3, w);
        }
        if let Some(w) = three_why.or_else(|| overhead_bound_note(g, THREE_X_FRACTION)) {
            table.note(i, 4, w);
        }
    }
    let m = measures(r);
    let get = |n: &str| m.iter().find(|x| x.name == n).map_or(f64::NAN, |x| x.value);
    let (two, three) = (
        get("milp_overhead_pct_at_2x_reduction"),
        get("milp_overhead_pct_at_3x_reduction"),
    );
    let fmt = |x: f64| {
        if x.is_finite() {
            format!("{x:.1}%")
        } else {
            "no value".into()
        }
    };
    Section {
        details: None,
        title: "Memory reduction against compute overhead".into(),
        claim: "\"2-3x memory reduction: Typical savings with <10% time overhead\" (`001_68b9d43f3f694e7a.txt`, Interesting Findings / Empirical Results / Memory Scaling)."
            .into(),
        ours: format!(
            "{} {} Median overhead of the schedules found, over the graphs where one reaches the reduction (not a claim's measure: it leaves out the graphs that cannot): {} at 2x, {} at 3x. {}",
            under_overhead_text(r, TWO_X_FRACTION, "2x"),
            under_overhead_text(r, THREE_X_FRACTION, "3x"),
            fmt(two),
            fmt(three),
            if no_3x.is_empty() {
                "Every graph reaches 3x.".to_string()
            } else {
                format!("No schedule reaches 3x on: {}.", no_3x.join(", "))
            }
        ),
        notes: vec![
            "A reduction of 2x is the budget of 0.5 of the graph's checkpoint-all peak (its no-rematerialization schedule), 3x the budget of 0.333; the overhead is the schedule's compute cost over one plain forward+backward pass, minus 1. The working-set bound is the largest memory one operation needs with its inputs resident (no schedule goes below it); each graph is also solved at that bound, rounded up to 0.001, so the smallest budget with a schedule is exact to that rounding where the MILP proves the bound infeasible or solves it."
                .into(),
        ],
        tables: vec![table],
        figures: Vec::new(),
    }
}

/// Every graph sorted by what its solves prove of the optimal schedule at a reduction of
/// `1 / fraction` ([`optimal_overhead_bounds`]) against the notes' 10%: under it, perhaps
/// (the solver's bounds straddle it), or not (no schedule can, or the lower bound is over).
fn under_overhead_text(r: &CheckmateResult, fraction: f64, label: &str) -> String {
    let (mut under, mut open, mut over) = (Vec::new(), Vec::new(), Vec::new());
    for g in &r.graphs {
        let name = short_graph_name(&g.name);
        let (low, high) = optimal_overhead_bounds(g, fraction);
        if high < CLAIM_OVERHEAD_PCT {
            under.push(format!("{name} {high:.1}%"));
        } else if low < CLAIM_OVERHEAD_PCT {
            let high = if high.is_finite() {
                format!("{high:.1}%")
            } else {
                "no schedule found".into()
            };
            open.push(format!("{name}: proven between {low:.1}% and {high}"));
        } else if low.is_finite() {
            over.push(format!("{name}: at least {low:.1}%"));
        } else {
            over.push(format!("{name}: no schedule can"));
        }
    }
    let list = |xs: &[String]| {
        if xs.is_empty() {
            "none".to_string()
        } else {
            xs.join("; ")
        }
    };
    format!(
        "Of {} graphs, the optimal schedule reaches {label} at under {CLAIM_OVERHEAD_PCT:.0}% overhead on {} ({}), perhaps on {} ({}), and not on {} ({}).",
        r.graphs.len(),
        under.len(),
        list(&under),
        open.len(),
        list(&open),
        over.len(),
        list(&over),
    )
}

/// Every (graph, budget) pair, graphs in order.
pub(super) fn budgets(r: &CheckmateResult) -> impl Iterator<Item = (&GraphResult, &BudgetResult)> {
    r.graphs
        .iter()
        .flat_map(|g| g.budgets.iter().map(move |b| (g, b)))
}

/// Cost of the MILP's best schedule (Checkmate's MILP, or the staged MILP on larger graphs),
/// if it found one.
pub(super) fn milp_cost(b: &BudgetResult) -> Option<f64> {
    b.milp
        .as_ref()
        .and_then(|m| m.best)
        .or_else(|| b.refined.as_ref().and_then(|m| m.best))
        .or_else(|| b.staged.as_ref().and_then(|m| m.best))
        .map(|s| s.cost)
}

/// One graph's figure: compute overhead (cost / one forward+backward) of every strategy
/// versus the budget in GB; strategies without a fitting schedule at any budget are left out.
fn overhead_figure(g: &GraphResult) -> Figure {
    let mut series: Vec<Series> = BASELINES
        .iter()
        .chain(["Checkmate MILP", "LP + rounding"].iter())
        .map(|l| Series {
            label: l.to_string(),
            mark: Mark::Line,
            ..Default::default()
        })
        .collect();
    let base_cost = g.forward_backward_cost;
    let (unit, x_label) = budget_axis(g.checkpoint_all_peak_bytes);
    for b in &g.budgets {
        let x = b.budget_bytes as f64 / unit;
        for (k, c) in b.baselines.iter().enumerate() {
            if let Some(c) = c {
                series[k].points.push((x, c.cost / base_cost));
            }
        }
        if let Some(c) = milp_cost(b) {
            series[4].points.push((x, c / base_cost));
        }
        if let Some(c) = &b.lp.rounded {
            series[5].points.push((x, c.cost / base_cost));
        }
    }
    series.retain(|s| !s.points.is_empty());
    Figure {
        name: format!(
            "remat_overhead_{}",
            g.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        ),
        title: format!("{}: compute overhead vs memory budget", g.name),
        x_label: x_label.into(),
        y_label: "compute / one forward+backward".into(),
        series,
        ..Default::default()
    }
}

/// Slowdown of baseline `k` against the MILP over the budgets where the MILP found a
/// schedule: (ln of each cost ratio where the baseline fits, the largest ratio, the number of
/// budgets where it does not fit).
fn slowdowns(r: &CheckmateResult, k: usize) -> (Vec<f64>, f64, usize) {
    let mut logs = Vec::new();
    let mut max: f64 = 0.0;
    let mut infeasible = 0;
    for (_, b) in budgets(r) {
        let Some(m) = milp_cost(b) else {
            continue;
        };
        match b.baselines.get(k).copied().flatten() {
            Some(c) => {
                let x = c.cost / m;
                logs.push(x.ln());
                max = max.max(x);
            }
            None => infeasible += 1,
        }
    }
    (logs, max, infeasible)
}

/// The overhead table's rows (one per baseline) and the summary phrase of each.
fn slowdown_rows(r: &CheckmateResult) -> (Vec<Vec<String>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for (k, name) in BASELINES.iter().enumerate() {
        let (logs, max, infeasible) = slowdowns(r, k);
        let (geo, max) = if logs.is_empty() {
            ("-".to_string(), "-".to_string())
        } else {
            let geo = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
            (format!("{geo:.3}"), format!("{max:.3}"))
        };
        summary.push(if logs.is_empty() {
            format!("{name}: no fitting schedule at any compared budget")
        } else {
            format!(
                "{name} {geo}x over {} budget(s) (no fitting schedule at {infeasible})",
                logs.len()
            )
        });
        rows.push(vec![
            name.to_string(),
            logs.len().to_string(),
            geo,
            max,
            infeasible.to_string(),
        ]);
    }
    (rows, summary)
}

/// The notes' optimality claim (the paper's Section 6.2 comparison) beside the baselines'
/// slowdown against the MILP, with one overhead figure per graph.
fn overhead_section(r: &CheckmateResult) -> Section {
    let (rows, summary) = slowdown_rows(r);
    let table = Table {
        caption: "Slowdown of each baseline relative to the Checkmate MILP schedule (cost ratio), over the \
                  budgets where both have a schedule"
            .into(),
        columns: vec!["baseline".into(), "budgets compared".into(), "geo-mean slowdown".into(), "max slowdown".into(), "budgets infeasible for baseline".into()],
        rows,
        notes: Vec::new(),
    };
    let staged: Vec<String> = budgets(r)
        .filter(|(_, b)| b.staged.is_some())
        .map(|(g, _)| format!("{} (n = {})", g.name, g.nodes))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut notes = vec![
        "Budgets are fractions of each graph's checkpoint-all peak, in bytes of activations; the fixed part \
         (parameters, gradients) is 0 for the Checkmate graphs and the sum of `param_cost` for the random \
         layered graphs. Overhead is total compute cost divided by one plain forward+backward pass. Every \
         schedule was validated by the simulator (Jain et al. 2020, eq. 1b–1e, 8) and its peak computed with \
         the paper's memory accounting (eq. 2–4)."
            .into(),
        "Baselines with a parameter (greedy thresholds, revolve slots) show, at each budget, their \
         cheapest schedule that fits. The MILP is warm-started from the cheapest fitting baseline or \
         LP-rounded schedule (HiGHS `setSolution`)."
            .into(),
    ];
    if !staged.is_empty() {
        notes.push(format!(
            "Graphs above {} nodes get the scalable staged MILP instead of Checkmate's (see the solve section; \
             its schedules are not all proven optimal): {}.",
            r.params.milp_max_nodes,
            staged.join(", ")
        ));
    }
    Section {
        details: None,
        title: "Checkmate: compute overhead vs memory budget".into(),
        claim: "`001_68b9d43f3f694e7a.txt` (a reader's notes on Checkmate, Jain et al., MLSys 2020): of prior \
                checkpointing heuristics, \"These methods are not optimal\"; Checkmate's MILP aims at \"Optimality: \
                Find provably best solutions when possible\". The comparison at equal memory budgets against \
                checkpoint-all, Chen et al.'s sqrt(n) and greedy heuristics and revolve (Griewank and Walther 2000) \
                is the paper's (Jain et al. 2020, arXiv:1910.02653, Section 6.2, Fig. 5); the notes give no number \
                for it."
            .into(),
        ours: format!("Geometric-mean slowdown of the baselines against our HiGHS-solved MILP: {}.", summary.join(", ")),
        notes,
        tables: vec![table],
        figures: r.graphs.iter().map(overhead_figure).collect(),
    }
}

/// Formats a cost or bound to one decimal, "-" when absent.
fn one_decimal(x: Option<f64>) -> String {
    // From 10^7 on, 5 significant digits (the table stays within a 1280-px window).
    x.map(|v| {
        if v.is_finite() && v.abs() >= 1e7 {
            format!("{v:.4e}")
        } else {
            format!("{v:.1}")
        }
    })
    .unwrap_or_else(|| "-".into())
}

/// The solve table's row of one (graph, budget): the MILP's status, time, cost, dual bound
/// and gaps, and the LP's bound, rounded cost and time.
fn solve_row(g: &GraphResult, b: &BudgetResult) -> Vec<String> {
    let (status, time, cost, dual, gap) = match &b.milp {
        Some(m) => (
            m.status.to_string(),
            format!("{:.2}", m.solve_time_s),
            m.best.map(|x| x.cost),
            Some(m.dual_bound),
            if m.mip_gap.is_finite() {
                format!("{:.2}", m.mip_gap * 100.0)
            } else {
                "-".into()
            },
        ),
        None => (
            "staged MILP (next table)".into(),
            "-".into(),
            None,
            None,
            "-".into(),
        ),
    };
    let lp_gap = match (cost, b.lp.lp_bound) {
        (Some(c), Some(l)) if c > 0.0 => format!("{:.2}", (c - l) / c * 100.0),
        _ => "-".into(),
    };
    vec![
        short_graph_name(&g.name),
        nodes_and_layers(g),
        format!("{:.2}", b.fraction),
        crate::fmt_bytes(b.budget_bytes as f64),
        status,
        time,
        one_decimal(cost),
        one_decimal(dual),
        gap,
        one_decimal(b.lp.lp_bound),
        lp_gap,
        one_decimal(b.lp.rounded.map(|x| x.cost)),
        format!("{:.2}", b.lp.solve_time_s),
    ]
}

/// The notes' solve-time claims beside every MILP and LP solve.
fn solve_section(r: &CheckmateResult) -> Section {
    let params = &r.params;
    let t = Table {
        caption: format!(
            "MILP solve (HiGHS, {} thread(s), limit {} s, target gap {:.1}%) and LP relaxation",
            params.threads,
            params.time_limit_s,
            params.mip_gap * 100.0
        ),
        columns: [
            "graph",
            "nodes (layers)",
            "budget (frac)",
            "budget",
            "MILP status",
            "MILP time (s)",
            "MILP cost",
            "MILP dual bound",
            "HiGHS gap (%)",
            "LP bound",
            "gap MILP vs LP (%)",
            "LP-rounding cost",
            "LP time (s)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows: budgets(r).map(|(g, b)| solve_row(g, b)).collect(),
        notes: Vec::new(),
    };
    let times: Vec<f64> = budgets(r)
        .filter_map(|(_, b)| b.milp.as_ref().map(|m| m.solve_time_s))
        .collect();
    let max_t = times.iter().copied().fold(0.0, f64::max);
    Section {
        details: None,
        title: "Checkmate: MILP solve time and optimality gap".into(),
        claim: "`001_68b9d43f3f694e7a.txt` (a reader's notes on Checkmate): the MILP goes to a solver such as \
                Gurobi; \"MILP solving can take up to an hour for complex networks\"; \"Networks with 100+ layers: \
                solve in <1 hour\"; \"Approximation algorithms within 5-10% of optimal\". The LP relaxation with \
                rounding that memwall runs is its reading of the paper's approximation (Jain et al. 2020, \
                arXiv:1910.02653, abstract: \"near-optimal schedules with an approximation algorithm\"); the \
                notes do not describe it."
            .into(),
        ours: format!(
            "{} MILP solves with HiGHS took at most {max_t:.1} s each on this machine; the table gives each \
             solve's status, HiGHS gap and the gap to the LP-relaxation bound.{}",
            times.len(),
            boundary_summary(r)
        ),
        notes: vec![
            "Solve times are wall time including model construction, measured on the report machine's CPU. \
             HiGHS reports `Optimal` once the relative gap is within the target. `Infeasible (working-set \
             bound)`: the budget is below the largest single-op working set (output plus inputs), so no \
             schedule exists and HiGHS is not called."
                .into(),
        ],
        tables: std::iter::once(t)
            .chain(boundary_table(r))
            .chain(staged_table(r))
            .collect(),
        figures: Vec::new(),
    }
}

/// One sentence on the boundary relaxation's solves beside the MILP: how many it proved
/// optimal (fitting schedule at its bound), its longest time, and how many of those schedules
/// are cheaper than the MILP's incumbent (empty without such solves).
fn boundary_summary(r: &CheckmateResult) -> String {
    let solves: Vec<(&BoundarySolve, Option<f64>)> = budgets(r)
        .filter_map(|(_, b)| Some((b.boundary.as_ref()?, b.milp.as_ref()?.best.map(|s| s.cost))))
        .filter(|(x, _)| x.bound.is_finite())
        .collect();
    if solves.is_empty() {
        return String::new();
    }
    let proven: Vec<_> = solves
        .iter()
        .filter(|(x, _)| {
            x.fitting
                .is_some_and(|f| f.cost - x.bound <= 1e-9 * f.cost.abs().max(1.0))
        })
        .collect();
    let cheaper = proven
        .iter()
        .filter(|(x, m)| matches!((x.fitting, m), (Some(f), Some(mc)) if f.cost < *mc - 1e-9 * mc.abs().max(1.0)))
        .count();
    let max_t = solves
        .iter()
        .map(|(x, _)| x.solve_time_s)
        .fold(0.0, f64::max);
    format!(
        " Ours, the boundary-memory relaxation (next table), proved {} of {} feasible budgets optimal, in at \
         most {max_t:.2} s each; {cheaper} of those schedules are cheaper than the MILP's.",
        proven.len(),
        solves.len()
    )
}

/// The boundary-memory relaxation beside Checkmate's MILP, per (graph, budget) solved by the
/// MILP: both costs and times, the relaxation's bound and its gap.
fn boundary_table(r: &CheckmateResult) -> Option<Table> {
    let rows: Vec<Vec<String>> = budgets(r)
        .filter_map(|(g, b)| Some((g, b, b.milp.as_ref()?, b.boundary.as_ref()?)))
        .map(|(g, b, m, x)| {
            let milp_cost = m.best.map(|s| s.cost);
            let cost = x.fitting.map(|s| s.cost);
            let gap = cost
                .filter(|c| *c > 0.0)
                .map_or(f64::NAN, |c| (c - x.bound).max(0.0) / c);
            let vs = match (cost, milp_cost) {
                (Some(c), Some(mc)) if mc > 0.0 => format!("{:+.3}", (c - mc) / mc * 100.0),
                _ => "-".into(),
            };
            vec![
                short_graph_name(&g.name),
                format!("{:.2}", b.fraction),
                one_decimal(milp_cost),
                format!("{:.2}", m.solve_time_s),
                x.status.to_string(),
                x.rounds.to_string(),
                x.cuts.to_string(),
                format!("{:.2}", x.solve_time_s),
                one_decimal(cost),
                one_decimal(x.cut_lp_bound),
                one_decimal(Some(x.bound)),
                percent(gap),
                vs,
            ]
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    Some(Table {
        caption: "Ours: the boundary-memory relaxation beside Checkmate's MILP (same HiGHS options and warm \
                  start). It keeps Checkmate's R and S with one memory row per stage end instead of U and FREE at \
                  every step, first tightens its LP with closure cuts (a value dropped across a stage boundary \
                  but read after it has each input along a chain kept across that boundary or recomputed in \
                  full before the read; separated on the LP, kept in the integer rounds; cut LP bound: the \
                  LP's bound with them), adds rows for the recomputation steps its schedules overrun, and \
                  prunes values nothing reads; its bound (the larger of the cut LP's and HiGHS' dual bound) \
                  is a lower bound on Checkmate's optimum, so a fitting schedule whose cost equals the bound \
                  is optimal (gap 0.00). Cost vs MILP: the relaxation's schedule \
                  against the MILP's incumbent, which HiGHS stops within the 1% target gap."
            .into(),
        columns: [
            "graph",
            "budget (frac)",
            "MILP cost",
            "MILP time (s)",
            "relaxation status",
            "rounds",
            "closure cuts",
            "time (s)",
            "fitting schedule cost",
            "cut LP bound",
            "bound",
            "gap (%)",
            "cost vs MILP (%)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        rows,
        notes: Vec::new(),
    })
}

/// Formats a fraction as a percentage to two decimals, "-" when not finite.
fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("{:.2}", x * 100.0)
    } else {
        "-".into()
    }
}

/// A graph's name as a table shows it: the network and its input for Checkmate's Keras graphs
/// ("VGG16_256_224_224_3_train" -> "VGG16 (batch 256, 224x224)"), the node count for a random
/// layered DAG ("random layered, 100 nodes"), the name with spaces for any other, so that a
/// table cell breaks between words, never inside a token.
fn short_graph_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("random_layered_n") {
        let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !n.is_empty() {
            return format!("random layered, {n} nodes");
        }
    }
    const FAMILIES: [(&str, &str); 6] = [
        ("VGG16_", "VGG16"),
        ("VGG19_", "VGG19"),
        ("vgg_unet_", "U-Net"),
        ("fcn_8_vgg_", "FCN8"),
        ("segnet_", "SegNet"),
        ("resnet", "ResNet"),
    ];
    for (prefix, family) in FAMILIES {
        if let Some(rest) = name.strip_prefix(prefix) {
            let dims: Vec<&str> = rest.split('_').collect();
            if let [batch, h, w, ..] = dims.as_slice() {
                if [batch, h, w].iter().all(|d| d.parse::<u32>().is_ok()) {
                    return format!("{family} (batch {batch}, {h}x{w})");
                }
            }
            return family.to_string();
        }
    }
    name.replace('_', " ")
}

/// A graph's node count (forward and backward) and, for a network's training graph, its layers
/// (forward operations): "346 (173)"; the node count alone for a random layered DAG.
fn nodes_and_layers(g: &GraphResult) -> String {
    match g.layers {
        Some(l) => format!("{} ({l})", g.nodes),
        None => g.nodes.to_string(),
    }
}

/// The columns of [`staged_table`].
const STAGED_COLUMNS: [&str; 15] = [
    "graph",
    "nodes (layers)",
    "budget (frac)",
    "stage size",
    "columns / integer / rows",
    "status",
    "time (s)",
    "heuristic cost",
    "annealed cost",
    "cost",
    "model dual bound",
    "model gap (%)",
    "LP bounds: tight / cut",
    "valid bound",
    "valid gap (%)",
];

/// One row of [`staged_table`]: solve `m` (the grouped solve or its refinement) of graph `g` at
/// budget `b`.
fn staged_row(g: &GraphResult, b: &BudgetResult, m: &StagedSolve) -> Vec<String> {
    let c = |x: Option<ScheduleStats>| one_decimal(x.map(|s| s.cost));
    vec![
        short_graph_name(&g.name),
        nodes_and_layers(g),
        format!("{:.2}", b.fraction),
        format!(
            "{}{}",
            m.stage_size,
            m.max_computations
                .map_or(String::new(), |k| format!(", C = {k}"))
        ),
        format!("{} / {} / {}", m.columns, m.integer_columns, m.rows),
        m.status.to_string(),
        format!("{:.1}", m.solve_time_s),
        c(m.heuristic),
        c(m.annealed),
        c(m.best),
        one_decimal(Some(m.model_dual_bound)),
        percent(m.model_gap),
        format!(
            "{} / {}",
            one_decimal(m.checkmate_lp_bound),
            one_decimal(m.cut_lp_bound)
        ),
        one_decimal(Some(m.valid_bound)),
        percent(m.valid_gap()),
    ]
}

/// The caption of [`staged_table`]: how the staged MILP groups stages, its limits, and what its
/// cost, gap and bound columns mean.
fn staged_caption(p: &CheckmateParams) -> String {
    format!(
        "Staged MILP (tight FREE; the stages where checkpoint-all fits the budget as one stage without \
         memory rows, then stages of ceil(m / {}) nodes for the m nodes after them{}; HiGHS, {} thread(s), \
         limit {} s per graph and budget including LP relaxation, warm starts and, for graphs up to {} nodes, \
         a refinement with one node per stage warm-started from the grouped schedule, on the row below it). \
         Annealed cost: the best heuristic schedule improved by simulated annealing over ejection chains (keep \
         a recomputed value, repair the stages it overflows; {:.0}% of the limit) when the relaxation did not \
         end the solve. Model gap: against \
         HiGHS' bound for the model solved (restricted when stage size > 1). Valid gap: against a bound valid \
         for Checkmate's problem: the largest of sum C_i, the boundary-memory relaxation's bound (Checkmate's \
         schedule variables with one memory row per stage end, its LP tightened by closure cuts, plus rows \
         generated for the recomputation steps its schedules overrun; solved first, {:.0}% of the limit) and, \
         for stage size 1, the model's LP relaxation and HiGHS' bound. LP bounds: the tight model's LP \
         relaxation when solved unrestricted (Checkmate's LP bound) / the boundary relaxation's LP with its \
         closure cuts. Status \"Optimal (boundary relaxation)\": the relaxation's schedule fits \
         the budget within the gap of its bound, which proves it optimal for Checkmate's problem; the columns \
         and rows are then the relaxation's.",
        p.staged_max_stages,
        p.staged_max_computations
            .map_or(String::new(), |k| format!(", at most {k} computations per node")),
        p.threads,
        if p.nets.is_empty() || p.nets_time_limit_s == p.staged_time_limit_s {
            format!("{}", p.staged_time_limit_s)
        } else {
            format!(
                "{} (built networks: {})",
                p.staged_time_limit_s, p.nets_time_limit_s
            )
        },
        p.refine_max_nodes,
        memwall_remat::staged::ANNEAL_SHARE * 100.0,
        memwall_remat::staged::BOUNDARY_SHARE * 100.0,
    )
}

/// The staged MILP's solves (graphs above `milp_max_nodes` nodes), if any: per graph and
/// budget the model, status, time, heuristic and best cost, the model's own bounds and the
/// bound valid for Checkmate's problem.
fn staged_table(r: &CheckmateResult) -> Option<Table> {
    let rows: Vec<Vec<String>> = budgets(r)
        .flat_map(|(g, b)| {
            [&b.staged, &b.refined]
                .into_iter()
                .flatten()
                .map(move |m| staged_row(g, b, m))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    Some(Table {
        caption: staged_caption(&r.params),
        columns: STAGED_COLUMNS.iter().map(|s| s.to_string()).collect(),
        rows,
        notes: Vec::new(),
    })
}

/// The largest batch of memwall's networks (a ResNet, the transformer's block chain) at the
/// batch search's memory and compute limit, per strategy, with the ratio to checkpoint-all.
fn batch_nets_section(r: &CheckmateResult) -> Section {
    let p = &r.params;
    let mut table = Table {
        caption: format!(
            "Largest batch at {:.1} GiB and at most one extra forward pass, per strategy",
            p.batch_memory_bytes as f64 / (1u64 << 30) as f64
        ),
        columns: ["network", "nodes"]
            .iter()
            .map(|s| s.to_string())
            .chain(BASELINES.iter().map(|s| s.to_string()))
            .chain([
                "Checkmate MILP".to_string(),
                "MILP / checkpoint all".to_string(),
                "working-set cap".to_string(),
            ])
            .collect(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut sources = Vec::new();
    for (b, net) in r.batch_nets.iter().zip(&p.batch_nets) {
        let nodes = net.graph().map_or(0, |(g, _)| g.len());
        let i = table.rows.len();
        let mut row = vec![b.graph.clone(), nodes.to_string()];
        row.extend(b.baselines.iter().map(|x| b.samples_text(*x)));
        if b.milp_solved {
            let (low, high) = milp_batch_bounds(b);
            row.push(if high > low {
                format!("{} to {}", b.samples_text(low), b.samples_text(high))
            } else {
                b.samples_text(low)
            });
            row.push(match b.baselines.first() {
                Some(&all) if all > 0 => format!("{:.2}x", f64::from(b.milp) / f64::from(all)),
                _ => "–".into(),
            });
        } else {
            row.push("not run".into());
            row.push("–".into());
        }
        row.push(b.samples_text(b.working_set_cap));
        table.rows.push(row);
        if b.milp_solved && milp_batch_bounds(b).1 > b.milp {
            table.note(
                i,
                2 + BASELINES.len(),
                format!(
                    "proven between these: {} is the largest batch the bisection found a schedule for within the compute limit; its probes above it stopped at their {:.0} s limit without proving that none exists, so the largest batch the MILP can fit lies up to the smallest batch proven not to fit or the working-set cap",
                    b.samples_text(b.milp),
                    p.batch_time_limit_s
                ),
            );
        }
        if b.milp_probes.iter().any(|x| x.staged.is_some()) {
            let refined = match b.milp_probes.iter().any(|x| x.refined.is_some()) {
                true => "then refined with one node per stage",
                false => "not refined: above the refinement's node limit",
            };
            table.note(
                i,
                2 + BASELINES.len(),
                format!(
                    "{nodes} nodes, above the {} nodes up to which Checkmate's MILP is solved whole: each probe is the staged MILP (Checkmate's problem over stages of several nodes, {refined}) under the search's {:.0} s limit, as the budget sweep solves this graph, warm-started from the best baseline; a probe fits when its best schedule is within the compute limit",
                    p.milp_max_nodes, p.batch_time_limit_s
                ),
            );
        }
        if let (true, Some(&all)) = (b.divisions > 1, b.baselines.first().filter(|a| **a > 0)) {
            table.note(
                i,
                0,
                format!(
                    "searched in steps of 1/{} of a sequence (the input counted in tokens), so that one step moves the ratio to checkpoint-all by 1/{} instead of 1/{}",
                    b.divisions,
                    all,
                    all / b.divisions
                ),
            );
        }
        if !b.milp_solved {
            table.note(
                i,
                2 + BASELINES.len(),
                format!(
                    "{nodes} nodes, above the {} nodes up to which the batch search solves Checkmate's MILP: the baselines only",
                    p.milp_max_nodes
                ),
            );
        }
        if let BuiltNet::TransformerChain { source, .. } = net {
            sources.push(source.clone());
        }
    }
    let mut notes = vec![
        "Networks built by memwall: the pre-activation bottleneck ResNet of Chen et al. 2016's          memonger experiments (`memwall_remat::nets::resnet`, f32 feature maps, unit op costs)          and the transformer's chain of blocks (Checkmate's linear graph, `Graph::from_layers`).          Memory scales linearly with the batch, as in the search on the graph file; parameters          are not modelled. Checkpoint all stores every activation (no rematerialization)."
            .to_string(),
    ];
    notes.extend(sources);
    Section {
        details: None,
        title: "Maximum batch size on a ResNet and on memwall's transformer".into(),
        claim: "\"5.1x larger inputs: Demonstrated on ResNet, Transformer models\" \
                (`001_68b9d43f3f694e7a.txt`, Interesting Findings / Empirical Results / Memory \
                Scaling)."
            .into(),
        ours: "The largest batch each strategy fits at the search's memory within one extra \
               forward pass; the largest-input study trains the transformer itself under a \
               memory limit."
            .into(),
        notes,
        tables: vec![table],
        figures: Vec::new(),
    }
}

/// The paper's Fig. 6 (Jain et al. 2020) beside the largest batch size of every strategy.
fn batch_section(params: &CheckmateParams, b: &BatchResult, fig6: &Fig6Batch) -> Section {
    let ours: Vec<u32> = b.baselines.iter().copied().chain([b.milp]).collect();
    let o = |i: usize| ours.get(i).map_or_else(|| "-".to_string(), u32::to_string);
    let mem = params.batch_memory_bytes;
    Section {
        details: None,
        title: "Checkmate: maximum batch size at fixed memory".into(),
        claim: format!(
            "Jain et al. 2020 (arXiv:1910.02653), Fig. 6, not in the source document (a reader's notes on \
             the paper): for VGG19 at a fixed 16 GB of memory and at most one extra forward pass of compute, \
             the maximum batch size is {} with checkpoint-all, {} with Chen's sqrt(n), {} with Chen's \
             greedy and {} with Checkmate.",
            fig6.checkpoint_all, fig6.chen_sqrt, fig6.chen_greedy, fig6.checkmate_milp
        ),
        ours: format!(
            "On {} at {:.1} GiB: checkpoint all {}, sqrt(n) {}, greedy {}, revolve {}, Checkmate MILP {}.",
            b.graph,
            mem as f64 / (1u64 << 30) as f64,
            o(0), o(1), o(2), o(3), o(4)
        ),
        notes: vec![
            format!(
                "Activation memory is scaled linearly from the profiled batch size {} (`M_i(b) = M_i * b / {}`); \
                 compute is assumed to scale linearly as well, so the overhead limit (one forward+backward plus \
                 one forward, in units of the same batch) is batch-independent. Parameters are not modelled \
                 (fixed memory 0), which is why absolute batch sizes differ from the paper's.",
                params.batch_graph_batch, params.batch_graph_batch
            ),
            format!(
                "Bisection over the batch size in [1, {}]; the MILP search starts from the best baseline's \
                 batch (warm start) and uses a {} s limit per solve; a solve that finds no schedule within the \
                 limit counts as not fitting.",
                params.batch_max, params.batch_time_limit_s
            ),
            format!(
                "No schedule of any strategy fits above batch {}: beyond it the largest single-op working \
                 set (an op's output plus its inputs) alone fills the memory.",
                b.working_set_cap
            ),
        ],
        tables: vec![batch_table(params, b, &ours, fig6)],
        figures: Vec::new(),
    }
}

/// The paper's (Jain et al. 2020, Fig. 6) and our largest batch size of every strategy.
fn batch_table(params: &CheckmateParams, b: &BatchResult, ours: &[u32], fig6: &Fig6Batch) -> Table {
    // Jain et al. 2020 (arXiv:1910.02653), Fig. 6; not in the source document.
    let paper = [
        fig6.checkpoint_all,
        fig6.chen_sqrt,
        fig6.chen_greedy,
        fig6.checkmate_milp,
    ];
    let labels = [
        "checkpoint all",
        "Chen sqrt(n)",
        "Chen greedy",
        "revolve",
        "Checkmate MILP",
    ];
    let paper_of = |l: &str| match l {
        "checkpoint all" => paper[0].to_string(),
        "Chen sqrt(n)" => paper[1].to_string(),
        "Chen greedy" => paper[2].to_string(),
        "Checkmate MILP" => paper[3].to_string(),
        _ => "-".into(),
    };
    let mem = params.batch_memory_bytes;
    Table {
        caption: format!(
            "Largest batch size of {} fitting {:.2} GiB with at most one extra forward pass",
            b.graph,
            mem as f64 / (1u64 << 30) as f64
        ),
        columns: vec![
            "strategy".into(),
            "Jain et al. 2020, Fig. 6 (VGG19, V100 16 GB)".into(),
            "ours".into(),
        ],
        rows: labels
            .iter()
            .zip(ours)
            .map(|(l, o)| vec![l.to_string(), paper_of(l), o.to_string()])
            .collect(),
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod short_name_tests {
    use super::short_graph_name;

    #[test]
    fn graph_names_read_as_the_network_and_its_input() {
        assert_eq!(
            short_graph_name("VGG16_256_224_224_3_train"),
            "VGG16 (batch 256, 224x224)"
        );
        assert_eq!(
            short_graph_name("vgg_unet_32_416_608_3_train"),
            "U-Net (batch 32, 416x608)"
        );
        assert_eq!(
            short_graph_name("random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14"),
            "random layered, 250 nodes"
        );
        assert_eq!(short_graph_name("my_net"), "my net");
        assert_eq!(crate::fmt_bytes(1.266e10), "12.66 GB");
        assert_eq!(crate::fmt_bytes(41687.0), "41.69 kB");
        assert_eq!(crate::fmt_bytes(512.0), "512 B");
    }
}
