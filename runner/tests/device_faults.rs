//! Out-of-memory on a GPU is a result: the exact log of the first H100 run (where memwall
//! misfiled the f32 control's OOM as divergence) must classify as `out_of_memory`. The panic hook
//! is process-wide, so these tests live in their own file.

use memwall_core::device::BackendKind;
use memwall_core::record::JobStatus;
use memwall_core::spec::{PreparedData, Profile, Study};
use memwall_runner::measure::fault;

fn control_log() -> String {
    let path = shared_data().join("../gpu-runs/2026-11-22-h100/control.log.txt");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn cuda_job() -> memwall_core::spec::JobSpec {
    let study = Study::load(
        &root().join("experiments/peak_memory.toml"),
        Profile::Smoke,
        None,
    )
    .expect("peak_memory.toml loads");
    let data = PreparedData {
        dir: "data".into(),
        fingerprint: "0".into(),
        vocab_size: 320,
        eos_id: 0,
    };
    study
        .jobs(BackendKind::Cuda, 0, &study.one_corpus(data))
        .remove(0)
}

#[test]
fn the_h100_control_log_is_an_out_of_memory() {
    let log = control_log();
    let oom = fault::from_lines(log.lines()).expect("the log reports an allocation failure");
    assert_eq!(oom.requested_bytes, Some(16_777_216));
    assert!(oom
        .message
        .contains("can't allocate buffer of size: 16777216"));
    // The thousands of "Memory page 0 doesn't exist" panics after it are follow-ons.
    assert!(oom.follow_on_failures >= 3, "{oom:?}");

    // The job then ended with a NaN loss: that is not divergence.
    let job = cuda_job();
    let record = memwall_runner::train::classify_outcome(
        &job,
        memwall_runner::measure::host_environment(),
        Err("training loss is NaN at step 9 (diverged)".into()),
        Some(oom.clone()),
    );
    assert_eq!(record.status, JobStatus::OutOfMemory);
    let reason = record.reason.unwrap();
    assert!(reason.contains("16777216 bytes"), "{reason}");
    assert_eq!(record.out_of_memory, Some(oom));

    // Without an allocation failure first, a NaN loss is divergence (a failed job).
    let record = memwall_runner::train::classify_outcome(
        &job,
        memwall_runner::measure::host_environment(),
        Err("training loss is NaN at step 9 (diverged)".into()),
        None,
    );
    assert_eq!(record.status, JobStatus::Failed);
}

#[test]
fn a_device_thread_panic_is_recorded_by_the_hook() {
    fault::clear();
    fault::install_panic_hook();
    fault::note_pool(5 << 30, 8 << 30);
    let log = control_log();
    // Replay the log's panic messages on a thread named like CubeCL's device thread.
    let messages: Vec<String> = log
        .lines()
        .filter(|l| fault::classify(l).is_some())
        .map(|l| l.trim().to_string())
        .collect();
    std::thread::Builder::new()
        .name("DSD-0-0".into())
        .spawn(move || {
            for m in messages {
                let _ = std::panic::catch_unwind(|| std::panic::panic_any(m));
            }
        })
        .unwrap()
        .join()
        .unwrap();
    let oom = fault::first_fault().expect("the hook recorded the allocation failure");
    assert_eq!(oom.requested_bytes, Some(16_777_216));
    assert_eq!(oom.pool_in_use_bytes, Some(5 << 30));
    assert_eq!(oom.pool_reserved_bytes, Some(8 << 30));
    assert!(oom.follow_on_failures >= 3);
}

/// The workspace root (parent of this crate's folder).
fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `../shared/data` beside the repository (or `MEMWALL_SHARED_DATA`).
fn shared_data() -> std::path::PathBuf {
    std::env::var_os("MEMWALL_SHARED_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/data"))
}
