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
    let mut pos = vec![(0i32, 0i32); n];
    for (d, nodes) in per_layer.iter().enumerate() {
        for (j, &i) in nodes.iter().enumerate() {
            let x = (WIDTH as f64 * (j as f64 + 1.0) / (nodes.len() as f64 + 1.0)) as i32;
            let y = 60 + 110 * d as i32;
            pos[i] = (x, y);
        }
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
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
            let w = (label.chars().count() as i32 * 8 + 16).max(40);
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
