//! The fp16-range study: tokens, parameters, and measures that a different survey would change.

use super::*;
use memwall_runner::train::survey::Rounding;

fn params() -> RangeParams {
    RangeParams {
        model: SurveyModel {
            layers: 1,
            d_model: 16,
            heads: 2,
            d_ff: 32,
            seq_len: 16,
            batch: 2,
        },
        text: "tinystories/stories.txt".into(),
        survey_at: vec![0, 2],
        lr: 1e-3,
        seed: 1,
        sensitive_lost_pct: 1.0,
    }
}

#[test]
fn stories_become_bytes_each_ended_by_the_story_token() {
    let t = byte_tokens("Hi.\n<|endoftext|>\n Ok <|endoftext|>\n\n");
    assert_eq!(t, vec![72, 105, 46, EOS, 79, 107, EOS]);
}

#[test]
fn out_of_range_parameters_name_their_key() {
    let mut p = params();
    p.survey_at = vec![4, 2];
    assert!(validate(&p).unwrap_err().to_string().contains("survey_at"));
    let mut p = params();
    p.model.heads = 3;
    assert!(validate(&p)
        .unwrap_err()
        .to_string()
        .contains("model.heads"));
    let mut p = params();
    p.text = "/etc/passwd".into();
    assert!(validate(&p).unwrap_err().to_string().contains("text"));
    assert!(validate(&params()).is_ok());
}

fn tensor(name: &str, kind: SurveyKind, nonzero: u64, f16_lost: u64) -> TensorRange {
    TensorRange {
        block: Some(0),
        name: name.into(),
        kind,
        elements: nonzero + 10,
        zeros: 10,
        max_abs: 1.0,
        min_nonzero_abs: Some(1e-9),
        f16: Rounding {
            overflow: 0,
            flushed: f16_lost,
            subnormal: 0,
        },
        bf16: Rounding::default(),
    }
}

fn measure(r: &RangeResult, name: &str) -> f64 {
    measures(r)
        .into_iter()
        .find(|m| m.name == name)
        .unwrap()
        .value
}

#[test]
fn the_sensitive_share_counts_the_tensors_over_the_threshold_at_the_last_survey() {
    let point = |lost: u64| SurveyPoint {
        step: 0,
        loss: 5.0,
        tensors: vec![
            tensor("qkv", SurveyKind::Activation, 1000, 0),
            tensor("qkv", SurveyKind::Gradient, 1000, lost),
            tensor("mlp_in", SurveyKind::Gradient, 1000, 5),
            tensor("mlp_in", SurveyKind::WeightGradient, 1000, 0),
        ],
    };
    // 20 of 1000 (2%) is over the 1% threshold, 5 of 1000 is not: 1 of 4 tensors.
    let r = RangeResult {
        params: params(),
        tokens: 0,
        points: vec![point(0), point(20)],
    };
    assert_eq!(measure(&r, "fp16_sensitive_tensor_pct"), 25.0);
    assert_eq!(measure(&r, "bf16_sensitive_tensor_pct"), 0.0);
    assert_eq!(measure(&r, "fp16_gradient_max_lost_pct"), 2.0);
    assert_eq!(measure(&r, "fp16_activation_max_lost_pct"), 0.0);
    // Judged at the last survey: had the gradient kept its values, no tensor would count.
    let r = RangeResult {
        points: vec![point(20), point(0)],
        ..r
    };
    assert_eq!(measure(&r, "fp16_sensitive_tensor_pct"), 0.0);
}

#[test]
fn a_small_run_surveys_every_tensor_at_each_step() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tinystories")).unwrap();
    let story = "Once upon a time there was a cat. The cat sat on a mat and looked at the sun.\n";
    let text = format!("{story}<|endoftext|>\n").repeat(40);
    std::fs::write(dir.path().join("tinystories/stories.txt"), text).unwrap();
    let r = run(&params(), dir.path()).unwrap();
    assert_eq!(r.points.len(), 2);
    assert_eq!(r.points[1].step, 2);
    // One block: 9 activations, 8 gradients, 6 weight gradients; the logits.
    assert_eq!(r.points[0].tensors.len(), 24);
    let s = section(
        &r,
        &Cited {
            source: "003.txt".into(),
            values: CiteAs {
                cite_as: "(lecture)".into(),
            },
        },
    );
    assert_eq!(s.tables.len(), 2);
    assert!(s
        .claim
        .contains("Some layers are more sensitive to dynamic range"));
    let err = run(
        &RangeParams {
            text: "tinystories/missing.txt".into(),
            ..params()
        },
        dir.path(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("missing.txt"), "{err}");
}
