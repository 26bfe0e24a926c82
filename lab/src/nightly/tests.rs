use super::*;

fn noisy(center: f64, spread: f64, n: usize) -> Vec<f64> {
    // Deterministic samples spread evenly over center * (1 +- spread).
    (0..n)
        .map(|i| center * (1.0 + spread * (2.0 * i as f64 / (n - 1) as f64 - 1.0)))
        .collect()
}

#[test]
fn a_clear_slowdown_is_a_regression_and_a_speedup_an_improvement() {
    let before = noisy(100.0, 0.01, 21);
    let k = classify(&before, &noisy(130.0, 0.01, 21), true, 0.05);
    assert_eq!(k.verdict, ChangeVerdict::Regressed);
    let d = k.change.unwrap();
    assert!(d.lo > 0.05 && d.median > 0.29 && d.median < 0.31, "{d:?}");
    let k = classify(&before, &noisy(70.0, 0.01, 21), true, 0.05);
    assert_eq!(k.verdict, ChangeVerdict::Improved);
    // Throughput: larger is better, so the same moves flip.
    assert_eq!(
        classify(&before, &noisy(130.0, 0.01, 21), false, 0.05).verdict,
        ChangeVerdict::Improved
    );
    assert_eq!(
        classify(&before, &noisy(70.0, 0.01, 21), false, 0.05).verdict,
        ChangeVerdict::Regressed
    );
}

#[test]
fn a_small_or_uncertain_change_is_within_noise() {
    let before = noisy(100.0, 0.01, 21);
    // 3% slower: below the 5% threshold.
    assert_eq!(
        classify(&before, &noisy(103.0, 0.01, 21), true, 0.05).verdict,
        ChangeVerdict::WithinNoise
    );
    // 10% slower in the median, but the samples spread +-30%: the interval of the change
    // reaches inside the threshold (criterion's rule), so it is not called a regression.
    let k = classify(&before, &noisy(110.0, 0.3, 21), true, 0.05);
    assert_eq!(k.verdict, ChangeVerdict::WithinNoise, "{:?}", k.change);
    assert!(k.change.unwrap().median > 0.05);
    // Identical single values.
    assert_eq!(
        classify(&[1e9], &[1e9], true, 0.05).verdict,
        ChangeVerdict::WithinNoise
    );
    assert_eq!(
        classify(&[0.0], &[0.0], true, 0.05).verdict,
        ChangeVerdict::WithinNoise
    );
}

#[test]
fn single_values_are_judged_by_the_threshold() {
    assert_eq!(
        classify(&[1000.0], &[1100.0], true, 0.05).verdict,
        ChangeVerdict::Regressed
    );
    assert_eq!(
        classify(&[1000.0], &[1040.0], true, 0.05).verdict,
        ChangeVerdict::WithinNoise
    );
    assert_eq!(
        classify(&[0.0], &[10.0], true, 0.05).verdict,
        ChangeVerdict::Regressed
    );
}

#[test]
fn missing_previous_is_new_and_missing_now_is_missing() {
    let k = classify(&[], &[1.0, 2.0], true, 0.05);
    assert_eq!((k.verdict, k.change), (ChangeVerdict::New, None));
    assert!(!k.verdict.is_regression());
    let k = classify(&[1.0], &[], true, 0.05);
    assert_eq!(k.verdict, ChangeVerdict::Missing);
    assert!(k.verdict.is_regression());
    let k = classify(&[], &[], true, 0.05);
    assert_eq!(k.verdict, ChangeVerdict::NotMeasured);
    assert!(!k.verdict.is_regression());
}

fn entry(id: &str, profile: Profile, configs: Vec<(&str, f64)>) -> HistoryEntry {
    HistoryEntry {
        schema: HISTORY_SCHEMA,
        id: id.into(),
        date: id[..10].into(),
        started_at: "2026-11-20T00:00:00+00:00".into(),
        finished_at: "2026-11-20T00:10:00+00:00".into(),
        git_revision: "abc".into(),
        profile,
        backend: "flex".into(),
        device: "cpu".into(),
        configs: configs
            .into_iter()
            .map(|(name, step)| ConfigEntry {
                study: "s".into(),
                config: name.into(),
                kind: ConfigKind::Training,
                label: name.into(),
                keys: vec![],
                status: JobStatus::Ok,
                reason: None,
                samples: "steps".into(),
                metrics: BTreeMap::from([(
                    Metric::StepTime.name().to_string(),
                    noisy(step, 0.01, 11),
                )]),
                load: None,
                memory_limit_bytes: None,
                confirmations: Vec::new(),
                boundary: None,
            })
            .collect(),
        errors: vec![],
        confirm_s: None,
    }
}

#[test]
fn changes_compare_with_the_latest_run_of_the_same_profile() {
    let history = vec![
        entry(
            "2026-11-20T000000Z-a",
            Profile::Smoke,
            vec![("x", 1.0), ("y", 1.0)],
        ),
        entry("2026-11-21T000000Z-b", Profile::Cpu, vec![("x", 5.0)]),
        entry("2026-11-22T000000Z-c", Profile::Smoke, vec![("x", 1.5)]),
        entry(
            "2026-11-23T000000Z-d",
            Profile::Smoke,
            vec![("x", 1.0), ("y", 1.0), ("z", 1.0)],
        ),
    ];
    let ch = changes(&history, 0.05);
    let step = |c: &ConfigChange| {
        c.metrics
            .iter()
            .find(|(m, _)| *m == Metric::StepTime)
            .unwrap()
            .1
            .verdict
    };
    // x: against c (1.5 -> 1.0), not the cpu run b; two earlier smoke nights are too few
    // to know the step time's night-to-night noise.
    assert_eq!(ch[0].against.as_deref(), Some("2026-11-22T000000Z-c"));
    assert_eq!(step(&ch[0]), ChangeVerdict::NotEnoughHistory);
    assert!(!ChangeVerdict::NotEnoughHistory.is_regression());
    // y: c lacks it, so a.
    assert_eq!(ch[1].against.as_deref(), Some("2026-11-20T000000Z-a"));
    assert_eq!(step(&ch[1]), ChangeVerdict::NotEnoughHistory);
    // z: never measured before.
    assert_eq!(
        (ch[2].against.as_deref(), step(&ch[2])),
        (None, ChangeVerdict::New)
    );
}

#[test]
fn night_noise_is_robust_sigmas_of_the_night_to_night_changes_above_a_floor() {
    // Changes 10%, 9.09%, 10%: median 10%, threshold NOISE_SIGMAS x 1.4826 x 10%.
    let n = night_noise(&[1.0, 1.1, 1.0, 1.1], 0.05, false);
    assert!(
        (n.threshold - NOISE_SIGMAS * 1.4826 * 0.1).abs() < 1e-12,
        "{n:?}"
    );
    assert_eq!(n.nights, 4);
    // Steady nights: the floor.
    assert_eq!(night_noise(&[2.0, 2.0, 2.0], 0.05, false).threshold, 0.05);
    // One night or none: the floor alone.
    assert_eq!(night_noise(&[2.0], 0.05, false).threshold, 0.05);
    assert_eq!(night_noise(&[], 1e-3, true).describe(), "±0.1% (exact)");
    // One step in the history barely moves the estimate: 1% changes and one of 50% give
    // NOISE_SIGMAS x 1.4826 x 1%, not a threshold near 50%.
    let n = night_noise(&[1.0, 1.01, 1.0, 1.01, 1.515, 1.53], 0.0, false);
    assert!(
        (n.threshold - NOISE_SIGMAS * 1.4826 * 0.01).abs() < 1e-3,
        "{n:?}"
    );
}

/// A small deterministic generator (64-bit LCG, Knuth's MMIX constants) for the simulated
/// histories below; uniform in [0, 1).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Nights of one configuration: a step time whose level moves up to ±`spread` from night to
/// night (the machine, not the code), 11 steps 1% apart within a night, and an exact peak.
fn simulated(rng: &mut Lcg, nights: usize, spread: f64, slowdown_last: f64) -> Vec<HistoryEntry> {
    (0..nights)
        .map(|i| {
            let mut level = 0.1 * (1.0 + spread * (2.0 * rng.next() - 1.0));
            if i + 1 == nights {
                level *= slowdown_last;
            }
            let steps: Vec<f64> = (0..11).map(|j| level * (1.0 + 0.001 * j as f64)).collect();
            let mut e = entry(
                &format!("2026-11-{:02}T000000Z-a", i + 1),
                Profile::Smoke,
                vec![],
            );
            e.configs.push(ConfigEntry {
                study: "s".into(),
                config: "x".into(),
                kind: ConfigKind::Training,
                label: "x".into(),
                keys: vec![],
                status: JobStatus::Ok,
                reason: None,
                samples: "steps".into(),
                metrics: BTreeMap::from([
                    (Metric::StepTime.name().to_string(), steps),
                    (Metric::PeakAllocated.name().to_string(), vec![1e8]),
                ]),
                load: None,
                memory_limit_bytes: None,
                confirmations: Vec::new(),
                boundary: None,
            });
            e
        })
        .collect()
}

fn flagged(history: &[HistoryEntry], metric: Metric) -> Option<ChangeVerdict> {
    let ch = changes(history, DEFAULT_NOISE);
    let k = &ch[0].metrics.iter().find(|(m, _)| *m == metric)?.1;
    matches!(
        k.verdict,
        ChangeVerdict::Regressed | ChangeVerdict::Improved
    )
    .then_some(k.verdict)
}

#[test]
fn a_a_nights_are_rarely_flagged_and_a_doubled_step_time_nearly_always() {
    // 400 simulated A/A histories of 5 to 12 nights whose step-time level moves up to ±10%
    // between nights (the machine, not the code): the last night is flagged in under 3% of
    // them (a per-comparison false-alarm rate; a simulation of 6,000 such histories gave
    // 1.7%, and 2.0% at ±20%). The same histories with the last night 2x slower are
    // flagged as regressed in at least 98% (the simulation: 99.4%).
    let mut rng = Lcg(20261125);
    let (mut false_flags, mut missed, mut cases) = (0, 0, 0);
    for case in 0..400 {
        let nights = 5 + case % 8;
        let seed = rng.0;
        let aa = simulated(&mut rng, nights, 0.1, 1.0);
        if flagged(&aa, Metric::StepTime).is_some() {
            false_flags += 1;
        }
        // The deterministic peak never moves: never flagged.
        assert_eq!(flagged(&aa, Metric::PeakAllocated), None);
        let ab = simulated(&mut Lcg(seed), nights, 0.1, 2.0);
        if flagged(&ab, Metric::StepTime) != Some(ChangeVerdict::Regressed) {
            missed += 1;
        }
        cases += 1;
    }
    assert!(
        false_flags * 100 < 3 * cases,
        "{false_flags} of {cases} A/A histories flagged"
    );
    assert!(
        missed * 100 <= 2 * cases,
        "a 2x slowdown went unflagged {missed} of {cases} times"
    );
}

#[test]
fn deterministic_metrics_are_compared_exactly_from_the_second_night() {
    let mut rng = Lcg(7);
    let mut h = simulated(&mut rng, 2, 0.2, 1.0);
    assert_eq!(flagged(&h, Metric::PeakAllocated), None);
    // 1% more memory on the second night: regressed, with one earlier night only.
    h[1].configs[0]
        .metrics
        .insert(Metric::PeakAllocated.name().to_string(), vec![1.01e8]);
    assert_eq!(
        flagged(&h, Metric::PeakAllocated),
        Some(ChangeVerdict::Regressed)
    );
    let k = changes(&h, DEFAULT_NOISE)[0].metrics[0].1.clone();
    assert_eq!(k.noise.unwrap().describe(), "±0.1% (exact)");
    // The step time of the same two nights: not enough history, whatever it did.
    let step = changes(&h, DEFAULT_NOISE)[0]
        .metrics
        .iter()
        .find(|(m, _)| *m == Metric::StepTime)
        .unwrap()
        .1
        .verdict;
    assert_eq!(step, ChangeVerdict::NotEnoughHistory);
}

#[test]
fn history_refuses_other_schemas_and_duplicate_ids() {
    let dir = tempfile::tempdir().unwrap();
    let e = entry("2026-11-20T000000Z-a", Profile::Smoke, vec![("x", 1.0)]);
    append(dir.path(), &e).unwrap();
    assert!(append(dir.path(), &e).is_err());
    assert_eq!(load(dir.path()).unwrap().entries, vec![e.clone()]);
    // Another schema and a truncated file: skipped and named, the good entry still read.
    let mut other = e.clone();
    other.id = "2026-11-21T000000Z-b".into();
    other.schema = 99;
    append(dir.path(), &other).unwrap();
    std::fs::write(
        dir.path().join("2026-11-22T000000Z-c.json"),
        "{\"schema\": 1, \"id",
    )
    .unwrap();
    let h = load(dir.path()).unwrap();
    assert_eq!(h.entries, vec![e]);
    let named: Vec<String> = h
        .damaged
        .iter()
        .map(|(p, why)| format!("{} {why}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    assert_eq!(named.len(), 2, "{named:?}");
    assert!(named[0].starts_with("2026-11-21T000000Z-b.json") && named[0].contains("schema"));
    assert!(named[1].starts_with("2026-11-22T000000Z-c.json") && named[1].contains("malformed"));
}

#[test]
fn the_history_exports_as_one_long_table_in_csv_and_parquet() {
    use polars::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("history");
    append(
        &h,
        &entry(
            "2026-11-20T000000Z-a",
            Profile::Smoke,
            vec![("x", 1.0), ("y", 2.0)],
        ),
    )
    .unwrap();
    append(
        &h,
        &entry("2026-11-21T000000Z-b", Profile::Smoke, vec![("x", 1.5)]),
    )
    .unwrap();
    std::fs::write(h.join("2026-11-22T000000Z-c.json"), "not json").unwrap();
    let csv = dir.path().join("out/history.csv");
    let damaged = export(&h, &csv).unwrap();
    assert_eq!(damaged.len(), 1);
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "run,date,revision,profile,backend,device,study,config,status,metric,samples,n,median,lo,hi"
    );
    // One row per run, configuration and metric (one metric each here): 3 rows.
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[3].starts_with(
            "2026-11-21T000000Z-b,2026-11-21,abc,smoke,flex,cpu,s,x,ok,step_time_s,steps,11,1.5"
        ),
        "{}",
        lines[3]
    );
    let parquet = dir.path().join("history.parquet");
    export(&h, &parquet).unwrap();
    let df = ParquetReader::new(std::fs::File::open(&parquet).unwrap())
        .finish()
        .unwrap();
    assert_eq!(df.height(), 3);
    let medians: Vec<f64> = df
        .column("median")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    assert_eq!(medians, vec![1.0, 2.0, 1.5]);
}

#[test]
fn concurrent_writers_keep_every_entry_and_one_id_is_written_once() {
    let dir = tempfile::tempdir().unwrap();
    // Two writers (threads of one process: the same pid, the harder case for temporary
    // names), 40 entries each, at once.
    std::thread::scope(|s| {
        for w in 0..2 {
            let dir = dir.path();
            s.spawn(move || {
                for i in 0..40 {
                    let id = format!("2026-11-{:02}T{w}{i:05}Z-w", 1 + i % 28);
                    append(dir, &entry(&id, Profile::Smoke, vec![("x", 1.0)])).unwrap();
                }
            });
        }
    });
    let h = load(dir.path()).unwrap();
    assert_eq!((h.entries.len(), h.damaged.len()), (80, 0));
    // One id from eight writers at once: exactly one entry, seven clear refusals.
    let e = entry("2026-11-30T000000Z-same", Profile::Smoke, vec![("x", 1.0)]);
    let results: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| append(dir.path(), &e).is_ok()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|ok| **ok).count(), 1, "{results:?}");
    let h = load(dir.path()).unwrap();
    assert_eq!((h.entries.len(), h.damaged.len()), (81, 0));
    // No temporary file is left behind.
    let hidden = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(hidden, 0);
}

/// An in-process study's numbers: one entry per case, its metrics by kind; a schedule's
/// cost is compared as deterministic (a 1% worse schedule is a regression at once), a
/// solve time only once enough nights measured it.
#[test]
fn in_process_cases_are_tracked_and_judged_by_kind() {
    use crate::studies::{Tracked, TrackedKind};
    let night = |id: &str, cost: f64, time: f64| {
        let t = |kind, value| Tracked {
            case: "VGG16 at budget 0.9".into(),
            kind,
            value,
        };
        let mut e = entry(id, Profile::Smoke, vec![("control", 0.1)]);
        e.configs.extend(tracked_entries(
            "checkmate",
            &[
                t(TrackedKind::SolveTime, time),
                t(TrackedKind::ScheduleCost, cost),
            ],
            None,
        ));
        e
    };
    let first = night("2026-11-20T000000Z-a", 1000.0, 0.50);
    let cases: Vec<_> = first
        .configs
        .iter()
        .filter(|c| c.kind == ConfigKind::InProcess)
        .collect();
    assert_eq!(cases.len(), 1);
    assert_eq!(cases[0].study, "checkmate");
    assert_eq!(cases[0].metrics["schedule_cost"], vec![1000.0]);
    assert_eq!(cases[0].metrics["solve_time_s"], vec![0.50]);
    // The same cost and a 30% slower solve: cost within noise, time not judged yet.
    let h = vec![first.clone(), night("2026-11-21T000000Z-a", 1000.0, 0.65)];
    let c = changes(&h, DEFAULT_NOISE);
    let case = c.iter().find(|c| c.kind == ConfigKind::InProcess).unwrap();
    let verdicts: Vec<(Metric, ChangeVerdict)> =
        case.metrics.iter().map(|(m, k)| (*m, k.verdict)).collect();
    assert_eq!(
        verdicts,
        vec![
            (Metric::SolveTime, ChangeVerdict::NotEnoughHistory),
            (Metric::ScheduleCost, ChangeVerdict::WithinNoise)
        ]
    );
    // A 1% costlier schedule: regressed, and only that.
    let h = vec![first, night("2026-11-21T000000Z-b", 1010.0, 0.50)];
    let c = changes(&h, DEFAULT_NOISE);
    let flagged: Vec<String> = c
        .iter()
        .flat_map(|c| c.metrics.iter().map(move |(m, k)| (c, m, k)))
        .filter(|(_, _, k)| k.verdict.is_regression())
        .map(|(c, m, _)| format!("{} {}", c.config, m.name()))
        .collect();
    assert_eq!(flagged, vec!["VGG16 at budget 0.9 schedule_cost"]);
}

/// A machine load of `cpus` other busy CPUs over a job.
fn machine_load(cpus: f64) -> memwall_core::measure::MachineLoad {
    memwall_core::measure::MachineLoad {
        other_busy_cpus: cpus,
        steal_share: 0.0,
        load_avg_1m: 1.0 + cpus,
        cpus: 2,
        wall_s: 5.0,
        gpu: None,
    }
}

/// A night whose machine was loaded gives its timings no verdict, whatever they moved, and its
/// peaks are judged as on any night; later nights are compared with the last quiet night and
/// their noise estimated from quiet nights only, so the loaded night raises no false alarm
/// afterwards and hides no real slowdown.
#[test]
fn timings_under_load_are_noisy_and_loaded_nights_are_left_out() {
    let mut rng = Lcg(20261129);
    // Seven quiet nights, then one 2x slower under load (one CPU-bound process beside it).
    let mut history = simulated(&mut rng, 8, 0.02, 2.0);
    history[7].configs[0].load = Some(machine_load(1.0));
    let ch = changes(&history, DEFAULT_NOISE);
    let step = step_time(&ch);
    assert_eq!(step.verdict, ChangeVerdict::Noisy);
    assert!(!step.verdict.is_regression());
    assert_eq!(step.under_load, Some(machine_load(1.0)));
    assert_eq!(flagged(&history, Metric::PeakAllocated), None);
    let page = summary_paragraph(&history, &ch);
    assert!(page.contains("1 noisy (timings taken under load"), "{page}");
    // A light load (a tenth of a CPU) is not load: the slowdown is a regression.
    history[7].configs[0].load = Some(machine_load(0.1));
    assert_eq!(
        flagged(&history, Metric::StepTime),
        Some(ChangeVerdict::Regressed)
    );
    // The next night, quiet and as fast as before: compared with the last quiet night, within
    // noise (against the loaded night it would read as a 2x improvement).
    history[7].configs[0].load = Some(machine_load(1.0));
    let mut next = simulated(&mut Lcg(7), 1, 0.0, 1.0);
    next[0].id = "2026-11-09T000000Z-a".into();
    history.push(next.remove(0));
    let ch = changes(&history, DEFAULT_NOISE);
    let step = step_time(&ch);
    assert_eq!(step.verdict, ChangeVerdict::WithinNoise, "{step:?}");
    assert_eq!(
        step.noise.unwrap().nights,
        7,
        "the loaded night is no noise sample"
    );
    // And a real 2x slowdown on a quiet night after it is still a regression.
    let last = history.len() - 1;
    for v in history[last].configs[0]
        .metrics
        .get_mut(Metric::StepTime.name())
        .unwrap()
    {
        *v *= 2.0;
    }
    assert_eq!(
        flagged(&history, Metric::StepTime),
        Some(ChangeVerdict::Regressed)
    );
}

/// The step-time change of the first configuration of `changes`.
fn step_time(changes: &[ConfigChange]) -> &Classified {
    &changes[0]
        .metrics
        .iter()
        .find(|(m, _)| *m == Metric::StepTime)
        .unwrap()
        .1
}

/// The verdict of `metric` of the first configuration of the last entry of `history`.
fn verdict_of(history: &[HistoryEntry], metric: Metric) -> ChangeVerdict {
    let ch = changes(history, DEFAULT_NOISE);
    ch[0]
        .metrics
        .iter()
        .find(|(m, _)| *m == metric)
        .unwrap()
        .1
        .verdict
}

/// A confirmation of `metric` by reruns whose samples are `previous` and `current`.
fn confirmation(metric: Metric, previous: Vec<f64>, current: Vec<f64>) -> Confirmation {
    let threshold = if metric.deterministic() {
        EXACT_TOLERANCE
    } else {
        DEFAULT_NOISE
    };
    Confirmation {
        metric: metric.name().to_string(),
        against: "previous binary abc".into(),
        runs: confirm::CONFIRM_RUNS,
        verdict: classify(&previous, &current, metric.lower_is_better(), threshold).verdict,
        current,
        previous,
        threshold,
        faster_half: false,
        rounds: Vec::new(),
    }
}

/// Confirm before an alarm (issue 56): a regression the reruns do not show is "not confirmed
/// by rerun" and raises nothing; one they show is reported; a timing taken under load, which
/// alone reads noisy, is judged by reruns beside the last night's binary that shared its load.
#[test]
fn a_flagged_change_is_reported_only_if_its_reruns_show_it() {
    let mut rng = Lcg(56);
    let mut history = simulated(&mut rng, 8, 0.02, 2.0);
    assert_eq!(
        flagged(&history, Metric::StepTime),
        Some(ChangeVerdict::Regressed)
    );
    // The suspect list names it (quiet night: with or without a kept binary).
    let s = confirm::suspects(&history, DEFAULT_NOISE, false);
    assert_eq!(s.len(), 1);
    let metrics: Vec<Metric> = s[0].metrics.iter().map(|(m, _)| *m).collect();
    assert_eq!((metrics, s[0].under_load), (vec![Metric::StepTime], false));
    // Reruns at the old speed on both sides: a transient, not reported.
    history[7].configs[0].confirmations = vec![confirmation(
        Metric::StepTime,
        noisy(0.1, 0.01, 12),
        noisy(0.1, 0.01, 12),
    )];
    let ch = changes(&history, DEFAULT_NOISE);
    let k = step_time(&ch);
    assert_eq!(k.verdict, ChangeVerdict::NotConfirmed);
    assert!(!k.verdict.is_regression());
    let page = summary_paragraph(&history, &ch);
    assert!(
        page.contains("0 regressed") && page.contains("1 not confirmed by rerun"),
        "{page}"
    );
    // Reruns that show tonight's binary 2x slower than last night's: reported.
    history[7].configs[0].confirmations = vec![confirmation(
        Metric::StepTime,
        noisy(0.1, 0.01, 12),
        noisy(0.2, 0.01, 12),
    )];
    assert_eq!(
        flagged(&history, Metric::StepTime),
        Some(ChangeVerdict::Regressed)
    );
    // Reruns that show the opposite direction do not confirm a regression.
    history[7].configs[0].confirmations = vec![confirmation(
        Metric::StepTime,
        noisy(0.2, 0.01, 12),
        noisy(0.1, 0.01, 12),
    )];
    assert_eq!(
        step_time(&changes(&history, DEFAULT_NOISE)).verdict,
        ChangeVerdict::NotConfirmed
    );

    // Under load: noisy alone; a suspect only where a binary of the last night is kept.
    history[7].configs[0].confirmations.clear();
    history[7].configs[0].load = Some(machine_load(1.0));
    assert_eq!(
        step_time(&changes(&history, DEFAULT_NOISE)).verdict,
        ChangeVerdict::Noisy
    );
    assert!(confirm::suspects(&history, DEFAULT_NOISE, false).is_empty());
    let s = confirm::suspects(&history, DEFAULT_NOISE, true);
    assert_eq!((s.len(), s[0].under_load), (1, true));
    // Interleaved reruns under the same load show it: regressed; they do not: still noisy.
    history[7].configs[0].confirmations = vec![confirmation(
        Metric::StepTime,
        noisy(0.15, 0.05, 12),
        noisy(0.3, 0.05, 12),
    )];
    assert_eq!(
        flagged(&history, Metric::StepTime),
        Some(ChangeVerdict::Regressed)
    );
    history[7].configs[0].confirmations = vec![confirmation(
        Metric::StepTime,
        noisy(0.15, 0.05, 12),
        noisy(0.15, 0.05, 12),
    )];
    assert_eq!(
        step_time(&changes(&history, DEFAULT_NOISE)).verdict,
        ChangeVerdict::Noisy
    );
    // A heavier load last night than tonight: last night's steps spiked, half of them to
    // 4x, so its median rose past tonight's 2x slowdown; the faster halves still show the
    // slowdown, so it is suspected as regressed (not as a speed-up) and confirmed.
    let last = history[6].configs[0]
        .metrics
        .get_mut(Metric::StepTime.name());
    for (i, x) in last.unwrap().iter_mut().enumerate() {
        if i % 2 == 0 {
            *x *= 4.0;
        }
    }
    history[6].configs[0].load = Some(machine_load(1.0));
    history[7].configs[0].confirmations.clear();
    assert_eq!(
        step_time(&changes(&history, DEFAULT_NOISE)).suspected,
        Some(ChangeVerdict::Regressed)
    );
    let s = confirm::suspects(&history, DEFAULT_NOISE, true);
    assert_eq!((s.len(), s[0].under_load), (1, true));
    history[7].configs[0].confirmations = vec![confirmation(
        Metric::StepTime,
        noisy(0.1, 0.005, 12),
        noisy(0.2, 0.005, 12),
    )];
    assert_eq!(
        flagged(&history, Metric::StepTime),
        Some(ChangeVerdict::Regressed)
    );
    // Nothing flagged: no suspect.
    let quiet = simulated(&mut Lcg(3), 8, 0.0, 1.0);
    assert!(confirm::suspects(&quiet, DEFAULT_NOISE, true).is_empty());
}

/// A peak that moved by the spread the reruns of one binary show is not a regression: the
/// reruns' threshold widens to that spread.
#[test]
fn a_peak_moving_within_the_reruns_spread_is_not_confirmed() {
    let mut history = simulated(&mut Lcg(9), 3, 0.0, 1.0);
    // Tonight's peak 0.2% above last night's (beyond the 0.1% tolerance; 64 KiB of 100 MB is
    // less): flagged.
    history[2].configs[0]
        .metrics
        .insert(Metric::PeakAllocated.name().into(), vec![1.002e8]);
    assert_eq!(
        flagged(&history, Metric::PeakAllocated),
        Some(ChangeVerdict::Regressed)
    );
    // The reruns: each binary's peaks spread 0.25%, tonight's no higher than last night's.
    let mut c = confirmation(
        Metric::PeakAllocated,
        vec![1.0e8, 1.0025e8, 1.001e8],
        vec![1.0005e8, 1.0025e8, 1.0e8],
    );
    c.threshold = 0.0025;
    c.verdict = c.classified(true).verdict;
    history[2].configs[0].confirmations = vec![c];
    let ch = changes(&history, DEFAULT_NOISE);
    let k = &ch[0]
        .metrics
        .iter()
        .find(|(m, _)| *m == Metric::PeakAllocated)
        .unwrap()
        .1;
    assert_eq!(k.verdict, ChangeVerdict::NotConfirmed, "{k:?}");
    // A real change of the plan (+50%) is confirmed.
    history[2].configs[0].confirmations = vec![confirmation(
        Metric::PeakAllocated,
        vec![1.0e8, 1.0025e8, 1.001e8],
        vec![1.5e8, 1.5e8, 1.5e8],
    )];
    history[2].configs[0]
        .metrics
        .insert(Metric::PeakAllocated.name().into(), vec![1.5e8]);
    assert_eq!(
        flagged(&history, Metric::PeakAllocated),
        Some(ChangeVerdict::Regressed)
    );
}

/// A configuration under a memory limit that fitted last night within its spread of the limit
/// and runs out of memory tonight is "at the limit" on every metric, never missing; one far
/// below its limit that stops fitting is missing; reruns that fit in some runs make it at the
/// limit whatever its peak.
#[test]
fn a_job_at_its_memory_limit_is_at_the_limit_not_missing() {
    let limit: u64 = 12 * 1024 * 1024;
    let mut history = simulated(&mut Lcg(4), 3, 0.0, 1.0);
    let set_peak = |h: &mut Vec<HistoryEntry>, i: usize, peak: f64| {
        h[i].configs[0]
            .metrics
            .insert(Metric::PeakAllocated.name().into(), vec![peak]);
        h[i].configs[0].memory_limit_bytes = Some(limit);
    };
    for i in 0..2 {
        set_peak(&mut history, i, limit as f64 - 1000.0);
    }
    history[2].configs[0].memory_limit_bytes = Some(limit);
    history[2].configs[0].status = JobStatus::OutOfMemory;
    history[2].configs[0].metrics.clear();
    let ch = changes(&history, DEFAULT_NOISE);
    for (m, k) in &ch[0].metrics {
        assert_eq!(k.verdict, ChangeVerdict::AtLimit, "{}", m.name());
        assert_eq!(k.at_limit, Some((limit as f64 - 1000.0, limit)));
    }
    assert!(
        confirm::suspects(&history, DEFAULT_NOISE, true).is_empty(),
        "nothing to rerun"
    );
    let page = summary_paragraph(&history, &ch);
    assert!(
        page.contains("0 missing") && page.contains("at the limit"),
        "{page}"
    );
    // Far below its limit last night (half of it): out of memory now is missing, and rerun.
    for i in 0..2 {
        set_peak(&mut history, i, limit as f64 / 2.0);
    }
    assert_eq!(
        verdict_of(&history, Metric::PeakAllocated),
        ChangeVerdict::Missing
    );
    let s = confirm::suspects(&history, DEFAULT_NOISE, true);
    assert!(s.len() == 1 && s[0].status, "{s:?}");
    // Its reruns fit twice in three: the same code fits or not by chance.
    history[2].configs[0].confirmations = vec![Confirmation {
        metric: STATUS_METRIC.into(),
        against: "previous binary abc".into(),
        runs: 3,
        current: vec![limit as f64 - 10.0, limit as f64 - 20.0],
        previous: vec![limit as f64 - 15.0; 3],
        threshold: 0.0,
        verdict: ChangeVerdict::WithinNoise,
        faster_half: false,
        rounds: Vec::new(),
    }];
    assert_eq!(
        verdict_of(&history, Metric::PeakAllocated),
        ChangeVerdict::AtLimit
    );
    // No rerun of tonight's binary fits, and last night's binary fits in every rerun: a real
    // regression, missing.
    history[2].configs[0].confirmations[0].current.clear();
    assert_eq!(
        verdict_of(&history, Metric::PeakAllocated),
        ChangeVerdict::Missing
    );
}

/// The binaries kept for tomorrow's reruns replace the ones kept before; the kept `memwall` is
/// found by its revision, with its job runner beside it under the name it looks for.
#[test]
fn tonights_binary_is_kept_for_tomorrow_and_replaces_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("memwall");
    let job = dir.path().join("a-runner");
    std::fs::write(&bin, b"one").unwrap();
    std::fs::write(&job, b"job one").unwrap();
    assert!(confirm::kept_binary(dir.path()).is_none());
    confirm::keep_binary(dir.path(), &bin, &job, "abc1234").unwrap();
    let k = confirm::kept_binary(dir.path()).unwrap();
    assert_eq!(k.revision, "abc1234");
    assert_eq!(std::fs::read(&k.path).unwrap(), b"one");
    let beside = k
        .path
        .with_file_name(memwall_runner::job::job_runner_name());
    assert_eq!(std::fs::read(beside).unwrap(), b"job one");
    std::fs::write(&bin, b"two").unwrap();
    confirm::keep_binary(dir.path(), &bin, &job, "def5678-dirty").unwrap();
    let k = confirm::kept_binary(dir.path()).unwrap();
    assert_eq!(
        (k.revision.as_str(), std::fs::read(&k.path).unwrap()),
        ("def5678-dirty", b"two".to_vec())
    );
    let kept: Vec<_> = std::fs::read_dir(dir.path().join(confirm::BINARY_DIR))
        .unwrap()
        .collect();
    assert_eq!(kept.len(), 1, "one binary kept");
}

/// The committed cpu records of the largest-input search (`runs/largest_input/`).
fn committed_search_records() -> Vec<JobRecord> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runs");
    crate::analysis::StudyRecords::load(&dir, "largest_input")
        .unwrap()
        .records
}

/// The largest-input search is tracked per configuration and searched field, its probes not
/// read as repeats of one job: the committed cpu search gives 6 strategies x 2 fields, each
/// with the largest value that fits in every run and the peak at it, all measured.
#[test]
fn a_search_is_tracked_by_its_largest_value_per_field() {
    let records = committed_search_records();
    let entries = config_entries(&records);
    let search: Vec<&ConfigEntry> = entries
        .iter()
        .filter(|e| e.kind == ConfigKind::Search)
        .collect();
    assert_eq!(
        search.len(),
        12,
        "{:?}",
        entries.iter().map(|e| &e.config).collect::<Vec<_>>()
    );
    assert_eq!(search.len(), entries.len(), "every probe is a search's");
    let value = |config: &str| {
        let e = search.iter().find(|e| e.config == config).unwrap();
        assert_eq!(e.status, JobStatus::Ok, "{config}");
        assert!(e.metrics[Metric::PeakAllocated.name()][0] <= 134_217_728.0);
        e.metrics[Metric::LargestInput.name()][0]
    };
    // The report's numbers (reports/largest_input/report.md).
    assert_eq!(value("none: largest batch"), 8.0);
    assert_eq!(value("checkpoint_every_block: largest batch"), 28.0);
    assert_eq!(value("checkpoint_every_block: largest seq_len"), 448.0);
    assert_eq!(value("sqrt: largest batch"), 27.0);
    // Two nights of the same records: nothing changed.
    let night = |id: &str, configs: Vec<ConfigEntry>| {
        let mut e = entry(id, Profile::Cpu, vec![]);
        e.configs = configs;
        e
    };
    let history = vec![
        night("2026-11-01T000000Z-a", entries.clone()),
        night("2026-11-02T000000Z-a", entries.clone()),
    ];
    for c in changes(&history, DEFAULT_NOISE) {
        for (m, k) in &c.metrics {
            assert_eq!(
                k.verdict,
                ChangeVerdict::WithinNoise,
                "{} {}",
                c.config,
                m.name()
            );
        }
    }
}

/// A boundary that moved among values at the limit is at the limit; one that moved with clean
/// boundaries on both nights is a change.
#[test]
fn a_search_boundary_moving_within_its_band_at_the_limit_is_at_the_limit() {
    let records = committed_search_records();
    let base: Vec<ConfigEntry> = config_entries(&records)
        .into_iter()
        .filter(|e| e.config == "sqrt: largest batch")
        .collect();
    let with = |largest: f64, up_to: Option<usize>| {
        let mut c = base[0].clone();
        c.metrics
            .insert(Metric::LargestInput.name().into(), vec![largest]);
        let b = c.boundary.as_mut().unwrap();
        b.largest = Some(largest as usize);
        b.at_limit_up_to = up_to;
        b.at_limit = up_to
            .map(|v| vec![format!("{v}: fits in 2 of 3 runs")])
            .unwrap_or_default();
        let mut e = entry("2026-11-01T000000Z-a", Profile::Cpu, vec![]);
        e.configs = vec![c];
        e
    };
    let verdict = |a: HistoryEntry, mut b: HistoryEntry| {
        b.id = "2026-11-02T000000Z-a".into();
        let ch = changes(&[a, b], DEFAULT_NOISE);
        ch[0]
            .metrics
            .iter()
            .find(|(m, _)| *m == Metric::LargestInput)
            .unwrap()
            .1
            .clone()
    };
    // Last night 27 fit in every run and 28 in 2 of 3; tonight 28 fits in every run.
    let k = verdict(with(27.0, Some(28)), with(28.0, None));
    assert_eq!(k.verdict, ChangeVerdict::AtLimit, "{k:?}");
    assert!(k.at_limit.is_some_and(|(p, l)| p > 0.0 && l == 134_217_728));
    // Clean boundaries at 27 and 28: a real change of one step (+3.7%), improved.
    assert_eq!(
        verdict(with(27.0, None), with(28.0, None)).verdict,
        ChangeVerdict::Improved
    );
    // 27 (at the limit up to 28) and then 20: outside the band, regressed.
    assert_eq!(
        verdict(with(27.0, Some(28)), with(20.0, None)).verdict,
        ChangeVerdict::Regressed
    );
}

/// A timing's change is confirmed only if every round of interleaved reruns shows it: the
/// samples of a failed CI run (three reruns a side of one binary, 12 steps each, other tests'
/// nightlies starting and stopping beside them) where the control configuration, not slowed,
/// read regressed on the pooled faster halves (+4.6%, +17.1%, +33.2% round by round, other tests'
/// load changing through the reruns while tonight's binary always ran second), and the
/// configuration with a planted 3x slowdown, which every round shows.
#[test]
fn a_change_not_every_round_shows_is_not_confirmed() {
    let rounds = |previous: &[f64], current: &[f64]| -> Vec<f64> {
        previous
            .chunks(12)
            .zip(current.chunks(12))
            .filter_map(|(p, c)| Confirmation::round_change(p, c, true, true))
            .collect()
    };
    let control_previous = vec![
        0.002802534,
        0.00306909,
        0.002792805,
        0.002902372,
        0.002613827,
        0.002416022,
        0.002395935,
        0.002510725,
        0.002749993,
        0.002803687,
        0.002622302,
        0.002661506,
        0.003042636,
        0.002763211,
        0.002688208,
        0.002499961,
        0.002430151,
        0.00241229,
        0.002373535,
        0.00241547,
        0.002597447,
        0.00277332,
        0.002586542,
        0.002362841,
        0.003207818,
        0.002764131,
        0.002164205,
        0.002399496,
        0.002789353,
        0.002422434,
        0.002052647,
        0.002193468,
        0.002601312,
        0.002283529,
        0.002844128,
        0.002702412,
    ];
    let control_current = vec![
        0.002835576,
        0.002865388,
        0.002843294,
        0.002744635,
        0.002801861,
        0.002715211,
        0.002709666,
        0.002649201,
        0.002564838,
        0.002776778,
        0.00261548,
        0.00357701,
        0.013888826,
        0.003281837,
        0.002832201,
        0.013029001,
        0.00285711,
        0.002799078,
        0.002746644,
        0.002927773,
        0.002824027,
        0.002956896,
        0.002830176,
        0.003046476,
        0.003872908,
        0.003223018,
        0.003330322,
        0.002963393,
        0.003292794,
        0.003136741,
        0.003055836,
        0.003000774,
        0.00294275,
        0.003068796,
        0.00255725,
        0.003118728,
    ];
    let mut c = confirmation(
        Metric::StepTime,
        control_previous.clone(),
        control_current.clone(),
    );
    c.faster_half = true;
    assert_eq!(c.classified(true).verdict, ChangeVerdict::Regressed);
    c.rounds = rounds(&control_previous, &control_current);
    assert_eq!(c.rounds.len(), 3);
    assert!(
        c.rounds[0] < DEFAULT_NOISE && c.rounds[2] > 0.3,
        "{:?}",
        c.rounds
    );
    assert_eq!(c.classified(true).verdict, ChangeVerdict::WithinNoise);
    // Throughput, the same rounds seen from the other side.
    let tokens = |v: &[f64]| v.iter().map(|s| 64.0 / s).collect::<Vec<f64>>();
    let mut t = confirmation(
        Metric::TokensPerS,
        tokens(&control_previous),
        tokens(&control_current),
    );
    t.faster_half = true;
    t.rounds = tokens(&control_previous)
        .chunks(12)
        .zip(tokens(&control_current).chunks(12))
        .filter_map(|(p, c)| Confirmation::round_change(p, c, false, true))
        .collect();
    assert_eq!(t.classified(false).verdict, ChangeVerdict::WithinNoise);

    let slowed_previous = vec![
        0.002598547,
        0.002258832,
        0.002109203,
        0.002199855,
        0.002182101,
        0.00216512,
        0.002120888,
        0.002173539,
        0.002255658,
        0.002141348,
        0.001999856,
        0.002250599,
        0.003767903,
        0.002397374,
        0.00275395,
        0.003125334,
        0.002308597,
        0.002729556,
        0.004282202,
        0.005323261,
        0.006195556,
        0.002869377,
        0.002306568,
        0.002662048,
        0.011110584,
        0.006811867,
        0.008817129,
        0.011624242,
        0.008252,
        0.008052113,
        0.010869856,
        0.00662336,
        0.006269251,
        0.003031118,
        0.009112027,
        0.004285532,
    ];
    let slowed_current = vec![
        0.011621194,
        0.011485635,
        0.021816733,
        0.012329547,
        0.011061677,
        0.012750674,
        0.019730523,
        0.013457277,
        0.023158526,
        0.008995268,
        0.021112997,
        0.036112779,
        0.034632476,
        0.062537729,
        0.04250713,
        0.037869752,
        0.039184474,
        0.022713032,
        0.0470099,
        0.025750568,
        0.035112952,
        0.037081067,
        0.021580656,
        0.018123383,
        0.014483951,
        0.012961176,
        0.058694676,
        0.023773966,
        0.026848417,
        0.018468757,
        0.052909246,
        0.044378401,
        0.168078443,
        0.030365287,
        0.035498393,
        0.049149602,
    ];
    let mut k = confirmation(
        Metric::StepTime,
        slowed_previous.clone(),
        slowed_current.clone(),
    );
    k.faster_half = true;
    k.rounds = rounds(&slowed_previous, &slowed_current);
    assert!(k.rounds.iter().all(|&d| d > 2.0), "{:?}", k.rounds);
    assert_eq!(k.classified(true).verdict, ChangeVerdict::Regressed);
    // An improvement every round shows stands; the sides swapped.
    let mut better = confirmation(
        Metric::StepTime,
        slowed_current.clone(),
        slowed_previous.clone(),
    );
    better.faster_half = true;
    better.rounds = rounds(&slowed_current, &slowed_previous);
    assert_eq!(better.classified(true).verdict, ChangeVerdict::Improved);
}

/// Reruns under load, judged on the faster half of each side: the samples of a failed CI run
/// (other tests' jobs and a CPU-bound process beside them) where a planted 3x slowdown read
/// "within noise" on the medians of all steps (the spikes of the load widened both intervals
/// past each other) is regressed on the faster halves; two sides of one speed under the same
/// spikes stay within noise.
#[test]
fn reruns_under_load_are_judged_on_their_faster_halves() {
    let previous = vec![
        1.468, 1.173, 1.265, 1.100, 1.069, 1.278, 1.143, 1.260, 1.307, 1.173, 1.205, 1.192, 13.43,
        4.752, 13.30, 4.676, 7.867, 11.97, 2.848, 4.270, 1.093, 1.125, 1.097, 1.154, 5.769, 1.311,
        1.237, 5.163, 4.470, 3.769, 1.207, 10.45, 4.255, 4.084, 1.232, 7.443,
    ];
    let current = vec![
        4.535, 5.383, 3.986, 3.834, 3.761, 3.789, 3.723, 3.576, 3.709, 3.471, 3.573, 5.232, 27.44,
        18.14, 4.796, 19.03, 11.18, 14.81, 5.930, 4.032, 4.173, 3.829, 23.31, 14.49, 11.01, 24.69,
        5.144, 21.02, 4.990, 27.32, 5.079, 3.742, 7.294, 3.697, 15.91, 17.17,
    ];
    let mut c = confirmation(Metric::StepTime, previous.clone(), current);
    assert_eq!(c.classified(true).verdict, ChangeVerdict::WithinNoise);
    c.faster_half = true;
    let k = c.classified(true);
    assert_eq!(k.verdict, ChangeVerdict::Regressed, "{k:?}");
    assert!(k.change.unwrap().median > 1.5, "{k:?}");
    // The same speed on both sides, under the same spikes (the sides' samples interleaved).
    let (a, b): (Vec<f64>, Vec<f64>) = previous.chunks(2).map(|p| (p[0], p[1])).unzip();
    let mut same = confirmation(Metric::StepTime, a, b);
    same.faster_half = true;
    assert_eq!(same.classified(true).verdict, ChangeVerdict::WithinNoise);
    // Throughput: the faster half is the larger half.
    assert_eq!(faster_half(&[1.0, 5.0, 3.0, 4.0], false), vec![5.0, 4.0]);
    assert_eq!(faster_half(&[1.0, 5.0, 3.0], true), vec![1.0, 3.0]);
}
