//! Seal / compaction: pack a run of a stream's old inline chunks into one
//! immutable S3 segment object, then swap those chunk items from inline
//! bodies to pointers into it, in one transaction.
//!
//! Why it is safe with concurrent readers and writers:
//! - Chunk items keep their keys and ranges; only the body representation
//!   changes, and both representations hold the same bytes. A reader that
//!   sees any mix of swapped and unswapped items reads the same stream.
//! - The segment is written (`If-None-Match: *`) before any item points at
//!   it; if the swap fails it is deleted (or, outcome unknown, left to the
//!   `cleanup::sweep_path`), so it is never reachable half-made.
//! - Each swap is conditional on the item still being inline with the same
//!   start (so a concurrent seal cannot double-swap), and on the stream's
//!   meta still naming the same incarnation (a deleted stream's purge is not
//!   undone: `Update` never re-creates a purged item, the condition fails).
//!
//! Appends are not blocked: sealing never touches the meta item's version.
//! The processor function triggers seals (`ds-processor-aws`'s upkeep) as a
//! stream's inline chunks accumulate; `AwsSubstrate::seal` runs one.

use aws_sdk_dynamodb::types::{ConditionCheck, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use ds_core::StoreError;
use tracing::info;

use crate::backend::Backend;
use crate::codec::{self, n, s, ChunkBody, ChunkItem};
use crate::error::CommitFailure;
use crate::schema::{chunk_attr, meta_attr, ItemKey, ObjectKey};

/// What to seal.
#[derive(Debug, Clone)]
pub struct SealOptions {
    /// Do nothing unless at least this many consecutive inline chunks qualify.
    pub min_chunks: usize,
    /// At most this many chunks per segment (one transaction: 100 items,
    /// one of them the meta check).
    pub max_chunks: usize,
    /// Stop adding chunks once the segment reaches this size.
    pub max_bytes: u64,
    /// Leave the newest bytes inline (live readers read them from DynamoDB).
    pub keep_tail_bytes: u64,
}

impl Default for SealOptions {
    fn default() -> Self {
        Self { min_chunks: 8, max_chunks: 99, max_bytes: 8 * 1024 * 1024, keep_tail_bytes: 64 * 1024 }
    }
}

/// What a seal did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealReport {
    pub chunks: usize,
    pub bytes: u64,
    /// `[start, end)` of the sealed range.
    pub range: Option<(u64, u64)>,
    pub segment_key: Option<String>,
}

/// Seal the oldest run of inline chunks of the stream at `path` (see module docs).
#[tracing::instrument(level = "info", skip(b, opts))]
pub async fn seal(b: &Backend, path: &str, opts: SealOptions) -> Result<SealReport, StoreError> {
    let Some((incarnation, run)) = pick_sealable(b, path, &opts).await? else {
        return Ok(SealReport::default());
    };
    let (start, end) = (run[0].start, run[run.len() - 1].end);
    let key = write_segment(b, path, &incarnation, &run).await?;
    #[cfg(feature = "fault-injection")]
    if b.blobs.faults.take(crate::faults::FaultPoint::SealSwap).is_some() {
        return Err(StoreError::Unavailable(format!("injected: crashed before swapping in segment {key}")));
    }
    // One retry layer (crate::retry): ours, under the budget, same token
    // across an unknown outcome.
    let result = crate::retry::transact(b, swap_items(b, path, &incarnation, &run, &key)?).await;
    match result {
        Ok(_) => {
            info!(path, chunks = run.len(), bytes = end - start, key, "sealed segment");
            Ok(SealReport { chunks: run.len(), bytes: end - start, range: Some((start, end)), segment_key: Some(key) })
        }
        Err(CommitFailure::Ambiguous(m)) => Err(StoreError::Unavailable(format!(
            "seal outcome unknown ({m}); segment {key} left to cleanup::sweep_path"
        ))),
        Err(e) => {
            b.blobs.discard(std::slice::from_ref(&key)).await;
            match e {
                // Someone else sealed or deleted first: not an error for a compactor.
                CommitFailure::Conflict { .. } => Ok(SealReport::default()),
                other => Err(other.into()),
            }
        }
    }
}

/// Step 1: the stream's incarnation and the run of chunks to seal, if one
/// qualifies.
async fn pick_sealable(
    b: &Backend,
    path: &str,
    opts: &SealOptions,
) -> Result<Option<(String, Vec<ChunkItem>)>, StoreError> {
    let ctx = b.registry.get(path);
    let Some(meta) = crate::store::fetch_meta(b, &ctx).await? else {
        return Ok(None);
    };
    let limit = meta.tail.saturating_sub(opts.keep_tail_bytes);
    // Nothing below the earliest retained offset: a trim's reclaim frees it.
    let own_start = meta.own_start().max(meta.retained_from);
    if limit <= own_start {
        return Ok(None);
    }
    let items = crate::reader::chunk_items(b, path, &meta.incarnation, own_start, limit, usize::MAX).await?;
    let run = pick_run(&items, limit, opts);
    Ok((run.len() >= opts.min_chunks.max(1)).then_some((meta.incarnation.to_string(), run)))
}

/// Step 2: write the run's bytes as one new segment object; returns its key.
async fn write_segment(b: &Backend, path: &str, incarnation: &str, run: &[ChunkItem]) -> Result<String, StoreError> {
    let (start, end) = (run[0].start, run[run.len() - 1].end);
    let mut data = Vec::with_capacity(usize::try_from(end - start).unwrap_or(0));
    for c in run {
        if let ChunkBody::Inline(d) = &c.body {
            data.extend_from_slice(d);
        }
    }
    let key = ObjectKey::Segment {
        path: path.to_owned(),
        incarnation: incarnation.to_owned(),
        start,
        end,
        nonce: uuid::Uuid::new_v4().simple().to_string(),
    }
    .render();
    b.blobs.put_new(&key, bytes::Bytes::from(data)).await?;
    Ok(key)
}

/// Step 3: the swap transaction: the meta still names the incarnation, and
/// each chunk item, still inline at its start, now points into the segment.
fn swap_items(
    b: &Backend,
    path: &str,
    incarnation: &str,
    run: &[ChunkItem],
    key: &str,
) -> Result<Vec<TransactWriteItem>, StoreError> {
    let start = run[0].start;
    let mut tx = Vec::with_capacity(run.len() + 1);
    let check = ConditionCheck::builder()
        .table_name(&b.cfg.table)
        .set_key(Some(codec::key_of(&ItemKey::Meta { path: path.to_owned() })))
        .condition_expression("#inc = :inc")
        .expression_attribute_names("#inc", meta_attr::INCARNATION)
        .expression_attribute_values(":inc", s(incarnation))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| StoreError::backend("building a transaction item", e))?;
    tx.push(TransactWriteItem::builder().condition_check(check).build());
    for c in run {
        let key_item =
            codec::key_of(&ItemKey::Chunk { path: path.to_owned(), incarnation: incarnation.to_owned(), end: c.end });
        let update = Update::builder()
            .table_name(&b.cfg.table)
            .set_key(Some(key_item))
            .update_expression("SET #obj = :obj, #off = :off REMOVE #data")
            .condition_expression("attribute_exists(#data) AND #start = :start")
            .expression_attribute_names("#obj", chunk_attr::OBJECT)
            .expression_attribute_names("#off", chunk_attr::OBJECT_OFFSET)
            .expression_attribute_names("#data", chunk_attr::DATA)
            .expression_attribute_names("#start", chunk_attr::START)
            .expression_attribute_values(":obj", s(key))
            .expression_attribute_values(":off", n(c.start - start))
            .expression_attribute_values(":start", n(c.start))
            .build()
            .map_err(|e| StoreError::backend("building a transaction item", e))?;
        tx.push(TransactWriteItem::builder().update(update).build());
    }
    Ok(tx)
}

/// The first run of consecutive inline chunks ending at or before `limit`,
/// within the options' bounds; empty if no run reaches `min_chunks`.
fn pick_run(items: &[ChunkItem], limit: u64, opts: &SealOptions) -> Vec<ChunkItem> {
    let min = opts.min_chunks.max(1);
    let mut run: Vec<ChunkItem> = Vec::new();
    let mut bytes = 0u64;
    for c in items {
        if c.end > limit {
            break;
        }
        let inline = matches!(c.body, ChunkBody::Inline(_));
        let contiguous = run.last().is_none_or(|p| p.end == c.start);
        let room = run.len() < opts.max_chunks && (run.is_empty() || bytes + c.len() <= opts.max_bytes);
        if inline && contiguous && room {
            bytes += c.len();
            run.push(c.clone());
            continue;
        }
        if run.len() >= min {
            return run;
        }
        run.clear();
        bytes = 0;
        if inline {
            bytes = c.len();
            run.push(c.clone());
        }
    }
    if run.len() >= min {
        run
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn inline(start: u64, len: u64) -> ChunkItem {
        ChunkItem { start, end: start + len, body: ChunkBody::Inline(Bytes::from(vec![b'x'; len as usize])) }
    }

    fn pointer(start: u64, len: u64) -> ChunkItem {
        ChunkItem { start, end: start + len, body: ChunkBody::Object { key: "k".into(), offset: 0 } }
    }

    #[test]
    fn picks_the_first_long_enough_inline_run_below_the_limit() {
        let opts = SealOptions { min_chunks: 2, max_chunks: 3, max_bytes: 100, keep_tail_bytes: 0 };
        let items = vec![inline(0, 5), pointer(5, 5), inline(10, 5), inline(15, 5), inline(20, 5), inline(25, 5)];
        let run = pick_run(&items, 100, &opts);
        assert_eq!(run.iter().map(|c| c.start).collect::<Vec<_>>(), vec![10, 15, 20], "capped at max_chunks");
        let run = pick_run(&items, 20, &opts);
        assert_eq!(run.iter().map(|c| c.start).collect::<Vec<_>>(), vec![10, 15], "never past the limit");
        assert!(pick_run(&[inline(0, 5), pointer(5, 5)], 100, &opts).is_empty(), "too short");
    }
}
