//! The checks of single fields of an experiment file: configurations, checkpointing, claims,
//! budgets, goals and model sizes, each error naming the field and the fix.

use super::*;

/// A configuration's name is valid and not in `seen` (which it joins).
pub(crate) fn check_config_name(
    c: &ConfigSpec,
    at: &str,
    seen: &mut HashSet<String>,
    fields: Fields,
) -> Result<()> {
    if !valid_name(&c.name) {
        return Err(fields.err(
            &format!("{at}.name"),
            format!("`{}` must use only letters, digits, `_` and `-`", c.name),
        ));
    }
    if !seen.insert(c.name.clone()) {
        return Err(fields.err(
            &format!("{at}.name"),
            format!("`{}` appears twice; names must be unique", c.name),
        ));
    }
    Ok(())
}

/// A configuration's options are in range and do not contradict each other.
pub(crate) fn check_config(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if let Some(wd) = c.weight_decay {
        if !(wd.is_finite() && (0.0..1.0).contains(&wd)) {
            return Err(fields.err(
                &format!("{at}.weight_decay"),
                format!("{wd} is not a weight decay: use a finite number in [0, 1), e.g. 0.01"),
            ));
        }
    }
    check_budget(c, at, fields)?;
    check_policy(c, at, fields)?;
    check_checkmate(c, at, fields)?;
    check_balanced(c, at, fields)?;
    check_master_weights(c, at, fields)?;
    check_attention_tile(c, at, fields)?;
    check_accumulation(c, at, fields)?;
    check_nested(c, at, fields)?;
    check_claim(c, at, fields)
}

/// Nested checkpointing splits the segments of a fixed checkpoint interval: it needs
/// `checkpoint = K` (or `"sqrt"`) and at least one block per inner segment, and it runs on the
/// block-granular segment executor (not the unit executor of a `policy`). That J is below K is
/// checked with the model ([`check_checkpoint`]).
pub(crate) fn check_nested(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(j) = c.nested_checkpoint else {
        return Ok(());
    };
    let field = format!("{at}.nested_checkpoint");
    if j == 0 {
        return Err(fields.err(
            &field,
            "0 blocks per inner segment: use an integer J of at least 1 and below the \
             checkpoint interval K"
                .into(),
        ));
    }
    if c.checkpoint == CheckpointSpec::None {
        return Err(fields.err(
            &field,
            format!(
                "nested checkpointing splits the segments of `checkpoint = K` into {j}-block \
                 inner segments: set `checkpoint` to an interval above {j} (or \"sqrt\"), or \
                 remove `nested_checkpoint`"
            ),
        ));
    }
    if c.policy.is_some() {
        return Err(fields.err(
            &field,
            "nested checkpointing runs on the block-granular segment executor, a `policy` on \
             the unit executor: remove one of them from this configuration"
                .into(),
        ));
    }
    Ok(())
}

/// Gradient accumulation's micro-batch count is at least 1, and accumulation runs under plain
/// backward or a fixed checkpoint interval: the fused optimizer step needs every micro-batch's
/// gradients first, mixed precision and the unit executor run their own step, and a budget's
/// or Checkmate's plan is solved from a profile of the whole batch.
pub(crate) fn check_accumulation(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(n) = c.accumulation_steps else {
        return Ok(());
    };
    let field = format!("{at}.accumulation_steps");
    if n == 0 {
        return Err(fields.err(
            &field,
            "0 micro-batches: use an integer of at least 1 that divides the batch (1: no \
             accumulation)"
                .into(),
        ));
    }
    if n == 1 {
        return Ok(());
    }
    let others = [
        (
            "fused_optimizer",
            c.fused_optimizer,
            "the fused step applies a segment's gradients in backward, before the other micro-batches add theirs",
        ),
        (
            "master_weights",
            c.master_weights,
            "mixed precision runs its own step on the whole batch",
        ),
        (
            "policy",
            c.policy.is_some(),
            "the unit executor runs its own step on the whole batch",
        ),
        (
            "budget",
            c.budget.is_some(),
            "a budget's plan is solved from a profile of the whole batch",
        ),
        (
            "checkmate",
            c.checkmate.is_some(),
            "a Checkmate plan is solved from a profile of the whole batch",
        ),
    ];
    match others.iter().find(|(_, set, _)| *set) {
        Some((name, _, why)) => Err(fields.err(
            &field,
            format!(
                "gradient accumulation runs with plain backward or `checkpoint = K`, and {why}: \
                 remove `{name}` or `accumulation_steps` from this configuration"
            ),
        )),
        None => Ok(()),
    }
}

/// The head's chunks ([`ConfigSpec::head_chunks`]) are at least 1 and at most the tokens of one
/// step (of one micro-batch under gradient accumulation): each chunk holds at least one row.
pub(crate) fn check_head_chunks(
    c: &ConfigSpec,
    at: &str,
    model: &ModelConfig,
    profile: Profile,
    fields: Fields,
) -> Result<()> {
    let Some(chunks) = c.head_chunks else {
        return Ok(());
    };
    let micro = c.accumulation_steps.filter(|&n| n > 1).unwrap_or(1);
    let tokens = model.batch / micro.max(1) * model.seq_len;
    if chunks == 0 || chunks > tokens {
        return Err(fields.err(
            &format!("{at}.head_chunks"),
            format!(
                "{chunks} chunks of the head's logits: use an integer from 1 to {tokens}, the \
                 tokens of one step of the `{profile}` model (batch {}{} x seq_len {}), so that \
                 every chunk holds at least one token's logits",
                model.batch / micro.max(1),
                if micro > 1 { " per micro-batch" } else { "" },
                model.seq_len
            ),
        ));
    }
    Ok(())
}

/// The micro-batches of gradient accumulation split the batch evenly: `accumulation_steps`
/// divides the model's `batch`.
pub(crate) fn check_micro_batch(
    c: &ConfigSpec,
    at: &str,
    model: &ModelConfig,
    profile: Profile,
    fields: Fields,
) -> Result<()> {
    let Some(n) = c.accumulation_steps.filter(|&n| n > 1) else {
        return Ok(());
    };
    if !model.batch.is_multiple_of(n) {
        return Err(fields.err(
            &format!("{at}.accumulation_steps"),
            format!(
                "{n} micro-batches do not split the `{profile}` model's batch of {} sequences \
                 evenly: use a divisor of {} (each micro-batch must have the same size for the \
                 sum of their mean losses / {n} to be the whole batch's mean)",
                model.batch, model.batch
            ),
        ));
    }
    Ok(())
}

/// A checkpoint interval K is at most the model's layer count (K = layers is one segment: the
/// whole model recomputed once); a larger K would be silently the same as K = layers.
pub(crate) fn check_checkpoint(
    c: &ConfigSpec,
    at: &str,
    model: &ModelConfig,
    profile: Profile,
    fields: Fields,
) -> Result<()> {
    if let CheckpointSpec::Every(k) = c.checkpoint {
        if k > model.layers {
            return Err(fields.err(
                &format!("{at}.checkpoint"),
                format!(
                    "checkpoint interval K = {k} is larger than the {} layers of the `{profile}` \
                     model (profiles.{profile}.{}.layers): use an integer K in [1, {}], \
                     \"sqrt\" or \"none\"",
                    model.layers,
                    c.model
                        .as_ref()
                        .map_or("model".to_string(), |n| format!("models.{n}")),
                    model.layers
                ),
            ));
        }
    }
    if let (Some(j), Some(k)) = (c.nested_checkpoint, c.checkpoint.segment_len(model.layers)) {
        if j >= k {
            return Err(fields.err(
                &format!("{at}.nested_checkpoint"),
                format!(
                    "J = {j} blocks per inner segment is not below the checkpoint interval K = \
                     {k} of the `{profile}` model's {} layers (`checkpoint = {}`): an inner \
                     segment of K blocks or more is the segment itself; {}",
                    model.layers,
                    c.checkpoint,
                    if k > 1 {
                        format!("use J in [1, {}]", k - 1)
                    } else {
                        "a one-block segment has nothing to nest: set `checkpoint` above J".into()
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// The source's numbers of a configuration are finite and in their ranges: `peak_gib` and
/// `samples_per_s` above 0, `reduction_pct` at most 100, `perplexity` at least 1.
pub(crate) fn check_claim(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(claim) = &c.claim else {
        return Ok(());
    };
    /// A claimed number: its key, value, range test and the range in words.
    type ClaimCheck<'a> = (&'a str, Option<f64>, fn(f64) -> bool, &'a str);
    let checks: [ClaimCheck; 4] = [
        (
            "peak_gib",
            claim.peak_gib,
            |x| x > 0.0,
            "a number of GiB above 0",
        ),
        (
            "reduction_pct",
            claim.reduction_pct,
            |x| x <= 100.0,
            "a percentage at most 100 (negative: more memory than the control)",
        ),
        (
            "samples_per_s",
            claim.samples_per_s,
            |x| x > 0.0,
            "a throughput above 0",
        ),
        (
            "perplexity",
            claim.perplexity,
            |x| x >= 1.0,
            "a perplexity of at least 1",
        ),
    ];
    for (name, value, ok, range) in checks {
        if let Some(x) = value.filter(|&x| !(x.is_finite() && ok(x))) {
            return Err(fields.err(
                &format!("{at}.claim.{name}"),
                format!("{x} is not {range} (finite)"),
            ));
        }
    }
    Ok(())
}

/// `policy` refines the recomputed segments of a plan, which the unit executor runs with
/// memwall's attention and layer norm (whose backward it calls unit by unit).
pub(crate) fn check_policy(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if c.policy.is_none() {
        return Ok(());
    }
    let field = format!("{at}.policy");
    let recomputes =
        c.checkpoint != CheckpointSpec::None || c.budget.is_some() || c.checkmate.is_some();
    if !recomputes {
        return Err(fields.err(
            &field,
            "a policy says what the blocks of a recomputed segment keep: set `checkpoint` (e.g. 1, every block a segment), `budget` or `checkmate` beside it, or remove it"
                .into(),
        ));
    }
    if matches!(c.policy, Some(crate::units::Policy::Checkmate(_)))
        && (c.checkpoint != CheckpointSpec::Every(1) || c.budget.is_some() || c.checkmate.is_some())
    {
        return Err(fields.err(
            &field,
            "a Checkmate policy chooses what every block keeps itself: set `checkpoint = 1` beside `policy = { checkmate = f }` (and no `budget` or `checkmate`)"
                .into(),
        ));
    }
    if c.attention == AttentionOption::Naive {
        return Err(fields.err(
            &field,
            "the unit executor runs memwall's memory-efficient attention: remove `attention = \"naive\"` or the policy"
                .into(),
        ));
    }
    if c.layer_norm == LayerNormSaving::Composed {
        return Err(fields.err(
            &field,
            "the unit executor runs memwall's layer norm: use `layer_norm = \"saves_input\"` or `\"saves_output\"` with a policy"
                .into(),
        ));
    }
    Ok(())
}

/// `budget` is in [0, 1] and not set together with `checkpoint`.
pub(crate) fn check_budget(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(b) = c.budget else { return Ok(()) };
    if !(0.0..=1.0).contains(&b) {
        return Err(fields.err(
            &format!("{at}.budget"),
            format!("{b} is not in [0, 1] (0 = checkpoint everything, 1 = none)"),
        ));
    }
    if c.checkpoint != CheckpointSpec::None {
        return Err(fields.err(
            &format!("{at}.budget"),
            "set either `budget` or `checkpoint`, not both".into(),
        ));
    }
    Ok(())
}

/// `checkmate` is a fraction in (0, 1] and replaces `checkpoint` and `budget`.
pub(crate) fn check_checkmate(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(f) = c.checkmate else { return Ok(()) };
    if !(f > 0.0 && f <= 1.0) {
        return Err(fields.err(
            &format!("{at}.checkmate"),
            format!("{f} is not in (0, 1] (a fraction of the no-recomputation peak)"),
        ));
    }
    if c.checkpoint != CheckpointSpec::None || c.budget.is_some() {
        return Err(fields.err(
            &format!("{at}.checkmate"),
            "a Checkmate plan replaces `checkpoint` and `budget`: set only one".into(),
        ));
    }
    Ok(())
}

/// Burn's `BalancedCheckpointing` is an autodiff strategy of plain backward: it replaces
/// `checkpoint`, `budget` and `checkmate`, and the fused optimizer step (which runs backward
/// segment by segment) cannot run under it.
pub(crate) fn check_balanced(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if !c.balanced_checkpointing {
        return Ok(());
    }
    let others = [
        ("checkpoint", c.checkpoint != CheckpointSpec::None),
        ("budget", c.budget.is_some()),
        ("checkmate", c.checkmate.is_some()),
        ("fused_optimizer", c.fused_optimizer),
    ];
    match others.iter().find(|(_, set)| *set) {
        Some((name, _)) => Err(fields.err(
            &format!("{at}.balanced_checkpointing"),
            format!(
                "Burn's BalancedCheckpointing is an autodiff strategy of plain backward: remove \
                 `{name}` or `balanced_checkpointing` from this configuration"
            ),
        )),
        None => Ok(()),
    }
}

/// f32 master weights need a 16-bit precision, loss scaling needs master weights, and mixed
/// precision runs plain backward (no checkpointing, budget, Checkmate or fused optimizer).
pub(crate) fn check_master_weights(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    if c.master_weights && c.precision == Precision::F32 {
        return Err(fields.err(
            &format!("{at}.master_weights"),
            "f32 master weights keep f32 copies of f16/bf16 parameters: set precision = \"f16\" or \"bf16\"".into(),
        ));
    }
    if c.loss_scale.is_some() && !c.master_weights {
        return Err(fields.err(
            &format!("{at}.loss_scale"),
            "loss scaling unscales gradients into f32 master weights: set master_weights = true"
                .into(),
        ));
    }
    let reshapes_backward = c.checkpoint != CheckpointSpec::None
        || c.budget.is_some()
        || c.checkmate.is_some()
        || c.fused_optimizer
        || c.balanced_checkpointing;
    if c.master_weights && reshapes_backward {
        return Err(fields.err(
            &format!("{at}.master_weights"),
            "mixed precision with master weights runs plain backward: remove checkpoint, budget, checkmate, fused_optimizer and balanced_checkpointing from this configuration".into(),
        ));
    }
    Ok(())
}

/// `attention_tile` is at least 1 token and only set for the memory-efficient attention.
pub(crate) fn check_attention_tile(c: &ConfigSpec, at: &str, fields: Fields) -> Result<()> {
    let Some(t) = c.attention_tile else {
        return Ok(());
    };
    if t == 0 {
        return Err(fields.err(
            &format!("{at}.attention_tile"),
            "the tile size must be at least 1 token (default 1024)".into(),
        ));
    }
    if c.attention == AttentionOption::Naive {
        return Err(fields.err(
            &format!("{at}.attention_tile"),
            "the naive attention has no tiles: remove attention_tile or set attention = \"memory_efficient\"".into(),
        ));
    }
    Ok(())
}

/// Every goal names its comparison and has a finite positive threshold; its sides leave the
/// precision out (a goal compares two configurations at the precision it is evaluated at) and,
/// in a training study (`configs`), each picks at least one configuration of the file in some
/// group ([`crate::spec::ConfigSelector::matches_in_group`]).
pub(crate) fn check_goals(
    goals: &[Goal],
    configs: Option<&[ConfigSpec]>,
    fields: Fields,
) -> Result<()> {
    for (i, g) in goals.iter().enumerate() {
        if g.label.trim().is_empty() {
            return Err(fields.err(
                &format!("goals[{i}].label"),
                "must name the comparison (it is the report's row label)".into(),
            ));
        }
        if !(g.at_most.is_finite() && g.at_most > 0.0) {
            return Err(fields.err(
                &format!("goals[{i}].at_most"),
                format!("{} is not a ratio: use a finite number above 0", g.at_most),
            ));
        }
        for (side, sel) in [("numerator", &g.numerator), ("denominator", &g.denominator)] {
            if let Some(p) = sel.precision {
                return Err(fields.err(
                    &format!("goals[{i}].{side}.precision"),
                    format!(
                        "a goal is evaluated at each precision with both sides at that \
                         precision: remove `precision = \"{p}\"`"
                    ),
                ));
            }
            if let Some(configs) = configs {
                if !configs.iter().any(|c| sel.matches_in_group(c)) {
                    return Err(fields.err(
                        &format!("goals[{i}].{side}"),
                        format!(
                            "`{}` picks no configuration of this file: name the fields of a \
                             [[configs]] entry or a [[grid]] point (every field left out is at \
                             its default)",
                            sel.describe()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Largest vocabulary: token ids are stored as u32 (`train.tokens`, `eval.tokens`).
pub const MAX_VOCAB: usize = 1 << 32;

/// Every size of the model is at least 1, `heads` divides `d_model`, and `vocab` is in
/// [260, 2^32]. Returns the offending field's name and the message. Whether the sizes fit the
/// device is checked against a memory estimate before any job runs
/// ([`ModelConfig::memory_estimate`](crate::spec::MemoryEstimate)).
pub(crate) fn validate_model(m: &ModelConfig) -> std::result::Result<(), (&'static str, String)> {
    let positive = [
        ("layers", m.layers),
        ("d_model", m.d_model),
        ("heads", m.heads),
        ("d_ff", m.d_ff),
        ("seq_len", m.seq_len),
        ("batch", m.batch),
        ("vocab", m.vocab),
    ];
    for (name, v) in positive {
        if v == 0 {
            return Err((name, format!("is 0: `{name}` must be at least 1")));
        }
    }
    if !m.d_model.is_multiple_of(m.heads) {
        return Err((
            "heads",
            format!(
                "`heads` ({}) must divide `d_model` ({}): each head gets d_model / heads dimensions",
                m.heads, m.d_model
            ),
        ));
    }
    if !(260..=MAX_VOCAB).contains(&m.vocab) {
        return Err((
            "vocab",
            format!(
                "{} is not in the accepted range [260, {MAX_VOCAB}] (256 byte tokens plus \
                 specials and merges; token ids are u32)",
                m.vocab
            ),
        ));
    }
    Ok(())
}

/// Checks `[[claims]]`: ids unique and well-formed, a quotation and a location, finite
/// numbers, a derived value explained, and a measure or a reason it is not comparable; for a
/// training study (`configs` given, the configurations from index `generated` on made by a
/// `[[grid]]`) each claim's configuration or sweep is one of the file
/// ([`check_training_target`]).
pub(crate) fn check_claims(
    claims: &[crate::spec::claims::SourceClaim],
    configs: Option<(&[ConfigSpec], usize)>,
    fields: Fields,
) -> Result<()> {
    let mut ids = HashSet::new();
    for (i, c) in claims.iter().enumerate() {
        let at = |f: &str| format!("claims[{i}].{f}");
        if !valid_name(&c.id) || !ids.insert(c.id.as_str()) {
            return Err(fields.err(
                &at("id"),
                format!(
                    "`{}` must be non-empty, unique among the claims, and use only letters, \
                     digits, `_` and `-`",
                    c.id
                ),
            ));
        }
        check_claim_text(c).map_err(|(f, m)| fields.err(&at(f), m))?;
        let Some((configs, generated)) = configs else {
            if c.config.is_some() || c.sweep.is_some() || c.against.is_some() {
                let f = if c.config.is_some() {
                    "config"
                } else if c.sweep.is_some() {
                    "sweep"
                } else {
                    "against"
                };
                return Err(fields.err(
                    &at(f),
                    "only a training study's claims pick configurations: remove it".into(),
                ));
            }
            continue;
        };
        if c.measure.is_empty() {
            continue;
        }
        let field = match (&c.config, &c.sweep) {
            (Some(_), None) => "config",
            (None, Some(_)) => "sweep",
            _ => "measure",
        };
        check_training_target(c, configs, generated).map_err(|m| fields.err(&at(field), m))?;
    }
    Ok(())
}
/// One claim's own fields: a quotation and a location, finite numbers, a derived value
/// explained, and a measure or a reason it is not comparable. Returns the field and message.
pub(crate) fn check_claim_text(
    c: &crate::spec::claims::SourceClaim,
) -> std::result::Result<(), (&'static str, String)> {
    if c.quote.trim().is_empty() || c.location.trim().is_empty() {
        let f = if c.quote.trim().is_empty() {
            "quote"
        } else {
            "where"
        };
        return Err((
            f,
            "must not be empty: quote the document's words and say where they stand".into(),
        ));
    }
    let rule = &c.agree;
    for (name, v) in [
        ("value", c.value),
        ("agree.within", rule.within),
        ("agree.within_rel", rule.within_rel),
        ("agree.at_most", rule.at_most),
        ("agree.at_least", rule.at_least),
    ] {
        if v.is_some_and(|x| !x.is_finite()) {
            return Err((name, "must be a finite number".into()));
        }
    }
    if c.derived.as_deref().is_some_and(|d| d.trim().is_empty()) {
        return Err((
            "derived",
            "when given, must say how the value is computed from the document's numbers".into(),
        ));
    }
    if c.not_comparable.is_none() && c.measure.is_empty() {
        return Err((
            "measure",
            "name the measurement that answers the claim, or say why none can with \
             `not_comparable = \"...\"`"
                .into(),
        ));
    }
    Ok(())
}

/// Fewest configurations a sweep measure needs: the fit `a * ceil(N / K) + b * K + c` has
/// three coefficients, and a fourth point leaves it a residual to judge it by.
pub const MIN_SWEEP_POINTS: usize = 4;

/// A training claim's configuration or sweep ([`crate::spec::claims::SourceClaim::training_target`]):
/// a `config` selector matching exactly one configuration, a `sweep` selector with at least
/// [`MIN_SWEEP_POINTS`] intervals (no two configurations at one interval), or
/// `<configuration>.<metric>` naming a `[[configs]]` entry; a grid's configuration (index
/// `generated` on) is picked by its fields, so its generated name is refused with the selector
/// that picks it.
pub(crate) fn check_training_target(
    claim: &crate::spec::claims::SourceClaim,
    configs: &[ConfigSpec],
    generated: usize,
) -> std::result::Result<(), String> {
    use crate::spec::claims::TrainingTarget;
    match claim.training_target(configs)? {
        TrainingTarget::Sweep(sweep, _) => {
            if claim.against.is_some() {
                return Err(
                    "`against` compares one configuration with another; a sweep metric has its \
                     own control: remove `against`"
                        .into(),
                );
            }
            let mut seen: Vec<(CheckpointSpec, &str)> = Vec::new();
            for c in configs {
                let Some(k) = sweep.sweep_member(c) else {
                    continue;
                };
                if let Some((_, other)) = seen.iter().find(|(j, _)| *j == k) {
                    return Err(format!(
                        "`sweep = {}` has two configurations at checkpoint {k} (`{other}` and \
                         `{}`): give them a field that tells them apart",
                        sweep.describe(),
                        c.name
                    ));
                }
                seen.push((k, &c.name));
            }
            if seen.len() < MIN_SWEEP_POINTS {
                return Err(format!(
                    "`sweep = {}` matches {} checkpointing configuration(s) of this file: a \
                     sweep metric fits three coefficients and needs at least \
                     {MIN_SWEEP_POINTS} intervals",
                    sweep.describe(),
                    seen.len()
                ));
            }
        }
        TrainingTarget::Config(config, metric) => {
            if let Some(against) = &claim.against {
                check_against(against, config, metric, configs, generated)?;
            }
            let index = configs.iter().position(|c| std::ptr::eq(c, config));
            if claim.config.is_none() && index.is_some_and(|i| i >= generated) {
                let metric_name = metric.name();
                return Err(format!(
                    "`{}` is a name a [[grid]] made: pick the configuration by its fields, \
                     `config = {}` and `measure = \"{metric_name}\"`",
                    config.name,
                    selector_of(config).describe()
                ));
            }
        }
    }
    Ok(())
}

/// A claim's `against`: a `[[configs]]` entry of the file (not a name a `[[grid]]` made, index
/// `generated` on) other than the claim's `config`, with the same model and optimizer, for a
/// relative metric only (the pair differs in the options the claim is about, not in what it
/// trains).
fn check_against(
    against: &str,
    config: &ConfigSpec,
    metric: crate::spec::claims::TrainingMetric,
    configs: &[ConfigSpec],
    generated: usize,
) -> std::result::Result<(), String> {
    if !metric.relative() {
        return Err(format!(
            "`against = \"{against}\"` needs a metric taken against another configuration \
             (reduction_pct, step_time_ratio, speedup, perplexity_ratio); `{}` is not one: \
             remove `against`",
            metric.name()
        ));
    }
    let Some(other) = configs.iter().find(|c| c.name == against) else {
        return Err(format!(
            "`against = \"{against}\"` is not a configuration of this file; configurations: {}",
            configs
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    if configs.iter().position(|c| c.name == against) >= Some(generated) {
        return Err(format!(
            "`against = \"{against}\"` is a name a [[grid]] made: compare with a [[configs]] \
             entry, whose name the file itself gives"
        ));
    }
    if other.name == config.name {
        return Err(format!(
            "`against = \"{against}\"` is the claim's own configuration: name the one it is \
             compared with"
        ));
    }
    if other.model != config.model || other.optimizer != config.optimizer {
        return Err(format!(
            "`against = \"{against}\"` trains another model or optimizer than `{}`: a pair \
             compares like with like, differing only in the option the claim is about",
            config.name
        ));
    }
    Ok(())
}

/// The selector that picks `config` (its grid fields that are not at their defaults).
fn selector_of(config: &ConfigSpec) -> crate::spec::ConfigSelector {
    crate::spec::ConfigSelector {
        model: config.model.clone(),
        checkpoint: (config.checkpoint != CheckpointSpec::None).then_some(config.checkpoint),
        precision: (config.precision != Precision::F32).then_some(config.precision),
        fusion: config.fusion.then_some(true),
        fused_optimizer: config.fused_optimizer.then_some(true),
        optimizer: config.optimizer,
        budget: config.budget,
        accumulation_steps: config.accumulation_steps,
        nested_checkpoint: config.nested_checkpoint,
    }
}
