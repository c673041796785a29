//! Where subscription state lives: keyed records ([`ds_core::Record`]) of
//! the substrate, under reserved paths no application stream can take
//! (`__ds/…`), so memory, local disk and AWS keep it the same way.
//!
//! - `__ds/subscriptions/<id>`, record `state`: the [`SubscriptionRecord`]
//!   (on AWS its own partition, so subscriptions do not contend).
//! - `__ds/subscriptions`, record `index`: the ids of live subscriptions, so
//!   a host can find them all at start-up without listing the table. It is
//!   written in the same commit as the subscription record when one is
//!   created or deleted.
//!
//! Every write is conditional on the revision read ([`RecordExpect`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use ds_core::{Op, Record, RecordExpect, StoreError, StreamHandle, StreamStore};
use serde::{Deserialize, Serialize};

use crate::record::SubscriptionRecord;

const HOME: &str = "__ds/subscriptions";
/// The records hang off no stream incarnation: a fixed one.
const INCARNATION: &str = "v1";
const STATE_KEY: &str = "state";
const INDEX_KEY: &str = "index";

fn sub_path(id: &str) -> String {
    format!("{HOME}/{id}")
}

fn corrupt(what: &str, e: serde_json::Error) -> StoreError {
    StoreError::corrupt(format!("subscription {what} record"), e)
}

fn unencodable(e: serde_json::Error) -> StoreError {
    StoreError::backend("encoding a subscription record", e)
}

/// A record with the revision it was read at.
#[derive(Debug, Clone)]
pub struct Stored<T> {
    pub revision: u64,
    pub value: T,
}

/// Ids of the live subscriptions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Index {
    pub ids: BTreeSet<String>,
}

/// The subscription whose state a keyed record is, if it is one: how a host
/// fed by the store's change stream tells a subscription's change from
/// other records.
pub fn subscription_of_record<'a>(path: &'a str, incarnation: &str, key: &str) -> Option<&'a str> {
    let id = path.strip_prefix(HOME)?.strip_prefix('/')?;
    (incarnation == INCARNATION && key == STATE_KEY && crate::config::validate_id(id).is_ok()).then_some(id)
}

pub async fn read_subscription(
    store: &dyn StreamStore,
    id: &str,
) -> Result<Option<Stored<SubscriptionRecord>>, StoreError> {
    let record = store.read_record(&StreamHandle::detached(&sub_path(id)), INCARNATION, STATE_KEY).await?;
    record
        .map(|r| {
            let value = serde_json::from_slice(&r.value).map_err(|e| corrupt("state", e))?;
            Ok(Stored { revision: r.revision, value })
        })
        .transpose()
}

pub async fn read_index(store: &dyn StreamStore) -> Result<Option<Stored<Index>>, StoreError> {
    let record = store.read_record(&StreamHandle::detached(HOME), INCARNATION, INDEX_KEY).await?;
    record
        .map(|r| {
            let value = serde_json::from_slice(&r.value).map_err(|e| corrupt("index", e))?;
            Ok(Stored { revision: r.revision, value })
        })
        .transpose()
}

fn put(path: Arc<str>, key: &str, value: Vec<u8>, expect: Option<u64>) -> Op {
    Op::PutRecord {
        path,
        incarnation: INCARNATION.into(),
        key: key.into(),
        record: Record { revision: expect.map_or(1, |r| r + 1), value: Bytes::from(value) },
        expect: expect.map_or(RecordExpect::Absent, RecordExpect::Revision),
    }
}

/// The write of `rec` over the stored revision `expect` (`None`: absent).
pub fn put_subscription(rec: &SubscriptionRecord, expect: Option<u64>) -> Result<Op, StoreError> {
    let value = serde_json::to_vec(rec).map_err(unencodable)?;
    Ok(put(sub_path(&rec.id).into(), STATE_KEY, value, expect))
}

pub fn put_index(index: &Index, expect: Option<u64>) -> Result<Op, StoreError> {
    let value = serde_json::to_vec(index).map_err(unencodable)?;
    Ok(put(HOME.into(), INDEX_KEY, value, expect))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_records_name_their_subscription_and_nothing_else_does() {
        assert_eq!(subscription_of_record("__ds/subscriptions/sub-1", "v1", "state"), Some("sub-1"));
        assert_eq!(subscription_of_record(&sub_path("a.b"), INCARNATION, STATE_KEY), Some("a.b"));
        assert_eq!(subscription_of_record(HOME, INCARNATION, INDEX_KEY), None, "the index");
        assert_eq!(subscription_of_record("__ds/subscriptions/sub-1", "v1", "index"), None);
        assert_eq!(subscription_of_record("__ds/subscriptions/sub-1", "v2", "state"), None);
        assert_eq!(subscription_of_record("__ds/subscriptions/a/b", "v1", "state"), None, "not an id");
        assert_eq!(subscription_of_record("orders/1", "v1", "state"), None);
    }
}
