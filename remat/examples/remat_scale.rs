//! Measures the staged rematerialization MILP ([`memwall_remat::staged`]) on one graph:
//! `remat_scale GRAPH.json|gen:N:SEED FRACTIONS STAGE_SIZE TIME_LIMIT_S [MAX_COMPUTATIONS]
//! [REFINE]`, e.g. `remat_scale g.json 0.9,0.8 2 60 0 1` (`STAGE_SIZE` 0: the solver's default
//! for each budget, [`memwall_remat::staged::default_stage_size`]). Budgets are fractions of the
//! checkpoint-all peak; `gen:N:SEED` generates a random layered graph (w 0.27, nlv 0.75, ed 0.2,
//! scd 0.14). `REFINE = 1` refines with one node per stage after 40% of the time
//! ([`memwall_remat::staged::solve_refined`]). Prints the model size and, per budget and level,
//! the status, time, heuristic and best cost, bounds and gaps (2 HiGHS threads).
use memwall_remat::baselines::checkpoint_all;
use memwall_remat::layered::{random_layered, LayeredParams};
use memwall_remat::milp::MilpOptions;
use memwall_remat::staged::{
    default_stage_size, model_size, solve_refined, StagedOptions, StagedOutcome, DEFAULT_MAX_STAGES,
};
use memwall_remat::{simulate, Graph};
use std::path::Path;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: remat_scale GRAPH.json|gen:N:SEED FRACTIONS STAGE_SIZE TIME_LIMIT_S [MAX_COMPUTATIONS] [REFINE]");
        std::process::exit(2);
    }
    let g = match a[1].strip_prefix("gen:") {
        Some(spec) => {
            let v: Vec<u64> = spec
                .split(':')
                .map(|x| x.parse().expect("gen:N:SEED"))
                .collect();
            random_layered(&LayeredParams::shared(v[0] as usize, 0.27, v[1]))
        }
        None => Graph::read_node_link(Path::new(&a[1])),
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let stage: usize = a[3].parse().expect("STAGE_SIZE");
    let tl: f64 = a[4].parse().expect("TIME_LIMIT_S");
    let cmax: Option<u32> = a.get(5).and_then(|x| x.parse().ok()).filter(|&c| c > 0);
    let refine = a.get(6).is_some_and(|x| x == "1");
    let peak = simulate(&g, &checkpoint_all(&g)).unwrap().peak_mem;
    // With STAGE_SIZE 0 the size printed is that of stages of 5 nodes (sizes vary by budget).
    let size = model_size(&g, if stage == 0 { 5 } else { stage }, cmax);
    println!(
        "{} n={} checkpoint-all peak={peak} working set={} sum C={} | stage {stage} C {cmax:?}: {} cols ({} int), {} rows",
        g.name,
        g.len(),
        g.working_set_bound(),
        g.total_cost(),
        size.columns,
        size.integer_columns,
        size.rows
    );
    for f in a[2].split(',') {
        let frac: f64 = f.parse().expect("fraction");
        let budget = (peak as f64 * frac).floor() as u64;
        let milp = MilpOptions {
            time_limit_s: tl,
            heuristic_effort: 0.3,
            ..Default::default()
        };
        // STAGE_SIZE 0: the default for the budget (its checkpoint-all prefix as one stage).
        let stage_size = if stage == 0 {
            default_stage_size(&g, budget, DEFAULT_MAX_STAGES)
        } else {
            stage
        };
        let o = StagedOptions {
            milp,
            stage_size,
            max_computations: cmax,
            ..Default::default()
        };
        let (coarse, fine) = solve_refined(&g, budget, &o, 0.4, refine).unwrap();
        for out in std::iter::once(&coarse).chain(fine.as_ref()) {
            report(frac, budget, out);
        }
    }
}

fn report(frac: f64, budget: u64, out: &StagedOutcome) {
    println!(
        "  {frac}: budget {budget} stage {} status {} time {:.1} s heuristic {:?} annealed {:?} best {:?} LP {:?} boundary bound {:?} cut LP {:?} ({} cuts) dual(model) {:.1} gap(model) {:.4} valid bound {:.1} gap(valid) {:.4} size {:?}",
        out.stage_size,
        out.status,
        out.solve_time_s,
        out.greedy.map(|r| r.cost),
        out.annealed.map(|r| r.cost),
        out.best.as_ref().map(|b| b.1.cost),
        out.lp_bound,
        out.boundary_bound,
        out.boundary_lp_bound,
        out.closure_cuts,
        out.dual_bound,
        out.mip_gap,
        out.valid_bound,
        out.valid_gap(),
        out.size
    );
}
