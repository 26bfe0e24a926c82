//! Job records, the record store (one folder per job under `runs/<study>/`), the Parquet
//! files derived from records, and polars aggregation.

mod table;

pub use memwall_core::record::{
    read_record, record_dir, write_atomic, write_record, JobRecord, JobStatus, StepRecord, Summary,
    RECORD_FILE,
};
pub use table::{ingest, ingest_all, steps_table, study_table, STEPS_FILE, SUMMARY_FILE};
