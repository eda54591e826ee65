//! Inline SVG charts for the report page (`html.rs`): line charts over simulated time with
//! shaded fault windows and event marks, and histograms. Hand-written, as the timeline SVG is:
//! a few hundred lines against a plotting crate and its font stack. No external reference: the
//! elements carry no namespace (HTML parses inline `<svg>` without one).

use std::fmt::Write as _;

const W: f64 = 920.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 36.0;

/// One line: label, colour, dash pattern (empty: solid), points (x in ms, y).
pub struct Line {
    pub label: &'static str,
    pub color: &'static str,
    pub dash: &'static str,
    pub points: Vec<(u64, f64)>,
}

/// A shaded window (start ms, end ms, label).
pub type Window = (u64, u64, String);

/// A mark on the time axis: time (ms), colour, what it was (shown on hover).
pub type Mark = (u64, &'static str, String);

/// HTML/SVG text escaping.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow)
}

/// Keeps the points where a step begins or ends (a point equal to both neighbours adds
/// nothing to a line), so that long flat stretches cost two points.
pub fn thin(points: &[(u64, f64)]) -> Vec<(u64, f64)> {
    let n = points.len();
    (0..n)
        .filter(|&i| {
            i == 0 || i + 1 == n || points[i - 1].1 != points[i].1 || points[i + 1].1 != points[i].1
        })
        .map(|i| points[i])
        .collect()
}

/// A line chart over `t_max_ms` of simulated time.
pub fn line_chart(
    title: &str,
    y_label: &str,
    t_max_ms: u64,
    lines: &[Line],
    windows: &[Window],
    marks: &[Mark],
) -> String {
    let t_max = (t_max_ms as f64).max(1.0);
    let y_top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let x = |t: f64| LEFT + t / t_max * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / y_top * (H - TOP - BOTTOM);
    let mut out = open(title);
    for (start, end, label) in windows {
        let (a, b) = (x(*start as f64), x((*end).min(t_max_ms) as f64));
        let _ = writeln!(
            out,
            "<rect class=\"fault\" x=\"{a:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} {:.1}-{:.1} s</title></rect>",
            (b - a).max(1.0),
            H - TOP - BOTTOM,
            esc(label),
            *start as f64 / 1000.0,
            *end as f64 / 1000.0
        );
    }
    axes(&mut out, t_max, y_top, y_label, &x, &y);
    for (t, color, what) in marks {
        let px = x(*t as f64);
        let _ = writeln!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"2\"><title>{:.3} s {}</title></line>",
            H - BOTTOM,
            H - BOTTOM - 10.0,
            *t as f64 / 1000.0,
            esc(what)
        );
    }
    for (i, l) in lines.iter().enumerate() {
        let pts: Vec<String> = thin(&l.points)
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t as f64), y(v)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"{}\" points=\"{}\"/>\n\
             <text x=\"{:.1}\" y=\"18\" fill=\"{}\">{}</text>",
            l.color,
            l.dash,
            pts.join(" "),
            W - RIGHT - 110.0 * (lines.len() - i) as f64,
            l.color,
            esc(l.label)
        );
    }
    out + "</svg>\n"
}

/// A histogram of `values` (ms) in about `bins` bins of a round width, with the p50 and p99
/// marked.
pub fn histogram(title: &str, values: &[u64], p50: Option<u64>, p99: Option<u64>) -> String {
    let Some(&max) = values.iter().max() else {
        return format!(
            "<svg class=\"chart\" viewBox=\"0 0 {W} 44\" width=\"{W}\" height=\"44\" role=\"img\" aria-label=\"{0}\">\n\
             <text x=\"{LEFT}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{0}</text>\n\
             <text x=\"{LEFT}\" y=\"36\">no samples (no host crashed holding a replica)</text>\n</svg>\n",
            esc(title)
        );
    };
    let mut out = open(title);
    let width = nice_step((max as f64 + 1.0) / 20.0).max(1.0) as u64;
    let bins = (max / width + 1) as usize;
    let mut counts = vec![0u64; bins];
    for v in values {
        counts[(v / width) as usize] += 1;
    }
    let c_max = counts.iter().copied().max().unwrap_or(1) as f64 * 1.1;
    let span = (bins as u64 * width) as f64;
    let x = |ms: f64| LEFT + ms / span * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / c_max * (H - TOP - BOTTOM);
    axes(&mut out, span, c_max, "replicas", &x, &y);
    for (i, &c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let (a, b) = (
            x((i as u64 * width) as f64),
            x(((i as u64 + 1) * width) as f64),
        );
        let _ = writeln!(
            out,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#2e86de\"><title>{}-{} ms: {c}</title></rect>",
            a + 0.5,
            y(c as f64),
            (b - a - 1.0).max(1.0),
            H - BOTTOM - y(c as f64),
            i as u64 * width,
            (i as u64 + 1) * width
        );
    }
    for (label, at, color) in [("p50", p50, "#27ae60"), ("p99", p99, "#e4572e")] {
        if let Some(ms) = at {
            let px = x(ms as f64 + 0.5);
            // Labels near the right edge go on the line's left.
            let (tx, anchor) = match px > W - RIGHT - 120.0 {
                true => (px - 3.0, "end"),
                false => (px + 3.0, "start"),
            };
            let _ = writeln!(
                out,
                "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-dasharray=\"4 2\"/>\
                 <text x=\"{tx:.1}\" y=\"{:.1}\" fill=\"{color}\" text-anchor=\"{anchor}\">{label} {ms} ms</text>",
                H - BOTTOM,
                TOP + if label == "p50" { 12.0 } else { 26.0 }
            );
        }
    }
    out + "</svg>\n"
}

fn open(title: &str) -> String {
    format!(
        "<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{0}\">\n\
         <text x=\"{LEFT}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{0}</text>\n",
        esc(title)
    )
}

/// Axes, ticks and grid; the x axis in seconds when `x_span` is ms of time.
fn axes(
    out: &mut String,
    x_span: f64,
    y_top: f64,
    y_label: &str,
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(f64) -> f64,
) {
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#333\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{0}\" stroke=\"#333\"/>\n\
         <text x=\"12\" y=\"{2:.1}\" transform=\"rotate(-90 12 {2:.1})\" text-anchor=\"middle\">{3}</text>",
        H - BOTTOM,
        W - RIGHT,
        (TOP + H - BOTTOM) / 2.0,
        esc(y_label)
    );
    let seconds = x_span >= 2000.0;
    let unit = if seconds { 1000.0 } else { 1.0 };
    let step = nice_step(x_span / unit / 8.0);
    let mut t = 0.0;
    while t * unit <= x_span {
        let px = x(t * unit);
        let shown = if seconds {
            format!("{t}s")
        } else {
            format!("{t}ms")
        };
        let _ = writeln!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{0}\" x2=\"{px:.1}\" y2=\"{1}\" stroke=\"#333\"/>\
             <text x=\"{px:.1}\" y=\"{2}\" text-anchor=\"middle\">{shown}</text>",
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 16.0
        );
        t += step;
    }
    let step_v = nice_step(y_top / 5.0);
    let mut v = 0.0;
    while v <= y_top {
        let py = y(v);
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{0}\" y2=\"{py:.1}\" stroke=\"#eee\"/>\
             <text x=\"{1}\" y=\"{2:.1}\" text-anchor=\"end\">{3}</text>",
            W - RIGHT,
            LEFT - 4.0,
            py + 4.0,
            short(v)
        );
        v += step_v;
    }
}

/// A tick value, short: 1500 -> 1.5k.
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_every_step_of_a_line() {
        let pts: Vec<(u64, f64)> = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 1.0]
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64, *v))
            .collect();
        assert_eq!(
            thin(&pts),
            vec![(0, 1.0), (2, 1.0), (3, 2.0), (6, 2.0), (7, 1.0)]
        );
    }

    #[test]
    fn a_histogram_without_samples_says_so() {
        let svg = histogram("t", &[], None, None);
        assert!(svg.contains("no samples"), "{svg}");
        let svg = histogram("t", &[100, 120, 900], Some(120), Some(900));
        assert!(svg.contains("p99 900 ms") && svg.contains("<rect"), "{svg}");
    }
}
