//! The table's DynamoDB Stream records as Lambda delivers them, and what
//! each one means to the processor host.
//!
//! Records are parsed one at a time (the event's `Records` are kept raw), so
//! a malformed record is reported on its own and never fails its batch. The
//! layout they are read against is `ds_store_aws::schema`:
//!
//! - an `INSERT` of a chunk item (`sk` = `c#<incarnation>#<end>`) is a
//!   **doorbell**: the stream's tail moved (the event source's
//!   `FilterCriteria` lets only these and TTL removals through);
//! - a `REMOVE` of a meta item by the table's TTL (`userIdentity` is the
//!   DynamoDB service) is a **TTL removal**: the backstop deleted an expired
//!   stream's meta item and left the rest to this function;
//! - an `INSERT` or `MODIFY` of a keyed record (`sk` = `r#<incarnation>#<key>`)
//!   is a **record change** (the filter lets through the records of
//!   subscriptions, `ds_subscriptions::subscription_of_record`);
//! - anything else is ignored (a broader filter, a manual delete).

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine;
use ds_core::StreamMeta;
use ds_store_aws::schema::{self, PK, SK};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A DynamoDB Stream event as Lambda delivers it; each record is parsed on
/// its own by [`StreamRecord::parse`].
#[derive(Debug, Deserialize, Serialize)]
pub struct StreamEvent {
    #[serde(rename = "Records")]
    pub records: Vec<Box<RawValue>>,
}

/// One stream record (the fields this host reads).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRecord {
    #[serde(rename = "eventID", default)]
    pub event_id: Option<String>,
    pub event_name: EventName,
    pub dynamodb: Change,
    #[serde(default)]
    pub user_identity: Option<UserIdentity>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventName {
    Insert,
    Modify,
    Remove,
}

/// The `dynamodb` part of a record.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Change {
    pub keys: Image,
    #[serde(default)]
    pub new_image: Option<Image>,
    #[serde(default)]
    pub old_image: Option<Image>,
    /// The record's position in its shard: what `ReportBatchItemFailures`
    /// names a failed record by.
    pub sequence_number: String,
}

/// Who made the change: for TTL deletions, the DynamoDB service.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserIdentity {
    #[serde(rename = "type")]
    pub kind: String,
    pub principal_id: String,
}

/// The principal of a deletion made by the table's TTL.
pub const TTL_PRINCIPAL: &str = "dynamodb.amazonaws.com";

/// An item image in DynamoDB's JSON form.
pub type Image = HashMap<String, Attr>;

/// One attribute value in DynamoDB's JSON form (`{"S": "x"}`, `{"N": "1"}`,
/// `{"B": "<base64>"}`, ...).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub enum Attr {
    S(String),
    N(String),
    B(String),
    #[serde(rename = "BOOL")]
    Bool(bool),
    #[serde(rename = "NULL")]
    Null(bool),
    M(HashMap<String, Attr>),
    L(Vec<Attr>),
    #[serde(rename = "SS")]
    Ss(Vec<String>),
    #[serde(rename = "NS")]
    Ns(Vec<String>),
    #[serde(rename = "BS")]
    Bs(Vec<String>),
}

/// A record this host cannot read. Retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("not a DynamoDB stream record: {0}")]
    Shape(String),
    #[error("{what}: {why}")]
    Layout { what: &'static str, why: String },
}

/// Where a doorbell's stream is: its path, or (for a path too long for the
/// key) the partition key the path must be looked up by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StreamKey {
    Path(String),
    HashedPartition(String),
}

/// What one record means to the host.
#[derive(Debug, Clone, PartialEq)]
pub enum Meaning {
    /// The stream's tail moved to `end` in `incarnation`.
    Doorbell { stream: StreamKey, incarnation: String, end: u64 },
    /// The table's TTL removed this stream's meta item.
    TtlRemoved { meta: Box<StreamMeta> },
    /// A keyed record of the stream (`ds_core::Record`) was written.
    RecordChanged { stream: StreamKey, incarnation: String, key: String },
    /// Nothing for this host (e.g. a delete made by the HTTP function).
    Ignored { why: &'static str },
}

impl StreamRecord {
    /// Parses one raw record.
    pub fn parse(raw: &RawValue) -> Result<Self, RecordError> {
        serde_json::from_str(raw.get()).map_err(|e| RecordError::Shape(e.to_string()))
    }

    pub fn sequence_number(&self) -> &str {
        &self.dynamodb.sequence_number
    }

    /// What the record means (see the module docs).
    pub fn meaning(&self) -> Result<Meaning, RecordError> {
        let keys = &self.dynamodb.keys;
        let sk = string(keys, SK, "the record's keys")?;
        // The path index's sort keys are paths, and a path may well start
        // with `c#`: its items are none of the stream items below.
        let pk = string(keys, PK, "the record's keys")?;
        if pk == schema::PATH_INDEX_PK {
            return Ok(Meaning::Ignored { why: "a path index item" });
        }
        match self.event_name {
            EventName::Insert if sk.starts_with("c#") => {
                let incarnation = schema::incarnation_from_sk(sk)
                    .ok_or_else(|| layout("the chunk's sort key", format!("no incarnation in {sk:?}")))?;
                let end = schema::chunk_end_from_sk(sk)
                    .ok_or_else(|| layout("the chunk's sort key", format!("no end position in {sk:?}")))?;
                Ok(Meaning::Doorbell { stream: stream_key(pk)?, incarnation: incarnation.to_owned(), end })
            }
            EventName::Insert | EventName::Modify if sk.starts_with("r#") => {
                let incarnation = schema::incarnation_from_sk(sk)
                    .ok_or_else(|| layout("the record's sort key", format!("no incarnation in {sk:?}")))?;
                let key = sk.strip_prefix(&schema::record_sk_prefix(incarnation)).unwrap_or_default();
                Ok(Meaning::RecordChanged {
                    stream: stream_key(pk)?,
                    incarnation: incarnation.to_owned(),
                    key: key.to_owned(),
                })
            }
            EventName::Remove if sk == schema::META_SK => {
                let by_ttl = self.user_identity.as_ref().is_some_and(|u| u.principal_id == TTL_PRINCIPAL);
                if !by_ttl {
                    return Ok(Meaning::Ignored { why: "a meta item deleted by a client, not by the TTL" });
                }
                let image = self
                    .dynamodb
                    .old_image
                    .as_ref()
                    .ok_or_else(|| layout("the removed meta item", "no OldImage".into()))?;
                let item = to_sdk_item(image)?;
                let meta = ds_store_aws::codec::meta_from_item(&item)
                    .map_err(|e| layout("the removed meta item", e.to_string()))?;
                Ok(Meaning::TtlRemoved { meta: Box::new(meta) })
            }
            _ => Ok(Meaning::Ignored { why: "neither a chunk insert, a record change nor a TTL removal" }),
        }
    }
}

fn layout(what: &'static str, why: String) -> RecordError {
    RecordError::Layout { what, why }
}

fn string<'a>(image: &'a Image, name: &str, what: &'static str) -> Result<&'a str, RecordError> {
    match image.get(name) {
        Some(Attr::S(v)) => Ok(v),
        Some(other) => Err(layout(what, format!("attribute {name} is not a string: {other:?}"))),
        None => Err(layout(what, format!("attribute {name} is missing"))),
    }
}

/// The stream behind partition key `pk` (`stream#<path>`, or
/// `stream#h:<sha256 hex>` for a path too long to keep verbatim).
fn stream_key(pk: &str) -> Result<StreamKey, RecordError> {
    let rest = pk
        .strip_prefix("stream#")
        .ok_or_else(|| layout("the record's partition key", format!("{pk:?} is not a stream partition")))?;
    let hashed = rest.strip_prefix("h:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    if rest.is_empty() {
        return Err(layout("the record's partition key", "empty stream path".into()));
    }
    Ok(if hashed { StreamKey::HashedPartition(pk.to_owned()) } else { StreamKey::Path(rest.to_owned()) })
}

/// An image as the SDK's item type (for `ds_store_aws::codec`).
pub fn to_sdk_item(image: &Image) -> Result<HashMap<String, AttributeValue>, RecordError> {
    image.iter().map(|(k, v)| Ok((k.clone(), to_sdk(v)?))).collect()
}

fn blob(b64: &str) -> Result<Blob, RecordError> {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map(Blob::new)
        .map_err(|e| layout("a binary attribute", e.to_string()))
}

fn to_sdk(v: &Attr) -> Result<AttributeValue, RecordError> {
    Ok(match v {
        Attr::S(s) => AttributeValue::S(s.clone()),
        Attr::N(n) => AttributeValue::N(n.clone()),
        Attr::B(b) => AttributeValue::B(blob(b)?),
        Attr::Bool(b) => AttributeValue::Bool(*b),
        Attr::Null(n) => AttributeValue::Null(*n),
        Attr::M(m) => AttributeValue::M(to_sdk_item(m)?),
        Attr::L(l) => AttributeValue::L(l.iter().map(to_sdk).collect::<Result<_, _>>()?),
        Attr::Ss(v) => AttributeValue::Ss(v.clone()),
        Attr::Ns(v) => AttributeValue::Ns(v.clone()),
        Attr::Bs(v) => AttributeValue::Bs(v.iter().map(|b| blob(b)).collect::<Result<_, _>>()?),
    })
}

/// The sequence number of a record too malformed to parse, if it has one.
pub fn sequence_number_of(raw: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Seq {
        dynamodb: SeqInner,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct SeqInner {
        sequence_number: String,
    }
    serde_json::from_str::<Seq>(raw.get()).ok().map(|s| s.dynamodb.sequence_number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).expect("raw")
    }

    fn record(v: serde_json::Value) -> StreamRecord {
        StreamRecord::parse(&raw(v)).expect("parses")
    }

    #[test]
    fn a_chunk_insert_is_a_doorbell() {
        let r = record(json!({
            "eventID": "1", "eventName": "INSERT", "eventSource": "aws:dynamodb",
            "dynamodb": {
                "Keys": {"pk": {"S": "stream#orders/a"}, "sk": {"S": schema::chunk_sk("inc1", 0x2a)}},
                "NewImage": {"start": {"N": "0"}, "data": {"B": "aGk="}},
                "SequenceNumber": "100", "StreamViewType": "NEW_AND_OLD_IMAGES"
            }
        }));
        assert_eq!(r.sequence_number(), "100");
        assert_eq!(
            r.meaning(),
            Ok(Meaning::Doorbell { stream: StreamKey::Path("orders/a".into()), incarnation: "inc1".into(), end: 42 })
        );
    }

    #[test]
    fn a_long_path_doorbell_names_its_partition() {
        let pk = schema::stream_pk(&"x".repeat(600));
        let r = record(json!({
            "eventName": "INSERT",
            "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": schema::chunk_sk("i", 1)}}, "SequenceNumber": "1"}
        }));
        assert!(matches!(r.meaning(), Ok(Meaning::Doorbell { stream: StreamKey::HashedPartition(p), .. }) if p == pk));
    }

    #[test]
    fn a_path_index_item_is_no_doorbell_whatever_its_path() {
        // A stream named like a chunk key: its index item's sort key is the path.
        let r = record(json!({
            "eventName": "INSERT",
            "dynamodb": {"Keys": {"pk": {"S": schema::PATH_INDEX_PK}, "sk": {"S": schema::chunk_sk("i", 1)}},
                         "SequenceNumber": "1"}
        }));
        assert!(matches!(r.meaning(), Ok(Meaning::Ignored { .. })), "{:?}", r.meaning());
    }

    #[test]
    fn only_a_ttl_removal_of_a_meta_item_counts() {
        let meta = json!({
            "pk": {"S": "stream#a"}, "sk": {"S": "meta"}, "path": {"S": "a"}, "inc": {"S": "i1"},
            "ver": {"N": "3"}, "ct": {"S": "application/json"}, "created": {"N": "1"}, "tail": {"N": "10"},
            "closed": {"BOOL": false}, "touched": {"N": "1"}, "refs": {"N": "0"}, "sdel": {"BOOL": false},
            "f_src": {"S": "src"}, "f_inc": {"S": "s1"}, "f_base": {"N": "4"}, "fmt": {"N": "1"}
        });
        let base = json!({
            "eventName": "REMOVE",
            "dynamodb": {"Keys": {"pk": {"S": "stream#a"}, "sk": {"S": "meta"}}, "OldImage": meta, "SequenceNumber": "7"}
        });
        let by_client = record(base.clone());
        assert!(matches!(by_client.meaning(), Ok(Meaning::Ignored { .. })));
        let mut ttl = base;
        ttl["userIdentity"] = json!({"type": "Service", "principalId": TTL_PRINCIPAL});
        match record(ttl).meaning() {
            Ok(Meaning::TtlRemoved { meta }) => {
                assert_eq!((&*meta.path, &*meta.incarnation), ("a", "i1"));
                assert_eq!(meta.fork.map(|f| f.source.to_string()), Some("src".to_owned()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_written_keyed_record_is_a_record_change_named_by_its_key() {
        let sk = format!("{}state", schema::record_sk_prefix("v1"));
        for event in ["INSERT", "MODIFY"] {
            let r = record(json!({
                "eventName": event,
                "dynamodb": {"Keys": {"pk": {"S": schema::stream_pk("__ds/subscriptions/s1")}, "sk": {"S": sk}}, "SequenceNumber": "5"}
            }));
            match r.meaning() {
                Ok(Meaning::RecordChanged { stream: StreamKey::Path(p), incarnation, key }) => {
                    assert_eq!(
                        (p.as_str(), incarnation.as_str(), key.as_str()),
                        ("__ds/subscriptions/s1", "v1", "state")
                    );
                }
                other => panic!("{event}: {other:?}"),
            }
        }
        let removed = record(json!({
            "eventName": "REMOVE",
            "dynamodb": {"Keys": {"pk": {"S": "stream#a"}, "sk": {"S": sk}}, "SequenceNumber": "6"}
        }));
        assert!(matches!(removed.meaning(), Ok(Meaning::Ignored { .. })), "a removed record is no change to act on");
    }

    #[test]
    fn malformed_records_are_errors_with_their_sequence_when_readable() {
        let not_a_record = raw(json!({"eventName": "INSERT", "dynamodb": {"SequenceNumber": "9"}}));
        assert!(StreamRecord::parse(&not_a_record).is_err());
        assert_eq!(sequence_number_of(&not_a_record).as_deref(), Some("9"));
        let bad_key = record(json!({
            "eventName": "INSERT",
            "dynamodb": {"Keys": {"pk": {"S": "other#a"}, "sk": {"S": "c#i#zz"}}, "SequenceNumber": "3"}
        }));
        assert!(matches!(bad_key.meaning(), Err(RecordError::Layout { .. })), "{:?}", bad_key.meaning());
        let modify = record(json!({
            "eventName": "MODIFY", "dynamodb": {"Keys": {"pk": {"S": "stream#a"}, "sk": {"S": "meta"}}, "SequenceNumber": "4"}
        }));
        assert!(matches!(modify.meaning(), Ok(Meaning::Ignored { .. })));
    }
}
