//! Inference with two buffers, from the CMU 15-442 lecture (`003_c07c09ab371a2f69.txt`, slides
//! "Techniques for Memory Saving, Inference Only" and "Activation Memory Cost for Training").
//!
//! Forward-only execution of an N-layer network needs O(1) activation memory (two ping-pong
//! buffers); training keeps the activations the backward pass needs, O(N). Shown twice: with the
//! static planner of [`super::planner`] on an N-layer MLP graph, and by actually running an N-layer
//! ReLU MLP with two buffers versus storing every activation.

use serde::{Deserialize, Serialize};

use super::params::{bytes_at_most, int_in, list, ParamResult, GIB};
use super::{demo_study, ensure, fmt_bytes, median_time, DemoError, XorShift};
use super::{CiteAs, Cited};
use crate::document::content::{Figure, Measure, Section, Series, Table};
use crate::remat::memory_plan::{plain_order, plan_memory, MemoryPlan, Reuse};
pub use crate::remat::nets::mlp_chain;
use crate::remat::nets::training_graph;
use crate::remat::{Graph, RematError};

/// Parameters of the two-buffer inference study.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// The static plans of `g` forward only (inference) and of its training graph, under `st`.
fn plans(g: &Graph, st: Reuse) -> Result<(MemoryPlan, MemoryPlan), RematError> {
    let t = training_graph(g)?;
    Ok((
        plan_memory(g, &plain_order(g), st)?,
        plan_memory(&t, &plain_order(&t), st)?,
    ))
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

/// What the study measured at one depth N. Bytes are activation bytes (weights excluded);
/// times are medians over `repeats`, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DepthResult {
    /// Number of FC+ReLU layers N.
    pub depth: usize,
    /// The static planner's forward-only plan (in-place + sharing), bytes.
    pub planner_inference_bytes: u64,
    /// Buffers of that plan.
    pub planner_inference_buffers: usize,
    /// The static planner's training plan (in-place + sharing), bytes.
    pub planner_training_bytes: u64,
    /// Bytes held by the two ping-pong buffers of the real forward pass.
    pub two_buffers_bytes: u64,
    /// Bytes held when every activation is stored.
    pub store_all_bytes: u64,
    /// Median time of the two-buffer forward pass, seconds.
    pub two_buffers_s: f64,
    /// Median time of the store-all forward pass, seconds.
    pub store_all_s: f64,
}

/// The result of the two-buffer inference study.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InferenceResult {
    /// The parameters it ran with.
    pub params: InferenceParams,
    /// Bytes of one activation tensor (`batch * width * 4`).
    pub tensor_bytes: u64,
    /// One entry per depth, in the order of `params.depths`.
    pub depths: Vec<DepthResult>,
}

/// The two-buffer inference study ([`InProcessStudy`](super::InProcessStudy)).
pub struct TwoBufferInference;

demo_study!(
    TwoBufferInference: InferenceParams => InferenceResult,
    cited CiteAs,
    validate,
    measure,
    |r, c| vec![sections(r, c)],
    measures
);

/// Largest over smallest value of `f` over the depths (1.0: constant in N; NaN without depths).
fn growth(r: &InferenceResult, f: fn(&DepthResult) -> u64) -> f64 {
    let values = r.depths.iter().map(|d| f(d) as f64);
    let max = values.clone().fold(f64::NAN, f64::max);
    let min = values.fold(f64::NAN, f64::min);
    max / min
}

/// Least-squares slope of ln(bytes) against ln(N) over the depths N >= 16 (all depths when
/// fewer than two reach 16): 1.0 for memory linear in N, 0 for constant memory.
fn log_slope(r: &InferenceResult, f: fn(&DepthResult) -> u64) -> f64 {
    let points = |min_depth: usize| -> Vec<(f64, f64)> {
        r.depths
            .iter()
            .filter(|d| d.depth >= min_depth && f(d) > 0)
            .map(|d| ((d.depth as f64).ln(), (f(d) as f64).ln()))
            .collect()
    };
    let mut pts = points(16);
    if pts.len() < 2 {
        pts = points(1);
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx
}

/// The numbers of a result that the experiment file's `[[claims]]` name, each computed from the
/// stored result only:
///
/// - `inference_bytes_growth` (x): largest over smallest activation bytes across the depths N,
///   the larger of the two forward-only series (the planner's inference plan and the measured
///   two buffers); 1.0 is O(1) memory.
/// - `two_buffers_growth`, `planner_inference_growth` (x): the same per series.
/// - `training_bytes_log_slope`: least-squares slope of ln(bytes) against ln(N), N >= 16, of the
///   planner's training plan; 1.0 is O(N) memory.
/// - `store_all_log_slope`: the same for the measured store-every-activation forward pass.
pub fn measures(r: &InferenceResult) -> Vec<Measure> {
    use memwall_core::spec::provenance::Provenance::Computed;
    let two = growth(r, |d| d.two_buffers_bytes);
    let planned = growth(r, |d| d.planner_inference_bytes);
    let buffers = "the activation buffers our forward pass holds (Vec capacities x 4 B)";
    let planner = "the static memory planner's bytes on the MLP's graph";
    vec![
        Measure::new(
            "inference_bytes_growth",
            two.max(planned),
            "x",
            2,
            Computed(format!(
                "largest / smallest over the depths, the larger of {buffers} and {planner}"
            )),
        ),
        Measure::new(
            "two_buffers_growth",
            two,
            "x",
            2,
            Computed(format!("largest / smallest over the depths of {buffers}")),
        ),
        Measure::new(
            "planner_inference_growth",
            planned,
            "x",
            2,
            Computed(format!(
                "largest / smallest over the depths of {planner} (inference)"
            )),
        ),
        Measure::new(
            "training_bytes_log_slope",
            log_slope(r, |d| d.planner_training_bytes),
            "",
            3,
            Computed(format!(
                "least-squares slope of ln(bytes) on ln(N), N >= 16, of {planner} (training)"
            )),
        ),
        Measure::new(
            "store_all_log_slope",
            log_slope(r, |d| d.store_all_bytes),
            "",
            3,
            Computed(
                "least-squares slope of ln(bytes) on ln(N), N >= 16, of the store-all forward's \
                 buffers (Vec capacities x 4 B)"
                    .into(),
            ),
        ),
    ]
}

/// Largest memory the real forward passes may hold: the deepest network's weights plus its
/// store-all activations, f32.
pub const MAX_BYTES: f64 = 4.0 * GIB;

/// Checks `p`'s ranges: 1 to 64 depths in 1..=4096 layers, width 1..=16384, batch 1..=16384,
/// repeats 1..=100, and the deepest network's weights and stored activations (4 B x (depth x
/// width^2 + depth x batch x width)) under [`MAX_BYTES`].
///
/// # Errors
/// The first [`ParamError`].
pub fn validate(p: &InferenceParams) -> ParamResult {
    list("depths", &p.depths, 1, 64, |f, &d| int_in(f, d, 1, 4096))?;
    int_in("width", p.width, 1, 16384)?;
    int_in("batch", p.batch, 1, 16384)?;
    int_in("repeats", p.repeats, 1, 100)?;
    let depth = p.depths.iter().copied().max().unwrap_or(1) as f64;
    let (w, b) = (p.width as f64, p.batch as f64);
    bytes_at_most(
        "width",
        4.0 * (depth * w * w + depth * b * w),
        MAX_BYTES,
        "the deepest network's weights and stored activations (4 B x (depth x width^2 + depth x batch x width))",
    )
}

/// Plans and runs the MLP at every depth of `p`.
///
/// # Errors
/// [`DemoError::InvalidParam`] for empty or zero depths, width or batch; [`DemoError::Check`]
/// when the two-buffer output differs from the store-all output.
pub fn measure(p: &InferenceParams) -> Result<InferenceResult, DemoError> {
    validate(p)?;
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
    let tensor_bytes = (p.batch * p.width * 4) as u64;
    let both = Reuse {
        inplace: true,
        sharing: true,
    };
    let mut rng = XorShift(42);
    let input: Vec<f32> = (0..p.batch * p.width)
        .map(|_| rng.unit_f64() as f32)
        .collect();
    let dmax = *p.depths.iter().max().unwrap_or(&1);
    let net = Mlp::new(dmax, p.width, 7);
    let mut depths = Vec::with_capacity(p.depths.len());
    for &n in &p.depths {
        let g = mlp_chain(n, tensor_bytes);
        let (pi, pt) = plans(&g, both).map_err(|e| DemoError::Check(e.to_string()))?;
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
        depths.push(DepthResult {
            depth: n,
            planner_inference_bytes: pi.static_bytes,
            planner_inference_buffers: pi.buffers,
            planner_training_bytes: pt.static_bytes,
            two_buffers_bytes: b2,
            store_all_bytes: ba,
            two_buffers_s: t2,
            store_all_s: ta,
        });
    }
    Ok(InferenceResult {
        params: p.clone(),
        tensor_bytes,
        depths,
    })
}

/// The study's section: the lecture's O(1) versus O(N) claims beside the planner's and the
/// measured bytes.
pub fn sections(r: &InferenceResult, cited: &Cited<CiteAs>) -> Section {
    let src = cited.src();
    let p = &r.params;
    let curves = Curves::of(r);
    Section {
        details: None,
        title: "Inference with two buffers versus training activations".into(),
        claim: format!(
            "{src}, slide \"Techniques for Memory Saving, Inference Only\": \"We only need `$O(1)$` memory for computing the final output of a `$N$` layer deep network by \
             cycling through two buffers\"; slide \"Activation Memory Cost for Training\": \"Training a `$N$` -layer neural network would require `$O(N)$` memory.\" \
             (The slides' LaTeX as the text source has it.)"
        ),
        ours: ours(r, &curves),
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
            rows: r.depths.iter().map(depth_row).collect(),
            notes: Vec::new(),
        }],
        figures: vec![curves.figure()],
    }
}

/// Activation bytes versus depth N: `(N, bytes)` per depth, planned and measured.
struct Curves {
    /// The planner's forward-only plan.
    inference: Vec<(f64, f64)>,
    /// The planner's training plan (in-place + sharing).
    training: Vec<(f64, f64)>,
    /// Measured: two ping-pong buffers.
    two_buffers: Vec<(f64, f64)>,
    /// Measured: every activation stored.
    store_all: Vec<(f64, f64)>,
}

impl Curves {
    fn of(r: &InferenceResult) -> Curves {
        let series = |f: fn(&DepthResult) -> u64| -> Vec<(f64, f64)> {
            r.depths
                .iter()
                .map(|d| (d.depth as f64, f(d) as f64))
                .collect()
        };
        Curves {
            inference: series(|d| d.planner_inference_bytes),
            training: series(|d| d.planner_training_bytes),
            two_buffers: series(|d| d.two_buffers_bytes),
            store_all: series(|d| d.store_all_bytes),
        }
    }

    /// The four curves on log-log axes.
    fn figure(self) -> Figure {
        Figure {
            name: "activation_memory_vs_depth".into(),
            title: "Activation memory versus number of layers".into(),
            x_label: "layers N".into(),
            y_label: "activation memory (bytes)".into(),
            log_x: true,
            log_y: true,
            series: vec![
                Series::line("planner: inference", self.inference),
                Series::line("planner: training (in-place + sharing)", self.training),
                Series::line("measured: two buffers", self.two_buffers),
                Series::line("measured: all activations stored", self.store_all),
            ],
            ..Default::default()
        }
    }
}

/// Bytes at the smallest depth of a curve (0 without depths).
fn first(v: &[(f64, f64)]) -> f64 {
    v.first().map(|p| p.1).unwrap_or(0.0)
}

/// Bytes at the largest depth of a curve (0 without depths).
fn last(v: &[(f64, f64)]) -> f64 {
    v.last().map(|p| p.1).unwrap_or(0.0)
}

/// Our numbers in words: the planner's constant forward plan and growing training plan, and
/// the measured two buffers versus storing everything.
fn ours(r: &InferenceResult, c: &Curves) -> String {
    let p = &r.params;
    let n0 = r.depths.first().map_or(0, |d| d.depth);
    let n1 = r.depths.last().map_or(0, |d| d.depth);
    format!(
        "For an MLP of FC+ReLU layers (batch {}, width {}, fp32, {} per activation), the planner's forward-only plan stays at {} from N = {n0} to N = {n1} while the \
         training plan (in-place + sharing) grows from {} to {}; running the network, two ping-pong buffers hold {} at every depth versus {} to {} when every \
         activation is stored, with bit-identical outputs.",
        p.batch, p.width, fmt_bytes(r.tensor_bytes as f64), fmt_bytes(last(&c.inference)), fmt_bytes(first(&c.training)), fmt_bytes(last(&c.training)),
        fmt_bytes(last(&c.two_buffers)), fmt_bytes(first(&c.store_all)), fmt_bytes(last(&c.store_all)),
    )
}

/// One table row: depth, planned and measured bytes, times (ms).
fn depth_row(d: &DepthResult) -> Vec<String> {
    vec![
        d.depth.to_string(),
        d.planner_inference_bytes.to_string(),
        d.planner_inference_buffers.to_string(),
        d.planner_training_bytes.to_string(),
        d.two_buffers_bytes.to_string(),
        d.store_all_bytes.to_string(),
        format!("{:.2}", d.two_buffers_s * 1e3),
        format!("{:.2}", d.store_all_s * 1e3),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InProcessStudy;

    use crate::claim_checks::{assert_claims_have_measures, value};

    #[test]
    fn inference_plan_is_constant_training_linear() {
        let both = Reuse {
            inplace: true,
            sharing: true,
        };
        let (a, t4) = plans(&mlp_chain(4, 10), both).unwrap();
        let (b, t64) = plans(&mlp_chain(64, 10), both).unwrap();
        assert_eq!(a.static_bytes, b.static_bytes);
        assert_eq!(b.static_bytes, 30); // input + two buffers
        let (t4, t64) = (t4.static_bytes, t64.static_bytes);
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
        let r = measure(&InferenceParams {
            depths: vec![1, 2, 4],
            width: 8,
            batch: 2,
            repeats: 1,
        })
        .unwrap();
        let s = TwoBufferInference::sections(
            &r,
            &crate::cited::from_experiment("two_buffer_inference"),
        );
        assert_eq!(s[0].tables[0].rows.len(), 3);
    }

    #[test]
    fn measures_answer_the_claims() {
        let r = measure(&InferenceParams {
            depths: vec![1, 16, 32, 64, 128],
            width: 8,
            batch: 2,
            repeats: 1,
        })
        .unwrap();
        let m = assert_claims_have_measures::<TwoBufferInference>("two_buffer_inference", r);
        assert_eq!(value(&m, "inference_bytes_growth"), 1.0);
        let slope = value(&m, "training_bytes_log_slope");
        assert!((0.9..=1.1).contains(&slope), "{slope}");
        let stored = value(&m, "store_all_log_slope");
        assert!((0.9..=1.1).contains(&stored), "{stored}");
    }
}
