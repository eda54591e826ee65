//! Capacity caps: the most a node may declare, set by a client for the whole mesh.
//!
//! A node declares its own capacity (`--cpu`, `--memory`): a node that declares more than it has
//! draws replicas it cannot run. The operator sets a mesh-wide maximum per node (`shoal caps set`);
//! it travels in the desired-state store under [`STORE_NAME`] (signed and replicated like a spec,
//! so every agent places with the same caps once the entry has spread), and placement uses the
//! smaller of the declared and the allowed capacity. A node whose declaration exceeds a cap
//! raises an issue (`capacity-capped`) in `shoal issues`.

use serde::{Deserialize, Serialize};
use shoal_core::placement::model::Node;
use shoal_core::reconcile::{issue_id, Issue, IssueKind};

/// The store name the caps travel under (not a valid workload name).
pub const STORE_NAME: &str = "shoal:caps";

/// The most one node may declare; `None`: no cap on that resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCaps {
    /// Most CPU, in thousandths of a core.
    pub cpu_millis_max: Option<u64>,
    /// Most memory, in bytes.
    pub memory_bytes_max: Option<u64>,
}

impl NodeCaps {
    /// Whether no resource is capped.
    pub fn is_empty(&self) -> bool {
        self.cpu_millis_max.is_none() && self.memory_bytes_max.is_none()
    }

    /// The stored form (JSON: small, and readable in `shoal get`-like tooling).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("caps always encode")
    }

    /// Decodes the stored form; `None` for anything else (an unreadable entry caps nothing, and
    /// [`Self::from_store`]'s caller logs it).
    pub fn decode(bytes: &[u8]) -> Option<NodeCaps> {
        if bytes.len() > 1024 {
            return None;
        }
        serde_json::from_slice(bytes).ok()
    }

    /// The caps held in a store entry body, if any.
    pub fn from_body(body: Option<&[u8]>) -> NodeCaps {
        body.and_then(NodeCaps::decode).unwrap_or_default()
    }

    /// Lowers `node`'s capacity to the caps; true when it had to.
    pub fn clamp(&self, node: &mut Node) -> bool {
        let mut capped = false;
        if let Some(max) = self.cpu_millis_max {
            if node.capacity.cpu_millis > max {
                node.capacity.cpu_millis = max;
                capped = true;
            }
        }
        if let Some(max) = self.memory_bytes_max {
            if node.capacity.memory_bytes > max {
                node.capacity.memory_bytes = max;
                capped = true;
            }
        }
        capped
    }

    /// One `capacity-capped` issue per node whose declaration (`declared`: name, cpu millis,
    /// memory bytes, of the live members) exceeds a cap.
    pub fn issues<'a>(
        &self,
        declared: impl IntoIterator<Item = (&'a str, u64, u64)>,
        now_ms: u64,
    ) -> Vec<Issue> {
        let mut issues = Vec::new();
        for (name, cpu_millis, memory_bytes) in declared {
            let mut over = Vec::new();
            if let Some(max) = self.cpu_millis_max.filter(|&m| cpu_millis > m) {
                over.push(format!("cpu {cpu_millis}m over the cap of {max}m"));
            }
            if let Some(max) = self.memory_bytes_max.filter(|&m| memory_bytes > m) {
                over.push(format!("memory {memory_bytes} bytes over the cap of {max}"));
            }
            if over.is_empty() {
                continue;
            }
            let kind = IssueKind::CapacityCapped;
            issues.push(Issue {
                id: issue_id(kind, None, name),
                layer: kind.layer(),
                kind,
                replica: None,
                node: name.to_string(),
                message: format!(
                    "{name} declares {}: placement counts the cap. Fix the agent's --cpu/--memory, \
                     or raise the cap (`shoal caps set`)",
                    over.join(", ")
                ),
                held: None,
                approved: false,
                since_ms: now_ms,
            });
        }
        issues
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_core::resources::Resources;

    #[test]
    fn the_smaller_of_declared_and_allowed_counts() {
        let caps = NodeCaps {
            cpu_millis_max: Some(8000),
            memory_bytes_max: None,
        };
        let mut node = Node {
            id: "n1".into(),
            capacity: Resources::new(999_999_000, 1 << 50),
            labels: Default::default(),
            zone: String::new(),
            draining: false,
            down: false,
            caps: None,
        };
        assert!(caps.clamp(&mut node));
        assert_eq!(node.capacity, Resources::new(8000, 1 << 50));
        assert!(!caps.clamp(&mut node));
        assert_eq!(NodeCaps::decode(&caps.encode()), Some(caps));
        assert_eq!(NodeCaps::from_body(Some(b"not json")), NodeCaps::default());
    }
}
