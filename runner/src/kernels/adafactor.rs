//! The settings of one Adafactor update, shared by the composed update
//! ([`crate::model::optim::adafactor_composed`]) and the CubeCL kernels
//! ([`crate::kernels::cube::adafactor`]); [`crate::train::adafactor`] has the algorithm, its
//! source and the values forgather uses.

/// One Adafactor update's settings ([`crate::train::adafactor`] has the algorithm, its source
/// and the values forgather uses).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdafactorStep {
    /// Learning rate (absolute: no relative step).
    pub lr: f64,
    /// Decoupled weight decay `lambda`: the parameters are multiplied by `1 - lr lambda`.
    pub weight_decay: f64,
    /// This step's decay `beta2_t` of the second-moment statistics (0 at `t = 1`).
    pub beta2: f64,
    /// `epsilon_1`, added to every squared gradient before it enters the statistics.
    pub eps1: f64,
    /// Update clipping threshold `d`: the update is divided by `max(1, RMS(U) / d)`.
    pub clip_threshold: f64,
}
