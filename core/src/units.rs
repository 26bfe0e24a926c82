//! Rematerialization inside the transformer block: the block as a chain of units whose outputs
//! are each kept for backward or recomputed, and the policies that choose them.
//!
//! A pre-norm block (`x + attn(ln(x))`, then `x + mlp(ln(x))`) runs as eight [`Unit`]s. Each
//! unit's backward needs one value the chain produced (its input, or for the attention core its
//! own output and log-sum-exp), so a plan is the set of unit outputs kept between forward and
//! backward; the executor (`memwall_runner::train::units`) recomputes every other one, once,
//! from the nearest kept value, when backward first needs it.
//!
//! The policies are the ones users of PyTorch and JAX know: [`Policy::SaveMatmuls`] keeps the
//! outputs of the matrix products and the attention core and recomputes the layer norms and the
//! activation (PyTorch's selective activation checkpointing example,
//! `torch.utils.checkpoint.create_selective_checkpoint_contexts` with a policy saving
//! `aten.mm` and scaled-dot-product attention; JAX's `jax.checkpoint_policies.dots_saveable`),
//! [`Policy::SaveNothing`] keeps only each segment's input (activation checkpointing at block
//! granularity), [`Policy::SaveEverything`] recomputes nothing.
//!
//! A policy refines a segment plan ([`crate::strategy::Segment`]): the blocks of a recomputed
//! segment keep what the policy keeps, and the last block of each recomputed segment keeps its
//! output (the next segment's checkpoint); a stored segment keeps everything.
//!
//! May import: serde and [`crate::strategy`] only.

use crate::strategy::{LayerNormSaving, Segment};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One unit of a transformer block, in execution order. The unit's *output* is what a plan keeps
/// or recomputes.
///
/// Shapes (`n` = batch · seq tokens, `d` = d_model, `f` = d_ff, `h` heads):
///
/// | unit | computes | output kept | elements |
/// |---|---|---|---|
/// | `norm_attn` | `h1 = ln1(x)` | `h1` and the f32 row mean and 1/std | `n d` (+ `2 n` f32) |
/// | `qkv` | `q, k, v = h1 Wq, h1 Wk, h1 Wv`, split into heads | `q`, `k`, `v` | `3 n d` |
/// | `attention` | `a = softmax(q kᵀ / √d_h) v` (causal), heads merged | `a` and the f32 log-sum-exp | `n d` (+ `n h` f32) |
/// | `attn_out` | `x2 = x + a Wo` | `x2` | `n d` |
/// | `norm_mlp` | `h2 = ln2(x2)` | `h2` and its row statistics | `n d` (+ `2 n` f32) |
/// | `mlp_in` | `m = h2 W1` | `m` | `n f` |
/// | `activation` | `g = GELU(m)` | `g` | `n f` |
/// | `mlp_out` | `x3 = x2 + g W2` (the next block's input) | `x3` | `n d` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// The layer norm before attention.
    NormAttn,
    /// The query, key and value projections (three matrix products), split into heads.
    Qkv,
    /// The causal attention core (memwall's memory-efficient attention), heads merged.
    Attention,
    /// The attention output projection (a matrix product) and the first residual add.
    AttnOut,
    /// The layer norm before the MLP.
    NormMlp,
    /// The MLP's first matrix product.
    MlpIn,
    /// GELU.
    Activation,
    /// The MLP's second matrix product and the second residual add.
    MlpOut,
}

impl Unit {
    /// Every unit of a block, in execution order.
    pub const ALL: [Unit; 8] = [
        Unit::NormAttn,
        Unit::Qkv,
        Unit::Attention,
        Unit::AttnOut,
        Unit::NormMlp,
        Unit::MlpIn,
        Unit::Activation,
        Unit::MlpOut,
    ];

    /// The unit's position in the block, `0..8`.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The unit's name in experiment files, job files and tables.
    pub fn name(self) -> &'static str {
        match self {
            Unit::NormAttn => "norm_attn",
            Unit::Qkv => "qkv",
            Unit::Attention => "attention",
            Unit::AttnOut => "attn_out",
            Unit::NormMlp => "norm_mlp",
            Unit::MlpIn => "mlp_in",
            Unit::Activation => "activation",
            Unit::MlpOut => "mlp_out",
        }
    }

    /// The unit of `name`, `None` if there is none.
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.name() == name)
    }

    /// Whether the unit ends in a matrix product or is the attention core: what
    /// [`Policy::SaveMatmuls`] keeps.
    pub fn is_matmul(self) -> bool {
        !matches!(self, Unit::NormAttn | Unit::NormMlp | Unit::Activation)
    }

    /// The values the unit's forward pass reads: units of the same block, and `None` for the
    /// block's input (the previous block's `mlp_out` output, or the embeddings).
    pub fn forward_inputs(self) -> &'static [Option<Unit>] {
        match self {
            Unit::NormAttn => &[None],
            Unit::Qkv => &[Some(Unit::NormAttn)],
            Unit::Attention => &[Some(Unit::Qkv)],
            Unit::AttnOut => &[None, Some(Unit::Attention)],
            Unit::NormMlp => &[Some(Unit::AttnOut)],
            Unit::MlpIn => &[Some(Unit::NormMlp)],
            Unit::Activation => &[Some(Unit::MlpIn)],
            Unit::MlpOut => &[Some(Unit::AttnOut), Some(Unit::Activation)],
        }
    }

    /// The values the unit's backward pass reads besides the gradient of its output, with the
    /// layer norms keeping what `saving` says: a matrix product its input, GELU its input, the
    /// attention core its inputs and its own output, a layer norm its input
    /// ([`LayerNormSaving::SavesInput`]) or its own output ([`LayerNormSaving::SavesOutput`]),
    /// always with its own row statistics.
    pub fn backward_inputs(self, saving: LayerNormSaving) -> &'static [Option<Unit>] {
        let output = saving == LayerNormSaving::SavesOutput;
        match self {
            Unit::NormAttn if output => &[Some(Unit::NormAttn)],
            Unit::NormAttn => &[None, Some(Unit::NormAttn)],
            Unit::Qkv => &[Some(Unit::NormAttn)],
            Unit::Attention => &[Some(Unit::Qkv), Some(Unit::Attention)],
            Unit::AttnOut => &[Some(Unit::Attention)],
            Unit::NormMlp if output => &[Some(Unit::NormMlp)],
            Unit::NormMlp => &[Some(Unit::AttnOut), Some(Unit::NormMlp)],
            Unit::MlpIn => &[Some(Unit::NormMlp)],
            Unit::Activation => &[Some(Unit::MlpIn)],
            Unit::MlpOut => &[Some(Unit::Activation)],
        }
    }

    /// Elements of the unit's output tensors per token, in the compute dtype, for a block of
    /// `d_model` features and `d_ff` MLP features (the table of [`Unit`]; the f32 statistics
    /// are in [`Unit::f32_per_token`]).
    pub fn elements_per_token(self, d_model: u64, d_ff: u64) -> u64 {
        match self {
            Unit::Qkv => 3 * d_model,
            Unit::MlpIn | Unit::Activation => d_ff,
            _ => d_model,
        }
    }

    /// f32 values per token kept beside the output: the layer norms' row mean and 1/std, the
    /// attention core's log-sum-exp per head.
    pub fn f32_per_token(self, heads: u64) -> u64 {
        match self {
            Unit::NormAttn | Unit::NormMlp => 2,
            Unit::Attention => heads,
            _ => 0,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`Unit`]s (one bit per unit), written as a list of unit names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UnitSet(u8);

impl UnitSet {
    /// No unit.
    pub const NONE: UnitSet = UnitSet(0);
    /// Every unit.
    pub const ALL: UnitSet = UnitSet(0xff);

    /// The set of `units`.
    pub fn of(units: &[Unit]) -> UnitSet {
        units.iter().fold(UnitSet::NONE, |s, u| s.with(*u))
    }

    /// This set with `unit` in it.
    pub fn with(self, unit: Unit) -> UnitSet {
        UnitSet(self.0 | 1 << unit.index())
    }

    /// Whether `unit` is in the set.
    pub fn contains(self, unit: Unit) -> bool {
        self.0 & (1 << unit.index()) != 0
    }

    /// The units in the set, in execution order.
    pub fn units(self) -> impl Iterator<Item = Unit> {
        Unit::ALL.into_iter().filter(move |u| self.contains(*u))
    }

    /// The number of units in the set.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl Serialize for UnitSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.units().map(Unit::name))
    }
}

impl<'de> Deserialize<'de> for UnitSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        parse_units(&names).map_err(serde::de::Error::custom)
    }
}

/// The set of the unit `names`.
///
/// # Errors
/// A message naming the first unknown name and listing the units.
pub fn parse_units(names: &[String]) -> Result<UnitSet, String> {
    let mut set = UnitSet::NONE;
    for name in names {
        let unit = Unit::parse(name).ok_or_else(|| {
            format!(
                "unknown unit `{name}`: the units of a block are {}",
                unit_names()
            )
        })?;
        set = set.with(unit);
    }
    Ok(set)
}

fn unit_names() -> String {
    Unit::ALL.map(Unit::name).join(", ")
}

/// Which unit outputs the blocks of a recomputed segment keep for backward.
///
/// Written in experiment and job files as a name (`"save_matmuls"`, `"save_nothing"`,
/// `"save_everything"`) or a list of unit names to keep (`["qkv", "attention"]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// Keep the outputs of the matrix products and the attention core; recompute the layer
    /// norms and GELU (PyTorch's selective-checkpointing example, JAX's `dots_saveable`).
    SaveMatmuls,
    /// Keep nothing inside a segment: block-granular activation checkpointing (JAX's
    /// `nothing_saveable`).
    SaveNothing,
    /// Keep everything: no recomputation (JAX's `everything_saveable`).
    SaveEverything,
    /// Keep the outputs of these units (JAX's `save_only_these_names`).
    Keep(UnitSet),
    /// An activation memory budget `b` in [0, 1] of the span between keeping nothing inside the
    /// recomputed blocks (0) and the cheapest plan that recomputes no counted FLOP (1): the
    /// units with the least recomputation whose kept bytes fit, chosen per block over the whole
    /// model ([`budget_choice`]), as PyTorch's `activation_memory_budget` partitioner chooses
    /// over the operations of the joint graph. The [`Estimate`] says how recomputation is
    /// counted (FLOPs from the shapes, or forward seconds measured on the job's device); the
    /// span in bytes is the same for both.
    Budget(f64, Estimate),
    /// Checkmate (Jain et al., MLSys 2020, eq. 1a under the budget of eq. 1e) over every
    /// block's units: of every choice of kept unit outputs per block, the least recomputed
    /// seconds (each unit's forward time measured by the job's profiling pass) whose predicted
    /// peak fits this fraction in (0, 1] of the block-level no-recomputation peak (the same
    /// bytes as `checkmate = f` at block granularity). Solved exactly by
    /// `memwall_core::unit_checkmate::plan_units` from the job's executor profile; every block
    /// must be its own recomputed segment (`checkpoint = 1`).
    Checkmate(f64),
}

/// How a memory budget's knapsack counts the cost of recomputing a unit: PyTorch's
/// `torch._functorch.config.activation_memory_budget_runtime_estimator`, whose two settings
/// are `"flops"` (its default: FLOPs counted by `torch.utils.flop_counter`) and `"profile"`
/// (each operation benchmarked on the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Estimate {
    /// Forward FLOPs from the shapes ([`UnitShape::forward_flops`]): the matrix products and
    /// the attention core; the layer norms, GELU and residual adds count 0.
    #[default]
    Flops,
    /// Forward seconds of each unit, measured by the job's profiling pass on its device and in
    /// its precision ([`ExecutorProfile::unit_forward_s`](crate::segment_memory::ExecutorProfile)):
    /// what the elementwise units really cost is counted too.
    Profile,
}

impl Estimate {
    /// `flops` or `profile`, as experiment files write it.
    pub fn name(self) -> &'static str {
        match self {
            Estimate::Flops => "flops",
            Estimate::Profile => "profile",
        }
    }
}

impl Policy {
    /// The names of the named policies, for error messages.
    pub const NAMES: [&'static str; 3] = ["save_matmuls", "save_nothing", "save_everything"];

    /// The unit outputs a block of a recomputed segment keeps; `None` for a budget, whose
    /// choice depends on the model's shape ([`budget_choice`]).
    pub fn kept(&self) -> Option<UnitSet> {
        match self {
            Policy::SaveMatmuls => Some(UnitSet::of(
                &Unit::ALL
                    .into_iter()
                    .filter(|u| u.is_matmul())
                    .collect::<Vec<_>>(),
            )),
            Policy::SaveNothing => Some(UnitSet::NONE),
            Policy::SaveEverything => Some(UnitSet::ALL),
            Policy::Keep(set) => Some(*set),
            Policy::Budget(..) | Policy::Checkmate(_) => None,
        }
    }

    /// Whether the plan needs the job's profiling pass: a budget with [`Estimate::Profile`]
    /// (the unit forward times), a Checkmate policy (the unit times and the memory profile).
    pub fn needs_profile(&self) -> bool {
        matches!(
            self,
            Policy::Budget(_, Estimate::Profile) | Policy::Checkmate(_)
        )
    }

    /// The policy's name: a named policy's, or `keep:` and the kept units joined by `+`
    /// (`keep:qkv+attention`), as configuration names and tables show it.
    pub fn label(&self) -> String {
        match self {
            Policy::SaveMatmuls => Self::NAMES[0].into(),
            Policy::SaveNothing => Self::NAMES[1].into(),
            Policy::SaveEverything => Self::NAMES[2].into(),
            Policy::Keep(set) => format!(
                "keep:{}",
                set.units().map(Unit::name).collect::<Vec<_>>().join("+")
            ),
            Policy::Budget(b, Estimate::Flops) => format!("budget:{b}"),
            Policy::Budget(b, Estimate::Profile) => format!("budget:{b}:profile"),
            Policy::Checkmate(f) => format!("checkmate:{f}"),
        }
    }

    /// The policy named `name` (one of [`Policy::NAMES`]).
    ///
    /// # Errors
    /// A message naming `name` and the policies.
    pub fn parse(name: &str) -> Result<Policy, String> {
        match name {
            "save_matmuls" => Ok(Policy::SaveMatmuls),
            "save_nothing" => Ok(Policy::SaveNothing),
            "save_everything" => Ok(Policy::SaveEverything),
            other => Err(format!(
                "unknown policy `{other}`: a policy is one of {} or a list of unit names to keep ({})",
                Self::NAMES.join(", "),
                unit_names()
            )),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum PolicyWire {
    Name(String),
    Units(UnitSet),
    Budget {
        budget: f64,
        #[serde(default, skip_serializing_if = "is_flops")]
        estimate: Estimate,
    },
    Checkmate {
        checkmate: f64,
    },
}

fn is_flops(e: &Estimate) -> bool {
    *e == Estimate::Flops
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Policy::Keep(set) => PolicyWire::Units(*set),
            Policy::Budget(b, estimate) => PolicyWire::Budget {
                budget: *b,
                estimate: *estimate,
            },
            Policy::Checkmate(f) => PolicyWire::Checkmate { checkmate: *f },
            named => PolicyWire::Name(named.label()),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read as a plain value first so that an unknown unit name is reported as such (an
        // untagged enum would only say that no variant matched).
        let value = serde_json::Value::deserialize(d).map_err(serde::de::Error::custom)?;
        match value {
            serde_json::Value::String(name) => {
                Policy::parse(&name).map_err(serde::de::Error::custom)
            }
            serde_json::Value::Array(items) => {
                let names = items
                    .into_iter()
                    .map(|v| match v {
                        serde_json::Value::String(s) => Ok(s),
                        other => Err(format!("a unit name is a string, found {other}")),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(serde::de::Error::custom)?;
                parse_units(&names)
                    .map(Policy::Keep)
                    .map_err(serde::de::Error::custom)
            }
            serde_json::Value::Object(map) if map.contains_key("checkmate") => {
                if let Some(extra) = map.keys().find(|k| *k != "checkmate") {
                    return Err(serde::de::Error::custom(format!(
                        "policy field `{extra}`: a Checkmate policy has only `checkmate`, the \
                         fraction of the no-recomputation peak, e.g. {{ checkmate = 0.6 }}"
                    )));
                }
                match map["checkmate"].as_f64() {
                    Some(f) if f > 0.0 && f <= 1.0 => Ok(Policy::Checkmate(f)),
                    _ => Err(serde::de::Error::custom(format!(
                        "policy checkmate {}: use a fraction in (0, 1] of the no-recomputation \
                         peak, e.g. {{ checkmate = 0.6 }}",
                        map["checkmate"]
                    ))),
                }
            }
            serde_json::Value::Object(map) if map.contains_key("budget") => {
                if let Some(extra) = map.keys().find(|k| *k != "budget" && *k != "estimate") {
                    return Err(serde::de::Error::custom(format!(
                        "policy field `{extra}`: a budget policy has `budget` and, optionally, \
                         `estimate` (\"flops\" or \"profile\"), e.g. {{ budget = 0.05, estimate = \"profile\" }}"
                    )));
                }
                let estimate = match map.get("estimate") {
                    None => Estimate::Flops,
                    Some(serde_json::Value::String(e)) if e == "flops" => Estimate::Flops,
                    Some(serde_json::Value::String(e)) if e == "profile" => Estimate::Profile,
                    Some(other) => {
                        return Err(serde::de::Error::custom(format!(
                            "policy estimate {other}: use \"flops\" (FLOPs from the shapes, the \
                             default) or \"profile\" (each unit's forward time measured by the \
                             job's profiling pass)"
                        )))
                    }
                };
                match map["budget"].as_f64() {
                    Some(b) if (0.0..=1.0).contains(&b) => Ok(Policy::Budget(b, estimate)),
                    _ => Err(serde::de::Error::custom(format!(
                        "policy budget {}: use a number in [0, 1] (0 keeps nothing inside a \
                         block, 1 everything), e.g. {{ budget = 0.05 }}",
                        map["budget"]
                    ))),
                }
            }
            other => Err(serde::de::Error::custom(format!(
                "a policy is a name ({}), a list of unit names, {{ budget = b }} or {{ checkmate = f }}, found {other}",
                Self::NAMES.join(", ")
            ))),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// A unit-level plan: a segment plan refined by a policy, as the plan stage hands it to the
/// unit executor (in the job file's `unit_plan` and so in the record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitPlan {
    /// The policy the plan was made with.
    pub policy: Policy,
    /// The unit outputs each block keeps ([`block_keeps`]), one set per block.
    pub keeps: Vec<UnitSet>,
    /// Unit outputs recomputed per step, predicted by [`recomputed_units`]; the executor counts
    /// what it does ([`crate::record::StepRecord::recomputed_units`]).
    pub recomputed_units: usize,
    /// Bytes of unit outputs the plan keeps between forward and backward over every block
    /// ([`UnitShape::kept_bytes`]), derived from the shapes; the recomputed values live only
    /// during their block's backward and are not counted.
    pub kept_bytes: u64,
    /// Forward FLOPs recomputed per step ([`UnitShape::forward_flops`] of every recomputed
    /// unit), derived from the shapes.
    pub recompute_flops: f64,
    /// The forward seconds of each unit ([`Unit::ALL`] order, one block) that a budget with
    /// [`Estimate::Profile`] or a Checkmate policy was chosen with: the job's profiling pass's
    /// measurement on its device. `None` for the other policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_forward_s: Option<[f64; 8]>,
    /// Seconds recomputed per step predicted from `unit_forward_s`: the sum over the
    /// recomputed units. `None` without measured unit times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_recompute_s: Option<f64>,
    /// The plan's predicted peak, bytes above the steady state with the profile's margin, for
    /// the plans chosen under a peak budget ([`Policy::Checkmate`]:
    /// `memwall_core::unit_checkmate::predict_units`); `None` for the others, which are chosen
    /// by kept bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_peak_bytes: Option<u64>,
    /// The peak budget the plan was chosen under, bytes ([`Policy::Checkmate`]'s fraction of
    /// the no-recomputation peak); `None` for the other policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
}

impl UnitPlan {
    /// The plan of `policy` over `segments` of a model of `shape`, with layer norms keeping what
    /// `saving` says. `unit_forward_s` is the job's profiling pass's forward seconds per unit
    /// ([`Unit::ALL`] order), which a budget with [`Estimate::Profile`] chooses by; given to
    /// another policy it only sizes [`UnitPlan::predicted_recompute_s`].
    ///
    /// # Errors
    /// A message when the policy needs measured unit times and `unit_forward_s` is `None`, or
    /// a time is negative or not finite.
    pub fn new(
        segments: &[Segment],
        policy: Policy,
        saving: LayerNormSaving,
        shape: &UnitShape,
        unit_forward_s: Option<&[f64; 8]>,
    ) -> Result<UnitPlan, String> {
        if let Some(t) = unit_forward_s {
            if let Some((u, v)) = Unit::ALL
                .into_iter()
                .map(|u| (u, t[u.index()]))
                .find(|(_, v)| !v.is_finite() || *v < 0.0)
            {
                return Err(format!(
                    "the profiled forward time of unit `{u}` is {v} s: a time is finite and not negative"
                ));
            }
        }
        let keeps = match (policy.kept(), policy) {
            (Some(kept), _) => block_keeps(segments, kept),
            (None, Policy::Budget(b, estimate)) => {
                let cost =
                    match (estimate, unit_forward_s) {
                        (Estimate::Flops, _) => UnitCost::Flops,
                        (Estimate::Profile, Some(t)) => UnitCost::Seconds(*t),
                        (Estimate::Profile, None) => return Err(
                            "a budget with estimate = \"profile\" chooses by each unit's measured \
                             forward time: run the job's profiling pass first (the plan stage of \
                             `memwall run` or `memwall-job sweep-dir`)"
                                .into(),
                        ),
                    };
                // The budget spans the recomputed segments' blocks; stored ones keep everything.
                let recomputed = segments
                    .iter()
                    .filter(|s| s.recompute)
                    .map(|s| s.range().len())
                    .sum();
                let choice =
                    budget_choice_by(b, recomputed, shape, saving, Granularity::Unit, cost);
                let mut chosen = choice.plan.keeps.into_iter();
                segments
                    .iter()
                    .flat_map(|seg| seg.range().map(move |_| seg.recompute))
                    .map(|recompute| match recompute {
                        true => chosen.next().expect("one choice per recomputed block"),
                        false => UnitSet::ALL,
                    })
                    .collect()
            }
            (None, Policy::Checkmate(_)) => {
                return Err(
                    "a Checkmate policy is planned from the job's executor profile \
                     (memwall_core::planner::plan_job), not from the shapes alone"
                        .into(),
                )
            }
            (None, _) => unreachable!("only a budget's kept set depends on the shape"),
        };
        Ok(UnitPlan::from_keeps(
            policy,
            keeps,
            saving,
            shape,
            unit_forward_s,
        ))
    }

    /// The plan that keeps `keeps` (one set per block), chosen by `policy`: what it recomputes
    /// and keeps, counted as [`UnitPlan::new`] counts them; no predicted peak or budget (the
    /// caller that chose under a peak budget sets them).
    pub fn from_keeps(
        policy: Policy,
        keeps: Vec<UnitSet>,
        saving: LayerNormSaving,
        shape: &UnitShape,
        unit_forward_s: Option<&[f64; 8]>,
    ) -> UnitPlan {
        let recomputed = recomputed_units(&keeps, saving);
        UnitPlan {
            policy,
            recomputed_units: recomputed.len(),
            kept_bytes: keeps.iter().map(|k| shape.kept_bytes(*k)).sum(),
            recompute_flops: recomputed
                .iter()
                .fold(0.0, |sum, (_, u)| sum + shape.forward_flops(*u)),
            unit_forward_s: unit_forward_s.filter(|_| policy.needs_profile()).copied(),
            predicted_recompute_s: unit_forward_s
                .map(|t| recomputed.iter().map(|(_, u)| t[u.index()]).sum()),
            predicted_peak_bytes: None,
            budget_bytes: None,
            keeps,
        }
    }
}

/// What a front's knapsack minimizes per recomputed unit ([`Estimate`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnitCost {
    /// Forward FLOPs from the shapes ([`UnitShape::forward_flops`]).
    Flops,
    /// Measured forward seconds of each unit, [`Unit::ALL`] order (one block; the blocks are
    /// alike).
    Seconds([f64; 8]),
}

/// The shapes a unit plan is sized by: the block's widths, the tokens of a step and the compute
/// dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitShape {
    /// Hidden size `d`.
    pub d_model: u64,
    /// MLP width `f`.
    pub d_ff: u64,
    /// Attention heads.
    pub heads: u64,
    /// Sequences per step.
    pub batch: u64,
    /// Tokens per sequence.
    pub seq_len: u64,
    /// Bytes per element of the compute dtype (4 for f32, 2 for f16 and bf16).
    pub dtype_bytes: u64,
}

impl UnitShape {
    /// Bytes one block keeps with `kept`: `batch · seq · Σ_kept (elements_per_token ·
    /// dtype_bytes + f32_per_token · 4)`, derived from the shapes ([`Unit::elements_per_token`],
    /// [`Unit::f32_per_token`]).
    pub fn kept_bytes(&self, kept: UnitSet) -> u64 {
        let tokens = self.batch * self.seq_len;
        kept.units()
            .map(|u| {
                tokens
                    * (u.elements_per_token(self.d_model, self.d_ff) * self.dtype_bytes
                        + u.f32_per_token(self.heads) * 4)
            })
            .sum()
    }

    /// Forward FLOPs of `unit` in one block, counted as PyTorch's FLOP counter
    /// (`torch.utils.flop_counter`, the default runtime estimate of the
    /// `activation_memory_budget` partitioner) counts them: `2 m k n` per matrix product
    /// (`qkv`: `3 · 2 n d²`; `attn_out`: `2 n d²`; `mlp_in`, `mlp_out`: `2 n d f`, with `n` =
    /// batch · seq), the attention core's two products over the causal half of the scores,
    /// `2 · 2 · b · t² · d / 2`, and 0 for the layer norms, GELU and the residual adds
    /// (elementwise operations, which it does not count).
    pub fn forward_flops(&self, unit: Unit) -> f64 {
        let (d, f) = (self.d_model as f64, self.d_ff as f64);
        let (b, t) = (self.batch as f64, self.seq_len as f64);
        let n = b * t;
        match unit {
            Unit::Qkv => 3.0 * 2.0 * n * d * d,
            Unit::Attention => 2.0 * b * t * t * d,
            Unit::AttnOut => 2.0 * n * d * d,
            Unit::MlpIn | Unit::MlpOut => 2.0 * n * d * f,
            Unit::NormAttn | Unit::NormMlp | Unit::Activation => 0.0,
        }
    }
}

/// A point of the memory–recomputation trade-off over the blocks of a model: what each block
/// keeps, what the blocks keep in all and what they recompute.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontPoint {
    /// The unit outputs each block keeps (`mlp_out`, the block's output, always), one set per
    /// block, the richer sets on the later blocks (whose backward runs first, while every kept
    /// value is still alive).
    pub keeps: Vec<UnitSet>,
    /// Bytes kept over every block ([`UnitShape::kept_bytes`] summed).
    pub kept_bytes: u64,
    /// Forward FLOPs recomputed per step ([`UnitShape::forward_flops`] over
    /// [`recomputed_units`]), derived from the shapes.
    pub recompute_flops: f64,
    /// Seconds recomputed per step for a front of [`UnitCost::Seconds`]: the measured unit
    /// times summed over [`recomputed_units`]; `None` for a FLOP front.
    pub recompute_s: Option<f64>,
}

/// Which plans a front chooses among: every subset of a block's units, or a block kept whole
/// or recomputed whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// A block keeps any subset of its unit outputs (with its output): rematerialization inside
    /// the block.
    Unit,
    /// A block keeps every unit output or only its output: block-granular activation
    /// checkpointing, the same cost model restricted to two choices per block.
    Block,
}

impl Granularity {
    /// `unit` or `block`, as tables show it.
    pub fn name(self) -> &'static str {
        match self {
            Granularity::Unit => "unit",
            Granularity::Block => "block",
        }
    }
}

/// The Pareto front of `layers` blocks of `shape`: every plan that no other plan beats in both
/// kept bytes and recomputed FLOPs, by kept bytes ascending (recomputed FLOPs strictly
/// descending), from keeping only the blocks' outputs to the cheapest plan recomputing no
/// counted FLOP.
///
/// Exact: a multiple-choice knapsack over the blocks solved by dynamic programming over the
/// blocks with dominated partial plans dropped at each step (the blocks' costs add, since a
/// block recomputes from its own input, the previous block's kept output). Each block chooses
/// among the subsets of its units that `granularity` admits and that are on the single block's
/// own front.
pub fn front(
    layers: usize,
    shape: &UnitShape,
    saving: LayerNormSaving,
    granularity: Granularity,
) -> Vec<FrontPoint> {
    front_by(layers, shape, saving, granularity, UnitCost::Flops)
}

/// [`front`] with recomputation counted by `cost`: for [`UnitCost::Seconds`], every plan that
/// no other beats in both kept bytes and recomputed seconds (PyTorch's `"profile"` runtime
/// estimator), each point with its FLOPs beside its seconds.
pub fn front_by(
    layers: usize,
    shape: &UnitShape,
    saving: LayerNormSaving,
    granularity: Granularity,
    cost: UnitCost,
) -> Vec<FrontPoint> {
    let out = UnitSet::NONE.with(Unit::MlpOut);
    let candidates: Vec<UnitSet> = match granularity {
        Granularity::Unit => (0u8..128)
            .map(|bits| UnitSet(bits).with(Unit::MlpOut))
            .collect(),
        Granularity::Block => vec![out, UnitSet::ALL],
    };
    let unit_cost = |u: Unit| match cost {
        UnitCost::Flops => shape.forward_flops(u),
        UnitCost::Seconds(t) => t[u.index()],
    };
    let block_cost = |kept: UnitSet| {
        let recomputed = recomputed_units(&[kept], saving);
        let c = recomputed
            .iter()
            .fold(0.0, |sum, (_, u)| sum + unit_cost(*u));
        (shape.kept_bytes(kept), c)
    };
    // The single block's front: (bytes, flops, kept), bytes ascending, flops descending.
    let options = pareto(candidates.into_iter().map(|k| {
        let (bytes, flops) = block_cost(k);
        (bytes, flops, k)
    }));
    // Partial plans over the first blocks: (bytes, flops, how many blocks take each option).
    let mut states: Vec<(u64, f64, Vec<usize>)> = vec![(0, 0.0, vec![0; options.len()])];
    for _ in 0..layers {
        let mut next = Vec::with_capacity(states.len() * options.len());
        for (bytes, flops, counts) in &states {
            for (i, (ob, of, _)) in options.iter().enumerate() {
                let mut c = counts.clone();
                c[i] += 1;
                next.push((bytes + ob, flops + of, c));
            }
        }
        states = pareto(next);
    }
    states
        .into_iter()
        .map(|(kept_bytes, recompute_cost, counts)| {
            // The richer sets (more bytes: later options) on the later blocks.
            let keeps: Vec<UnitSet> = counts
                .iter()
                .enumerate()
                .flat_map(|(i, &c)| std::iter::repeat_n(options[i].2, c))
                .collect();
            let (recompute_flops, recompute_s) = match cost {
                UnitCost::Flops => (recompute_cost, None),
                UnitCost::Seconds(_) => {
                    let flops = keeps
                        .iter()
                        .flat_map(|k| recomputed_units(&[*k], saving))
                        .fold(0.0, |sum, (_, u)| sum + shape.forward_flops(u));
                    (flops, Some(recompute_cost))
                }
            };
            FrontPoint {
                keeps,
                kept_bytes,
                recompute_flops,
                recompute_s,
            }
        })
        .collect()
}

/// The points no other point beats in both bytes and FLOPs (ties: the first), bytes ascending.
fn pareto<T>(points: impl IntoIterator<Item = (u64, f64, T)>) -> Vec<(u64, f64, T)> {
    let mut points: Vec<_> = points.into_iter().collect();
    points.sort_by(|a, b| (a.0, a.1).partial_cmp(&(b.0, b.1)).expect("finite FLOPs"));
    let mut kept: Vec<(u64, f64, T)> = Vec::new();
    for p in points {
        if kept.last().is_none_or(|l| p.1 < l.1) {
            kept.push(p);
        }
    }
    kept
}

/// What the blocks keep at a memory budget, with what it costs.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetChoice {
    /// The chosen plan: the least recomputed FLOPs whose kept bytes fit the budget.
    pub plan: FrontPoint,
    /// The budget in bytes, `lo + b (hi - lo)` rounded down.
    pub budget_bytes: u64,
    /// Bytes kept at budget 0: only the blocks' outputs.
    pub lo_bytes: u64,
    /// Bytes kept at budget 1: the cheapest plan recomputing no counted FLOP.
    pub hi_bytes: u64,
}

/// The plan of budget `b` (in [0, 1]) over `layers` blocks at `granularity`: of the plans on the
/// [`front`], the one with the least recomputed FLOPs whose kept bytes fit `lo + b (hi - lo)`.
/// `lo` keeps only the blocks' outputs (0: "activation checkpointing to everything", in the
/// source's words); `hi` is the plan that recomputes no counted FLOP with the fewest bytes, the
/// analog of the source's 1.0, "the activation memory from the default 'compile' strategy",
/// whose partitioner already recomputes cheap pointwise operations. As PyTorch's
/// `activation_memory_budget` partitioner, the knapsack runs over the whole model (the joint
/// graph's operations there, every block's units here), with FLOPs as its default runtime
/// estimate counts them, so at a small budget some blocks keep a unit and others none.
pub fn budget_choice(
    b: f64,
    layers: usize,
    shape: &UnitShape,
    saving: LayerNormSaving,
    granularity: Granularity,
) -> BudgetChoice {
    choose(&front(layers, shape, saving, granularity), b)
}

/// [`budget_choice`] with recomputation counted by `cost`. The budget's span in bytes is the
/// FLOP front's whatever the cost (so `b` means the same bytes under both estimators, as
/// PyTorch's budget is a fraction of the default partitioner's memory whichever runtime
/// estimator its knapsack uses); of the plans on `cost`'s front, the one with the least
/// recomputation whose kept bytes fit.
pub fn budget_choice_by(
    b: f64,
    layers: usize,
    shape: &UnitShape,
    saving: LayerNormSaving,
    granularity: Granularity,
    cost: UnitCost,
) -> BudgetChoice {
    let flops = budget_choice(b, layers, shape, saving, granularity);
    match cost {
        UnitCost::Flops => flops,
        UnitCost::Seconds(_) => {
            let plan = front_by(layers, shape, saving, granularity, cost)
                .into_iter()
                .take_while(|p| p.kept_bytes <= flops.budget_bytes)
                .last()
                .expect("keeping only the outputs fits every budget");
            BudgetChoice { plan, ..flops }
        }
    }
}

/// The plan of budget `b` (in [0, 1]) on `points`, a [`front`] (bytes ascending): the last point
/// whose kept bytes fit `lo + b (hi - lo)`, as [`budget_choice`] chooses, without solving the
/// front again.
///
/// Panics if `points` is empty (a front has at least the outputs-only plan).
pub fn choose(points: &[FrontPoint], b: f64) -> BudgetChoice {
    let lo_bytes = points.first().map_or(0, |p| p.kept_bytes);
    let hi_bytes = points.last().map_or(0, |p| p.kept_bytes);
    let budget_bytes = lo_bytes + ((hi_bytes - lo_bytes) as f64 * b.clamp(0.0, 1.0)).floor() as u64;
    let plan = points
        .iter()
        .take_while(|p| p.kept_bytes <= budget_bytes)
        .last()
        .cloned()
        .expect("keeping only the outputs fits every budget");
    BudgetChoice {
        plan,
        budget_bytes,
        lo_bytes,
        hi_bytes,
    }
}

/// What every block keeps under `segments` refined by a policy that keeps `kept`: a stored
/// segment's blocks keep every unit output; a recomputed segment's blocks keep `kept`, and its
/// last block also keeps its `mlp_out` output (the next segment's checkpoint). With nothing
/// kept ([`Policy::SaveNothing`]) this is exactly block-granular activation checkpointing.
pub fn block_keeps(segments: &[Segment], kept: UnitSet) -> Vec<UnitSet> {
    let mut keeps = Vec::new();
    for seg in segments {
        for block in seg.range() {
            keeps.push(if !seg.recompute {
                UnitSet::ALL
            } else if block + 1 == seg.end {
                kept.with(Unit::MlpOut)
            } else {
                kept
            });
        }
    }
    keeps
}
/// The unit outputs recomputed in one backward pass of the executor under `keeps` (one set per
/// block) with layer norms keeping what `saving` says: `(block, unit)` pairs in the order the
/// executor recomputes them.
///
/// This is the executor's rule, run on names: backward visits the units last to first; before
/// a unit's backward, every value it reads ([`Unit::backward_inputs`]) that is neither kept nor
/// already recomputed is recomputed from its forward inputs ([`Unit::forward_inputs`]),
/// recursively to the nearest kept value; a recomputed value lives until the backward of the
/// unit that produced it. The last block's output is the head's input and always kept.
pub fn recomputed_units(keeps: &[UnitSet], saving: LayerNormSaving) -> Vec<(usize, Unit)> {
    let layers = keeps.len();
    let mut have: Vec<UnitSet> = keeps.to_vec();
    if let Some(last) = have.last_mut() {
        *last = last.with(Unit::MlpOut);
    }
    let mut order = Vec::new();
    fn need(
        block: usize,
        unit: Option<Unit>,
        have: &mut [UnitSet],
        order: &mut Vec<(usize, Unit)>,
    ) {
        // The block's input is the previous block's output (the embeddings for block 0).
        let (block, unit) = match unit {
            Some(u) => (block, u),
            None if block == 0 => return,
            None => (block - 1, Unit::MlpOut),
        };
        if have[block].contains(unit) {
            return;
        }
        for input in unit.forward_inputs() {
            need(block, *input, have, order);
        }
        have[block] = have[block].with(unit);
        order.push((block, unit));
    }
    for block in (0..layers).rev() {
        for unit in Unit::ALL.into_iter().rev() {
            for input in unit.backward_inputs(saving) {
                need(block, *input, &mut have, &mut order);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::every_k;

    #[test]
    fn save_matmuls_keeps_the_products_and_the_attention_core() {
        let kept: Vec<&str> = Policy::SaveMatmuls
            .kept()
            .unwrap()
            .units()
            .map(Unit::name)
            .collect();
        assert_eq!(kept, ["qkv", "attention", "attn_out", "mlp_in", "mlp_out"]);
    }

    #[test]
    fn policies_read_and_write_as_names_or_unit_lists() {
        for (json, policy) in [
            ("\"save_matmuls\"", Policy::SaveMatmuls),
            ("\"save_nothing\"", Policy::SaveNothing),
            ("\"save_everything\"", Policy::SaveEverything),
            (
                "[\"qkv\",\"mlp_in\"]",
                Policy::Keep(UnitSet::of(&[Unit::Qkv, Unit::MlpIn])),
            ),
        ] {
            let read: Policy = serde_json::from_str(json).unwrap();
            assert_eq!(read, policy);
            assert_eq!(serde_json::to_string(&policy).unwrap(), json);
        }
        let err = serde_json::from_str::<Policy>("[\"qkv\", \"gelu\"]").unwrap_err();
        assert!(err.to_string().contains("unknown unit `gelu`"), "{err}");
        let err = serde_json::from_str::<Policy>("\"dots_saveable\"").unwrap_err();
        assert!(
            err.to_string().contains("unknown policy `dots_saveable`"),
            "{err}"
        );
    }

    #[test]
    fn save_nothing_is_block_checkpointing_and_recomputes_every_unit_but_the_boundaries() {
        let layers = 6;
        for k in 1..=layers {
            let keeps = block_keeps(&every_k(layers, k), UnitSet::NONE);
            let recomputed = recomputed_units(&keeps, LayerNormSaving::SavesInput);
            // Every unit output but the segments' last blocks' mlp_out is recomputed, once.
            let boundaries = layers.div_ceil(k);
            assert_eq!(recomputed.len(), 8 * layers - boundaries, "k = {k}");
            let mut sorted = recomputed.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), recomputed.len(), "k = {k}: a unit twice");
        }
    }

    #[test]
    fn save_everything_recomputes_nothing_and_save_matmuls_the_norms_and_gelu() {
        let keeps = block_keeps(&every_k(4, 1), UnitSet::ALL);
        assert!(recomputed_units(&keeps, LayerNormSaving::SavesInput).is_empty());
        let keeps = block_keeps(&every_k(4, 1), Policy::SaveMatmuls.kept().unwrap());
        let recomputed = recomputed_units(&keeps, LayerNormSaving::SavesInput);
        assert_eq!(recomputed.len(), 4 * 3);
        assert!(recomputed.iter().all(|(_, u)| !u.is_matmul()));
    }

    /// The cpu profile's block: d 128, f 512, 4 heads, 8 x 128 tokens, f32.
    fn cpu_shape() -> UnitShape {
        UnitShape {
            d_model: 128,
            d_ff: 512,
            heads: 4,
            batch: 8,
            seq_len: 128,
            dtype_bytes: 4,
        }
    }

    #[test]
    fn budgets_span_keeping_nothing_to_keeping_everything() {
        let shape = cpu_shape();
        let saving = LayerNormSaving::SavesInput;
        let layers = 8;
        let choose = |b: f64| budget_choice(b, layers, &shape, saving, Granularity::Unit);
        let zero = choose(0.0);
        assert_eq!(
            zero.plan.keeps,
            vec![UnitSet::NONE.with(Unit::MlpOut); layers]
        );
        assert_eq!(zero.lo_bytes, zero.plan.kept_bytes);
        // 1.0 recomputes no counted FLOP with the fewest bytes: the layer norms and GELU
        // (elementwise, uncounted) are recomputed, the products' outputs kept: save_matmuls.
        let one = choose(1.0);
        let matmuls = Policy::SaveMatmuls.kept().unwrap();
        assert_eq!(one.plan.keeps, vec![matmuls; layers]);
        assert_eq!(one.plan.recompute_flops, 0.0);
        // Cost falls as the budget grows; every choice fits its budget.
        let mut last: Option<BudgetChoice> = None;
        let mut distinct = std::collections::HashSet::new();
        for i in 0..=20 {
            let c = choose(i as f64 / 20.0);
            assert!(c.plan.kept_bytes <= c.budget_bytes);
            if let Some(l) = &last {
                assert!(
                    c.plan.recompute_flops <= l.plan.recompute_flops,
                    "{c:?} after {l:?}"
                );
            }
            distinct.insert(c.plan.keeps.clone());
            last = Some(c);
        }
        assert!(
            distinct.len() >= 10,
            "{} plans over 21 budgets",
            distinct.len()
        );
        // Just below 1.0 the plan must recompute some product.
        assert!(choose(0.95).plan.recompute_flops > 0.0);
        // At 0.05 the knapsack over the whole model keeps something in some blocks and not in
        // others: strictly between checkpointing every block and keeping the products.
        let small = choose(0.05);
        assert!(small.plan.kept_bytes > zero.plan.kept_bytes, "{small:?}");
        assert!(small.plan.recompute_flops < zero.plan.recompute_flops);
        assert!(small.plan.keeps.contains(&UnitSet::NONE.with(Unit::MlpOut)));
    }

    #[test]
    fn the_front_is_the_exact_knapsack_over_every_assignment() {
        // Brute force over every subset for each of 3 blocks (128³ plans) at the smoke shape.
        let shape = UnitShape {
            d_model: 32,
            d_ff: 64,
            heads: 2,
            batch: 2,
            seq_len: 32,
            dtype_bytes: 4,
        };
        let saving = LayerNormSaving::SavesInput;
        let costs: Vec<(u64, f64)> = (0u8..128)
            .map(|bits| {
                let kept = UnitSet(bits).with(Unit::MlpOut);
                let flops = recomputed_units(&[kept], saving)
                    .into_iter()
                    .fold(0.0, |sum, (_, u)| sum + shape.forward_flops(u));
                (shape.kept_bytes(kept), flops)
            })
            .collect();
        let mut costs = costs;
        costs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        costs.dedup();
        let points = front(3, &shape, saving, Granularity::Unit);
        for p in &points {
            // The point's own plan costs what it says.
            let plan_bytes: u64 = p.keeps.iter().map(|k| shape.kept_bytes(*k)).sum();
            assert_eq!(plan_bytes, p.kept_bytes);
            let plan_flops = recomputed_units(&p.keeps, saving)
                .into_iter()
                .fold(0.0, |sum, (_, u)| sum + shape.forward_flops(u));
            assert_eq!(plan_flops, p.recompute_flops);
        }
        // Every assignment's bytes: the front's best within them is the brute force's best.
        let mut sums: Vec<(u64, f64)> = Vec::new();
        for a in &costs {
            for b in &costs {
                for c in &costs {
                    sums.push((a.0 + b.0 + c.0, a.1 + b.1 + c.1));
                }
            }
        }
        sums.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut best = f64::INFINITY;
        for (i, (bytes, flops)) in sums.iter().enumerate() {
            best = best.min(*flops);
            if sums.get(i + 1).is_some_and(|n| n.0 == *bytes) {
                continue;
            }
            let on_front = points
                .iter()
                .take_while(|p| p.kept_bytes <= *bytes)
                .last()
                .expect("the outputs-only plan is the cheapest in bytes");
            assert_eq!(on_front.recompute_flops, best, "within {bytes} bytes");
        }
        // Block granularity: k blocks kept whole, k = 0..=layers.
        let blocks = front(3, &shape, saving, Granularity::Block);
        assert_eq!(blocks.len(), 4);
        assert_eq!(blocks[3].keeps, vec![UnitSet::ALL; 3]);
    }

    #[test]
    fn a_budget_policy_reads_and_writes_as_a_table() {
        let p: Policy = serde_json::from_str("{\"budget\": 0.05}").unwrap();
        assert_eq!(p, Policy::Budget(0.05, Estimate::Flops));
        assert_eq!(serde_json::to_string(&p).unwrap(), "{\"budget\":0.05}");
        let err = serde_json::from_str::<Policy>("{\"budget\": 5}").unwrap_err();
        assert!(err.to_string().contains("[0, 1]"), "{err}");
    }

    #[test]
    fn a_budget_reads_its_estimate_and_refuses_a_wrong_one() {
        let p: Policy =
            serde_json::from_str("{\"budget\": 0.2, \"estimate\": \"profile\"}").unwrap();
        assert_eq!(p, Policy::Budget(0.2, Estimate::Profile));
        assert!(p.needs_profile() && !Policy::Budget(0.2, Estimate::Flops).needs_profile());
        assert_eq!(p.label(), "budget:0.2:profile");
        let written = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&written).unwrap(), p);
        for (bad, says) in [
            ("{\"budget\": 0.2, \"estimate\": \"time\"}", "\"profile\""),
            (
                "{\"budget\": 0.2, \"estimator\": \"profile\"}",
                "`estimator`",
            ),
        ] {
            let err = serde_json::from_str::<Policy>(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    /// Unit times where the elementwise units are dear and the products cheap, the opposite
    /// of the FLOP count's order.
    const ELEMENTWISE_DEAR: [f64; 8] = [9e-3, 1e-3, 2e-3, 1e-3, 9e-3, 1e-3, 9e-3, 1e-3];

    #[test]
    fn a_profiled_budget_spends_the_same_bytes_on_the_least_measured_recomputation() {
        let shape = cpu_shape();
        let saving = LayerNormSaving::SavesInput;
        let seconds = UnitCost::Seconds(ELEMENTWISE_DEAR);
        let recompute_s = |keeps: &[UnitSet]| -> f64 {
            recomputed_units(keeps, saving)
                .iter()
                .map(|(_, u)| ELEMENTWISE_DEAR[u.index()])
                .sum()
        };
        let mut strictly_better = 0;
        for b in [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0] {
            let flops = budget_choice(b, 4, &shape, saving, Granularity::Unit);
            let timed = budget_choice_by(b, 4, &shape, saving, Granularity::Unit, seconds);
            // The same span in bytes, and the choice fits it.
            assert_eq!(
                (timed.lo_bytes, timed.hi_bytes, timed.budget_bytes),
                (flops.lo_bytes, flops.hi_bytes, flops.budget_bytes)
            );
            assert!(timed.plan.kept_bytes <= timed.budget_bytes, "budget {b}");
            // Its predicted seconds are what the executor's recomputation costs under those
            // times, and never more than the FLOP plan's.
            let s = timed.plan.recompute_s.unwrap();
            assert!(
                (s - recompute_s(&timed.plan.keeps)).abs() < 1e-12,
                "budget {b}"
            );
            let f = recompute_s(&flops.plan.keeps);
            assert!(
                s <= f + 1e-12,
                "budget {b}: {s} s against the FLOP plan's {f} s"
            );
            if s < f - 1e-6 {
                strictly_better += 1;
            }
        }
        assert!(strictly_better > 0, "the times never changed a choice");
    }

    #[test]
    fn a_profiled_budget_needs_finite_unit_times() {
        let shape = cpu_shape();
        let segments = every_k(4, 1);
        let saving = LayerNormSaving::SavesInput;
        let policy = Policy::Budget(0.2, Estimate::Profile);
        let err = UnitPlan::new(&segments, policy, saving, &shape, None).unwrap_err();
        assert!(err.contains("profiling pass"), "{err}");
        let mut bad = ELEMENTWISE_DEAR;
        bad[2] = f64::NAN;
        let err = UnitPlan::new(&segments, policy, saving, &shape, Some(&bad)).unwrap_err();
        assert!(err.contains("`attention`"), "{err}");
        let plan = UnitPlan::new(&segments, policy, saving, &shape, Some(&ELEMENTWISE_DEAR));
        let plan = plan.unwrap();
        assert_eq!(plan.unit_forward_s, Some(ELEMENTWISE_DEAR));
        let recomputed = recomputed_units(&plan.keeps, saving);
        let s: f64 = recomputed
            .iter()
            .map(|(_, u)| ELEMENTWISE_DEAR[u.index()])
            .sum();
        assert_eq!(plan.predicted_recompute_s, Some(s));
        // A FLOP budget records no unit times.
        let flops = Policy::Budget(0.2, Estimate::Flops);
        let plan = UnitPlan::new(&segments, flops, saving, &shape, None).unwrap();
        assert_eq!(
            (plan.unit_forward_s, plan.predicted_recompute_s),
            (None, None)
        );
    }

    #[test]
    fn a_value_no_backward_reads_is_not_recomputed() {
        // With layer norms keeping their output, x2 (attn_out) is read only to recompute h2
        // and x3: keeping both leaves x2 unneeded.
        let keeps = vec![UnitSet::ALL.with(Unit::MlpOut); 1]
            .into_iter()
            .map(|_| {
                UnitSet::of(&[
                    Unit::NormAttn,
                    Unit::Qkv,
                    Unit::Attention,
                    Unit::NormMlp,
                    Unit::MlpIn,
                    Unit::Activation,
                    Unit::MlpOut,
                ])
            })
            .collect::<Vec<_>>();
        assert!(recomputed_units(&keeps, LayerNormSaving::SavesOutput).is_empty());
        assert_eq!(
            recomputed_units(&keeps, LayerNormSaving::SavesInput),
            vec![(0, Unit::AttnOut)]
        );
    }
}
