//! The checker: the consistency model the protocol and our docs promise,
//! verified over a [`History`] and the final state of every stream (read
//! after the run, faults off).
//!
//! - [`appends`]: every acknowledged append in the final stream exactly
//!   once, any other at most once; real-time order (an append acknowledged
//!   before another was invoked lands first); acknowledged offsets cover
//!   the append; idempotent producers applied once per (id, epoch, seq) and
//!   older epochs fenced; nothing accepted after an acknowledged close; a
//!   fork holds its source's bytes up to the fork offset.
//! - [`reads`]: every read's bytes equal the final stream's over the same
//!   range (no dirty or lost reads) and its offsets match its bytes; a
//!   client's view never goes backwards; an up-to-date answer (catch-up,
//!   long-poll, SSE control, HEAD) covers every append and close
//!   acknowledged before it was invoked, and says closed at the end of a
//!   closed stream.
//!
//! Every violation names the operations involved; [`Checked::first`] is the
//! earliest by invocation time.

mod appends;
mod reads;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::history::{Call, History, OpId, Outcome, Pos, RecordKey};

/// A stream as it is after the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalStream {
    pub bytes: Vec<u8>,
    pub closed: bool,
}

/// The final state of every stream that exists after the run.
pub type Finals = BTreeMap<String, FinalStream>;

/// What kind of promise was broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    LostAppend,
    Duplicate,
    RealTimeOrder,
    DirtyRead,
    ReadMismatch,
    NonMonotonicRead,
    StaleRead,
    Offsets,
    Producer,
    Fencing,
    Closed,
    Fork,
    FinalState,
}

/// One broken promise and the operations that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: Kind,
    pub message: String,
    pub ops: Vec<OpId>,
}

impl Violation {
    fn new(kind: Kind, ops: Vec<OpId>, message: String) -> Self {
        Self { kind, message, ops }
    }

    /// The message and each operation involved, in full.
    pub fn render(&self, history: &History) -> String {
        let mut out = self.message.clone();
        for id in &self.ops {
            if let Some(op) = history.ops.get(*id) {
                out.push_str(&format!("\n    {op}"));
            }
        }
        out
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What was checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub ops: u64,
    pub by_kind: BTreeMap<&'static str, u64>,
    pub acknowledged: u64,
    pub failed: u64,
    pub unknown: u64,
    /// Statuses of the answers that were not success.
    pub fail_statuses: BTreeMap<u16, u64>,
    pub streams: u64,
    /// Records found in the final streams.
    pub records: u64,
    /// Read responses (SSE: events) compared with the final streams.
    pub segments: u64,
    pub bytes_compared: u64,
}

/// The verdict.
#[derive(Debug, Clone)]
pub struct Checked {
    pub summary: Summary,
    pub violations: Vec<Violation>,
}

impl Checked {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violation whose operations were invoked earliest.
    pub fn first(&self) -> Option<&Violation> {
        self.violations.first()
    }
}

/// A final stream split into records.
pub(crate) struct Indexed<'a> {
    pub stream: &'a FinalStream,
    /// Where each record lies: `[start, end)`, in stream order.
    pub at: HashMap<RecordKey, Vec<(Pos, Pos)>>,
}

impl Indexed<'_> {
    pub fn len(&self) -> Pos {
        self.stream.bytes.len() as Pos
    }
}

/// Check `history` against `finals`.
pub fn check(history: &History, finals: &Finals) -> Checked {
    let mut violations = Vec::new();
    let mut indexed: HashMap<&str, Indexed<'_>> = HashMap::new();
    let mut summary = Summary { streams: finals.len() as u64, ..Summary::default() };
    for (name, stream) in finals {
        match ds_e2e::record::parse(&stream.bytes) {
            Ok(records) => {
                summary.records += records.len() as u64;
                let mut at: HashMap<RecordKey, Vec<(Pos, Pos)>> = HashMap::new();
                for (i, r) in records.iter().enumerate() {
                    let end = records.get(i + 1).map_or(stream.bytes.len(), |n| n.at);
                    let key = RecordKey { writer: r.producer, seq: r.seq };
                    at.entry(key).or_default().push((r.at as Pos, end as Pos));
                }
                indexed.insert(name, Indexed { stream, at });
            }
            Err(e) => violations.push(Violation::new(
                Kind::FinalState,
                Vec::new(),
                format!("final stream {name} is not a sequence of whole records: {e}"),
            )),
        }
    }
    for op in &history.ops {
        summary.ops += 1;
        *summary.by_kind.entry(op.call.kind()).or_default() += 1;
        match op.outcome {
            Outcome::Ok(_) => summary.acknowledged += 1,
            Outcome::Fail { status, ref detail, .. } => {
                summary.failed += 1;
                *summary.fail_statuses.entry(status).or_default() += 1;
                if (200..300).contains(&status) {
                    violations.push(Violation::new(
                        Kind::Offsets,
                        vec![op.id],
                        format!("op {} on {} answered {status} but {detail}", op.id, op.call.stream()),
                    ));
                }
            }
            Outcome::Unknown(_) => summary.unknown += 1,
        }
    }
    let mut by_stream: BTreeMap<&str, Vec<OpId>> = BTreeMap::new();
    for op in &history.ops {
        by_stream.entry(op.call.stream()).or_default().push(op.id);
    }
    for (stream, ops) in &by_stream {
        let fin = indexed.get(stream);
        appends::check_stream(history, stream, ops, fin, &mut violations);
        reads::check_stream(history, stream, ops, fin, &mut summary, &mut violations);
    }
    for op in &history.ops {
        if let (Call::Fork { stream, source, at }, Outcome::Ok(_)) = (&op.call, &op.outcome) {
            appends::check_fork(op.id, stream, source, *at, finals, &mut violations);
        }
    }
    let earliest = |v: &Violation| v.ops.iter().filter_map(|id| history.ops.get(*id)).map(|op| op.invoke).min();
    violations.sort_by_key(|v| (earliest(v).unwrap_or(0), v.kind));
    Checked { summary, violations }
}
