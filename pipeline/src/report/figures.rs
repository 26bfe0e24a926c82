//! SVG figures drawn with plotters from the report model's [`Figure`]s. Text is measured with
//! an embedded DejaVu Sans (no system fonts needed) and written as SVG `<text>`.

use super::model::{Figure, Mark, Series};
use crate::error::{Error, Result};
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::sync::Once;

const WIDTH: u32 = 860;
const HEIGHT: u32 = 480;
const FONT: &str = "sans-serif";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded font is valid: registration cannot fail for it.
        let _ = plotters::style::register_font(
            FONT,
            plotters::style::FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

fn palette(i: usize) -> RGBColor {
    const P: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    P[i % P.len()]
}

fn err<E: std::fmt::Display>(fig: &Figure) -> impl Fn(E) -> Error + '_ {
    move |e| Error::Report(format!("figure `{}`: {e}", fig.name))
}

/// Draws `fig` as an SVG document.
///
/// # Errors
/// [`Error::Report`] when the figure has no finite point to draw or plotters fails.
pub fn svg(fig: &Figure) -> Result<String> {
    register_font();
    if !fig.nodes.is_empty() {
        return dag_svg(fig);
    }
    let pts = drawable_points(fig);
    if pts.is_empty() {
        return Err(Error::Report(format!(
            "figure `{}` has no finite point to draw",
            fig.name
        )));
    }
    let bars = fig.series.iter().any(|s| s.mark == Mark::Bars);
    chart_svg(fig, axis_bounds(fig, &pts, bars), bars)
}

/// Whether `fig` has anything to draw: a DAG, or at least one finite point (positive on a log
/// axis). A figure of a group whose jobs all failed, or that has no control to compare with,
/// has none.
pub fn is_drawable(fig: &Figure) -> bool {
    !fig.nodes.is_empty() || !drawable_points(fig).is_empty()
}

/// Every series' finite points (positive on a log axis).
fn drawable_points(fig: &Figure) -> Vec<(f64, f64)> {
    fig.series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| {
            x.is_finite() && y.is_finite() && (!fig.log_x || *x > 0.0) && (!fig.log_y || *y > 0.0)
        })
        .collect()
}

/// The data ranges of a chart's axes.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

/// The axes' ranges: the points' extent, padded (bars: one slot per category from 0).
fn axis_bounds(fig: &Figure, pts: &[(f64, f64)], bars: bool) -> Bounds {
    let (mut x0, mut x1) = extent(pts.iter().map(|p| p.0));
    let (mut y0, y1) = extent(pts.iter().map(|p| p.1));
    if bars {
        x0 = -0.6;
        x1 += 0.6;
        y0 = y0.min(0.0);
    }
    let (y0, y1) = pad_y(fig, pts, bars, (y0, y1));
    let (x0, x1) = pad_x(fig.log_x, (x0, x1));
    Bounds { x0, x1, y0, y1 }
}

/// The smallest and largest of `values`.
fn extent(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)))
}

/// Room above and below the points: 8% of the span on a linear axis (from 0 when no point is
/// negative), a factor 1.5 on a log axis, 10% above bars (5% below negative ones).
fn pad_y(fig: &Figure, pts: &[(f64, f64)], bars: bool, (mut y0, mut y1): (f64, f64)) -> (f64, f64) {
    if !fig.log_y && !bars {
        let pad = ((y1 - y0).abs() * 0.08).max(y1.abs() * 1e-3).max(1e-12);
        y0 -= pad;
        y1 += pad;
        if pts.iter().all(|p| p.1 >= 0.0) {
            y0 = y0.max(0.0);
        }
    } else if fig.log_y {
        y0 /= 1.5;
        y1 *= 1.5;
    } else {
        let span = (y1 - y0).abs();
        y1 += span * 0.1;
        if y0 < 0.0 {
            y0 -= span * 0.05; // room below the most negative bar
        }
    }
    (y0, y1)
}

/// Widens a single-valued x range to one unit, and a log axis by a factor 1.3.
fn pad_x(log_x: bool, (mut x0, mut x1): (f64, f64)) -> (f64, f64) {
    if x0 == x1 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    if log_x {
        x0 /= 1.3;
        x1 *= 1.3;
    }
    (x0, x1)
}

/// An x or y axis of a chart: linear or logarithmic over `f64`.
trait Axis: Ranged<ValueType = f64> + ValueFormatter<f64> {}

impl<T: Ranged<ValueType = f64> + ValueFormatter<f64>> Axis for T {}

/// A chart on the SVG backend.
type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;

/// Draws an x/y figure within `b`: axes linear or logarithmic as the figure says.
fn chart_svg(fig: &Figure, b: Bounds, bars: bool) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err(fig))?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&fig.title, (FONT, 20))
            .margin(12)
            .x_label_area_size(if bars { 150 } else { 44 })
            .y_label_area_size(72);
        let (x, y) = (b.x0..b.x1, b.y0..b.y1);
        match (fig.log_x, fig.log_y) {
            (false, false) => {
                let chart = builder.build_cartesian_2d(x, y).map_err(err(fig))?;
                draw_chart(chart, &root, fig, b, bars)?
            }
            (true, false) => {
                let chart = builder
                    .build_cartesian_2d(x.log_scale(), y)
                    .map_err(err(fig))?;
                draw_chart(chart, &root, fig, b, bars)?
            }
            (false, true) => {
                let chart = builder
                    .build_cartesian_2d(x, y.log_scale())
                    .map_err(err(fig))?;
                draw_chart(chart, &root, fig, b, bars)?
            }
            (true, true) => {
                let chart = builder
                    .build_cartesian_2d(x.log_scale(), y.log_scale())
                    .map_err(err(fig))?;
                draw_chart(chart, &root, fig, b, bars)?
            }
        }
        root.present().map_err(err(fig))?;
    }
    Ok(out)
}

/// Draws the mesh, the bar names, every series and the legend on `chart`.
fn draw_chart<'a, 'b: 'a, X: Axis, Y: Axis>(
    mut chart: Chart<'a, 'b, X, Y>,
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    fig: &Figure,
    b: Bounds,
    bars: bool,
) -> Result<()> {
    let labels = bar_labels(fig);
    draw_mesh(&mut chart, fig, bars, labels.len())?;
    if bars {
        draw_bar_names(&chart, root, fig, b, &labels)?;
    }
    draw_series(&mut chart, fig)?;
    draw_legend(&mut chart, fig)
}

/// The category names of the first bar series (empty without bars).
fn bar_labels(fig: &Figure) -> Vec<String> {
    fig.series
        .iter()
        .find(|s| s.mark == Mark::Bars)
        .map(|s| s.point_labels.clone())
        .unwrap_or_default()
}

/// Axis descriptions, tick labels and grid; with bars, `categories` ticks without labels and
/// no vertical grid.
fn draw_mesh<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    bars: bool,
    categories: usize,
) -> Result<()> {
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(fig.x_label.as_str())
        .y_desc(fig.y_label.as_str())
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15));
    // Bar names are drawn below (plotters centres rotated axis labels on the
    // tick, which pushes half of each name under the axis).
    let no_label = |_: &f64| String::new();
    if bars {
        mesh.x_labels(categories.max(1) * 2 + 1)
            .x_label_formatter(&no_label)
            .disable_x_mesh();
    }
    mesh.draw().map_err(err(fig))
}

/// Bar names, rotated, below the plotting area at each category's x.
fn draw_bar_names<X: Axis, Y: Axis>(
    chart: &Chart<'_, '_, X, Y>,
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    fig: &Figure,
    b: Bounds,
    labels: &[String],
) -> Result<()> {
    let (xpix, ypix) = chart.plotting_area().get_pixel_range();
    let style = TextStyle::from((FONT, 12).into_font())
        .transform(FontTransform::Rotate90)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let width = (xpix.end - xpix.start) as f64;
    for (i, label) in labels.iter().enumerate() {
        let px = xpix.start as f64 + (i as f64 - b.x0) / (b.x1 - b.x0) * width;
        root.draw(&Text::new(
            label.clone(),
            (px.round() as i32, ypix.end + 8),
            style.clone(),
        ))
        .map_err(err(fig))?;
    }
    Ok(())
}

/// Draws each series in its palette colour as its mark says; bar series share each category's
/// slot side by side.
fn draw_series<X: Axis, Y: Axis>(chart: &mut Chart<'_, '_, X, Y>, fig: &Figure) -> Result<()> {
    let nbars = fig
        .series
        .iter()
        .filter(|s| s.mark == Mark::Bars)
        .count()
        .max(1);
    let mut bar_i = 0;
    for (i, s) in fig.series.iter().enumerate() {
        let color = palette(i);
        let finite: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        match s.mark {
            Mark::Line => draw_line(chart, fig, s, color, finite)?,
            Mark::Points => draw_points(chart, fig, s, color, &finite)?,
            Mark::Bars => {
                let w = 0.8 / nbars as f64;
                let off = -0.4 + w * bar_i as f64;
                bar_i += 1;
                draw_bars(chart, fig, s, color, &finite, (off, w))?;
            }
        }
    }
    Ok(())
}

/// A line through `finite` with a dot at each point.
fn draw_line<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    s: &Series,
    color: RGBColor,
    finite: Vec<(f64, f64)>,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(finite.clone(), color.stroke_width(2)))
        .map_err(err(fig))?
        .label(s.label.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    chart
        .draw_series(finite.iter().map(|p| Circle::new(*p, 3, color.filled())))
        .map_err(err(fig))?;
    Ok(())
}

/// A dot at each point of `finite`, and the series' point labels beside them when there is
/// one per point.
fn draw_points<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    s: &Series,
    color: RGBColor,
    finite: &[(f64, f64)],
) -> Result<()> {
    chart
        .draw_series(finite.iter().map(|p| Circle::new(*p, 5, color.filled())))
        .map_err(err(fig))?
        .label(s.label.as_str())
        .legend(move |(x, y)| Circle::new((x + 9, y), 5, color.filled()));
    if s.point_labels.len() == s.points.len() {
        chart
            .draw_series(
                s.points
                    .iter()
                    .zip(&s.point_labels)
                    .filter(|(p, _)| p.0.is_finite() && p.1.is_finite())
                    .map(|(p, l)| Text::new(l.clone(), *p, (FONT, 11).into_font().color(&BLACK))),
            )
            .map_err(err(fig))?;
    }
    Ok(())
}

/// One bar per point of `finite`, from 0 to y, `w` wide at x + `off`: `(off, w)`.
fn draw_bars<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    s: &Series,
    color: RGBColor,
    finite: &[(f64, f64)],
    (off, w): (f64, f64),
) -> Result<()> {
    chart
        .draw_series(finite.iter().map(|(x, y)| {
            Rectangle::new([(x + off, 0.0), (x + off + w * 0.95, *y)], color.filled())
        }))
        .map_err(err(fig))?
        .label(s.label.as_str())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    Ok(())
}

/// The legend (upper right), when there are several series or one is labelled.
fn draw_legend<'a, 'b: 'a, X: Axis, Y: Axis>(
    chart: &mut Chart<'a, 'b, X, Y>,
    fig: &Figure,
) -> Result<()> {
    if fig.series.len() > 1 || fig.series.iter().any(|s| !s.label.is_empty()) {
        chart
            .configure_series_labels()
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err(fig))?;
    }
    Ok(())
}

/// Draws a DAG: nodes in layers by longest path from a source, edges as lines.
fn dag_svg(fig: &Figure) -> Result<String> {
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
