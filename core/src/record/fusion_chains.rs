//! The `fusion_ir` study's elementwise chains as Burn tensor ops, and the result file of
//! `memwall-job fusion-chains` (format [`FUSION_CHAINS_FORMAT`]).
//!
//! The study (`memwall-studies`' `fusion_ir`) times `(a+b)*c` and `a+b*c+1` as Burn tensor ops on
//! flex and, where a GPU is present, on CUDA with and without Burn's fusion backend. GPU
//! machines get only the slim runner, so the runner measures the CUDA part on its own
//! (`memwall-job fusion-chains`, `memwall_runner::fusion_chains`) and writes one
//! [`FusionChainsRun`] as JSON; a bundle's import stores it as
//! `runs/<study>/cuda_chains.json` ([`CUDA_CHAINS_FILE`]) and the study's report shows it in
//! place of a CUDA measurement its own record lacks. Both crates read these types from here.

use super::{RecordFileError, RowError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `format` of a [`FusionChainsRun`].
pub const FUSION_CHAINS_FORMAT: &str = "memwall-fusion-chains/1";

/// File name of an imported CUDA run inside the study's record-store folder
/// (`runs/fusion_ir/cuda_chains.json`).
pub const CUDA_CHAINS_FILE: &str = "cuda_chains.json";

/// The two elementwise chains of the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Chain {
    /// `(a+b)*c`, the post's first example.
    #[serde(rename = "(a+b)*c")]
    APlusBTimesC,
    /// `a+b*c+1`, the post's fusion example.
    #[serde(rename = "a+b*c+1")]
    APlusBTimesCPlus1,
}

impl Chain {
    /// Both chains, in the order of the tables and figures.
    pub const ALL: [Chain; 2] = [Chain::APlusBTimesC, Chain::APlusBTimesCPlus1];

    /// The chain as written in the tables: `(a+b)*c` or `a+b*c+1`.
    pub fn label(self) -> &'static str {
        match self {
            Chain::APlusBTimesC => "(a+b)*c",
            Chain::APlusBTimesCPlus1 => "a+b*c+1",
        }
    }

    /// f32 loads and stores per element of the study's unfused loops (`apb_c_unfused`,
    /// `a_bc_1_unfused`): `(a+b)*c` is `t = a+b` (2 loads, 1 store) and `out = t*c` (2 loads,
    /// 1 store); `a+b*c+1` is `b*c` (2 loads, 1 store), `a + t1` (2 loads, 1 store) and `t2 + 1`
    /// (1 load, 1 store).
    pub fn unfused_accesses(self) -> usize {
        match self {
            Chain::APlusBTimesC => 6,
            Chain::APlusBTimesCPlus1 => 8,
        }
    }

    /// f32 loads and stores per element of the fused loops: three inputs read, one output
    /// written.
    pub fn fused_accesses(self) -> usize {
        4
    }
}

impl std::fmt::Display for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// One elementwise chain run as Burn tensor ops on one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BurnChain {
    /// `(a+b)*c` or `a+b*c+1`.
    pub expr: Chain,
    /// Median wall time of the chain (device synchronized after it), seconds; a warm-up run
    /// (kernel compilation on CUDA) is excluded.
    pub time_s: f64,
    /// Heap bytes allocated at the chain's high-water mark above the live bytes before it,
    /// per element (output included); `None` where the counting allocator does not see the
    /// device's memory (CUDA).
    pub alloc_bytes_per_element: Option<f64>,
    /// Largest absolute difference between Burn's result and the fused loop's (same units as
    /// the elements; dimensionless here).
    pub max_abs_diff: f64,
}

/// Burn on CUDA: both chains with Burn's fusion backend and without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CudaChains {
    /// Name of the GPU (device 0).
    pub device: String,
    /// With the fusion backend (`burn::backend::Cuda`), one per chain.
    pub fused: Vec<BurnChain>,
    /// Without it (`CubeBackend`: one kernel per op), one per chain.
    pub unfused: Vec<BurnChain>,
}

/// The backend a [`FusionChainsRun`] timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChainsBackend {
    /// Burn's CUDA backend with its fusion backend (`fused`) and without it (`unfused`).
    Cuda,
    /// Burn flex on the CPU (a check of the timing code where no GPU is: flex has no fusion
    /// backend, so `fused` is empty and `unfused` holds flex's one-kernel-per-op chains).
    Flex,
}

impl ChainsBackend {
    /// `cuda` or `flex`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChainsBackend::Cuda => "cuda",
            ChainsBackend::Flex => "flex",
        }
    }
}

/// What `memwall-job fusion-chains` writes: the chains timed on one backend over the study's
/// inputs (its generator, `n` elements drawn after the `3·ir_n` of its IR check), or why they
/// were not (no GPU, no driver, a runner built without CUDA).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FusionChainsRun {
    /// [`FUSION_CHAINS_FORMAT`].
    pub format: String,
    /// The backend timed.
    pub backend: ChainsBackend,
    /// Elements per f32 array.
    pub n: usize,
    /// The study's `ir_n`: the generator's values drawn (three arrays of `ir_n`) before the
    /// three input arrays, so the inputs are the study's.
    pub ir_n: usize,
    /// Timed repeats per chain (the median is reported), after one untimed warm-up.
    pub repeats: usize,
    /// RFC 3339 time the run finished.
    pub finished_at: String,
    /// Wall time of the whole command (input generation, device start, kernel compilation,
    /// timing), seconds.
    pub wall_s: f64,
    /// The revision the runner was built from (`memwall-job version`).
    pub runner_revision: String,
    /// Burn's version.
    pub burn_version: String,
    /// The chains (for `flex`: `device` is the CPU, `fused` is empty), or why they were not
    /// measured.
    pub chains: Result<CudaChains, String>,
}

impl FusionChainsRun {
    /// The date (YYYY-MM-DD) of [`finished_at`](Self::finished_at).
    pub fn date(&self) -> &str {
        self.finished_at.get(..10).unwrap_or(&self.finished_at)
    }

    /// Checks what the types cannot: the format, positive sizes, and for measured chains both
    /// chains in order, finite positive times and finite differences.
    ///
    /// # Errors
    /// The field at fault (`chains.Ok.fused[1].time_s`) and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((f.to_string(), m));
        if self.format != FUSION_CHAINS_FORMAT {
            return bad(
                "format",
                format!("`{}`, expected `{FUSION_CHAINS_FORMAT}`", self.format),
            );
        }
        if self.n == 0 {
            return bad("n", "must be positive".into());
        }
        if self.repeats == 0 {
            return bad("repeats", "must be positive".into());
        }
        let Ok(c) = &self.chains else { return Ok(()) };
        let lists: &[(&str, &Vec<BurnChain>)] = match self.backend {
            ChainsBackend::Cuda => &[("fused", &c.fused), ("unfused", &c.unfused)],
            ChainsBackend::Flex => &[("unfused", &c.unfused)],
        };
        for (name, list) in lists {
            let exprs: Vec<Chain> = list.iter().map(|b| b.expr).collect();
            if exprs != Chain::ALL {
                return bad(
                    &format!("chains.Ok.{name}"),
                    format!(
                        "chains {exprs:?}, expected both chains in order {:?}",
                        Chain::ALL
                    ),
                );
            }
            for (i, b) in list.iter().enumerate() {
                if !(b.time_s.is_finite() && b.time_s > 0.0) {
                    return bad(
                        &format!("chains.Ok.{name}[{i}].time_s"),
                        format!("{} is not a positive time", b.time_s),
                    );
                }
                if !b.max_abs_diff.is_finite() {
                    return bad(
                        &format!("chains.Ok.{name}[{i}].max_abs_diff"),
                        format!("{} is not finite", b.max_abs_diff),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Parses a [`FusionChainsRun`] from JSON text and checks it.
///
/// # Errors
/// [`RowError`], naming the field at fault (`field `n`: ...`).
pub fn parse_run(text: &str) -> Result<FusionChainsRun, RowError> {
    let run: FusionChainsRun = super::parse_json(text)?;
    run.check()?;
    Ok(run)
}

/// Reads a [`FusionChainsRun`] file: `Ok(None)` when there is none.
///
/// # Errors
/// The file cannot be read or does not parse: the message names the file and the field
/// (`runs/fusion_ir/cuda_chains.json: field `n`: ...`).
pub fn read_run(path: &Path) -> Result<Option<FusionChainsRun>, RecordFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RecordFileError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    parse_run(&text)
        .map(Some)
        .map_err(|source| RecordFileError::Invalid {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(expr: Chain, time_s: f64) -> BurnChain {
        BurnChain {
            expr,
            time_s,
            alloc_bytes_per_element: None,
            max_abs_diff: 0.0,
        }
    }

    fn run() -> FusionChainsRun {
        let both = |t| Chain::ALL.map(|c| chain(c, t)).to_vec();
        FusionChainsRun {
            format: FUSION_CHAINS_FORMAT.into(),
            backend: ChainsBackend::Cuda,
            n: 1 << 24,
            ir_n: 100_000,
            repeats: 5,
            finished_at: "2026-12-01T10:00:00+00:00".into(),
            wall_s: 12.5,
            runner_revision: "abc".into(),
            burn_version: "0.21.0".into(),
            chains: Ok(CudaChains {
                device: "NVIDIA H100 80GB HBM3".into(),
                fused: both(1e-4),
                unfused: both(2e-4),
            }),
        }
    }

    #[test]
    fn a_run_reads_back_and_its_faults_name_the_field() {
        let r = run();
        let text = serde_json::to_string_pretty(&r).unwrap();
        assert!(text.contains("\"backend\": \"cuda\""), "{text}");
        assert!(text.contains("\"expr\": \"a+b*c+1\""), "{text}");
        assert_eq!(parse_run(&text).unwrap(), r);
        assert_eq!(r.date(), "2026-12-01");

        let e = parse_run(&text.replace("\"n\": 16777216", "\"n\": \"many\""))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("field `n`:"), "{e}");
        let e = parse_run(&text.replace(FUSION_CHAINS_FORMAT, "memwall-fusion-chains/0"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("field `format`:"), "{e}");
        let mut bad = r.clone();
        bad.chains.as_mut().unwrap().unfused[1].time_s = 0.0;
        let e = parse_run(&serde_json::to_string(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("field `chains.Ok.unfused[1].time_s`:"), "{e}");
        let mut bad = r.clone();
        bad.chains.as_mut().unwrap().fused.pop();
        let e = parse_run(&serde_json::to_string(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("field `chains.Ok.fused`:"), "{e}");

        // Not measured: the reason, and nothing else to check.
        let none = FusionChainsRun {
            chains: Err("no CUDA driver library".into()),
            ..r
        };
        let text = serde_json::to_string(&none).unwrap();
        assert!(
            text.contains("\"chains\":{\"Err\":\"no CUDA driver library\"}"),
            "{text}"
        );
        assert_eq!(parse_run(&text).unwrap(), none);
    }

    #[test]
    fn a_missing_file_is_none_and_a_bad_one_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CUDA_CHAINS_FILE);
        assert_eq!(read_run(&path).unwrap(), None);
        std::fs::write(&path, "{\"format\": 3}").unwrap();
        let e = read_run(&path).unwrap_err().to_string();
        assert!(e.contains("cuda_chains.json: field `format`"), "{e}");
    }

    #[test]
    fn a_bad_file_keeps_the_json_error_as_source() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CUDA_CHAINS_FILE);
        std::fs::write(&path, "{\"format\": 3}").unwrap();
        let e = read_run(&path).unwrap_err();
        let row = e.source().expect("the refused row is the source");
        let json = row.source().expect("the JSON error is its source");
        assert!(json.to_string().starts_with("field `format`"), "{json}");
        assert!(
            json.source()
                .and_then(|s| s.downcast_ref::<serde_json::Error>())
                .is_some(),
            "serde_json's error under it"
        );
    }
}
