//! Reading an experiment file: its grids expanded, every field checked (errors naming the file
//! and the field), and its settings resolved for one profile.

use super::*;

mod checks;

pub use checks::*;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileSection {
    model: Option<ModelConfig>,
    /// Further models of the profile by name, for configurations that set `model = "<name>"`
    /// (e.g. a deep, narrow model beside the study's own).
    #[serde(default)]
    models: BTreeMap<String, ModelConfig>,
    #[serde(default)]
    train: TrainOverride,
    #[serde(default)]
    data: DataOverride,
    #[serde(default)]
    params: toml::Table,
}

/// `[grid]` (or several `[[grid]]` tables): configurations as the cross product of strategy
/// options (appended after the explicit `[[configs]]`, grid by grid). Names are
/// `[<model>-]ck<K>-<precision>[-fusion][-fusedopt][-<policy>]`, with the model's name when the
/// grid names one of the profile's named models (`model = "<name>"`) and the policy's name
/// when the grid has a `policy` axis ([`policy_slug`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Grid {
    /// A named model of every profile (`models.<name>`) that the grid's configurations train,
    /// instead of the profile's `model`.
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    checkpoint: Vec<CheckpointSpec>,
    #[serde(default)]
    precision: Vec<Precision>,
    #[serde(default)]
    fusion: Vec<bool>,
    #[serde(default)]
    fused_optimizer: Vec<bool>,
    /// Unit-level policies ([`crate::units::Policy`]) refining every K's recomputed segments:
    /// `policy = ["save_nothing", "save_matmuls", { budget = 0.3 }]` crosses each with every
    /// other axis (a K of `"none"` recomputes nothing, so its configurations take no policy).
    #[serde(default)]
    policy: Vec<crate::units::Policy>,
}

/// A policy as a configuration name's suffix: its label ([`crate::units::Policy::label`]) in
/// the characters a name may hold (`budget:0.3:profile` -> `budget_0p3_profile`,
/// `keep:qkv+attention` -> `keep_qkv-attention`).
fn policy_slug(p: &crate::units::Policy) -> String {
    p.label()
        .chars()
        .map(|c| match c {
            ':' => '_',
            '+' => '-',
            '.' => 'p',
            c => c,
        })
        .collect()
}

impl Grid {
    fn expand(&self) -> Vec<ConfigSpec> {
        let or = |v: &Vec<bool>| if v.is_empty() { vec![false] } else { v.clone() };
        let ck = if self.checkpoint.is_empty() {
            vec![CheckpointSpec::None]
        } else {
            self.checkpoint.clone()
        };
        let pr = if self.precision.is_empty() {
            vec![Precision::F32]
        } else {
            self.precision.clone()
        };
        let policies: Vec<Option<crate::units::Policy>> = if self.policy.is_empty() {
            vec![None]
        } else {
            self.policy.iter().copied().map(Some).collect()
        };
        let mut out = Vec::new();
        for &fusion in &or(&self.fusion) {
            for &p in &pr {
                for &c in &ck {
                    // Without recomputation a policy has nothing to refine: one configuration,
                    // named without one.
                    let for_k = if c == CheckpointSpec::None {
                        &[None][..]
                    } else {
                        &policies[..]
                    };
                    for &fo in &or(&self.fused_optimizer) {
                        for &policy in for_k {
                            let mut name = match &self.model {
                                Some(m) => format!("{m}-ck{c}-{p}"),
                                None => format!("ck{c}-{p}"),
                            };
                            if fusion {
                                name.push_str("-fusion");
                            }
                            if fo {
                                name.push_str("-fusedopt");
                            }
                            if let Some(policy) = &policy {
                                name.push('-');
                                name.push_str(&policy_slug(policy));
                            }
                            out.push(ConfigSpec {
                                label: name.clone(),
                                name,
                                model: self.model.clone(),
                                precision: p,
                                checkpoint: c,
                                budget: None,
                                policy,
                                fused_optimizer: fo,
                                fusion,
                                balanced_checkpointing: false,
                                attention: AttentionOption::default(),
                                attention_tile: None,
                                layer_norm: LayerNormSaving::default(),
                                autotune_level: Default::default(),
                                memory_cleanup: false,
                                memory_pool: Default::default(),
                                master_weights: false,
                                loss_scale: None,
                                checkmate: None,
                                optimizer: None,
                                weight_decay: None,
                                accumulation_steps: None,
                                nested_checkpoint: None,
                                head_chunks: None,
                                control: false,
                                maps_to: String::new(),
                                claim: None,
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// `[grid]` as one table or `[[grid]]` as several.
#[derive(Debug, Clone)]
pub(crate) enum Grids {
    One(Grid),
    Many(Vec<Grid>),
}

impl<'de> Deserialize<'de> for Grids {
    /// A table or an array of tables, each read as a [`Grid`] (so that an unknown field of a
    /// grid is named as such, not as "no variant matched").
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Grids;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a [grid] table or [[grid]] tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<Grids, A::Error> {
                Grid::deserialize(MapAccessDeserializer::new(map)).map(Grids::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> std::result::Result<Grids, A::Error> {
                Vec::<Grid>::deserialize(SeqAccessDeserializer::new(seq)).map(Grids::Many)
            }
        }
        d.deserialize_any(V)
    }
}

impl Grids {
    /// The grids with their dotted paths in the file (`grid`, or `grid[i]`).
    fn into_list(self) -> Vec<(String, Grid)> {
        match self {
            Grids::One(g) => vec![("grid".into(), g)],
            Grids::Many(v) => v
                .into_iter()
                .enumerate()
                .map(|(i, g)| (format!("grid[{i}]"), g))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExperimentFile {
    study: StudyHeader,
    #[serde(default)]
    train: TrainOverride,
    #[serde(default)]
    data: DataOverride,
    #[serde(default)]
    profiles: BTreeMap<String, ProfileSection>,
    #[serde(default)]
    configs: Vec<ConfigSpec>,
    #[serde(default)]
    grid: Option<Grids>,
    #[serde(default)]
    goals: Vec<Goal>,
    #[serde(default)]
    claims: Vec<crate::spec::claims::SourceClaim>,
    #[serde(default)]
    params: toml::Table,
}

pub(crate) fn base_dir(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    dir.parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Builds the [`Error::SpecField`]s of one experiment file.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    path: &'a Path,
}

impl Fields<'_> {
    /// The error for `field` (a dotted path such as `configs[2].budget`).
    fn err(self, field: &str, message: String) -> Error {
        Error::SpecField {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            message,
        }
    }
}

pub(crate) fn parse(
    path: &Path,
    text: &str,
    profile: Profile,
    data_override: Option<&Path>,
) -> Result<Study> {
    let fields = Fields { path };
    let mut file = read_experiment(path, text)?;
    check_header(&file, fields)?;
    let section = file
        .profiles
        .get(profile.as_str())
        .cloned()
        .unwrap_or_default();
    let train = resolve_train(section.train, file.train, profile, fields)?;
    let params = merge_params(file.params, section.params);
    let training = file.study.kind == StudyKind::Training;
    let (model, models, data) = if training {
        let model = resolve_model(section.model, profile, fields)?;
        let models = resolve_models(section.models, &model, profile, fields)?;
        let data = resolve_data(
            section.data,
            file.data,
            profile,
            path,
            data_override,
            fields,
        )?;
        (Some(model), models, Some(data))
    } else {
        if let Some(name) = section.models.keys().next() {
            return Err(fields.err(
                &format!("profiles.{profile}.models.{name}"),
                "only a training study trains models: remove the table".into(),
            ));
        }
        (None, BTreeMap::new(), None)
    };
    let generated = file.configs.len();
    if let Some(grids) = file.grid.take() {
        for (at, grid) in grids.into_list() {
            if let Some(name) = &grid.model {
                check_model_name(name, &models, &format!("{at}.model"), profile, fields)?;
            }
            file.configs.extend(grid.expand());
        }
    }
    let configs = resolve_configs(
        file.configs,
        training,
        |c, at| {
            if let Some(name) = &c.model {
                check_model_name(name, &models, &format!("{at}.model"), profile, fields)?;
            }
            if let Some(m) = &model {
                let own = c.model.as_ref().map_or(m, |name| &models[name]);
                check_checkpoint(c, at, own, profile, fields)?;
                check_micro_batch(c, at, own, profile, fields)?;
                check_head_chunks(c, at, own, profile, fields)?;
            }
            Ok(())
        },
        fields,
    )?;
    check_references(
        &file.study,
        &file.goals,
        &file.claims,
        &configs,
        generated,
        fields,
    )?;
    Ok(Study {
        path: path.to_path_buf(),
        header: file.study,
        profile,
        model,
        models,
        train,
        data,
        configs,
        goals: file.goals,
        claims: file.claims,
        params,
    })
}

/// What names the configurations (from index `generated` on made by a grid): the header's
/// timeline, the goals and, for a training study, the claims.
fn check_references(
    header: &StudyHeader,
    goals: &[Goal],
    claims: &[crate::spec::claims::SourceClaim],
    configs: &[ConfigSpec],
    generated: usize,
    fields: Fields,
) -> Result<()> {
    let training = header.kind == StudyKind::Training;
    check_timeline(&header.timeline, configs, fields)?;
    check_goals(goals, training.then_some(configs), fields)?;
    check_claims(claims, training.then_some((configs, generated)), fields)
}

/// Each model's configurations are compared with a control of that model: its first
/// configuration unless one of them is marked.
fn mark_controls(configs: &mut [ConfigSpec]) {
    let mut names: Vec<Option<String>> = configs.iter().map(|c| c.model.clone()).collect();
    names.dedup();
    for name in names {
        if !configs.iter().any(|c| c.model == name && c.control) {
            if let Some(first) = configs.iter_mut().find(|c| c.model == name) {
                first.control = true;
            }
        }
    }
}

/// The profile-free part of an experiment file ([`crate::spec::StudyOutline`]): the header,
/// the configurations with the grids expanded (names, labels and control marks as every profile
/// resolves them), the goals and the claims, each checked as [`parse`] checks them; what
/// depends on a profile (its models, the intervals against their layers, the corpus, the
/// training settings) is left to [`parse`].
pub(crate) fn outline(path: &Path, text: &str) -> Result<crate::spec::StudyOutline> {
    let fields = Fields { path };
    let mut file = read_experiment(path, text)?;
    check_header(&file, fields)?;
    let training = file.study.kind == StudyKind::Training;
    let generated = file.configs.len();
    if let Some(grids) = file.grid.take() {
        for (_, grid) in grids.into_list() {
            file.configs.extend(grid.expand());
        }
    }
    // What depends on a profile (named models, intervals against their layers) is
    // `Study::load`'s.
    let configs = resolve_configs(file.configs, training, |_, _| Ok(()), fields)?;
    check_references(
        &file.study,
        &file.goals,
        &file.claims,
        &configs,
        generated,
        fields,
    )?;
    let mut params_keys: std::collections::BTreeSet<String> = file.params.keys().cloned().collect();
    for section in file.profiles.values() {
        params_keys.extend(section.params.keys().cloned());
    }
    Ok(crate::spec::StudyOutline {
        path: path.to_path_buf(),
        header: file.study,
        configs,
        goals: file.goals,
        claims: file.claims,
        params_keys,
    })
}

/// `study.timeline` names configurations of the file, each once, at most
/// [`MAX_TIMELINE_LINES`] of one model (a figure overlays one model's configurations).
pub(crate) fn check_timeline(
    names: &[String],
    configs: &[ConfigSpec],
    fields: Fields,
) -> Result<()> {
    let mut per_model: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let Some(c) = configs.iter().find(|c| &c.name == name) else {
            return Err(fields.err(
                &format!("study.timeline[{i}]"),
                format!("`{name}` is not a configuration of this file (see its [[configs]] names)"),
            ));
        };
        if names[..i].contains(name) {
            return Err(fields.err(
                &format!("study.timeline[{i}]"),
                format!("`{name}` appears twice"),
            ));
        }
        let n = per_model.entry(c.model.as_deref()).or_default();
        *n += 1;
        if *n > MAX_TIMELINE_LINES {
            return Err(fields.err(
                &format!("study.timeline[{i}]"),
                format!(
                    "`{name}` is the {}th configuration of its model: a timeline figure \
                     overlays at most {MAX_TIMELINE_LINES}; keep the ones that matter",
                    *n
                ),
            ));
        }
    }
    Ok(())
}

/// Deserializes the file (its `[grid]`s are expanded once the profile's models are known).
pub(crate) fn read_experiment(path: &Path, text: &str) -> Result<ExperimentFile> {
    toml::from_str(text).map_err(|source| Error::Spec {
        path: path.to_path_buf(),
        source,
    })
}

/// The profile's named models (`models.<name> = { ... }`), each validated; their names are
/// valid, and no two models of the profile (its `model` included) share `layers` and
/// `d_model`, the two sizes every record and the report tell models apart by (each model's
/// configurations are compared with a control of the same model).
pub(crate) fn resolve_models(
    models: BTreeMap<String, ModelConfig>,
    main: &ModelConfig,
    profile: Profile,
    fields: Fields,
) -> Result<BTreeMap<String, ModelConfig>> {
    let shape = |m: &ModelConfig| (m.layers, m.d_model);
    let mut seen = vec![("model".to_string(), shape(main))];
    for (name, m) in &models {
        let at = format!("profiles.{profile}.models.{name}");
        if !valid_name(name) {
            return Err(fields.err(
                &at,
                format!("`{name}`: a model's name uses only letters, digits, `_` and `-`"),
            ));
        }
        validate_model(m).map_err(|(f, msg)| fields.err(&format!("{at}.{f}"), msg))?;
        if let Some((other, _)) = seen.iter().find(|(_, s)| *s == shape(m)) {
            return Err(fields.err(
                &at,
                format!(
                    "has the layers ({}) and d_model ({}) of `profiles.{profile}.{other}`: \
                     records and reports tell a study's models apart by these two sizes, so \
                     change one of them",
                    m.layers, m.d_model
                ),
            ));
        }
        seen.push((format!("models.{name}"), shape(m)));
    }
    Ok(models)
}

/// `name` (a configuration's or a grid's `model`, at field `at`) is a named model of the
/// profile.
pub(crate) fn check_model_name(
    name: &str,
    models: &BTreeMap<String, ModelConfig>,
    at: &str,
    profile: Profile,
    fields: Fields,
) -> Result<()> {
    if models.contains_key(name) {
        return Ok(());
    }
    let known = if models.is_empty() {
        "none".to_string()
    } else {
        models
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(fields.err(
        at,
        format!(
            "`{name}` is not a model of profile `{profile}`: add `models.{name} = {{ layers = ..., \
             d_model = ..., heads = ..., d_ff = ..., seq_len = ..., batch = ..., vocab = ... }}` \
             to [profiles.{profile}] (every profile needs it), or remove `model` to train the \
             profile's own model (the profile's named models: {known})"
        ),
    ))
}

/// Checks the study's name, its roles and the names of its `[profiles.*]` sections.
pub(crate) fn check_header(file: &ExperimentFile, fields: Fields) -> Result<()> {
    check_name(&file.study, fields)?;
    if !(1..=MAX_REPEATS).contains(&file.study.repeats) {
        return Err(fields.err(
            "study.repeats",
            format!(
                "{} runs per configuration: expected 1 to {MAX_REPEATS}",
                file.study.repeats
            ),
        ));
    }
    for key in file.profiles.keys() {
        key.parse::<Profile>()
            .map_err(|m| fields.err(&format!("profiles.{key}"), m))?;
    }
    check_roles(&file.study, fields)
}

/// The `[study]` header of the experiment file at `path` (text `text`), its name and roles
/// checked ([`check_roles`]); the rest of the file is not read.
///
/// # Errors
/// [`Error::Spec`] for a header that does not parse, [`Error::SpecField`] naming the field.
pub(crate) fn read_header(path: &Path, text: &str) -> Result<StudyHeader> {
    /// The file with only its `[study]` table read.
    #[derive(Deserialize)]
    struct HeaderOnly {
        study: StudyHeader,
    }
    let h: HeaderOnly = toml::from_str(text).map_err(|source| Error::Spec {
        path: path.to_path_buf(),
        source,
    })?;
    let fields = Fields { path };
    check_name(&h.study, fields)?;
    check_roles(&h.study, fields)?;
    Ok(h.study)
}

/// `study.name` is non-empty letters, digits, `_` and `-` (a folder name under `runs/`).
pub(crate) fn check_name(h: &StudyHeader, fields: Fields) -> Result<()> {
    if valid_name(&h.name) {
        return Ok(());
    }
    Err(fields.err(
        "study.name",
        format!(
            "`{}` must be non-empty and use only letters, digits, `_` and `-`",
            h.name
        ),
    ))
}

/// `study.gpu_suite` in 1..=[`MAX_SUITE_PLACE`] for a training or `fusion_ir` study;
/// `pytorch_twin` and `kernel_attribution` for a training study only.
pub(crate) fn check_roles(h: &StudyHeader, fields: Fields) -> Result<()> {
    let training = h.kind == StudyKind::Training;
    if let Some(place) = h.gpu_suite {
        if !(1..=MAX_SUITE_PLACE).contains(&place) {
            return Err(fields.err(
                "study.gpu_suite",
                format!("{place}: expected a place from 1 (runs first) to {MAX_SUITE_PLACE}"),
            ));
        }
        if !training && h.gpu_job.is_none() {
            return Err(fields.err(
                "study.gpu_suite",
                "an in-process study runs on a GPU machine only through the job it declares \
                 (`study.gpu_job`, e.g. \"fusion_chains\"): declare one or remove gpu_suite"
                    .into(),
            ));
        }
    }
    if training && h.gpu_job.is_some() {
        return Err(fields.err(
            "study.gpu_job",
            "a training study's GPU part is its jobs: remove gpu_job".into(),
        ));
    }
    for (set, key) in [
        (h.pytorch_twin, "study.pytorch_twin"),
        (h.kernel_attribution, "study.kernel_attribution"),
    ] {
        if set && !training {
            return Err(fields.err(
                key,
                "applies to a training study (kind = \"training\") only: remove it".into(),
            ));
        }
    }
    Ok(())
}

/// Most steps (warm-up or measured) a job may run: the record keeps one row per step, and no
/// study of memwall needs more than a few hundred.
pub const MAX_STEPS: usize = 1_000_000;

/// Most held-out batches a job may evaluate (each is one forward pass over `batch x seq_len`
/// tokens).
pub const MAX_EVAL_BATCHES: usize = 100_000;

/// The dotted path of a setting that a profile may override: `profiles.<p>.<table>.<key>` when
/// the profile's own table sets it, `<table>.<key>` otherwise.
pub(crate) fn origin(in_profile: bool, profile: Profile, table: &str, key: &str) -> String {
    if in_profile {
        format!("profiles.{profile}.{table}.{key}")
    } else {
        format!("{table}.{key}")
    }
}

/// The training settings (the profile's `train` over the file's `[train]`) with defaults
/// filled in, each number checked: `steps` in [1, MAX_STEPS], `warmup_steps` in
/// [0, MAX_STEPS], `lr` finite in (0, 1], `weight_decay` finite, at least 0 and with
/// `lr * weight_decay < 1` (AdamW multiplies each weight by `1 - lr * weight_decay` per step,
/// Loshchilov and Hutter 2019, Algorithm 2, line 12), `eval_batches` in [1, MAX_EVAL_BATCHES].
pub(super) fn resolve_train(
    own: TrainOverride,
    base: TrainOverride,
    profile: Profile,
    fields: Fields,
) -> Result<TrainConfig> {
    let in_profile = |key: &str| match key {
        "steps" => own.steps.is_some(),
        "warmup_steps" => own.warmup_steps.is_some(),
        "lr" => own.lr.is_some(),
        "weight_decay" => own.weight_decay.is_some(),
        _ => own.eval_batches.is_some(),
    };
    let set_in_profile: Vec<(&str, bool)> = [
        "steps",
        "warmup_steps",
        "lr",
        "weight_decay",
        "eval_batches",
    ]
    .into_iter()
    .map(|k| (k, in_profile(k)))
    .collect();
    let train = own.or(base).resolve();
    check_train(&train).map_err(|(key, message)| {
        let set = set_in_profile.iter().any(|&(k, p)| k == key && p);
        fields.err(&origin(set, profile, "train", key), message)
    })?;
    Ok(train)
}

/// The numbers of resolved training settings (see [`resolve_train`]); the key at fault and the
/// message otherwise.
pub(crate) fn check_train(train: &TrainConfig) -> std::result::Result<(), (&'static str, String)> {
    if !(1..=MAX_STEPS).contains(&train.steps) {
        return Err((
            "steps",
            format!(
                "{} is not in the accepted range [1, {MAX_STEPS}] of measured steps",
                train.steps
            ),
        ));
    }
    if train.warmup_steps > MAX_STEPS {
        return Err((
            "warmup_steps",
            format!(
                "{} is not in the accepted range [0, {MAX_STEPS}] of warm-up steps",
                train.warmup_steps
            ),
        ));
    }
    if !(train.lr.is_finite() && train.lr > 0.0 && train.lr <= 1.0) {
        return Err((
            "lr",
            format!(
                "{} is not a learning rate: use a finite number in (0, 1], e.g. 3e-4",
                train.lr
            ),
        ));
    }
    let wd = train.weight_decay;
    if !(wd.is_finite() && wd >= 0.0) {
        return Err((
            "weight_decay",
            format!("{wd} is not a weight decay: use a finite number >= 0, e.g. 0.01 (0 = none)"),
        ));
    }
    if train.lr * wd >= 1.0 {
        return Err((
            "weight_decay",
            format!(
                "{wd} with lr {} decays every weight to zero or below in one step \
                 (AdamW scales weights by 1 - lr * weight_decay): use weight_decay < {}",
                train.lr,
                1.0 / train.lr
            ),
        ));
    }
    if !(1..=MAX_EVAL_BATCHES).contains(&train.eval_batches) {
        return Err((
            "eval_batches",
            format!(
                "{} is not in the accepted range [1, {MAX_EVAL_BATCHES}] of held-out batches \
                 (eval loss and perplexity need at least one)",
                train.eval_batches
            ),
        ));
    }
    Ok(())
}

/// The file's `[params]` overridden key by key by the profile's.
pub(crate) fn merge_params(mut params: toml::Table, profile: toml::Table) -> toml::Table {
    for (k, v) in profile {
        params.insert(k, v);
    }
    params
}

/// The profile's model (a training study needs one), validated.
pub(crate) fn resolve_model(
    model: Option<ModelConfig>,
    profile: Profile,
    fields: Fields,
) -> Result<ModelConfig> {
    let field = format!("profiles.{profile}.model");
    let model = model.ok_or_else(|| {
        fields.err(
            &field,
            format!(
                "a training study needs a model for profile `{profile}`: add a \
                 [profiles.{profile}.model] table (layers, d_model, heads, d_ff, seq_len, batch, vocab)"
            ),
        )
    })?;
    validate_model(&model).map_err(|(name, m)| fields.err(&format!("{field}.{name}"), m))?;
    Ok(model)
}

/// The corpus (the profile's `data` over the file's `[data]`; relative paths are relative to
/// the study's base folder, `data_override` wins), its held-out fraction in (0, 1) (default
/// 0.1) and `max_stories` of at least 2 (one story to train on, one held out).
pub(super) fn resolve_data(
    own: DataOverride,
    base: DataOverride,
    profile: Profile,
    path: &Path,
    data_override: Option<&Path>,
    fields: Fields,
) -> Result<DataConfig> {
    let at = |set: bool, key: &str| origin(set, profile, "data", key);
    let at = (
        at(own.path.is_some(), "path"),
        at(own.eval_fraction.is_some(), "eval_fraction"),
        at(own.max_stories.is_some(), "max_stories"),
    );
    let d = own.or(base);
    let path_str = d.path.ok_or_else(|| {
        fields.err(
            "data.path",
            "a training study needs a corpus: set data.path (TinyStories .txt or .parquet)".into(),
        )
    })?;
    if path_str.trim().is_empty() && data_override.is_none() {
        return Err(fields.err(
            &at.0,
            "is empty: set it to a TinyStories .txt or .parquet file".into(),
        ));
    }
    let data_path = match data_override {
        Some(p) => p.to_path_buf(),
        None => corpus_path(path, &path_str),
    };
    let eval_fraction = d.eval_fraction.unwrap_or(0.1);
    if !(eval_fraction > 0.0 && eval_fraction < 1.0) {
        return Err(fields.err(
            &at.1,
            format!(
                "{eval_fraction} is not in the accepted range (0, 1): the fraction of stories \
                 held out for evaluation, e.g. 0.1"
            ),
        ));
    }
    if let Some(m) = d.max_stories.filter(|&m| m < 2) {
        return Err(fields.err(
            &at.2,
            format!(
                "{m} is too few: at least 2 stories are needed (one to train on, one held out \
                 for evaluation); raise it or remove it to use every story of the corpus"
            ),
        ));
    }
    Ok(DataConfig {
        path: data_path,
        eval_fraction,
        max_stories: d.max_stories,
    })
}

/// `data.path` as written if absolute, else found on the data search path of the
/// repository holding the experiment file ([`crate::data_path`]: under the repository as
/// written, `$MEMWALL_DATA_DIR`, the repository's `data/`, the user cache, `../shared/data`);
/// found nowhere, the path under the repository (what reading it then reports missing).
pub(crate) fn corpus_path(path: &Path, path_str: &str) -> PathBuf {
    crate::data_path::resolve(&base_dir(path), Path::new(path_str))
}

/// Checks every configuration (`profile_checks` adds what depends on a profile: its named
/// models, the intervals against their layers), fills in default labels and, in a training
/// study without a `control`, makes each model's first configuration its control.
pub(crate) fn resolve_configs(
    specs: Vec<ConfigSpec>,
    training: bool,
    profile_checks: impl Fn(&ConfigSpec, &str) -> Result<()>,
    fields: Fields,
) -> Result<Vec<ConfigSpec>> {
    if specs.is_empty() && training {
        return Err(fields.err(
            "configs",
            "a training study needs at least one [[configs]] entry".into(),
        ));
    }
    let mut configs = Vec::with_capacity(specs.len());
    let mut seen = HashSet::new();
    for (i, mut c) in specs.into_iter().enumerate() {
        let at = format!("configs[{i}]");
        check_config_name(&c, &at, &mut seen, fields)?;
        check_config(&c, &at, fields)?;
        profile_checks(&c, &at)?;
        if c.label.is_empty() {
            c.label = c.name.clone();
        }
        configs.push(c);
    }
    if training {
        mark_controls(&mut configs);
    }
    Ok(configs)
}
