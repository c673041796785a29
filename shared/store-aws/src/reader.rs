//! The chunk read path: one consistent `Query` over the chunk items of an
//! incarnation (keyed by end position, so the chunk containing `from` comes
//! first), then ranged S3 GETs for chunks that point into objects, one GET per
//! run of chunks that are contiguous in the same object (a sealed segment
//! serves a whole catch-up read with one GET).

use bytes::Bytes;
use ds_core::{Chunk, StoreError};

use crate::backend::Backend;
use crate::codec::{self, s, ChunkBody, ChunkItem, Item};
use crate::error::{classify, AwsError};
use crate::schema::{self, PK, SK};

/// Parallel ranged GETs per read.
const MAX_PARALLEL_GETS: usize = 8;

/// Chunk items of `(path, incarnation)` overlapping `[from, until)` in
/// position order, stopping once `max_bytes` is reached (at least one).
pub async fn chunk_items(
    b: &Backend,
    path: &str,
    incarnation: &str,
    from: u64,
    until: u64,
    max_bytes: usize,
) -> Result<Vec<ChunkItem>, AwsError> {
    let mut out: Vec<ChunkItem> = Vec::new();
    if from >= until {
        return Ok(out);
    }
    let mut total: u64 = 0;
    let budget = max_bytes as u64;
    // Chunks ending in (from, until] are needed; one more may end past `until`
    // when `until` falls inside a chunk (a fork's base): fetched second.
    let lo = schema::chunk_sk(incarnation, from.saturating_add(1));
    let hi = schema::chunk_sk(incarnation, until);
    let mut start_key: Option<Item> = None;
    let mut reached_until = false;
    'pages: loop {
        let page = query_chunks(b, path, &lo, &hi).set_exclusive_start_key(start_key.take()).send().await;
        let page = page.map_err(classify)?;
        for item in page.items() {
            let c = codec::chunk_from_item(item)?;
            if c.start >= until {
                reached_until = true;
                break 'pages;
            }
            total += c.len();
            reached_until = c.end >= until;
            out.push(c);
            if total >= budget || reached_until {
                break 'pages;
            }
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start_key = Some(k.clone()),
            _ => break,
        }
    }
    let covered = out.last().map_or(from, |c| c.end);
    if !reached_until && total < budget && covered < until {
        // The chunk straddling `until`, if any: the first chunk ending past it.
        let lo = schema::chunk_sk(incarnation, until.saturating_add(1));
        let hi = schema::chunk_sk(incarnation, u64::MAX);
        let page = query_chunks(b, path, &lo, &hi).limit(1).send().await.map_err(classify)?;
        if let Some(item) = page.items().first() {
            let c = codec::chunk_from_item(item)?;
            if c.start < until && c.end > covered.max(from) {
                out.push(c);
            }
        }
    }
    Ok(out)
}

/// A consistent `Query` of the chunk items of `path` with sort keys in
/// `[lo, hi]`.
fn query_chunks(
    b: &Backend,
    path: &str,
    lo: &str,
    hi: &str,
) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
    b.ddb
        .query()
        .table_name(&b.cfg.table)
        .consistent_read(true)
        .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
        .expression_attribute_names("#pk", PK)
        .expression_attribute_names("#sk", SK)
        .expression_attribute_values(":pk", s(schema::stream_pk(path)))
        .expression_attribute_values(":lo", s(lo))
        .expression_attribute_values(":hi", s(hi))
}

/// A run of consecutive chunks whose bytes are contiguous in one object.
struct Fetch {
    key: String,
    offset: u64,
    len: u64,
    /// Indices into the chunk list.
    first: usize,
    last: usize,
}

fn plan_fetches(items: &[ChunkItem]) -> Vec<Fetch> {
    let mut fetches: Vec<Fetch> = Vec::new();
    for (i, c) in items.iter().enumerate() {
        let ChunkBody::Object { key, offset } = &c.body else { continue };
        if let Some(f) = fetches.last_mut() {
            if f.last + 1 == i && f.key == *key && f.offset + f.len == *offset {
                f.len += c.len();
                f.last = i;
                continue;
            }
        }
        fetches.push(Fetch { key: key.clone(), offset: *offset, len: c.len(), first: i, last: i });
    }
    fetches
}

/// Resolve chunk items to chunks, fetching pointer bodies from S3.
pub async fn materialize(b: &Backend, items: Vec<ChunkItem>) -> Result<Vec<Chunk>, AwsError> {
    let fetches = plan_fetches(&items);
    // Owned jobs (index, key, offset, len), fetched a batch at a time.
    let jobs: Vec<(usize, String, u64, u64)> =
        fetches.iter().enumerate().map(|(i, f)| (i, f.key.clone(), f.offset, f.len)).collect();
    let mut fetched: Vec<(usize, Bytes)> = Vec::with_capacity(jobs.len());
    for batch in jobs.chunks(MAX_PARALLEL_GETS) {
        let gets = batch
            .iter()
            .cloned()
            .map(|(i, key, offset, len)| async move { b.blobs.get_range(&key, offset, len).await.map(|d| (i, d)) });
        // NotFound is left to the caller: a pointed-at object is gone only
        // when a trim's reclaim or a delete freed it under the reader.
        let done = futures::future::try_join_all(gets).await?;
        fetched.extend(done);
    }
    let mut bodies: Vec<Option<Bytes>> = vec![None; fetches.len()];
    for (i, d) in fetched {
        bodies[i] = Some(d);
    }
    let mut out = Vec::with_capacity(items.len());
    let mut fetch_of: Vec<Option<(usize, u64)>> = vec![None; items.len()];
    for (fi, f) in fetches.iter().enumerate() {
        let mut at = 0u64;
        for (ci, c) in items.iter().enumerate().take(f.last + 1).skip(f.first) {
            fetch_of[ci] = Some((fi, at));
            at += c.len();
        }
    }
    for (ci, c) in items.into_iter().enumerate() {
        let data = match c.body {
            ChunkBody::Inline(d) => d,
            ChunkBody::Object { .. } => {
                let (fi, at) = fetch_of[ci].ok_or_else(|| AwsError::Rejected("unplanned fetch".into()))?;
                let body = bodies[fi].as_ref().ok_or_else(|| AwsError::Rejected("missing fetch".into()))?;
                let (lo, hi) = (at as usize, (at + c.end - c.start) as usize);
                if hi > body.len() {
                    return Err(AwsError::Rejected("short object body".into()));
                }
                body.slice(lo..hi)
            }
        };
        out.push(Chunk { start: c.start, data });
    }
    Ok(out)
}

/// `StreamStore::read_chunks` for the AWS store.
pub async fn read_chunks(
    b: &Backend,
    path: &str,
    incarnation: &str,
    from: u64,
    until: u64,
    max_bytes: usize,
) -> Result<Vec<Chunk>, StoreError> {
    let items = chunk_items(b, path, incarnation, from, until, max_bytes).await?;
    match materialize(b, items.clone()).await {
        Err(AwsError::NotFound(m)) => without_reclaimed(b, path, incarnation, items, &m).await,
        done => Ok(done?),
    }
}

/// The read's chunks when an object its items pointed at vanished: a trim's
/// reclaim deleted it after the items were read (it deletes items first, so
/// this takes a reader that queried just before). The chunks the current
/// meta still retains are returned (their objects are never reclaimed): the
/// missing start is a gap, which the core answers 410 after re-reading the
/// meta. Anything else (the stream deleted under the reader) stays an
/// unknown outcome, answered 503 and retried by the client.
async fn without_reclaimed(
    b: &Backend,
    path: &str,
    incarnation: &str,
    items: Vec<ChunkItem>,
    missing: &str,
) -> Result<Vec<Chunk>, StoreError> {
    let vanished = || StoreError::from(AwsError::Ambiguous(format!("chunk object vanished: {missing}")));
    // A plain read, not the store's cached one: nothing here is worth a
    // cache refresh, and the reader stays below the store in the layering.
    let meta = crate::cleanup::consistent_meta(b, path).await?;
    let Some(retained_from) = meta.filter(|m| *m.incarnation == *incarnation).map(|m| m.retained_from) else {
        return Err(vanished());
    };
    if items.first().is_none_or(|c| c.end > retained_from) {
        return Err(vanished());
    }
    let kept: Vec<ChunkItem> = items.into_iter().filter(|c| c.end > retained_from).collect();
    materialize(b, kept).await.map_err(|e| match e {
        AwsError::NotFound(_) => vanished(),
        other => other.into(),
    })
}
