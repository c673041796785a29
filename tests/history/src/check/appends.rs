//! Appends, producers, closes and forks (see the module docs of `check`).

use std::collections::BTreeMap;

use super::{Finals, Indexed, Kind, Violation};
use crate::history::{Answer, Call, History, Op, OpId, Outcome, Pos, RecordKey};

/// The attempts that carried one record (a producer's retries share it).
struct Attempts<'a> {
    ops: Vec<&'a Op>,
}

impl Attempts<'_> {
    fn first_invoke(&self) -> u64 {
        self.ops.iter().map(|o| o.invoke).min().unwrap_or(0)
    }

    /// The earliest acknowledgement (`200`/`204`).
    fn acked(&self) -> Option<&Op> {
        self.ops.iter().copied().filter(|o| o.acked()).min_by_key(|o| o.complete)
    }

    fn ids(&self) -> Vec<OpId> {
        self.ops.iter().map(|o| o.id).collect()
    }
}

fn is_zombie(op: &Op) -> bool {
    matches!(op.call, Call::Append { zombie: true, .. })
}

pub(super) fn check_stream(
    history: &History,
    stream: &str,
    ops: &[OpId],
    fin: Option<&Indexed<'_>>,
    out: &mut Vec<Violation>,
) {
    let mut records: BTreeMap<RecordKey, Attempts<'_>> = BTreeMap::new();
    for op in ops.iter().map(|id| &history.ops[*id]) {
        if let Call::Append { record, .. } = op.call {
            records.entry(record).or_insert_with(|| Attempts { ops: Vec::new() }).ops.push(op);
        }
    }
    let len = fin.map_or(0, Indexed::len);
    // (position, first invocation, acknowledgement or never, attempts) of every present record.
    let mut placed: Vec<(Pos, u64, u64, Vec<OpId>)> = Vec::new();
    for (key, attempts) in &records {
        let at: &[(Pos, Pos)] = fin.and_then(|f| f.at.get(key)).map_or(&[], Vec::as_slice);
        let acked = attempts.acked();
        if at.len() > 1 {
            let shown: Vec<String> = at.iter().map(|(s, _)| s.to_string()).collect();
            out.push(Violation::new(
                Kind::Duplicate,
                attempts.ids(),
                format!(
                    "duplicate append: record {key} appears {} times in {stream} (at {})",
                    at.len(),
                    shown.join(", ")
                ),
            ));
        }
        if let (Some(op), true) = (acked, at.is_empty()) {
            out.push(Violation::new(
                Kind::LostAppend,
                attempts.ids(),
                format!(
                    "lost acknowledged append: record {key} (op {} acknowledged it) is not in the final {stream}",
                    op.id
                ),
            ));
        }
        for zombie in attempts.ops.iter().filter(|o| is_zombie(o)) {
            if zombie.acked() || !at.is_empty() {
                out.push(Violation::new(
                    Kind::Fencing,
                    vec![zombie.id],
                    format!(
                        "stale epoch not fenced: zombie append of record {key} to {stream} was {}",
                        if zombie.acked() { "acknowledged" } else { "applied" }
                    ),
                ));
            }
        }
        producer_answers(key, stream, attempts, out);
        if let (Some(op), Some(&(_, end))) = (acked, at.first()) {
            if let Outcome::Ok(Answer::Appended { next, .. }) = op.outcome {
                if next < end || next > len {
                    out.push(Violation::new(
                        Kind::Offsets,
                        vec![op.id],
                        format!(
                            "append of record {key} to {stream} acknowledged with next offset {next}; its record ends at \
                             {end} and the final stream at {len}"
                        ),
                    ));
                }
            }
        }
        if let Some(&(start, _)) = at.first() {
            placed.push((start, attempts.first_invoke(), acked.map_or(u64::MAX, |o| o.complete), attempts.ids()));
        }
    }
    real_time_order(stream, placed, out);
    closes(history, stream, ops, fin, &records, out);
}

/// Answers a well-behaved producer must not get: a duplicate on the
/// first attempt, a stale epoch or a sequence gap (it never skips or goes
/// back, so either means lost producer state).
fn producer_answers(key: &RecordKey, stream: &str, attempts: &Attempts<'_>, out: &mut Vec<Violation>) {
    let first = attempts.ops.iter().min_by_key(|o| o.invoke);
    for op in &attempts.ops {
        let Call::Append { producer: Some(tag), zombie: false, .. } = op.call else { continue };
        let wrong = match &op.outcome {
            Outcome::Ok(Answer::Appended { status: 204, .. }) if first.is_some_and(|f| f.id == op.id) => {
                Some("a duplicate (204) on its first attempt".to_owned())
            }
            Outcome::Fail { status: 403, .. } => Some("403 (stale epoch) without a newer epoch".to_owned()),
            Outcome::Fail { status: 409, closed: false, detail } => Some(format!("409 (sequence gap): {detail}")),
            _ => None,
        };
        if let Some(what) = wrong {
            out.push(Violation::new(
                Kind::Producer,
                vec![op.id],
                format!(
                    "producer state lost: batch (epoch {}, seq {}) of record {key} to {stream} was answered {what}",
                    tag.epoch, tag.seq
                ),
            ));
        }
    }
}

/// An append acknowledged before another was invoked lands first.
/// `placed`: (position, first invocation, acknowledgement, ops).
fn real_time_order(stream: &str, mut placed: Vec<(Pos, u64, u64, Vec<OpId>)>, out: &mut Vec<Violation>) {
    placed.sort_by_key(|p| p.0);
    // Scanning from the end: the earliest acknowledgement among records
    // placed after the current one.
    let mut earliest_after: Option<usize> = None;
    for i in (0..placed.len()).rev() {
        if let Some(j) = earliest_after {
            let (pos_i, invoked_i, _, ops_i) = &placed[i];
            let (pos_j, _, acked_j, ops_j) = &placed[j];
            if acked_j < invoked_i {
                let (a, b) = (ops_j[0], ops_i[0]);
                out.push(Violation::new(
                    Kind::RealTimeOrder,
                    [ops_j.clone(), ops_i.clone()].concat(),
                    format!(
                        "real-time order violated in {stream}: op {a} was acknowledged before op {b} was invoked, but \
                         op {b}'s record lands first (at {pos_i}, op {a}'s at {pos_j})"
                    ),
                ));
                return; // one is enough per stream; the rest repeat it
            }
        }
        if earliest_after.is_none_or(|j| placed[i].2 < placed[j].2) {
            earliest_after = Some(i);
        }
    }
}

/// Nothing is accepted after an acknowledged close; the final stream ends
/// where the close said and is closed; a `409 Stream-Closed` means closed.
fn closes(
    history: &History,
    stream: &str,
    ops: &[OpId],
    fin: Option<&Indexed<'_>>,
    records: &BTreeMap<RecordKey, Attempts<'_>>,
    out: &mut Vec<Violation>,
) {
    let (len, closed) = fin.map_or((0, false), |f| (f.len(), f.stream.closed));
    let mut first_close: Option<&Op> = None;
    for op in ops.iter().map(|id| &history.ops[*id]) {
        let said_closed = match &op.outcome {
            Outcome::Ok(Answer::Closed { next }) => {
                if *next != len || !closed {
                    out.push(Violation::new(
                        Kind::Closed,
                        vec![op.id],
                        format!(
                            "close of {stream} acknowledged at {next}, but the final stream is {len} bytes and {}",
                            if closed { "closed" } else { "open" }
                        ),
                    ));
                }
                if first_close.is_none_or(|c| op.complete < c.complete) {
                    first_close = Some(op);
                }
                true
            }
            Outcome::Fail { closed: true, .. } | Outcome::Ok(Answer::Appended { closed: true, .. }) => true,
            _ => false,
        };
        if said_closed && !closed {
            out.push(Violation::new(
                Kind::Closed,
                vec![op.id],
                format!("op {} said {stream} is closed, but the final stream is open", op.id),
            ));
        }
    }
    let Some(close) = first_close else { return };
    for (key, attempts) in records {
        for op in attempts.ops.iter().filter(|o| o.invoke > close.complete) {
            let present = fin.is_some_and(|f| f.at.contains_key(key));
            if op.acked() || present {
                out.push(Violation::new(
                    Kind::Closed,
                    vec![close.id, op.id],
                    format!(
                        "append after close: op {} (record {key}) was invoked after the close of {stream} was \
                         acknowledged (op {}), yet it was {}",
                        op.id,
                        close.id,
                        if op.acked() { "acknowledged" } else { "applied" }
                    ),
                ));
            }
        }
    }
}

/// A fork holds its source's bytes up to the fork offset.
pub(super) fn check_fork(id: OpId, stream: &str, source: &str, at: Pos, finals: &Finals, out: &mut Vec<Violation>) {
    let (Some(fork), Some(src)) = (finals.get(stream), finals.get(source)) else {
        out.push(Violation::new(
            Kind::Fork,
            vec![id],
            format!("fork {stream} of {source} was acknowledged, but one of them is missing after the run"),
        ));
        return;
    };
    let at = usize::try_from(at).unwrap_or(usize::MAX);
    if at > src.bytes.len() || at > fork.bytes.len() || fork.bytes[..at] != src.bytes[..at] {
        out.push(Violation::new(
            Kind::Fork,
            vec![id],
            format!(
                "fork {stream} of {source} at {at} does not hold the source's first {at} bytes ({} and {} bytes)",
                fork.bytes.len(),
                src.bytes.len()
            ),
        ));
    }
}
