//! A stream deleted and created again is another stream to everything bound
//! to its old incarnation.

use super::fixtures::{event, fence, monotonic, record, wall_ms, SLUG};
use super::AdapterFactory;
use ds_processor::core_events::PROCESSOR_REVIVED;
use ds_processor::Expectation;
use ds_processor::{JournalError, RecoveryError};

/// After a re-creation, a journal bound to the old incarnation gets
/// [`JournalError::IncarnationChanged`] on read and append and never sees or
/// touches the new incarnation; progress records and idempotency keys do not
/// carry over; an alarm armed for the old incarnation revives nothing.
pub async fn incarnation_change_isolates_the_old_incarnation(f: &dyn AdapterFactory) {
    let stream = f.create_stream().await;
    let old = f.instance(&stream, SLUG).await;
    let inc1 = old.journal.incarnation().await.expect("incarnation");
    let before = old.journal.append(&inc1, event("old life"), "reused-key").await.expect("append");
    let old_record = record(&inc1, 0, before.position, before.position);
    old.progress.commit(&old_record, &monotonic(&inc1, 0)).await.expect("commit");
    old.recovery.arm(SLUG, &inc1, wall_ms()).await.expect("arm");

    f.recreate_stream(&stream).await;
    let new = f.instance(&stream, SLUG).await;
    let inc2 = new.journal.incarnation().await.expect("incarnation");
    assert_ne!(inc1, inc2, "a re-created stream has a new incarnation");
    assert_eq!(old.journal.incarnation().await.expect("incarnation"), inc2, "instances are not bound, calls are");
    let fresh = new.journal.append(&inc2, event("new life"), "reused-key").await.expect("append");
    assert!(!fresh.deduplicated, "idempotency keys do not carry over to a new incarnation");

    let changed = JournalError::IncarnationChanged { expected: inc1.clone(), current: Some(inc2.clone()) };
    assert_eq!(old.journal.read_after(&inc1, 0, 10).await, Err(changed.clone()), "never reads the new incarnation");
    assert_eq!(old.journal.read_after(&inc1, before.position, 10).await, Err(changed.clone()));
    assert_eq!(old.journal.append(&inc1, event("stray"), "stray-key").await, Err(changed));
    let entries = new.journal.read_after(&inc2, 0, 10).await.expect("read");
    assert_eq!(entries.len(), 1, "only the new life's entry: {entries:?}");
    assert_eq!(entries[0].data, event("new life"));

    assert_eq!(new.progress.read(&inc2).await.expect("read"), None, "progress does not carry over");
    let new_record = record(&inc2, 1, fresh.position, fresh.position);
    new.progress.commit(&new_record, &fence(&inc2, 1, Expectation::StoredRevision(0))).await.expect("commit");
    // Whatever the dead incarnation's runner still writes lands (if at all)
    // in its own record, never in the live one.
    let late = record(&inc1, 0, before.position + 5, before.position + 5);
    let _ = old.progress.commit(&late, &monotonic(&inc1, 0)).await;
    assert_eq!(new.progress.read(&inc2).await.expect("read"), Some(new_record.clone()));
    assert_eq!(old.progress.read(&inc2).await.expect("read"), Some(new_record));

    for alarm in f.take_due_alarms(&stream, wall_ms() + 60_000).await {
        assert_eq!(alarm.incarnation, inc1);
        match old.recovery.handle_alarm(&alarm).await {
            Err(RecoveryError::Journal(JournalError::IncarnationChanged { .. })) => {}
            other => panic!("an alarm of a dead incarnation must revive nothing, got {other:?}"),
        }
    }
    let entries = new.journal.read_after(&inc2, 0, 10).await.expect("read");
    let revived = entries.iter().filter(|e| String::from_utf8_lossy(&e.data).contains(PROCESSOR_REVIVED)).count();
    assert_eq!(revived, 0, "no revival event in the new incarnation");
}
