//! [14] wait_until_event and the persisted cursor invariant.

use ds_processor::{CheckpointCadence, RunnerConfig, WaitError};
use ds_processor_testkit::harness::World;
use proptest::prelude::*;

use crate::support::*;

async fn yields(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn wait_until_event_resolves_exactly_when_the_ack_reaches_the_position() {
    let world = World::with_manual_clock(0);
    world.sink.hold_when(|_, body| body["label"] == "tick:2:0");
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let wait = |position| {
        let runner = runner.clone();
        tokio::spawn(async move { runner.wait_until_event(position, 10_000).await })
    };
    let (wait_one, wait_two) = (wait(1), wait(2));
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually("event 2 in flight", || runner.runtime_state().in_flight == Some(2)).await;
    yields(10).await;
    assert_eq!(wait_one.await.unwrap(), Ok(()));
    assert!(!wait_two.is_finished(), "event 2's blocking work has not settled");
    assert_eq!(runner.runtime_state().acknowledged_through, 1);

    world.sink.release();
    driver.await.unwrap().unwrap();
    assert_eq!(wait_two.await.unwrap(), Ok(()));
    // Already acknowledged: resolves at once.
    assert_eq!(runner.wait_until_event(2, 0).await, Ok(()));
}

#[tokio::test]
async fn wait_until_event_rejects_on_timeout() {
    let world = World::with_manual_clock(0);
    let clock = world.clock.clone();
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let waiter = tokio::spawn({
        let runner = runner.clone();
        async move { runner.wait_until_event(5, 1_000).await }
    });
    yields(10).await;
    clock.advance(999);
    yields(10).await;
    assert!(!waiter.is_finished());
    clock.advance(1);
    assert_eq!(waiter.await.unwrap(), Err(WaitError::Timeout { position: 5 }));
}

#[tokio::test]
async fn wait_until_event_rejects_on_a_failed_journal_read() {
    let world = World::with_manual_clock(0);
    write(&world.journal, &[tick(1, 0)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let waiter = tokio::spawn({
        let runner = runner.clone();
        async move { runner.wait_until_event(1, 60_000).await }
    });
    yields(10).await;
    world.journal.fail_next_reads(1);
    assert!(runner.catch_up().await.is_err());
    assert!(matches!(waiter.await.unwrap(), Err(WaitError::JournalRead(_))));
    // The next drive reads fine and the ack moves.
    runner.catch_up().await.unwrap();
    assert_eq!(runner.wait_until_event(1, 0).await, Ok(()));
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<Spec>),
    CatchUp,
    ReReduce,
    Reprocess(prop::sample::Index),
    Skip,
    NewVersion,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => journal_strategy(4, true, true).prop_map(Op::Append),
        4 => Just(Op::CatchUp),
        1 => Just(Op::ReReduce),
        1 => any::<prop::sample::Index>().prop_map(Op::Reprocess),
        1 => Just(Op::Skip),
        1 => Just(Op::NewVersion),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_persisted_record_satisfies_reduced_through_le_acknowledged_through(
        ops in proptest::collection::vec(op(), 1..12),
        cadence in cadence_strategy(),
        page_size in 1usize..4,
    ) {
        runtime().block_on(async {
            let world = World::new();
            let mut version = 1;
            let options = |v: u32| ProbeOptions { version: v.to_string(), weight: i64::from(v), ..ProbeOptions::default() };
            let config = RunnerConfig { page_size, ..config(cadence) };
            let (probe, _) = Probe::new(&world, options(version));
            let mut runner = world.open(probe, config.clone()).await.unwrap();
            for op in ops {
                let revision = runner.runtime_state().cursor_revision;
                match op {
                    Op::Append(specs) => { write(&world.journal, &specs); }
                    Op::CatchUp => { runner.catch_up().await.unwrap(); }
                    Op::ReReduce => runner.re_reduce("audit").await.unwrap(),
                    Op::Reprocess(at) => {
                        let completed = runner.runtime_state().completed_through;
                        let position = at.index(completed as usize + 1) as u64 + 1;
                        runner.reprocess_from(position, revision, "replay").await.unwrap();
                    }
                    Op::Skip => {
                        let completed = runner.runtime_state().completed_through;
                        if let Some(next) = world.journal.entries().iter().find(|e| e.position > completed) {
                            runner.skip_through(next.position, "poison", revision).await.unwrap();
                        }
                    }
                    Op::NewVersion => {
                        runner.drain(far()).await;
                        version += 1;
                        let (probe, _) = Probe::new(&world, options(version));
                        runner = world.open(probe, config.clone()).await.unwrap();
                    }
                }
            }
            let history = world.progress.history();
            for record in &history {
                prop_assert!(record.progress.holds_invariant(), "{:?}", record);
            }
            // The store would refuse a broken record; the runner never even
            // attempts one.
            let broken = world.progress.rejections().into_iter()
                .filter(|r| matches!(r, ds_processor::FenceRejection::InvariantBroken { .. }))
                .count();
            prop_assert_eq!(broken, 0);
            Ok(())
        })?;
    }
}
