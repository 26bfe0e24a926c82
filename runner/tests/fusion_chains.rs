//! `memwall-job fusion-chains`: the fusion_ir study's Burn chains timed by the slim runner.
//! `--backend flex` runs the timing code on the CPU; `--backend cuda` (the default) records why
//! it measured nothing on a machine without a GPU, and exits 0 either way.

use memwall_core::record::fusion_chains::{parse_run, Chain, ChainsBackend, FUSION_CHAINS_FORMAT};
use memwall_runner::fusion_chains::{cli, parse_args, study_inputs, Options, XorShift, SEED};
use std::process::Command;

fn job(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memwall-job"))
        .arg("fusion-chains")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn fusion_chains_on_flex_times_both_chains() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("flex_chains.json");
    let o = job(&[
        "--backend",
        "flex",
        "--n",
        "4096",
        "--repeats",
        "2",
        "--ir-n",
        "100",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("(a+b)*c unfused on "), "{stdout}");
    let run = parse_run(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(run.format, FUSION_CHAINS_FORMAT);
    assert_eq!(run.backend, ChainsBackend::Flex);
    assert_eq!((run.n, run.repeats, run.ir_n), (4096, 2, 100));
    assert_eq!(run.runner_revision, memwall_runner::measure::BUILD_REVISION);
    let chains = run.chains.expect("flex always runs");
    assert!(chains.fused.is_empty(), "flex has no fusion backend");
    let exprs: Vec<Chain> = chains.unfused.iter().map(|c| c.expr).collect();
    assert_eq!(exprs, Chain::ALL);
    for c in &chains.unfused {
        assert!(c.time_s > 0.0, "{}: {}", c.expr, c.time_s);
        assert!(c.max_abs_diff <= 1e-6, "{}: {}", c.expr, c.max_abs_diff);
        assert!(c.alloc_bytes_per_element.is_some_and(|b| b > 0.0));
    }
}

#[test]
fn fusion_chains_on_cuda_exits_0_and_says_why_when_it_cannot_measure() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cuda_chains.json");
    let o = job(&[
        "--n",
        "4096",
        "--repeats",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = parse_run(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(run.backend, ChainsBackend::Cuda);
    match &run.chains {
        // A machine with a GPU measures.
        Ok(c) => {
            assert_eq!((c.fused.len(), c.unfused.len()), (2, 2));
            for b in c.fused.iter().chain(&c.unfused) {
                assert!(b.max_abs_diff <= 1e-5, "{}: {}", b.expr, b.max_abs_diff);
            }
        }
        Err(why) => {
            assert!(!why.is_empty());
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(stdout.contains(&format!("not measured: {why}")), "{stdout}");
        }
    }
}

#[test]
fn fusion_chains_refuses_wrong_arguments() {
    for args in [
        &["--n", "0", "--out", "x.json"][..],
        &["--backend", "rocm", "--out", "x.json"],
        &["--n", "4096"],
        &["--repeats"],
        &["--bogus", "1", "--out", "x.json"],
    ] {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        assert!(parse_args(&args).is_err(), "{args:?}");
        assert_eq!(cli(&args), std::process::ExitCode::from(2), "{args:?}");
    }
    let (opts, out) = parse_args(&["--out".into(), "r.json".into()]).unwrap();
    assert_eq!(opts, Options::default());
    assert_eq!((opts.n, opts.repeats, opts.ir_n), (1 << 24, 5, 100_000));
    assert_eq!(out, std::path::PathBuf::from("r.json"));
}

#[test]
fn the_inputs_follow_the_studys_draws() {
    // Three arrays of ir_n values for the IR check, then a, b, c.
    let mut rng = XorShift(SEED);
    let ir: Vec<f32> = memwall_runner::fusion_chains::random_vec(&mut rng, 3 * 7);
    assert_eq!(ir.len(), 21);
    let a = memwall_runner::fusion_chains::random_vec(&mut rng, 5);
    let [got_a, got_b, _] = study_inputs(5, 7);
    assert_eq!(got_a, a);
    assert_eq!(
        got_b,
        memwall_runner::fusion_chains::random_vec(&mut rng, 5)
    );
    assert!(a.iter().all(|x| (-1.0..1.0).contains(x)));
}
