//! memwall's own kernels for the model's operations on CubeCL backends (CUDA, and wgpu for the
//! tests), written once in CubeCL and compiled at run time for the device (NVRTC on CUDA).
//!
//! Burn 0.21's CubeCL backend runs these operations as compositions of its elementwise and
//! reduction kernels, one kernel (and one trip through device memory) per Burn operation, and
//! in the tensors' dtype: a bf16 GELU is an `erf`, three multiplications and an addition, each
//! rounding to bf16. Here each direction of each operation is one kernel that reads its inputs
//! once, computes in f32 whatever the tensors' dtype, and rounds once when it stores.
//!
//! - [`attention`]: FlashAttention-2's forward and backward, a unit per row, f32 inside;
//! - [`gelu`]: GELU forward and backward, elementwise;
//! - [`norm`]: layer norm forward and backward, one cube per row, f32 statistics;
//! - [`adamw`]: AdamW's update of one parameter tensor, elementwise;
//! - [`adafactor`]: Adafactor's update of one parameter tensor: its row and column statistics
//!   and the update's RMS as reductions, then one elementwise pass.
//!
//! The kernels are generic over the CubeCL runtime and take the float dtype at launch (f32,
//! f16, bf16: `#[define(F)]`), so the same code runs on CUDA and, in CI, on CubeCL's wgpu
//! runtime over a software Vulkan (Mesa's lavapipe), where each is compared with the composed
//! reference (Burn's own operations) at f32. [`crate::model`]'s backend traits call them on
//! `CubeBackend` (no Burn fusion: the analog of PyTorch eager) and, as custom operations in the
//! fused stream, on Burn's fusion backend ([`crate::model::custom_op`]).

pub mod adafactor;
pub mod adamw;
pub mod attention;
pub mod gelu;
pub mod norm;

use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;
use cubecl::prelude::*;
use cubecl::CubeDim;

/// The environment variable that picks which operations run as memwall's kernels on
/// `CubeBackend`: unset or `all` (every one), `none` (Burn's composed operations: the state
/// before these kernels, for an A/B on a GPU), or a comma-separated list of
/// [`Selection::NAMES`].
pub const SELECTION_VAR: &str = "MEMWALL_CUBE_KERNELS";

/// Which operations run as memwall's kernels (the others as Burn's composed operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// [`attention`] forward and backward.
    pub attention: bool,
    /// [`norm`] forward and backward.
    pub layer_norm: bool,
    /// [`gelu`] forward and backward.
    pub gelu: bool,
    /// [`adamw`]'s update.
    pub adamw: bool,
    /// [`adafactor`]'s update.
    pub adafactor: bool,
}

impl Selection {
    /// The operations' names in [`SELECTION_VAR`].
    pub const NAMES: [&'static str; 5] = ["attention", "layer_norm", "gelu", "adamw", "adafactor"];

    /// Every kernel.
    pub const ALL: Selection = Selection {
        attention: true,
        layer_norm: true,
        gelu: true,
        adamw: true,
        adafactor: true,
    };

    /// Parses a value of [`SELECTION_VAR`].
    ///
    /// # Errors
    /// A name that is none of `all`, `none` and [`Selection::NAMES`], with the accepted values.
    pub fn parse(value: &str) -> Result<Selection, String> {
        let mut s = Selection {
            attention: false,
            layer_norm: false,
            gelu: false,
            adamw: false,
            adafactor: false,
        };
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "all" => s = Selection::ALL,
                "none" => {}
                "attention" => s.attention = true,
                "layer_norm" => s.layer_norm = true,
                "gelu" => s.gelu = true,
                "adamw" => s.adamw = true,
                "adafactor" => s.adafactor = true,
                other => {
                    return Err(format!(
                        "{SELECTION_VAR}={value:?}: unknown operation {other:?}; use `all`, \
                         `none` or a comma-separated list of {}",
                        Selection::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(s)
    }

    /// This process's selection: [`SELECTION_VAR`] read once (a value [`Selection::parse`]
    /// refuses counts as unset here; a CUDA job checks it first with [`Selection::from_env`]).
    pub fn current() -> Selection {
        static CURRENT: std::sync::OnceLock<Selection> = std::sync::OnceLock::new();
        *CURRENT.get_or_init(|| Selection::from_env().unwrap_or(Selection::ALL))
    }

    /// [`SELECTION_VAR`] parsed: [`Selection::ALL`] when unset.
    ///
    /// # Errors
    /// As [`Selection::parse`].
    pub fn from_env() -> Result<Selection, String> {
        match std::env::var(SELECTION_VAR) {
            Ok(value) => Selection::parse(&value),
            Err(_) => Ok(Selection::ALL),
        }
    }

    /// What of this selection runs under Burn's fusion (`fusion = true`), where memwall's
    /// kernels are custom operations in the fused stream ([`crate::model::custom_op`]):
    /// everything but AdamW's update (an elementwise chain Burn's fusion compiles into one
    /// kernel); GELU there means its backward only.
    pub fn under_fusion(&self) -> Selection {
        Selection {
            adamw: false,
            ..*self
        }
    }

    /// The names of the selected operations, `none` when there is none (for a record's
    /// numerics).
    pub fn describe(&self) -> String {
        let on = [
            self.attention,
            self.layer_norm,
            self.gelu,
            self.adamw,
            self.adafactor,
        ];
        let names: Vec<&str> = Selection::NAMES
            .iter()
            .zip(on)
            .filter_map(|(n, on)| on.then_some(*n))
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// The widest vector (elements per load: 4, 2 or 1) that divides `len` and that the runtime
/// reads at once for `tensor`'s dtype.
pub(crate) fn vector_size<R: CubeRuntime>(tensor: &CubeTensor<R>, len: usize) -> usize {
    let supported: Vec<usize> = tensor
        .client
        .io_optimized_vector_sizes(tensor.dtype.size())
        .collect();
    [4usize, 2]
        .into_iter()
        .find(|&w| len.is_multiple_of(w) && supported.contains(&w))
        .unwrap_or(1)
}

/// The cube count and cube size of an elementwise kernel over `len` elements of `tensor`'s
/// device, read `width` at a time (one unit per vector).
pub(crate) fn elementwise_geometry<R: CubeRuntime>(
    tensor: &CubeTensor<R>,
    len: usize,
    width: usize,
) -> (cubecl::prelude::CubeCount, cubecl::CubeDim) {
    let units = len / width;
    let dim = cubecl::CubeDim::new(&tensor.client, units);
    (
        cubecl::calculate_cube_count_elemwise(&tensor.client, units, dim),
        dim,
    )
}

/// A new tensor of `dims` in f32 on `like`'s device (uninitialized).
pub(crate) fn f32_tensor<R: CubeRuntime>(like: &CubeTensor<R>, dims: Vec<usize>) -> CubeTensor<R> {
    empty_device_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(dims),
        DType::F32,
    )
}

/// A new contiguous tensor of `t`'s shape and dtype on its device (uninitialized).
pub(crate) fn like<R: CubeRuntime>(t: &CubeTensor<R>) -> CubeTensor<R> {
    empty_device_dtype(t.client.clone(), t.device.clone(), t.shape(), t.dtype)
}

/// Units per cube of the row kernels (a power of two: the tree reduction halves it).
pub(crate) const ROW_UNITS: u32 = 256;

/// The sum of every unit's `value` over the cube, through `shared` (`CUBE_DIM` entries, a
/// power of two); every unit gets it. Ends with a barrier, so `shared` may be reused.
#[cube]
pub(crate) fn cube_sum(shared: &mut SharedMemory<f32>, value: f32) -> f32 {
    let unit = UNIT_POS as usize;
    shared[unit] = value;
    sync_cube();
    let mut stride = (CUBE_DIM / 2) as usize;
    while stride > 0 {
        if unit < stride {
            shared[unit] = shared[unit] + shared[unit + stride];
        }
        sync_cube();
        stride /= 2;
    }
    let total = shared[0];
    sync_cube();
    total
}

/// The row this cube works on (cubes laid out in x, then y, as [`row_cubes`] launches them).
#[cube]
pub(crate) fn cube_row() -> usize {
    (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize
}

/// One cube per row: the cube count in x (at most 65,535, wgpu's limit) and y, and the units
/// per cube (a power of two up to [`ROW_UNITS`], at least 32, no more than `d` needs).
pub(crate) fn row_cubes(rows: usize, d: usize) -> (CubeCount, CubeDim, usize) {
    let x = rows.clamp(1, 65_535);
    let y = rows.div_ceil(x).max(1);
    let units = (d.next_power_of_two() as u32).clamp(32, ROW_UNITS);
    (
        CubeCount::Static(x as u32, y as u32, 1),
        CubeDim::new_1d(units),
        units as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::Selection;

    #[test]
    fn the_selection_parses_names_and_refuses_unknown_ones() {
        assert_eq!(Selection::parse("all").unwrap(), Selection::ALL);
        assert_eq!(Selection::parse("none").unwrap().describe(), "none");
        let s = Selection::parse("gelu, adamw").unwrap();
        assert!(s.gelu && s.adamw && !s.attention && !s.layer_norm);
        assert_eq!(s.describe(), "gelu, adamw");
        let err = Selection::parse("gelu,flash").unwrap_err();
        assert!(
            err.contains("MEMWALL_CUBE_KERNELS") && err.contains("\"flash\""),
            "{err}"
        );
        assert!(
            err.contains("attention, layer_norm, gelu, adamw, adafactor"),
            "{err}"
        );
    }
}
