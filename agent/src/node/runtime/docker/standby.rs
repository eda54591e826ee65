//! Standby containers: beside each replica's container, a created (never started) copy of it, so
//! that the restart after a crash only starts a container instead of creating one first.
//!
//! Why: after a crash the replacement's start races the engine's cleanup of the dead container
//! (its network, then its root filesystem) and waits for it when it loses. Started without a
//! create first, the replacement mostly wins: on an idle engine it reaches its `start` 90 to 150 ms
//! sooner than one created after the `die` (docs/measurements.md, "Crash restart").
//!
//! A standby is exactly the container `start` would create, plus the label `shoal.standby` whose
//! value is a hash of that create body (spec version, environment, command, limits, ports, labels:
//! everything). A start uses it only for a request whose body hashes the same and whose image
//! reference still names the image the standby was created from; otherwise it creates as usual.
//! Standbys are not instances: [`sort_out`] sets aside the containers in state `created` with the
//! label (once started, a container is an instance like any other; the label stays as a trace).
//! None is made for exclusive replicas (each of their starts carries its own fencing token) nor
//! for containers publishing a fixed host port (the dead container holds it until the engine's
//! cleanup, which the start of a standby would race).
//!
//! Lifecycle: made in the background after each successful start of a replica (off the restart
//! path); started by the next start of that replica; removed by `list` once a newer standby of
//! its replica exists (a spec update makes one) or, after [`ORPHAN_GRACE_S`], when no container
//! of its replica is left (deleted, moved away); removed by a purge of its workload's data too (it
//! mounts the replica's named volumes, which the engine does not remove while it exists). They
//! live in the engine, found by label, so a restarted agent uses and removes the ones it finds
//! like its other containers. Cost: one created container per replica (its writable layer, no
//! process, no memory) and one create of engine work after each start.

use std::collections::{BTreeSet, HashMap};

use bollard::models::{ContainerCreateBody, ContainerSummary, ContainerSummaryStateEnum};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;

use super::body::{node_filters, replica_of, LABEL_REPLICA, LABEL_WORKLOAD};
use crate::core::instance::ReplicaId;

/// Marks a standby; the value is the hash of its create body ([`body_hash`]).
pub const LABEL_STANDBY: &str = "shoal.standby";

/// How long a standby whose replica has no container left is kept (a start may be using it).
pub(crate) const ORPHAN_GRACE_S: i64 = 30;

/// The hash of a create body, over its JSON with sorted keys (the maps in it are hash maps).
pub(crate) fn body_hash(body: &ContainerCreateBody) -> String {
    let canonical = serde_json::to_value(body)
        .map(|v| v.to_string())
        .unwrap_or_default();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(canonical.as_bytes()))
}

/// A standby of `replica` made for a body hashing to `hash`, if one exists and `image` still names
/// the image it was created from (one that does not is removed). Any engine error means none:
/// the start creates a container as usual.
pub(crate) async fn find(
    docker: &Docker,
    node: &str,
    replica: &ReplicaId,
    hash: &str,
    image: &str,
) -> Option<String> {
    let mut filters = node_filters(node);
    let labels = filters
        .get_mut("label")
        .expect("node filters select by label");
    labels.push(format!("{LABEL_WORKLOAD}={}", replica.workload));
    labels.push(format!("{LABEL_REPLICA}={}", replica.replica));
    labels.push(format!("{LABEL_STANDBY}={hash}"));
    filters.insert("status".into(), vec!["created".into()]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let listed = docker.list_containers(Some(options)).await.ok()?;
    let standby = listed.into_iter().max_by_key(|c| c.created)?;
    let id = standby.id?;
    let current = docker.inspect_image(image).await.ok()?.id;
    if current.is_none() || standby.image_id != current {
        remove(docker, &id).await; // the tag was moved to another image since
        return None;
    }
    Some(id)
}

/// Creates a standby from `body` (the body a start just used) under `name`.
pub(crate) async fn create(
    docker: &Docker,
    name: &str,
    mut body: ContainerCreateBody,
    hash: String,
) {
    body.labels
        .get_or_insert_with(HashMap::new)
        .insert(LABEL_STANDBY.to_string(), hash);
    let options = CreateContainerOptionsBuilder::new().name(name).build();
    if let Err(e) = docker.create_container(Some(options), body).await {
        tracing::debug!(name, error = %e, "no standby container: the next restart creates one");
    }
}

/// Removes every standby of `workload` on `node` (its data is being purged: a standby mounts the
/// replica's named volumes, which the engine refuses to remove while a container uses them).
pub(crate) async fn remove_workload(docker: &Docker, node: &str, workload: &str) {
    let mut filters = node_filters(node);
    let labels = filters
        .get_mut("label")
        .expect("node filters select by label");
    labels.push(format!("{LABEL_WORKLOAD}={workload}"));
    labels.push(LABEL_STANDBY.to_string());
    filters.insert("status".into(), vec!["created".into()]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(listed) = docker.list_containers(Some(options)).await else {
        return; // the volume removal that follows reports the engine's error
    };
    for id in listed.into_iter().filter_map(|c| c.id) {
        remove(docker, &id).await;
    }
}

/// Removes a standby (never started, so no force needed); an error leaves it to the next `list`.
pub(crate) async fn remove(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::new().v(true).build();
    if let Err(e) = docker.remove_container(id, Some(options)).await {
        tracing::debug!(id, error = %e, "standby container not removed yet");
    }
}

/// The standbys among a listing of this node's containers, and those of them to remove: all but
/// the newest of each replica, and any whose replica has no other container, once
/// [`ORPHAN_GRACE_S`] old (`now_s`: seconds since the epoch, as the engine's `created`).
pub(crate) fn sort_out(
    summaries: &[ContainerSummary],
    now_s: i64,
) -> (BTreeSet<String>, Vec<String>) {
    let mut standbys: HashMap<ReplicaId, Vec<(i64, String)>> = HashMap::new();
    let mut occupied = BTreeSet::new();
    for summary in summaries {
        let (Some(id), Some(labels)) = (&summary.id, &summary.labels) else {
            continue;
        };
        let Some((replica, _)) = replica_of(labels) else {
            continue;
        };
        match is_standby(summary) {
            true => standbys
                .entry(replica)
                .or_default()
                .push((summary.created.unwrap_or_default(), id.clone())),
            false => {
                occupied.insert(replica);
            }
        }
    }
    let mut ids = BTreeSet::new();
    let mut stale = Vec::new();
    for (replica, mut made) in standbys {
        made.sort();
        let newest = made.last().cloned();
        for (created, id) in made {
            ids.insert(id.clone());
            let superseded = Some(&(created, id.clone())) != newest.as_ref();
            let orphan = !occupied.contains(&replica) && now_s - created >= ORPHAN_GRACE_S;
            if superseded || orphan {
                stale.push(id);
            }
        }
    }
    stale.sort();
    (ids, stale)
}

/// Created with the standby label and never started.
fn is_standby(summary: &ContainerSummary) -> bool {
    summary.state == Some(ContainerSummaryStateEnum::CREATED)
        && summary
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_STANDBY))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(
        id: &str,
        replica: u32,
        state: ContainerSummaryStateEnum,
        created: i64,
    ) -> ContainerSummary {
        let mut labels = HashMap::from([
            (LABEL_WORKLOAD.to_string(), "web".to_string()),
            (LABEL_REPLICA.to_string(), replica.to_string()),
        ]);
        if id.starts_with('s') {
            labels.insert(LABEL_STANDBY.to_string(), "h".to_string());
        }
        ContainerSummary {
            id: Some(id.into()),
            labels: Some(labels),
            state: Some(state),
            created: Some(created),
            ..ContainerSummary::default()
        }
    }

    #[test]
    fn standbys_are_set_aside_and_the_superseded_and_orphaned_removed() {
        use ContainerSummaryStateEnum::{CREATED, EXITED, RUNNING};
        let now = 1_000;
        let listing = [
            container("a0", 0, RUNNING, 10),
            container("s0-old", 0, CREATED, 20),
            container("s0-new", 0, CREATED, 30),
            container("s1-orphan", 1, CREATED, now - ORPHAN_GRACE_S),
            container("s2-young", 2, CREATED, now - 1),
            container("a3", 3, EXITED, 10),
            container("s3", 3, CREATED, 20),
            // Started once: an instance, whatever its label says.
            container("s4-used", 4, RUNNING, 20),
        ];
        let (standbys, stale) = sort_out(&listing, now);
        let expected = ["s0-new", "s0-old", "s1-orphan", "s2-young", "s3"];
        assert_eq!(standbys, expected.iter().map(|s| s.to_string()).collect());
        assert_eq!(stale, vec!["s0-old".to_string(), "s1-orphan".to_string()]);
    }

    #[test]
    fn the_body_hash_ignores_map_order() {
        let body = |pairs: &[(&str, &str)]| ContainerCreateBody {
            labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ContainerCreateBody::default()
        };
        let many: Vec<(String, String)> =
            (0..32).map(|i| (format!("k{i}"), i.to_string())).collect();
        let forward: Vec<(&str, &str)> =
            many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let backward: Vec<(&str, &str)> = forward.iter().rev().copied().collect();
        assert_eq!(body_hash(&body(&forward)), body_hash(&body(&backward)));
        assert_ne!(body_hash(&body(&forward)), body_hash(&body(&forward[1..])));
    }
}
