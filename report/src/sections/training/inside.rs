//! Rematerialization inside the block in a training group's section: each row's plan as the
//! unit cost model predicts it beside its measured peak and step time, the pairs of a
//! block-level and a unit-level plan at equal measured peak, and the planner's memory–
//! recomputation front of the group's model at both granularities
//! ([`memwall_core::units::front`]). Shown for a group with a row the unit executor ran.

use super::{control_of, ConfigRow, Group, StudyInputs, MIB};
use crate::analysis::stats;
use crate::analysis::summary::GoalVerdict;
use crate::analysis::{JobRecord, JobStatus, StudyRecords};
use crate::content::{Figure, Mark, Series, Table};
use crate::spec::GoalMetric;
use memwall_core::units::{front, recomputed_units, Estimate, Granularity, Policy, Unit};

/// Measured peaks within this ratio of each other count as equal memory (2%).
pub(super) const EQUAL_PEAK: f64 = 0.02;

/// A finished row's plan, predicted and measured.
struct Planned<'r> {
    row: &'r ConfigRow<'r>,
    record: &'r JobRecord,
    /// `unit: <policy>`, `block: every K`, `block: budget b`, `none`.
    plan: String,
    unit: bool,
    kept_bytes: f64,
    recompute_flops: f64,
    peak: f64,
    step_s: f64,
    /// Forward seconds recomputed per step, predicted from the job's measured forward times
    /// (medians over its runs): its units' ([`JobRecord::unit_forward_s`]) for a unit plan, its
    /// blocks' ([`JobRecord::block_costs`]) for a segment plan; `None` without them.
    recompute_s: Option<f64>,
}

/// Each unit's forward seconds over the finished runs of `record`'s job on its device (its
/// repeats in `records`): the median per unit, so that one run's slow timing (a loaded moment of
/// the machine) does not set the prediction; `None` when no run measured them.
pub(super) fn median_unit_forward(records: &StudyRecords, record: &JobRecord) -> Option<[f64; 8]> {
    let runs: Vec<Vec<f64>> = runs_of(records, record)
        .filter_map(|r| r.unit_forward_s.map(|t| t.to_vec()))
        .collect();
    let m = medians(&runs, 8)?;
    let mut out = [0.0; 8];
    out.copy_from_slice(&m);
    Some(out)
}

/// Each block's forward seconds of the profiling pass ([`JobRecord::block_costs`]) over the
/// finished runs of `record`'s job on its device: the median per block (empty when no run has
/// one cost per layer).
pub(super) fn median_block_forward(records: &StudyRecords, record: &JobRecord) -> Vec<f64> {
    let layers = record.spec.model.layers;
    let runs: Vec<Vec<f64>> = runs_of(records, record)
        .filter(|r| r.block_costs.len() == layers)
        .map(|r| r.block_costs.iter().map(|c| c.forward_s).collect())
        .collect();
    medians(&runs, layers).unwrap_or_default()
}

/// The finished runs of `record`'s job (its repeats) on its device in `records`.
fn runs_of<'a>(
    records: &'a StudyRecords,
    record: &'a JobRecord,
) -> impl Iterator<Item = &'a JobRecord> + 'a {
    let key = crate::analysis::summary::base_key(&record.spec);
    records
        .records
        .iter()
        .filter(move |r| r.status == JobStatus::Ok && r.env.device_name == record.env.device_name)
        .filter(move |r| crate::analysis::summary::base_key(&r.spec) == key)
}

/// The median of each of `n` positions over `runs` (each of length `n`); `None` without runs.
fn medians(runs: &[Vec<f64>], n: usize) -> Option<Vec<f64>> {
    if runs.is_empty() {
        return None;
    }
    Some(
        (0..n)
            .map(|i| {
                let v: Vec<f64> = runs.iter().map(|t| t[i]).collect();
                stats::median_interval(&v, stats::LEVEL).map_or(v[0], |e| e.median)
            })
            .collect(),
    )
}

/// Forward seconds the plan of `record` recomputes per step, from its measured forward times:
/// the `recomputed` units' (`unit_forward`, the median over the job's runs) for a unit plan, the
/// recomputed segments' blocks' (`block_forward`, likewise) for a segment plan.
fn recompute_seconds(
    record: &JobRecord,
    unit_forward: Option<[f64; 8]>,
    block_forward: &[f64],
    recomputed: &[(usize, Unit)],
) -> Option<f64> {
    let spec = &record.spec;
    match (&spec.unit_plan, &spec.plan, unit_forward) {
        (Some(_), _, Some(t)) => Some(
            recomputed
                .iter()
                .fold(0.0, |sum, (_, u)| sum + t[u.index()]),
        ),
        (Some(_), _, None) => None,
        (None, Some(plan), _) => (block_forward.len() == spec.model.layers).then(|| {
            plan.segments
                .iter()
                .filter(|s| s.recompute)
                .flat_map(|s| s.range())
                .fold(0.0, |sum, b| sum + block_forward[b])
        }),
        (None, None, _) => Some(0.0),
    }
}

fn planned<'r>(inputs: &'r StudyInputs, g: &'r Group) -> Vec<Planned<'r>> {
    g.rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|row| {
            let record = inputs.records.get(&row.s.key)?;
            let spec = &record.spec;
            // Kept bytes and recomputed FLOPs derived from the shapes, one recomputation list.
            let keeps = spec.unit_keeps()?;
            let shape = spec.model.unit_shape(spec.strategy.precision);
            let recomputed = recomputed_units(&keeps, spec.strategy.layer_norm);
            let kept: u64 = keeps.iter().map(|k| shape.kept_bytes(*k)).sum();
            let flops = recomputed
                .iter()
                .fold(0.0, |sum, (_, u)| sum + shape.forward_flops(*u));
            let recompute = &spec.strategy.recompute;
            let plan = match (&spec.unit_plan, &spec.plan) {
                (Some(u), _) => format!("unit: {}", u.policy.label()),
                (None, Some(_)) if recomputed.is_empty() => "block: none recomputed".into(),
                (None, Some(_)) => match (recompute.budget(), recompute.checkmate()) {
                    (Some(b), _) => format!("block: budget {b}"),
                    (None, Some(f)) => format!("block: checkmate {f}"),
                    (None, None) => match recompute.checkpoint() {
                        crate::spec::CheckpointSpec::Every(k) => format!("block: every {k}"),
                        crate::spec::CheckpointSpec::Sqrt => "block: every ⌈√N⌉".into(),
                        crate::spec::CheckpointSpec::None => "block: explicit segments".into(),
                    },
                },
                (None, None) => "none (plain backward)".into(),
            };
            let plan = match spec.strategy.head_chunks {
                Some(c) => format!("{plan}; head: logits recomputed in {c} chunks"),
                None => plan,
            };
            Some(Planned {
                row,
                record,
                plan,
                unit: spec.unit_plan.is_some(),
                kept_bytes: kept as f64,
                recompute_flops: flops,
                peak: row.peak?,
                step_s: row.s.measured.median_step_s?,
                recompute_s: recompute_seconds(
                    record,
                    median_unit_forward(inputs.records, record),
                    &median_block_forward(inputs.records, record),
                    &recomputed,
                ),
            })
        })
        .collect()
}

/// Whether two jobs differ only in their plan: the same model, training settings (optimizer
/// included), precision, fused optimizer step, kernel fusion, attention and layer norm.
fn alike(a: &JobRecord, b: &JobRecord) -> bool {
    let (x, y) = (&a.spec, &b.spec);
    let (s, t) = (&x.strategy, &y.strategy);
    x.model == y.model
        && x.train == y.train
        && s.precision == t.precision
        && s.fused_optimizer == t.fused_optimizer
        && s.fusion == t.fusion
        && s.attention == t.attention
        && s.layer_norm == t.layer_norm
        && s.master_weights == t.master_weights
        && s.head_chunks == t.head_chunks
}

/// The median step times (s) of every finished run of `p`'s configuration (`repeats`), or its
/// own where it has no other.
fn step_runs(inputs: &StudyInputs, p: &Planned) -> Vec<f64> {
    let s = &p.row.s;
    inputs
        .repeats
        .values_or(&s.key, &s.device_name, GoalMetric::MedianStepS, p.step_s)
}

/// The group's tables and figure for plans inside the block: `None` when no finished row ran
/// a unit plan.
pub(super) fn inside_block(inputs: &StudyInputs, g: &Group) -> Option<(Vec<Table>, Figure)> {
    let rows = planned(inputs, g);
    let first_unit = rows.iter().find(|p| p.unit)?;
    let mut plans = Table {
        caption: "Plans inside the block: predicted by the unit cost model, measured in training"
            .into(),
        columns: [
            "configuration",
            "plan",
            "kept in blocks, predicted (MiB)",
            "recomputed per step, predicted (GFLOP)",
            "recomputed per step, from measured forward times (ms)",
            "peak allocated, measured (MiB)",
            "kept − its control's, predicted (MiB)",
            "peak − its control's, measured (MiB)",
            "median step, over runs (ms)",
            "runs",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for p in &rows {
        // The row's own control (the group's control of its optimizer).
        let control =
            control_of(g, p.row).and_then(|c| rows.iter().find(|q| q.row.s.key == c.s.key));
        let runs = step_runs(inputs, p);
        let step = stats::median_interval(&runs, stats::LEVEL).map_or(p.step_s, |e| e.median);
        let (dk, dp) = match control {
            Some(c) => (
                format!("{:+.2}", (p.kept_bytes - c.kept_bytes) / MIB),
                format!("{:+.2}", (p.peak - c.peak) / MIB),
            ),
            None => ("–".into(), "–".into()),
        };
        plans.rows.push(vec![
            p.row.cfg.name.clone(),
            p.plan.clone(),
            format!("{:.2}", p.kept_bytes / MIB),
            format!("{:.3}", p.recompute_flops / 1e9),
            p.recompute_s
                .map_or_else(|| "–".into(), |s| format!("{:.1}", s * 1e3)),
            format!("{:.2}", p.peak / MIB),
            dk,
            dp,
            format!("{:.0}", step * 1e3),
            runs.len().to_string(),
        ]);
    }
    let mut pairs = Table {
        caption: format!(
            "Equal memory: each block-level plan beside every unit-level plan of the same model, \
             optimizer and precision whose measured peak is within {:.0}% of it",
            EQUAL_PEAK * 100.0
        ),
        columns: [
            "block-level plan",
            "unit-level plan",
            "peak, block / unit (MiB)",
            "recomputed, block / unit (GFLOP)",
            "median step, block / unit (ms)",
            "runs, block / unit",
            "step time, unit / block: median of paired runs (95% interval)",
            "unit level at least as fast",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for b in rows.iter().filter(|p| !p.unit && p.recompute_flops > 0.0) {
        for u in rows.iter().filter(|p| p.unit && alike(p.record, b.record)) {
            if (u.peak / b.peak - 1.0).abs() > EQUAL_PEAK {
                continue;
            }
            let Some(c) = compare_steps(inputs, u, b) else {
                continue;
            };
            pairs.rows.push(vec![
                b.row.cfg.name.clone(),
                u.row.cfg.name.clone(),
                format!("{:.2} / {:.2}", b.peak / MIB, u.peak / MIB),
                format!(
                    "{:.3} / {:.3}",
                    b.recompute_flops / 1e9,
                    u.recompute_flops / 1e9
                ),
                format!("{:.0} / {:.0}", c.den_ms, c.num_ms),
                format!("{} / {}", c.den_runs, c.num_runs),
                c.ratio_text,
                c.verdict.into(),
            ]);
        }
    }
    let estimators = estimator_pairs(inputs, &rows);
    let checkmate = checkmate_pairs(inputs, &rows);
    // The front of the model the unit plans ran, in their precision and layer-norm saving.
    let spec = &first_unit.record.spec;
    let shape = spec.model.unit_shape(spec.strategy.precision);
    let saving = spec.strategy.layer_norm;
    let curve = |gran: Granularity| {
        front(spec.model.layers, &shape, saving, gran)
            .iter()
            .map(|p| (p.kept_bytes as f64 / MIB, p.recompute_flops / 1e9))
            .collect::<Vec<_>>()
    };
    let same_shape: Vec<&Planned> = rows
        .iter()
        .filter(|p| p.record.spec.model == spec.model)
        .filter(|p| p.record.spec.strategy.precision == spec.strategy.precision)
        .collect();
    // One point per plan position: rows at the same predicted point (plans that differ only in
    // what the front does not model, such as the optimizer) share it, named by the first and
    // how many more.
    let mut ran: Vec<(f64, f64, String)> = Vec::new();
    let mut more: Vec<usize> = Vec::new();
    for p in &same_shape {
        let at = (p.kept_bytes / MIB, p.recompute_flops / 1e9);
        match ran.iter().position(|r| (r.0, r.1) == at) {
            Some(i) => more[i] += 1,
            None => {
                ran.push((at.0, at.1, p.row.cfg.name.clone()));
                more.push(0);
            }
        }
    }
    for (r, n) in ran.iter_mut().zip(&more) {
        if *n > 0 {
            r.2 = format!("{} (+{n})", r.2);
        }
    }
    let (torch_series, torch_table) = pytorch_fronts(inputs, first_unit.record);
    let mut series = vec![
        Series {
            mark: Mark::Line,
            ..Series::line(
                "block level: each block kept whole or recomputed",
                curve(Granularity::Block),
            )
        },
        Series {
            mark: Mark::Line,
            ..Series::line(
                "unit level: any subset of each block's units",
                curve(Granularity::Unit),
            )
        },
    ];
    let with_torch = !torch_series.is_empty();
    series.extend(torch_series);
    series.push(Series {
        label: "configurations that ran".into(),
        points: ran.iter().map(|(x, y, _)| (*x, *y)).collect(),
        mark: Mark::Points,
        point_labels: ran.into_iter().map(|(_, _, l)| l).collect(),
    });
    let figure = Figure {
        name: format!("front_{}", g.slug),
        title: "Memory–recomputation front: the planner's prediction, and the plans that ran"
            .into(),
        x_label: if with_torch {
            "kept for backward, predicted (MiB; PyTorch: whole graph)".into()
        } else {
            "unit outputs kept in the blocks, predicted (MiB)".into()
        },
        y_label: "forward recomputed per step, predicted (GFLOP)".into(),
        series,
        ..Default::default()
    };
    let mut tables = vec![plans];
    for t in [pairs, estimators, checkmate, torch_table] {
        if !t.rows.is_empty() {
            tables.push(t);
        }
    }
    Some((tables, figure))
}

/// The memory-ratio step at which the table of PyTorch's front shows a plan.
const PARETO_STEP: f64 = 0.05;

/// PyTorch's own memory-budget Pareto fronts ([`crate::twin::ParetoGraph`], from the twin rows
/// of the study whose configuration ran the model shape and precision of `record`): one line
/// per joint graph, saved activations above the graph's inputs (MiB) against recomputed GFLOP
/// as its FLOP counter counts them, and a table of every point. The partitioner's bytes cover
/// its whole joint graph (the head's logits and the embeddings too), memwall's front only the
/// unit outputs kept in the blocks; both are predictions from the shapes.
fn pytorch_fronts(inputs: &StudyInputs, record: &JobRecord) -> (Vec<Series>, Table) {
    let mut table = Table {
        caption: "PyTorch's partitioner on the same model: its memory-budget Pareto front \
                  (PARTITIONER_MEMORY_BUDGET_PARETO), as numbers"
            .into(),
        columns: [
            "PyTorch configuration",
            "joint graph",
            "memory ratio (0: inputs only, 1: the default partitioner's)",
            "saved above the graph's inputs (MiB)",
            "recomputed (GFLOP, its FLOP counter)",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let mut series = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let precision = record.spec.strategy.precision;
    for row in inputs.pytorch {
        let same = crate::sections::twin::same_model(record, &row.model)
            && inputs
                .by_name
                .get(row.config.as_str())
                .is_some_and(|c| c.precision == precision);
        if !same {
            continue;
        }
        for graph in &row.memory_budget_pareto {
            let points: Vec<(f64, f64)> = graph
                .points
                .iter()
                .filter_map(|p| {
                    p.saved_bytes_above_inputs
                        .map(|b| (b as f64 / MIB, p.recompute_flops / 1e9))
                })
                .collect();
            // The first plan at or above every 5% of the memory ratio, and the last: the
            // partitioner's neighbouring plans differ by one saved tensor (the row keeps them
            // all).
            let mut next_step = 0.0;
            for (i, p) in graph.points.iter().enumerate() {
                let last = i + 1 == graph.points.len();
                if p.memory_ratio < next_step && !last {
                    continue;
                }
                next_step = (p.memory_ratio / PARETO_STEP).floor() * PARETO_STEP + PARETO_STEP;
                seen.insert(format!("{} (PyTorch {})", row.device, row.torch_version));
                table.rows.push(vec![
                    row.config.clone(),
                    graph.graph.clone(),
                    format!("{:.4}", p.memory_ratio),
                    p.saved_bytes_above_inputs
                        .map_or_else(|| "–".into(), |b| format!("{:.2}", b as f64 / MIB)),
                    format!("{:.3}", p.recompute_flops / 1e9),
                ]);
            }
            if !points.is_empty() {
                series.push(Series::line(
                    format!("PyTorch's partitioner, whole graph ({})", graph.graph),
                    points,
                ));
            }
        }
    }
    if !table.rows.is_empty() {
        table.caption = format!(
            "{}, on {}: the first plan at or above every {:.0}% of its memory ratio, and the last \
             (every plan is in the study's runs/<study>/pytorch/ row, `memory_budget_pareto`)",
            table.caption,
            seen.into_iter().collect::<Vec<_>>().join(", "),
            PARETO_STEP * 100.0
        );
        table.notes.push(crate::content::CellNote {
            row: 0,
            column: 3,
            text: "Computed by PyTorch's min-cut partitioner (torch/_functorch/partitioners.py, \
                   `visualize_memory_budget_pareto`) while torch.compile partitioned the \
                   configuration's joint graph: it bisects the budget over [0, 1] and keeps each \
                   distinct plan of its knapsack; reference/torch_peak_memory.py --pareto records \
                   the points it plots. Estimates from the graph's shapes, like memwall's front \
                   beside them, not measurements. Its bytes are every saved value of the whole \
                   graph above the graph's inputs (parameters and batch): the head's logits and \
                   the embeddings' outputs too, which memwall's front, the unit outputs kept in \
                   the blocks, leaves out."
                .into(),
        });
    }
    (series, table)
}

/// Two plans' step times: each side's median over its finished runs, and `num / den` as the
/// median of the paired per-repeat ratios where the two share repeat indices (run r of each
/// interleaved), else the ratio of the two medians' order-statistic intervals, as the goals
/// judge.
struct StepComparison {
    den_ms: f64,
    num_ms: f64,
    den_runs: usize,
    num_runs: usize,
    /// `1.234x (1.1–1.3)`, or without an interval when a side has one run.
    ratio_text: String,
    /// Whether `num` is at least as fast as `den` ([`GoalVerdict`] against 1.0).
    verdict: &'static str,
}

fn compare_steps(inputs: &StudyInputs, num: &Planned, den: &Planned) -> Option<StepComparison> {
    let (ds, ns) = (step_runs(inputs, den), step_runs(inputs, num));
    let est = |v: &[f64]| stats::median_interval(v, stats::LEVEL);
    let (ed, en) = est(&ds).zip(est(&ns))?;
    let paired = inputs.repeats.paired_ratios(
        (&num.row.s.key, &num.row.s.device_name),
        (&den.row.s.key, &den.row.s.device_name),
        GoalMetric::MedianStepS,
    );
    let ratio = if paired.len() >= 2 {
        stats::median_interval(&paired, stats::LEVEL)
    } else {
        stats::ratio(&en, &ed)
    };
    let (ratio_text, verdict) = match ratio {
        Some(r) if r.has_interval() => (
            format!("{:.3}x ({:.3}–{:.3})", r.median, r.lo, r.hi),
            GoalVerdict::of(&r, 1.0).as_str(),
        ),
        Some(r) => (
            format!("{:.3}x (one run a side: no interval)", r.median),
            GoalVerdict::of(&r, 1.0).as_str(),
        ),
        None => ("–".into(), "–"),
    };
    Some(StepComparison {
        den_ms: ed.median * 1e3,
        num_ms: en.median * 1e3,
        den_runs: ds.len(),
        num_runs: ns.len(),
        ratio_text,
        verdict,
    })
}

/// Each unit-level budget chosen by measured unit times (`estimate = "profile"`) beside the
/// same budget chosen by FLOPs, for the same model and training settings: the same bytes'
/// span, the knapsack's two cost models.
fn estimator_pairs(inputs: &StudyInputs, rows: &[Planned]) -> Table {
    let mut table = Table {
        caption: "The knapsack's cost model: each unit-level budget chosen by measured unit \
                  forward times (estimate = \"profile\") beside the same budget chosen by FLOPs \
                  (the default, as PyTorch's partitioner's). Both plans fit the same budget in \
                  bytes (the span from keeping only the blocks' outputs to the cheapest plan \
                  recomputing no counted FLOP); FLOPs count only the matrix products and the \
                  attention core, the profile every unit's forward time measured by the job's \
                  profiling pass on this device (median of 5)"
            .into(),
        columns: [
            "budget",
            "FLOPs / profile plan",
            "kept in blocks, predicted (MiB)",
            "recomputed (GFLOP)",
            "recomputed, from measured forward times (ms)",
            "peak allocated, measured (MiB)",
            "median step (ms)",
            "runs",
            "step time, profile / FLOPs: median of paired runs (95% interval)",
            "profile at least as fast",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let budget = |p: &Planned| match p.record.spec.unit_plan.as_ref()?.policy {
        Policy::Budget(b, e) => Some((b, e)),
        _ => None,
    };
    for timed in rows {
        let Some((b, Estimate::Profile)) = budget(timed) else {
            continue;
        };
        let by_flops = rows
            .iter()
            .find(|f| budget(f) == Some((b, Estimate::Flops)) && alike(f.record, timed.record));
        let Some(flops) = by_flops else { continue };
        let Some(c) = compare_steps(inputs, timed, flops) else {
            continue;
        };
        let ms = |p: &Planned| {
            p.recompute_s
                .map_or("–".into(), |s| format!("{:.1}", s * 1e3))
        };
        table.rows.push(vec![
            format!("{b}"),
            format!("{} / {}", flops.row.cfg.name, timed.row.cfg.name),
            format!(
                "{:.2} / {:.2}",
                flops.kept_bytes / MIB,
                timed.kept_bytes / MIB
            ),
            format!(
                "{:.3} / {:.3}",
                flops.recompute_flops / 1e9,
                timed.recompute_flops / 1e9
            ),
            format!("{} / {}", ms(flops), ms(timed)),
            format!("{:.2} / {:.2}", flops.peak / MIB, timed.peak / MIB),
            format!("{:.0} / {:.0}", c.den_ms, c.num_ms),
            format!("{} / {}", c.den_runs, c.num_runs),
            c.ratio_text,
            c.verdict.into(),
        ]);
        // Each run plans from its own profiling pass: say when the runs chose differently.
        let row = table.rows.len() - 1;
        for (p, column) in [(flops, 1), (timed, 1)] {
            let plans = distinct_unit_plans(inputs.records, p.record);
            if plans > 1 {
                table.note(
                    row,
                    column,
                    format!(
                        "{}: its runs' profiling passes chose {plans} different plans; the \
                         kept bytes and FLOPs shown are one run's, peak and step time the \
                         medians over all runs",
                        p.row.cfg.name
                    ),
                );
            }
        }
    }
    table
}

/// Checkmate at both granularities: each unit-level Checkmate plan (`policy = { checkmate =
/// f }`) beside the block-level Checkmate plan (`checkmate = f`) of the same model and training
/// settings: the same budget in bytes (a fraction of the no-recomputation peak predicted from
/// the profiling pass), each plan's predicted and measured peak above the steady state and its
/// step time.
fn checkmate_pairs(inputs: &StudyInputs, rows: &[Planned]) -> Table {
    let mut table = Table {
        caption: "Checkmate at both granularities: the least recomputation whose predicted peak \
                  fits the same budget (a fraction of the no-recomputation peak predicted by the \
                  job's profiling pass), planned over whole blocks (the segment executor) and \
                  over every block's units (the unit executor, by measured unit times). Peaks \
                  are above the steady state (parameters, optimizer state, batch)"
            .into(),
        columns: [
            "budget (fraction, MiB)",
            "block / unit plan",
            "peak, predicted, block / unit (MiB)",
            "peak, measured, block / unit (MiB)",
            "recomputed, from measured forward times, block / unit (ms)",
            "median step, block / unit (ms)",
            "runs, block / unit",
            "step time, unit / block: median of paired runs (95% interval)",
            "unit level at least as fast",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    let above_steady = |p: &Planned| {
        let steady = p.record.summary.as_ref().map_or(0, |s| s.steady_bytes) as f64;
        (p.peak - steady) / MIB
    };
    let ms = |p: &Planned| {
        p.recompute_s
            .map_or("–".into(), |s| format!("{:.1}", s * 1e3))
    };
    for unit in rows {
        let Some(u) = unit.record.spec.unit_plan.as_ref() else {
            continue;
        };
        let Policy::Checkmate(f) = u.policy else {
            continue;
        };
        let block = rows.iter().find(|b| {
            !b.unit
                && b.record.spec.strategy.recompute.checkmate() == Some(f)
                && alike(b.record, unit.record)
        });
        let Some(block) = block else { continue };
        let Some(c) = compare_steps(inputs, unit, block) else {
            continue;
        };
        let mib = |b: Option<u64>| b.map_or("–".into(), |b| format!("{:.2}", b as f64 / MIB));
        let block_predicted = block
            .record
            .spec
            .planned
            .as_ref()
            .map(|t| t.predicted_peak_bytes);
        table.rows.push(vec![
            format!("{f}, {}", mib(u.budget_bytes)),
            format!("{} / {}", block.row.cfg.name, unit.row.cfg.name),
            format!("{} / {}", mib(block_predicted), mib(u.predicted_peak_bytes)),
            format!("{:.2} / {:.2}", above_steady(block), above_steady(unit)),
            format!("{} / {}", ms(block), ms(unit)),
            format!("{:.0} / {:.0}", c.den_ms, c.num_ms),
            format!("{} / {}", c.den_runs, c.num_runs),
            c.ratio_text,
            c.verdict.into(),
        ]);
        let row = table.rows.len() - 1;
        for p in [block, unit] {
            // A segment plan is counted by what it keeps per block (`unit_keeps`).
            let plans = distinct_unit_plans(inputs.records, p.record);
            if plans > 1 {
                table.note(
                    row,
                    1,
                    format!(
                        "{}: its runs' profiling passes chose {plans} different plans; the \
                         predicted peak and recomputation shown are one run's, the measured \
                         peak and step time the medians over all runs",
                        p.row.cfg.name
                    ),
                );
            }
        }
    }
    table
}

/// How many different plans (kept sets per block, [`crate::spec::JobSpec::unit_keeps`]: a segment plan's
/// too) the finished runs of `record`'s job on its device ran: 1 for a plan fixed by the
/// configuration, possibly more for one chosen by each run's own profiling pass.
fn distinct_unit_plans(records: &StudyRecords, record: &JobRecord) -> usize {
    let mut plans: Vec<Vec<memwall_core::units::UnitSet>> = Vec::new();
    for r in runs_of(records, record) {
        if let Some(keeps) = r.spec.unit_keeps() {
            if !plans.contains(&keeps) {
                plans.push(keeps);
            }
        }
    }
    plans.len()
}
