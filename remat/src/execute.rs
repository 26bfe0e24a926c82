//! Executing a Checkmate schedule on memwall's transformer: the chain of blocks becomes a
//! Checkmate training graph from measured per-block costs, the MILP plans it under a budget,
//! and the schedule is mapped to segment checkpointing (block granularity) for a real Burn job.

use super::baselines::checkpoint_all;
use super::milp::{solve_milp, MilpOptions};
use super::sim::{simulate, Schedule};
use super::{Graph, Node, RematError};
pub use memwall_core::strategy::TransformerPlan;
use memwall_core::strategy::{BlockCost, Segment};

/// The Checkmate graph of a chain of transformer blocks (Checkmate's linear graph, node
/// indices `f_i = i`, loss `= L`, `g_i = 2L - i`, edges `v_j -> v_{j+1}` and `f_i -> g_i`):
/// forward node `f_i` costs the block's measured forward time and holds its activations (what
/// its backward needs); the loss node holds the last hidden state; backward node `g_i` costs
/// `2x` the forward (Kaplan et al. 2020: backward ~ 2 forward FLOPs) and holds the gradient
/// w.r.t. the block's input (`boundary_bytes`).
pub fn transformer_graph(blocks: &[BlockCost]) -> Result<Graph, RematError> {
    let l = blocks.len();
    if l == 0 {
        return Err(RematError::InvalidGraph(
            "the transformer has no block".into(),
        ));
    }
    let mut nodes = Vec::with_capacity(2 * l + 1);
    for (i, b) in blocks.iter().enumerate() {
        nodes.push(Node::new(
            format!("f{i}"),
            b.forward_s.max(1e-9),
            b.activation_bytes.max(1),
            false,
        ));
    }
    nodes.push(Node::new(
        "loss",
        1e-9,
        blocks[l - 1].boundary_bytes.max(1),
        true,
    ));
    for i in (0..l).rev() {
        nodes.push(Node::new(
            format!("g{i}"),
            2.0 * blocks[i].forward_s.max(1e-9),
            blocks[i].boundary_bytes.max(1),
            true,
        ));
    }
    let mut edges: Vec<(usize, usize)> = (0..2 * l).map(|j| (j, j + 1)).collect();
    edges.extend((0..l).map(|i| (i, 2 * l - i)));
    Graph::new("transformer", nodes, &edges, 0)
}

/// Maps a schedule of [`transformer_graph`] to segments: block `i` is recomputed when `f_i` is
/// evaluated again in any backward stage (stages after the loss), stored otherwise; runs of
/// recomputed blocks are split where a block's output stays resident into the first backward
/// stage (a checkpoint).
pub fn schedule_to_segments(layers: usize, sch: &Schedule) -> Vec<Segment> {
    let loss_stage = layers;
    let recomputed: Vec<bool> = (0..layers)
        .map(|i| (loss_stage + 1..sch.r.len()).any(|t| sch.r[t][i]))
        .collect();
    let kept_at_loss = |i: usize| sch.s.get(loss_stage + 1).is_some_and(|row| row[i]);
    let mut segments = Vec::new();
    let mut i = 0;
    while i < layers {
        if !recomputed[i] {
            segments.push(Segment {
                start: i,
                end: i + 1,
                recompute: false,
            });
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < layers && recomputed[i] && !kept_at_loss(i - 1) {
            i += 1;
        }
        segments.push(Segment {
            start,
            end: i,
            recompute: true,
        });
    }
    segments
}

/// Plans the transformer with the Checkmate MILP at `fraction` of the checkpoint-all peak.
///
/// # Errors
/// [`RematError::Infeasible`] when no schedule fits the budget; other [`RematError`]s when the
/// graph is invalid or the solver fails.
pub fn plan_transformer(
    blocks: &[BlockCost],
    fraction: f64,
    opts: &MilpOptions,
) -> Result<TransformerPlan, RematError> {
    let g = transformer_graph(blocks)?;
    let all = simulate(&g, &checkpoint_all(&g))?;
    let budget = (all.peak_mem as f64 * fraction).round() as u64;
    let out = solve_milp(&g, budget, opts)?;
    let (sch, sim) = out.best.ok_or_else(|| RematError::Infeasible {
        budget_bytes: budget,
        working_set_bytes: g.working_set_bound(),
        checkpoint_all_bytes: all.peak_mem,
        status: out.status.clone(),
    })?;
    Ok(TransformerPlan {
        segments: schedule_to_segments(blocks.len(), &sch),
        budget_fraction: fraction,
        budget_bytes: budget,
        predicted_peak_bytes: sim.peak_mem,
        predicted_cost_ratio: sim.cost / g.total_cost(),
        solver_status: out.status,
        solve_time_s: out.solve_time_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(n: usize) -> Vec<BlockCost> {
        vec![
            BlockCost {
                activation_bytes: 1000,
                boundary_bytes: 100,
                forward_s: 1.0
            };
            n
        ]
    }

    #[test]
    fn generous_budget_stores_every_block() {
        let p = plan_transformer(&blocks(6), 1.0, &MilpOptions::default()).unwrap();
        assert!(p.segments.iter().all(|s| !s.recompute), "{:?}", p.segments);
        assert!((p.predicted_cost_ratio - 1.0).abs() < 1e-9);
    }

    #[test]
    fn tight_budget_recomputes_and_covers_every_block_once() {
        let p = plan_transformer(&blocks(6), 0.5, &MilpOptions::default()).unwrap();
        assert!(p.segments.iter().any(|s| s.recompute), "{:?}", p.segments);
        let covered: Vec<usize> = p.segments.iter().flat_map(|s| s.range()).collect();
        assert_eq!(covered, (0..6).collect::<Vec<_>>());
        assert!(p.predicted_peak_bytes <= p.budget_bytes);
        assert!(p.predicted_cost_ratio > 1.0);
    }
}
