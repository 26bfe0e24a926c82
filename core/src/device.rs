//! Devices as data: what the user asked for (`--device`) and the Burn backend a job runs on.
//! Probing a driver is the runner's (`memwall_runner::device`).
//!
//! May import: serde, [`crate::error`].

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the user asked for with `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRequest {
    /// CUDA when a GPU and its driver are present, the CPU otherwise.
    Auto,
    /// The CPU, even where a GPU is present.
    Cpu,
    /// CUDA device ordinal.
    Cuda(usize),
}

impl FromStr for DeviceRequest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Device {
            requested: s.to_string(),
            message: "unknown device: expected `auto`, `cpu`, `cuda` or `cuda:N` (N a GPU ordinal)"
                .into(),
        };
        match s {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(0)),
            _ => match s.strip_prefix("cuda:") {
                Some(n) => n.parse().map(DeviceRequest::Cuda).map_err(|_| bad()),
                None => Err(bad()),
            },
        }
    }
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// The Burn backend a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// `burn-flex`: the CPU backend memwall uses by default (the comparison: docs/src/findings/cpu-backend.md).
    Flex,
    /// `burn-ndarray`.
    Ndarray,
    /// `burn-cuda` (CubeCL, kernels compiled with NVRTC at run time).
    Cuda,
}

impl BackendKind {
    /// The lowercase name used on the command line and in job files: "flex", "ndarray" or "cuda".
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Cuda => "cuda",
        }
    }
    /// Whether the backend runs on a GPU (only [`BackendKind::Cuda`] does).
    pub fn is_gpu(self) -> bool {
        self == BackendKind::Cuda
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "flex" => Ok(BackendKind::Flex),
            "ndarray" => Ok(BackendKind::Ndarray),
            "cuda" => Ok(BackendKind::Cuda),
            other => Err(Error::Device {
                requested: other.to_string(),
                message: "unknown CPU backend: expected `flex` or `ndarray`".into(),
            }),
        }
    }
}
