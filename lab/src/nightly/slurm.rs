//! A nightly as Slurm scripts (`memwall nightly --emit slurm`): one array task per training job
//! of every study, run afresh, and a final job that runs the in-process studies, renders the
//! reports and appends one entry to the history store ([`emit_nightly`], [`slurm_final`] reads
//! the plan back).

use crate::driver::{self, Paths, RunOptions};
use crate::error::{Error, Result};
use crate::slurm::{
    abs, sh, sweep_flags, write, write_scripts, Commands, SlurmOptions, SlurmScripts, Task,
};
use crate::spec::Profile;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What the final job of a Slurm nightly reads (`<slurm dir>/nightly.json`, written by
/// [`emit_nightly`]): the run's studies, when and at which revision it was written, and the
/// job keys of its array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NightlyPlan {
    /// The experiment files (absolute), in order.
    pub experiments: Vec<PathBuf>,
    /// RFC 3339 time the scripts were written: the run's start in its history entry.
    pub started_at: String,
    /// [`crate::git::git_revision`] of the checkout the scripts were written from.
    pub git_revision: String,
    /// The profile every study runs at.
    pub profile: Profile,
    /// The backend the jobs run on.
    pub backend: String,
    /// The device name where the scripts were written (used when no job finished).
    pub device: String,
    /// The job keys of the array, one per task.
    pub keys: Vec<String>,
}

/// The file of [`NightlyPlan`] in a Slurm nightly's folder.
pub const NIGHTLY_PLAN: &str = "nightly.json";

/// Writes a nightly as Slurm scripts: one array task per training job of every study of
/// `experiments` (run afresh: `--force`), and a final job, after the whole array, that runs
/// `final_command` (`memwall nightly --slurm-final <dir> ...`: the in-process studies, the
/// reports, the history entry and the nightly page). `opts` are the nightly's resolved run
/// options ([`super::nightly_run_options`]). Without training jobs, only the final job
/// is written and submitted.
///
/// # Errors
/// Those of [`driver::plan_jobs`] for any study; I/O errors naming the file.
pub fn emit_nightly(
    experiments: &[PathBuf],
    paths: &Paths,
    opts: &RunOptions,
    slurm: &SlurmOptions,
    final_flags: &str,
) -> Result<SlurmScripts> {
    let w = &slurm.workdir;
    let mut tasks = Vec::new();
    let mut resolved = None;
    for experiment in experiments {
        let (study, dev, jobs) = driver::plan_jobs(experiment, paths, opts)?;
        let exp = abs(experiment, w);
        tasks.extend(jobs.iter().map(|j| Task {
            experiment: exp.clone(),
            key: j.key(),
            config: j.config.clone(),
        }));
        resolved = Some((study.profile, dev));
    }
    let Some((profile, dev)) = resolved else {
        return Err(Error::Records {
            path: slurm.out.clone(),
            message: "no experiment file for the nightly".into(),
        });
    };
    let out = abs(&slurm.out, w);
    std::fs::create_dir_all(&out).map_err(|e| Error::io("creating", &out, e))?;
    let plan = NightlyPlan {
        experiments: experiments.iter().map(|e| abs(e, w)).collect(),
        started_at: chrono::Utc::now().to_rfc3339(),
        git_revision: crate::git::git_revision(),
        profile,
        backend: dev.backend.to_string(),
        device: dev.name.clone(),
        keys: tasks.iter().map(|t| t.key.clone()).collect(),
    };
    let plan_file = out.join(NIGHTLY_PLAN);
    let json = serde_json::to_string_pretty(&plan).expect("the plan serializes");
    write(&plan_file, &json)?;
    let memwall = sh(&slurm.memwall.display().to_string());
    let flags = sweep_flags(profile, &dev, paths, opts, w);
    let cmds = Commands {
        name: "memwall-nightly".into(),
        comment: format!(
            "# memwall nightly ({profile} profile on {}): one array task per training job, run \
             afresh; records go to the shared store.",
            dev.backend
        ),
        sweep_flags: format!("{flags} --force"),
        gpu: dev.backend.is_gpu(),
        final_comment: "# After every array task (afterany): the in-process studies, the \
                        reports, one history entry and the nightly page."
            .into(),
        final_command: format!(
            "{memwall} nightly --slurm-final {} {flags} --reports {} --templates {} {final_flags}",
            sh(&out.display().to_string()),
            sh(&abs(&paths.reports, w).display().to_string()),
            sh(&abs(&paths.templates, w).display().to_string()),
        ),
    };
    write_scripts(&tasks, &cmds, slurm)
}

/// Reads a Slurm nightly's [`NightlyPlan`].
///
/// # Errors
/// I/O errors and a file that does not read as a plan, naming it.
pub fn read_nightly_plan(dir: &Path) -> Result<NightlyPlan> {
    let path = dir.join(NIGHTLY_PLAN);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io("reading", &path, e))?;
    crate::record::parse_json(&text).map_err(|source| Error::MalformedRecord {
        path,
        what: "not a Slurm nightly plan".into(),
        source,
        fix: format!("; `memwall nightly --emit slurm` writes it as {NIGHTLY_PLAN}"),
    })
}
