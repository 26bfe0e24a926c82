use super::*;

#[test]
fn profile_log_lines_are_kernels_and_summaries_are_skipped() {
    let log = "\
| 12.5µs     | KernelBinop | CudaRuntime | f32\n\
| 1.25ms     | Matmul | CudaRuntime | bf16\n\
| 850ns      | CastElement | f32 | bf16\n\
|⎺⎺⎺⎺⎺⎺⎺⎺| \n\
| Name        | Duration | Num Computed | Ratio |\n\
| Matmul      | 1.25ms   | 1            | 98 %  |\n\
| Total       | 1.26ms   | 3            | 100 % |\n\
Executing Foo\n";
    let k = parse_profile_log(log);
    assert_eq!(
        k.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["KernelBinop", "Matmul", "CastElement"]
    );
    assert!((k[0].1 - 12.5e-6).abs() < 1e-12);
    assert!((k[1].1 - 1.25e-3).abs() < 1e-12);
    assert!((k[2].1 - 850e-9).abs() < 1e-15);
    assert_eq!(parse_debug_duration("2s"), Some(2.0));
    assert_eq!(parse_debug_duration("Total"), None);
}

#[test]
fn kernels_fall_into_categories() {
    assert_eq!(category("Matmul"), "matmul");
    assert_eq!(category("GemvPlaneParallel"), "matmul");
    assert_eq!(category("ElemwiseFuse"), "fused (Burn fusion)");
    assert_eq!(category("ReduceKernel"), "reduction");
    assert_eq!(category("CastElement"), "cast");
    assert_eq!(category("IntoContiguousKernel"), "layout (copy, slice)");
    assert_eq!(category("KernelBinop"), "elementwise");
    assert_eq!(category("MaskFillKernel"), "mask");
    assert_eq!(category("GatherKernel"), "gather / scatter");
    assert_eq!(category("Something"), "other");
}

#[test]
fn kernel_rows_sum_by_category() {
    let base = AttributionRow {
        format: ATTRIBUTION_FORMAT.into(),
        framework: "burn".into(),
        framework_version: crate::BURN_VERSION.into(),
        backend: "cuda".into(),
        device: "GPU".into(),
        op: "kernels".into(),
        name: "total".into(),
        shape: vec![2, 8],
        dtype: "bf16".into(),
        pass: "step".into(),
        status: AttributionStatus::Failed,
        reason: None,
        median_s: None,
        repeats: 0,
        flops: None,
        tflops: None,
        bytes: None,
        calls_per_step: None,
        kernel_launches: None,
        note: None,
        model: memwall_core::spec::ModelConfig {
            layers: 1,
            d_model: 8,
            heads: 2,
            d_ff: 16,
            seq_len: 8,
            batch: 2,
            vocab: 300,
            tie_embeddings: true,
        },
    };
    let kernels = vec![
        ("Matmul".to_string(), 3e-3),
        ("KernelBinop".to_string(), 1e-3),
        ("Matmul".to_string(), 2e-3),
    ];
    let rows = kernel_rows(&base, &kernels, 7e-3);
    assert_eq!(rows[0].name, "total");
    assert_eq!(rows[0].kernel_launches, Some(3));
    assert!((rows[0].median_s.unwrap() - 6e-3).abs() < 1e-12);
    assert_eq!(rows[1].name, "matmul");
    assert_eq!(rows[1].kernel_launches, Some(2));
    assert!((rows[1].median_s.unwrap() - 5e-3).abs() < 1e-12);
    assert!(rows
        .iter()
        .any(|r| r.op == "kernel" && r.name == "matmul/Matmul"));
    assert!(rows.iter().all(|r| r.check().is_ok()), "{rows:?}");
}
