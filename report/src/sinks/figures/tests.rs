use super::*;

const AREA: Rect = Rect {
    x0: 0,
    y0: 0,
    x1: 800,
    y1: 400,
};

fn assert_disjoint(rects: &[Rect], dots: &[(i32, i32)]) {
    for (i, a) in rects.iter().enumerate() {
        assert!(a.inside(&AREA), "label {i} at {a:?} leaves the plot");
        for (j, b) in rects.iter().enumerate().skip(i + 1) {
            assert!(!a.overlaps(b), "labels {i} {a:?} and {j} {b:?} overlap");
        }
        for d in dots {
            let dot = Rect {
                x0: d.0 - 5,
                y0: d.1 - 5,
                x1: d.0 + 5,
                y1: d.1 + 5,
            };
            assert!(!a.overlaps(&dot), "label {i} {a:?} covers the dot at {d:?}");
        }
    }
}

#[test]
fn labels_of_coincident_points_do_not_collide() {
    // Five configurations with the same peak and nearly the same time (as the checkpointed
    // ones of the peak-memory study), and one far away.
    let anchors = [
        (400, 200),
        (401, 200),
        (403, 201),
        (400, 200),
        (405, 199),
        (100, 50),
    ];
    let sizes = [
        (150, 14),
        (120, 14),
        (90, 14),
        (160, 14),
        (110, 14),
        (80, 14),
    ];
    let placed = place_labels(&anchors, &sizes, &anchors, AREA);
    assert_eq!(placed.len(), anchors.len());
    assert_disjoint(&placed, &anchors);
}

#[test]
fn labels_near_the_edge_stay_inside_the_plot() {
    let anchors = [(795, 5), (5, 395), (795, 395)];
    let sizes = [(120, 14), (120, 14), (120, 14)];
    let placed = place_labels(&anchors, &sizes, &anchors, AREA);
    assert_disjoint(&placed, &anchors);
}

/// The y coordinate of the first `<text>` whose content is `content`.
fn text_y(svg: &str, content: &str) -> f64 {
    // plotters writes a text's content on its own line
    let end = svg
        .find(&format!(">\n{content}\n</text>"))
        .or_else(|| svg.find(&format!(">{content}</text>")))
        .unwrap_or_else(|| panic!("no text {content:?} in the SVG"));
    let start = svg[..end].rfind("<text").unwrap();
    let tag = &svg[start..end];
    let y = tag
        .split(" y=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    y.parse().unwrap()
}

#[test]
fn legend_is_drawn_above_the_tallest_bar() {
    let categories: Vec<String> = ["control", "fused", "naive_attention"]
        .map(String::from)
        .to_vec();
    let fig = Figure::grouped_bars(
        "peak",
        "Peak allocated memory per step (ours)",
        "configuration",
        "peak allocated (MiB)",
        &categories,
        vec![
            ("ours".into(), vec![133.7, 138.2, 178.1]),
            ("source legend".into(), vec![100.0, 90.0, 80.0]),
        ],
    );
    let svg = drawing(&fig).unwrap();
    let outlined = super::svg(&fig).unwrap();
    assert!(!outlined.contains("<text") && outlined.contains("<path"));
    assert!(
        outlined.starts_with("<svg viewBox=\"0 0 "),
        "{}",
        &outlined[..80]
    );
    // The y axis' top tick label is the highest thing in the plotting area; the bar of
    // 178.1 reaches just under it.
    let legend = text_y(&svg, "source legend");
    let top_tick = text_y(&svg, "180.0");
    assert!(
        legend + (LEGEND_PX as f64) < top_tick,
        "legend at y = {legend}, top tick at y = {top_tick}"
    );
}

#[test]
fn log_axes_span_at_least_three_powers_of_ten() {
    let (a, b) = crate::sinks::figures::decades(2.0e4, 2.0e6);
    assert_eq!((a, b), (1e4, 1e7));
    let (a, b) = crate::sinks::figures::decades(5.0, 60.0);
    assert!(b / a >= 100.0 - 1e-9, "{a} {b}");
    assert!(a <= 5.0 && b >= 60.0);
    // Less than a decade: padded, not snapped (1-2-5 ticks label it).
    let (a, b) = crate::sinks::figures::decades(1.0, 8.0);
    assert!(a < 1.0 && a > 0.5 && b > 8.0 && b < 12.0, "{a} {b}");
}

#[test]
fn ticks_read_in_human_units() {
    assert_eq!(tick_label(100000.0, true), "100 kB");
    assert_eq!(tick_label(1.266e10, true), "12.7 GB");
    assert_eq!(tick_label(512.0, true), "512 B");
    assert_eq!(tick_label(100000.0, false), "1e5");
    assert_eq!(tick_label(250.0, false), "250");
    assert_eq!(tick_label(0.5, false), "0.5");
    assert_eq!(tick_label(2e-4, false), "2e-4");
}
