use super::*;
use std::error::Error as _;

#[test]
fn a_twin_is_expected_from_its_stored_row_of_the_same_model() {
    let (study, jobs) = crate::test_support::peak_memory_full();
    let plan = twin::jobs(&study, &jobs).expect("peak_memory has a PyTorch plan");
    let config = plan.configs[0].name.clone();
    let row = |model: twin::TorchModel, first: f64, median: f64| TorchRow {
        format: twin::ROW_FORMAT.into(),
        study: plan.study.clone(),
        config: config.clone(),
        status: twin::TorchStatus::Ok,
        reason: None,
        device: "NVIDIA H200".into(),
        device_type: None,
        threads: None,
        torch_version: "2.11".into(),
        parameters: None,
        max_memory_allocated_bytes: None,
        max_memory_reserved_bytes: None,
        max_rss_bytes: None,
        rss_after_import_bytes: None,
        median_step_s: Some(median),
        samples_per_s: None,
        first_step_s: Some(first),
        final_loss: None,
        model,
        train: plan.train,
        finished_at: String::new(),
        process_order: None,
        wall_s: None,
        memory_budget_pareto: Vec::new(),
    };
    let steps = (plan.train.warmup_steps + plan.train.steps) as f64;
    let mut other = plan.model;
    other.layers += 1;
    let stored = vec![
        row(plan.model, 2.0, 0.5),
        row(plan.model, 40.0, 0.75),
        row(other, 500.0, 9.0),
    ];
    let got = torch_seconds_of_rows(&stored, &plan, &config).unwrap();
    // The slowest row of the same model; the other model's row is not used.
    assert_eq!(got, TORCH_STARTUP_S + 40.0 + steps * 0.75);
    assert_eq!(
        torch_seconds_of_rows(&stored, &plan, "no-such-config"),
        None
    );
    assert_eq!(torch_seconds_of_rows(&stored[2..], &plan, &config), None);
}

fn request(source: PathBuf, tmp: &Path) -> ImportRequest {
    ImportRequest {
        source,
        runs: tmp.join("runs"),
        experiments: tmp.join("experiments"),
        scratch: tmp.join("scratch"),
        force: false,
        skip_mismatched: false,
        cubecl_cache: tmp.join("cubecl"),
    }
}

#[test]
fn a_bad_manifest_names_the_file_and_keeps_the_parser_error_as_source() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::write(bundle.join("manifest.json"), "{\"format\": 3}").unwrap();
    let err = import(&request(bundle.clone(), tmp.path())).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("manifest.json: not a bundle manifest"),
        "{msg}"
    );
    assert!(msg.contains("field `format`"), "{msg}");
    assert!(matches!(err, BundleError::NotAManifest { .. }), "{err:?}");
    let json = err.source().expect("the JSON error is the source");
    assert!(json.source().is_some(), "serde_json's error under it");

    std::fs::remove_file(bundle.join("manifest.json")).unwrap();
    let err = import(&request(bundle, tmp.path())).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("manifest.json") && msg.contains("not a memwall bundle"),
        "{msg}"
    );
    let io = err.source().expect("the I/O error is the source");
    assert!(io.downcast_ref::<std::io::Error>().is_some(), "{io:?}");
}

#[test]
fn an_unreadable_archive_names_the_step_and_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing.tar.gz");
    let msg = import(&request(missing, tmp.path()))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("nothing.tar.gz: no such bundle folder or archive"),
        "{msg}"
    );
    let not_gz = tmp.path().join("results.tar.gz");
    std::fs::write(&not_gz, "plain text").unwrap();
    let msg = import(&request(not_gz, tmp.path()))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("is not a gzip-compressed tar archive"),
        "{msg}"
    );
}

#[test]
fn a_sweeps_claims_bundle_its_members_and_its_control_by_their_checkpoint_field() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../experiments/checkpoint_interval.toml");
    let study = crate::spec::Study::load(&path, crate::spec::Profile::Cpu, None).unwrap();
    let claimed = export::claimed_configs(&study);
    // The sweep's members by their checkpoint field, and its control (also one of the
    // study's controls, which every claimed set holds).
    for member in [
        "deep-cknone-f32-fusedopt",
        "deep-ck1-f32-fusedopt",
        "deep-ck3-f32-fusedopt",
        "deep-cksqrt-f32-fusedopt",
        "deep-ck128-f32-fusedopt",
    ] {
        assert!(
            claimed.contains(member),
            "{member} not claimed: {claimed:?}"
        );
    }
    // The first grid's rows are not of the deep sweep (its control is claimed as the study's).
    assert!(!claimed.contains("ck1-f16"), "{claimed:?}");
    assert!(!claimed.contains("ck4-bf16-fusion"), "{claimed:?}");
}
