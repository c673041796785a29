//! Keyed records ([`crate::Record`]): conditional writes, atomic with the
//! rest of a commit, wiped with their incarnation, one winner among racers.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Barrier;

use super::fixtures::{append_commit, create, unique_path};
use super::SubstrateFactory;
use crate::{Commit, Op, Record, RecordExpect, StoreError, StreamMeta, Substrate};

fn put(meta: &StreamMeta, key: &str, revision: u64, value: &'static [u8], expect: RecordExpect) -> Op {
    Op::PutRecord {
        path: meta.path.clone(),
        incarnation: meta.incarnation.clone(),
        key: key.to_owned(),
        record: Record { revision, value: Bytes::from_static(value) },
        expect,
    }
}

async fn read(s: &Substrate, meta: &StreamMeta, key: &str) -> Option<Record> {
    s.store.read_record(&s.registry.enter(&meta.path), &meta.incarnation, key).await.expect("read_record")
}

/// `Absent` writes only a new key, `Revision(r)` only over revision `r`; a
/// refused write changes nothing; keys are per incarnation.
pub async fn record_preconditions(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("record-preconditions")).await;
    let commit = |op| s.store.commit(Commit { ops: vec![op] });
    commit(put(&meta, "k", 1, b"one", RecordExpect::Absent)).await.expect("a new key commits");
    assert_eq!(read(&s, &meta, "k").await, Some(Record { revision: 1, value: Bytes::from_static(b"one") }));
    assert!(matches!(commit(put(&meta, "k", 1, b"again", RecordExpect::Absent)).await, Err(StoreError::Conflict)));
    commit(put(&meta, "k", 2, b"two", RecordExpect::Revision(1))).await.expect("the current revision commits");
    let stale = put(&meta, "k", 2, b"stale", RecordExpect::Revision(1));
    assert!(matches!(commit(stale).await, Err(StoreError::Conflict)));
    assert_eq!(read(&s, &meta, "k").await, Some(Record { revision: 2, value: Bytes::from_static(b"two") }));
    assert!(matches!(commit(put(&meta, "none", 2, b"x", RecordExpect::Revision(1))).await, Err(StoreError::Conflict)));
    assert_eq!(read(&s, &meta, "none").await, None);
    let other = StreamMeta { incarnation: "another-incarnation".into(), ..meta.clone() };
    assert_eq!(read(&s, &other, "k").await, None, "records belong to one incarnation");
}

/// A record write whose precondition fails takes the append of its commit
/// down with it, and an append whose meta precondition fails leaves the
/// record unwritten.
pub async fn record_atomic_with_append(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let meta = create(&s, &unique_path("record-atomic")).await;
    s.store.commit(Commit { ops: vec![put(&meta, "taken", 1, b"x", RecordExpect::Absent)] }).await.expect("commit");

    let (mut commit, _) = append_commit(&meta, &Bytes::from_static(b"data"), None);
    commit.push(put(&meta, "taken", 1, b"y", RecordExpect::Absent));
    assert!(matches!(s.store.commit(commit).await, Err(StoreError::Conflict)));
    let stream = s.registry.enter(&meta.path);
    let now = s.store.read_meta(&stream).await.expect("read_meta").expect("exists");
    assert_eq!((now.version, now.tail), (meta.version, meta.tail), "the append was not applied");

    let mut stale_meta = meta.clone();
    stale_meta.version += 5;
    let (mut commit, _) = append_commit(&stale_meta, &Bytes::from_static(b"data"), None);
    commit.push(put(&meta, "fresh", 1, b"z", RecordExpect::Absent));
    assert!(matches!(s.store.commit(commit).await, Err(StoreError::Conflict)));
    assert_eq!(read(&s, &meta, "fresh").await, None, "the record was not written");

    let (mut commit, next) = append_commit(&meta, &Bytes::from_static(b"data"), None);
    commit.push(put(&meta, "fresh", 1, b"z", RecordExpect::Absent));
    s.store.commit(commit).await.expect("both hold: both apply");
    assert_eq!(s.store.read_meta(&stream).await.expect("read_meta"), Some(next));
    assert!(read(&s, &meta, "fresh").await.is_some());
}

/// Deleting a stream wipes its records; the re-created stream starts without.
pub async fn records_wiped_with_incarnation(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("record-wipe");
    let old = create(&s, &path).await;
    s.store.commit(Commit { ops: vec![put(&old, "k", 1, b"old", RecordExpect::Absent)] }).await.expect("commit");
    let delete =
        Op::DeleteStream { path: path.as_str().into(), incarnation: old.incarnation.clone(), expect_version: 0 };
    s.store.commit(Commit { ops: vec![delete] }).await.expect("delete");
    assert_eq!(read(&s, &old, "k").await, None, "wiped with the incarnation");
    let new = create(&s, &path).await;
    assert_eq!(read(&s, &new, "k").await, None);
    s.store.commit(Commit { ops: vec![put(&new, "k", 1, b"new", RecordExpect::Absent)] }).await.expect("fresh key");
}

/// Eight instances race to create one key from the same (empty) read:
/// exactly one wins, and the stored record is the winner's.
pub async fn record_writers_race(f: &dyn SubstrateFactory) {
    const RACERS: usize = 8;
    let mut instances = Vec::with_capacity(RACERS);
    for _ in 0..RACERS {
        instances.push(f.instance().await);
    }
    let meta = create(&instances[0], &unique_path("record-race")).await;
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for (r, s) in instances.iter().enumerate() {
        let (s, meta, barrier) = (s.clone(), meta.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            let op = Op::PutRecord {
                path: meta.path.clone(),
                incarnation: meta.incarnation.clone(),
                key: "race".into(),
                record: Record { revision: 1, value: Bytes::from(r.to_string()) },
                expect: RecordExpect::Absent,
            };
            barrier.wait().await;
            s.store.commit(Commit { ops: vec![op] }).await
        }));
    }
    let mut won = Vec::new();
    for (r, task) in tasks.into_iter().enumerate() {
        match task.await.expect("racer completes") {
            Ok(()) => won.push(r),
            Err(StoreError::Conflict) => {}
            Err(e) => panic!("racer {r} failed: {e}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one racer creates the key: {won:?}");
    let stored = read(&instances[0], &meta, "race").await.expect("stored");
    assert_eq!(stored.value, Bytes::from(won[0].to_string()), "the stored record is the winner's");
}
