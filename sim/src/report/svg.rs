//! The timeline plot, hand-written SVG: desired, running and healthy replicas over simulated
//! time, fault windows shaded (after Jepsen's perf plots).

use super::Report;

const W: f64 = 960.0;
const H: f64 = 360.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 40.0;

/// A plotted line: label, colour, dash pattern, value.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&crate::check::Sample) -> u32,
);

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG document for `report`.
pub fn timeline_svg(report: &Report) -> String {
    let t_max = (report.sim_seconds * 1000.0).max(1.0);
    let y_max = report
        .series
        .iter()
        .map(|s| s.desired.max(s.running).max(s.healthy))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.1;
    let x = |t: f64| LEFT + t / t_max * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / y_max * (H - TOP - BOTTOM);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"20\" font-size=\"14\">{} seed {} ({} hosts): {}</text>\n",
        esc(&report.scenario),
        report.seed,
        report.nodes,
        if report.passed { "passed" } else { "FAILED" }
    );
    for w in &report.windows {
        let (a, b) = (x(w.start_ms as f64), x(w.end_ms.min(t_max as u64) as f64));
        out += &format!(
            "<rect x=\"{a:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#e4572e\" fill-opacity=\"0.15\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#a33\">{}</text>\n",
            (b - a).max(1.0),
            H - TOP - BOTTOM,
            a + 2.0,
            TOP + 12.0,
            esc(&w.label)
        );
    }
    // Axes and ticks.
    out += &format!(
        "<line x1=\"{LEFT}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#333\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{0}\" stroke=\"#333\"/>\n",
        H - BOTTOM,
        W - RIGHT
    );
    let step_s = nice_step(t_max / 1000.0 / 8.0);
    let mut t = 0.0;
    while t * 1000.0 <= t_max {
        let px = x(t * 1000.0);
        out += &format!(
            "<line x1=\"{px:.1}\" y1=\"{0}\" x2=\"{px:.1}\" y2=\"{1}\" stroke=\"#333\"/>\
             <text x=\"{px:.1}\" y=\"{2}\" text-anchor=\"middle\">{t}s</text>\n",
            H - BOTTOM,
            H - BOTTOM + 4.0,
            H - BOTTOM + 16.0
        );
        t += step_s;
    }
    let step_v = nice_step(y_max / 5.0).max(1.0);
    let mut v = 0.0;
    while v <= y_max {
        let py = y(v);
        out += &format!(
            "<line x1=\"{0}\" y1=\"{py:.1}\" x2=\"{1}\" y2=\"{py:.1}\" stroke=\"#eee\"/>\
             <text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{v}</text>\n",
            LEFT,
            W - RIGHT,
            LEFT - 4.0,
            py + 4.0
        );
        v += step_v;
    }
    let series: [Series; 3] = [
        ("desired", "#555", "6 3", |s| s.desired),
        ("running", "#2e86de", "", |s| s.running),
        ("healthy", "#27ae60", "", |s| s.healthy),
    ];
    for (i, (label, color, dash, get)) in series.iter().enumerate() {
        let points: Vec<String> = report
            .series
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.t_ms as f64), y(f64::from(get(s)))))
            .collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" stroke-dasharray=\"{dash}\" points=\"{}\"/>\n\
             <text x=\"{:.1}\" y=\"20\" fill=\"{color}\">{label}</text>\n",
            points.join(" "),
            W - RIGHT - 200.0 + 66.0 * i as f64
        );
    }
    out += &format!(
        "<text x=\"{0}\" y=\"{1}\" fill=\"#666\">trace {2}; replacement p99 {3}; exclusive duplicates {4}</text>\n</svg>\n",
        LEFT,
        H - 6.0,
        report.trace_hash,
        crate::check::stats::show_ms(report.replacement_p99_ms),
        report.exclusive_duplicates
    );
    out
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 {
        return 1.0;
    }
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow)
}
