use super::*;

fn options(scheduler: Scheduler) -> InstallOptions {
    InstallOptions {
        scheduler,
        checkout: "/srv/memwall".into(),
        memwall: "/srv/memwall/target/release/memwall".into(),
        at: TimeOfDay { hour: 2, minute: 0 },
        history: None,
        out: None,
        system: false,
        user: None,
        xdg_config_home: None,
        home: Some("/home/ada".into()),
        partition: None,
        time: None,
        nightly: NightlyFlags::default(),
    }
}

#[test]
fn cron_escape_escapes_every_percent() {
    assert_eq!(cron_escape("date +%Y%m%d").unwrap(), r"date +\%Y\%m\%d");
    assert_eq!(cron_escape("no percent").unwrap(), "no percent");
    // Inside shell quotes too: cron reads the line before the shell does.
    assert_eq!(cron_escape("'50%'").unwrap(), r"'50\%'");
}

#[test]
fn cron_escape_refuses_what_cron_cannot_pass_on() {
    let e = cron_escape(r"a\%b").unwrap_err().to_string();
    assert!(e.contains("cannot be written in a crontab line"), "{e}");
    let e = cron_escape("a\nb").unwrap_err().to_string();
    assert!(e.contains("line break"), "{e}");
}

#[test]
fn sh_quote_survives_a_single_quote() {
    assert_eq!(sh_quote("/a b/it's"), r"'/a b/it'\''s'");
    assert_eq!(sh_word("/plain/path-1.2"), "/plain/path-1.2");
    assert_eq!(sh_word("two words"), "'two words'");
    assert_eq!(sh_word(""), "''");
}

#[test]
fn cron_line_quotes_paths_and_escapes_percent() {
    let mut o = options(Scheduler::Cron);
    o.checkout = "/srv/it's 100%".into();
    o.nightly.on_regression = Some("mail -s 'nightly' lab@example.org <".into());
    let i = generate(&o).unwrap();
    let line = i.files[0]
        .contents
        .lines()
        .find(|l| !l.starts_with('#'))
        .unwrap();
    assert!(
        line.starts_with("0 2 * * * cd '/srv/it'\\''s 100\\%' && "),
        "{line}"
    );
    assert!(line.contains(" && flock -n '/srv/it'\\''s 100\\%/.memwall/nightly.lock' "));
    assert!(
        line.contains(" nightly --history '/srv/it'\\''s 100\\%/history' "),
        "{line}"
    );
    assert!(
        line.contains(r#"--on-regression 'mail -s '\''nightly'\'' lab@example.org <'"#),
        "{line}"
    );
    assert!(line.ends_with(">> '/srv/it'\\''s 100\\%/.memwall/nightly.log' 2>&1"));
    assert_eq!(
        i.files[0].path,
        Path::new("/srv/it's 100%/.memwall/memwall-nightly.crontab")
    );
}

#[test]
fn time_of_day_accepts_only_hh_mm() {
    assert_eq!(
        TimeOfDay::parse("02:00").unwrap(),
        TimeOfDay { hour: 2, minute: 0 }
    );
    assert_eq!(
        TimeOfDay::parse("3:07").unwrap(),
        TimeOfDay { hour: 3, minute: 7 }
    );
    assert_eq!(TimeOfDay::parse("23:59").unwrap().cron(), "59 23 * * *");
    for bad in [
        "25:00", "2am", "02:60", "02:00:00", "", ":30", "2:5", "-1:00", "02-00",
    ] {
        let e = TimeOfDay::parse(bad).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("--at {bad}: expected")),
            "{bad}: {e}"
        );
    }
}

#[test]
fn systemd_words_escape_specifiers_and_variables() {
    assert_eq!(systemd_word("/usr/bin/memwall"), "/usr/bin/memwall");
    assert_eq!(systemd_word("a b"), "\"a b\"");
    assert_eq!(systemd_word("50%$HOME"), "\"50%%$$HOME\"");
    assert_eq!(systemd_word(r#"say "hi"\"#), r#""say \"hi\"\\""#);
}

#[test]
fn systemd_units_name_the_checkout_and_the_time() {
    let mut o = options(Scheduler::Systemd);
    o.at = TimeOfDay {
        hour: 3,
        minute: 30,
    };
    o.nightly.cpu_profile = Some(Profile::Cpu);
    let i = generate(&o).unwrap();
    assert_eq!(
        i.files[0].path,
        Path::new("/home/ada/.config/systemd/user/memwall-nightly.service")
    );
    let service = &i.files[0].contents;
    assert!(service.contains("\nType=oneshot\n"));
    assert!(service.contains("\nWorkingDirectory=/srv/memwall\n"));
    assert!(service.contains(
        "\nExecStart=/srv/memwall/target/release/memwall nightly --history \
         /srv/memwall/history --cpu-profile cpu\n"
    ));
    assert!(!service.contains("User="));
    assert!(i.files[1]
        .contents
        .contains("\nOnCalendar=*-*-* 03:30:00\n"));
    assert!(i.next.iter().any(|l| {
        l == "systemctl --user daemon-reload && systemctl --user enable --now memwall-nightly.timer"
    }));
    o.xdg_config_home = Some("/cfg".into());
    assert_eq!(
        generate(&o).unwrap().files[1].path,
        Path::new("/cfg/systemd/user/memwall-nightly.timer")
    );
}

#[test]
fn relative_paths_and_line_breaks_are_refused() {
    let mut o = options(Scheduler::Cron);
    o.checkout = "srv/memwall".into();
    let e = generate(&o).unwrap_err().to_string();
    assert!(e.contains("not an absolute path"), "{e}");
    let mut o = options(Scheduler::Systemd);
    o.memwall = "memwall".into();
    let e = generate(&o).unwrap_err().to_string();
    assert!(
        e.starts_with("--memwall memwall: not an absolute path"),
        "{e}"
    );
    let mut o = options(Scheduler::Github);
    o.checkout = "/srv/mem\nwall".into();
    let e = generate(&o).unwrap_err().to_string();
    assert!(e.contains("line break"), "{e}");
    let mut o = options(Scheduler::Cron);
    o.system = true;
    let e = generate(&o).unwrap_err().to_string();
    assert!(
        e.starts_with("--system: only for --scheduler systemd"),
        "{e}"
    );
}

#[test]
fn slurm_refuses_what_its_files_cannot_hold() {
    let mut o = options(Scheduler::Slurm);
    o.nightly.on_regression = Some("echo 100% >".into());
    let e = generate(&o).unwrap_err().to_string();
    assert!(e.contains("contains `%`"), "{e}");
    let mut o = options(Scheduler::Slurm);
    o.out = Some("/srv/slurm files".into());
    let e = generate(&o).unwrap_err().to_string();
    assert!(e.starts_with("--out /srv/slurm files: "), "{e}");
    let mut o = options(Scheduler::Slurm);
    o.partition = Some("gpu a100".into());
    let e = generate(&o).unwrap_err().to_string();
    assert!(
        e.starts_with("--partition \"gpu a100\": expected one word"),
        "{e}"
    );
}

#[test]
fn github_next_steps_name_the_workflow_in_the_repository() {
    let i = generate(&options(Scheduler::Github)).unwrap();
    assert_eq!(
        i.files[0].path,
        Path::new("/srv/memwall/.github/workflows/memwall-nightly.yml")
    );
    assert_eq!(
        i.next[0],
        "git add .github/workflows/memwall-nightly.yml && git commit -m 'memwall nightly \
         workflow' && git push"
    );
    let mut o = options(Scheduler::Github);
    o.out = Some("/tmp/elsewhere".into());
    let i = generate(&o).unwrap();
    assert!(i.next[0].contains("outside the checkout"), "{:?}", i.next);
    assert!(i.next[1].starts_with("git add .github/workflows/memwall-nightly.yml "));
}
