//! The host loop's metric families: reconcile and placement durations, actions, issues by kind,
//! instances by phase, restarts.

use std::collections::BTreeMap;

use super::Host;
use crate::transport::metrics::{Family, Kind};

/// Collects the host families.
pub fn host_families(host: &Host) -> Vec<Family> {
    let stats = host.stats();
    let snapshot = host.snapshot();
    let (observed, issues) = (&snapshot.observed, &snapshot.issues);
    let mut by_phase: BTreeMap<&'static str, u64> = BTreeMap::new();
    for phase in [
        "pending", "starting", "running", "stopping", "exited", "failed",
    ] {
        by_phase.insert(phase, 0);
    }
    for status in observed {
        *by_phase.entry(status.phase.as_str()).or_default() += 1;
    }
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for issue in issues {
        *by_kind.entry(issue.kind.to_string()).or_default() += 1;
    }
    let restarts: u64 = observed.iter().map(|s| u64::from(s.restarts)).sum();
    vec![
        Family::single(
            "shoal_reconcile_round_seconds",
            "Duration of the last reconcile round.",
            Kind::Gauge,
            stats.round_last_us as f64 / 1e6,
        ),
        Family::single(
            "shoal_reconcile_rounds",
            "Reconcile rounds run.",
            Kind::Counter,
            stats.rounds as f64,
        ),
        Family::single(
            "shoal_data_records_written",
            "Data holder records this node wrote (it runs a replica whose data the store placed elsewhere or nowhere).",
            Kind::Counter,
            stats.data_records_written as f64,
        ),
        Family::single(
            "shoal_data_records_failed",
            "Data holder record writes that failed (tried again).",
            Kind::Counter,
            stats.data_records_failed as f64,
        ),
        Family::single(
            "shoal_data_records_refused",
            "Data holder records in the store refused at the last read (a body naming another node than its writer).",
            Kind::Gauge,
            stats.data_records_refused as f64,
        ),
        Family::single(
            "shoal_name_disputes",
            "Disputes of a node name this agent saw begin: two live agents claiming one name, one of them with a copy of that node's key.",
            Kind::Counter,
            stats.name_disputes as f64,
        ),
        Family::single(
            "shoal_placement_seconds",
            "Duration of the last placement computation.",
            Kind::Gauge,
            stats.placement_last_us as f64 / 1e6,
        ),
        Family {
            name: "shoal_reconcile_actions",
            help: "Actions the reconciler asked for, by kind.",
            kind: Kind::Counter,
            samples: stats
                .actions
                .iter()
                .map(|(k, n)| (vec![("kind", k.to_string())], *n as f64))
                .collect(),
        },
        Family {
            name: "shoal_reconcile_timer_late_max_milliseconds",
            help: "Latest the host loop served a reconciler deadline (poll_timeout) since start.",
            kind: Kind::Gauge,
            samples: vec![(Vec::new(), stats.timer_late_max_ms as f64)],
        },
        Family {
            name: "shoal_issues",
            help: "Current issues on this node, by kind.",
            kind: Kind::Gauge,
            samples: by_kind
                .into_iter()
                .map(|(k, n)| (vec![("kind", k)], n as f64))
                .collect(),
        },
        Family {
            name: "shoal_instances",
            help: "Instances on this node, by phase.",
            kind: Kind::Gauge,
            samples: by_phase
                .into_iter()
                .map(|(p, n)| (vec![("phase", p.to_string())], n as f64))
                .collect(),
        },
        Family::single(
            "shoal_instance_restarts",
            "Restarts of this node's replicas since the agent started.",
            Kind::Counter,
            restarts as f64,
        ),
        Family::single(
            "shoal_feedback_dropped",
            "Runtime outcomes dropped on a full queue.",
            Kind::Counter,
            stats.feedback_dropped as f64,
        ),
    ]
}
