//! Report sections of a training study, built from the polars study table
//! ([`crate::results::study_table`]) and the per-step table.

use super::model::{Figure, Mark, Section, Series, Table};
use crate::error::{Error, Result};
use crate::results::{read_record, steps_table, study_table};
use crate::spec::{Claim, ConfigSpec, StudyHeader};
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Formats a byte count with a binary unit (KiB, MiB, GiB).
pub fn format_bytes(b: f64) -> String {
    const K: f64 = 1024.0;
    if b >= K * K * K {
        format!("{:.3} GiB", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1} MiB", b / (K * K))
    } else {
        format!("{:.1} KiB", b / K)
    }
}

/// Parses a duration printed like "1m 40s", "41s" or "2m 5s" into seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut any = false;
    for part in s.split_whitespace() {
        let (num, unit) = part.split_at(part.find(|c: char| c.is_alphabetic())?);
        let v: f64 = num.parse().ok()?;
        total += match unit {
            "h" => v * 3600.0,
            "m" | "min" => v * 60.0,
            "s" => v,
            _ => return None,
        };
        any = true;
    }
    any.then_some(total)
}

const MIB: f64 = 1024.0 * 1024.0;

fn rerr(e: PolarsError) -> Error {
    Error::Report(format!("study table: {e}"))
}

/// Typed access to one row of the study table.
struct Row<'a> {
    df: &'a DataFrame,
    i: usize,
}

impl Row<'_> {
    fn str(&self, c: &str) -> String {
        self.df
            .column(c)
            .ok()
            .and_then(|s| s.str().ok().and_then(|s| s.get(self.i).map(str::to_string)))
            .unwrap_or_default()
    }
    fn f64(&self, c: &str) -> Option<f64> {
        let s = self.df.column(c).ok()?;
        let s = s.cast(&DataType::Float64).ok()?;
        s.f64().ok()?.get(self.i).filter(|v| v.is_finite())
    }
    fn bool(&self, c: &str) -> bool {
        self.df
            .column(c)
            .ok()
            .and_then(|s| s.bool().ok().and_then(|s| s.get(self.i)))
            .unwrap_or(false)
    }
}

fn fmt_opt(v: Option<f64>, digits: usize, suffix: &str) -> String {
    v.map(|x| format!("{x:.digits$}{suffix}"))
        .unwrap_or_else(|| "–".into())
}

/// Perplexity with one decimal, or in scientific notation from 10^6 (a diverged model).
fn fmt_ppl(v: Option<f64>) -> String {
    match v {
        Some(x) if x >= 1e6 => format!("{x:.2e}"),
        other => fmt_opt(other, 1, ""),
    }
}

fn claim_text(header: &StudyHeader, configs: &[ConfigSpec]) -> String {
    let parts: Vec<String> = configs
        .iter()
        .filter_map(|c| c.claim.as_ref().map(|cl| (c, cl)))
        .filter_map(|(c, cl)| {
            let mut bits = Vec::new();
            if let Some(g) = cl.peak_gib {
                bits.push(format!("{g} GiB"));
            }
            if let Some(r) = cl.reduction_pct {
                bits.push(format!("{r}% less memory"));
            }
            if let Some(s) = cl.samples_per_s {
                bits.push(format!("{s} samples/s"));
            }
            if let Some(p) = cl.perplexity {
                bits.push(format!("perplexity {p}"));
            }
            (!bits.is_empty()).then(|| format!("{}: {}", c.label, bits.join(", ")))
        })
        .collect();
    if parts.is_empty() {
        match &header.claim {
            Some(claim) => format!("`{}`: {claim}", header.source),
            None => format!("See `{}`.", header.source),
        }
    } else {
        format!(
            "`{}` (Results table) reports {}.",
            header.source,
            parts.join("; ")
        )
    }
}

/// Source relative step time of a configuration: control samples/s over its samples/s.
fn source_relative_time(claim: Option<&Claim>, control: Option<&Claim>) -> Option<f64> {
    let (c, k) = (claim?, control?);
    match (c.samples_per_s, k.samples_per_s) {
        (Some(s), Some(ks)) if s > 0.0 => Some(ks / s),
        _ => {
            let t = parse_duration(c.time.as_deref()?)?;
            let kt = parse_duration(k.time.as_deref()?)?;
            Some(t / kt)
        }
    }
}

/// Checkmate-planned configurations: what the MILP predicted (activation peak of the chain
/// graph, compute over plain forward+backward) beside what the job measured (peak − steady
/// state, step time over the control's).
fn planned_vs_measured(rows: &[Row]) -> Table {
    let mut table = Table {
        caption: "Checkmate plans executed: planned vs measured".into(),
        columns: [
            "configuration",
            "budget (fraction of no-recompute peak)",
            "recomputed blocks",
            "planned activation peak",
            "measured peak − steady",
            "planned compute ratio",
            "measured step-time ratio",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for r in rows.iter().filter(|r| r.f64("checkmate").is_some()) {
        let measured = match (r.f64("peak_allocated_bytes"), r.f64("steady_bytes")) {
            (Some(p), Some(s)) => format_bytes((p - s).max(0.0)),
            _ => format!("{}: {}", r.str("status"), r.str("reason")),
        };
        table.rows.push(vec![
            r.str("config"),
            fmt_opt(r.f64("checkmate"), 2, ""),
            fmt_opt(r.f64("planned_recomputed_blocks"), 0, ""),
            r.f64("planned_peak_bytes")
                .map(format_bytes)
                .unwrap_or_else(|| "–".into()),
            measured,
            fmt_opt(r.f64("planned_cost_ratio"), 3, "x"),
            fmt_opt(r.f64("relative_step_time"), 3, "x"),
        ]);
    }
    table
}

/// Step-time ratios against the performance goals of the memory-strategies work: full
/// checkpointing (K = 1) at most 1.4x plain backward (the floor is one extra forward pass,
/// about 1.33x), sqrt(n) at most 1.35x, and the fused optimizer step within 5% of the unfused
/// step. Compares rows of the same precision without kernel fusion or budget.
fn performance_goals(rows: &[Row]) -> Table {
    let find = |prec: &str, ck: &str, fused: bool| {
        rows.iter().find(|r| {
            r.str("status") == "ok"
                && r.str("precision") == prec
                && r.str("checkpoint") == ck
                && r.bool("fused_optimizer") == fused
                && !r.bool("fusion")
                && r.f64("budget").is_none()
        })
    };
    let mut table = Table {
        caption: "Performance goals: median step-time ratios (same precision, no kernel fusion)"
            .into(),
        columns: ["comparison", "precision", "ratio", "goal", "met"]
            .map(String::from)
            .to_vec(),
        rows: Vec::new(),
    };
    let mut push = |what: String, prec: &str, a: Option<&Row>, b: Option<&Row>, goal: f64| {
        if let (Some(a), Some(b)) = (a, b) {
            if let (Some(x), Some(y)) = (a.f64("median_step_s"), b.f64("median_step_s")) {
                let ratio = x / y;
                table.rows.push(vec![
                    what,
                    prec.to_string(),
                    format!("{ratio:.3}x"),
                    format!("<= {goal}x"),
                    if ratio <= goal { "yes" } else { "no" }.into(),
                ]);
            }
        }
    };
    for prec in ["f32", "f16", "bf16"] {
        let none = find(prec, "none", false);
        push(
            "checkpoint every block (K = 1) / none".into(),
            prec,
            find(prec, "1", false),
            none,
            1.4,
        );
        push(
            "checkpoint sqrt(n) / none".into(),
            prec,
            find(prec, "sqrt", false),
            none,
            1.35,
        );
        for ck in ["none", "1", "sqrt"] {
            push(
                format!("fused optimizer step / unfused (checkpoint {ck})"),
                prec,
                find(prec, ck, true),
                find(prec, ck, false),
                1.05,
            );
        }
    }
    table
}

/// The mixed-precision table: per configuration, its master weights and loss scale, the
/// steps skipped for non-finite gradients, the loss scale at the end, the mean fraction of
/// 16-bit gradient entries that are exactly zero, loss and perplexity. Aggregated with polars
/// from the per-step rows. `None` unless a configuration uses master weights.
fn mixed_precision(
    rows: &[Row],
    by_name: &BTreeMap<&str, &ConfigSpec>,
    steps_df: &DataFrame,
) -> Result<Option<(Table, Option<Figure>)>> {
    if !by_name.values().any(|c| c.master_weights) {
        return Ok(None);
    }
    let has = |c: &str| steps_df.column(c).is_ok();
    let agg = if steps_df.height() > 0 && has("skipped") && has("grad_zero_fraction") {
        steps_df
            .clone()
            .lazy()
            .group_by([col("config")])
            .agg([
                col("skipped")
                    .cast(DataType::UInt32)
                    .sum()
                    .alias("skipped_steps"),
                col("grad_zero_fraction").mean().alias("zero_fraction"),
                col("loss_scale").last().alias("final_scale"),
                col("loss_scale").min().alias("min_scale"),
            ])
            .collect()
            .map_err(rerr)?
    } else {
        DataFrame::empty()
    };
    let lookup = |config: &str, c: &str| -> Option<f64> {
        let names = agg.column("config").ok()?.str().ok()?.clone();
        let i = (0..agg.height()).find(|&i| names.get(i) == Some(config))?;
        let s = agg.column(c).ok()?.cast(&DataType::Float64).ok()?;
        s.f64().ok()?.get(i).filter(|v| v.is_finite())
    };
    let mut table = Table {
        caption: "Mixed precision: loss scaling and gradient underflow".into(),
        columns: [
            "Configuration",
            "Compute",
            "Master weights",
            "Loss scale",
            "Steps skipped",
            "Final / min scale",
            "Zero gradient entries",
            "Final train loss",
            "Eval ppl",
            "Peak allocated",
            "Rel. step time",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    let mut scale_series = Vec::new();
    for r in rows {
        let name = r.str("config");
        let Some(cfg) = by_name.get(name.as_str()) else {
            continue;
        };
        let ok = r.str("status") == "ok";
        let status = if ok {
            String::new()
        } else {
            format!(" ({}: {})", r.str("status"), r.str("reason"))
        };
        table.rows.push(vec![
            format!("{}{status}", cfg.label),
            cfg.precision.to_string(),
            if cfg.master_weights { "f32" } else { "–" }.into(),
            cfg.loss_scale
                .map(|l| l.to_string())
                .unwrap_or_else(|| "none".into()),
            fmt_opt(
                lookup(&name, "skipped_steps").filter(|_| cfg.master_weights),
                0,
                "",
            ),
            match (lookup(&name, "final_scale"), lookup(&name, "min_scale")) {
                (Some(f), Some(m)) => format!("{f} / {m}"),
                _ => "–".into(),
            },
            fmt_opt(lookup(&name, "zero_fraction").map(|z| 100.0 * z), 3, "%"),
            fmt_opt(r.f64("final_train_loss").filter(|_| ok), 3, ""),
            fmt_ppl(r.f64("eval_perplexity").filter(|_| ok)),
            r.f64("peak_allocated_bytes")
                .filter(|_| ok)
                .map(format_bytes)
                .unwrap_or_else(|| "–".into()),
            fmt_opt(r.f64("relative_step_time").filter(|_| ok), 2, "x"),
        ]);
        if cfg.loss_scale.is_some() && has("loss_scale") {
            let part = steps_df
                .clone()
                .lazy()
                .filter(col("config").eq(lit(name.clone())))
                .select([
                    col("step").cast(DataType::Float64),
                    col("loss_scale").cast(DataType::Float64),
                ])
                .collect()
                .map_err(rerr)?;
            let xs = part
                .column("step")
                .map_err(rerr)?
                .f64()
                .map_err(rerr)?
                .clone();
            let ys = part
                .column("loss_scale")
                .map_err(rerr)?
                .f64()
                .map_err(rerr)?
                .clone();
            let points: Vec<(f64, f64)> = xs
                .iter()
                .zip(ys.iter())
                .filter_map(|(x, y)| Some((x?, y?.log2())))
                .collect();
            if !points.is_empty() {
                scale_series.push(Series {
                    label: cfg.label.clone(),
                    points,
                    mark: Mark::Line,
                    point_labels: Vec::new(),
                });
            }
        }
    }
    let figure = (!scale_series.is_empty()).then(|| Figure {
        name: "loss_scale".into(),
        title: "Dynamic loss scale per step".into(),
        x_label: "step".into(),
        y_label: "log2 of the loss scale S".into(),
        series: scale_series,
        ..Default::default()
    });
    Ok(Some((table, figure)))
}

/// Builds the sections and environment tables of a training study from its records.
///
/// # Errors
/// [`Error::Records`] when the study has no records; [`Error::Report`] on table errors.
pub fn sections(
    runs_root: &Path,
    header: &StudyHeader,
    configs: &[ConfigSpec],
) -> Result<(Vec<Section>, Vec<Table>)> {
    let df = study_table(runs_root, &header.name)?;
    let by_name: BTreeMap<&str, &ConfigSpec> =
        configs.iter().map(|c| (c.name.as_str(), c)).collect();
    let control_claim = configs
        .iter()
        .find(|c| c.control)
        .and_then(|c| c.claim.as_ref());

    // Group rows by (profile, backend, device, GPU runtime settings).
    let mut groups: BTreeMap<(String, String, String, String), Vec<usize>> = BTreeMap::new();
    for i in 0..df.height() {
        let r = Row { df: &df, i };
        if !by_name.contains_key(r.str("config").as_str()) {
            continue; // a configuration no longer in the experiment file
        }
        groups
            .entry((
                r.str("profile"),
                r.str("backend"),
                r.str("device_name"),
                r.str("runtime"),
            ))
            .or_default()
            .push(i);
    }
    let mut sections = Vec::new();
    let mut envs = Vec::new();
    for ((profile, backend, device, runtime), rows) in &groups {
        let rows: Vec<Row> = rows.iter().map(|&i| Row { df: &df, i }).collect();
        // "cuda" or "cuda, exact_size pool": where and how the group ran.
        let backend_label = if runtime.is_empty() {
            backend.clone()
        } else {
            format!("{backend}, {runtime}")
        };
        let gpu = backend == "cuda";
        let bound = |c: &str| {
            let b = rows.first().map(|r| r.str(c)).unwrap_or_default();
            if b.is_empty() {
                String::new()
            } else {
                format!(", {b}")
            }
        };
        let allocated_header = format!("Peak allocated (ours{})", bound("peak_allocated_bound"));
        // The figures' axis names the bound too: "peak allocated, lower bound (MiB)".
        let peak_axis = format!("peak allocated{} (MiB)", bound("peak_allocated_bound"));
        let reserved_header = format!("Peak reserved (ours{})", bound("peak_reserved_bound"));
        let mut table = Table {
            caption: format!(
                "{profile} profile on {device} ({backend_label}); ours vs the source (`{}`)",
                header.source
            ),
            columns: [
                "Configuration",
                "Status",
                allocated_header.as_str(),
                "Peak GiB (source)",
                "Reduction (ours)",
                "Reduction (source)",
                "Samples/s (ours)",
                "Samples/s (source)",
                "Rel. step time (ours)",
                "Rel. step time (source)",
                "Eval ppl (ours)",
                "Eval ppl (source)",
                "Activations est.",
                "Peak − steady (measured)",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        if gpu {
            table.columns.insert(3, reserved_header);
            table.columns.push("First timed step after (s)".to_string());
        }
        let mut red_ours = Series {
            label: "ours".into(),
            mark: Mark::Bars,
            ..Default::default()
        };
        let mut red_src = Series {
            label: "source".into(),
            mark: Mark::Bars,
            ..Default::default()
        };
        let mut time_ours = red_ours.clone();
        let mut peak_bars = Series {
            label: "peak allocated".into(),
            mark: Mark::Bars,
            ..Default::default()
        };
        let mut time_src = red_src.clone();
        let mut pareto = Vec::new();
        let mut table_goals: Option<Table> = None;
        let mut table_planned: Option<Table> = None;
        let mut est_vs_measured: Vec<(f64, f64, String)> = Vec::new();
        let mut by_k: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
        let mut none_level: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        let mut keys = Vec::new();
        let mut sentences = Vec::new();
        for (x, r) in rows.iter().enumerate() {
            let name = r.str("config");
            let cfg = by_name[name.as_str()];
            let claim = cfg.claim.as_ref();
            let status = r.str("status");
            let ok = status == "ok";
            let peak = r.f64("peak_allocated_bytes");
            let red = r.f64("reduction_pct");
            let rel = r.f64("relative_step_time");
            let src_rel = source_relative_time(claim, control_claim);
            let status_cell = if ok {
                "ok".to_string()
            } else {
                format!("{status}: {}", r.str("reason"))
            };
            table.rows.push(vec![
                cfg.label.clone(),
                status_cell,
                peak.map(format_bytes).unwrap_or_else(|| "–".into()),
                fmt_opt(claim.and_then(|c| c.peak_gib), 3, ""),
                fmt_opt(red, 1, "%"),
                fmt_opt(claim.and_then(|c| c.reduction_pct), 1, "%"),
                fmt_opt(r.f64("samples_per_s"), 2, ""),
                fmt_opt(claim.and_then(|c| c.samples_per_s), 3, ""),
                fmt_opt(rel, 2, "x"),
                fmt_opt(src_rel, 2, "x"),
                fmt_ppl(r.f64("eval_perplexity")),
                fmt_opt(claim.and_then(|c| c.perplexity), 1, ""),
                r.f64("estimated_activation_bytes")
                    .map(format_bytes)
                    .unwrap_or_else(|| "–".into()),
                match (peak, r.f64("steady_bytes")) {
                    (Some(p), Some(s)) if ok => format_bytes((p - s).max(0.0)),
                    _ => "–".into(),
                },
            ]);
            if gpu {
                let row = table.rows.last_mut().expect("row just pushed");
                row.insert(
                    3,
                    r.f64("peak_reserved_bytes")
                        .map(format_bytes)
                        .unwrap_or_else(|| "–".into()),
                );
                row.push(fmt_opt(r.f64("time_to_first_measured_step_s"), 1, ""));
            }
            if ok {
                if let (Some(est), Some(p), Some(s)) = (
                    r.f64("estimated_activation_bytes"),
                    peak,
                    r.f64("steady_bytes"),
                ) {
                    est_vs_measured.push((est / MIB, (p - s).max(0.0) / MIB, cfg.name.clone()));
                }
                let k = match r.str("checkpoint").as_str() {
                    "none" => None,
                    "sqrt" => r.f64("layers").map(|l| l.sqrt().ceil()),
                    other => other.parse::<f64>().ok(),
                };
                let fusion = if r.bool("fusion") { ", fusion" } else { "" };
                let key = format!("{}{fusion}", r.str("precision"));
                if !r.bool("fused_optimizer") && r.f64("budget").is_none() {
                    if let (Some(p), Some(t)) = (peak, r.f64("median_step_s")) {
                        match k {
                            Some(k) => by_k.entry(key).or_default().push((k, p / MIB, t)),
                            None => {
                                none_level.insert(key, (p / MIB, t));
                            }
                        }
                    }
                }
            }
            peak_bars.point_labels.push(cfg.name.clone());
            peak_bars
                .points
                .push((x as f64, peak.map(|p| p / MIB).unwrap_or(f64::NAN)));
            red_ours.point_labels.push(cfg.name.clone());
            red_src.point_labels.push(cfg.name.clone());
            time_ours.point_labels.push(cfg.name.clone());
            time_src.point_labels.push(cfg.name.clone());
            let xf = x as f64;
            red_ours.points.push((xf, red.unwrap_or(f64::NAN)));
            red_src
                .points
                .push((xf, claim.and_then(|c| c.reduction_pct).unwrap_or(f64::NAN)));
            time_ours.points.push((xf, rel.unwrap_or(f64::NAN)));
            time_src.points.push((xf, src_rel.unwrap_or(f64::NAN)));
            if ok {
                keys.push(r.str("key"));
                if let (Some(p), Some(t)) = (peak, r.f64("median_step_s")) {
                    pareto.push((t, p / (1024.0 * 1024.0), cfg.name.clone()));
                }
                sentences.push(format!(
                    "{} {} at {} samples/s{}",
                    cfg.label,
                    peak.map(format_bytes).unwrap_or_default(),
                    fmt_opt(r.f64("samples_per_s"), 2, ""),
                    red.filter(|_| !r.bool("control"))
                        .map(|v| {
                            if v >= 0.0 {
                                format!(" ({v:.1}% less than the control)")
                            } else {
                                format!(" ({:.1}% more than the control)", -v)
                            }
                        })
                        .unwrap_or_default()
                ));
            } else {
                sentences.push(format!("{}: {status}", cfg.label));
            }
        }
        let params = rows.first().and_then(|r| r.f64("parameters"));
        let steps = rows.first().and_then(|r| r.f64("measured_steps"));
        let slug: String = format!("{profile}_{backend_label}")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>()
            .split('_')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("_");
        let mut figures = vec![
            Figure {
                name: format!("peak_{slug}"),
                title: "Peak allocated memory per step (ours)".into(),
                x_label: "configuration".into(),
                y_label: peak_axis.clone(),
                series: vec![peak_bars],
                ..Default::default()
            },
            Figure {
                name: format!("reduction_{slug}"),
                title: "Peak-memory reduction vs the control: ours and the source's".into(),
                x_label: "configuration".into(),
                y_label: "reduction of peak allocated memory (%)".into(),
                series: vec![red_ours, red_src],
                ..Default::default()
            },
            Figure {
                name: format!("step_time_{slug}"),
                title: "Step time relative to the control: ours and the source's".into(),
                x_label: "configuration".into(),
                y_label: "step time / control step time".into(),
                series: vec![time_ours, time_src],
                ..Default::default()
            },
        ];
        if !pareto.is_empty() {
            figures.push(Figure {
                name: format!("pareto_{slug}"),
                title: "Memory vs time: peak allocated against median step time".into(),
                x_label: "median step time (s)".into(),
                y_label: peak_axis.clone(),
                series: vec![Series {
                    label: "configurations".into(),
                    points: pareto.iter().map(|(t, m, _)| (*t, *m)).collect(),
                    mark: Mark::Points,
                    point_labels: pareto.iter().map(|(_, _, n)| n.clone()).collect(),
                }],
                ..Default::default()
            });
        }
        let planned = planned_vs_measured(&rows);
        if !planned.rows.is_empty() {
            table_planned = Some(planned);
        }
        let goals = performance_goals(&rows);
        if !goals.rows.is_empty() {
            table_goals = Some(goals);
        }
        if by_k.values().any(|v| v.len() >= 2) {
            let layers = rows.first().and_then(|r| r.f64("layers")).unwrap_or(1.0);
            let mut mem = Vec::new();
            let mut time = Vec::new();
            for (key, pts) in &by_k {
                let mut pts = pts.clone();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                pts.dedup_by(|a, b| a.0 == b.0);
                mem.push(Series {
                    label: format!("{key}, every K"),
                    points: pts.iter().map(|p| (p.0, p.1)).collect(),
                    ..Default::default()
                });
                time.push(Series {
                    label: format!("{key}, every K"),
                    points: pts.iter().map(|p| (p.0, p.2)).collect(),
                    ..Default::default()
                });
                if let Some((m, t)) = none_level.get(key) {
                    mem.push(Series {
                        label: format!("{key}, none"),
                        points: vec![(1.0, *m), (layers, *m)],
                        ..Default::default()
                    });
                    time.push(Series {
                        label: format!("{key}, none"),
                        points: vec![(1.0, *t), (layers, *t)],
                        ..Default::default()
                    });
                }
            }
            figures.push(Figure {
                name: format!("peak_vs_k_{slug}"),
                title: "Peak allocated memory vs checkpoint interval K".into(),
                x_label: "K (blocks per segment)".into(),
                y_label: peak_axis.clone(),
                log_x: true,
                series: mem,
                ..Default::default()
            });
            figures.push(Figure {
                name: format!("time_vs_k_{slug}"),
                title: "Median step time vs checkpoint interval K".into(),
                x_label: "K (blocks per segment)".into(),
                y_label: "median step time (s)".into(),
                log_x: true,
                series: time,
                ..Default::default()
            });
        }
        if !est_vs_measured.is_empty() {
            let max = est_vs_measured
                .iter()
                .map(|p| p.0.max(p.1))
                .fold(0.0, f64::max);
            figures.push(Figure {
                name: format!("estimated_vs_measured_{slug}"),
                title: "Estimated activation memory vs measured (peak − steady state)".into(),
                x_label: "estimated activations (MiB)".into(),
                y_label: "measured peak − steady (MiB)".into(),
                series: vec![
                    Series {
                        label: "configurations".into(),
                        points: est_vs_measured.iter().map(|p| (p.0, p.1)).collect(),
                        mark: Mark::Points,
                        point_labels: est_vs_measured.iter().map(|p| p.2.clone()).collect(),
                    },
                    Series {
                        label: "y = x".into(),
                        points: vec![(0.0, 0.0), (max, max)],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            });
        }
        let steps_df = steps_table(runs_root, &header.name, &keys)?;
        if steps_df.height() > 0 {
            let mut curves: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            let cfg_col = steps_df
                .column("config")
                .map_err(rerr)?
                .str()
                .map_err(rerr)?
                .clone();
            let step_col = steps_df
                .column("step")
                .map_err(rerr)?
                .cast(&DataType::Float64)
                .map_err(rerr)?;
            let step_col = step_col.f64().map_err(rerr)?;
            let loss_col = steps_df
                .column("loss")
                .map_err(rerr)?
                .f64()
                .map_err(rerr)?
                .clone();
            for i in 0..steps_df.height() {
                if let (Some(c), Some(s), Some(l)) =
                    (cfg_col.get(i), step_col.get(i), loss_col.get(i))
                {
                    curves.entry(c.to_string()).or_default().push((s, l));
                }
            }
            let order: Vec<&String> = rows
                .iter()
                .map(|r| r.str("config"))
                .filter_map(|c| curves.keys().find(|k| **k == c))
                .collect();
            figures.push(Figure {
                name: format!("loss_{slug}"),
                title: "Training loss per step".into(),
                x_label: "step".into(),
                y_label: "train loss (nats/token)".into(),
                series: order
                    .iter()
                    .map(|c| Series {
                        label: (*c).clone(),
                        points: curves[*c].clone(),
                        mark: Mark::Line,
                        point_labels: Vec::new(),
                    })
                    .collect(),
                ..Default::default()
            });
        }
        let mut table_mixed = None;
        if let Some((t, fig)) = mixed_precision(&rows, &by_name, &steps_df)? {
            table_mixed = Some(t);
            if let Some(mut fig) = fig {
                fig.name = format!("loss_scale_{slug}");
                figures.push(fig);
            }
        }
        sections.push(Section {
            title: format!("Results: {profile} profile on {device} ({backend_label})"),
            claim: claim_text(header, configs),
            ours: format!(
                "{} parameters, median of {} measured steps per configuration; peak allocated \
                 memory{}: {}.",
                params.map(|p| format!("{p:.0}")).unwrap_or_default(),
                steps.map(|s| format!("{s:.0}")).unwrap_or_default(),
                bound("peak_allocated_bound")
                    .strip_prefix(", ")
                    .map(|b| format!(" ({b})"))
                    .unwrap_or_default(),
                sentences.join("; ")
            ),
            notes: configs
                .iter()
                .filter(|c| !c.maps_to.is_empty())
                .map(|c| format!("*{}*: {}", c.label, c.maps_to))
                .collect(),
            tables: std::iter::once(table)
                .chain(table_mixed)
                .chain(table_goals)
                .chain(table_planned)
                .collect(),
            figures,
        });
        if let Some(key) = rows.first().map(|r| r.str("key")) {
            if let Some(rec) = read_record(&runs_root.join(&header.name).join(&key))? {
                let e = &rec.env;
                let m = &rec.spec.model;
                envs.push(Table {
                    caption: format!("{profile} profile on {device} ({backend_label})"),
                    columns: vec!["field".into(), "value".into()],
                    rows: vec![
                        vec!["device".into(), e.device_name.clone()],
                        vec!["backend".into(), format!("burn {} {}", e.burn_version, e.backend)],
                        vec!["numerics".into(), e.numerics.clone()],
                        vec!["CPU".into(), format!("{} ({} threads)", e.cpu_model, e.cpu_threads)],
                        vec!["OS".into(), e.os.clone()],
                        vec!["git revision".into(), e.git_revision.clone()],
                        vec![
                            "model".into(),
                            format!(
                                "{} layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}, vocab {}",
                                m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, m.vocab
                            ),
                        ],
                        vec![
                            "training".into(),
                            format!(
                                "{:?}, lr {}, {} warm-up + {} measured steps, {} eval batches, seed {}",
                                rec.spec.train.optimizer,
                                rec.spec.train.lr,
                                rec.spec.train.warmup_steps,
                                rec.spec.train.steps,
                                rec.spec.train.eval_batches,
                                rec.spec.train.seed
                            ),
                        ],
                        vec!["memory probe".into(), rec.memory_probe.clone()],
                    ],
                });
            }
        }
    }
    Ok((sections, envs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_source_durations() {
        assert_eq!(parse_duration("1m 40s"), Some(100.0));
        assert_eq!(parse_duration("41s"), Some(41.0));
        assert_eq!(parse_duration("2m 5s"), Some(125.0));
        assert_eq!(parse_duration("soon"), None);
    }

    #[test]
    fn formats_bytes_with_binary_units() {
        assert_eq!(format_bytes(1536.0), "1.5 KiB");
        assert_eq!(format_bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
        assert_eq!(
            format_bytes(21.165 * 1024.0 * 1024.0 * 1024.0),
            "21.165 GiB"
        );
    }

    #[test]
    fn formats_diverged_perplexity_in_scientific_notation() {
        assert_eq!(fmt_ppl(Some(398.04)), "398.0");
        assert_eq!(fmt_ppl(Some(21138645933.0)), "2.11e10");
        assert_eq!(fmt_ppl(None), "–");
    }
}
