//! The history: every operation a client invoked and what came back, with
//! its invocation and completion times on one monotonic clock (nanoseconds
//! since the [`Recorder`] started). An operation completes `Ok` (its
//! answer), `Fail` (an answer that did nothing, e.g. `409`, `503`) or
//! `Unknown` (no answer: timeout, connection refused or reset); the checker
//! treats `Fail` and `Unknown` alike for effects (at most once) and only
//! `Ok` answers as acknowledgements.
//!
//! Append bodies are `ds_e2e::record` records, a pure function of their
//! [`RecordKey`], so the history needs no bodies: a record found in a read
//! or in the final stream names the append it came from. Reads keep a digest
//! of their bytes and the records they held whole, not the bytes.

use std::fmt;
use std::sync::Mutex;
use std::time::Instant;

/// A byte position in a stream (our offsets are positions).
pub type Pos = u64;
/// An operation's index in its [`History`].
pub type OpId = usize;

/// Which append a record came from: its writer and that writer's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    pub writer: u32,
    pub seq: u64,
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}#{}", self.writer, self.seq)
    }
}

/// The idempotent-producer headers of an append (`Producer-Id` is
/// `p{writer}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerTag {
    pub epoch: u64,
    pub seq: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    CatchUp,
    LongPoll,
    Sse,
}

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Create {
        stream: String,
    },
    /// `zombie`: sent with an epoch older than one already acknowledged
    /// for the producer (must be fenced).
    Append {
        stream: String,
        record: RecordKey,
        producer: Option<ProducerTag>,
        zombie: bool,
    },
    Close {
        stream: String,
    },
    Fork {
        stream: String,
        source: String,
        at: Pos,
    },
    Head {
        stream: String,
    },
    Read {
        stream: String,
        mode: ReadMode,
        from: Pos,
    },
}

impl Call {
    pub fn stream(&self) -> &str {
        match self {
            Call::Create { stream }
            | Call::Append { stream, .. }
            | Call::Close { stream }
            | Call::Fork { stream, .. }
            | Call::Head { stream }
            | Call::Read { stream, .. } => stream,
        }
    }

    /// A short name for counts.
    pub fn kind(&self) -> &'static str {
        match self {
            Call::Create { .. } => "create",
            Call::Append { producer: None, .. } => "append",
            Call::Append { zombie: true, .. } => "zombie append",
            Call::Append { .. } => "producer append",
            Call::Close { .. } => "close",
            Call::Fork { .. } => "fork",
            Call::Head { .. } => "head",
            Call::Read { mode: ReadMode::CatchUp, .. } => "catch-up read",
            Call::Read { mode: ReadMode::LongPoll, .. } => "long-poll",
            Call::Read { mode: ReadMode::Sse, .. } => "sse",
        }
    }
}

/// One response of a read: a catch-up or long-poll answer, or one SSE
/// `data` event with the `control` event after it (an empty `data`
/// when the control came alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Where the bytes start (the offset asked for, or the last control's).
    pub from: Pos,
    pub len: u64,
    /// [`digest`] of the bytes.
    pub digest: u64,
    /// The records the bytes held whole, at their position in the stream.
    pub records: Vec<(RecordKey, Pos)>,
    /// `Stream-Next-Offset` / `streamNextOffset`.
    pub next: Pos,
    pub up_to_date: bool,
    pub closed: bool,
}

/// What a successful operation answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `201` (or `200`: it existed with the same configuration).
    Created {
        status: u16,
    },
    /// `200` new data, `204` a duplicate of a producer's batch.
    Appended {
        status: u16,
        next: Pos,
        closed: bool,
    },
    Closed {
        next: Pos,
    },
    Head {
        tail: Pos,
        closed: bool,
    },
    /// Whatever arrived before the read ended (an SSE connection that broke
    /// after some events still observed them).
    Read {
        segments: Vec<Segment>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(Answer),
    /// An answer that is not success; `closed`: it said `Stream-Closed: true`.
    Fail {
        status: u16,
        closed: bool,
        detail: String,
    },
    /// No answer.
    Unknown(String),
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub id: OpId,
    pub client: u32,
    pub call: Call,
    pub invoke: u64,
    pub complete: u64,
    pub outcome: Outcome,
}

impl Op {
    pub fn acked(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        write!(
            f,
            "op {} (client {}, {:.3}..{:.3} ms): {:?} -> ",
            self.id,
            self.client,
            ms(self.invoke),
            ms(self.complete),
            self.call
        )?;
        match &self.outcome {
            Outcome::Ok(Answer::Read { segments }) => {
                let shown: Vec<String> = segments
                    .iter()
                    .map(|s| {
                        let keys: Vec<String> = s.records.iter().map(|(k, at)| format!("{k}@{at}")).collect();
                        format!(
                            "[{}..{}) next {}{}{} records [{}]",
                            s.from,
                            s.from + s.len,
                            s.next,
                            if s.up_to_date { " up-to-date" } else { "" },
                            if s.closed { " closed" } else { "" },
                            keys.join(" ")
                        )
                    })
                    .collect();
                write!(f, "read {}", shown.join(", "))
            }
            other => write!(f, "{other:?}"),
        }
    }
}

/// A started operation, not yet recorded.
pub struct Invoked {
    pub client: u32,
    pub call: Call,
    pub invoke: u64,
}

/// Collects the operations of concurrent clients.
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self { start: Instant::now(), ops: Mutex::new(Vec::new()) }
    }
}

impl Recorder {
    /// Nanoseconds since the recorder started.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Call this right before the request is sent.
    pub fn invoke(&self, client: u32, call: Call) -> Invoked {
        Invoked { client, call, invoke: self.now() }
    }

    /// Call this right after the answer (or its absence) is known.
    pub fn complete(&self, invoked: Invoked, outcome: Outcome) -> OpId {
        let complete = self.now();
        let mut ops = self.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = ops.len();
        let Invoked { client, call, invoke } = invoked;
        ops.push(Op { id, client, call, invoke, complete, outcome });
        id
    }

    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The history so far.
    pub fn history(&self) -> History {
        History { ops: self.ops.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone() }
    }
}

/// Every recorded operation; `ops[i].id == i`.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub ops: Vec<Op>,
}

impl History {
    /// Appends a finished operation (tests that build histories by hand).
    pub fn push(&mut self, client: u32, call: Call, invoke: u64, complete: u64, outcome: Outcome) -> OpId {
        let id = self.ops.len();
        self.ops.push(Op { id, client, call, invoke, complete, outcome });
        id
    }
}

/// FNV-1a of `bytes`: the digest a read keeps of what it returned.
pub fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The segment a read of `bytes` at `from` makes.
pub fn segment(from: Pos, bytes: &[u8], next: Pos, up_to_date: bool, closed: bool) -> Segment {
    let records = ds_e2e::record::scan(bytes)
        .into_iter()
        .map(|r| (RecordKey { writer: r.producer, seq: r.seq }, from + r.at as u64))
        .collect();
    Segment { from, len: bytes.len() as u64, digest: digest(bytes), records, next, up_to_date, closed }
}
