//! [15] two runners racing on the same (stream, slug).

use ds_processor::CheckpointCadence;
use ds_processor_testkit::harness::World;
use proptest::prelude::*;

use crate::support::*;

/// One runner, same append schedule (diagnostics land between the parts,
/// so positions match the race).
async fn reference(first: &[Spec], second: &[Spec]) -> (ProbeState, Vec<String>) {
    let world = World::new();
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    write(&world.journal, first);
    runner.catch_up().await.unwrap();
    write(&world.journal, second);
    runner.catch_up().await.unwrap();
    (runner.snapshot().state, world.sink.applied_keys())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn two_racing_runners_never_move_the_ack_backward_and_effects_dedupe(
        first in journal_strategy(8, false, true),
        second in journal_strategy(8, false, true),
        seed in any::<u64>(),
        cadence in cadence_strategy(),
    ) {
        runtime().block_on(async {
            let all: Vec<Spec> = first.iter().chain(&second).cloned().collect();
            let (state, keys) = reference(&first, &second).await;

            let world = World::new();
            // Random scheduling inside effects interleaves the two runners.
            world.sink.jitter(seed, 5);
            let (a, _) = open(&world, ProbeOptions::default(), cadence).await;
            let (b, _) = open(&world, ProbeOptions::default(), cadence).await;
            write(&world.journal, &first);
            let (ra, rb) = tokio::join!(a.catch_up(), b.catch_up());
            ra.unwrap();
            rb.unwrap();
            write(&world.journal, &second);
            let (ra, rb) = tokio::join!(b.catch_up(), a.catch_up());
            ra.unwrap();
            rb.unwrap();
            tokio::join!(a.drain(far()), b.drain(far()));

            let acks: Vec<u64> = world.progress.history().iter().map(|r| r.progress.acknowledged_through()).collect();
            prop_assert!(acks.windows(2).all(|w| w[0] <= w[1]), "ack went backward: {:?}", acks);
            prop_assert_eq!(world.sink.applied_keys(), keys);
            let record = world.progress.record();
            if !all.is_empty() {
                let record = record.unwrap();
                prop_assert_eq!(record.progress.acknowledged_through(), world.journal.head());
                let stored: ProbeState = serde_json::from_value(record.progress.reduction.state).unwrap();
                prop_assert_eq!(stored, state);
            }
            Ok(())
        })?;
    }
}
