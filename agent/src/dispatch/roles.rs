//! Which role may make which API request.
//!
//! - anyone with a Shoal certificate ([`Role::Reader`] and up) reads: get, status, nodes, issues,
//!   events, the cells list, logs;
//! - a [`Role::Client`] also writes the desired state and steers the hosts: apply, delete,
//!   approve, drain, exec (running a command in a replica is a write: it can change anything);
//! - a [`Role::Node`] makes the agent-to-agent requests (replication, anti-entropy, clocks, the
//!   failure detector's question, the cell exchange, a `logs` or an `exec` forwarded to the
//!   node running the replica) and forwards an operator's approve or drain
//!   to the node it concerns. A node does not apply or delete: a write starts with a client.

use crate::identity::pki::Role;
use crate::wire::api::Request;

/// What a request needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Any role.
    Read,
    /// A client with write access.
    Write,
    /// A client with write access, or a node forwarding one's request.
    WriteOrForward,
    /// A node.
    Agent,
}

/// What `req` needs of its caller.
pub fn needs(req: &Request) -> Needs {
    match req {
        Request::Get { .. }
        | Request::List { .. }
        | Request::Nodes { .. }
        | Request::Status { .. }
        | Request::Issues { .. }
        | Request::Events { .. }
        | Request::CellList { .. }
        | Request::UpgradeStatus { .. } => Needs::Read,
        Request::Apply { .. }
        | Request::Delete { .. }
        | Request::PublishCrl { .. }
        | Request::SetCaps { .. }
        | Request::UpgradeHold { .. } => Needs::Write,
        Request::Caps | Request::History { .. } | Request::Endpoints { .. } => Needs::Read,
        Request::Logs { .. } => Needs::Read,
        Request::Undo { .. } | Request::Pause { .. } | Request::Restart { .. } => Needs::Write,
        Request::Approve { .. } | Request::Drain { .. } => Needs::WriteOrForward,
        Request::Exec { .. } | Request::ExecIo { .. } => Needs::Write,
        Request::ExecHere { .. } | Request::ExecIoHere { .. } => Needs::Agent,
        Request::Replicate { .. }
        | Request::Digest
        | Request::Pull { .. }
        | Request::Clock
        | Request::Hears
        | Request::Cells { .. }
        | Request::CellsPush { .. }
        | Request::CellStatus { .. }
        | Request::CellCopies { .. }
        | Request::NameUsed { .. }
        | Request::LogsHere { .. }
        | Request::RestartHere { .. } => Needs::Agent,
    }
}

/// Whether `role` may make a request that needs `needs`.
pub fn allows(role: Role, needs: Needs) -> bool {
    match needs {
        Needs::Read => true,
        Needs::Write => role == Role::Client,
        Needs::WriteOrForward => matches!(role, Role::Client | Role::Node),
        Needs::Agent => role == Role::Node,
    }
}

/// The sentence a refused caller gets.
pub fn refusal(role: Role, needs: Needs, kind: &str) -> String {
    let who = match needs {
        Needs::Read => "any certificate",
        Needs::Write => "a client certificate with write access",
        Needs::WriteOrForward => "a client certificate with write access (or an agent forwarding)",
        Needs::Agent => "an agent's node certificate",
    };
    format!(
        "{kind} needs {who}; yours is a {role} certificate{}",
        if role == Role::Reader {
            " (read-only: issue one with --role client to write)"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_gets_exactly_its_requests() {
        let read = Request::Nodes {
            after: None,
            limit: 1,
        };
        let write = Request::Apply { specs: Vec::new() };
        let forward = Request::Drain {
            node: "n1".into(),
            draining: true,
            by: None,
        };
        let agent = Request::Replicate {
            entries: Vec::new(),
        };
        let table = [
            (Role::Reader, [true, false, false, false]),
            (Role::Client, [true, true, true, false]),
            (Role::Node, [true, false, true, true]),
        ];
        for (role, expect) in table {
            let got = [&read, &write, &forward, &agent].map(|r| allows(role, needs(r)));
            assert_eq!(got, expect, "{role}");
        }
        assert!(refusal(Role::Reader, Needs::Write, "apply").contains("read-only"));
        // Logs are a read like status; the forwarded read is agent to agent.
        let query = crate::node::runtime::logs::LogQuery {
            start: crate::node::runtime::logs::LogStart::Tail(1),
            since_ms: None,
            bytes_max: 1,
            instance: None,
        };
        let logs = Request::Logs {
            workload: "w".into(),
            replica: None,
            previous: false,
            query: query.clone(),
        };
        assert_eq!(needs(&logs), Needs::Read);
        let here = Request::LogsHere {
            replica: shoal_core::instance::ReplicaId::new("w", 0),
            previous: false,
            query,
        };
        assert_eq!(needs(&here), Needs::Agent);
        // A restart changes what runs: a read-only client is refused; the forwarded one is
        // agent to agent.
        let restart = Request::Restart {
            workload: "w".into(),
            replica: Some(0),
        };
        assert_eq!(needs(&restart), Needs::Write);
        assert!(!allows(Role::Reader, needs(&restart)));
        let here = Request::RestartHere {
            replica: shoal_core::instance::ReplicaId::new("w", 0),
            by: "c".into(),
        };
        assert_eq!(needs(&here), Needs::Agent);
        // Exec runs anything in a replica: a write, never a reader's.
        let exec = Request::Exec {
            workload: "w".into(),
            replica: 0,
            command: vec!["sh".into()],
            stdin: false,
            tty: None,
        };
        assert!(!allows(Role::Reader, needs(&exec)));
        assert!(allows(Role::Client, needs(&exec)));
        let io = Request::ExecIo {
            node: "n1".into(),
            session: 1,
            io: Default::default(),
        };
        assert!(!allows(Role::Reader, needs(&io)));
        let here = Request::ExecIoHere {
            session: 1,
            io: Default::default(),
            by: "alice".into(),
        };
        assert_eq!(needs(&here), Needs::Agent);
    }
}
