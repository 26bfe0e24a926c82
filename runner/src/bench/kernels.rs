//! Kernel time on CUDA: each kernel of a step grouped by category, read from CubeCL's profile
//! log of a child process.

use super::*;

/// The kernel category of a CubeCL kernel's name (the first part of the profiling log's
/// name: the kernel's type without its module path, e.g. `KernelBinop`, `Matmul`,
/// `ElemwiseFuse`, `ReduceKernel`).
pub fn category(kernel: &str) -> &'static str {
    let k = kernel.to_ascii_lowercase().replace('_', "");
    let has = |words: &[&str]| words.iter().any(|w| k.contains(w));
    if has(&["matmul", "gemm", "gemv", "mma"]) {
        "matmul"
    } else if has(&["attention"]) {
        "attention kernel"
    } else if has(&["fuse", "fused"]) {
        "fused (Burn fusion)"
    } else if has(&["reduce", "sum", "argmax", "argmin", "cumulative"]) {
        "reduction"
    } else if has(&["cast"]) {
        "cast"
    } else if has(&[
        "contiguous",
        "copy",
        "slice",
        "repeat",
        "flip",
        "cat",
        "permute",
    ]) {
        "layout (copy, slice)"
    } else if has(&["gather", "scatter", "select", "index"]) {
        "gather / scatter"
    } else if has(&["mask"]) {
        "mask"
    } else if has(&["full", "prng", "random", "fill"]) {
        "fill / random"
    } else if has(&[
        "binop",
        "unary",
        "scalar",
        "cmp",
        "predicate",
        "clamp",
        "elemwise",
    ]) {
        "elementwise"
    } else {
        "other"
    }
}

/// A `Duration` as Rust's `Debug` prints it (`850ns`, `12.3µs`, `1.25ms`, `2.5s`), in seconds.
pub(super) fn parse_debug_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = s.strip_suffix("µs").or_else(|| s.strip_suffix("us")) {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return None;
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(|v| v * scale)
}

/// The profiled kernels of a CubeCL profiling log: one `(kernel, seconds)` per line
/// `| <duration> | <name>[ | <generics>...]` (`cubecl-runtime`'s `ServerLogger`); the summary
/// tables it prints at each synchronization (`| <name> | <duration> | <count> | <ratio> |`) and
/// other lines are skipped.
pub fn parse_profile_log(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix('|')?;
            let mut cells = rest.split('|');
            let seconds = parse_debug_duration(cells.next()?)?;
            let name = cells.next()?.trim();
            (!name.is_empty()).then(|| (name.to_string(), seconds))
        })
        .collect()
}

/// Rows of one profiled step from its kernels: one per category (`op` = `kernels`, `name` the
/// category; plus a `total` row) and one per kernel name (`op` = `kernel`, `name`
/// `<category>/<kernel>`), largest time first.
pub(super) fn kernel_rows(
    base: &AttributionRow,
    kernels: &[(String, f64)],
    step_s: f64,
) -> Vec<AttributionRow> {
    use std::collections::BTreeMap;
    let mut by_category: BTreeMap<&str, (f64, u64)> = BTreeMap::new();
    let mut by_kernel: BTreeMap<(&str, &str), (f64, u64)> = BTreeMap::new();
    for (name, s) in kernels {
        let c = category(name);
        let e = by_category.entry(c).or_default();
        e.0 += s;
        e.1 += 1;
        let e = by_kernel.entry((c, name.as_str())).or_default();
        e.0 += s;
        e.1 += 1;
    }
    let total: f64 = kernels.iter().map(|(_, s)| s).sum();
    let row = |op: &str, name: String, s: f64, launches: u64, note: String| AttributionRow {
        op: op.into(),
        name,
        status: if s > 0.0 {
            AttributionStatus::Ok
        } else {
            AttributionStatus::Failed
        },
        median_s: Some(s),
        repeats: 1,
        kernel_launches: Some(launches),
        note: Some(note),
        ..base.clone()
    };
    let mut rows = vec![row(
        "kernels",
        "total".into(),
        total,
        kernels.len() as u64,
        format!(
            "sum of the profiled kernels of one training step (each kernel timed between two \
             stream synchronizations); the step took {:.3} ms of wall time under profiling",
            step_s * 1e3
        ),
    )];
    let mut categories: Vec<_> = by_category.into_iter().collect();
    categories.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    for (c, (s, n)) in categories {
        rows.push(row(
            "kernels",
            c.into(),
            s,
            n,
            format!("{:.1}% of the profiled kernel time", 100.0 * s / total),
        ));
    }
    let mut names: Vec<_> = by_kernel.into_iter().collect();
    names.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    for ((c, k), (s, n)) in names {
        rows.push(row(
            "kernel",
            format!("{c}/{k}"),
            s,
            n,
            format!("{:.1}% of the profiled kernel time", 100.0 * s / total),
        ));
    }
    rows
}

/// Waits until the file at `path` stops growing (CubeCL's logger writes from its own thread):
/// unchanged for half a second, or two minutes at most. Returns its length.
pub(super) fn wait_quiet(path: &Path) -> u64 {
    let len = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let mut last = len();
    let mut still = 0;
    while still < 5 && started.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = len();
        if now == last {
            still += 1;
        } else {
            still = 0;
            last = now;
        }
    }
    last
}
