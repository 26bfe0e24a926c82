//! The data search path of a clone without `../shared`, as `memwall` finds, checks and fetches
//! its data sets (the loader, split and tokenizer themselves: `driver/tests/data.rs`).

mod common;

use memwall_driver::data::load_stories;
use std::path::Path;

#[test]
fn reads_hugging_face_parquet_files() {
    use polars::prelude::*;
    let stories = load_stories(&common::excerpt(), Some(20)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("validation-00000-of-00001.parquet");
    let mut df = df!("text" => stories.clone()).unwrap();
    ParquetWriter::new(std::fs::File::create(&path).unwrap())
        .finish(&mut df)
        .unwrap();
    assert_eq!(load_stories(&path, None).unwrap(), stories);
    // a Parquet file without the `text` column is a clear error
    let bad = dir.path().join("bad.parquet");
    let mut df = df!("story" => ["x"]).unwrap();
    ParquetWriter::new(std::fs::File::create(&bad).unwrap())
        .finish(&mut df)
        .unwrap();
    let msg = load_stories(&bad, None).unwrap_err().to_string();
    assert!(
        msg.contains("bad.parquet") && msg.contains("`text`"),
        "{msg}"
    );
}

/// `memwall` in `repo` with the data search path cut off from this machine's folders: the user
/// cache and the shared data in empty folders of `sandbox`, `$MEMWALL_DATA_DIR` as `data_dir`.
fn isolated(
    repo: &Path,
    sandbox: &Path,
    data_dir: Option<&Path>,
    args: &[&str],
) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_memwall"));
    c.current_dir(repo)
        .args(args)
        .env_remove("MEMWALL_RUNS")
        .env_remove("MEMWALL_DATA")
        .env_remove("MEMWALL_DATA_DIR")
        .env("XDG_CACHE_HOME", sandbox.join("cache"))
        .env("MEMWALL_SHARED_DATA", sandbox.join("no-shared-data"));
    if let Some(d) = data_dir {
        c.env("MEMWALL_DATA_DIR", d);
    }
    c.output().expect("memwall starts")
}

/// A clone without `../shared`: a study whose data is on no folder of the search path fails
/// with one line naming every place; once the data sits in the repository's `data/` (or in
/// `$MEMWALL_DATA_DIR`) the same command runs, from the experiment files as committed.
#[test]
fn a_clone_without_shared_data_finds_its_data_on_the_search_path() {
    let tmp = tempfile::tempdir().unwrap();
    let sandbox = tmp.path();
    let repo = sandbox.join("repo");
    std::fs::create_dir_all(repo.join("experiments")).unwrap();
    for f in ["checkmate.toml", "peak_memory.toml"] {
        std::fs::copy(
            common::root().join("experiments").join(f),
            repo.join("experiments").join(f),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink(common::root().join("templates"), repo.join("templates")).unwrap();
    let runs = sandbox.join("runs");
    let checkmate = [
        "run",
        "experiments/checkmate.toml",
        "--profile",
        "smoke",
        "--runs",
        runs.to_str().unwrap(),
    ];
    // 1. Nowhere: one line naming each place, nothing recorded.
    let o = isolated(&repo, sandbox, None, &checkmate);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{err}"));
    for place in [
        "remat-graphs is not under",
        "data (the repository's data/)",
        "cache/memwall (the user cache)",
        "no-shared-data (the shared data beside the repository)",
        "MEMWALL_DATA_DIR",
    ] {
        assert!(line.contains(place), "{place} missing: {line}");
    }
    assert_eq!(
        line.matches("experiments/checkmate.toml").count(),
        1,
        "the file is named once: {line}"
    );
    // 2. The graphs in the repository's data/: the study runs.
    let shared = common::shared_data();
    std::fs::create_dir_all(repo.join("data")).unwrap();
    std::os::unix::fs::symlink(shared.join("remat-graphs"), repo.join("data/remat-graphs"))
        .unwrap();
    let o = isolated(&repo, sandbox, None, &checkmate);
    assert!(o.status.success(), "{}", common::text(&o));
    // 3. The corpus through $MEMWALL_DATA_DIR: a training job of the committed experiment file.
    let control = [
        "run",
        "experiments/peak_memory.toml",
        "--profile",
        "smoke",
        "--only",
        "control",
        "--runs",
        runs.to_str().unwrap(),
    ];
    let o = isolated(&repo, sandbox, None, &control);
    assert!(!o.status.success(), "ran without its corpus");
    assert!(
        common::text(&o).contains("tinystories/TinyStories-valid-excerpt.txt not found"),
        "{}",
        common::text(&o)
    );
    let o = isolated(&repo, sandbox, Some(&shared), &control);
    assert!(o.status.success(), "{}", common::text(&o));
}

/// `memwall data fetch` from a mirror refuses a file whose checksum is not the manifest's,
/// naming both sums and keeping nothing; fetches it when the mirror serves it right; refuses a
/// cached copy that was damaged since, naming both sums, and fetches it again; `memwall data
/// list` says where each data set is and whether its checksum holds.
#[test]
fn a_wrong_file_is_refused_with_both_checksums_and_fetched_again() {
    let tmp = tempfile::tempdir().unwrap();
    let sandbox = tmp.path();
    let repo = sandbox.join("repo");
    common::clone_alone(&repo, &["experiments"], &["datasets.toml"]);
    let server = common::http::Server::start(&common::shared_data());
    let graph = "remat-graphs/VGG16_256_224_224_3_test_nx.json";
    let manifest = memwall_core::datasets::Manifest::load(&repo)
        .unwrap()
        .unwrap();
    let d = manifest.datasets.iter().find(|d| d.path == graph).unwrap();
    let mut served = std::fs::read(common::shared_data().join(graph)).unwrap();
    served[0] ^= 0x01;
    let wrong = sandbox.join("wrong.json");
    std::fs::write(&wrong, &served).unwrap();
    let wrong_sum = memwall_core::datasets::sha256_file(&wrong).unwrap();
    let fetch =
        || common::memwall_alone(&repo, sandbox, Some(&server.url), &["data", "fetch", graph]);
    let cached = sandbox.join("cache/memwall").join(graph);

    // 1. The mirror serves a damaged file: refused, both sums named, nothing kept.
    server.faults.lock().unwrap().corrupt.insert(graph.into());
    let o = fetch();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains(&wrong_sum) && err.contains(&d.sha256) && err.contains("refused"),
        "{err}"
    );
    assert!(!cached.exists() && !cached.with_extension("json.part").exists());

    // 2. Served right: fetched, intact.
    server.faults.lock().unwrap().corrupt.clear();
    let o = fetch();
    assert!(o.status.success(), "{}", common::text(&o));
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(common::shared_data().join(graph)).unwrap()
    );

    // 3. The cached copy damaged since: refused with both sums and fetched again.
    std::fs::write(&cached, &served).unwrap();
    let o = fetch();
    assert!(o.status.success(), "{}", common::text(&o));
    let out = common::text(&o);
    assert!(
        out.contains("refused") && out.contains(&wrong_sum) && out.contains(&d.sha256),
        "{out}"
    );
    assert_eq!(
        d.check(&cached).unwrap(),
        memwall_core::datasets::Integrity::Intact
    );
    let asked = server.requests().iter().filter(|r| r.path == graph).count();
    assert_eq!(asked, 3, "{:?}", server.requests());

    // 4. The listing: this one in the cache with its checksum holding, the others missing
    // with where they would come from.
    let o = common::memwall_alone(&repo, sandbox, Some(&server.url), &["data", "list"]);
    assert!(o.status.success(), "{}", common::text(&o));
    let list = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = |p: &str| {
        list.lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("{p}: {list}"))
            .to_string()
    };
    assert!(
        line(graph).contains("(the user cache), checksum holds"),
        "{list}"
    );
    let other = line("tinystories/TinyStories-valid-excerpt.txt");
    assert!(
        other.contains("missing") && other.contains(&server.url),
        "{other}"
    );
}

/// With the mirror down, `memwall reproduce` in a clone without its data names each missing
/// data set in one line with the command that gets it, exits non-zero and writes no record
/// store.
#[test]
fn with_the_mirror_down_reproduce_names_each_missing_data_set_and_runs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let sandbox = tmp.path();
    let repo = sandbox.join("repo");
    common::clone_alone(&repo, &["experiments", "templates"], &["datasets.toml"]);
    // A port nothing listens on any more.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let runs = sandbox.join("runs");
    let reproduce = |mirror: Option<&str>| {
        common::memwall_alone(
            &repo,
            sandbox,
            mirror,
            &[
                "reproduce",
                "--profile",
                "smoke",
                "--runs",
                runs.to_str().unwrap(),
            ],
        )
    };
    let o = reproduce(Some(&down));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let manifest = memwall_core::datasets::Manifest::load(&repo)
        .unwrap()
        .unwrap();
    let missing: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("error: missing "))
        .collect();
    assert_eq!(missing.len(), manifest.datasets.len(), "{err}");
    for d in &manifest.datasets {
        let line = missing
            .iter()
            .find(|l| l.starts_with(&format!("error: missing {} (", d.path)))
            .unwrap_or_else(|| panic!("{}: {err}", d.path));
        assert!(
            line.contains(&format!("`memwall data fetch {}`", d.path)),
            "{line}"
        );
        assert!(
            line.contains("Connection refused") || line.contains("connect"),
            "{line}"
        );
    }
    assert!(
        err.lines().last().unwrap().contains("no study was run"),
        "{err}"
    );
    assert!(!runs.exists(), "a record store was written");
    // Offline, the same: no request made, one line each.
    let o = reproduce(None);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("error: missing ") && l.contains("offline"))
            .count(),
        manifest.datasets.len(),
        "{err}"
    );
    assert!(!runs.exists());
}
