//! memwall's AdamW against Burn's: bit for bit in f32 (the composed update and flex's kernel,
//! over whole training steps), and flex's 16-bit kernel as the f32 update rounded once.

use super::super::tests::{batch, config, param_bits};
use super::*;
use crate::measure::NoProbe;
use crate::model::{InitModel, TransformerLm};
use crate::train::{train_step, Inputs};
use burn::backend::{Autodiff, Flex};
use burn::tensor::{DType, Distribution};

type B = Autodiff<Flex>;

/// Three training steps (plain backward, lr 1e-2) with memwall's AdamW on flex (its kernel)
/// leave every parameter bit for bit where Burn's `AdamW` leaves it, with and without weight
/// decay; so does the composed update on another backend's path.
#[test]
fn memwall_adamw_is_burns_bit_for_bit_in_f32() {
    let cfg = config(2);
    let device = Default::default();
    for wd in [0.0f32, 0.1] {
        B::seed(&device, 5);
        let model = cfg.init::<B>(&device);
        let inputs = Inputs::<B>::new(&batch(&cfg), &device);
        let mut burn_opt = burn::optim::AdamWConfig::new()
            .with_weight_decay(wd)
            .init::<B, TransformerLm<B>>();
        let mut ours = AdamWConfig::new(wd).init::<B, TransformerLm<B>>();
        let (mut a, mut b) = (model.clone(), model);
        for _ in 0..3 {
            a = train_step(a, &mut burn_opt, 1e-2, &inputs, None, false, &mut NoProbe).0;
            b = train_step(b, &mut ours, 1e-2, &inputs, None, false, &mut NoProbe).0;
        }
        let (a, b) = (param_bits(&a), param_bits(&b));
        assert!(a.iter().flatten().count() > 1000);
        assert_eq!(
            a, b,
            "weight decay {wd}: memwall's AdamW differs from Burn's"
        );
    }
}

fn random(n: usize, seed: u64, positive: bool) -> Tensor<Flex, 1> {
    <Flex as burn::tensor::backend::Backend>::seed(&Default::default(), seed);
    let t = Tensor::<Flex, 1>::random([n], Distribution::Normal(0.0, 1.0), &Default::default());
    if positive {
        t.abs().mul_scalar(1e-3)
    } else {
        t
    }
}

fn values(t: Tensor<Flex, 1>) -> Vec<u32> {
    let t = t.cast(DType::F32);
    t.into_data().iter::<f32>().map(f32::to_bits).collect()
}

/// Flex's kernel is the composed f32 update bit for bit on a tensor of several parallel chunks;
/// on 16-bit tensors it is the f32 update of the widened inputs rounded once to the dtype (each of parameter, first and second moment), at the first step and a later one,
/// over several parallel chunks and a ragged end; the composed update, rounding every
/// intermediate to the dtype, is not (so the test can tell them apart).
#[test]
fn the_16_bit_kernel_is_the_f32_update_rounded_once() {
    let n = 3 * crate::kernels::CHUNK + 5;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (time, first) in [(1, true), (7, false)] {
            let h = AdamWStep {
                lr: 3e-2,
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-5,
                weight_decay: 0.1,
                time,
            };
            let p = random(n, 1, false).cast(dtype);
            let g = random(n, 2, false).cast(dtype);
            let m = random(n, 3, false).mul_scalar(0.1).cast(dtype);
            let v = random(n, 4, true).cast(dtype);
            let moments = |m: &Tensor<Flex, 1>, v: &Tensor<Flex, 1>, d: DType| {
                (!first).then(|| (m.clone().cast(d), v.clone().cast(d)))
            };
            let (kp, km, kv) = Flex::adamw_update(p.clone(), g.clone(), moments(&m, &v, dtype), &h);
            let wide = |t: &Tensor<Flex, 1>| t.clone().cast(DType::F32);
            let (rp, rm, rv) = composed(wide(&p), wide(&g), moments(&m, &v, DType::F32), &h);
            assert_eq!(kp.dtype(), dtype);
            for (what, k, r) in [("parameter", kp, rp), ("m", km, rm), ("v", kv, rv)] {
                let k = values(k);
                // The f32 result rounded to nearest even, element by element (half's
                // conversions, as the model's other 16-bit kernels round).
                let r: Vec<u32> = r
                    .into_data()
                    .iter::<f32>()
                    .map(|x| match dtype {
                        DType::F32 => x.to_bits(),
                        DType::BF16 => half::bf16::from_f32(x).to_f32().to_bits(),
                        _ => half::f16::from_f32(x).to_f32().to_bits(),
                    })
                    .collect();
                let first = k.iter().zip(&r).position(|(a, b)| a != b);
                assert!(
                    first.is_none(),
                    "{dtype:?} t={time}: {what} is not the f32 update rounded once: element {:?} \
                     is {} against {} ({} differ of {})",
                    first,
                    first.map_or(0.0, |i| f32::from_bits(k[i])),
                    first.map_or(0.0, |i| f32::from_bits(r[i])),
                    k.iter().zip(&r).filter(|(a, b)| a != b).count(),
                    k.len()
                );
            }
            if dtype != DType::F32 {
                let (cp, _, _) = composed(p.clone(), g.clone(), moments(&m, &v, dtype), &h);
                let (kp, _, _) = Flex::adamw_update(p, g, moments(&m, &v, dtype), &h);
                assert_ne!(
                    values(cp),
                    values(kp),
                    "{dtype:?}: rounding every step is the same"
                );
            }
        }
    }
    // A dtype the kernel does not run (f64) takes the composed update.
    let p = random(100, 1, false).cast(DType::F64);
    let g = random(100, 2, false).cast(DType::F64);
    let h = AdamWStep {
        lr: 1e-2,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-5,
        weight_decay: 0.0,
        time: 1,
    };
    let (kp, _, _) = Flex::adamw_update(p.clone(), g.clone(), None, &h);
    let (cp, _, _) = composed(p, g, None, &h);
    assert_eq!(kp.into_data(), cp.into_data());
}
