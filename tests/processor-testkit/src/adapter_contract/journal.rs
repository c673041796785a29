//! Journal reads and idempotent appends.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::fixtures::{event, SLUG};
use super::AdapterFactory;
use ds_processor::{AppendOutcome, Journal};

/// `read_after` returns the entries after a position, in order, at most
/// `limit`, and nothing at the head; positions strictly increase.
pub async fn journal_reads_in_order(f: &dyn AdapterFactory) {
    let stream = f.create_stream().await;
    let set = f.instance(&stream, SLUG).await;
    let inc = set.journal.incarnation().await.expect("incarnation of a fresh stream");
    assert!(set.journal.read_after(&inc, 0, 10).await.expect("read").is_empty(), "a fresh stream is empty");

    let mut positions = Vec::new();
    for i in 0..5 {
        let outcome = set.journal.append(&inc, event(&format!("e{i}")), &format!("read-{i}")).await.expect("append");
        assert!(!outcome.deduplicated);
        positions.push(outcome.position);
    }
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "positions strictly increase: {positions:?}");
    assert!(positions[0] > 0, "position 0 means \"before the first entry\" to read_after");

    let all = set.journal.read_after(&inc, 0, 10).await.expect("read");
    assert_eq!(all.iter().map(|e| e.position).collect::<Vec<_>>(), positions);
    for (i, entry) in all.iter().enumerate() {
        assert_eq!(entry.data, event(&format!("e{i}")), "entry {i} reads back byte for byte");
    }
    let page = set.journal.read_after(&inc, positions[1], 2).await.expect("read");
    assert_eq!(page.iter().map(|e| e.position).collect::<Vec<_>>(), positions[2..4]);
    let one = set.journal.read_after(&inc, 0, 1).await.expect("read");
    assert_eq!(one.iter().map(|e| e.position).collect::<Vec<_>>(), positions[..1], "limit is honoured");
    assert!(set.journal.read_after(&inc, positions[4], 10).await.expect("read").is_empty(), "nothing after the head");
}

/// An append under a key already used writes nothing and answers the first
/// position — from another instance too, and when two instances append under
/// one key at the same moment (exactly one write).
pub async fn append_dedupes_by_key_across_instances(f: &dyn AdapterFactory) {
    let stream = f.create_stream().await;
    let (a, b) = (f.instance(&stream, SLUG).await, f.instance(&stream, SLUG).await);
    let inc = a.journal.incarnation().await.expect("incarnation");

    let first = a.journal.append(&inc, event("first"), "dedupe-key").await.expect("append");
    let again = b.journal.append(&inc, event("second"), "dedupe-key").await.expect("append");
    assert_eq!(again, AppendOutcome { position: first.position, deduplicated: true });
    let same = a.journal.append(&inc, event("third"), "dedupe-key").await.expect("append");
    assert_eq!(same, AppendOutcome { position: first.position, deduplicated: true });
    let entries = b.journal.read_after(&inc, 0, 10).await.expect("read");
    assert_eq!(entries.len(), 1, "one write for one key");
    assert_eq!(entries[0].data, event("first"), "the first append's bytes stand");

    let other = b.journal.append(&inc, event("other"), "another-key").await.expect("append");
    assert!(!other.deduplicated && other.position > first.position);

    for round in 0..12 {
        let key = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(2));
        let race = |journal: Arc<dyn Journal>, label: &'static str| {
            let (barrier, key, inc) = (Arc::clone(&barrier), key.clone(), inc.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                journal.append(&inc, event(label), &key).await
            })
        };
        let (ra, rb) = (race(Arc::clone(&a.journal), "a"), race(Arc::clone(&b.journal), "b"));
        let (oa, ob) = (ra.await.expect("task").expect("append"), rb.await.expect("task").expect("append"));
        assert_eq!(oa.position, ob.position, "round {round}: both answer the one entry");
        assert!(oa.deduplicated != ob.deduplicated, "round {round}: exactly one wrote ({oa:?}, {ob:?})");
        let tail = a.journal.read_after(&inc, other.position, 100).await.expect("read");
        assert_eq!(tail.len(), round + 1, "round {round}: one entry per raced key");
        let winner = if oa.deduplicated { "b" } else { "a" };
        assert_eq!(tail[round].data, event(winner), "round {round}: the stored bytes are the writer's");
    }
}
