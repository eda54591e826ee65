//! The OpenMetrics `/metrics` endpoint: a hand-written text exposition (a few dozen lines, no
//! metrics framework) served over plain HTTP on `--metrics`. Values are collected at scrape time.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::rpc::BoxFuture;

/// Content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Longest request head read from a scraper.
const REQUEST_BYTES_MAX: usize = 8 * 1024;
/// Scrapes served at once; further connections wait in the listen backlog.
const SCRAPES_CONCURRENT_MAX: usize = 8;

/// Whether a family counts up or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic; its sample is named `<family>_total`.
    Counter,
    /// Any value.
    Gauge,
}

/// One metric family and its samples.
#[derive(Clone, Debug)]
pub struct Family {
    /// Name, `shoal_` prefixed, without `_total`.
    pub name: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// (labels, value) pairs.
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    /// A family with one unlabelled sample.
    pub fn single(name: &'static str, help: &'static str, kind: Kind, value: f64) -> Family {
        Family {
            name,
            help,
            kind,
            samples: vec![(Vec::new(), value)],
        }
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders families in the OpenMetrics text format, ending with `# EOF`.
pub fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for family in families {
        let kind = match family.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(out, "# TYPE {} {kind}", family.name);
        let _ = writeln!(out, "# HELP {} {}", family.name, escape(family.help));
        let suffix = if family.kind == Kind::Counter {
            "_total"
        } else {
            ""
        };
        for (labels, value) in &family.samples {
            let _ = write!(out, "{}{suffix}", family.name);
            if !labels.is_empty() {
                let inner: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", inner.join(","));
            }
            let _ = writeln!(out, " {}", format_value(*value));
        }
    }
    out.push_str("# EOF\n");
    out
}

fn format_value(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// Collects the families at scrape time.
pub type Collector = Arc<dyn Fn() -> BoxFuture<Vec<Family>> + Send + Sync>;

/// Serves `GET /metrics` on `addr` until the task is dropped. Other paths get 404.
pub async fn serve(addr: SocketAddr, collect: Collector) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics");
    let slots = Arc::new(tokio::sync::Semaphore::new(SCRAPES_CONCURRENT_MAX));
    loop {
        let (stream, _) = listener.accept().await?;
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let collect = collect.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(Duration::from_secs(10), answer(stream, collect)).await;
        });
    }
}

async fn answer(mut stream: tokio::net::TcpStream, collect: Collector) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REQUEST_BYTES_MAX {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) =
        if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
            ("200 OK", CONTENT_TYPE, render(&collect().await))
        } else {
            (
                "404 Not Found",
                "text/plain",
                "only GET /metrics is served here\n".to_string(),
            )
        };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_labels_and_eof() {
        let text = render(&[
            Family::single("shoal_store_entries", "Entries", Kind::Gauge, 3.0),
            Family {
                name: "shoal_gossip_bytes",
                help: "Gossip bytes",
                kind: Kind::Counter,
                samples: vec![
                    (vec![("direction", "in".into())], 10.0),
                    (vec![("direction", "out".into())], 2.5),
                ],
            },
        ]);
        assert_eq!(
            text,
            "# TYPE shoal_store_entries gauge\n# HELP shoal_store_entries Entries\nshoal_store_entries 3\n\
             # TYPE shoal_gossip_bytes counter\n# HELP shoal_gossip_bytes Gossip bytes\n\
             shoal_gossip_bytes_total{direction=\"in\"} 10\nshoal_gossip_bytes_total{direction=\"out\"} 2.5\n# EOF\n"
        );
    }

    #[test]
    fn escapes_label_values() {
        let text = render(&[Family {
            name: "shoal_x",
            help: "h",
            kind: Kind::Gauge,
            samples: vec![(vec![("k", "a\"b\\c\nd".into())], 1.0)],
        }]);
        assert!(text.contains(r#"shoal_x{k="a\"b\\c\nd"} 1"#), "{text}");
    }
}
