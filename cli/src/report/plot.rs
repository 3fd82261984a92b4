//! The report's SVG: throughput against thread count, one line per
//! implementation, one panel per group.
//!
//! Read without the table: every panel has a title, labelled axes with
//! units, a log-scale throughput axis (the rows span four orders of
//! magnitude) and its own legend beside it. stripecount's rows are solid
//! lines, baselines and peer crates dashed, and the shared `AtomicU64`
//! reference is repeated as a black dashed line in every panel so each
//! panel's ratios can be read off it.

use super::output::{fmt_duration, fmt_ops, Report, SAMPLES};
use super::rows::{Group, Origin};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One panel's size in pixels (chart and legend).
const PANEL: (u32, u32) = (860, 480);
/// Width of the legend beside each chart.
const LEGEND_W: u32 = 330;
/// Height of the overall title.
const TITLE_H: u32 = 56;

/// Line colours (Tableau 10 without its grey and black, kept for the
/// reference): distinguishable, and readable on white.
const COLOURS: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

type Error = Box<dyn std::error::Error>;

/// Writes the plot of `report` to `path`.
pub fn write_svg(report: &Report<'_>, path: &Path) -> Result<(), Error> {
    // One panel per group of the selected rows (the reference, drawn in
    // every panel, gets its own only when nothing else was selected).
    let mut groups: Vec<Group> = report
        .rows
        .iter()
        .filter(|r| !r.row.is_reference())
        .map(|r| r.row.group)
        .collect();
    if groups.is_empty() {
        groups.extend(report.rows.iter().map(|r| r.row.group));
    }
    groups.sort();
    groups.dedup();
    let cols = groups.len().clamp(1, 2);
    let rows = groups.len().div_ceil(2).max(1);
    let size = (PANEL.0 * cols as u32, PANEL.1 * rows as u32 + TITLE_H);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(TITLE_H);
    title.draw(&Text::new(
        "stripecount contention report: throughput as threads are added (higher is better)",
        (12, 8),
        ("sans-serif", 22).into_font().style(FontStyle::Bold),
    ))?;
    title.draw(&Text::new(
        format!(
            "{} cores; all threads share one instance; median of {} samples of {} per point, after {} warm-up. \
             Solid: stripecount; dashed: baselines and other crates; black dashed: one shared AtomicU64.",
            report.cores,
            SAMPLES,
            fmt_duration(report.duration / SAMPLES as u32),
            fmt_duration(report.warm_up)
        ),
        (12, 34),
        ("sans-serif", 14),
    ))?;
    let panels = body.split_evenly((rows, cols));
    for (group, area) in groups.iter().zip(panels.iter()) {
        draw_panel(report, *group, area)?;
    }
    root.present()?;
    Ok(())
}

/// Tick values for a log axis over [lo, hi]: 1-2-3-5-7 steps for a narrow
/// range, 1-2-5 up to three decades, powers of ten beyond (about 4 to 12
/// labels, none crowded).
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (hi / lo).log10();
    let mantissas: &[f64] = if decades < 1.0 {
        &[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0]
    } else if decades < 3.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut ticks = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        for m in mantissas {
            let t = m * decade;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

struct Line {
    label: String,
    style: ShapeStyle,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

fn draw_panel(
    report: &Report<'_>,
    group: Group,
    area: &DrawingArea<SVGBackend<'_>, Shift>,
) -> Result<(), Error> {
    let x_of = |threads: usize| {
        report
            .threads
            .iter()
            .position(|&t| t == threads)
            .unwrap_or(0) as f64
    };
    let mut lines: Vec<Line> = Vec::new();
    let mut colour = 0;
    for r in &report.rows {
        let reference = r.row.is_reference();
        if r.row.group != group && !reference {
            continue;
        }
        let (style, dashed, label) = if reference {
            (
                BLACK.stroke_width(2),
                true,
                format!("{} (reference)", r.row.name),
            )
        } else {
            let c = COLOURS[colour % COLOURS.len()];
            colour += 1;
            match r.row.origin {
                Origin::Ours => (c.stroke_width(3), false, r.row.name.to_string()),
                _ => (c.stroke_width(2), true, r.row.name.to_string()),
            }
        };
        let points = r
            .points
            .iter()
            .map(|p| (x_of(p.threads), p.measured.ops_per_sec().max(1.0)))
            .collect();
        lines.push(Line {
            label,
            style,
            dashed,
            points,
        });
    }
    let (lo, hi) = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold((f64::MAX, 1.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let lo = if lo == f64::MAX { 1.0 } else { lo };
    let n = report.threads.len().max(1);

    let (chart_area, legend_area) = area.split_horizontally(PANEL.0 - LEGEND_W);
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(group.title(), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(78)
        .build_cartesian_2d(
            -0.3f64..(n as f64 - 0.7),
            (lo / 1.6..hi * 1.6)
                .log_scale()
                .with_key_points(log_ticks(lo / 1.6, hi * 1.6)),
        )?;
    let threads = report.threads.clone();
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                threads
                    .get(i as usize)
                    .map_or(String::new(), |t| t.to_string())
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| tick_label(*y))
        .x_desc("threads sharing one instance")
        .y_desc("operations per second (log scale)")
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    for l in &lines {
        if l.dashed {
            chart.draw_series(DashedLineSeries::new(
                l.points.iter().copied(),
                8,
                5,
                l.style,
            ))?;
        } else {
            chart.draw_series(LineSeries::new(l.points.iter().copied(), l.style))?;
        }
        chart.draw_series(
            l.points
                .iter()
                .map(|&p| Circle::new(p, 4, l.style.color.filled())),
        )?;
    }

    // The legend, beside the chart so it never hides a line.
    let top = 52;
    legend_area.draw(&Text::new(
        "legend",
        (8, top - 24),
        ("sans-serif", 13).into_font().style(FontStyle::Italic),
    ))?;
    for (i, l) in lines.iter().enumerate() {
        let y = top + 24 * i as i32;
        if l.dashed {
            legend_area.draw(&PathElement::new(vec![(8, y), (20, y)], l.style))?;
            legend_area.draw(&PathElement::new(vec![(26, y), (38, y)], l.style))?;
        } else {
            legend_area.draw(&PathElement::new(vec![(8, y), (38, y)], l.style))?;
        }
        legend_area.draw(&Circle::new((23, y), 4, l.style.color.filled()))?;
        legend_area.draw(&Text::new(l.label.clone(), (46, y - 8), ("sans-serif", 14)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::log_ticks;

    #[test]
    fn log_ticks_fit_the_range() {
        assert_eq!(log_ticks(80.0, 250.0), vec![100.0, 150.0, 200.0]);
        assert_eq!(log_ticks(3e6, 2e8), vec![5e6, 1e7, 2e7, 5e7, 1e8, 2e8]);
        let wide = log_ticks(0.7, 3e8);
        assert_eq!(wide.len(), 9);
        assert_eq!(wide[0], 1.0);
        assert!((wide[8] - 1e8).abs() < 1.0);
    }
}

/// An axis tick: `fmt_ops` without trailing zeros (`1.00G` -> `1G`,
/// `500.0M` -> `500M`, `2.50G` -> `2.5G`).
fn tick_label(y: f64) -> String {
    let s = fmt_ops(y);
    match s.find('.') {
        Some(dot) => {
            let unit_at = s[dot..]
                .find(|c: char| !c.is_ascii_digit() && c != '.')
                .map_or(s.len(), |i| dot + i);
            let digits = s[..unit_at].trim_end_matches('0').trim_end_matches('.');
            format!("{digits}{}", &s[unit_at..])
        }
        None => s,
    }
}

#[cfg(test)]
mod tick_tests {
    use super::tick_label;

    #[test]
    fn tick_labels_drop_only_trailing_zeros() {
        assert_eq!(tick_label(1e9), "1G");
        assert_eq!(tick_label(1e10), "10G");
        assert_eq!(tick_label(2.5e9), "2.5G");
        assert_eq!(tick_label(5e8), "500M");
        assert_eq!(tick_label(1.05e8), "105M");
        assert_eq!(tick_label(2e4), "20k");
        assert_eq!(tick_label(50.0), "50");
    }
}
