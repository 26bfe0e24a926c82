//! Resuming from the committed evidence: a GPU bundle leaves out every job whose record for the
//! GPU model it is written for is already in the record store, and every PyTorch twin already
//! stored for that model, so that the next GPU command starts with the first missing row
//! instead of measuring again what is committed.
//!
//! A row counts as stored when it is an answer: a memwall record that finished (`ok`), ran out
//! of memory or was found infeasible, a PyTorch row that finished or ran out of memory. A crash
//! (`failed`) or a missing backend (`unsupported`) is measured again.

use super::*;
use memwall_core::record::JobStatus;

/// For which GPU model a bundle resumes, and why that one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeFor {
    /// The GPU model as the records name it (`env.device_name`, e.g. "NVIDIA H200").
    pub gpu_model: String,
    /// How it was chosen, e.g. "--gpu-model" or "the GPU of the newest CUDA record".
    pub chosen_by: String,
}

/// The GPU model a bundle resumes for: `named` when given, else the device of the newest CUDA
/// record among `stored` (the bundled studies' records; `None` when there is none: nothing is
/// left out).
pub fn resume_model(stored: &[JobRecord], named: Option<&str>) -> Option<ResumeFor> {
    if let Some(m) = named {
        return Some(ResumeFor {
            gpu_model: m.to_string(),
            chosen_by: "--gpu-model".into(),
        });
    }
    let mut newest: Option<(String, String)> = None;
    for rec in stored
        .iter()
        .filter(|r| r.spec.backend.is_gpu() && !r.env.device_name.is_empty())
    {
        if newest.as_ref().is_none_or(|(at, _)| rec.finished_at > *at) {
            newest = Some((rec.finished_at.clone(), rec.env.device_name.clone()));
        }
    }
    newest.map(|(at, model)| ResumeFor {
        gpu_model: model,
        chosen_by: format!("the GPU of the newest CUDA record ({at})"),
    })
}

/// Whether a memwall record's status answers its configuration (see the module's text).
pub fn record_answers(status: JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Ok | JobStatus::OutOfMemory | JobStatus::Infeasible
    )
}

/// The stored record of job `key` of `study` measured on `gpu_model`, if it answers: the
/// store keeps one folder per key and device model (`<key>` and `<key>.<device slug>`,
/// [`store_dir`]).
pub fn stored_record(runs: &Path, study: &str, key: &str, gpu_model: &str) -> Option<JobRecord> {
    let plain = record::record_dir(runs, study, key);
    let slugged = plain.with_file_name(format!(
        "{key}.{}",
        memwall_core::record::attribution::slug(gpu_model)
    ));
    [plain, slugged]
        .iter()
        .filter_map(|d| record::read_record(d).ok().flatten())
        .find(|r| r.env.device_name == gpu_model && record_answers(r.status))
}

/// Whether a PyTorch row answers its configuration: it finished or ran out of memory.
pub fn twin_answers(status: twin::TorchStatus) -> bool {
    matches!(
        status,
        twin::TorchStatus::Ok | twin::TorchStatus::OutOfMemory
    )
}

/// The stored PyTorch row of `config` of `plan`'s study measured on `gpu_model` at the plan's
/// model shape, if it answers.
pub fn stored_twin<'a>(
    stored: &'a [TorchRow],
    plan: &twin::TwinJobs,
    config: &str,
    gpu_model: &str,
) -> Option<&'a TorchRow> {
    stored.iter().find(|r| {
        r.config == config
            && r.device == gpu_model
            && r.model == plan.model
            && twin_answers(r.status)
    })
}

/// Why a stored job is left out, for the manifest and the dry run.
pub(super) fn record_reason(r: &JobRecord) -> String {
    format!(
        "stored: {} record of {} ({}) in the record store; --rerun-stored measures it again",
        r.status.as_str(),
        r.env.device_name,
        r.finished_at.get(..10).unwrap_or(&r.finished_at)
    )
}

/// Why a stored twin is left out.
pub(super) fn twin_reason(r: &TorchRow) -> String {
    format!(
        "stored: PyTorch {} row of {} ({}); --rerun-stored measures it again",
        r.status.as_str(),
        r.device,
        r.finished_at.get(..10).unwrap_or(&r.finished_at)
    )
}
