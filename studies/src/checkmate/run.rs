//! Running the Checkmate study: the baselines simulated, the solvers run per graph and budget,
//! and the batch-size search.

use super::*;

/// The baseline families, in the order of [`BudgetResult::baselines`] and
/// [`BatchResult::baselines`].
pub const BASELINES: [&str; 4] = ["checkpoint all", "Chen sqrt(n)", "Chen greedy", "revolve"];

/// All baseline schedules of one family, simulated.
pub(super) fn family(g: &Graph, name: &str, greedy_count: usize) -> Vec<(Schedule, SimResult)> {
    let scheds: Vec<Schedule> = match name {
        "checkpoint all" => vec![checkpoint_all(g)],
        "Chen sqrt(n)" => vec![chen_sqrt(g)],
        "Chen greedy" => greedy_thresholds(g, greedy_count)
            .into_iter()
            .map(|t| chen_greedy(g, t))
            .collect(),
        _ => (0..=g.forward_nodes().len())
            .map(|s| revolve(g, s))
            .collect(),
    };
    scheds
        .into_iter()
        .map(|s| {
            let r = simulate(g, &s).expect("baseline schedules are valid by construction");
            (s, r)
        })
        .collect()
}

fn best_within(
    f: &[(Schedule, SimResult)],
    budget: u64,
    max_cost: f64,
) -> Option<&(Schedule, SimResult)> {
    f.iter()
        .filter(|(_, r)| r.peak_mem <= budget && r.cost <= max_cost + 1e-9)
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
}

/// Runs the study: for every graph (the files, the generated graphs, the built networks) and
/// budget, the baselines, the LP relaxation with rounding
/// and the MILP; then the batch-size search. Graph files are read from
/// `<data_dir>/remat-graphs`.
///
/// # Errors
/// [`RematError::Params`] for budget fractions outside (0, 1]; a graph file that cannot be read
/// or parsed; a solver failure.
pub fn run_study(params: &CheckmateParams, data_dir: &Path) -> Result<CheckmateResult, RematError> {
    validate(params).map_err(|e| RematError::Params(e.to_string()))?;
    if params
        .budget_fractions
        .iter()
        .any(|f| !(*f > 0.0 && *f <= 1.0))
    {
        return Err(RematError::Params(
            "budget fractions must be in (0, 1]".into(),
        ));
    }
    let dir = data_dir.join("remat-graphs");
    let opts = MilpOptions {
        time_limit_s: params.time_limit_s,
        mip_gap: params.mip_gap,
        threads: params.threads,
        warm_start: None,
        heuristic_effort: params.heuristic_effort,
        cost_cutoff: None,
        beside: None,
    };
    let mut graphs = params
        .graphs
        .iter()
        .map(|file| measure_graph(&Graph::read_node_link(&dir.join(file))?, params, &opts))
        .collect::<Result<Vec<_>, RematError>>()?;
    for gen in &params.generated {
        graphs.push(measure_graph(
            &random_layered(&gen.params())?,
            params,
            &opts,
        )?);
    }
    let limit = params.nets_time_limit_s;
    let net_params = CheckmateParams {
        time_limit_s: limit,
        staged_time_limit_s: limit,
        ..params.clone()
    };
    let net_opts = MilpOptions {
        time_limit_s: limit,
        ..opts.clone()
    };
    for net in &params.nets {
        graphs.push(measure_graph(&net.graph()?.0, &net_params, &net_opts)?);
    }
    let batch = match &params.batch_graph {
        Some(bg) => Some(measure_batch(
            params,
            &Graph::read_node_link(&dir.join(bg))?,
            params.batch_graph_batch,
            &opts,
        )?),
        None => None,
    };
    let batch_nets = params
        .batch_nets
        .iter()
        .map(|n| {
            let (g, b) = n.graph()?;
            // Searched in steps of 1 / divisions of a sample: the graph's size at `b` samples
            // is its size at `b * divisions` steps.
            let d = n.divisions();
            Ok(BatchResult {
                divisions: d,
                ..measure_batch(params, &g, b * d, &opts)?
            })
        })
        .collect::<Result<Vec<_>, RematError>>()?;
    Ok(CheckmateResult {
        params: params.clone(),
        graphs,
        batch,
        batch_nets,
    })
}

/// Every budget fraction of `params` on graph `g`.
fn measure_graph(
    g: &Graph,
    params: &CheckmateParams,
    opts: &MilpOptions,
) -> Result<GraphResult, RematError> {
    let fams: Vec<Vec<(Schedule, SimResult)>> = BASELINES
        .iter()
        .map(|b| family(g, b, params.greedy_thresholds))
        .collect();
    let all_peak = fams[0][0].1.peak_mem;
    let ws = g.working_set_bound();
    let mut budgets = params
        .budget_fractions
        .iter()
        .map(|&frac| {
            let budget = (all_peak as f64 * frac).floor() as u64;
            measure_budget(g, &fams, frac, budget, params, opts)
        })
        .collect::<Result<Vec<_>, RematError>>()?;
    // Rounded up to 0.001, so the budget is at or above the bound.
    let smallest = (ws as f64 / all_peak.max(1) as f64 * 1000.0).ceil() / 1000.0;
    if params.smallest_budget
        && smallest < 1.0
        && !params
            .budget_fractions
            .iter()
            .any(|x| (x - smallest).abs() < 1e-9)
    {
        let limit = params.smallest_budget_time_limit_s;
        let p = CheckmateParams {
            staged_time_limit_s: limit,
            ..params.clone()
        };
        let o = MilpOptions {
            time_limit_s: limit,
            ..opts.clone()
        };
        let budget = (all_peak as f64 * smallest).floor() as u64;
        budgets.push(measure_budget(g, &fams, smallest, budget, &p, &o)?);
    }
    Ok(GraphResult {
        name: g.name.clone(),
        nodes: g.len(),
        layers: (g.first_backward() < g.len()).then(|| g.forward_ops().len()),
        forward_backward_cost: g.total_cost(),
        checkpoint_all_peak_bytes: all_peak,
        working_set_bound_bytes: ws,
        budgets,
    })
}

/// The baselines' cheapest fitting schedules, the LP relaxation with rounding and (for graphs
/// of at most `milp_max_nodes` nodes) the MILP, warm-started from the cheapest fitting
/// baseline or rounded schedule, at one budget.
fn measure_budget(
    g: &Graph,
    fams: &[Vec<(Schedule, SimResult)>],
    frac: f64,
    budget: u64,
    params: &CheckmateParams,
    opts: &MilpOptions,
) -> Result<BudgetResult, RematError> {
    let baselines = fams
        .iter()
        .map(|f| best_within(f, budget, f64::INFINITY).map(|x| (&x.1).into()))
        .collect();
    let lp = if g.len() <= params.classic_lp_max_nodes {
        solve_lp_rounding(
            g,
            budget,
            opts,
            &params.rounding_thresholds,
            &params.lp_tighten,
        )?
    } else {
        LpOutcome {
            lp_bound: None,
            rounded: None,
            solve_time_s: 0.0,
        }
    };
    // Warm start: the cheapest fitting baseline or LP-rounded schedule.
    let warm = fams
        .iter()
        .filter_map(|f| best_within(f, budget, f64::INFINITY).cloned())
        .chain(lp.rounded.as_ref().map(|(s, r, _)| (s.clone(), *r)))
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
        .map(|x| x.0);
    let (milp, staged, refined, boundary) = if g.len() <= params.milp_max_nodes {
        let o = MilpOptions {
            warm_start: warm,
            ..opts.clone()
        };
        let relax = boundary_bound(g, budget, &o)?;
        tracing::info!(graph = %g.name, frac, status = %relax.status, time_s = relax.solve_time_s, "boundary relaxation");
        let out = solve_milp(g, budget, &o)?;
        tracing::info!(graph = %g.name, frac, status = %out.status, time_s = out.solve_time_s, "checkmate milp");
        (
            Some((&out).into()),
            None,
            None,
            Some(BoundarySolve::new(g, &relax)),
        )
    } else {
        let (c, f) = measure_staged(g, budget, warm, params, opts)?;
        (None, Some(c), f, None)
    };
    Ok(BudgetResult {
        fraction: frac,
        budget_bytes: budget,
        baselines,
        milp,
        staged,
        refined,
        boundary,
        lp: (&lp).into(),
    })
}

/// The staged MILP at one budget (stage size `ceil(n / staged_max_stages)`) and, for graphs
/// up to `refine_max_nodes` nodes, its refinement with one node per stage.
fn measure_staged(
    g: &Graph,
    budget: u64,
    warm: Option<Schedule>,
    params: &CheckmateParams,
    opts: &MilpOptions,
) -> Result<(StagedSolve, Option<StagedSolve>), RematError> {
    let stage_size = default_stage_size(g, budget, params.staged_max_stages);
    let so = StagedOptions {
        milp: MilpOptions {
            time_limit_s: params.staged_time_limit_s,
            warm_start: warm,
            ..opts.clone()
        },
        stage_size,
        max_computations: params.staged_max_computations,
        stop_at_first: false,
        lp_rounding: true,
        boundary: true,
        anneal: true,
        start: None,
    };
    let refine = g.len() <= params.refine_max_nodes;
    let (coarse, fine) = solve_refined(g, budget, &so, params.coarse_share, refine)?;
    let c = StagedSolve::new(&coarse, params.staged_max_computations);
    let f = fine.as_ref().map(|f| StagedSolve::new(f, None));
    tracing::info!(graph = %g.name, budget, stage_size, status = %c.status, time_s = c.solve_time_s,
        refined = ?f.as_ref().map(|f| (f.status.as_str(), f.solve_time_s)), "staged milp");
    Ok((c, f))
}

/// Largest `b` in `[lo, hi]` with `fits(b)` by bisection, assuming `fits` is monotone
/// (`fits(lo)` is checked; returns 0 if it fails).
fn bisect(
    lo: u32,
    hi: u32,
    mut fits: impl FnMut(u32) -> Result<bool, RematError>,
) -> Result<u32, RematError> {
    if lo == 0 || !fits(lo)? {
        return Ok(0);
    }
    let (mut good, mut bad) = (lo, hi + 1);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if fits(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(good)
}

/// The largest batch size of graph `g0` (built at batch `batch0`) that fits
/// `params.batch_memory_bytes` within one extra forward pass of compute: bisection for each
/// baseline family, then (graphs of at most `params.milp_max_nodes` nodes) for the MILP from
/// the best baseline's batch up.
fn measure_batch(
    params: &CheckmateParams,
    g0: &Graph,
    batch0: u32,
    opts: &MilpOptions,
) -> Result<BatchResult, RematError> {
    let b0 = batch0.max(1) as f64;
    let mem = params.batch_memory_bytes;
    // Compute limit: one extra forward pass. Compute scales linearly with batch too, so the
    // ratio to one forward+backward is batch-independent and the limit is checked at any scale.
    let limit = g0.total_cost() + g0.forward_cost();
    let at = |b: u32| g0.scale_memory(b as f64 / b0);
    let baselines = BASELINES
        .iter()
        .map(|name| {
            bisect(1, params.batch_max, |b| {
                let g = at(b);
                Ok(best_within(&family(&g, name, params.greedy_thresholds), mem, limit).is_some())
            })
        })
        .collect::<Result<Vec<u32>, RematError>>()?;
    let lo = baselines.iter().copied().max().unwrap_or(1).max(1);
    // No schedule fits once one op's working set exceeds the memory.
    let ws = g0.working_set_bound().max(1) as f64;
    let ws_cap = (mem as f64 * b0 / ws).floor() as u32;
    let hi = params.batch_max.min(ws_cap).max(lo);
    if g0.len() > params.milp_max_nodes {
        // The staged MILP (Checkmate's problem, stages of several nodes, then refined), as the
        // budget sweep solves such graphs; a probe fits when its best schedule is within the
        // compute limit.
        let mut milp_probes = Vec::new();
        let milp = bisect(lo, hi, |b| {
            let g = at(b);
            let warm = BASELINES
                .iter()
                .filter_map(|n| {
                    best_within(&family(&g, n, params.greedy_thresholds), mem, f64::INFINITY)
                        .cloned()
                })
                .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
                .map(|x| x.0);
            // A probe has the batch search's limit, as the MILP's probes of smaller graphs.
            let probe_params = CheckmateParams {
                staged_time_limit_s: params.batch_time_limit_s,
                ..params.clone()
            };
            let (coarse, refined) = measure_staged(&g, mem, warm, &probe_params, opts)?;
            let fits = [Some(&coarse), refined.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|s| s.best)
                .any(|x| x.cost <= limit + 1e-9);
            milp_probes.push(BatchProbe {
                batch: b,
                milp: None,
                staged: Some(coarse),
                refined,
                fits,
            });
            Ok(fits)
        })?;
        return Ok(BatchResult {
            graph: g0.name.clone(),
            compute_limit: limit,
            baselines,
            milp,
            working_set_cap: ws_cap,
            milp_probes,
            milp_solved: true,
            divisions: 1,
        });
    }
    let bo = MilpOptions {
        time_limit_s: params.batch_time_limit_s,
        cost_cutoff: Some(limit),
        ..opts.clone()
    };
    let mut milp_probes = Vec::new();
    let milp = bisect(lo, hi, |b| {
        let probe = batch_probe(&at(b), b, params, limit, &bo)?;
        let fits = probe.fits;
        milp_probes.push(probe);
        Ok(fits)
    })?;
    Ok(BatchResult {
        graph: g0.name.clone(),
        compute_limit: limit,
        baselines,
        milp,
        working_set_cap: ws_cap,
        milp_probes,
        milp_solved: true,
        divisions: 1,
    })
}

/// The MILP at batch size `batch` (graph `g`, memory already scaled) and the fixed memory,
/// warm-started from the cheapest fitting baseline; it fits when it finds a schedule within
/// `limit`.
fn batch_probe(
    g: &Graph,
    batch: u32,
    params: &CheckmateParams,
    limit: f64,
    opts: &MilpOptions,
) -> Result<BatchProbe, RematError> {
    let mem = params.batch_memory_bytes;
    let warm = BASELINES
        .iter()
        .filter_map(|n| {
            best_within(&family(g, n, params.greedy_thresholds), mem, f64::INFINITY).cloned()
        })
        .min_by(|a, b| a.1.cost.total_cmp(&b.1.cost))
        .map(|x| x.0);
    let out = solve_milp(
        g,
        mem,
        &MilpOptions {
            warm_start: warm,
            ..opts.clone()
        },
    )?;
    Ok(BatchProbe {
        batch,
        fits: out
            .best
            .as_ref()
            .is_some_and(|(_, r)| r.cost <= limit + 1e-9),
        milp: Some((&out).into()),
        staged: None,
        refined: None,
    })
}
