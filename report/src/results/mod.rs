//! Job records, the record store (one folder per job under `runs/<study>/`, read-only here), and
//! the analysis: polars tables built from a study's records, and their Parquet sink.

pub mod analysis;
pub mod sublinear;
mod table;

pub use memwall_core::record::{
    parse_json, read_record, record_dir, set_aside, write_atomic, write_record, JobRecord,
    JobStatus, StepRecord, Summary, RECORD_FILE, UNREADABLE_PREFIX,
};
pub use table::{
    checkpoint_k, checkpoint_of, checkpoint_policy, runtime_label, steps_table, study_table,
    write_parquet_tables, StudyRecords, STEPS_FILE, SUMMARY_FILE,
};
