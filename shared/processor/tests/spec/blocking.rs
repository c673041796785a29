//! [3] blocking order, [4] background overtakes, [12] retry forever, lag,
//! skip_through as the only way past, drain.

use std::time::Duration;

use ds_processor::{CheckpointCadence, EventBatch, Phase};
use ds_processor_testkit::harness::{settle_background, World};
use proptest::prelude::*;

use crate::support::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Blockers are given random scheduling delays (sink jitter): run
    /// concurrently they would settle out of order.
    #[test]
    fn blockers_settle_fifo_and_before_the_next_event_starts(
        effects in proptest::collection::vec(0u8..4, 1..10),
        seed in any::<u64>(),
        fail_first in any::<bool>(),
    ) {
        runtime().block_on(async {
            let world = World::new();
            world.sink.jitter(seed, 6);
            if fail_first {
                world.sink.fail_when(|_, _, attempt| attempt == 1);
            }
            let specs: Vec<Spec> = effects.iter().map(|&k| tick(1, k)).collect();
            let positions = write(&world.journal, &specs);
            let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
            runner.catch_up().await.unwrap();
            let notes = world.timeline.notes();
            let index = |note: &str| notes.iter().position(|n| n == note);
            for (i, (&p, &k)) in positions.iter().zip(&effects).enumerate() {
                let settled: Vec<usize> = (0..k).map(|j| index(&format!("settled:{p}:{j}")).unwrap()).collect();
                // FIFO within the event.
                prop_assert!(settled.windows(2).all(|w| w[0] < w[1]), "blockers of {} settled out of order: {:?}", p, notes);
                // All of N before process_event(N+1).
                if let Some(&next) = positions.get(i + 1) {
                    let next_start = index(&format!("process:{next}")).unwrap();
                    prop_assert!(settled.iter().all(|&s| s < next_start), "event {} started before {} settled: {:?}", next, p, notes);
                }
            }
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn background_work_overtakes_and_the_ack_passes_its_event() {
    let world = World::new();
    world.sink.hold_when(|_, body| body["label"].as_str().is_some_and(|l| l.starts_with("bg:")));
    let first = append(&world.journal, &Spec::Tick { n: 1, effects: 0, background: true });
    write(&world.journal, &[tick(2, 1), tick(3, 2)]);
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;

    runner.catch_up().await.unwrap();

    let state = runner.runtime_state();
    assert_eq!(state.acknowledged_through, world.journal.head());
    assert!(state.acknowledged_through > first);
    assert_eq!(state.pending_background, 1);
    assert_eq!(world.sink.labels(), ["tick:2:0", "tick:3:0", "tick:3:1"]);
    assert!(world.recovery.armed(SLUG).is_some(), "owed background work keeps the alarm armed");

    world.sink.release();
    assert!(settle_background(&runner, 1000).await);
    assert_eq!(world.sink.labels().last().map(String::as_str), Some("bg:1"));
    assert!(world.recovery.armed(SLUG).is_none(), "settled background work disarms the alarm");
}

#[tokio::test]
async fn blocking_failure_retries_forever_lag_grows_and_only_skip_through_passes() {
    let world = World::with_manual_clock(1_000);
    let clock = world.clock.clone();
    world.sink.fail_when(|_, body, _| body["label"] == "tick:2:0");
    write(&world.journal, &[tick(1, 1), tick(2, 1)]);
    let (runner, calls_log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
    let callback = runner.open_event_batch_callback();

    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    let mut lags = Vec::new();
    let mut retries = Vec::new();
    for round in 0..12u64 {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let state = runner.runtime_state();
        retries.push(state.retry_count);
        lags.push(state.lag);
        assert_eq!(state.acknowledged_through, 1, "the ack never passes the wedged event");
        assert_eq!(state.in_flight, Some(2));
        // More events arrive and are notified while wedged.
        let p = append(&world.journal, &tick(10 + round as i64, 1));
        let frame = EventBatch::new(vec![world.journal.entry(p).unwrap()]);
        let _pending_frame = tokio::spawn({
            let runner = runner.clone();
            async move { runner.open_event_batch_callback().process_event_batch(frame).await }
        });
        // Exponential backoff: the next retry is due at most max_ms later.
        if let Some(deadline) = clock.next_deadline() {
            clock.set(deadline);
        }
    }
    assert!(retries.windows(2).all(|w| w[0] < w[1]), "retry count grows: {retries:?}");
    assert!(lags.windows(2).all(|w| w[0] < w[1]), "lag grows: {lags:?}");
    assert!(runner.runtime_state().last_error.unwrap().contains("injected failure"));
    let poison = ds_processor::event_key("tick-0", 2, 0, &"incarnation-1".into());
    assert!(world.sink.attempts(&poison) >= 12);
    assert!(!driver.is_finished());

    runner.skip_through(2, "poison: vendor rejects it", 0).await.unwrap();
    let report = tokio::time::timeout(Duration::from_secs(5), driver).await.unwrap().unwrap().unwrap();
    assert_eq!(report.acknowledged_through, world.journal.head());
    // Event 2 was reduced but its effect never applied.
    assert!(!world.sink.labels().contains(&"tick:2:0".to_owned()));
    assert_eq!(runner.snapshot().state.trail[..2], [1, 2]);
    assert_eq!(runner.runtime_state().retry_count, 0);
    // Later events were processed normally.
    assert!(calls(&calls_log).iter().any(|c| c.position == Some(3)));
    drop(callback);
}

#[tokio::test]
async fn drain_cancels_in_flight_blocking_work_without_advancing_the_cursor() {
    let world = World::with_manual_clock(1_000);
    write(&world.journal, &[Spec::Tick { n: 1, effects: 0, background: true }, tick(2, 1), tick(3, 1)]);
    world.sink.hold_when(|_, body| {
        let label = body["label"].as_str().unwrap_or_default();
        label == "tick:3:0" || label == "bg:1"
    });
    let (runner, _) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryN(100)).await;
    let driver = tokio::spawn({
        let runner = runner.clone();
        async move { runner.catch_up().await }
    });
    eventually("event 3 in flight with its blocker and the background post running", || {
        runner.runtime_state().in_flight == Some(3) && world.sink.in_flight() == 2
    })
    .await;
    assert_eq!(runner.runtime_state().acknowledged_through, 0);

    let report = runner.drain(2_000).await;

    assert_eq!(driver.await.unwrap(), Err(ds_processor::RunnerError::Drained));
    // Settled work (events 1 and 2) is flushed; event 3 is not covered.
    assert_eq!(report.acknowledged_through, 2);
    assert!(report.flushed && !report.timed_out);
    assert_eq!(world.progress.record().unwrap().progress.acknowledged_through(), 2);
    // The in-flight blocking post was dropped; the background one still runs.
    assert_eq!(world.sink.in_flight(), 1);
    assert!(world.recovery.armed(SLUG).is_some(), "the alarm stays armed");
    let state = runner.runtime_state();
    assert!(state.drained);
    assert_eq!(state.phase, Phase::CatchingUp);
    assert_eq!(runner.catch_up().await, Err(ds_processor::RunnerError::Drained));
}
