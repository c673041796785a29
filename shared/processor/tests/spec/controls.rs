//! [9] operator controls: reprocess_from (CAS), skip_through, re_reduce.

use ds_processor::{CheckpointCadence, RunnerError};
use ds_processor_testkit::harness::World;

use crate::support::*;

fn audits(world: &World, event_type: &str) -> Vec<serde_json::Value> {
    world.journal.events_of_type(event_type).into_iter().map(|(_, v)| v["payload"].clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn reprocess_from_rewinds_bumps_the_revision_and_reemits_under_new_keys() {
    let world = World::new();
    let specs = [tick(1, 1), tick(2, 1), tick(3, 1)];
    write(&world.journal, &specs);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    assert_eq!(world.sink.applied_keys().len(), 3);

    runner.reprocess_from(2, 0, "vendor lost the data").await.unwrap();

    let state = runner.runtime_state();
    assert_eq!((state.acknowledged_through, state.cursor_revision), (1, 1));
    let snapshot = runner.snapshot();
    assert_eq!(snapshot.reduced_through, 1);
    assert_eq!(snapshot.state, expected_fold(&specs[..1], &[1], 1));
    let audit = audits(&world, "stream/processor-reprocessed");
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["reason"], "vendor lost the data");
    assert_eq!(audit[0]["position"], 2);
    assert_eq!(audit[0]["processorSlug"], SLUG);

    let before = calls(&log).len();
    runner.catch_up().await.unwrap();
    let replayed: Vec<(Option<u64>, u64)> = calls(&log)[before..].iter().map(|c| (c.position, c.revision)).collect();
    assert_eq!(&replayed[..2], &[(Some(2), 1), (Some(3), 1)]);
    // Events 2 and 3 genuinely re-emitted under new keys; event 1 did not.
    assert_eq!(world.sink.applied_keys().len(), 5);
    assert_eq!(world.sink.labels(), ["tick:1:0", "tick:2:0", "tick:3:0", "tick:2:0", "tick:3:0"]);
    assert_eq!(runner.runtime_state().acknowledged_through, world.journal.head());
    assert_eq!(runner.snapshot().state, expected_fold(&specs, &[1, 2, 3], 1));
}

#[tokio::test(start_paused = true)]
async fn reprocess_from_with_a_wrong_expected_revision_changes_nothing() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let (record, entries, snapshot, state) =
        (world.progress.record(), world.journal.entries(), runner.snapshot(), runner.runtime_state());

    let error = runner.reprocess_from(1, 7, "typo").await.unwrap_err();

    assert_eq!(error, RunnerError::RevisionMismatch { expected: 7, current: 0 });
    assert_eq!(world.progress.record(), record);
    assert_eq!(world.journal.entries(), entries);
    assert_eq!(runner.snapshot(), snapshot);
    assert_eq!(runner.runtime_state(), state);
    assert!(matches!(runner.reprocess_from(9, 0, "beyond the ack").await, Err(RunnerError::InvalidPosition { .. })));
    assert_eq!(world.journal.entries(), entries);
}

#[tokio::test(start_paused = true)]
async fn skip_through_passes_a_poison_event_without_its_effect_but_reduces_it() {
    let world = World::new();
    world.sink.fail_when(|_, body, _| body["label"] == "tick:2:0");
    write(&world.journal, &[tick(1, 1), tick(2, 1), tick(3, 1)]);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually_in_time("three failed attempts", || runner.runtime_state().retry_count >= 3).await;
    assert_eq!(runner.runtime_state().acknowledged_through, 1);

    runner.skip_through(2, "vendor rejects it forever", 0).await.unwrap();
    driver.await.unwrap().unwrap();

    assert!(!world.sink.labels().contains(&"tick:2:0".to_owned()));
    assert!(world.sink.labels().contains(&"tick:3:0".to_owned()));
    assert_eq!(runner.snapshot().state.trail, vec![1, 2, 3]);
    assert_eq!(runner.runtime_state().acknowledged_through, world.journal.head());
    assert_eq!(runner.runtime_state().cursor_revision, 0);
    let audit = audits(&world, "stream/processor-skipped");
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["reason"], "vendor rejects it forever");
    assert_eq!((audit[0]["from"].as_u64(), audit[0]["through"].as_u64()), (Some(2), Some(2)));
    // process_event was never completed for 2 after the skip; 3 was processed.
    assert!(calls(&log).iter().any(|c| c.position == Some(3)));
}

#[tokio::test(start_paused = true)]
async fn skip_through_with_a_wrong_expected_revision_changes_nothing() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    write(&world.journal, &[tick(2, 1)]);
    let (record, entries) = (world.progress.record(), world.journal.entries());

    let error = runner.skip_through(2, "wrong", 5).await.unwrap_err();

    assert_eq!(error, RunnerError::RevisionMismatch { expected: 5, current: 0 });
    assert_eq!(world.progress.record(), record);
    assert_eq!(world.journal.entries(), entries);
    runner.catch_up().await.unwrap();
    assert!(world.sink.labels().contains(&"tick:2:0".to_owned()), "event 2 was processed normally");
}

#[tokio::test(start_paused = true)]
async fn re_reduce_rebuilds_the_fold_without_effects_and_audits_once() {
    let world = World::new();
    let specs = [tick(1, 1), Spec::Note, tick(5, 2), Spec::Malformed];
    let positions = write(&world.journal, &specs);
    let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryN(100)).await;
    runner.catch_up().await.unwrap();
    let made = calls(&log).len();
    let attempts = world.sink.total_attempts();
    let completed = runner.runtime_state().completed_through;

    runner.re_reduce("suspected cache corruption").await.unwrap();

    assert_eq!(calls(&log).len(), made);
    assert_eq!(world.sink.total_attempts(), attempts);
    let state = runner.runtime_state();
    assert_eq!(state.acknowledged_through, completed, "settled work was flushed, not re-run");
    assert_eq!(runner.snapshot().state, expected_fold(&specs, &positions, 1));
    assert_eq!(runner.snapshot().reduced_through, completed);
    assert!(world
        .progress
        .history()
        .iter()
        .any(|r| r.progress.reduction.reduced_through < completed && r.progress.acknowledged_through() == completed),
        "the rebuild committed refold pages below the ack");
    let audit = audits(&world, "stream/processor-re-reduced");
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["reason"], "suspected cache corruption");
}
