//! The path index ([`crate::schema::ItemKey::PathIndex`]): listing streams
//! by path prefix without scanning the table.
//!
//! A listing page is one `Query` of the index partition
//! (`begins_with(sk, prefix)`, `ExclusiveStartKey` = the index key of
//! `after`, `Limit` = the page size), which reads only index items of
//! matching paths, then one consistent `BatchGetItem` per 100 of them for
//! their meta items. A page of up to 100 streams costs 2 calls, and read
//! units in proportion to the streams it returns, however large the table.
//!
//! The index is written inside the commits that create and delete streams
//! ([`crate::plan`]), so an index item names a live meta item — except
//! after DynamoDB's TTL backstop removed a meta item alone. Such a
//! *dangling* item is skipped by the listing (its `BatchGetItem` finds no
//! meta) and removed by [`remove_dangling`], which the listing calls on the
//! ones it meets and the processor function calls on every TTL removal. The
//! removal is a transaction conditional on the meta item's absence, so it
//! can never remove the entry of a stream created again in between.
//!
//! **Migration.** A table written before the index existed has meta items
//! without index items: those streams are not listed (subscription
//! backfill and `GET /v1/processors` do not see them) until [`backfill`]
//! has run once (`durable-streams aws index-paths`); streams created or
//! deleted meanwhile keep their own entries right, so it may run while
//! the service is live.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, KeysAndAttributes, PutRequest, TransactWriteItem, WriteRequest,
};
use ds_core::{StoreError, StreamMeta};
use tracing::{debug, info, warn};

use crate::backend::Backend;
use crate::codec::{self, s, Item};
use crate::error::{classify, AwsError};
use crate::schema::{self, ItemKey, META_SK, PATH_INDEX_PK, PK, SK};

/// Keys per `BatchGetItem` (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;
/// Index items read per `Query` at most (a page larger than this is read
/// in several queries; each still returns only matches).
const QUERY_LIMIT: usize = 1000;

/// Meta items of the streams whose path starts with `prefix` (every stream
/// for `""`), strictly after `after`, in byte-wise path order, at most
/// `limit` (see the module docs).
pub async fn list(b: &Backend, prefix: &str, after: Option<&str>, limit: usize) -> Result<Vec<StreamMeta>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut start = match after.map(schema::path_index_sk) {
        Some(a) if a.starts_with(prefix) => Some(index_key(a)),
        // Every path with the prefix sorts after `after`.
        Some(a) if a.as_str() < prefix => None,
        // Every path with the prefix sorts before `after`.
        Some(_) => return Ok(Vec::new()),
        None => None,
    };
    let mut metas = Vec::with_capacity(limit.min(QUERY_LIMIT));
    loop {
        let want = (limit - metas.len()).min(QUERY_LIMIT);
        let mut q = b
            .ddb
            .query()
            .table_name(&b.cfg.table)
            .consistent_read(true)
            .limit(i32::try_from(want).unwrap_or(i32::MAX))
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", s(PATH_INDEX_PK))
            .set_exclusive_start_key(start.take());
        q = if prefix.is_empty() {
            q.key_condition_expression("#pk = :pk")
        } else {
            q.key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":prefix", s(prefix))
        };
        let page = q.send().await.map_err(classify)?;
        let paths = page
            .items()
            .iter()
            .map(|i| codec::path_from_index_item(i).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()?;
        let mut found = batch_get_metas(b, &paths).await?;
        for path in paths {
            match found.remove(&path) {
                Some(meta) => metas.push(meta),
                None => {
                    // Removed by the TTL backstop (or deleted since the query).
                    if let Err(e) = remove_dangling(b, &path).await {
                        warn!(path, error = %e, "removing a dangling path index item failed");
                    }
                }
            }
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() && metas.len() < limit => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(metas)
}

fn index_key(sk: String) -> Item {
    Item::from([(PK.to_owned(), s(PATH_INDEX_PK)), (SK.to_owned(), AttributeValue::S(sk))])
}

/// Consistent reads of the meta items of `paths`, by path (absent ones left out).
async fn batch_get_metas(b: &Backend, paths: &[String]) -> Result<HashMap<String, StreamMeta>, StoreError> {
    let mut out = HashMap::with_capacity(paths.len());
    for batch in paths.chunks(BATCH_GET_KEYS) {
        let keys: Vec<Item> = batch.iter().map(|p| codec::key_of(&ItemKey::Meta { path: p.clone() })).collect();
        let mut request = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .build()
                .map_err(|e| StoreError::backend("building a BatchGetItem", e))?,
        );
        // Unprocessed keys (DynamoDB's answer to a partial throttle) are
        // asked for again under the retry budget.
        let mut budget = crate::retry::Budget::start();
        while let Some(keys) = request.take() {
            let page = b.ddb.batch_get_item().request_items(&b.cfg.table, keys).send().await.map_err(classify)?;
            for item in page.responses().and_then(|r| r.get(&b.cfg.table)).into_iter().flatten() {
                let meta = codec::meta_from_item(item)?;
                out.insert(meta.path.to_string(), meta);
            }
            request = page.unprocessed_keys().and_then(|u| u.get(&b.cfg.table)).cloned();
            if request.is_some() && !budget.next(b).await {
                return Err(StoreError::Unavailable("BatchGetItem left keys unprocessed".into()));
            }
        }
    }
    Ok(out)
}

/// Remove the index item of `path` if the stream has no meta item (one
/// transaction: a condition check of the meta's absence and the delete).
/// `false` when the stream exists (its entry stays); `true` when no entry
/// is left (removed now, or there was none).
pub async fn remove_dangling(b: &Backend, path: &str) -> Result<bool, AwsError> {
    let check = ConditionCheck::builder()
        .table_name(&b.cfg.table)
        .set_key(Some(codec::key_of(&ItemKey::Meta { path: path.to_owned() })))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", PK)
        .build()
        .map_err(|e| AwsError::Rejected(e.to_string()))?;
    let delete = Delete::builder()
        .table_name(&b.cfg.table)
        .set_key(Some(codec::key_of(&ItemKey::PathIndex { path: path.to_owned() })))
        .build()
        .map_err(|e| AwsError::Rejected(e.to_string()))?;
    let items = vec![
        TransactWriteItem::builder().condition_check(check).build(),
        TransactWriteItem::builder().delete(delete).build(),
    ];
    match crate::retry::transact(b, items).await {
        Ok(()) => {
            debug!(path, "removed a dangling path index item");
            Ok(true)
        }
        Err(crate::error::CommitFailure::Conflict { .. }) => Ok(false),
        Err(e) => Err(match e {
            crate::error::CommitFailure::Throttled(m) => AwsError::Throttled(m),
            crate::error::CommitFailure::Ambiguous(m) => AwsError::Ambiguous(m),
            other => AwsError::Rejected(other.to_string()),
        }),
    }
}

/// What [`backfill`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BackfillReport {
    /// Meta items found by the scan.
    pub streams: usize,
    /// Index items written (every stream's, present or not: a put is idempotent).
    pub written: usize,
}

/// The one-off migration of a table written before the path index existed:
/// scan the meta items and put every stream's index item (see the module
/// docs). Idempotent; an index item put for a stream deleted during the
/// scan dangles until a listing or [`remove_dangling`] meets it. The only
/// full-table scan of the crate, never on a request path.
pub async fn backfill(b: &Backend) -> Result<BackfillReport, StoreError> {
    let mut report = BackfillReport::default();
    let mut start: Option<Item> = None;
    loop {
        let page = b
            .ddb
            .scan()
            .table_name(&b.cfg.table)
            .consistent_read(true)
            .projection_expression("#pk, #sk, #path")
            .filter_expression("#sk = :meta")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_names("#path", schema::meta_attr::PATH)
            .expression_attribute_values(":meta", s(META_SK))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(classify)?;
        let mut puts = Vec::new();
        for item in page.items() {
            let path = codec::get_s(item, schema::meta_attr::PATH)?;
            let put = PutRequest::builder()
                .set_item(Some(codec::path_index_to_item(path)))
                .build()
                .map_err(|e| StoreError::backend("building a PutRequest", e))?;
            puts.push(WriteRequest::builder().put_request(put).build());
        }
        report.streams += puts.len();
        report.written += puts.len();
        crate::cleanup::batch_write(b, puts).await?;
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    info!(?report, "path index backfilled");
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_name_the_index_partition() {
        let k = index_key("a/b".into());
        assert_eq!(k.get(PK), Some(&s(PATH_INDEX_PK)));
        assert_eq!(k.get(SK), Some(&s("a/b")));
        assert_eq!(k, codec::key_of(&ItemKey::PathIndex { path: "a/b".into() }));
    }
}
