//! Activation memory budgets: which blocks to store and which to recompute so that the
//! estimated activation memory is at most a fraction `b` of the span between full
//! checkpointing (`b = 0`) and none (`b = 1`), with the least recomputation.
//!
//! This is the knapsack of PyTorch's `activation_memory_budget` partitioner
//! (torch/_functorch/partitioners.py, "memory budget" knapsack; source 004 cites
//! `torch/_functorch/config.py#L140`) at transformer-block granularity, over measured per-block
//! costs: each block is either *stored* (its autodiff graph kept, `activation_bytes`) or
//! *recomputed* (only its input kept, `boundary_bytes`, and its forward re-run in backward,
//! `forward_s`). Recomputing a block also needs its activations transiently in backward, so a
//! plan with any recomputed block pays `max activation_bytes` once more.

pub use crate::strategy::BlockCost;
use crate::strategy::Segment;
use serde::{Deserialize, Serialize};

/// A plan for a budget, with its estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetPlan {
    /// The blocks cut into stored and recomputed segments.
    pub segments: Vec<Segment>,
    /// Estimated activation bytes of the plan (model above).
    pub estimated_activation_bytes: u64,
    /// Estimated recomputation time per step, seconds.
    pub recompute_s: f64,
    /// Activation bytes with every block recomputed (b = 0).
    pub full_checkpoint_bytes: u64,
    /// Activation bytes with no recomputation (b = 1).
    pub no_checkpoint_bytes: u64,
    /// The budget in bytes: `full + b * (none - full)`.
    pub target_bytes: u64,
}

/// Estimated activation bytes of storing the blocks where `stored[i]` is true.
pub fn activation_bytes(blocks: &[BlockCost], stored: &[bool]) -> u64 {
    let mut total = 0u64;
    let mut transient = 0u64;
    for (b, &s) in blocks.iter().zip(stored) {
        if s {
            total += b.activation_bytes;
        } else {
            total += b.boundary_bytes;
            transient = transient.max(b.activation_bytes);
        }
    }
    total + transient
}

/// Estimated activation bytes of any segment plan: stored segments keep their blocks'
/// activations, recomputed segments keep their input, and backward holds the activations of
/// the largest recomputed segment transiently; a nested segment ([`Segment::inner`]) holds, in
/// its backward, its inner checkpoints and the activations of its largest inner segment.
pub fn estimate_plan(blocks: &[BlockCost], plan: &[Segment]) -> u64 {
    let mut total = 0u64;
    let mut transient = 0u64;
    for seg in plan {
        let acts = |range: std::ops::Range<usize>| -> u64 {
            blocks[range].iter().map(|b| b.activation_bytes).sum()
        };
        if seg.recompute {
            total += blocks[seg.start].boundary_bytes;
            let held = match seg.inner_plan() {
                // The inner checkpoints beyond the segment's own input, and one inner segment.
                Some(inner) => {
                    let checkpoints: u64 = inner[1..]
                        .iter()
                        .map(|s| blocks[s.start].boundary_bytes)
                        .sum();
                    checkpoints + inner.iter().map(|s| acts(s.range())).max().unwrap_or(0)
                }
                None => acts(seg.range()),
            };
            transient = transient.max(held);
        } else {
            total += acts(seg.range());
        }
    }
    total + transient
}

/// Chooses the stored blocks for budget `b` in [0, 1] by a 0/1 knapsack (dynamic program over
/// byte capacity discretized into `RESOLUTION` units, weights rounded up so the estimate never
/// exceeds the budget): maximize the forward time of stored blocks (= minimize recomputation)
/// subject to the activation model fitting the target.
pub fn plan_budget(blocks: &[BlockCost], b: f64) -> BudgetPlan {
    const RESOLUTION: u64 = 4096;
    let n = blocks.len();
    let all = vec![true; n];
    let none_stored = vec![false; n];
    let no_ckpt = activation_bytes(blocks, &all);
    let full = activation_bytes(blocks, &none_stored);
    let b = b.clamp(0.0, 1.0);
    let target = full + ((no_ckpt.saturating_sub(full)) as f64 * b).round() as u64;
    let stored = if no_ckpt <= target {
        all
    } else {
        // With at least one recomputed block: boundaries of all + transient max + extra per stored.
        let transient = blocks.iter().map(|x| x.activation_bytes).max().unwrap_or(0);
        let base: u64 = blocks.iter().map(|x| x.boundary_bytes).sum::<u64>() + transient;
        let capacity_bytes = target.saturating_sub(base);
        let extra: Vec<u64> = blocks
            .iter()
            .map(|x| x.activation_bytes.saturating_sub(x.boundary_bytes))
            .collect();
        let unit = (extra.iter().sum::<u64>() / RESOLUTION).max(1);
        let cap = (capacity_bytes / unit) as usize;
        let w: Vec<usize> = extra.iter().map(|e| e.div_ceil(unit) as usize).collect();
        // best[c] = max stored forward time with capacity c; choice tracked per item.
        let mut best = vec![0.0f64; cap + 1];
        let mut take = vec![vec![false; cap + 1]; n];
        for i in 0..n {
            for c in (w[i]..=cap).rev() {
                let v = best[c - w[i]] + blocks[i].forward_s + 1e-12;
                if v > best[c] {
                    best[c] = v;
                    take[i][c] = true;
                }
            }
        }
        let mut stored = vec![false; n];
        let mut c = cap;
        for i in (0..n).rev() {
            if take[i][c] {
                stored[i] = true;
                c -= w[i];
            }
        }
        // Never store every block here (that is the b = 1 case handled above).
        if stored.iter().all(|s| *s) {
            if let Some(last) = stored.iter_mut().last() {
                *last = false;
            }
        }
        stored
    };
    let segments = stored
        .iter()
        .enumerate()
        .map(|(i, &s)| Segment {
            start: i,
            end: i + 1,
            recompute: !s,
            inner: None,
        })
        .collect();
    BudgetPlan {
        segments,
        estimated_activation_bytes: activation_bytes(blocks, &stored),
        recompute_s: blocks
            .iter()
            .zip(&stored)
            .filter(|(_, s)| !**s)
            .map(|(x, _)| x.forward_s)
            .sum(),
        full_checkpoint_bytes: full,
        no_checkpoint_bytes: no_ckpt,
        target_bytes: target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(n: usize) -> Vec<BlockCost> {
        vec![
            BlockCost {
                activation_bytes: 1000,
                boundary_bytes: 100,
                forward_s: 1.0,
            };
            n
        ]
    }

    #[test]
    fn plan_estimate_agrees_with_the_per_block_model() {
        let blocks = uniform(6);
        let p = plan_budget(&blocks, 0.5);
        assert_eq!(
            estimate_plan(&blocks, &p.segments),
            p.estimated_activation_bytes
        );
        // checkpoint every 3: two boundaries plus one 3-block segment live in backward
        let every3 = crate::strategy::every_k(6, 3);
        assert_eq!(estimate_plan(&blocks, &every3), 2 * 100 + 3 * 1000);
    }

    #[test]
    fn extremes_are_full_and_no_checkpointing() {
        let blocks = uniform(8);
        let p0 = plan_budget(&blocks, 0.0);
        assert!(p0.segments.iter().all(|s| s.recompute));
        assert_eq!(p0.estimated_activation_bytes, 8 * 100 + 1000);
        let p1 = plan_budget(&blocks, 1.0);
        assert!(p1.segments.iter().all(|s| !s.recompute));
        assert_eq!(p1.estimated_activation_bytes, 8000);
        assert_eq!(p1.recompute_s, 0.0);
    }

    #[test]
    fn a_nested_segment_holds_its_inner_checkpoints_and_one_inner_segment() {
        let blocks = vec![
            BlockCost {
                activation_bytes: 1000,
                boundary_bytes: 10,
                forward_s: 1.0,
            };
            6
        ];
        // One checkpoint; in backward the six blocks' activations at once, or, nested in
        // 2-block inner segments, two more checkpoints (blocks 3 and 5) and two blocks'
        // activations.
        assert_eq!(
            estimate_plan(&blocks, &crate::strategy::every_k(6, 6)),
            10 + 6000
        );
        assert_eq!(
            estimate_plan(&blocks, &crate::strategy::every_k_nested(6, 6, 2)),
            10 + 2 * 10 + 2000
        );
    }

    #[test]
    fn estimate_never_exceeds_the_budget_and_recompute_falls_with_budget() {
        let blocks: Vec<BlockCost> = (0..12)
            .map(|i| BlockCost {
                activation_bytes: 900 + 37 * i,
                boundary_bytes: 100,
                forward_s: 1.0 + 0.1 * i as f64,
            })
            .collect();
        let mut last = f64::INFINITY;
        for k in 0..=20 {
            let b = k as f64 / 20.0;
            let p = plan_budget(&blocks, b);
            assert!(
                p.estimated_activation_bytes <= p.target_bytes,
                "b = {b}: {p:?}"
            );
            assert!(
                p.recompute_s <= last + 1e-9,
                "recompute must not grow with the budget"
            );
            last = p.recompute_s;
        }
    }

    #[test]
    fn knapsack_prefers_storing_expensive_cheap_to_keep_blocks() {
        // Block 1 is slow to recompute and as big as the others: it should be stored first.
        let mut blocks = uniform(4);
        blocks[1].forward_s = 10.0;
        let p = plan_budget(&blocks, 0.5);
        assert!(!p.segments[1].recompute, "{:?}", p.segments);
        assert!(p.segments.iter().filter(|s| !s.recompute).count() >= 1);
    }
}
