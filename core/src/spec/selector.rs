//! Choosing configurations of a study by their typed strategy fields, not by their names.
//!
//! A claim names the configuration it is answered by (`config = { checkpoint = "sqrt" }`) or
//! the checkpoint-interval sweep (`sweep = { model = "deep", fused_optimizer = true }`) with the
//! same fields a `[[configs]]` entry or a `[[grid]]` sets. A field the selector leaves out is
//! at its default (the profile's model, f32, no checkpointing, no fusion, no fused optimizer
//! step, the study's optimizer, no budget), so that a selector picks the configurations that
//! differ from the plain one in the named fields only, as PyTorch's and JAX's benchmark tables
//! are read ("the same run, only with X"). A grid's generated names (`deep-ck3-f32-fusedopt`)
//! are never parsed: the fields are compared with the configuration's own fields.

use super::{CheckpointSpec, ConfigSpec, OptimizerKind, Precision};
use serde::{Deserialize, Serialize};

/// The strategy fields a claim's `config` or `sweep` names (every one optional; a field left
/// out is at its default, see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSelector {
    /// One of the profile's named models (`models.<name>`); default the profile's `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Activation checkpointing (`"none"`, `K`, `"sqrt"`); default none. A sweep varies it
    /// and must leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointSpec>,
    /// Precision of parameters and activations; default f32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// Burn's kernel-fusion backend; default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<bool>,
    /// The optimizer step fused into backward; default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_optimizer: Option<bool>,
    /// The configuration's own optimizer; default the study's `[train] optimizer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer: Option<OptimizerKind>,
    /// Activation memory budget in [0, 1]; default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<f64>,
    /// Gradient accumulation's micro-batches per optimizer step; default 1 (none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accumulation_steps: Option<usize>,
    /// Nested checkpointing's blocks per inner segment; default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_checkpoint: Option<usize>,
}

impl ConfigSelector {
    /// The plain configuration with the selector's fields set: what a matching configuration's
    /// strategy equals.
    fn wanted(&self) -> ConfigSpec {
        ConfigSpec {
            model: self.model.clone(),
            checkpoint: self.checkpoint.unwrap_or_default(),
            precision: self.precision.unwrap_or_default(),
            fusion: self.fusion.unwrap_or_default(),
            fused_optimizer: self.fused_optimizer.unwrap_or_default(),
            optimizer: self.optimizer,
            budget: self.budget,
            accumulation_steps: self.accumulation_steps.filter(|&n| n != 1),
            nested_checkpoint: self.nested_checkpoint,
            ..ConfigSpec::default()
        }
    }

    /// Whether `config` is the configuration this selector names: every strategy field equal
    /// to the selector's, or to its default where the selector leaves it out. Name, label,
    /// control mark, `maps_to` and the source's numbers are not strategy and are not compared.
    pub fn matches(&self, config: &ConfigSpec) -> bool {
        strategy_of(config) == self.wanted()
    }

    /// Whether `config` is the configuration this selector names inside one group of a report
    /// (one model, one precision, one optimizer): as [`ConfigSelector::matches`], except that
    /// the model, the precision and the optimizer the selector leaves out are `config`'s own,
    /// and so is the weight decay (the optimizer's hyperparameter, which a selector does not
    /// name). A `[[goals]]` side such as `{ checkpoint = 1 }` so picks the K = 1 configuration
    /// of every model, precision and optimizer; a field the selector names is still compared.
    pub fn matches_in_group(&self, config: &ConfigSpec) -> bool {
        let mut wanted = self.wanted();
        if self.model.is_none() {
            wanted.model = config.model.clone();
        }
        if self.precision.is_none() {
            wanted.precision = config.precision;
        }
        if self.optimizer.is_none() {
            wanted.optimizer = config.optimizer;
        }
        wanted.weight_decay = config.weight_decay;
        strategy_of(config) == wanted
    }

    /// The checkpointing of `config` when it is a point of the sweep this selector names: every
    /// strategy field but `checkpoint` as [`ConfigSelector::matches`] compares them. The
    /// point without checkpointing (`CheckpointSpec::None`) is the sweep's control.
    pub fn sweep_point(&self, config: &ConfigSpec) -> Option<CheckpointSpec> {
        let mut wanted = self.wanted();
        wanted.checkpoint = config.checkpoint;
        (strategy_of(config) == wanted).then_some(config.checkpoint)
    }

    /// The interval of `config` when it is a member of the sweep (it checkpoints: every K or
    /// sqrt), else `None`; the sweep's control is a point, not a member.
    pub fn sweep_member(&self, config: &ConfigSpec) -> Option<CheckpointSpec> {
        self.sweep_point(config)
            .filter(|c| *c != CheckpointSpec::None)
    }

    /// The selector as a TOML inline table (`{ model = "deep", fused_optimizer = true }`); `{}`
    /// for the plain configuration.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("model = \"{m}\""));
        }
        if let Some(c) = self.checkpoint {
            parts.push(match c {
                CheckpointSpec::Every(k) => format!("checkpoint = {k}"),
                other => format!("checkpoint = \"{other}\""),
            });
        }
        if let Some(p) = self.precision {
            parts.push(format!("precision = \"{p}\""));
        }
        if let Some(f) = self.fusion {
            parts.push(format!("fusion = {f}"));
        }
        if let Some(f) = self.fused_optimizer {
            parts.push(format!("fused_optimizer = {f}"));
        }
        if let Some(o) = self.optimizer {
            parts.push(format!("optimizer = \"{}\"", o.as_str()));
        }
        if let Some(b) = self.budget {
            parts.push(format!("budget = {b}"));
        }
        if let Some(n) = self.accumulation_steps.filter(|&n| n != 1) {
            parts.push(format!("accumulation_steps = {n}"));
        }
        if let Some(j) = self.nested_checkpoint {
            parts.push(format!("nested_checkpoint = {j}"));
        }
        if parts.is_empty() {
            "{}".into()
        } else {
            format!("{{ {} }}", parts.join(", "))
        }
    }
}

/// `config` without what is not strategy (name, label, control mark, `maps_to`, the source's
/// numbers).
fn strategy_of(config: &ConfigSpec) -> ConfigSpec {
    ConfigSpec {
        name: String::new(),
        label: String::new(),
        control: false,
        maps_to: String::new(),
        claim: None,
        // 1 micro-batch is no accumulation, written or not.
        accumulation_steps: config.accumulation_steps.filter(|&n| n != 1),
        ..config.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, f: impl FnOnce(&mut ConfigSpec)) -> ConfigSpec {
        let mut c = ConfigSpec {
            name: name.into(),
            label: name.into(),
            ..ConfigSpec::default()
        };
        f(&mut c);
        c
    }

    #[test]
    fn a_selector_matches_by_fields_whatever_the_name() {
        let sel: ConfigSelector = toml::from_str("checkpoint = \"sqrt\"").unwrap();
        // A name that says another interval does not matter; the field does.
        assert!(sel.matches(&config("ck4-f32", |c| c.checkpoint = CheckpointSpec::Sqrt)));
        assert!(!sel.matches(&config("cksqrt-f32", |c| c.checkpoint = CheckpointSpec::Every(4))));
        // A field left out is at its default: a bf16 or fused configuration is another one.
        assert!(!sel.matches(&config("x", |c| {
            c.checkpoint = CheckpointSpec::Sqrt;
            c.precision = Precision::Bf16;
        })));
        assert!(!sel.matches(&config("x", |c| {
            c.checkpoint = CheckpointSpec::Sqrt;
            c.fusion = true;
        })));
        // Fields that are not strategy are not compared.
        assert!(sel.matches(&config("x", |c| {
            c.checkpoint = CheckpointSpec::Sqrt;
            c.control = true;
            c.maps_to = "the source's row".into();
        })));
    }

    #[test]
    fn gradient_accumulation_is_a_field_one_micro_batch_its_default() {
        let plain: ConfigSelector = toml::from_str("checkpoint = \"none\"").unwrap();
        let four: ConfigSelector = toml::from_str("accumulation_steps = 4").unwrap();
        let one: ConfigSelector = toml::from_str("accumulation_steps = 1").unwrap();
        let accumulating = config("a", |c| c.accumulation_steps = Some(4));
        let written_one = config("b", |c| c.accumulation_steps = Some(1));
        assert!(four.matches(&accumulating));
        assert!(!plain.matches(&accumulating), "left out is no accumulation");
        assert!(!four.matches(&written_one));
        // One micro-batch is the whole batch, written or not, on either side.
        assert!(plain.matches(&written_one) && one.matches(&config("c", |_| {})));
    }

    #[test]
    fn nested_checkpointing_is_a_field_none_its_default() {
        let outer: ConfigSelector = toml::from_str("checkpoint = 32").unwrap();
        let nested: ConfigSelector =
            toml::from_str("checkpoint = 32\nnested_checkpoint = 4").unwrap();
        let c = config("n", |c| {
            c.checkpoint = CheckpointSpec::Every(32);
            c.nested_checkpoint = Some(4);
        });
        assert!(nested.matches(&c));
        assert!(!outer.matches(&c), "left out is no nesting");
        assert!(!nested.matches(&config("k", |c| c.checkpoint = CheckpointSpec::Every(32))));
        assert_eq!(
            nested.describe(),
            "{ checkpoint = 32, nested_checkpoint = 4 }"
        );
    }

    #[test]
    fn in_a_group_the_model_and_precision_left_out_are_the_configurations_own() {
        let sel: ConfigSelector = toml::from_str("checkpoint = 1").unwrap();
        let k1 = |model: Option<&str>, p: Precision| {
            config("x", |c| {
                c.model = model.map(Into::into);
                c.precision = p;
                c.checkpoint = CheckpointSpec::Every(1);
            })
        };
        assert!(sel.matches_in_group(&k1(Some("deep"), Precision::Bf16)));
        assert!(
            !sel.matches(&k1(Some("deep"), Precision::Bf16)),
            "not the plain rule"
        );
        // Every other strategy field is still at its default.
        let mut fused = k1(None, Precision::F32);
        fused.fused_optimizer = true;
        assert!(!sel.matches_in_group(&fused));
        let mut budget = k1(None, Precision::F32);
        budget.budget = Some(0.5);
        assert!(!sel.matches_in_group(&budget));
        // The optimizer and its weight decay are the configuration's own, unless named.
        let mut adafactor = k1(None, Precision::F32);
        adafactor.optimizer = Some(OptimizerKind::Adafactor);
        adafactor.weight_decay = Some(0.01);
        assert!(sel.matches_in_group(&adafactor));
        let adamw: ConfigSelector =
            toml::from_str("checkpoint = 1\noptimizer = \"adamw\"").unwrap();
        assert!(!adamw.matches_in_group(&adafactor));
        // A model the selector names is compared.
        let deep: ConfigSelector = toml::from_str("model = \"deep\"\ncheckpoint = 1").unwrap();
        assert!(deep.matches_in_group(&k1(Some("deep"), Precision::F16)));
        assert!(!deep.matches_in_group(&k1(Some("wide"), Precision::F16)));
        assert!(!deep.matches_in_group(&k1(None, Precision::F16)));
    }

    #[test]
    fn a_sweep_varies_the_checkpoint_only() {
        let sel: ConfigSelector =
            toml::from_str("model = \"deep\"\nfused_optimizer = true").unwrap();
        let deep = |k: CheckpointSpec, fo: bool| {
            config("any-name", |c| {
                c.model = Some("deep".into());
                c.checkpoint = k;
                c.fused_optimizer = fo;
            })
        };
        assert_eq!(
            sel.sweep_member(&deep(CheckpointSpec::Every(3), true)),
            Some(CheckpointSpec::Every(3))
        );
        assert_eq!(
            sel.sweep_member(&deep(CheckpointSpec::Sqrt, true)),
            Some(CheckpointSpec::Sqrt)
        );
        // The control is a point of the sweep, not a member.
        assert_eq!(
            sel.sweep_point(&deep(CheckpointSpec::None, true)),
            Some(CheckpointSpec::None)
        );
        assert_eq!(sel.sweep_member(&deep(CheckpointSpec::None, true)), None);
        // Another field differs: not in the sweep.
        assert_eq!(
            sel.sweep_point(&deep(CheckpointSpec::Every(3), false)),
            None
        );
        let shallow = config("deep-ck3-f32-fusedopt", |c| {
            c.checkpoint = CheckpointSpec::Every(3);
            c.fused_optimizer = true;
        });
        assert_eq!(sel.sweep_point(&shallow), None, "the name is not read");
    }

    #[test]
    fn unknown_fields_are_refused_and_the_description_reads_back() {
        let err = toml::from_str::<ConfigSelector>("precison = \"f16\"").unwrap_err();
        assert!(err.to_string().contains("precison"), "{err}");
        for text in [
            "{ model = \"deep\", fused_optimizer = true }",
            "{ checkpoint = 4, precision = \"bf16\", optimizer = \"adafactor\" }",
            "{ checkpoint = \"sqrt\", fusion = true, budget = 0.5 }",
        ] {
            let sel: ConfigSelector = toml::from_str(&format!("s = {text}"))
                .map(|t: toml::Table| t["s"].clone().try_into().unwrap())
                .unwrap();
            assert_eq!(sel.describe(), text);
        }
        assert_eq!(ConfigSelector::default().describe(), "{}");
    }
}
