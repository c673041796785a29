//! What a host relies on (issue #9, section 5): drain leaves unfinished
//! work to the revival alarm, every cadence checkpoints settled work when
//! the runner goes idle, and an operator control's audit event exists only
//! for a change that happened.

use std::time::Duration;

use ds_processor::{CheckpointCadence, FenceRejection, ProgressError, Revival, RunnerError};
use ds_processor_testkit::harness::{run_until_crash, Boundary, World};

use crate::support::*;

fn audits(world: &World, event_type: &str) -> Vec<serde_json::Value> {
    world.journal.events_of_type(event_type).into_iter().map(|(_, v)| v["payload"].clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn drain_arms_the_revival_alarm_for_interrupted_blocking_work() {
    let world = World::new();
    world.sink.hold_when(|_, body| body["label"] == "tick:2:0");
    write(&world.journal, &[tick(1, 1), tick(2, 1), tick(3, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually("event 2 in flight", || runner.runtime_state().in_flight == Some(2)).await;

    let report = runner.drain(far()).await;

    assert_eq!(driver.await.unwrap(), Err(RunnerError::Drained));
    assert_eq!(report.acknowledged_through, 1);
    assert!(report.revival.is_armed(), "unfinished work is covered: {report:?}");
    assert!(world.recovery.armed(SLUG).is_some(), "the host did not have to look at the lag");
    drop(runner);

    // The alarm brings the processor back without any new append.
    world.sink.release();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(world.fire_due_alarms().await.unwrap().len(), 1);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    assert_eq!(world.sink.labels(), ["tick:1:0", "tick:2:0", "tick:3:0"]);
    assert_eq!(runner.runtime_state().acknowledged_through, world.journal.head());
}

#[tokio::test(start_paused = true)]
async fn drain_after_a_complete_catch_up_arms_nothing() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();

    let report = runner.drain(far()).await;

    assert!(!report.revival.is_armed(), "{report:?}");
    assert!(report.revival.covered());
    assert!(world.recovery.armed(SLUG).is_none());
    assert_eq!(world.recovery.arms(), 0);
}

#[tokio::test(start_paused = true)]
async fn background_work_finishing_after_drain_does_not_disarm_the_revival_of_unfinished_work() {
    let world = World::new();
    world.sink.hold_when(|_, body| body["label"] == "tick:2:0" || body["label"] == "bg:1");
    write(&world.journal, &[Spec::Tick { n: 1, effects: 0, background: true }, tick(2, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually("event 2 in flight", || runner.runtime_state().in_flight == Some(2)).await;
    let report = runner.drain(far()).await;
    assert_eq!(driver.await.unwrap(), Err(RunnerError::Drained));
    assert!(report.revival.is_armed());

    // The background post still runs after the drain; it succeeds.
    world.sink.release();
    eventually("background work settled", || runner.runtime_state().pending_background == 0).await;
    assert!(world.recovery.armed(SLUG).is_some(), "event 2 is still owed its blocking work");
}

#[tokio::test(start_paused = true)]
async fn drain_without_a_recovery_adapter_reports_unfinished_work_as_uncovered() {
    let world = World::new();
    world.sink.hold_when(|_, body| body["label"] == "tick:1:0");
    write(&world.journal, &[tick(1, 1)]);
    let (probe, _) = Probe::new(&world, ProbeOptions::default());
    let adapters = ds_processor::Adapters { recovery: None, ..world.adapters() };
    let runner = ds_processor::Runner::open(probe, adapters, config(CheckpointCadence::EveryEvent)).await.unwrap();
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually("event 1 in flight", || runner.runtime_state().in_flight == Some(1)).await;

    let report = runner.drain(far()).await;

    assert_eq!(driver.await.unwrap(), Err(RunnerError::Drained));
    assert!(!report.revival.covered(), "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn a_drain_that_cannot_arm_the_alarm_says_so() {
    let world = World::new();
    world.sink.hold_when(|_, body| body["label"] == "tick:1:0");
    write(&world.journal, &[tick(1, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually("event 1 in flight", || runner.runtime_state().in_flight == Some(1)).await;
    world.recovery.fail_next_arms(1);

    let report = runner.drain(far()).await;

    assert_eq!(driver.await.unwrap(), Err(RunnerError::Drained));
    match &report.revival {
        Revival::Uncovered { reason } => assert!(reason.contains("injected arm failure"), "{reason}"),
        other => panic!("expected an uncovered revival, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_n_and_interval_cadences_checkpoint_settled_work_when_the_scan_goes_idle() {
    for cadence in [CheckpointCadence::EveryN(100), CheckpointCadence::Interval { millis: 3_600_000 }] {
        let world = World::new();
        write(&world.journal, &[tick(1, 1), tick(2, 0), Spec::Note]);
        let (runner, _) = open(&world, ProbeOptions::default(), cadence).await;

        runner.catch_up().await.unwrap();

        assert_eq!(runner.wait_until_event(3, 0).await, Ok(()), "{cadence:?}");
        assert_eq!(world.progress.record().unwrap().progress.acknowledged_through(), 3, "{cadence:?}");
        // One checkpoint for the whole scan, not one per event.
        assert_eq!(world.progress.history().len(), 1, "{cadence:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn every_n_still_checkpoints_every_n_events_during_a_long_scan() {
    let world = World::new();
    write(&world.journal, &[tick(1, 0), tick(2, 0), tick(3, 0), tick(4, 0), tick(5, 0)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryN(2)).await;
    runner.catch_up().await.unwrap();
    let acks: Vec<u64> = world.progress.history().iter().map(|r| r.progress.acknowledged_through()).collect();
    assert_eq!(acks, [2, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn a_lost_reprocess_compare_and_swap_leaves_no_audit_event() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1), tick(3, 1)]);
    let (a, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    a.catch_up().await.unwrap();
    let (b, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    b.reprocess_from(2, 0, "first operator").await.unwrap();

    // Runner A still believes revision 0: its compare-and-swap loses.
    let error = a.reprocess_from(3, 0, "second operator").await.unwrap_err();

    assert!(
        matches!(error, RunnerError::Progress(ProgressError::Rejected(FenceRejection::RevisionMismatch { .. }))),
        "{error:?}"
    );
    let audit = audits(&world, "stream/processor-reprocessed");
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["reason"], "first operator");
}

#[tokio::test(start_paused = true)]
async fn a_lost_skip_compare_and_swap_leaves_no_audit_event() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (a, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    a.catch_up().await.unwrap();
    let (b, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    b.reprocess_from(1, 0, "replay").await.unwrap();
    write(&world.journal, &[tick(3, 1)]);

    let error = a.skip_through(3, "poison", 0).await.unwrap_err();

    assert!(matches!(error, RunnerError::Progress(ProgressError::Rejected(_))), "{error:?}");
    assert!(audits(&world, "stream/processor-skipped").is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_audit_append_that_fails_after_the_change_landed_is_retried_by_the_next_drive() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    write(&world.journal, &[tick(3, 1)]);

    world.journal.fail_next_appends(1);
    runner.skip_through(3, "poison", 0).await.unwrap();

    assert!(audits(&world, "stream/processor-skipped").is_empty());
    let pending = world.progress.record().unwrap().pending_audit.unwrap();
    assert_eq!(pending.event_type, "stream/processor-skipped");
    assert_eq!(runner.runtime_state().acknowledged_through, 3, "the change stands");

    runner.catch_up().await.unwrap();
    let audit = audits(&world, "stream/processor-skipped");
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["reason"], "poison");
    // Later commits drop it from the record.
    write(&world.journal, &[tick(4, 0)]);
    runner.catch_up().await.unwrap();
    assert_eq!(world.progress.record().unwrap().pending_audit, None);
    assert_eq!(audits(&world, "stream/processor-skipped").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_the_compare_and_swap_and_its_audit_event_is_repaired_on_the_next_open() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1), tick(2, 1), tick(3, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();

    world.crash.arm(Boundary::AfterProgressCommit, 1);
    assert!(run_until_crash(&world.crash, runner.reprocess_from(2, 0, "vendor outage")).await.is_none());
    drop(runner);
    assert_eq!(world.progress.record().unwrap().progress.cursor_revision(), 1, "the change landed");

    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let (again, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    again.catch_up().await.unwrap();

    let audit = audits(&world, "stream/processor-reprocessed");
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["reason"], "vendor outage");
    assert_eq!(audit[0]["cursorRevision"], 1);
}
