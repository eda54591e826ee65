//! The member probes' verdict changes (`state::mesh::verdicts`) as events and log lines: a
//! member suspected, refuted, declared dead, revived.

use shoal_core::verdict::VerdictKind;

use super::HostLoop;

impl HostLoop {
    /// Records the verdict changes the probes made since the last round.
    pub(super) fn record_verdicts(&mut self) {
        for e in self.host.node.take_probe_events() {
            let who = format!("{} (generation {})", e.name, e.generation);
            let reason = match e.kind {
                VerdictKind::Suspect => {
                    format!("{who} answers no probe, direct or through others: suspected")
                }
                VerdictKind::Refuted => format!("{who} answered: no longer suspected"),
                VerdictKind::Dead => format!("{who} stayed silent through its suspicion: dead"),
                VerdictKind::Revived => format!("{who}, held dead, is heard again"),
            };
            match e.kind {
                VerdictKind::Dead => tracing::warn!(member = %e.name, "{reason}"),
                _ => tracing::info!(member = %e.name, "{reason}"),
            }
            self.host.record(e.kind.as_str(), None, reason);
        }
    }
}
