//! `memwall nightly install`: the scheduler files through the real binary, checked by the
//! schedulers' own tools where this machine has them (systemd-analyze verify, Debian's
//! `crontab -n`, `bash -n`) and by running the generated command lines with a stand-in
//! memwall that records its arguments.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn memwall() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memwall"));
    for v in ["MEMWALL_HISTORY", "MEMWALL_DATA", "MEMWALL_RUNS"] {
        c.env_remove(v);
    }
    c
}

/// `memwall nightly install ARGS` run in `checkout`.
fn install(checkout: &Path, args: &[&str]) -> Output {
    memwall()
        .current_dir(checkout)
        .args(["nightly", "install"])
        .args(args)
        .output()
        .unwrap()
}

fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A checkout folder whose name needs quoting everywhere: a space, a single quote and `%`
/// (a systemd specifier, a cron line break).
fn odd_checkout(root: &Path) -> PathBuf {
    let c = root.join("lab's checkout 100%");
    fs::create_dir_all(&c).unwrap();
    c
}

/// A stand-in `memwall` at a path with a space: writes its arguments, one per line, to
/// `<its folder>/args`, and for `--slurm-dir DIR` writes a `DIR/submit.sh` that leaves
/// `DIR/submitted`.
fn fake_memwall(root: &Path) -> PathBuf {
    let dir = root.join("bin dir");
    fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("memwall");
    fs::write(
        &exe,
        r#"#!/bin/sh
printf '%s\n' "$@" > "$(dirname "$0")/args"
while [ $# -gt 0 ]; do
    if [ "$1" = --slurm-dir ]; then
        mkdir -p "$2"
        echo 'touch "$(dirname "$0")/submitted"' > "$2/submit.sh"
    fi
    shift
done
"#,
    )
    .unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

/// The command field of a crontab line as cron hands it to `sh -c`: Debian cron's reading of
/// `%` (a line break, the rest standard input) and `\%` (a literal `%`, the backslash dropped).
fn cron_command(line: &str) -> String {
    let fields: Vec<&str> = line.splitn(6, ' ').collect();
    assert_eq!(fields.len(), 6, "{line}");
    let mut out = String::new();
    let mut escaped = false;
    for c in fields[5].chars() {
        if escaped {
            if c != '%' {
                out.push('\\');
            }
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == '%' {
            break;
        } else {
            out.push(c);
        }
    }
    if escaped {
        out.push('\\');
    }
    out
}

/// The lines of `systemd-analyze verify` output that name one of the generated units.
fn lines_naming_units(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|l| l.contains("memwall-nightly"))
        .collect()
}

#[test]
fn systemd_user_units_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let checkout = odd_checkout(dir.path());
    let out = dir.path().join("units");
    let exe = fake_memwall(dir.path());
    let o = install(
        &checkout,
        &[
            "--scheduler",
            "systemd",
            "--out",
            out.to_str().unwrap(),
            "--at",
            "03:30",
            "--memwall",
            exe.to_str().unwrap(),
            "--cpu-profile",
            "cpu",
            "--on-regression",
            "mail -s \"memwall $HOSTNAME\" lab@example.org <",
        ],
    );
    assert_ok(&o);
    let (stdout, stderr) = text(&o);
    let service = out.join("memwall-nightly.service");
    let timer = out.join("memwall-nightly.timer");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [service.to_str().unwrap(), timer.to_str().unwrap()]
    );
    assert!(
        stderr.contains(
            "systemctl --user daemon-reload && systemctl --user enable --now memwall-nightly.timer"
        ),
        "{stderr}"
    );
    let s = fs::read_to_string(&service).unwrap();
    assert!(s.contains("\nType=oneshot\n"), "{s}");
    assert!(
        s.contains(&format!(
            "\nWorkingDirectory={}\n",
            checkout.to_str().unwrap().replace('%', "%%")
        )),
        "{s}"
    );
    assert!(
        s.contains(&format!(
            "\nExecStart=\"{}\" nightly --history ",
            exe.to_str().unwrap()
        )),
        "{s}"
    );
    assert!(
        s.contains("--on-regression \"mail -s \\\"memwall $$HOSTNAME\\\" lab@example.org <\""),
        "{s}"
    );
    assert!(!s.contains("User="), "{s}");
    let t = fs::read_to_string(&timer).unwrap();
    assert!(t.contains("\nOnCalendar=*-*-* 03:30:00\n"), "{t}");
    assert!(t.contains("\nPersistent=true\n"), "{t}");

    // `systemd-analyze --user verify` needs a runtime folder, which this container does not
    // set up: a fresh XDG_RUNTIME_DIR is enough (tried: without it the manager fails to start
    // with "Failed to lookup RuntimeDirectory path"). The exit status is checked, and since
    // verify only warns (exit 0) about an unknown key or a bad quote, no output line may name
    // the units either.
    let runtime = dir.path().join("runtime");
    fs::create_dir_all(&runtime).unwrap();
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o700)).unwrap();
    let v = common::tool("systemd-analyze", "systemd")
        .env("XDG_RUNTIME_DIR", &runtime)
        .args(["--user", "verify", "--man=no"])
        .arg(&service)
        .arg(&timer)
        .output()
        .expect("systemd-analyze (systemd) is installed");
    let (vout, verr) = text(&v);
    let all = format!("{vout}{verr}");
    eprintln!("systemd-analyze --user verify: {}\n{all}", v.status);
    assert!(v.status.success(), "systemd-analyze verify failed:\n{all}");
    assert!(lines_naming_units(&all).is_empty(), "{all}");
}

#[test]
fn systemd_user_units_go_to_the_user_unit_folder() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let o = memwall()
        .current_dir(dir.path())
        .env("XDG_CONFIG_HOME", &config)
        .args(["nightly", "install", "--scheduler", "systemd"])
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(config
        .join("systemd/user/memwall-nightly.service")
        .is_file());
    assert!(config.join("systemd/user/memwall-nightly.timer").is_file());
    let home = dir.path().join("home");
    let o = memwall()
        .current_dir(dir.path())
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", &home)
        .args(["nightly", "install", "--scheduler", "systemd"])
        .output()
        .unwrap();
    assert_ok(&o);
    let service = home.join(".config/systemd/user/memwall-nightly.service");
    let s = fs::read_to_string(service).unwrap();
    // Without --memwall: this executable (its resolved path, as the running binary sees
    // itself, when the target folder is a link).
    let exe = fs::canonicalize(env!("CARGO_BIN_EXE_memwall")).unwrap();
    assert!(
        s.contains(&format!("\nExecStart={} nightly", exe.display())),
        "{s}"
    );
}

#[test]
fn systemd_system_units_run_as_the_current_user() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("units");
    let me = Command::new("id").arg("-un").output().unwrap();
    let me = String::from_utf8(me.stdout).unwrap().trim().to_string();
    let o = memwall()
        .current_dir(dir.path())
        .env("USER", &me)
        .args(["nightly", "install", "--scheduler", "systemd", "--system"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_ok(&o);
    let (_, stderr) = text(&o);
    assert!(
        stderr.contains("systemctl daemon-reload && systemctl enable --now memwall-nightly.timer"),
        "{stderr}"
    );
    assert!(!stderr.contains("--user"), "{stderr}");
    let service = out.join("memwall-nightly.service");
    let s = fs::read_to_string(&service).unwrap();
    assert!(s.contains(&format!("\nUser={me}\n")), "{s}");
    let v = common::tool("systemd-analyze", "systemd")
        .args(["verify", "--man=no"])
        .arg(&service)
        .arg(out.join("memwall-nightly.timer"))
        .output()
        .unwrap();
    let (vout, verr) = text(&v);
    let all = format!("{vout}{verr}");
    eprintln!("systemd-analyze verify: {}\n{all}", v.status);
    assert!(v.status.success(), "systemd-analyze verify failed:\n{all}");
    assert!(lines_naming_units(&all).is_empty(), "{all}");

    // Another user's name is written as given.
    let o = memwall()
        .current_dir(dir.path())
        .env("USER", "lab-runner")
        .args([
            "nightly",
            "install",
            "--scheduler",
            "systemd",
            "--system",
            "--print",
        ])
        .arg("--out")
        .arg(dir.path().join("printed"))
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(text(&o).0.contains("\nUser=lab-runner\n"));
}

#[test]
fn cron_line_passes_crontab_n_and_runs_under_flock() {
    let dir = tempfile::tempdir().unwrap();
    let checkout = odd_checkout(dir.path());
    let out = dir.path().join("cron");
    let exe = fake_memwall(dir.path());
    let history = dir.path().join("nights 50%");
    let o = install(
        &checkout,
        &[
            "--scheduler",
            "cron",
            "--out",
            out.to_str().unwrap(),
            "--at",
            "4:05",
            "--memwall",
            exe.to_str().unwrap(),
            "--history",
            history.to_str().unwrap(),
            "--device",
            "cuda:1",
            "--fail-on-regression",
            "--on-regression",
            "echo 100% regressed >",
        ],
    );
    assert_ok(&o);
    let (stdout, stderr) = text(&o);
    let file = out.join("memwall-nightly.crontab");
    assert_eq!(stdout.trim(), file.to_str().unwrap());
    let add = stderr
        .lines()
        .find(|l| l.contains("crontab -l 2>/dev/null"))
        .unwrap_or_else(|| panic!("no crontab command: {stderr}"));
    assert_eq!(
        add.trim(),
        format!(
            "(crontab -l 2>/dev/null; cat {}) | crontab -",
            file.display()
        )
    );
    let contents = fs::read_to_string(&file).unwrap();
    assert!(contents.ends_with('\n'));
    let lines: Vec<&str> = contents.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 1, "{contents}");
    let line = lines[0];
    assert!(line.starts_with("5 4 * * * cd "), "{line}");
    assert!(line.contains(" && flock -n "), "{line}");
    assert!(!line.contains(" % ") && line.contains(r"\%"), "{line}");

    // Debian's crontab -n: a dry run of the syntax check `crontab FILE` does (the crontab of
    // the user is not touched).
    let c = common::tool("crontab", "cron")
        .arg("-n")
        .arg(&file)
        .output()
        .expect("crontab (Debian's cron package) is installed");
    let (cout, cerr) = text(&c);
    eprintln!("crontab -n: {}\n{cout}{cerr}", c.status);
    assert!(
        c.status.success(),
        "crontab -n refused the file:\n{cout}{cerr}"
    );

    // The command, as cron hands it to sh, runs the executable under flock in the checkout
    // with every argument intact.
    let command = cron_command(line);
    let r = Command::new("sh").arg("-c").arg(&command).output().unwrap();
    assert_ok(&r);
    let args = fs::read_to_string(exe.parent().unwrap().join("args")).unwrap();
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [
            "nightly",
            "--history",
            history.to_str().unwrap(),
            "--device",
            "cuda:1",
            "--fail-on-regression",
            "--on-regression",
            "echo 100% regressed >",
        ]
    );
    assert!(checkout.join(".memwall/nightly.log").is_file());
    assert!(checkout.join(".memwall/nightly.lock").exists());

    // While the lock is held, the night is skipped (flock -n), not queued.
    fs::remove_file(exe.parent().unwrap().join("args")).unwrap();
    let held = common::tool("flock", "util-linux")
        .arg(checkout.join(".memwall/nightly.lock"))
        .args(["sh", "-c", &command])
        .output()
        .unwrap();
    assert!(
        !held.status.success(),
        "a second night ran under a held lock"
    );
    assert!(!exe.parent().unwrap().join("args").exists());
}

#[test]
fn slurm_files_are_a_scrontab_and_a_script() {
    let dir = tempfile::tempdir().unwrap();
    let checkout = dir.path().join("lab's checkout");
    fs::create_dir_all(&checkout).unwrap();
    let out = dir.path().join("slurm-files");
    let exe = fake_memwall(dir.path());
    let o = install(
        &checkout,
        &[
            "--scheduler",
            "slurm",
            "--out",
            out.to_str().unwrap(),
            "--memwall",
            exe.to_str().unwrap(),
            "--partition",
            "gpu",
            "--time",
            "00:20:00",
            "--cpu-profile",
            "smoke",
        ],
    );
    assert_ok(&o);
    let (stdout, stderr) = text(&o);
    let scron = out.join("memwall-nightly.scrontab");
    let script = out.join("memwall-nightly-slurm.sh");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [scron.to_str().unwrap(), script.to_str().unwrap()]
    );
    assert!(
        stderr.contains(&format!("\n  scrontab {}\n", scron.display())),
        "{stderr}"
    );
    let s = fs::read_to_string(&scron).unwrap();
    let scron_lines: Vec<&str> = s.lines().filter(|l| l.starts_with("#SCRON ")).collect();
    for want in [
        "#SCRON --job-name=memwall-nightly",
        "#SCRON --time=00:20:00",
        "#SCRON --partition=gpu",
    ] {
        assert!(scron_lines.contains(&want), "{want} missing:\n{s}");
    }
    let entries: Vec<&str> = s.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(entries.len(), 1, "{s}");
    // The options apply to the entry right after them.
    assert!(s.trim_end().ends_with(entries[0]), "{s}");
    let fields: Vec<&str> = entries[0].splitn(6, ' ').collect();
    assert_eq!(&fields[..5], ["0", "2", "*", "*", "*"]);
    let command = fields[5];
    assert!(
        command.contains(" nightly --emit slurm --slurm-dir "),
        "{command}"
    );
    assert!(command.contains("/submit.sh"), "{command}");

    let sh = fs::read_to_string(&script).unwrap();
    assert!(sh.starts_with("#!/bin/bash\n"), "{sh}");
    assert!(sh.contains(&format!("\n{command}\n")), "{sh}");
    let mode = fs::metadata(&script).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0o111, "mode {mode:o}");
    let n = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert_ok(&n);

    // The script runs the nightly's --emit slurm, then the submit.sh it wrote.
    let r = Command::new(&script).output().unwrap();
    assert_ok(&r);
    let slurm_dir = checkout.join("slurm/nightly");
    assert!(slurm_dir.join("submitted").is_file());
    let args = fs::read_to_string(exe.parent().unwrap().join("args")).unwrap();
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [
            "nightly",
            "--emit",
            "slurm",
            "--slurm-dir",
            slurm_dir.to_str().unwrap(),
            // The array goes to the launcher's partition.
            "--partition",
            "gpu",
            "--history",
            checkout.join("history").to_str().unwrap(),
            "--cpu-profile",
            "smoke",
        ]
    );
}

#[test]
fn github_workflow_is_valid_yaml_with_what_github_requires() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("repo");
    let o = install(
        dir.path(),
        &[
            "--scheduler",
            "github",
            "--out",
            out.to_str().unwrap(),
            "--at",
            "01:15",
            "--cpu-profile",
            "cpu",
        ],
    );
    assert_ok(&o);
    let file = out.join(".github/workflows/memwall-nightly.yml");
    assert_eq!(text(&o).0.trim(), file.to_str().unwrap());
    let yaml = fs::read_to_string(&file).unwrap();
    // Quoted: YAML 1.1 readers take a plain `on` for the boolean true.
    assert!(yaml.contains("\n\"on\":\n"), "{yaml}");
    let doc: serde_norway::Value = serde_norway::from_str(&yaml).unwrap();
    let on = &doc["on"];
    let cron = on["schedule"][0]["cron"].as_str().unwrap();
    assert_eq!(cron, "15 1 * * *");
    assert_eq!(cron.split_whitespace().count(), 5);
    assert!(
        on.as_mapping()
            .unwrap()
            .contains_key(serde_norway::Value::from("workflow_dispatch")),
        "{yaml}"
    );
    assert_eq!(
        doc["env"]["MEMWALL_HISTORY"].as_str(),
        Some("/var/lib/memwall/history")
    );
    let jobs = doc["jobs"].as_mapping().unwrap();
    assert_eq!(jobs.len(), 1);
    let job = jobs.values().next().unwrap();
    assert_eq!(
        job["runs-on"],
        serde_norway::from_str::<serde_norway::Value>("[self-hosted, gpu]").unwrap()
    );
    assert!(job["timeout-minutes"].as_u64().unwrap() > 0);
    let steps = job["steps"].as_sequence().unwrap();
    assert!(!steps.is_empty());
    for s in steps {
        assert!(
            s.get("uses").is_some() != s.get("run").is_some(),
            "a step has exactly one of uses, run: {s:?}"
        );
    }
    let uses = |prefix: &str| {
        steps
            .iter()
            .find(|s| s["uses"].as_str().is_some_and(|u| u.starts_with(prefix)))
            .unwrap_or_else(|| panic!("no {prefix} step: {yaml}"))
    };
    assert_eq!(
        uses("actions/checkout@").get("uses").unwrap(),
        "actions/checkout@v4"
    );
    let upload = uses("actions/upload-artifact@");
    assert_eq!(upload["uses"].as_str(), Some("actions/upload-artifact@v4"));
    assert_eq!(upload["if"].as_str(), Some("always()"));
    assert_eq!(
        upload["with"]["path"].as_str(),
        Some("${{ env.MEMWALL_HISTORY }}/runs/reports/nightly")
    );
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    assert!(
        runs.contains(&"cargo build --release --locked --bin memwall"),
        "{yaml}"
    );
    let nightly = runs
        .iter()
        .find(|r| r.contains("memwall nightly"))
        .unwrap_or_else(|| panic!("no nightly step: {yaml}"));
    assert_eq!(
        *nightly,
        "./target/release/memwall nightly --history \"$MEMWALL_HISTORY\" --cpu-profile cpu \
         --fail-on-regression"
    );
    let summary = steps
        .iter()
        .find(|s| {
            s["run"]
                .as_str()
                .is_some_and(|r| r.contains("$GITHUB_STEP_SUMMARY"))
        })
        .unwrap_or_else(|| panic!("no summary step: {yaml}"));
    assert_eq!(summary["if"].as_str(), Some("always()"));
    assert!(summary["run"]
        .as_str()
        .unwrap()
        .contains("$MEMWALL_HISTORY/runs/reports/nightly/summary.md"));
    let n = Command::new("bash")
        .arg("-n")
        .arg("-c")
        .arg(summary["run"].as_str().unwrap())
        .output()
        .unwrap();
    assert_ok(&n);

    // --history sets MEMWALL_HISTORY (made absolute).
    let o = install(
        dir.path(),
        &[
            "--scheduler",
            "github",
            "--print",
            "--history",
            "shared/history",
        ],
    );
    assert_ok(&o);
    let printed = text(&o).0;
    let body = printed.split_once('\n').unwrap().1;
    let doc: serde_norway::Value = serde_norway::from_str(body).unwrap();
    assert_eq!(
        doc["env"]["MEMWALL_HISTORY"].as_str().map(PathBuf::from),
        Some(std::path::absolute(dir.path().join("shared/history")).unwrap())
    );
}

#[test]
fn print_writes_nothing_and_shows_every_file() {
    let dir = tempfile::tempdir().unwrap();
    for (scheduler, names) in [
        (
            "systemd",
            vec!["memwall-nightly.service", "memwall-nightly.timer"],
        ),
        ("cron", vec!["memwall-nightly.crontab"]),
        (
            "slurm",
            vec!["memwall-nightly.scrontab", "memwall-nightly-slurm.sh"],
        ),
        ("github", vec![".github/workflows/memwall-nightly.yml"]),
    ] {
        let out = dir.path().join(scheduler);
        let o = install(
            dir.path(),
            &[
                "--scheduler",
                scheduler,
                "--print",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_ok(&o);
        assert!(
            !out.exists(),
            "{scheduler}: --print wrote {}",
            out.display()
        );
        let (stdout, stderr) = text(&o);
        for n in &names {
            assert!(
                stdout.contains(&format!("==> {} <==\n", out.join(n).display())),
                "{scheduler}: {n} not printed:\n{stdout}"
            );
        }
        assert_eq!(stdout.matches("==> ").count(), names.len(), "{stdout}");
        assert!(stderr.contains("to enable it"), "{stderr}");
    }
    // Nothing written into the checkout either.
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_values_fail_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for at in ["25:00", "2am"] {
        let o = install(
            dir.path(),
            &[
                "--scheduler",
                "cron",
                "--out",
                out.to_str().unwrap(),
                "--at",
                at,
            ],
        );
        assert!(!o.status.success(), "--at {at} accepted");
        let (_, stderr) = text(&o);
        assert!(
            stderr.contains(&format!("--at {at}: expected a time of day HH:MM")),
            "{stderr}"
        );
    }
    for (args, want) in [
        (
            vec!["--scheduler", "cron", "--system"],
            "--system: only for --scheduler systemd",
        ),
        (
            vec!["--scheduler", "github", "--partition", "gpu"],
            "--partition: only for --scheduler slurm",
        ),
        (
            vec!["--scheduler", "cron", "--cpu-profile", "full"],
            "--cpu-profile full: expected `smoke` or `cpu`",
        ),
        (
            vec!["--scheduler", "cron", "--device", "tpu"],
            "device `tpu`",
        ),
        (vec!["--scheduler", "launchd"], "invalid value 'launchd'"),
        (vec![], "--scheduler <SCHEDULER>"),
    ] {
        let mut a = args.clone();
        a.extend(["--out", out.to_str().unwrap()]);
        let o = install(dir.path(), &a);
        assert!(!o.status.success(), "{args:?} accepted");
        let (_, stderr) = text(&o);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    assert!(!out.exists());
}

#[test]
fn the_nightly_command_line_still_parses() {
    for args in [
        vec!["nightly", "--help"],
        vec!["nightly", "install", "--help"],
    ] {
        let o = memwall().args(&args).output().unwrap();
        assert_ok(&o);
    }
    let help = text(&memwall().args(["nightly", "--help"]).output().unwrap()).0;
    assert!(help.contains("install"), "{help}");
    assert!(help.contains("--fail-on-regression"), "{help}");
    let help = text(
        &memwall()
            .args(["nightly", "install", "--help"])
            .output()
            .unwrap(),
    )
    .0;
    for flag in [
        "--scheduler",
        "--print",
        "--out",
        "--at",
        "--history",
        "--memwall",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }

    // The old form: experiment files and the nightly's flags reach the nightly itself (whose
    // first check refuses --cpu-profile full before anything runs), not clap's errors.
    let dir = tempfile::tempdir().unwrap();
    let o = memwall()
        .current_dir(dir.path())
        .args([
            "nightly",
            "experiments/x.toml",
            "experiments/y.toml",
            "--history",
            "h",
            "--cpu-profile",
            "full",
            "--fail-on-regression",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let (_, stderr) = text(&o);
    assert!(
        stderr.contains("--cpu-profile full: expected `smoke` or `cpu`"),
        "{stderr}"
    );
    // The nightly's own flags before `install` are refused, not silently dropped.
    let o = memwall()
        .current_dir(dir.path())
        .args([
            "nightly",
            "--device",
            "cpu",
            "install",
            "--scheduler",
            "cron",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).1.contains("unexpected argument '--scheduler'"));
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}
