//! [1] batch-division invariance, [2] doorbell invariance.

use ds_processor::{CheckpointCadence, EventBatch, JournalEntry};
use ds_processor_testkit::harness::{settle_background, World};
use proptest::prelude::*;

use crate::support::*;

#[derive(Debug, PartialEq)]
struct Outcome {
    state: ProbeState,
    reduced_through: u64,
    acknowledged_through: u64,
    appended: Vec<(String, serde_json::Value)>,
    effect_keys: Vec<String>,
    calls: Vec<Call>,
}

/// Writes the whole journal, then delivers `frames(entries)` one by one.
fn run_frames(
    specs: &[Spec],
    cadence: CheckpointCadence,
    frames: impl FnOnce(Vec<JournalEntry>) -> Vec<EventBatch>,
) -> Outcome {
    runtime().block_on(async {
        let world = World::new();
        write(&world.journal, specs);
        let (runner, log) = open(&world, ProbeOptions::default(), cadence).await;
        let callback = runner.open_event_batch_callback();
        for frame in frames(world.journal.entries()) {
            callback.process_event_batch(frame).await.unwrap();
        }
        assert!(settle_background(&runner, 1000).await);
        runner.drain(far()).await;
        let snapshot = runner.snapshot();
        Outcome {
            state: snapshot.state,
            reduced_through: snapshot.reduced_through,
            acknowledged_through: runner.runtime_state().acknowledged_through,
            appended: core_events(&world),
            effect_keys: world.sink.applied_keys(),
            calls: calls(&log),
        }
    })
}

/// Splits `entries` at `cuts` and inserts empty frames at `empties`.
fn partition(entries: Vec<JournalEntry>, cuts: &[usize], empties: &[usize]) -> Vec<EventBatch> {
    let mut frames: Vec<EventBatch> = Vec::new();
    let mut current = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        if cuts.contains(&i) && !current.is_empty() {
            frames.push(EventBatch::new(std::mem::take(&mut current)));
        }
        current.push(entry);
    }
    frames.push(EventBatch::new(current));
    for &at in empties {
        let at = at.min(frames.len());
        frames.insert(at, EventBatch::doorbell());
    }
    frames
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_partition_into_frames_matches_one_batch(
        specs in journal_strategy(20, true, true),
        cuts in proptest::collection::vec(0usize..20, 0..8),
        empties in proptest::collection::vec(0usize..10, 0..4),
        cadence in cadence_strategy(),
    ) {
        let one = run_frames(&specs, cadence, |entries| vec![EventBatch::new(entries)]);
        let split = run_frames(&specs, cadence, |entries| partition(entries, &cuts, &empties));
        prop_assert_eq!(&one, &split);
        // And the one-batch run really processed the journal.
        let positions: Vec<u64> = (1..=specs.len() as u64).collect();
        prop_assert_eq!(&one.state, &expected_fold(&specs, &positions, 1));
    }

    #[test]
    fn reordered_duplicated_or_dropped_notifications_change_nothing(
        specs in journal_strategy(14, true, false),
        noise in proptest::collection::vec(proptest::collection::vec(any::<prop::sample::Index>(), 0..3), 14),
        last in any::<prop::sample::Index>(),
    ) {
        let baseline = doorbell_run(&specs, |_, _| Vec::new(), |entries| vec![EventBatch::new(entries.to_vec())]);
        let noisy = doorbell_run(
            &specs,
            |i, entries| noise[i].iter().map(|pick| EventBatch::new(vec![pick.get(entries).clone()])).collect(),
            |entries| if entries.is_empty() { vec![EventBatch::doorbell()] } else { vec![EventBatch::new(vec![last.get(entries).clone()])] },
        );
        prop_assert_eq!(baseline, noisy);
    }
}

/// State, ack, applied effect keys, and `(position, revision)` of every
/// event call.
type DoorbellOutcome = (ProbeState, u64, Vec<String>, Vec<(Option<u64>, u64)>);

/// Appends `specs` one by one; after append `i` delivers `between(i, appended)`
/// notifications (any earlier entry, in any order, any number of times —
/// zero drops them), and after the last append delivers `after(appended)`.
/// Returns what must not depend on the notifications.
fn doorbell_run(
    specs: &[Spec],
    between: impl Fn(usize, &[JournalEntry]) -> Vec<EventBatch>,
    after: impl Fn(&[JournalEntry]) -> Vec<EventBatch>,
) -> DoorbellOutcome {
    runtime().block_on(async {
        let world = World::new();
        let (runner, log) = open(&world, ProbeOptions::default(), CheckpointCadence::EveryEvent).await;
        let callback = runner.open_event_batch_callback();
        for (i, spec) in specs.iter().enumerate() {
            append(&world.journal, spec);
            for frame in between(i, &world.journal.entries()) {
                callback.process_event_batch(frame).await.unwrap();
            }
        }
        for frame in after(&world.journal.entries()) {
            callback.process_event_batch(frame).await.unwrap();
        }
        assert!(settle_background(&runner, 1000).await);
        let event_calls: Vec<(Option<u64>, u64)> =
            calls(&log).into_iter().filter(|c| c.position.is_some()).map(|c| (c.position, c.revision)).collect();
        (runner.snapshot().state, runner.runtime_state().acknowledged_through, world.sink.applied_keys(), event_calls)
    })
}

#[test]
fn singleton_frames_match_one_batch() {
    let specs = vec![tick(1, 1), Spec::Unconsumed, Spec::Malformed, tick(2, 2), Spec::Note, Spec::Garbage];
    let one = run_frames(&specs, CheckpointCadence::EveryEvent, |e| vec![EventBatch::new(e)]);
    let singles = run_frames(&specs, CheckpointCadence::EveryEvent, |e| {
        e.into_iter().map(|x| EventBatch::new(vec![x])).collect()
    });
    assert_eq!(one, singles);
    assert_eq!(one.state.trail, vec![1, 2]);
    // One diagnostic for the one malformed consumed event.
    assert_eq!(one.appended.len(), 1);
    // Three tick effects, each applied once.
    assert_eq!(one.effect_keys.len(), 3);
}
