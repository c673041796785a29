//! Journal entries and how they become events.
//!
//! The journal is a JSON stream: each entry is one JSON value at a position
//! supplied by the journal (strictly increasing, not necessarily dense). An
//! event is an object `{"type": string, "payload"?: any, "metadata"?: object}`.
//! Decoding is pure; its only inputs are the contract and the bytes.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::contract::Contract;

/// Free-form event metadata (`metadata` member of the JSON object).
pub type Metadata = Map<String, Value>;

/// One raw entry of the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub position: u64,
    pub data: Bytes,
}

impl JournalEntry {
    pub fn new(position: u64, data: impl Into<Bytes>) -> Self {
        Self { position, data: data.into() }
    }
}

/// A decoded, consumed event as a processor sees it.
///
/// `event` is the processor's own type, deserialized from
/// `{"type": …, "payload": …}` — typically an enum with
/// `#[serde(tag = "type", content = "payload")]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope<E> {
    pub position: u64,
    pub event_type: String,
    pub event: E,
    pub metadata: Metadata,
}

/// An event to append (core events, or by authors through their own sinks).
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingEvent {
    pub event_type: String,
    pub payload: Value,
    pub metadata: Metadata,
}

impl OutgoingEvent {
    pub fn new(event_type: impl Into<String>, payload: Value) -> Self {
        Self { event_type: event_type.into(), payload, metadata: Metadata::new() }
    }

    /// The JSON bytes the journal stores.
    pub fn encode(&self) -> Bytes {
        let mut object = Map::new();
        object.insert("type".into(), Value::String(self.event_type.clone()));
        object.insert("payload".into(), self.payload.clone());
        if !self.metadata.is_empty() {
            object.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        Bytes::from(Value::Object(object).to_string())
    }
}

/// What one journal entry means to one processor.
#[derive(Debug)]
pub(crate) enum Decoded<E> {
    /// Consumed and decodable: reduced and processed.
    Deliverable(Envelope<E>),
    /// Consumed but undecodable: advances the cursors, earns one diagnostic.
    Malformed { event_type: Option<String>, reason: String },
    /// Not in the contract: advances the cursors, nothing else.
    Unconsumed,
}

impl<E> Decoded<E> {
    pub(crate) fn is_deliverable(&self) -> bool {
        matches!(self, Self::Deliverable(_))
    }
}

pub(crate) fn decode<E: DeserializeOwned>(contract: &Contract, entry: &JournalEntry) -> Decoded<E> {
    // Nothing is consumed (the `state` kind's runner): whatever the entry
    // holds, it is not this processor's, and parsing it would cost a JSON
    // parse per message for nothing.
    if contract.consumes.is_empty() {
        return Decoded::Unconsumed;
    }
    let value: Value = match serde_json::from_slice(&entry.data) {
        Ok(value) => value,
        Err(e) => return untyped(contract, format!("entry is not JSON: {e}")),
    };
    let Value::Object(mut object) = value else {
        return untyped(contract, "entry is not a JSON object".into());
    };
    let event_type = match object.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => return untyped(contract, "entry has no string `type`".into()),
    };
    if !contract.consumes_type(&event_type) {
        return Decoded::Unconsumed;
    }
    let metadata = match object.remove("metadata") {
        None | Some(Value::Null) => Metadata::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Decoded::Malformed { event_type: Some(event_type), reason: "`metadata` is not an object".into() }
        }
    };
    // Only type and payload reach the author's type: metadata is handed over
    // separately, so strict author enums do not trip over it.
    let mut tagged = Map::new();
    tagged.insert("type".into(), Value::String(event_type.clone()));
    if let Some(payload) = object.remove("payload") {
        tagged.insert("payload".into(), payload);
    }
    match serde_json::from_value::<E>(Value::Object(tagged)) {
        Ok(event) => Decoded::Deliverable(Envelope { position: entry.position, event_type, event, metadata }),
        Err(e) => Decoded::Malformed { event_type: Some(event_type), reason: e.to_string() },
    }
}

/// An entry without a readable type is consumed only by a wildcard processor.
fn untyped<E>(contract: &Contract, reason: String) -> Decoded<E> {
    if contract.consumes_any() {
        Decoded::Malformed { event_type: None, reason }
    } else {
        Decoded::Unconsumed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(tag = "type", content = "payload")]
    enum Ev {
        #[serde(rename = "a/set")]
        Set { v: i64 },
        #[serde(rename = "a/clear")]
        Clear,
    }

    fn entry(s: &str) -> JournalEntry {
        JournalEntry::new(7, s.to_owned())
    }

    #[test]
    fn decodes_tagged_payload_and_metadata() {
        let c = Contract::new("p", "1", ["a/set", "a/clear"]);
        let d = decode::<Ev>(&c, &entry(r#"{"type":"a/set","payload":{"v":3},"metadata":{"by":"x"}}"#));
        let Decoded::Deliverable(env) = d else { panic!("not deliverable: {d:?}") };
        assert_eq!(env.event, Ev::Set { v: 3 });
        assert_eq!(env.position, 7);
        assert_eq!(env.metadata.get("by"), Some(&Value::String("x".into())));
        let d = decode::<Ev>(&c, &entry(r#"{"type":"a/clear"}"#));
        assert!(matches!(d, Decoded::Deliverable(Envelope { event: Ev::Clear, .. })));
    }

    #[test]
    fn classifies_malformed_and_unconsumed() {
        let c = Contract::new("p", "1", ["a/set"]);
        assert!(matches!(
            decode::<Ev>(&c, &entry(r#"{"type":"a/set","payload":{"v":"x"}}"#)),
            Decoded::Malformed { event_type: Some(_), .. }
        ));
        assert!(matches!(decode::<Ev>(&c, &entry(r#"{"type":"b"}"#)), Decoded::Unconsumed));
        assert!(matches!(decode::<Ev>(&c, &entry("not json")), Decoded::Unconsumed));
        let any = Contract::new("p", "1", ["*"]);
        assert!(matches!(decode::<Ev>(&any, &entry("not json")), Decoded::Malformed { event_type: None, .. }));
    }

    #[test]
    fn a_processor_that_consumes_nothing_is_given_no_entry() {
        let c = Contract::new("p", "1", Vec::<String>::new());
        assert!(matches!(decode::<Ev>(&c, &entry(r#"{"type":"a/set","payload":{"v":3}}"#)), Decoded::Unconsumed));
        assert!(matches!(decode::<Ev>(&c, &entry("{not json")), Decoded::Unconsumed));
        assert!(matches!(decode::<Ev>(&c, &entry(r#"{"type":"stream/revived"}"#)), Decoded::Unconsumed));
    }
}
