//! The Parquet sink: a training study's records as two tables beside its report, for a reader's
//! own analysis (polars, pandas, DuckDB): the study table, one row per job, and the steps of its
//! jobs.

use super::{Sink, StudyReport};
use crate::analysis::{perr, steps_table, study_table, StudyRecords};
use crate::error::{Error, Result};
use polars::prelude::{DataFrame, ParquetWriter};
use std::path::{Path, PathBuf};

/// File name of the study table written by the Parquet sink (one row per configuration and
/// group, with the derived columns of [`study_table`]).
pub const SUMMARY_FILE: &str = "summary.parquet";
/// File name of the per-step table written by the Parquet sink (one row per step of every job
/// in the study table).
pub const STEPS_FILE: &str = "steps.parquet";

/// The Parquet sink: [`write_parquet_tables`] for a report that carries its records (a training
/// study's; an in-process study's report has none and gets no table).
#[derive(Debug, Clone, Copy, Default)]
pub struct Parquet;

impl Sink for Parquet {
    fn name(&self) -> &'static str {
        "parquet"
    }

    fn study(&self, report: &StudyReport<'_>, out_dir: &Path) -> Result<Vec<PathBuf>> {
        let Some(records) = report.records else {
            return Ok(Vec::new());
        };
        write_parquet_tables(records, out_dir)?;
        Ok(vec![out_dir.join(SUMMARY_FILE), out_dir.join(STEPS_FILE)])
    }
}

/// The Parquet sink of a training report: writes the study table ([`SUMMARY_FILE`]) and the
/// steps of its jobs ([`STEPS_FILE`]) into `out_dir` (`reports/<study>/`), atomically.
///
/// # Errors
/// [`Error::Records`] or [`Error::Io`] naming the file.
pub fn write_parquet_tables(records: &StudyRecords, out_dir: &Path) -> Result<()> {
    let mut summary = study_table(records)?;
    let study = crate::analysis::summary::study_name(records);
    let keys = crate::analysis::summary::Columns::new(&summary, &study, "study").strs("key")?;
    let mut steps = steps_table(records, &keys)?;
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io("creating", out_dir, e))?;
    write_parquet(&out_dir.join(SUMMARY_FILE), &mut summary)?;
    write_parquet(&out_dir.join(STEPS_FILE), &mut steps)
}

fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<()> {
    let tmp = path.with_extension("parquet.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| Error::io("creating", &tmp, e))?;
    ParquetWriter::new(file).finish(df).map_err(perr(path))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("renaming into", path, e))
}
