//! The training report's tables: planned against measured, goals, mixed precision, results and
//! memory per configuration, the environment, stale and unreadable records.

use super::*;

/// Checkmate-planned configurations: what the planner predicted (peak above the steady state
/// from the executor's memory model, compute over plain forward+backward) beside what the job
/// measured (peak − steady state, step time over the control's).
pub(super) fn planned_vs_measured(rows: &[ConfigRow]) -> Table {
    let mut table = Table {
        caption: "Budget plans executed: planned vs measured".into(),
        columns: [
            "configuration",
            "budget (fraction of no-recompute peak)",
            "recomputed blocks",
            "planned peak − steady",
            "measured peak − steady",
            "measured / planned",
            "planned compute ratio",
            "measured step-time ratio",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for s in rows
        .iter()
        .map(|c| &c.s)
        .filter(|s| s.strategy.checkmate.is_some())
    {
        let m = &s.measured;
        let measured_bytes = match (m.peak_allocated_bytes, m.steady_bytes) {
            (Some(p), Some(s)) => Some((p - s).max(0.0)),
            _ => None,
        };
        let measured = match measured_bytes {
            Some(m) => format_bytes(m),
            None => {
                table.note(table.rows.len(), 4, s.reason.as_deref().unwrap_or(""));
                s.status.as_str().to_string()
            }
        };
        let ratio = match (measured_bytes, s.plan.peak_bytes) {
            (Some(m), Some(p)) if p > 0.0 => format!("{:.3}", m / p),
            _ => "–".into(),
        };
        table.rows.push(vec![
            s.config.clone(),
            fmt_opt(s.strategy.checkmate, 2, ""),
            fmt_opt(s.plan.recomputed_blocks, 0, ""),
            s.plan
                .peak_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "–".into()),
            measured,
            ratio,
            fmt_opt(s.plan.cost_ratio, 3, "x"),
            fmt_opt(m.relative_step_time, 3, "x"),
        ]);
    }
    table
}

/// The goals evaluated on a group ([`goal_outcomes`]) as a table: per precision (and
/// optimizer, where the outcomes have more than one) and goal, the ratio (with its interval,
/// with repeats), the goal, the verdict and the runs per side.
pub(super) fn goals_table(outcomes: &[GoalOutcome], goals: &[Goal]) -> Table {
    let step_time_only = goals.iter().all(|g| g.metric == GoalMetric::MedianStepS);
    let optimizers = outcomes
        .iter()
        .any(|o| o.optimizer != outcomes[0].optimizer);
    let mut columns = vec!["comparison", "precision"];
    if optimizers {
        columns.push("optimizer");
    }
    columns.extend(["ratio", "goal", "met", "runs"]);
    let same = "same precision and optimizer, every option a goal does not name at its default";
    let mut table = Table {
        caption: if step_time_only {
            format!("Performance goals: median step-time ratios ({same})")
        } else {
            format!("Goals: ratios between configurations ({same})")
        },
        columns: columns.into_iter().map(String::from).collect(),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    for o in outcomes {
        let ratio = match o.interval {
            Some(i) => format!("{:.3}x [{:.3}, {:.3}]", o.median, i.lo, i.hi),
            None => format!("{:.3}x", o.median),
        };
        let mut row = vec![o.goal.label.clone(), o.precision.to_string()];
        if optimizers {
            row.push(o.optimizer.as_str().into());
        }
        row.extend([
            ratio,
            format!("<= {}x", o.goal.at_most),
            o.verdict.as_str().into(),
            format!("{} / {}", o.runs.0, o.runs.1),
        ]);
        table.rows.push(row);
    }
    if let Some(coverage) = joint_coverage(outcomes) {
        table.caption += &format!(
            "; ratio of the medians over the runs, with the ratio of their order-statistic \
             intervals (joint coverage at least {:.0}%)",
            coverage * 100.0
        );
    }
    table
}

/// The mixed-precision table: per configuration, its master weights and loss scale, the
/// steps skipped for non-finite gradients, the loss scale at the end, the mean fraction of
/// 16-bit gradient entries that are exactly zero, loss and perplexity. Aggregated with polars
/// from the per-step rows. `None` unless a configuration uses master weights.
pub(super) fn mixed_precision(
    inputs: &StudyInputs,
    g: &Group,
    steps_df: &DataFrame,
) -> Result<Option<(Table, Option<Figure>)>> {
    if !inputs.by_name.values().any(|c| c.master_weights) {
        return Ok(None);
    }
    let agg = step_scaling(steps_df, &inputs.study)?;
    let table = Table {
        caption: "Mixed precision: loss scaling and gradient underflow".into(),
        columns: [
            "Configuration",
            "Status",
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
        rows: g.rows.iter().map(|c| mixed_row(c, &agg)).collect(),
        notes: Vec::new(),
    };
    let mut table = table;
    status_notes(&mut table, g, 1);
    let scales = step_curves(steps_df, &inputs.study, "loss_scale")?;
    let scale_series: Vec<Series> = g
        .rows
        .iter()
        .filter(|c| c.cfg.loss_scale.is_some())
        .filter_map(|c| loss_scale_series(c, &scales))
        .collect();
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

pub(super) fn mixed_row(c: &ConfigRow, agg: &BTreeMap<String, StepScaling>) -> Vec<String> {
    let (s, cfg, ok) = (&c.s, c.cfg, c.ok);
    let scaling = agg.get(&s.config);
    vec![
        cfg.label.clone(),
        c.status.as_str().to_string(),
        cfg.precision.to_string(),
        if cfg.master_weights { "f32" } else { "–" }.into(),
        cfg.loss_scale
            .map(|l| l.to_string())
            .unwrap_or_else(|| "none".into()),
        fmt_opt(
            scaling
                .and_then(|x| x.skipped_steps)
                .filter(|_| cfg.master_weights),
            0,
            "",
        ),
        match (
            scaling.and_then(|x| x.final_scale),
            scaling.and_then(|x| x.min_scale),
        ) {
            (Some(f), Some(m)) => format!("{f} / {m}"),
            _ => "–".into(),
        },
        fmt_opt(
            scaling.and_then(|x| x.zero_fraction).map(|z| 100.0 * z),
            3,
            "%",
        ),
        fmt_opt(s.measured.final_train_loss.filter(|_| ok), 3, ""),
        fmt_ppl(s.measured.eval_perplexity.filter(|_| ok)),
        c.peak
            .filter(|_| ok)
            .map(format_bytes)
            .unwrap_or_else(|| "–".into()),
        fmt_opt(c.rel.filter(|_| ok), 2, "x"),
    ]
}

/// A binary unit for a column of byte counts: the largest that keeps the column's largest
/// value at 1 or more (KiB, MiB or GiB), with the decimals [`format_bytes`] uses for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ByteUnit {
    name: &'static str,
    bytes: f64,
    decimals: usize,
}

impl ByteUnit {
    fn for_values(values: impl Iterator<Item = f64>) -> ByteUnit {
        let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
        if max >= MIB * 1024.0 {
            ByteUnit {
                name: "GiB",
                bytes: MIB * 1024.0,
                decimals: 3,
            }
        } else if max >= MIB {
            ByteUnit {
                name: "MiB",
                bytes: MIB,
                decimals: 1,
            }
        } else {
            ByteUnit {
                name: "KiB",
                bytes: 1024.0,
                decimals: 1,
            }
        }
    }
    fn format(self, v: Option<f64>) -> String {
        fmt_opt(v.map(|b| b / self.bytes), self.decimals, "")
    }
}

/// One column of a per-configuration table: its header (with the unit) and its cell for a
/// configuration. Tables are lists of these, so a column is added by pushing one.
pub(super) struct Column<'g> {
    header: String,
    cell: Box<dyn Fn(&ConfigRow) -> String + 'g>,
}

impl<'g> Column<'g> {
    fn new(header: impl Into<String>, cell: impl Fn(&ConfigRow) -> String + 'g) -> Self {
        Column {
            header: header.into(),
            cell: Box::new(cell),
        }
    }

    /// Byte counts from `value`, in one unit for the whole column (named in the header).
    fn bytes(g: &'g Group, header: &str, value: impl Fn(&ConfigRow) -> Option<f64> + 'g) -> Self {
        let unit = ByteUnit::for_values(g.rows.iter().filter_map(&value));
        Column::new(format!("{header} ({})", unit.name), move |c| {
            unit.format(value(c))
        })
    }
}

/// The per-configuration table of `g` with `columns`: configuration label and status first
/// (the status a short word, the reason of an unfinished job as the status cell's footnote).
pub(super) fn config_table(caption: String, g: &Group, columns: Vec<Column>) -> Table {
    let mut table = Table {
        caption,
        columns: ["Configuration", "Status"]
            .into_iter()
            .map(String::from)
            .chain(columns.iter().map(|c| c.header.clone()))
            .collect(),
        rows: g
            .rows
            .iter()
            .map(|c| {
                [c.cfg.label.clone(), c.status.as_str().to_string()]
                    .into_iter()
                    .chain(columns.iter().map(|col| (col.cell)(c)))
                    .collect()
            })
            .collect(),
        notes: Vec::new(),
    };
    status_notes(&mut table, g, 1);
    table
}

/// Footnotes the status cell (column `column`) of each unfinished configuration with the
/// record's reason.
pub(super) fn status_notes(table: &mut Table, g: &Group, column: usize) {
    for (i, c) in g.rows.iter().enumerate().filter(|(_, c)| !c.ok) {
        match c.s.reason.as_deref() {
            Some(reason) if !reason.is_empty() => table.note(i, column, reason),
            _ => {}
        }
    }
}

/// The main table, claim vs ours: per configuration our peak, reduction, throughput,
/// relative step time and perplexity, each beside the source's. A "source" column holds only
/// numbers the document states; the step-time ratio computed from the document's Relative
/// Time column is labelled derived. A source column without any value is left out.
pub(super) fn results_table(inputs: &StudyInputs, g: &Group) -> Table {
    let mut table = config_table(
        format!("Claim vs ours, the source is {}", inputs.header.source),
        g,
        results_columns(g),
    );
    if g.rows
        .iter()
        .any(|c| c.claim.is_some_and(|c| c.time.is_some()))
    {
        note_derived_time(&mut table);
    }
    if g.rows
        .iter()
        .any(|c| c.claim.is_some_and(|c| c.perplexity.is_some()))
    {
        let steps = g
            .first(|s| Some(s.size.measured_steps))
            .map(|n| format!("{n} measured steps (after the warm-up)"))
            .unwrap_or_else(|| "this run's steps".into());
        let column = table.columns.iter().position(|h| h == "Eval ppl, ours");
        if let Some(j) = column {
            if let Some(i) = table.rows.iter().position(|r| r[j] != "–") {
                table.note(
                    i,
                    j,
                    format!(
                        "Not comparable with the source's: ours is evaluated after {steps} at \
                         this profile's vocabulary, the source's after its own training run (its \
                         length and vocabulary in the description above); no verdict compares \
                         the two."
                    ),
                );
            }
        }
    }
    table
}

/// The columns of [`results_table`]: each of ours, followed by the source's where any
/// configuration's claim has that number.
pub(super) fn results_columns<'g>(g: &'g Group) -> Vec<Column<'g>> {
    let has = |f: fn(&Claim) -> bool| g.rows.iter().any(|c| c.claim.is_some_and(f));
    let gib_source = has(|c| c.peak_gib.is_some());
    let mut columns = vec![peak_column(g, gib_source)];
    if gib_source {
        columns.push(Column::new("Peak, source (GiB)", |c| {
            source_number(c.claim.and_then(|c| c.peak_gib))
        }));
    }
    columns.push(Column::new("Reduction, ours (%)", |c| {
        fmt_opt(c.red, 1, "")
    }));
    if has(|c| c.reduction_pct.is_some()) {
        columns.push(Column::new("Reduction, source (%)", |c| {
            source_number(c.claim.and_then(|c| c.reduction_pct))
        }));
    }
    columns.push(Column::new("Samples/s, ours", |c| {
        fmt_opt(c.s.measured.samples_per_s, 2, "")
    }));
    if has(|c| c.samples_per_s.is_some()) {
        columns.push(Column::new("Samples/s, source", |c| {
            source_number(c.claim.and_then(|c| c.samples_per_s))
        }));
    }
    columns.push(Column::new("Step time / control, ours", |c| {
        fmt_opt(c.rel, 2, "x")
    }));
    if has(|c| c.time.is_some()) {
        columns.push(Column::new("Relative Time, source", |c| {
            c.claim
                .and_then(|c| c.time.clone())
                .unwrap_or_else(|| "–".into())
        }));
        columns.push(Column::new(
            "Relative Time / control, derived from the source",
            |c| fmt_opt(c.src_rel, 2, "x"),
        ));
    }
    columns.push(Column::new("Eval ppl, ours", |c| {
        fmt_ppl(c.s.measured.eval_perplexity)
    }));
    if has(|c| c.perplexity.is_some()) {
        columns.push(Column::new("Eval ppl, source", |c| {
            source_number(c.claim.and_then(|c| c.perplexity))
        }));
    }
    columns
}

/// Our peak allocated memory: in the source's unit (GiB) where the source states peaks, else
/// in one byte unit for the column.
pub(super) fn peak_column<'g>(g: &'g Group, gib_source: bool) -> Column<'g> {
    if gib_source {
        // Ours in the source's unit (GiB), with the digits a CPU-sized peak needs.
        let max = g.rows.iter().filter_map(|c| c.peak).fold(0.0, f64::max);
        let digits = if max >= MIB * 1024.0 { 3 } else { 4 };
        Column::new(
            format!("Peak allocated, ours{} (GiB)", g.allocated_bound()),
            move |c| fmt_opt(c.peak.map(|p| p / (MIB * 1024.0)), digits, ""),
        )
    } else {
        Column::bytes(
            g,
            &format!("Peak allocated, ours{}", g.allocated_bound()),
            |c| c.peak,
        )
    }
}

/// Footnotes the first value of the derived "Relative Time / control" column with how it is
/// derived.
pub(super) fn note_derived_time(table: &mut Table) {
    if let Some(j) = table
        .columns
        .iter()
        .position(|h| h.starts_with("Relative Time / control"))
    {
        if let Some(i) = table.rows.iter().position(|r| r[j] != "–") {
            table.note(
                i,
                j,
                "Derived: the configuration's Relative Time (the document's time between \
                 steps 10 and 100) over the control's, e.g. BFloat16 41 s / 100 s = 0.41x. \
                 Ours is the median step time over the control's.",
            );
        }
    }
}

/// A number as the source document prints it (no padding digits: 180.0 stays "180.0" only
/// when written so in the experiment file, which copies the document).
pub(super) fn source_number(v: Option<f64>) -> String {
    v.map(memwall_core::spec::claims::trim_number)
        .unwrap_or_else(|| "–".into())
}

/// The memory table: peak allocated (and on a GPU peak reserved), the activation estimate
/// and the measured peak over the steady state; on a GPU also the time to the first timed
/// step.
pub(super) fn memory_table(g: &Group) -> Table {
    let mut columns = vec![Column::bytes(
        g,
        &format!("Peak allocated{}", g.allocated_bound()),
        |c| c.peak,
    )];
    if g.gpu {
        columns.push(Column::bytes(
            g,
            &format!("Peak reserved{}", g.bound(|s| &s.peak_reserved_bound)),
            |c| c.s.measured.peak_reserved_bytes,
        ));
    }
    columns.push(Column::bytes(g, "Activations, estimated", |c| {
        c.s.measured.estimated_activation_bytes
    }));
    columns.push(Column::bytes(
        g,
        "Peak − steady state, measured",
        |c| match (c.peak, c.s.measured.steady_bytes) {
            (Some(p), Some(s)) if c.ok => Some((p - s).max(0.0)),
            _ => None,
        },
    ));
    if g.gpu {
        columns.push(Column::new("First timed step after (s)", |c| {
            fmt_opt(c.s.measured.time_to_first_measured_step_s, 1, "")
        }));
    }
    config_table(
        format!(
            "Memory: {} profile on {} ({})",
            g.profile, g.device, g.backend_label
        ),
        g,
        columns,
    )
}

/// The environment of a group, read from its first record: device, backend, numerics, host,
/// revision, model and training settings, and the memory probe.
pub(super) fn environment_table(inputs: &StudyInputs, g: &Group) -> Result<Option<Table>> {
    let Some(key) = g.rows.first().map(|c| c.s.key.clone()) else {
        return Ok(None);
    };
    let Some(rec) = inputs.records.get(&key) else {
        return Ok(None);
    };
    let m = &rec.spec.model;
    let model = format!(
        "{} layers, d_model {}, {} heads, d_ff {}, seq {}, batch {}, vocab {}",
        m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, m.vocab
    );
    let mut table = record_environment(
        rec,
        format!(
            "{} profile on {} ({})",
            g.profile, g.device, g.backend_label
        ),
        model,
        "training",
    );
    // The training row names the first record's optimizer: a group that trains with more than
    // one says which configurations use which.
    let mut by_optimizer: Vec<(crate::spec::OptimizerKind, Vec<String>)> = Vec::new();
    for c in g.rows.iter().chain(&g.unsupported) {
        let opt = c.s.strategy.optimizer;
        match by_optimizer.iter_mut().find(|(o, _)| *o == opt) {
            Some((_, names)) => names.push(text::escape(&c.cfg.label)),
            None => by_optimizer.push((opt, vec![text::escape(&c.cfg.label)])),
        }
    }
    if by_optimizer.len() > 1 {
        let text = format!(
            "Optimizer per configuration (this row names the first record's): {}.",
            by_optimizer
                .iter()
                .map(|(o, names)| {
                    format!("{} for {} ({})", o.as_str(), names.len(), names.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ")
        );
        if let Some(i) = table.rows.iter().position(|r| r[0] == "training") {
            table.note(i, 1, text);
        }
    }
    Ok(Some(table))
}

/// Records whose configuration is no longer in the experiment file: listed, not dropped.
pub(super) fn stale_records_section(
    inputs: &StudyInputs,
    stale: &[ConfigSummary],
) -> Option<Section> {
    let rows: Vec<Vec<String>> = stale
        .iter()
        .map(|s| {
            vec![
                s.config.clone(),
                s.profile.clone(),
                s.backend.clone(),
                s.status.as_str().to_string(),
                s.key.clone(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    Some(Section {
        details: None,
        title: "Records not in the experiment file".into(),
        claim: "None: these configurations are no longer in the experiment file.".into(),
        ours: format!(
            "{} record(s) in `runs/{}/` belong to configurations the experiment file no longer \
             defines; they are not in the tables and figures above. Delete their folders or \
             restore the configurations.",
            rows.len(),
            inputs.header.name
        ),
        notes: Vec::new(),
        tables: vec![Table {
            caption: "Records not in the experiment file".into(),
            columns: [
                "configuration",
                "profile",
                "backend",
                "status",
                "record key",
            ]
            .map(String::from)
            .to_vec(),
            rows,
            notes: Vec::new(),
        }],
        figures: Vec::new(),
    })
}

/// The records of the study that could not be read (named with their file and the reason), so
/// that a damaged or foreign record is seen, not silently dropped.
pub(super) fn unreadable_records_section(records: &StudyRecords) -> Option<Section> {
    if records.unreadable.is_empty() {
        return None;
    }
    let rows = records
        .unreadable
        .iter()
        .map(|(path, why)| vec![path.display().to_string(), why.clone()])
        .collect();
    Some(Section {
        details: None,
        title: "Records that could not be read".into(),
        claim: "None: these files are in the record store but do not read as records.".into(),
        ours: format!(
            "{} file(s) under `{}` were left out of every table and figure. Rerun their \
             configurations with `--force`, or delete the folders.",
            records.unreadable.len(),
            records.dir.display()
        ),
        notes: Vec::new(),
        tables: vec![Table {
            caption: "Records that could not be read".into(),
            columns: vec!["file".into(), "error".into()],
            rows,
            notes: Vec::new(),
        }],
        figures: Vec::new(),
    })
}
