//! Fixtures shared by the unit tests of the memwall crates (not part of the public interface).

use crate::device::BackendKind;
use crate::spec::{JobSpec, PreparedData, Profile, Study};
use std::path::Path;

/// `experiments/peak_memory.toml` at its `full` profile and its CUDA jobs, on a stand-in
/// tokenized corpus (vocabulary 3025, as the shared data's).
///
/// # Panics
/// When the committed experiment file does not load (a test fixture, never called by memwall).
pub fn peak_memory_full() -> (Study, Vec<JobSpec>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/peak_memory.toml");
    let study = Study::load(&path, Profile::Full, None).unwrap();
    let data = PreparedData {
        dir: "data/x".into(),
        fingerprint: "x".into(),
        vocab_size: 3025,
        eos_id: 0,
    };
    let jobs = study.jobs(BackendKind::Cuda, 0, &study.one_corpus(data));
    (study, jobs)
}
