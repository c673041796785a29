//! Progress records: round trip, every fence rejection, the commit race.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::fixtures::{fence, monotonic, record, SLUG};
use super::{AdapterFactory, AdapterSet};
use ds_processor::StreamIncarnation;
use ds_processor::{Expectation, Fence, FenceRejection};
use ds_processor::{PendingAudit, StoredProgress};
use ds_processor::{ProgressError, ProgressStore};

/// Two instances of one (stream, processor), and the stream's incarnation.
async fn pair(f: &dyn AdapterFactory) -> (AdapterSet, AdapterSet, StreamIncarnation) {
    let stream = f.create_stream().await;
    let (a, b) = (f.instance(&stream, SLUG).await, f.instance(&stream, SLUG).await);
    let inc = a.journal.incarnation().await.expect("incarnation");
    (a, b, inc)
}

async fn commit(store: &dyn ProgressStore, record: &StoredProgress, fence: &Fence) {
    if let Err(e) = store.commit(record, fence).await {
        panic!("commit of {record:?} under {fence:?} must land: {e}");
    }
}

/// The commit is refused with exactly `expected`, and (read through another
/// instance) nothing changed.
async fn refused(
    writer: &AdapterSet,
    reader: &AdapterSet,
    inc: &StreamIncarnation,
    record: &StoredProgress,
    fence: &Fence,
    expected: FenceRejection,
) {
    let before = reader.progress.read(inc).await.expect("read");
    match writer.progress.commit(record, fence).await {
        Err(ProgressError::Rejected(rejection)) => assert_eq!(rejection, expected, "commit {record:?} under {fence:?}"),
        other => panic!("commit {record:?} under {fence:?} must be fenced with {expected:?}, got {other:?}"),
    }
    assert_eq!(reader.progress.read(inc).await.expect("read"), before, "a refused commit stores nothing");
}

/// A committed record reads back equal from another instance (state JSON
/// and pending audit included); a processor with no record reads `None`.
pub async fn progress_round_trips_across_instances(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    assert_eq!(b.progress.read(&inc).await.expect("read"), None, "no record before the first commit");
    let mut first = record(&inc, 0, 7, 5);
    first.pending_audit = Some(PendingAudit {
        key: "audit-key".into(),
        event_type: "stream/processor-skipped".into(),
        payload: serde_json::json!({ "reason": "round trip", "through": 7 }),
    });
    commit(a.progress.as_ref(), &first, &monotonic(&inc, 0)).await;
    assert_eq!(b.progress.read(&inc).await.expect("read"), Some(first));
    let second = record(&inc, 0, 9, 9);
    commit(b.progress.as_ref(), &second, &monotonic(&inc, 0)).await;
    assert_eq!(a.progress.read(&inc).await.expect("read"), Some(second), "the pending audit was dropped");

    let stream = f.create_stream().await;
    let other = f.instance(&stream, "another-processor").await;
    let other_inc = other.journal.incarnation().await.expect("incarnation");
    assert_eq!(other.progress.read(&other_inc).await.expect("read"), None, "records are per stream and processor");
}

/// A revision older than the stored one is refused.
pub async fn fence_rejects_stale_revision(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    commit(a.progress.as_ref(), &record(&inc, 0, 3, 3), &monotonic(&inc, 0)).await;
    commit(b.progress.as_ref(), &record(&inc, 1, 1, 1), &fence(&inc, 1, Expectation::StoredRevision(0))).await;
    let stale = FenceRejection::StaleRevision { stored: 1, attempted: 0 };
    refused(&a, &b, &inc, &record(&inc, 0, 5, 5), &monotonic(&inc, 0), stale).await;
}

/// At the same revision the ack never moves backward; the same ack again (a
/// retried commit) lands.
pub async fn fence_rejects_backward_ack(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    commit(a.progress.as_ref(), &record(&inc, 2, 5, 5), &fence(&inc, 2, Expectation::Monotonic)).await;
    let backward = FenceRejection::BackwardAck { stored: 5, attempted: 4 };
    refused(&b, &a, &inc, &record(&inc, 2, 4, 4), &monotonic(&inc, 2), backward).await;
    commit(b.progress.as_ref(), &record(&inc, 2, 5, 5), &monotonic(&inc, 2)).await;
}

/// `reduced_through > acknowledged_through` is never stored, not even as a
/// first record.
pub async fn fence_rejects_broken_invariant(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    let broken = FenceRejection::InvariantBroken { reduced_through: 6, acknowledged_through: 5 };
    refused(&a, &b, &inc, &record(&inc, 0, 5, 6), &monotonic(&inc, 0), broken.clone()).await;
    commit(a.progress.as_ref(), &record(&inc, 0, 5, 5), &monotonic(&inc, 0)).await;
    refused(&b, &a, &inc, &record(&inc, 0, 5, 6), &monotonic(&inc, 0), broken).await;
}

/// An operator compare-and-swap needs the stored revision to be exactly the
/// expected one (an absent record is at revision 0).
pub async fn fence_rejects_revision_mismatch(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    let on_absent = FenceRejection::RevisionMismatch { expected: 3, stored: None };
    refused(&a, &b, &inc, &record(&inc, 4, 1, 1), &fence(&inc, 4, Expectation::StoredRevision(3)), on_absent).await;
    commit(a.progress.as_ref(), &record(&inc, 0, 4, 4), &monotonic(&inc, 0)).await;
    let stale = FenceRejection::RevisionMismatch { expected: 1, stored: Some(0) };
    refused(&b, &a, &inc, &record(&inc, 2, 1, 1), &fence(&inc, 2, Expectation::StoredRevision(1)), stale).await;
}

/// A record must carry the fence's incarnation and revision.
pub async fn fence_rejects_disagreeing_fence(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    commit(a.progress.as_ref(), &record(&inc, 1, 2, 2), &monotonic(&inc, 1)).await;
    let other = StreamIncarnation::new(format!("{inc}-not"));
    refused(&a, &b, &inc, &record(&inc, 2, 3, 3), &monotonic(&inc, 1), FenceRejection::FenceDisagrees).await;
    refused(&b, &a, &inc, &record(&other, 1, 3, 3), &monotonic(&inc, 1), FenceRejection::FenceDisagrees).await;
}

/// What the runner writes lands: a first record, a moving ack, a retried
/// commit, a rewind under a newer revision, and a matching compare-and-swap
/// (also on an absent record, at revision 0).
pub async fn fence_accepts_legal_commits(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    let steps = [
        (record(&inc, 0, 2, 2), monotonic(&inc, 0)),
        (record(&inc, 0, 6, 6), monotonic(&inc, 0)),
        (record(&inc, 0, 6, 6), monotonic(&inc, 0)),
        (record(&inc, 0, 6, 3), monotonic(&inc, 0)),
        (record(&inc, 1, 2, 0), fence(&inc, 1, Expectation::StoredRevision(0))),
        (record(&inc, 1, 3, 3), monotonic(&inc, 1)),
        (record(&inc, 3, 1, 1), monotonic(&inc, 3)),
    ];
    for (i, (next, fence)) in steps.iter().enumerate() {
        let (writer, reader) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        commit(writer.progress.as_ref(), next, fence).await;
        assert_eq!(reader.progress.read(&inc).await.expect("read").as_ref(), Some(next), "step {i}");
    }
    let (c, _, fresh) = pair(f).await;
    let first = record(&fresh, 1, 0, 0);
    commit(c.progress.as_ref(), &first, &fence(&fresh, 1, Expectation::StoredRevision(0))).await;
}

/// Two hosts compare-and-swap one record at the same moment: exactly one
/// lands, the other is fenced (and sees the winner's revision), round after
/// round.
pub async fn concurrent_commits_one_winner(f: &dyn AdapterFactory) {
    let (a, b, inc) = pair(f).await;
    for round in 0..16u64 {
        let barrier = Arc::new(Barrier::new(2));
        let race = |store: Arc<dyn ProgressStore>, ack: u64| {
            let (barrier, inc) = (Arc::clone(&barrier), inc.clone());
            tokio::spawn(async move {
                let next = record(&inc, round + 1, ack, ack);
                barrier.wait().await;
                let outcome = store.commit(&next, &fence(&inc, round + 1, Expectation::StoredRevision(round))).await;
                (next, outcome)
            })
        };
        let (ta, tb) = (race(Arc::clone(&a.progress), 10 * round + 1), race(Arc::clone(&b.progress), 10 * round + 2));
        let ((na, oa), (nb, ob)) = (ta.await.expect("task"), tb.await.expect("task"));
        let lost = FenceRejection::RevisionMismatch { expected: round, stored: Some(round + 1) };
        let winner = match (oa, ob) {
            (Ok(()), Err(ProgressError::Rejected(r))) if r == lost => na,
            (Err(ProgressError::Rejected(r)), Ok(())) if r == lost => nb,
            outcomes => panic!("round {round}: exactly one commit must land, the other be fenced: {outcomes:?}"),
        };
        assert_eq!(a.progress.read(&inc).await.expect("read"), Some(winner), "round {round}: the winner's record");
    }
}
