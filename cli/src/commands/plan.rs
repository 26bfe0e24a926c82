//! `memwall plan`: rematerialization for a graph file at a budget (the table is
//! [`memwall::plan::graph`]'s).

use super::*;

#[derive(Args)]
pub(crate) struct PlanArgs {
    /// Graph file: memwall's format or a networkx node-link file (Checkmate's graphs, the
    /// random layered graphs).
    #[arg(long, required_unless_present = "transformer")]
    pub(crate) graph: Option<PathBuf>,
    /// Instead of a graph file: an experiment file whose transformer is planned unit by unit
    /// and block by block at memory budgets (`--budgets`): prints the memory-recomputation
    /// front of both granularities (`--out` writes both whole fronts as JSON).
    #[arg(long, conflicts_with_all = ["graph", "budget", "budget_fraction", "solver"])]
    pub(crate) transformer: Option<PathBuf>,
    /// With --transformer: the size profile whose model is planned (smoke, cpu, full).
    #[arg(long, default_value = "cpu", requires = "transformer")]
    pub(crate) profile: Profile,
    /// With --transformer: the compute dtype (f32, f16, bf16), which sizes the kept values.
    #[arg(long, default_value = "f32", requires = "transformer")]
    pub(crate) precision: String,
    /// With --transformer: the budgets in [0, 1] to print, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1",
        requires = "transformer"
    )]
    pub(crate) budgets: Vec<f64>,
    /// Budget in bytes (fixed memory included).
    #[arg(long, conflicts_with = "budget_fraction")]
    pub(crate) budget: Option<u64>,
    /// Budget as a fraction of the checkpoint-all peak, in (0, 1] (default 0.8).
    #[arg(long)]
    pub(crate) budget_fraction: Option<f64>,
    /// milp, staged (the scalable MILP for large graphs), lp-rounding, greedy, sqrt, revolve,
    /// checkpoint-all, or all.
    #[arg(long, default_value = "milp")]
    pub(crate) solver: String,
    /// Time limit of the whole command, seconds: the solvers that solve LPs or MILPs share
    /// it; the staged solver splits its share among its stages and prints what each took.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) time_limit: f64,
    /// Relative MIP gap at which the MILP stops (0.01 = 1%).
    #[arg(long, default_value_t = 0.01)]
    pub(crate) gap: f64,
    /// Threads: HiGHS' (with `staged` on a graph too large for its staged model, one of them
    /// runs the annealing beside the bound).
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: u32,
    /// Write the schedule as JSON here.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

/// `memwall plan`: plans rematerialization for the graph file and prints the solvers' table.
pub(crate) fn plan(a: PlanArgs) -> Result<()> {
    if let Some(experiment) = a.transformer {
        let precision = match a.precision.as_str() {
            "f32" => memwall_core::spec::Precision::F32,
            "f16" => memwall_core::spec::Precision::F16,
            "bf16" => memwall_core::spec::Precision::Bf16,
            other => anyhow::bail!("--precision {other}: give f32, f16 or bf16"),
        };
        let req = memwall::plan::front::FrontRequest {
            experiment,
            profile: a.profile,
            precision,
            budgets: a.budgets,
            out: a.out,
        };
        print!("{}", memwall::plan::front::run(&req)?);
        return Ok(());
    }
    let req = memwall::plan::graph::PlanRequest {
        graph: a
            .graph
            .expect("clap requires --graph without --transformer"),
        budget: match a.budget {
            Some(b) => memwall_remat::plan::Budget::Bytes(b),
            None => memwall_remat::plan::Budget::Fraction(a.budget_fraction.unwrap_or(0.8)),
        },
        solver: a.solver,
        options: memwall_remat::plan::PlanOptions {
            time_limit_s: a.time_limit,
            gap: a.gap,
            threads: a.threads,
        },
        out: a.out,
    };
    print!("{}", memwall::plan::graph::run(&req)?);
    Ok(())
}
