//! The CUDA chains measured by the slim runner on a GPU machine and imported beside the
//! record (`runs/fusion_ir/cuda_chains.json`), merged into the stored result when it is shown.

use super::*;

/// The study's name: its record-store folder is `runs/fusion_ir/`.
pub const STUDY: &str = "fusion_ir";

/// The slim runner's imported CUDA run of the chains, `runs/fusion_ir/cuda_chains.json`
/// (`memwall-job fusion-chains`, format `memwall-fusion-chains/1`, written by a bundle's
/// import), or `None` when there is none.
///
/// # Errors
/// [`Error::Records`](crate::error::Error::Records) naming the file and the field at fault
/// when it does not read as a [`FusionChainsRun`], or the file cannot be read.
pub fn read_cuda_chains(runs: &Path) -> crate::error::Result<Option<FusionChainsRun>> {
    read_cuda_chains_in(&runs.join(STUDY))
}

/// [`read_cuda_chains`] from a study's record-store folder (`runs/<study>/`).
///
/// # Errors
/// As [`read_cuda_chains`].
pub fn read_cuda_chains_in(study_dir: &Path) -> crate::error::Result<Option<FusionChainsRun>> {
    use crate::error::Error;
    let path = study_dir.join(CUDA_CHAINS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading", &path, e)),
    };
    memwall_core::record::fusion_chains::parse_run(&text)
        .map(Some)
        .map_err(|message| Error::Records {
            path,
            message: format!(
                "{message} (the slim runner's `memwall-job fusion-chains` result, \
                 memwall-fusion-chains/1, that a bundle's import writes)"
            ),
        })
}

/// A stored fusion result (JSON) with the imported CUDA run of `study_dir` merged in
/// ([`BurnResult::imported_cuda`]) when the result has no CUDA measurement of its own and the
/// folder has a `cuda_chains.json`; `None` when nothing changes (no file, a CUDA measurement
/// of its own, or a result that does not read as this version's: its renderer says so). With
/// the merged result, where the imported chains were measured (for the glance's device), when
/// the report shows them.
///
/// # Errors
/// The file is malformed ([`read_cuda_chains`]).
pub fn with_imported_cuda(
    result: &serde_json::Value,
    study_dir: &Path,
) -> crate::error::Result<Option<(serde_json::Value, Option<String>)>> {
    let Some(run) = read_cuda_chains_in(study_dir)? else {
        return Ok(None);
    };
    let Ok(mut r) = FusionResult::deserialize(result) else {
        return Ok(None);
    };
    if r.burn.cuda.is_ok() {
        return Ok(None);
    }
    r.burn.imported_cuda = Some(run);
    let measured_on = r.burn.cuda_shown().ok().and_then(|(c, run)| {
        run.map(|run| {
            format!(
                "CUDA rows: {} (slim runner from a GPU bundle, {})",
                c.device,
                run.date()
            )
        })
    });
    let merged = serde_json::to_value(&r).map_err(|e| crate::error::Error::Records {
        path: study_dir.join(CUDA_CHAINS_FILE),
        message: format!("the merged result does not serialize: {e}"),
    })?;
    Ok(Some((merged, measured_on)))
}
