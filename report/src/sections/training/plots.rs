//! The training report's figures: bars per configuration, the Pareto front, intervals, the
//! estimate, loss curves and loss scales.

use super::*;

/// log2 of the loss scale per step of one configuration, from the loss-scale points of every
/// configuration ([`step_curves`]); `None` without points.
pub(super) fn loss_scale_series(
    c: &ConfigRow,
    scales: &BTreeMap<String, Vec<(f64, f64)>>,
) -> Option<Series> {
    let points: Vec<(f64, f64)> = scales
        .get(&c.s.config)?
        .iter()
        .map(|&(x, y)| (x, y.log2()))
        .collect();
    (!points.is_empty()).then(|| Series {
        label: c.cfg.label.clone(),
        points,
        mark: Mark::Line,
        point_labels: Vec::new(),
    })
}

/// A bar series over the group's configurations (NaN where a value is missing).
pub(super) fn bars(g: &Group, label: &str, value: impl Fn(&ConfigRow) -> Option<f64>) -> Series {
    Series {
        label: label.into(),
        mark: Mark::Bars,
        points: g
            .rows
            .iter()
            .enumerate()
            .map(|(x, c)| (x as f64, value(c).unwrap_or(f64::NAN)))
            .collect(),
        point_labels: g.rows.iter().map(|c| c.cfg.name.clone()).collect(),
    }
}

/// Peak allocated per configuration, and the reduction and relative step time beside the
/// source's (a source series only where the document gives values; its step-time ratio is
/// derived from the document's Relative Time).
pub(super) fn bar_figures(g: &Group) -> Vec<Figure> {
    let unit = g.mem_unit().0;
    let source_reduction = |c: &ConfigRow| c.claim.and_then(|cl| cl.reduction_pct);
    let drawn = |series: Vec<Series>| -> Vec<Series> {
        series
            .into_iter()
            .filter(|s| s.points.iter().any(|p| p.1.is_finite()))
            .collect()
    };
    let title = |what: &str, series: &[Series]| {
        if series.len() > 1 {
            format!("{what}: ours and the source's")
        } else {
            format!("{what} (ours)")
        }
    };
    let reduction = drawn(vec![
        bars(g, "ours", |c| c.red),
        bars(g, "source", source_reduction),
    ]);
    let step = drawn(vec![
        bars(g, "ours", |c| c.rel),
        bars(g, "source (derived from its Relative Time)", |c| c.src_rel),
    ]);
    vec![
        Figure {
            name: format!("peak_{}", g.slug),
            title: "Peak allocated memory per step (ours)".into(),
            x_label: "configuration".into(),
            y_label: g.peak_axis(),
            series: vec![bars(g, "peak allocated", |c| c.peak.map(|p| p / unit))],
            ..Default::default()
        },
        Figure {
            name: format!("reduction_{}", g.slug),
            title: title("Peak-memory reduction vs the control", &reduction),
            x_label: "configuration".into(),
            y_label: "reduction of peak allocated memory (%)".into(),
            series: reduction,
            ..Default::default()
        },
        Figure {
            name: format!("step_time_{}", g.slug),
            title: title("Step time relative to the control", &step),
            x_label: "configuration".into(),
            y_label: "step time / control step time".into(),
            series: step,
            ..Default::default()
        },
    ]
}

/// Peak allocated against median step time, one labelled point per finished configuration.
pub(super) fn pareto_figure(g: &Group) -> Option<Figure> {
    let unit = g.mem_unit().0;
    let pareto: Vec<(f64, f64, String)> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            Some((
                c.s.measured.median_step_s?,
                c.peak? / unit,
                c.cfg.name.clone(),
            ))
        })
        .collect();
    (!pareto.is_empty()).then(|| Figure {
        name: format!("pareto_{}", g.slug),
        title: "Memory vs time: peak allocated against median step time".into(),
        x_label: "median step time (s)".into(),
        y_label: g.peak_axis(),
        series: vec![Series {
            label: "configurations".into(),
            points: pareto.iter().map(|(t, m, _)| (*t, *m)).collect(),
            mark: Mark::Points,
            point_labels: pareto.into_iter().map(|(_, _, n)| n).collect(),
        }],
        ..Default::default()
    })
}

/// (K, peak MiB, median step s) per "precision[, fusion]" for checkpointing every K blocks,
/// and (peak MiB, step s) of no checkpointing, from finished configurations without the fused
/// step or a budget.
#[allow(clippy::type_complexity)]
pub(super) fn interval_points(
    g: &Group,
) -> (
    BTreeMap<String, Vec<(f64, f64, f64)>>,
    BTreeMap<String, (f64, f64)>,
) {
    let unit = g.mem_unit().0;
    let mut by_k: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut none_level = BTreeMap::new();
    for c in g.rows.iter().filter(|c| c.ok) {
        let st = &c.s.strategy;
        // Block checkpointing only: a unit-level policy refines its K (another plan), nested
        // checkpointing splits its segments (another plan), and gradient accumulation runs it
        // on micro-batches (another activation size); a head with its logits recomputed is
        // another plan of the head.
        if c.cfg.head_chunks.is_some()
            || st.fused_optimizer
            || st.budget.is_some()
            || st.policy.is_some()
            || st.nested_checkpoint.is_some()
            || st.accumulation_steps > 1
        {
            continue;
        }
        let (Some(p), Some(t)) = (c.peak, c.s.measured.median_step_s) else {
            continue;
        };
        let fusion = if st.fusion { ", fusion" } else { "" };
        let key = format!("{}{fusion}", st.precision);
        match st.checkpoint {
            CheckpointSpec::None => {
                none_level.insert(key, (p / unit, t));
            }
            CheckpointSpec::Sqrt => {
                let k = (c.s.size.layers as f64).sqrt().ceil();
                by_k.entry(key).or_default().push((k, p / unit, t));
            }
            CheckpointSpec::Every(k) => {
                by_k.entry(key).or_default().push((k as f64, p / unit, t));
            }
        }
    }
    (by_k, none_level)
}

/// Peak and median step time against the checkpoint interval K, with no checkpointing as a
/// level line; only when some precision has at least two intervals.
pub(super) fn interval_figures(g: &Group) -> Vec<Figure> {
    let (by_k, none_level) = interval_points(g);
    if !by_k.values().any(|v| v.len() >= 2) {
        return Vec::new();
    }
    let layers = g.first(|s| Some(s.size.layers as f64)).unwrap_or(1.0);
    let line = |label: String, points: Vec<(f64, f64)>| Series {
        label,
        points,
        ..Default::default()
    };
    let (mut mem, mut time) = (Vec::new(), Vec::new());
    for (key, pts) in &by_k {
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
        mem.push(line(
            format!("{key}, every K"),
            pts.iter().map(|p| (p.0, p.1)).collect(),
        ));
        time.push(line(
            format!("{key}, every K"),
            pts.iter().map(|p| (p.0, p.2)).collect(),
        ));
        if let Some((m, t)) = none_level.get(key) {
            mem.push(line(format!("{key}, none"), vec![(1.0, *m), (layers, *m)]));
            time.push(line(format!("{key}, none"), vec![(1.0, *t), (layers, *t)]));
        }
    }
    vec![
        Figure {
            name: format!("peak_vs_k_{}", g.slug),
            title: "Peak allocated memory vs checkpoint interval K".into(),
            x_label: "K (blocks per segment)".into(),
            y_label: g.peak_axis(),
            log_x: true,
            series: mem,
            ..Default::default()
        },
        Figure {
            name: format!("time_vs_k_{}", g.slug),
            title: "Median step time vs checkpoint interval K".into(),
            x_label: "K (blocks per segment)".into(),
            y_label: "median step time (s)".into(),
            log_x: true,
            series: time,
            ..Default::default()
        },
    ]
}

/// The activation estimate against the measured peak over the steady state, with y = x.
pub(super) fn estimate_figure(g: &Group) -> Option<Figure> {
    let (unit, unit_name) = g.mem_unit();
    let pts: Vec<(f64, f64, String)> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            let est = c.s.measured.estimated_activation_bytes?;
            let above = (c.peak? - c.s.measured.steady_bytes?).max(0.0);
            Some((est / unit, above / unit, c.cfg.name.clone()))
        })
        .collect();
    if pts.is_empty() {
        return None;
    }
    let max = pts.iter().map(|p| p.0.max(p.1)).fold(0.0, f64::max);
    Some(Figure {
        name: format!("estimated_vs_measured_{}", g.slug),
        title: "Estimated activation memory vs measured (peak − steady state)".into(),
        x_label: format!("estimated activations ({unit_name})"),
        y_label: format!("measured peak − steady ({unit_name})"),
        series: vec![
            Series {
                label: "configurations".into(),
                points: pts.iter().map(|p| (p.0, p.1)).collect(),
                mark: Mark::Points,
                point_labels: pts.into_iter().map(|p| p.2).collect(),
            },
            Series {
                label: "y = x".into(),
                points: vec![(0.0, 0.0), (max, max)],
                ..Default::default()
            },
        ],
        ..Default::default()
    })
}

/// Most lines one chart draws: more are not told apart by colour.
pub(super) const MAX_LINES: usize = 8;

/// Training loss per step of each finished configuration, in the group's order: one chart per
/// [`MAX_LINES`] - 1 configurations, each with the control's curve as the reference.
pub(super) fn loss_figures(g: &Group, curves: &BTreeMap<String, Vec<(f64, f64)>>) -> Vec<Figure> {
    let line = |name: &str| {
        curves.get(name).map(|points| Series {
            label: name.to_string(),
            points: points.clone(),
            mark: Mark::Line,
            point_labels: Vec::new(),
        })
    };
    let control = g
        .rows
        .iter()
        .find(|c| c.s.strategy.control)
        .map(|c| c.s.config.clone());
    let others: Vec<Series> = g
        .rows
        .iter()
        .map(|c| c.s.config.clone())
        .filter(|n| Some(n) != control.as_ref())
        .filter_map(|n| line(&n))
        .collect();
    let reference = control.as_deref().and_then(line);
    let per_chart = MAX_LINES - usize::from(reference.is_some());
    let chunks: Vec<&[Series]> = others.chunks(per_chart).collect();
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| Figure {
            name: if n == 1 {
                format!("loss_{}", g.slug)
            } else {
                format!("loss_{}_{}", g.slug, i + 1)
            },
            title: if n == 1 {
                "Training loss per step".into()
            } else {
                format!("Training loss per step ({} of {n})", i + 1)
            },
            x_label: "step".into(),
            y_label: "train loss (nats/token)".into(),
            series: reference
                .iter()
                .cloned()
                .chain(chunk.iter().cloned())
                .collect(),
            ..Default::default()
        })
        .collect()
}
