//! Serde for floats that may be infinite or NaN: JSON has no such numbers (serde_json writes
//! them as `null`, which does not read back as a float), so a record stores them as the strings
//! `"inf"`, `"-inf"` and `"NaN"`. Use as `#[serde(with = "memwall_core::nonfinite")]` on
//! an `f64` or `f32` field, and `#[serde(default, with = "memwall_core::nonfinite::option")]`
//! on an `Option<f64>` or `Option<f32>` field. Finite values are written exactly as serde_json
//! writes them without this module, so job keys (hashes of the JSON) do not change.

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};
use std::fmt;

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

/// Reads a number or one of the three strings; `null` only when `nullable`.
struct FloatVisitor {
    nullable: bool,
}

impl<'de> Visitor<'de> for FloatVisitor {
    type Value = Option<f64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number, \"inf\", \"-inf\" or \"NaN\"")?;
        if self.nullable {
            f.write_str(" or null")?;
        }
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
        Ok(Some(x))
    }
    fn visit_i64<E: de::Error>(self, x: i64) -> Result<Self::Value, E> {
        Ok(Some(x as f64))
    }
    fn visit_u64<E: de::Error>(self, x: u64) -> Result<Self::Value, E> {
        Ok(Some(x as f64))
    }
    fn visit_str<E: de::Error>(self, t: &str) -> Result<Self::Value, E> {
        match t {
            "inf" => Ok(Some(f64::INFINITY)),
            "-inf" => Ok(Some(f64::NEG_INFINITY)),
            "NaN" => Ok(Some(f64::NAN)),
            _ => Err(E::invalid_value(de::Unexpected::Str(t), &self)),
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        if self.nullable {
            Ok(None)
        } else {
            Err(E::invalid_type(de::Unexpected::Unit, &self))
        }
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(FloatVisitor { nullable: false })
    }
}

/// Reads what [`serialize`] wrote.
///
/// # Errors
/// Neither a number nor one of the three strings (a `null` included: it is what serde_json
/// wrote for a non-finite float before this module, and says nothing about the value).
pub fn deserialize<'de, T: Float, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    let x = d.deserialize_any(FloatVisitor { nullable: false })?;
    Ok(T::from_f64(x.unwrap_or(f64::NAN)))
}

/// The same for `Option<f64>` / `Option<f32>` fields: `None` is JSON `null`, a value as in
/// [`serialize`](super::serialize).
pub mod option {
    use super::{Float, FloatVisitor};
    use serde::{Deserializer, Serializer};

    /// Writes `None` as `null`, a value as [`super::serialize`] does.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<T: Float, S: Serializer>(x: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match x {
            Some(x) => super::serialize(x, s),
            None => s.serialize_none(),
        }
    }

    /// Reads what [`serialize`] wrote.
    ///
    /// # Errors
    /// Neither `null`, a number nor one of the three strings.
    pub fn deserialize<'de, T: Float, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        let x = d.deserialize_any(FloatVisitor { nullable: true })?;
        Ok(x.map(T::from_f64))
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct Row {
        #[serde(with = "super")]
        x: f64,
        #[serde(default, with = "super::option")]
        y: Option<f64>,
    }

    #[test]
    fn non_finite_values_round_trip_and_null_is_refused() {
        for x in [f64::INFINITY, f64::NEG_INFINITY, 1.5, -0.25] {
            for y in [None, Some(f64::NEG_INFINITY), Some(2.0)] {
                let json = serde_json::to_string(&Row { x, y }).unwrap();
                let back: Row = serde_json::from_str(&json).unwrap();
                assert_eq!((back.x, back.y), (x, y), "{json}");
            }
        }
        let nan: Row = serde_json::from_str(r#"{"x": "NaN", "y": "NaN"}"#).unwrap();
        assert!(nan.x.is_nan() && nan.y.unwrap().is_nan());
        let missing: Row = serde_json::from_str(r#"{"x": 3}"#).unwrap();
        assert_eq!((missing.x, missing.y), (3.0, None));
        let err = serde_json::from_str::<Row>(r#"{"x": null}"#).unwrap_err();
        assert!(err.to_string().contains("\"inf\""), "{err}");
        let err = serde_json::from_str::<Row>(r#"{"x": "infinity"}"#).unwrap_err();
        assert!(err.to_string().contains("infinity"), "{err}");
    }
}
