//! Range checks of the in-process studies' `[params]` tables, run when the experiment file is
//! loaded (before anything is measured or allocated).
//!
//! Every check names the key (with the index of a list element: `ks[2]`, `generated[0].n`), the
//! accepted range and the value found, so that the error reads as the fix. The ranges are what
//! each study can run on a workstation: upper bounds keep every buffer a study allocates under a
//! few GiB (the bound's reason is in the study's `validate`), lower bounds are what the
//! computation needs.

use std::fmt::Display;

/// A `[params]` value outside the range its study accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    /// Key under `[params]`, with indices for list elements (`ks[2]`, `generated[0].n`).
    pub field: String,
    /// What is accepted and what the file gave.
    pub message: String,
}

impl Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` {}", self.field, self.message)
    }
}

impl std::error::Error for ParamError {}

/// The result of a range check.
pub type ParamResult = Result<(), ParamError>;

/// `Err` for `field` with `message` unless `ok`.
pub fn require(ok: bool, field: &str, message: impl FnOnce() -> String) -> ParamResult {
    if ok {
        Ok(())
    } else {
        Err(ParamError {
            field: field.to_string(),
            message: message(),
        })
    }
}

/// An integer in `lo..=hi`.
pub fn int_in<T: PartialOrd + Display + Copy>(field: &str, v: T, lo: T, hi: T) -> ParamResult {
    require(v >= lo && v <= hi, field, || {
        format!("must be an integer in {lo}..={hi} (got {v})")
    })
}

/// A finite number in `[lo, hi]`.
pub fn num_in(field: &str, v: f64, lo: f64, hi: f64) -> ParamResult {
    require(v.is_finite() && v >= lo && v <= hi, field, || {
        format!("must be a finite number in [{lo}, {hi}] (got {v})")
    })
}

/// A finite number in `(lo, hi]`: `lo` excluded (a positive size, a time limit).
pub fn num_above(field: &str, v: f64, lo: f64, hi: f64) -> ParamResult {
    require(v.is_finite() && v > lo && v <= hi, field, || {
        format!("must be a finite number in ({lo}, {hi}] (got {v})")
    })
}

/// A finite number in the open interval `(lo, hi)`.
pub fn num_between(field: &str, v: f64, lo: f64, hi: f64) -> ParamResult {
    require(v.is_finite() && v > lo && v < hi, field, || {
        format!("must be a finite number in ({lo}, {hi}) (got {v})")
    })
}

/// Any finite number.
pub fn finite(field: &str, v: f64) -> ParamResult {
    require(v.is_finite(), field, || {
        format!("must be a finite number (got {v})")
    })
}

/// A list of `min..=max` elements, each checked by `each(field_of_element, element)`.
pub fn list<T>(
    field: &str,
    items: &[T],
    min: usize,
    max: usize,
    mut each: impl FnMut(&str, &T) -> ParamResult,
) -> ParamResult {
    require(items.len() >= min && items.len() <= max, field, || {
        format!(
            "must be a list of {min} to {max} elements (got {})",
            items.len()
        )
    })?;
    for (i, item) in items.iter().enumerate() {
        each(&format!("{field}[{i}]"), item)?;
    }
    Ok(())
}

/// A byte count that must stay under `limit` bytes: `what` says which buffer it sizes and from
/// which keys.
pub fn bytes_at_most(field: &str, bytes: f64, limit: f64, what: &str) -> ParamResult {
    require(bytes <= limit, field, || {
        format!(
            "makes {what} {:.3} GiB, more than the study's limit of {:.0} GiB; choose smaller values",
            bytes / GIB,
            limit / GIB
        )
    })
}

/// Bytes in a GiB.
pub const GIB: f64 = (1u64 << 30) as f64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_the_field_and_the_range() {
        let e = int_in("depth", 0u64, 1, 10).unwrap_err();
        assert_eq!(e.field, "depth");
        assert!(e.message.contains("1..=10") && e.message.contains("got 0"));
        assert!(int_in("depth", 10u64, 1, 10).is_ok());
        let e = num_above("lr", f64::NAN, 0.0, 1.0).unwrap_err();
        assert!(e.message.contains("(0, 1]"), "{e}");
        assert!(num_above("lr", 0.0, 0.0, 1.0).is_err());
        assert!(num_between("t", 1.0, 0.0, 1.0).is_err());
        assert!(num_in("s", 1.0, 0.0, 1.0).is_ok());
        assert!(finite("x", f64::INFINITY).is_err());
        let e = list("ks", &[1u64, 0], 1, 4, |f, &k| int_in(f, k, 1, 9)).unwrap_err();
        assert_eq!(e.field, "ks[1]");
        let e = list::<u64>("ks", &[], 1, 4, |_, _| Ok(())).unwrap_err();
        assert!(e.message.contains("1 to 4 elements (got 0)"), "{e}");
        let e = bytes_at_most("width", 3.0 * GIB, 2.0 * GIB, "the weights").unwrap_err();
        assert!(
            e.message.contains("3.000 GiB") && e.message.contains("2 GiB"),
            "{e}"
        );
    }
}
