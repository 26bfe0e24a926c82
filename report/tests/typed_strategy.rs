//! A configuration's strategy travels as data from the experiment file to the analysis (issue
//! 51): no code of core or report reads a strategy field back out of a configuration's name, or
//! compares one as text.

use std::path::{Path, PathBuf};

/// How the strategy was read before: K parsed out of `deep-ck3-f32-fusedopt`, membership of a
/// sweep by the name alone or by a name pattern (`deep-ck*-f32-fusedopt`, the sweep's name with
/// `ck*` for K), the checkpoint column as the text "3" and compared as text.
const OLD_PATTERNS: &[&str] = &[
    r#"strip_prefix("ck")"#,
    r#""ck*""#,
    "sweep_measure(",
    "sweep_config_name(",
    "split_once(SWEEP_WILDCARD)",
    "sweep_member(sweep, &c.name)",
    "sweep_member(sweep, &c.cfg.name)",
    "checkpoint().to_string()",
    "checkpoint.to_string()",
    "checkpoint.as_str()",
    "other.parse::<f64>()",
    // Precision, optimizer and layer norm as text (a String field compared with "f32").
    r#"strs("precision")"#,
    r#"strs("optimizer")"#,
    r#"strs("layer_norm")"#,
    r#"in ["f32", "f16", "bf16"]"#,
    "layer_norm.as_str())",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_strategy_field_is_parsed_from_a_name_or_compared_as_text() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in ["core/src", "report/src"] {
        rust_files(&workspace.join(krate), &mut files);
    }
    assert!(
        files.len() > 20,
        "sources not found under {}",
        workspace.display()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            for p in OLD_PATTERNS {
                if line.contains(p) {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a strategy field read from a name or as text (use the configuration's typed field):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checkpoint_columns_round_trip_every_policy() {
    use memwall_core::spec::CheckpointSpec;
    use memwall_report::analysis::{checkpoint_k, checkpoint_of, checkpoint_policy};
    for (c, k) in [
        (CheckpointSpec::None, None),
        (CheckpointSpec::Every(3), Some(3)),
        (CheckpointSpec::Every(128), Some(128)),
        // ceil(sqrt(128)) = 12 blocks per segment.
        (CheckpointSpec::Sqrt, Some(12)),
    ] {
        assert_eq!(checkpoint_k(c, 128), k, "{c}");
        assert_eq!(
            checkpoint_of(checkpoint_policy(c), k.map(u64::from)),
            Some(c)
        );
    }
    assert_eq!(checkpoint_of("every_k", None), None);
    assert_eq!(checkpoint_of("3", Some(3)), None, "the old text column");
}
