//! One revival alarm per (stream, processor), one revival event per firing.

use super::fixtures::{wall_ms, SLUG};
use super::AdapterFactory;
use ds_processor::core_events::PROCESSOR_REVIVED;
use ds_processor::Journal;
use ds_processor::StreamIncarnation;

async fn revivals(journal: &dyn Journal, inc: &StreamIncarnation) -> Vec<serde_json::Value> {
    let entries = journal.read_after(inc, 0, 1_000).await.expect("read");
    entries
        .iter()
        .filter_map(|e| serde_json::from_slice::<serde_json::Value>(&e.data).ok())
        .filter(|v| v["type"] == PROCESSOR_REVIVED)
        .collect()
}

/// Armed twice (from two instances), the alarm fires once, when due; its
/// revival event is appended once however often the fired alarm is
/// delivered; a later arming revives again; a disarmed alarm never fires;
/// processors' alarms are independent.
pub async fn alarm_armed_twice_revives_once(f: &dyn AdapterFactory) {
    let stream = f.create_stream().await;
    let (a, b) = (f.instance(&stream, SLUG).await, f.instance(&stream, SLUG).await);
    let inc = a.journal.incarnation().await.expect("incarnation");
    let now = wall_ms();
    a.recovery.arm(SLUG, &inc, now + 30_000).await.expect("arm");
    b.recovery.arm(SLUG, &inc, now + 40_000).await.expect("arm again, from another instance");

    assert!(f.take_due_alarms(&stream, now).await.is_empty(), "not due before its time");
    let fired = f.take_due_alarms(&stream, now + 60_000).await;
    assert_eq!(fired.len(), 1, "armed twice, fires once: {fired:?}");
    let alarm = &fired[0];
    assert_eq!((alarm.slug.as_str(), &alarm.incarnation), (SLUG, &inc));
    assert!(f.take_due_alarms(&stream, now + 120_000).await.is_empty(), "one-shot");

    let first = a.recovery.handle_alarm(alarm).await.expect("handle");
    let redelivered = b.recovery.handle_alarm(alarm).await.expect("handle the redelivery");
    assert!(!first.deduplicated);
    assert!(redelivered.deduplicated && redelivered.position == first.position, "{redelivered:?}");
    let events = revivals(a.journal.as_ref(), &inc).await;
    assert_eq!(events.len(), 1, "one revival event: {events:?}");
    assert_eq!(events[0]["payload"]["processorSlug"], SLUG);

    b.recovery.arm(SLUG, &inc, now).await.expect("arm after firing");
    let again = f.take_due_alarms(&stream, now + 60_000).await;
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].token, alarm.token, "every arming has its own token");
    assert!(!a.recovery.handle_alarm(&again[0]).await.expect("handle").deduplicated, "a new arming revives again");
    assert_eq!(revivals(b.journal.as_ref(), &inc).await.len(), 2);

    a.recovery.arm(SLUG, &inc, now).await.expect("arm");
    b.recovery.disarm(SLUG).await.expect("disarm from another instance");
    assert!(f.take_due_alarms(&stream, now + 60_000).await.is_empty(), "a disarmed alarm never fires");
    b.recovery.disarm(SLUG).await.expect("disarming nothing is fine");

    let other = f.instance(&stream, "another-processor").await;
    a.recovery.arm(SLUG, &inc, now).await.expect("arm");
    other.recovery.arm("another-processor", &inc, now).await.expect("arm");
    let mut slugs: Vec<String> = f.take_due_alarms(&stream, now + 60_000).await.into_iter().map(|a| a.slug).collect();
    slugs.sort();
    assert_eq!(slugs, ["another-processor", SLUG], "one alarm per processor");
}
