//! What a processor is told about the call it is in.

use crate::idempotency;
use crate::incarnation::StreamIncarnation;

/// Whether the runner is replaying a backlog or following the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The runner has not reached the head since it opened or rewound.
    CatchingUp,
    /// The runner reached the head at least once; this call follows it.
    Live,
}

/// Delivery context passed to [`crate::Processor::process_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub phase: Phase,
    /// Highest journal position the runner has seen (read or notified).
    pub highest_observed_position: u64,
    /// This call is the last consumed event of a scan that reached the head,
    /// or the one eventless call of a scan that had no consumed event. State-
    /// derived work (reconciliation) belongs under this flag.
    pub caught_up: bool,
    pub cursor_revision: u64,
    pub stream_incarnation: StreamIncarnation,
    /// Journal position this call sits at (the event's position, or the last
    /// scanned position for an eventless call).
    pub source_position: u64,
}

impl Delivery {
    /// Deterministic key for an effect of this call: from (author key, source
    /// position, cursor revision, stream incarnation). Same on crash retry,
    /// new after `reprocess_from` or stream re-creation.
    pub fn idempotency_key(&self, key: &str) -> String {
        idempotency::event_key(key, self.source_position, self.cursor_revision, &self.stream_incarnation)
    }

    /// Offset-free key for a state-derived (caught-up) obligation.
    pub fn stable_idempotency_key(&self, key: &str) -> String {
        idempotency::stable_key(key, &self.stream_incarnation)
    }
}
