//! Adding a study, as the contributor chapter shows it (`docs/src/contributor/adding-a-study.md`
//! includes the anchored parts of this file and of `studies/src/registry.rs`, so the book shows
//! code that compiles and runs): a complete in-process study, and the registry that every
//! experiment file's `kind` resolves through.

use memwall_core::spec::provenance::Provenance;
use memwall_core::spec::{Profile, Study, StudyKind};
use memwall_document::content::{Measure, Section};
use memwall_studies::{CiteAs, Cited, InProcessStudy, ParamError};
use std::path::{Path, PathBuf};

// ANCHOR: study
/// Activation memory of a chain of `layers` equal activations of `bytes` each, stored whole or
/// checkpointed every `k` layers: `ceil(layers / k)` checkpoints plus the `k` activations of the
/// segment being recomputed (Chen et al. 2016, arXiv:1604.06174, Section 3).
pub struct ChainMemory;

/// `[params]` of the experiment file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainParams {
    /// Activations in the chain.
    pub layers: u64,
    /// Bytes of one activation.
    pub bytes: u64,
    /// Layers per checkpointed segment.
    pub k: u64,
}

/// What the study measured (stored as its record; the report renders it again later).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ChainResult {
    /// Bytes kept with every activation stored.
    pub full_bytes: u64,
    /// Bytes kept at the peak with checkpoints every `k` layers.
    pub checkpointed_bytes: u64,
}

impl InProcessStudy for ChainMemory {
    type Params = ChainParams;
    type Output = ChainResult;
    type Error = std::convert::Infallible;
    type Cited = CiteAs;

    fn validate(p: &ChainParams) -> Result<(), ParamError> {
        if p.k == 0 || p.k > p.layers {
            return Err(ParamError {
                field: "k".into(),
                message: format!("must be in [1, layers = {}], found {}", p.layers, p.k),
            });
        }
        Ok(())
    }

    fn run(p: &ChainParams, _data_dir: &Path) -> Result<ChainResult, Self::Error> {
        Ok(ChainResult {
            full_bytes: p.layers * p.bytes,
            checkpointed_bytes: (p.layers.div_ceil(p.k) + p.k) * p.bytes,
        })
    }

    fn sections(out: &ChainResult, cited: &Cited<CiteAs>) -> Vec<Section> {
        vec![Section {
            title: "Checkpointing a chain".into(),
            claim: format!(
                "{}: O(N/K) + O(K) memory.",
                cited.name(&cited.values.cite_as)
            ),
            ours: format!(
                "{} bytes stored whole, {} bytes checkpointed.",
                out.full_bytes, out.checkpointed_bytes
            ),
            ..Default::default()
        }]
    }

    fn measures(out: &ChainResult) -> Vec<Measure> {
        let reduction = 100.0 * (1.0 - out.checkpointed_bytes as f64 / out.full_bytes as f64);
        vec![Measure::new(
            "reduction_pct",
            reduction,
            "%",
            1,
            Provenance::Computed("100 x (1 - checkpointed / full bytes) of the chain".into()),
        )]
    }
}
// ANCHOR_END: study

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn the_worked_example_is_a_study_that_validates_runs_renders_and_measures() {
    let params: ChainParams = toml::from_str("layers = 16\nbytes = 4\nk = 4").unwrap();
    ChainMemory::validate(&params).unwrap();
    let out = ChainMemory::run(&params, Path::new(".")).unwrap();
    // 16 activations whole; 4 checkpoints and one segment of 4 checkpointed.
    assert_eq!((out.full_bytes, out.checkpointed_bytes), (64, 32));
    let m = ChainMemory::measures(&out);
    assert_eq!((m[0].name.as_str(), m[0].value), ("reduction_pct", 50.0));
    let cited = Cited {
        source: "003_c07c09ab371a2f69.txt".to_string(),
        values: toml::from_str::<CiteAs>("cite_as = \"(lecture)\"").unwrap(),
    };
    let sections = ChainMemory::sections(&out, &cited);
    assert!(
        sections[0]
            .claim
            .starts_with("003_c07c09ab371a2f69.txt (lecture)"),
        "{}",
        sections[0].claim
    );
    let wrong: ChainParams = toml::from_str("layers = 16\nbytes = 4\nk = 17").unwrap();
    let err = ChainMemory::validate(&wrong).unwrap_err();
    assert_eq!(err.field, "k");
    assert!(
        toml::from_str::<ChainParams>("layers = 16\nbytes = 4\nk = 4\nK = 3").is_err(),
        "an unknown key is refused"
    );
}

#[test]
fn every_in_process_kind_is_a_registry_name_with_its_module_and_experiment_file() {
    let root = workspace();
    let files = Study::discover(&root.join("experiments")).unwrap();
    let mut kinds = Vec::new();
    for f in &files {
        let h = Study::header(f).unwrap();
        if let StudyKind::InProcess(name) = &h.kind {
            assert!(
                memwall_studies::in_process_studies().contains(&name.as_str()),
                "{}: kind `{name}` is not in the registry",
                f.display()
            );
            kinds.push(name.clone());
        }
    }
    for name in memwall_studies::in_process_studies() {
        assert!(
            kinds.iter().any(|k| k == name),
            "the registry's `{name}` has no experiment file with `kind = \"{name}\"`"
        );
        let src = root.join("studies/src");
        assert!(
            src.join(format!("{name}.rs")).is_file() || src.join(name).join("mod.rs").is_file(),
            "the registry's `{name}` has no module studies/src/{name}(.rs|/mod.rs)"
        );
    }
}

#[test]
fn an_unknown_kind_is_refused_naming_the_known_studies() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(workspace().join("experiments/scalar_checkpoint.toml"))
        .unwrap()
        .replace(
            "kind = \"scalar_checkpoint\"",
            "kind = \"scalar_checkpointing\"",
        );
    std::fs::create_dir(dir.path().join("experiments")).unwrap();
    let path = dir.path().join("experiments/scalar_checkpoint.toml");
    std::fs::write(&path, text).unwrap();
    let study = Study::load(&path, Profile::Smoke, None).unwrap();
    let msg = memwall_studies::check(&study).unwrap_err().to_string();
    assert!(
        msg.contains("study.kind")
            && msg.contains("no in-process study is named `scalar_checkpointing`")
            && msg.contains("\"scalar_checkpoint\""),
        "{msg}"
    );
    // A name that cannot be a study's is refused when the file is read.
    std::fs::write(
        &path,
        std::fs::read_to_string(workspace().join("experiments/scalar_checkpoint.toml"))
            .unwrap()
            .replace(
                "kind = \"scalar_checkpoint\"",
                "kind = \"Scalar Checkpoint\"",
            ),
    )
    .unwrap();
    let msg = Study::load(&path, Profile::Smoke, None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("is not a study kind"), "{msg}");
}
