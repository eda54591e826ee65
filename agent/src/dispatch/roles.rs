//! Which role may make which API request.
//!
//! - anyone with a Shoal certificate ([`Role::Reader`] and up) reads: get, status, nodes, issues,
//!   events, the cells list, logs;
//! - a [`Role::Client`] also writes the desired state and steers the hosts: apply, delete,
//!   approve, drain, exec (running a command in a replica is a write: it can change anything);
//! - a [`Role::Node`] makes the agent-to-agent requests (replication, anti-entropy, clocks, the
//!   failure detector's question, the cell exchange, a `logs` or an `exec` forwarded to the
//!   node running the replica) and forwards an operator's approve to the node it concerns. A
//!   node does not apply or delete: a write starts with a client. It may drain or undrain only
//!   itself (Kubernetes' NodeRestriction): a drain is made by the node it concerns, which sees
//!   the caller's own certificate (the CLI connects to it), so a node key cannot drain another.

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
    /// A client with write access, or the node the request concerns itself (the handler checks
    /// the name: NodeRestriction).
    WriteOrSelf,
    /// A node.
    Agent,
}

/// Writes [`needs`] (an exhaustive match: a new request does not compile without its line) and
/// [`TABLE`], the same lines as data, from one list.
macro_rules! roles {
    ($($needs:ident: [$($variant:ident),* $(,)?]),* $(,)?) => {
        /// What `req` needs of its caller.
        pub fn needs(req: &Request) -> Needs {
            match req {
                $($(Request::$variant { .. })|* => Needs::$needs,)*
            }
        }

        /// Every request by name with what it needs, in the order of [`needs`]: the table of
        /// docs/operations.md ("Who may make which request"), checked against it by a test.
        pub const TABLE: &[(&str, Needs)] = &[$($((stringify!($variant), Needs::$needs),)*)*];
    };
}

roles! {
    Read: [
        Get, List, Nodes, Status, Issues, Events, CellList, UpgradeStatus, Caps, History,
        Endpoints, Logs, Plan,
    ],
    Write: [
        Apply, Delete, PublishCrl, SetCaps, UpgradeHold, Undo, Pause, Restart, Exec, ExecIo,
        GetSecrets,
    ],
    WriteOrForward: [Approve],
    WriteOrSelf: [Drain],
    Agent: [
        ExecHere, ExecIoHere, Replicate, Digest, Pull, Clock, Hears, Cells, CellsPush,
        CellStatus, CellCopies, NameUsed, LogsHere, RestartHere,
    ],
}

/// Whether `role` may make a request that needs `needs`.
pub fn allows(role: Role, needs: Needs) -> bool {
    match needs {
        Needs::Read => true,
        Needs::Write => role == Role::Client,
        Needs::WriteOrForward | Needs::WriteOrSelf => matches!(role, Role::Client | Role::Node),
        Needs::Agent => role == Role::Node,
    }
}

/// The sentence a refused caller gets.
pub fn refusal(role: Role, needs: Needs, kind: &str) -> String {
    let who = match needs {
        Needs::Read => "any certificate",
        Needs::Write => "a client certificate with write access",
        Needs::WriteOrForward => "a client certificate with write access (or an agent forwarding)",
        Needs::WriteOrSelf => {
            "a client certificate with write access (or the node's own certificate, for itself)"
        }
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

    /// The words docs/operations.md uses for a [`Needs`].
    fn word(needs: Needs) -> &'static str {
        match needs {
            Needs::Read => "read",
            Needs::Write => "write",
            Needs::WriteOrForward => "write or forward",
            Needs::WriteOrSelf => "write or self",
            Needs::Agent => "agent",
        }
    }

    #[test]
    fn the_operators_table_of_roles_is_the_one_the_agent_enforces() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
        let text = std::fs::read_to_string(path).unwrap();
        let begin = text
            .find("<!-- roles:begin -->")
            .expect("the table's begin marker");
        let end = text
            .find("<!-- roles:end -->")
            .expect("the table's end marker");
        let documented: Vec<(String, String)> = text[begin..end]
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((name.to_string(), cells.get(2)?.to_string()))
            })
            .collect();
        let enforced: Vec<(String, String)> = TABLE
            .iter()
            .map(|(name, needs)| (name.to_string(), word(*needs).to_string()))
            .collect();
        assert_eq!(
            documented, enforced,
            "docs/operations.md's table of roles is not the code's"
        );
    }

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
