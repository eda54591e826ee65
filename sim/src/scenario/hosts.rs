//! `[[hosts]]`: settings of some hosts by name: what they can run (their capabilities, which
//! they gossip and their runtime enforces) and when they join.

use std::collections::BTreeMap;

use serde::Deserialize;
use shoal::state::mesh::capabilities::{CapabilitiesRecord, RuntimeFact};
use shoal_core::placement::Runtime;

/// What a host can run, as a real agent started with one runtime and `--volume-root`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCaps {
    /// Runs host processes.
    pub processes: bool,
    /// Runs containers.
    pub containers: bool,
    /// The directories host-path volumes may be under (`--volume-root`).
    pub volume_roots: Vec<String>,
}

impl HostCaps {
    /// The record the host's agent gossips (`capabilities`), as `shoal agent` builds it.
    pub fn record(&self) -> CapabilitiesRecord {
        let fact = |kind| RuntimeFact {
            kind,
            version: None,
        };
        let kinds = [
            (self.processes, Runtime::Process),
            (self.containers, Runtime::Container),
        ];
        let runtimes = kinds
            .into_iter()
            .filter(|k| k.0)
            .map(|k| fact(k.1))
            .collect();
        CapabilitiesRecord::this(runtimes, self.volume_roots.clone())
    }
}

/// One host's settings (a host no `[[hosts]]` names: none, as before: it gossips no
/// capabilities, runs anything and joins at the start).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostSettings {
    /// What it can run; `None`: anything, and it says nothing (placement counts it able).
    pub caps: Option<HostCaps>,
    /// It starts down and joins the mesh at this time (sim ms).
    pub join_at_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHosts {
    nodes: Vec<String>,
    runtimes: Option<Vec<String>>,
    volume_roots: Option<Vec<String>>,
    join_at: Option<String>,
}

/// Host indices a `nodes` entry names: `n4`, or `n4-n6` for n4, n5 and n6.
fn indices(entry: &str, n: u32) -> Result<Vec<u32>, String> {
    let one = |name: &str| -> Result<u32, String> {
        let i = name
            .strip_prefix('n')
            .and_then(|d| d.parse::<u32>().ok())
            .filter(|&i| i >= 1)
            .ok_or_else(|| format!("{name:?} is not a host name (n1, n2, ...)"))?;
        if i > n {
            return Err(format!("{name} is not a host of this mesh (n1 to n{n})"));
        }
        Ok(i - 1)
    };
    match entry.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (one(a.trim())?, one(b.trim())?);
            if a > b {
                return Err(format!("{entry:?}: the range runs backwards"));
            }
            Ok((a..=b).collect())
        }
        None => Ok(vec![one(entry.trim())?]),
    }
}

/// Every host's settings from the `[[hosts]]` tables: `(offset, table)` each; `errors` gets
/// each problem with the offset of its table and `ms` parses a duration.
pub(super) fn settings(
    raw: &[(usize, &RawHosts)],
    n: u32,
    mut ms: impl FnMut(usize, &str, &Option<String>) -> Option<u64>,
    mut error: impl FnMut(usize, String),
) -> BTreeMap<u32, HostSettings> {
    let mut out: BTreeMap<u32, HostSettings> = BTreeMap::new();
    for &(off, h) in raw {
        let mut hosts = Vec::new();
        for entry in &h.nodes {
            match indices(entry, n) {
                Ok(list) => hosts.extend(list),
                Err(e) => error(off, format!("hosts.nodes: {e}")),
            }
        }
        if h.nodes.is_empty() {
            error(off, "hosts.nodes: name at least one host".into());
        }
        let caps = match (&h.runtimes, &h.volume_roots) {
            (None, None) => None,
            (runtimes, roots) => {
                let mut caps = HostCaps {
                    processes: runtimes.is_none(),
                    containers: runtimes.is_none(),
                    volume_roots: roots.clone().unwrap_or_default(),
                };
                for r in runtimes.iter().flatten() {
                    match r.as_str() {
                        "process" => caps.processes = true,
                        "container" => caps.containers = true,
                        other => error(
                            off,
                            format!(
                                "hosts.runtimes: {other:?} is not a runtime (process, container)"
                            ),
                        ),
                    }
                }
                for root in &caps.volume_roots {
                    if !root.starts_with('/') {
                        error(
                            off,
                            format!("hosts.volume_roots: {root:?} is not an absolute path"),
                        );
                    }
                }
                Some(caps)
            }
        };
        let join_at_ms = ms(off, "hosts.join_at", &h.join_at);
        if join_at_ms.is_some() && hosts.contains(&0) {
            error(
                off,
                "hosts.join_at: n1 starts the mesh and cannot join later".into(),
            );
        }
        for i in hosts {
            let settings = HostSettings {
                caps: caps.clone(),
                join_at_ms,
            };
            if out.insert(i, settings).is_some() {
                error(
                    off,
                    format!("hosts.nodes: n{} is named by two [[hosts]] tables", i + 1),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ranges() {
        assert_eq!(indices("n2", 6), Ok(vec![1]));
        assert_eq!(indices("n4-n6", 6), Ok(vec![3, 4, 5]));
        assert!(indices("n7", 6).unwrap_err().contains("n1 to n6"));
        assert!(indices("x", 6).is_err());
        assert!(indices("n0", 6).is_err());
        assert!(indices("n5-n3", 6).unwrap_err().contains("backwards"));
    }
}
