//! The engine's event stream as [`RuntimeEvent`]s, kept alive across engine restarts.
//!
//! One task per runtime subscribes to container events carrying this node's labels. When the
//! stream fails, it reports [`RuntimeEvent::EngineUnavailable`] once, reconnects with backoff, and
//! reports [`RuntimeEvent::EngineAvailable`] when the engine answers again. Each subscription asks
//! the engine to replay from the last event seen (`since`), so a container that dies while the
//! stream is being re-established is still reported; replayed duplicates are skipped by time.
//! Every event reaches the runtime's [`Observed`] before it is published, so the `list` it
//! triggers needs not ask the engine about the container again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::models::EventMessage;
use bollard::query_parameters::EventsOptionsBuilder;
use futures_util::StreamExt;
use tokio::sync::broadcast;

use super::body::{error_chain, replica_of, LABEL_NODE};
use super::observed::Observed;
use super::Client;
use crate::node::runtime::RuntimeEvent;

/// Reconnection backoff bounds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

/// Runs until aborted (the runtime aborts it when dropped).
pub(crate) async fn pump(
    client: Arc<Client>,
    node: String,
    events: broadcast::Sender<RuntimeEvent>,
    observed: Arc<Observed>,
    backoff: Backoff,
) {
    let publish = |event: RuntimeEvent| {
        observed.hear(&event);
        let _ = events.send(event);
    };
    // Nanoseconds since the epoch of the last event delivered; replay starts there.
    let mut last_ns = wall_clock_ns();
    let mut down = false;
    let mut delay = backoff.initial;
    loop {
        let docker = match client.get().await {
            Ok(docker) => docker,
            Err(e) => {
                if !down {
                    down = true;
                    publish(RuntimeEvent::EngineUnavailable {
                        reason: e.to_string(),
                    });
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(backoff.max);
                continue;
            }
        };
        if std::mem::take(&mut down) {
            publish(RuntimeEvent::EngineAvailable);
        }
        delay = backoff.initial;
        let filters = subscription_filters(&node);
        let since = format!("{}.{:09}", last_ns / 1_000_000_000, last_ns % 1_000_000_000);
        let options = EventsOptionsBuilder::new()
            .since(&since)
            .filters(&filters)
            .build();
        let mut stream = docker.events(Some(options));
        let reason = loop {
            match stream.next().await {
                Some(Ok(message)) => {
                    let at_ns = message.time_nano.unwrap_or_default().max(0) as u128;
                    if at_ns != 0 && at_ns <= last_ns {
                        continue; // replayed, already delivered
                    }
                    last_ns = last_ns.max(at_ns);
                    if let Some(handle) = oom_of(&message, &node) {
                        observed.hear_oom(&handle);
                    } else if let Some(event) = to_runtime_event(&message, &node) {
                        publish(event);
                    }
                }
                Some(Err(e)) => break error_chain(&e),
                None => break "the engine closed the event stream".to_string(),
            }
        };
        tracing::warn!(%reason, "docker event stream lost; reconnecting");
        client.invalidate().await;
        down = true;
        publish(RuntimeEvent::EngineUnavailable { reason });
        tokio::time::sleep(backoff.initial).await;
    }
}

/// Container starts, deaths (and out-of-memory kills) and health changes of this node's
/// containers.
fn subscription_filters(node: &str) -> HashMap<String, Vec<String>> {
    let mut filters = super::body::node_filters(node);
    filters.insert("type".into(), vec!["container".into()]);
    let actions = ["start", "die", "oom", "health_status"];
    filters.insert(
        "event".into(),
        actions.iter().map(|a| a.to_string()).collect(),
    );
    filters
}

/// Maps one engine event; `None` for events Shoal does not act on or containers it does not own.
pub(crate) fn to_runtime_event(message: &EventMessage, node: &str) -> Option<RuntimeEvent> {
    let actor = message.actor.as_ref()?;
    let handle = actor.id.clone()?;
    let attributes = actor.attributes.as_ref()?;
    if attributes.get(LABEL_NODE).map(String::as_str) != Some(node) {
        return None;
    }
    let (replica, _) = replica_of(attributes)?;
    let action = message.action.as_deref()?;
    match action {
        "start" => Some(RuntimeEvent::Started { handle, replica }),
        "die" => Some(RuntimeEvent::Exited {
            handle,
            replica,
            exit_code: attributes.get("exitCode").and_then(|c| c.parse().ok()),
            at_ms: (message.time_nano.unwrap_or_default() / 1_000_000).max(0) as u64,
        }),
        _ if action.starts_with("health_status") => Some(RuntimeEvent::Health {
            handle,
            replica,
            healthy: action.trim_end().ends_with(": healthy"),
        }),
        _ => None,
    }
}

/// The container an `oom` event is about, if it is one of this node's.
fn oom_of(message: &EventMessage, node: &str) -> Option<String> {
    let actor = message.actor.as_ref()?;
    let ours = actor
        .attributes
        .as_ref()?
        .get(LABEL_NODE)
        .map(String::as_str)
        == Some(node);
    (message.action.as_deref() == Some("oom") && ours).then(|| actor.id.clone())?
}

fn wall_clock_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    fn message(action: &str, node: &str) -> EventMessage {
        let attributes = HashMap::from([
            ("shoal.node".to_string(), node.to_string()),
            ("shoal.workload".to_string(), "web".to_string()),
            ("shoal.replica".to_string(), "2".to_string()),
            ("exitCode".to_string(), "137".to_string()),
        ]);
        EventMessage {
            action: Some(action.into()),
            actor: Some(EventActor {
                id: Some("abc".into()),
                attributes: Some(attributes),
            }),
            time_nano: Some(1_700_000_000_123_000_000),
            ..EventMessage::default()
        }
    }

    #[test]
    fn maps_engine_events() {
        let replica = crate::core::instance::ReplicaId::new("web", 2);
        let exited = to_runtime_event(&message("die", "n1"), "n1").unwrap();
        assert_eq!(
            exited,
            RuntimeEvent::Exited {
                handle: "abc".into(),
                replica: replica.clone(),
                exit_code: Some(137),
                at_ms: 1_700_000_000_123
            }
        );
        let health = to_runtime_event(&message("health_status: unhealthy", "n1"), "n1");
        assert_eq!(
            health,
            Some(RuntimeEvent::Health {
                handle: "abc".into(),
                replica,
                healthy: false
            })
        );
        assert_eq!(to_runtime_event(&message("die", "n2"), "n1"), None);
        assert_eq!(oom_of(&message("oom", "n1"), "n1").as_deref(), Some("abc"));
        assert_eq!(oom_of(&message("oom", "n2"), "n1"), None);
        assert_eq!(oom_of(&message("die", "n1"), "n1"), None);
        assert_eq!(to_runtime_event(&message("attach", "n1"), "n1"), None);
    }
}
