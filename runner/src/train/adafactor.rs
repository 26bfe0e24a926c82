//! Adafactor as a Burn optimizer, as forgather trains its `peak_memory` study with it.
//!
//! Source: Shazeer and Stern 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory
//! Cost" (ICML; arXiv:1804.04235), Algorithm 4 (weight matrices) and Algorithm 5 (weight
//! vectors), with the settings of forgather's `Adafactor` (jdinalt/forgather,
//! `src/forgather/ml/optim/adafactor.py`: the constructor's defaults and the function
//! `_adafactor`), which the study's `templates/project.yaml` builds with `lr: 2.0e-4` and
//! `weight_decay: 0.01` and nothing else.
//!
//! Per parameter `X` (gradient `G`, step `t = 1, 2, ...`), in f32 whatever the parameters'
//! dtype (forgather computes in f32: `grad.float()`):
//!
//! - decay: `beta2_t = min(1 - t^DECAY_RATE, BETA2_MAX)` (paper Section 7.1, `1 - t^-0.8`;
//!   forgather clamps it at 0.999, which binds only after 5623 steps). At `t = 1` it is 0,
//!   so the first statistics are the first gradient's: no bias correction (Section 7).
//! - a matrix `G` of shape `[..., m]` is seen as `[n, m]`, `n` the product of the leading
//!   dimensions (forgather reshapes `grad.reshape(-1, grad.shape[-1])`; the paper's matrices
//!   are rank 2, and memwall's parameters are rank 1 or 2):
//!   `R_t = beta2_t R_{t-1} + (1 - beta2_t) (G^2 + EPS1) 1_m` (row sums, `[n]`),
//!   `C_t = beta2_t C_{t-1} + (1 - beta2_t) 1_n^T (G^2 + EPS1)` (column sums, `[m]`),
//!   `V_t = R_t C_t / (1_n^T R_t)` (rank one, never stored) and `U_t = G / sqrt(V_t)`
//!   (Algorithm 4). The state is `n + m` values instead of Adam's `n m`.
//! - a vector `G` of shape `[n]`: `V_t = beta2_t V_{t-1} + (1 - beta2_t) (G^2 + EPS1)` (`[n]`)
//!   and `U_t = G / sqrt(V_t)` (Algorithm 5).
//! - update clipping (Section 6): `U_t <- U_t / max(1, RMS(U_t) / CLIP_THRESHOLD)`, RMS over the
//!   whole tensor.
//! - step: `X_t = X_{t-1} (1 - lr weight_decay) - lr U_t`: decoupled weight decay (Loshchilov
//!   and Hutter 2019) scaled by the learning rate, as forgather applies it, and an absolute
//!   learning rate `lr` (forgather's default `relative_step = False`: the paper's relative step
//!   `alpha_t = max(EPS2, RMS(X_{t-1})) rho_t`, Section 8, is not used, so `EPS2` plays no
//!   part).
//!
//! No first moment (the paper's `beta1 = 0`, Section 4; forgather's `betas[0]` is unused).
//! Parameters in f16 or bf16 get the f32 result rounded to nearest on the cast back; forgather
//! rounds bf16 parameters stochastically (`bf16_stochastic_round`), which this does not
//! reproduce. The statistics are f32 for every parameter dtype.
//!
//! The update of one tensor is a backend operation ([`AdafactorBackend::adafactor_update`]):
//! composed of Burn operations ([`adafactor_composed`]) on flex and Burn's fused backends, one
//! pass per reduction in memwall's CubeCL kernels on CUDA's eager rows
//! ([`crate::kernels::cube::adafactor`]).

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{LearningRate, SimpleOptimizer};
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

pub use crate::model::optim::{
    adafactor_composed, AdafactorBackend, AdafactorStats, AdafactorStep,
};

/// Exponent of the second-moment decay `beta2_t = 1 - t^DECAY_RATE` (paper Section 7.1 and
/// its proposed hyperparameters: `c = 0.8`; forgather's `decay_rate = -0.8`).
pub const DECAY_RATE: f64 = -0.8;
/// Upper bound of `beta2_t` (forgather's `betas[1] = 0.999`, a clamp not in the paper).
pub const BETA2_MAX: f64 = 0.999;
/// Added to every squared gradient before it enters the statistics (paper's `epsilon_1 =
/// 1e-30`; forgather's `eps[0]`).
pub const EPS1: f64 = 1e-30;
/// Update clipping threshold `d` (paper Section 6, proposed `d = 1`; forgather's
/// `clip_threshold = 1.0`).
pub const CLIP_THRESHOLD: f64 = 1.0;
/// The paper's `epsilon_2 = 1e-3` (forgather's `eps[1]`): the floor of the relative step
/// size's parameter scale, unused with forgather's `relative_step = False`. Recorded for the
/// documentation only.
pub const EPS2: f64 = 1e-3;

/// The decay `beta2_t` of step `t` (1-based).
pub fn beta2(t: usize) -> f64 {
    (1.0 - (t as f64).powf(DECAY_RATE)).min(BETA2_MAX)
}

/// Adafactor's settings: the weight decay; the other hyperparameters are the constants of
/// this module and the learning rate comes with each step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AdafactorConfig {
    /// Decoupled weight decay `lambda`: each step multiplies the parameters by
    /// `1 - lr lambda`.
    pub weight_decay: f64,
}

impl AdafactorConfig {
    /// The settings with decoupled weight decay `weight_decay`.
    pub fn new(weight_decay: f64) -> Self {
        AdafactorConfig { weight_decay }
    }

    /// The per-tensor optimizer.
    pub fn build(&self) -> Adafactor {
        Adafactor {
            weight_decay: self.weight_decay,
        }
    }

    /// The optimizer of module `M` on the autodiff backend `B`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
    ) -> OptimizerAdaptor<Adafactor, M, B>
    where
        B::InnerBackend: AdafactorBackend,
    {
        OptimizerAdaptor::from(self.build())
    }
}

/// Adafactor (see the module documentation), one parameter tensor at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adafactor {
    weight_decay: f64,
}

/// Adafactor's state of one parameter tensor of rank `D`, f32.
///
/// Rank 1 (`[n]`): `row` is the unfactored second moment `V`, `[n]`, and `col` is `None`.
/// Rank `D >= 2` (`[d_0, ..., d_{D-2}, m]`): `row` holds the row sums `R`, `[n]` with
/// `n = d_0 ... d_{D-2}`, and `col` the column sums `C`, `[m]`.
#[derive(Record, Clone)]
pub struct AdafactorState<B: Backend, const D: usize> {
    /// Steps taken so far (`t` of the last step).
    pub time: usize,
    /// `R` (rank >= 2) or `V` (rank 1).
    pub row: Tensor<B, 1>,
    /// `C` (rank >= 2).
    pub col: Option<Tensor<B, 1>>,
}

impl<B: Backend, const D: usize> AdafactorState<B, D> {
    /// The number of f32 second-moment values held: `n + m` for a matrix, `n` for a vector.
    pub fn len(&self) -> usize {
        self.row.dims()[0] + self.col.as_ref().map_or(0, |c| c.dims()[0])
    }

    /// Whether the state holds no values (a tensor with no elements).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: AdafactorBackend> SimpleOptimizer<B> for Adafactor {
    type State<const D: usize> = AdafactorState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let time = state.as_ref().map_or(1, |s| s.time + 1);
        let h = AdafactorStep {
            lr,
            weight_decay: self.weight_decay,
            beta2: beta2(time),
            eps1: EPS1,
            clip_threshold: CLIP_THRESHOLD,
        };
        let stats = state.map(|s| (s.row, s.col));
        let (updated, (row, col)) = B::adafactor_update(tensor, grad, stats, &h);
        (updated, Some(AdafactorState { time, row, col }))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        AdafactorState {
            time: state.time,
            row: state.row.to_device(device),
            col: state.col.map(|c| c.to_device(device)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decay_starts_at_zero_and_is_clamped() {
        assert_eq!(beta2(1), 0.0);
        assert!((beta2(2) - (1.0 - 2f64.powf(-0.8))).abs() < 1e-15);
        assert_eq!(beta2(1_000_000), BETA2_MAX);
        assert!(beta2(5000) < BETA2_MAX && beta2(6000) == BETA2_MAX);
    }
}
