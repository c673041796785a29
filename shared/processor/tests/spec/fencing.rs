//! [8] fencing of progress commits.

use ds_processor::{
    check_fence, CheckpointCadence, Expectation, Fence, FenceRejection, JournalError, Processing, Progress,
    ProgressError, ProgressStore, Reduction, RunnerError, StoredProgress, StreamIncarnation,
};
use ds_processor_testkit::harness::World;
use serde_json::json;

use crate::support::*;

fn record(incarnation: &str, revision: u64, ack: u64, reduced: u64) -> StoredProgress {
    StoredProgress {
        stream_incarnation: StreamIncarnation::new(incarnation),
        progress: Progress {
            reduction: Reduction { reducer_version: "1".into(), reduced_through: reduced, state: json!({}) },
            processing: Some(Processing { acknowledged_through: ack, cursor_revision: revision }),
        },
        pending_audit: None,
    }
}

fn fence(incarnation: &str, revision: u64, expect: Expectation) -> Fence {
    Fence { stream_incarnation: StreamIncarnation::new(incarnation), cursor_revision: revision, expect }
}

fn monotonic(incarnation: &str, revision: u64) -> Fence {
    fence(incarnation, revision, Expectation::Monotonic)
}

#[test]
fn stale_revision_is_rejected() {
    let stored = record("a", 3, 10, 10);
    assert_eq!(
        check_fence(Some(&stored), &record("a", 2, 20, 20), &monotonic("a", 2)),
        Err(FenceRejection::StaleRevision { stored: 3, attempted: 2 })
    );
}

#[test]
fn a_stored_record_of_another_incarnation_is_rejected() {
    // A store keeps records per incarnation and never hands check_fence a
    // foreign one; the check still refuses it.
    let stored = record("b", 0, 10, 10);
    assert!(matches!(
        check_fence(Some(&stored), &record("a", 5, 20, 20), &monotonic("a", 5)),
        Err(FenceRejection::StaleIncarnation { .. })
    ));
}

#[test]
fn an_absent_record_is_at_revision_zero() {
    let first = record("a", 1, 3, 3);
    assert_eq!(check_fence(None, &first, &fence("a", 1, Expectation::StoredRevision(0))), Ok(()));
    assert_eq!(
        check_fence(None, &first, &fence("a", 1, Expectation::StoredRevision(2))),
        Err(FenceRejection::RevisionMismatch { expected: 2, stored: None })
    );
    assert_eq!(check_fence(None, &record("a", 0, 3, 3), &monotonic("a", 0)), Ok(()));
}

#[test]
fn same_revision_backward_ack_is_rejected() {
    let stored = record("a", 1, 10, 10);
    assert_eq!(
        check_fence(Some(&stored), &record("a", 1, 9, 9), &monotonic("a", 1)),
        Err(FenceRejection::BackwardAck { stored: 10, attempted: 9 })
    );
    // Same ack again (a retried commit) is fine.
    assert_eq!(check_fence(Some(&stored), &record("a", 1, 10, 10), &monotonic("a", 1)), Ok(()));
}

#[test]
fn revision_bumping_rewind_is_accepted() {
    let stored = record("a", 1, 10, 10);
    assert_eq!(check_fence(Some(&stored), &record("a", 2, 3, 0), &monotonic("a", 2)), Ok(()));
    let cas = fence("a", 2, Expectation::StoredRevision(1));
    assert_eq!(check_fence(Some(&stored), &record("a", 2, 3, 0), &cas), Ok(()));
    // ...but not as a compare-and-swap against the wrong revision.
    let wrong = fence("a", 3, Expectation::StoredRevision(2));
    assert_eq!(
        check_fence(Some(&stored), &record("a", 3, 3, 0), &wrong),
        Err(FenceRejection::RevisionMismatch { expected: 2, stored: Some(1) })
    );
}

#[test]
fn broken_invariant_and_disagreeing_fence_are_rejected() {
    assert!(matches!(
        check_fence(None, &record("a", 0, 5, 6), &monotonic("a", 0)),
        Err(FenceRejection::InvariantBroken { reduced_through: 6, acknowledged_through: 5 })
    ));
    assert_eq!(check_fence(None, &record("a", 1, 5, 5), &monotonic("a", 0)), Err(FenceRejection::FenceDisagrees));
}

#[tokio::test]
async fn memory_store_refuses_rejected_commits_without_storing() {
    let world = World::new();
    let store = world.progress.clone();
    store.commit(&record("a", 1, 10, 10), &monotonic("a", 1)).await.unwrap();
    let refused = store.commit(&record("a", 1, 4, 4), &monotonic("a", 1)).await;
    assert!(matches!(refused, Err(ProgressError::Rejected(FenceRejection::BackwardAck { .. }))));
    assert_eq!(store.read(&StreamIncarnation::new("a")).await.unwrap(), Some(record("a", 1, 10, 10)));
    assert_eq!(store.history().len(), 1);
    assert_eq!(store.rejections().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn in_flight_commits_of_the_old_revision_are_fenced_after_reprocess_from() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1), tick(3, 1)]);
    let (a, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    a.catch_up().await.unwrap();
    // A second runner (another host) rewinds.
    let (b, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    b.reprocess_from(2, 0, "replay after vendor outage").await.unwrap();

    // Runner A, still at revision 0, processes a new event: its commit is
    // fenced, it reloads (revision 1, ack 1) and re-processes from 2.
    write(&world.journal, &[tick(4, 1)]);
    a.catch_up().await.unwrap();
    assert!(world
        .progress
        .rejections()
        .iter()
        .any(|r| matches!(r, FenceRejection::StaleRevision { stored: 1, attempted: 0 })));
    let state = a.runtime_state();
    assert_eq!(state.cursor_revision, 1);
    assert_eq!(state.acknowledged_through, world.journal.head());
    for record in world.progress.history() {
        assert!(record.progress.holds_invariant());
    }
}

#[tokio::test(start_paused = true)]
async fn stream_recreation_starts_over_and_the_old_incarnations_runner_never_reads_the_new_one() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (old, old_log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    old.catch_up().await.unwrap();
    let old_keys = world.sink.applied_keys();
    let old_record = world.progress.record().unwrap();

    world.journal.recreate("incarnation-2");
    write(&world.journal, &[tick(1, 1), tick(2, 1), tick(3, 1)]);

    // The runner bound to the old incarnation gets a clear error and
    // processes nothing of the new one.
    let error = old.catch_up().await.unwrap_err();
    assert_eq!(
        error,
        RunnerError::Journal(JournalError::IncarnationChanged {
            expected: StreamIncarnation::new("incarnation-1"),
            current: Some(StreamIncarnation::new("incarnation-2")),
        })
    );
    assert_eq!(calls(&old_log).len(), 2, "no call for the new incarnation's events");
    assert_eq!(world.sink.applied_keys(), old_keys);
    assert_eq!(world.progress.record_of(&StreamIncarnation::new("incarnation-2")), None);
    assert!(matches!(old.reprocess_from(1, 0, "late operator").await, Err(RunnerError::Journal(_))));
    assert_eq!(world.progress.record_of(&StreamIncarnation::new("incarnation-2")), None);

    // A runner opened now starts the new incarnation from the beginning.
    let (new, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    assert_eq!(new.runtime_state().acknowledged_through, 0);
    new.catch_up().await.unwrap();
    assert_eq!(world.progress.record().unwrap().stream_incarnation.as_str(), "incarnation-2");
    assert_eq!(world.progress.record().unwrap().progress.acknowledged_through(), 3);
    // Same positions, new incarnation: the effects genuinely re-emit.
    assert_eq!(world.sink.applied_keys().len(), old_keys.len() + 3);
    // The old incarnation's record is left as it was (a purge removes it).
    assert_eq!(world.progress.record_of(&StreamIncarnation::new("incarnation-1")), Some(old_record));
}
