//! `memwall plan`: the rematerialization planners on a user's graph file (memwall's format or a
//! Checkmate / random-layered networkx node-link file), at one budget, with one or all solvers.
//! Prints cost, overhead, simulated peak, status, lower bound, gap and solve time per solver and
//! writes the cheapest schedule found as JSON ([`memwall_remat::plan::schedule_json`]).

use memwall_remat::deadline::Deadline;
use memwall_remat::graph_file::read_graph;
use memwall_remat::plan::{
    checkpoint_all_peak, plan, schedule_json, smallest_feasible_budget, Budget, PlanOptions,
    PlanOutcome, Solver,
};
use memwall_remat::{Graph, RematError};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Why `memwall plan` failed.
#[derive(Debug, thiserror::Error)]
pub enum PlanCmdError {
    /// A numeric option is out of range: the flag with its value, and the accepted range.
    #[error("{option}: {fix}")]
    Option {
        /// The flag with its value (e.g. `--gap 2`).
        option: String,
        /// The accepted range, as the fix.
        fix: &'static str,
    },
    /// The graph file, the budget, the solver list or a solver failed (naming the file and
    /// field, or the parameter).
    #[error(transparent)]
    Remat(#[from] RematError),
    /// The schedule could not be written to `--out`.
    #[error("cannot write --out {path}: {source}")]
    Write {
        /// The `--out` file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Formatting the printed table failed (writing to a `String` does not fail).
    #[error("formatting the plan table: {0}")]
    Format(#[from] std::fmt::Error),
}

type Result<T, E = PlanCmdError> = std::result::Result<T, E>;

/// What `memwall plan` was asked.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// The graph file.
    pub graph: PathBuf,
    /// The budget (bytes or a fraction of the checkpoint-all peak).
    pub budget: Budget,
    /// `--solver`: a solver name or `all`.
    pub solver: String,
    /// Solver options (time limit, gap, threads).
    pub options: PlanOptions,
    /// Where to write the schedule JSON.
    pub out: Option<PathBuf>,
}

/// Checks the numeric options (each error names the flag and the accepted range).
fn check_options(o: &PlanOptions) -> Result<()> {
    if !(o.time_limit_s.is_finite() && o.time_limit_s > 0.0) {
        return Err(PlanCmdError::Option {
            option: format!("--time-limit {}", o.time_limit_s),
            fix: "give a positive number of seconds",
        });
    }
    if !(o.gap.is_finite() && (0.0..=1.0).contains(&o.gap)) {
        return Err(PlanCmdError::Option {
            option: format!("--gap {}", o.gap),
            fix: "give a relative gap in [0, 1], e.g. 0.01 for 1%",
        });
    }
    if o.threads == 0 {
        return Err(PlanCmdError::Option {
            option: "--threads 0".into(),
            fix: "give at least 1 thread",
        });
    }
    Ok(())
}

fn opt<T: std::fmt::Display>(x: Option<T>) -> String {
    x.map_or_else(|| "–".into(), |v| v.to_string())
}

/// One line of the solver table.
fn row(o: &PlanOutcome) -> String {
    format!(
        "{:<15} {:<30} {:>14} {:>9} {:>16} {:>8} {:>14} {:>8} {:>9.2}",
        o.solver.name(),
        o.status,
        opt(o.cost.map(|c| format!("{c:.4}"))),
        opt(o.overhead.map(|c| format!("{c:.4}x"))),
        opt(o.peak_bytes),
        opt(o.recomputations),
        opt(o.lower_bound.map(|c| format!("{c:.4}"))),
        opt(o.gap.map(|g| format!("{:.2}%", 100.0 * g))),
        o.solve_time_s
    )
}

/// Runs the request and returns what `memwall plan` prints.
///
/// # Errors
/// Unreadable or invalid graph files (naming the file and field), bad options (naming the
/// flag), solver failures, and an unwritable `--out` file.
pub fn run(req: &PlanRequest) -> Result<String> {
    check_options(&req.options)?;
    let deadline = Deadline::new(req.options.time_limit_s);
    let solvers = Solver::parse_list(&req.solver)?;
    let g = read_graph(&req.graph)?;
    let reference = checkpoint_all_peak(&g)?;
    let budget = req.budget.bytes(&g)?;
    let mut text = String::new();
    write_header(&mut text, req, &g, reference, budget)?;
    let mut outcomes = Vec::with_capacity(solvers.len());
    for (k, &s) in solvers.iter().enumerate() {
        let o = plan(
            &g,
            s,
            budget,
            &solver_options(&req.options, &deadline, &solvers[k..]),
        )?;
        writeln!(text, "{}", row(&o))?;
        outcomes.push(o);
    }
    write_stages(&mut text, &outcomes, &deadline)?;
    // Ties go to the solver listed last (the MILP, whose optimality is proven).
    let best = outcomes
        .iter()
        .rev()
        .filter(|o| o.schedule.is_some())
        .min_by(|a, b| {
            a.cost
                .unwrap_or(f64::INFINITY)
                .total_cmp(&b.cost.unwrap_or(f64::INFINITY))
        });
    let mut json = match best {
        Some(o) => {
            writeln!(
                text,
                "\ncheapest: {} at cost {:.4} ({:.4}x), peak {} bytes, {} recomputations",
                o.solver.name(),
                o.cost.unwrap_or(f64::NAN),
                o.overhead.unwrap_or(f64::NAN),
                opt(o.peak_bytes),
                opt(o.recomputations)
            )?;
            schedule_json(&g, o)
        }
        None => no_schedule(&mut text, req, &g, &outcomes, &deadline, reference, budget)?,
    };
    if let Some(out) = &req.out {
        json["budget_bytes"] = budget.into();
        json["checkpoint_all_peak_bytes"] = reference.into();
        write_json(out, &json)?;
        writeln!(text, "schedule written to {}", out.display())?;
    }
    Ok(text)
}

/// Writes the lines above the solver rows: the graph, the budget and the table's header.
fn write_header(
    text: &mut String,
    req: &PlanRequest,
    g: &Graph,
    reference: u64,
    budget: u64,
) -> Result<()> {
    writeln!(
        text,
        "graph {} ({}): {} nodes, {} edges, total cost {:.4}, checkpoint-all peak {} bytes",
        g.name,
        req.graph.display(),
        g.len(),
        g.deps.iter().map(Vec::len).sum::<usize>(),
        g.total_cost(),
        reference
    )?;
    writeln!(
        text,
        "budget {budget} bytes ({:.3} of the checkpoint-all peak)\n",
        budget as f64 / reference as f64
    )?;
    writeln!(
        text,
        "{:<15} {:<30} {:>14} {:>9} {:>16} {:>8} {:>14} {:>8} {:>9}",
        "solver",
        "status",
        "cost",
        "overhead",
        "peak bytes",
        "recomp.",
        "lower bound",
        "gap",
        "time (s)"
    )?;
    Ok(())
}

/// Where no solver found a schedule: writes whether the budget is proven infeasible and the
/// smallest feasible budget (searched in what is left of the time limit), and returns the JSON
/// that says so in place of a schedule.
fn no_schedule(
    text: &mut String,
    req: &PlanRequest,
    g: &Graph,
    outcomes: &[PlanOutcome],
    deadline: &Deadline,
    reference: u64,
    budget: u64,
) -> Result<serde_json::Value> {
    let left = PlanOptions {
        time_limit_s: deadline.left(),
        ..req.options.clone()
    };
    let fb = smallest_feasible_budget(g, &left)?;
    let proven = budget < fb.lower_bytes;
    let smallest = if fb.exact() {
        format!(
            "the smallest feasible budget is {} bytes ({:.3} of the checkpoint-all peak)",
            fb.upper_bytes,
            fb.upper_bytes as f64 / reference as f64
        )
    } else {
        format!(
            "the smallest feasible budget is between {} and {} bytes (not settled within --time-limit)",
            fb.lower_bytes, fb.upper_bytes
        )
    };
    if proven {
        writeln!(
            text,
            "\ninfeasible: no schedule fits {budget} bytes; {smallest}"
        )?;
    } else {
        writeln!(
            text,
            "\nno schedule found: none of the solvers found one at {budget} bytes within --time-limit, and the budget is not proven infeasible; {smallest}; try a longer --time-limit or --solver staged"
        )?;
    }
    Ok(serde_json::json!({
        "graph": g.name,
        "nodes": g.len(),
        "budget_bytes": budget,
        "status": if proven { "infeasible" } else { "not found" },
        "smallest_feasible_budget": fb,
        "outcomes": outcomes,
    }))
}

/// Whether `s` solves an LP or a MILP (the solvers that share the time limit).
fn solves(s: Solver) -> bool {
    matches!(s, Solver::Milp | Solver::Staged | Solver::LpRounding)
}

/// Options of the first of `rest` (the solvers still to run): an LP or MILP solver gets an
/// equal share of what is left of the command's time limit among those still to run.
fn solver_options(o: &PlanOptions, deadline: &Deadline, rest: &[Solver]) -> PlanOptions {
    let heavy = rest.iter().filter(|&&s| solves(s)).count().max(1);
    PlanOptions {
        time_limit_s: (deadline.left() / heavy as f64).max(0.01),
        ..o.clone()
    }
}

/// Per solver with stages, the time each took of its share, and the stages cut short; then the
/// command's wall time against its limit.
fn write_stages(text: &mut String, outcomes: &[PlanOutcome], deadline: &Deadline) -> Result<()> {
    for o in outcomes.iter().filter(|o| !o.stages.is_empty()) {
        let parts: Vec<String> = o
            .stages
            .iter()
            .map(|t| {
                let limit = t.limit_s.map_or(String::new(), |l| format!(" of {l:.1}"));
                let cut = if t.at_limit { ", cut short" } else { "" };
                format!("{} {:.1}{limit} s{cut}", t.stage.name(), t.seconds)
            })
            .collect();
        writeln!(text, "{} stages: {}", o.solver.name(), parts.join("; "))?;
    }
    writeln!(
        text,
        "wall time {:.1} s of the {:.1} s time limit",
        deadline.elapsed(),
        deadline.limit_s()
    )?;
    Ok(())
}

fn write_json(path: &Path, json: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(json).expect("JSON values serialize");
    std::fs::write(path, text).map_err(|source| PlanCmdError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn bad_options_name_the_flag_and_the_range() {
        let o = PlanOptions {
            gap: 2.0,
            ..PlanOptions::default()
        };
        let msg = check_options(&o).unwrap_err().to_string();
        assert_eq!(
            msg,
            "--gap 2: give a relative gap in [0, 1], e.g. 0.01 for 1%"
        );
        let o = PlanOptions {
            threads: 0,
            ..PlanOptions::default()
        };
        let msg = check_options(&o).unwrap_err().to_string();
        assert_eq!(msg, "--threads 0: give at least 1 thread");
    }

    #[test]
    fn an_unwritable_out_file_is_named_with_the_io_error_as_source() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("no-such-dir").join("schedule.json");
        let err = write_json(&out, &serde_json::json!({})).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("cannot write --out {}", out.display())),
            "{err}"
        );
        let io = err.source().expect("the I/O error is the source");
        assert!(io.downcast_ref::<std::io::Error>().is_some(), "{io:?}");
    }

    #[test]
    fn an_unreadable_graph_file_is_a_remat_error_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let req = PlanRequest {
            graph: tmp.path().join("missing.json"),
            budget: Budget::Fraction(0.5),
            solver: "greedy".into(),
            options: PlanOptions::default(),
            out: None,
        };
        let err = run(&req).unwrap_err();
        assert!(matches!(err, PlanCmdError::Remat(_)), "{err:?}");
        assert!(err.to_string().contains("missing.json"), "{err}");
    }
}
