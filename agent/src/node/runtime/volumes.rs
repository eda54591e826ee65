//! Volumes on this node: where each replica's data volumes live, what an instance is given for
//! each of its spec's `[[volumes]]`, and the purge that `shoal delete --purge-data` asks for.
//!
//! Data volumes are directories `<data_dir>/volumes/<workload>/<replica>/<name>`, created 0700
//! at the first start of the replica here and never removed by an instance's exit, a
//! replacement or an agent restart: only a purge removes them. Host paths are used as they are
//! (the agent's `--volume-root` allow-list is checked before: at apply by the agent that takes
//! it, and by the reconciler on the node that would start it). Docker named volumes are the
//! engine's (`docker/volumes`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::core::instance::ReplicaId;
use crate::core::spec::{Volume, VolumeKind, WorkloadSpec};
use crate::node::runtime::{RuntimeError, StartRequest};

/// The variable that carries a replica's first data volume (`SHOAL_DATA_DIR`).
pub const DATA_DIR_ENV: &str = "SHOAL_DATA_DIR";

/// Where a node keeps its replicas' data volumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeDirs {
    root: PathBuf,
}

/// One of an instance's volumes, resolved on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mounted {
    /// The spec's volume.
    pub volume: Volume,
    /// Where its data is.
    pub source: Source,
}

/// Where a resolved volume's data is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A directory of the host: a data volume's, or a host path.
    Dir(PathBuf),
    /// A docker named volume.
    Named {
        /// The engine's volume name.
        name: String,
        /// Shoal's own per-replica volume (no `source` in the spec): labelled, and removed by
        /// a purge.
        owned: bool,
    },
}

impl VolumeDirs {
    /// The volumes of an agent whose data directory is `data_dir`: under `data_dir/volumes`.
    pub fn new(data_dir: &Path) -> VolumeDirs {
        VolumeDirs {
            root: data_dir.join("volumes"),
        }
    }

    /// The directory of a replica's data volume.
    pub fn data_dir(&self, replica: &ReplicaId, name: &str) -> PathBuf {
        self.workload_dir(&replica.workload)
            .join(replica.replica.to_string())
            .join(name)
    }

    /// Where every workload's data volumes are (`DATA/volumes`).
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// Everything a workload keeps on this node.
    pub fn workload_dir(&self, workload: &str) -> PathBuf {
        self.root.join(workload)
    }

    /// Resolves a start's volumes: creates the replica's data directories (0700) that do not
    /// exist yet, and checks that its host paths are directories. Docker volumes are resolved
    /// by name only (the engine has them).
    pub fn prepare(&self, request: &StartRequest) -> Result<Vec<Mounted>, RuntimeError> {
        let replica = &request.replica;
        let mut out = Vec::with_capacity(request.spec.volumes.len());
        for volume in &request.spec.volumes {
            let source = match volume.kind {
                VolumeKind::Data => {
                    let dir = self.data_dir(replica, &volume.name);
                    create_private_dir(&dir)?;
                    Source::Dir(dir)
                }
                VolumeKind::Host => {
                    let path = PathBuf::from(volume.host_path.as_deref().unwrap_or_default());
                    let resolved = beneath_roots(&path, &request.volume_roots).map_err(|why| {
                        RuntimeError::StartFailed {
                            reason: format!("volume {:?}: {why}", volume.name),
                        }
                    })?;
                    Source::Dir(resolved)
                }
                VolumeKind::Docker => Source::Named {
                    name: volume
                        .docker_source(&replica.workload, replica.replica)
                        .unwrap_or_default(),
                    owned: volume.source.is_none(),
                },
            };
            out.push(Mounted {
                volume: volume.clone(),
                source,
            });
        }
        Ok(out)
    }

    /// Why the replica's data is not here: the first of its data directories that is missing.
    pub fn missing(&self, replica: &ReplicaId, spec: &WorkloadSpec) -> Option<String> {
        spec.volumes
            .iter()
            .filter(|v| v.kind == VolumeKind::Data)
            .map(|v| (v, self.data_dir(replica, &v.name)))
            .find(|(_, dir)| !dir.is_dir())
            .map(|(v, dir)| {
                format!(
                    "its volume {:?} ({}) is missing here (removed, or a new disk)",
                    v.name,
                    dir.display()
                )
            })
    }

    /// Removes every data volume of `workload` on this node. Nothing there is fine.
    pub fn purge(&self, workload: &str) -> Result<(), RuntimeError> {
        let dir = self.workload_dir(workload);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RuntimeError::io(format!("removing {}", dir.display()), e)),
        }
    }
}

/// Creates `dir` and its parents; the volume's own directory is 0700 (its parents too, when
/// created here: nobody but the agent's user needs to walk them).
fn create_private_dir(dir: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| RuntimeError::io(format!("creating {}", dir.display()), e))
}

/// The variables an instance gets for its volumes: `SHOAL_VOLUME_<NAME>` for each, the
/// directory a process uses or the mount point in a container, and `SHOAL_DATA_DIR`, the first
/// data volume's. `in_container` picks which.
pub fn volume_env(mounts: &[Mounted], in_container: bool) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for m in mounts {
        let seen = match (&m.source, in_container) {
            (_, true) => m.volume.path.clone().unwrap_or_default(),
            (Source::Dir(dir), false) => dir.display().to_string(),
            // Refused at validation: a docker volume needs a container.
            (Source::Named { .. }, false) => continue,
        };
        if m.volume.kind == VolumeKind::Data && !env.contains_key(DATA_DIR_ENV) {
            env.insert(DATA_DIR_ENV.to_string(), seen.clone());
        }
        env.insert(m.volume.env_name(), seen);
    }
    env
}

/// `path` with every link resolved, when it is a directory beneath one of `roots` (each resolved
/// too); why not otherwise. Checked at every start, not only at apply: a directory inside a root
/// replaced by a link out of it (to `/etc`) is refused, and the instance is given the resolved
/// path, so a link swapped in after this check does not redirect it.
fn beneath_roots(path: &Path, roots: &[String]) -> Result<PathBuf, String> {
    let resolved = std::fs::canonicalize(path).map_err(|e| {
        format!(
            "host path {} cannot be resolved on this host: {e}",
            path.display()
        )
    })?;
    if !resolved.is_dir() {
        return Err(format!(
            "host path {} is not a directory on this host",
            path.display()
        ));
    }
    let resolved_roots: Vec<String> = roots
        .iter()
        .filter_map(|r| std::fs::canonicalize(r).ok())
        .filter_map(|r| r.to_str().map(str::to_string))
        .collect();
    let inside = resolved
        .to_str()
        .is_some_and(|p| crate::core::spec::host_path_allowed(p, &resolved_roots));
    if inside {
        return Ok(resolved);
    }
    let allowed = match roots {
        [] => "this node allows no host path (no --volume-root)".to_string(),
        roots => format!(
            "outside every --volume-root of this node ({})",
            roots.join(", ")
        ),
    };
    Err(format!(
        "host path {} resolves to {}, {allowed}",
        path.display(),
        resolved.display()
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::spec::WorkloadSpec;

    fn request(toml: &str) -> StartRequest {
        let text = format!(
            "name = \"db\"\n[process]\ncommand = [\"db\"]\n[resources]\ncpu = \"1\"\n\
             memory = \"64Mi\"\n{toml}"
        );
        let spec = WorkloadSpec::from_toml_str(&text, "db.toml").expect("valid spec");
        StartRequest::new(ReplicaId::new("db", 2), Arc::new(spec), "v1", "n1")
    }

    #[test]
    fn data_volumes_are_private_directories_that_outlive_a_purge_of_another_workload() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = VolumeDirs::new(tmp.path());
        let req = request(
            "[[volumes]]\nname = \"data\"\n[[volumes]]\nname = \"wal\"\n\
             [[volumes]]\nname = \"etc\"\nkind = \"host\"\nhost_path = \"/tmp\"\n",
        );
        let req = StartRequest {
            volume_roots: Arc::from(vec!["/tmp".to_string()]),
            ..req
        };
        let mounts = dirs.prepare(&req).unwrap();
        let data = tmp.path().join("volumes/db/2/data");
        assert_eq!(mounts[0].source, Source::Dir(data.clone()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&data).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let env = volume_env(&mounts, false);
        assert_eq!(env[DATA_DIR_ENV], data.display().to_string());
        assert_eq!(env["SHOAL_VOLUME_DATA"], data.display().to_string());
        assert!(env["SHOAL_VOLUME_WAL"].ends_with("volumes/db/2/wal"));
        assert_eq!(env["SHOAL_VOLUME_ETC"], "/tmp");
        dirs.purge("other").unwrap();
        assert!(data.is_dir());
        dirs.purge("db").unwrap();
        assert!(!tmp.path().join("volumes/db").exists());
        dirs.purge("db").unwrap();
    }

    #[test]
    fn a_host_path_is_resolved_at_each_start_and_refused_when_a_link_leads_out_of_its_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let dirs = VolumeDirs::new(tmp.path());
        let start = |path: &Path, roots: &[&Path]| {
            let req = request(&format!(
                "[[volumes]]\nname = \"h\"\nkind = \"host\"\nhost_path = {:?}\n",
                path.to_str().unwrap()
            ));
            let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
            let req = StartRequest {
                volume_roots: Arc::from(roots),
                ..req
            };
            dirs.prepare(&req)
        };
        let real = std::fs::canonicalize(root.join("real/inner")).unwrap();
        // A link that stays inside the root: the instance gets the resolved directory.
        let mounts = start(&root.join("alias/inner"), &[&root]).unwrap();
        assert_eq!(mounts[0].source, Source::Dir(real));
        // A link out of the root (the /etc of the probe): refused, naming where it leads.
        let err = start(&root.join("escape"), &[&root])
            .unwrap_err()
            .to_string();
        let resolved = std::fs::canonicalize(&outside).unwrap();
        assert!(err.contains("volume \"h\""), "{err}");
        assert!(err.contains(&resolved.display().to_string()), "{err}");
        assert!(err.contains("outside every --volume-root"), "{err}");
        // No root on this node: no host path at all.
        let err = start(&root.join("real"), &[]).unwrap_err().to_string();
        assert!(err.contains("no --volume-root"), "{err}");
        // A root that is itself a link is resolved too.
        std::os::unix::fs::symlink(&root, tmp.path().join("root-link")).unwrap();
        assert!(start(&root.join("real"), &[&tmp.path().join("root-link")]).is_ok());
    }

    #[test]
    fn a_missing_host_path_fails_the_start() {
        let tmp = tempfile::tempdir().unwrap();
        let req = request(
            "[[volumes]]\nname = \"x\"\nkind = \"host\"\nhost_path = \"/nonexistent/shoal\"\n",
        );
        let err = VolumeDirs::new(tmp.path()).prepare(&req).unwrap_err();
        assert!(err.to_string().contains("volume \"x\""), "{err}");
    }
}
