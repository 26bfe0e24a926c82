//! Where a number that judges a claim comes from ([`Provenance`]) and what a claim is about
//! ([`ClaimAbout`]): together they decide whether a verdict could have gone the other way.
//!
//! A claim about the world (memory, time, accuracy of real training) is judged on a quantity
//! that a run measured, or one derived from measured quantities; a claim about what an algorithm
//! computes may also be judged on our implementation's output; only a claim about a definition
//! may be judged on arithmetic from the configuration, and the report then says so beside the
//! verdict. `memwall claims --check` refuses any other pairing ([`ClaimAbout::admits`]).

use serde::{Deserialize, Serialize};

/// Where a measure's value comes from, with the instrument or the formula in words.
///
/// ```
/// use memwall_core::spec::provenance::{ClaimAbout, Provenance};
/// let timed = Provenance::Measured("median step time, wall clock".into());
/// assert!(ClaimAbout::World.admits(&timed));
/// let constant = Provenance::Arithmetic("f16 mantissa bits - bf16 mantissa bits".into());
/// assert!(!ClaimAbout::World.admits(&constant));
/// assert!(ClaimAbout::Definition.admits(&constant));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    /// Read from an instrument during a real run of ours: a timer, an allocator's peak, a
    /// counter of bytes sent or of operations executed. The text names the instrument.
    Measured(String),
    /// Computed from measured values; the text is the formula (e.g. "1 - peak / control's
    /// peak, both exact peak allocated bytes").
    Derived(String),
    /// The output of an algorithm of ours run on its input (a memory planner on a graph, a
    /// solver's schedule, reverse-mode AD on an expression, a sum rounded in a format): what
    /// our implementation computes, not what hardware did. The text names the algorithm.
    Computed(String),
    /// Arithmetic from the configuration or from constants (a format's range, bytes per value
    /// times a count, a cost model): it holds whatever any run does. The text is the formula.
    Arithmetic(String),
}

impl Provenance {
    /// "measured", "derived", "computed" or "arithmetic".
    pub fn kind(&self) -> &'static str {
        match self {
            Provenance::Measured(_) => "measured",
            Provenance::Derived(_) => "derived",
            Provenance::Computed(_) => "computed",
            Provenance::Arithmetic(_) => "arithmetic",
        }
    }

    /// The instrument, formula or algorithm in words.
    pub fn how(&self) -> &str {
        match self {
            Provenance::Measured(s)
            | Provenance::Derived(s)
            | Provenance::Computed(s)
            | Provenance::Arithmetic(s) => s,
        }
    }

    /// `kind: how`, e.g. "measured: median step time, wall clock".
    pub fn describe(&self) -> String {
        format!("{}: {}", self.kind(), self.how())
    }
}

/// What a claim states (`about` of a `[[claims]]` entry), which decides the provenance of the
/// measures that may judge it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimAbout {
    /// What training, inference or a kernel does on hardware (memory, time, accuracy): judged
    /// on a [`Provenance::Measured`] or [`Provenance::Derived`] quantity. The default.
    #[default]
    World,
    /// What an algorithm computes (a memory plan, a schedule, a solver's bound, a gradient, a
    /// rounded sum): judged on a measured or derived quantity or on our implementation's output
    /// ([`Provenance::Computed`]).
    Computation,
    /// What follows from a definition (a number format's constants, the arithmetic of a
    /// storage scheme): any provenance, arithmetic included; the report says "by definition"
    /// beside the verdict.
    Definition,
}

impl ClaimAbout {
    /// "world", "computation" or "definition", as written in an experiment file.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimAbout::World => "world",
            ClaimAbout::Computation => "computation",
            ClaimAbout::Definition => "definition",
        }
    }

    /// Whether a measure of provenance `p` may judge a claim about `self`.
    pub fn admits(self, p: &Provenance) -> bool {
        matches!(
            (self, p),
            (ClaimAbout::Definition, _)
                | (_, Provenance::Measured(_) | Provenance::Derived(_))
                | (ClaimAbout::Computation, Provenance::Computed(_))
        )
    }

    /// Why a measure of provenance `p` may not judge such a claim, for `memwall claims
    /// --check`; `None` when it may.
    pub fn refusal(self, p: &Provenance) -> Option<String> {
        if self.admits(p) {
            return None;
        }
        Some(match self {
            ClaimAbout::World => format!(
                "the claim is about the world (about = \"world\") but its measure is {}: judge it \
                 on a measured quantity or one derived from measured quantities, or mark it \
                 not_comparable with the reason",
                p.describe()
            ),
            _ => format!(
                "the claim is about a computation (about = \"computation\") but its measure is \
                 {}: arithmetic from the configuration cannot disagree with it; judge it on the \
                 algorithm's output or a measurement",
                p.describe()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_claim_kind_admits_what_can_disagree_with_it() {
        let m = Provenance::Measured("timer".into());
        let d = Provenance::Derived("a / b".into());
        let c = Provenance::Computed("planner".into());
        let a = Provenance::Arithmetic("8 B x n".into());
        let admitted = |about: ClaimAbout| {
            [&m, &d, &c, &a]
                .iter()
                .map(|p| about.admits(p))
                .collect::<Vec<_>>()
        };
        assert_eq!(admitted(ClaimAbout::World), [true, true, false, false]);
        assert_eq!(admitted(ClaimAbout::Computation), [true, true, true, false]);
        assert_eq!(admitted(ClaimAbout::Definition), [true, true, true, true]);
        assert!(ClaimAbout::World
            .refusal(&a)
            .unwrap()
            .contains("arithmetic: 8 B x n"));
        assert!(ClaimAbout::World.refusal(&m).is_none());
        let back: ClaimAbout = serde_json::from_str("\"computation\"").unwrap();
        assert_eq!(back, ClaimAbout::Computation);
    }
}
