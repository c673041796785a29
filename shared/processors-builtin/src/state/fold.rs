//! The State Protocol materializer: a pure fold of a stream's messages into
//! the live state (type → key → value). No I/O: a caller hands it each
//! message's bytes with the message's offset.
//!
//! The rules (STATE-PROTOCOL.md §4, §6):
//! - `insert` stores the value at `type`/`key`. The spec says only
//!   "storing"; an insert over an existing row replaces it (last write wins)
//!   rather than being refused, so a snapshot re-sent after its rows
//!   re-inserts them.
//! - `update` replaces the value. The spec is silent on a missing row; we
//!   store it, because retention may have trimmed the row's insert from the
//!   stream's history while the update survives.
//! - `upsert` (not in the spec's three; accepted as an extension) stores.
//! - `delete` removes the row; deleting a missing row changes nothing.
//! - `reset` clears everything. `snapshot-start` / `snapshot-end` only
//!   delimit: the spec does not say a snapshot replaces the state, so a
//!   snapshot-start clears nothing (its inserts re-insert rows).
//!
//! A message that is not a change or control message as the spec defines
//! it is never folded: it is counted, and the last one is kept with its
//! offset and reason ([`MalformedReport`]).
//!
//! The live state's size is tracked ([`Materialized::bytes`],
//! [`Materialized::rows`]): compaction will compare it with the history.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// Why a message was not folded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object")]
    NotAnObject,
    #[error("`headers` is missing or not an object")]
    NoHeaders,
    #[error("`headers` has neither `operation` (a change) nor `control` (a control message)")]
    NeitherChangeNorControl,
    #[error("`headers` has both `operation` and `control`")]
    BothChangeAndControl,
    #[error("unknown operation {0:?} (insert, update, upsert or delete)")]
    UnknownOperation(String),
    #[error("unknown control {0:?} (snapshot-start, snapshot-end or reset)")]
    UnknownControl(String),
    #[error("`{0}` must be a non-empty string")]
    BadField(&'static str),
    #[error("`value` is required for {0}")]
    MissingValue(&'static str),
}

/// A change's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Insert,
    Update,
    Upsert,
    Delete,
}

/// A control message's signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    SnapshotStart,
    SnapshotEnd,
    Reset,
}

/// A well-formed State Protocol message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Change { entity_type: String, key: String, operation: Operation, value: Option<Value> },
    Control(Control),
}

/// Parses one message (the bytes of one JSON stream message).
pub fn parse(data: &[u8]) -> Result<Message, Malformed> {
    let value: Value = serde_json::from_slice(data).map_err(|e| Malformed::NotJson(e.to_string()))?;
    let Value::Object(mut object) = value else { return Err(Malformed::NotAnObject) };
    let Some(Value::Object(headers)) = object.remove("headers") else { return Err(Malformed::NoHeaders) };
    match (headers.get("operation"), headers.get("control")) {
        (Some(_), Some(_)) => Err(Malformed::BothChangeAndControl),
        (None, None) => Err(Malformed::NeitherChangeNorControl),
        (None, Some(control)) => parse_control(control, &headers),
        (Some(operation), None) => parse_change(operation, &headers, object),
    }
}

fn parse_control(control: &Value, headers: &Map<String, Value>) -> Result<Message, Malformed> {
    let control = match control.as_str() {
        Some("snapshot-start") => Control::SnapshotStart,
        Some("snapshot-end") => Control::SnapshotEnd,
        Some("reset") => Control::Reset,
        _ => return Err(Malformed::UnknownControl(text(control))),
    };
    if headers.get("offset").is_some_and(|o| !is_non_empty_string(o)) {
        return Err(Malformed::BadField("headers.offset"));
    }
    Ok(Message::Control(control))
}

fn parse_change(
    operation: &Value,
    headers: &Map<String, Value>,
    mut object: Map<String, Value>,
) -> Result<Message, Malformed> {
    let operation = match operation.as_str() {
        Some("insert") => Operation::Insert,
        Some("update") => Operation::Update,
        Some("upsert") => Operation::Upsert,
        Some("delete") => Operation::Delete,
        _ => return Err(Malformed::UnknownOperation(text(operation))),
    };
    let entity_type = non_empty(object.remove("type"), "type")?;
    let key = non_empty(object.remove("key"), "key")?;
    if headers.get("txid").is_some_and(|t| !is_non_empty_string(t)) {
        return Err(Malformed::BadField("headers.txid"));
    }
    if headers.get("timestamp").is_some_and(|t| !is_non_empty_string(t)) {
        return Err(Malformed::BadField("headers.timestamp"));
    }
    // Present-and-null is a value (§5.1: any JSON value); absent is not.
    let value = object.remove("value");
    let needs_value = match operation {
        Operation::Insert => Some("insert"),
        Operation::Update => Some("update"),
        Operation::Upsert => Some("upsert"),
        Operation::Delete => None,
    };
    if let (Some(op), None) = (needs_value, &value) {
        return Err(Malformed::MissingValue(op));
    }
    Ok(Message::Change { entity_type, key, operation, value })
}

fn non_empty(value: Option<Value>, field: &'static str) -> Result<String, Malformed> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => Err(Malformed::BadField(field)),
    }
}

fn is_non_empty_string(value: &Value) -> bool {
    value.as_str().is_some_and(|s| !s.is_empty())
}

/// A short text of an unexpected value, for a reason.
fn text(value: &Value) -> String {
    let mut s = value.to_string();
    s.truncate(64);
    s
}

/// The malformed messages seen, for operators.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MalformedReport {
    pub count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<LastMalformed>,
}

/// The last malformed message: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastMalformed {
    pub offset: u64,
    pub reason: String,
}

/// One live row and the bytes it counts for.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    value: Value,
    bytes: usize,
}

/// The live state of a State Protocol stream, folded message by message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Materialized {
    types: BTreeMap<String, BTreeMap<String, Row>>,
    rows: usize,
    bytes: usize,
    malformed: MalformedReport,
}

impl Materialized {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds the message at `offset`; a malformed one is reported (and
    /// returned) and changes no row.
    pub fn apply(&mut self, offset: u64, data: &[u8]) -> Result<(), Malformed> {
        match parse(data) {
            Ok(message) => {
                self.apply_message(message);
                Ok(())
            }
            Err(reason) => {
                self.malformed.count += 1;
                self.malformed.last = Some(LastMalformed { offset, reason: reason.to_string() });
                Err(reason)
            }
        }
    }

    /// Folds a well-formed message (see the module docs for the rules).
    pub fn apply_message(&mut self, message: Message) {
        match message {
            Message::Control(Control::Reset) => {
                self.types.clear();
                self.rows = 0;
                self.bytes = 0;
            }
            Message::Control(Control::SnapshotStart | Control::SnapshotEnd) => {}
            Message::Change { entity_type, key, operation: Operation::Delete, .. } => {
                let Some(rows) = self.types.get_mut(&entity_type) else { return };
                if let Some(old) = rows.remove(&key) {
                    self.rows -= 1;
                    self.bytes -= old.bytes;
                }
                if rows.is_empty() {
                    self.types.remove(&entity_type);
                }
            }
            Message::Change { entity_type, key, value, .. } => {
                let value = value.unwrap_or(Value::Null);
                // What the row would cost re-sent as an insert's essentials.
                let bytes = entity_type.len() + key.len() + value.to_string().len();
                let rows = self.types.entry(entity_type).or_default();
                match rows.insert(key, Row { value, bytes }) {
                    Some(old) => self.bytes = self.bytes - old.bytes + bytes,
                    None => {
                        self.rows += 1;
                        self.bytes += bytes;
                    }
                }
            }
        }
    }

    /// Live rows, over all types.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The live state's size: for each row its type, key and value's JSON.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn malformed(&self) -> &MalformedReport {
        &self.malformed
    }

    /// The types with at least one row, sorted.
    pub fn types(&self) -> impl Iterator<Item = (&str, usize)> {
        self.types.iter().map(|(t, rows)| (t.as_str(), rows.len()))
    }

    /// One row.
    pub fn get(&self, entity_type: &str, key: &str) -> Option<&Value> {
        self.types.get(entity_type)?.get(key).map(|r| &r.value)
    }

    /// The rows of `entity_type` with keys after `after`, in key order.
    pub fn rows_after<'a>(
        &'a self,
        entity_type: &str,
        after: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a str, &'a Value)> + 'a {
        use std::ops::Bound::{Excluded, Unbounded};
        let lower = after.map_or(Unbounded, Excluded);
        self.types
            .get(entity_type)
            .into_iter()
            .flat_map(move |rows| rows.range::<str, _>((lower, Unbounded)))
            .map(|(k, r)| (k.as_str(), &r.value))
    }

    /// The whole live state as `{type: {key: value}}`.
    pub fn to_json(&self) -> Value {
        let types = self.types.iter().map(|(t, rows)| {
            let rows = rows.iter().map(|(k, r)| (k.clone(), r.value.clone())).collect::<Map<_, _>>();
            (t.clone(), Value::Object(rows))
        });
        Value::Object(types.collect())
    }
}

#[cfg(test)]
#[path = "fold_tests.rs"]
mod tests;
