#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;

use super::*;
use crate::config::Config;
use crate::record::{Link, Retry, Tail};

fn record(kind: Kind) -> SubscriptionRecord {
    SubscriptionRecord {
        id: "s".into(),
        instance: "i".into(),
        created_at_ms: 0,
        deleted_at_ms: None,
        config: Config {
            kind,
            pattern: Some("a/*".into()),
            streams: vec![],
            webhook_url: (kind == Kind::Webhook).then(|| "https://x.test/h".into()),
            wake_stream: (kind == Kind::PullWake).then(|| "wake".into()),
            lease_ttl_ms: 1_000,
            description: None,
        },
        config_hash: String::new(),
        base_url: "http://127.0.0.1".into(),
        token_key: String::new(),
        links: BTreeMap::from([(
            "a/1".to_owned(),
            Link { explicit: false, glob: true, acked: 0, incarnation: Some("inc".into()) },
        )]),
        generation: 0,
        wake: None,
        retry: Retry::default(),
    }
}

fn tails(tail: u64) -> Tails {
    Tails::from([("a/1".to_owned(), Some(Tail { incarnation: "inc".into(), tail }))])
}

fn e(id: &str) -> Entropy {
    Entropy { wake_id: id.into(), jitter: 0.5 }
}

#[test]
fn backoff_doubles_from_one_second_to_a_minute_with_20_percent_jitter() {
    let mid: Vec<i64> = (1..=9).map(|a| backoff_ms(a, 0.5)).collect();
    assert_eq!(mid, vec![1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]);
    assert_eq!(backoff_ms(1, 0.0), 800);
    assert_eq!(backoff_ms(1, 1.0), 1_200);
    assert_eq!(backoff_ms(40, 1.0), 72_000);
    assert_eq!(backoff_ms(u32::MAX, 0.0), 48_000);
}

#[test]
fn pending_work_issues_one_wake_at_a_time() {
    let mut rec = record(Kind::Webhook);
    assert!(!tick(&mut rec, &tails(0), 10, &e("w1")), "nothing pending");
    assert!(tick(&mut rec, &tails(5), 10, &e("w1")));
    let w = rec.wake.clone().unwrap();
    assert_eq!((w.generation, w.wake_id.as_str(), w.lease_until_ms), (1, "w1", Some(1_010)));
    assert_eq!(w.streams, vec![("a/1".to_owned(), 5)]);
    assert!(!tick(&mut rec, &tails(9), 20, &e("w2")), "a wake is in flight");
    assert_eq!(next_due(&rec, 20), Some(20), "undelivered: deliver now");
    assert!(!delivered(&mut rec, "w1", Delivery::Accepted, &tails(9), 30, &e("w2")));
    assert_eq!(next_due(&rec, 30), Some(1_010), "delivered: look again when the lease ends");
    assert!(tick(&mut rec, &tails(9), 1_010, &e("w2")), "lease expired with work pending: wake again");
    assert_eq!(rec.wake.as_ref().unwrap().generation, 2);
}

#[test]
fn done_acks_the_snapshot_and_wakes_again_for_later_data() {
    let mut rec = record(Kind::Webhook);
    tick(&mut rec, &tails(5), 0, &e("w1"));
    assert!(delivered(&mut rec, "w1", Delivery::Done, &tails(8), 1, &e("w2")), "data after the snapshot");
    assert_eq!(rec.links["a/1"].acked, 5);
    assert_eq!(rec.wake.as_ref().unwrap().wake_id, "w2");
    assert!(!delivered(&mut rec, "w2", Delivery::Done, &tails(8), 2, &e("w3")));
    assert_eq!((rec.links["a/1"].acked, rec.wake.is_none()), (8, true));
    assert!(!delivered(&mut rec, "w2", Delivery::Done, &tails(8), 3, &e("w4")), "a stale outcome changes nothing");
}

#[test]
fn failures_schedule_retries_and_status_recovers() {
    let mut rec = record(Kind::Webhook);
    tick(&mut rec, &tails(5), 0, &e("w1"));
    delivered(&mut rec, "w1", Delivery::Failed, &tails(5), 100, &e("w2"));
    assert_eq!((rec.status(), rec.retry.attempts, rec.retry.next_attempt_at_ms), ("failed", 1, Some(1_100)));
    assert!(rec.wake.is_none());
    assert!(!tick(&mut rec, &tails(5), 1_099, &e("w2")), "not before the persisted time");
    assert!(tick(&mut rec, &tails(5), 1_100, &e("w2")));
    delivered(&mut rec, "w2", Delivery::Failed, &tails(5), 1_200, &e("w3"));
    assert_eq!(rec.retry.next_attempt_at_ms, Some(3_200));
    tick(&mut rec, &tails(5), 3_200, &e("w3"));
    delivered(&mut rec, "w3", Delivery::Accepted, &tails(5), 3_300, &e("w4"));
    assert_eq!((rec.status(), rec.retry.attempts), ("active", 0));
    assert_eq!(rec.generation, 3, "every attempt is a new generation");
}

#[test]
fn callbacks_are_fenced_and_ack_within_the_tail() {
    let mut rec = record(Kind::Webhook);
    tick(&mut rec, &tails(5), 0, &e("w1"));
    assert!(current_wake(&rec, "w1", 1, 10).is_ok());
    assert!(matches!(current_wake(&rec, "w1", 2, 10), Err(SubscriptionError::Fenced)));
    assert!(matches!(current_wake(&rec, "w0", 1, 10), Err(SubscriptionError::Fenced)));
    assert!(matches!(current_wake(&rec, "w1", 1, 1_000), Err(SubscriptionError::Fenced)), "lease over");
    let beyond = ack(&mut rec, &tails(5), &[("a/1".into(), 6)], true, 10, &e("w2"));
    assert!(matches!(beyond, Err(SubscriptionError::Invalid(m)) if m.contains("beyond")));
    let unlinked = ack(&mut rec, &tails(5), &[("b".into(), 1)], true, 10, &e("w2"));
    assert!(matches!(unlinked, Err(SubscriptionError::Invalid(m)) if m.contains("does not link")));
    assert!(!ack(&mut rec, &tails(5), &[("a/1".into(), 3)], false, 500, &e("w2")).unwrap());
    assert_eq!(rec.wake.as_ref().unwrap().lease_until_ms, Some(1_500), "heartbeat extends the lease");
    assert!(ack(&mut rec, &tails(5), &[("a/1".into(), 3)], true, 600, &e("w2")).unwrap(), "2 bytes remain");
    assert_eq!(rec.links["a/1"].acked, 3);
    assert!(matches!(current_wake(&rec, "w1", 1, 700), Err(SubscriptionError::Fenced)));
}

#[test]
fn pull_wake_claims_hold_a_lease_and_release_wakes_again() {
    let mut rec = record(Kind::PullWake);
    tick(&mut rec, &tails(5), 0, &e("w1"));
    assert_eq!(rec.wake.as_ref().unwrap().lease_until_ms, None, "no lease until claimed");
    assert!(matches!(current_wake(&rec, "w1", 1, 1), Err(SubscriptionError::Fenced)), "unclaimed");
    claim(&mut rec, &tails(5), "worker-1", 100, &e("x")).unwrap();
    let w = rec.wake.clone().unwrap();
    assert_eq!((w.wake_id.as_str(), w.holder.as_deref(), w.lease_until_ms), ("w1", Some("worker-1"), Some(1_100)));
    match claim(&mut rec, &tails(5), "worker-2", 200, &e("x")) {
        Err(SubscriptionError::AlreadyClaimed { holder, generation }) => {
            assert_eq!((holder.as_str(), generation), ("worker-1", 1))
        }
        other => panic!("{other:?}"),
    }
    assert!(release(&mut rec, &tails(5), 300, &e("w2")), "work remains: a new wake");
    assert_eq!(rec.wake.as_ref().map(|w| (w.generation, w.delivered)), Some((2, false)));
    claim(&mut rec, &tails(5), "worker-2", 400, &e("x")).unwrap();
    assert!(claim(&mut rec, &tails(5), "worker-3", 1_400, &e("w3")).is_ok(), "an expired lease is free");
    assert_eq!(rec.wake.as_ref().map(|w| w.generation), Some(3));
    let mut idle = record(Kind::PullWake);
    claim(&mut idle, &tails(0), "w", 0, &e("w9")).unwrap();
    assert_eq!(idle.wake.as_ref().map(|w| (w.generation, w.streams.len())), Some((1, 0)), "idle claims issue a wake");
    let mut hook = record(Kind::Webhook);
    assert!(matches!(claim(&mut hook, &tails(0), "w", 0, &e("x")), Err(SubscriptionError::WrongKind(_))));
}

#[test]
fn recreated_streams_start_unacknowledged_and_tombstones_never_wake() {
    let mut rec = record(Kind::Webhook);
    rec.links.get_mut("a/1").unwrap().acked = 50;
    let recreated = Tails::from([("a/1".to_owned(), Some(Tail { incarnation: "inc2".into(), tail: 3 }))]);
    assert_eq!(rec.pending(&recreated), vec![("a/1".to_owned(), 3)]);
    rec.deleted_at_ms = Some(1);
    assert!(!tick(&mut rec, &recreated, 10, &e("w1")));
    assert_eq!(next_due(&rec, 10), None);
}

/// A callback/claim token verifies only under the instance it was minted
/// for, for the wake it names: another instance of the same id (its own
/// key), a changed wake or generation, or a changed MAC is `401`.
#[test]
fn tokens_are_bound_to_their_instance_and_wake() {
    use crate::token;
    let mut rec = record(Kind::PullWake);
    rec.token_key = token::new_key();
    let t = token::mint(&rec, 3, "w1").unwrap();
    assert_eq!(token::verify(&rec, &t).unwrap(), (3, "w1".to_owned()));
    let mut recreated = rec.clone();
    recreated.instance = "i2".into();
    recreated.token_key = token::new_key();
    let forged = |t: &str| matches!(token::verify(&rec, t), Err(SubscriptionError::Unauthorized(_)));
    assert!(matches!(token::verify(&recreated, &t), Err(SubscriptionError::Unauthorized(_))), "another instance");
    let (_, mac) = t.rsplit_once('.').unwrap();
    assert!(forged(&format!("3.w2.{mac}")), "another wake");
    assert!(forged(&format!("4.w1.{mac}")), "another generation");
    let mut flipped = t.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    assert!(forged(std::str::from_utf8(&flipped).unwrap()), "a changed MAC");
    assert!(forged("3.w1"), "no MAC");
}
