use super::*;
use crate::analysis::{JobRecord, JobStatus};
use crate::sections::twin::*;

fn peak_memory_plan() -> TwinJobs {
    let (study, jobs) = crate::test_support::peak_memory_full();
    super::jobs(&study, &jobs).expect("peak_memory is covered")
}

#[test]
fn the_plan_maps_each_configuration_to_its_pytorch_mechanism() {
    let p = peak_memory_plan();
    assert_eq!(
        (p.model.layers, p.model.d_model, p.model.vocab),
        (32, 2048, 3025)
    );
    let get = |n: &str| p.configs.iter().find(|c| c.name == n).unwrap();
    assert_eq!(get("checkpoint_adafactor").checkpoint, Some(1));
    assert_eq!(get("control_adafactor").checkpoint, None);
    let fused = get("fused_adafactor");
    assert!(fused.fused_optimizer && !fused.compile);
    assert!(get("compile_adafactor").compile);
    let budget = get("memory_budget_05_adafactor");
    assert_eq!(budget.activation_memory_budget, Some(0.05));
    assert!(
        budget.compile,
        "the budget is torch.compile's partitioner option"
    );
    assert_eq!(get("bf16_fused_checkpoint_adafactor").precision, "bf16");
    assert_eq!(get("naive_attention").attention, "naive");
    // The AdamW twins of the source's rows run once in PyTorch, with the source's optimizer.
    let twin = p.left_out.iter().find(|(n, _)| n == "checkpoint").unwrap();
    assert!(twin.1.contains("`checkpoint_adafactor`"), "{}", twin.1);
    assert!(p.configs.iter().all(|c| c.name != "control"));
    assert!(p.left_out.iter().any(|(n, _)| n == "balanced"));
    assert!(p.configs.iter().all(|c| c.name != "balanced"));
    // The source's rows train with the source's Adafactor (weight decay 0.01), the AdamW
    // rows with the study's AdamW settings.
    for c in &p.configs {
        let wd = if c.name.ends_with("_adafactor") {
            assert_eq!(c.optimizer, "adafactor", "{}", c.name);
            0.01
        } else {
            assert_eq!(c.optimizer, "adamw", "{}", c.name);
            0.0 // experiments/peak_memory.toml's [train] weight_decay
        };
        assert_eq!((c.lr, c.weight_decay), (Some(p.train.lr), Some(wd)));
    }
    assert_eq!(get("control_adafactor").checkpoint, None);
    // Checkmate plans are memwall's own: no PyTorch counterpart.
    assert!(p.left_out.iter().any(|(n, _)| n == "checkmate_80"));
    assert!(p.configs.iter().all(|c| !c.name.starts_with("checkmate_")));
}

#[test]
fn the_plan_carries_each_configurations_optimizer() {
    let (study, mut jobs) = crate::test_support::peak_memory_full();
    // A configuration of its own (no twin) whose job trains with Adafactor.
    let job = jobs
        .iter_mut()
        .find(|j| j.config == "naive_attention")
        .unwrap();
    job.train.optimizer = OptimizerKind::Adafactor;
    job.train.lr = 2e-4;
    job.train.weight_decay = 0.01;
    let p = super::jobs(&study, &jobs).unwrap();
    let control = p
        .configs
        .iter()
        .find(|c| c.name == "naive_attention")
        .unwrap();
    assert_eq!(
        (control.optimizer.as_str(), control.lr, control.weight_decay),
        ("adafactor", Some(2e-4), Some(0.01))
    );
    assert!(p
        .configs
        .iter()
        .filter(|c| c.name != "naive_attention" && !c.name.ends_with("_adafactor"))
        .all(|c| c.optimizer == "adamw"));
    // The script's field names, and a plan from before them reading as AdamW.
    let json = serde_json::to_value(control).unwrap();
    assert_eq!(json["optimizer"], "adafactor");
    assert_eq!(json["lr"], 2e-4);
    assert_eq!(json["weight_decay"], 0.01);
    let mut old = json.clone();
    for k in ["optimizer", "lr", "weight_decay"] {
        old.as_object_mut().unwrap().remove(k);
    }
    let old: TorchConfig = serde_json::from_value(old).unwrap();
    assert_eq!((old.optimizer.as_str(), old.lr), ("adamw", None));
}

fn row() -> TorchRow {
    let p = peak_memory_plan();
    TorchRow {
        format: ROW_FORMAT.into(),
        study: "peak_memory".into(),
        config: "control".into(),
        status: TorchStatus::Ok,
        reason: None,
        device: "NVIDIA H100 80GB HBM3".into(),
        device_type: None,
        threads: None,
        torch_version: "2.11.0".into(),
        parameters: Some(1),
        max_memory_allocated_bytes: Some(1 << 30),
        max_memory_reserved_bytes: Some(2 << 30),
        max_rss_bytes: None,
        rss_after_import_bytes: None,
        median_step_s: Some(0.7),
        samples_per_s: Some(5.6),
        first_step_s: Some(2.0),
        final_loss: Some(8.0),
        model: p.model,
        train: p.train,
        finished_at: "2026-11-23T00:00:00Z".into(),
        process_order: None,
        wall_s: None,
        memory_budget_pareto: Vec::new(),
    }
}

#[test]
fn rows_are_checked_field_by_field() {
    assert_eq!(check_row(&row(), "peak_memory"), Ok(()));
    let bad = |f: fn(&mut TorchRow)| {
        let mut r = row();
        f(&mut r);
        check_row(&r, "peak_memory").unwrap_err()
    };
    assert!(bad(|r| r.format = "other/1".into()).contains("`format`"));
    let text = serde_json::to_string(&row()).unwrap();
    assert!(text.contains("\"status\":\"ok\""), "{text}");
    let great = text.replace("\"status\":\"ok\"", "\"status\":\"great\"");
    let err = crate::analysis::parse_json::<TorchRow>(&great)
        .unwrap_err()
        .to_string();
    assert!(err.contains("field `status`"), "{err}");
    for (status, text) in [
        (TorchStatus::Ok, "ok"),
        (TorchStatus::OutOfMemory, "out_of_memory"),
        (TorchStatus::Failed, "failed"),
        (TorchStatus::Unsupported, "unsupported"),
    ] {
        assert_eq!(serde_json::to_value(status).unwrap(), text);
        assert_eq!((status.as_str(), status.to_string()), (text, text.into()));
    }
    assert!(bad(|r| r.median_step_s = Some(f64::NAN)).contains("`median_step_s`"));
    assert!(bad(|r| r.samples_per_s = None).contains("samples_per_s"));
    assert!(bad(|r| r.config = "../x".into()).contains("`config`"));
    assert!(check_row(&row(), "mixed_precision")
        .unwrap_err()
        .contains("`study`"));
}

#[test]
fn a_rows_memory_budget_pareto_round_trips_and_is_checked() {
    let mut r = row();
    r.memory_budget_pareto = vec![ParetoGraph {
        graph: "model__0_joint_0".into(),
        input_bytes: Some(1000),
        default_saved_bytes: Some(5000),
        bisection_s: Some(3.0),
        points: vec![
            ParetoPoint {
                memory_ratio: 0.0,
                recompute_flops: 2e9,
                saved_bytes_above_inputs: Some(0),
            },
            ParetoPoint {
                memory_ratio: 0.5,
                recompute_flops: 1e9,
                saved_bytes_above_inputs: Some(2000),
            },
        ],
    }];
    assert_eq!(check_row(&r, "peak_memory"), Ok(()));
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(crate::analysis::parse_json::<TorchRow>(&text).unwrap(), r);
    // A row without it (every row before the field) reads with none and writes none.
    let plain = serde_json::to_string(&row()).unwrap();
    assert!(!plain.contains("memory_budget_pareto"), "{plain}");
    r.memory_budget_pareto[0].points[1].recompute_flops = f64::NAN;
    let err = check_row(&r, "peak_memory").unwrap_err();
    assert!(err.contains("memory_budget_pareto[0].points[1]"), "{err}");
}

#[test]
fn rows_are_stored_by_device_and_configuration_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let path = store_row(tmp.path(), "peak_memory", &row()).unwrap();
    assert!(path.ends_with("peak_memory/pytorch/nvidia-h100-80gb-hbm3.control.json"));
    std::fs::write(path.with_file_name("broken.json"), "{").unwrap();
    let (rows, bad) = load_rows(tmp.path(), "peak_memory");
    assert_eq!(rows, vec![row()]);
    assert_eq!(bad.len(), 1, "{bad:?}");
}

#[test]
fn a_cpu_row_checks_its_own_fields_and_older_rows_read_as_cuda() {
    let mut cpu = row();
    cpu.device_type = Some(TorchDeviceType::Cpu);
    let err = check_row(&cpu, "peak_memory").unwrap_err();
    assert!(err.contains("field `max_memory_allocated_bytes`"), "{err}");
    cpu.max_memory_allocated_bytes = None;
    cpu.max_memory_reserved_bytes = None;
    let err = check_row(&cpu, "peak_memory").unwrap_err();
    assert!(err.contains("field `max_rss_bytes`"), "{err}");
    cpu.max_rss_bytes = Some(900 << 20);
    cpu.threads = Some(0);
    assert!(check_row(&cpu, "peak_memory")
        .unwrap_err()
        .contains("field `threads`"));
    cpu.threads = Some(2);
    assert_eq!(check_row(&cpu, "peak_memory"), Ok(()));
    // A row that did not finish needs no peak.
    cpu.status = TorchStatus::Failed;
    cpu.max_rss_bytes = None;
    assert_eq!(check_row(&cpu, "peak_memory"), Ok(()));
    // Rows written before the CPU fields read as CUDA rows and write back without them.
    let old = serde_json::to_value(row()).unwrap();
    for k in [
        "device_type",
        "threads",
        "max_rss_bytes",
        "rss_after_import_bytes",
    ] {
        assert!(old.get(k).is_none(), "{k} written for a CUDA row");
    }
    let back: TorchRow = serde_json::from_value(old).unwrap();
    assert!(!back.on_cpu());
    let json = serde_json::to_value(&cpu).unwrap();
    assert_eq!(json["device_type"], "cpu");
}

#[test]
fn cpu_rows_with_a_cpu_group_leave_the_gpu_section_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, jobs) = crate::test_support::peak_memory_full();
    let labels = vec![("control".to_string(), "Control".to_string())];
    store_row(tmp.path(), "peak_memory", &row()).unwrap();
    let gpu_only = {
        let (rows, bad) = load_rows(tmp.path(), "peak_memory");
        crate::sections::twin::section(&rows, &bad, &[], &labels)
    }
    .unwrap();
    // A CPU row whose CPU has a memwall record of the same shape: shown in the CPU group.
    let mut job = jobs.iter().find(|j| j.config == "control").unwrap().clone();
    job.backend = crate::device::BackendKind::Flex;
    let mut record = JobRecord::unfinished(&job, JobStatus::Ok, String::new(), Default::default());
    record.env.device_name = "Some CPU".into();
    let mut cpu = row();
    cpu.device = "Some CPU".into();
    cpu.device_type = Some(TorchDeviceType::Cpu);
    cpu.max_memory_allocated_bytes = None;
    cpu.max_memory_reserved_bytes = None;
    cpu.max_rss_bytes = Some(1 << 30);
    store_row(tmp.path(), "peak_memory", &cpu).unwrap();
    let records = vec![record.clone()];
    assert!(has_cpu_group(&cpu, &records, &labels));
    let with_cpu = {
        let (rows, bad) = load_rows(tmp.path(), "peak_memory");
        crate::sections::twin::section(&rows, &bad, &records, &labels)
    }
    .unwrap();
    assert_eq!(with_cpu.tables, gpu_only.tables);
    assert_eq!(
        (with_cpu.ours, with_cpu.notes),
        (gpu_only.ours, gpu_only.notes)
    );
    // Where memwall's record is of another CPU (with a number that would be wrong here),
    // or there is none: the row has no home there, and the section shows it with no
    // memwall number.
    let mut finished = record;
    finished.summary = Some(crate::analysis::Summary {
        parameters: 1,
        median_step_s: 0.1,
        samples_per_s: 80.0,
        tokens_per_s: 80.0,
        peak_allocated_bytes: 1 << 20,
        peak_reserved_bytes: 1 << 20,
        baseline_bytes: 0,
        final_train_loss: 7.0,
        eval_loss: 7.0,
        eval_perplexity: 1000.0,
        mfu: None,
        peak_flops: None,
        wall_s: 1.0,
        steady_bytes: 0,
        estimated_activation_bytes: 0,
        time_to_first_measured_step_s: None,
    });
    let records = vec![finished];
    let shown = cpu_table(std::slice::from_ref(&cpu), &records, &labels, "Some CPU").unwrap();
    assert_eq!(
        shown.rows[0][1], "80.00",
        "the record's own CPU: its number"
    );
    assert_eq!(
        shown.rows[0][3], "14.29x",
        "memwall / PyTorch samples/s (80 / 5.6)"
    );
    // The same row on another CPU: no home in a CPU group; the section shows it with no
    // memwall number (the record's 80.00 would be wrong there) and no ratio.
    cpu.device = "Other CPU".into();
    assert!(!has_cpu_group(&cpu, &records, &labels));
    store_row(tmp.path(), "peak_memory", &cpu).unwrap();
    let s = {
        let (rows, bad) = load_rows(tmp.path(), "peak_memory");
        crate::sections::twin::section(&rows, &bad, &records, &labels)
    }
    .unwrap();
    let captions: Vec<&str> = s.tables.iter().map(|t| t.caption.as_str()).collect();
    assert_eq!(captions.len(), 2, "{captions:?}");
    assert!(
        captions.iter().all(|c| !c.starts_with("Some CPU")),
        "{captions:?}"
    );
    let t = s
        .tables
        .iter()
        .find(|t| t.caption.starts_with("Other CPU"))
        .unwrap();
    assert_eq!((t.rows[0][1].as_str(), t.rows[0][3].as_str()), ("–", "–"));
    assert!(
        t.notes.iter().any(|n| n.column == 1),
        "why memwall's cell is empty"
    );
    assert!(s.notes.iter().any(|n| n.contains("ru_maxrss")));
    assert!(
        !t.columns.iter().any(|c| c.contains("reserved")),
        "{:?}",
        t.columns
    );
    // Without memwall's records both CPU rows are shown here.
    let s = {
        let (rows, bad) = load_rows(tmp.path(), "peak_memory");
        crate::sections::twin::section(&rows, &bad, &[], &labels)
    }
    .unwrap();
    assert_eq!(s.tables.len(), 3);
}
