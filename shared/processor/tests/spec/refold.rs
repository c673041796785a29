//! [7] refold runs reduce only.

use ds_processor::{CheckpointCadence, RunnerConfig};
use ds_processor_testkit::harness::World;
use proptest::prelude::*;

use crate::support::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reducer_version_change_refolds_without_process_event_and_keeps_the_ack(
        specs in journal_strategy(20, false, true).prop_filter("something to refold", |s| !s.is_empty()),
        page_size in 1usize..5,
    ) {
        runtime().block_on(async {
            let world = World::new();
            let positions = write(&world.journal, &specs);
            let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
            runner.catch_up().await.unwrap();
            let ack = runner.runtime_state().acknowledged_through;
            let attempts = world.sink.total_attempts();
            let audits_before = world.journal.events_of_type("stream/processor-re-reduced").len();
            let commits_before = world.progress.history().len();
            drop(runner);

            let v2 = ProbeOptions { version: "2".into(), weight: 3, reconcile: true, ..ProbeOptions::default() };
            let (probe, log) = Probe::new(&world, v2);
            let config = RunnerConfig { page_size, ..config(CheckpointCadence::EveryEvent) };
            let runner = world.open(probe, config).await.unwrap();

            prop_assert!(calls(&log).is_empty());
            prop_assert_eq!(world.sink.total_attempts(), attempts);
            prop_assert_eq!(runner.runtime_state().acknowledged_through, ack);
            let record = world.progress.record().unwrap();
            prop_assert_eq!(record.progress.acknowledged_through(), ack);
            prop_assert_eq!(record.progress.reduction.reducer_version.as_str(), "2");
            let snapshot = runner.snapshot();
            prop_assert_eq!(snapshot.reduced_through, ack);
            prop_assert_eq!(&snapshot.state, &expected_fold(&specs, &positions, 3));
            // Refold pages were committed below the unchanged ack.
            for page in &world.progress.history()[commits_before..] {
                prop_assert_eq!(page.progress.acknowledged_through(), ack);
                prop_assert!(page.progress.holds_invariant());
            }
            let audits = world.journal.events_of_type("stream/processor-re-reduced");
            prop_assert_eq!(audits.len(), audits_before + 1);
            prop_assert!(audits[0].1["payload"]["reason"].as_str().unwrap().contains("from 1 to 2"));
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn crash_mid_refold_resumes_from_the_last_page() {
    use ds_processor_testkit::harness::{run_until_crash, Boundary};
    let world = World::new();
    let specs: Vec<Spec> = (1..=9).map(|n| tick(n, 0)).collect();
    let positions = write(&world.journal, &specs);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    drop(runner);

    let v2 = || ProbeOptions { version: "2".into(), weight: 3, ..ProbeOptions::default() };
    world.crash.arm(Boundary::RefoldPageCommit, 2);
    let crashed = run_until_crash(&world.crash, open(&world, v2(), CheckpointCadence::EveryEvent)).await;
    assert!(crashed.is_none());
    let partial = world.progress.record().unwrap();
    assert_eq!(partial.progress.reduction.reduced_through, 3, "first page of 3 landed");
    assert_eq!(partial.progress.acknowledged_through(), 9);

    let (runner, log) = open(&world, v2(), CheckpointCadence::EveryEvent).await;
    assert_eq!(runner.snapshot().state, expected_fold(&specs, &positions, 3));
    assert!(calls(&log).is_empty());
    // One audit for the version change, not one per attempt.
    assert_eq!(world.journal.events_of_type("stream/processor-re-reduced").len(), 1);
}
