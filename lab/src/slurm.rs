//! `memwall sweep --emit slurm`: a study as a Slurm job array. One array task per job key runs
//! `memwall sweep <experiment> --keys <key>` (the driver's own path: plan stage, one process,
//! the record written into the shared record store); a final job, dependent on the whole array
//! (`afterany`, so a failed task still gets its record reported), renders the report from the
//! shared store.
//!
//! `memwall nightly --emit slurm` writes a nightly the same way ([`emit_nightly`]): one array
//! over the training jobs of every study, run afresh, and a final job that runs the in-process
//! studies, renders the reports and appends one entry to the history store.
//!
//! Written files, under the output folder: `jobs.tsv` (task index, job key, configuration,
//! experiment file), `array.sbatch`, `final.sbatch`, `submit.sh` (submits both with the
//! dependency), `logs/`, and for a nightly `nightly.json` ([`NightlyPlan`]).
//! Paths inside the scripts are absolute, so the folder, the record store and the repository
//! must be on a file system every node sees.

use crate::device::ResolvedDevice;
use crate::driver::{self, Paths, RunOptions};
use crate::error::{Error, Result};
use crate::spec::Profile;
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

pub(crate) fn abs(p: &Path, workdir: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        workdir.join(p)
    }
}

/// Single-quotes `s` for a POSIX shell.
pub(crate) use crate::install::sh_quote as sh;

/// One array task: a job of a study.
pub(crate) struct Task {
    /// The study's experiment file (absolute).
    pub(crate) experiment: PathBuf,
    /// The job's key.
    pub(crate) key: String,
    /// The job's configuration.
    pub(crate) config: String,
}

/// What the scripts run, besides the tasks.
pub(crate) struct Commands {
    /// The array's name and comment line.
    pub(crate) name: String,
    pub(crate) comment: String,
    /// `memwall sweep` flags of every task (profile, device, store, data, settings).
    pub(crate) sweep_flags: String,
    /// Whether the tasks need a GPU.
    pub(crate) gpu: bool,
    /// The final job's comment line and command.
    pub(crate) final_comment: String,
    pub(crate) final_command: String,
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
    let exp = abs(experiment, w);
    let tasks: Vec<Task> = jobs
        .iter()
        .map(|j| Task {
            experiment: exp.clone(),
            key: j.key(),
            config: j.config.clone(),
        })
        .collect();
    let flags = sweep_flags(study.profile, &dev, paths, opts, w);
    let memwall = sh(&slurm.memwall.display().to_string());
    let cmds = Commands {
        name: format!("memwall-{}", study.header.name),
        comment: format!(
            "# {} ({} profile on {}): one array task per job key; records go to the shared store.",
            study.header.name, study.profile, dev.backend
        ),
        sweep_flags: flags,
        gpu: dev.backend.is_gpu(),
        final_comment: "# After every array task (afterany): the report from the shared record \
                        store."
            .into(),
        final_command: format!(
            "{memwall} report {} --runs {} --reports {} --templates {}",
            sh(&exp.display().to_string()),
            sh(&abs(&paths.runs, w).display().to_string()),
            sh(&abs(&paths.reports, w).display().to_string()),
            sh(&abs(&paths.templates, w).display().to_string())
        ),
    };
    write_scripts(&tasks, &cmds, slurm)
}

/// The `memwall sweep` flags every task of a study runs with: its profile and device, the shared
/// store, and the run's data and device settings.
pub(crate) fn sweep_flags(
    profile: Profile,
    dev: &ResolvedDevice,
    paths: &Paths,
    opts: &RunOptions,
    w: &Path,
) -> String {
    let device = if dev.backend.is_gpu() {
        "--device cuda".to_string()
    } else {
        format!("--device cpu --backend {}", dev.backend)
    };
    let runs = sh(&abs(&paths.runs, w).display().to_string());
    let mut flags = format!("--profile {profile} {device} --runs {runs}");
    if let Some(data) = &opts.data {
        flags += &format!(" --data {}", sh(&abs(data, w).display().to_string()));
    }
    if opts.memory_cleanup {
        flags += " --memory-cleanup";
    }
    if let Some(pool) = opts.memory_pool {
        let name = serde_json::to_value(pool).expect("pool serializes");
        flags += &format!(" --memory-pool {}", name.as_str().unwrap_or("exact_size"));
    }
    flags
}

/// Writes `jobs.tsv` (task, key, configuration, experiment), `array.sbatch` (when there are
/// tasks), `final.sbatch` and `submit.sh` under `slurm.out`.
pub(crate) fn write_scripts(
    tasks: &[Task],
    cmds: &Commands,
    slurm: &SlurmOptions,
) -> Result<SlurmScripts> {
    let w = &slurm.workdir;
    let out = abs(&slurm.out, w);
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io("creating", &logs, e))?;
    let tsv: String = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{i}\t{}\t{}\t{}\n", t.key, t.config, t.experiment.display()))
        .collect();
    let jobs_file = out.join("jobs.tsv");
    write(&jobs_file, &tsv)?;
    let mut header = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name={}", cmds.name),
        format!("#SBATCH --chdir={}", w.display()),
    ];
    if let Some(p) = &slurm.partition {
        header.push(format!("#SBATCH --partition={p}"));
    }
    let array_file = out.join("array.sbatch");
    if !tasks.is_empty() {
        let array = array_script(header.clone(), tasks.len(), cmds, slurm, &logs, &jobs_file);
        write(&array_file, &array)?;
    } else if array_file.exists() {
        std::fs::remove_file(&array_file).map_err(|e| Error::io("removing", &array_file, e))?;
    }
    let final_file = out.join("final.sbatch");
    write(&final_file, &final_script(header, cmds, &logs))?;
    let submit_file = out.join("submit.sh");
    write(
        &submit_file,
        &submit_script(tasks.len(), &array_file, &final_file),
    )?;
    for f in [&array_file, &final_file, &submit_file] {
        if f.exists() {
            make_executable(f)?;
        }
    }
    Ok(SlurmScripts {
        array: array_file,
        final_job: final_file,
        submit: submit_file,
        tasks: tasks.len(),
    })
}

/// `array.sbatch`: `header`'s lines, then one array task per line of `jobs_file` (`tasks` of
/// them, logs under `logs`), each running its job key's sweep.
fn array_script(
    header: Vec<String>,
    tasks: usize,
    cmds: &Commands,
    slurm: &SlurmOptions,
    logs: &Path,
    jobs_file: &Path,
) -> String {
    let memwall = sh(&slurm.memwall.display().to_string());
    let mut array = header;
    array.push(format!("#SBATCH --array=0-{}", tasks - 1));
    array.push(format!("#SBATCH --output={}/%A_%a.out", logs.display()));
    array.push("#SBATCH --ntasks=1".into());
    if cmds.gpu {
        array.push("#SBATCH --gres=gpu:1".into());
    }
    if let Some(t) = &slurm.time {
        array.push(format!("#SBATCH --time={t}"));
    }
    let jobs = sh(&jobs_file.display().to_string());
    array.extend([
        String::new(),
        cmds.comment.clone(),
        "set -euo pipefail".into(),
        format!(
            "key=$(awk -F'\\t' -v i=\"$SLURM_ARRAY_TASK_ID\" '$1 == i {{ print $2 }}' {jobs})"
        ),
        format!(
            "exp=$(awk -F'\\t' -v i=\"$SLURM_ARRAY_TASK_ID\" '$1 == i {{ print $4 }}' {jobs})"
        ),
        "if [ -z \"$key\" ]; then echo \"no job for array task $SLURM_ARRAY_TASK_ID\" >&2; exit 1; fi"
            .into(),
        format!(
            "exec {memwall} sweep \"$exp\" {} --keys \"$key\"",
            cmds.sweep_flags
        ),
        String::new(),
    ]);
    array.join("\n")
}

/// `final.sbatch`: `header`'s lines, then the final command (log under `logs`).
fn final_script(header: Vec<String>, cmds: &Commands, logs: &Path) -> String {
    let mut final_job = header;
    final_job.push(format!("#SBATCH --output={}/final_%j.out", logs.display()));
    final_job.push("#SBATCH --ntasks=1".into());
    final_job.extend([
        String::new(),
        cmds.final_comment.clone(),
        "set -euo pipefail".into(),
        format!("exec {}", cmds.final_command),
        String::new(),
    ]);
    final_job.join("\n")
}

/// `submit.sh`: submits the array (of `tasks` tasks; none: no array) and then the final job
/// after it.
fn submit_script(tasks: usize, array_file: &Path, final_file: &Path) -> String {
    let final_q = sh(&final_file.display().to_string());
    if tasks == 0 {
        format!(
            "#!/bin/bash\n# Submits the final job (no training job to run as an array).\n\
             set -euo pipefail\n\
             final=$(sbatch --parsable {final_q})\n\
             echo \"report job ${{final%%;*}}\"\n"
        )
    } else {
        format!(
            "#!/bin/bash\n# Submits the array, then the final job after it.\nset -euo pipefail\n\
             array=$(sbatch --parsable {})\n\
             array=${{array%%;*}}\n\
             final=$(sbatch --parsable --dependency=afterany:\"$array\" {final_q})\n\
             echo \"array job $array ({} tasks), report job ${{final%%;*}}\"\n",
            sh(&array_file.display().to_string()),
            tasks
        )
    }
}

pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io("writing", path, e))
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io("making executable", path, e))
}
