//! Many writers on one stream, each on its own substrate instance (as separate
//! processes or Lambda instances would be): the commit precondition alone must
//! keep appends unique, ordered and all-or-nothing.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Barrier;

use super::fixtures::{append, append_commit, assert_tiles, bytes_at, create, read_all, unique_path};
use super::SubstrateFactory;
use crate::{ProducerState, StoreError, Substrate};

/// The payload writer `w` appends as its `seq`-th append: distinct per
/// `(w, seq)` and of varying length, so misplaced bytes are caught.
fn payload(w: usize, seq: usize) -> Bytes {
    let pad = "#".repeat((w * 7 + seq * 3) % 11);
    Bytes::from(format!("<w{w}:s{seq}{pad}>"))
}

/// `writers` concurrent writers, each on its own instance from `f`, each
/// appending `appends_each` times to ONE stream with the core's loop
/// (lock → read_meta → PutMeta(version + 1, tail + len) + PutChunk at the old
/// tail + PutProducer → commit, retry on `Conflict`). Afterwards: positions are
/// unique, every acknowledged chunk is readable byte-exact at its position,
/// the chunks tile `[0, tail)`, `tail` = sum of lengths, each writer's chunks
/// appear in its own order and its producer state is its last append.
///
/// Use `writers >= 32` to meet the contract (the suite default is 32 × 6).
pub async fn concurrent_appends_one_stream(f: &dyn SubstrateFactory, writers: usize, appends_each: usize) {
    assert!(writers > 0 && appends_each > 0);
    let mut instances: Vec<Substrate> = Vec::with_capacity(writers);
    for _ in 0..writers {
        instances.push(f.instance().await);
    }
    let meta = create(&instances[0], &unique_path("concurrent-appends")).await;
    let barrier = Arc::new(Barrier::new(writers));

    let mut tasks = Vec::with_capacity(writers);
    for (w, s) in instances.into_iter().enumerate() {
        let (path, barrier) = (meta.path.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut acked = Vec::with_capacity(appends_each);
            for seq in 0..appends_each {
                let state = ProducerState { epoch: 0, last_seq: seq as u64 };
                let producer = format!("writer-{w}");
                let done = append(&s, &path, payload(w, seq), Some((&producer, state))).await;
                acked.push((done.position, seq));
            }
            acked
        }));
    }
    let mut by_position: HashMap<u64, (usize, usize)> = HashMap::new();
    for (w, task) in tasks.into_iter().enumerate() {
        let acked = task.await.expect("writer task completes");
        let positions: Vec<u64> = acked.iter().map(|(p, _)| *p).collect();
        assert!(positions.windows(2).all(|p| p[0] < p[1]), "writer {w}'s appends are in its own order");
        for (position, seq) in acked {
            let clash = by_position.insert(position, (w, seq));
            assert!(clash.is_none(), "two appends got position {position}: {clash:?} and {:?}", (w, seq));
        }
    }

    let check = f.instance().await;
    let stored =
        check.store.read_meta(&check.registry.enter(&meta.path)).await.expect("read_meta").expect("stream exists");
    let total: u64 = (0..writers).flat_map(|w| (0..appends_each).map(move |seq| payload(w, seq).len() as u64)).sum();
    assert_eq!(stored.tail, total, "tail = sum of appended lengths");
    assert_eq!(stored.version, (writers * appends_each) as u64, "one version per append");
    let chunks = read_all(&check, &meta.path, &meta.incarnation, stored.tail).await;
    assert_tiles(&chunks, stored.tail);
    for chunk in &chunks {
        assert!(by_position.contains_key(&chunk.start), "chunk at {} starts where an append did", chunk.start);
    }
    // The acknowledged appends add up to the tail and none overlaps another,
    // so the stream holds exactly them.
    let whole = bytes_at(&chunks, 0, stored.tail);
    for (&position, &(w, seq)) in &by_position {
        let at = usize::try_from(position).expect("fits");
        let expected = payload(w, seq);
        assert_eq!(&whole[at..at + expected.len()], &expected[..], "bytes at {position} are writer {w}'s append {seq}");
    }
    for w in 0..writers {
        let p = check
            .store
            .read_producer(&check.registry.enter(&meta.path), &meta.incarnation, &format!("writer-{w}"))
            .await;
        let p = p.expect("read_producer").expect("every writer's producer state exists");
        assert_eq!(p.last_seq, appends_each as u64 - 1, "writer {w}'s producer state is its last append");
    }
}

/// Rounds of `racers` instances all committing an append built from the SAME
/// read (no lock taken): exactly one wins each round, and the losers leave no
/// chunk, producer or meta change behind.
pub async fn concurrent_commits_all_or_nothing(f: &dyn SubstrateFactory, racers: usize, rounds: usize) {
    assert!(racers > 1 && rounds > 0);
    let mut instances = Vec::with_capacity(racers);
    for _ in 0..racers {
        instances.push(f.instance().await);
    }
    let meta = create(&instances[0], &unique_path("racing-commits")).await;
    let mut winners = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let base = instances[0]
            .store
            .read_meta(&instances[0].registry.enter(&meta.path))
            .await
            .expect("read_meta")
            .expect("exists");
        let barrier = Arc::new(Barrier::new(racers));
        let mut tasks = Vec::with_capacity(racers);
        for (r, s) in instances.iter().enumerate() {
            let (s, base, barrier) = (s.clone(), base.clone(), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                let data = payload(r, round);
                let producer = format!("racer-{r}");
                let state = ProducerState { epoch: 0, last_seq: round as u64 };
                let (commit, _) = append_commit(&base, &data, Some((&producer, state)));
                barrier.wait().await;
                s.store.commit(commit).await
            }));
        }
        let mut won = Vec::new();
        for (r, task) in tasks.into_iter().enumerate() {
            match task.await.expect("racer task completes") {
                Ok(()) => won.push(r),
                Err(StoreError::Conflict) => {}
                Err(e) => panic!("racer {r} failed: {e}"),
            }
        }
        assert_eq!(won.len(), 1, "exactly one of the racing commits wins round {round}: {won:?}");
        winners.push(won[0]);

        let s = &instances[0];
        let after = s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta").expect("exists");
        assert_eq!(after.version, base.version + 1);
        assert_eq!(after.tail, base.tail + payload(won[0], round).len() as u64);
        let chunks = read_all(s, &meta.path, &meta.incarnation, after.tail).await;
        assert_tiles(&chunks, after.tail);
        let stored = bytes_at(&chunks, base.tail, after.tail);
        assert_eq!(stored, payload(won[0], round), "only the winner's bytes are stored");
        let past = s.store.read_chunks(&s.registry.enter(&meta.path), &meta.incarnation, after.tail, u64::MAX, 1).await;
        assert!(past.expect("read_chunks").is_empty(), "no loser's bytes past the tail");
    }
    // Losers never left producer state: each racer's state names only rounds it won.
    let s = &instances[0];
    for r in 0..racers {
        let p = s
            .store
            .read_producer(&s.registry.enter(&meta.path), &meta.incarnation, &format!("racer-{r}"))
            .await
            .expect("read_producer");
        let last_win = winners.iter().rposition(|w| *w == r);
        assert_eq!(p.map(|p| p.last_seq as usize), last_win, "racer {r}'s producer state");
    }
    let m = s.store.read_meta(&s.registry.enter(&meta.path)).await.expect("read_meta").expect("exists");
    assert_tiles(&read_all(s, &meta.path, &meta.incarnation, m.tail).await, m.tail);
}
