//! The multi-device sweep with fake devices and a fake job runner that logs which device ran
//! which job and when.

mod common;

use memwall_driver as driver;
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn jobs_queue_across_devices_one_at_a_time_per_device() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::interval_study(dir.path(), 7);
    let log = dir.path().join("device.log");
    // The fake runner: `sh -c SCRIPT fake --job FILE --out DIR`; logs its device, the job
    // folder and start and end times (ns), holding the device for 0.3 s.
    let script = format!(
        "echo \"start $MEMWALL_DEVICE $(date +%s%N) $4\" >> {log}; sleep 0.3; \
         echo \"end $MEMWALL_DEVICE $(date +%s%N) $4\" >> {log}",
        log = log.display()
    );
    let mut opts = common::smoke_options();
    opts.runner = ("/bin/sh".into(), vec!["-c".into(), script, "fake".into()]);
    opts.devices = vec!["d0".into(), "d1".into(), "d2".into()];
    let paths = common::temp_paths(dir.path());
    let out = driver::sweep(&exp, &paths, &opts).unwrap();
    assert_eq!(out.ran, 7);
    // The fake runner writes no record: every job is recorded as failed, none lost.
    assert_eq!(out.unfinished.len(), 7);

    let text = std::fs::read_to_string(&log).unwrap();
    // device -> [(start, end, job dir)]
    let mut spans: BTreeMap<String, Vec<(u128, u128, String)>> = BTreeMap::new();
    let mut starts: BTreeMap<String, u128> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (what, device, t, job) = (f[0], f[1], f[2].parse::<u128>().unwrap(), f[3]);
        match what {
            "start" => {
                starts.insert(job.to_string(), t);
            }
            _ => {
                spans
                    .entry(device.to_string())
                    .or_default()
                    .push((starts[job], t, job.to_string()))
            }
        }
    }
    let jobs: BTreeSet<&String> = spans.values().flatten().map(|s| &s.2).collect();
    assert_eq!(jobs.len(), 7, "every job ran once: {text}");
    assert!(spans.keys().all(|d| d.starts_with("cpu:d")), "{text}");
    for (device, s) in &mut spans {
        s.sort();
        for w in s.windows(2) {
            assert!(w[0].1 <= w[1].0, "{device} ran two jobs at once: {text}");
        }
    }
    // The devices worked at the same time: some job on one device overlapped one on another.
    let all: Vec<(&String, &(u128, u128, String))> = spans
        .iter()
        .flat_map(|(d, s)| s.iter().map(move |x| (d, x)))
        .collect();
    let overlap = all
        .iter()
        .any(|(d, a)| all.iter().any(|(e, b)| d != e && a.0 < b.1 && b.0 < a.1));
    assert!(spans.len() >= 2 && overlap, "no parallelism: {text}");
}
