use super::*;

fn ids(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_scratch_record_store_renders_beside_itself() {
    assert_eq!(reports_root(Path::new("runs"), None), Path::new("reports"));
    assert_eq!(
        reports_root(Path::new("/tmp/scratch"), None),
        Path::new("/tmp/scratch/reports")
    );
    assert_eq!(
        reports_root(Path::new("/tmp/scratch"), Some("out".into())),
        Path::new("out")
    );
}

#[test]
fn gpu_slots_show_each_job_its_own_gpu() {
    let slots = slots_for(&ids(&["0", "1"]), true, None).unwrap();
    assert_eq!(slots[1].name, "cuda:1");
    assert!(slots[1]
        .env
        .contains(&("CUDA_VISIBLE_DEVICES".into(), "1".into())));
    // Ordinals count the GPUs this process sees.
    let slots = slots_for(&ids(&["0", "1"]), true, Some("4,6")).unwrap();
    assert!(slots[1]
        .env
        .contains(&("CUDA_VISIBLE_DEVICES".into(), "6".into())));
    let e = slots_for(&ids(&["2"]), true, Some("4,6")).unwrap_err();
    assert!(e.contains("CUDA_VISIBLE_DEVICES=4,6"), "{e}");
}

#[test]
fn bad_device_ids_are_refused() {
    assert!(slots_for(&ids(&["0", "x"]), true, None)
        .unwrap_err()
        .contains("not a GPU ordinal"));
    assert!(slots_for(&ids(&["a", "a"]), false, None)
        .unwrap_err()
        .contains("given twice"));
    let cpu = slots_for(&ids(&["a", "b"]), false, None).unwrap();
    assert_eq!(cpu[1].env, vec![("MEMWALL_DEVICE".into(), "cpu:b".into())]);
}
