//! Estimates of a measured quantity from repeated samples: the median with a distribution-free
//! confidence interval from order statistics.
//!
//! The interval for the median of `n` samples sorted as `x(1) <= ... <= x(n)` is
//! `[x(l), x(n + 1 - l)]`; it covers the true median with probability
//! `P(l <= B <= n - l)`, `B ~ Binomial(n, 1/2)`, that is `1 - 2 * sum_{i<l} C(n, i) / 2^n`,
//! whatever the distribution of the samples (continuous). `l` is the largest rank whose
//! coverage is at least the requested level (Conover, *Practical Nonparametric Statistics*,
//! 3rd ed., 1999, section 3.2, "confidence interval for a quantile"; David and Nagaraja,
//! *Order Statistics*, 3rd ed., 2003, section 7.1). With fewer than six samples no interval
//! reaches 95% (`[min, max]` of five covers 93.75%); the estimate then gives `[min, max]` and
//! its real coverage, which a report states.

use serde::{Deserialize, Serialize};

/// The confidence level memwall's intervals aim for.
pub const LEVEL: f64 = 0.95;

/// The median of samples and its order-statistic confidence interval (units: those of the
/// samples, e.g. bytes or seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Sample median (the mean of the two middle samples for an even count).
    pub median: f64,
    /// Lower end of the interval, `x(l)`.
    pub lo: f64,
    /// Upper end of the interval, `x(n + 1 - l)`.
    pub hi: f64,
    /// Number of (finite) samples.
    pub n: usize,
    /// Probability that `[lo, hi]` covers the true median (1 for a single sample, which has no
    /// interval: `lo == hi == median`).
    pub coverage: f64,
}

impl Estimate {
    /// Whether the estimate has an interval (two samples or more).
    pub fn has_interval(&self) -> bool {
        self.n >= 2
    }
}

/// The median of `samples` with the widest-rank order-statistic interval whose coverage is at
/// least `level` (in (0, 1)), or `[min, max]` when none reaches it. Non-finite samples are
/// left out; `None` when no finite sample remains.
pub fn median_interval(samples: &[f64], level: f64) -> Option<Estimate> {
    let mut x: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    if x.is_empty() {
        return None;
    }
    x.sort_by(|a, b| a.partial_cmp(b).expect("finite samples compare"));
    let n = x.len();
    let median = if n % 2 == 1 {
        x[n / 2]
    } else {
        (x[n / 2 - 1] + x[n / 2]) / 2.0
    };
    if n == 1 {
        return Some(Estimate {
            median,
            lo: median,
            hi: median,
            n,
            coverage: 1.0,
        });
    }
    // coverage(l) = 1 - 2 * P(B < l), B ~ Binomial(n, 1/2); l = 1 gives [min, max].
    let pmf = binomial_half_pmf(n);
    let mut best = (1usize, 1.0 - 2.0 * pmf[0]);
    let mut below = 0.0;
    for l in 1..=n.div_ceil(2) {
        below += pmf[l - 1];
        let coverage = 1.0 - 2.0 * below;
        if coverage >= level {
            best = (l, coverage);
        } else {
            break;
        }
    }
    let (l, coverage) = best;
    Some(Estimate {
        median,
        lo: x[l - 1],
        hi: x[n - l],
        n,
        coverage,
    })
}

/// `P(B = i)` for `i` in `0..=n`, `B ~ Binomial(n, 1/2)`, computed in log space (exact enough
/// for the sample counts of a benchmark, thousands included).
fn binomial_half_pmf(n: usize) -> Vec<f64> {
    let mut log_c = 0.0f64; // ln C(n, 0)
    let ln_half_n = n as f64 * 0.5f64.ln();
    (0..=n)
        .map(|i| {
            if i > 0 {
                log_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
            }
            (log_c + ln_half_n).exp()
        })
        .collect()
}

/// The ratio `a / b` of two estimates, with a conservative interval `[a.lo / b.hi,
/// a.hi / b.lo]` (every ratio of values inside both intervals; its coverage is at least the
/// product of theirs for independent samples). `None` when `b`'s interval reaches zero or below.
pub fn ratio(a: &Estimate, b: &Estimate) -> Option<Estimate> {
    if b.lo <= 0.0 || b.median <= 0.0 {
        return None;
    }
    let (lo, hi) = if a.lo >= 0.0 {
        (a.lo / b.hi, a.hi / b.lo)
    } else {
        (a.lo / b.lo, a.hi / b.hi.max(b.lo))
    };
    Some(Estimate {
        median: a.median / b.median,
        lo: lo.min(a.median / b.median),
        hi: hi.max(a.median / b.median),
        n: a.n.min(b.n),
        coverage: a.coverage * b.coverage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let e = median_interval(&[3.0, 1.0, 2.0], LEVEL).unwrap();
        assert_eq!((e.median, e.n), (2.0, 3));
        let e = median_interval(&[4.0, 1.0, 3.0, 2.0], LEVEL).unwrap();
        assert_eq!(e.median, 2.5);
        assert!(median_interval(&[f64::NAN], LEVEL).is_none());
    }

    #[test]
    fn small_samples_give_min_max_with_their_real_coverage() {
        let e = median_interval(&[5.0, 1.0, 4.0, 2.0, 3.0], LEVEL).unwrap();
        assert_eq!((e.lo, e.hi), (1.0, 5.0));
        // 1 - 2/32
        assert!((e.coverage - 0.9375).abs() < 1e-12);
        let one = median_interval(&[7.0], LEVEL).unwrap();
        assert!(!one.has_interval());
        assert_eq!((one.lo, one.hi, one.coverage), (7.0, 7.0, 1.0));
    }

    #[test]
    fn interval_ranks_match_the_binomial_table() {
        // n = 6: [x(1), x(6)] covers 1 - 2/64 = 0.96875; l = 2 would cover 1 - 14/64 < 0.95.
        let x: Vec<f64> = (1..=6).map(f64::from).collect();
        let e = median_interval(&x, LEVEL).unwrap();
        assert_eq!((e.lo, e.hi), (1.0, 6.0));
        assert!((e.coverage - 0.96875).abs() < 1e-12);
        // n = 20: the 95% interval is [x(6), x(15)] (coverage 0.9586; Conover, table A3).
        let x: Vec<f64> = (1..=20).map(f64::from).collect();
        let e = median_interval(&x, LEVEL).unwrap();
        assert_eq!((e.lo, e.hi), (6.0, 15.0));
        assert!((e.coverage - 0.958610).abs() < 1e-5, "{}", e.coverage);
    }

    #[test]
    fn ratio_interval_contains_the_point_and_refuses_zero() {
        let a = median_interval(&[9.0, 10.0, 11.0, 10.0, 10.0, 10.0], LEVEL).unwrap();
        let b = median_interval(&[4.0, 5.0, 6.0, 5.0, 5.0, 5.0], LEVEL).unwrap();
        let r = ratio(&a, &b).unwrap();
        assert_eq!(r.median, 2.0);
        assert!((r.lo - 9.0 / 6.0).abs() < 1e-12 && (r.hi - 11.0 / 4.0).abs() < 1e-12);
        let zero = median_interval(&[0.0], LEVEL).unwrap();
        assert!(ratio(&a, &zero).is_none());
    }
}
