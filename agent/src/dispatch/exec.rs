//! `shoal exec`: find the node running the replica from this agent's view of the mesh (as
//! `shoal logs` does) and start the command there, forwarding as [`Request::ExecHere`]; then
//! pass each poll of the session to that node ([`Request::ExecIoHere`]). The sessions
//! themselves are [`crate::node::exec`]'s.
//!
//! Only a running instance takes a command: a replica that is starting, stopping, exited,
//! failed or pending is refused with its phase and node, as is one with no instance.

use std::collections::BTreeMap;

use shoal_core::instance::{Phase, ReplicaId};
use shoal_core::reconcile::InstanceStatus;

use super::Api;
use crate::node::exec::{ExecError, ExecMode};
use crate::node::host::INSTANCES_KEY;
use crate::wire::api::{ApiError, ErrorKind, ExecInput, Request, Response};

/// Most characters of the command recorded in the node's events.
const RECORDED_COMMAND_CHARS_MAX: usize = 200;

impl Api {
    /// Starts a command in a running replica wherever it runs, for `by`.
    pub(crate) async fn handle_exec(
        &self,
        workload: String,
        replica: u32,
        command: Vec<String>,
        mode: ExecMode,
        by: String,
    ) -> Result<Response, ApiError> {
        crate::node::exec::check_command(&command).map_err(api_error)?;
        let mut observed: BTreeMap<String, (bool, Vec<InstanceStatus>)> =
            self.gossiped(INSTANCES_KEY).await;
        if let Some(host) = &self.host {
            observed.insert(self.node.name.clone(), (true, host.observed()));
        }
        let id = ReplicaId::new(&workload, replica);
        let node = match pick_running(&observed, &id) {
            Ok(node) => node,
            Err(why) => {
                // An unknown workload says so first.
                self.node
                    .clone()
                    .handle_get(workload.clone(), false)
                    .await?;
                return Err(why);
            }
        };
        if node == self.node.name {
            return self.handle_exec_here(id, command, mode, by, None).await;
        }
        let forwarded = Request::ExecHere {
            replica: id,
            command,
            stdin: mode.stdin,
            tty: mode.tty,
            by,
        };
        self.forward(&node, forwarded).await
    }

    /// Starts a command in the replica's running instance on this node; `via` is the agent
    /// that forwarded the request, if any.
    pub(crate) async fn handle_exec_here(
        &self,
        replica: ReplicaId,
        command: Vec<String>,
        mode: ExecMode,
        by: String,
        via: Option<String>,
    ) -> Result<Response, ApiError> {
        let Some(host) = &self.host else {
            return Err(ApiError::new(
                ErrorKind::Internal,
                "this agent runs no host loop, so no instances: ask another agent",
            ));
        };
        let here = host
            .observed()
            .into_iter()
            .filter(|s| s.replica == replica)
            .min_by_key(|s| s.phase != Phase::Running || s.handle.is_none());
        let handle = match here {
            Some(InstanceStatus {
                phase: Phase::Running,
                handle: Some(handle),
                ..
            }) => handle,
            Some(s) => return Err(not_running(&replica, &self.node.name, &s)),
            None => {
                return Err(ApiError::new(
                    ErrorKind::NotFound,
                    format!("{replica} has no instance on {}", self.node.name),
                ))
            }
        };
        let recorded_by = match via {
            Some(via) => format!("{by} via {via}"),
            None => by.clone(),
        };
        let started = self
            .exec
            .start(
                host.runtime(),
                &handle,
                &replica,
                command.clone(),
                mode,
                &by,
            )
            .await;
        let shown: String = shell_words(&command)
            .chars()
            .take(RECORDED_COMMAND_CHARS_MAX)
            .collect();
        let reason = match &started {
            Ok(session) => format!("exec {shown} in instance {handle} (session {session:x})"),
            Err(e) => format!("exec {shown} refused: {e}"),
        };
        host.record_asked("exec", Some(replica.to_string()), reason, &recorded_by);
        let session = started.map_err(api_error)?;
        Ok(Response::ExecStarted {
            node: self.node.name.clone(),
            session,
        })
    }

    /// Passes a poll of an exec session to the node running it.
    pub(crate) async fn handle_exec_io(
        &self,
        node: String,
        session: u64,
        io: ExecInput,
        by: String,
    ) -> Result<Response, ApiError> {
        if node == self.node.name {
            return self.handle_exec_io_here(session, io, by).await;
        }
        self.forward(&node, Request::ExecIoHere { session, io, by })
            .await
    }

    /// Takes a poll of an exec session running on this node.
    pub(crate) async fn handle_exec_io_here(
        &self,
        session: u64,
        io: ExecInput,
        by: String,
    ) -> Result<Response, ApiError> {
        let output = self.exec.poll(session, io, &by).await.map_err(api_error)?;
        Ok(Response::ExecOutput(Box::new(output)))
    }
}

/// The live node with `replica` running, or why there is none.
fn pick_running(
    observed: &BTreeMap<String, (bool, Vec<InstanceStatus>)>,
    replica: &ReplicaId,
) -> Result<String, ApiError> {
    let mut copies: Vec<(&String, bool, &InstanceStatus)> = observed
        .iter()
        .flat_map(|(node, (alive, list))| list.iter().map(move |s| (node, *alive, s)))
        .filter(|(_, _, s)| &s.replica == replica)
        .collect();
    let running = |s: &InstanceStatus| s.phase == Phase::Running && s.handle.is_some();
    copies.sort_by_key(|(node, alive, s)| (!alive, !running(s), node.as_str()));
    match copies.first() {
        Some((node, true, s)) if running(s) => Ok(node.to_string()),
        Some((node, alive, s)) => {
            let mut error = not_running(replica, node, s);
            if !alive {
                error.message = format!("{} (and {node} is not live)", error.message);
            }
            Err(error)
        }
        None => Err(ApiError::new(
            ErrorKind::NotFound,
            format!(
                "{replica} has no instance on any node this agent hears of (not placed yet, \
                 or no such replica): `shoal status {}` says why",
                replica.workload
            ),
        )),
    }
}

fn not_running(replica: &ReplicaId, node: &str, status: &InstanceStatus) -> ApiError {
    let last = match &status.last_error {
        Some(e) => format!(" (last error: {e})"),
        None => String::new(),
    };
    ApiError::new(
        ErrorKind::Invalid,
        format!(
            "{replica} is not running: it is {} on {node}{last}; exec needs a running \
             instance (`shoal status {}`)",
            status.phase.as_str(),
            replica.workload
        ),
    )
}

fn api_error(e: ExecError) -> ApiError {
    let kind = match &e {
        ExecError::UnknownSession { .. } => ErrorKind::NotFound,
        ExecError::Runtime(_) => ErrorKind::Internal,
        ExecError::Invalid(_) | ExecError::TooMany | ExecError::Offset { .. } => ErrorKind::Invalid,
    };
    ApiError::new(kind, e.to_string())
}

/// The command as a shell would read it back (arguments with spaces or quotes quoted).
fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
