//! Job records and the record store: one folder per job under `runs/<study>/<key>/` holding
//! `job.json` (the job as run) and `record.json` (what it measured), each written atomically.
//!
//! May import: [`crate::spec`], [`crate::measure`], [`crate::strategy`], [`crate::error`].

pub mod attribution;
pub mod fusion_chains;
mod schema;
mod store;

pub use schema::{JobRecord, JobStatus, StepRecord, Summary};
pub use store::{
    parse_json, read_record, record_dir, set_aside, write_atomic, write_record, JsonError,
    RecordFileError, RowError, RECORD_FILE, UNREADABLE_PREFIX,
};
