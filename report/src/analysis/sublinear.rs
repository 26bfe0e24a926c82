//! The sublinear memory model of segment checkpointing, fitted to a measured sweep of the
//! checkpoint interval K.
//!
//! Checkpointing every K of N blocks keeps the input of each of the ceil(N / K) segments (the
//! "checkpoint cost", O(N/K)) and, while backward recomputes one segment, the activations of
//! its K blocks (the "re-computation cost", O(K)): memory = O(N/K) + O(K), lowest at
//! K = sqrt(N) (CMU 15-442/15-642, Memory Optimizations, slide "Sublinear Memory Cost"; Chen,
//! Xu, Zhang and Guestrin 2016, "Training Deep Nets with Sublinear Memory Cost",
//! arXiv:1604.06174, Section 4). The slide counts both costs in the same unit; measured, a
//! checkpoint (one block input) and a block's saved activations differ, so the model is
//!
//! ```text
//! y(K) = a * ceil(N / K) + b * K + c
//! ```
//!
//! with `a` the bytes of one checkpoint, `b` the bytes one more block of the recomputed
//! segment holds, and `c` what does not depend on K. Its minimum over a continuous K lies at
//! `K* = sqrt(a * N / b)`, which is the slide's `sqrt(N)` when `a = b`.
//!
//! `y` is the activation peak: peak allocated − steady state (the bytes live at the start of
//! the step: parameters, optimizer state, batch), so that the parameters and the optimizer's
//! state, which do not depend on K, are not part of it.
//!
//! The fit minimizes relative residuals, `sum(((y - fit) / y)^2)`: the sweep's peaks span more
//! than an order of magnitude (K = N keeps every activation of the model), and an absolute
//! least-squares fit would be decided by the largest intervals alone.
//!
//! May import: `memwall_core` (specs, claims).

use memwall_core::spec::claims::SweepMetric;

/// One measured interval of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    /// Blocks per segment.
    pub k: usize,
    /// The configuration that measured it.
    pub config: String,
    /// Activation peak: peak allocated − steady state (bytes).
    pub activation_bytes: f64,
    /// Peak allocated (bytes).
    pub peak_bytes: f64,
    /// Median step time (s).
    pub step_s: Option<f64>,
}

/// Segments of N blocks cut every K: `ceil(N / K)`.
pub fn segments(layers: usize, k: usize) -> usize {
    layers.div_ceil(k.max(1))
}

/// The least-squares fit `y(K) = a * ceil(N / K) + b * K + c` of a sweep (bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SublinearFit {
    /// Bytes per checkpoint (the O(N/K) term's coefficient).
    pub a: f64,
    /// Bytes per block of the recomputed segment (the O(K) term's coefficient).
    pub b: f64,
    /// Bytes that do not depend on K.
    pub c: f64,
    /// Root-mean-square relative residual, `sqrt(mean(((y - fit) / y)^2))` (a fraction).
    pub rms_rel: f64,
    /// Coefficient of determination of the fit on the measured bytes,
    /// `1 - sum((y - fit)^2) / sum((y - mean(y))^2)`.
    pub r2: f64,
    /// Blocks of the model (N).
    pub layers: usize,
}

impl SublinearFit {
    /// The fitted bytes at interval `k`.
    pub fn predict(&self, k: usize) -> f64 {
        self.a * segments(self.layers, k) as f64 + self.b * k as f64 + self.c
    }

    /// The minimizer over a continuous K of `a * N / K + b * K`, `sqrt(a * N / b)`; `None`
    /// unless both costs are positive.
    pub fn continuous_minimizer(&self) -> Option<f64> {
        (self.a > 0.0 && self.b > 0.0).then(|| (self.a * self.layers as f64 / self.b).sqrt())
    }

    /// Whether the fit has the claimed shape: both costs positive, and balanced within the
    /// model, i.e. the minimizer `sqrt(a * N / b)` lies in [1, N]. A curve that only grows
    /// with K (checkpointing saves nothing) fits with a vanishing `a` and its minimizer below
    /// 1; one that only falls, with a vanishing `b` and its minimizer above N.
    pub fn has_shape(&self) -> bool {
        self.continuous_minimizer()
            .is_some_and(|k| (1.0..=self.layers as f64).contains(&k))
    }
}

/// Solves the 3x3 system `m x = v` by Gaussian elimination with partial pivoting; `None` when
/// it is singular (relative to its largest entry).
fn solve3(mut m: [[f64; 3]; 3], mut v: [f64; 3]) -> Option<[f64; 3]> {
    let scale = m.iter().flatten().fold(0.0_f64, |acc, x| acc.max(x.abs()));
    if !(scale > 0.0 && scale.is_finite()) {
        return None;
    }
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() <= scale * 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        v.swap(col, pivot);
        let pivot_row = m[col];
        for row in col + 1..3 {
            let f = m[row][col] / pivot_row[col];
            for (x, p) in m[row].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            v[row] -= f * v[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let rest: f64 = (row + 1..3).map(|j| m[row][j] * x[j]).sum();
        x[row] = (v[row] - rest) / m[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Fits `y(K) = a * ceil(N / K) + b * K + c` to `points` (K, bytes) of a model of `layers`
/// blocks, minimizing the relative residuals (the weighted normal equations of the three
/// coefficients). `None` with fewer than four distinct intervals, a non-positive or
/// non-finite value, or a singular system.
pub fn fit(layers: usize, points: &[(usize, f64)]) -> Option<SublinearFit> {
    let mut ks: Vec<usize> = points.iter().map(|p| p.0).collect();
    ks.sort_unstable();
    ks.dedup();
    if ks.len() < memwall_core::spec::MIN_SWEEP_POINTS
        || points
            .iter()
            .any(|p| !(p.1.is_finite() && p.1 > 0.0) || p.0 == 0)
    {
        return None;
    }
    // Rows x / y against the target 1: the least squares of the relative residuals. Bytes in
    // units of the smallest value keep the system well scaled.
    let unit = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let mut m = [[0.0; 3]; 3];
    let mut v = [0.0; 3];
    for &(k, y) in points {
        let y = y / unit;
        let row = [segments(layers, k) as f64 / y, k as f64 / y, 1.0 / y];
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] += row[i] * row[j];
            }
            v[i] += row[i];
        }
    }
    let [a, b, c] = solve3(m, v)?;
    let mut fit = SublinearFit {
        a: a * unit,
        b: b * unit,
        c: c * unit,
        rms_rel: 0.0,
        r2: 0.0,
        layers,
    };
    let n = points.len() as f64;
    let mean = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut rel, mut ss_res, mut ss_tot) = (0.0, 0.0, 0.0);
    for &(k, y) in points {
        let r = y - fit.predict(k);
        rel += (r / y).powi(2);
        ss_res += r * r;
        ss_tot += (y - mean).powi(2);
    }
    fit.rms_rel = (rel / n).sqrt();
    fit.r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        f64::NAN
    };
    Some(fit)
}

/// A measured sweep of the checkpoint interval over a model of `layers` blocks: its points
/// (one per K, in K order) and the fit of the sublinear model to them.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// Blocks of the model (N).
    pub layers: usize,
    /// One point per interval, K ascending (the first of equal intervals: `sqrt` and the
    /// integer it resolves to measure the same job shape).
    pub points: Vec<SweepPoint>,
    /// The fit, where one can be made ([`fit`]).
    pub fit: Option<SublinearFit>,
}

impl Sweep {
    /// The sweep of `points` over a model of `layers` blocks, fitted.
    pub fn new(layers: usize, mut points: Vec<SweepPoint>) -> Sweep {
        points.sort_by_key(|p| p.k);
        points.dedup_by_key(|p| p.k);
        let xy: Vec<(usize, f64)> = points.iter().map(|p| (p.k, p.activation_bytes)).collect();
        Sweep {
            layers,
            fit: fit(layers, &xy),
            points,
        }
    }

    /// The interval with the lowest measured activation peak (the smallest K on a tie).
    pub fn best(&self) -> Option<&SweepPoint> {
        self.points
            .iter()
            .min_by(|a, b| a.activation_bytes.total_cmp(&b.activation_bytes))
    }

    /// The point at interval `k`.
    pub fn at(&self, k: usize) -> Option<&SweepPoint> {
        self.points.iter().find(|p| p.k == k)
    }

    /// K = ceil(sqrt(N)), the slide's choice as memwall's `checkpoint = "sqrt"` resolves it.
    pub fn sqrt_k(&self) -> usize {
        ((self.layers as f64).sqrt().ceil() as usize).max(1)
    }

    /// Of the sweep's intervals, the one where the fit is lowest (the smallest K on a tie).
    pub fn fit_best(&self) -> Option<&SweepPoint> {
        let fit = self.fit?;
        self.points
            .iter()
            .min_by(|a, b| fit.predict(a.k).total_cmp(&fit.predict(b.k)))
    }

    /// How much more (%) the measured activation peak at `p` is than the measured minimum.
    fn excess_pct(&self, p: &SweepPoint) -> Option<f64> {
        let best = self.best()?.activation_bytes;
        Some(100.0 * (p.activation_bytes / best - 1.0))
    }

    /// The value of `metric` (see [`SweepMetric`]), or why the sweep has none.
    ///
    /// # Errors
    /// A sentence naming what is missing: too few intervals to fit, K = 1, K = N or
    /// K = ceil(sqrt(N)) not measured.
    pub fn metric(&self, metric: SweepMetric) -> Result<f64, String> {
        let missing = |k: usize, what: &str| {
            format!(
                "the sweep has no finished configuration at K = {k} ({what}) of its {} layers",
                self.layers
            )
        };
        let no_fit = || {
            format!(
                "no fit: {} finished interval(s), at least {} with positive activation peaks \
                 are needed",
                self.points.len(),
                memwall_core::spec::MIN_SWEEP_POINTS
            )
        };
        match metric {
            SweepMetric::FitRmsPct => self.fit.map(|f| 100.0 * f.rms_rel).ok_or_else(no_fit),
            SweepMetric::FitKExcessPct => {
                let p = self.fit_best().ok_or_else(no_fit)?;
                self.excess_pct(p).ok_or_else(no_fit)
            }
            SweepMetric::SqrtNExcessPct => {
                let k = self.sqrt_k();
                let p = self.at(k).ok_or_else(|| missing(k, "ceil(sqrt(N))"))?;
                self.excess_pct(p)
                    .ok_or_else(|| missing(k, "ceil(sqrt(N))"))
            }
            SweepMetric::UDepthPct => {
                let one = self
                    .at(1)
                    .ok_or_else(|| missing(1, "one block per segment"))?;
                let all = self
                    .at(self.layers)
                    .ok_or_else(|| missing(self.layers, "one segment"))?;
                let best = self.best().ok_or_else(no_fit)?;
                let ends = one.activation_bytes.min(all.activation_bytes);
                Ok(100.0 * (1.0 - best.activation_bytes / ends))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    fn point(k: usize, mib: f64) -> SweepPoint {
        SweepPoint {
            k,
            config: format!("ck{k}"),
            activation_bytes: mib * MIB,
            peak_bytes: mib * MIB + 10.0 * MIB,
            step_s: Some(0.1),
        }
    }

    /// The model's values at `ks` for N = 128, a = 0.25 MiB, b = 4.5 MiB, c = 3 MiB.
    fn synthetic(ks: &[usize]) -> Vec<SweepPoint> {
        ks.iter()
            .map(|&k| point(k, 0.25 * segments(128, k) as f64 + 4.5 * k as f64 + 3.0))
            .collect()
    }

    const GRID: [usize; 11] = [1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128];

    #[test]
    fn the_fit_recovers_the_coefficients_of_exact_data() {
        let s = Sweep::new(128, synthetic(&GRID));
        let f = s.fit.expect("a fit");
        assert!((f.a / MIB - 0.25).abs() < 1e-9, "{f:?}");
        assert!((f.b / MIB - 4.5).abs() < 1e-9, "{f:?}");
        assert!((f.c / MIB - 3.0).abs() < 1e-9, "{f:?}");
        assert!(f.rms_rel < 1e-12 && (f.r2 - 1.0).abs() < 1e-12);
        // sqrt(a N / b) = sqrt(0.25 * 128 / 4.5) = 2.67; on the grid the model is lowest at 3
        // (ceil(128 / 3) = 43 segments: 10.75 + 13.5 against 16 + 9 at K = 2).
        let k = f.continuous_minimizer().unwrap();
        assert!((k - (0.25_f64 * 128.0 / 4.5).sqrt()).abs() < 1e-9);
        assert_eq!(s.best().unwrap().k, 3);
        assert_eq!(s.fit_best().unwrap().k, 3);
        assert_eq!(s.metric(SweepMetric::FitKExcessPct), Ok(0.0));
        assert_eq!(s.sqrt_k(), 12);
        let at = |k: usize| 0.25 * segments(128, k) as f64 + 4.5 * k as f64 + 3.0;
        let sqrt_excess = s.metric(SweepMetric::SqrtNExcessPct).unwrap();
        assert!((sqrt_excess - 100.0 * (at(12) / at(3) - 1.0)).abs() < 1e-9);
        let u = s.metric(SweepMetric::UDepthPct).unwrap();
        assert!((u - 100.0 * (1.0 - at(3) / at(1))).abs() < 1e-9, "{u}");
    }

    #[test]
    fn the_fit_is_a_least_squares_fit_of_relative_residuals() {
        // Noise of +-2% alternating: the fit stays near the coefficients and its relative RMS
        // error near 2%.
        let mut points = synthetic(&GRID);
        for (i, p) in points.iter_mut().enumerate() {
            p.activation_bytes *= if i % 2 == 0 { 1.02 } else { 0.98 };
        }
        let f = Sweep::new(128, points).fit.unwrap();
        assert!((f.a / MIB - 0.25).abs() < 0.05, "{f:?}");
        assert!((f.b / MIB - 4.5).abs() < 0.2, "{f:?}");
        assert!(f.rms_rel > 0.01 && f.rms_rel < 0.03, "{f:?}");
        assert!(f.r2 > 0.99, "{f:?}");
    }

    #[test]
    fn a_wrong_measurement_fails_the_sublinear_rules() {
        // Checkpointing that saves nothing: the peak only grows with K (a monotone line).
        let monotone: Vec<SweepPoint> = GRID
            .iter()
            .map(|&k| point(k, 20.0 + 4.5 * k as f64))
            .collect();
        let s = Sweep::new(128, monotone);
        let f = s.fit.unwrap();
        assert!(!f.has_shape(), "no O(N/K) term: {f:?}");
        assert_eq!(
            s.metric(SweepMetric::UDepthPct),
            Ok(0.0),
            "minimum at K = 1"
        );
        // Checkpointing whose peak falls with K to the end (no O(K) term).
        let falling: Vec<SweepPoint> = GRID
            .iter()
            .map(|&k| point(k, 3.0 + 0.25 * segments(128, k) as f64))
            .collect();
        let s = Sweep::new(128, falling);
        assert!(!s.fit.unwrap().has_shape());
        assert_eq!(s.best().unwrap().k, 128);
        assert_eq!(
            s.metric(SweepMetric::UDepthPct),
            Ok(0.0),
            "minimum at K = N"
        );
        // A minimum at the wrong interval (a dip at K = 32 the model cannot make): the fit
        // misses it by far.
        let mut dip = synthetic(&GRID);
        dip[8].activation_bytes = 10.0 * MIB;
        let s = Sweep::new(128, dip);
        assert_eq!(s.best().unwrap().k, 32);
        assert!(s.metric(SweepMetric::FitRmsPct).unwrap() > 20.0);
        // A measured minimum one interval off the fit's (K = 4 lowered below K = 3 by 8%):
        // the peak at the fit's K is above the minimum by more than a few percent.
        let mut off = synthetic(&GRID);
        off[3].activation_bytes = 0.92 * off[2].activation_bytes;
        let s = Sweep::new(128, off);
        assert_eq!(s.best().unwrap().k, 4);
        assert_ne!(s.fit_best().unwrap().k, 4);
        assert!(s.metric(SweepMetric::FitKExcessPct).unwrap() > 5.0);
        // The slide's K = sqrt(N) against a minimum at 3: far above it.
        let exact = Sweep::new(128, synthetic(&GRID));
        assert!(exact.metric(SweepMetric::SqrtNExcessPct).unwrap() > 50.0);
    }

    #[test]
    fn missing_intervals_are_named() {
        let s = Sweep::new(128, synthetic(&[2, 3, 4]));
        assert!(s.fit.is_none());
        let e = s.metric(SweepMetric::FitRmsPct).unwrap_err();
        assert!(e.contains("3 finished interval(s)"), "{e}");
        let s = Sweep::new(128, synthetic(&[2, 3, 4, 6, 128]));
        let e = s.metric(SweepMetric::UDepthPct).unwrap_err();
        assert!(e.contains("K = 1"), "{e}");
        let e = s.metric(SweepMetric::SqrtNExcessPct).unwrap_err();
        assert!(e.contains("K = 12"), "{e}");
    }

    #[test]
    fn a_singular_system_gives_no_fit() {
        // Every K with one segment's worth: ceil(N / K) and K are not independent of 1 when
        // all K are equal; duplicates of one interval are one interval.
        let same: Vec<(usize, f64)> = (0..5).map(|_| (4, 10.0)).collect();
        assert!(fit(8, &same).is_none());
        assert!(solve3(
            [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]],
            [1.0; 3]
        )
        .is_none());
        let x = solve3(
            [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]],
            [3.0, 5.0, 5.0],
        );
        let x = x.unwrap();
        for (got, want) in x.iter().zip([1.0, 1.0, 1.0]) {
            assert!((got - want).abs() < 1e-12, "{x:?}");
        }
    }
}
