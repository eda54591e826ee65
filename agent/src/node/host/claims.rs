//! Names claimed by two live agents at once (`shoal_core::claims`, issue 29): every agent that
//! sees a dispute raises an issue naming both claimants' addresses and generations (gossiped under
//! [`NAME_ISSUE_KEY`], which agents of a build before it never read), records an event and counts
//! it; the hold on this node's own starts is the reconciler's (`ReconcileInput::name_hold`).

use std::collections::BTreeMap;

use shoal_core::reconcile::{issue_id, Issue, IssueKind};

use super::HostLoop;

/// The chitchat key of an agent's name-dispute issues (a JSON list).
pub const NAME_ISSUE_KEY: &str = "name_disputes";
/// Most disputes one agent raises issues for (the rest are counted and logged only).
const DISPUTE_ISSUES_MAX: usize = 32;

/// The dispute issues this agent raised, by disputed name.
#[derive(Default)]
pub(super) struct Claims {
    issues: BTreeMap<String, Issue>,
    /// Some issue was published at the last round.
    published: bool,
}

impl HostLoop {
    /// Raises, updates and clears the issues of the disputes of this round, with their events.
    pub(super) async fn tend_claims(&mut self) {
        let wall = (self.host.clock)();
        let me = self.host.node.name.clone();
        let mut before = std::mem::take(&mut self.claims.issues);
        let mut next = BTreeMap::new();
        for dispute in self.shell.disputes.iter().take(DISPUTE_ISSUES_MAX) {
            let message = dispute.message();
            let issue = match before.remove(&dispute.name) {
                Some(mut issue) => {
                    issue.message = message;
                    issue
                }
                None => {
                    tracing::warn!(name = %dispute.name, %message, "node name disputed");
                    self.host.stats.lock().expect("stats lock").name_disputes += 1;
                    self.host.record("name-disputed", None, message.clone());
                    let kind = IssueKind::NameDisputed;
                    Issue {
                        id: issue_id(kind, None, &format!("{me}/{}", dispute.name)),
                        layer: kind.layer(),
                        kind,
                        replica: None,
                        node: me.clone(),
                        message,
                        held: Some(
                            "an operator must stop the agent that should not run (an approval \
                             cannot choose between them)"
                                .to_string(),
                        ),
                        approved: false,
                        since_ms: wall,
                    }
                }
            };
            next.insert(dispute.name.clone(), issue);
        }
        for name in before.keys() {
            self.host.record(
                "name-dispute-over",
                None,
                format!("only one live agent claims the node name {name:?} again"),
            );
        }
        // Publish when there is or was a dispute (publishing compares with what is gossiped).
        let moved = !before.is_empty() || !next.is_empty() || self.claims.published;
        self.claims.published = !next.is_empty();
        self.claims.issues = next;
        if moved {
            self.publish_claims().await;
        }
    }

    /// Publishes the dispute issues for the API and in gossip (the key deleted when none).
    async fn publish_claims(&self) {
        let issues: Vec<Issue> = self.claims.issues.values().cloned().collect();
        *self.host.name_issues.lock().expect("name issues lock") = issues.clone();
        let chitchat = self.host.node.gossip().chitchat();
        let mut guard = chitchat.lock().await;
        let state = guard.self_node_state();
        if issues.is_empty() {
            if state.get(NAME_ISSUE_KEY).is_some() {
                state.delete(NAME_ISSUE_KEY);
            }
            return;
        }
        let text = serde_json::to_string(&issues).unwrap_or_default();
        if state.get(NAME_ISSUE_KEY) != Some(text.as_str()) {
            state.set(NAME_ISSUE_KEY, &text);
        }
    }
}
