//! Sweeps of one configuration field (sequence length, batch, segments): the fitted scaling
//! against the source's claim, its table, figure and note.

use super::*;

/// The sweep `sweep` (the configurations with its strategy fields, at every interval) of group
/// `g`: the activation peak (peak allocated − steady state) of each finished configuration by
/// its interval, fitted ([`Sweep`]); `None` when none of its configurations finished here.
pub(super) fn group_sweep(g: &Group, sweep: &ConfigSelector) -> Option<Sweep> {
    let layers = g.first(|s| Some(s.size.layers as usize))?;
    let points: Vec<SweepPoint> = g
        .rows
        .iter()
        .filter(|c| c.ok)
        .filter_map(|c| {
            let k = sweep.sweep_member(c.cfg)?.segment_len(layers)?;
            let peak = c.peak?;
            let steady = c.s.measured.steady_bytes?;
            Some(SweepPoint {
                k,
                config: c.cfg.name.clone(),
                activation_bytes: (peak - steady).max(0.0),
                peak_bytes: peak,
                step_s: c.s.measured.median_step_s,
            })
        })
        .collect();
    (!points.is_empty()).then(|| Sweep::new(layers, points))
}

/// The sweeps the claims name (`sweep = { ... }`) with a finished configuration in `g`, each
/// once, in the claims' order, with the selector as their label.
pub(super) fn claimed_sweeps(g: &Group, claims: &[SourceClaim]) -> Vec<(String, Sweep)> {
    let mut out: Vec<(String, Sweep)> = Vec::new();
    for sweep in claims.iter().filter_map(|c| c.sweep.as_ref()) {
        let label = sweep.describe();
        if out.iter().any(|(l, _)| *l == label) {
            continue;
        }
        if let Some(s) = group_sweep(g, sweep) {
            out.push((label, s));
        }
    }
    out
}

/// `x` with at most three significant decimals for the prose ("2.67", "0.12", "17").
pub(super) fn short(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The fit in words: "a = 0.25 MiB per checkpoint, b = 4.50 MiB per block, c = 3.00 MiB
/// (R² 0.998, RMS relative error 1.2%); sqrt(a·N/b) = 2.67".
pub(super) fn fit_text(fit: &crate::analysis::sublinear::SublinearFit) -> String {
    let mib = |b: f64| format!("{} MiB", short(b / MIB));
    let k = fit
        .continuous_minimizer()
        .map(|k| format!("; its minimizer √(a·N/b) = {}", short(k)))
        .unwrap_or_default();
    format!(
        "a = {} per checkpoint, b = {} per block of the recomputed segment, c = {} (R² {:.3}, \
         RMS relative error {:.1}%){k}",
        mib(fit.a),
        mib(fit.b),
        mib(fit.c),
        fit.r2,
        100.0 * fit.rms_rel
    )
}

/// The glance's answer for a sweep measure `measure` (sweep `sweep`, metric `metric`) from
/// group `g`: the value with what it rests on as the footnote; a fit without the claimed shape
/// contradicts the model whatever its error.
pub(super) fn sweep_answer(
    g: &Group,
    measure: &str,
    selector: &ConfigSelector,
    metric: SweepMetric,
) -> Answer {
    let sweep = selector.describe();
    let Some(s) = group_sweep(g, selector) else {
        return Answer::Missing(format!(
            "no configuration of the sweep `{sweep}` finished on {}",
            g.device
        ));
    };
    let value = match s.metric(metric) {
        Ok(v) => v,
        Err(why) => return Answer::Missing(format!("`{sweep}` on {}: {why}", g.device)),
    };
    let m = Measure::new(measure, value, "%", 1, metric.provenance());
    let mib = |b: f64| format!("{} MiB", short(b / MIB));
    let n = s.layers;
    let best = s.best().map(|p| (p.k, p.activation_bytes));
    let best_text = best
        .map(|(k, y)| format!("the measured minimum {} at K = {k}", mib(y)))
        .unwrap_or_default();
    let note = match metric {
        SweepMetric::FitRmsPct => {
            let Some(fit) = s.fit else {
                return Answer::Missing("no fit".into());
            };
            let text = format!(
                "Least-squares fit of peak − steady state = a·⌈N/K⌉ + b·K + c over K = {} \
                 (N = {n}), relative residuals: {}.",
                s.points
                    .iter()
                    .map(|p| p.k.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                fit_text(&fit)
            );
            if !fit.has_shape() {
                return Answer::Contradicted(
                    m,
                    format!(
                        "{text} The fit has no O(N/K) + O(K) shape: its two costs do not balance \
                         at a K in [1, N] (a and b positive with √(a·N/b) between 1 and {n})."
                    ),
                );
            }
            text
        }
        SweepMetric::FitKExcessPct => {
            let fit_k = s.fit_best().map(|p| (p.k, p.activation_bytes));
            match fit_k {
                Some((k, y)) => format!(
                    "Of the measured intervals the fit is lowest at K = {k}, which measures {}; \
                     {best_text}.",
                    mib(y)
                ),
                None => best_text,
            }
        }
        SweepMetric::SqrtNExcessPct => {
            let k = s.sqrt_k();
            let ratio = s
                .fit
                .filter(|f| f.a > 0.0)
                .map(|f| {
                    format!(
                        " The slide's K = √N balances equal unit costs; measured, one more block \
                         of the recomputed segment costs b/a = {} checkpoints, so the minimum \
                         lies near √(a·N/b).",
                        short(f.b / f.a)
                    )
                })
                .unwrap_or_default();
            format!(
                "K = ⌈√N⌉ = {k} (N = {n}) measures {}; {best_text}.{ratio}",
                s.at(k).map(|p| mib(p.activation_bytes)).unwrap_or_default()
            )
        }
        SweepMetric::UDepthPct => format!(
            "{}; K = 1 measures {} and K = N = {n} measures {}.",
            best_text
                .get(..1)
                .map(|f| f.to_uppercase() + &best_text[1..])
                .unwrap_or_default(),
            s.at(1).map(|p| mib(p.activation_bytes)).unwrap_or_default(),
            s.at(n).map(|p| mib(p.activation_bytes)).unwrap_or_default()
        ),
    };
    Answer::Explained(m, note)
}

/// The sweep's table: per interval the segments, the measured activation peak, the fit, the
/// residual and the median step time, with the measured minimum, the fit's lowest and
/// K = ceil(sqrt(N)) marked.
pub(super) fn sweep_table(pattern: &str, s: &Sweep) -> Table {
    let best = s.best().map(|p| p.k);
    let fit_best = s.fit_best().map(|p| p.k);
    let caption = match &s.fit {
        Some(f) => format!(
            "Activation peak vs K, sweep `{pattern}` (N = {}): fit a·⌈N/K⌉ + b·K + c with {}",
            s.layers,
            fit_text(f)
        ),
        None => format!(
            "Activation peak vs K, sweep `{pattern}` (N = {}): too few intervals to fit",
            s.layers
        ),
    };
    let rows = s
        .points
        .iter()
        .map(|p| {
            let fitted = s.fit.map(|f| f.predict(p.k));
            let mut marks = Vec::new();
            if Some(p.k) == best {
                marks.push("measured minimum");
            }
            if Some(p.k) == fit_best {
                marks.push("fit's lowest");
            }
            if p.k == s.sqrt_k() {
                marks.push("K = ⌈√N⌉");
            }
            vec![
                p.k.to_string(),
                crate::analysis::sublinear::segments(s.layers, p.k).to_string(),
                format!("{:.2}", p.activation_bytes / MIB),
                fmt_opt(fitted.map(|f| f / MIB), 2, ""),
                fmt_opt(
                    fitted.map(|f| 100.0 * (p.activation_bytes - f) / p.activation_bytes),
                    1,
                    "",
                ),
                format!("{:.1}", p.peak_bytes / MIB),
                fmt_opt(p.step_s, 3, ""),
                marks.join(", "),
            ]
        })
        .collect();
    Table {
        caption,
        columns: [
            "K",
            "Segments ⌈N/K⌉",
            "Peak − steady, measured (MiB)",
            "Fit (MiB)",
            "Residual (%)",
            "Peak allocated (MiB)",
            "Median step (s)",
            "",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        notes: Vec::new(),
    }
}

/// The sweep's figure: the measured activation peak against K (both axes logarithmic, so
/// that the bottom of the U is not flattened by K = N), the fit at integer K spaced evenly on
/// the axis, the measured minimum, and K = sqrt(N) and the fit's minimizer sqrt(a·N/b) as
/// vertical lines.
pub(super) fn sweep_figure(g: &Group, pattern: &str, s: &Sweep) -> Figure {
    let measured: Vec<(f64, f64)> = s
        .points
        .iter()
        .map(|p| (p.k as f64, p.activation_bytes / MIB))
        .collect();
    let positive = measured.iter().map(|p| p.1).filter(|y| *y > 0.0);
    let top = positive.clone().fold(0.0, f64::max) * 1.1;
    let bottom = positive.fold(f64::INFINITY, f64::min) * 0.8;
    let vertical = |label: String, x: f64| Series::line(label, vec![(x, bottom), (x, top)]);
    let mut series = vec![Series::scatter("measured (peak − steady)", measured)];
    if let Some(f) = s.fit {
        // About 40 integer intervals, evenly spaced on the logarithmic axis.
        let mut ks: Vec<usize> = (0..=40)
            .map(|i| (s.layers as f64).powf(f64::from(i) / 40.0).round() as usize)
            .collect();
        ks.dedup();
        series.push(Series::line(
            "fit a·⌈N/K⌉ + b·K + c",
            ks.into_iter()
                .map(|k| (k as f64, f.predict(k) / MIB))
                .collect(),
        ));
        if let Some(k) = f.continuous_minimizer() {
            series.push(vertical(
                format!("fit's minimizer √(a·N/b) = {}", short(k)),
                k,
            ));
        }
    }
    if let Some(b) = s.best() {
        series.push(Series {
            label: format!("measured minimum, K = {}", b.k),
            points: vec![(b.k as f64, b.activation_bytes / MIB)],
            mark: Mark::Points,
            point_labels: vec![format!("K = {}", b.k)],
        });
    }
    series.push(vertical(
        format!("√N = {}", short((s.layers as f64).sqrt())),
        (s.layers as f64).sqrt(),
    ));
    Figure {
        name: format!("sublinear_{}_{}", g.slug, slug(pattern)),
        // The sweep's fields are in the table's caption above: a title that holds them too does
        // not fit the figure's width.
        title: format!(
            "Activation peak vs checkpoint interval K, N = {} blocks",
            s.layers
        ),
        x_label: "K (blocks per segment)".into(),
        y_label: "peak allocated − steady state (MiB)".into(),
        log_x: true,
        log_y: true,
        series,
        ..Default::default()
    }
}

/// What the sweep section states: the model, where it comes from, what is measured, and why
/// its minimum need not be the slide's K = sqrt(N).
pub(super) fn sweep_note(s: &Sweep, records: &StudyRecords) -> String {
    // One checkpoint is one block input, batch x seq_len x d_model elements.
    let input = s
        .points
        .first()
        .and_then(|p| records.records.iter().find(|r| r.spec.config == p.config))
        .map(|r| {
            let m = &r.spec.model;
            let bytes = r.spec.strategy.precision.bytes();
            format!(
                " One block input here is {} × {} × {} × {bytes} B = {} MiB (batch × seq_len × \
                 d_model × bytes per element).",
                m.batch,
                m.seq_len,
                m.d_model,
                short((m.batch * m.seq_len * m.d_model * bytes) as f64 / MIB)
            )
        })
        .unwrap_or_default();
    let fit = s
        .fit
        .map(|f| format!(" Fitted here: {}.{input}", fit_text(&f)))
        .unwrap_or_default();
    format!(
        "*The sublinear model.* Checkpointing every K of N = {} blocks keeps the input of each \
         of the ⌈N/K⌉ segments (the slide's checkpoint cost, O(N/K)) and, while backward \
         recomputes a segment, the activations of its K blocks (the re-computation cost, O(K)): \
         memory = a·⌈N/K⌉ + b·K + c (CMU 15-442/15-642, Memory Optimizations, slide \
         \"Sublinear Memory Cost\"; Chen, Xu, Zhang and Guestrin 2016, \"Training Deep Nets \
         with Sublinear Memory Cost\", arXiv:1604.06174, Section 4). Its minimum over K lies at \
         K* = √(a·N/b); the slide's K = √N is the case of equal unit costs, a = b. Measured: \
         peak allocated − steady state (the bytes live at the start of the step: parameters, \
         optimizer state, batch), so that what does not depend on K is left out; the fit \
         minimizes relative residuals, since the peaks span more than an order of magnitude.{fit}",
        s.layers
    )
}
