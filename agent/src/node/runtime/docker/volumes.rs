//! Volumes of containers: the mounts of the create body, the per-replica named volumes Shoal
//! creates (labelled, so a purge finds them), and the purge.
//!
//! A data volume or a host path is a bind mount of a host directory (`runtime/volumes.rs`); a
//! docker volume is a `type=volume` mount. A named volume without `source` in the spec is the
//! replica's own, `shoal-<workload>-<replica>-<name>`, created before the container with the
//! labels `shoal.managed`, `shoal.workload` and `shoal.node`; a `source` the spec names is the
//! operator's (created by the engine on first use if missing, never removed by Shoal).

use std::collections::HashMap;

use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::ListVolumesOptionsBuilder;
use bollard::Docker;

use super::body::{engine_error, status_of, LABEL_MANAGED, LABEL_NODE, LABEL_WORKLOAD};
use crate::core::instance::ReplicaId;
use crate::core::spec::{VolumeKind, WorkloadSpec};
use crate::node::runtime::volumes::{Mounted, Source};
use crate::node::runtime::RuntimeError;

/// Creates the replica's own named volumes, labelled for the purge (creating one that exists
/// changes nothing).
pub(crate) async fn create_owned(
    docker: &Docker,
    node: &str,
    workload: &str,
    mounts: &[Mounted],
) -> Result<(), RuntimeError> {
    for m in mounts {
        let Source::Named { name, owned: true } = &m.source else {
            continue;
        };
        let labels = HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_WORKLOAD.to_string(), workload.to_string()),
            (LABEL_NODE.to_string(), node.to_string()),
        ]);
        let request = VolumeCreateRequest {
            name: Some(name.clone()),
            labels: Some(labels),
            ..VolumeCreateRequest::default()
        };
        docker
            .create_volume(request)
            .await
            .map_err(|e| engine_error("create volume", e))?;
    }
    Ok(())
}

/// Gives the replica's own named volumes (those Shoal created) to `run_as`, as its data
/// directories are: an empty volume at a path the image lacks is root's, which a container that
/// is not root could not write. Only where the engine's mount point is on this host (a local
/// engine); its parents are left as they are.
pub(crate) async fn give_owned(
    docker: &Docker,
    mounts: &[Mounted],
    run_as: &crate::node::runtime::users::RunAs,
) -> Result<(), RuntimeError> {
    for m in mounts {
        let Source::Named { name, owned: true } = &m.source else {
            continue;
        };
        let volume = docker
            .inspect_volume(name)
            .await
            .map_err(|e| engine_error("inspect volume", e))?;
        let dir = std::path::Path::new(&volume.mountpoint);
        if dir.is_dir() {
            crate::node::runtime::process::give(dir, dir, run_as)?;
        }
    }
    Ok(())
}

/// Why the replica's own named volumes are not all here: the first the engine does not have
/// (404). Another engine error says nothing.
pub(crate) async fn owned_missing(
    docker: &Docker,
    replica: &ReplicaId,
    spec: &WorkloadSpec,
) -> Option<String> {
    let owned = spec
        .volumes
        .iter()
        .filter(|v| v.kind == VolumeKind::Docker && v.source.is_none());
    for v in owned {
        let name = v.docker_source(&replica.workload, replica.replica)?;
        match docker.inspect_volume(&name).await {
            Err(e) if status_of(&e) == Some(404) => {
                return Some(format!(
                    "its docker volume {name:?} (volume {:?}) is missing here (removed, or a new engine)",
                    v.name
                ))
            }
            _ => {}
        }
    }
    None
}

/// Removes the named volumes Shoal created for `workload`'s replicas on this node, and first the
/// standby containers of its replicas that mount them.
pub(crate) async fn purge(docker: &Docker, node: &str, workload: &str) -> Result<(), RuntimeError> {
    // The replica's standby containers mount its volumes: without them first, the engine refuses
    // (409, in use) until `list` removes them as orphans.
    super::standby::remove_workload(docker, node, workload).await;
    let labels = vec![
        format!("{LABEL_MANAGED}=true"),
        format!("{LABEL_NODE}={node}"),
        format!("{LABEL_WORKLOAD}={workload}"),
    ];
    let filters = HashMap::from([("label".to_string(), labels)]);
    let options = ListVolumesOptionsBuilder::new().filters(&filters).build();
    let listed = docker
        .list_volumes(Some(options))
        .await
        .map_err(|e| engine_error("list volumes", e))?;
    for volume in listed.volumes.unwrap_or_default() {
        match docker
            .remove_volume(
                &volume.name,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await
        {
            Ok(()) => {}
            Err(e) if status_of(&e) == Some(404) => {}
            Err(e) => return Err(engine_error("remove volume", e)),
        }
    }
    Ok(())
}
