//! Tests of the 16-bit study.

use super::*;
use crate::InProcessStudy;

use crate::claim_checks::{assert_claims_have_measures, value};

#[test]
fn formats_match_ieee_and_bfloat16_definitions() {
    let [f32i, f16i, bfi] = formats();
    assert_eq!((f32i.exp_bits, f32i.man_bits), (8, 23));
    assert_eq!((f16i.exp_bits, f16i.man_bits), (5, 10));
    assert_eq!((bfi.exp_bits, bfi.man_bits), (8, 7));
    assert_eq!(f16i.max, 65504.0);
    assert_eq!(f16i.eps, 2f64.powi(-10));
    assert_eq!(f16i.min_normal, 2f64.powi(-14));
    assert_eq!(f16i.min_subnormal, 2f64.powi(-24));
    assert_eq!(bfi.eps, 2f64.powi(-7));
    assert_eq!(bfi.min_normal, 2f64.powi(-126));
    assert_eq!(bfi.max, 3.3895313892515355e38);
    assert_eq!(f32i.eps, 2f64.powi(-23));
    for f in [f32i, f16i, bfi] {
        assert_eq!(FormatInfo::from_layout(&f.name, f.exp_bits, f.man_bits), f);
    }
}

#[test]
fn overflow_underflow_and_accumulation() {
    assert!((f16::from_f32(300.0) * f16::from_f32(300.0)).is_infinite());
    assert!(!(bf16::from_f32(300.0) * bf16::from_f32(300.0)).is_infinite());
    assert_eq!(f16::from_f32(1e-8).to_f32(), 0.0);
    assert!(bf16::from_f32(1e-8).to_f32() > 0.0);
    let xs = vec![0.01f32; 10_000];
    let (s16, _) = accumulate(&xs, "f16", 10);
    let (sb, _) = accumulate(&xs, "bf16", 10);
    let (s32, _) = accumulate(&xs, "f32", 10);
    assert_eq!(s16, 32.0); // f16 spacing at 32 is 2^-5 = 0.03125 > 2 * 0.01
    assert!(sb < s16);
    assert!((s32 - 100.0).abs() < 0.1);
}

#[test]
fn run_default() {
    let s = sections(
        &measure(&PrecisionParams::default()).unwrap(),
        &crate::cited::from_experiment("sixteen_bit"),
    );
    assert_eq!(s.len(), 2);
}

#[test]
fn result_survives_json_and_renders_the_same() {
    let r = measure(&PrecisionParams::default()).unwrap();
    // 300^2 overflows f16: the stored value is +inf.
    assert!(r.range.activation_squared_f16.is_infinite());
    // Through a serde_json::Value, as the study runner stores it. (The record file's text
    // reads floats back exactly only with serde_json's `float_roundtrip` feature.)
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["range"]["activation_squared_f16"], "inf");
    let back: PrecisionResult = serde_json::from_value(json).unwrap();
    assert_eq!(back.formats, r.formats);
    assert_eq!(back.range, r.range);
    assert_eq!(back.repeated, r.repeated);
    assert_eq!(back.uniform, r.uniform);
    assert_eq!(
        SixteenBit::sections(&back, &crate::cited::from_experiment("sixteen_bit")),
        SixteenBit::sections(&r, &crate::cited::from_experiment("sixteen_bit"))
    );
}

#[test]
fn nonfinite_floats_round_trip() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Both {
        #[serde(with = "nonfinite")]
        a: f64,
        #[serde(with = "nonfinite")]
        b: f32,
    }
    for (a, b) in [
        (f64::INFINITY, f32::NEG_INFINITY),
        (-0.0, 0.01),
        (1e308, f32::MAX),
    ] {
        let v = Both { a, b };
        let back: Both = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }
    let nan: Both = serde_json::from_str(r#"{"a": "NaN", "b": 1}"#).unwrap();
    assert!(nan.a.is_nan() && nan.b == 1.0);
    assert!(serde_json::from_str::<Both>(r#"{"a": "infinity", "b": 1}"#).is_err());
    assert!(serde_json::from_str::<Both>(r#"{"a": null, "b": 1}"#).is_err());
}

#[test]
fn measures_answer_the_claims() {
    let m = assert_claims_have_measures::<SixteenBit>(
        "sixteen_bit",
        measure(&PrecisionParams::default()).unwrap(),
    );
    assert_eq!(value(&m, "f16_minus_bf16_fraction_bits"), 3.0);
    let headroom = value(&m, "log10_bf16_max_over_f16_max");
    assert!((headroom - (3.3895313892515355e38f64 / 65504.0).log10()).abs() < 1e-12);
    assert_eq!(value(&m, "f16_square_overflows"), 1.0);
    assert_eq!(value(&m, "bf16_square_overflows"), 0.0);
    assert!(value(&m, "sixteen_bit_accumulator_min_error_pct") > 10.0);
    let mixed = value(&m, "f16_inputs_f32_accumulator_max_error_pct");
    assert!(mixed > 0.0 && mixed < 0.1, "{mixed}");
}
