//! memwall's CubeCL kernels (`memwall_runner::kernels::cube`) against the composed reference
//! (Burn's own operations, or the exact formula in f64), through the model's backend traits, on
//! CubeCL's wgpu runtime: in CI a software Vulkan (Mesa's lavapipe) on the CPU, so the kernels
//! the CUDA rows run are checked on every commit without a GPU. Tested at f32 (wgpu has no
//! bf16); the CUDA rows run the same kernels at bf16.
//!
//! One process for these tests: CubeCL's configuration is process-wide, and the unit tests set
//! it for CUDA.

#![cfg(feature = "wgpu")]

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use memwall_runner::model::gelu::GeluBackend;
use memwall_runner::model::norm::{self, Kept, NormBackend};

/// `CubeBackend` on wgpu (no fusion), as Burn's own wgpu backend without its fusion.
type Wgpu = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;

/// The default wgpu device, once it is certain that the backend traits run the kernels (not
/// the composed operations they are compared with), with CubeCL's autotune cache in Cargo's
/// temporary folder for tests (by default CubeCL writes it under `runner/target/`).
fn device() -> cubecl::wgpu::WgpuDevice {
    use cubecl::config::{cache::CacheConfig, CubeClRuntimeConfig, RuntimeConfig};
    use memwall_runner::kernels::cube::{Selection, SELECTION_VAR};
    assert_eq!(
        Selection::current(),
        Selection::ALL,
        "unset {SELECTION_VAR}: with it the tests would compare the composed form with itself"
    );
    static CONFIG: std::sync::Once = std::sync::Once::new();
    CONFIG.call_once(|| {
        let mut config = CubeClRuntimeConfig::default();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cubecl");
        config.autotune.cache = CacheConfig::File(dir);
        CubeClRuntimeConfig::set(config);
    });
    cubecl::wgpu::WgpuDevice::DefaultDevice
}

/// Deterministic values in `[lo, lo + width)` (a 64-bit LCG).
fn values(n: usize, seed: u64, lo: f32, width: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            lo + width * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn tensor<const D: usize>(data: Vec<f32>, shape: [usize; D]) -> Tensor<Wgpu, D> {
    Tensor::from_data(TensorData::new(data, shape), &device())
}

fn prim<const D: usize>(t: Tensor<Wgpu, D>) -> FloatTensor<Wgpu> {
    t.into_primitive().tensor()
}

fn read(t: FloatTensor<Wgpu>) -> Vec<f32> {
    Tensor::<Wgpu, 1>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .to_vec::<f32>()
        .unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// GELU forward against Burn's composed `gelu` (the exact erf form) and backward against the
/// exact derivative `Φ(x) + x φ(x)` in f64, over `x ∈ [-6, 6)`, at a length every vector width
/// divides and one none does. Burn 0.21's own `gelu_backward` is the tanh approximation's
/// derivative; the test also shows that it is the one off the exact derivative.
#[test]
fn gelu_kernels_match_the_exact_form() {
    for n in [4000usize, 4003] {
        let xs = values(n, 1, -6.0, 12.0);
        let dys = values(n, 2, -1.0, 2.0);
        let x = tensor(xs.clone(), [n]);
        let dy = tensor(dys.clone(), [n]);
        let ours = read(<Wgpu as GeluBackend>::model_gelu(prim(x.clone())));
        let burns = burn::tensor::activation::gelu(x.clone())
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let forward_err = max_abs_diff(&ours, &burns);
        assert!(
            forward_err < 2e-6,
            "forward: max |ours - Burn's| = {forward_err:e}"
        );

        let exact: Vec<f32> = xs
            .iter()
            .zip(&dys)
            .map(|(&x, &g)| {
                let x = x as f64;
                let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
                let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
                (g as f64 * (cdf + x * pdf)) as f32
            })
            .collect();
        let ours = read(<Wgpu as GeluBackend>::model_gelu_backward(
            prim(x.clone()),
            prim(dy.clone()),
        ));
        let backward_err = max_abs_diff(&ours, &exact);
        assert!(
            backward_err < 2e-6,
            "backward: max |ours - exact| = {backward_err:e}"
        );
        let burns = read(
            <Wgpu as burn::tensor::ops::ActivationOps<Wgpu>>::gelu_backward(prim(x), prim(dy)),
        );
        let burn_err = max_abs_diff(&burns, &exact);
        assert!(
            burn_err > 100.0 * backward_err.max(1e-7),
            "Burn's: {burn_err:e}"
        );
    }
}

/// The layer norm's kernels against the composed operation (`norm::composed_forward`,
/// `norm::composed_backward`) on the same device: row lengths below, at and above the cube's
/// 256 units (one not a power of two), row counts across the 64-row chunks of `dγ` and `dβ`,
/// and both kinds of kept tensors.
#[test]
fn layer_norm_kernels_match_the_composed_operation() {
    let eps = norm::epsilon();
    for (rows, d) in [(70usize, 100usize), (3, 256), (130, 1000)] {
        let x = tensor(values(rows * d, 3, -3.0, 7.0), [rows, d]);
        let gamma = tensor(values(d, 4, 0.5, 1.0), [d]);
        let beta = tensor(values(d, 5, -0.5, 1.0), [d]);
        let dy = tensor(values(rows * d, 6, -1.0, 2.0), [rows, d]);

        let (y, mean, rstd) = <Wgpu as NormBackend>::layer_norm_forward(
            prim(x.clone()),
            prim(gamma.clone()),
            prim(beta.clone()),
            eps,
        );
        let reference = norm::composed_forward::<Wgpu>(x.clone(), gamma.clone(), beta.clone(), eps);
        let y_ref = reference.y.clone().into_data().to_vec::<f32>().unwrap();
        let y_err = max_abs_diff(&read(y.clone()), &y_ref);
        assert!(y_err < 2e-5, "({rows}, {d}) y: {y_err:e}");
        let mean_ref = reference.mean.clone().into_data().to_vec::<f32>().unwrap();
        assert!(
            max_abs_diff(&read(mean.clone()), &mean_ref) < 2e-6,
            "({rows}, {d}) mean"
        );
        let rstd_ref = reference.rstd.clone().into_data().to_vec::<f32>().unwrap();
        assert!(
            max_abs_diff(&read(rstd.clone()), &rstd_ref) < 2e-5,
            "({rows}, {d}) rstd"
        );

        let y_t = Tensor::<Wgpu, 2>::from_primitive(TensorPrimitive::Float(y));
        for kept_output in [false, true] {
            let (kept, kept_ref) = if kept_output {
                (
                    Kept::Output {
                        y: prim(y_t.clone()),
                        beta: prim(beta.clone()),
                    },
                    Kept::Output {
                        y: prim(y_t.clone()),
                        beta: prim(beta.clone()),
                    },
                )
            } else {
                (
                    Kept::Input {
                        x: prim(x.clone()),
                        mean: mean.clone(),
                    },
                    Kept::Input {
                        x: prim(x.clone()),
                        mean: mean.clone(),
                    },
                )
            };
            let (dx, dgamma, dbeta) = <Wgpu as NormBackend>::layer_norm_backward(
                kept,
                rstd.clone(),
                prim(gamma.clone()),
                prim(dy.clone()),
            );
            let rstd_t = Tensor::<Wgpu, 2>::from_primitive(TensorPrimitive::Float(rstd.clone()));
            let (dx_ref, dgamma_ref, dbeta_ref) =
                norm::composed_backward::<Wgpu>(kept_ref, rstd_t, gamma.clone(), dy.clone());
            let case = format!("({rows}, {d}), kept output {kept_output}");
            for (name, ours, theirs, tol) in [
                (
                    "dx",
                    read(dx),
                    dx_ref.into_data().to_vec::<f32>().unwrap(),
                    5e-5,
                ),
                (
                    "dgamma",
                    read(dgamma),
                    dgamma_ref.into_data().to_vec::<f32>().unwrap(),
                    5e-4,
                ),
                (
                    "dbeta",
                    read(dbeta),
                    dbeta_ref.into_data().to_vec::<f32>().unwrap(),
                    5e-4,
                ),
            ] {
                let err = max_abs_diff(&ours, &theirs);
                let scale = theirs.iter().fold(1.0f32, |m, v| m.max(v.abs()));
                assert!(
                    err < tol * scale,
                    "{case} {name}: max abs diff {err:e} (scale {scale})"
                );
            }
        }
    }
}

/// AdamW's kernel against Burn's composed update (`optim::composed`) on the same device: the
/// first step (no moments) and a later one, with and without weight decay, at a length no
/// vector width divides.
#[test]
fn adamw_kernel_matches_the_composed_update() {
    use memwall_runner::kernels::adamw::AdamWStep;
    use memwall_runner::model::optim::{composed, AdamWBackend};
    let n = 1003;
    let p = tensor(values(n, 7, -1.0, 2.0), [n]);
    let g = tensor(values(n, 8, -0.1, 0.2), [n]);
    let m = tensor(values(n, 9, -0.01, 0.02), [n]);
    let v = tensor(values(n, 10, 0.0, 1e-3), [n]);
    for (time, weight_decay) in [(1usize, 0.0f32), (1, 0.1), (7, 0.0), (7, 0.1)] {
        let h = AdamWStep {
            lr: 1e-3,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-8,
            weight_decay,
            time,
        };
        let moments = (time > 1).then(|| (m.clone(), v.clone()));
        let ours = <Wgpu as AdamWBackend>::adamw_update(p.clone(), g.clone(), moments.clone(), &h);
        let theirs = composed(p.clone(), g.clone(), moments, &h);
        for (name, a, b) in [
            ("p", ours.0, theirs.0),
            ("m", ours.1, theirs.1),
            ("v", ours.2, theirs.2),
        ] {
            let a = a.into_data().to_vec::<f32>().unwrap();
            let b = b.into_data().to_vec::<f32>().unwrap();
            let scale = b.iter().fold(f32::MIN_POSITIVE, |s, x| s.max(x.abs()));
            let err = max_abs_diff(&a, &b);
            assert!(
                err <= 1e-6 * scale,
                "t {time}, decay {weight_decay}, {name}: {err:e} (scale {scale:e})"
            );
            if name == "p" {
                // The update moved the parameter: a kernel that wrote nothing would fail here.
                let before = read(prim(p.clone()));
                assert!(
                    a.iter().zip(&before).all(|(x, y)| x != y),
                    "t {time}: p unchanged"
                );
            }
        }
    }
}

/// Adafactor's kernels against the composed update (`optim::adafactor_composed`) on the same
/// device, three steps in a row (statistics carried, the first without), each kernel step fed
/// its own previous statistics: a vector, a matrix whose rows span several column chunks with a
/// partial last one, a matrix wider than a cube (the row loops' stride) and a rank-3 tensor.
/// The second step's gradient is 10x the first's, so its update is clipped (checked: the
/// update's RMS is the threshold), the third's 0.1x, so it is not.
#[test]
fn adafactor_kernels_match_the_composed_update() {
    use memwall_runner::model::optim::{adafactor_composed, AdafactorBackend, AdafactorStep};
    use memwall_runner::train::adafactor::{beta2, CLIP_THRESHOLD, EPS1};
    fn run<const D: usize>(shape: [usize; D], seed: u64) {
        let len: usize = shape.iter().product();
        let p0 = tensor(values(len, seed, -1.0, 2.0), shape);
        let (lr, weight_decay) = (1e-2, 0.01);
        let mut ours: (Tensor<Wgpu, D>, Option<_>) = (p0.clone(), None);
        let mut theirs: (Tensor<Wgpu, D>, Option<_>) = (p0, None);
        for (step, grad_scale) in [(1usize, 1.0f32), (2, 10.0), (3, 0.1)] {
            let g = tensor(
                values(len, seed + 10 * step as u64, -grad_scale, 2.0 * grad_scale),
                shape,
            );
            let h = AdafactorStep {
                lr,
                weight_decay,
                beta2: beta2(step),
                eps1: EPS1,
                clip_threshold: CLIP_THRESHOLD,
            };
            let before = read(prim(ours.0.clone()));
            let (p, stats) = <Wgpu as AdafactorBackend>::adafactor_update(
                ours.0.clone(),
                g.clone(),
                ours.1.take(),
                &h,
            );
            let (p_ref, stats_ref) = adafactor_composed(theirs.0.clone(), g, theirs.1.take(), &h);
            let a = read(prim(p.clone()));
            let b = read(prim(p_ref.clone()));
            let err = max_abs_diff(&a, &b);
            assert!(err <= 1e-6, "{shape:?} step {step}: p off by {err:e}");
            // The update U = (p (1 - lr lambda) - p_new) / lr: moved, and clipped at step 2.
            let keep = (1.0 - lr * weight_decay) as f32;
            let u: Vec<f32> = before
                .iter()
                .zip(&a)
                .map(|(x, y)| (x * keep - y) / lr as f32)
                .collect();
            let rms = (u.iter().map(|x| x * x).sum::<f32>() / len as f32).sqrt();
            assert!(
                rms > 1e-3,
                "{shape:?} step {step}: p barely moved (RMS(U) {rms})"
            );
            if step == 2 {
                assert!(
                    (rms - 1.0).abs() < 1e-3,
                    "{shape:?} step 2: RMS(U) {rms}, not clipped to 1"
                );
            } else if step == 3 {
                assert!(
                    rms < 0.5,
                    "{shape:?} step 3: RMS(U) {rms}, expected unclipped and small"
                );
            }
            let pairs = [
                ("row", Some(stats.0.clone()), Some(stats_ref.0.clone())),
                ("col", stats.1.clone(), stats_ref.1.clone()),
            ];
            for (name, x, y) in pairs {
                assert_eq!(x.is_some(), y.is_some(), "{shape:?} step {step}: {name}");
                let (Some(x), Some(y)) = (x, y) else { continue };
                let (x, y) = (read(prim(x)), read(prim(y)));
                let scale = y.iter().fold(f32::MIN_POSITIVE, |s, v| s.max(v.abs()));
                let err = max_abs_diff(&x, &y);
                assert!(
                    err <= 2e-6 * scale,
                    "{shape:?} step {step}, {name} statistics: {err:e} (scale {scale:e})"
                );
            }
            ours = (p, Some(stats));
            theirs = (p_ref, Some(stats_ref));
        }
    }
    run([37], 1);
    run([150, 70], 2);
    run([40, 300], 3);
    run([2, 75, 70], 4);
}

/// The attention's kernels against the composed FlashAttention-2 (`attention::composed_forward`,
/// `attention::composed_backward`) on the same device: sequences that no block of rows
/// divides, a head size whose tiles fill wgpu's 16 KiB of shared memory (fewer rows per cube),
/// and several (batch, head) pairs.
#[test]
fn attention_kernels_match_the_composed_operation() {
    use memwall_runner::model::attention::{self, AttentionBackend, Tiles};
    for [b, h, t, d] in [[2usize, 3, 37, 16], [1, 2, 70, 64]] {
        let n = b * h * t * d;
        let q = tensor(values(n, 11, -1.0, 2.0), [b, h, t, d]);
        let k = tensor(values(n, 12, -1.0, 2.0), [b, h, t, d]);
        let v = tensor(values(n, 13, -1.0, 2.0), [b, h, t, d]);
        let grad_out = tensor(values(n, 14, -1.0, 2.0), [b, h, t, d]);
        let tiles = Tiles { query: 16, key: 8 };
        let (out, lse) = <Wgpu as AttentionBackend>::attention_forward(
            prim(q.clone()),
            prim(k.clone()),
            prim(v.clone()),
            tiles,
        );
        let (out_ref, lse_ref) =
            attention::composed_forward::<Wgpu>(q.clone(), k.clone(), v.clone(), tiles);
        let case = format!("[{b}, {h}, {t}, {d}]");
        let out_err = max_abs_diff(
            &read(out.clone()),
            &out_ref.into_data().to_vec::<f32>().unwrap(),
        );
        assert!(out_err < 1e-5, "{case} out: {out_err:e}");
        let lse_err = max_abs_diff(
            &read(lse.clone()),
            &lse_ref.into_data().to_vec::<f32>().unwrap(),
        );
        assert!(lse_err < 1e-5, "{case} lse: {lse_err:e}");

        let out_t = Tensor::<Wgpu, 4>::from_primitive(TensorPrimitive::Float(out));
        let lse_t = Tensor::<Wgpu, 4>::from_primitive(TensorPrimitive::Float(lse));
        let (dq, dk, dv) = <Wgpu as AttentionBackend>::attention_backward(
            [
                q.clone(),
                k.clone(),
                v.clone(),
                out_t.clone(),
                grad_out.clone(),
            ]
            .map(prim),
            prim(lse_t.clone()),
            tiles,
        );
        let (dq_ref, dk_ref, dv_ref) =
            attention::composed_backward::<Wgpu>(q, k, v, out_t, lse_t, grad_out, tiles);
        for (name, ours, theirs) in [("dq", dq, dq_ref), ("dk", dk, dk_ref), ("dv", dv, dv_ref)] {
            let theirs = theirs.into_data().to_vec::<f32>().unwrap();
            let scale = theirs.iter().fold(1.0f32, |m, x| m.max(x.abs()));
            let err = max_abs_diff(&read(ours), &theirs);
            assert!(err < 2e-5 * scale, "{case} {name}: {err:e} (scale {scale})");
        }
    }
}

/// Burn's fusion backend over the same runtime (the type of CUDA's `fusion = true` rows).
type WgpuFused = burn_fusion::Fusion<Wgpu>;

/// Every output of the model's operations that run memwall's kernels, on backend `B`, named;
/// with `chain`, each input is first an elementwise expression (which Burn's fusion compiles
/// into the stream before the custom operation) and each output is scaled after it: the layer norm forward
/// and backward (both kinds of kept tensors), GELU's backward, the attention forward and
/// backward, and two Adafactor steps of a matrix and of a vector.
fn kernelled_operations<B>(chain: bool) -> Vec<(String, Vec<f32>)>
where
    B: memwall_runner::model::ModelBackend<Device = cubecl::wgpu::WgpuDevice>,
{
    use memwall_runner::model::attention::Tiles;
    use memwall_runner::model::optim::{AdafactorBackend, AdafactorStep};
    use memwall_runner::train::adafactor::{beta2, CLIP_THRESHOLD, EPS1};
    let dev = device();
    let make = |n: usize, seed: u64, lo: f32, width: f32| {
        let t = Tensor::<B, 1>::from_data(TensorData::new(values(n, seed, lo, width), [n]), &dev);
        let t = if chain {
            t.mul_scalar(1.5).add_scalar(0.25)
        } else {
            t
        };
        t.into_primitive().tensor()
    };
    let reshape = |t: FloatTensor<B>, shape: Vec<usize>| -> FloatTensor<B> {
        B::float_reshape(t, burn::tensor::Shape::from(shape))
    };
    let out = |t: FloatTensor<B>| -> Vec<f32> {
        let t = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
        let n = t.shape().num_elements();
        let t = t.reshape([n]);
        let t = if chain { t.mul_scalar(0.5) } else { t };
        t.into_data().to_vec::<f32>().unwrap()
    };
    let mut got = Vec::new();
    let (rows, d) = (70usize, 100usize);
    let x = reshape(make(rows * d, 3, -3.0, 7.0), vec![rows, d]);
    let gamma = make(d, 4, 0.5, 1.0);
    let beta = make(d, 5, -0.5, 1.0);
    let dy = reshape(make(rows * d, 6, -1.0, 2.0), vec![rows, d]);
    let (y, mean, rstd) =
        B::layer_norm_forward(x.clone(), gamma.clone(), beta.clone(), norm::epsilon());
    for (kept, name) in [
        (
            Kept::Input {
                x: x.clone(),
                mean: mean.clone(),
            },
            "input",
        ),
        (
            Kept::Output {
                y: y.clone(),
                beta: beta.clone(),
            },
            "output",
        ),
    ] {
        let (dx, dg, db) = B::layer_norm_backward(kept, rstd.clone(), gamma.clone(), dy.clone());
        got.push((format!("layer norm dx (kept {name})"), out(dx)));
        got.push((format!("layer norm dgamma (kept {name})"), out(dg)));
        got.push((format!("layer norm dbeta (kept {name})"), out(db)));
    }
    got.push(("layer norm y".into(), out(y)));
    got.push(("layer norm mean".into(), out(mean)));
    got.push(("layer norm rstd".into(), out(rstd)));
    got.push(("gelu backward".into(), out(B::model_gelu_backward(x, dy))));

    let shape = vec![1usize, 2, 37, 16];
    let n: usize = shape.iter().product();
    let [q, k, v, g] = [11u64, 12, 13, 14].map(|s| reshape(make(n, s, -1.0, 2.0), shape.clone()));
    let tiles = Tiles { query: 16, key: 8 };
    let (o, lse) = B::attention_forward(q.clone(), k.clone(), v.clone(), tiles);
    let (dq, dk, dv) = B::attention_backward([q, k, v, o.clone(), g], lse.clone(), tiles);
    for (name, t) in [("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)] {
        got.push((format!("attention {name}"), out(t)));
    }

    fn steps<B: AdafactorBackend, const D: usize>(
        p: Tensor<B, D>,
        g: Tensor<B, D>,
        got: &mut Vec<(String, Vec<f32>)>,
    ) {
        let mut state = None;
        let mut p = p;
        for t in 1..=2usize {
            let h = AdafactorStep {
                lr: 1e-2,
                weight_decay: 0.01,
                beta2: beta2(t),
                eps1: EPS1,
                clip_threshold: CLIP_THRESHOLD,
            };
            let (p_new, (row, col)) =
                B::adafactor_update(p, g.clone().mul_scalar(t as f64), state, &h);
            let data = |t: Tensor<B, 1>| t.into_data().to_vec::<f32>().unwrap();
            got.push((
                format!("adafactor rank {D} step {t} p"),
                data(p_new.clone().reshape([-1])),
            ));
            got.push((
                format!("adafactor rank {D} step {t} row"),
                data(row.clone()),
            ));
            if let Some(c) = col.clone() {
                got.push((format!("adafactor rank {D} step {t} col"), data(c)));
            }
            state = Some((row, col));
            p = p_new;
        }
    }
    let from = |t: FloatTensor<B>| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
    let p = from(reshape(make(40 * 30, 21, -1.0, 2.0), vec![40, 30]));
    let g = from(reshape(make(40 * 30, 22, -0.1, 0.2), vec![40, 30]));
    steps(p, g, &mut got);
    let p = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(make(30, 23, -1.0, 2.0)));
    let g = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(make(30, 24, -0.1, 0.2)));
    steps(p, g, &mut got);
    got
}

/// Under Burn's fusion (`Fusion<CubeBackend>`, CUDA's `fusion = true` rows) the layer norm,
/// the attention, GELU's backward and Adafactor's update run memwall's kernels as custom
/// operations: on the same inputs their outputs are the eager backend's bit for bit (Burn's
/// composed operations would differ in the last bits, and GELU's backward by up to 8.7e-4).
/// With fused elementwise operations before and after each (the stream must run what precedes
/// a custom operation first), they agree within 1e-5 of the largest value.
#[test]
fn kernels_run_inside_burn_fusion_as_custom_operations() {
    let eager = kernelled_operations::<Wgpu>(false);
    let fused = kernelled_operations::<WgpuFused>(false);
    assert_eq!(eager.len(), fused.len());
    for ((name, a), (_, b)) in eager.iter().zip(&fused) {
        assert_eq!(a.len(), b.len(), "{name}");
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "{name}: fused differs from eager by {:e}",
            max_abs_diff(a, b)
        );
    }
    let eager = kernelled_operations::<Wgpu>(true);
    let fused = kernelled_operations::<WgpuFused>(true);
    for ((name, a), (_, b)) in eager.iter().zip(&fused) {
        let scale = a.iter().fold(f32::MIN_POSITIVE, |s, x| s.max(x.abs()));
        let err = max_abs_diff(a, b);
        assert!(
            err <= 1e-5 * scale,
            "{name} (chained): {err:e} (scale {scale:e})"
        );
    }
}
