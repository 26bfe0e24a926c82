//! The memory timeline of a training step end to end: real jobs of the peak-memory study at
//! the smoke size record the allocator's trace of their last step with its phases, the curve
//! reaches the record's exact peak, and what is live at the peak adds up to it, with the
//! parameters and the optimizer state derived as the record measures them.

mod common;

use common::{excerpt, root, smoke_options, temp_paths};
use memwall_core::record::JobStatus;
use memwall_core::spec::OptimizerKind;
use memwall_core::timeline::Phase;
use memwall_driver as driver;
use memwall_report::analysis::StudyRecords;

#[test]
fn each_step_timeline_reaches_the_exact_peak_and_its_parts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let paths = temp_paths(dir.path());
    let exp = root().join("experiments/peak_memory.toml");
    let mut opts = smoke_options();
    opts.data = Some(excerpt());
    opts.only = vec![
        "control".into(),
        "checkpoint".into(),
        "fused_checkpoint".into(),
        "control_adafactor".into(),
    ];
    let run = driver::sweep(&exp, &paths, &opts).unwrap();
    assert!(run.unfinished.is_empty(), "{:?}", run.unfinished);
    let records = StudyRecords::load(&paths.runs, "peak_memory").unwrap();
    assert_eq!(records.records.len(), 4);
    for r in &records.records {
        assert_eq!(r.status, JobStatus::Ok, "{}", r.spec.config);
        let name = &r.spec.config;
        let t = r
            .timeline
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no timeline"));
        let s = r.summary.unwrap();

        // The last (timed) step is traced; its peak is the step's exact peak, on the curve.
        assert_eq!(t.step, r.steps.len() - 1, "{name}");
        assert!(t.exact);
        assert_eq!(t.peak_bytes, r.steps[t.step].peak_allocated_bytes, "{name}");
        assert!(t.peak_bytes <= s.peak_allocated_bytes, "{name}");
        let top = t.points.iter().map(|p| p.1).max().unwrap();
        assert_eq!(top, t.peak_bytes, "{name}: the curve misses the peak");
        assert!(
            t.points.windows(2).all(|w| w[0].0 <= w[1].0),
            "{name}: time order"
        );
        assert_eq!(t.start_bytes, t.points[0].1, "{name}");

        // Phases follow one another; their own high-water marks reach the step's peak.
        assert_eq!(t.phases[0].start_bytes, t.start_bytes, "{name}");
        for w in t.phases.windows(2) {
            assert_eq!(w[0].end_s, w[1].start_s, "{name}");
            assert_eq!(w[0].end_bytes, w[1].start_bytes, "{name}");
        }
        for p in &t.phases {
            assert!(
                p.peak_bytes >= p.start_bytes.max(p.end_bytes),
                "{name}: {p:?}"
            );
        }
        let highest = t.phases.iter().map(|p| p.peak_bytes).max().unwrap();
        assert_eq!(highest, t.peak_bytes, "{name}");
        let blocks = r.spec.model.layers;
        let forwards = t
            .phases
            .iter()
            .filter(|p| matches!(p.phase, Phase::Forward { .. }))
            .count();
        assert_eq!(forwards, blocks, "{name}: one forward phase per block");
        assert_eq!(
            t.phases.last().unwrap().phase,
            Phase::OptimizerStep,
            "{name}"
        );
        if r.plan.is_some() {
            let backwards = t
                .phases
                .iter()
                .filter(|p| matches!(p.phase, Phase::Backward { .. }))
                .count();
            assert_eq!(backwards, blocks, "{name}: one backward phase per segment");
        }

        // What is live at the peak adds up to it; the derived parameters and optimizer state
        // are what the record counts and measures.
        let b = t
            .at_peak()
            .unwrap_or_else(|| panic!("{name}: no breakdown"));
        assert_eq!(b.total(), t.peak_bytes as i64, "{name}: {b:?}");
        let part = |n: &str| b.parts.iter().find(|p| p.name == n).unwrap().bytes;
        assert_eq!(
            part("parameters"),
            4 * s.parameters as i64,
            "{name}: f32 parameters"
        );
        // The optimizer state is allocated at the first step: the live bytes before the last
        // step minus before the first measure it.
        let measured_state = s.steady_bytes as i64 - s.baseline_bytes as i64;
        let derived_state = part("optimizer state");
        match r.spec.train.optimizer {
            OptimizerKind::Adamw => assert_eq!(derived_state, 2 * part("parameters"), "{name}"),
            OptimizerKind::Adafactor => assert!(derived_state < part("parameters") / 4, "{name}"),
        }
        // The first step also keeps a few runtime buffers (about 40 KB at any size), never
        // the size of a parameter set: a wrong derivation (one moment, another dtype) is off
        // by at least half the parameters' bytes.
        let extra = measured_state - derived_state;
        assert!(
            (0..64 << 10).contains(&extra),
            "{name}: optimizer state derived {derived_state} B, the first step kept \
             {measured_state} B"
        );
        assert!(part("batch, data and runtime") >= 0, "{name}: {b:?}");
        // Peaks at the head's backward (or the one-pass backward's start): the saved block
        // activations are derived from the profile, and what the earlier phases left beyond
        // them is the head's graph: at least the f32 logits (batch x seq x vocab x 4 bytes) and
        // small tensors beside them (at most half as much again), not a block more or less (a
        // wrong activation count moves it by a block's bytes, more than the logits here).
        if matches!(
            t.phases[b.phase].phase,
            Phase::HeadBackward { .. } | Phase::BackwardAll
        ) {
            let m = &r.spec.model;
            let logits = (m.batch * m.seq_len * m.vocab * 4) as i64;
            let rest = b
                .parts
                .iter()
                .find(|p| p.name.starts_with("left by the earlier phases"))
                .unwrap()
                .bytes;
            let block = r.block_costs[0].activation_bytes as i64;

            assert!(
                (logits..=logits * 3 / 2).contains(&rest),
                "{name}: the earlier phases left {rest} B beside the derived activations; the \
                 logits are {logits} B, a block's activations {block} B"
            );
        }
    }
}
