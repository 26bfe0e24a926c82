//! Experiment files: validation errors name the file, the field and the fix.

use memwall_core::spec::{CheckpointSpec, Profile, Study};
use std::path::Path;

fn write(dir: &Path, text: &str) -> std::path::PathBuf {
    let exp = dir.join("experiments");
    std::fs::create_dir_all(&exp).unwrap();
    let p = exp.join("study.toml");
    std::fs::write(&p, text).unwrap();
    p
}

const GOOD: &str = r#"
[study]
name = "s"
title = "t"
source = "004_cef2fa4595315230.txt"
kind = "training"
[data]
path = "corpus.txt"
[profiles.smoke]
model = { layers = 2, d_model = 32, heads = 2, d_ff = 64, seq_len = 16, batch = 2, vocab = 300 }
[[configs]]
name = "a"
[[configs]]
name = "b"
checkpoint = "sqrt"
"#;

#[test]
fn the_repository_experiments_are_valid_for_every_profile() {
    let files = Study::discover(&root().join("experiments")).unwrap();
    assert!(!files.is_empty());
    for f in files {
        for p in Profile::ALL {
            Study::load(&f, p, None).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        }
    }
}

#[test]
fn a_valid_file_resolves_paths_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), GOOD);
    let s = Study::load(&p, Profile::Smoke, None).unwrap();
    assert_eq!(s.configs.len(), 2);
    assert!(
        s.configs[0].control,
        "the first configuration is the control by default"
    );
    assert_eq!(s.configs[1].checkpoint, CheckpointSpec::Sqrt);
    // relative data paths are resolved against the workspace root (parent of experiments/)
    assert_eq!(s.data.unwrap().path, dir.path().join("corpus.txt"));
    assert_eq!(CheckpointSpec::Sqrt.segment_len(32), Some(6));
    assert_eq!(CheckpointSpec::Every(4).segment_len(32), Some(4));
}

#[test]
fn the_optimizer_is_adamw_unless_the_train_table_names_adafactor() {
    use memwall_core::spec::OptimizerKind;
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), GOOD);
    let adamw = Study::load(&p, Profile::Smoke, None).unwrap();
    assert_eq!(adamw.train.optimizer, OptimizerKind::Adamw);
    let text = serde_json::to_string(&adamw.train).unwrap();
    assert!(text.contains("\"optimizer\":\"adamw\""), "{text}");
    let p = write(
        dir.path(),
        &GOOD.replace(
            "[data]",
            "[train]\noptimizer = \"adafactor\"\nlr = 2e-4\nweight_decay = 0.01\n[data]",
        ),
    );
    let s = Study::load(&p, Profile::Smoke, None).unwrap();
    assert_eq!(s.train.optimizer, OptimizerKind::Adafactor);
    assert_eq!(s.train.optimizer.as_str(), "adafactor");
    assert_eq!((s.train.lr, s.train.weight_decay), (2e-4, 0.01));
    let text = serde_json::to_string(&s.train).unwrap();
    assert!(text.contains("\"optimizer\":\"adafactor\""), "{text}");
    let p = write(
        dir.path(),
        &GOOD.replace("[data]", "[train]\noptimizer = \"adam\"\n[data]"),
    );
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("optimizer") || msg.contains("adam"), "{msg}");
}

#[test]
fn unknown_field_is_an_error_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        &GOOD.replace("name = \"a\"", "name = \"a\"\nprecison = \"bf16\""),
    );
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("study.toml"), "{msg}");
    assert!(msg.contains("precison"), "{msg}");
}

#[test]
fn unknown_strategy_value_is_an_error_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        &GOOD.replace("checkpoint = \"sqrt\"", "checkpoint = \"log\""),
    );
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("log") && msg.contains("sqrt"), "{msg}");
}

#[test]
fn missing_profile_model_names_the_table_to_add() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), GOOD);
    let msg = Study::load(&p, Profile::Full, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("profiles.full.model"), "{msg}");
}

#[test]
fn invalid_values_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), &GOOD.replace("heads = 2", "heads = 3"));
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("heads") && msg.contains("divide"), "{msg}");
    let p = write(dir.path(), &GOOD.replace("name = \"b\"", "name = \"a\""));
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("twice"), "{msg}");
    let p = write(
        dir.path(),
        &GOOD.replace(
            "[[configs]]\nname = \"b\"",
            "[[configs]]\nname = \"b\"\nbudget = 1.5",
        ),
    );
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("budget"), "{msg}");
}

#[test]
fn goals_parse_and_bad_thresholds_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let goal = "\n[[goals]]\nlabel = \"sqrt / none\"\nnumerator = { checkpoint = \"sqrt\" }\ndenominator = { checkpoint = \"none\" }\nat_most = 1.35\n";
    let p = write(dir.path(), &format!("{GOOD}{goal}"));
    let s = Study::load(&p, Profile::Smoke, None).unwrap();
    assert_eq!(s.goals.len(), 1);
    assert_eq!(s.goals[0].numerator.checkpoint, Some(CheckpointSpec::Sqrt));
    assert_eq!(s.goals[0].numerator.fused_optimizer, None);
    assert_eq!(s.goals[0].at_most, 1.35);
    for bad in ["0.0", "-1.0", "nan", "inf"] {
        let p = write(
            dir.path(),
            &format!(
                "{GOOD}{}",
                goal.replace("at_most = 1.35", &format!("at_most = {bad}"))
            ),
        );
        let msg = Study::load(&p, Profile::Smoke, None)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("goals[0].at_most"), "{bad}: {msg}");
    }
    let p = write(
        dir.path(),
        &format!(
            "{GOOD}{}",
            goal.replace("checkpoint = \"sqrt\"", "checkpoint = \"often\"")
        ),
    );
    assert!(Study::load(&p, Profile::Smoke, None).is_err());
}

#[test]
fn mixed_precision_options_parse_and_bad_combinations_name_the_fix() {
    use memwall_core::spec::{LossScale, Precision};
    let dir = tempfile::tempdir().unwrap();
    let with_b = |extra: &str| {
        GOOD.replace(
            "[[configs]]\nname = \"b\"\ncheckpoint = \"sqrt\"",
            &format!("[[configs]]\nname = \"b\"\n{extra}"),
        )
    };
    let cases = [
        ("loss_scale = \"dynamic\"", LossScale::DYNAMIC_DEFAULT),
        ("loss_scale = 512.0", LossScale::Static(512.0)),
        (
            "loss_scale = { growth_interval = 7 }",
            LossScale::Dynamic {
                init: 65536.0,
                growth_interval: 7,
            },
        ),
    ];
    for (line, want) in cases {
        let text = with_b(&format!(
            "precision = \"f16\"\nmaster_weights = true\n{line}"
        ));
        let s = Study::load(&write(dir.path(), &text), Profile::Smoke, None).unwrap();
        let b = &s.configs[1];
        assert!(b.master_weights && b.precision == Precision::F16);
        assert_eq!(b.loss_scale, Some(want), "{line}");
    }
    let bad = [
        ("master_weights = true", "master_weights", "precision"),
        (
            "precision = \"f16\"\nloss_scale = \"dynamic\"",
            "loss_scale",
            "master_weights = true",
        ),
        (
            "precision = \"f16\"\nmaster_weights = true\ncheckpoint = 2",
            "master_weights",
            "plain backward",
        ),
        (
            "precision = \"f16\"\nmaster_weights = true\nloss_scale = \"auto\"",
            "auto",
            "dynamic",
        ),
        (
            "precision = \"f16\"\nmaster_weights = true\nloss_scale = -1.0",
            "loss scale",
            "positive",
        ),
        (
            "precision = \"f16\"\nmaster_weights = true\nloss_scale = { initial = 1024.0 }",
            "loss_scale",
            "growth_interval",
        ),
    ];
    for (lines, field, fix) in bad {
        let p = write(dir.path(), &with_b(lines));
        let msg = Study::load(&p, Profile::Smoke, None)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(field) && msg.contains(fix) && msg.contains("study.toml"),
            "{lines}: {msg}"
        );
    }
}

/// A grid's `policy` axis crosses every recomputing K with each policy, names the
/// configuration after it, and leaves K = none (nothing recomputed) one configuration without
/// a policy; a policy the unit executor cannot run is refused naming the grid.
#[test]
fn a_grid_crosses_checkpoint_intervals_with_policies() {
    use memwall_core::units::{Estimate, Policy};
    let dir = tempfile::tempdir().unwrap();
    let grid = "\n[[grid]]\ncheckpoint = [\"none\", 1, 2]\npolicy = [\"save_nothing\", \"save_matmuls\", [\"qkv\", \"attention\"], { budget = 0.3, estimate = \"profile\" }]\n";
    let p = write(dir.path(), &(GOOD.to_string() + grid));
    let s = Study::load(&p, Profile::Smoke, None).unwrap();
    let generated: Vec<(&str, Option<Policy>)> = s
        .configs
        .iter()
        .skip(2)
        .map(|c| (c.name.as_str(), c.policy))
        .collect();
    let budget = Policy::Budget(0.3, Estimate::Profile);
    assert_eq!(
        generated.iter().map(|g| g.0).collect::<Vec<_>>(),
        [
            "cknone-f32",
            "ck1-f32-save_nothing",
            "ck1-f32-save_matmuls",
            "ck1-f32-keep_qkv-attention",
            "ck1-f32-budget_0p3_profile",
            "ck2-f32-save_nothing",
            "ck2-f32-save_matmuls",
            "ck2-f32-keep_qkv-attention",
            "ck2-f32-budget_0p3_profile",
        ]
    );
    assert_eq!(generated[0].1, None);
    assert_eq!(generated[2].1, Some(Policy::SaveMatmuls));
    assert_eq!(generated[8].1, Some(budget));
    // An unknown policy in the axis is refused naming the grid and the policies.
    let bad = "\n[[grid]]\ncheckpoint = [1]\npolicy = [\"save_some\"]\n";
    let p = write(dir.path(), &(GOOD.to_string() + bad));
    let msg = Study::load(&p, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("save_some") && msg.contains("save_matmuls"),
        "{msg}"
    );
}

/// [`GOOD`] with a named model `deep` in the smoke profile and a second grid on it.
fn with_deep(model: &str, grid: &str) -> String {
    GOOD.replace(
        "[[configs]]\nname = \"a\"",
        &format!("{model}\n[[configs]]\nname = \"a\""),
    ) + grid
}

const DEEP_MODEL: &str = "models.deep = { layers = 16, d_model = 8, heads = 1, d_ff = 32, seq_len = 8, batch = 2, vocab = 260 }";
const DEEP_GRID: &str = "\n[[grid]]\ncheckpoint = [1, 2]\n[[grid]]\nmodel = \"deep\"\ncheckpoint = [\"none\", 1, 2, 4, 16]\nfused_optimizer = [true]\n";

#[test]
fn named_models_train_their_grid_with_a_control_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), &with_deep(DEEP_MODEL, DEEP_GRID));
    let s = Study::load(&p, Profile::Smoke, None).unwrap();
    let names: Vec<&str> = s.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "a",
            "b",
            "ck1-f32",
            "ck2-f32",
            "deep-cknone-f32-fusedopt",
            "deep-ck1-f32-fusedopt",
            "deep-ck2-f32-fusedopt",
            "deep-ck4-f32-fusedopt",
            "deep-ck16-f32-fusedopt",
        ]
    );
    let controls: Vec<&str> = s
        .configs
        .iter()
        .filter(|c| c.control)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(controls, ["a", "deep-cknone-f32-fusedopt"], "one per model");
    let deep = &s.configs[4];
    assert_eq!(deep.model.as_deref(), Some("deep"));
    assert_eq!(s.model_of(deep).unwrap().layers, 16);
    assert_eq!(s.model_of(&s.configs[0]).unwrap().layers, 2);
    assert_eq!(s.vocabularies(), [260, 300], "one corpus per vocabulary");
    let fields: Vec<String> = s.trained_models().into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        ["profiles.smoke.model", "profiles.smoke.models.deep"]
    );
}

#[test]
fn claims_pick_a_sweep_or_a_configuration_by_fields_never_by_a_grid_name() {
    let dir = tempfile::tempdir().unwrap();
    let claim = |fields: &str, measure: &str| {
        format!(
            "\n[[claims]]\nid = \"c\"\nquote = \"q\"\nwhere = \"w\"\n{fields}\nmeasure = \"{measure}\"\nagree = {{ at_most = 5.0 }}\n"
        )
    };
    let load = |extra: String| {
        Study::load(
            &write(dir.path(), &(with_deep(DEEP_MODEL, DEEP_GRID) + &extra)),
            Profile::Smoke,
            None,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let deep = "sweep = { model = \"deep\", fused_optimizer = true }";
    load(claim(deep, "u_depth_pct")).unwrap();
    load(claim("config = { checkpoint = 2 }", "step_time_ratio")).unwrap();
    load(claim("", "b.step_time_ratio")).unwrap();
    // The profile model's sweep has 3 intervals here (b's sqrt, 1 and 2): too few to fit.
    let msg = load(claim("sweep = {}", "u_depth_pct")).unwrap_err();
    assert!(
        msg.contains("claims[0].sweep") && msg.contains("matches 3 checkpointing"),
        "{msg}"
    );
    let msg = load(claim(deep, "bogus")).unwrap_err();
    assert!(msg.contains("u_depth_pct"), "the metrics are listed: {msg}");
    // The old name pattern names no configuration; a grid's name is refused with its selector.
    let msg = load(claim("", "deep-ck*-f32-fusedopt.u_depth_pct")).unwrap_err();
    assert!(msg.contains("claims[0].measure"), "{msg}");
    let msg = load(claim("", "deep-ck4-f32-fusedopt.reduction_pct")).unwrap_err();
    assert!(
        msg.contains("a name a [[grid]] made")
            && msg.contains(
                "`config = { model = \"deep\", checkpoint = 4, fused_optimizer = true }` and \
                 `measure = \"reduction_pct\"`"
            ),
        "{msg}"
    );
    // `against`: a relative metric of one configuration against another of the same model
    // and optimizer; each wrong use names the field and what to do.
    load(claim("against = \"a\"", "b.step_time_ratio")).unwrap();
    load(claim(
        "config = { checkpoint = 2 }\nagainst = \"b\"",
        "reduction_pct",
    ))
    .unwrap();
    for (fields, measure, says) in [
        (
            "against = \"ck1-f32\"",
            "b.speedup",
            "a name a [[grid]] made",
        ),
        (
            "against = \"b\"",
            "b.step_time_ratio",
            "the claim's own configuration",
        ),
        (
            "against = \"nope\"",
            "b.speedup",
            "is not a configuration of this file",
        ),
        (
            "against = \"b\"",
            "ck1-f32.peak_gib",
            "needs a metric taken against",
        ),
        (
            "against = \"b\"",
            "deep-cknone-f32-fusedopt.step_time_ratio",
            "another model or optimizer",
        ),
        (
            &format!("{deep}\nagainst = \"b\""),
            "u_depth_pct",
            "a sweep metric has its own control",
        ),
    ] {
        let msg = load(claim(fields, measure)).unwrap_err();
        assert!(
            msg.contains("claims[0].") && msg.contains(says),
            "{fields} {measure}: {msg}"
        );
    }
    // A selector in a study that trains nothing.
    let text = std::fs::read_to_string(root().join("experiments/autodiff_example.toml")).unwrap();
    let text = text.replacen(
        "[[claims]]\n",
        "[[claims]]\nconfig = { checkpoint = 2 }\n",
        1,
    );
    let msg = Study::load(&write(dir.path(), &text), Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("only a training study's claims pick"), "{msg}");
}

#[test]
fn a_named_model_that_is_missing_or_wrong_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let load = |text: String| {
        Study::load(&write(dir.path(), &text), Profile::Smoke, None)
            .unwrap_err()
            .to_string()
    };
    // A grid naming a model the profile lacks.
    let msg = load(with_deep("", DEEP_GRID));
    assert!(
        msg.contains("grid[1].model")
            && msg.contains("`deep` is not a model of profile `smoke`")
            && msg.contains("models.deep = {"),
        "{msg}"
    );
    // A configuration naming one.
    let msg = load(GOOD.replace("name = \"b\"", "name = \"b\"\nmodel = \"wide\""));
    assert!(
        msg.contains("configs[1].model") && msg.contains("`wide`"),
        "{msg}"
    );
    // An interval beyond the named model's layers names its table.
    let msg = load(with_deep(DEEP_MODEL, &DEEP_GRID.replace("16]", "32]")));
    assert!(
        msg.contains("profiles.smoke.models.deep.layers") && msg.contains("K = 32"),
        "{msg}"
    );
    // The named model's sizes are checked as the profile model's are.
    let msg = load(with_deep(
        &DEEP_MODEL.replace("heads = 1", "heads = 3"),
        DEEP_GRID,
    ));
    assert!(
        msg.contains("profiles.smoke.models.deep.heads") && msg.contains("divide"),
        "{msg}"
    );
    // Two models of a profile with the same layers and d_model cannot be told apart.
    let msg = load(with_deep(
        &DEEP_MODEL.replace("layers = 16, d_model = 8", "layers = 2, d_model = 32"),
        DEEP_GRID,
    ));
    assert!(
        msg.contains("profiles.smoke.models.deep") && msg.contains("profiles.smoke.model`"),
        "{msg}"
    );
    // An unknown field of a grid is named, [grid] and [[grid]] alike.
    let msg = load(with_deep(
        DEEP_MODEL,
        &DEEP_GRID.replace("fused_optimizer", "fused_optimiser"),
    ));
    assert!(msg.contains("fused_optimiser"), "{msg}");
    let msg = load(GOOD.to_string() + "\n[grid]\ncheckpoints = [1]\n");
    assert!(msg.contains("checkpoints"), "{msg}");
}

/// The workspace root (parent of this crate's folder).
fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed H100 job files predate the layer-norm option (and ran Burn's composed layer
/// norm): they read as `composed` and keep the keys their folders are named by.
#[test]
fn committed_gpu_jobs_read_as_composed_layer_norm_with_their_keys() {
    use memwall_core::spec::JobSpec;
    use memwall_core::strategy::LayerNormSaving;
    let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../runs/peak_memory");
    let mut checked = 0;
    for entry in std::fs::read_dir(&runs).expect("the committed GPU records") {
        let dir = entry.unwrap().path();
        let file = dir.join("job.json");
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not a job folder (the PyTorch rows' folder)
        };
        if text.contains("\"layer_norm\"") {
            continue; // a record written here since, by a later run
        }
        let job = JobSpec::read(&file).unwrap();
        assert_eq!(
            job.strategy.layer_norm,
            LayerNormSaving::Composed,
            "{}",
            file.display()
        );
        assert_eq!(
            job.key(),
            dir.file_name().unwrap().to_string_lossy(),
            "{}",
            file.display()
        );
        checked += 1;
    }
    assert!(
        checked >= 20,
        "only {checked} legacy job files under {}",
        runs.display()
    );
}

#[test]
fn the_outline_is_what_every_profile_resolves_and_needs_no_profile() {
    for f in Study::discover(&root().join("experiments")).unwrap() {
        let o = Study::outline(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for p in Profile::ALL {
            let s = Study::load(&f, p, None).unwrap();
            assert_eq!(o.header, s.header, "{}", f.display());
            assert_eq!(o.configs, s.configs, "{} at {p}", f.display());
            assert_eq!(o.goals, s.goals);
            assert_eq!(o.claims, s.claims);
        }
    }
    // A file without a cpu model cannot run at cpu, and still outlines (a report reads no
    // profile: it was the cpu profile, else smoke, before).
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), GOOD);
    assert!(Study::load(&p, Profile::Cpu, None).is_err());
    let o = Study::outline(&p).unwrap();
    assert_eq!(
        o.configs
            .iter()
            .map(|c| (c.name.as_str(), c.control))
            .collect::<Vec<_>>(),
        [("a", true), ("b", false)]
    );
    // What the outline checks, it names as loading does.
    let bad = GOOD.replace(
        "checkpoint = \"sqrt\"",
        "checkpoint = \"sqrt\"\nbudget = 2.0",
    );
    let msg = Study::outline(&write(dir.path(), &bad))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("configs[1].budget"), "{msg}");
}
