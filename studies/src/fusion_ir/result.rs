//! The fusion study's result, stored as its record: the IR pass, the loop timings, the Burn
//! chains.

use super::*;

/// The result of the fusion study: the three parts it measured, and the parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FusionResult {
    /// The parameters it ran with.
    pub params: FusionParams,
    /// The fusion pass on the tiny IR.
    pub ir: IrResult,
    /// The plain-Rust loops, unfused versus fused.
    pub loops: LoopsResult,
    /// The same chains as Burn tensor ops.
    pub burn: BurnResult,
    /// `A·B + C` unfused and fused ([`super::matmul`]); `None` in records written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matmul: Option<MatmulChain>,
}

/// What the fusion pass did to `a + b*c + 1` and `(a + b)*c`, evaluated over `ir_n` elements.
/// The graphs are the pass's output (structure, not text); the renderer labels and draws them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IrResult {
    /// `a + b*c + 1` as parsed, before fusion.
    pub unfused_graph: Graph,
    /// `a + b*c + 1` after the fusion pass.
    pub fused_graph: Graph,
    /// Elementwise kernels (passes over the vectors) of the unfused graph's evaluation.
    pub unfused_kernels: usize,
    /// Elementwise kernels of the fused graph's evaluation.
    pub fused_kernels: usize,
    /// Elements whose fused and unfused values differ bitwise (0: the study fails otherwise).
    pub mismatches: usize,
    /// `(a + b)*c` after the fusion pass.
    pub fused_apb_c_graph: Graph,
}

/// The plain-Rust loops over `n` elements: one entry per chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoopsResult {
    /// Logical CPU cores of the machine (the loops run on one thread).
    pub cores: usize,
    /// `(a+b)*c`, then `a+b*c+1`.
    pub chains: Vec<LoopChain>,
}

/// One chain as unfused loops (each intermediate array materialized) and as one fused loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopChain {
    /// Which chain.
    pub chain: Chain,
    /// Bytes loaded and stored per element by the unfused loops (4 B per f32 access).
    pub unfused_bytes_per_element: usize,
    /// Bytes loaded and stored per element by the fused loop (the 16 B floor).
    pub fused_bytes_per_element: usize,
    /// Median wall time of the unfused loops, seconds.
    pub unfused_s: f64,
    /// Median wall time of the fused loop, seconds.
    pub fused_s: f64,
}

/// The chains as Burn tensor ops.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BurnResult {
    /// Burn flex (CPU, one kernel per op), one per chain.
    pub flex: Vec<BurnChain>,
    /// Burn on CUDA with and without fusion, or why it was not measured (no GPU, no driver,
    /// built without the `cuda` feature).
    pub cuda: Result<CudaChains, String>,
    /// The slim runner's run of the chains from a GPU bundle (`runs/<study>/cuda_chains.json`),
    /// merged in when a record without a CUDA measurement is rendered
    /// ([`with_imported_cuda`]); `None` in every record the study stores (and then absent from
    /// its JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_cuda: Option<FusionChainsRun>,
}

impl BurnResult {
    /// The CUDA chains the report shows: this run's, else the imported run's (with that run),
    /// else why there are none.
    ///
    /// # Errors
    /// Why no CUDA chains were measured: this run's reason, with the imported run's when it
    /// has none either or timed flex.
    pub fn cuda_shown(&self) -> Result<(&CudaChains, Option<&FusionChainsRun>), String> {
        let why = match &self.cuda {
            Ok(c) => return Ok((c, None)),
            Err(why) => why,
        };
        let Some(run) = &self.imported_cuda else {
            return Err(why.clone());
        };
        match (run.backend, &run.chains) {
            (ChainsBackend::Cuda, Ok(c)) => Ok((c, Some(run))),
            (ChainsBackend::Cuda, Err(theirs)) => Err(format!(
                "{why}; the slim runner's run from a GPU bundle ({}) measured none either: {theirs}",
                run.date()
            )),
            (ChainsBackend::Flex, _) => Err(format!(
                "{why}; the imported `{CUDA_CHAINS_FILE}` ({}) is a flex run of the slim runner \
                 (a check of its timing code), not a CUDA measurement",
                run.date()
            )),
        }
    }
}
