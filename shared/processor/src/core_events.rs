//! Events the runner and the recovery adapter append about processors.
//!
//! Each is appended idempotently under a deterministic key, so a crash retry
//! of the same step appends nothing new.

use serde_json::{json, Value};

use crate::event::OutgoingEvent;
use crate::idempotency::runner_key;
use crate::incarnation::StreamIncarnation;
use crate::ports::{Alarm, AppendOutcome, Journal, JournalError};
use crate::progress::PendingAudit;

/// Appended by the recovery adapter when a revival alarm fires.
pub const PROCESSOR_REVIVED: &str = "stream/processor-revived";
/// Appended once per malformed consumed event.
pub const PROCESSOR_DIAGNOSTIC: &str = "stream/processor-diagnostic";
/// Audit: `re_reduce` (manual or on a reducer-version change).
pub const PROCESSOR_RE_REDUCED: &str = "stream/processor-re-reduced";
/// Audit: `reprocess_from`.
pub const PROCESSOR_REPROCESSED: &str = "stream/processor-reprocessed";
/// Audit: `skip_through`.
pub const PROCESSOR_SKIPPED: &str = "stream/processor-skipped";

/// An event together with the key it is appended under.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyedEvent {
    pub event: OutgoingEvent,
    pub key: String,
}

impl From<KeyedEvent> for PendingAudit {
    fn from(keyed: KeyedEvent) -> Self {
        Self { key: keyed.key, event_type: keyed.event.event_type, payload: keyed.event.payload }
    }
}

impl PendingAudit {
    /// The JSON bytes appended to the journal.
    pub fn encode(&self) -> bytes::Bytes {
        OutgoingEvent::new(self.event_type.clone(), self.payload.clone()).encode()
    }
}

pub(crate) fn diagnostic(
    slug: &str,
    incarnation: &StreamIncarnation,
    cursor_revision: u64,
    position: u64,
    event_type: Option<&str>,
    reason: &str,
) -> KeyedEvent {
    KeyedEvent {
        event: OutgoingEvent::new(
            PROCESSOR_DIAGNOSTIC,
            json!({
                "processorSlug": slug,
                "position": position,
                "eventType": event_type,
                "error": reason,
            }),
        ),
        key: runner_key(
            "diagnostic",
            &[slug, incarnation.as_str(), &cursor_revision.to_string(), &position.to_string()],
        ),
    }
}

pub(crate) fn re_reduced(
    slug: &str,
    incarnation: &StreamIncarnation,
    cursor_revision: u64,
    through: u64,
    reducer_version: &str,
    reason: &str,
) -> KeyedEvent {
    KeyedEvent {
        event: OutgoingEvent::new(
            PROCESSOR_RE_REDUCED,
            json!({
                "processorSlug": slug,
                "reason": reason,
                "reducerVersion": reducer_version,
                "through": through,
                "cursorRevision": cursor_revision,
            }),
        ),
        key: runner_key(
            "re-reduce",
            &[slug, incarnation.as_str(), &cursor_revision.to_string(), &through.to_string(), reducer_version, reason],
        ),
    }
}

pub(crate) fn reprocessed(
    slug: &str,
    incarnation: &StreamIncarnation,
    previous_revision: u64,
    position: u64,
    reason: &str,
) -> KeyedEvent {
    KeyedEvent {
        event: OutgoingEvent::new(
            PROCESSOR_REPROCESSED,
            json!({
                "processorSlug": slug,
                "reason": reason,
                "position": position,
                "previousCursorRevision": previous_revision,
                "cursorRevision": previous_revision + 1,
            }),
        ),
        key: runner_key(
            "reprocess",
            &[slug, incarnation.as_str(), &previous_revision.to_string(), &position.to_string(), reason],
        ),
    }
}

pub(crate) fn skipped(
    slug: &str,
    incarnation: &StreamIncarnation,
    cursor_revision: u64,
    from: u64,
    through: u64,
    reason: &str,
) -> KeyedEvent {
    KeyedEvent {
        event: OutgoingEvent::new(
            PROCESSOR_SKIPPED,
            json!({
                "processorSlug": slug,
                "reason": reason,
                "from": from,
                "through": through,
                "cursorRevision": cursor_revision,
            }),
        ),
        key: runner_key(
            "skip",
            &[slug, incarnation.as_str(), &cursor_revision.to_string(), &through.to_string(), reason],
        ),
    }
}

/// The revival event for a fired alarm: one per alarm, however often the
/// alarm is delivered.
pub fn revived(alarm: &Alarm) -> (OutgoingEvent, String) {
    let payload: Value = json!({ "processorSlug": alarm.slug, "alarm": alarm.token });
    (OutgoingEvent::new(PROCESSOR_REVIVED, payload), runner_key("revived", &[&alarm.slug, &alarm.token]))
}

/// Appends the revival event for `alarm` to the incarnation it was armed
/// for; for [`crate::Recovery`] adapters. A re-created stream refuses it
/// with [`JournalError::IncarnationChanged`]: nothing is owed there.
pub async fn append_revival(journal: &dyn Journal, alarm: &Alarm) -> Result<AppendOutcome, JournalError> {
    let (event, key) = revived(alarm);
    journal.append(&alarm.incarnation, event.encode(), &key).await
}
