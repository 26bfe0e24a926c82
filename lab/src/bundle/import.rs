//! `memwall import`: a results archive (or a bundle folder) read back, every record checked
//! against the job the local experiment file produces, and stored with the PyTorch rows, fusion
//! chains and attribution rows.

use super::*;

/// What [`import`] did.
#[derive(Debug, Clone, Default)]
pub struct ImportSummary {
    /// Records written into the store.
    pub imported: usize,
    /// Records already in the store (same key), left as they were.
    pub already: usize,
    /// PyTorch twin rows written.
    pub torch_rows: usize,
    /// PyTorch rows not written because the store holds a finished row of the same device and
    /// configuration and the bundle's did not finish: (stored file, what the bundle's said).
    pub kept_twins: Vec<(PathBuf, String)>,
    /// Attribution benchmark files copied into `runs/<study>/attribution/`.
    pub attribution_files: usize,
    /// What became of the bundle's `fusion_ir` chains run (imported, or why not); `None`
    /// without one.
    pub fusion_chains: Option<String>,
    /// Files of the bundle's CubeCL cache merged into the local one.
    pub cache_files: usize,
    /// Autotune files of the bundle's cache merged into the committed autotune cache
    /// ([`autotune_store`] of the record store).
    pub autotune_files: usize,
    /// Studies with new rows (their reports to re-render), by experiment file.
    pub studies: Vec<PathBuf>,
    /// Records refused (path, reason); non-empty only with `skip_mismatched`.
    pub refused: Vec<(PathBuf, String)>,
    /// Every accepted record of the bundle (imported now or already in the store), in the
    /// order of its manifest: what `memwall import --nightly` makes a history entry of.
    pub records: Vec<JobRecord>,
    /// The bundle's manifest (`None` only in a default value).
    pub manifest: Option<Manifest>,
}

/// Where an import reads from and writes to.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    /// A bundle folder, a bundle archive (`<bundle>.tar.gz`) or `results.tar.gz`.
    pub source: PathBuf,
    /// The record store (`runs/`).
    pub runs: PathBuf,
    /// Where the local experiment files are (`experiments/`); a study is found by its name.
    pub experiments: PathBuf,
    /// Scratch folder an archive is unpacked into.
    pub scratch: PathBuf,
    /// Replace records already in the store.
    pub force: bool,
    /// Import the matching records and list the others, instead of refusing the whole import.
    pub skip_mismatched: bool,
    /// The local CubeCL cache (`.memwall/cache/cubecl`) that the bundle's `cache/cubecl`
    /// (compiled kernels, autotune results) is merged into, for the next bundle to carry.
    pub cubecl_cache: PathBuf,
}

/// Imports the records of a bundle (folder or archive) into the record store.
///
/// Every `jobs/<study>/<key>/record.json` must read as this memwall's record schema, carry the
/// key of its own job, sit in the folder of that key, and have the key of the job the local
/// experiment file (found by study name in `experiments`) produces for its configuration at the
/// bundle's profile, backend, corpus and settings. Otherwise nothing is written (or, with
/// `skip_mismatched`, that record is left out) and the error names each file and why.
///
/// # Errors
/// A source that is not a bundle (no `manifest.json`), an unknown manifest format, a study with
/// no local experiment file, refused records, and I/O errors naming the path.
pub fn import(req: &ImportRequest) -> Result<ImportSummary> {
    let root = open_source(req)?;
    let manifest = read_manifest(&root)?;
    let mut summary = ImportSummary::default();
    let (accepted, torch) = check_bundle(req, &root, &manifest, &mut summary)?;
    if !summary.refused.is_empty() && !req.skip_mismatched {
        refuse!(
            "refused {} record(s) of {} (nothing imported; `--skip-mismatched` imports the \
             others):\n{}",
            summary.refused.len(),
            req.source.display(),
            summary
                .refused
                .iter()
                .map(|(p, r)| format!("  {}: {r}", p.display()))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    store_records(req, &accepted, &mut summary)?;
    summary.records = accepted.into_iter().map(|(_, r)| r).collect();
    for (study, row) in &torch {
        // A finished row is evidence; a later failure of the same row does not replace it.
        let there = twin::stored_row(&req.runs, study, &row.device, &row.config);
        if let Some(there) = there
            .filter(|t| t.status == twin::TorchStatus::Ok && row.status != twin::TorchStatus::Ok)
        {
            summary.kept_twins.push((
                twin::row_path(&req.runs, study, &row.device, &row.config),
                format!(
                    "the bundle's row is `{}` ({}); the stored `ok` row of {} is kept",
                    row.status.as_str(),
                    row.reason.as_deref().unwrap_or("no reason given"),
                    there.finished_at
                ),
            ));
            continue;
        }
        twin::store_row(&req.runs, study, row)?;
        summary.torch_rows += 1;
    }
    import_extras(req, &root, &mut summary)?;
    summary.manifest = Some(manifest);
    Ok(summary)
}

/// A record of the bundle that passed [`check_record`] (its file and the record).
pub(super) type Accepted = Vec<(PathBuf, JobRecord)>;

/// Checks every record of the bundle at `root` against its local experiment file and reads its
/// PyTorch rows: returns the accepted records and the rows (by study), and adds the refused
/// records and the studies with new rows to `summary`.
///
/// # Errors
/// A study with no local experiment file, unreadable experiment files, record folders or rows.
pub(super) fn check_bundle(
    req: &ImportRequest,
    root: &Path,
    manifest: &Manifest,
    summary: &mut ImportSummary,
) -> Result<(Accepted, Vec<(String, TorchRow)>)> {
    let mut accepted = Vec::new();
    let mut torch = Vec::new();
    for bundled in &manifest.studies {
        let experiment = find_experiment(&req.experiments, &bundled.name)?;
        let study = Study::load(&experiment, manifest.profile, None)?;
        let dir = root.join("jobs").join(&bundled.name);
        let mut found = false;
        for record_file in record_files(&dir)? {
            found = true;
            match check_record(&record_file, &study, &experiment, manifest, bundled) {
                Ok(record) => accepted.push((record_file, record)),
                Err(reason) => summary.refused.push((record_file, reason)),
            }
        }
        let rows = twin::read_rows(&root.join(REFERENCE_DIR).join("results"), &bundled.name)?;
        if found || !rows.is_empty() {
            summary.studies.push(experiment.clone());
        }
        torch.extend(rows.into_iter().map(|r| (bundled.name.clone(), r)));
    }
    Ok((accepted, torch))
}

/// The folder of `record` in the store `runs`: `<study>/<key>`, or `<study>/<key>.<device>`
/// when `<key>` holds the same job measured on another device model (peaks and speed differ by
/// card: CubeCL's pool pages follow the device's memory), so that each model keeps its row.
pub fn store_dir(runs: &Path, record: &JobRecord) -> PathBuf {
    let dir = record::record_dir(runs, &record.spec.study, &record.key);
    match record::read_record(&dir) {
        Ok(Some(there))
            if !record.env.device_name.is_empty()
                && there.env.device_name != record.env.device_name =>
        {
            dir.with_file_name(format!(
                "{}.{}",
                record.key,
                memwall_core::record::attribution::slug(&record.env.device_name)
            ))
        }
        _ => dir,
    }
}

/// Writes the `accepted` records (with their job file and log) into the store, leaving a
/// record already there (same key, same device model) as it is unless `req.force`; a record
/// of the same key from another device model is kept beside it ([`store_dir`]). Counts both
/// in `summary`.
pub(super) fn store_records(
    req: &ImportRequest,
    accepted: &[(PathBuf, JobRecord)],
    summary: &mut ImportSummary,
) -> Result<()> {
    for (file, record) in accepted {
        let dir = store_dir(&req.runs, record);
        if !req.force {
            if let Ok(Some(_)) = record::read_record(&dir) {
                summary.already += 1;
                continue;
            }
        }
        std::fs::create_dir_all(&dir).doing(|| format!("creating {}", dir.display()))?;
        record::write_atomic(
            &dir.join("job.json"),
            &serde_json::to_vec_pretty(&record.spec)?,
        )?;
        if let Some(src) = file.parent().map(|p| p.join("job.log")) {
            if src.is_file() {
                std::fs::copy(&src, dir.join("job.log"))
                    .doing(|| format!("copying {}", src.display()))?;
            }
        }
        record::write_record(&dir, record)?;
        summary.imported += 1;
    }
    Ok(())
}

/// Imports what the bundle at `root` carries besides records and PyTorch rows: the
/// `fusion_ir` chains run, the attribution benchmark's files (adding their studies to
/// `summary.studies`) and the CubeCL cache.
pub(super) fn import_extras(
    req: &ImportRequest,
    root: &Path,
    summary: &mut ImportSummary,
) -> Result<()> {
    let chains = root.join(CHAINS_FILE);
    let attribution = root.join(ATTRIBUTION_DIR);
    if chains.is_file() || attribution.is_dir() {
        let roles = StudyRoles::discover(&req.experiments)?;
        // The study that claims a carried file (`role` says how a file claims it).
        let claimant = |name: Option<&str>, what: &str, role: &str| -> Result<(String, PathBuf)> {
            match name.and_then(|n| Some((n, roles.file(n)?))) {
                Some((n, file)) => Ok((n.to_string(), file.to_path_buf())),
                None => refuse!(
                    "the bundle carries {what}, but no experiment file in {} claims it (`{role}`)",
                    req.experiments.display()
                ),
            }
        };
        if chains.is_file() {
            let (name, file) = claimant(
                roles.chains(),
                "fusion chains",
                "study.gpu_suite on the fusion_ir study",
            )?;
            summary.fusion_chains = import_chains(&chains, &req.runs.join(&name))?;
            if summary
                .fusion_chains
                .as_deref()
                .is_some_and(|m| m.starts_with("imported"))
            {
                summary.studies.push(file);
            }
        }
        if attribution.is_dir() {
            let (name, file) = claimant(
                roles.attribution.as_deref(),
                "attribution rows",
                "study.kernel_attribution = true",
            )?;
            summary.attribution_files = import_attribution(&attribution, &req.runs.join(&name))?;
            if summary.attribution_files > 0 && !summary.studies.contains(&file) {
                summary.studies.push(file);
            }
        }
    }
    let cache = root.join("cache").join("cubecl");
    if cache.is_dir() {
        summary.cache_files = copy_tree(&cache, &req.cubecl_cache)?;
        // The tunings also go to the committed autotune cache, for the next bundle of any
        // checkout.
        summary.autotune_files = copy_cache(&cache, &autotune_store(&req.runs), true)?;
    }
    Ok(())
}

/// Imports a bundle's `fusion_ir` chains run: a CUDA run that measured becomes
/// `<study_runs>/cuda_chains.json` (`runs/fusion_ir/`, which the study's report then shows); a
/// CPU run or one that could not measure is not imported, and the message says why.
///
/// # Errors
/// A file that does not read as a chains run (naming the file and the field), and I/O errors.
pub(super) fn import_chains(file: &Path, study_runs: &Path) -> Result<Option<String>> {
    use memwall_core::record::fusion_chains::{read_run, ChainsBackend, CUDA_CHAINS_FILE};
    let Some(run) = read_run(file)? else {
        return Ok(None);
    };
    if run.backend != ChainsBackend::Cuda {
        return Ok(Some(format!(
            "fusion chains ran on {:?}, not CUDA: not imported as the study's CUDA measurement",
            run.backend
        )));
    }
    if let Err(why) = &run.chains {
        return Ok(Some(format!("fusion chains did not measure: {why}")));
    }
    let to = study_runs.join(CUDA_CHAINS_FILE);
    let dir = to.parent().expect("has a parent");
    std::fs::create_dir_all(dir).doing(|| format!("creating {}", dir.display()))?;
    std::fs::copy(file, &to).doing(|| format!("copying {} to {}", file.display(), to.display()))?;
    Ok(Some(format!("imported as {}", to.display())))
}

/// Copies the attribution benchmark's `*.jsonl` of a results folder into
/// `<study_runs>/attribution/` (`runs/peak_memory/attribution/`), named by framework and device
/// ([`memwall_core::record::attribution::file_name`]) so a later run on the same device replaces
/// its file and another device's stays; returns the files copied.
///
/// # Errors
/// A file none of whose lines reads as an attribution row (naming the file and the first
/// reason), and I/O errors.
pub(super) fn import_attribution(dir: &Path, study_runs: &Path) -> Result<usize> {
    use memwall_core::record::attribution;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let to_dir = study_runs.join(ATTRIBUTION_DIR);
    let mut n = 0;
    for f in files {
        let (rows, bad) = attribution::read_rows(&f)?;
        let Some(first) = rows.first() else {
            refuse!(
                "{}: no attribution row ({})",
                f.display(),
                bad.first().map(String::as_str).unwrap_or("empty file")
            );
        };
        std::fs::create_dir_all(&to_dir).doing(|| format!("creating {}", to_dir.display()))?;
        let to = to_dir.join(attribution::file_name(&first.framework, &first.device));
        std::fs::copy(&f, &to).doing(|| format!("copying {} to {}", f.display(), to.display()))?;
        n += 1;
    }
    Ok(n)
}

/// The bundle folder of `req.source`: the folder itself, or an archive unpacked into
/// `req.scratch` (a bundle archive holds one top folder; `results.tar.gz` holds the files).
pub(super) fn open_source(req: &ImportRequest) -> Result<PathBuf> {
    let src = &req.source;
    if src.is_dir() {
        return Ok(src.clone());
    }
    if !src.is_file() {
        refuse!("{}: no such bundle folder or archive", src.display());
    }
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .trim_end_matches(".gz")
        .trim_end_matches(".tar")
        .trim_end_matches(".tgz");
    let into = req
        .scratch
        .join(if stem.is_empty() { "import" } else { stem });
    if into.exists() {
        std::fs::remove_dir_all(&into).doing(|| format!("clearing {}", into.display()))?;
    }
    unpack_tgz(src, &into)?;
    if into.join("manifest.json").is_file() {
        return Ok(into);
    }
    // A bundle archive: one top folder.
    let tops: Vec<PathBuf> = std::fs::read_dir(&into)
        .doing(|| format!("listing {}", into.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    match tops.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(BundleError::Refused(format!(
            "{}: no manifest.json at its top or in one top folder; not a memwall bundle or \
             results archive",
            src.display()
        ))),
    }
}

/// The experiment file in `dir` whose `[study] name` is `name`.
pub(super) fn find_experiment(dir: &Path, name: &str) -> Result<PathBuf> {
    for f in Study::discover(dir)? {
        // Names only: an experiment file that does not load is reported by `memwall run`.
        if Study::header(&f).is_ok_and(|h| h.name == name) {
            return Ok(f);
        }
    }
    refuse!(
        "study `{name}` of the bundle has no experiment file in {} (its records can only be \
         checked against the experiment file they were made from)",
        dir.display()
    )
}

/// `dir/<key>/record.json` for every job folder of a study in a bundle, sorted.
pub(super) fn record_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(files);
    };
    for e in entries {
        let p = e
            .doing(|| format!("listing {}", dir.display()))?
            .path()
            .join(record::RECORD_FILE);
        if p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Checks one bundled record against the job the local experiment file produces; the reason
/// when it does not match.
pub(super) fn check_record(
    file: &Path,
    study: &Study,
    experiment: &Path,
    manifest: &Manifest,
    bundled: &BundledStudy,
) -> std::result::Result<JobRecord, String> {
    let record = read_bundled_record(file)?;
    check_filing(file, &record, bundled)?;
    check_local_key(&record, study, experiment, manifest)?;
    Ok(record)
}

/// The record in `file`, or why it does not read (naming the memwall-job version that wrote
/// it, where the file says).
pub(super) fn read_bundled_record(file: &Path) -> std::result::Result<JobRecord, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot be read ({e})"))?;
    record::parse_json(&text).map_err(|e| {
        format!(
            "not a record of this memwall's schema ({e}); it was written by memwall-job {} or \
             is damaged",
            serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["env"]["memwall_version"].as_str().map(String::from))
                .unwrap_or_else(|| "of an unknown version".into())
        )
    })
}

/// Checks that `record` (read from `file`) is filed where it belongs: its key is its job's
/// and its folder's, and its study and corpus are those of `bundled`.
pub(super) fn check_filing(
    file: &Path,
    record: &JobRecord,
    bundled: &BundledStudy,
) -> std::result::Result<(), String> {
    let folder = file
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let own = record.spec.key();
    if record.key != own || folder != own {
        return Err(format!(
            "field `key`: {} (folder {folder}) is not the key of the job it holds ({own}): the \
             record or its job was edited",
            record.key
        ));
    }
    if record.spec.study != bundled.name {
        return Err(format!(
            "field `spec.study`: `{}` is not the study `{}` it is filed under",
            record.spec.study, bundled.name
        ));
    }
    let fingerprint = &record.spec.data.fingerprint;
    if *fingerprint != bundled.fingerprint && !bundled.other_fingerprints.contains(fingerprint) {
        return Err(format!(
            "field `spec.data.fingerprint`: {fingerprint} is not a bundled corpus ({})",
            std::iter::once(&bundled.fingerprint)
                .chain(&bundled.other_fingerprints)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

/// Checks that `record`'s key is the key that the local experiment file (`study`, read from
/// `experiment`) gives its configuration with the bundle's settings: the record must be one of
/// those jobs (one per repeat).
pub(super) fn check_local_key(
    record: &JobRecord,
    study: &Study,
    experiment: &Path,
    manifest: &Manifest,
) -> std::result::Result<(), String> {
    // The jobs the local file gives this configuration with the bundle's settings (one per
    // repeat): the record must be one of them.
    let settings = driver::JobSettings {
        cache_dir: None,
        memory_cleanup: manifest.memory_cleanup,
        memory_pool: manifest.memory_pool,
    };
    // The record's corpus stands for every vocabulary: only its own configuration is kept.
    let corpora: crate::spec::Corpora = study
        .vocabularies()
        .into_iter()
        .map(|v| (v, record.spec.data.clone()))
        .collect();
    let expected: Vec<JobSpec> = driver::expand_jobs(
        study,
        record.spec.backend,
        record.spec.device_index,
        &corpora,
        &settings,
        &[],
        &[],
    )
    .map_err(|e| e.to_string())?
    .into_iter()
    .filter(|j| j.config == record.spec.config)
    .collect();
    let Some(expected) = expected
        .iter()
        .find(|j| j.key() == record.key)
        .or(expected.first())
    else {
        return Err(format!(
            "configuration `{}` is not in {} any more",
            record.spec.config,
            experiment.display()
        ));
    };
    if expected.key() != record.key {
        return Err(format!(
            "job key {} is not the key {} that {} gives configuration `{}` at profile {} on {} \
             (the experiment file or memwall changed since the bundle was written: rerun \
             `memwall bundle`, or import with the revision {} that wrote it)",
            record.key,
            expected.key(),
            experiment.display(),
            record.spec.config,
            manifest.profile,
            record.spec.backend,
            manifest.git_revision
        ));
    }
    Ok(())
}
