//! `reference/perf_step_profile.py` (`just profile-cpu`) on a small `perf script` text whose
//! samples are known: the CPU profile of issue 28 is read off this script, so its sorting is
//! tested here (it needs `python3`, which CI has; perf itself is not needed for `--script`).

use std::path::Path;
use std::process::Command;

#[test]
fn the_step_profile_sorts_samples_by_category_phase_and_operation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("profile.json");
    let out = Command::new("python3")
        .arg(root.join("reference/perf_step_profile.py"))
        .arg("--script")
        .arg(root.join("lab/tests/data/perf_step.txt"))
        .args(["--steps", "1", "--frequency", "1", "--json"])
        .arg(&json)
        .output()
        .expect("python3 runs (CI installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // 7 samples: 3 main-thread samples under train_step, 1 worker sample inside the steps'
    // time window, 1 worker sample after it, 1 in setup, 1 in evaluation.
    assert_eq!(p["samples"], 7);
    assert_eq!(p["step_samples"], 4);
    assert_eq!(p["worker_samples"], 1);
    let cat = &p["categories"];
    assert_eq!(cat["matmul (gemm)"], 2, "{cat}");
    assert_eq!(cat["elementwise math"], 1, "{cat}");
    assert_eq!(cat["layout copies (to contiguous)"], 1, "{cat}");
    let phase = &p["phases"];
    assert_eq!(phase["backward"], 2, "{phase}");
    assert_eq!(phase["forward"], 1, "{phase}");
    assert_eq!(phase["worker threads (no phase)"], 1, "{phase}");
    assert_eq!(p["custom_ops"], 1, "the attention's scores");
    let outside = &p["outside"];
    assert_eq!(outside["setup and data"], 1, "{outside}");
    assert_eq!(outside["evaluation"], 1, "{outside}");
    let ops: Vec<(String, String)> = p["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o[0].as_str().unwrap().to_string(),
                o[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for want in [
        ("backward of LinearNoBias", "matmul (gemm)"),
        ("backward of Gelu", "elementwise math"),
        ("memwall scores", "layout copies (to contiguous)"),
    ] {
        assert!(
            ops.iter().any(|(o, c)| o == want.0 && c == want.1),
            "{want:?} not in {ops:?}"
        );
    }
    // CPU ms per step at 1 Hz and 1 step: 1000 ms per sample.
    assert!(
        stdout.contains("| matmul (gemm) | 50.0% | 2000.0 |"),
        "{stdout}"
    );
}
