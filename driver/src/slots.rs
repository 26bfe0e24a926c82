//! Device slots: the GPUs (or the one CPU) a sweep runs its job processes on, one process per
//! slot at a time.

use super::*;

/// One device of a multi-device sweep: its name for logs and the environment of its job
/// processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSlot {
    /// `cuda:N` or `cpu:<id>`.
    pub name: String,
    /// Variables set for the job processes on this device.
    pub env: Vec<(String, String)>,
}

/// The devices a sweep runs its jobs on at once ([`RunOptions::devices`]); empty for the
/// one-job-at-a-time sweep.
///
/// # Errors
/// [`Error::Device`] for a CUDA id that is not a GPU ordinal, an id given twice, or `--devices`
/// with `--device cuda:N` (choose one).
pub fn device_slots(opts: &RunOptions, dev: &ResolvedDevice) -> Result<Vec<DeviceSlot>> {
    let bad = |message: String| Error::Device {
        requested: opts.devices.join(","),
        message,
    };
    let gpu = dev.backend.is_gpu();
    let ids: Vec<String> = if !opts.devices.is_empty() {
        if let DeviceRequest::Cuda(n) = opts.device {
            if n != 0 {
                return Err(bad(format!(
                    "--devices with --device cuda:{n}: give the GPUs in --devices only"
                )));
            }
        }
        opts.devices.clone()
    } else if gpu && opts.device == DeviceRequest::Auto {
        let count = device::probe_cuda().map(|i| i.device_count).unwrap_or(1);
        if count < 2 {
            return Ok(Vec::new());
        }
        (0..count).map(|i| i.to_string()).collect()
    } else {
        return Ok(Vec::new());
    };
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    slots_for(&ids, gpu, visible.as_deref()).map_err(bad)
}

/// The slots of `ids` (GPU ordinals when `gpu`, mapped through the parent's
/// `CUDA_VISIBLE_DEVICES` list `visible`), or the message of a bad id.
fn slots_for(
    ids: &[String],
    gpu: bool,
    visible: Option<&str>,
) -> std::result::Result<Vec<DeviceSlot>, String> {
    let visible: Option<Vec<String>> =
        visible.map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let bad = |m: String| m;
    let mut slots = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if id.is_empty() || ids[..i].contains(id) {
            return Err(bad(format!(
                "device id `{id}` is empty or given twice: expected distinct ids, e.g. 0,1,2"
            )));
        }
        if gpu {
            let n: usize = id.parse().map_err(|_| {
                bad(format!(
                    "`{id}` is not a GPU ordinal: expected numbers, e.g. --devices 0,1"
                ))
            })?;
            // Ordinals count the GPUs this process sees: map them through its own
            // CUDA_VISIBLE_DEVICES, if set.
            let physical = match &visible {
                Some(v) => v.get(n).cloned().ok_or_else(|| {
                    bad(format!(
                        "GPU {n} is not among the {} of CUDA_VISIBLE_DEVICES={}",
                        v.len(),
                        v.join(",")
                    ))
                })?,
                None => id.clone(),
            };
            slots.push(DeviceSlot {
                name: format!("cuda:{n}"),
                env: vec![
                    ("CUDA_VISIBLE_DEVICES".into(), physical),
                    ("MEMWALL_DEVICE".into(), format!("cuda:{n}")),
                ],
            });
        } else {
            slots.push(DeviceSlot {
                name: format!("cpu:{id}"),
                env: vec![("MEMWALL_DEVICE".into(), format!("cpu:{id}"))],
            });
        }
    }
    Ok(slots)
}

/// `runner` started through `env` with the slot's variables set.
pub(crate) fn slot_runner(
    runner: &(PathBuf, Vec<String>),
    slot: &DeviceSlot,
) -> (PathBuf, Vec<String>) {
    let mut args: Vec<String> = slot.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    args.push(runner.0.display().to_string());
    args.extend(runner.1.iter().cloned());
    (PathBuf::from("env"), args)
}

#[cfg(test)]
mod tests;
