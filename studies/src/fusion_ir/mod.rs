//! Kernel-fusion demo from the blog post (`000_8cbb5ca41b7f2c4a.txt`, section "Demos /
//! Compiler-Driven Kernel Fusion").
//!
//! A tiny IR (Var, Const, Add, Mul, FusedOp) for `a + b*c + 1`, a pass that fuses trees of
//! elementwise nodes whose intermediate results have a single consumer into one `FusedOp`,
//! evaluation over vectors, and a plain-Rust measurement of unfused (each intermediate array
//! materialized) versus fused (one loop) elementwise kernels, and the same chains as Burn tensor
//! ops: flex on the CPU (one kernel per op), and CUDA with and without Burn's fusion backend
//! when a GPU is present. [`measure`] runs all three parts into a [`FusionResult`]; [`sections`]
//! presents one as three sections.
//!
//! The Burn part (the chains' types, [`burn_chains`], the CUDA pair, the study's inputs and the
//! fused reference loops) lives in the runner ([`memwall_runner::fusion_chains`], types in
//! `memwall_core::record::fusion_chains`), so GPU machines without Rust measure it with the
//! slim runner: `memwall-job fusion-chains` writes a [`FusionChainsRun`], a bundle's import
//! stores it as `runs/fusion_ir/cuda_chains.json` ([`read_cuda_chains`]), and a record without
//! a CUDA measurement of its own is rendered with it ([`with_imported_cuda`],
//! [`BurnResult::cuda_shown`]), the report naming the device, the runner and the date.
//!
//! Why this module has its own [`Graph`] and not memwall-remat's `Graph` (which says every graph
//! of memwall is that type): the remat graph is a data-flow graph of forward and backward ops,
//! each with a compute cost and an output size in bytes, which the simulator and the Checkmate
//! MILP schedule (which outputs to keep, which to recompute). This one is an expression DAG:
//! element-wise expressions over vectors (Var, Const, Add, Mul nodes that evaluate to values)
//! that the fusion pass rewrites into fused kernels, and whose evaluation counts kernels and the
//! bytes each moves. Built on the remat graph it would lose what the pass and the records need:
//! (1) the remat `Node` has no expression body, constant value or operand order (its `OpKind`
//! is a closed enum without a fused op or a constant, and `deps` are sorted and deduplicated,
//! while a `FusedOp`'s `Expr::Input(i)` indexes its inputs in first-use order, and `Mul(x, x)`
//! has two operands); (2) the remat graph is not serializable, while the study's record stores
//! these graphs (`IrResult`, `runs/fusion_ir/*.result.json`) and the report re-renders from the
//! stored shape; (3) its costs and sizes mean nothing here. memwall-remat is not changed by this
//! study, so a fused-expression op kind and serde for its graph would be the place to unify.
//!
//! May import: [`super`] (the study trait, errors, timing, test data), [`memwall_document::content`]
//! (the sections the renderers build), `crate::error` (errors of the imported run's file),
//! `memwall_runner::fusion_chains` (the Burn chains, the study's inputs), `memwall_core`, Burn
//! (flex), serde.
//!
//! The study is a folder: [`params`] (its `[params]`), [`ir`] (the expression IR and the fusion
//! pass), [`run`] (the measurement), [`result`] (the stored result), [`imported`] (the GPU
//! bundle's CUDA chains beside the record) and [`sections`] (the report's sections). This file
//! joins them as the study ([`FusionIr`]) and names the result's measures and tracked numbers.

mod imported;
mod ir;
mod matmul;
mod params;
mod result;
mod run;
mod sections;
#[cfg(test)]
mod tests;

pub use imported::{read_cuda_chains, read_cuda_chains_in, with_imported_cuda, STUDY};
pub use ir::{Expr, Graph, Node, NodeId};
pub use matmul::{gemm_into, measure_matmul, MatmulChain};
pub use params::{validate, FusionParams};
pub use result::{BurnResult, FusionResult, IrResult, LoopChain, LoopsResult};
pub use run::{a_bc_1_unfused, apb_c_unfused, burn_chains, measure};
pub use sections::sections;

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::params::{int_in, ParamResult};
use super::{demo_study, ensure, median_time, DemoError, XorShift};
use super::{CiteAs, Cited};
use crate::document::content::{Figure, Measure, Section, Table};
use memwall_runner::fusion_chains::{random_vec, ChainsBackend, CUDA_CHAINS_FILE, SEED};
// The chains' types, the fused reference loops and the imported run's format live in
// memwall-core and the runner (the slim runner times the CUDA part on GPU machines).
pub use memwall_runner::fusion_chains::MAX_N;
pub use memwall_runner::fusion_chains::{
    a_bc_1_fused, apb_c_fused, BurnChain, Chain, CudaChains, FusionChainsRun,
};

/// Bytes of one f32 load or store.
const F32_BYTES: usize = 4;

/// The floor of bytes moved per element by both chains: three 4-byte inputs read once and one
/// 4-byte output written once.
const FLOOR_BYTES_PER_ELEMENT: usize = 4 * F32_BYTES;

/// The fusion IR study ([`InProcessStudy`](super::InProcessStudy)).
pub struct FusionIr;

demo_study!(
    FusionIr: FusionParams => FusionResult,
    cited CiteAs,
    validate,
    measure,
    sections,
    measures,
    tracked,
    imports with_imported_cuda
);

/// The timings the nightly run tracks ([`super::Tracked`], [`super::TrackedKind::KernelTime`]):
/// per chain, the median time of the unfused and the fused loops, of Burn flex, and of Burn on
/// CUDA with and without fusion where this run measured it (an imported CUDA run is not this
/// run's measurement and is left out).
pub fn tracked(r: &FusionResult) -> Vec<super::Tracked> {
    use super::{Tracked, TrackedKind::KernelTime};
    let t = |case: String, value: f64| Tracked {
        case,
        kind: KernelTime,
        value,
    };
    let mut out = Vec::new();
    for l in &r.loops.chains {
        let c = l.chain.label();
        out.push(t(format!("loops {c} unfused"), l.unfused_s));
        out.push(t(format!("loops {c} fused"), l.fused_s));
    }
    for f in &r.burn.flex {
        out.push(t(format!("burn flex {}", f.expr.label()), f.time_s));
    }
    if let Some(mm) = &r.matmul {
        out.push(t("matmul A·B + C unfused".into(), mm.unfused_s));
        out.push(t("matmul A·B + C fused".into(), mm.fused_s));
    }
    if let Ok(cuda) = &r.burn.cuda {
        for (how, chains) in [("fused", &cuda.fused), ("unfused", &cuda.unfused)] {
            for f in chains {
                out.push(t(format!("burn cuda {how} {}", f.expr.label()), f.time_s));
            }
        }
    }
    out.retain(|x| x.value.is_finite() && x.value > 0.0);
    out
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only (NaN where the run has no such measurement):
///
/// - `apb_c_loop_speedup`, `a_bc_1_loop_speedup` (x): median time of the unfused loops over the
///   fused loop's, for `(a+b)*c` and `a+b*c+1` (above 1: fusion is faster).
/// - `apb_c_bytes_ratio`, `a_bc_1_bytes_ratio` (x): bytes loaded and stored per element,
///   unfused over fused (memwall's count of 4-byte accesses).
/// - `cuda_fusion_speedup` (x): Burn on CUDA, time without its fusion backend over time with
///   it, the smaller of the two chains; NaN when no GPU was measured (by the study, or by the
///   slim runner from a GPU bundle: [`BurnResult::cuda_shown`]).
/// - `ir_unfused_kernels`, `ir_fused_kernels` (kernels) and `ir_mismatches` (elements): the
///   fusion pass on `a + b*c + 1`.
/// - `matmul_epilogue_speedup` (x): `A·B + C`, median time of the product and a separate add
///   over the product accumulating into `C` ([`MatmulChain`]); `matmul_epilogue_bytes_ratio`
///   (x): bytes per output element moved beyond the product's operands, unfused over fused.
pub fn measures(r: &FusionResult) -> Vec<Measure> {
    let chain = |c: Chain| r.loops.chains.iter().find(|l| l.chain == c);
    let speedup = |c: Chain| chain(c).map_or(f64::NAN, |l| l.unfused_s / l.fused_s);
    let bytes = |c: Chain| {
        chain(c).map_or(f64::NAN, |l| {
            l.unfused_bytes_per_element as f64 / l.fused_bytes_per_element as f64
        })
    };
    let cuda = match r.burn.cuda_shown() {
        Ok((c, _)) => c
            .unfused
            .iter()
            .zip(&c.fused)
            .map(|(u, f)| u.time_s / f.time_s)
            .reduce(f64::min)
            .unwrap_or(f64::NAN),
        Err(_) => f64::NAN,
    };
    use memwall_core::spec::provenance::Provenance::{Computed, Derived};
    let ir = &r.ir;
    let loops = || {
        Derived(
            "median wall-clock time of the unfused loops / of the fused loop, on this CPU".into(),
        )
    };
    let accesses = || {
        Computed("4-byte loads and stores per element of the unfused loops / of the fused loop, counted from the loops' code".into())
    };
    let pass = || Computed("our fusion pass on the expression a + b*c + 1".into());
    vec![
        Measure::new(
            "apb_c_loop_speedup",
            speedup(Chain::APlusBTimesC),
            "x",
            2,
            loops(),
        ),
        Measure::new(
            "a_bc_1_loop_speedup",
            speedup(Chain::APlusBTimesCPlus1),
            "x",
            2,
            loops(),
        ),
        Measure::new(
            "apb_c_bytes_ratio",
            bytes(Chain::APlusBTimesC),
            "x",
            2,
            accesses(),
        ),
        Measure::new(
            "a_bc_1_bytes_ratio",
            bytes(Chain::APlusBTimesCPlus1),
            "x",
            2,
            accesses(),
        ),
        Measure::new(
            "cuda_fusion_speedup",
            cuda,
            "x",
            2,
            Derived(
                "Burn on CUDA: median wall-clock time of the chain (to a device sync) without \
                 the fusion backend / with it, the smaller of the two chains"
                    .into(),
            ),
        ),
        Measure::new(
            "ir_unfused_kernels",
            ir.unfused_kernels as f64,
            "",
            0,
            pass(),
        ),
        Measure::new("ir_fused_kernels", ir.fused_kernels as f64, "", 0, pass()),
        Measure::new("ir_mismatches", ir.mismatches as f64, "", 0, pass()),
        Measure::new(
            "matmul_epilogue_speedup",
            r.matmul
                .as_ref()
                .map_or(f64::NAN, |mm| mm.unfused_s / mm.fused_s),
            "x",
            2,
            Derived(
                "median wall-clock time of A·B + C as the gemm crate's product into a \
                 temporary and a separate add / as its product accumulating into C, one \
                 thread, on this CPU"
                    .into(),
            ),
        ),
        Measure::new(
            "matmul_epilogue_bytes_ratio",
            r.matmul.as_ref().map_or(f64::NAN, |mm| {
                mm.unfused_bytes_per_element as f64 / mm.fused_bytes_per_element as f64
            }),
            "x",
            2,
            Computed(
                "4-byte loads and stores per output element beyond the product's operands, \
                 unfused / fused, counted from the code"
                    .into(),
            ),
        ),
    ]
}
