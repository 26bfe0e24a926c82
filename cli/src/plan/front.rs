//! `memwall plan --transformer`: the memory–recomputation front of an experiment file's
//! transformer, block-granular and unit-level plans side by side
//! ([`memwall_core::units::front`]), at the budgets the source's partitioner takes.

use memwall_core::spec::{Precision, Profile, Study};
use memwall_core::strategy::LayerNormSaving;
use memwall_core::units::{choose, front, FrontPoint, Granularity, Unit, UnitSet};
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What `memwall plan --transformer` was asked.
#[derive(Debug, Clone)]
pub struct FrontRequest {
    /// The experiment file whose model is planned.
    pub experiment: PathBuf,
    /// The size profile whose model is planned.
    pub profile: Profile,
    /// The compute dtype (its bytes per element size the kept values).
    pub precision: Precision,
    /// Budgets in [0, 1] to print a row for.
    pub budgets: Vec<f64>,
    /// Where to write both whole fronts as JSON.
    pub out: Option<PathBuf>,
}

/// Why the front could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    /// The experiment file did not load (the error names the file and field).
    #[error(transparent)]
    Spec(#[from] memwall_core::Error),
    /// The experiment trains no transformer under the profile.
    #[error("{path}: profile `{profile}` trains no model (no `[profiles.{profile}.model]`): plan a training study's file")]
    NoModel {
        /// The experiment file.
        path: PathBuf,
        /// The profile asked for.
        profile: Profile,
    },
    /// A budget outside [0, 1].
    #[error("--budgets {0}: give fractions in [0, 1], e.g. 0,0.05,0.6,1")]
    Budget(f64),
    /// The JSON could not be written to `--out`.
    #[error("cannot write --out {path}: {source}")]
    Write {
        /// The `--out` file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Formatting the table failed (writing to a `String` does not fail).
    #[error("formatting the front table: {0}")]
    Format(#[from] std::fmt::Error),
}

/// The plan in words: how many blocks keep which units (`6 × {}, 2 × {attention}`), with `{}`
/// for a block that keeps only its output and `all` for one that keeps every unit output.
pub fn describe(keeps: &[UnitSet]) -> String {
    let mut groups: Vec<(UnitSet, usize)> = Vec::new();
    for k in keeps {
        match groups.iter_mut().find(|(set, _)| set == k) {
            Some((_, n)) => *n += 1,
            None => groups.push((*k, 1)),
        }
    }
    groups
        .iter()
        .map(|(set, n)| {
            let what = if *set == UnitSet::ALL {
                "all".to_string()
            } else {
                let names: Vec<&str> = set
                    .units()
                    .filter(|u| *u != Unit::MlpOut)
                    .map(Unit::name)
                    .collect();
                format!("{{{}}}", names.join(", "))
            };
            format!("{n} × {what}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn point_json(p: &FrontPoint) -> serde_json::Value {
    json!({
        "kept_bytes": p.kept_bytes,
        "recompute_flops": p.recompute_flops,
        "keeps": p.keeps,
    })
}

/// The front table of `req`'s model: the model's shape, one row per budget and granularity
/// (kept MiB, recomputed GFLOP per step, the plan), and the size of both whole fronts; writes
/// the whole fronts as JSON to `req.out`.
///
/// # Errors
/// [`FrontError`]: the file, a profile without a model, a budget outside [0, 1], `--out`.
pub fn run(req: &FrontRequest) -> Result<String, FrontError> {
    if let Some(b) = req.budgets.iter().find(|b| !(0.0..=1.0).contains(*b)) {
        return Err(FrontError::Budget(*b));
    }
    let study = Study::load(&req.experiment, req.profile, None)?;
    let model = study
        .trained_models()
        .first()
        .map(|(_, m)| *m)
        .ok_or_else(|| FrontError::NoModel {
            path: req.experiment.clone(),
            profile: req.profile,
        })?;
    let shape = model.unit_shape(req.precision);
    let saving = LayerNormSaving::default();
    let layers = model.layers;
    let mut t = String::new();
    writeln!(
        t,
        "{} (profile {}): {} blocks, d_model {}, d_ff {}, {} heads, batch {} x {} tokens, {}",
        req.experiment.display(),
        req.profile,
        layers,
        model.d_model,
        model.d_ff,
        model.heads,
        model.batch,
        model.seq_len,
        req.precision.as_str()
    )?;
    writeln!(
        t,
        "kept: unit outputs the blocks keep for backward (bytes derived from the shapes; the\n\
         block inputs, parameters and optimizer state come on top); recompute: forward FLOPs\n\
         recomputed per step as PyTorch's FLOP counter counts them (elementwise: 0). Budget 0\n\
         keeps only the blocks' outputs; 1 is the cheapest plan recomputing no counted FLOP\n\
         (each level's own: at unit level the products' outputs, at block level every block\n\
         kept whole). plan: how many blocks keep which units besides their output (mlp_out);\n\
         {{}} keeps only the output, all every unit output.\n"
    )?;
    writeln!(
        t,
        "{:>6}  {:<6}  {:>9}  {:>15}  plan",
        "budget", "level", "kept MiB", "recompute GFLOP"
    )?;
    let fronts =
        [Granularity::Block, Granularity::Unit].map(|g| (g, front(layers, &shape, saving, g)));
    for &b in &req.budgets {
        for (g, points) in &fronts {
            let c = choose(points, b);
            writeln!(
                t,
                "{:>6.2}  {:<6}  {:>9.2}  {:>15.3}  {}",
                b,
                g.name(),
                c.plan.kept_bytes as f64 / (1u64 << 20) as f64,
                c.plan.recompute_flops / 1e9,
                describe(&c.plan.keeps)
            )?;
        }
    }
    for (g, points) in &fronts {
        writeln!(
            t,
            "\n{} level: {} plans on the front, {:.2} to {:.2} MiB kept",
            g.name(),
            points.len(),
            points.first().map_or(0.0, |p| p.kept_bytes as f64) / (1u64 << 20) as f64,
            points.last().map_or(0.0, |p| p.kept_bytes as f64) / (1u64 << 20) as f64,
        )?;
    }
    if let Some(path) = &req.out {
        let doc = json!({
            "experiment": req.experiment.display().to_string(),
            "profile": req.profile.to_string(),
            "precision": req.precision.as_str(),
            "model": model,
            "block": fronts[0].1.iter().map(point_json).collect::<Vec<_>>(),
            "unit": fronts[1].1.iter().map(point_json).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&doc).expect("JSON of numbers and names");
        std::fs::write(path, text).map_err(|source| FrontError::Write {
            path: path.clone(),
            source,
        })?;
        writeln!(t, "wrote both fronts to {}", path.display())?;
    }
    Ok(t)
}
