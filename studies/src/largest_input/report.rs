//! The search's report: per field the table of every strategy's largest value under the limit,
//! its ratio to the control, the memory above the steady state per unit of the field and the
//! ratio that implies at any limit, the environment, the measures the claims judge and the
//! glance. Read from the records only ([`super::summarize`]).

use super::{near_margin, params, AtLimit, Dim, Row, SearchParams};
use crate::document::content::{GlanceRow, Measure, Section, Table};
use crate::spec::Study;

/// The control's row of `dim` (the configuration marked `control`, else the first).
fn control_row<'a, 'b>(rows: &'b [Row<'a>], dim: Dim) -> Option<&'b Row<'a>> {
    rows.iter()
        .filter(|r| r.dim == dim)
        .find(|r| r.config.control)
        .or_else(|| rows.iter().find(|r| r.dim == dim))
}

/// `row`'s largest value over the control's (x); `None` when either has none.
pub fn ratio(rows: &[Row], row: &Row) -> Option<f64> {
    let control = control_row(rows, row.dim)?.largest?.0;
    let ours = row.largest?.0;
    (control > 0).then(|| ours as f64 / control as f64)
}

/// Bytes above the steady state per unit of the searched field (a sample, a token) at `row`'s
/// largest value: `(peak allocated − steady state) / value`, derived from that job's measured
/// peak and steady state (parameters, optimizer state, corpus); `None` without a finished
/// probe.
pub fn bytes_per_unit(row: &Row) -> Option<f64> {
    let (v, rec) = row.largest?;
    let s = rec.summary?;
    (v > 0 && s.peak_allocated_bytes > s.steady_bytes)
        .then(|| (s.peak_allocated_bytes - s.steady_bytes) as f64 / v as f64)
}

/// The ratio to the control that a limit of any size gives when the memory above the steady
/// state grows in proportion to the field: the control's [`bytes_per_unit`] over `row`'s
/// (derived; the limit and the fixed memory cancel out of `(limit − steady) / bytes`). `None`
/// for a strategy whose plan depends on the limit (a memory budget, Checkmate at the limit).
pub fn ratio_at_any_limit(rows: &[Row], row: &Row) -> Option<f64> {
    if row.config.budget.is_some() || row.config.checkmate.is_some() {
        return None;
    }
    let control = bytes_per_unit(control_row(rows, row.dim)?)?;
    Some(control / bytes_per_unit(row)?)
}

/// The report's section: per field a table of every configuration's largest value under the
/// limit, its ratio to the control (no recomputation), the first value out of memory, and the
/// peak and throughput at the largest; `None` without rows.
pub fn section(rows: &[Row], params: &SearchParams, study: &Study) -> Option<Section> {
    if rows.iter().all(|r| r.probes == 0) {
        return None;
    }
    let model = study.model?;
    let mib = |b: u64| format!("{:.1}", b as f64 / (1u64 << 20) as f64);
    let mut tables = Vec::new();
    for &dim in &params.dims {
        let (_, step) = params.range(dim);
        let mut t = Table {
            caption: format!(
                "Largest {} under {} bytes ({} MiB), {} at the profile's {} (step {step})",
                dim.noun(),
                params.limit_bytes,
                mib(params.limit_bytes),
                dim.other().as_str(),
                dim.other().of(&model)
            ),
            columns: vec![
                "strategy".into(),
                format!("largest {}", dim.as_str()),
                "ratio to no recomputation".into(),
                format!("first {} out of memory", dim.as_str()),
                "peak allocated at the largest (MiB)".into(),
                format!(
                    "above the steady state per {} at the largest, KiB (ratio at any limit, derived)",
                    dim.unit()
                ),
                "step time at the largest (s)".into(),
                if dim == Dim::Batch {
                    "samples/s at the largest".into()
                } else {
                    "tokens/s at the largest".into()
                },
                "probes".into(),
                "at the limit".into(),
            ],
            rows: Vec::new(),
            notes: Vec::new(),
        };
        for r in rows.iter().filter(|r| r.dim == dim && r.probes > 0) {
            let s = r.largest.and_then(|(_, rec)| rec.summary);
            let i = t.rows.len();
            t.rows.push(vec![
                r.config.label.clone(),
                r.largest.map_or("none".into(), |(v, _)| v.to_string()),
                ratio(rows, r).map_or("–".into(), |x| format!("{x:.2}x")),
                r.first_oom.map_or("–".into(), |v| v.to_string()),
                s.map_or("–".into(), |s| mib(s.peak_allocated_bytes)),
                match (bytes_per_unit(r), ratio_at_any_limit(rows, r)) {
                    (Some(b), Some(x)) => format!("{:.0} ({x:.2}x)", b / 1024.0),
                    (Some(b), None) => format!("{:.0}", b / 1024.0),
                    _ => "–".into(),
                },
                s.map_or("–".into(), |s| format!("{:.3}", s.median_step_s)),
                s.map_or("–".into(), |s| {
                    if dim == Dim::Batch {
                        format!("{:.2}", s.samples_per_s)
                    } else {
                        format!("{:.0}", s.tokens_per_s)
                    }
                }),
                r.probes.to_string(),
                if r.at_limit.is_empty() && !r.runs_short.is_empty() {
                    let which: Vec<String> = r
                        .runs_short
                        .iter()
                        .map(|(v, n)| format!("{v} ran {n} of {}", params.boundary_runs))
                        .collect();
                    format!("not known ({})", which.join(", "))
                } else if r.at_limit.is_empty() {
                    "–".into()
                } else {
                    r.at_limit
                        .iter()
                        .map(AtLimit::describe)
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            ]);
            let between =
                |v: usize, o: usize| r.at_limit.iter().any(|a| a.value > v && a.value < o);
            match (r.largest, r.first_oom) {
                (Some((v, _)), Some(o)) if o - v > step && !between(v, o) => t.note(
                    i,
                    1,
                    format!("not one step from the boundary yet ({v} fits, {o} does not): the search did not finish"),
                ),
                (Some(_), None) => t.note(
                    i,
                    1,
                    format!(
                        "the upper end of the search fits: the largest {} is at least this",
                        dim.noun()
                    ),
                ),
                _ => {}
            }
            if let Some((v, rec)) = r.failed {
                t.note(
                    i,
                    0,
                    format!(
                        "the probe at {v} ended {} ({}): the search stopped there",
                        rec.status.as_str(),
                        rec.reason.as_deref().unwrap_or("")
                    ),
                );
            }
        }
        tables.push(t);
    }
    let device = rows
        .iter()
        .find_map(|r| r.largest.map(|(_, rec)| rec.env.device_name.clone()))
        .unwrap_or_default();
    let best = rows
        .iter()
        .filter_map(|r| ratio(rows, r).map(|x| (x, r)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    // What caps the ratio: the fixed memory or the model (the best plan that does not depend
    // on the limit).
    let fixed_plan = rows
        .iter()
        .filter_map(|r| ratio_at_any_limit(rows, r).map(|x| (x, r)))
        .filter(|(_, r)| !r.config.control && best.is_some_and(|(_, b)| b.dim == r.dim))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let capped = fixed_plan.and_then(|(any, r)| {
        let steady = r.largest?.1.summary?.steady_bytes;
        Some(format!(
            " The steady state (parameters, optimizer state, corpus: {} MiB of the limit) does \
             not cap the ratio: above it, no recomputation holds {:.0} KiB per {} and {} {:.0} \
             KiB, so a limit of any size would give it about {any:.2}x (derived: the ratio of \
             the two, the fixed memory cancelling out): the ratio is set by what the model keeps \
             per {} (its {} blocks and its head), not by its fixed memory.",
            mib(steady),
            bytes_per_unit(control_row(rows, r.dim)?)? / 1024.0,
            r.dim.unit(),
            r.config.label,
            bytes_per_unit(r)? / 1024.0,
            r.dim.unit(),
            model.layers
        ))
    });
    Some(Section {
        title: "The largest input that fits the memory limit".into(),
        claim: "\"Significant gains: Enables 5.1x larger input sizes on real networks\" \
                (the Checkmate notes, `001_68b9d43f3f694e7a.txt`, Pros & Cons; \"5.1x larger \
                inputs: Demonstrated on ResNet, Transformer models\", Interesting Findings)."
            .into(),
        ours: match best {
            Some((x, r)) => format!(
                "Under {} bytes on {device}, the largest {} grows {x:.2}x with {} over no \
                 recomputation (each probe one real training job, out of memory as data).",
                params.limit_bytes,
                r.dim.noun(),
                r.config.label
            ) + capped.as_deref().unwrap_or(""),
            None => "The search has no finished probe of the control yet.".into(),
        },
        notes: vec![
            format!(
                "Method: per strategy and field, jobs of the study's model at the {} profile \
                 with the field set and the process's memory limited to {} bytes (the counting \
                 allocator refuses a block past it, and the job ends out of memory as on a \
                 device of that size); doubling from the profile's value, then bisection until \
                 the largest value that trains and the smallest that does not are one step \
                 apart. The limit counts everything the job process allocates: parameters, \
                 gradients, optimizer state, the corpus and the activations.",
                study.profile, params.limit_bytes
            ),
            "Strategies that plan from measured costs (the memory budgets, Checkmate) run \
             their profiling pass without the limit; the job itself runs under it. Checkmate \
             at the limit is the least recomputation whose predicted peak fits what the limit \
             leaves above the profiled steady state (where no plan is predicted to fit, the \
             least-memory plan runs and the limit decides)."
                .into(),
            format!(
                "At the limit: a boundary probe that came within {:.1}% of the limit (twice a \
                 peak's exact tolerance, max(0.1%, 64 KiB / limit): a fit whose peak is that \
                 close under it, an out-of-memory whose lower bound of the bytes it needed, \
                 the live bytes and the refused block, that close over it) runs {} times in \
                 all; a value that fits in some runs and not in others is at the limit, as is \
                 the largest value when its peak lies within its runs' spread of the limit \
                 (at least the exact tolerance; the nightly's rule). The largest value is the \
                 largest that fits in every run of it. \"Not known\": a boundary value that \
                 close, or an out-of-memory recorded without the bytes live (records made \
                 before the rule), ran fewer times.",
                near_margin(params.limit_bytes) * 100.0,
                params.boundary_runs
            ),
            "Step time and throughput are of one job at the largest value (its measured steps' \
             median), on a shared 2-core machine: they show the cost of the recomputation at \
             that size, not a benchmark."
                .into(),
            "Above the steady state per sample or sequence position (derived): (peak allocated − steady \
             state) / the largest value, of the job at the largest value; the steady state is \
             what the job holds between steps (parameters, optimizer state, corpus). The ratio \
             at any limit is the control's over the strategy's: the ratio of the largest values \
             a limit of any size gives when the memory above the steady state grows in \
             proportion to the field. It is given only for plans that do not depend on the \
             limit (not the memory budgets, planned from the job's profile, nor Checkmate at \
             the limit)."
                .into(),
        ],
        tables,
        figures: Vec::new(),
        details: None,
    })
}

/// The environment of the search's records at `study`'s profile, from its first finished
/// probe: device, backend, host, revision, the model (the searched fields at the profile's
/// values), training settings and the memory probe; `None` without a finished probe.
pub fn environment(rows: &[Row], study: &Study) -> Option<Table> {
    let rec = rows.iter().find_map(|r| r.largest.map(|(_, rec)| rec))?;
    let m = study.model?;
    let model = format!(
        "{} layers, d_model {}, {} heads, d_ff {}, vocab {}; profile's seq {}, batch {}",
        m.layers, m.d_model, m.heads, m.d_ff, rec.spec.model.vocab, m.seq_len, m.batch
    );
    Some(crate::document::environment::record_environment(
        rec,
        format!("{} profile on {}", study.profile, rec.env.device_name),
        model,
        "training per probe",
    ))
}

/// The measures a claim can name for this search: `<configuration>.largest_batch_ratio` and
/// `<configuration>.largest_seq_len_ratio`, the configuration's largest value over the
/// control's (x).
pub fn measure(rows: &[Row], name: &str) -> Option<Measure> {
    use memwall_core::spec::claims::TrainingMetric;
    let (config, metric) = name.rsplit_once('.')?;
    let (dim, training) = match metric {
        "largest_batch_ratio" => (Dim::Batch, TrainingMetric::LargestBatchRatio),
        "largest_seq_len_ratio" => (Dim::SeqLen, TrainingMetric::LargestSeqLenRatio),
        _ => return None,
    };
    let row = rows
        .iter()
        .find(|r| r.dim == dim && r.config.name == config)?;
    Some(Measure::new(
        name,
        ratio(rows, row)?,
        "x",
        2,
        training.provenance(),
    ))
}

/// The glance rows of `study`'s claims answered from the search's `rows`.
pub fn glance(study: &Study, rows: &[Row]) -> Vec<GlanceRow> {
    use crate::document::glance::{rows as glance_rows, Answer};
    let device = rows
        .iter()
        .find_map(|r| r.largest.map(|(_, rec)| rec.env.device_name.clone()))
        .unwrap_or_else(|| "no device yet".into());
    // What was searched, for a claim about another size ([`Answer::at_profile`]).
    let limit = params(study).ok().flatten().map(|p| p.limit_bytes);
    let setting = match (study.model, limit) {
        (Some(m), Some(l)) => format!(
            "{} layers, {:.2}M parameters, under a {} MiB limit",
            m.layers,
            m.parameter_count() as f64 / 1e6,
            l >> 20
        ),
        _ => "a scaled-down model".into(),
    };
    let mut glance = glance_rows(
        &study.claims,
        &format!("{device}, {} profile", study.profile),
        |c| match measure(rows, &c.measure) {
            Some(m) if m.value.is_finite() => {
                Answer::Measured(m).at_profile(c, study.profile.as_str(), &setting)
            }
            _ => Answer::Missing(format!(
                "`{}` has no value: the search of that configuration or of the control has no \
                 finished probe",
                c.measure
            )),
        },
    );
    crate::document::glance::fill_provenance(
        &mut glance,
        &study.claims,
        memwall_core::spec::claims::SourceClaim::training_provenance,
    );
    glance
}
