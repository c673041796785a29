//! Reads and tails (see the module docs of `check`).

use std::collections::BTreeMap;

use super::{Indexed, Kind, Summary, Violation};
use crate::history::{digest, Answer, Call, History, Op, OpId, Outcome, Pos, Segment};

/// What was acknowledged on one stream, by completion time: the end of
/// each acknowledged append's record, and the first acknowledged close.
struct Acknowledged {
    /// (completion, running maximum of record ends, op).
    ends: Vec<(u64, Pos, OpId)>,
    close: Option<(u64, OpId)>,
}

impl Acknowledged {
    fn new(history: &History, ops: &[OpId], fin: Option<&Indexed<'_>>) -> Self {
        let mut ends = Vec::new();
        let mut close: Option<(u64, OpId)> = None;
        for op in ops.iter().map(|id| &history.ops[*id]) {
            match (&op.call, &op.outcome) {
                (Call::Append { record, .. }, Outcome::Ok(Answer::Appended { .. })) => {
                    if let Some(&(_, end)) = fin.and_then(|f| f.at.get(record)).and_then(|at| at.first()) {
                        ends.push((op.complete, end, op.id));
                    }
                }
                (_, Outcome::Ok(Answer::Closed { .. })) if close.is_none_or(|(t, _)| op.complete < t) => {
                    close = Some((op.complete, op.id));
                }
                _ => {}
            }
        }
        ends.sort_by_key(|e| e.0);
        let mut best: Option<(Pos, OpId)> = None;
        for e in &mut ends {
            if best.is_none_or(|(b, _)| e.1 > b) {
                best = Some((e.1, e.2));
            }
            (e.1, e.2) = best.unwrap_or((e.1, e.2));
        }
        Self { ends, close }
    }

    /// The furthest record end acknowledged before `t`, and by which op.
    fn before(&self, t: u64) -> Option<(Pos, OpId)> {
        let n = self.ends.partition_point(|e| e.0 < t);
        n.checked_sub(1).map(|i| (self.ends[i].1, self.ends[i].2))
    }

    fn closed_before(&self, t: u64) -> Option<OpId> {
        self.close.filter(|(c, _)| *c < t).map(|(_, id)| id)
    }
}

/// A tail a client learnt, and from which op.
#[derive(Clone, Copy)]
struct Bound {
    at: Pos,
    op: OpId,
}

pub(super) fn check_stream(
    history: &History,
    stream: &str,
    ops: &[OpId],
    fin: Option<&Indexed<'_>>,
    summary: &mut Summary,
    out: &mut Vec<Violation>,
) {
    let acked = Acknowledged::new(history, ops, fin);
    let mut by_client: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().map(|id| &history.ops[*id]) {
        by_client.entry(op.client).or_default().push(op);
    }
    for client_ops in by_client.values_mut() {
        client_ops.sort_by_key(|o| o.invoke);
        let mut bound: Option<Bound> = None;
        for op in client_ops.iter() {
            match &op.outcome {
                Outcome::Ok(Answer::Read { segments }) => {
                    for seg in segments {
                        summary.segments += 1;
                        summary.bytes_compared += seg.len;
                        segment(stream, op, seg, fin, out);
                        if seg.up_to_date {
                            tail(stream, op, seg.next, seg.closed, &acked, fin, bound, out);
                        }
                        raise(&mut bound, seg.next.max(seg.from + seg.len), op.id);
                    }
                }
                Outcome::Ok(Answer::Head { tail: at, closed }) => {
                    tail(stream, op, *at, *closed, &acked, fin, bound, out);
                    raise(&mut bound, *at, op.id);
                }
                Outcome::Ok(Answer::Appended { next, .. } | Answer::Closed { next }) => raise(&mut bound, *next, op.id),
                _ => {}
            }
        }
    }
}

fn raise(bound: &mut Option<Bound>, at: Pos, op: OpId) {
    if bound.is_none_or(|b| at > b.at) {
        *bound = Some(Bound { at, op });
    }
}

/// One read response against the final stream: offsets match the bytes,
/// the bytes are the final stream's, a `closed` is the final end.
fn segment(stream: &str, op: &Op, seg: &Segment, fin: Option<&Indexed<'_>>, out: &mut Vec<Violation>) {
    let end = seg.from + seg.len;
    if seg.next != end {
        out.push(Violation::new(
            Kind::Offsets,
            vec![op.id],
            format!(
                "offsets do not match bytes: op {} read {} bytes of {stream} at {} but was given next offset {}",
                op.id, seg.len, seg.from, seg.next
            ),
        ));
    }
    let (bytes, closed): (&[u8], bool) = fin.map_or((&[], false), |f| (&f.stream.bytes, f.stream.closed));
    let flen = bytes.len() as Pos;
    let same = end <= flen && digest(&bytes[seg.from as usize..end as usize]) == seg.digest;
    if !same {
        // Name the first record that is not where the read saw it.
        let moved = seg.records.iter().find_map(|(key, at)| {
            let now = fin.and_then(|f| f.at.get(key)).map(Vec::as_slice).unwrap_or_default();
            (!now.iter().any(|(s, _)| s == at)).then(|| (key, at, now.first().map(|(s, _)| *s)))
        });
        let v = match moved {
            Some((key, at, None)) => Violation::new(
                Kind::DirtyRead,
                vec![op.id],
                format!(
                    "read of bytes later absent: op {} read record {key} at {at} of {stream}, which the final stream \
                     does not hold (dirty or lost read)",
                    op.id
                ),
            ),
            Some((key, at, Some(now))) => Violation::new(
                Kind::ReadMismatch,
                vec![op.id],
                format!("read differs from the final stream: op {} read record {key} at {at} of {stream}; it is at {now} now", op.id),
            ),
            None if end > flen => Violation::new(
                Kind::DirtyRead,
                vec![op.id],
                format!(
                    "read of bytes later absent: op {} read {stream} up to {end}, the final stream ends at {flen} \
                     (dirty or lost read)",
                    op.id
                ),
            ),
            None => Violation::new(
                Kind::ReadMismatch,
                vec![op.id],
                format!("read differs from the final stream: op {} read other bytes at [{}..{end}) of {stream}", op.id, seg.from),
            ),
        };
        out.push(v);
    }
    if seg.closed && (seg.next != flen || !closed) {
        out.push(Violation::new(
            Kind::Closed,
            vec![op.id],
            format!(
                "op {} said {stream} is closed at {}, but the final stream is {flen} bytes and {}",
                op.id,
                seg.next,
                if closed { "closed" } else { "open" }
            ),
        ));
    }
}

/// A tail an up-to-date answer (or HEAD) reported: not behind what the
/// client saw before, not behind anything acknowledged before the op was
/// invoked, and closed at the end of a stream whose close was acknowledged.
#[allow(clippy::too_many_arguments)]
fn tail(
    stream: &str,
    op: &Op,
    at: Pos,
    said_closed: bool,
    acked: &Acknowledged,
    fin: Option<&Indexed<'_>>,
    bound: Option<Bound>,
    out: &mut Vec<Violation>,
) {
    if let Some(b) = bound.filter(|b| at < b.at) {
        out.push(Violation::new(
            Kind::NonMonotonicRead,
            vec![b.op, op.id],
            format!(
                "non-monotonic read: client {} saw {stream} up to {} (op {}), then op {} reported its tail at {at}",
                op.client, b.at, b.op, op.id
            ),
        ));
    }
    if let Some((end, by)) = acked.before(op.invoke).filter(|(end, _)| at < *end) {
        out.push(Violation::new(
            Kind::StaleRead,
            vec![by, op.id],
            format!(
                "stale read: op {} reported {stream} up to date at {at}, but op {by} had acknowledged data up to {end} \
                 before it was invoked",
                op.id
            ),
        ));
    }
    let at_end = fin.is_some_and(|f| at == f.len());
    if let (Some(close), false, true) = (acked.closed_before(op.invoke), said_closed, at_end) {
        out.push(Violation::new(
            Kind::StaleRead,
            vec![close, op.id],
            format!(
                "stale read: op {} reported the end of {stream} without Stream-Closed, but op {close} had closed it \
                 before it was invoked",
                op.id
            ),
        ));
    }
}
