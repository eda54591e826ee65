//! What the pages read: [`Api`] answers to a read-only identity, every page of a list followed
//! to its end under a bound, as the CLI's `call_pages` does.

use std::sync::Arc;

use crate::dispatch::Api;
use crate::identity::names::{Peer, Role};
use crate::wire::api::{
    ApiError, InstanceView, NodeView, Request, Response, StatusView, WorkloadSummary,
    PAGE_ITEMS_MAX,
};
use crate::wire::cells::CellView;
use crate::wire::events::Event;
use crate::wire::logs::{LogLine, LogQuery, LogStart};

/// Most list pages followed for one answer (a mesh beyond this is shown cut, and says so).
const PAGES_MAX: usize = 20;
/// Most replicas of one workload a page shows.
pub const REPLICAS_SHOWN_MAX: u32 = 5_000;
/// Most workloads whose status the overview and the workloads page ask for.
pub const WORKLOADS_MAX: usize = 500;

/// Why a page could not be built.
#[derive(Debug)]
pub enum SourceError {
    /// The agent is stopping.
    Gone,
    /// The API refused or failed (a missing workload: `NotFound`).
    Api(ApiError),
    /// An answer of another kind than asked.
    Unexpected(&'static str),
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::Gone => f.write_str("the agent is stopping"),
            SourceError::Api(e) => write!(f, "{}", e.message),
            SourceError::Unexpected(what) => write!(f, "unexpected answer to {what}"),
        }
    }
}

/// The identity every UI request is made with.
fn reader() -> Peer {
    Peer::new("web-ui", Role::Reader)
}

/// One request answered as to a read-only client.
pub async fn ask(api: &super::WeakApi, req: Request) -> Result<Response, SourceError> {
    let api: Arc<Api> = api.upgrade().ok_or(SourceError::Gone)?;
    match api.handle_request(req, reader()).await {
        Response::Error(e) => Err(SourceError::Api(e)),
        answer => Ok(answer),
    }
}

/// Every member as this agent sees it, by name.
pub async fn nodes(api: &super::WeakApi) -> Result<Vec<NodeView>, SourceError> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..PAGES_MAX {
        let req = Request::Nodes {
            after: after.take(),
            limit: PAGE_ITEMS_MAX,
        };
        let Response::Nodes { nodes, next_after } = ask(api, req).await? else {
            return Err(SourceError::Unexpected("nodes"));
        };
        all.extend(nodes);
        match next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(all)
}

/// The cells this agent knows.
pub async fn cells(api: &super::WeakApi) -> Result<Vec<CellView>, SourceError> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..PAGES_MAX {
        let req = Request::CellList {
            after: after.take(),
            limit: PAGE_ITEMS_MAX,
        };
        let Response::CellList { cells, next_after } = ask(api, req).await? else {
            return Err(SourceError::Unexpected("cells"));
        };
        all.extend(cells);
        match next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(all)
}

/// The workloads, by name, at most [`WORKLOADS_MAX`] (and whether more exist).
pub async fn workloads(api: &super::WeakApi) -> Result<(Vec<WorkloadSummary>, bool), SourceError> {
    let mut all = Vec::new();
    let mut after = None;
    while all.len() < WORKLOADS_MAX {
        let req = Request::List {
            after: after.take(),
            limit: PAGE_ITEMS_MAX,
        };
        let Response::Workloads {
            workloads,
            next_after,
        } = ask(api, req).await?
        else {
            return Err(SourceError::Unexpected("list"));
        };
        all.extend(workloads);
        match next_after {
            Some(next) => after = Some(next),
            None => {
                all.truncate(WORKLOADS_MAX);
                return Ok((all, false));
            }
        }
    }
    all.truncate(WORKLOADS_MAX);
    Ok((all, true))
}

/// A workload's status, its replicas up to `replicas_max`.
pub async fn status(
    api: &super::WeakApi,
    name: &str,
    replicas_max: u32,
) -> Result<StatusView, SourceError> {
    let mut view: Option<StatusView> = None;
    let mut after = None;
    loop {
        let shown = view.as_ref().map_or(0, |v| v.instances.len() as u32);
        let req = Request::Status {
            name: name.to_string(),
            after,
            limit: PAGE_ITEMS_MAX
                .min(replicas_max.saturating_sub(shown))
                .max(1),
        };
        let Response::Status {
            view: page,
            next_after,
        } = ask(api, req).await?
        else {
            return Err(SourceError::Unexpected("status"));
        };
        let page = *page;
        match view.as_mut() {
            None => view = Some(page),
            Some(v) => v.instances.extend(page.instances),
        }
        let shown = view.as_ref().map_or(0, |v| v.instances.len() as u32);
        match next_after {
            Some(next) if shown < replicas_max => after = Some(next),
            _ => break,
        }
    }
    Ok(view.expect("one page at least"))
}

/// A workload's history answer.
pub async fn history(api: &super::WeakApi, name: &str) -> Result<Response, SourceError> {
    ask(
        api,
        Request::History {
            name: name.to_string(),
        },
    )
    .await
}

/// This agent's events after `after`, at most `limit`.
pub async fn events(
    api: &super::WeakApi,
    after: u64,
    limit: u32,
) -> Result<Vec<Event>, SourceError> {
    match ask(api, Request::Events { after, limit }).await? {
        Response::Events(events) => Ok(events),
        _ => Err(SourceError::Unexpected("events")),
    }
}

/// Every issue of the mesh, at most [`PAGES_MAX`] pages.
pub async fn issues(
    api: &super::WeakApi,
) -> Result<Vec<shoal_core::reconcile::Issue>, SourceError> {
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..PAGES_MAX {
        let req = Request::Issues {
            after: after.take(),
            limit: PAGE_ITEMS_MAX,
        };
        let Response::Issues { issues, next_after } = ask(api, req).await? else {
            return Err(SourceError::Unexpected("issues"));
        };
        all.extend(issues);
        match next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(all)
}

/// The last `lines` lines of a replica's output (at most 64 KiB of text).
pub async fn log_tail(
    api: &super::WeakApi,
    workload: &str,
    replica: u32,
    lines: u32,
) -> Result<Vec<LogLine>, SourceError> {
    let req = Request::Logs {
        workload: workload.to_string(),
        replica: Some(replica),
        previous: false,
        query: LogQuery {
            start: LogStart::Tail(lines),
            since_ms: None,
            bytes_max: 64 * 1024,
            instance: None,
        },
    };
    match ask(api, req).await? {
        Response::Logs(answer) => Ok(answer.page.lines),
        _ => Err(SourceError::Unexpected("logs")),
    }
}

/// Whether an instance holds its node's resources (what capacity bars count).
pub fn holds_resources(instance: &InstanceView) -> bool {
    matches!(
        instance.phase.as_str(),
        "pending" | "pulling" | "starting" | "running" | "stopping"
    )
}
