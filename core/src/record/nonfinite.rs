//! Serde for floats that may be infinite or NaN: JSON has no such numbers (serde_json writes
//! them as `null`, which does not read back as a float), so a record stores them as the strings
//! `"inf"`, `"-inf"` and `"NaN"`. Use as `#[serde(with = "memwall_core::record::nonfinite")]` on
//! an `f64` or `f32` field.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

/// A float stored through `f64` (an `f32` widens exactly and narrows back to itself).
pub trait Float: Copy {
    /// The value as `f64`.
    fn to_f64(self) -> f64;
    /// The value of this type nearest to `x`.
    fn from_f64(x: f64) -> Self;
}

impl Float for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl Float for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

/// Writes a finite `x` as a number, else as `"inf"`, `"-inf"` or `"NaN"`.
///
/// # Errors
/// The serializer's.
pub fn serialize<T: Float, S: Serializer>(x: &T, s: S) -> Result<S::Ok, S::Error> {
    let x = x.to_f64();
    if x.is_finite() {
        s.serialize_f64(x)
    } else if x.is_nan() {
        s.serialize_str("NaN")
    } else if x > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Repr {
    Number(f64),
    Text(String),
}

/// Reads what [`serialize`] wrote.
///
/// # Errors
/// Neither a number nor one of the three strings.
pub fn deserialize<'de, T: Float, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    let x = match Repr::deserialize(d)? {
        Repr::Number(x) => x,
        Repr::Text(t) => match t.as_str() {
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            other => {
                return Err(D::Error::custom(format!(
                    "expected a number, \"inf\", \"-inf\" or \"NaN\", found {other:?}"
                )))
            }
        },
    };
    Ok(T::from_f64(x))
}
