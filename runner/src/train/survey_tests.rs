//! The range survey: Burn's casts classified exactly, and the surveyed values are the step's.

use super::super::tests::{batch, config, plain_grads};
use super::*;
use burn::backend::{Autodiff, Flex};
use burn::tensor::TensorData;

type B = Autodiff<Flex>;
type I = Flex;

#[test]
fn casts_are_classified_as_overflow_flush_and_subnormal() {
    // f16: 7e4 overflows (>= 65520), 1e-9 flushes (< 2^-25), 1e-6 and -3e-5 are subnormal
    // (< 2^-14), 1.0 and 6.2e-5 are normal; bf16 holds all of them as normal numbers.
    let x = vec![7e4f32, 1e-9, 1e-6, -3e-5, 1.0, 6.2e-5, 0.0];
    let t = Tensor::<I, 1>::from_data(TensorData::new(x.clone(), [x.len()]), &Default::default());
    let f16 = rounding(&x, &round_trip(&t, DType::F16), F16_MIN_NORMAL);
    assert_eq!(
        f16,
        Rounding {
            overflow: 1,
            flushed: 1,
            subnormal: 2
        }
    );
    assert_eq!(f16.lost(), 2);
    let bf16 = rounding(&x, &round_trip(&t, DType::BF16), f32::MIN_POSITIVE);
    assert_eq!(bf16, Rounding::default());
    // The edges: 65504 is f16's largest finite value; 65520 rounds up to infinity.
    let edge = vec![
        65504f32,
        65519.0,
        65520.0,
        2.0f32.powi(-24),
        2.0f32.powi(-26),
    ];
    let t = Tensor::<I, 1>::from_data(TensorData::new(edge.clone(), [5]), &Default::default());
    let r = rounding(&edge, &round_trip(&t, DType::F16), F16_MIN_NORMAL);
    assert_eq!((r.overflow, r.flushed, r.subnormal), (1, 1, 1));
}

#[test]
fn the_survey_records_every_units_values_and_the_steps_own_gradients() {
    let layers = 2;
    let cfg = config(layers);
    let device = Default::default();
    B::seed(&device, 3);
    let model = cfg.init::<B>(&device);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let ranges = range_survey(&model, &inputs).expect("an f32 model surveys");
    // Per block: 8 unit outputs and the log-sum-exp, 8 output gradients, 6 weight gradients
    // (4 matrix-product units, 2 norms); then the logits.
    assert_eq!(ranges.len(), layers * (9 + 8 + 6) + 1);
    let find = |block: Option<usize>, name: &str, kind: SurveyKind| {
        ranges
            .iter()
            .find(|r| r.block == block && r.name == name && r.kind == kind)
            .unwrap_or_else(|| panic!("{block:?} {name} {kind:?} surveyed"))
    };
    let rows = (cfg.batch * cfg.seq_len) as u64;
    let act = find(Some(1), "mlp_in", SurveyKind::Activation);
    assert_eq!(act.elements, rows * cfg.d_ff as u64);
    let qkv = find(Some(0), "qkv", SurveyKind::Activation);
    assert_eq!(qkv.elements, 3 * rows * cfg.d_model as u64);
    let logits = find(None, "logits", SurveyKind::Activation);
    assert_eq!(logits.elements, rows * cfg.vocab as u64);
    // The weight gradients are plain backward's (the unit executor's are bit-identical).
    let grads = plain_grads(&model, &inputs);
    for b in 0..layers {
        let w = grads
            .get::<I, 2>(model.blocks[b].mlp_in.weight.id)
            .expect("mlp_in's weight has a gradient");
        let v = w.into_data().to_vec::<f32>().unwrap();
        let max = v.iter().map(|x| f64::from(x.abs())).fold(0.0, f64::max);
        let got = find(Some(b), "mlp_in", SurveyKind::WeightGradient);
        assert_eq!(got.elements, v.len() as u64);
        assert_eq!(
            got.max_abs, max,
            "block {b}: the survey's mlp_in weight gradient is the step's"
        );
        assert!(got.min_nonzero_abs.unwrap() <= got.max_abs);
    }
    // The loss's gradient shrinks by the mean over tokens: the smallest gradient is below the
    // smallest activation.
    let grad = find(Some(0), "norm_attn", SurveyKind::Gradient);
    let x = find(Some(0), "norm_attn", SurveyKind::Activation);
    assert!(
        grad.max_abs < x.max_abs,
        "{} vs {}",
        grad.max_abs,
        x.max_abs
    );
}

#[test]
fn a_sixteen_bit_model_is_refused() {
    let cfg = config(1);
    let device = Default::default();
    let model =
        crate::model::cast_model(cfg.init::<B>(&device), memwall_core::spec::Precision::Bf16);
    let inputs = Inputs::<B>::new(&batch(&cfg), &device);
    let err = range_survey(&model, &inputs).unwrap_err();
    assert!(err.contains("f32 model"), "{err}");
}

#[test]
fn training_between_surveys_lowers_the_surveyed_loss() {
    let cfg = config(1);
    let tokens: Vec<u32> = (0..4000u32)
        .map(|i| (i * 7 + i / 13) % cfg.vocab as u32)
        .collect();
    let stream = TokenStream { tokens, eos_id: 0 };
    let t = SurveyTraining {
        model: cfg,
        survey_at: vec![0, 12],
        lr: 3e-3,
        seed: 5,
    };
    let points = survey_training::<B>(stream.clone(), &t).unwrap();
    assert_eq!(points.iter().map(|p| p.step).collect::<Vec<_>>(), [0, 12]);
    assert!(
        points[1].loss < points[0].loss,
        "{} -> {}",
        points[0].loss,
        points[1].loss
    );
    let bad = SurveyTraining {
        survey_at: vec![3, 3],
        ..t
    };
    assert!(survey_training::<B>(stream, &bad)
        .unwrap_err()
        .contains("ascending"));
}
