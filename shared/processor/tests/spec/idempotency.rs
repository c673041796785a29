//! [13] idempotency keys.

use ds_processor::{event_key, stable_key, CheckpointCadence, StreamIncarnation};
use ds_processor_testkit::harness::{run_until_crash, Boundary, World};
use proptest::prelude::*;

use crate::support::*;

type Inputs = (String, u64, u64, String);

fn inputs() -> impl Strategy<Value = Inputs> {
    ("[a-c:]{0,3}", 0u64..4, 0u64..3, "[xy]{1,2}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn keys_are_deterministic_and_differ_when_any_input_differs(a in inputs(), b in inputs()) {
        let key = |(k, p, r, i): &Inputs| event_key(k, *p, *r, &StreamIncarnation::new(i.clone()));
        prop_assert_eq!(key(&a), key(&a.clone()));
        prop_assert_eq!(key(&a) == key(&b), a == b);
        let stable = |(k, _, _, i): &Inputs| stable_key(k, &StreamIncarnation::new(i.clone()));
        // Offset-free: the same obligation at any position or revision.
        prop_assert_eq!(stable(&a) == stable(&b), (&a.0, &a.3) == (&b.0, &b.3));
        prop_assert_ne!(stable(&a), key(&a));
    }
}

#[tokio::test(start_paused = true)]
async fn delivery_keys_repeat_on_crash_retry_and_change_on_reprocess_or_recreation() {
    let world = World::new();
    write(&world.journal, &[tick(1, 1)]);
    let inc1 = StreamIncarnation::new("incarnation-1");
    let first = event_key("tick-0", 1, 0, &inc1);

    // Crash after the effect applied, before the runner heard back.
    world.crash.arm(Boundary::EffectApplied, 1);
    let crashed = run_until_crash(&world.crash, async {
        let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
        runner.catch_up().await
    })
    .await;
    assert!(crashed.is_none());
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    assert_eq!(world.sink.attempts(&first), 2, "the retry used the same key");
    assert_eq!(world.sink.applied_keys(), vec![first.clone()]);

    runner.reprocess_from(1, 0, "again").await.unwrap();
    runner.catch_up().await.unwrap();
    let second = event_key("tick-0", 1, 1, &inc1);
    assert_eq!(world.sink.attempts(&second), 1, "a new revision re-emits under a new key");

    drop(runner);
    world.journal.recreate("incarnation-2");
    write(&world.journal, &[tick(1, 1)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    runner.catch_up().await.unwrap();
    let third = event_key("tick-0", 1, 0, &StreamIncarnation::new("incarnation-2"));
    assert_eq!(world.sink.attempts(&third), 1, "a re-created stream re-emits under a new key");
    assert_eq!(world.sink.applied_keys().len(), 3);
}
