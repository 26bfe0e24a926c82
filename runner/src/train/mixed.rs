//! Mixed-precision training: f32 master weights, 16-bit compute, loss scaling.
//!
//! Micikevicius et al. 2018, "Mixed Precision Training" (ICLR): the optimizer keeps f32
//! parameters and state (§3.1); each step casts them to f16/bf16, runs forward and backward in
//! 16 bits on the loss multiplied by S (§3.2), casts the gradients back to f32 and divides them
//! by S before the update. Dynamic scaling follows PyTorch's `GradScaler`: a step whose
//! gradients hold an inf or NaN is skipped and S halves; after `growth_interval` clean steps
//! S doubles.

use super::Inputs;
use crate::measure::{MemoryProbe, Phase};
use crate::model::{cast_model, TransformerLm};
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};
use memwall_core::spec::{LossScale, Precision};

/// The loss scale S and its update rule across steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaler {
    scale: f64,
    /// Clean steps before S doubles; `None` for a fixed scale.
    growth_interval: Option<usize>,
    /// Skip steps with non-finite gradients (every scaled configuration; without scaling the
    /// update is applied as plain training would).
    skip_non_finite: bool,
    clean_steps: usize,
}

impl LossScaler {
    /// Halving factor of S after an overflow (PyTorch `GradScaler`'s default).
    pub const BACKOFF: f64 = 0.5;
    /// Doubling factor of S after `growth_interval` clean steps (PyTorch `GradScaler`'s
    /// default).
    pub const GROWTH: f64 = 2.0;

    /// The scaler of a configuration: `None` means S = 1 and every update applied.
    pub fn new(spec: Option<LossScale>) -> Self {
        match spec {
            None => LossScaler {
                scale: 1.0,
                growth_interval: None,
                skip_non_finite: false,
                clean_steps: 0,
            },
            Some(LossScale::Static(s)) => LossScaler {
                scale: s,
                growth_interval: None,
                skip_non_finite: true,
                clean_steps: 0,
            },
            Some(LossScale::Dynamic {
                init,
                growth_interval,
            }) => LossScaler {
                scale: init,
                growth_interval: Some(growth_interval),
                skip_non_finite: true,
                clean_steps: 0,
            },
        }
    }

    /// The current scale S.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Records whether the step's gradients were all finite and returns whether its update
    /// is applied. Dynamic scaling halves S on an overflow and doubles it after
    /// `growth_interval` consecutive clean steps.
    pub fn update(&mut self, finite: bool) -> bool {
        if let Some(interval) = self.growth_interval {
            if finite {
                self.clean_steps += 1;
                if self.clean_steps >= interval {
                    self.scale *= Self::GROWTH;
                    self.clean_steps = 0;
                }
            } else {
                self.scale *= Self::BACKOFF;
                self.clean_steps = 0;
            }
        }
        finite || !self.skip_non_finite
    }
}

/// What a mixed-precision step did besides updating the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixedStepInfo {
    /// The scale S the backward pass used.
    pub scale: f64,
    /// The update was skipped (non-finite gradients under loss scaling).
    pub skipped: bool,
    /// Fraction of the 16-bit gradient entries that are exactly zero, before unscaling.
    pub zero_fraction: f64,
    /// Every unscaled f32 gradient is finite.
    pub finite: bool,
}

/// Moves each parameter's 16-bit gradient to f32 and divides it by S, counting zero entries
/// and non-finite entries on the device (one read-back per step, not one per parameter).
struct Unscale<'a, B: burn::tensor::backend::Backend> {
    grads: &'a mut GradientsParams,
    inv_scale: f64,
    total: f64,
    /// Running `[zero entries, non-finite entries]` over the parameters visited so far.
    counts: Option<Tensor<B, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unscale<'_, B::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        self.total += g.shape().num_elements() as f64;
        let zeros = g.clone().equal_elem(0.0).int().sum().float();
        let g = g.cast(DType::F32);
        let g = if self.inv_scale == 1.0 {
            g
        } else {
            g.mul_scalar(self.inv_scale)
        };
        let bad = g.clone().is_finite().bool_not().int().sum().float();
        let counts = Tensor::cat(vec![zeros, bad], 0);
        self.counts = Some(match self.counts.take() {
            Some(acc) => acc + counts,
            None => counts,
        });
        self.grads.register(param.id, g);
    }
}

/// One mixed-precision step on the f32 `master` model: forward and backward on its
/// `precision` copy with the loss scaled by the scaler's S, gradients unscaled into f32, and
/// the optimizer step on the master weights unless the scaler skips it.
///
/// Returns the updated master model, the (unscaled, f32) loss and the step's [`MixedStepInfo`].
pub fn mixed_step<B, O>(
    master: TransformerLm<B>,
    optim: &mut O,
    lr: f64,
    inputs: &Inputs<B>,
    precision: Precision,
    scaler: &mut LossScaler,
    probe: &mut dyn MemoryProbe,
) -> (TransformerLm<B>, Tensor<B::InnerBackend, 1>, MixedStepInfo)
where
    B: super::TrainBackend,
    O: Optimizer<TransformerLm<B>, B>,
{
    let working = cast_model(master.clone(), precision);
    let loss = inputs.loss(&working);
    probe.phase(Phase::ForwardAll);
    let loss_inner = loss.clone().inner();
    let scale = scaler.scale();
    let scaled = if scale == 1.0 {
        loss
    } else {
        loss.mul_scalar(scale)
    };
    let mut grads = GradientsParams::from_grads(scaled.backward(), &working);
    drop(working);
    let mut unscale = Unscale::<B::InnerBackend> {
        grads: &mut grads,
        inv_scale: 1.0 / scale,
        total: 0.0,
        counts: None,
    };
    master.visit(&mut unscale);
    let total = unscale.total;
    let (zeros, non_finite) = match unscale.counts.take() {
        Some(c) => {
            let v: Vec<f64> = c.into_data().iter::<f64>().collect();
            (v[0], v[1])
        }
        None => (0.0, 0.0),
    };
    let finite = non_finite == 0.0;
    probe.phase(Phase::BackwardAll);
    let applied = scaler.update(finite);
    let model = if applied {
        optim.step(lr, master, grads)
    } else {
        master
    };
    probe.phase(Phase::OptimizerStep);
    let info = MixedStepInfo {
        scale,
        skipped: !applied,
        zero_fraction: if total > 0.0 { zeros / total } else { 0.0 },
        finite,
    };
    (model, loss_inner, info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_scaler_backs_off_on_overflow_and_grows_after_clean_steps() {
        let mut s = LossScaler::new(Some(LossScale::Dynamic {
            init: 1024.0,
            growth_interval: 3,
        }));
        assert!(!s.update(false), "an overflow skips the step");
        assert_eq!(s.scale(), 512.0);
        assert!(s.update(true) && s.update(true));
        assert_eq!(s.scale(), 512.0, "two clean steps are not enough");
        assert!(s.update(true));
        assert_eq!(s.scale(), 1024.0, "the third clean step doubles S");
        // An overflow resets the count of clean steps.
        s.update(true);
        s.update(false);
        s.update(true);
        s.update(true);
        assert_eq!(s.scale(), 512.0);
    }

    #[test]
    fn static_and_absent_scalers_keep_their_scale() {
        let mut st = LossScaler::new(Some(LossScale::Static(128.0)));
        assert!(
            !st.update(false),
            "a static scale still skips non-finite steps"
        );
        assert_eq!(st.scale(), 128.0);
        let mut none = LossScaler::new(None);
        assert!(
            none.update(false),
            "without scaling the update is applied as-is"
        );
        assert_eq!(none.scale(), 1.0);
    }
}
