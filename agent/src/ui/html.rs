//! HTML by hand: escaping, the page layout, a few cells. No template engine: every value is
//! escaped where it enters the page ([`esc`]), and the markup stays small (a 1,000-replica
//! workload page is about 120 KB).

use std::fmt::Write;

/// The stylesheet and the live-update script, embedded in the binary.
pub const STYLE_CSS: &str = include_str!("assets/style.css");
/// See [`STYLE_CSS`].
pub const LIVE_JS: &str = include_str!("assets/live.js");

/// `text` escaped for HTML text and quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` escaped for a URL path segment.
pub fn url_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Which navigation entry a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Mesh,
    Workloads,
    Issues,
    Events,
    None,
}

/// A whole page: `main` is the part the live script refreshes (`?part=main` answers it alone);
/// `watch` names the workload whose changes refresh it.
pub fn page(title: &str, nav: Nav, agent: &str, watch: Option<&str>, main: &str) -> String {
    let mut out = String::with_capacity(main.len() + 1500);
    let link = |out: &mut String, href: &str, label: &str, this: Nav| {
        let current = if nav == this {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(out, "<a href=\"{href}\"{current}>{label}</a>");
    };
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{} · shoal</title><link rel=\"icon\" href=\"data:,\">\
         <link rel=\"stylesheet\" href=\"/assets/style.css\"></head><body>\
         <header><strong>shoal</strong><nav>",
        esc(title)
    );
    link(&mut out, "/", "Mesh", Nav::Mesh);
    link(&mut out, "/workloads", "Workloads", Nav::Workloads);
    link(&mut out, "/issues", "Issues", Nav::Issues);
    link(&mut out, "/events", "Events", Nav::Events);
    let _ = write!(
        out,
        "</nav><span class=\"agent\">agent {} · read-only · <span id=\"live-status\">static</span>\
         </span></header><main id=\"main\" data-watch=\"{}\">{main}</main>\
         <aside><h2>Live events</h2><ul id=\"live-events\"></ul></aside>\
         <script src=\"/assets/live.js\"></script></body></html>",
        esc(agent),
        esc(watch.unwrap_or(""))
    );
    out
}

/// A time, ms since the Unix epoch, as UTC.
pub fn time(ms: u64) -> String {
    shoal_core::hlc::format_utc_ms(ms)
}

/// How long ago `ms` was, from `now_ms`, for people (`42s`, `7m`, `3h`, `2d`).
pub fn ago(ms: u64, now_ms: u64) -> String {
    let s = now_ms.saturating_sub(ms) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A capacity bar: `used` of `total`, with the figures as text beside it.
pub fn bar(out: &mut String, used: u64, total: u64, text: &str) {
    let _ = write!(
        out,
        "<meter min=\"0\" max=\"{}\" value=\"{}\" high=\"{}\"></meter> {}",
        total.max(1),
        used.min(total.max(1)),
        total.max(1) / 10 * 9,
        esc(text)
    );
}

/// Now, ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
