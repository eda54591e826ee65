//! The agent's plain-HTTP endpoint on `--metrics`: `GET /metrics` (OpenMetrics text, encoded by
//! the `prometheus-client` crate from the families collected at scrape time), `GET /healthz`
//! (200 while the process serves) and `GET /readyz` (200 once the agent is ready, 503 with a
//! one-line reason before). Served by axum on hyper, at most [`SCRAPES_CONCURRENT_MAX`]
//! connections at once (further connections wait in the listen backlog), one request per
//! connection, each connection given [`CONNECTION_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::transport::rpc::BoxFuture;

/// Content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Longest request head read from a scraper (hyper's smallest read buffer).
const REQUEST_BYTES_MAX: usize = 8 * 1024;
/// Connections served at once; further connections wait in the listen backlog.
pub const SCRAPES_CONCURRENT_MAX: usize = 8;
/// Longest a connection is served, reading the request included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The families of one scrape as a `prometheus-client` collector: values were read at scrape
/// time, so the collector only encodes them.
#[derive(Debug)]
struct Collected(Vec<Family>);

impl prometheus_client::collector::Collector for Collected {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            let kind = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            // The crate writes help verbatim; OpenMetrics escapes `\`, `"` and newlines in it.
            let help = escape(family.help);
            let mut metric = encoder.encode_descriptor(family.name, &help, None, kind)?;
            for (labels, value) in &family.samples {
                let sample = metric.encode_family(labels)?;
                encode_value(family.kind, *value, sample)?;
            }
        }
        Ok(())
    }
}

/// Integral values are written as integers (`2`, not `2.0`), others as floats. A counter
/// never goes below 0.
fn encode_value(
    kind: Kind,
    value: f64,
    encoder: prometheus_client::encoding::MetricEncoder,
) -> Result<(), std::fmt::Error> {
    let integral = value.fract() == 0.0 && value.abs() < 1e15;
    match (kind, integral) {
        (Kind::Counter, true) => ConstCounter::new(value.max(0.0) as u64).encode(encoder),
        (Kind::Counter, false) => ConstCounter::new(value.max(0.0)).encode(encoder),
        (Kind::Gauge, true) => ConstGauge::new(value as i64).encode(encoder),
        (Kind::Gauge, false) => ConstGauge::new(value).encode(encoder),
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Encodes families as OpenMetrics text, ending with `# EOF`.
pub fn render(families: Vec<Family>) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Collected(families)));
    let mut out = String::new();
    // Writing to a String fails only if an encoder refuses (none of ours does).
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::warn!(error = %e, "encoding /metrics");
    }
    out
}

/// Collects the families at scrape time.
pub type Collector = Arc<dyn Fn() -> BoxFuture<Vec<Family>> + Send + Sync>;

/// Whether the agent is ready: `Err(reason)`, one line, while it is not.
pub type ReadyCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

enum Stage {
    /// The agent is starting or stopping: what it is doing, one line.
    Waiting(&'static str),
    /// The agent runs: its families and its readiness.
    Running {
        collect: Collector,
        ready: ReadyCheck,
    },
}

/// What the endpoint knows of its agent, which moves it from starting to running.
pub struct Status {
    stage: Mutex<Stage>,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            stage: Mutex::new(Stage::Waiting("starting")),
        }
    }
}

impl Status {
    /// The agent is starting or stopping and doing `what` (`/readyz` and `/metrics` answer 503
    /// saying so).
    pub fn waiting(&self, what: &'static str) {
        *self.lock() = Stage::Waiting(what);
    }

    /// The agent runs: `/metrics` collects with `collect`, `/readyz` asks `ready`.
    pub fn running(&self, collect: Collector, ready: ReadyCheck) {
        *self.lock() = Stage::Running { collect, ready };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn collector(&self) -> Result<Collector, String> {
        match &*self.lock() {
            Stage::Waiting(what) => Err(format!("not serving metrics: {what}")),
            Stage::Running { collect, .. } => Ok(collect.clone()),
        }
    }

    fn ready(&self) -> Result<(), String> {
        let ready = match &*self.lock() {
            Stage::Waiting(what) => return Err(what.to_string()),
            Stage::Running { ready, .. } => ready.clone(),
        };
        ready()
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn metrics(State(status): State<Arc<Status>>) -> Response {
    match status.collector() {
        Ok(collect) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, CONTENT_TYPE)],
            render(collect().await),
        )
            .into_response(),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n".to_string())
}

async fn readyz(State(status): State<Arc<Status>>) -> Response {
    match status.ready() {
        Ok(()) => text(StatusCode::OK, "ready\n".to_string()),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found: GET /metrics, /healthz and /readyz are served here\n".to_string(),
    )
}

/// The endpoint's routes.
pub fn router(status: Arc<Status>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(status)
}

/// Binds the endpoint's listener (a port in use is the caller's error to report).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves the endpoint on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, status: Arc<Status>) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    }
    let app = router(status);
    let slots = Arc::new(tokio::sync::Semaphore::new(SCRAPES_CONCURRENT_MAX));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                tracing::warn!(error = %e, "accepting on /metrics");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let connection = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .max_buf_size(REQUEST_BYTES_MAX)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_labels_and_eof() {
        let text = render(vec![
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
            "# HELP shoal_store_entries Entries\n# TYPE shoal_store_entries gauge\nshoal_store_entries 3\n\
             # HELP shoal_gossip_bytes Gossip bytes\n# TYPE shoal_gossip_bytes counter\n\
             shoal_gossip_bytes_total{direction=\"in\"} 10\nshoal_gossip_bytes_total{direction=\"out\"} 2.5\n# EOF\n"
        );
    }

    #[test]
    fn escapes_label_values_and_help() {
        let text = render(vec![Family {
            name: "shoal_x",
            help: "a \"quoted\" \\ help\nline",
            kind: Kind::Gauge,
            samples: vec![(vec![("k", "a\"b\\c\nd".into())], 1.0)],
        }]);
        assert!(text.contains(r#"shoal_x{k="a\"b\\c\nd"} 1"#), "{text}");
        assert!(
            text.contains(r#"# HELP shoal_x a \"quoted\" \\ help\nline"#),
            "{text}"
        );
    }

    #[test]
    fn negative_and_fractional_gauges_keep_their_value() {
        let text = render(vec![
            Family::single("shoal_a", "a", Kind::Gauge, -2.0),
            Family::single("shoal_b", "b", Kind::Gauge, -0.25),
        ]);
        assert!(text.contains("shoal_a -2\n"), "{text}");
        assert!(text.contains("shoal_b -0.25\n"), "{text}");
    }

    #[tokio::test]
    async fn readiness_follows_the_stage() {
        let status = Arc::new(Status::default());
        status.waiting("starting: opening the store");
        assert_eq!(
            status.ready(),
            Err("starting: opening the store".to_string())
        );
        assert!(status.collector().is_err());
        let rounds = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = rounds.clone();
        status.running(
            Arc::new(|| Box::pin(async { vec![] })),
            Arc::new(
                move || match seen.load(std::sync::atomic::Ordering::Relaxed) {
                    0 => Err("no round yet".to_string()),
                    _ => Ok(()),
                },
            ),
        );
        assert_eq!(status.ready(), Err("no round yet".to_string()));
        rounds.store(1, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(status.ready(), Ok(()));
        assert_eq!(render(status.collector().unwrap()().await), "# EOF\n");
    }
}
