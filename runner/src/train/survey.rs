//! A range survey of real training: which tensors of the transformer's step a 16-bit format
//! cannot hold.
//!
//! The CMU 15-442 lecture's "Mixed Precision" slide says "Some layers are more sensitive to
//! dynamic range" (`003_c07c09ab371a2f69.txt`). [`range_survey`] answers it for memwall's
//! transformer: one f32 step runs through the unit executor keeping every unit output
//! ([`super::units`]), which records each value it computes: every unit's output (the
//! activations), the loss's gradient with respect to each unit's output, each unit's weight
//! gradient, and the head's logits. Each value is then cast to f16 and to bf16 *by Burn on the
//! model's backend* (`Tensor::cast`, round to nearest) and back, and the survey counts, per
//! tensor, the nonzero values the format turned into zero (flushed: below half the smallest
//! subnormal, 2^-25 for f16), into an infinity (overflow: at or above 65520 for f16, the
//! largest finite value 65504 plus half its spacing) and into a subnormal (kept with fewer
//! significant bits: below 2^-14 for f16, 2^-126 for bf16). IEEE 754-2008 binary16 for f16's
//! limits; bfloat16's are f32's exponent range (Kalamkar et al. 2019, arXiv:1905.12322).
//!
//! [`survey_training`] trains the model with AdamW in f32 (plain backward) and surveys one
//! fixed batch at the steps asked for, so a report can show the ranges at initialization and
//! after training.

use super::adamw::AdamWConfig;
use super::units::{run_units, Seen, SeenKind};
use super::{train_step, Inputs, TrainBackend};
use crate::data::{Batcher, TokenStream};
use crate::measure::NoProbe;
use crate::model::{InitModel, TransformerLm};
use burn::module::AutodiffModule;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor};
use memwall_core::spec::ModelConfig;
use memwall_core::units::UnitSet;
use serde::{Deserialize, Serialize};

/// What a 16-bit format did to one tensor's values (counts of elements).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rounding {
    /// Finite f32 values that became an infinity.
    pub overflow: u64,
    /// Nonzero f32 values that became zero.
    pub flushed: u64,
    /// Nonzero f32 values that became a (nonzero) subnormal of the format.
    pub subnormal: u64,
}

impl Rounding {
    fn add(&mut self, o: Rounding) {
        self.overflow += o.overflow;
        self.flushed += o.flushed;
        self.subnormal += o.subnormal;
    }

    /// Values the format lost outright (flushed to zero or overflowed).
    pub fn lost(&self) -> u64 {
        self.overflow + self.flushed
    }
}

/// The range of one tensor of a surveyed step and what f16 and bf16 do to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorRange {
    /// The block (0-based); `None` for the head.
    pub block: Option<usize>,
    /// The unit it belongs to ([`memwall_core::units::Unit::name`]), `attention.lse` or
    /// `logits` (see [`Seen::name`]).
    pub name: String,
    /// Activation, gradient of a unit's output, or weight gradient.
    pub kind: SurveyKind,
    /// Elements (the unit's tensors together: q, k and v; a norm's γ and β).
    pub elements: u64,
    /// Elements that are exactly zero in f32.
    pub zeros: u64,
    /// Largest |x|.
    pub max_abs: f64,
    /// Smallest nonzero |x|; `None` when every element is zero.
    pub min_nonzero_abs: Option<f64>,
    /// What casting to f16 did.
    pub f16: Rounding,
    /// What casting to bf16 did.
    pub bf16: Rounding,
}

impl TensorRange {
    /// Nonzero elements.
    pub fn nonzero(&self) -> u64 {
        self.elements - self.zeros
    }

    /// Adds `other`'s counts to this one's, keeping the larger max and the smaller min: two
    /// tensors of one unit (q, k and v; γ and β), or one unit's tensors over several blocks.
    pub fn merge(&mut self, other: &TensorRange) {
        self.elements += other.elements;
        self.zeros += other.zeros;
        self.max_abs = self.max_abs.max(other.max_abs);
        self.min_nonzero_abs = match (self.min_nonzero_abs, other.min_nonzero_abs) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        self.f16.add(other.f16);
        self.bf16.add(other.bf16);
    }

    /// Share of the nonzero elements that `r` lost (flushed or overflowed), percent (0 when
    /// there are none).
    pub fn lost_pct(&self, r: &Rounding) -> f64 {
        match self.nonzero() {
            0 => 0.0,
            n => 100.0 * r.lost() as f64 / n as f64,
        }
    }

    /// Share of the nonzero elements that `r` made subnormal, percent.
    pub fn subnormal_pct(&self, r: &Rounding) -> f64 {
        match self.nonzero() {
            0 => 0.0,
            n => 100.0 * r.subnormal as f64 / n as f64,
        }
    }
}

/// [`SeenKind`] as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SurveyKind {
    /// A unit's output, or the logits.
    Activation,
    /// The loss's gradient with respect to a unit's output.
    Gradient,
    /// The loss's gradient with respect to a unit's parameters.
    WeightGradient,
}

impl From<SeenKind> for SurveyKind {
    fn from(k: SeenKind) -> Self {
        match k {
            SeenKind::Activation => SurveyKind::Activation,
            SeenKind::Gradient => SurveyKind::Gradient,
            SeenKind::WeightGradient => SurveyKind::WeightGradient,
        }
    }
}

impl SurveyKind {
    /// "activation", "gradient" or "weight gradient".
    pub fn as_str(self) -> &'static str {
        match self {
            SurveyKind::Activation => "activation",
            SurveyKind::Gradient => "gradient",
            SurveyKind::WeightGradient => "weight gradient",
        }
    }
}

/// The f32 values of `t` and what casting them to `dtype` and back gives, on `t`'s backend.
fn round_trip<I: Backend>(t: &Tensor<I, 1>, dtype: DType) -> Vec<f32> {
    t.clone()
        .cast(dtype)
        .cast(DType::F32)
        .into_data()
        .to_vec::<f32>()
        .expect("an f32 tensor reads as f32")
}

/// What the format with smallest normal value `min_normal` did to `x` (the f32 values) as
/// `y` (the same values cast to the format and back).
fn rounding(x: &[f32], y: &[f32], min_normal: f32) -> Rounding {
    let mut r = Rounding::default();
    for (&a, &b) in x.iter().zip(y) {
        if a.is_finite() && b.is_infinite() {
            r.overflow += 1;
        } else if a != 0.0 && b == 0.0 {
            r.flushed += 1;
        } else if b != 0.0 && b.abs() < min_normal {
            r.subnormal += 1;
        }
    }
    r
}

/// f16's smallest normal value, 2^-14.
const F16_MIN_NORMAL: f32 = 6.103_515_6e-5;

/// The range of one recorded value.
fn range_of<I: Backend>(s: &Seen<I>) -> TensorRange {
    let x = s
        .values
        .clone()
        .into_data()
        .to_vec::<f32>()
        .expect("the survey reads f32 values");
    let (mut zeros, mut max_abs, mut min_nonzero) = (0u64, 0f64, f64::INFINITY);
    for &v in &x {
        let a = f64::from(v.abs());
        if v == 0.0 {
            zeros += 1;
        } else {
            min_nonzero = min_nonzero.min(a);
        }
        max_abs = max_abs.max(a);
    }
    TensorRange {
        block: s.block,
        name: s.name.to_string(),
        kind: s.kind.into(),
        elements: x.len() as u64,
        zeros,
        max_abs,
        min_nonzero_abs: min_nonzero.is_finite().then_some(min_nonzero),
        f16: rounding(&x, &round_trip(&s.values, DType::F16), F16_MIN_NORMAL),
        bf16: rounding(&x, &round_trip(&s.values, DType::BF16), f32::MIN_POSITIVE),
    }
}

/// One f32 step of `model` on `inputs` through the unit executor, keeping every unit output,
/// and the range of every value it computed: per block, each unit's output, its gradient and
/// its weight gradient (one [`TensorRange`] per block, unit and kind, in the order the step
/// computed them), and the head's logits. Nothing is updated.
///
/// # Errors
/// A model whose parameters are not f32 (the survey reads f32 values), or one the unit
/// executor does not run (naive attention), with the reason.
pub fn range_survey<B: TrainBackend>(
    model: &TransformerLm<B>,
    inputs: &Inputs<B>,
) -> Result<Vec<TensorRange>, String> {
    if let Some(why) = super::units::unsupported(model) {
        return Err(why);
    }
    let dtype = model.token_embedding.weight.val().dtype();
    if dtype != DType::F32 {
        return Err(format!(
            "the range survey runs an f32 model (this one is {dtype:?}): it reads every value in f32 and casts it to each 16-bit format"
        ));
    }
    let keeps = vec![UnitSet::ALL; model.blocks.len()];
    let (_, seen) = run_units(
        model.clone(),
        inputs,
        &keeps,
        None,
        &mut |_| {},
        Some(Vec::new()),
    );
    let mut out: Vec<TensorRange> = Vec::new();
    for s in &seen {
        let r = range_of(s);
        match out
            .iter_mut()
            .find(|o| o.block == r.block && o.name == r.name && o.kind == r.kind)
        {
            Some(o) => o.merge(&r),
            None => out.push(r),
        }
    }
    Ok(out)
}

/// The ranges of one surveyed step ([`survey_training`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveyPoint {
    /// Optimizer steps taken before the survey (0: at initialization).
    pub step: usize,
    /// The surveyed batch's mean cross-entropy (nats) before the survey's step.
    pub loss: f64,
    /// Every tensor's range ([`range_survey`]).
    pub tensors: Vec<TensorRange>,
}

/// How [`survey_training`] trains.
#[derive(Debug, Clone)]
pub struct SurveyTraining {
    /// The model (f32; `vocab` must exceed every token id of the stream).
    pub model: ModelConfig,
    /// Optimizer steps before each survey, ascending (0: at initialization).
    pub survey_at: Vec<usize>,
    /// AdamW's learning rate.
    pub lr: f64,
    /// Seed of the initialization and of the training batches.
    pub seed: u64,
}

/// Trains `t.model` in f32 with AdamW (plain backward, a random batch of windows of `stream`
/// per step) and surveys the stream's first batch ([`Batcher::sequential`] 0) with
/// [`range_survey`] after each of `t.survey_at` steps; on `B` with the device's default.
///
/// # Errors
/// A stream shorter than one window, `survey_at` not ascending, a token id not below the
/// vocabulary, or [`range_survey`]'s.
pub fn survey_training<B: TrainBackend>(
    stream: TokenStream,
    t: &SurveyTraining,
) -> Result<Vec<SurveyPoint>, String>
where
    B::Device: Default,
{
    if t.survey_at.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("survey_at {:?} is not ascending", t.survey_at));
    }
    if let Some(&id) = stream.tokens.iter().max() {
        if id as usize >= t.model.vocab {
            return Err(format!(
                "token id {id} is not below the vocabulary {}",
                t.model.vocab
            ));
        }
    }
    let device = B::Device::default();
    B::seed(&device, t.seed);
    let mut model = t.model.init::<B>(&device);
    let mut batcher =
        Batcher::new(stream, t.model.batch, t.model.seq_len, t.seed).map_err(|e| e.to_string())?;
    let surveyed = Inputs::<B>::new(&batcher.sequential(0), &device);
    let mut optim = AdamWConfig::new(0.0).init::<B, TransformerLm<B>>();
    let mut points = Vec::with_capacity(t.survey_at.len());
    let mut step = 0;
    for &at in &t.survey_at {
        while step < at {
            let inputs = Inputs::<B>::new(&batcher.next_random(), &device);
            model = train_step(model, &mut optim, t.lr, &inputs, None, false, &mut NoProbe).0;
            step += 1;
        }
        let loss = model.valid().forward_loss(
            surveyed.tokens.clone().inner(),
            surveyed.positions.clone().inner(),
            surveyed.targets.clone().inner(),
        );
        points.push(SurveyPoint {
            step,
            loss: super::scalar(loss),
            tensors: range_survey(&model, &surveyed)?,
        });
    }
    Ok(points)
}

#[cfg(test)]
#[path = "survey_tests.rs"]
mod tests;
