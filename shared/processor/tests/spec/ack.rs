//! [6] the ack never covers unsettled blocking work (events or caught-up
//! calls); a failed commit changes nothing visible; redelivery at or below
//! the ack makes no call.

use std::collections::HashMap;

use ds_processor::{CheckpointCadence, EventBatch, ProgressError, RunnerError};
use ds_processor_testkit::harness::{Mark, World};
use proptest::prelude::*;

use crate::support::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn ack_never_covers_a_call_whose_blocking_work_has_not_succeeded(
        chunks in proptest::collection::vec(journal_strategy(6, false, true), 1..4),
        cadence in cadence_strategy(),
        failing in any::<u64>(),
    ) {
        runtime().block_on(async {
            let world = World::new();
            // Some effects fail their first attempts.
            world.sink.fail_when(move |key, _, attempt| {
                attempt <= 2 && (key.as_bytes()[0] as u64 + failing) % 3 == 0
            });
            let options = ProbeOptions { reconcile: true, ..ProbeOptions::default() };
            let (runner, log) = open(&world, options, cadence).await;
            for chunk in &chunks {
                write(&world.journal, chunk);
                runner.catch_up().await.unwrap();
            }
            runner.drain(far()).await;

            let marks = world.timeline.marks();
            let mut applied_at: HashMap<String, usize> = HashMap::new();
            for (i, mark) in marks.iter().enumerate() {
                if let Mark::EffectApplied { key, .. } = mark {
                    applied_at.entry(key.clone()).or_insert(i);
                }
            }
            let calls = calls(&log);
            if chunks.iter().any(|c| !c.is_empty()) {
                prop_assert!(calls.iter().any(|c| c.caught_up), "the property covers caught-up calls too");
            }
            for call in &calls {
                for (i, mark) in marks.iter().enumerate() {
                    let Mark::Committed { acknowledged_through, .. } = mark else { continue };
                    if *acknowledged_through < call.source_position {
                        continue;
                    }
                    for key in &call.keys {
                        let at = applied_at.get(key).copied();
                        prop_assert!(at.is_some_and(|a| a < i),
                            "commit #{} acks {} but {:?}'s effect was not applied before it", i, acknowledged_through, call);
                    }
                }
            }
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn failed_progress_commit_leaves_cursors_and_published_state_unchanged() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 0)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let snapshot = runner.snapshot();
    let before = runner.runtime_state();
    let record = world.progress.record();
    assert_eq!(before.acknowledged_through, 2);

    write(&world.journal, &[tick(5, 1)]);
    world.progress.fail_next_commits(1);
    let error = runner.catch_up().await.unwrap_err();

    assert!(matches!(error, RunnerError::Progress(ProgressError::Unavailable(_))));
    assert_eq!(runner.snapshot(), snapshot);
    assert_eq!(runner.runtime_state().acknowledged_through, before.acknowledged_through);
    assert_eq!(runner.runtime_state().cursor_revision, before.cursor_revision);
    assert_eq!(world.progress.record(), record);

    // The next drive retries the checkpoint even with nothing new to read.
    runner.catch_up().await.unwrap();
    assert_eq!(runner.runtime_state().acknowledged_through, 3);
    assert_eq!(runner.snapshot().state.sum, 8);
}

#[tokio::test(start_paused = true)]
async fn redelivery_at_or_below_the_ack_makes_zero_calls() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), Spec::Unconsumed, tick(2, 2), Spec::Note]);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let callback = runner.open_event_batch_callback();
    callback.process_event_batch(EventBatch::new(world.journal.entries())).await.unwrap();
    let made = calls(&log).len();
    let attempts = world.sink.total_attempts();
    assert_eq!(made, 3);

    for entry in world.journal.entries().into_iter().rev() {
        callback.process_event_batch(EventBatch::new(vec![entry.clone(), entry])).await.unwrap();
    }
    callback.process_event_batch(EventBatch::doorbell()).await.unwrap();
    assert_eq!(calls(&log).len(), made);
    assert_eq!(world.sink.total_attempts(), attempts);

    // Nor does a restarted runner.
    drop(callback);
    drop(runner);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    assert_eq!(runner.open_event_batch_callback().checkpoint_offset, 4);
    runner.catch_up().await.unwrap();
    assert!(calls(&log).is_empty());
    assert_eq!(world.sink.total_attempts(), attempts);
}

/// The `acknowledged_through` of every progress commit so far.
fn acks(world: &World) -> Vec<u64> {
    world
        .timeline
        .marks()
        .iter()
        .filter_map(|m| match m {
            Mark::Committed { acknowledged_through, .. } => Some(*acknowledged_through),
            _ => None,
        })
        .collect()
}

/// Entries the processor does not consume are not events: `every event`
/// checkpoints a run of them once, when the scan reaches the head, instead
/// of one progress record each; a long run is checkpointed along the way,
/// so a restart reads a bounded amount again.
#[tokio::test(start_paused = true)]
async fn entries_not_consumed_are_checkpointed_at_the_head_not_one_by_one() {
    let world = World::new();
    let mut specs = vec![tick(1, 0)];
    specs.extend(std::iter::repeat_n(Spec::Unconsumed, 50));
    let positions = write(&world.journal, &specs);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let before = acks(&world).len();
    runner.catch_up().await.unwrap();
    let last = *positions.last().unwrap();
    assert_eq!(acks(&world)[before..], [positions[0], last], "the event, then the run at the head");
    assert_eq!(runner.runtime_state().acknowledged_through, last);

    let run = usize::try_from(ds_processor::SKIPPED_CHECKPOINT_ENTRIES).unwrap();
    let positions = write(&world.journal, &vec![Spec::Unconsumed; run + 10]);
    let before = acks(&world).len();
    runner.catch_up().await.unwrap();
    let last = *positions.last().unwrap();
    assert_eq!(acks(&world)[before..], [positions[run - 1], last], "a long run is checkpointed on the way");
    assert_eq!(runner.runtime_state().acknowledged_through, last);
}
