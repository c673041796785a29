//! [16] inline admit: validate + reduce at the commit point.

use ds_processor::{AdmitError, InlineRunner, JournalEntry, OutgoingEvent, Reduction, StreamIncarnation};
use ds_processor_testkit::harness::World;
use proptest::prelude::*;
use serde_json::json;

use crate::support::*;

fn tick_bytes(n: i64, background: bool) -> Vec<u8> {
    OutgoingEvent::new("probe/tick", json!({ "n": n, "background": background })).encode().to_vec()
}

fn inline(world: &World) -> (InlineRunner<Probe>, CallLog) {
    let (probe, log) = Probe::new(world, ProbeOptions::default());
    (InlineRunner::new(probe, StreamIncarnation::new("inline-1")).unwrap(), log)
}

#[test]
fn validate_rejection_leaves_state_and_positions_untouched() {
    let world = World::new();
    let (mut runner, log) = inline(&world);
    let first = runner.admit(&tick_bytes(1, false)).unwrap();
    assert_eq!(first.position, 1);
    runner.process_committed(first).unwrap();
    let (state, progress) = (runner.state().clone(), runner.progress());

    let refused = runner.admit(&tick_bytes(13, false));

    assert!(matches!(refused, Err(AdmitError::Rejected(_))));
    assert_eq!(runner.state(), &state);
    assert_eq!(runner.progress(), progress);
    assert_eq!(runner.head(), 1);
    assert_eq!(calls(&log).len(), 1, "no process_event for a refused append");
    // The next admitted append takes the position the refused one did not.
    assert_eq!(runner.admit(&tick_bytes(2, false)).unwrap().position, 2);
    assert_eq!(runner.state().trail, vec![1, 2]);
}

#[test]
fn admit_refuses_malformed_consumed_events_and_passes_unconsumed_ones() {
    let world = World::new();
    let (mut runner, _) = inline(&world);
    let malformed = OutgoingEvent::new("probe/tick", json!({ "n": "x" })).encode();
    assert!(matches!(runner.admit(&malformed), Err(AdmitError::Malformed { .. })));
    assert_eq!(runner.head(), 0);
    let other = OutgoingEvent::new("other/thing", json!({})).encode();
    let admitted = runner.admit(&other).unwrap();
    assert_eq!((admitted.position, admitted.envelope.is_none()), (1, true));
    assert_eq!(runner.progress().reduction.reduced_through, 1);
    assert!(runner.progress().processing.is_none(), "inline progress is reduction only");
}

#[tokio::test]
async fn process_committed_returns_background_work_and_refuses_blocking_work() {
    let world = World::new();
    let (mut runner, log) = inline(&world);
    let admitted = runner.admit(&tick_bytes(4, true)).unwrap();
    let background = runner.process_committed(admitted).unwrap();
    assert_eq!(background.len(), 1);
    for work in background {
        work.await.unwrap();
    }
    assert_eq!(world.sink.labels(), ["bg:1"]);
    let call = calls(&log)[0].clone();
    assert!(call.caught_up && call.position == Some(1));

    let blocking = OutgoingEvent::new("probe/tick", json!({ "n": 1, "effects": 1 })).encode();
    let admitted = runner.admit(&blocking).unwrap();
    assert!(runner.process_committed(admitted).is_err());
}

#[test]
fn resume_refolds_when_the_reducer_version_changed() {
    let world = World::new();
    let history: Vec<JournalEntry> = (1..=4).map(|n| JournalEntry::new(n as u64, tick_bytes(n, false))).collect();
    let stale = Reduction { reducer_version: "0".into(), reduced_through: 4, state: ProbeState::default() };
    let (probe, _) = Probe::new(&world, ProbeOptions::default());
    let runner = InlineRunner::resume(probe, StreamIncarnation::new("i"), 4, Some(stale), history.clone()).unwrap();
    assert_eq!(runner.state().sum, 10);
    assert_eq!(runner.head(), 4);

    // A current cache is trusted and only the tail after it folded.
    let cache = Reduction {
        reducer_version: "1".into(),
        reduced_through: 2,
        state: ProbeState { sum: 100, ..ProbeState::default() },
    };
    let (probe, _) = Probe::new(&world, ProbeOptions::default());
    let runner = InlineRunner::resume(probe, StreamIncarnation::new("i"), 4, Some(cache), history).unwrap();
    assert_eq!(runner.state().sum, 107);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_admit_sequence_folds_exactly_the_admitted_events(values in proptest::collection::vec(10i64..16, 0..20)) {
        let world = World::new();
        let (mut runner, _) = inline(&world);
        let mut admitted = Vec::new();
        for &n in &values {
            let before = (runner.state().clone(), runner.head());
            match runner.admit(&tick_bytes(n, false)) {
                Ok(a) => {
                    prop_assert_eq!(a.position, before.1 + 1);
                    admitted.push(n);
                }
                Err(_) => {
                    prop_assert_eq!(n, 13);
                    prop_assert_eq!((runner.state().clone(), runner.head()), before);
                }
            }
        }
        prop_assert_eq!(&runner.state().trail, &admitted);
        prop_assert_eq!(runner.head(), admitted.len() as u64);
    }
}
