//! SVG figures drawn with plotters from the report model's [`Figure`]s. Text is laid out with
//! the DejaVu Sans that memwall embeds (the `dejavu` crate), then turned into outline paths by
//! usvg (the resvg project), so a figure looks the same in every browser and blog engine and
//! needs no font of the reader's.

use super::{Sink, StudyReport};
use crate::content::{Figure, Mark, Series};
use crate::error::{Error, Result};
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::Once;

mod dag;
use dag::dag_svg;

const WIDTH: u32 = 860;
const HEIGHT: u32 = 480;
const FONT: &str = "sans-serif";
/// Font sizes in plotters' units (its SVG backend writes `font-size` = size / 1.24, so 17
/// is 13.7 px at the figure's 860-px width, shown at up to 960 px on the page): title, axis
/// descriptions, tick labels, legend, category names and point labels.
const TITLE_PX: u32 = 24;
const AXIS_DESC_PX: u32 = 19;
const TICK_PX: u32 = 17;
const LEGEND_PX: u32 = 17;
const BAR_NAME_PX: u32 = 17;
const POINT_LABEL_PX: u32 = 16;
const MARGIN: i32 = 12;

/// The figures sink: every drawable figure of a report as `figures/<name>.svg` (a figure
/// without a finite point is left out with a warning: its table says why), and the SVG files a
/// figure the records no longer give left behind removed, so no stale figure stays beside the
/// report as if it were evidence.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures;

/// The folder of a report's figures, beside `report.md`.
pub const FIGURES_DIR: &str = "figures";

impl Sink for Figures {
    fn name(&self) -> &'static str {
        "figures"
    }

    fn study(&self, report: &StudyReport<'_>, out_dir: &Path) -> Result<Vec<PathBuf>> {
        let fig_dir = out_dir.join(FIGURES_DIR);
        std::fs::create_dir_all(&fig_dir).map_err(|e| Error::io("creating", &fig_dir, e))?;
        let mut files = Vec::new();
        for fig in report.doc.sections.iter().flat_map(|s| &s.figures) {
            if !is_drawable(fig) {
                // e.g. reductions in a group without a finished control: the table says why.
                tracing::warn!("figure `{}` has no finite point: left out", fig.name);
                continue;
            }
            let path = fig_dir.join(format!("{}.svg", fig.name));
            crate::analysis::write_atomic(&path, svg(fig)?.as_bytes())?;
            files.push(path);
        }
        remove_stale_figures(&fig_dir, &files)?;
        Ok(files)
    }
}

/// Removes the SVG files of `fig_dir` that this rendering did not write (`kept`).
fn remove_stale_figures(fig_dir: &Path, kept: &[PathBuf]) -> Result<()> {
    let entries = std::fs::read_dir(fig_dir).map_err(|e| Error::io("listing", fig_dir, e))?;
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "svg") && !kept.contains(&p) {
            std::fs::remove_file(&p).map_err(|e| Error::io("removing", &p, e))?;
        }
    }
    Ok(())
}

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

fn err<E: Into<memwall_core::BoxError>>(fig: &Figure) -> impl Fn(E) -> Error + '_ {
    move |e| Error::render(format!("figure `{}`", fig.name), e)
}

/// Draws `fig` as an SVG document whose text is glyph outlines (see [`text_to_paths`]).
///
/// # Errors
/// [`Error::Report`] when the figure has no finite point to draw, plotters fails, or usvg
/// cannot convert the drawing.
pub fn svg(fig: &Figure) -> Result<String> {
    let drawn = drawing(fig)?;
    let outlined = text_to_paths(&drawn, &format!("{}-", fig.name)).map_err(err(fig))?;
    Ok(with_description(&outlined, fig))
}

/// `svg` with a `<title>` (the figure's title) and a `<desc>` naming what is drawn (per series
/// with a finite point: its label, and for labelled points the labels of the points drawn) right
/// after the root's opening tag: the text a screen reader reads and a search or a test finds,
/// now that the visible text is outlines.
fn with_description(svg: &str, fig: &Figure) -> String {
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut desc = vec![format!("x: {}; y: {}.", fig.x_label, fig.y_label)];
    for s in &fig.series {
        let labels: Vec<String> = labels_of(s).into_iter().map(|(_, l)| l).collect();
        if !s.points.iter().any(|&p| drawable(fig, p)) {
            continue;
        }
        if s.mark == Mark::Points && !labels.is_empty() {
            desc.push(format!("{}: {}.", s.label, labels.join(", ")));
        } else {
            desc.push(format!("{}.", s.label));
        }
    }
    let Some(end) = svg.find('>') else {
        return svg.to_string();
    };
    format!(
        "{}<title>{}</title><desc>{}</desc>{}",
        &svg[..=end],
        esc(&fig.title),
        esc(&desc.join(" ")),
        &svg[end + 1..]
    )
}

/// Draws `fig` with plotters: an SVG document with `<text>` elements.
fn drawing(fig: &Figure) -> Result<String> {
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
    // A series with nothing to draw (e.g. a source column without values) gets no legend
    // entry and no colour.
    let mut shown = fig.clone();
    shown
        .series
        .retain(|s| s.points.iter().any(|&p| drawable(fig, p)));
    let bars = shown.series.iter().any(|s| s.mark == Mark::Bars);
    chart_svg(&shown, axis_bounds(&shown, &pts, bars), bars)
}

/// A font database holding only DejaVu Sans, every generic family mapped to it; built once.
fn font_db() -> std::sync::Arc<usvg::fontdb::Database> {
    static DB: std::sync::OnceLock<std::sync::Arc<usvg::fontdb::Database>> =
        std::sync::OnceLock::new();
    DB.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        let font: &'static [u8] = dejavu::sans::regular();
        db.load_font_source(usvg::fontdb::Source::Binary(std::sync::Arc::new(font)));
        let family = "DejaVu Sans";
        db.set_sans_serif_family(family);
        db.set_serif_family(family);
        db.set_monospace_family(family);
        std::sync::Arc::new(db)
    })
    .clone()
}

/// `svg` with every `<text>` turned into glyph outlines (DejaVu Sans) by usvg: the same
/// picture, deterministic, its ids prefixed with `id_prefix` (several figures may share a
/// page), its `viewBox` kept so that it scales with CSS (usvg folds the viewBox into the
/// coordinates and writes only width and height).
///
/// # Errors
/// A message when usvg cannot parse the drawing or leaves text behind.
fn text_to_paths(svg: &str, id_prefix: &str) -> std::result::Result<String, String> {
    let opt = usvg::Options {
        font_family: "DejaVu Sans".to_owned(),
        fontdb: font_db(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| format!("usvg: {e}"))?;
    let out = tree.to_string(&usvg::WriteOptions {
        id_prefix: Some(id_prefix.to_owned()),
        preserve_text: false,
        // 0.1 px is below what a screen shows, and keeps a figure near 90 kB.
        coordinates_precision: 1,
        transforms_precision: 4,
        indent: usvg::Indent::None,
        attributes_indent: usvg::Indent::None,
        use_single_quote: false,
    });
    let rest = out
        .strip_prefix("<svg ")
        .ok_or("usvg output does not start with `<svg `")?;
    let tag = &rest[..rest.find('>').ok_or("unterminated <svg> tag")?];
    let attr = |name: &str| {
        let key = format!("{name}=\"");
        tag.split(' ')
            .find_map(|a| a.strip_prefix(key.as_str()))
            .map(|v| v.trim_end_matches('"').to_string())
            .ok_or_else(|| format!("no {name} on usvg's <svg>"))
    };
    let out = if tag.contains("viewBox=") {
        out.clone()
    } else {
        format!(
            "<svg viewBox=\"0 0 {} {}\" {rest}",
            attr("width")?,
            attr("height")?
        )
    };
    if out.contains("<text") {
        return Err("usvg left a <text> element".into());
    }
    Ok(out)
}

/// Whether `fig` has anything to draw: a DAG, or at least one finite point (positive on a log
/// axis). A figure of a group whose jobs all failed, or that has no control to compare with,
/// has none.
pub fn is_drawable(fig: &Figure) -> bool {
    !fig.nodes.is_empty() || !drawable_points(fig).is_empty()
}

/// Whether `(x, y)` can be drawn on `fig`'s axes: finite, and positive on a log axis.
fn drawable(fig: &Figure, (x, y): (f64, f64)) -> bool {
    x.is_finite() && y.is_finite() && (!fig.log_x || x > 0.0) && (!fig.log_y || y > 0.0)
}

/// Every series' drawable points ([`drawable`]).
fn drawable_points(fig: &Figure) -> Vec<(f64, f64)> {
    fig.series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|&p| drawable(fig, p))
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
        // Every category keeps its slot, also trailing ones without a bar (no finite value).
        x0 = -0.6;
        x1 = x1.max(bar_labels(fig).len() as f64 - 1.0) + 0.6;
        y0 = y0.min(0.0);
    }
    let (y0, y1) = pad_y(fig, pts, bars, (y0, y1));
    let (mut x0, mut x1) = pad_x(fig.log_x, (x0, x1));
    if !fig.log_x && fig.series.iter().any(|s| s.mark == Mark::Points) {
        // Room for the dots (and their labels) at the ends of a scatter's x range.
        let pad = (x1 - x0) * 0.04;
        x0 = if x0 >= 0.0 {
            (x0 - pad).max(0.0)
        } else {
            x0 - pad
        };
        x1 += pad;
    }
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
        (y0, y1) = decades(y0, y1);
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
        (x0, x1) = decades(x0, x1);
    }
    (x0, x1)
}

/// A log axis' range: spanning less than a decade, padded by a factor 1.4 (plotters labels
/// 1-2-5 multiples there); otherwise widened to whole powers of ten that hold at least three
/// of them, so that the axis carries at least three labelled ticks (plotters labels only the
/// powers of ten of a log axis spanning more than a decade). Non-positive bounds are left as
/// they are.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo > 0.0 && hi > 0.0 && lo.is_finite() && hi.is_finite()) {
        return (lo, hi);
    }
    if hi / lo < 10.0 {
        return (lo / 1.4, hi * 1.4);
    }
    let mut a = lo.log10().floor();
    let mut b = hi.log10().ceil();
    while b - a < 2.0 {
        // Widen on the side with more room in its decade, the upper side first.
        if hi.log10() - a > b - lo.log10() {
            b += 1.0;
        } else {
            a -= 1.0;
        }
    }
    (10f64.powf(a), 10f64.powf(b))
}

/// An x or y axis of a chart: linear or logarithmic over `f64`.
trait Axis: Ranged<ValueType = f64> + ValueFormatter<f64> {}

impl<T: Ranged<ValueType = f64> + ValueFormatter<f64>> Axis for T {}

/// A chart on the SVG backend.
type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;

/// Draws an x/y figure within `b`: the title and the legend in a band above the plot (so the
/// legend never covers data), axes linear or logarithmic as the figure says.
fn chart_svg(fig: &Figure, b: Bounds, bars: bool) -> Result<String> {
    // Bar names are written below the plot, rotated: the figure grows by the longest name.
    let bar_names = if bars {
        let mut scratch = String::new();
        let area = SVGBackend::with_string(&mut scratch, (WIDTH, HEIGHT)).into_drawing_area();
        let font = TextStyle::from((FONT, BAR_NAME_PX).into_font());
        let mut widest = 0;
        for l in bar_labels(fig) {
            widest = widest.max(area.estimate_text_size(&l, &font).map_err(err(fig))?.0);
        }
        widest.min(WIDTH / 2)
    } else {
        0
    };
    let height = HEIGHT + bar_names;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err(fig))?;
        let legend = legend_layout(&root, fig)?;
        let band = MARGIN as u32 + TITLE_PX + 10 + legend.height;
        let (top, plot) = root.split_vertically(band);
        draw_title_and_legend(&top, fig, &legend)?;
        let mut builder = ChartBuilder::on(&plot);
        builder
            .margin(MARGIN as u32)
            // room for the last tick label of a log x axis, centred on the plot's right edge
            .margin_right(if fig.log_x {
                3 * MARGIN as u32
            } else {
                MARGIN as u32
            })
            .margin_top(6)
            .x_label_area_size(if bars {
                bar_names + 16 + AXIS_DESC_PX + 14
            } else {
                54
            })
            .y_label_area_size(96);
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

/// Where the legend entries go: rows of (series index, x offset), and the band's height.
struct Legend {
    rows: Vec<Vec<(usize, i32)>>,
    height: u32,
}

/// Lays the legend out in rows across the figure's width (a swatch and the series label per
/// entry); empty for a single unlabelled series.
fn legend_layout(root: &DrawingArea<SVGBackend<'_>, Shift>, fig: &Figure) -> Result<Legend> {
    let shown = fig.series.len() > 1 || fig.series.iter().any(|s| !s.label.is_empty());
    if !shown {
        return Ok(Legend {
            rows: Vec::new(),
            height: 0,
        });
    }
    let font = TextStyle::from((FONT, LEGEND_PX).into_font());
    let avail = WIDTH as i32 - 2 * MARGIN - 96;
    let mut rows: Vec<Vec<(usize, i32)>> = vec![Vec::new()];
    let mut x = 0;
    for (i, s) in fig.series.iter().enumerate() {
        let (w, _) = root.estimate_text_size(&s.label, &font).map_err(err(fig))?;
        let entry = 24 + w as i32 + 18;
        if x > 0 && x + entry > avail {
            rows.push(Vec::new());
            x = 0;
        }
        if let Some(row) = rows.last_mut() {
            row.push((i, x));
        }
        x += entry;
    }
    let height = rows.len() as u32 * (LEGEND_PX + 6) + 4;
    Ok(Legend { rows, height })
}

/// The title (centred) and the legend rows below it, in the band `top`.
fn draw_title_and_legend(
    top: &DrawingArea<SVGBackend<'_>, Shift>,
    fig: &Figure,
    legend: &Legend,
) -> Result<()> {
    let title =
        TextStyle::from((FONT, TITLE_PX).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    top.draw(&Text::new(
        fig.title.clone(),
        (WIDTH as i32 / 2, MARGIN),
        title,
    ))
    .map_err(err(fig))?;
    let label =
        TextStyle::from((FONT, LEGEND_PX).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let x0 = MARGIN + 96;
    for (r, row) in legend.rows.iter().enumerate() {
        let y = MARGIN
            + TITLE_PX as i32
            + 10
            + r as i32 * (LEGEND_PX as i32 + 6)
            + LEGEND_PX as i32 / 2;
        for &(i, dx) in row {
            let (s, color) = (&fig.series[i], palette(i));
            let x = x0 + dx;
            match s.mark {
                Mark::Line | Mark::Curve => top.draw(&PathElement::new(
                    vec![(x, y), (x + 18, y)],
                    color.stroke_width(3),
                )),
                Mark::Points => top.draw(&Circle::new((x + 9, y), 5, color.filled())),
                Mark::Bars => top.draw(&Rectangle::new(
                    [(x + 2, y - 6), (x + 16, y + 6)],
                    color.filled(),
                )),
            }
            .map_err(err(fig))?;
            top.draw(&Text::new(s.label.clone(), (x + 24, y), label.clone()))
                .map_err(err(fig))?;
        }
    }
    Ok(())
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
    draw_bands(&mut chart, fig, b)?;
    if bars {
        draw_bar_names(&chart, root, fig, b, &labels)?;
    }
    draw_series(&mut chart, root, fig)
}

/// The figure's bands, each the full height of the plot, in a light tint per distinct label
/// (in order of first appearance, the palette's colours from the end so they differ from the
/// first series').
fn draw_bands<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    b: Bounds,
) -> Result<()> {
    let mut labels: Vec<&str> = Vec::new();
    for band in &fig.bands {
        if !labels.contains(&band.label.as_str()) {
            labels.push(&band.label);
        }
    }
    for band in &fig.bands {
        let (x0, x1) = (band.x0.max(b.x0), band.x1.min(b.x1));
        if !(x0.is_finite() && x1.is_finite() && x1 > x0) {
            continue;
        }
        let i = labels.iter().position(|l| *l == band.label).unwrap_or(0);
        // Half transparent, so the grid shows through as it does outside the bands.
        let tint = band_tint(i).mix(0.6);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, b.y0), (x1, b.y1)],
                tint.filled(),
            )))
            .map_err(err(fig))?;
    }
    Ok(())
}

/// The light tint of the `i`-th band label: grey-blue, sand, grey-green, then lilac.
pub fn band_tint(i: usize) -> RGBColor {
    const T: [RGBColor; 4] = [
        RGBColor(226, 234, 244),
        RGBColor(247, 236, 220),
        RGBColor(226, 240, 226),
        RGBColor(238, 230, 244),
    ];
    T[i % T.len()]
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
        .label_style((FONT, TICK_PX))
        .axis_desc_style((FONT, AXIS_DESC_PX));
    // Ticks in readable units: bytes as kB/MB/GB, log axes without float noise ("100000.0"),
    // and enough key points that a log axis spanning less than a few decades keeps labels.
    let x_bytes = is_bytes_axis(&fig.x_label);
    let y_bytes = is_bytes_axis(&fig.y_label);
    let x_fmt = move |v: &f64| tick_label(*v, x_bytes);
    let y_fmt = move |v: &f64| tick_label(*v, y_bytes);
    if fig.log_x || x_bytes {
        mesh.x_label_formatter(&x_fmt);
    }
    if fig.log_y || y_bytes {
        mesh.y_label_formatter(&y_fmt);
    }
    if fig.log_x {
        mesh.x_labels(LOG_LABELS);
    }
    // Whole-number x (run numbers): a tick per number up to 20 of them, labels only there.
    let whole = |v: &f64| {
        if (v - v.round()).abs() < 1e-9 {
            format!("{}", v.round() as i64)
        } else {
            String::new()
        }
    };
    if fig.integer_x && !fig.log_x && !bars {
        let xs = drawable_points(fig).into_iter().map(|(x, _)| x);
        let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let span = if hi >= lo {
            (hi - lo).round() as usize
        } else {
            0
        };
        mesh.x_labels((span + 1).clamp(2, 21))
            .x_label_formatter(&whole);
    }
    if fig.log_y {
        mesh.y_labels(LOG_LABELS);
    }
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

/// Key points asked of a log axis (plotters adds 2x and 5x multiples between powers of ten
/// when the span is short, so that every log axis carries at least three labels).
const LOG_LABELS: usize = 12;

/// Whether an axis description says its values are bytes ("memory (bytes)").
fn is_bytes_axis(label: &str) -> bool {
    label.to_lowercase().contains("(bytes)")
}

/// A tick label: bytes in decimal units (B, kB, MB, GB, TB) with up to three significant
/// digits; other numbers without trailing zeros, in scientific notation from 10^5 or below
/// 10^-3.
pub(crate) fn tick_label(v: f64, bytes: bool) -> String {
    let sig = |x: f64| {
        let digits = if x.abs() >= 100.0 {
            0
        } else if x.abs() >= 10.0 {
            1
        } else {
            2
        };
        let s = format!("{x:.digits$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if bytes {
        const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
        let mut x = v;
        let mut u = 0;
        while x.abs() >= 1000.0 && u + 1 < UNITS.len() {
            x /= 1000.0;
            u += 1;
        }
        return format!("{} {}", sig(x), UNITS[u]);
    }
    let a = v.abs();
    if v != 0.0 && !(1e-3..1e5).contains(&a) {
        let e = a.log10().floor();
        let m = v / 10f64.powf(e);
        return format!("{}e{}", sig(m), e as i64);
    }
    sig(v)
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
    let style = TextStyle::from((FONT, BAR_NAME_PX).into_font())
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
fn draw_series<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    fig: &Figure,
) -> Result<()> {
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
            Mark::Line => draw_line(chart, fig, color, finite)?,
            Mark::Curve => {
                chart
                    .draw_series(LineSeries::new(finite, color.stroke_width(2)))
                    .map_err(err(fig))?;
            }
            Mark::Points => draw_points(chart, root, fig, color, &finite, labels_of(s))?,
            Mark::Bars => {
                let w = 0.8 / nbars as f64;
                let off = -0.4 + w * bar_i as f64;
                bar_i += 1;
                draw_bars(chart, fig, color, &finite, (off, w))?;
            }
        }
    }
    Ok(())
}

/// A line through `finite` with a dot at each point.
fn draw_line<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    color: RGBColor,
    finite: Vec<(f64, f64)>,
) -> Result<()> {
    chart
        .draw_series(LineSeries::new(finite.clone(), color.stroke_width(2)))
        .map_err(err(fig))?;
    chart
        .draw_series(finite.iter().map(|p| Circle::new(*p, 3, color.filled())))
        .map_err(err(fig))?;
    Ok(())
}

/// The finite points of `s` with their labels (when there is one label per point).
fn labels_of(s: &Series) -> Vec<((f64, f64), String)> {
    if s.point_labels.len() != s.points.len() {
        return Vec::new();
    }
    s.points
        .iter()
        .zip(&s.point_labels)
        .filter(|(p, _)| p.0.is_finite() && p.1.is_finite())
        .map(|(p, l)| (*p, l.clone()))
        .collect()
}

/// A dot at each point of `finite`, and each label of `labels` placed beside its point where
/// it overlaps no other label, dot or the plot's edge ([`place_labels`]).
fn draw_points<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    fig: &Figure,
    color: RGBColor,
    finite: &[(f64, f64)],
    labels: Vec<((f64, f64), String)>,
) -> Result<()> {
    chart
        .draw_series(finite.iter().map(|p| Circle::new(*p, 5, color.filled())))
        .map_err(err(fig))?;
    if labels.is_empty() {
        return Ok(());
    }
    let font = TextStyle::from((FONT, POINT_LABEL_PX).into_font());
    let mut items = Vec::with_capacity(labels.len());
    for (p, text) in labels {
        let (w, h) = root.estimate_text_size(&text, &font).map_err(err(fig))?;
        items.push((chart.backend_coord(&p), (w as i32, h as i32), text));
    }
    let dots: Vec<(i32, i32)> = finite.iter().map(|p| chart.backend_coord(p)).collect();
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let area = Rect {
        x0: xr.start,
        y0: yr.start,
        x1: xr.end,
        y1: yr.end,
    };
    let sizes: Vec<(i32, i32)> = items.iter().map(|i| i.1).collect();
    let anchors: Vec<(i32, i32)> = items.iter().map(|i| i.0).collect();
    let placed = place_labels(&anchors, &sizes, &dots, area);
    let style = font.color(&BLACK);
    for ((anchor, _, text), r) in items.into_iter().zip(placed) {
        if !r.contains_near(anchor, 9) {
            // Placed away from its point: a thin leader line to the label's nearest corner.
            let corner = r.nearest_corner(anchor);
            root.draw(&PathElement::new(
                vec![anchor, corner],
                BLACK.mix(0.45).stroke_width(1),
            ))
            .map_err(err(fig))?;
        }
        root.draw(&Text::new(text, (r.x0, r.y0), style.clone()))
            .map_err(err(fig))?;
    }
    Ok(())
}

/// A rectangle in backend pixels, `x0 <= x1`, `y0 <= y1`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    fn inside(&self, o: &Rect) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }
    /// Whether `p` is within `d` pixels of the rectangle.
    fn contains_near(&self, p: (i32, i32), d: i32) -> bool {
        p.0 >= self.x0 - d && p.0 <= self.x1 + d && p.1 >= self.y0 - d && p.1 <= self.y1 + d
    }
    fn nearest_corner(&self, p: (i32, i32)) -> (i32, i32) {
        let x = if (p.0 - self.x0).abs() < (p.0 - self.x1).abs() {
            self.x0
        } else {
            self.x1
        };
        let y = if (p.1 - self.y0).abs() < (p.1 - self.y1).abs() {
            self.y0
        } else {
            self.y1
        };
        (x, y)
    }
}

/// Greedy label placement: each label (of `sizes[i]` pixels, for the point at `anchors[i]`)
/// takes the first candidate position — right, left, above, below and the four diagonals of
/// its point, then the same ring farther out (up to 8 rings) — that lies inside `area` and
/// overlaps no dot of `dots` and no label placed before it. A label with no free position
/// takes the candidate that overlaps the fewest. Returns one rectangle per label.
fn place_labels(
    anchors: &[(i32, i32)],
    sizes: &[(i32, i32)],
    dots: &[(i32, i32)],
    area: Rect,
) -> Vec<Rect> {
    let dot_rects: Vec<Rect> = dots
        .iter()
        .map(|&(x, y)| Rect {
            x0: x - 6,
            y0: y - 6,
            x1: x + 6,
            y1: y + 6,
        })
        .collect();
    let mut placed: Vec<Rect> = Vec::with_capacity(anchors.len());
    for (&(px, py), &(w, h)) in anchors.iter().zip(sizes) {
        let mut best: Option<(usize, Rect)> = None;
        'rings: for ring in 0..8 {
            let d = 8 + ring * (h + 2);
            let candidates = [
                (px + d, py - h / 2),
                (px - d - w, py - h / 2),
                (px - w / 2, py - d - h),
                (px - w / 2, py + d),
                (px + d - 2, py - d - h + 2),
                (px + d - 2, py + d - 2),
                (px - d - w + 2, py - d - h + 2),
                (px - d - w + 2, py + d - 2),
            ];
            for (x, y) in candidates {
                let r = Rect {
                    x0: x,
                    y0: y,
                    x1: x + w,
                    y1: y + h,
                };
                let hits = placed
                    .iter()
                    .chain(&dot_rects)
                    .filter(|o| r.overlaps(o))
                    .count()
                    + usize::from(!r.inside(&area)) * 1000;
                if hits == 0 {
                    best = Some((0, r));
                    break 'rings;
                }
                if best.is_none_or(|(b, _)| hits < b) {
                    best = Some((hits, r));
                }
            }
        }
        let r = best.map(|b| b.1).unwrap_or(Rect {
            x0: px + 8,
            y0: py - h / 2,
            x1: px + 8 + w,
            y1: py + h - h / 2,
        });
        placed.push(r);
    }
    placed
}

/// One bar per point of `finite`, from 0 to y, `w` wide at x + `off`: `(off, w)`.
fn draw_bars<X: Axis, Y: Axis>(
    chart: &mut Chart<'_, '_, X, Y>,
    fig: &Figure,
    color: RGBColor,
    finite: &[(f64, f64)],
    (off, w): (f64, f64),
) -> Result<()> {
    chart
        .draw_series(finite.iter().map(|(x, y)| {
            Rectangle::new([(x + off, 0.0), (x + off + w * 0.95, *y)], color.filled())
        }))
        .map_err(err(fig))?;
    Ok(())
}

#[cfg(test)]
mod tests;
