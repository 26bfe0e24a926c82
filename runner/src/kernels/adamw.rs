//! AdamW's update of one parameter tensor in one pass ([`crate::train::adamw`] has the formula
//! and its source): per element the new first and second moments, the bias-corrected step and
//! the decayed parameter, each operation in f32 in the order of Burn 0.21's composed `AdamW`,
//! so that in f32 the results are Burn's bit for bit. Vectorized (compiled for AVX-512 and
//! AVX2, picked at run time) and parallel over chunks on rayon.

use super::convert::Half;
use super::{dispatch, CHUNK};
use rayon::prelude::*;

/// The hyperparameters of one update of one parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWStep {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta_1: f32,
    /// Second-moment decay.
    pub beta_2: f32,
    /// Added to `sqrt(v_hat)` in the denominator.
    pub epsilon: f32,
    /// Decoupled weight decay (multiplied by `lr`).
    pub weight_decay: f32,
    /// This step's number `t`, 1-based (the bias corrections' exponent).
    pub time: usize,
}

impl AdamWStep {
    /// `(1 - beta_1, 1 - beta_2, 1 - beta_1^t, 1 - beta_2^t)` in f32, as Burn computes them.
    pub fn factors(&self) -> (f32, f32, f32, f32) {
        let t = self.time as i32;
        (
            1.0 - self.beta_1,
            1.0 - self.beta_2,
            1f32 - self.beta_1.powi(t),
            1f32 - self.beta_2.powi(t),
        )
    }

    /// `lr * weight_decay` (f64, as Burn computes the decay rate).
    pub fn decay_rate(&self) -> f64 {
        self.lr * self.weight_decay as f64
    }

    /// The f32 scalars of this update; `first` when there are no moments yet (`t = 1`).
    pub fn scalars(&self, first: bool) -> Scalars {
        let (f1, f2, c1, c2) = self.factors();
        let decay = self.decay_rate();
        Scalars {
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            f1,
            f2,
            c1,
            c2,
            epsilon: self.epsilon,
            keep: (decay != 0.0).then_some((1.0 - decay) as f32),
            lr: self.lr as f32,
            first,
        }
    }
}

/// The f32 scalars of one update, as Burn's tensor operations see them (see
/// [`AdamWStep::factors`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scalars {
    /// `beta_1`.
    pub beta_1: f32,
    /// `beta_2`.
    pub beta_2: f32,
    /// `1 - beta_1`.
    pub f1: f32,
    /// `1 - beta_2`.
    pub f2: f32,
    /// `1 - beta_1^t`.
    pub c1: f32,
    /// `1 - beta_2^t`.
    pub c2: f32,
    /// `epsilon`.
    pub epsilon: f32,
    /// `1 - lr weight_decay` as f32, or `None` when the decay rate is 0 (no multiplication).
    pub keep: Option<f32>,
    /// The learning rate as f32.
    pub lr: f32,
    /// The first step (`t = 1`): the moments start from the gradient alone.
    pub first: bool,
}

#[inline(always)]
fn update_body(s: &Scalars, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let n = p.len();
    assert!(
        g.len() == n && m.len() == n && v.len() == n,
        "adamw: lengths"
    );
    let keep = s.keep.unwrap_or(1.0);
    let decays = s.keep.is_some();
    for i in 0..n {
        let gi = g[i];
        let (mi, vi) = if s.first {
            (gi * s.f1, (gi * gi) * s.f2)
        } else {
            (
                m[i] * s.beta_1 + gi * s.f1,
                v[i] * s.beta_2 + (gi * gi) * s.f2,
            )
        };
        let delta = (mi / s.c1) / ((vi / s.c2).sqrt() + s.epsilon);
        let pi = if decays { p[i] * keep } else { p[i] };
        p[i] = pi - delta * s.lr;
        m[i] = mi;
        v[i] = vi;
    }
}

dispatch!(
    /// One update of `p`, `m` and `v` in place from `g`, on this thread. Panics if the lengths
    /// differ.
    pub fn update_sequential(s: &Scalars, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) => update_body
);

/// One update of `p`, `m` and `v` in place from `g` (all of one length), in parallel.
pub fn update(s: &Scalars, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    assert!(
        g.len() == p.len() && m.len() == p.len() && v.len() == p.len(),
        "adamw: lengths"
    );
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| update_sequential(s, p, g, m, v));
}

/// [`update`] on 16-bit storage (bf16 or f16): each chunk read into f32, updated, and each
/// result rounded once to nearest even.
pub fn update_half<T>(s: &Scalars, p: &mut [T], g: &[T], m: &mut [T], v: &mut [T])
where
    T: Half,
{
    assert!(
        g.len() == p.len() && m.len() == p.len() && v.len() == p.len(),
        "adamw: lengths"
    );
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| {
            let n = p.len();
            let mut buf = vec![0f32; 4 * n];
            let (pf, rest) = buf.split_at_mut(n);
            let (gf, rest) = rest.split_at_mut(n);
            let (mf, vf) = rest.split_at_mut(n);
            Half::widen(p, pf);
            Half::widen(g, gf);
            if !s.first {
                Half::widen(m, mf);
                Half::widen(v, vf);
            }
            update_sequential(s, pf, gf, mf, vf);
            Half::narrow(pf, p);
            Half::narrow(mf, m);
            Half::narrow(vf, v);
        });
}
