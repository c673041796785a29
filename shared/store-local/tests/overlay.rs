//! Reads that span the checkpoint boundary: part of a stream in the tables
//! (written by a checkpoint), the rest in the overlay (durable in the log
//! only). Each test waits for a real checkpoint between its two halves.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ds_core::contract::fixtures::{append, assert_tiles, bytes_at, create};
use ds_core::{Commit, Expect, Op, StreamHandle, StreamStore, Substrate};
use ds_store_local::LocalStore;

fn open(dir: &std::path::Path) -> (Arc<LocalStore>, Substrate) {
    let store = Arc::new(LocalStore::open(dir).unwrap());
    let substrate = ds_inproc::in_process_substrate(Arc::clone(&store) as Arc<dyn StreamStore>).0;
    (store, substrate)
}

/// Wait until the writer has committed a checkpoint after `before` (it does
/// about a second after the last write).
async fn checkpointed(store: &LocalStore, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().checkpoints <= before {
        assert!(Instant::now() < deadline, "no checkpoint within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_join_the_tables_and_the_overlay() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    let meta = create(&s, "span/a").await;
    let handle = StreamHandle::detached(&meta.path);
    let mut expected = Vec::new();
    for i in 0..30u8 {
        let data = vec![i; 100 + usize::from(i)];
        append(&s, &meta.path, Bytes::from(data.clone()), None).await;
        expected.extend_from_slice(&data);
    }
    checkpointed(&store, store.stats().checkpoints).await;
    let mut tail = 0;
    for i in 30..60u8 {
        let data = vec![i; 100 + usize::from(i)];
        tail = append(&s, &meta.path, Bytes::from(data.clone()), None).await.meta.tail;
        expected.extend_from_slice(&data);
    }
    let boundary = 30 * 100 + (0..30).sum::<u64>();

    let chunks = s.store.read_chunks(&handle, &meta.incarnation, 0, tail, usize::MAX).await.unwrap();
    assert_tiles(&chunks, tail);
    assert_eq!(bytes_at(&chunks, 0, tail), expected, "both halves, in order, once");
    assert!(chunks.iter().any(|c| c.start == boundary), "the overlay's part begins at the checkpoint");
    let whole = s.store.read_contiguous(&handle, &meta.incarnation, 0, tail, 1 << 20).await.unwrap();
    assert_eq!(whole.as_deref(), Some(&expected[..]));
    // Ranges inside one half, and straddling the boundary.
    for (from, until) in [(5, 200), (boundary - 7, boundary + 9), (boundary + 1, tail), (boundary, boundary + 1)] {
        let range = s.store.read_contiguous(&handle, &meta.incarnation, from, until, 1 << 20).await.unwrap();
        assert_eq!(range.as_deref(), Some(&expected[from as usize..until as usize]), "[{from}, {until})");
    }
    // A small budget stops in the tables' part without skipping into the overlay.
    let first = s.store.read_chunks(&handle, &meta.incarnation, 0, tail, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].start, 0);

    // After the next checkpoint everything is in the tables: the same bytes.
    checkpointed(&store, store.stats().checkpoints).await;
    let chunks = s.store.read_chunks(&handle, &meta.incarnation, 0, tail, usize::MAX).await.unwrap();
    assert_eq!(bytes_at(&chunks, 0, tail), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_and_recreations_in_the_overlay_hide_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    let old = create(&s, "span/gone").await;
    append(&s, &old.path, Bytes::from_static(b"old data"), None).await;
    let kept = create(&s, "span/kept").await;
    checkpointed(&store, store.stats().checkpoints).await;

    // Delete and re-create at the same path, and create one more, all in the overlay.
    let stored = s.store.read_meta(&StreamHandle::detached(&old.path)).await.unwrap().unwrap();
    let delete = Op::DeleteStream {
        path: old.path.clone(),
        incarnation: old.incarnation.clone(),
        expect_version: stored.version,
    };
    s.store.commit(Commit { ops: vec![delete] }).await.unwrap();
    let handle = StreamHandle::detached(&old.path);
    assert_eq!(s.store.read_meta(&handle).await.unwrap(), None, "the deletion hides the stored meta");
    let wiped = s.store.read_chunks(&handle, &old.incarnation, 0, 8, usize::MAX).await.unwrap();
    assert!(wiped.is_empty(), "and the stored chunks: {wiped:?}");
    let listed: Vec<_> = s.store.list_streams(None, 10).await.unwrap().into_iter().map(|m| m.path).collect();
    assert_eq!(listed, vec![kept.path.clone()]);

    let again = create(&s, "span/gone").await;
    let extra = create(&s, "span/extra").await;
    let listed: Vec<_> = s.store.list_streams(None, 10).await.unwrap().into_iter().map(|m| m.path).collect();
    assert_eq!(listed, vec![extra.path.clone(), again.path.clone(), kept.path.clone()]);
    let page: Vec<_> = s.store.list_streams(Some("span/extra"), 1).await.unwrap().into_iter().map(|m| m.path).collect();
    assert_eq!(page, vec![again.path.clone()]);
    let prefixed = s.store.list_streams_with_prefix("span/g", None, 10).await.unwrap();
    assert_eq!(prefixed.iter().map(|m| &*m.incarnation).collect::<Vec<_>>(), vec![&*again.incarnation]);

    // Preconditions are checked against the overlay: `kept` is at version 0
    // in the tables and at 1 in the overlay, so expecting 0 now fails.
    let mut next = kept.clone();
    next.version = 1;
    let bump = Commit { ops: vec![Op::PutMeta { meta: next.clone(), expect: Expect::Version(0) }] };
    s.store.commit(bump).await.unwrap();
    next.version = 2;
    let stale = Commit { ops: vec![Op::PutMeta { meta: next, expect: Expect::Version(0) }] };
    assert!(
        matches!(s.store.commit(stale).await, Err(ds_core::StoreError::Conflict)),
        "checked against the overlay, not the tables"
    );

    // The same after a restart (closing checkpointed the overlay).
    drop(s);
    drop(store);
    let (_store, s) = open(dir.path());
    let listed: Vec<_> = s.store.list_streams(None, 10).await.unwrap().into_iter().map(|m| m.path).collect();
    assert_eq!(listed, vec![extra.path, again.path.clone(), kept.path]);
    let meta = s.store.read_meta(&StreamHandle::detached(&again.path)).await.unwrap().unwrap();
    assert_eq!(meta.incarnation, again.incarnation);
    let wiped = s.store.read_chunks(&StreamHandle::detached(&old.path), &old.incarnation, 0, 8, usize::MAX).await;
    assert!(wiped.unwrap().is_empty());
}

/// A catch-up of checkpointed bytes is kept for the next reader (the read
/// cache), joins the overlay's newer part, and never outlives a deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpointed_reads_are_cached_until_the_stream_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (store, s) = open(dir.path());
    let meta = create(&s, "cache/a").await;
    let handle = StreamHandle::detached(&meta.path);
    let mut expected = Vec::new();
    for i in 0..50u8 {
        let data = vec![i; 100];
        append(&s, &meta.path, Bytes::from(data.clone()), None).await;
        expected.extend_from_slice(&data);
    }
    checkpointed(&store, store.stats().checkpoints).await;
    let tail = expected.len() as u64;
    let read = |from: u64, until: u64| s.store.read_contiguous(&handle, &meta.incarnation, from, until, 1 << 20);
    let hits = store.cached_reads();
    assert_eq!(read(0, tail).await.unwrap().as_deref(), Some(&expected[..]), "from the tables");
    assert_eq!(store.cached_reads(), hits, "the first read missed");
    for (from, until) in [(0, tail), (1, tail), (250, 251), (4999, tail)] {
        let range = read(from, until).await.unwrap();
        assert_eq!(range.as_deref(), Some(&expected[from as usize..until as usize]), "[{from}, {until})");
    }
    assert_eq!(store.cached_reads(), hits + 4, "every later read was served from memory");

    // Newer appends: the cached part, then the overlay's.
    for i in 50..60u8 {
        let data = vec![i; 100];
        append(&s, &meta.path, Bytes::from(data.clone()), None).await;
        expected.extend_from_slice(&data);
    }
    let tail = expected.len() as u64;
    assert_eq!(read(10, tail).await.unwrap().as_deref(), Some(&expected[10..]), "cache + overlay");
    // Once checkpointed, the cached part and the newly read rest.
    checkpointed(&store, store.stats().checkpoints).await;
    assert_eq!(read(0, tail).await.unwrap().as_deref(), Some(&expected[..]), "cache + tables");
    assert_eq!(read(4990, tail).await.unwrap().as_deref(), Some(&expected[4990..]), "across the two pieces");

    // Deleted and checkpointed: the old incarnation's bytes are gone, cached or not.
    let stored = s.store.read_meta(&handle).await.unwrap().unwrap();
    let delete = Op::DeleteStream {
        path: meta.path.clone(),
        incarnation: meta.incarnation.clone(),
        expect_version: stored.version,
    };
    s.store.commit(Commit { ops: vec![delete] }).await.unwrap();
    checkpointed(&store, store.stats().checkpoints).await;
    assert_eq!(read(0, tail).await.unwrap(), None, "a deleted incarnation's bytes are never served");
    let again = create(&s, "cache/a").await;

    // A large read joined from the overlay's pieces is kept too.
    let big = create(&s, "cache/big").await;
    let mut expected = Vec::new();
    for i in 0..400u16 {
        let data = vec![i as u8; 100];
        append(&s, &big.path, Bytes::from(data.clone()), None).await;
        expected.extend_from_slice(&data);
    }
    let big_handle = StreamHandle::detached(&big.path);
    let tail = expected.len() as u64;
    let hits = store.cached_reads();
    for _ in 0..2 {
        let got = s.store.read_contiguous(&big_handle, &big.incarnation, 0, tail, 1 << 20).await.unwrap();
        assert_eq!(got.as_deref(), Some(&expected[..]));
    }
    assert_eq!(store.cached_reads(), hits + 1, "the second read was served from memory (stats {:?})", store.stats());

    let fresh = s.store.read_contiguous(&handle, &again.incarnation, 0, 10, 1 << 20).await.unwrap();
    assert_eq!(fresh, None, "the new incarnation starts empty");
}
