//! Graph files: memwall's own JSON format and the dispatch between it and the node-link
//! formats of the benchmark graphs ([`Graph::read_node_link`]).
//!
//! memwall's format (`"format": "memwall-graph/1"`):
//!
//! ```json
//! {
//!   "format": "memwall-graph/1",
//!   "name": "my-net",
//!   "fixed_bytes": 0,
//!   "nodes": [
//!     {"name": "conv1", "cost": 1.5, "bytes": 4096, "backward": false},
//!     {"name": "loss", "cost": 0.1, "bytes": 4, "backward": true}
//!   ],
//!   "edges": [[0, 1]]
//! }
//! ```
//!
//! Nodes are listed in a topological order (every edge goes from a lower to a higher index);
//! `cost` is the op's compute cost in any consistent unit (Checkmate's `C_i`), `bytes` the size
//! of its output tensor (`M_i`), `fixed_bytes` memory resident throughout (`M_static`).

use super::{Graph, Node, RematError};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `format` value of memwall's graph files.
pub const FORMAT: &str = "memwall-graph/1";

/// One node of memwall's graph format.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    name: String,
    cost: f64,
    bytes: u64,
    #[serde(default)]
    backward: bool,
}

/// memwall's graph format.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGraph {
    format: String,
    name: String,
    #[serde(default)]
    fixed_bytes: u64,
    nodes: Vec<FileNode>,
    edges: Vec<(usize, usize)>,
}

/// Reads a graph file in memwall's format or either node-link format (Checkmate's, or the
/// random layered graphs'), chosen by the file's content: a top-level `"format"` field means
/// memwall's.
///
/// # Errors
/// [`RematError::Io`], [`RematError::Parse`] (with the line and column and, for memwall's
/// format, the field serde names) and [`RematError::Schema`] (naming the node or edge).
pub fn read_graph(path: &Path) -> Result<Graph, RematError> {
    let text = std::fs::read_to_string(path).map_err(|source| RematError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| RematError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
    if value.get("format").is_none() {
        return Graph::read_node_link(path);
    }
    let schema = |msg: String| RematError::Schema {
        path: path.to_path_buf(),
        msg,
    };
    match value.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        other => {
            return Err(schema(format!(
                "`format` is {other:?}; memwall reads \"{FORMAT}\" or a networkx node-link file (no `format` field)"
            )))
        }
    }
    let file: FileGraph = serde_path_to_error::deserialize(value).map_err(|e| {
        schema(format!(
            "field `{}`: {} (the format: docs/src/guide/plan.md)",
            e.path(),
            e.inner()
        ))
    })?;
    let mut nodes = Vec::with_capacity(file.nodes.len());
    for (i, n) in file.nodes.iter().enumerate() {
        if !(n.cost.is_finite() && n.cost >= 0.0) {
            return Err(schema(format!(
                "nodes[{i}].cost is {}; a cost is a finite number >= 0",
                n.cost
            )));
        }
        nodes.push(Node::new(n.name.clone(), n.cost, n.bytes, n.backward));
    }
    for (k, &(u, v)) in file.edges.iter().enumerate() {
        if u >= nodes.len() || v >= nodes.len() {
            return Err(schema(format!(
                "edges[{k}] = [{u}, {v}] names a node beyond the {} in `nodes`",
                nodes.len()
            )));
        }
        if u >= v {
            return Err(schema(format!(
                "edges[{k}] = [{u}, {v}] goes backwards: list `nodes` in a topological order"
            )));
        }
    }
    Graph::new(file.name, nodes, &file.edges, file.fixed_bytes).map_err(|e| schema(e.to_string()))
}

/// `g` in memwall's graph format (node kinds and in-place hints are not written).
pub fn to_json(g: &Graph) -> serde_json::Value {
    let file = FileGraph {
        format: FORMAT.into(),
        name: g.name.clone(),
        fixed_bytes: g.fixed_mem,
        nodes: g
            .nodes
            .iter()
            .map(|n| FileNode {
                name: n.name.clone(),
                cost: n.cost,
                bytes: n.mem,
                backward: n.backward,
            })
            .collect(),
        edges: g
            .deps
            .iter()
            .enumerate()
            .flat_map(|(k, d)| d.iter().map(move |&i| (i, k)))
            .collect(),
    };
    serde_json::to_value(file).expect("a graph serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn round_trip_through_memwall_format() {
        let dir = tempfile::tempdir().unwrap();
        let g = Graph::linear_chain(5).unwrap();
        let p = write(dir.path(), "g.json", &to_json(&g).to_string());
        let back = read_graph(&p).unwrap();
        assert_eq!(back.deps, g.deps);
        assert_eq!(back.nodes.len(), g.nodes.len());
        assert!(back
            .nodes
            .iter()
            .zip(&g.nodes)
            .all(|(a, b)| a.mem == b.mem && a.cost == b.cost));
    }

    #[test]
    fn errors_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                r#"{"format":"memwall-graph/2","name":"x","nodes":[],"edges":[]}"#,
                "format",
            ),
            (
                r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":-4}],"edges":[]}"#,
                "bytes",
            ),
            (
                r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":4,"bwd":true}],"edges":[]}"#,
                "bwd",
            ),
            (
                r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":4}],"edges":[[0,3]]}"#,
                "edges[0]",
            ),
            (
                r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":4},{"name":"b","cost":1,"bytes":4}],"edges":[[1,0]]}"#,
                "topological",
            ),
            (
                r#"{"format":"memwall-graph/1","name":"x","nodes":[{"name":"a","cost":1,"bytes":4}]}"#,
                "edges",
            ),
        ];
        for (i, (text, field)) in cases.iter().enumerate() {
            let p = write(dir.path(), &format!("bad{i}.json"), text);
            let e = read_graph(&p).unwrap_err().to_string();
            assert!(e.contains(field), "case {i}: {e}");
            assert!(
                e.contains(&format!("bad{i}.json")),
                "case {i} names the file: {e}"
            );
        }
    }
}
