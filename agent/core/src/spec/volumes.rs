//! `[[volumes]]`: data a replica keeps across its instances. The types, their decoding from the
//! located tree, and their rules (the same on a file and on a typed spec from a peer).
//!
//! What the spec can check alone: names, counts, the shape of paths (absolute, normalized, no
//! `..`) and which kind goes with which runtime. Which host paths an agent lets replicas use
//! (`shoal agent --volume-root`) is the agent's business: [`host_path_allowed`] is the rule,
//! applied where the allow-list is known.

use serde::{Deserialize, Serialize};

use super::decode::choice;
use super::doc::Node;
use super::reader::{boolean, index, string, Ctx, Fields};
use super::validate::{check_text, Report};
use super::{Run, WorkloadSpec, STRING_BYTES_MAX};

/// Most volumes one workload declares.
pub const VOLUMES_MAX: usize = 16;
/// Longest volume name: it becomes a directory name, a docker volume name's tail and
/// `SHOAL_VOLUME_<NAME>`.
pub const VOLUME_NAME_LEN_MAX: usize = 32;
/// Longest docker volume `source`.
pub const VOLUME_SOURCE_LEN_MAX: usize = 128;

/// One volume a replica sees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Its name: lowercase letters, digits and `-`, a letter first; unique in the workload.
    pub name: String,
    /// Where the data lives.
    pub kind: VolumeKind,
    /// The mount point inside a container (required there); `None` for a process, which reads
    /// `SHOAL_VOLUME_<NAME>` instead.
    pub path: Option<String>,
    /// `kind = "host"` only: the absolute, normalized directory on the host, which the agent
    /// must allow (`--volume-root`).
    pub host_path: Option<String>,
    /// `kind = "docker"` only: the engine's named volume; `None`: one per replica,
    /// `shoal-<workload>-<replica>-<name>`, which Shoal creates and `delete --purge-data` removes.
    pub source: Option<String>,
    /// Mounted read-only (containers only).
    pub read_only: bool,
}

/// Where a volume's data lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VolumeKind {
    /// A per-replica directory the agent keeps under its data directory (the default).
    #[default]
    Data,
    /// A directory of the host, under one of the agent's `--volume-root`s.
    Host,
    /// A docker named volume (containers only).
    Docker,
}

impl VolumeKind {
    /// The names the `kind` field takes.
    pub const NAMES: [(&'static str, VolumeKind); 3] = [
        ("data", VolumeKind::Data),
        ("host", VolumeKind::Host),
        ("docker", VolumeKind::Docker),
    ];

    /// `data`, `host` or `docker`.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeKind::Data => "data",
            VolumeKind::Host => "host",
            VolumeKind::Docker => "docker",
        }
    }
}

impl Volume {
    /// The variable that carries the volume's directory to the workload: `SHOAL_VOLUME_<NAME>`,
    /// upper-cased, `-` as `_`.
    pub fn env_name(&self) -> String {
        format!(
            "SHOAL_VOLUME_{}",
            self.name.to_ascii_uppercase().replace('-', "_")
        )
    }

    /// The docker named volume a replica mounts: the spec's `source`, or its own
    /// `shoal-<workload>-<replica>-<name>`. `None` for other kinds.
    pub fn docker_source(&self, workload: &str, replica: u32) -> Option<String> {
        (self.kind == VolumeKind::Docker).then(|| {
            self.source
                .clone()
                .unwrap_or_else(|| format!("shoal-{workload}-{replica}-{}", self.name))
        })
    }
}

impl WorkloadSpec {
    /// The first host path of this spec that none of `roots` allows, with its volume's name.
    pub fn host_path_refused<'a>(&'a self, roots: &[String]) -> Option<(&'a str, &'a str)> {
        self.volumes.iter().find_map(|v| {
            let path = v.host_path.as_deref()?;
            (!host_path_allowed(path, roots)).then_some((v.name.as_str(), path))
        })
    }
}

/// Whether `path` (absolute and normalized, as validation ensures) is one of `roots` or below
/// one, component by component (`/srv/data` allows `/srv/data/db`, not `/srv/database`).
pub fn host_path_allowed(path: &str, roots: &[String]) -> bool {
    roots.iter().any(|root| {
        let root = root.trim_end_matches('/');
        path == root
            || root.is_empty()
            || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
    })
}

/// Why `path` is not an absolute, normalized path, if it is not: no `..`, `.` or empty
/// components, no trailing `/` (except `/` itself).
pub fn check_absolute_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path"));
    }
    if path == "/" {
        return Ok(());
    }
    for part in path[1..].split('/') {
        match part {
            ".." => return Err(format!("{path:?} contains `..`: write the path it means")),
            "." | "" => {
                return Err(format!(
                    "{path:?} is not normalized (no `.`, `//` or trailing `/`)"
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Decodes `volumes`, an array of tables (`[[volumes]]`).
pub(crate) fn decode(ctx: &mut Ctx, path: &str, node: &Node) -> Vec<Volume> {
    let example = "an array of tables such as [[volumes]] with name = \"data\"";
    super::sections::elements(ctx, path, node, example, volume)
}

fn volume(ctx: &mut Ctx, path: &str, node: &Node) -> Option<Volume> {
    let mut f = Fields::open(ctx, path, node)?;
    let name = f.require(ctx, "name").and_then(|(n, p)| string(ctx, &p, n));
    let kind = f
        .get(ctx, "kind")
        .map(|(n, p)| choice(ctx, &p, n, "volume kind", &VolumeKind::NAMES));
    let mut text = |ctx: &mut Ctx, key| f.get(ctx, key).map(|(n, p)| string(ctx, &p, n));
    let mount = text(ctx, "path");
    let host_path = text(ctx, "host_path");
    let source = text(ctx, "source");
    let read_only = f.get(ctx, "read_only").map(|(n, p)| boolean(ctx, &p, n));
    f.finish(ctx, &[]);
    Some(Volume {
        name: name?,
        kind: settle(kind)?.unwrap_or_default(),
        path: settle(mount)?,
        host_path: settle(host_path)?,
        source: settle(source)?,
        read_only: settle(read_only)?.unwrap_or_default(),
    })
}

/// An optional field's value, or `None` (the element is broken) when it was reported.
fn settle<T>(field: Option<Option<T>>) -> Option<Option<T>> {
    field.map_or(Some(None), |v| v.map(Some))
}

/// Every rule on the volumes of `spec`.
pub(crate) fn check(r: &mut Report, spec: &WorkloadSpec) {
    const LIST: &str = "volumes";
    let volumes = &spec.volumes;
    if volumes.len() > VOLUMES_MAX {
        let n = volumes.len();
        r.err(LIST, format!("has {n} volumes; at most {VOLUMES_MAX}"));
        return;
    }
    let container = matches!(spec.run, Run::Container(_));
    for (i, v) in volumes.iter().enumerate() {
        let at = index(LIST, i);
        let field = |name: &str| format!("{at}.{name}");
        if let Err(message) = check_volume_name(&v.name) {
            r.err(field("name"), message);
        } else if let Some(j) = volumes[..i].iter().position(|w| w.name == v.name) {
            let message = format!("volume name {:?} is already used by volumes[{j}]", v.name);
            r.err_related(field("name"), &[&index(LIST, j)], message);
        }
        check_mount(r, v, container, &field("path"), volumes, i);
        check_kind_fields(r, v, container, &at);
        if v.read_only && !container {
            r.err(
                field("read_only"),
                "only containers mount read-only: a process sees the directory with the \
                 permissions it has on the host",
            );
        }
    }
}

/// `path`: required and well formed for a container, unique among the mounts; refused for a
/// process.
fn check_mount(r: &mut Report, v: &Volume, container: bool, p: &str, volumes: &[Volume], i: usize) {
    match (&v.path, container) {
        (None, true) => r.err(
            p,
            "required for a container: where the volume is mounted, e.g. path = \"/data\"",
        ),
        (Some(_), false) => r.err(
            p,
            format!(
                "a process has no mount point: it reads the directory from {} (remove `path`)",
                v.env_name()
            ),
        ),
        (Some(path), true) => {
            check_text(r, p, path, STRING_BYTES_MAX);
            if let Err(message) = check_absolute_path(path) {
                r.err(p, message);
            } else if path == "/" {
                r.err(p, "a volume cannot be mounted over the container's root");
            } else if let Some(j) = volumes[..i]
                .iter()
                .position(|w| w.path.as_deref() == Some(path))
            {
                let message = format!("{path:?} is already the mount point of volumes[{j}]");
                r.err_related(p, &[&index("volumes", j)], message);
            }
        }
        (None, false) => {}
    }
}

/// `host_path` with `kind = "host"` only, `source` with `kind = "docker"` only, and docker
/// volumes for containers only.
fn check_kind_fields(r: &mut Report, v: &Volume, container: bool, at: &str) {
    let kind = v.kind.as_str();
    let host_path = format!("{at}.host_path");
    match (v.kind, &v.host_path) {
        (VolumeKind::Host, None) => r.err(
            &host_path,
            "required with kind = \"host\": the directory on the host",
        ),
        (VolumeKind::Host, Some(path)) => {
            check_text(r, &host_path, path, STRING_BYTES_MAX);
            if let Err(message) = check_absolute_path(path) {
                r.err(&host_path, message);
            }
        }
        (_, Some(_)) => r.err(
            &host_path,
            format!("only with kind = \"host\" (this volume's kind is {kind:?})"),
        ),
        (_, None) => {}
    }
    let source = format!("{at}.source");
    match (v.kind, &v.source) {
        (VolumeKind::Docker, Some(name)) => {
            if let Err(message) = check_source(name) {
                r.err(&source, message);
            }
        }
        (_, Some(_)) => r.err(
            &source,
            format!("only with kind = \"docker\" (this volume's kind is {kind:?})"),
        ),
        _ => {}
    }
    if v.kind == VolumeKind::Docker && !container {
        r.err(
            format!("{at}.kind"),
            "a docker volume needs a [container]; a process can use kind = \"data\" or \"host\"",
        );
    }
}

/// A volume name: lowercase letters, digits and `-`, a letter first, no `-` last, no `--`.
fn check_volume_name(name: &str) -> Result<(), String> {
    super::validate::check_label_name(name, "volume", VOLUME_NAME_LEN_MAX, "\"data\"")
}

/// A docker volume name as the engine accepts it: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
fn check_source(name: &str) -> Result<(), String> {
    if name.len() > VOLUME_SOURCE_LEN_MAX {
        return Err(format!(
            "is {} characters; a docker volume name is at most {VOLUME_SOURCE_LEN_MAX}",
            name.len()
        ));
    }
    let ok = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !ok {
        return Err(format!(
            "{name:?} is not a docker volume name: letters, digits, '_', '.' and '-', starting \
             with a letter or digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_are_allowed_component_by_component() {
        let roots = vec!["/srv/data".to_string(), "/mnt/".to_string()];
        assert!(host_path_allowed("/srv/data", &roots));
        assert!(host_path_allowed("/srv/data/db", &roots));
        assert!(host_path_allowed("/mnt/x", &roots));
        assert!(!host_path_allowed("/srv/database", &roots));
        assert!(!host_path_allowed("/srv", &roots));
        assert!(!host_path_allowed("/srv/data", &[]));
        assert!(host_path_allowed("/anything", &["/".to_string()]));
    }

    #[test]
    fn absolute_paths_are_normalized() {
        assert!(check_absolute_path("/srv/data").is_ok());
        assert!(check_absolute_path("/").is_ok());
        assert!(check_absolute_path("srv/data").is_err());
        assert!(check_absolute_path("/srv/../etc")
            .unwrap_err()
            .contains("`..`"));
        assert!(check_absolute_path("/srv//data").is_err());
        assert!(check_absolute_path("/srv/./data").is_err());
        assert!(check_absolute_path("/srv/data/").is_err());
    }
}
