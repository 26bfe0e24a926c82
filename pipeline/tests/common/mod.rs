//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The workspace root (parent of `pipeline/`).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/data` beside the repository (or `MEMWALL_SHARED_DATA`).
pub fn shared_data() -> PathBuf {
    std::env::var_os("MEMWALL_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/data"))
}

/// The real TinyStories excerpt used by tests.
pub fn excerpt() -> PathBuf {
    shared_data().join("tinystories/TinyStories-valid-excerpt.txt")
}
