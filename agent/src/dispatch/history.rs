//! `shoal history` and `shoal rollout undo`: a workload's versions from the store, and a past
//! version's content applied again as a new version (see [`crate::state::mesh::history`]).

use std::sync::Arc;

use shoal_core::spec::{Run, WorkloadSpec};

use shoal_core::rollout::Record;

use crate::node::host::Host;
use crate::state::mesh::history::{self, History, Past};
use crate::state::mesh::node::MeshNode;
use crate::state::mesh::view;
use crate::wire::api::{ApiError, ErrorKind, Response, VersionView};

/// Longest `runs` text in a version view.
const RUNS_CHARS_MAX: usize = 120;

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("no workload named {name:?}; `shoal get` lists them"),
    )
}

/// What the store holds of a workload's versions.
struct Held {
    current: Past,
    past: History,
    paused: bool,
    record: Option<Record>,
}

/// The current version of `name`, its history, whether its rollout is paused and its rollout
/// record, as the store holds them.
async fn read(node: &MeshNode, name: &str) -> Result<Held, ApiError> {
    let key = name.to_string();
    let (current, past, paused, record) = node
        .with_store(move |s| {
            let current = s.get(&key).filter(|e| !e.is_tombstone()).and_then(Past::of);
            let live = |k: String| s.get(&k).and_then(|e| e.body.live());
            let held = live(history::store_name(&key));
            let paused = s
                .get(&history::paused_name(&key))
                .is_some_and(|e| !e.is_tombstone());
            let record = history::decode_record(live(history::rollout_name(&key)));
            (current, History::decode(held), paused, record)
        })
        .await;
    Ok(Held {
        current: current.ok_or_else(|| not_found(name))?,
        past,
        paused,
        record,
    })
}

fn version_view(past: &Past, current: bool) -> VersionView {
    let (replicas, runs) = match view::decode_spec(&past.spec) {
        Ok(spec) => {
            let runs = match &spec.run {
                Run::Container(c) => c.image.clone(),
                Run::Process(p) => p.command.join(" "),
            };
            (spec.replicas, runs.chars().take(RUNS_CHARS_MAX).collect())
        }
        Err(e) => (0, format!("(unreadable: {e})")),
    };
    VersionView {
        version: past.version.clone(),
        at_ms: past.at_ms(),
        by: past.by.clone(),
        replicas,
        runs,
        current,
        outcome: past.outcome.map(|o| o.as_str().to_string()),
        reason: past.reason.clone(),
    }
}

/// `Request::History`, with the answering agent's assessment of the rollout from `host`.
pub(super) async fn versions(
    node: &MeshNode,
    host: Option<&Host>,
    name: String,
) -> Result<Response, ApiError> {
    let held = read(node, &name).await?;
    let mut versions = vec![version_view(&held.current, true)];
    versions.extend(held.past.versions.iter().map(|p| version_view(p, false)));
    let record = held
        .record
        .filter(|r| r.version == held.current.version)
        .map(Box::new);
    let assessment = host
        .and_then(|h| h.snapshot().rollouts.get(&name).cloned())
        .filter(|a| a.version == held.current.version)
        .map(Box::new);
    Ok(Response::History {
        name,
        versions,
        paused: held.paused,
        record,
        assessment,
    })
}

/// `Request::Undo`: applies the content of version `to` (default: the one before the current)
/// as a new version, through the ordinary apply (so the current one goes to the history).
pub(super) async fn undo(
    node: &Arc<MeshNode>,
    name: String,
    to: Option<String>,
    by: String,
    complete: std::collections::BTreeSet<(String, String)>,
) -> Result<Response, ApiError> {
    let Held { current, past, .. } = read(node, &name).await?;
    // `--to` in any form the CLI shows (`2026-12-03 17:20:03.563Z by n1`) or the raw one.
    let to = to
        .map(|text| {
            shoal_core::hlc::Version::parse_any(&text)
                .map(|v| v.to_string())
                .map_err(|e| ApiError::new(ErrorKind::Invalid, e))
        })
        .transpose()?;
    let shown = |raw: &str| shoal_core::hlc::format_version(raw);
    let chosen = match &to {
        None => past.versions.first().ok_or_else(|| {
            ApiError::new(
                ErrorKind::Invalid,
                format!("{name} has no version before the current one to go back to"),
            )
        })?,
        Some(version) if *version == current.version => {
            return Err(ApiError::new(
                ErrorKind::Invalid,
                format!("{} is {name}'s current version already", shown(version)),
            ))
        }
        Some(version) => past
            .versions
            .iter()
            .find(|p| p.version == *version)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorKind::Invalid,
                    format!(
                        "version {} is not in {name}'s history (the last {} are kept; \
                         `shoal history {name}` lists them)",
                        shown(version),
                        history::VERSIONS_MAX
                    ),
                )
            })?,
    };
    let spec: WorkloadSpec = view::decode_spec(&chosen.spec).map_err(|e| {
        ApiError::new(
            ErrorKind::Invalid,
            format!(
                "version {} of {name} does not decode: {e}",
                shown(&chosen.version)
            ),
        )
    })?;
    // Stored raw (history's `-o json` reads it); `shoal history` shows it for people.
    let by = format!("{by}, undo to {}", chosen.version);
    node.clone().handle_apply(vec![spec], by, complete).await
}

/// `Request::Pause`: marks the rollout of `name` paused (a store entry every agent's host loop
/// reads), or tombstones the mark.
pub(super) async fn pause(
    node: &Arc<MeshNode>,
    name: String,
    paused: bool,
    by: String,
) -> Result<Response, ApiError> {
    read(node, &name).await?;
    let marker = history::paused_name(&name);
    if paused {
        node.clone()
            .store_reserved(marker, b"paused".to_vec(), by)
            .await?;
    } else {
        node.clone().delete_reserved(marker, by).await?;
    }
    Ok(Response::Paused { name, paused })
}
