//! Seeded random layered DAGs after the synthetic "layered graphs" of Gagrani et al. ("Neural
//! Topological Ordering for Computation Graphs", NeurIPS 2022, Appendix A), used by Moccasin
//! (Bartan et al., ICML 2023) as rematerialization benchmarks. The shared files
//! `random_layered_n*_w*_nlv*_ed*_scd*.json` name the same four parameters: a layer width
//! parameter `w`, the variation of the number of nodes per layer `nlv`, the edge density `ed`
//! between consecutive layers and the skip-connection density `scd`.
//!
//! What this generator does (our reading, not the original code, which we did not have):
//! * a source node, `L` inner layers and a sink node; `n` nodes in all;
//! * layer widths drawn uniformly in `mu * [1 - nlv, 1 + nlv]` (at least 1) with mean width
//!   `mu = max(1, 2 w sqrt(n))` until `n - 2` inner nodes are placed (for the shared n = 100 and
//!   n = 250 files `mu` is 5.4 and 13.6; their layers hold 5.2 and 11.3 nodes on average);
//! * each pair of nodes in consecutive layers is an edge with probability `ed`, then every node
//!   without an input from the previous layer (or an output to the next) gets one, uniformly;
//!   the source feeds the first layer and the last layer feeds the sink;
//! * each inner node gets, with probability `scd`, one skip connection to a uniformly chosen
//!   node of a uniformly chosen layer two or more layers later;
//! * compute cost (`duration`) uniform in `1..=1000` and output size (`out_cost`, bytes)
//!   `10 * ceil(820 u^2)` with `u` uniform in (0, 1] (mean about 2,700; the shared files have
//!   mean about 2,040 and maximum 8,180); source and sink cost 0; no parameters.
//!
//! Nodes are numbered source, layer by layer, sink: a topological order. The same parameters
//! and seed give the same graph on every platform (ChaCha8).
//!
//! May import: the graph IR, `rand`, `rand_chacha`.

use super::graph::{Graph, Node};
use super::RematError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Parameters of [`random_layered`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayeredParams {
    /// Number of nodes, source and sink included (at least 3).
    pub n: usize,
    /// Width parameter `w` (> 0): the mean layer width is `max(1, 2 w sqrt(n))` nodes.
    pub width: f64,
    /// Relative variation of the layer width `nlv` in `[0, 1]`.
    pub width_variation: f64,
    /// Edge probability `ed` in `[0, 1]` between nodes of consecutive layers.
    pub edge_density: f64,
    /// Probability `scd` in `[0, 1]` that an inner node has a skip connection.
    pub skip_density: f64,
    /// Seed of the ChaCha8 generator.
    pub seed: u64,
}

impl LayeredParams {
    /// The parameters of the shared random layered graphs (`nlv` 0.75, `ed` 0.2, `scd` 0.14,
    /// as in their file names) with `n` nodes, width `w` and `seed`.
    pub fn shared(n: usize, width: f64, seed: u64) -> Self {
        LayeredParams {
            n,
            width,
            width_variation: 0.75,
            edge_density: 0.2,
            skip_density: 0.14,
            seed,
        }
    }

    /// The graph name: `random_layered_n{n}_w{w}_nlv{nlv}_ed{ed}_scd{scd}_seed{seed}`, the shared
    /// files' naming plus the seed.
    pub fn name(&self) -> String {
        format!(
            "random_layered_n{}_w{}_nlv{}_ed{}_scd{}_seed{}",
            self.n,
            self.width,
            self.width_variation,
            self.edge_density,
            self.skip_density,
            self.seed
        )
    }

    fn check(&self) -> Result<(), RematError> {
        let bad = |m: String| Err(RematError::Params(m));
        if self.n < 3 {
            return bad(format!(
                "layered graph: n = {} but a source, a sink and at least one inner node need n >= 3",
                self.n
            ));
        }
        if !(self.width.is_finite() && self.width > 0.0) {
            return bad(format!(
                "layered graph: width w = {} must be a positive number",
                self.width
            ));
        }
        for (name, v) in [
            ("width variation nlv", self.width_variation),
            ("edge density ed", self.edge_density),
            ("skip-connection density scd", self.skip_density),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("layered graph: {name} = {v} must be in [0, 1]"));
            }
        }
        Ok(())
    }
}

/// A random layered DAG (see the module doc); memory is in bytes, costs in the `duration` units
/// of the shared files, no fixed memory.
///
/// # Errors
/// [`RematError::Params`] naming the parameter when it is out of range.
pub fn random_layered(p: &LayeredParams) -> Result<Graph, RematError> {
    p.check()?;
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    let inner = p.n - 2;
    let mu = (2.0 * p.width * (p.n as f64).sqrt()).max(1.0);
    // Layers as ranges of node ids (the source is 0).
    let mut layers: Vec<std::ops::Range<usize>> = Vec::new();
    let mut next = 1;
    while next < inner + 1 {
        let u: f64 = rng.random_range(-1.0..=1.0);
        let w = (mu * (1.0 + p.width_variation * u)).round().max(1.0) as usize;
        let end = (next + w).min(inner + 1);
        layers.push(next..end);
        next = end;
    }
    let sink = p.n - 1;
    let mut edges: Vec<(usize, usize)> = layers[0].clone().map(|v| (0, v)).collect();
    for l in 0..layers.len() - 1 {
        let (a, b) = (layers[l].clone(), layers[l + 1].clone());
        let mut has_in = vec![false; b.len()];
        let mut has_out = vec![false; a.len()];
        for u in a.clone() {
            for v in b.clone() {
                if rng.random_bool(p.edge_density) {
                    edges.push((u, v));
                    has_out[u - a.start] = true;
                    has_in[v - b.start] = true;
                }
            }
        }
        for v in b.clone() {
            if !has_in[v - b.start] {
                let u = rng.random_range(a.clone());
                edges.push((u, v));
                has_out[u - a.start] = true;
            }
        }
        for u in a.clone() {
            if !has_out[u - a.start] {
                edges.push((u, rng.random_range(b.clone())));
            }
        }
    }
    let last = layers.len() - 1;
    edges.extend(layers[last].clone().map(|u| (u, sink)));
    for l in 0..layers.len().saturating_sub(2) {
        for u in layers[l].clone() {
            if rng.random_bool(p.skip_density) {
                let to = rng.random_range(l + 2..=last);
                edges.push((u, rng.random_range(layers[to].clone())));
            }
        }
    }
    let mut nodes = Vec::with_capacity(p.n);
    nodes.push(Node::new("0", 0.0, 10, false));
    for v in 1..=inner {
        let cost = rng.random_range(1..=1000u32) as f64;
        let u: f64 = 1.0 - rng.random_range(0.0..1.0);
        let mem = 10 * (820.0 * u * u).ceil().max(1.0) as u64;
        nodes.push(Node::new(v.to_string(), cost, mem, false));
    }
    nodes.push(Node::new(sink.to_string(), 0.0, 10, false));
    Graph::new(p.name(), nodes, &edges, 0)
}

/// The small random layered graph of the solver tests: `n` nodes, width 0.3, width variation
/// 0.5, edge and skip densities 0.3 (denser than the Moccasin benchmark graphs, so that small
/// graphs need recomputation).
#[cfg(test)]
pub(crate) fn test_graph(n: usize, seed: u64) -> Graph {
    random_layered(&LayeredParams {
        n,
        width: 0.3,
        width_variation: 0.5,
        edge_density: 0.3,
        skip_density: 0.3,
        seed,
    })
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(n: usize, seed: u64) -> LayeredParams {
        LayeredParams::shared(n, 0.27, seed)
    }

    #[test]
    fn deterministic_per_seed() {
        let a = random_layered(&params(120, 7)).unwrap();
        let b = random_layered(&params(120, 7)).unwrap();
        assert_eq!(a, b);
        let c = random_layered(&params(120, 8)).unwrap();
        assert_ne!(
            a.deps, c.deps,
            "a different seed should give different edges"
        );
    }

    #[test]
    fn structure_single_source_and_sink() {
        for (n, seed) in [(3, 1), (50, 2), (500, 3)] {
            let g = random_layered(&params(n, seed)).unwrap();
            assert_eq!(g.len(), n);
            // Only node 0 has no inputs, only the last node has no users; every node is
            // reachable from the source (it has an input) and reaches the sink.
            for v in 0..n {
                assert_eq!(g.deps[v].is_empty(), v == 0, "node {v} inputs");
                assert_eq!(g.users[v].is_empty(), v == n - 1, "node {v} users");
            }
            assert!(g.nodes.iter().all(|x| !x.backward && x.mem >= 10));
            assert!(g.nodes[1..n - 1]
                .iter()
                .all(|x| (1.0..=1000.0).contains(&x.cost)));
        }
    }

    #[test]
    fn density_parameters_show_in_the_edges() {
        let sparse = random_layered(&LayeredParams {
            edge_density: 0.0,
            skip_density: 0.0,
            ..params(400, 5)
        })
        .unwrap();
        let dense = random_layered(&LayeredParams {
            edge_density: 0.6,
            skip_density: 0.5,
            ..params(400, 5)
        })
        .unwrap();
        let edges = |g: &Graph| g.deps.iter().map(Vec::len).sum::<usize>();
        assert!(edges(&dense) > 2 * edges(&sparse));
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = random_layered(&LayeredParams {
            edge_density: 1.5,
            ..params(100, 1)
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("edge density ed"), "{e}");
        let e = random_layered(&params(2, 1)).unwrap_err().to_string();
        assert!(e.contains("n >= 3"), "{e}");
    }
}
