//! The fusion study's report sections from a stored result: the IR pass, the loops and the
//! Burn chains, each beside the post's claim.

use super::*;

/// The study's sections: the fusion pass, the loops, the Burn chains.
pub fn sections(r: &FusionResult, cited: &Cited<CiteAs>) -> Vec<Section> {
    let src = cited.src();
    let mut out = vec![
        render_ir(r, &src),
        render_loops(r, &src),
        render_burn(r, &src),
    ];
    out.extend(r.matmul.as_ref().map(|mm| render_matmul(r, mm, &src)));
    out
}

/// The matrix product's chain `A·B + C`: the post's "classic example" beside our timings of
/// the product with a separate add and with the add fused into the product.
fn render_matmul(r: &FusionResult, mm: &MatmulChain, src: &str) -> Section {
    let (m, n, k) = (mm.m, mm.n, mm.k);
    let (bu, bf) = (mm.unfused_bytes_per_element, mm.fused_bytes_per_element);
    let (tu, tf) = (mm.unfused_s, mm.fused_s);
    let gflops = |t: f64| mm.flops() / t / 1e9;
    let mib = (m * n * F32_BYTES) as f64 / (1024.0 * 1024.0);
    let row = |variant: &str, bytes: usize, t: f64, vs: f64| {
        vec![
            variant.to_string(),
            bytes.to_string(),
            format!("{:.2}", t * 1e3),
            format!("{:.1}", gflops(t)),
            format!("{vs:.2}"),
        ]
    };
    Section {
        details: None,
        title: "A matrix product with its elementwise epilogue".into(),
        claim: format!(
            "{src}, section Demos / User-Driven Kernel Fusion, after the `add_and_multiply` example: \"While this example is small, the classic example for kernel \
             fusion involves linear algebra and sequential matrix operations. Data for these operations can measure in gigabytes and utilize secondary memory.\" \
             The post runs no such example."
        ),
        ours: format!(
            "`A·B + C` with A {m} x {k}, B {k} x {n} and C {m} x {n} (f32, a {mib:.0} MiB output; one thread, median of {}): {:.2} ms as the product into a temporary \
             and a separate add ({bu} B per output element beyond the product's operands), {:.2} ms with the add fused into the product, which accumulates into C \
             ({bf} B): {:.2}x. {}",
            r.params.repeats,
            tu * 1e3,
            tf * 1e3,
            tu / tf,
            if mm.max_abs_diff == 0.0 {
                "The two outputs are bit-identical: the fused product adds C to each finished sum, one rounding as the separate add.".to_string()
            } else {
                format!(
                    "The two outputs differ by at most {:.1e} (largest |value| {:.1}).",
                    mm.max_abs_diff, mm.max_abs
                )
            }
        ),
        notes: vec![
            "Both variants call the gemm crate (0.19, the one Burn's flex backend multiplies with) on one thread: unfused with `read_dst = false` into a \
             temporary, then a loop adding C; fused with `read_dst = true` into C itself, BLAS's C := C + A·B. Buffers are allocated before timing. The product's \
             own operand traffic and its 2mnk FLOPs are the same in both; the inner dimension is small so that the epilogue's traffic is a visible share of the time \
             (at a large inner dimension the product's arithmetic hides it)."
                .into(),
        ],
        tables: vec![Table {
            caption: format!("A·B + C at {m} x {n} x {k}, f32, one thread, median of {} runs", r.params.repeats),
            columns: vec![
                "Variant".into(),
                "Bytes per output element beyond the operands".into(),
                "Time (ms)".into(),
                "GFLOP/s of the product".into(),
                "Slowdown vs fused (x)".into(),
            ],
            rows: vec![
                row("product, then a separate add", bu, tu, tu / tf),
                row("product accumulating into C (fused)", bf, tf, 1.0),
            ],
            notes: Vec::new(),
        }],
        figures: vec![],
    }
}

/// The fusion pass: the post's claim beside the graphs before and after our pass.
fn render_ir(r: &FusionResult, src: &str) -> Section {
    let ir = &r.ir;
    let (g, f, f2) = (&ir.unfused_graph, &ir.fused_graph, &ir.fused_apb_c_graph);
    let (ku, kf, mismatches) = (ir.unfused_kernels, ir.fused_kernels, ir.mismatches);
    Section {
        details: None,
        title: "Fusion pass on a tiny IR".into(),
        claim: format!(
            "{src}, section Demos / Compiler-Driven Kernel Fusion: \"When an operator immediately consumes the output from the one preceding it, it could be \
             advantageous to fuse the operations rather than storing and subsequently collecting the data.\" The post declares a tiny IR (`VarA`, `VarB`, `VarC`, \
             `Const`, `Add`, `Mult`, `FusedOp`) for `a + b * c + 1`, parses the expression into a DAG, and would \"apply a function to recursively traverse the tree. \
             That could transform the original graph into the following:\" the graphs before and after are shown only as images (\"Before Fusion\", \"After Fusion\"); \
             the pass itself is in the post's linked repository, not in its text."
        ),
        ours: format!(
            "Our pass turns the {}-node graph of `a + b*c + 1` ({ku} elementwise kernels) into {} nodes with one FusedOp ({kf} kernel): `{}`. Evaluated over {} random f32 \
             elements, fused and unfused outputs are bit-identical ({mismatches} mismatches); the same holds for `(a + b)*c` (`{}`).",
            g.nodes.len(), f.nodes.len(), f.label(f.output), r.params.ir_n, f2.label(f2.output)
        ),
        notes: vec![
            "Fusion rule: an Add/Mul child is absorbed into its consumer when it is elementwise and has exactly one consumer; a node with several consumers stays \
             materialized and becomes an input of the fused ops that read it. Constants become inputs of the FusedOp (broadcast scalars), as the post's \
             `explicit FusedOp(std::vector<std::shared_ptr<Node>> in);` takes its inputs as nodes. The fused body evaluates the same operations in the same order, hence identical rounding."
                .into(),
        ],
        tables: vec![],
        figures: vec![
            g.figure("fusion_dag_before", "a + b*c + 1 before fusion"),
            f.figure("fusion_dag_after", "a + b*c + 1 after fusion"),
        ],
    }
}

/// The loops' table rows (unfused, fused per chain) and the summary phrase of each chain.
fn loop_rows(r: &FusionResult) -> (Vec<Vec<String>>, Vec<String>) {
    let n = r.params.n;
    let floor = FLOOR_BYTES_PER_ELEMENT;
    let gbs = |bytes: usize, t: f64| bytes as f64 * n as f64 / t / 1e9;
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for l in &r.loops.chains {
        let name = l.chain.label();
        let (bu, bf) = (l.unfused_bytes_per_element, l.fused_bytes_per_element);
        let (tu, tf) = (l.unfused_s, l.fused_s);
        rows.push(vec![
            name.into(),
            "unfused".into(),
            bu.to_string(),
            format!("{:.2}", bu as f64 / floor as f64),
            format!("{:.2}", tu * 1e3),
            format!("{:.1}", gbs(bu, tu)),
            format!("{:.2}", tu / tf),
        ]);
        rows.push(vec![
            name.into(),
            "fused".into(),
            bf.to_string(),
            format!("{:.2}", bf as f64 / floor as f64),
            format!("{:.2}", tf * 1e3),
            format!("{:.1}", gbs(bf, tf)),
            "1.00".into(),
        ]);
        summary.push(format!(
            "`{name}`: {:.2} ms unfused vs {:.2} ms fused ({:.2}x, {bu} vs {bf} B/element)",
            tu * 1e3,
            tf * 1e3,
            tu / tf
        ));
    }
    (rows, summary)
}

/// The loops: the post's claim beside our timings and bytes per element.
fn render_loops(r: &FusionResult, src: &str) -> Section {
    let (p, n, cores) = (&r.params, r.params.n, r.loops.cores);
    let (rows, summary) = loop_rows(r);
    let bytes = |f: fn(&LoopChain) -> usize| -> Vec<f64> {
        r.loops.chains.iter().map(|l| f(l) as f64).collect()
    };
    Section {
        details: None,
        title: "Fused versus unfused elementwise loops".into(),
        claim: format!(
            "{src}, section Background / Kernel Fusion: fusion \"combines multiple operations into a single environment or context, instead of executing them sequentially \
             and reading/writing temporary values to secondary memory after each one\"; section Demos / User-Driven Kernel Fusion, for `(5 + 3) * 10`: combining \
             the add and the multiply into a single operation removes \"the need to allocate memory and read/write to it\"."
        ),
        ours: format!(
            "On {n} f32 elements per array (single thread on a {cores}-core CPU, median of {}): {}. Fused loops move exactly the one-read-per-input, one-write floor of 16 B/element.",
            p.repeats,
            summary.join("; ")
        ),
        notes: vec![
            "Bytes per element count the loads and stores each loop performs (4 B per f32 access). Intermediate buffers are allocated once before timing (as a \
             caching allocator would), so the timings measure memory traffic, not allocation or page faults. With write-allocate caches each store also reads its \
             line first, so DRAM traffic is higher than the counted bytes for both variants; the GB/s column uses counted bytes."
                .into(),
            "The floor is 16 B/element: three 4-byte inputs read once and one 4-byte output written once. Both loops are memory-bound on arrays this large, so the \
             speed-up tracks the ratio of bytes moved."
                .into(),
        ],
        tables: vec![Table {
            caption: format!("Elementwise expressions over {n} f32 elements, median of {} runs", p.repeats),
            columns: vec!["Expression".into(), "Variant".into(), "Bytes/element".into(), "x floor (16 B)".into(), "Time (ms)".into(), "Counted GB/s".into(), "Slowdown vs fused (x)".into()],
            rows,
            notes: Vec::new(),
        }],
        figures: vec![bar_figure(
            r,
            "fusion_bytes_per_element",
            "Bytes moved per element: unfused kernels vs one fused kernel",
            "bytes per element",
            vec![
                ("unfused", bytes(|l| l.unfused_bytes_per_element)),
                ("fused (floor)", bytes(|l| l.fused_bytes_per_element)),
            ],
        )],
    }
}

/// The Burn table's row for one chain on flex.
fn flex_row(l: &LoopChain, f: &BurnChain) -> Vec<String> {
    let ops_bytes = l.unfused_bytes_per_element as f64;
    vec![
        l.chain.label().into(),
        "Burn flex (CPU), one kernel per op".into(),
        format!("{ops_bytes:.0}"),
        format!("{:.2}", ops_bytes / FLOOR_BYTES_PER_ELEMENT as f64),
        fmt_opt_bytes(f.alloc_bytes_per_element),
        format!("{:.2}", f.time_s * 1e3),
        format!("{:.2}", f.time_s / l.fused_s),
        format!("{:.1e}", f.max_abs_diff),
    ]
}

/// The Burn table's rows for one chain on CUDA: without fusion, then with it.
fn cuda_rows(l: &LoopChain, dev: &str, fused: &BurnChain, unfused: &BurnChain) -> [Vec<String>; 2] {
    let ops_bytes = l.unfused_bytes_per_element as f64;
    [
        vec![
            l.chain.label().into(),
            format!("Burn CUDA without fusion ({dev})"),
            format!("{ops_bytes:.0}"),
            format!("{:.2}", ops_bytes / FLOOR_BYTES_PER_ELEMENT as f64),
            "–".into(),
            format!("{:.3}", unfused.time_s * 1e3),
            "–".into(),
            format!("{:.1e}", unfused.max_abs_diff),
        ],
        vec![
            l.chain.label().into(),
            format!("Burn CUDA with fusion ({dev})"),
            format!("{FLOOR_BYTES_PER_ELEMENT} (floor, if fully fused)"),
            "1.00".into(),
            "–".into(),
            format!("{:.3}", fused.time_s * 1e3),
            "–".into(),
            format!("{:.1e}", fused.max_abs_diff),
        ],
    ]
}

/// The Burn table's rows (flex, then CUDA when measured, per chain) and the summary phrases.
fn burn_rows(r: &FusionResult) -> (Vec<Vec<String>>, Vec<String>) {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let cuda = r.burn.cuda_shown().ok().map(|(c, _)| c);
    for (i, (l, f)) in r.loops.chains.iter().zip(&r.burn.flex).enumerate() {
        let name = l.chain.label();
        rows.push(flex_row(l, f));
        summary.push(format!(
            "`{name}` on flex {:.2} ms ({:.2}x our fused loop, {} B/element allocated)",
            f.time_s * 1e3,
            f.time_s / l.fused_s,
            fmt_opt_bytes(f.alloc_bytes_per_element)
        ));
        let Some(cuda) = cuda else { continue };
        if let (Some(fu), Some(un)) = (cuda.fused.get(i), cuda.unfused.get(i)) {
            rows.extend(cuda_rows(l, &cuda.device, fu, un));
            summary.push(format!(
                "`{name}` on CUDA {:.3} ms unfused vs {:.3} ms fused ({:.2}x)",
                un.time_s * 1e3,
                fu.time_s * 1e3,
                un.time_s / fu.time_s
            ));
        }
    }
    (rows, summary)
}

/// The Burn section's figures: CPU time per chain, and Burn on CUDA when measured.
fn burn_figures(r: &FusionResult) -> Vec<Figure> {
    let n = r.params.n;
    fn ms(seconds: impl Iterator<Item = f64>) -> Vec<f64> {
        seconds.map(|s| s * 1e3).collect()
    }
    let loops = &r.loops.chains;
    let mut figures = vec![bar_figure(
        r,
        "fusion_cpu_time",
        &format!("CPU time per chain over {n} elements"),
        "time (ms)",
        vec![
            ("unfused loops", ms(loops.iter().map(|l| l.unfused_s))),
            ("fused loop", ms(loops.iter().map(|l| l.fused_s))),
            ("Burn flex", ms(r.burn.flex.iter().map(|f| f.time_s))),
        ],
    )];
    if let Ok((cuda, run)) = r.burn.cuda_shown() {
        let n = run.map_or(n, |run| run.n);
        figures.push(bar_figure(
            r,
            "fusion_cuda_time",
            &format!("Burn on {}: time per chain over {n} elements", cuda.device),
            "time (ms)",
            vec![
                ("without fusion", ms(cuda.unfused.iter().map(|c| c.time_s))),
                ("with fusion", ms(cuda.fused.iter().map(|c| c.time_s))),
            ],
        ));
    }
    figures
}

/// The Burn chains: the post's claim beside Burn's times on flex (and CUDA when measured).
fn render_burn(r: &FusionResult, src: &str) -> Section {
    let (p, n) = (&r.params, r.params.n);
    let (rows, summary) = burn_rows(r);
    Section {
        details: None,
        title: "Elementwise chains as Burn tensor ops".into(),
        claim: format!(
            "{src}, section Background / Kernel Fusion: fusion avoids \"executing them sequentially and reading/writing temporary values to secondary memory \
             after each one\", and \"just as spawning subprocess involves overhead components, so too does a kernel, meaning fusion reduces these costs as well\". \
             (The post names no framework and gives no number; the bytes-per-element floor below, one read of each input and one write of the output, is \
             memwall's model.)"
        ),
        ours: format!(
            "The same arrays ({n} f32 each) through Burn 0.21, median of {}: {}. {}",
            p.repeats,
            summary.join("; "),
            match r.burn.cuda_shown() {
                Ok((_, None)) => "On CUDA, Burn's fusion backend may run each chain as one kernel (16 B/element); the times show how close it comes.".to_string(),
                Ok((cuda, Some(run))) => format!(
                    "On CUDA, Burn's fusion backend may run each chain as one kernel (16 B/element); the times show how close it comes. {}",
                    imported_provenance(p, cuda, run)
                ),
                Err(why) => format!(
                    "Burn's kernel fusion exists only for its CubeCL backends (CUDA here); no GPU measurement in this run: {why}."
                ),
            }
        ),
        notes: vec![
            "Bytes/element moved count each kernel's 4-byte loads and stores: unfused `(a+b)*c` is two kernels (`a+b`: 2 loads, 1 store; `t*c`: 2 loads, 1 store) = 24 B, \
             unfused `a+b*c+1` three kernels = 32 B; a fused kernel moves the 16 B floor. Allocated bytes are the counting allocator's high-water mark above the \
             bytes live before the chain, per element, output included: flex reuses a temporary's buffer in place when it is the only reference, so an \
             unfused chain can allocate no more than its output while still moving every byte."
                .into(),
            "Results agree with the fused loop to the listed maximum absolute difference (the operations and their order are the same)."
                .into(),
        ],
        tables: vec![Table {
            caption: burn_caption(r),
            columns: vec![
                "Expression".into(),
                "Backend".into(),
                "Bytes/element moved".into(),
                "x floor (16 B)".into(),
                "Allocated B/element".into(),
                "Time (ms)".into(),
                "x our fused loop".into(),
                "Max abs. difference".into(),
            ],
            rows,
            notes: Vec::new(),
        }],
        figures: burn_figures(r),
    }
}

/// Where imported CUDA rows come from: the device, the slim runner's run from a GPU bundle
/// (date, revision), its size, and whether its arrays are this record's.
fn imported_provenance(p: &FusionParams, cuda: &CudaChains, run: &FusionChainsRun) -> String {
    let arrays = if run.n == p.n && run.ir_n == p.ir_n {
        "the same arrays as the rows above (the study's generator)".to_string()
    } else {
        format!(
            "the study's generator at n = {}, ir_n = {} (this record's CPU rows: n = {}, ir_n = {}, so the arrays differ)",
            run.n, run.ir_n, p.n, p.ir_n
        )
    };
    format!(
        "The CUDA rows were measured on {} by the slim runner (`memwall-job fusion-chains`, revision {}, Burn {}) from a GPU bundle on {}, \
         imported as `{CUDA_CHAINS_FILE}`: {} f32 elements per array, median of {}, over {arrays}; the other rows come from this record.",
        cuda.device,
        run.runner_revision,
        run.burn_version,
        run.date(),
        run.n,
        run.repeats
    )
}

/// The Burn table's caption: the record's size and repeats, and the imported CUDA run's where
/// they differ.
fn burn_caption(r: &FusionResult) -> String {
    let p = &r.params;
    let mut caption = format!(
        "Burn tensor ops over {} f32 elements, median of {} runs",
        p.n, p.repeats
    );
    if let Ok((_, Some(run))) = r.burn.cuda_shown() {
        if (run.n, run.repeats) != (p.n, p.repeats) {
            caption.push_str(&format!(
                " (CUDA rows: {} elements, median of {}, from a GPU bundle)",
                run.n, run.repeats
            ));
        }
    }
    caption
}

/// Grouped bars over the chains of `r` (one group per chain), one series per variant.
fn bar_figure(
    r: &FusionResult,
    name: &str,
    title: &str,
    y_label: &str,
    series: Vec<(&str, Vec<f64>)>,
) -> Figure {
    let groups: Vec<String> = r
        .loops
        .chains
        .iter()
        .map(|l| l.chain.label().into())
        .collect();
    Figure::grouped_bars(
        name,
        title,
        "expression",
        y_label,
        &groups,
        series
            .into_iter()
            .map(|(label, ys)| (label.to_string(), ys))
            .collect(),
    )
}

/// An optional per-element byte count with one decimal, or a dash.
fn fmt_opt_bytes(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".into())
}
