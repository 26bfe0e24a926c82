//! The Slurm job-array scripts of `memwall sweep --emit slurm`, and one array task run as Slurm
//! would run it.

mod common;

use memwall_driver as driver;
use std::path::Path;

#[test]
fn emit_slurm_writes_one_array_task_per_job_key() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::interval_study(dir.path(), 2);
    let slurm = dir.path().join("slurm");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"))
        .current_dir(dir.path())
        .args([
            "sweep",
            "--emit",
            "slurm",
            "--profile",
            "smoke",
            "--device",
            "cpu",
        ])
        .arg(&exp)
        .arg("--slurm-dir")
        .arg(&slurm)
        .args(["--partition", "gpu", "--time", "01:00:00"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The keys of the array are the driver's job keys.
    let (_, _, jobs) = driver::plan_jobs(
        &exp,
        &memwall_driver::Paths {
            cache: dir.path().join(".memwall/cache"),
            ..common::temp_paths(dir.path())
        },
        &common::smoke_options(),
    )
    .unwrap();
    let tsv = std::fs::read_to_string(slurm.join("jobs.tsv")).unwrap();
    let rows: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), jobs.len());
    for (i, (row, job)) in rows.iter().zip(&jobs).enumerate() {
        // task, key, configuration, the experiment file (absolute) the task sweeps
        let exp_abs = exp.canonicalize().unwrap();
        assert_eq!(row[..3], [i.to_string().as_str(), &job.key(), &job.config]);
        assert_eq!(Path::new(row[3]).canonicalize().unwrap(), exp_abs);
    }
    let array = std::fs::read_to_string(slurm.join("array.sbatch")).unwrap();
    assert!(array.starts_with("#!/bin/bash\n"), "{array}");
    for line in [
        "#SBATCH --array=0-1",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=01:00:00",
        "SLURM_ARRAY_TASK_ID",
        "--profile smoke --device cpu --backend flex",
        "--keys \"$key\"",
    ] {
        assert!(array.contains(line), "missing {line}: {array}");
    }
    // A CPU study asks for no GPU.
    assert!(!array.contains("--gres"), "{array}");
    let final_job = std::fs::read_to_string(slurm.join("final.sbatch")).unwrap();
    assert!(final_job.contains(" report "), "{final_job}");
    let submit = std::fs::read_to_string(slurm.join("submit.sh")).unwrap();
    assert!(submit.contains("--dependency=afterany:"), "{submit}");
    // The scripts are valid bash.
    for f in ["array.sbatch", "final.sbatch", "submit.sh"] {
        let st = std::process::Command::new("bash")
            .arg("-n")
            .arg(slurm.join(f))
            .status()
            .unwrap();
        assert!(st.success(), "{f} is not valid bash");
    }
    // One array task, run as Slurm would run it (SLURM_ARRAY_TASK_ID=1), writes that job's
    // record into the shared store.
    let st = std::process::Command::new("bash")
        .arg(slurm.join("array.sbatch"))
        .current_dir(dir.path())
        .env("SLURM_ARRAY_TASK_ID", "1")
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let record = memwall_core::record::read_record(&memwall_core::record::record_dir(
        // The default store: this machine's, not the committed evidence.
        &dir.path().join(memwall_driver::LOCAL_RUNS),
        "devices",
        &jobs[1].key(),
    ))
    .unwrap()
    .expect("the task's record");
    assert_eq!(record.spec.config, "c1");
    assert!(
        memwall_core::record::read_record(&memwall_core::record::record_dir(
            // The default store: this machine's, not the committed evidence.
            &dir.path().join(memwall_driver::LOCAL_RUNS),
            "devices",
            &jobs[0].key()
        ))
        .unwrap()
        .is_none()
    );
}
