//! [`AgentHost`]: the agent's own host loop (`shoal::host::Host`: the real reconciler, probes,
//! observed state and issues in gossip, the event log) on the agent's in-memory runtime. This is
//! exactly the code `shoal agent` runs, with the in-memory runtime in place of processes or
//! containers; the simulator only ticks it (so a paused host does nothing) and applies the
//! scenario's instance profiles.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use shoal::host::{Host, HostConfig};

use super::core::{mem_profile, reconcile_config};
use super::{HostEnv, HostLoop};

/// The agent's real host loop.
pub struct AgentHost;

impl HostLoop for AgentHost {
    fn spawn(&self, env: HostEnv) -> tokio::task::JoinHandle<()> {
        tokio::spawn(run(env))
    }

    fn name(&self) -> &'static str {
        "agent"
    }
}

async fn run(env: HostEnv) {
    let tick = Duration::from_millis(env.config.reconcile_interval_ms);
    let config = HostConfig {
        tick,
        reconcile: reconcile_config(&env.config),
        ..HostConfig::default()
    };
    let host = Host::new(
        env.node.clone(),
        Arc::new(env.mem.clone()),
        env.clock.clone(),
        config,
    );
    env.node.attach_host(host.clone());
    loop {
        tokio::time::sleep(tick).await;
        if env.paused.load(Ordering::Relaxed) {
            continue;
        }
        for (w, p) in env.profiles.lock().expect("profiles").iter() {
            env.mem.set_profile(w, mem_profile(p));
        }
        host.round().await;
    }
}
