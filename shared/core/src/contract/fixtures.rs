//! Building blocks of the contract tests: unique paths, meta records, and the
//! core's append loop (lock → read_meta → commit, retry on conflict).

use std::time::Duration;

use bytes::Bytes;

use crate::{Chunk, Clock, Commit, Expect, Op, ProducerState, StoreError, StreamMeta, Substrate};

/// The wall clock's reading ([`Clock::system`]), for records made outside
/// a substrate (a substrate's own clock is `Substrate::clock`).
pub fn wall_clock_ms() -> i64 {
    Clock::system().now_ms()
}

/// A path no other test (or earlier run over the same storage) uses.
pub fn unique_path(test: &str) -> String {
    format!("contract/{test}/{}", uuid::Uuid::new_v4())
}

/// A fresh meta record for `path` at version 0 with a new incarnation.
pub fn new_meta(path: &str) -> StreamMeta {
    let now = wall_clock_ms();
    StreamMeta {
        path: path.into(),
        incarnation: uuid::Uuid::new_v4().to_string().into(),
        version: 0,
        content_type: "application/octet-stream".into(),
        created_at_ms: now,
        tail: 0,
        closed: false,
        closed_by: None,
        ttl_secs: None,
        expires_at_ms: None,
        touched_at_ms: now,
        last_stream_seq: None,
        fork: None,
        ref_count: 0,
        soft_deleted: false,
        retained_from: 0,
    }
}

/// Commit a fresh stream at `path` (`Expect::Absent`) and return its meta.
pub async fn create(s: &Substrate, path: &str) -> StreamMeta {
    let meta = new_meta(path);
    let commit = Commit { ops: vec![Op::PutMeta { meta: meta.clone(), expect: Expect::Absent }] };
    s.store.commit(commit).await.expect("creating a fresh stream commits");
    meta
}

/// The commit the core builds for one append on top of `meta`: the next meta
/// (version + 1, tail + len), the chunk at the old tail and, optionally, the
/// producer state — all under `Expect::Version(meta.version)`.
pub fn append_commit(meta: &StreamMeta, data: &Bytes, producer: Option<(&str, ProducerState)>) -> (Commit, StreamMeta) {
    let mut next = meta.clone();
    next.version += 1;
    next.tail += data.len() as u64;
    next.touched_at_ms = wall_clock_ms().max(meta.touched_at_ms);
    let mut commit = Commit::new();
    commit
        .push(Op::PutMeta { meta: next.clone(), expect: Expect::VersionAt { version: meta.version, tail: meta.tail } });
    commit.push(Op::PutChunk {
        path: meta.path.clone(),
        incarnation: meta.incarnation.clone(),
        chunk: Chunk { start: meta.tail, data: data.clone() },
    });
    if let Some((id, state)) = producer {
        commit.push(Op::PutProducer {
            path: meta.path.clone(),
            incarnation: meta.incarnation.clone(),
            producer_id: id.to_owned(),
            state,
        });
    }
    (commit, next)
}

/// Outcome of one acknowledged append.
#[derive(Debug, Clone)]
pub struct Appended {
    /// Position the chunk was stored at.
    pub position: u64,
    /// The meta the commit wrote.
    pub meta: StreamMeta,
    /// Commit attempts that failed with `Conflict` before this one succeeded.
    pub conflicts: u32,
}

/// Attempts before [`append`] gives up: far beyond what a fair store needs
/// even with 64 instances racing on one stream.
pub const MAX_ATTEMPTS: u32 = 20_000;

/// The core's append loop: lock → read_meta → commit; on `Conflict` drop the
/// guard, back off briefly and retry from the read. Publishes after `Ok`.
/// Panics if the stream is missing or the store fails otherwise.
pub async fn append(s: &Substrate, path: &str, data: Bytes, producer: Option<(&str, ProducerState)>) -> Appended {
    let mut conflicts = 0u32;
    loop {
        let guard = s.mutex.lock(&s.registry.enter(path)).await;
        let meta = s
            .store
            .read_meta(&s.registry.enter(path))
            .await
            .expect("read_meta succeeds")
            .expect("the stream being appended to exists");
        let (commit, next) = append_commit(&meta, &data, producer);
        // The core validates here. Yielding stands in for that work and makes
        // writers on separate instances interleave between read and commit
        // even on stores whose calls never suspend (memory).
        tokio::task::yield_now().await;
        match s.store.commit(commit).await {
            Ok(()) => {
                drop(guard);
                s.hub.publish(&s.registry.enter(path), crate::TailSignal::of(&next));
                return Appended { position: meta.tail, meta: next, conflicts };
            }
            Err(StoreError::Conflict) => {
                drop(guard);
                conflicts += 1;
                assert!(conflicts < MAX_ATTEMPTS, "append to {path} starved after {conflicts} conflicts");
                backoff(conflicts).await;
            }
            Err(e) => panic!("append to {path} failed: {e}"),
        }
    }
}

/// Randomized, growing back-off so racing writers spread out.
pub async fn backoff(attempt: u32) {
    let cap_us = 200u64 << attempt.min(5);
    let us = crate::Random::system().in_range(0..=cap_us);
    tokio::time::sleep(Duration::from_micros(us)).await;
}

/// Every chunk of `(path, incarnation)` in `[0, until)`, paging with a small
/// budget so `max_bytes` handling is exercised too. The last chunk is cut at
/// `until`, as readers do: a store may have joined later appends onto it.
pub async fn read_all(s: &Substrate, path: &str, incarnation: &str, until: u64) -> Vec<Chunk> {
    let mut out: Vec<Chunk> = Vec::new();
    let mut from = 0u64;
    while from < until {
        let page = s
            .store
            .read_chunks(&s.registry.enter(path), incarnation, from, until, 256)
            .await
            .expect("read_chunks succeeds");
        let Some(last) = page.last() else { break };
        from = last.end();
        out.extend(page);
    }
    if let Some(last) = out.last_mut().filter(|c| c.end() > until) {
        let keep = usize::try_from(until.saturating_sub(last.start)).expect("chunk length fits usize");
        last.data.truncate(keep);
    }
    out
}

/// The bytes of `chunks` (which [`assert_tiles`] from 0) at `[from, until)`.
pub fn bytes_at(chunks: &[Chunk], from: u64, until: u64) -> Vec<u8> {
    let whole: Vec<u8> = chunks.iter().flat_map(|c| c.data.iter().copied()).collect();
    whole[usize::try_from(from).expect("fits")..usize::try_from(until).expect("fits")].to_vec()
}

/// Assert `chunks` tile `[0, tail)` exactly: contiguous, non-overlapping,
/// strictly increasing starts.
pub fn assert_tiles(chunks: &[Chunk], tail: u64) {
    let mut expected_start = 0u64;
    for c in chunks {
        assert_eq!(c.start, expected_start, "chunks must be contiguous and non-overlapping");
        assert!(!c.data.is_empty(), "stored chunks are never empty");
        expected_start = c.end();
    }
    assert_eq!(expected_start, tail, "chunks must end exactly at the tail");
}

/// A service request creating an empty `application/octet-stream` stream.
pub fn create_request(path: &str) -> crate::CreateRequest {
    crate::CreateRequest {
        path: path.to_owned(),
        content_type: Some("application/octet-stream".into()),
        lifetime: ds_protocol::headers::Lifetime::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    }
}

/// A service request appending `body` to an `application/octet-stream` stream.
pub fn append_request(path: &str, body: Bytes) -> crate::AppendRequest<'static> {
    crate::AppendRequest {
        path: path.to_owned().into(),
        content_type: Some("application/octet-stream".into()),
        body,
        close: false,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    }
}

/// A service request reading `path` from its beginning (catch-up, no live mode).
pub fn read_request(path: &str) -> crate::ReadRequest {
    crate::ReadRequest {
        path: path.to_owned(),
        offset: Some(ds_protocol::ReadOffset::Beginning),
        live: crate::LiveMode::None,
    }
}
