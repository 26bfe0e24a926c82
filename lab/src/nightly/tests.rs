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
            })
            .collect(),
        errors: vec![],
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
