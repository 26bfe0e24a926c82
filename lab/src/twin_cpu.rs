//! `memwall twin --device cpu`: re-measures the PyTorch eager rows of the training
//! studies' `cpu` profile on this machine's CPU, where memwall's `cpu` records were measured.
//!
//! Data flow, as a bundle's (`memwall bundle --target flex`, its `run.sh`, `memwall import`) but
//! in one command: each study's `cpu`-profile jobs are expanded for flex exactly as `memwall
//! run` and the bundle expand them; [`crate::twin::jobs`] turns them into the script's
//! plan (configurations without a PyTorch counterpart on the CPU left out with the reason),
//! written to `<work>/<study>.plan.json`; `reference/torch_peak_memory.py --device cpu
//! --threads N` runs one process per configuration and writes its row; each row is checked
//! ([`crate::twin::check_row`], then [`check_cpu_row`]: a CPU row, on this CPU by the name
//! memwall's records carry, of the plan's model) and stored with
//! [`crate::twin::store_row`] into `runs/<study>/pytorch/<cpu>.<config>.json`, where the
//! training report shows it in its CPU section.

use crate::device::{self, BackendKind};
use crate::driver::{self, JobSettings};
use crate::record;
use crate::spec::{Profile, Study};
use crate::twin::{self, TorchRow, TorchStatus, TwinError, TwinJobs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why `memwall twin` stopped; every message names the file, field or option at fault and
/// the fix.
#[derive(Debug, thiserror::Error)]
pub enum TwinCmdError {
    /// An option or study is refused (the message names it and the fix).
    #[error("{0}")]
    Refused(String),
    /// `python3` cannot import torch: nothing was measured, the stored rows are unchanged.
    #[error(
        "PyTorch is not installed for `{python}` ({detail}): install it with `{python} -m pip \
         install --user torch` (the CPU wheel is enough), or name another interpreter with \
         --python; no row was measured and the stored rows are unchanged"
    )]
    NoTorch {
        /// The interpreter that was asked.
        python: String,
        /// What it answered (the import error, or why it did not start).
        detail: String,
    },
    /// The script did not write its row (it crashed before, or did not start).
    #[error(
        "{study}/{config}: reference/torch_peak_memory.py wrote no row ({why}); its output is \
         in {log}"
    )]
    NoRow {
        /// The study.
        study: String,
        /// The configuration.
        config: String,
        /// The exit status or the start error.
        why: String,
        /// The script's log.
        log: PathBuf,
    },
    /// A plan does not serialize (it is not written).
    #[error("{path}: plan not written: {source}")]
    Plan {
        /// Where the plan was to be written.
        path: PathBuf,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// An experiment file, the corpus or the job expansion failed.
    #[error(transparent)]
    Study(#[from] crate::Error),
    /// A row does not read, does not check or could not be stored (naming the file and field).
    #[error(transparent)]
    Row(#[from] TwinError),
}

type Result<T, E = TwinCmdError> = std::result::Result<T, E>;

/// What `memwall twin --device cpu` is asked.
#[derive(Debug, Clone)]
pub struct CpuRequest {
    /// Directory of the experiment files (`<dir>/<study>.toml`).
    pub experiments: PathBuf,
    /// The studies (empty: every study whose experiment file has
    /// `study.pytorch_twin = true`).
    pub studies: Vec<String>,
    /// Only these configurations (empty: all); a name no chosen study has is refused.
    pub only: Vec<String>,
    /// Corpus file replacing the experiment files' (`--data`, `MEMWALL_DATA`).
    pub data: Option<PathBuf>,
    /// Tokenized-corpus cache (`.memwall/cache`).
    pub cache: PathBuf,
    /// The record store the rows are stored into.
    pub runs: PathBuf,
    /// `reference/torch_peak_memory.py`.
    pub script: PathBuf,
    /// The Python interpreter that has PyTorch (`python3`).
    pub python: String,
    /// PyTorch's intra-op threads (`torch.set_num_threads`): memwall's own count, the CPUs
    /// available to the process ([`std::thread::available_parallelism`]), unless told.
    pub threads: usize,
    /// Scratch folder of the plans, the rows as written and the script's logs.
    pub work: PathBuf,
    /// Also record PyTorch's memory-budget Pareto front of each configuration with an
    /// activation memory budget (the script's `--pareto`; its bisection is part of the first
    /// step, minutes at the cpu profile's size).
    pub pareto: bool,
}

/// One study's plan as the command runs it.
#[derive(Debug, Clone)]
pub struct PlannedStudy {
    /// The experiment file.
    pub experiment: PathBuf,
    /// The plan (configurations and those left out, with the reason).
    pub plan: TwinJobs,
    /// Where the plan was written (`<work>/<study>.plan.json`).
    pub plan_file: PathBuf,
}

/// One configuration's stored row.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The row.
    pub row: TorchRow,
    /// Where it was stored (`<runs>/<study>/pytorch/<cpu>.<config>.json`).
    pub stored: PathBuf,
    /// Wall time of the script's process, seconds.
    pub wall_s: f64,
}

/// The plans of the requested studies at the `cpu` profile, the jobs expanded for flex exactly
/// as `memwall run` on the CPU and `memwall bundle --target flex` expand them, each written to
/// `<work>/<study>.plan.json`. A study without a covered configuration under `--only` is left
/// out.
///
/// # Errors
/// A study the script does not cover, a missing experiment file, an `--only` name no chosen
/// study has, or the corpus and job expansion's errors (naming the file and field).
pub fn plans(req: &CpuRequest) -> Result<Vec<PlannedStudy>> {
    let covered = crate::spec::StudyRoles::discover(&req.experiments)?.pytorch;
    let names: Vec<String> = if req.studies.is_empty() {
        covered.clone()
    } else {
        req.studies.clone()
    };
    let mut matched = vec![false; req.only.len()];
    let mut out = Vec::new();
    for name in &names {
        if !covered.contains(name) {
            return Err(TwinCmdError::Refused(format!(
                "--study {name}: the PyTorch twin covers {} only (the experiment files \
                 with `study.pytorch_twin = true`)",
                covered.join(", ")
            )));
        }
        let experiment = req.experiments.join(format!("{name}.toml"));
        if !experiment.is_file() {
            return Err(TwinCmdError::Refused(format!(
                "{}: no experiment file of study `{name}` (--experiments names the folder)",
                experiment.display()
            )));
        }
        let study = Study::load(&experiment, Profile::Cpu, req.data.as_deref())?;
        if study.model.is_none() || study.data.is_none() {
            continue;
        }
        let only: Vec<String> = req
            .only
            .iter()
            .enumerate()
            .filter(|(_, o)| study.configs.iter().any(|c| &c.name == *o))
            .map(|(i, o)| {
                matched[i] = true;
                o.clone()
            })
            .collect();
        if !req.only.is_empty() && only.is_empty() {
            continue;
        }
        let prepared = driver::prepare_corpora(&study, &req.cache)?;
        let jobs = driver::expand_jobs(
            &study,
            BackendKind::Flex,
            0,
            &prepared,
            &JobSettings::default(),
            &only,
            &[],
        )?;
        let Some(plan) = twin::jobs(&study, &jobs) else {
            continue;
        };
        let plan_file = req.work.join(format!("{name}.plan.json"));
        let json = serde_json::to_vec_pretty(&plan).map_err(|source| TwinCmdError::Plan {
            path: plan_file.clone(),
            source,
        })?;
        record::write_atomic(&plan_file, &json)?;
        out.push(PlannedStudy {
            experiment,
            plan,
            plan_file,
        });
    }
    if let Some(i) = matched.iter().position(|m| !m) {
        return Err(TwinCmdError::Refused(format!(
            "--only {}: no configuration of that name in {}",
            req.only[i],
            names.join(", ")
        )));
    }
    Ok(out)
}

/// `torch.__version__` as `python` imports it.
///
/// # Errors
/// [`TwinCmdError::NoTorch`] when the interpreter does not start or cannot import torch.
pub fn torch_version(python: &str) -> Result<String> {
    let no_torch = |detail: String| TwinCmdError::NoTorch {
        python: python.to_string(),
        detail,
    };
    let out = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| no_torch(format!("it does not start: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(no_torch(format!("{}: {}", out.status, last.trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Checks what a row of the CPU command must be beyond [`twin::check_row`]: the planned
/// configuration, run on the CPU (`device_type` "cpu"), on this CPU by the name memwall's CPU
/// records carry (`cpu`, [`device::cpu_model`]), with the plan's model, and run at all (not
/// `unsupported`).
///
/// # Errors
/// The field at fault, its value, what it should be and the fix.
pub fn check_cpu_row(
    row: &TorchRow,
    plan: &TwinJobs,
    config: &str,
    cpu: &str,
) -> std::result::Result<(), String> {
    if row.config != config {
        return Err(format!(
            "field `config`: `{}` is not the configuration asked for, `{config}`",
            row.config
        ));
    }
    if row.status == TorchStatus::Unsupported {
        return Err(format!(
            "field `status`: unsupported ({}); the row is not stored",
            row.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    if !row.on_cpu() {
        return Err(format!(
            "field `device_type`: {} is not \"cpu\" (run the script with --device cpu)",
            row.device_type
                .map(|d| format!("\"{}\"", d.as_str()))
                .unwrap_or_else(|| "absent".into())
        ));
    }
    if row.device != cpu {
        return Err(format!(
            "field `device`: `{}` is not this CPU as memwall's records name it, `{cpu}` \
             (/proc/cpuinfo `model name`); the row would stand beside no record",
            row.device
        ));
    }
    if row.model != plan.model {
        return Err(format!(
            "field `model`: {:?} is not the plan's model {:?} (was the script run with --tiny?)",
            row.model, plan.model
        ));
    }
    Ok(())
}

/// Runs the script for one configuration of `planned` (one process, its output in
/// `<work>/results/<study>.<config>.log`), checks its row and stores it into `req.runs`.
///
/// # Errors
/// [`TwinCmdError::NoRow`] when the script wrote no row; a row that does not read or check
/// ([`TwinError::NotARow`], [`TwinError::Invalid`], naming the row file and field);
/// the store's I/O errors.
pub fn measure(req: &CpuRequest, planned: &PlannedStudy, config: &str) -> Result<Measured> {
    let study = &planned.plan.study;
    let dir = req.work.join("results");
    std::fs::create_dir_all(&dir).map_err(|e| crate::Error::io("creating", &dir, e))?;
    let out = dir.join(format!("{study}.{config}.json"));
    let log = dir.join(format!("{study}.{config}.log"));
    let _ = std::fs::remove_file(&out);
    let log_file =
        std::fs::File::create(&log).map_err(|e| crate::Error::io("creating", &log, e))?;
    let log_err = log_file
        .try_clone()
        .map_err(|e| crate::Error::io("opening", &log, e))?;
    let no_row = |why: String| TwinCmdError::NoRow {
        study: study.clone(),
        config: config.to_string(),
        why,
        log: log.clone(),
    };
    let t0 = std::time::Instant::now();
    let status = Command::new(&req.python)
        .arg(&req.script)
        .arg("--plan")
        .arg(&planned.plan_file)
        .args(["--config", config, "--device", "cpu", "--threads"])
        .arg(req.threads.to_string())
        .arg("--out")
        .arg(&out)
        .args(req.pareto.then_some("--pareto"))
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .status()
        .map_err(|e| no_row(format!("{} did not start: {e}", req.python)))?;
    let wall_s = t0.elapsed().as_secs_f64();
    if !status.success() || !out.is_file() {
        return Err(no_row(status.to_string()));
    }
    let text = std::fs::read_to_string(&out).map_err(|source| TwinError::Read {
        path: out.clone(),
        source,
    })?;
    let row: TorchRow = record::parse_json(&text).map_err(|source| TwinError::NotARow {
        path: out.clone(),
        source,
    })?;
    let invalid = |reason: String| TwinError::Invalid {
        path: out.clone(),
        reason,
    };
    twin::check_row(&row, study).map_err(invalid)?;
    check_cpu_row(&row, &planned.plan, config, &device::cpu_model()).map_err(invalid)?;
    let stored = twin::store_row(&req.runs, study, &row)?;
    Ok(Measured {
        row,
        stored,
        wall_s,
    })
}

/// One line of what a stored row says: status, samples/s, the process high-water mark and the
/// threads, e.g. "ok, 71.61 samples/s, high-water RSS 912 MiB (412 MiB after import torch), 2
/// threads".
pub fn describe(row: &TorchRow) -> String {
    let mib = |b: Option<u64>| {
        b.map(|b| format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64))
            .unwrap_or_else(|| "–".into())
    };
    let mut s = row.status.to_string();
    if let Some(v) = row.samples_per_s {
        s.push_str(&format!(", {v:.2} samples/s"));
    }
    s.push_str(&format!(
        ", high-water RSS {} ({} after import torch)",
        mib(row.max_rss_bytes),
        mib(row.rss_after_import_bytes)
    ));
    if let Some(t) = row.threads {
        s.push_str(&format!(", {t} thread(s)"));
    }
    if let Some(r) = &row.reason {
        s.push_str(&format!(": {r}"));
    }
    s
}

/// A refusal naming `script` and the fix when it is not a file, `None` when it is.
pub fn script_missing(script: &Path) -> Option<TwinCmdError> {
    (!script.is_file()).then(|| {
        TwinCmdError::Refused(format!(
            "{}: no PyTorch twin script (--script names it; run from the repository root)",
            script.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::twin::{TorchDeviceType, ROW_FORMAT};

    fn cpu_plan() -> TwinJobs {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/peak_memory.toml");
        let study = Study::load(&path, Profile::Cpu, None).unwrap();
        let data = crate::spec::PreparedData {
            dir: "data/x".into(),
            fingerprint: "x".into(),
            vocab_size: 2048,
            eos_id: 0,
        };
        let jobs = study.jobs(BackendKind::Flex, 0, &study.one_corpus(data));
        twin::jobs(&study, &jobs).unwrap()
    }

    fn cpu_row(plan: &TwinJobs) -> TorchRow {
        TorchRow {
            format: ROW_FORMAT.into(),
            study: "peak_memory".into(),
            config: "control_adafactor".into(),
            status: TorchStatus::Ok,
            reason: None,
            device: "Some CPU".into(),
            device_type: Some(TorchDeviceType::Cpu),
            threads: Some(2),
            torch_version: "2.15.0".into(),
            parameters: Some(1),
            max_memory_allocated_bytes: None,
            max_memory_reserved_bytes: None,
            max_rss_bytes: Some(900 << 20),
            rss_after_import_bytes: Some(400 << 20),
            median_step_s: Some(0.1),
            samples_per_s: Some(80.0),
            first_step_s: Some(0.5),
            final_loss: Some(7.0),
            model: plan.model,
            train: plan.train,
            finished_at: "2026-11-27T00:00:00Z".into(),
            process_order: None,
            wall_s: None,
            memory_budget_pareto: Vec::new(),
        }
    }

    #[test]
    fn the_cpu_plan_leaves_out_fusion_and_keeps_the_budgets() {
        let p = cpu_plan();
        assert_eq!(
            (p.model.layers, p.model.d_model),
            (8, 128),
            "the cpu profile"
        );
        for fused in ["compile_adafactor", "bf16_compile"] {
            let (_, why) = p
                .left_out
                .iter()
                .find(|(n, _)| n == fused)
                .unwrap_or_else(|| panic!("{fused} is not left out: {:?}", p.left_out));
            assert!(why.contains("CubeCL"), "{why}");
        }
        // The AdamW twin `compile` is left out too (for fusion, before the twin rule).
        assert!(p
            .left_out
            .iter()
            .any(|(n, w)| n == "compile" && w.contains("CubeCL")));
        assert!(p
            .configs
            .iter()
            .all(|c| !c.compile || c.activation_memory_budget.is_some()));
        let budget = p
            .configs
            .iter()
            .find(|c| c.name == "memory_budget_60_adafactor")
            .expect("budgets run on the CPU");
        assert!(budget.compile);
        // The GPU plan of the same study keeps torch.compile for fusion.
        let (study, jobs) = crate::test_support::peak_memory_full();
        let gpu = twin::jobs(&study, &jobs).unwrap();
        assert!(gpu.configs.iter().any(|c| c.name == "compile_adafactor"));
    }

    #[test]
    fn a_cpu_row_must_be_this_cpus_and_the_plans() {
        let p = cpu_plan();
        let ok = cpu_row(&p);
        assert_eq!(
            check_cpu_row(&ok, &p, "control_adafactor", "Some CPU"),
            Ok(())
        );
        let err = check_cpu_row(&ok, &p, "control_adafactor", "Other CPU").unwrap_err();
        assert!(
            err.contains("field `device`") && err.contains("Other CPU"),
            "{err}"
        );
        let err = check_cpu_row(&ok, &p, "checkpoint_adafactor", "Some CPU").unwrap_err();
        assert!(err.contains("field `config`"), "{err}");
        let mut gpu = ok.clone();
        gpu.device_type = Some(TorchDeviceType::Cuda);
        let err = check_cpu_row(&gpu, &p, "control_adafactor", "Some CPU").unwrap_err();
        assert!(err.contains("field `device_type`"), "{err}");
        let mut tiny = ok.clone();
        tiny.model.layers = 2;
        let err = check_cpu_row(&tiny, &p, "control_adafactor", "Some CPU").unwrap_err();
        assert!(err.contains("field `model`"), "{err}");
        let mut missing = ok;
        missing.status = TorchStatus::Unsupported;
        missing.reason = Some("PyTorch is not installed".into());
        let err = check_cpu_row(&missing, &p, "control_adafactor", "Some CPU").unwrap_err();
        assert!(err.contains("field `status`"), "{err}");
    }

    #[test]
    fn a_missing_interpreter_is_named_with_the_fix() {
        let err = torch_version("/nonexistent/python3")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("PyTorch is not installed for `/nonexistent/python3`"),
            "{err}"
        );
        assert!(err.contains("pip install --user torch"), "{err}");
        assert!(err.contains("stored rows are unchanged"), "{err}");
    }
}
