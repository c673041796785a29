//! [5] crash at any boundary: during an effect, before/after a progress
//! commit, during a refold page, while arming an alarm.

use std::time::Duration;

use ds_processor::CheckpointCadence;
use ds_processor_testkit::harness::{run_until_crash, settle_background, Boundary, CrashSwitch, World};
use proptest::prelude::*;

use crate::support::*;

#[derive(Debug, PartialEq)]
struct Outcome {
    state: ProbeState,
    effect_keys: Vec<String>,
    diagnosed: Vec<u64>,
}

fn v1() -> ProbeOptions {
    ProbeOptions { rederive_background: true, ..ProbeOptions::default() }
}

fn v2() -> ProbeOptions {
    ProbeOptions { version: "2".into(), weight: 3, ..v1() }
}

/// One process lifetime: open, catch up, let background work finish, drain.
/// `false` if it crashed (the runner and its background work are dropped).
async fn session(world: &World, options: ProbeOptions, cadence: CheckpointCadence) -> bool {
    run_until_crash(&world.crash, async {
        let (runner, _) = open(world, options, cadence).await;
        runner.catch_up().await.unwrap();
        assert!(settle_background(&runner, 10_000).await);
        runner.drain(far()).await;
    })
    .await
    .is_some()
}

/// Phase 1 processes the journal under reducer v1; phase 2 re-opens under
/// v2 (a refold). After each phase, due revival alarms fire and are served.
async fn scenario(
    specs: &[Spec],
    cadence: CheckpointCadence,
    crash: Option<(Boundary, u32)>,
) -> (Outcome, CrashSwitch) {
    let world = World::new();
    write(&world.journal, specs);
    if let Some((boundary, nth)) = crash {
        world.crash.arm(boundary, nth);
    }
    for options in [v1(), v2()] {
        loop {
            while !session(&world, options.clone(), cadence).await {}
            tokio::time::sleep(Duration::from_secs(60)).await;
            let revived = world.fire_due_alarms().await.unwrap();
            if revived.iter().all(|o| o.deduplicated) {
                break;
            }
        }
    }
    // No record at all: nothing was ever completed (empty journal).
    let state = match world.progress.record() {
        Some(record) => {
            assert!(record.progress.holds_invariant());
            serde_json::from_value(record.progress.reduction.state).unwrap()
        }
        None => ProbeState::default(),
    };
    let mut diagnosed: Vec<u64> = world
        .journal
        .events_of_type("stream/processor-diagnostic")
        .iter()
        .map(|(_, v)| v["payload"]["position"].as_u64().unwrap())
        .collect();
    diagnosed.sort_unstable();
    (Outcome { state, effect_keys: world.sink.applied_keys(), diagnosed }, world.crash)
}

fn boundary() -> impl Strategy<Value = Boundary> {
    prop_oneof![
        Just(Boundary::EffectApplied),
        Just(Boundary::BeforeProgressCommit),
        Just(Boundary::AfterProgressCommit),
        Just(Boundary::RefoldPageCommit),
        Just(Boundary::ArmAlarm),
    ]
}

fn flushing_cadence() -> impl Strategy<Value = CheckpointCadence> {
    prop_oneof![
        Just(CheckpointCadence::EveryEvent),
        Just(CheckpointCadence::EveryN(2)),
        Just(CheckpointCadence::Idle),
        Just(CheckpointCadence::BatchEnd),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn crash_at_any_boundary_recovers_the_crash_free_state_and_effects(
        specs in journal_strategy(10, true, true),
        boundary in boundary(),
        nth in 1u32..5,
        cadence in flushing_cadence(),
    ) {
        let (reference, _) = runtime().block_on(scenario(&specs, cadence, None));
        let (crashed, _) = runtime().block_on(scenario(&specs, cadence, Some((boundary, nth))));
        prop_assert_eq!(crashed, reference);
    }
}

/// The same property on a fixed journal, for every boundary and each of its
/// first hits in the crash-free run, asserting that the crash happened.
#[test]
fn every_boundary_is_reached_and_survived() {
    let specs = vec![
        Spec::Tick { n: 1, effects: 2, background: true },
        Spec::Malformed,
        tick(2, 1),
        Spec::Unconsumed,
        Spec::Tick { n: 3, effects: 1, background: true },
        Spec::Note,
        tick(4, 2),
        Spec::Unconsumed,
        tick(5, 0),
        Spec::Note,
    ];
    let (reference, switch) = runtime().block_on(scenario(&specs, CheckpointCadence::EveryEvent, None));
    assert_eq!(reference.state.trail, vec![1, 2, 3, 4, 5]);
    assert_eq!(reference.state.sum, 45);
    assert_eq!(reference.diagnosed, vec![2]);
    for boundary in [
        Boundary::EffectApplied,
        Boundary::BeforeProgressCommit,
        Boundary::AfterProgressCommit,
        Boundary::RefoldPageCommit,
        Boundary::ArmAlarm,
    ] {
        let reached = switch.hits(boundary);
        assert!(reached >= 2, "{boundary:?} is reached only {reached} times");
        for nth in 1..=reached.min(4) {
            let (crashed, crashed_switch) =
                runtime().block_on(scenario(&specs, CheckpointCadence::EveryEvent, Some((boundary, nth))));
            assert_eq!(crashed_switch.trips(), 1, "{boundary:?} #{nth} was never reached");
            assert_eq!(crashed, reference, "after a crash at {boundary:?} #{nth}");
        }
    }
}
