//! The analysis: a study's job records read from the record store (one folder per job under
//! `runs/<study>/`, read-only here), the typed polars tables built from them ([`study_table`],
//! [`steps_table`]) and the summaries the sections read ([`summary`], [`sublinear`]), with
//! order-statistic intervals ([`stats`]) and the operation timings stored beside the records
//! ([`attribution`]). Nothing here writes a report; the [`crate::sinks`] do.

pub mod attribution;
pub mod stats;
pub mod sublinear;
pub mod summary;
mod table;

pub use memwall_core::record::{
    parse_json, read_record, record_dir, set_aside, write_atomic, write_record, JobRecord,
    JobStatus, StepRecord, Summary, RECORD_FILE, UNREADABLE_PREFIX,
};
pub(crate) use table::perr;
pub use table::{
    checkpoint_k, checkpoint_of, checkpoint_policy, runtime_label, steps_table, study_table,
    StudyRecords,
};
