//! AdamW as memwall's optimizer: the update of one parameter tensor is one backend operation
//! ([`AdamWBackend::adamw_update`]).
//!
//! Source: Loshchilov and Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019;
//! arXiv:1711.05101), Algorithm 2, with Adam's moments and bias correction (Kingma and Ba,
//! "Adam", ICLR 2015, Algorithm 1) and the weight decay scaled by the learning rate, as Burn
//! 0.21's `AdamW` (burn-optim `optim/adamw.rs`) applies it. Per parameter `p` (gradient `g`,
//! step `t = 1, 2, ...`):
//!
//! - `m_t = beta_1 m_{t-1} + (1 - beta_1) g`, `v_t = beta_2 v_{t-1} + (1 - beta_2) g^2`
//!   (`m_0 = v_0 = 0`);
//! - `delta = (m_t / (1 - beta_1^t)) / (sqrt(v_t / (1 - beta_2^t)) + epsilon)`;
//! - `p_t = p_{t-1} (1 - lr weight_decay) - lr delta`.
//!
//! Defaults as Burn's `AdamWConfig`: `beta_1 = 0.9`, `beta_2 = 0.999`, `epsilon = 1e-5`. The
//! moments have the parameter's dtype, as in Burn and in PyTorch's `torch.optim.AdamW`.
//!
//! On flex the update is memwall's kernel ([`crate::kernels::adamw`]): one parallel pass that
//! reads the parameter, the gradient and both moments, computes in f32 whatever their dtype,
//! and rounds each result once (PyTorch's fused CPU AdamW computes bf16 parameters in f32 the
//! same way). In f32 it performs Burn's operations in Burn's order, so its results are Burn's
//! bit for bit; in bf16 Burn's composed update rounds every intermediate, and each scalar
//! (0.999 becomes 1.0 in bf16), to bf16. Every other backend runs the composed update, which
//! is Burn's `AdamW` operation for operation (the reference of the tests).

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{LearningRate, SimpleOptimizer};
use burn::record::Record;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;

pub use crate::kernels::adamw::AdamWStep;
pub use crate::model::optim::{composed, AdamWBackend};

/// AdamW's settings (Burn's `AdamWConfig` defaults but for the weight decay, which the job
/// gives).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// First-moment decay (default 0.9).
    pub beta_1: f32,
    /// Second-moment decay (default 0.999).
    pub beta_2: f32,
    /// Denominator term (default 1e-5, Burn's default).
    pub epsilon: f32,
    /// Decoupled weight decay.
    pub weight_decay: f32,
}

impl AdamWConfig {
    /// The defaults with decoupled weight decay `weight_decay`.
    pub fn new(weight_decay: f32) -> Self {
        AdamWConfig {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-5,
            weight_decay,
        }
    }

    /// The optimizer of module `M` on the autodiff backend `B`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> OptimizerAdaptor<AdamW, M, B>
    where
        B::InnerBackend: AdamWBackend,
    {
        OptimizerAdaptor::from(AdamW { config: *self })
    }
}

/// AdamW (see the module documentation), one parameter tensor at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamW {
    config: AdamWConfig,
}

/// AdamW's state of one parameter tensor: both moments, in the parameter's shape and dtype.
#[derive(Record, Clone)]
pub struct AdamWState<B: Backend, const D: usize> {
    /// Steps taken so far (`t` of the last step).
    pub time: usize,
    /// First moment `m_t`.
    pub moment_1: Tensor<B, D>,
    /// Second moment `v_t`.
    pub moment_2: Tensor<B, D>,
}

impl<B: AdamWBackend> SimpleOptimizer<B> for AdamW {
    type State<const D: usize> = AdamWState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let c = self.config;
        let time = state.as_ref().map_or(1, |s| s.time + 1);
        let h = AdamWStep {
            lr,
            beta_1: c.beta_1,
            beta_2: c.beta_2,
            epsilon: c.epsilon,
            weight_decay: c.weight_decay,
            time,
        };
        let moments = state.map(|s| (s.moment_1, s.moment_2));
        let (p, moment_1, moment_2) = B::adamw_update(tensor, grad, moments, &h);
        (
            p,
            Some(AdamWState {
                time,
                moment_1,
                moment_2,
            }),
        )
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        state.moment_1 = state.moment_1.to_device(device);
        state.moment_2 = state.moment_2.to_device(device);
        state
    }
}

#[cfg(test)]
#[path = "adamw_tests.rs"]
mod tests;
