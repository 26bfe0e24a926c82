//! `memwall-job bench`'s command line: its flags, the child process that profiles kernels, and
//! the rows it prints.

use super::*;

pub(super) fn usage() -> ExitCode {
    eprintln!(
        "usage: memwall-job bench --job FILE --out FILE.jsonl [--repeats N] [--warmup N] \
         [--dtypes f32,bf16] [--only matmul,attention,attention_naive,layer_norm,gelu,head_merge,train_step] \
         [--no-kernel-profile] [--append]"
    );
    ExitCode::from(2)
}

/// `memwall-job bench --job FILE --out FILE.jsonl [--repeats N] [--warmup N] [--dtypes LIST]
/// [--only OPS] [--no-kernel-profile] [--append]`: times the operations of the job's model on
/// the job's backend and device ([`run`]) and writes one [`AttributionRow`] per line to the
/// output (replaced, or appended to with `--append`) and to stdout. On CUDA it then runs
/// itself again as `bench ... --kernel-profile --append` for the kernel categories of one
/// training step (skipped with `--no-kernel-profile`); the profiling log is kept beside the
/// output as `<out>.cubecl-profile.log`. Exit status 0 when the rows were written (also when
/// some operations failed: each is a row), 1 when the job cannot run, 2 for bad arguments.
pub fn cli(args: &[String]) -> ExitCode {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let (Some(job_file), Some(out)) = (
        flag_value(args, "--job").map(PathBuf::from),
        flag_value(args, "--out"),
    ) else {
        return usage();
    };
    let out = PathBuf::from(out);
    let opts = match parse_options(args) {
        Ok(opts) => opts,
        Err(code) => return code,
    };
    let job = match JobSpec::read(&job_file) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(has("--append"))
        .truncate(!has("--append"))
        .open(&out);
    let mut file = match file {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: opening {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    };
    let mut write_error = None;
    let mut sink = |row: AttributionRow| {
        let line = serde_json::to_string(&row).expect("attribution rows serialize");
        println!("{line}");
        eprintln!("{}", row_summary(&row));
        if let Err(e) = writeln!(file, "{line}").and_then(|_| file.flush()) {
            write_error.get_or_insert(e);
        }
    };
    let log = PathBuf::from(format!("{}.cubecl-profile.log", out.display()));
    let result = if has("--kernel-profile") {
        profile_kernels(&job, &opts, &mut sink, &log)
    } else {
        run(&job, &opts, &mut sink)
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(e) = write_error {
        eprintln!("error: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    if job.backend == BackendKind::Cuda && !has("--kernel-profile") && !has("--no-kernel-profile") {
        run_profile_child(args, &out, &log);
    }
    ExitCode::SUCCESS
}

/// The value after `flag` in `args`, if both are there.
pub(super) fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The options of `--repeats`, `--warmup`, `--dtypes` and `--only` (defaults for those not
/// given); a bad value is reported and answered with [`usage`]'s exit code.
pub(super) fn parse_options(args: &[String]) -> Result<Options, ExitCode> {
    let mut opts = Options::default();
    for (flag, slot) in [
        ("--repeats", &mut opts.repeats),
        ("--warmup", &mut opts.warmup),
    ] {
        if let Some(v) = flag_value(args, flag) {
            match v.parse::<usize>() {
                Ok(n) => *slot = n,
                Err(_) => {
                    eprintln!("{flag}: `{v}` is not a count");
                    return Err(usage());
                }
            }
        }
    }
    if opts.repeats == 0 {
        eprintln!("--repeats: at least 1");
        return Err(usage());
    }
    if let Some(list) = flag_value(args, "--dtypes") {
        let mut dtypes = Vec::new();
        for d in list.split(',') {
            match d.trim() {
                "f32" => dtypes.push(Precision::F32),
                "f16" => dtypes.push(Precision::F16),
                "bf16" => dtypes.push(Precision::Bf16),
                other => {
                    eprintln!("--dtypes: `{other}` is not f32, f16 or bf16");
                    return Err(usage());
                }
            }
        }
        opts.dtypes = dtypes;
    }
    opts.ops =
        flag_value(args, "--only").map(|l| l.split(',').map(|s| s.trim().to_string()).collect());
    Ok(opts)
}

/// The progress line of one row on stderr: the operation and its time and TFLOP/s, or its
/// status and reason.
pub(super) fn row_summary(row: &AttributionRow) -> String {
    format!(
        "{} {} {} {}: {}",
        row.op,
        row.name,
        row.pass,
        row.dtype,
        match (row.median_s, row.tflops) {
            (Some(s), Some(t)) => format!("{:.3} ms, {t:.2} TFLOP/s", s * 1e3),
            (Some(s), None) => format!("{:.3} ms", s * 1e3),
            _ => format!("{} ({})", row.status, row.reason.as_deref().unwrap_or("")),
        }
    )
}

/// `--kernel-profile`: the kernel categories of one profiled training step (CUDA only), the
/// profiler's log written to `log`.
pub(super) fn profile_kernels(
    job: &JobSpec,
    opts: &Options,
    sink: &mut dyn FnMut(AttributionRow),
    log: &Path,
) -> Result<(), String> {
    #[cfg(feature = "cuda")]
    {
        if job.backend == BackendKind::Cuda {
            cuda::run(job, opts, sink, Some(log))
        } else {
            Err(format!(
                "--kernel-profile: the {} backend is not a CubeCL backend",
                job.backend
            ))
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (job, opts, sink, log);
        Err("--kernel-profile: this runner was built without the `cuda` feature".to_string())
    }
}

/// Runs this benchmark again in a child process with `--kernel-profile --append` (CubeCL's
/// profiling is configured once per process), its log at `log`; a failure is reported, not
/// returned: the rows written so far stand.
pub(super) fn run_profile_child(args: &[String], out: &Path, log: &Path) {
    let _ = std::fs::remove_file(log);
    let mut child_args: Vec<String> = args.iter().filter(|a| *a != "--append").cloned().collect();
    child_args.insert(0, "bench".into());
    child_args.extend(["--kernel-profile".into(), "--append".into()]);
    let status = std::env::current_exe()
        .and_then(|exe| std::process::Command::new(exe).args(&child_args).status());
    match status {
        Ok(s) if s.success() => {}
        other => eprintln!(
            "kernel profile: the child process ended with {other:?} (its rows, if any, are \
             in {})",
            out.display()
        ),
    }
}
