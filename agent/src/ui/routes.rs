//! The routes: pages, their `?part=main` fragments for the live script, the embedded assets, the
//! live stream, and a 404 page for everything else. Only GET (and HEAD) are answered.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::stream::Stream;
use serde::Deserialize;

use super::html::{self, esc, Nav};
use super::live::Hub;
use super::pages;
use super::source::SourceError;
use super::WeakApi;
use crate::wire::api::ErrorKind;

#[derive(Clone)]
struct Ui {
    api: WeakApi,
    live: Arc<Hub>,
}

/// `?part=main`: the `<main>` part alone.
#[derive(Deserialize, Default)]
struct PartQuery {
    part: Option<String>,
}

/// `?watch=NAME`: the live stream of a workload page.
#[derive(Deserialize, Default)]
struct LiveQuery {
    watch: Option<String>,
}

/// The UI's router over `api`.
pub fn router(api: WeakApi, live: Arc<Hub>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/workloads", get(workloads))
        .route("/workloads/{name}", get(workload))
        .route("/workloads/{name}/replicas/{replica}/logs", get(logs))
        .route("/issues", get(issues))
        .route("/events", get(events))
        .route("/live", get(live_stream))
        .route("/assets/style.css", get(style))
        .route("/assets/live.js", get(script))
        .fallback(not_found)
        .with_state(Ui { api, live })
        .layer(axum::middleware::map_response(security_headers))
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// A page, or its main part, or the error page for what the API said.
fn answer(
    ui: &Ui,
    part: &PartQuery,
    title: &str,
    nav: Nav,
    watch: Option<&str>,
    built: Result<String, SourceError>,
) -> Response {
    match built {
        Ok(main) if part.part.as_deref() == Some("main") => Html(main).into_response(),
        Ok(main) => Html(html::page(title, nav, &agent_name(ui), watch, &main)).into_response(),
        Err(e) => {
            let status = match &e {
                SourceError::Gone => StatusCode::SERVICE_UNAVAILABLE,
                SourceError::Api(api) if api.kind == ErrorKind::NotFound => StatusCode::NOT_FOUND,
                _ => StatusCode::BAD_GATEWAY,
            };
            let main = format!("<h1>{}</h1><p>{}</p>", status.as_u16(), esc(&e.to_string()));
            (
                status,
                Html(html::page(title, nav, &agent_name(ui), None, &main)),
            )
                .into_response()
        }
    }
}

fn agent_name(ui: &Ui) -> String {
    ui.api
        .upgrade()
        .map_or_else(|| "(stopping)".into(), |api| api.node().name.clone())
}

async fn overview(State(ui): State<Ui>, Query(part): Query<PartQuery>) -> Response {
    let built = pages::overview(&ui.api).await;
    answer(&ui, &part, "Mesh", Nav::Mesh, None, built)
}

async fn workloads(State(ui): State<Ui>, Query(part): Query<PartQuery>) -> Response {
    let built = pages::workloads(&ui.api).await;
    answer(&ui, &part, "Workloads", Nav::Workloads, None, built)
}

async fn workload(
    State(ui): State<Ui>,
    Path(name): Path<String>,
    Query(part): Query<PartQuery>,
) -> Response {
    let built = pages::workload(&ui.api, &name).await;
    answer(&ui, &part, &name, Nav::Workloads, Some(&name), built)
}

async fn logs(
    State(ui): State<Ui>,
    Path((name, replica)): Path<(String, String)>,
    Query(part): Query<PartQuery>,
) -> Response {
    let Ok(replica) = replica.parse::<u32>() else {
        return not_found_page(&ui, "a replica is a number");
    };
    let built = pages::log_tail(&ui.api, &name, replica).await;
    let title = format!("{name}/{replica} output");
    answer(&ui, &part, &title, Nav::Workloads, None, built)
}

async fn issues(State(ui): State<Ui>, Query(part): Query<PartQuery>) -> Response {
    let built = pages::issues(&ui.api).await;
    answer(&ui, &part, "Issues", Nav::Issues, None, built)
}

async fn events(State(ui): State<Ui>, Query(part): Query<PartQuery>) -> Response {
    let built = pages::events(&ui.api).await;
    answer(&ui, &part, "Events", Nav::Events, None, built)
}

async fn live_stream(State(ui): State<Ui>, Query(query): Query<LiveQuery>) -> Response {
    let watch = query.watch.filter(|w| !w.is_empty() && w.len() <= 253);
    match ui.live.join(watch) {
        Ok(rx) => Sse::new(stream(rx))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response(),
        Err(super::live::Full) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "10")],
            format!(
                "{} browsers follow this agent's live updates already (the most it serves)\n",
                super::live::CLIENTS_MAX
            ),
        )
            .into_response(),
    }
}

fn stream(
    rx: tokio::sync::mpsc::Receiver<super::live::Message>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        let message = rx.recv().await?;
        let event = SseEvent::default().event(message.kind).data(message.data);
        Some((Ok(event), rx))
    })
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", html::STYLE_CSS)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", html::LIVE_JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

async fn not_found(State(ui): State<Ui>, uri: axum::http::Uri) -> Response {
    not_found_page(&ui, &format!("nothing is served at {}", uri.path()))
}

fn not_found_page(ui: &Ui, why: &str) -> Response {
    let main = format!(
        "<h1>404</h1><p>{}.</p><p><a href=\"/\">The mesh</a> · <a href=\"/workloads\">workloads</a></p>",
        esc(why)
    );
    (
        StatusCode::NOT_FOUND,
        Html(html::page(
            "Not found",
            Nav::None,
            &agent_name(ui),
            None,
            &main,
        )),
    )
        .into_response()
}
