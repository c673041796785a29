//! Single-writer store semantics: preconditions, all-or-nothing, producer
//! atomicity, delete/re-create, touch, listing and chunk reads.

use bytes::Bytes;

use super::fixtures::{append, append_commit, create, new_meta, read_all, unique_path};
use super::SubstrateFactory;
use crate::{Chunk, Commit, Expect, Op, ProducerState, StoreError};

/// `Expect::Absent`: creating a path twice → the second commit conflicts and
/// the first record stays.
pub async fn create_expect_absent(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("create-absent");
    let first = create(&s, &path).await;
    let second = new_meta(&path);
    let again = Commit { ops: vec![Op::PutMeta { meta: second, expect: Expect::Absent }] };
    assert!(matches!(s.store.commit(again).await, Err(StoreError::Conflict)));
    let stored = s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta");
    assert_eq!(stored, Some(first), "the losing create must not change the record");
}

/// `Expect::Version`: the current version commits; a stale one, or any version
/// on an absent path, conflicts and writes nothing. `Expect::VersionAt` also
/// needs the stored tail.
pub async fn expect_version(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("expect-version");
    let v0 = create(&s, &path).await;
    let mut v1 = v0.clone();
    v1.version = 1;
    v1.content_type = "text/plain".into();
    let ok = Commit { ops: vec![Op::PutMeta { meta: v1.clone(), expect: Expect::Version(0) }] };
    s.store.commit(ok).await.expect("current version commits");

    let mut stale = v0.clone();
    stale.version = 1;
    stale.closed = true;
    let stale_commit = Commit { ops: vec![Op::PutMeta { meta: stale, expect: Expect::Version(0) }] };
    assert!(matches!(s.store.commit(stale_commit).await, Err(StoreError::Conflict)));
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), Some(v1.clone()));

    // `Expect::VersionAt`: an append planned on a state that was never stored
    // (the stored version, another tail: a prediction that missed a commit)
    // conflicts, so its bytes never land past a hole.
    let mut phantom = v1.clone();
    phantom.tail += 6;
    let (gap, _) = append_commit(&phantom, &Bytes::from_static(b"lost"), None);
    assert!(matches!(s.store.commit(gap).await, Err(StoreError::Conflict)), "an append past the tail must conflict");
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), Some(v1.clone()));
    let (fits, v2) = append_commit(&v1, &Bytes::from_static(b"kept"), None);
    s.store.commit(fits).await.expect("an append at the stored tail commits");
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), Some(v2));
    let chunks = read_all(&s, &path, &v1.incarnation, 16).await;
    assert_eq!(chunks, vec![Chunk { start: 0, data: Bytes::from_static(b"kept") }], "only the fitting append's bytes");

    let missing = unique_path("expect-version-missing");
    let mut ghost = new_meta(&missing);
    ghost.version = 1;
    let on_absent = Commit { ops: vec![Op::PutMeta { meta: ghost, expect: Expect::Version(0) }] };
    assert!(matches!(s.store.commit(on_absent).await, Err(StoreError::Conflict)));
    assert_eq!(s.store.read_meta(&s.registry.enter(&missing)).await.expect("read_meta"), None);
}

/// A commit with one failing precondition among several ops writes nothing:
/// no chunk, no producer, no meta change — wherever the failing op sits.
pub async fn commit_all_or_nothing(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let a = create(&s, &unique_path("aon-a")).await;
    let c = create(&s, &unique_path("aon-c")).await;
    let failing_ops = [
        Op::PutMeta { meta: new_meta(&c.path), expect: Expect::Absent },
        Op::PutMeta { meta: c.clone(), expect: Expect::Version(c.version + 7) },
        Op::DeleteStream { path: c.path.clone(), incarnation: c.incarnation.clone(), expect_version: c.version + 1 },
    ];
    for failing in failing_ops {
        for at in 0..=3usize {
            let b = new_meta(&unique_path("aon-b"));
            let mut next_a = a.clone();
            next_a.version += 1;
            next_a.tail += 3;
            let mut ops = vec![
                Op::PutMeta { meta: next_a, expect: Expect::Version(a.version) },
                Op::PutChunk {
                    path: a.path.clone(),
                    incarnation: a.incarnation.clone(),
                    chunk: Chunk { start: 0, data: Bytes::from_static(b"abc") },
                },
                Op::PutProducer {
                    path: a.path.clone(),
                    incarnation: a.incarnation.clone(),
                    producer_id: "p".into(),
                    state: ProducerState { epoch: 0, last_seq: 0 },
                },
                Op::PutMeta { meta: b.clone(), expect: Expect::Absent },
            ];
            ops.insert(at, failing.clone());
            let result = s.store.commit(Commit { ops }).await;
            assert!(matches!(result, Err(StoreError::Conflict)), "failing op at {at}: {result:?}");

            assert_eq!(s.store.read_meta(&s.registry.enter(&a.path)).await.expect("read_meta"), Some(a.clone()));
            assert_eq!(s.store.read_meta(&s.registry.enter(&c.path)).await.expect("read_meta"), Some(c.clone()));
            assert_eq!(s.store.read_meta(&s.registry.enter(&b.path)).await.expect("read_meta"), None);
            let a_stream = s.registry.enter(&a.path);
            let chunks = s.store.read_chunks(&a_stream, &a.incarnation, 0, u64::MAX, usize::MAX);
            assert!(chunks.await.expect("read_chunks").is_empty(), "no chunk may leak");
            let producer = s.store.read_producer(&a_stream, &a.incarnation, "p");
            assert_eq!(producer.await.expect("read_producer"), None, "no producer may leak");
        }
    }
}

/// Producer state and data are committed together: seen together or not at
/// all, also by a reader (on another instance) racing the writer.
pub async fn producer_and_data_atomic(f: &dyn SubstrateFactory) {
    const APPENDS: u64 = 60;
    let writer = f.instance().await;
    let reader = f.instance().await;
    let meta = create(&writer, &unique_path("producer-atomic")).await;
    let len_of = |seq: u64| (seq % 7 + 1) as usize;
    // end_after[seq] = tail once append `seq` is committed.
    let end_after: Vec<u64> = (0..APPENDS)
        .scan(0u64, |tail, seq| {
            *tail += len_of(seq) as u64;
            Some(*tail)
        })
        .collect();

    // Writer and reader run as separate tasks so they truly interleave on a
    // multi-thread runtime (not just at the writer's await points).
    let (path, incarnation) = (meta.path.clone(), meta.incarnation.clone());
    let write = tokio::spawn(async move {
        for seq in 0..APPENDS {
            let data = Bytes::from(vec![b'a' + (seq % 26) as u8; len_of(seq)]);
            let state = ProducerState { epoch: 1, last_seq: seq };
            append(&writer, &path, data, Some(("prod", state))).await;
        }
    });
    let path = meta.path.clone();
    let read = tokio::spawn(async move {
        let stream = reader.registry.enter(&path);
        let producer = || reader.store.read_producer(&stream, &incarnation, "prod");
        loop {
            // Producer first, then meta: the meta must include that append.
            let p = producer().await.expect("read_producer");
            let m = reader.store.read_meta(&stream).await.expect("read_meta").expect("exists");
            if let Some(p) = p {
                let end = end_after[p.last_seq as usize];
                assert!(m.tail >= end, "producer seen before its data");
            }
            // Meta first, then producer: the producer must include that append.
            if m.version > 0 {
                let p = producer().await.expect("read_producer");
                let p = p.expect("a meta past version 0 implies a committed producer");
                assert!(p.last_seq + 1 >= m.version, "data seen before its producer state");
            }
            let chunks = read_all(&reader, &path, &incarnation, m.tail).await;
            super::fixtures::assert_tiles(&chunks, m.tail);
            if m.version == APPENDS {
                break;
            }
            tokio::task::yield_now().await;
        }
    });
    write.await.expect("writer completes");
    read.await.expect("reader saw every state consistent");
}

/// `DeleteStream` (with the right version) makes the path absent; a
/// re-created incarnation sees none of the old chunks or producers.
pub async fn delete_and_recreate(f: &dyn SubstrateFactory) {
    let s = f.instance().await;
    let path = unique_path("delete-recreate");
    let old = create(&s, &path).await;
    append(&s, &path, Bytes::from_static(b"old-1"), Some(("p", ProducerState { epoch: 0, last_seq: 0 }))).await;
    let last =
        append(&s, &path, Bytes::from_static(b"old-2"), Some(("p", ProducerState { epoch: 0, last_seq: 1 }))).await;

    let stale =
        Op::DeleteStream { path: path.as_str().into(), incarnation: old.incarnation.clone(), expect_version: 1 };
    assert!(matches!(s.store.commit(Commit { ops: vec![stale] }).await, Err(StoreError::Conflict)));
    assert!(
        s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta").is_some(),
        "a stale delete removes nothing"
    );

    let delete = Op::DeleteStream {
        path: path.as_str().into(),
        incarnation: old.incarnation.clone(),
        expect_version: last.meta.version,
    };
    s.store.commit(Commit { ops: vec![delete] }).await.expect("delete commits");
    assert_eq!(s.store.read_meta(&s.registry.enter(&path)).await.expect("read_meta"), None);
    let listed = s.store.list_streams(Some(&path[..path.len() - 1]), 10).await.expect("list_streams");
    assert!(listed.iter().all(|m| *m.path != *path), "a deleted stream is not listed");

    let new = create(&s, &path).await;
    assert_ne!(new.incarnation, old.incarnation);
    let chunks = s.store.read_chunks(&s.registry.enter(&path), &new.incarnation, 0, u64::MAX, usize::MAX).await;
    assert!(chunks.expect("read_chunks").is_empty(), "the new incarnation starts empty");
    let producer = s.store.read_producer(&s.registry.enter(&path), &new.incarnation, "p").await.expect("read_producer");
    assert_eq!(producer, None, "the new incarnation has no producers");
    let first = append(&s, &path, Bytes::from_static(b"new"), None).await;
    assert_eq!(first.position, 0);
    let chunks = read_all(&s, &path, &new.incarnation, first.meta.tail).await;
    assert_eq!(chunks, vec![Chunk { start: 0, data: Bytes::from_static(b"new") }]);
}
