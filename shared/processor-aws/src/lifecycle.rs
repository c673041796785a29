//! Lifecycle events on EventBridge: each create, close and delete of a
//! stream, sent to an event bus so AWS-native consumers (rules, Step
//! Functions, other accounts) react without reading a stream. Off unless
//! the deployment names a bus (`DS_LIFECYCLE_EVENT_BUS`, the template's
//! `LifecycleEventBus`).
//!
//! # Where the events come from, and why at least once
//! The `__registry__` stream is the outbox: every create, close and delete
//! appends its change there **in its own commit** (`ds_core`'s
//! `service/registry.rs`), and each such commit is one chunk item, so the
//! table's DynamoDB Stream carries one chunk insert per lifecycle change —
//! a record this function is already invoked for. Its sort key names where
//! the change ends (`c#<incarnation>#<end>`); the change is the one
//! registry message that ends exactly there. Events are therefore sent only
//! after the commit (there is no record before it), and a failed send fails
//! its record, which Lambda delivers again (`ReportBatchItemFailures`): at
//! least once. A redelivered batch may send an event twice; every event's
//! `detail.id` (`<registry incarnation>/<end offset>`, the change's place in
//! the registry) is the same each time, for consumers to dedupe on.
//!
//! # The events
//! `source` is `durable-streams`; `detail-type` is `Stream Created`,
//! `Stream Closed` or `Stream Deleted`; `detail` is
//! `{id, path, contentType?, createdAt?, closed?}` (a delete carries the
//! path only, as the registry does).

use std::time::Duration;

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use ds_core::{StreamHandle, StreamService, REGISTRY_PATH};
use serde::Deserialize;
use serde_json::{json, Value};

/// The `source` of every event.
pub const SOURCE: &str = "durable-streams";

/// Most entries in one `PutEvents` call (EventBridge's limit).
const MAX_ENTRIES: usize = 10;

/// Attempts at the entries EventBridge refused before the record fails.
const ATTEMPTS: u32 = 4;

/// Why a change could not be sent (its record is delivered again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    #[error("reading the registry change ending at {end}: {why}")]
    Read { end: u64, why: String },
    #[error("EventBridge refused {failed} of {sent} events: {why}")]
    Refused { failed: usize, sent: usize, why: String },
    #[error("PutEvents failed: {0}")]
    Send(String),
}

/// One registry change, as an event to send.
#[derive(Debug, Clone, PartialEq)]
pub struct LifecycleEvent {
    pub detail_type: &'static str,
    pub detail: Value,
}

#[derive(Deserialize)]
struct Change {
    key: String,
    #[serde(default)]
    value: Option<Value>,
    headers: Headers,
}

#[derive(Deserialize)]
struct Headers {
    operation: String,
}

impl LifecycleEvent {
    /// The event of the registry message `message`, which ends at `end` in
    /// the registry incarnation `incarnation`; `None` for a message that is
    /// no lifecycle change (a snapshot marker, say).
    pub fn of_message(message: &[u8], incarnation: &str, end: u64) -> Option<Self> {
        let change: Change = serde_json::from_slice(message).ok()?;
        let detail_type = match change.headers.operation.as_str() {
            "insert" => "Stream Created",
            "update" => "Stream Closed",
            "delete" => "Stream Deleted",
            _ => return None,
        };
        let mut detail = json!({ "id": format!("{incarnation}/{end}"), "path": change.key });
        if let (Some(Value::Object(value)), Value::Object(out)) = (change.value, &mut detail) {
            for field in ["contentType", "createdAt", "closed"] {
                if let Some(v) = value.get(field) {
                    out.insert(field.to_owned(), v.clone());
                }
            }
        }
        Some(Self { detail_type, detail })
    }
}

/// Sends the lifecycle events of registry chunk inserts to one bus.
#[derive(Clone)]
pub struct LifecycleEvents {
    client: aws_sdk_eventbridge::Client,
    bus: String,
    service: StreamService,
}

impl LifecycleEvents {
    pub fn new(client: aws_sdk_eventbridge::Client, bus: impl Into<String>, service: StreamService) -> Self {
        Self { client, bus: bus.into(), service }
    }

    /// The bus events go to.
    pub fn bus(&self) -> &str {
        &self.bus
    }

    /// The change whose registry chunk ends at `end` in `incarnation`, as an
    /// event (`None`: that incarnation is gone, or the message is no change).
    pub async fn event_at(&self, incarnation: &str, end: u64) -> Result<Option<LifecycleEvent>, LifecycleError> {
        let read = |why: String| LifecycleError::Read { end, why };
        let stream = StreamHandle::detached(REGISTRY_PATH);
        let store = &self.service.substrate().store;
        let chunks = store.read_chunks(&stream, incarnation, end.saturating_sub(1), end, 1).await;
        let chunks = chunks.map_err(|e| read(e.to_string()))?;
        let Some(chunk) = chunks.into_iter().find(|c| c.start < end && c.end() >= end) else {
            return Ok(None);
        };
        // Messages are `\n`-terminated; the one ending at `end` starts after
        // the newline before it (or at the chunk's start).
        let within = usize::try_from(end - chunk.start).map_err(|e| read(e.to_string()))?;
        let bytes = &chunk.data[..within];
        let Some(body) = bytes.strip_suffix(b"\n") else {
            return Err(read("the registry chunk does not end a message there".into()));
        };
        let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        Ok(LifecycleEvent::of_message(&body[start..], incarnation, end))
    }

    /// Sends `events` in order, `MAX_ENTRIES` per call, retrying refused
    /// entries a few times. Returns how many were sent before a failure,
    /// with the failure.
    pub async fn send(&self, events: &[LifecycleEvent]) -> Result<(), (usize, LifecycleError)> {
        for (n, batch) in events.chunks(MAX_ENTRIES).enumerate() {
            self.send_batch(batch).await.map_err(|e| (n * MAX_ENTRIES, e))?;
        }
        Ok(())
    }

    async fn send_batch(&self, batch: &[LifecycleEvent]) -> Result<(), LifecycleError> {
        let mut pending: Vec<&LifecycleEvent> = batch.iter().collect();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let entries = pending.iter().map(|e| {
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.bus)
                    .source(SOURCE)
                    .detail_type(e.detail_type)
                    .detail(e.detail.to_string())
                    .build()
            });
            let out =
                self.client.put_events().set_entries(Some(entries.collect())).send().await.map_err(|e| {
                    LifecycleError::Send(aws_sdk_eventbridge::error::DisplayErrorContext(e).to_string())
                })?;
            if out.failed_entry_count() == 0 {
                tracing::debug!(events = pending.len(), bus = %self.bus, "lifecycle events sent");
                return Ok(());
            }
            // Entries answer in request order; a failed one has an error code.
            let results = out.entries();
            let why = results.iter().find_map(|r| r.error_message().map(str::to_owned)).unwrap_or_default();
            let refused: Vec<&LifecycleEvent> = pending
                .iter()
                .zip(results.iter().map(Some).chain(std::iter::repeat(None)))
                .filter(|(_, r)| r.is_none_or(|r| r.error_code().is_some()))
                .map(|(e, _)| *e)
                .collect();
            if attempt >= ATTEMPTS {
                return Err(LifecycleError::Refused { failed: refused.len(), sent: batch.len(), why });
            }
            tracing::warn!(failed = refused.len(), why, attempt, "EventBridge refused lifecycle events; retrying them");
            pending = refused;
            tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_registry_change_is_its_event_with_a_stable_id() {
        let insert = br#"{"type":"stream","key":"a/b","value":{"path":"a/b","contentType":"text/plain","createdAt":5},"headers":{"operation":"insert"}}"#;
        let e = LifecycleEvent::of_message(insert, "inc", 120).expect("an insert");
        assert_eq!(e.detail_type, "Stream Created");
        assert_eq!(e.detail, json!({"id": "inc/120", "path": "a/b", "contentType": "text/plain", "createdAt": 5}));
        let close = br#"{"type":"stream","key":"a/b","value":{"path":"a/b","contentType":"text/plain","createdAt":5,"closed":true},"headers":{"operation":"update"}}"#;
        let e = LifecycleEvent::of_message(close, "inc", 240).expect("an update");
        assert_eq!(
            (e.detail_type, &e.detail["closed"], &e.detail["id"]),
            ("Stream Closed", &json!(true), &json!("inc/240"))
        );
        let delete = br#"{"type":"stream","key":"a/b","headers":{"operation":"delete"}}"#;
        let e = LifecycleEvent::of_message(delete, "inc", 300).expect("a delete");
        assert_eq!((e.detail_type, e.detail), ("Stream Deleted", json!({"id": "inc/300", "path": "a/b"})));
        assert!(LifecycleEvent::of_message(br#"{"headers":{"control":"reset"}}"#, "inc", 1).is_none());
        assert!(LifecycleEvent::of_message(b"not json", "inc", 1).is_none());
    }
}
