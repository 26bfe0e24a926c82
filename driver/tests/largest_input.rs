//! The largest-input search end to end at the smoke size: real training jobs under the CPU's
//! memory limit, out-of-memory recorded as data, the boundary one step wide, and a search that
//! resumes from its records.

mod common;

use common::{excerpt, root, smoke_options, temp_paths};
use memwall_core::record::{JobRecord, JobStatus};
use memwall_core::spec::{Profile, Study};
use memwall_driver as driver;
use memwall_report::analysis::StudyRecords;
use memwall_studies::largest_input::{self, Dim};

#[test]
fn probes_over_the_limit_are_out_of_memory_and_the_search_ends_at_the_boundary_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = temp_paths(dir.path());
    let exp = root().join("experiments/largest_input.toml");
    let mut opts = smoke_options();
    opts.data = Some(excerpt());
    // Every strategy: the smoke search measures a fit of each (issue 56).
    let first = driver::sweep(&exp, &paths, &opts).unwrap();
    assert!(first.ran > 0, "no probe ran");
    assert!(
        first.unfinished.is_empty(),
        "probes failed otherwise than out of memory: {:?}",
        first.unfinished
    );

    let study = Study::load(&exp, Profile::Smoke, Some(&excerpt())).unwrap();
    let params = largest_input::params(&study)
        .unwrap()
        .expect("the smoke profile searches");
    let records = StudyRecords::load(&paths.runs, "largest_input").unwrap();
    assert!(records.unreadable.is_empty(), "{:?}", records.unreadable);

    // A probe over the limit is a record: out of memory, with the limit and the refused block.
    let oom: Vec<&JobRecord> = records
        .records
        .iter()
        .filter(|r| r.status == JobStatus::OutOfMemory)
        .collect();
    assert!(
        !oom.is_empty(),
        "no probe ran out of memory under the limit"
    );
    for r in &oom {
        assert_eq!(r.spec.memory_limit_bytes, Some(params.limit_bytes));
        let reason = r.reason.as_deref().unwrap_or_default();
        assert!(
            reason.contains(&format!("limit of {} bytes", params.limit_bytes)),
            "{reason}"
        );
        // The refused block and the bytes live when it was refused: together more than the
        // limit (a lower bound of the peak the job needed).
        let o = r.out_of_memory.as_ref().expect("an out-of-memory record");
        assert!(o.requested_bytes.is_some_and(|b| b > 0), "{o:?}");
        let needed = o.needed_at_least_bytes().expect("live bytes recorded");
        assert!(needed > params.limit_bytes, "{o:?}");
    }

    // Every searched strategy ends one step apart around its boundary; checkpointing fits a
    // larger batch than the control.
    let rows = largest_input::summarize(&records.records, &study, &params);
    let searched: Vec<_> = rows.iter().filter(|r| r.probes > 0).collect();
    assert_eq!(searched.len(), study.configs.len(), "{searched:?}");
    assert_eq!(searched.len(), 6);
    for r in &searched {
        assert_eq!(r.dim, Dim::Batch);
        assert_one_step_or_at_the_limit(r, params.batch_step, params.limit_bytes);
    }
    // A peak repeats: every value run more than once (the boundary's reruns near the limit)
    // peaked within the exact slack of a peak (64 KiB) in every run that fit. (Before the
    // matmul scratch was allocated up front, the same probe moved by 1 MiB slabs.)
    let mut peaks: std::collections::BTreeMap<(String, usize), Vec<u64>> = Default::default();
    for r in records.records.iter().filter(|r| r.status == JobStatus::Ok) {
        peaks
            .entry((r.spec.config.clone(), r.spec.model.batch))
            .or_default()
            .push(r.summary.unwrap().peak_allocated_bytes);
    }
    let repeated: Vec<_> = peaks.iter().filter(|(_, p)| p.len() > 1).collect();
    assert!(!repeated.is_empty(), "no boundary value was rerun");
    for (value, p) in repeated {
        let spread = p.iter().max().unwrap() - p.iter().min().unwrap();
        assert!(
            spread as f64 <= memwall_core::measure::EXACT_SLACK_BYTES,
            "{value:?}: peaks {p:?} spread {spread} bytes"
        );
    }
    let none = searched.iter().find(|r| r.config.name == "none").unwrap();
    let ck = searched
        .iter()
        .find(|r| r.config.name == "checkpoint_every_block")
        .unwrap();
    assert!(
        ck.largest.unwrap().0 > none.largest.unwrap().0,
        "checkpointing every block fits no larger batch than no recomputation"
    );
    assert!(largest_input::ratio(&rows, ck).unwrap() > 1.0);
    // The memory above the steady state grows in proportion to the batch: the ratio at any
    // limit (per-sample bytes, control over checkpointing) predicts the searched boundaries.
    // With x = (limit - steady) / bytes per sample, each largest batch n has n <= x < n + 1, so
    // the ratio x_ck / x_none lies in (n_ck / (n_none + 1), (n_ck + 1) / n_none).
    let any = largest_input::ratio_at_any_limit(&rows, ck).expect("a fixed plan has one");
    let (n_none, n_ck) = (none.largest.unwrap().0 as f64, ck.largest.unwrap().0 as f64);
    assert!(
        any > 1.0 && any > n_ck / (n_none + 1.0) * 0.97 && any < (n_ck + 1.0) / n_none * 1.03,
        "ratio at any limit {any:.3} against the largest batches {n_none} and {n_ck}"
    );
    for planned in searched
        .iter()
        .filter(|r| r.config.checkmate.is_some() || r.config.budget.is_some())
    {
        assert_eq!(
            largest_input::ratio_at_any_limit(&rows, planned),
            None,
            "{}",
            planned.config.name
        );
    }

    // A killed search: the record of its last probe is gone (the process died before it was
    // written). Run again, only that probe runs; every other record is read back.
    let last = records
        .records
        .iter()
        .max_by(|a, b| a.finished_at.cmp(&b.finished_at))
        .unwrap();
    let last_dir = paths.runs.join("largest_input").join(&last.key);
    std::fs::remove_file(last_dir.join("record.json")).unwrap();
    let second = driver::sweep(&exp, &paths, &opts).unwrap();
    // Every other probe is read back; the lost one runs again (and, should it now end
    // otherwise near the limit, the boundary's reruns that follow from it).
    assert_eq!(
        second.skipped,
        first.ran + first.skipped - 1,
        "the resumed search did not read back its finished probes"
    );
    assert!(
        (1..=1 + 2 * params.boundary_runs).contains(&second.ran),
        "the resumed search ran {} probes",
        second.ran
    );
    let again = StudyRecords::load(&paths.runs, "largest_input").unwrap();
    let rows_again = largest_input::summarize(&again.records, &study, &params);
    for r in rows_again.iter().filter(|r| r.probes > 0) {
        assert_one_step_or_at_the_limit(r, params.batch_step, params.limit_bytes);
    }

    // The report shows the table with the limit in bytes and answers the claims.
    driver::report(&exp, &paths).unwrap();
    let md = std::fs::read_to_string(paths.reports.join("largest_input/report.md")).unwrap();
    assert!(
        md.contains(&format!("{} bytes", params.limit_bytes)),
        "no limit in bytes in the report"
    );
    assert!(md.contains("Checkpoint every block"));
    assert!(
        md.contains("ratio at any limit, derived"),
        "no derived column"
    );
}

/// The search of `r` ended at its boundary: the largest value that fits in every run is
/// under the limit, and the first value out of memory in every run is one step above it, or
/// the values between them are at the limit (fit in some runs only), each named with its
/// runs and peak.
fn assert_one_step_or_at_the_limit(r: &largest_input::Row, step: usize, limit: u64) {
    let (largest, rec) = r.largest.expect("a batch fits");
    assert_eq!(rec.status, JobStatus::Ok);
    assert!(rec.summary.unwrap().peak_allocated_bytes <= limit);
    let oom = r.first_oom.expect("a batch runs out of memory");
    for v in (largest + step..oom).step_by(step) {
        let at = r.at_limit.iter().find(|a| a.value == v);
        assert!(
            at.is_some_and(|a| a.fits > 0 && a.fits < a.runs),
            "{}: {v} lies between the largest fit {largest} and the first out of memory \
             {oom} and is not at the limit: {:?}",
            r.config.name,
            r.at_limit
        );
    }
    for a in &r.at_limit {
        assert!(a.value >= largest && a.value < oom, "{a:?}");
        assert_eq!(a.limit_bytes, limit);
    }
}

/// The glance `memwall reproduce` prints for the search study (`driver::glance`) is the one its
/// report shows: from the committed records, the 5.1x claim is answered by the search (our
/// ratio shown), and, measured at the cpu profile's 8-layer stand-in while the claim is about
/// the source's size (`profile = "full"`), not comparable, the difference named.
#[test]
fn the_printed_glance_of_the_search_is_its_reports() {
    let root = root();
    let rows = memwall_driver::glance(
        &root.join("experiments/largest_input.toml"),
        &root.join("runs"),
    )
    .unwrap();
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(
            row.verdict,
            memwall_core::spec::claims::Verdict::NotComparable,
            "{row:?}"
        );
        assert!(row.ours.ends_with('x'), "{}", row.ours);
        let why = row.why.as_deref().unwrap_or_default();
        assert!(
            why.contains("measured at the cpu profile (8 layers, ")
                && why.contains("not at the full profile"),
            "{why}"
        );
    }
    let report = std::fs::read_to_string(root.join("reports/largest_input/report.md")).unwrap();
    for row in &rows {
        // Ours with its provenance (the ratio of two searches of real training runs).
        let kind = row
            .provenance
            .as_ref()
            .map(|p| p.kind())
            .unwrap_or_default();
        assert_eq!(kind, "derived", "{row:?}");
        let cells = format!("| {} ({kind}) | {} (", row.ours, row.verdict.as_str());
        assert!(report.contains(&cells), "the report has no `{cells}`");
    }
}
