//! Garbage removal: the items and objects of deleted incarnations, and S3
//! objects no chunk item points at (left by a crash between the S3 put and
//! the commit). Nothing here is on a request's correctness path: garbage is
//! unreachable by construction (its incarnation is gone, or no item points
//! at it), so removal may be late or repeated.
//!
//! Callers: a commit that deletes a stream purges the wiped incarnation right
//! after it applies ([`purge_incarnation`]), and the processor function
//! purges the incarnation of a meta item the table's TTL removed.
//! [`sweep_path`] is called through `AwsSubstrate::sweep`: the processor
//! function sweeps a stream now and then as its chunks accumulate, so
//! objects left by a commit whose outcome stayed unknown do not stay.

use std::collections::HashSet;

use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, WriteRequest};
use tracing::{debug, info};

use crate::backend::Backend;
use crate::codec::{self, s, Item};
use crate::error::{classify, AwsError};
use crate::retry::{sdk_retries_off, Budget};
use crate::schema::{self, chunk_attr, PK, SK};

/// Sort-key/pointer projection of every item in a stream's partition whose
/// sort key starts with `prefix` (all items when `prefix` is empty).
pub async fn list_keys(b: &Backend, path: &str, prefix: &str) -> Result<Vec<Item>, AwsError> {
    let mut out = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let mut q = b
            .ddb
            .query()
            .table_name(&b.cfg.table)
            .consistent_read(true)
            .projection_expression("#pk, #sk, #obj")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_names("#obj", chunk_attr::OBJECT)
            .expression_attribute_values(":pk", s(schema::stream_pk(path)))
            .set_exclusive_start_key(start.take());
        q = if prefix.is_empty() {
            q.key_condition_expression("#pk = :pk")
        } else {
            q.key_condition_expression("#pk = :pk AND begins_with(#sk, :pre)")
                .expression_attribute_values(":pre", s(prefix))
        };
        let page = q.send().await.map_err(classify)?;
        out.extend(page.items().iter().cloned());
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(out)
}

/// Delete the given items (by key) in batches of 25 ([`batch_write`]).
pub async fn delete_items(b: &Backend, keys: &[Item]) -> Result<(), AwsError> {
    let requests = keys
        .iter()
        .filter_map(|k| {
            let key: Item = [PK, SK].iter().filter_map(|a| k.get(*a).map(|v| ((*a).to_owned(), v.clone()))).collect();
            DeleteRequest::builder().set_key(Some(key)).build().ok()
        })
        .map(|d| WriteRequest::builder().delete_request(d).build())
        .collect();
    batch_write(b, requests).await
}

/// Apply idempotent writes (unconditional puts and deletes) with
/// `BatchWriteItem`, 25 per call, SDK retries off: a throttled or lost call
/// and the unprocessed items of a partial one are retried here, under the
/// retry budget ([`crate::retry`]).
pub async fn batch_write(b: &Backend, requests: Vec<WriteRequest>) -> Result<(), AwsError> {
    for batch in requests.chunks(25) {
        let mut pending = batch.to_vec();
        let mut budget = Budget::start();
        while !pending.is_empty() {
            let sent = b
                .ddb
                .batch_write_item()
                .request_items(&b.cfg.table, pending.clone())
                .customize()
                .config_override(sdk_retries_off())
                .send()
                .await
                .map_err(classify);
            match sent {
                Ok(out) => {
                    pending = out.unprocessed_items().and_then(|m| m.get(&b.cfg.table)).cloned().unwrap_or_default();
                    if !pending.is_empty() && !budget.next(b).await {
                        return Err(AwsError::Throttled(format!("{} writes left unprocessed", pending.len())));
                    }
                }
                Err(AwsError::Throttled(_) | AwsError::Ambiguous(_)) => {
                    if !budget.next(b).await {
                        return sent.map(|_| ());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Delete S3 objects (batches of up to 1000 via `DeleteObjects`).
pub async fn delete_objects(b: &Backend, keys: &[String]) -> Result<(), AwsError> {
    use aws_sdk_s3::types::{Delete, ObjectIdentifier};
    for batch in keys.chunks(1000) {
        let ids: Vec<ObjectIdentifier> =
            batch.iter().filter_map(|k| ObjectIdentifier::builder().key(k).build().ok()).collect();
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .map_err(|e| AwsError::Rejected(e.to_string()))?;
        b.blobs.s3.delete_objects().bucket(&b.blobs.bucket).delete(delete).send().await.map_err(classify)?;
    }
    Ok(())
}

/// Remove every chunk item, producer item and S3 object of a deleted
/// `(path, incarnation)`. Idempotent.
#[tracing::instrument(level = "debug", skip(b))]
pub async fn purge_incarnation(b: &Backend, path: &str, incarnation: &str) -> Result<(), AwsError> {
    let mut keys = list_keys(b, path, &schema::chunk_sk_prefix(incarnation)).await?;
    keys.extend(list_keys(b, path, &schema::producer_sk_prefix(incarnation)).await?);
    keys.extend(list_keys(b, path, &schema::record_sk_prefix(incarnation)).await?);
    delete_items(b, &keys).await?;
    let mut objects: Vec<String> = Vec::new();
    for prefix in [schema::chunk_object_prefix(path, incarnation), schema::segment_object_prefix(path, incarnation)] {
        objects.extend(b.blobs.list(&prefix).await?.into_iter().map(|(k, _)| k));
    }
    if !objects.is_empty() {
        delete_objects(b, &objects).await?;
    }
    debug!(items = keys.len(), objects = objects.len(), "purged incarnation");
    Ok(())
}

/// What a sweep removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub items_deleted: usize,
    pub objects_deleted: usize,
}

/// The stored meta of `path`, read consistently and past the store's meta
/// cache: what upkeep decides on must be the table's latest word, and
/// nothing here is worth a cache refresh.
pub(crate) async fn consistent_meta(b: &Backend, path: &str) -> Result<Option<ds_core::StreamMeta>, AwsError> {
    let out = b
        .ddb
        .get_item()
        .table_name(&b.cfg.table)
        .consistent_read(true)
        .set_key(Some(codec::key_of(&schema::ItemKey::Meta { path: path.to_owned() })))
        .send()
        .await
        .map_err(classify)?;
    Ok(out.item().map(codec::meta_from_item).transpose()?)
}

/// Sweep one stream path: remove items and objects of every incarnation
/// other than the live one (all of them if the stream is gone), and objects
/// of the live incarnation that no chunk item points at and that are older
/// than `grace_ms` (younger ones may belong to a commit still in flight).
#[tracing::instrument(level = "info", skip(b))]
pub async fn sweep_path(b: &Backend, path: &str, grace_ms: i64, now_ms: i64) -> Result<SweepReport, AwsError> {
    let items = list_keys(b, path, "").await?;
    let live = consistent_meta(b, path).await?.map(|m| m.incarnation);
    let mut report = SweepReport::default();

    let mut referenced: HashSet<String> = HashSet::new();
    let mut dead: Vec<Item> = Vec::new();
    for item in items {
        let Some(sk) = item.get(SK).and_then(|v| v.as_s().ok()) else { continue };
        let Some(inc) = schema::incarnation_from_sk(sk) else { continue }; // the meta item
        if Some(inc) == live.as_deref() {
            if let Some(AttributeValue::S(key)) = item.get(chunk_attr::OBJECT) {
                referenced.insert(key.clone());
            }
        } else {
            dead.push(item);
        }
    }
    delete_items(b, &dead).await?;
    report.items_deleted = dead.len();

    let digest = schema::path_digest(path);
    let mut doomed = Vec::new();
    for top in ["chunks", "segments"] {
        for (key, modified) in b.blobs.list(&format!("{top}/{digest}/")).await? {
            let inc = key.split('/').nth(2).unwrap_or("");
            let of_live = Some(inc) == live.as_deref();
            if !of_live || (!referenced.contains(&key) && now_ms - modified >= grace_ms) {
                doomed.push(key);
            }
        }
    }
    if !doomed.is_empty() {
        delete_objects(b, &doomed).await?;
    }
    report.objects_deleted = doomed.len();
    if report != SweepReport::default() {
        info!(?report, "swept garbage");
    }
    Ok(report)
}
