//! [11] zero-lag revival of an incarnation that died owing background work.

use std::time::Duration;

use ds_processor::{event_key, CheckpointCadence, Recovery, StreamIncarnation};
use ds_processor_testkit::harness::{settle_background, World};

use crate::support::*;

fn bg_key(position: u64) -> String {
    event_key("bg", position, 0, &StreamIncarnation::new("incarnation-1"))
}

/// Runs a journal whose first tick owes background work that never finishes,
/// then kills the runner. Returns the alarm that was left armed.
async fn die_owing_background_work(world: &World, options: ProbeOptions) -> ds_processor::Alarm {
    world.sink.hold_when(|_, body| body["label"].as_str().is_some_and(|l| l.starts_with("bg:")));
    write(&world.journal, &[Spec::Tick { n: 1, effects: 0, background: true }, tick(2, 1)]);
    let (runner, _) = open(world, options, CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    assert_eq!(runner.runtime_state().acknowledged_through, 2, "zero lag when it dies");
    assert!(runner.runtime_state().pending_background >= 1);
    drop(runner);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(world.sink.in_flight(), 0, "the background work died with the process");
    world.sink.release();
    assert!(!world.sink.applied_keys().contains(&bg_key(1)));
    world.recovery.armed(SLUG).unwrap()
}

async fn fire(world: &World) {
    tokio::time::sleep(Duration::from_secs(60)).await;
    let appended = world.fire_due_alarms().await.unwrap();
    assert_eq!(appended.len(), 1);
    assert!(!appended[0].deduplicated);
}

#[tokio::test(start_paused = true)]
async fn dying_owing_background_work_earns_one_revival_and_a_caught_up_turn_over_the_full_fold() {
    let world = World::new();
    let options = ProbeOptions { rederive_background: true, ..ProbeOptions::default() };
    let alarm = die_owing_background_work(&world, options.clone()).await;

    fire(&world).await;
    // A redelivered alarm appends nothing new.
    let again = world.recovery.handle_alarm(&alarm).await.unwrap();
    assert!(again.deduplicated);
    let revived = world.journal.events_of_type("stream/processor-revived");
    assert_eq!(revived.len(), 1);
    assert_eq!(revived[0].1["payload"]["processorSlug"], SLUG);

    // The probe does not consume the revival event: the runner makes the
    // eventless caught-up call over the full fold.
    let (runner, log) = open(&world, options, CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let seen = calls(&log);
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].position, seen[0].caught_up, seen[0].sum), (None, true, 3));
    assert_eq!(seen[0].source_position, revived[0].0);
    assert!(settle_background(&runner, 1000).await);
    assert!(world.sink.applied_keys().contains(&bg_key(1)), "the owed work was re-derived and done");
    assert!(world.recovery.armed(SLUG).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_processor_consuming_the_revival_event_gets_it_as_the_caught_up_event() {
    let world = World::new();
    let options = ProbeOptions { rederive_background: true, consume_revived: true, ..ProbeOptions::default() };
    die_owing_background_work(&world, options.clone()).await;
    fire(&world).await;

    let (runner, log) = open(&world, options, CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let seen = calls(&log);
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].position, seen[0].caught_up), (Some(3), true));
    assert_eq!(runner.snapshot().state.revivals, 1);
    assert!(settle_background(&runner, 1000).await);
    assert!(world.sink.applied_keys().contains(&bg_key(1)));
}

#[tokio::test(start_paused = true)]
async fn failed_background_work_leaves_the_alarm_armed_and_success_disarms_it() {
    let world = World::new();
    world.sink.fail_when(|_, body, attempt| body["label"] == "bg:1" && attempt == 1);
    write(&world.journal, &[Spec::Tick { n: 1, effects: 0, background: true }]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    assert!(settle_background(&runner, 1000).await);
    assert!(world.recovery.armed(SLUG).is_some(), "a failure is owned by the alarm");

    write(&world.journal, &[Spec::Tick { n: 2, effects: 0, background: true }]);
    runner.catch_up().await.unwrap();
    assert!(settle_background(&runner, 1000).await);
    assert!(world.recovery.armed(SLUG).is_none());
}
