//! [10] where `caught_up` lands, and the eventless call.

use ds_processor::{CheckpointCadence, EventBatch, JournalEntry, Phase};
use ds_processor_testkit::harness::World;
use proptest::prelude::*;

use crate::support::*;

fn consumed(spec: &Spec) -> bool {
    matches!(spec, Spec::Tick { .. } | Spec::Note)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn caught_up_lands_on_the_last_consumed_event_of_each_scan(
        chunks in proptest::collection::vec(journal_strategy(6, false, false), 1..5),
    ) {
        runtime().block_on(async {
            let world = World::new();
            let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
            let mut expected = Vec::new();
            for chunk in &chunks {
                let positions = write(&world.journal, chunk);
                runner.catch_up().await.unwrap();
                let delivered: Vec<u64> = chunk.iter().zip(&positions).filter(|(s, _)| consumed(s)).map(|(_, &p)| p).collect();
                match (delivered.last(), positions.last()) {
                    (Some(&last), _) => expected.extend(delivered.iter().map(|&p| (Some(p), p, p == last))),
                    (None, Some(&head)) => expected.push((None, head, true)),
                    (None, None) => {}
                }
            }
            let seen: Vec<(Option<u64>, u64, bool)> =
                calls(&log).iter().map(|c| (c.position, c.source_position, c.caught_up)).collect();
            prop_assert_eq!(seen, expected);
            // Live from the first caught-up call on, catching up before it.
            let phases: Vec<(bool, Phase)> = calls(&log).iter().map(|c| (c.caught_up, c.phase)).collect();
            if let Some(first) = phases.iter().position(|(c, _)| *c) {
                prop_assert!(phases[..first].iter().all(|(_, p)| *p == Phase::CatchingUp));
                prop_assert!(phases[first..].iter().all(|(_, p)| *p == Phase::Live));
            }
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn caught_up_is_never_set_behind_a_notified_head() {
    let world = World::new();
    write(&world.journal, &[tick(1, 0), tick(2, 0)]);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let callback = runner.open_event_batch_callback();
    // The stream notified position 6, but the journal read only shows 2.
    callback.process_event_batch(EventBatch::new(vec![JournalEntry::new(6, "{}")])).await.unwrap();
    assert!(calls(&log).iter().all(|c| !c.caught_up));
    assert_eq!(calls(&log).len(), 2);
    assert_eq!(runner.runtime_state().lag, 4);

    // Once the journal shows the head, the scan is caught up.
    write(&world.journal, &[Spec::Unconsumed, Spec::Unconsumed, Spec::Unconsumed, tick(6, 0)]);
    callback.process_event_batch(EventBatch::doorbell()).await.unwrap();
    let last = calls(&log).last().cloned().unwrap();
    assert_eq!((last.position, last.caught_up), (Some(6), true));
}

#[tokio::test(start_paused = true)]
async fn malformed_head_event_does_not_take_caught_up() {
    let world = World::new();
    write(&world.journal, &[tick(1, 0), Spec::Malformed]);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let seen: Vec<(Option<u64>, bool)> = calls(&log).iter().map(|c| (c.position, c.caught_up)).collect();
    assert_eq!(seen, [(Some(1), true)], "the last consumed event takes it; no eventless call");
    assert_eq!(world.journal.events_of_type("stream/processor-diagnostic").len(), 1);

    // A scan whose only consumed event is malformed ends in one eventless
    // call at the head (after the diagnostic).
    write(&world.journal, &[Spec::Malformed]);
    runner.catch_up().await.unwrap();
    let last = calls(&log).last().cloned().unwrap();
    assert_eq!((last.position, last.caught_up), (None, true));
    assert_eq!(last.source_position, world.journal.head());
    assert_eq!(calls(&log).len(), 2);
    assert_eq!(world.journal.events_of_type("stream/processor-diagnostic").len(), 2);
    assert_eq!(runner.runtime_state().acknowledged_through, world.journal.head());
}

#[tokio::test(start_paused = true)]
async fn a_wake_with_nothing_new_makes_no_call() {
    let world = World::new();
    write(&world.journal, &[Spec::Unconsumed]);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let callback = runner.open_event_batch_callback();
    for _ in 0..3 {
        callback.process_event_batch(EventBatch::doorbell()).await.unwrap();
    }
    let seen: Vec<(Option<u64>, bool)> = calls(&log).iter().map(|c| (c.position, c.caught_up)).collect();
    assert_eq!(seen, [(None, true)], "exactly one eventless call, for the one scan that read something");
}
