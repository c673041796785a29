//! Reclaim: free the chunk items and S3 objects a trim left unreadable
//! (`StreamStore::reclaim`, after `StreamService::trim` raised the meta's
//! `retained_from`).
//!
//! Why it is safe:
//! - Only chunk items whose **end** is at or below `below` go: their sort
//!   keys are `c#<incarnation>#<end hex>`, so they are exactly one key range
//!   of one `Query` (`sk BETWEEN c#<inc># AND c#<inc>#<below hex>`). A chunk
//!   straddling `below` stays whole. Appends only write chunks ending above
//!   the tail (which is at or above `below`), so nothing here races one.
//! - Items go before the objects they point at: a reader that planned on an
//!   older meta then finds a gap (the core re-reads the meta and answers
//!   410), never a pointer to a missing object in the common case.
//! - A large-chunk object (`chunks/…`) belongs to one chunk and goes with
//!   it. A segment (`segments/…<start>-<end>-…`) is shared by the chunks it
//!   packs and goes only once its `end` is at or below `below` (all of them
//!   gone); a straddling segment goes with the reclaim that removes its last
//!   chunk items.
//! - Idempotent: deletes are unconditional (`BatchWriteItem`,
//!   `DeleteObjects`), a second run finds no items in the range and deletes
//!   nothing. A crash between an item batch and its objects leaves those
//!   objects unreferenced: the processor function's sweep
//!   ([`crate::cleanup::sweep_path`]) removes them after its grace period.
//!
//! Work per call is bounded ([`MAX_PAGES`] pages of [`PAGE_ITEMS`] items);
//! what is left is reclaimed by the next call (every retention trim calls
//! reclaim, raised or not).

use std::collections::BTreeSet;

use aws_sdk_dynamodb::types::AttributeValue;
use tracing::info;

use crate::backend::Backend;
use crate::cleanup::{delete_items, delete_objects};
use crate::codec::{s, Item};
use crate::error::{classify, AwsError};
use crate::schema::{self, chunk_attr, PK, SK};

/// Chunk items read (and deleted) per `Query` page: four `BatchWriteItem`
/// calls of 25.
pub const PAGE_ITEMS: i32 = 100;

/// Pages per call: 4,000 items, about 160 `BatchWriteItem` calls, well
/// within the alarm function's timeout.
pub const MAX_PAGES: usize = 40;

/// What one reclaim freed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReclaimReport {
    pub items_deleted: usize,
    pub objects_deleted: usize,
    /// Nothing below `below` is left (`false`: the page budget ran out).
    pub complete: bool,
}

/// Delete the chunk items of `(path, incarnation)` ending at or before
/// `below`, and the objects only they pointed at (see the module docs).
#[tracing::instrument(level = "debug", skip(b))]
pub async fn reclaim(b: &Backend, path: &str, incarnation: &str, below: u64) -> Result<ReclaimReport, AwsError> {
    let mut report = ReclaimReport::default();
    if below == 0 {
        report.complete = true;
        return Ok(report);
    }
    let mut start: Option<Item> = None;
    for _ in 0..MAX_PAGES {
        let page = b
            .ddb
            .query()
            .table_name(&b.cfg.table)
            .consistent_read(true)
            .limit(PAGE_ITEMS)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
            .projection_expression("#pk, #sk, #obj")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_names("#obj", chunk_attr::OBJECT)
            .expression_attribute_values(":pk", s(schema::stream_pk(path)))
            .expression_attribute_values(":lo", s(schema::chunk_sk_prefix(incarnation)))
            .expression_attribute_values(":hi", s(schema::chunk_sk(incarnation, below)))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(classify)?;
        let items = page.items();
        let objects: BTreeSet<String> = items
            .iter()
            .filter_map(|item| match item.get(chunk_attr::OBJECT) {
                Some(AttributeValue::S(key)) if object_is_reclaimable(key, below) => Some(key.clone()),
                _ => None,
            })
            .collect();
        delete_items(b, items).await?;
        report.items_deleted += items.len();
        if !objects.is_empty() {
            let objects: Vec<String> = objects.into_iter().collect();
            delete_objects(b, &objects).await?;
            report.objects_deleted += objects.len();
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => {
                report.complete = true;
                break;
            }
        }
    }
    if report.items_deleted > 0 {
        info!(path, incarnation, below, ?report, "reclaimed trimmed chunks");
    }
    Ok(report)
}

/// Whether the object `key`, pointed at by a chunk item ending at or before
/// `below`, holds nothing at or after `below`: a large-chunk object always
/// (it is that chunk's alone), a segment when its end is at or before
/// `below`. A key of no known shape is kept (the sweep judges it).
fn object_is_reclaimable(key: &str, below: u64) -> bool {
    if key.starts_with("chunks/") {
        return true;
    }
    if !key.starts_with("segments/") {
        return false;
    }
    let name = key.rsplit('/').next().unwrap_or("");
    let mut parts = name.split('-');
    let (Some(_start), Some(end)) = (parts.next(), parts.next()) else { return false };
    u64::from_str_radix(end, 16).is_ok_and(|end| end <= below)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ObjectKey;

    #[test]
    fn segments_go_only_once_wholly_below() {
        let seg = |start, end| {
            ObjectKey::Segment { path: "p".into(), incarnation: "i".into(), start, end, nonce: "n".into() }.render()
        };
        assert!(object_is_reclaimable(&seg(0, 100), 100));
        assert!(object_is_reclaimable(&seg(0, 100), 200));
        assert!(!object_is_reclaimable(&seg(0, 101), 100), "a straddling segment stays");
        let chunk = ObjectKey::Chunk { path: "p".into(), incarnation: "i".into(), start: 5, nonce: "n".into() };
        assert!(object_is_reclaimable(&chunk.render(), 100));
        assert!(!object_is_reclaimable("other/x", 100));
        assert!(!object_is_reclaimable("segments/d/i/garbage", 100));
    }
}
