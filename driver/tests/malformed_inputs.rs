//! Malformed data files, absurd sizes and damaged record stores, as users produce them: each
//! error names the file and the field (or the fix), and no input aborts a process.

mod common;

use memwall_core::record::{read_record, record_dir, JobStatus, UNREADABLE_PREFIX};
use memwall_core::spec::DataConfig;
use memwall_driver as driver;
use memwall_driver::data::load_stories;
use std::path::{Path, PathBuf};

/// The error of preparing the corpus `data` of a smoke study (tokenizing it).
fn data_error(dir: &Path, data: &Path, max_stories: Option<usize>) -> String {
    let cfg = DataConfig {
        path: data.to_path_buf(),
        eval_fraction: 0.1,
        max_stories,
    };
    match memwall_driver::data::prepare(&cfg, 300, &dir.join("cache")) {
        Ok(_) => panic!("{} was accepted", data.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn malformed_corpora_name_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let stories = "Once upon a time there was a cat.\n<|endoftext|>\nThe dog ran home.\n";
    let cases: Vec<(&str, PathBuf, Option<usize>, &str)> = vec![
        ("an empty file", file("empty.txt", b""), None, "empty"),
        (
            "stories without separators",
            file(
                "plain.txt",
                b"Once upon a time.\n\nThe end.\n\nAnother story.\n",
            ),
            None,
            "<|endoftext|>",
        ),
        (
            "only separators",
            file("seps.txt", b"<|endoftext|>\n\n<|endoftext|>\n"),
            None,
            "no story",
        ),
        (
            "a Latin-1 file",
            file("latin1.txt", b"caf\xe9 <|endoftext|> na\xefve"),
            None,
            "UTF-8",
        ),
        ("a folder", d.to_path_buf(), None, "data.path"),
        (
            "one story",
            file("one.txt", b"A single story.\n<|endoftext|>\n"),
            None,
            "at least",
        ),
        (
            "max_stories = 1",
            file("two.txt", stories.as_bytes()),
            Some(1),
            "data.max_stories",
        ),
        (
            "max_stories = 0",
            file("two0.txt", stories.as_bytes()),
            Some(0),
            "data.max_stories",
        ),
        (
            "text named .parquet",
            file("stories.parquet", stories.as_bytes()),
            None,
            "Parquet",
        ),
        (
            "a misspelled path",
            d.join("TinyStories-vaild.txt"),
            None,
            "data.path",
        ),
    ];
    let mut failures = Vec::new();
    for (what, path, max, needle) in &cases {
        let msg = data_error(d, path, *max);
        if !(msg.contains(&path.display().to_string()) && msg.contains(needle)) {
            failures.push(format!("{what}: expected the path and {needle:?}: {msg}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // load_stories alone refuses max_stories = 0 the same way
    let msg = load_stories(&cases[6].1, Some(0)).unwrap_err().to_string();
    assert!(msg.contains("data.max_stories"), "{msg}");
}

#[test]
fn a_parquet_file_without_a_text_column_names_the_column() {
    use polars::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("stories.parquet");
    let mut df = df!("story" => ["Once upon a time.", "The end."]).unwrap();
    ParquetWriter::new(std::fs::File::create(&p).unwrap())
        .finish(&mut df)
        .unwrap();
    let msg = data_error(dir.path(), &p, None);
    assert!(
        msg.contains("stories.parquet") && msg.contains("`text`"),
        "{msg}"
    );
}

/// Absurd sizes are refused before the corpus is tokenized or any job starts (no allocation, no
/// abort), naming the model field, the estimate and the largest value that fits.
#[test]
fn absurd_sizes_are_refused_before_any_allocation() {
    let cases = [
        (
            "vocab",
            common::SMALL_MODEL.replace("vocab = 300", "vocab = 4_000_000_000"),
        ),
        (
            "layers",
            common::SMALL_MODEL.replace("layers = 2", "layers = 1_000_000_000_000"),
        ),
        (
            "d_model",
            common::SMALL_MODEL.replace("d_model = 32", "d_model = 1_099_511_627_776"),
        ),
        (
            "batch",
            common::SMALL_MODEL.replace("batch = 2", "batch = 1_000_000_000"),
        ),
    ];
    for (field, model) in cases {
        let dir = tempfile::tempdir().unwrap();
        let exp = common::bad_input_study(
            dir.path(),
            &common::excerpt(),
            &model,
            "[[configs]]\nname = \"a\"\n[[configs]]\nname = \"b\"\ncheckpoint = 1\n",
        );
        let paths = common::temp_paths(dir.path());
        let msg = driver::plan_jobs(&exp, &paths, &common::smoke_options())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("bad_input.toml")
                && msg.contains(&format!("`profiles.smoke.model.{field}`"))
                && msg.contains("iB"),
            "{field}: {msg}"
        );
        assert!(
            !paths.cache.exists(),
            "{field}: the corpus was tokenized before the refusal"
        );
    }
}

#[test]
fn a_sequence_longer_than_the_corpus_names_seq_len() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::bad_input_study(
        dir.path(),
        &common::excerpt(),
        &common::SMALL_MODEL.replace("seq_len = 32", "seq_len = 100_000"),
        "[[configs]]\nname = \"a\"\n",
    );
    let msg = driver::plan_jobs(
        &exp,
        &common::temp_paths(dir.path()),
        &common::smoke_options(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("`profiles.smoke.model.seq_len`") && msg.contains("split"),
        "{msg}"
    );
}

/// A job whose configuration cannot fit (while another of the study can) is an `out_of_memory`
/// record refused before allocation, naming the field and the estimate.
#[test]
fn a_job_too_large_for_its_device_is_an_out_of_memory_record() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::bad_input_study(
        dir.path(),
        &common::excerpt(),
        common::SMALL_MODEL,
        "[[configs]]\nname = \"a\"\n",
    );
    let (_, _, jobs) = driver::plan_jobs(
        &exp,
        &common::temp_paths(dir.path()),
        &common::smoke_options(),
    )
    .unwrap();
    let mut job = jobs[0].clone();
    job.model.layers = 1_000_000_000_000;
    let env = memwall_runner::train::job_environment(&job);
    let rec = memwall_runner::device::too_large(&job, &env).expect("refused");
    assert_eq!(rec.status, JobStatus::OutOfMemory);
    let reason = rec.reason.unwrap();
    assert!(
        reason.contains("`layers`") && reason.contains("iB"),
        "{reason}"
    );
    assert!(rec.out_of_memory.unwrap().requested_bytes.unwrap() > 1 << 40);
    assert!(memwall_runner::device::too_large(&jobs[0], &env).is_none());
}

/// A damaged record in the store is moved aside with its path named, its job runs again, and
/// the study goes on.
#[test]
fn an_unreadable_record_is_moved_aside_and_its_job_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::bad_input_study(
        dir.path(),
        &common::excerpt(),
        common::SMALL_MODEL,
        "[[configs]]\nname = \"a\"\n",
    );
    let paths = common::temp_paths(dir.path());
    let mut opts = common::smoke_options();
    // a runner that dies without a record: the driver writes the record itself
    opts.runner = (
        PathBuf::from("/bin/sh"),
        vec!["-c".into(), "exit 3".into(), "sh".into()],
    );
    let (_, _, jobs) = driver::plan_jobs(&exp, &paths, &opts).unwrap();
    let job_dir = record_dir(&paths.runs, "bad_input", &jobs[0].key());
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::write(job_dir.join("record.json"), "{\"key\": \"").unwrap();
    let out = driver::sweep(&exp, &paths, &opts).unwrap();
    assert_eq!(out.ran, 1);
    let rec = read_record(&job_dir).unwrap().expect("a new record");
    assert_eq!(rec.status, JobStatus::Failed);
    let aside: Vec<_> = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(UNREADABLE_PREFIX)
        })
        .collect();
    assert_eq!(aside.len(), 1, "the damaged record is kept aside");
    // the report renders the failed job as a row
    let r = driver::report(&exp, &paths).unwrap();
    let md = std::fs::read_to_string(r.markdown).unwrap();
    assert!(md.contains("failed"), "{md}");
}
