//! DAG figures: nodes in layers by longest path from a source, edges as lines.

use super::*;

/// Draws a DAG: nodes in layers by longest path from a source, edges as lines.
pub(super) fn dag_svg(fig: &Figure) -> Result<String> {
    let n = fig.nodes.len();
    let mut depth = vec![0usize; n];
    // Longest-path layering; edges are assumed to go from lower to higher depth (a DAG).
    for _ in 0..n {
        let mut changed = false;
        for &(a, b) in &fig.edges {
            if a < n && b < n && depth[b] < depth[a] + 1 {
                depth[b] = depth[a] + 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let layers = depth.iter().max().copied().unwrap_or(0) + 1;
    let mut per_layer = vec![Vec::new(); layers];
    for (i, d) in depth.iter().enumerate() {
        per_layer[*d].push(i);
    }
    let height = (110 * layers as u32 + 60).max(200);
    let (pos, canvas) = place(fig, &per_layer);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (canvas, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err(fig))?;
        root.draw(&Text::new(
            fig.title.clone(),
            (12, 10),
            (FONT, 18).into_font(),
        ))
        .map_err(err(fig))?;
        for &(a, b) in &fig.edges {
            if a < n && b < n {
                root.draw(&PathElement::new(
                    vec![pos[a], pos[b]],
                    BLACK.stroke_width(1),
                ))
                .map_err(err(fig))?;
            }
        }
        for (i, label) in fig.nodes.iter().enumerate() {
            let (x, y) = pos[i];
            let w = box_width(label);
            root.draw(&Rectangle::new(
                [(x - w / 2, y - 16), (x + w / 2, y + 16)],
                RGBColor(222, 235, 247).filled(),
            ))
            .map_err(err(fig))?;
            root.draw(&Rectangle::new(
                [(x - w / 2, y - 16), (x + w / 2, y + 16)],
                RGBColor(31, 119, 180).stroke_width(1),
            ))
            .map_err(err(fig))?;
            root.draw(&Text::new(
                label.clone(),
                (x - w / 2 + 8, y - 8),
                (FONT, 14).into_font(),
            ))
            .map_err(err(fig))?;
        }
        root.present().map_err(err(fig))?;
    }
    Ok(out)
}

/// Space between two boxes of a layer, and between a box and the figure's edge (pixels).
const GAP: i32 = 24;
/// Left and right margin of the figure (pixels).
const MARGIN: i32 = 12;

/// A node's box width for its label (pixels): 8 per character and 16 of padding, at least 40.
fn box_width(label: &str) -> i32 {
    (label.chars().count() as i32 * 8 + 16).max(40)
}

/// Every node's centre (pixels). Layers run top to bottom; within a layer the nodes are
/// ordered by the mean x of the nodes that feed them (one barycentre pass, which removes most
/// crossings of a layered DAG; Sugiyama, Tagawa and Toda 1981), then spread evenly over the
/// figure's width where their boxes fit so, else packed side by side with `GAP` between boxes
/// and centred (the figure widens for a layer wider than it). Returns the centres and the
/// figure's width.
fn place(fig: &Figure, per_layer: &[Vec<usize>]) -> (Vec<(i32, i32)>, u32) {
    let n = fig.nodes.len();
    let widths: Vec<i32> = fig.nodes.iter().map(|l| box_width(l)).collect();
    let packed = |nodes: &[usize]| {
        nodes.iter().map(|&i| widths[i]).sum::<i32>() + GAP * (nodes.len() as i32 - 1).max(0)
    };
    let canvas = per_layer
        .iter()
        .map(|l| packed(l) + 2 * MARGIN)
        .max()
        .unwrap_or(0)
        .max(WIDTH as i32);
    let mut pos = vec![(0i32, 0i32); n];
    for (d, layer) in per_layer.iter().enumerate() {
        let mut nodes = layer.clone();
        if d > 0 {
            let centre = |i: usize| {
                let xs: Vec<f64> = fig
                    .edges
                    .iter()
                    .filter(|&&(a, b)| b == i && a < n)
                    .map(|&(a, _)| pos[a].0 as f64)
                    .collect();
                if xs.is_empty() {
                    f64::INFINITY
                } else {
                    xs.iter().sum::<f64>() / xs.len() as f64
                }
            };
            // A stable sort: nodes with the same centre (or no feeder) keep their order.
            nodes.sort_by(|&a, &b| centre(a).total_cmp(&centre(b)));
        }
        let y = 60 + 110 * d as i32;
        let k = nodes.len() as f64;
        let even: Vec<i32> = (0..nodes.len())
            .map(|j| (canvas as f64 * (j as f64 + 1.0) / (k + 1.0)) as i32)
            .collect();
        let fits = nodes
            .windows(2)
            .zip(even.windows(2))
            .all(|(p, x)| x[1] - x[0] >= (widths[p[0]] + widths[p[1]]) / 2 + GAP)
            && nodes
                .first()
                .is_none_or(|&i| even[0] - widths[i] / 2 >= MARGIN);
        if fits {
            for (&i, &x) in nodes.iter().zip(&even) {
                pos[i] = (x, y);
            }
        } else {
            let mut left = (canvas - packed(&nodes)) / 2;
            for &i in &nodes {
                pos[i] = (left + widths[i] / 2, y);
                left += widths[i] + GAP;
            }
        }
    }
    (pos, canvas as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(nodes: &[&str], edges: &[(usize, usize)]) -> Figure {
        Figure {
            name: "g".into(),
            title: "g".into(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            edges: edges.to_vec(),
            ..Default::default()
        }
    }

    /// No two boxes of a layer overlap, however long the labels, and a layer wider than the
    /// figure widens it.
    #[test]
    fn boxes_of_a_layer_never_overlap() {
        let labels: Vec<String> = (0..12).map(|i| format!("a long node label {i}")).collect();
        let mut nodes = vec!["root"];
        nodes.extend(labels.iter().map(|s| s.as_str()));
        let edges: Vec<(usize, usize)> = (1..nodes.len()).map(|i| (0, i)).collect();
        let fig = figure(&nodes, &edges);
        let (pos, _) = place(&fig, &[vec![0], (1..nodes.len()).collect()]);
        let mut row: Vec<(i32, i32)> = (1..nodes.len())
            .map(|i| (pos[i].0, box_width(nodes[i])))
            .collect();
        row.sort();
        for w in row.windows(2) {
            assert!(w[1].0 - w[0].0 >= (w[0].1 + w[1].1) / 2 + GAP, "{row:?}");
        }
        assert!(row[0].0 - row[0].1 / 2 >= MARGIN, "{row:?}");
        let svg = dag_svg(&fig).unwrap();
        assert!(
            !svg.contains(&format!("width=\"{WIDTH}\"")),
            "the figure did not widen"
        );
    }

    /// A node is placed under the nodes that feed it: two chains stay uncrossed whatever
    /// order the second layer is listed in.
    #[test]
    fn nodes_follow_their_feeders() {
        let fig = figure(&["a", "b", "under b", "under a"], &[(0, 3), (1, 2)]);
        let (pos, _) = place(&fig, &[vec![0, 1], vec![2, 3]]);
        assert!(pos[0].0 < pos[1].0);
        assert!(pos[3].0 < pos[2].0, "{pos:?}");
    }
}
