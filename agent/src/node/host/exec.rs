//! Executes the reconciler's actions on the runtime, each in its own task; outcomes that the
//! reconciler must learn come back as [`Feedback`].

use std::time::Duration;

use shoal_core::reconcile::Action;

use super::{Feedback, Host};
use crate::node::runtime::StartRequest;

impl Host {
    pub(crate) fn execute(&self, action: Action) {
        let replica = action.replica().to_string();
        let reason = action.reason().to_string();
        let runtime = self.runtime.clone();
        let tx = self.feedback_tx.clone();
        let wake = self.wake_handle();
        let dropped = self.feedback_dropped.clone();
        let count_drop = move || {
            dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        match action {
            Action::Start {
                replica: id,
                spec,
                version,
                fence_token,
                ..
            } => {
                self.count_action("start");
                let reason = match fence_token {
                    Some(token) => format!("{reason} (fencing token {token})"),
                    None => reason,
                };
                self.record("start", Some(replica), reason);
                let node = self.node.name.clone();
                // Nothing ran: the reconciler backs off and raises a runtime issue.
                let start_failed = move |replica, error| {
                    if tx
                        .try_send(Feedback::StartFailed { replica, error })
                        .is_err()
                    {
                        count_drop();
                    }
                };
                let ports = match self.allocate_ports(&id, &spec) {
                    Ok(ports) => ports,
                    Err(e) => {
                        start_failed(id, e.to_string());
                        return wake();
                    }
                };
                let addr = self.advertised_addr();
                let volume_roots: std::sync::Arc<[String]> =
                    std::sync::Arc::from(self.config.volume_roots.clone());
                let book = self.port_book();
                let mesh = self.node.clone();
                self.node.spawn(async move {
                    // A sticky replica's data is recorded here before it can write any: a node
                    // that dies after its start can never leave data the record does not name.
                    if spec.sticky() {
                        if let Err(why) = super::data::claim(&mesh, &id).await {
                            super::ports::start_done(&book, ports.ticket, None);
                            let error = format!("its data holder record was not written: {why}");
                            start_failed(id, error);
                            return wake();
                        }
                    }
                    let request = StartRequest {
                        replica: id.clone(),
                        spec,
                        spec_version: version,
                        node,
                        fence_token,
                        addr,
                        ports: ports.ports,
                        volume_roots,
                    };
                    let started = runtime.start(request).await;
                    let handle = started.as_ref().ok().map(|i| i.handle.as_str());
                    super::ports::start_done(&book, ports.ticket, handle);
                    if let Err(e) = started {
                        start_failed(id, e.to_string());
                    }
                    wake();
                });
            }
            Action::Stop {
                handle, grace_ms, ..
            } => {
                self.count_action("stop");
                self.record(
                    "stop",
                    Some(replica),
                    format!("{reason} (instance {handle})"),
                );
                self.node.spawn(async move {
                    if let Err(e) = runtime.stop(&handle, Duration::from_millis(grace_ms)).await {
                        tracing::warn!(%handle, error = %e, "stop failed; the reconciler retries");
                    }
                    wake();
                });
            }
            Action::Remove { handle, .. } => {
                self.count_action("remove");
                self.record(
                    "remove",
                    Some(replica),
                    format!("{reason} (instance {handle})"),
                );
                self.node.spawn(async move {
                    if let Err(e) = runtime.remove(&handle).await {
                        tracing::warn!(%handle, error = %e, "remove failed; the reconciler retries");
                    }
                });
            }
            Action::Reload {
                handle,
                hook,
                settings,
                ..
            } => {
                self.count_action("reload");
                self.record("reload", Some(replica), reason);
                let timeout = Duration::from_millis(self.config.reconcile.reload_timeout_ms);
                self.node.spawn(async move {
                    let outcome = runtime.reload(&handle, &hook, &settings, timeout).await;
                    let (ok, detail) = match outcome {
                        Ok(()) => (true, String::new()),
                        Err(e) => (false, e.to_string()),
                    };
                    if tx
                        .try_send(Feedback::Reload { handle, ok, detail })
                        .is_err()
                    {
                        count_drop();
                    }
                    wake();
                });
            }
        }
    }
}
