//! Measures `memwall plan --solver staged` ([`memwall_remat::plan::plan`], the same call) on
//! generated random layered graphs: `plan_scale N:W:SEED[,N:W:SEED...] FRACTIONS TIME_LIMIT_S
//! [THREADS]`, e.g. `plan_scale 500:0.36:1,1000:0.31:1 0.8,0.9 60 2`. Graphs use the shared
//! files' `nlv` 0.75, `ed` 0.2 and `scd` 0.14 ([`LayeredParams::shared`]); budgets are
//! fractions of the checkpoint-all peak. Prints one Markdown row per graph and budget: cost,
//! lower bound, the bound over `sum C`, gap, status, wall time of the whole call, and the
//! stages that reached their time share.
use memwall_remat::layered::{random_layered, LayeredParams};
use memwall_remat::plan::{plan, Budget, PlanOptions, Solver};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: plan_scale N:W:SEED[,N:W:SEED...] FRACTIONS TIME_LIMIT_S [THREADS]");
        std::process::exit(2);
    }
    let limit: f64 = a[3].parse().expect("TIME_LIMIT_S is a number of seconds");
    let threads: u32 = a.get(4).map_or(2, |t| t.parse().expect("THREADS"));
    println!("| graph | budget | cost | lower bound | bound / Σ C | gap | status | wall time (s) | stages at their limit |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for spec in a[1].split(',') {
        let v: Vec<&str> = spec.split(':').collect();
        assert_eq!(v.len(), 3, "graph spec N:W:SEED, got {spec}");
        let p = LayeredParams::shared(
            v[0].parse().expect("N"),
            v[1].parse().expect("W"),
            v[2].parse().expect("SEED"),
        );
        let g = random_layered(&p).unwrap_or_else(|e| panic!("{e}"));
        for f in a[2].split(',') {
            let frac: f64 = f.parse().expect("fraction");
            let budget = Budget::Fraction(frac).bytes(&g).expect("budget");
            let opts = PlanOptions {
                time_limit_s: limit,
                gap: 0.01,
                threads,
            };
            let t = Instant::now();
            let o = plan(&g, Solver::Staged, budget, &opts).unwrap_or_else(|e| panic!("{e}"));
            let wall = t.elapsed().as_secs_f64();
            let fmt = |x: Option<f64>| x.map_or("–".into(), |c| format!("{c:.0}"));
            println!(
                "| n{} w{} seed {} | {frac} | {} | {} | {} | {} | {} | {wall:.1} | {} |",
                p.n,
                p.width,
                p.seed,
                fmt(o.cost),
                fmt(o.lower_bound),
                o.lower_bound
                    .map_or("–".into(), |b| format!("{:.4}", b / g.total_cost())),
                o.gap.map_or("–".into(), |x| format!("{:.2}%", 100.0 * x)),
                o.status,
                o.stages
                    .iter()
                    .filter(|s| s.at_limit)
                    .map(|s| s.stage.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    }
}
