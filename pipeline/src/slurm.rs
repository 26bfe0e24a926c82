//! `memwall sweep --emit slurm`: a study as a Slurm job array. One array task per job key runs
//! `memwall sweep <experiment> --keys <key>` (the driver's own path: plan stage, one process,
//! the record written into the shared record store); a final job, dependent on the whole array
//! (`afterany`, so a failed task still gets its record reported), renders the report from the
//! shared store.
//!
//! Written files, under the output folder: `jobs.tsv` (task index, job key, configuration),
//! `array.sbatch`, `final.sbatch`, `submit.sh` (submits both with the dependency) and `logs/`.
//! Paths inside the scripts are absolute, so the folder, the record store and the repository
//! must be on a file system every node sees.

use crate::driver::{self, Paths, RunOptions};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// How the Slurm scripts call memwall.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// Folder the scripts are written to.
    pub out: PathBuf,
    /// The `memwall` executable the tasks run (absolute).
    pub memwall: PathBuf,
    /// Working directory of every task (the repository; absolute).
    pub workdir: PathBuf,
    /// `#SBATCH --partition`, if set.
    pub partition: Option<String>,
    /// `#SBATCH --time` of each array task (e.g. `02:00:00`), if set.
    pub time: Option<String>,
}

/// What [`emit`] wrote.
#[derive(Debug, Clone)]
pub struct SlurmScripts {
    /// The array script (one task per job key).
    pub array: PathBuf,
    /// The final (report) job's script.
    pub final_job: PathBuf,
    /// The submission script: `sbatch` of the array, then of the final job after it.
    pub submit: PathBuf,
    /// Number of array tasks (job keys).
    pub tasks: usize,
}

fn abs(p: &Path, workdir: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        workdir.join(p)
    }
}

/// Single-quotes `s` for a POSIX shell.
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Plans the study's jobs (tokenizing the corpus into the shared cache now, so that the tasks
/// find it ready) and writes the Slurm scripts for them.
///
/// # Errors
/// Those of [`driver::plan_jobs`]; [`Error::SpecField`] for a study without jobs (an in-process
/// study runs with `memwall run`); I/O errors naming the file.
pub fn emit(
    experiment: &Path,
    paths: &Paths,
    opts: &RunOptions,
    slurm: &SlurmOptions,
) -> Result<SlurmScripts> {
    let (study, dev, jobs) = driver::plan_jobs(experiment, paths, opts)?;
    if jobs.is_empty() {
        return Err(Error::SpecField {
            path: experiment.to_path_buf(),
            field: "study.kind".into(),
            message: "this study has no training jobs to run as a Slurm array (in-process \
                      studies run with `memwall run`)"
                .into(),
        });
    }
    let w = &slurm.workdir;
    let out = abs(&slurm.out, w);
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io("creating", &logs, e))?;
    let tsv: String = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| format!("{i}\t{}\t{}\n", j.key(), j.config))
        .collect();
    let jobs_file = out.join("jobs.tsv");
    write(&jobs_file, &tsv)?;

    let memwall = sh(&slurm.memwall.display().to_string());
    let exp = sh(&abs(experiment, w).display().to_string());
    let runs = sh(&abs(&paths.runs, w).display().to_string());
    let reports = sh(&abs(&paths.reports, w).display().to_string());
    let templates = sh(&abs(&paths.templates, w).display().to_string());
    let device = if dev.backend.is_gpu() {
        "--device cuda".to_string()
    } else {
        format!("--device cpu --backend {}", dev.backend)
    };
    let mut sweep_flags = format!("--profile {} {device} --runs {runs}", study.profile);
    if let Some(data) = &opts.data {
        sweep_flags += &format!(" --data {}", sh(&abs(data, w).display().to_string()));
    }
    if opts.memory_cleanup {
        sweep_flags += " --memory-cleanup";
    }
    if let Some(pool) = opts.memory_pool {
        let name = serde_json::to_value(pool).expect("pool serializes");
        sweep_flags += &format!(" --memory-pool {}", name.as_str().unwrap_or("exact_size"));
    }
    let name = format!("memwall-{}", study.header.name);
    let mut header = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name={name}"),
        format!("#SBATCH --chdir={}", w.display()),
    ];
    if let Some(p) = &slurm.partition {
        header.push(format!("#SBATCH --partition={p}"));
    }
    let mut array = header.clone();
    array.push(format!("#SBATCH --array=0-{}", jobs.len() - 1));
    array.push(format!("#SBATCH --output={}/%A_%a.out", logs.display()));
    array.push("#SBATCH --ntasks=1".into());
    if dev.backend.is_gpu() {
        array.push("#SBATCH --gres=gpu:1".into());
    }
    if let Some(t) = &slurm.time {
        array.push(format!("#SBATCH --time={t}"));
    }
    array.extend([
        String::new(),
        format!(
            "# {} ({} profile on {}): one array task per job key; records go to the shared store.",
            study.header.name, study.profile, dev.backend
        ),
        "set -euo pipefail".into(),
        format!(
            "key=$(awk -F'\\t' -v i=\"$SLURM_ARRAY_TASK_ID\" '$1 == i {{ print $2 }}' {})",
            sh(&jobs_file.display().to_string())
        ),
        "if [ -z \"$key\" ]; then echo \"no job for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 1; fi"
            .into(),
        format!("exec {memwall} sweep {exp} {sweep_flags} --keys \"$key\""),
        String::new(),
    ]);
    let mut final_job = header;
    final_job.push(format!("#SBATCH --output={}/final_%j.out", logs.display()));
    final_job.push("#SBATCH --ntasks=1".into());
    final_job.extend([
        String::new(),
        "# After every array task (afterany): the report from the shared record store.".into(),
        "set -euo pipefail".into(),
        format!(
            "exec {memwall} report {exp} --runs {runs} --reports {reports} --templates {templates}"
        ),
        String::new(),
    ]);
    let array_file = out.join("array.sbatch");
    let final_file = out.join("final.sbatch");
    write(&array_file, &array.join("\n"))?;
    write(&final_file, &final_job.join("\n"))?;
    let submit = format!(
        "#!/bin/bash\n# Submits the array, then the report job after it.\nset -euo pipefail\n\
         array=$(sbatch --parsable {})\n\
         array=${{array%%;*}}\n\
         final=$(sbatch --parsable --dependency=afterany:\"$array\" {})\n\
         echo \"array job $array ({} tasks), report job ${{final%%;*}}\"\n",
        sh(&array_file.display().to_string()),
        sh(&final_file.display().to_string()),
        jobs.len()
    );
    let submit_file = out.join("submit.sh");
    write(&submit_file, &submit)?;
    for f in [&array_file, &final_file, &submit_file] {
        make_executable(f)?;
    }
    Ok(SlurmScripts {
        array: array_file,
        final_job: final_file,
        submit: submit_file,
        tasks: jobs.len(),
    })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io("writing", path, e))
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io("making executable", path, e))
}
