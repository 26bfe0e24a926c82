//! The bundle's `manifest.json`: what it holds, how it was built, the seconds it expects.

use super::*;

/// `manifest.json` of a bundle (also packed into `results.tar.gz`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// RFC 3339 time the bundle was written.
    pub created_at: String,
    /// `git rev-parse --short HEAD` of the repository it was written from, `-dirty` appended
    /// when tracked files had uncommitted changes (`unknown` outside git). Each job records the
    /// revision its runner was built from (embedded at build time), which can differ.
    pub git_revision: String,
    /// memwall's version.
    pub memwall_version: String,
    /// Backend of the jobs.
    pub target: BackendKind,
    /// Size profile of the jobs.
    pub profile: Profile,
    /// `--memory-cleanup` applied to every job.
    pub memory_cleanup: bool,
    /// `--memory-pool` applied to every job.
    pub memory_pool: Option<MemoryPool>,
    /// The studies.
    pub studies: Vec<BundledStudy>,
    /// The job file (relative to the bundle) whose model and device the attribution benchmark
    /// times (`memwall-job bench`, `reference/torch_attribution.py`): the first control of
    /// `peak_memory` without kernel fusion; `None` when that study is not bundled.
    #[serde(default)]
    pub attribution_job: Option<PathBuf>,
    /// Whether run.sh runs `fusion_ir`'s chains (`memwall-job fusion-chains`).
    #[serde(default)]
    pub fusion_chains: bool,
    /// Expected device seconds of what run.sh runs after the jobs: (part, seconds), e.g.
    /// ("PyTorch twin", 606.0).
    #[serde(default)]
    pub extra_expected_s: Vec<(String, f64)>,
    /// The run plan: every step in tiers, in the order run.sh runs them (`plan.tsv`; empty in
    /// bundles written before the plan existed).
    #[serde(default)]
    pub tiers: Vec<tiers::Tier>,
    /// The GPU model whose stored rows the bundle left out, and how it was chosen; `None` for a
    /// CPU bundle, `--rerun-stored`, or a store without a GPU record. `run.sh` warns when it
    /// runs on another model (the rows left out are then not measured there).
    #[serde(default)]
    pub resume: Option<ResumeFor>,
    /// The revision the carried runner was built from (`memwall-job version`; `-dirty` only
    /// with `--allow-dirty`), which its records carry as `env.git_revision`.
    #[serde(default)]
    pub runner_revision: String,
}

impl Manifest {
    /// Expected device seconds of the whole bundle: its studies' jobs and what run.sh runs
    /// after them.
    pub fn expected_total_s(&self) -> f64 {
        self.studies.iter().map(|s| s.expected_s).sum::<f64>()
            + self.extra_expected_s.iter().map(|(_, s)| s).sum::<f64>()
    }
}

/// Expected seconds of run.sh's parts after the jobs, as run.sh budgets them: the twins as
/// the plan's `tiers` hold them (a twin sharing its tier's Python process without the start).
pub(super) fn extra_expected(
    target: BackendKind,
    chains: bool,
    tiers: &[tiers::Tier],
    attribution: bool,
) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    if chains {
        out.push(("fusion_ir chains".to_string(), CHAINS_S as f64));
    }
    let twins: Vec<f64> = tiers
        .iter()
        .flat_map(|t| &t.steps)
        .filter_map(|s| match s {
            tiers::Step::Torch { expected_s, .. } => Some(*expected_s),
            _ => None,
        })
        .collect();
    let torch_rows = !twins.is_empty();
    if torch_rows {
        let s: f64 = twins.iter().sum();
        out.push((format!("{} PyTorch twin rows", twins.len()), s));
    }
    if attribution {
        let (b, t) = attribution_seconds(target);
        let t = if torch_rows { t } else { 0 };
        out.push(("attribution benchmark".to_string(), (b + t) as f64));
    }
    out
}

/// Expected seconds of the attribution benchmark's Burn and PyTorch sides on `target`.
pub(super) fn attribution_seconds(target: BackendKind) -> (u64, u64) {
    if target.is_gpu() {
        (ATTRIBUTION_BURN_S, ATTRIBUTION_TORCH_S)
    } else {
        (30, 60)
    }
}

/// Expected seconds of `fusion_ir`'s chains (a CUDA start-up and two kernel compilations).
pub(super) const CHAINS_S: u64 = 60;

/// The expected device time of a bundle, for its run.sh and `memwall bundle`'s output, e.g.
/// `peak_memory 9.5 min, checkpoint_interval 7.1 min; 16.6 min in all`.
pub fn expected_line(m: &Manifest) -> String {
    let per: Vec<String> = m
        .studies
        .iter()
        .map(|s| format!("{} {:.1} min", s.name, s.expected_s / 60.0))
        .collect();
    let extras = m
        .extra_expected_s
        .iter()
        .map(|(part, s)| format!("{part} {:.1} min", s / 60.0));
    let per: Vec<String> = per.into_iter().chain(extras).collect();
    format!(
        "{}; {:.1} min in all",
        per.join(", "),
        m.expected_total_s() / 60.0
    )
}

/// The bundle's `manifest.json` under `root`.
///
/// # Errors
/// A missing or unreadable manifest, and one of another format.
pub(super) fn read_manifest(root: &Path) -> Result<Manifest> {
    let manifest_path = root.join("manifest.json");
    let text =
        std::fs::read_to_string(&manifest_path).map_err(|source| BundleError::NoManifest {
            path: manifest_path.clone(),
            source,
        })?;
    let manifest: Manifest =
        record::parse_json(&text).map_err(|source| BundleError::NotAManifest {
            path: manifest_path.clone(),
            source,
        })?;
    if manifest.format != MANIFEST_FORMAT {
        refuse!(
            "{}: field `format`: {} is not {MANIFEST_FORMAT}; import it with the memwall that \
             wrote it",
            manifest_path.display(),
            manifest.format
        );
    }
    Ok(manifest)
}
