//! A bounded log of what this agent's reconciler did and why, for `shoal events`.

use std::collections::VecDeque;

/// Longest text of an event (its reason, who asked), in bytes: a runtime's error or a list of
/// specs can be long, and the 1,000 events one `events` call returns must fit one frame
/// (`agent/tests/api_limits.rs` checks the largest).
pub const EVENT_TEXT_BYTES_MAX: usize = 1024;

pub use crate::wire::events::Event;

/// The last `capacity` events, oldest first.
#[derive(Debug)]
pub struct EventLog {
    capacity: usize,
    next_seq: u64,
    events: VecDeque<Event>,
}

impl EventLog {
    /// An empty log keeping at most `capacity` events.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "an event log needs room for one event");
        EventLog {
            capacity,
            next_seq: 1,
            // Grows as events come (bounded by `capacity` in `push`): thousands of simulated
            // agents each holding room for 1,000 events cost 112 KB apiece up front.
            events: VecDeque::new(),
        }
    }

    /// Records an event; the oldest is dropped when full.
    pub fn push(
        &mut self,
        at_ms: u64,
        node: &str,
        kind: &str,
        replica: Option<String>,
        reason: String,
        by: Option<String>,
    ) {
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            seq: self.next_seq,
            at_ms,
            node: node.to_string(),
            kind: kind.to_string(),
            replica,
            reason: crate::wire::page::cut_text(reason, EVENT_TEXT_BYTES_MAX),
            by: by.map(|by| crate::wire::page::cut_text(by, EVENT_TEXT_BYTES_MAX)),
        });
        self.next_seq += 1;
    }

    /// Events with a sequence number above `after`, at most `limit`, oldest first.
    pub fn after(&self, after: u64, limit: usize) -> Vec<Event> {
        self.events
            .iter()
            .filter(|e| e.seq > after)
            .take(limit)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_pages_by_sequence() {
        let mut log = EventLog::new(3);
        for i in 0..5 {
            log.push(i, "n1", "start", None, format!("e{i}"), None);
        }
        let all = log.after(0, 10);
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(log.after(4, 10).len(), 1);
        assert_eq!(log.after(0, 2).len(), 2);
    }
}
