//! The attribution benchmark (`memwall-job bench`) on flex at the smoke size: every operation of
//! the model in f32 and bf16 gets a row with a positive time and the FLOPs of its formula.

use memwall_core::device::BackendKind;
use memwall_core::record::attribution::{
    attention_flops, matmul_flops, operations, read_rows, AttributionStatus,
};
use memwall_core::spec::{PreparedData, Profile, Study};
use std::path::Path;
use std::process::ExitCode;

#[test]
fn bench_on_flex_times_every_operation_with_the_flops_of_its_formula() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/peak_memory.toml");
    let study = Study::load(&path, Profile::Smoke, None).unwrap();
    let data = PreparedData {
        dir: "data/none".into(),
        fingerprint: "x".into(),
        vocab_size: 320,
        eos_id: 0,
    };
    let job = study
        .jobs(BackendKind::Flex, 0, &study.one_corpus(data))
        .into_iter()
        .find(|j| j.config == "control")
        .expect("peak_memory has a control configuration");
    let dir = tempfile::tempdir().unwrap();
    let job_file = dir.path().join("job.json");
    std::fs::write(&job_file, serde_json::to_string_pretty(&job).unwrap()).unwrap();
    let out = dir.path().join("burn.cpu.jsonl");
    let args: Vec<String> = [
        "--job",
        job_file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--repeats",
        "1",
        "--warmup",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(memwall_runner::bench::cli(&args), ExitCode::SUCCESS);

    let (rows, bad) = read_rows(&out).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    let m = job.model;
    let ops = operations(&m);
    assert_eq!(rows.len(), 2 * ops.len(), "one row per operation and dtype");
    for (dtype, chunk) in ["f32", "bf16"].iter().zip(rows.chunks(ops.len())) {
        for (row, spec) in chunk.iter().zip(&ops) {
            let what = format!("{} {} {} {dtype}", row.op, row.name, row.pass);
            assert_eq!(
                (row.op.as_str(), row.name.as_str(), row.pass.as_str()),
                (spec.op, spec.name, spec.pass),
                "{what}"
            );
            assert_eq!(row.dtype, *dtype, "{what}");
            assert_eq!(row.framework, "burn");
            assert_eq!(row.backend, "flex");
            assert_eq!(row.model, m);
            assert_eq!(
                row.status,
                AttributionStatus::Ok,
                "{what}: {:?}",
                row.reason
            );
            assert_eq!(row.repeats, 1, "{what}");
            let s = row.median_s.unwrap();
            assert!(s > 0.0, "{what}: {s}");
            let sh = &row.shape;
            let expected = match row.op.as_str() {
                "matmul" => Some(matmul_flops(sh[0], sh[1], sh[2])),
                "attention" | "attention_naive" => Some(attention_flops(
                    sh[0],
                    sh[1],
                    sh[2],
                    sh[3],
                    row.pass == "backward",
                )),
                "layer_norm" | "gelu" | "head_merge" => None,
                "train_step" => Some(m.train_flops_per_token() * (m.batch * m.seq_len) as f64),
                other => panic!("unexpected op {other}"),
            };
            assert_eq!(row.flops, expected, "{what}");
            match expected {
                Some(f) => {
                    assert!(f > 0.0, "{what}");
                    let t = row.tflops.unwrap();
                    assert!((t - f / s / 1e12).abs() <= 1e-9 * t.max(1.0), "{what}");
                }
                None => {
                    let size = if *dtype == "f32" { 4.0 } else { 2.0 };
                    let tensors = if row.pass == "forward" { 2.0 } else { 3.0 };
                    // Layer norm and the head merge move [b*t, d] tensors, GELU [b*t, d_ff].
                    let width = if row.op == "gelu" { m.d_ff } else { m.d_model };
                    let elements = (m.batch * m.seq_len * width) as f64;
                    assert_eq!(row.bytes, Some(tensors * elements * size), "{what}");
                }
            }
        }
    }
    // The shapes are the model's: the MLP's up projection of the 2 x 32 tokens.
    let up = rows
        .iter()
        .find(|r| r.name == "mlp_up" && r.pass == "forward")
        .unwrap();
    assert_eq!(
        up.shape,
        [
            (m.batch * m.seq_len) as u64,
            m.d_model as u64,
            m.d_ff as u64
        ]
    );
}
