//! Planted anomalies: small histories, each with one broken promise, must
//! fail the checker with the expected message (and a clean one must pass).
#![allow(clippy::unwrap_used)]

use ds_e2e::record::encode;
use ds_history::check::{check, FinalStream, Finals, Kind};
use ds_history::history::{segment, Answer, Call, History, Outcome, ProducerTag, ReadMode, RecordKey};

const S: &str = "planted/s";

fn key(writer: u32, seq: u64) -> RecordKey {
    RecordKey { writer, seq }
}

fn bytes(keys: &[RecordKey]) -> Vec<u8> {
    keys.iter().flat_map(|k| encode(k.writer, k.seq)).collect()
}

fn len(keys: &[RecordKey]) -> u64 {
    bytes(keys).len() as u64
}

fn finals(keys: &[RecordKey], closed: bool) -> Finals {
    Finals::from([(S.to_owned(), FinalStream { bytes: bytes(keys), closed })])
}

fn append(h: &mut History, client: u32, k: RecordKey, at: (u64, u64), outcome: Outcome) -> usize {
    let call = Call::Append { stream: S.into(), record: k, producer: None, zombie: false };
    h.push(client, call, at.0, at.1, outcome)
}

fn acked(next: u64) -> Outcome {
    Outcome::Ok(Answer::Appended { status: 200, next, closed: false })
}

fn head(h: &mut History, client: u32, at: (u64, u64), tail: u64) {
    h.push(client, Call::Head { stream: S.into() }, at.0, at.1, Outcome::Ok(Answer::Head { tail, closed: false }));
}

/// A catch-up read at `from` that returned `keys`, up to date.
fn read(h: &mut History, client: u32, at: (u64, u64), from: u64, keys: &[RecordKey]) {
    let seg = segment(from, &bytes(keys), from + len(keys), true, false);
    let call = Call::Read { stream: S.into(), mode: ReadMode::CatchUp, from };
    h.push(client, call, at.0, at.1, Outcome::Ok(Answer::Read { segments: vec![seg] }));
}

/// Checks, and returns the first violation's kind and message (printed).
fn first(history: &History, finals: &Finals) -> (Kind, String) {
    let checked = check(history, finals);
    let v = checked.first().expect("the checker must flag the planted anomaly");
    eprintln!("{} violation(s); first: {}", checked.violations.len(), v.render(history));
    (v.kind, v.message.clone())
}

/// Two appends one after the other, reads, a HEAD: all fine.
fn clean() -> (History, [RecordKey; 2]) {
    let (a, b) = (key(1, 0), key(2, 0));
    let mut h = History::default();
    append(&mut h, 1, a, (0, 10), acked(len(&[a])));
    append(&mut h, 2, b, (20, 30), acked(len(&[a, b])));
    read(&mut h, 3, (40, 50), 0, &[a, b]);
    head(&mut h, 3, (60, 70), len(&[a, b]));
    (h, [a, b])
}

#[test]
fn a_clean_history_passes() {
    let (h, [a, b]) = clean();
    let checked = check(&h, &finals(&[a, b], false));
    assert!(checked.ok(), "{:?}", checked.violations);
    assert_eq!(checked.summary.ops, 4);
    assert_eq!(checked.summary.records, 2);
    assert_eq!(checked.summary.segments, 1);
}

#[test]
fn a_lost_acknowledged_append_is_flagged() {
    let (a, b) = (key(1, 0), key(2, 0));
    let mut h = History::default();
    append(&mut h, 1, a, (0, 10), acked(len(&[a])));
    append(&mut h, 2, b, (20, 30), acked(len(&[a, b])));
    let (kind, msg) = first(&h, &finals(&[a], false));
    assert_eq!(kind, Kind::LostAppend);
    assert!(msg.starts_with("lost acknowledged append: record w2#0 (op 1 acknowledged it)"), "{msg}");
}

#[test]
fn a_duplicate_is_flagged() {
    let (h, [a, b]) = clean();
    // A retried plain append that landed twice.
    let (kind, msg) = first(&h, &finals(&[a, b, b], false));
    assert_eq!(kind, Kind::Duplicate);
    assert_eq!(
        msg,
        format!("duplicate append: record w2#0 appears 2 times in {S} (at {}, {})", len(&[a]), len(&[a, b]))
    );
}

#[test]
fn a_reorder_against_real_time_is_flagged() {
    let (a, b) = (key(1, 0), key(2, 0));
    let mut h = History::default();
    append(&mut h, 1, a, (0, 10), acked(len(&[b, a])));
    append(&mut h, 2, b, (20, 30), acked(len(&[b])));
    // b was invoked after a was acknowledged, yet lands first.
    let (kind, msg) = first(&h, &finals(&[b, a], false));
    assert_eq!(kind, Kind::RealTimeOrder);
    assert!(
        msg.starts_with("real-time order violated in planted/s: op 0 was acknowledged before op 1 was invoked"),
        "{msg}"
    );
}

#[test]
fn a_read_of_bytes_later_absent_is_flagged() {
    let (a, b) = (key(1, 0), key(2, 0));
    let mut h = History::default();
    append(&mut h, 1, a, (0, 10), acked(len(&[a])));
    // b's outcome is unknown: it may be absent, but then nobody may have read it.
    append(&mut h, 2, b, (20, 500), Outcome::Unknown("connection reset".into()));
    read(&mut h, 3, (40, 50), 0, &[a, b]);
    let (kind, msg) = first(&h, &finals(&[a], false));
    assert_eq!(kind, Kind::DirtyRead);
    assert_eq!(
        msg,
        format!(
            "read of bytes later absent: op 2 read record w2#0 at {} of {S}, which the final stream does not hold \
             (dirty or lost read)",
            len(&[a])
        )
    );
}

#[test]
fn a_non_monotonic_read_is_flagged() {
    let a = key(1, 0);
    let mut h = History::default();
    // Acknowledged late: visible before its writer heard back.
    append(&mut h, 1, a, (0, 1000), acked(len(&[a])));
    head(&mut h, 2, (10, 20), len(&[a]));
    head(&mut h, 2, (30, 40), 0);
    let (kind, msg) = first(&h, &finals(&[a], false));
    assert_eq!(kind, Kind::NonMonotonicRead);
    assert_eq!(
        msg,
        format!("non-monotonic read: client 2 saw {S} up to {} (op 1), then op 2 reported its tail at 0", len(&[a]))
    );
}

#[test]
fn a_stale_read_is_flagged() {
    let (a, b) = (key(1, 0), key(2, 0));
    let mut h = History::default();
    append(&mut h, 1, a, (0, 10), acked(len(&[a])));
    append(&mut h, 1, b, (20, 30), acked(len(&[a, b])));
    read(&mut h, 2, (40, 50), 0, &[a]);
    let (kind, msg) = first(&h, &finals(&[a, b], false));
    assert_eq!(kind, Kind::StaleRead);
    assert!(msg.starts_with("stale read: op 2 reported planted/s up to date at"), "{msg}");
}

#[test]
fn an_acknowledged_zombie_and_an_append_after_close_are_flagged() {
    let (a, z, c) = (key(1, 0), key(1, 1), key(2, 0));
    let mut h = History::default();
    let tag = |epoch, seq| Some(ProducerTag { epoch, seq });
    h.push(
        1,
        Call::Append { stream: S.into(), record: a, producer: tag(1, 0), zombie: false },
        0,
        10,
        acked(len(&[a])),
    );
    h.push(
        1,
        Call::Append { stream: S.into(), record: z, producer: tag(0, 5), zombie: true },
        20,
        30,
        acked(len(&[a, z])),
    );
    let (kind, msg) = first(&h, &finals(&[a, z], false));
    assert_eq!(kind, Kind::Fencing);
    assert_eq!(msg, format!("stale epoch not fenced: zombie append of record w1#1 to {S} was acknowledged"));

    let mut h = History::default();
    append(&mut h, 1, a, (0, 10), acked(len(&[a])));
    // The stream ends where the close said, but holds an append sent after it.
    h.push(2, Call::Close { stream: S.into() }, 20, 30, Outcome::Ok(Answer::Closed { next: len(&[a, c]) }));
    append(&mut h, 3, c, (40, 50), Outcome::Fail { status: 409, closed: true, detail: String::new() });
    let (kind, msg) = first(&h, &finals(&[a, c], true));
    assert_eq!(kind, Kind::Closed);
    assert_eq!(
        msg,
        format!("append after close: op 2 (record w2#0) was invoked after the close of {S} was acknowledged (op 1), yet it was applied")
    );
}
