//! Static memory planning as a pass over the graph IR: given a [`Graph`] and an execution
//! order, assign every tensor to a memory buffer before anything runs.
//!
//! From the UIUC CS 498 lecture (`002_0a85d22a30039616.txt`, slides "Dynamic/Static Memory
//! Allocation", "Inplace / Normal Sharing", "Memory Allocation/Planning Algorithm: Liveness
//! Analysis") and Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"
//! (arXiv:1604.06174), Sec. 3 (in-place and memory sharing) and Sec. 4 (segment recomputation):
//!
//! * liveness: a reference counter per tensor counts the evaluations that still read it; at 0
//!   the tensor is dead and its buffer may be reused;
//! * in-place: an elementwise op writes its output into the buffer of its in-place candidate
//!   ([`Node::inplace`](crate::Node::inplace)) when that tensor dies at this op and has the
//!   same size;
//! * memory sharing: a dead tensor's buffer returns to a free list from which later tensors take
//!   the best fit (the smallest free buffer that is large enough, else the largest, grown).
//!
//! An execution order is a sequence of node evaluations; a node evaluated again is a
//! rematerialization and later readers read the newest copy. Orders come from
//! [`plain_order`] (every node once), [`segment_order`] (Chen et al.'s segment recomputation,
//! segments from [`crate::baselines::sqrt_segments`]) or any Checkmate schedule `(R, S)`
//! ([`evaluation_order`]). Graph inputs ([`OpKind::Input`]) stay resident for the whole order.
//!
//! May import: the graph IR, the simulator's [`Schedule`], `memwall_core::strategy` (segments).

use std::collections::BTreeSet;

use memwall_core::strategy::Segment;

use super::graph::{Graph, OpKind};
use super::sim::Schedule;
use super::RematError;

/// Which reuse the planner may apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    /// In-place: an elementwise op's output takes its dying in-place candidate's buffer.
    pub inplace: bool,
    /// Memory sharing: new tensors take the best-fitting buffer of a dead tensor.
    pub sharing: bool,
}

/// A static memory plan of one execution order.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// Static allocation in bytes: the sum of all planned buffers, each sized to the largest
    /// tensor it holds.
    pub static_bytes: u64,
    /// Dynamic pool in bytes: the peak of simultaneously live tensor bytes in execution order
    /// (a tensor is freed when its reference counter reaches 0; an in-place output adds
    /// nothing): an ideal pool without fragmentation.
    pub dynamic_peak: u64,
    /// Number of buffers.
    pub buffers: usize,
    /// Buffer of every evaluation (execution-order position -> buffer id).
    pub assignment: Vec<usize>,
    /// Number of outputs computed in place.
    pub inplace_count: usize,
    /// Number of rematerializations: evaluations of a node evaluated before.
    pub recomputed: usize,
}

/// Every node once, in topological order (no rematerialization).
pub fn plain_order(g: &Graph) -> Vec<usize> {
    (0..g.len()).collect()
}

/// The evaluations of a Checkmate schedule in execution order: stage by stage, the nodes with
/// `R[t][i]` in topological order (Jain et al. 2020, Section 4). Checkpoint-all gives
/// [`plain_order`].
pub fn evaluation_order(sch: &Schedule) -> Vec<usize> {
    sch.r
        .iter()
        .flat_map(|row| (0..row.len()).filter(move |&i| row[i]))
        .collect()
}

/// Segment recomputation (Chen et al. 2016, Sec. 4; lecture slide "Checkpointing /
/// Recomputation") on a training graph. `segments` cut the forward ops ([`Graph::forward_ops`],
/// by position) into contiguous runs, e.g. [`crate::baselines::sqrt_segments`]. The forward
/// pass runs every forward node once; a tensor stays resident into the backward pass only if it
/// is a checkpoint: a graph input, or read by a forward op of another segment. Going backward,
/// before the first gradient node ([`OpKind::Grad`]) of a segment's ops, all of the segment's
/// other forward ops are recomputed (in forward order) from the checkpoints, so the segment's
/// gradients read the recomputed copies. Segments whose ops have no gradient are not
/// recomputed.
///
/// # Errors
/// [`RematError::InvalidSchedule`] unless `segments` partition the forward ops in order.
pub fn segment_order(g: &Graph, segments: &[Segment]) -> Result<Vec<usize>, RematError> {
    let ops = g.forward_ops();
    let covered = segments
        .iter()
        .try_fold(0, |at, s| (s.start == at && s.end > at).then_some(s.end));
    if covered != Some(ops.len()) {
        return Err(RematError::InvalidSchedule(format!(
            "segments do not partition the {} forward ops of {}",
            ops.len(),
            g.name
        )));
    }
    let mut seg_of: Vec<Option<usize>> = vec![None; g.len()];
    for (s, seg) in segments.iter().enumerate() {
        for p in seg.range() {
            seg_of[ops[p]] = Some(s);
        }
    }
    let checkpoint = |i: usize| {
        seg_of[i].is_none()
            || g.users[i]
                .iter()
                .any(|&j| !g.nodes[j].backward && seg_of[j] != seg_of[i])
    };
    let mut order = Vec::with_capacity(2 * g.len());
    // Segments are recomputed from the last to the first, as the backward pass reaches them.
    let mut next = segments.len();
    for k in 0..g.len() {
        if let OpKind::Grad(i) = g.nodes[k].op {
            if let Some(s) = seg_of[i].filter(|&s| s < next) {
                next = s;
                let recompute = segments[s].range().map(|p| ops[p]);
                order.extend(recompute.filter(|&i| !checkpoint(i)));
            }
        }
        order.push(k);
    }
    Ok(order)
}

/// Every evaluation's reads and in-place candidate as execution-order positions.
struct Resolved {
    /// Positions of the tensors each evaluation reads.
    reads: Vec<Vec<usize>>,
    /// Position of each evaluation's in-place candidate, if it has one.
    candidate: Vec<Option<usize>>,
}

/// Resolves every evaluation's reads to execution-order positions (the newest copy of each
/// dependency) and its in-place candidate.
fn resolve(g: &Graph, order: &[usize]) -> Result<Resolved, RematError> {
    let mut newest: Vec<Option<usize>> = vec![None; g.len()];
    let mut reads = Vec::with_capacity(order.len());
    let mut candidate = Vec::with_capacity(order.len());
    for (t, &k) in order.iter().enumerate() {
        let at = |d: usize| {
            newest[d].ok_or_else(|| {
                RematError::InvalidSchedule(format!(
                    "evaluation {t} ({}) reads {} before it is computed",
                    g.nodes[k].name, g.nodes[d].name
                ))
            })
        };
        reads.push(
            g.deps[k]
                .iter()
                .map(|&d| at(d))
                .collect::<Result<Vec<_>, _>>()?,
        );
        candidate.push(g.nodes[k].inplace.map(at).transpose()?);
        newest[k] = Some(t);
    }
    Ok(Resolved { reads, candidate })
}

/// Buffers and the free list of memory sharing.
#[derive(Default)]
struct Buffers {
    /// Size of every buffer in bytes.
    size: Vec<u64>,
    /// Free buffers as (size, id).
    free: BTreeSet<(u64, usize)>,
}

impl Buffers {
    /// A buffer for a new tensor of `bytes`: with sharing the best-fitting free buffer (the
    /// smallest that is large enough, else the largest, grown), otherwise a new one.
    fn take(&mut self, bytes: u64, sharing: bool) -> usize {
        let reuse = if sharing {
            self.free
                .range((bytes, 0)..)
                .next()
                .copied()
                .or_else(|| self.free.iter().next_back().copied())
        } else {
            None
        };
        match reuse {
            Some(entry) => {
                self.free.remove(&entry);
                let b = entry.1;
                self.size[b] = self.size[b].max(bytes);
                b
            }
            None => {
                self.size.push(bytes);
                self.size.len() - 1
            }
        }
    }

    /// Returns buffer `b` to the free list.
    fn release(&mut self, b: usize) {
        self.free.insert((self.size[b], b));
    }
}

/// Plans memory for `order` (node ids of `g`, see the module doc) with liveness reference
/// counters (lecture slide "Liveness counters: track the number of operations that need to be
/// fulfilled before memory can be reused"). Without sharing every tensor gets a fresh buffer
/// unless it is computed in place.
///
/// # Errors
/// [`RematError::InvalidSchedule`] if an evaluation reads a node not evaluated before it.
pub fn plan_memory(g: &Graph, order: &[usize], st: Reuse) -> Result<MemoryPlan, RematError> {
    plan_with(g, order, st, true)
}

/// [`plan_memory`] with in-place that ignores the lecture's condition ("We can only do in-place
/// computation if the result op is the only consumer of the current value", CS 498 slide
/// "Question: What operation cannot be done in-place?"): an elementwise op writes into its
/// candidate's buffer whenever the sizes match, even while another op has still to read the
/// candidate. A counter-example planner: [`corrupt_reads`] counts what it breaks.
///
/// # Errors
/// As [`plan_memory`].
pub fn plan_memory_ignoring_only_consumer(
    g: &Graph,
    order: &[usize],
    st: Reuse,
) -> Result<MemoryPlan, RematError> {
    plan_with(g, order, st, false)
}

/// Executes `p` on `order` symbolically: every evaluation writes its own token into its buffer,
/// and every read checks that the buffer of the value it reads still holds that value's token.
/// Returns the reads that find another value there (0 for a correct plan).
///
/// # Errors
/// [`RematError::InvalidSchedule`] if an evaluation reads a node not evaluated before it, or
/// `p` is not a plan of `order`.
pub fn corrupt_reads(g: &Graph, order: &[usize], p: &MemoryPlan) -> Result<usize, RematError> {
    let Resolved { reads, .. } = resolve(g, order)?;
    if p.assignment.len() != order.len() {
        return Err(RematError::InvalidSchedule(format!(
            "the plan assigns {} evaluations, the order has {}",
            p.assignment.len(),
            order.len()
        )));
    }
    let mut holds = vec![usize::MAX; p.buffers];
    let mut corrupt = 0;
    for t in 0..order.len() {
        corrupt += reads[t]
            .iter()
            .filter(|&&x| holds.get(p.assignment[x]) != Some(&x))
            .count();
        if let Some(b) = holds.get_mut(p.assignment[t]) {
            *b = t;
        }
    }
    Ok(corrupt)
}

fn plan_with(
    g: &Graph,
    order: &[usize],
    st: Reuse,
    only_consumer: bool,
) -> Result<MemoryPlan, RematError> {
    let Resolved { reads, candidate } = resolve(g, order)?;
    let n = order.len();
    let bytes: Vec<u64> = order.iter().map(|&k| g.nodes[k].mem).collect();
    let pinned: Vec<bool> = order
        .iter()
        .map(|&k| g.nodes[k].op == OpKind::Input)
        .collect();
    let mut refc = vec![0usize; n];
    for &x in reads.iter().flatten() {
        refc[x] += 1;
    }
    let mut bufs = Buffers::default();
    let mut assignment = vec![usize::MAX; n];
    // `handed[x]`: x's buffer was passed on (in place) or released; x no longer owns it.
    let mut handed = vec![false; n];
    let (mut live, mut peak, mut inplace_count) = (0u64, 0u64, 0usize);
    for t in 0..n {
        // In place: the candidate dies at this evaluation (its last reader) and fits exactly.
        let inplace = candidate[t].filter(|&x| {
            st.inplace
                && (refc[x] == 1 || !only_consumer)
                && !pinned[x]
                && bytes[x] == bytes[t]
                && !handed[x]
        });
        assignment[t] = match inplace {
            Some(x) => {
                handed[x] = true;
                inplace_count += 1;
                assignment[x]
            }
            None => {
                live += bytes[t];
                bufs.take(bytes[t], st.sharing)
            }
        };
        peak = peak.max(live);
        let dying = reads[t].iter().copied().chain(std::iter::once(t));
        for x in dying {
            if x != t {
                refc[x] -= 1;
            }
            if refc[x] == 0 && !pinned[x] && !handed[x] {
                live -= bytes[x];
                handed[x] = true;
                bufs.release(assignment[x]);
            }
        }
    }
    let mut seen = vec![false; g.len()];
    let recomputed = order
        .iter()
        .filter(|&&k| std::mem::replace(&mut seen[k], true))
        .count();
    Ok(MemoryPlan {
        static_bytes: bufs.size.iter().sum(),
        dynamic_peak: peak,
        buffers: bufs.size.len(),
        assignment,
        inplace_count,
        recomputed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::{checkpoint_all, chen_sqrt, sqrt_segments};
    use crate::nets::{training_graph, two_layer_mlp, NetBuilder};
    use crate::sim::simulate;
    use memwall_core::strategy::every_k;

    fn st(inplace: bool, sharing: bool) -> Reuse {
        Reuse { inplace, sharing }
    }

    /// x (input, 1) -> a = fc(x) (4) -> b = relu(a) (4) -> c = fc(b) (2) -> d = relu(c) (2),
    /// forward only.
    fn small() -> Graph {
        let mut g = NetBuilder::new();
        let x = g.add("x", OpKind::Input, &[], 1);
        let a = g.add("a", OpKind::Fc, &[x], 4);
        let b = g.add("b", OpKind::Relu, &[a], 4);
        let c = g.add("c", OpKind::Fc, &[b], 2);
        g.add("d", OpKind::Relu, &[c], 2);
        g.finish("small")
    }

    fn plan_plain(g: &Graph, s: Reuse) -> MemoryPlan {
        plan_memory(g, &plain_order(g), s).unwrap()
    }

    #[test]
    fn hand_computed_small_graph() {
        let s = small();
        // none: 1 + 4 + 4 + 2 + 2.
        assert_eq!(plan_plain(&s, st(false, false)).static_bytes, 13);
        // in-place: b in a's buffer, d in c's: 1 + 4 + 2.
        let p = plan_plain(&s, st(true, false));
        assert_eq!((p.static_bytes, p.inplace_count), (7, 2));
        // sharing: x(1), a->buf(4), b->new(4), c reuses a's (4 >= 2), d reuses b's: 1 + 4 + 4.
        let p = plan_plain(&s, st(false, true));
        assert_eq!(p.static_bytes, 9);
        assert_eq!(p.assignment[3], p.assignment[1]);
        assert_eq!(p.assignment[4], p.assignment[2]);
        // in-place + sharing: a, b share (4); c new (2), d in place: 1 + 4 + 2.
        assert_eq!(plan_plain(&s, st(true, true)).static_bytes, 7);
        // Dynamic peak without in-place: x + a + b live at b's step = 9; with in-place: x + a(=b) + c = 7.
        assert_eq!(plan_plain(&s, st(false, true)).dynamic_peak, 9);
        assert_eq!(plan_plain(&s, st(true, true)).dynamic_peak, 7);
    }

    /// Executed symbolically, every plan of the rule reads what it wrote; in-place that ignores
    /// the only-consumer condition overwrites a value another op still reads (the backward
    /// pass, or a block's skip connection).
    #[test]
    fn in_place_without_the_only_consumer_condition_corrupts_a_read() {
        // A small ResNet: a block's input feeds its convolution and its skip connection.
        let g = training_graph(&crate::nets::resnet(&[1, 1], 1, 32, 4)).unwrap();
        let order = plain_order(&g);
        for (i, s) in [(false, false), (true, false), (false, true), (true, true)] {
            let p = plan_memory(&g, &order, st(i, s)).unwrap();
            assert_eq!(corrupt_reads(&g, &order, &p).unwrap(), 0, "{i} {s}");
        }
        let unsafe_plan = plan_memory_ignoring_only_consumer(&g, &order, st(true, false)).unwrap();
        let safe = plan_memory(&g, &order, st(true, false)).unwrap();
        // It writes in place where the safe planner does not (the in-place count can stay
        // the same: a buffer handed on early is not there for a later candidate).
        assert_ne!(unsafe_plan.assignment, safe.assignment);
        assert!(corrupt_reads(&g, &order, &unsafe_plan).unwrap() >= 1);
        // Forward only (inference), every candidate dies at its op: both planners agree.
        let f = small();
        let o = plain_order(&f);
        let (a, b) = (
            plan_memory(&f, &o, st(true, false)).unwrap(),
            plan_memory_ignoring_only_consumer(&f, &o, st(true, false)).unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(corrupt_reads(&f, &o, &b).unwrap(), 0);
    }

    #[test]
    fn mlp_training_graph() {
        let s = training_graph(&two_layer_mlp()).unwrap();
        // 5 forward + grads of fc2, relu, fc1 (softmax has no reader, data is an input).
        assert_eq!(s.len(), 8);
        assert_eq!(plan_plain(&s, st(false, false)).buffers, 8);
        let both = plan_plain(&s, st(true, true));
        let sharing = plan_plain(&s, st(false, true));
        assert!(both.buffers < sharing.buffers || both.inplace_count > 0);
        assert!(both.static_bytes <= sharing.static_bytes);
        // grad:fc1 overwrites grad:relu (ReLU is fc1's only reader, elementwise).
        assert_eq!(both.assignment[7], both.assignment[6]);
    }

    /// Chain of n batch norms of unit size (not elementwise) and a loss.
    fn bn_chain(n: usize) -> Graph {
        let mut g = NetBuilder::new();
        let mut x = g.add("x", OpKind::Input, &[], 1);
        for i in 0..n {
            x = g.add(format!("bn{i}"), OpKind::BatchNorm, &[x], 1);
        }
        g.add("loss", OpKind::Loss, &[x], 1);
        training_graph(&g.finish("bn_chain")).unwrap()
    }

    #[test]
    fn checkpointing_is_sublinear_on_a_chain() {
        // O(n) with sharing, O(sqrt n) with checkpoints.
        let g = bn_chain(400);
        let full = plan_plain(&g, st(false, true)).static_bytes;
        let segments = sqrt_segments(g.forward_ops().len());
        assert_eq!(segments.len(), 21); // 401 ops, segments of 20
        let order = segment_order(&g, &segments).unwrap();
        let ck = plan_memory(&g, &order, st(false, true)).unwrap();
        assert!(full >= 400, "{full}");
        assert!(ck.static_bytes < 70, "{}", ck.static_bytes);
        // Each forward op recomputed at most once.
        assert!(ck.recomputed <= 400);
        assert_eq!(order.len(), g.len() + ck.recomputed);
    }

    #[test]
    fn segment_order_recomputes_each_segment_before_its_gradients() {
        // x -> bn0 .. bn3 -> loss; segments {bn0, bn1}, {bn2, bn3}, {loss}.
        let g = bn_chain(4);
        let name = |k: usize| g.nodes[k].name.as_str();
        let order = segment_order(&g, &every_k(5, 2)).unwrap();
        let names: Vec<&str> = order.iter().map(|&k| name(k)).collect();
        // bn1 and bn3 are read across a boundary (checkpoints); the loss's segment has no
        // gradient and is never recomputed.
        assert_eq!(
            names,
            [
                "x", "bn0", "bn1", "bn2", "bn3", "loss", // forward
                "bn2", "grad:bn3", "grad:bn2", // segment 2
                "bn0", "grad:bn1", "grad:bn0", // segment 1
            ]
        );
        let p = plan_memory(&g, &order, st(false, false)).unwrap();
        assert_eq!(p.recomputed, 2);
        assert!(segment_order(&g, &every_k(4, 2)).is_err());
    }

    #[test]
    fn checkmate_schedules_are_execution_orders() {
        let g = training_graph(&two_layer_mlp()).unwrap();
        assert_eq!(evaluation_order(&checkpoint_all(&g)), plain_order(&g));
        let chain = bn_chain(16);
        let sch = chen_sqrt(&chain);
        let order = evaluation_order(&sch);
        let p = plan_memory(&chain, &order, st(true, true)).unwrap();
        assert_eq!(p.recomputed, simulate(&chain, &sch).unwrap().recomputations);
        assert!(p.recomputed > 0);
    }

    #[test]
    fn rejects_reads_before_computation() {
        let g = small();
        let e = plan_memory(&g, &[0, 2, 1], st(true, true))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reads a before"), "{e}");
    }
}
