//! A corpus of malformed experiment files, records and job files, written as users err: typos,
//! wrong types, units, non-finite numbers, out-of-range and inconsistent values, empty and
//! truncated files. Every case asserts that the error names the file and the field at fault.

use memwall_core::record::{read_record, write_record, JobRecord, JobStatus};
use memwall_core::spec::{JobSpec, Profile, Study};
use std::path::{Path, PathBuf};

const GOOD: &str = r#"
[study]
name = "s"
title = "t"
source = "004_cef2fa4595315230.txt"
kind = "training"

[train]
lr = 3e-4
weight_decay = 0.0

[data]
path = "corpus.txt"
eval_fraction = 0.1

[profiles.smoke]
model = { layers = 4, d_model = 32, heads = 2, d_ff = 64, seq_len = 16, batch = 2, vocab = 300 }
train = { steps = 3, warmup_steps = 1, eval_batches = 2 }

[[configs]]
name = "a"
precision = "f32"

[[configs]]
name = "b"
checkpoint = 2
"#;

fn write(dir: &Path, text: &str) -> PathBuf {
    let exp = dir.join("experiments");
    std::fs::create_dir_all(&exp).unwrap();
    let p = exp.join("typo_study.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// `GOOD` with `from` replaced by `to` (which must occur).
fn edit(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "the base file lacks {from:?}");
    GOOD.replacen(from, to, 1)
}

/// The error of loading `text` for the smoke profile.
fn load_err(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), text);
    match Study::load(&p, Profile::Smoke, None) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// Each case: what the user wrote (the file), and the field the error must name.
fn experiment_cases() -> Vec<(&'static str, String, &'static str)> {
    let cfg_a = "name = \"a\"\nprecision = \"f32\"";
    let a_with = |extra: &str| edit(cfg_a, &format!("name = \"a\"\n{extra}"));
    vec![
        ("lr = nan", edit("lr = 3e-4", "lr = nan"), "`train.lr`"),
        ("lr = inf", edit("lr = 3e-4", "lr = inf"), "`train.lr`"),
        ("negative lr", edit("lr = 3e-4", "lr = -3e-4"), "`train.lr`"),
        ("zero lr", edit("lr = 3e-4", "lr = 0.0"), "`train.lr`"),
        ("lr in percent", edit("lr = 3e-4", "lr = 30"), "`train.lr`"),
        ("lr as a string", edit("lr = 3e-4", "lr = \"3e-4\""), "lr"),
        ("lr with a unit", edit("lr = 3e-4", "lr = 3e-4x"), "lr"),
        (
            "weight_decay = inf",
            edit("weight_decay = 0.0", "weight_decay = inf"),
            "`train.weight_decay`",
        ),
        (
            "negative weight decay",
            edit("weight_decay = 0.0", "weight_decay = -0.01"),
            "`train.weight_decay`",
        ),
        (
            "weight decay that zeroes the weights",
            edit("weight_decay = 0.0", "weight_decay = 5000.0"),
            "`train.weight_decay`",
        ),
        (
            "eval_batches = 0",
            edit("eval_batches = 2", "eval_batches = 0"),
            "`profiles.smoke.train.eval_batches`",
        ),
        (
            "no measured step",
            edit("steps = 3", "steps = 0"),
            "`profiles.smoke.train.steps`",
        ),
        (
            "ten billion steps",
            edit("steps = 3", "steps = 10_000_000_000"),
            "`profiles.smoke.train.steps`",
        ),
        (
            "negative warm-up",
            edit("warmup_steps = 1", "warmup_steps = -1"),
            "warmup_steps",
        ),
        (
            "fractional steps",
            edit("steps = 3", "steps = 2.5"),
            "steps",
        ),
        (
            "profile lr overrides with nan",
            edit("eval_batches = 2 }", "eval_batches = 2, lr = nan }"),
            "`profiles.smoke.train.lr`",
        ),
        (
            "heads do not divide d_model",
            edit("heads = 2", "heads = 3"),
            "`profiles.smoke.model.heads`",
        ),
        (
            "zero layers",
            edit("layers = 4", "layers = 0"),
            "`profiles.smoke.model.layers`",
        ),
        (
            "zero batch",
            edit("batch = 2", "batch = 0"),
            "`profiles.smoke.model.batch`",
        ),
        (
            "vocabulary below the byte tokens",
            edit("vocab = 300", "vocab = 100"),
            "`profiles.smoke.model.vocab`",
        ),
        (
            "vocabulary beyond u32 token ids",
            edit("vocab = 300", "vocab = 1_000_000_000_000"),
            "`profiles.smoke.model.vocab`",
        ),
        (
            "d_model as a string",
            edit("d_model = 32", "d_model = \"32\""),
            "d_model",
        ),
        ("negative batch", edit("batch = 2", "batch = -2"), "batch"),
        (
            "typo in a model key",
            edit("layers = 4", "layer = 4"),
            "layer",
        ),
        (
            "sequence length with a unit",
            edit("seq_len = 16", "seq_len = \"16 tokens\""),
            "seq_len",
        ),
        (
            "checkpoint interval beyond the layers",
            edit("checkpoint = 2", "checkpoint = 10"),
            "`configs[1].checkpoint`",
        ),
        (
            "checkpoint interval 0",
            edit("checkpoint = 2", "checkpoint = 0"),
            "checkpoint",
        ),
        (
            "misspelled checkpoint keyword",
            edit("checkpoint = 2", "checkpoint = \"sqrtn\""),
            "checkpoint",
        ),
        (
            "budget above 1",
            a_with("budget = 1.5"),
            "`configs[0].budget`",
        ),
        ("budget nan", a_with("budget = nan"), "`configs[0].budget`"),
        (
            "budget in percent",
            a_with("budget = 60.0"),
            "`configs[0].budget`",
        ),
        (
            "checkmate 0",
            a_with("checkmate = 0.0"),
            "`configs[0].checkmate`",
        ),
        (
            "checkmate above 1",
            a_with("checkmate = 2.0"),
            "`configs[0].checkmate`",
        ),
        (
            "balanced checkpointing with a budget",
            a_with("balanced_checkpointing = true\nbudget = 0.5"),
            "`configs[0].balanced_checkpointing`",
        ),
        (
            "balanced checkpointing with the fused optimizer step",
            a_with("balanced_checkpointing = true\nfused_optimizer = true"),
            "`configs[0].balanced_checkpointing`",
        ),
        (
            "no micro-batch",
            a_with("accumulation_steps = 0"),
            "`configs[0].accumulation_steps`",
        ),
        (
            "micro-batches that do not split the batch of 2",
            a_with("accumulation_steps = 3"),
            "`configs[0].accumulation_steps`",
        ),
        (
            "gradient accumulation with the fused optimizer step",
            a_with("accumulation_steps = 2\nfused_optimizer = true"),
            "`configs[0].accumulation_steps`",
        ),
        (
            "gradient accumulation with a budget's plan",
            a_with("accumulation_steps = 2\nbudget = 0.5"),
            "`configs[0].accumulation_steps`",
        ),
        (
            "nested checkpointing without checkpoint",
            a_with("nested_checkpoint = 1"),
            "`configs[0].nested_checkpoint`",
        ),
        (
            "nested checkpointing with no block per inner segment",
            a_with("checkpoint = 2\nnested_checkpoint = 0"),
            "`configs[0].nested_checkpoint`",
        ),
        (
            "inner segments as long as the checkpoint interval",
            a_with("checkpoint = 2\nnested_checkpoint = 2"),
            "`configs[0].nested_checkpoint`",
        ),
        (
            "nested checkpointing under a unit policy",
            a_with("checkpoint = 2\nnested_checkpoint = 1\npolicy = \"save_matmuls\""),
            "`configs[0].nested_checkpoint`",
        ),
        (
            "attention tile 0",
            a_with("attention_tile = 0"),
            "`configs[0].attention_tile`",
        ),
        (
            "negative loss scale",
            edit(
                cfg_a,
                "name = \"a\"\nprecision = \"bf16\"\nmaster_weights = true\nloss_scale = -8.0",
            ),
            "loss_scale",
        ),
        (
            "master weights on f32",
            a_with("master_weights = true"),
            "`configs[0].master_weights`",
        ),
        (
            "precision spelled as in PyTorch",
            edit("precision = \"f32\"", "precision = \"fp16\""),
            "precision",
        ),
        (
            "misspelled option",
            a_with("fused_optimiser = true"),
            "fused_optimiser",
        ),
        (
            "eval_fraction 0",
            edit("eval_fraction = 0.1", "eval_fraction = 0.0"),
            "`data.eval_fraction`",
        ),
        (
            "eval_fraction in percent",
            edit("eval_fraction = 0.1", "eval_fraction = 10.0"),
            "`data.eval_fraction`",
        ),
        (
            "eval_fraction nan",
            edit("eval_fraction = 0.1", "eval_fraction = nan"),
            "`data.eval_fraction`",
        ),
        (
            "max_stories 0",
            edit(
                "eval_fraction = 0.1",
                "eval_fraction = 0.1\nmax_stories = 0",
            ),
            "`data.max_stories`",
        ),
        (
            "max_stories 1 in the profile",
            edit(
                "eval_batches = 2 }",
                "eval_batches = 2 }\ndata = { max_stories = 1 }",
            ),
            "`profiles.smoke.data.max_stories`",
        ),
        (
            "empty corpus path",
            edit("path = \"corpus.txt\"", "path = \"\""),
            "`data.path`",
        ),
        (
            "negative claimed peak",
            a_with("claim = { peak_gib = -1.0 }"),
            "`configs[0].claim.peak_gib`",
        ),
        (
            "perplexity below 1",
            a_with("claim = { perplexity = 0.5 }"),
            "`configs[0].claim.perplexity`",
        ),
        (
            "claimed throughput inf",
            a_with("claim = { samples_per_s = inf }"),
            "`configs[0].claim.samples_per_s`",
        ),
        (
            "goal threshold nan",
            format!(
                "{GOOD}\n[[goals]]\nlabel = \"ck\"\nnumerator = {{ checkpoint = 1 }}\n\
                 denominator = {{ checkpoint = \"none\" }}\nat_most = nan\n"
            ),
            "`goals[0].at_most`",
        ),
        (
            "goal side at a precision",
            format!(
                "{GOOD}\n[[goals]]\nlabel = \"ck\"\nnumerator = {{ checkpoint = 2, precision = \"bf16\" }}\n\
                 denominator = {{}}\nat_most = 1.4\n"
            ),
            "`goals[0].numerator.precision`",
        ),
        (
            "goal side picking no configuration",
            format!(
                "{GOOD}\n[[goals]]\nlabel = \"ck\"\nnumerator = {{ checkpoint = 2 }}\n\
                 denominator = {{ checkpoint = 1 }}\nat_most = 1.4\n"
            ),
            "`goals[0].denominator`",
        ),
        (
            "goal side with a misspelled field",
            format!(
                "{GOOD}\n[[goals]]\nlabel = \"ck\"\nnumerator = {{ chekpoint = 2 }}\n\
                 denominator = {{}}\nat_most = 1.4\n"
            ),
            "chekpoint",
        ),
        (
            "study name with a space",
            edit("name = \"s\"", "name = \"my study\""),
            "`study.name`",
        ),
        (
            "duplicate configuration name",
            edit("name = \"b\"", "name = \"a\""),
            "`configs[1].name`",
        ),
        (
            "typo in a profile name",
            edit("[profiles.smoke]", "[profiles.smoke]\n[profiles.smok]"),
            "profiles.smok",
        ),
        (
            "key written twice",
            edit("lr = 3e-4", "lr = 3e-4\nlr = 1e-3"),
            "lr",
        ),
        (
            "a train key under another name",
            edit("lr = 3e-4", "learning_rate = 3e-4"),
            "learning_rate",
        ),
        ("an empty file", String::new(), "study"),
        (
            "a policy without a recomputing strategy",
            a_with("policy = \"save_matmuls\""),
            "`configs[0].policy`",
        ),
        (
            "a policy with the naive attention",
            a_with("checkpoint = 1\npolicy = \"save_matmuls\"\nattention = \"naive\""),
            "`configs[0].policy`",
        ),
        (
            "a policy with Burn's layer norm",
            a_with("checkpoint = 1\npolicy = \"save_nothing\"\nlayer_norm = \"composed\""),
            "`configs[0].policy`",
        ),
        (
            "an unknown policy",
            a_with("checkpoint = 1\npolicy = \"dots_saveable\""),
            "unknown policy `dots_saveable`",
        ),
        (
            "an unknown unit in a policy",
            a_with("checkpoint = 1\npolicy = [\"qkv\", \"gelu\"]"),
            "unknown unit `gelu`",
        ),
    ]
}

#[test]
fn every_malformed_experiment_file_is_refused_naming_file_and_field() {
    let cases = experiment_cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for (what, text, field) in &cases {
        let msg = load_err(text);
        if !(msg.contains("typo_study.toml") && msg.contains(field)) {
            failures.push(format!("{what}: expected the file and {field}, got: {msg}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn range_errors_state_the_accepted_range() {
    let msg = load_err(&edit("lr = 3e-4", "lr = nan"));
    assert!(msg.contains("(0, 1]"), "{msg}");
    let msg = load_err(&edit("eval_batches = 2", "eval_batches = 0"));
    assert!(msg.contains("[1, "), "{msg}");
    let msg = load_err(&edit("checkpoint = 2", "checkpoint = 10"));
    assert!(msg.contains("[1, 4]"), "{msg}");
}

/// A finished job's record of the smoke model, with one measured step.
fn record(dir: &Path) -> (JobRecord, PathBuf) {
    let p = write(dir, GOOD);
    let study = Study::load(&p, Profile::Smoke, None).unwrap();
    let data = memwall_core::spec::PreparedData {
        dir: dir.join("data"),
        fingerprint: "f".into(),
        vocab_size: 300,
        eos_id: 0,
    };
    let job = study
        .jobs(
            memwall_core::device::BackendKind::Flex,
            0,
            &study.one_corpus(data),
        )
        .remove(0);
    let env = memwall_core::measure::Environment {
        device_name: "test CPU".into(),
        ..Default::default()
    };
    let rec = JobRecord::unfinished(&job, JobStatus::Failed, "test".into(), env);
    let out = dir.join("runs").join("s").join(rec.key.clone());
    (rec, out)
}

/// Writes a valid record, lets `damage` edit its JSON text, and returns the read error.
fn read_damaged(damage: impl Fn(&str) -> String) -> (String, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (rec, out) = record(dir.path());
    write_record(&out, &rec).unwrap();
    let file = out.join("record.json");
    let text = std::fs::read_to_string(&file).unwrap();
    let damaged = damage(&text);
    assert_ne!(damaged, text, "the damage must change the file");
    std::fs::write(&file, damaged).unwrap();
    let msg = read_record(&out).unwrap_err().to_string();
    (msg, file)
}

#[test]
fn every_malformed_record_is_named_with_its_path_and_field() {
    /// What happened to the file, the damage, and what the error must name.
    type Damage = (&'static str, Box<dyn Fn(&str) -> String>, &'static str);
    let cases: Vec<Damage> = vec![
        (
            "truncated by a full disk",
            Box::new(|t: &str| t[..t.len() / 2].to_string()),
            "EOF",
        ),
        ("emptied", Box::new(|_: &str| String::new()), "empty"),
        (
            "lr written as null by an old memwall",
            Box::new(|t: &str| t.replacen("\"lr\": 0.0003", "\"lr\": null", 1)),
            "`spec.train.lr`",
        ),
        (
            "a status this memwall does not know",
            Box::new(|t: &str| t.replacen("\"status\": \"failed\"", "\"status\": \"done\"", 1)),
            "`status`",
        ),
        (
            "a hand-edited negative batch",
            Box::new(|t: &str| t.replacen("\"batch\": 2", "\"batch\": -2", 1)),
            "`spec.model.batch`",
        ),
        (
            "the key removed",
            Box::new(|t: &str| {
                let start = t.find("\"key\"").unwrap();
                let end = start + t[start..].find('\n').unwrap() + 1;
                format!("{}{}", &t[..start], &t[end..])
            }),
            "key",
        ),
        (
            "a second record appended",
            Box::new(|t: &str| format!("{t}{t}")),
            "trailing",
        ),
    ];
    let mut failures = Vec::new();
    for (what, damage, field) in cases {
        let (msg, file) = read_damaged(damage);
        if !(msg.contains(&file.display().to_string()) && msg.contains(field)) {
            failures.push(format!("{what}: expected the path and {field}, got: {msg}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn records_with_non_finite_numbers_are_stored_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let (mut rec, out) = record(dir.path());
    rec.spec.strategy.recompute = memwall_core::spec::Recompute::Budget(f64::NAN);
    rec.steps.push(memwall_core::record::StepRecord {
        step: 0,
        warmup: false,
        memory_step: false,
        loss: f64::INFINITY,
        time_s: 0.5,
        peak_allocated_bytes: 1,
        peak_reserved_bytes: 1,
        loss_scale: Some(f64::NEG_INFINITY),
        skipped: true,
        grad_zero_fraction: None,
        recomputed_units: None,
    });
    rec.key = rec.spec.key();
    write_record(&out, &rec).unwrap();
    let back = read_record(&out).unwrap().unwrap();
    assert!(back.spec.strategy.recompute.budget().unwrap().is_nan());
    assert_eq!(back.steps[0].loss, f64::INFINITY);
    assert_eq!(back.steps[0].loss_scale, Some(f64::NEG_INFINITY));
}

#[test]
fn a_record_that_contradicts_itself_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let (mut rec, out) = record(dir.path());
    rec.key = "0000000000000000".into();
    let msg = write_record(&out, &rec).unwrap_err().to_string();
    assert!(
        msg.contains("`key`") && msg.contains("record.json"),
        "{msg}"
    );
    assert!(!out.join("record.json").exists());
    let (mut rec, out) = record(dir.path());
    rec.status = JobStatus::Ok;
    let msg = write_record(&out, &rec).unwrap_err().to_string();
    assert!(msg.contains("`summary`"), "{msg}");
}

#[test]
fn malformed_job_files_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let (rec, _) = record(dir.path());
    let good = serde_json::to_string_pretty(&rec.spec).unwrap();
    let cases = [
        (
            "\"eval_batches\": 2",
            "\"eval_batches\": 0",
            "`train.eval_batches`",
        ),
        ("\"lr\": 0.0003", "\"lr\": \"NaN\"", "`train.lr`"),
        ("\"lr\": 0.0003", "\"lr\": null", "`train.lr`"),
        ("\"layers\": 4", "\"layers\": 0", "`model.layers`"),
        (
            "\"checkpoint\": \"none\"",
            "\"checkpoint\": 9",
            "`strategy.checkpoint`",
        ),
    ];
    for (from, to, field) in cases {
        assert!(good.contains(from), "{from} not in {good}");
        let file = dir.path().join("job.json");
        std::fs::write(&file, good.replacen(from, to, 1)).unwrap();
        let msg = JobSpec::read(&file).unwrap_err().to_string();
        assert!(
            msg.contains("job.json") && msg.contains(field),
            "{to}: expected {field}: {msg}"
        );
    }
}
