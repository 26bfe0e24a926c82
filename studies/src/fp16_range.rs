//! Which layers are sensitive to fp16's range, from the CMU 15-442 lecture
//! (`003_c07c09ab371a2f69.txt`, slide "Mixed Precision": "Some layers are more sensitive to
//! dynamic range").
//!
//! memwall's transformer trains in f32 on the CPU on the TinyStories excerpt (byte-level tokens:
//! each byte of a story is a token, 256 ends a story), and at the steps the experiment file
//! names, one fixed batch's step is surveyed by the runner's unit executor
//! ([`memwall_runner::train::survey`]): every unit's output, the gradient of every unit's output
//! and every weight gradient, each cast to f16 and to bf16 by Burn and back. The study counts,
//! per tensor, the nonzero values each format flushes to zero or overflows (lost) and those it
//! keeps only as subnormals, and names the tensors that lose at least `sensitive_lost_pct`
//! percent.
//!
//! May import: [`super`] (the study trait and helpers), [`memwall_document::content`], the
//! runner's survey and data types (Burn's flex backend as the survey's device); never the driver
//! or the report renderers.

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::params::{int_in, list, num_above, ParamResult};
use super::{CiteAs, Cited, DemoError, InProcessStudy};
use crate::document::content::{Figure, Measure, Section, Table};
use crate::params::ParamError;
use memwall_core::spec::ModelConfig;
use memwall_runner::data::TokenStream;
use memwall_runner::train::survey::{
    survey_training, SurveyKind, SurveyPoint, SurveyTraining, TensorRange,
};

/// The end-of-story token of the byte-level tokens (bytes are 0..=255).
pub const EOS: u32 = 256;
/// The byte-level vocabulary: 256 bytes and [`EOS`].
pub const VOCAB: usize = 257;
/// The separator of stories in TinyStories' text files.
const STORY_END: &str = "<|endoftext|>";

/// The model of the survey: [`ModelConfig`] without the vocabulary (byte-level, [`VOCAB`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurveyModel {
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads (divides `d_model`).
    pub heads: usize,
    /// Hidden width of the MLP.
    pub d_ff: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
}

/// The `[params]` of the study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeParams {
    /// The model.
    pub model: SurveyModel,
    /// The text file, on the data search path under `tinystories/`.
    pub text: String,
    /// Optimizer steps before each survey, ascending (0: at initialization).
    pub survey_at: Vec<usize>,
    /// AdamW's learning rate.
    pub lr: f64,
    /// Seed of the initialization and of the training batches.
    pub seed: u64,
    /// A tensor is sensitive to a format's range when the format loses (flushes to zero or
    /// overflows) at least this share of its nonzero values, percent.
    pub sensitive_lost_pct: f64,
}

/// What the study measured: the survey at each step asked for, with the parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeResult {
    /// The parameters it ran with.
    pub params: RangeParams,
    /// Tokens of the text (bytes and story ends).
    pub tokens: usize,
    /// The surveys, in step order.
    pub points: Vec<SurveyPoint>,
}

/// The study ([`InProcessStudy`]).
pub struct Fp16Range;

impl InProcessStudy for Fp16Range {
    type Params = RangeParams;
    type Output = RangeResult;
    type Error = DemoError;
    fn validate(params: &RangeParams) -> Result<(), ParamError> {
        validate(params)
    }
    const DATA: Option<&'static str> = Some("tinystories");
    fn run(params: &RangeParams, data_dir: &Path) -> Result<RangeResult, DemoError> {
        run(params, data_dir)
    }
    type Cited = CiteAs;
    fn sections(output: &RangeResult, cited: &Cited<CiteAs>) -> Vec<Section> {
        vec![section(output, cited)]
    }
    fn measures(output: &RangeResult) -> Vec<Measure> {
        measures(output)
    }
}

/// Checks `p`: 1 to 16 layers, d_model 8 to 512 divisible by heads (1 to 16), d_ff 8 to 4096,
/// seq_len 8 to 512, batch 1 to 64, 1 to 8 survey steps in 0..=2000 ascending, lr in (0, 1],
/// the sensitivity share in (0, 100], and a text path under `tinystories/`.
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &RangeParams) -> ParamResult {
    let m = &p.model;
    int_in("model.layers", m.layers, 1, 16)?;
    int_in("model.d_model", m.d_model, 8, 512)?;
    int_in("model.heads", m.heads, 1, 16)?;
    super::params::require(m.d_model.is_multiple_of(m.heads), "model.heads", || {
        format!(
            "must divide model.d_model = {} (got {})",
            m.d_model, m.heads
        )
    })?;
    int_in("model.d_ff", m.d_ff, 8, 4096)?;
    int_in("model.seq_len", m.seq_len, 8, 512)?;
    int_in("model.batch", m.batch, 1, 64)?;
    list("survey_at", &p.survey_at, 1, 8, |f, &s| {
        int_in(f, s, 0, 2000)
    })?;
    super::params::require(
        p.survey_at.windows(2).all(|w| w[0] < w[1]),
        "survey_at",
        || format!("must be ascending (got {:?})", p.survey_at),
    )?;
    num_above("lr", p.lr, 0.0, 1.0)?;
    num_above("sensitive_lost_pct", p.sensitive_lost_pct, 0.0, 100.0)?;
    super::params::require(p.text.starts_with("tinystories/"), "text", || {
        format!(
            "must be a file under tinystories/ on the data search path (got {:?})",
            p.text
        )
    })
}

/// The byte-level tokens of `text`: each story's bytes, then [`EOS`] (stories separated by
/// `<|endoftext|>`, trimmed, empty ones dropped).
pub fn byte_tokens(text: &str) -> Vec<u32> {
    let mut out = Vec::with_capacity(text.len());
    for story in text
        .split(STORY_END)
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        out.extend(story.bytes().map(u32::from));
        out.push(EOS);
    }
    out
}

/// Trains and surveys as `p` says, reading `<data_dir>/<p.text>`.
///
/// # Errors
/// [`DemoError::Param`] for parameters out of range; [`DemoError::Check`] when the text does not
/// read or the survey fails (naming the file or the reason).
pub fn run(p: &RangeParams, data_dir: &Path) -> Result<RangeResult, DemoError> {
    validate(p)?;
    let path = data_dir.join(&p.text);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| DemoError::Check(format!("reading {}: {e}", path.display())))?;
    let tokens = byte_tokens(&text);
    let m = &p.model;
    let training = SurveyTraining {
        model: ModelConfig {
            layers: m.layers,
            d_model: m.d_model,
            heads: m.heads,
            d_ff: m.d_ff,
            seq_len: m.seq_len,
            batch: m.batch,
            vocab: VOCAB,
            tie_embeddings: true,
        },
        survey_at: p.survey_at.clone(),
        lr: p.lr,
        seed: p.seed,
    };
    let n = tokens.len();
    let stream = TokenStream {
        tokens,
        eos_id: EOS,
    };
    type Cpu = burn::backend::Autodiff<burn::backend::Flex>;
    let points = survey_training::<Cpu>(stream, &training)
        .map_err(|e| DemoError::Check(format!("{}: {e}", path.display())))?;
    Ok(RangeResult {
        params: p.clone(),
        tokens: n,
        points,
    })
}

/// Which format a share is of.
#[derive(Debug, Clone, Copy)]
enum Format {
    F16,
    Bf16,
}

fn rounding(t: &TensorRange, f: Format) -> &memwall_runner::train::survey::Rounding {
    match f {
        Format::F16 => &t.f16,
        Format::Bf16 => &t.bf16,
    }
}

/// Share of the point's tensors (per block, unit and kind) that `f` loses at least
/// `threshold` percent of, percent (NaN without tensors).
fn sensitive_pct(point: &SurveyPoint, f: Format, threshold: f64) -> f64 {
    let n = point.tensors.len();
    let hit = point
        .tensors
        .iter()
        .filter(|t| t.lost_pct(rounding(t, f)) >= threshold)
        .count();
    100.0 * hit as f64 / n as f64
}

/// The largest lost share of a tensor whose kind passes `kinds`, percent.
fn max_lost_pct(point: &SurveyPoint, f: Format, kinds: &dyn Fn(SurveyKind) -> bool) -> f64 {
    point
        .tensors
        .iter()
        .filter(|t| kinds(t.kind))
        .map(|t| t.lost_pct(rounding(t, f)))
        .fold(f64::NAN, f64::max)
}

/// The tensors of one unit and kind over every block, as one (the table's rows).
fn by_unit(point: &SurveyPoint) -> Vec<TensorRange> {
    let mut out: Vec<TensorRange> = Vec::new();
    for t in &point.tensors {
        match out
            .iter_mut()
            .find(|o| o.name == t.name && o.kind == t.kind)
        {
            Some(o) => o.merge(t),
            None => out.push(TensorRange {
                block: None,
                ..t.clone()
            }),
        }
    }
    out.sort_by_key(|t| t.kind);
    out
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// last survey (after the most training):
///
/// - `fp16_sensitive_tensor_pct` (%): share of the surveyed tensors (one per block, unit and
///   kind, and the logits) of which f16 loses at least `sensitive_lost_pct` percent of the
///   nonzero values (flushed to zero or overflowed).
/// - `bf16_sensitive_tensor_pct` (%): the same for bf16.
/// - `fp16_activation_max_lost_pct`, `fp16_gradient_max_lost_pct` (%): the largest share f16
///   loses of one activation tensor, and of one gradient or weight-gradient tensor.
pub fn measures(r: &RangeResult) -> Vec<Measure> {
    use memwall_core::spec::provenance::Provenance::Measured;
    let Some(point) = r.points.last() else {
        return Vec::new();
    };
    let threshold = r.params.sensitive_lost_pct;
    let what = |format: &str| {
        Measured(format!(
            "the values of a real f32 training step of memwall's transformer (after {} AdamW \
             steps), recorded by the unit executor and cast to {format} and back by Burn on the \
             CPU (flex): the share of tensors that lose at least {threshold}% of their nonzero \
             values (flushed to zero or overflowed)",
            point.step
        ))
    };
    let lost = |kinds: &str| {
        Measured(format!(
            "the largest share of one {kinds} tensor's nonzero values that Burn's cast to f16 \
             flushed to zero or overflowed, in a real f32 training step after {} steps",
            point.step
        ))
    };
    vec![
        Measure::new(
            "fp16_sensitive_tensor_pct",
            sensitive_pct(point, Format::F16, threshold),
            "%",
            1,
            what("f16"),
        ),
        Measure::new(
            "bf16_sensitive_tensor_pct",
            sensitive_pct(point, Format::Bf16, threshold),
            "%",
            1,
            what("bf16"),
        ),
        Measure::new(
            "fp16_activation_max_lost_pct",
            max_lost_pct(point, Format::F16, &|k| k == SurveyKind::Activation),
            "%",
            3,
            lost("activation"),
        ),
        Measure::new(
            "fp16_gradient_max_lost_pct",
            max_lost_pct(point, Format::F16, &|k| k != SurveyKind::Activation),
            "%",
            3,
            lost("gradient or weight-gradient"),
        ),
    ]
}

/// A value in scientific notation with 2 significant digits ("-" for none).
fn sci(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.1e}"))
}

/// One table row: a unit's tensors of one kind over every block.
fn row(t: &TensorRange) -> Vec<String> {
    vec![
        t.name.clone(),
        t.kind.as_str().into(),
        t.nonzero().to_string(),
        sci(Some(t.max_abs)),
        sci(t.min_nonzero_abs),
        format!("{:.3}", t.lost_pct(&t.f16)),
        format!("{:.2}", t.subnormal_pct(&t.f16)),
        t.f16.overflow.to_string(),
        format!("{:.3}", t.lost_pct(&t.bf16)),
    ]
}

/// The names of the point's sensitive tensors for f16, grouped by unit and kind, with their
/// blocks ("mlp_in (gradient): every block", "qkv (gradient): blocks 0, 1").
fn sensitive_names(point: &SurveyPoint, threshold: f64, layers: usize) -> Vec<String> {
    let mut out: Vec<(String, Vec<usize>, bool)> = Vec::new();
    for t in &point.tensors {
        if t.lost_pct(&t.f16) < threshold {
            continue;
        }
        let key = format!("{} ({})", t.name, t.kind.as_str());
        let i = match out.iter().position(|(k, _, _)| *k == key) {
            Some(i) => i,
            None => {
                out.push((key, Vec::new(), false));
                out.len() - 1
            }
        };
        match t.block {
            Some(b) => out[i].1.push(b),
            None => out[i].2 = true,
        }
    }
    out.into_iter()
        .map(|(key, mut blocks, head)| {
            blocks.sort_unstable();
            let at = if head {
                "the head".to_string()
            } else if blocks.len() == layers {
                "every block".to_string()
            } else {
                let list: Vec<String> = blocks.iter().map(usize::to_string).collect();
                format!(
                    "block{} {}",
                    if blocks.len() > 1 { "s" } else { "" },
                    list.join(", ")
                )
            };
            format!("{key}: {at}")
        })
        .collect()
}

/// The study's section: the lecture's claim, the sensitive tensors, a table per survey and a
/// figure of the share f16 loses per unit and kind.
pub fn section(r: &RangeResult, cited: &Cited<CiteAs>) -> Section {
    let src = cited.src();
    let p = &r.params;
    let m = &p.model;
    let threshold = p.sensitive_lost_pct;
    let ours = match r.points.last() {
        None => "No survey ran.".to_string(),
        Some(last) => {
            let names = sensitive_names(last, threshold, m.layers);
            format!(
                "After {} AdamW steps, f16 loses at least {threshold}% of the nonzero values of \
                 {:.1}% of the step's {} tensors (bf16: {:.1}%): {}. The largest share lost of \
                 an activation is {:.3}%, of a gradient {:.3}% (Burn's casts on the CPU, one \
                 surveyed batch).",
                last.step,
                sensitive_pct(last, Format::F16, threshold),
                last.tensors.len(),
                sensitive_pct(last, Format::Bf16, threshold),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join("; ")
                },
                max_lost_pct(last, Format::F16, &|k| k == SurveyKind::Activation),
                max_lost_pct(last, Format::F16, &|k| k != SurveyKind::Activation),
            )
        }
    };
    let tables = r
        .points
        .iter()
        .map(|point| Table {
            caption: format!(
                "Step {} (surveyed batch's loss {:.3} nats): each unit's tensors over the {} blocks",
                point.step, point.loss, m.layers
            ),
            columns: vec![
                "unit".into(),
                "kind".into(),
                "nonzero values".into(),
                "max |x|".into(),
                "min nonzero |x|".into(),
                "f16 lost (%)".into(),
                "f16 subnormal (%)".into(),
                "f16 overflows".into(),
                "bf16 lost (%)".into(),
            ],
            rows: by_unit(point).iter().map(row).collect(),
            notes: Vec::new(),
        })
        .collect();
    let figures = match (r.points.first(), r.points.last()) {
        (Some(first), Some(last)) => {
            let units = by_unit(last);
            let categories: Vec<String> = units
                .iter()
                .map(|t| format!("{} ({})", t.name, t.kind.as_str()))
                .collect();
            let share = |point: &SurveyPoint| -> Vec<f64> {
                let rows = by_unit(point);
                units
                    .iter()
                    .map(|u| {
                        rows.iter()
                            .find(|t| t.name == u.name && t.kind == u.kind)
                            .map_or(f64::NAN, |t| t.lost_pct(&t.f16) + t.subnormal_pct(&t.f16))
                    })
                    .collect()
            };
            let mut series = vec![(format!("step {}", first.step), share(first))];
            if last.step != first.step {
                series.push((format!("step {}", last.step), share(last)));
            }
            vec![Figure::grouped_bars(
                "fp16_out_of_normal_range",
                "Share of each tensor's nonzero values outside f16's normal range",
                "unit (kind), over every block",
                "flushed, overflowed or subnormal in f16 (%)",
                &categories,
                series,
            )]
        }
        _ => Vec::new(),
    };
    Section {
        details: None,
        title: "Which layers are sensitive to fp16's range".into(),
        claim: format!(
            "{src}, slide \"Mixed Precision\": \"Some layers are more sensitive to dynamic range\"."
        ),
        ours,
        notes: vec![
            format!(
                "The model: {} blocks, d_model {}, {} heads, d_ff {}, sequence {}, batch {}, byte-level tokens of {} ({} tokens; vocabulary {VOCAB}), f32, AdamW at lr {}, seed {}; surveyed at steps {:?} on one fixed batch (the text's first windows).",
                m.layers, m.d_model, m.heads, m.d_ff, m.seq_len, m.batch, p.text, r.tokens, p.lr, p.seed, p.survey_at
            ),
            "Each value of the surveyed step (every unit's output, the gradient of every unit's output, every weight gradient, the logits) is cast to f16 and to bf16 by Burn on the CPU (flex, round to nearest) and back. Lost: a nonzero value that became zero (below 2^-25 in f16) or a finite one that became infinite (at or above 65520); subnormal: kept with fewer significant bits (below 2^-14 = 6.1e-5 in f16). A gradient is of the mean loss over the batch's tokens, without loss scaling: what f16 training without a loss scale would store.".into(),
            format!("A tensor counts as sensitive when a format loses at least {threshold}% of its nonzero values; the tensors are one per block, unit and kind (q, k and v together; a norm's γ and β together), and the logits."),
        ],
        tables,
        figures,
    }
}

#[cfg(test)]
#[path = "fp16_range_tests.rs"]
mod tests;
