//! The `[params]` tables of the in-process studies are checked when the experiment file is
//! loaded: a wrong type, an unknown key or a value out of range is an error naming the file, the
//! key (`params.ks[1]`), the accepted range and the value, before anything runs or allocates.

mod common;

use memwall_core::spec::Profile;
use memwall_driver as driver;

/// The error of checking the edited file at the smoke profile.
fn error(name: &str, profile: Option<&str>, set: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = common::edited_experiment(dir.path(), name, profile, set);
    match driver::check_study(&file, &common::smoke_options()) {
        Ok(()) => panic!("{name} with {set} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_committed_in_process_study_passes_its_checks_at_every_profile() {
    let mut checked = 0;
    for file in memwall_core::spec::Study::discover(&common::root().join("experiments")).unwrap() {
        for profile in [Profile::Smoke, Profile::Cpu, Profile::Full] {
            let study = memwall_core::spec::Study::load(&file, profile, None).unwrap();
            if study.header.kind == memwall_core::spec::StudyKind::Training {
                continue;
            }
            memwall_studies::check(&study)
                .unwrap_or_else(|e| panic!("{} at {profile}: {e}", file.display()));
            checked += 1;
        }
    }
    assert_eq!(checked, 9 * 3, "nine in-process studies at three profiles");
}

#[test]
fn out_of_range_params_name_the_key_and_the_range() {
    // (study, edits, the key the error names, a part of the accepted range)
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "scalar_checkpoint",
            "depth = 0",
            "params.depth",
            "1..=4000000000",
        ),
        (
            "scalar_checkpoint",
            "depth = 1_000_000_000_000",
            "params.depth",
            "1..=4000000000",
        ),
        (
            "scalar_checkpoint",
            "ks = []",
            "params.ks",
            "1 to 64 elements",
        ),
        ("scalar_checkpoint", "ks = [10, 0]", "params.ks[1]", "got 0"),
        (
            "scalar_checkpoint",
            "ks = [10, 300000]",
            "params.ks[1]",
            "1..=200000",
        ),
        (
            "scalar_checkpoint",
            "repeats = 0",
            "params.repeats",
            "1..=100",
        ),
        ("scalar_checkpoint", "x0 = nan", "params.x0", "finite"),
        (
            "scalar_checkpoint",
            "grad_k = 30000",
            "params.grad_k",
            "0..=20000",
        ),
        (
            "scalar_checkpoint",
            "depth = \"deep\"",
            "params.depth",
            "invalid type",
        ),
        (
            "scalar_checkpoint",
            "dpeth = 10",
            "params.dpeth",
            "unknown field `dpeth`",
        ),
        (
            "scalar_checkpoint",
            "depth = -5",
            "params.depth",
            "invalid value",
        ),
        ("fusion_ir", "n = 0", "params.n", "1..=134217728"),
        (
            "fusion_ir",
            "n = 1_099_511_627_776",
            "params.n",
            "1..=134217728",
        ),
        ("fusion_ir", "repeats = 1000", "params.repeats", "1..=100"),
        (
            "two_buffer_inference",
            "depths = []",
            "params.depths",
            "1 to 64",
        ),
        (
            "two_buffer_inference",
            "depths = [4, 100000]",
            "params.depths[1]",
            "1..=4096",
        ),
        (
            "two_buffer_inference",
            "width = 16384",
            "params.width",
            "GiB",
        ),
        (
            "two_buffer_inference",
            "batch = 0",
            "params.batch",
            "1..=16384",
        ),
        (
            "fsdp",
            "heads = 7.0",
            "params.heads",
            "must divide `hidden`",
        ),
        (
            "fsdp",
            "ring_workers = [2, 0]",
            "params.ring_workers[1]",
            "1..=256",
        ),
        (
            "fsdp",
            "ring_elems = 1_099_511_627_776",
            "params.ring_elems",
            "GiB",
        ),
        (
            "fsdp",
            "params = -1.0",
            "params.params",
            "(0, 10000000000000]",
        ),
        ("fsdp", "devices = []", "params.devices", "1 to 64"),
        (
            "fsdp",
            "master_bytes = inf",
            "params.master_bytes",
            "[0, 8]",
        ),
        (
            "fsdp",
            "optimizer = \"sgd\"",
            "params.optimizer",
            "unknown variant `sgd`",
        ),
        (
            "sixteen_bit",
            "sum_entries = 0",
            "params.sum_entries",
            "1..=100000000",
        ),
        (
            "sixteen_bit",
            "loss_scale = 0.0",
            "params.loss_scale",
            "(0, 16777216]",
        ),
        (
            "sixteen_bit",
            "activation = nan",
            "params.activation",
            "finite",
        ),
        (
            "static_planning",
            "resnet_units = [3, 24, 36, 3, 5]",
            "params.resnet_units",
            "1 to 4",
        ),
        (
            "static_planning",
            "image_size = 16",
            "params.image_size",
            "32..=4096",
        ),
        (
            "static_planning",
            "lstm_layers = 64\nlstm_seq = 10000",
            "params.lstm_seq",
            "100000",
        ),
        (
            "static_planning",
            "bytes_per_elem = 0",
            "params.bytes_per_elem",
            "1..=8",
        ),
        (
            "checkmate",
            "budget_fractions = [0.8, 1.5]",
            "params.budget_fractions[1]",
            "(0, 1]",
        ),
        (
            "checkmate",
            "time_limit_s = -1.0",
            "params.time_limit_s",
            "(0, 86400]",
        ),
        ("checkmate", "mip_gap = 2.0", "params.mip_gap", "[0, 1]"),
        ("checkmate", "threads = 0", "params.threads", "1..=1024"),
        (
            "checkmate",
            "generated = [{ n = 2, w = 0.27, nlv = 0.75, ed = 0.2, scd = 0.14, seed = 1 }]",
            "params.generated[0].n",
            "3..=5000",
        ),
        (
            "checkmate",
            "generated = [{ n = 50, w = 0.27, nlv = 0.75, ed = 0.2, scd = 0.14 }]",
            "params.generated[0]",
            "missing field `seed`",
        ),
        (
            "checkmate",
            "rounding_thresholds = [1.0]",
            "params.rounding_thresholds[0]",
            "(0, 1)",
        ),
        (
            "checkmate",
            "graphs = [\"\"]",
            "params.graphs[0]",
            "must name a file",
        ),
        ("autodiff_example", "x = 1", "params.x", "unknown field `x`"),
    ];
    for (study, set, field, range) in cases {
        let msg = error(study, None, set);
        assert!(
            msg.contains(&format!("{study}.toml")) && msg.contains(&format!("`{field}`")),
            "{study} with {set}: {msg}"
        );
        assert!(
            msg.contains(range),
            "{study} with {set}: wants `{range}` in: {msg}"
        );
    }
    assert!(cases.len() >= 40);
}

#[test]
fn a_profile_override_is_named_with_its_profile() {
    let msg = error("scalar_checkpoint", Some("smoke"), "depth = 0");
    assert!(
        msg.contains("`params.depth`") && msg.contains("[profiles.smoke.params]"),
        "{msg}"
    );
    // the same value under another profile does not affect the smoke profile
    let dir = tempfile::tempdir().unwrap();
    let file =
        common::edited_experiment(dir.path(), "scalar_checkpoint", Some("full"), "depth = 0");
    driver::check_study(&file, &common::smoke_options()).unwrap();
}
