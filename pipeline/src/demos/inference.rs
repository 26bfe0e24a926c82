//! Inference with two buffers, from the CMU 15-442 lecture (`003_c07c09ab371a2f69.txt`, slides
//! "Techniques for Memory Saving, Inference Only" and "Activation Memory Cost for Training").
//!
//! Forward-only execution of an N-layer network needs O(1) activation memory (two ping-pong
//! buffers); training keeps the activations the backward pass needs, O(N). Shown twice: with the
//! static planner of [`super::planner`] on an N-layer MLP graph, and by actually running an N-layer
//! ReLU MLP with two buffers versus storing every activation.

use serde::Deserialize;

use super::planner::{inference_schedule, plan, training_schedule, FwdGraph, OpKind, Strategy};
use super::{ensure, fmt_bytes, median_time, DemoError, XorShift};
use crate::report::model::{Figure, Mark, Section, Series, Table};

const SRC: &str = "003_c07c09ab371a2f69.txt (CMU 15-442 lecture \"Memory Optimizations\")";

/// Parameters of the two-buffer inference study.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceParams {
    /// Network depths N (number of FC+ReLU layers).
    pub depths: Vec<usize>,
    /// Layer width (features) of the MLP.
    pub width: usize,
    /// Batch size (rows of the activation matrices).
    pub batch: usize,
    /// Timing repeats for the real forward passes.
    pub repeats: usize,
}

impl Default for InferenceParams {
    fn default() -> Self {
        Self {
            depths: vec![1, 2, 4, 8, 16, 32, 64, 128, 256],
            width: 128,
            batch: 16,
            repeats: 1,
        }
    }
}

/// N-layer chain data -> (FC -> ReLU) x N -> softmax, tensors of `bytes` each.
pub fn mlp_chain(n: usize, bytes: u64) -> FwdGraph {
    let mut g = FwdGraph::default();
    let mut x = g.add("data", OpKind::Input, &[], bytes);
    for i in 0..n {
        let f = g.add(format!("fc{i}"), OpKind::Fc, &[x], bytes);
        x = g.add(format!("relu{i}"), OpKind::Relu, &[f], bytes);
    }
    g.add("softmax", OpKind::Loss, &[x], bytes);
    g
}

/// A dense ReLU MLP with square `width x width` layers (He-uniform weights, deterministic).
#[derive(Debug, Clone)]
pub struct Mlp {
    /// Row-major weight matrices, one per layer.
    pub weights: Vec<Vec<f32>>,
    /// Layer width.
    pub width: usize,
}

impl Mlp {
    /// Builds `layers` layers with a fixed seed.
    pub fn new(layers: usize, width: usize, seed: u64) -> Self {
        let mut rng = XorShift(seed | 1);
        let a = (6.0 / width as f64).sqrt();
        let weights = (0..layers)
            .map(|_| {
                (0..width * width)
                    .map(|_| ((rng.unit_f64() * 2.0 - 1.0) * a) as f32)
                    .collect()
            })
            .collect();
        Self { weights, width }
    }

    fn layer(&self, l: usize, x: &[f32], y: &mut [f32]) {
        let w = &self.weights[l];
        let n = self.width;
        for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
            for (o, wrow) in yr.iter_mut().zip(w.chunks_exact(n)) {
                let s: f32 = xr.iter().zip(wrow).map(|(a, b)| a * b).sum();
                *o = s.max(0.0);
            }
        }
    }

    /// Forward pass cycling through two buffers. Returns (output, bytes held by the buffers).
    pub fn forward_two_buffers(&self, input: &[f32]) -> (Vec<f32>, u64) {
        let mut a = input.to_vec();
        let mut b = vec![0f32; input.len()];
        for l in 0..self.weights.len() {
            self.layer(l, &a, &mut b);
            std::mem::swap(&mut a, &mut b);
        }
        let bytes = ((a.capacity() + b.capacity()) * 4) as u64;
        (a, bytes)
    }

    /// Forward pass keeping every activation (what training must keep for the backward pass).
    /// Returns (output, bytes held by all stored activations).
    pub fn forward_store_all(&self, input: &[f32]) -> (Vec<f32>, u64) {
        let mut acts: Vec<Vec<f32>> = vec![input.to_vec()];
        for l in 0..self.weights.len() {
            let mut y = vec![0f32; input.len()];
            self.layer(l, &acts[l], &mut y);
            acts.push(y);
        }
        let bytes = acts.iter().map(|v| v.capacity() * 4).sum::<usize>() as u64;
        (acts.last().cloned().unwrap_or_default(), bytes)
    }
}

/// Runs the study.
pub fn run(p: &InferenceParams) -> Result<Vec<Section>, DemoError> {
    ensure(
        !p.depths.is_empty() && p.depths.iter().all(|&d| d > 0),
        "depths",
        "non-empty, positive",
    )?;
    ensure(
        p.width > 0 && p.batch > 0,
        "width",
        "width and batch must be positive",
    )?;
    let tbytes = (p.batch * p.width * 4) as u64;
    let both = Strategy {
        inplace: true,
        sharing: true,
    };
    let mut rows = Vec::new();
    let (mut s_inf, mut s_train, mut s_two, mut s_all) = (vec![], vec![], vec![], vec![]);
    let mut rng = XorShift(42);
    let input: Vec<f32> = (0..p.batch * p.width)
        .map(|_| rng.unit_f64() as f32)
        .collect();
    let dmax = *p.depths.iter().max().unwrap_or(&1);
    let net = Mlp::new(dmax, p.width, 7);
    for &n in &p.depths {
        let g = mlp_chain(n, tbytes);
        let pi = plan(&inference_schedule(&g), both);
        let pt = plan(&training_schedule(&g, None), both);
        let sub = Mlp {
            weights: net.weights[..n].to_vec(),
            width: p.width,
        };
        let (t2, (o2, b2)) = median_time(p.repeats, || sub.forward_two_buffers(&input));
        let (ta, (oa, ba)) = median_time(p.repeats, || sub.forward_store_all(&input));
        if o2.iter().zip(&oa).any(|(x, y)| x.to_bits() != y.to_bits()) {
            return Err(DemoError::Check(format!(
                "N={n}: two-buffer output differs from store-all output"
            )));
        }
        rows.push(vec![
            n.to_string(),
            pi.static_bytes.to_string(),
            pi.buffers.to_string(),
            pt.static_bytes.to_string(),
            b2.to_string(),
            ba.to_string(),
            format!("{:.2}", t2 * 1e3),
            format!("{:.2}", ta * 1e3),
        ]);
        s_inf.push((n as f64, pi.static_bytes as f64));
        s_train.push((n as f64, pt.static_bytes as f64));
        s_two.push((n as f64, b2 as f64));
        s_all.push((n as f64, ba as f64));
    }
    let first = |v: &Vec<(f64, f64)>| v.first().map(|p| p.1).unwrap_or(0.0);
    let last = |v: &Vec<(f64, f64)>| v.last().map(|p| p.1).unwrap_or(0.0);
    let line = |label: &str, pts: Vec<(f64, f64)>| Series {
        label: label.into(),
        points: pts,
        mark: Mark::Line,
        point_labels: vec![],
    };
    let (n0, n1) = (p.depths[0], *p.depths.last().unwrap_or(&1));
    let sec = Section {
        title: "Inference with two buffers versus training activations".into(),
        claim: format!(
            "{SRC}, slide \"Techniques for Memory Saving, Inference Only\": \"We only need O(1) memory for computing the final output of a N layer deep network by cycling \
             through two buffers\"; slide \"Activation Memory Cost for Training\": \"Training a N-layer neural network would require O(N) memory\"."
        ),
        ours: format!(
            "For an MLP of FC+ReLU layers (batch {}, width {}, fp32, {} per activation), the planner's forward-only plan stays at {} from N = {n0} to N = {n1} while the \
             training plan (in-place + sharing) grows from {} to {}; running the network, two ping-pong buffers hold {} at every depth versus {} to {} when every \
             activation is stored, with bit-identical outputs.",
            p.batch, p.width, fmt_bytes(tbytes as f64), fmt_bytes(last(&s_inf)), fmt_bytes(first(&s_train)), fmt_bytes(last(&s_train)),
            fmt_bytes(last(&s_two)), fmt_bytes(first(&s_all)), fmt_bytes(last(&s_all)),
        ),
        notes: vec![
            "Planner rows: static plan with in-place + sharing of the graph data -> (FC -> ReLU) x N -> softmax (the input batch counts as one pinned tensor, so the \
             forward-only plan is the input plus two buffers). Measured rows: capacity of the Vecs actually allocated for activations (weights excluded)."
                .into(),
        ],
        tables: vec![Table {
            caption: format!("Activation memory versus depth N (batch {}, width {}, fp32)", p.batch, p.width),
            columns: vec![
                "N".into(),
                "Planner, inference (bytes)".into(),
                "Planner, inference buffers".into(),
                "Planner, training (bytes)".into(),
                "Measured, two buffers (bytes)".into(),
                "Measured, all activations (bytes)".into(),
                "Time two buffers (ms)".into(),
                "Time store all (ms)".into(),
            ],
            rows,
        }],
        figures: vec![Figure {
            name: "activation_memory_vs_depth".into(),
            title: "Activation memory versus number of layers".into(),
            x_label: "layers N".into(),
            y_label: "activation memory (bytes)".into(),
            log_x: true,
            log_y: true,
            series: vec![
                line("planner: inference", s_inf),
                line("planner: training (in-place + sharing)", s_train),
                line("measured: two buffers", s_two),
                line("measured: all activations stored", s_all),
            ],
            ..Default::default()
        }],
    };
    Ok(vec![sec])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inference_plan_is_constant_training_linear() {
        let both = Strategy {
            inplace: true,
            sharing: true,
        };
        let a = plan(&inference_schedule(&mlp_chain(4, 10)), both);
        let b = plan(&inference_schedule(&mlp_chain(64, 10)), both);
        assert_eq!(a.static_bytes, b.static_bytes);
        assert_eq!(b.static_bytes, 30); // input + two buffers
        let t4 = plan(&training_schedule(&mlp_chain(4, 10), None), both).static_bytes;
        let t64 = plan(&training_schedule(&mlp_chain(64, 10), None), both).static_bytes;
        assert!(t64 >= 64 * 10 && t64 > 8 * t4, "{t4} {t64}");
    }

    #[test]
    fn two_buffers_match_store_all() {
        let m = Mlp::new(10, 16, 3);
        let x: Vec<f32> = (0..32).map(|i| i as f32 / 32.0).collect();
        let (a, ba) = m.forward_two_buffers(&x);
        let (b, bb) = m.forward_store_all(&x);
        assert_eq!(a, b);
        assert_eq!(ba, 2 * 32 * 4);
        assert_eq!(bb, 11 * 32 * 4);
    }

    #[test]
    fn run_small() {
        let s = run(&InferenceParams {
            depths: vec![1, 2, 4],
            width: 8,
            batch: 2,
            repeats: 1,
        })
        .unwrap();
        assert_eq!(s[0].tables[0].rows.len(), 3);
    }
}
