//! The 16-bit study's report sections from a stored result: the formats and the accumulation,
//! each beside the lecture's claim.

use super::*;

/// The study's sections: the formats and their range, then accumulation.
pub fn sections(r: &PrecisionResult, cited: &Cited<CiteAs>) -> Vec<Section> {
    let src = cited.src();
    vec![formats_section(r, &src), accumulation_section(r, &src)]
}

fn sci(x: f64) -> String {
    format!("{x:.6e}")
}

/// The lecture's fp16-versus-bf16 claim beside the formats' properties and the range demo.
fn formats_section(r: &PrecisionResult, src: &str) -> Section {
    let (p, q) = (&r.params, &r.range);
    let (a, g) = (p.activation, p.small_gradient);
    let (f16i, bfi) = (&r.formats[1], &r.formats[2]);
    Section {
        details: None,
        title: "16-bit floating-point formats".into(),
        claim: format!(
            "{src}, slide \"16bit Floating Points\": its two 16-bit layouts are labelled \"More fraction bits\" and \"Less easy to overflow\" (the figure, \
             not the text, shows that the first is fp16 and the second bf16)."
        ),
        ours: format!(
            "f16 has 1/{}/{} bits, max {}, epsilon 2^{} ({:.2} digits); bf16 has 1/{}/{} bits, max {:.4e} (the f32 range), epsilon 2^{} ({:.2} digits). \
             {a}^2 = {} in f16 and {} in bf16; a gradient of {g:e} becomes {:e} in f16 and {:e} in bf16.",
            f16i.exp_bits, f16i.man_bits, f16i.max, f16i.eps.log2(), f16i.decimal_digits(), bfi.exp_bits, bfi.man_bits, bfi.max, bfi.eps.log2(), bfi.decimal_digits(),
            q.activation_squared_f16, q.activation_squared_bf16, q.gradient_f16, q.gradient_bf16
        ),
        notes: vec![
            "Each row is checked against the value derived from the bit layout (bias 2^(e-1) - 1; max = (2 - 2^-m) 2^bias; smallest normal 2^(1-bias); smallest subnormal \
             2^(1-bias-m); epsilon 2^-m); decimal digits = (m + 1) log10 2."
                .into(),
            "Overflow/underflow rows: products are computed in the 16-bit type (the half crate rounds the exact result to the format). Loss scaling multiplies the loss, \
             hence every gradient, by a constant before the 16-bit backward and divides afterwards in f32."
                .into(),
        ],
        tables: vec![formats_table(&r.formats), range_table(r)],
        figures: vec![formats_figure(&r.formats)],
    }
}

/// Bits, range, epsilon and digits per format.
fn formats_table(fs: &[FormatInfo]) -> Table {
    Table {
        caption: "Floating-point formats (computed from the half crate / f32 constants; equal to the values derived from the bit layout)".into(),
        columns: vec!["Format".into(), "Sign/exponent/mantissa bits".into(), "Largest finite".into(), "Smallest normal".into(), "Smallest subnormal".into(), "Machine epsilon".into(), "Decimal digits".into()],
        rows: fs
            .iter()
            .map(|f| vec![f.name.clone(), format!("1/{}/{}", f.exp_bits, f.man_bits), sci(f.max), sci(f.min_normal), sci(f.min_subnormal), format!("{} = 2^{}", sci(f.eps), f.eps.log2()), format!("{:.2}", f.decimal_digits())])
            .collect(),
        notes: Vec::new(),
    }
}

/// The squared activation, the small gradient and the loss-scaled gradient per format.
fn range_table(r: &PrecisionResult) -> Table {
    let (p, q) = (&r.params, &r.range);
    let (a, g) = (p.activation, p.small_gradient);
    let rows = vec![
        vec![
            format!("activation^2, x = {a}"),
            format!("{}", q.activation_squared_f32),
            format!("{}", q.activation_squared_f16),
            format!("{}", q.activation_squared_bf16),
        ],
        vec![
            format!("gradient {g:e}"),
            format!("{g:e}"),
            format!("{:e}", q.gradient_f16),
            format!("{:e}", q.gradient_bf16),
        ],
        vec![
            format!("gradient x loss scale {}", p.loss_scale),
            format!("{:e}", q.scaled_gradient_f32),
            format!(
                "{:e} (/{} = {:e})",
                q.scaled_gradient_f16, p.loss_scale, q.unscaled_gradient_f16
            ),
            format!("{:e}", q.scaled_gradient_bf16),
        ],
    ];
    Table {
        caption: "Overflow and underflow of realistic values".into(),
        columns: vec!["Quantity".into(), "f32".into(), "f16".into(), "bf16".into()],
        rows,
        notes: Vec::new(),
    }
}

/// log2 of the largest finite, smallest normal and subnormal values and epsilon, per format.
fn formats_figure(fs: &[FormatInfo]) -> Figure {
    let log2_of =
        |v: fn(&FormatInfo) -> f64| -> Vec<f64> { fs.iter().map(|f| v(f).log2()).collect() };
    Figure::grouped_bars(
        "format_range",
        "Range and precision of f32, f16 and bf16 (log2)",
        "format",
        "log2 of the value",
        &fs.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        vec![
            ("largest finite".into(), log2_of(|f| f.max)),
            ("smallest normal".into(), log2_of(|f| f.min_normal)),
            ("smallest subnormal".into(), log2_of(|f| f.min_subnormal)),
            ("machine epsilon".into(), log2_of(|f| f.eps)),
        ],
    )
}

/// The lecture's aggregation claim beside the sums of 0.01 per accumulator.
fn accumulation_section(r: &PrecisionResult, src: &str) -> Section {
    let n = r.params.sum_entries;
    let exact_small = r.repeated.mixed_exact;
    let summary: Vec<String> = r
        .repeated
        .accumulators
        .iter()
        .map(|s| format!("{} {:.2}", s.accumulator, s.sum))
        .collect();
    let mixed: Vec<String> = [&r.repeated, &r.uniform]
        .iter()
        .map(|ds| format!("{:.4}% ({})", mixed_error_pct(ds), ds.data))
        .collect();
    Section {
        details: None,
        title: "Aggregation of many entries in 16-bit accumulators".into(),
        claim: format!(
            "{src}, slide \"Mixed Precision\", its three bullets: \"Some layers are more sensitive to dynamic range\"; \"Common issues: aggregation of a lot of \
             entries\"; \"Mixed precision: different input/output/accumulation types\"."
        ),
        ours: format!(
            "Summing {n} entries of 0.01 sequentially (exact: {exact_small:.2} for the f16-rounded inputs) gives {}: a 16-bit accumulator stalls once its spacing exceeds twice \
             the addend, while f16 inputs with an f32 accumulator stay within {} of the exact sum.",
            summary.join(", "),
            mixed.join(" and ")
        ),
        notes: vec![
            "Accumulators round after every addition (sequential reduction, as a naive kernel would). The exact reference sums the same input values (after rounding them to \
             the accumulator's format) in f64."
                .into(),
        ],
        tables: vec![accumulation_table(r)],
        figures: vec![running_sum_figure(r)],
    }
}

/// Result, exact sum and relative error per data set and accumulation.
fn accumulation_table(r: &PrecisionResult) -> Table {
    let mut rows = Vec::new();
    for ds in [&r.repeated, &r.uniform] {
        for s in &ds.accumulators {
            let rel = (s.sum - s.exact).abs() / s.exact;
            rows.push(vec![
                ds.data.clone(),
                format!("{} accumulator", s.accumulator),
                format!("{:.4}", s.sum),
                format!("{:.4}", s.exact),
                format!("{:.2}%", rel * 100.0),
            ]);
        }
        let (s, ex) = (ds.mixed_sum, ds.mixed_exact);
        rows.push(vec![
            ds.data.clone(),
            "f16 inputs, f32 accumulator".into(),
            format!("{s:.4}"),
            format!("{ex:.4}"),
            format!("{:.4}%", mixed_error_pct(ds)),
        ]);
    }
    Table {
        caption: format!("Sequential sums of {} entries", r.params.sum_entries),
        columns: vec![
            "Data".into(),
            "Accumulation".into(),
            "Result".into(),
            "Exact".into(),
            "Relative error".into(),
        ],
        rows,
        notes: Vec::new(),
    }
}

/// Running sum of the 0.01 entries per accumulator, beside the exact line.
fn running_sum_figure(r: &PrecisionResult) -> Figure {
    let n = r.params.sum_entries;
    let exact_small = r.repeated.mixed_exact;
    let mut series: Vec<Series> = r
        .repeated
        .accumulators
        .iter()
        .map(|s| {
            Series::line(
                format!("{} accumulator", s.accumulator),
                s.running_sums.clone(),
            )
        })
        .collect();
    series.push(Series::line(
        "exact",
        vec![(1.0, exact_small / n as f64), (n as f64, exact_small)],
    ));
    Figure {
        name: "accumulator_running_sum".into(),
        title: format!("Running sum of {n} x 0.01 by accumulator type"),
        x_label: "entries summed".into(),
        y_label: "running sum".into(),
        log_x: true,
        log_y: true,
        series,
        ..Default::default()
    }
}
