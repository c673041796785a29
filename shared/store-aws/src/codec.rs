//! Conversions between the core's records and DynamoDB items, per the layout
//! in [`crate::schema`]. Decoding is strict: an item that does not match the
//! layout is a [`CodecError`], never a silently defaulted value.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;
use ds_core::{ForkOrigin, ProducerState, ProducerTriple, Record, StreamMeta};

use crate::schema::{
    chunk_attr, index_attr, meta_attr as m, producer_attr, record_attr, ItemKey, FORMAT_ATTR, FORMAT_VERSION, PK, SK,
    TTL_ATTR,
};

pub type Item = HashMap<String, AttributeValue>;

/// A stored item does not match the persisted layout.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    #[error("attribute `{0}` is missing")]
    Missing(&'static str),
    #[error("attribute `{0}` has the wrong type or an unparsable value")]
    Invalid(&'static str),
    #[error("item format version {0} is newer than this build understands ({FORMAT_VERSION})")]
    FutureFormat(u32),
}

/// How long after its expiry deadline DynamoDB's TTL may remove a meta item.
/// The alarm function is the primary expiry path; this is only a backstop
/// for a lost alarm, so it leaves the alarm plenty of time.
pub const TTL_BACKSTOP_GRACE_SECS: i64 = 24 * 3600;

pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get<'a>(item: &'a Item, name: &'static str) -> Result<&'a AttributeValue, CodecError> {
    item.get(name).ok_or(CodecError::Missing(name))
}

pub fn get_s<'a>(item: &'a Item, name: &'static str) -> Result<&'a str, CodecError> {
    get(item, name)?.as_s().map(String::as_str).map_err(|_| CodecError::Invalid(name))
}

fn opt_s(item: &Item, name: &'static str) -> Result<Option<String>, CodecError> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(v) => v.as_s().map(|x| Some(x.clone())).map_err(|_| CodecError::Invalid(name)),
    }
}

pub fn get_u64(item: &Item, name: &'static str) -> Result<u64, CodecError> {
    get(item, name)?.as_n().ok().and_then(|x| x.parse().ok()).ok_or(CodecError::Invalid(name))
}

fn get_i64(item: &Item, name: &'static str) -> Result<i64, CodecError> {
    get(item, name)?.as_n().ok().and_then(|x| x.parse().ok()).ok_or(CodecError::Invalid(name))
}

fn opt_u64(item: &Item, name: &'static str) -> Result<Option<u64>, CodecError> {
    if item.contains_key(name) {
        get_u64(item, name).map(Some)
    } else {
        Ok(None)
    }
}

fn opt_i64(item: &Item, name: &'static str) -> Result<Option<i64>, CodecError> {
    if item.contains_key(name) {
        get_i64(item, name).map(Some)
    } else {
        Ok(None)
    }
}

fn get_bool(item: &Item, name: &'static str) -> Result<bool, CodecError> {
    get(item, name)?.as_bool().copied().map_err(|_| CodecError::Invalid(name))
}

fn check_format(item: &Item) -> Result<(), CodecError> {
    let fmt = u32::try_from(get_u64(item, FORMAT_ATTR)?).map_err(|_| CodecError::Invalid(FORMAT_ATTR))?;
    if fmt > FORMAT_VERSION {
        return Err(CodecError::FutureFormat(fmt));
    }
    Ok(())
}

fn keyed(key: &ItemKey) -> Item {
    let mut item = Item::new();
    item.insert(PK.into(), s(key.pk()));
    item.insert(SK.into(), s(key.sk()));
    item.insert(FORMAT_ATTR.into(), n(FORMAT_VERSION));
    item
}

/// The key attributes of `key`, for GetItem / UpdateItem / Delete.
pub fn key_of(key: &ItemKey) -> Item {
    let mut item = Item::new();
    item.insert(PK.into(), s(key.pk()));
    item.insert(SK.into(), s(key.sk()));
    item
}

/// The DynamoDB TTL backstop (epoch seconds) for `meta`: none while forks
/// reference it (their reads need its data) or when it never expires.
pub fn ttl_backstop_secs(meta: &StreamMeta) -> Option<i64> {
    if meta.ref_count > 0 {
        return None;
    }
    meta.expiry_deadline_ms().map(|d| d.div_euclid(1000).saturating_add(TTL_BACKSTOP_GRACE_SECS))
}

/// The full meta item for `meta`, stamped with the writing commit's id.
pub fn meta_to_item(meta: &StreamMeta, commit_id: &str) -> Item {
    let mut item = keyed(&ItemKey::Meta { path: meta.path.to_string() });
    item.insert(m::PATH.into(), s(&*meta.path));
    item.insert(m::INCARNATION.into(), s(&*meta.incarnation));
    item.insert(m::VERSION.into(), n(meta.version));
    item.insert(m::CONTENT_TYPE.into(), s(&*meta.content_type));
    item.insert(m::CREATED.into(), n(meta.created_at_ms));
    item.insert(m::TAIL.into(), n(meta.tail));
    item.insert(m::CLOSED.into(), AttributeValue::Bool(meta.closed));
    if let Some(by) = &meta.closed_by {
        item.insert(m::CLOSED_BY_ID.into(), s(&by.id));
        item.insert(m::CLOSED_BY_EPOCH.into(), n(by.epoch));
        item.insert(m::CLOSED_BY_SEQ.into(), n(by.seq));
    }
    if let Some(ttl) = meta.ttl_secs {
        item.insert(m::TTL_SECS.into(), n(ttl));
    }
    if let Some(at) = meta.expires_at_ms {
        item.insert(m::EXPIRES_AT.into(), n(at));
    }
    item.insert(m::TOUCHED.into(), n(meta.touched_at_ms));
    if let Some(seq) = &meta.last_stream_seq {
        item.insert(m::STREAM_SEQ.into(), s(seq));
    }
    if let Some(fork) = &meta.fork {
        item.insert(m::FORK_SOURCE.into(), s(&*fork.source));
        item.insert(m::FORK_SOURCE_INC.into(), s(&*fork.source_incarnation));
        item.insert(m::FORK_BASE.into(), n(fork.base));
    }
    item.insert(m::REF_COUNT.into(), n(meta.ref_count));
    item.insert(m::SOFT_DELETED.into(), AttributeValue::Bool(meta.soft_deleted));
    if meta.retained_from > 0 {
        item.insert(m::RETAINED_FROM.into(), n(meta.retained_from));
    }
    item.insert(m::COMMIT_ID.into(), s(commit_id));
    if let Some(ttl) = ttl_backstop_secs(meta) {
        item.insert(TTL_ATTR.into(), n(ttl));
    }
    item
}

/// Decode a meta item.
pub fn meta_from_item(item: &Item) -> Result<StreamMeta, CodecError> {
    check_format(item)?;
    let closed_by = match opt_s(item, m::CLOSED_BY_ID)? {
        Some(id) => Some(ProducerTriple {
            id,
            epoch: get_u64(item, m::CLOSED_BY_EPOCH)?,
            seq: get_u64(item, m::CLOSED_BY_SEQ)?,
        }),
        None => None,
    };
    let fork = match opt_s(item, m::FORK_SOURCE)? {
        Some(source) => Some(ForkOrigin {
            source: source.into(),
            source_incarnation: get_s(item, m::FORK_SOURCE_INC)?.into(),
            base: get_u64(item, m::FORK_BASE)?,
        }),
        None => None,
    };
    Ok(StreamMeta {
        path: get_s(item, m::PATH)?.into(),
        incarnation: get_s(item, m::INCARNATION)?.into(),
        version: get_u64(item, m::VERSION)?,
        content_type: get_s(item, m::CONTENT_TYPE)?.into(),
        created_at_ms: get_i64(item, m::CREATED)?,
        tail: get_u64(item, m::TAIL)?,
        closed: get_bool(item, m::CLOSED)?,
        closed_by,
        ttl_secs: opt_u64(item, m::TTL_SECS)?,
        expires_at_ms: opt_i64(item, m::EXPIRES_AT)?,
        touched_at_ms: get_i64(item, m::TOUCHED)?,
        last_stream_seq: opt_s(item, m::STREAM_SEQ)?,
        fork,
        ref_count: get_u64(item, m::REF_COUNT)?,
        soft_deleted: get_bool(item, m::SOFT_DELETED)?,
        retained_from: opt_u64(item, m::RETAINED_FROM)?.unwrap_or(0),
    })
}

/// The commit id stamped on a meta item, if any.
pub fn meta_commit_id(item: &Item) -> Option<&str> {
    item.get(m::COMMIT_ID).and_then(|v| v.as_s().ok()).map(String::as_str)
}

/// The path index item of the stream at `path` (see [`ItemKey::PathIndex`]).
pub fn path_index_to_item(path: &str) -> Item {
    let mut item = keyed(&ItemKey::PathIndex { path: path.to_owned() });
    item.insert(index_attr::PATH.into(), s(path));
    item
}

/// The path a path index item stands for.
pub fn path_from_index_item(item: &Item) -> Result<&str, CodecError> {
    check_format(item)?;
    get_s(item, index_attr::PATH)
}

/// The producer item for `(path, incarnation, producer_id)`.
pub fn producer_to_item(path: &str, incarnation: &str, producer_id: &str, state: ProducerState) -> Item {
    let mut item = keyed(&ItemKey::Producer {
        path: path.to_owned(),
        incarnation: incarnation.to_owned(),
        producer_id: producer_id.to_owned(),
    });
    item.insert(producer_attr::ID.into(), s(producer_id));
    item.insert(producer_attr::EPOCH.into(), n(state.epoch));
    item.insert(producer_attr::SEQ.into(), n(state.last_seq));
    item
}

pub fn producer_from_item(item: &Item) -> Result<ProducerState, CodecError> {
    check_format(item)?;
    Ok(ProducerState { epoch: get_u64(item, producer_attr::EPOCH)?, last_seq: get_u64(item, producer_attr::SEQ)? })
}

/// The record item for `(path, incarnation, key)`.
pub fn record_to_item(path: &str, incarnation: &str, key: &str, record: &Record) -> Item {
    let mut item =
        keyed(&ItemKey::Record { path: path.to_owned(), incarnation: incarnation.to_owned(), key: key.to_owned() });
    item.insert(record_attr::KEY.into(), s(key));
    item.insert(record_attr::REVISION.into(), n(record.revision));
    item.insert(record_attr::VALUE.into(), AttributeValue::B(Blob::new(record.value.to_vec())));
    item
}

pub fn record_from_item(item: &Item) -> Result<Record, CodecError> {
    check_format(item)?;
    let value = get(item, record_attr::VALUE)?.as_b().map_err(|_| CodecError::Invalid(record_attr::VALUE))?;
    Ok(Record { revision: get_u64(item, record_attr::REVISION)?, value: Bytes::copy_from_slice(value.as_ref()) })
}

/// Where a chunk's bytes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkBody {
    /// Stored in the item itself.
    Inline(Bytes),
    /// Bytes `[offset, offset + len)` of an immutable S3 object.
    Object { key: String, offset: u64 },
}

/// A decoded chunk item: positions `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkItem {
    pub start: u64,
    pub end: u64,
    pub body: ChunkBody,
}

impl ChunkItem {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

pub fn chunk_to_item(path: &str, incarnation: &str, chunk: &ChunkItem) -> Item {
    let mut item =
        keyed(&ItemKey::Chunk { path: path.to_owned(), incarnation: incarnation.to_owned(), end: chunk.end });
    item.insert(chunk_attr::START.into(), n(chunk.start));
    match &chunk.body {
        ChunkBody::Inline(data) => {
            item.insert(chunk_attr::DATA.into(), AttributeValue::B(Blob::new(data.to_vec())));
        }
        ChunkBody::Object { key, offset } => {
            item.insert(chunk_attr::OBJECT.into(), s(key));
            item.insert(chunk_attr::OBJECT_OFFSET.into(), n(offset));
        }
    }
    item
}

pub fn chunk_from_item(item: &Item) -> Result<ChunkItem, CodecError> {
    check_format(item)?;
    let end = crate::schema::chunk_end_from_sk(get_s(item, SK)?).ok_or(CodecError::Invalid(SK))?;
    let start = get_u64(item, chunk_attr::START)?;
    if start > end {
        return Err(CodecError::Invalid(chunk_attr::START));
    }
    let body = if let Some(data) = item.get(chunk_attr::DATA) {
        let blob = data.as_b().map_err(|_| CodecError::Invalid(chunk_attr::DATA))?;
        if blob.as_ref().len() as u64 != end - start {
            return Err(CodecError::Invalid(chunk_attr::DATA));
        }
        ChunkBody::Inline(Bytes::copy_from_slice(blob.as_ref()))
    } else {
        ChunkBody::Object {
            key: get_s(item, chunk_attr::OBJECT)?.to_owned(),
            offset: get_u64(item, chunk_attr::OBJECT_OFFSET)?,
        }
    };
    Ok(ChunkItem { start, end, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StreamMeta {
        StreamMeta {
            path: "a/b".into(),
            incarnation: "i1".into(),
            version: 7,
            content_type: "text/plain".into(),
            created_at_ms: 1_000,
            tail: 42,
            closed: true,
            closed_by: Some(ProducerTriple { id: "p".into(), epoch: 2, seq: 3 }),
            ttl_secs: Some(60),
            expires_at_ms: None,
            touched_at_ms: 5_000,
            last_stream_seq: Some("0009".into()),
            fork: Some(ForkOrigin { source: "src".into(), source_incarnation: "i0".into(), base: 10 }),
            ref_count: 0,
            soft_deleted: false,
            retained_from: 0,
        }
    }

    #[test]
    fn meta_round_trips_and_carries_ttl_backstop() {
        let meta = sample();
        let item = meta_to_item(&meta, "c1");
        assert_eq!(meta_from_item(&item).ok(), Some(meta.clone()));
        assert_eq!(meta_commit_id(&item), Some("c1"));
        // deadline 5_000 + 60_000 ms = 65 s, plus the grace.
        assert_eq!(item.get(TTL_ATTR), Some(&n(65 + TTL_BACKSTOP_GRACE_SECS)));
        let mut forked = meta;
        forked.ref_count = 1;
        assert!(!meta_to_item(&forked, "c2").contains_key(TTL_ATTR), "a stream with forks must not be TTL-deleted");
    }

    #[test]
    fn retained_from_round_trips_and_is_absent_until_a_trim() {
        let meta = sample();
        let item = meta_to_item(&meta, "c1");
        assert!(!item.contains_key(m::RETAINED_FROM), "an untrimmed stream's item is the one it always was");
        let mut trimmed = meta;
        trimmed.retained_from = 17;
        let item = meta_to_item(&trimmed, "c2");
        assert_eq!(item.get(m::RETAINED_FROM), Some(&n(17u64)));
        assert_eq!(meta_from_item(&item).ok(), Some(trimmed));
    }

    #[test]
    fn chunk_items_round_trip_both_bodies() {
        let inline = ChunkItem { start: 3, end: 6, body: ChunkBody::Inline(Bytes::from_static(b"abc")) };
        assert_eq!(chunk_from_item(&chunk_to_item("p", "i", &inline)).ok(), Some(inline));
        let ptr = ChunkItem { start: 6, end: 100, body: ChunkBody::Object { key: "k".into(), offset: 9 } };
        assert_eq!(chunk_from_item(&chunk_to_item("p", "i", &ptr)).ok(), Some(ptr));
    }

    #[test]
    fn future_formats_and_bad_items_are_rejected() {
        let mut item = meta_to_item(&sample(), "c");
        item.insert(FORMAT_ATTR.into(), n(FORMAT_VERSION + 1));
        assert!(matches!(meta_from_item(&item), Err(CodecError::FutureFormat(_))));
        let mut item = meta_to_item(&sample(), "c");
        item.insert(m::TAIL.into(), s("x"));
        assert!(matches!(meta_from_item(&item), Err(CodecError::Invalid(_))));
        let bad = ChunkItem { start: 3, end: 7, body: ChunkBody::Inline(Bytes::from_static(b"abc")) };
        assert!(chunk_from_item(&chunk_to_item("p", "i", &bad)).is_err(), "inline length must match the key range");
    }
}
