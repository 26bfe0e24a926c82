//! Job records, the record store (one folder per job under `runs/<study>/`), the Parquet
//! files derived from records, and polars aggregation.

mod record;
mod store;
mod table;

pub use record::{JobRecord, JobStatus, StepRecord, Summary};
pub use store::{read_record, record_dir, write_atomic, write_record, RECORD_FILE};
pub use table::{ingest, ingest_all, steps_table, study_table, STEPS_FILE, SUMMARY_FILE};
