//! The environment table every training record carries into its report: where and how it was
//! measured (device, backend, numerics, CPU, OS, the runner's revision and source changes), the
//! model and the training settings.

use crate::content::Table;
use memwall_core::record::JobRecord;

/// The environment table of a training record: device, backend, numerics, CPU, OS, git
/// revision, then `model` (its description), the training settings under the field name
/// `training` and the memory probe.
pub fn record_environment(
    rec: &JobRecord,
    caption: String,
    model: String,
    training: &str,
) -> Table {
    let (e, t) = (&rec.env, &rec.spec.train);
    let row = |field: &str, value: String| vec![field.to_string(), value];
    Table {
        caption,
        columns: vec!["field".into(), "value".into()],
        rows: vec![
            row("device", e.device_name.clone()),
            row("backend", format!("burn {} {}", e.burn_version, e.backend)),
            row("numerics", e.numerics.clone()),
            row(
                "CPU",
                format!("{} ({} threads)", e.cpu_model, e.cpu_threads),
            ),
            row("OS", e.os.clone()),
            row(
                "git revision",
                if e.source_changes.is_empty() {
                    e.git_revision.clone()
                } else {
                    format!("{} ({})", e.git_revision, e.source_changes)
                },
            ),
            row("model", model),
            row(
                training,
                format!(
                    "{:?}, lr {}, {} warm-up + {} measured steps, {} eval batches, seed {}",
                    t.optimizer, t.lr, t.warmup_steps, t.steps, t.eval_batches, t.seed
                ),
            ),
            row("memory probe", rec.memory_probe.clone()),
        ],
        notes: Vec::new(),
    }
}
