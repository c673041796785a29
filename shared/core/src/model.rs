//! The persisted data model every substrate stores: stream metadata, chunks and
//! producer state, plus the [`Commit`] a substrate applies all-or-nothing.
//!
//! Positions are byte positions in the stream's logical byte sequence (`u64`);
//! the protocol's opaque offset token is only a rendering of a position
//! (`ds_protocol::offset`). Forks share their source's position space.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Where a fork branched off: it inherits the source's bytes `[0, base)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// Path of the source stream (stream-root-relative).
    pub source: Arc<str>,
    /// The source's incarnation at fork time; a re-created source is another stream.
    pub source_incarnation: Arc<str>,
    /// Divergence position: the fork's own appends start here.
    pub base: u64,
}

/// The `(Producer-Id, Producer-Epoch, Producer-Seq)` triple of one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerTriple {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// Per-`(stream, producer id)` idempotent producer state (PROTOCOL.md §5.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
}

/// One stream's metadata: the single record every mutation of the stream
/// rewrites under an optimistic `version` precondition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamMeta {
    /// Stream-root-relative path (validated by the core before it gets here).
    /// Shared, as are the other strings: the meta is cloned several times per
    /// append (the next meta, the commit, the publish, the prediction), and
    /// the strings never change once created.
    pub path: Arc<str>,
    /// Unique per creation. Chunks and producer state are keyed by it, so a
    /// stream re-created at the same path never sees its predecessor's data.
    pub incarnation: Arc<str>,
    /// Bumped by one on every committed change of this record. Commits carry
    /// the version they read ([`Expect::Version`]) so a stale writer fails.
    pub version: u64,
    pub content_type: Arc<str>,
    pub created_at_ms: i64,
    /// Tail position: one past the last stored byte (own bytes and inherited).
    pub tail: u64,
    pub closed: bool,
    /// The producer request that closed the stream, for idempotent close retries.
    pub closed_by: Option<ProducerTriple>,
    /// Sliding TTL in seconds (`Stream-TTL`).
    pub ttl_secs: Option<u64>,
    /// Absolute expiry (`Stream-Expires-At`), epoch milliseconds.
    pub expires_at_ms: Option<i64>,
    /// Last access (read or write) for the sliding TTL, epoch milliseconds.
    /// Updated by [`crate::StreamStore::touch`] without a version bump.
    pub touched_at_ms: i64,
    /// Last accepted `Stream-Seq` (byte-wise lexicographic order).
    pub last_stream_seq: Option<String>,
    pub fork: Option<ForkOrigin>,
    /// Number of live forks whose [`ForkOrigin`] names this stream.
    pub ref_count: u64,
    /// Deleted by its owner while forks still reference it: `410 Gone` to
    /// clients, still readable by forks.
    pub soft_deleted: bool,
    /// The earliest retained position of the stream's own bytes: reads
    /// before it answer `410 Gone` (retention, `StreamService::trim`).
    /// `0`: everything is retained. Never decreases, never passes `tail`,
    /// always an append (JSON: message) boundary. A fork's starts at 0; what
    /// it may read of its source is bounded by the source's own (see
    /// `StreamService::earliest`). Records written before it existed decode
    /// as 0.
    #[serde(default)]
    pub retained_from: u64,
}

#[cfg(test)]
impl StreamMeta {
    /// A bare meta for unit tests: `path` at `version`, nothing else set.
    pub(crate) fn for_test(path: &str, incarnation: &str, version: u64) -> Self {
        Self {
            path: path.into(),
            incarnation: incarnation.into(),
            version,
            content_type: "application/octet-stream".into(),
            created_at_ms: 0,
            tail: 0,
            closed: false,
            closed_by: None,
            ttl_secs: None,
            expires_at_ms: None,
            touched_at_ms: 0,
            last_stream_seq: None,
            fork: None,
            ref_count: 0,
            soft_deleted: false,
            retained_from: 0,
        }
    }
}

impl StreamMeta {
    /// When this stream expires, if ever (epoch ms). A sliding TTL counts from
    /// the last access; an absolute expiry is fixed.
    pub fn expiry_deadline_ms(&self) -> Option<i64> {
        match (self.expires_at_ms, self.ttl_secs) {
            (Some(at), _) => Some(at),
            (None, Some(ttl)) => {
                let ttl_ms = i64::try_from(ttl.saturating_mul(1000)).unwrap_or(i64::MAX);
                Some(self.touched_at_ms.saturating_add(ttl_ms))
            }
            (None, None) => None,
        }
    }

    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.is_expired_by(|| now_ms)
    }

    /// [`Self::is_expired`], reading the clock only for a stream that can expire.
    pub fn is_expired_by(&self, now_ms: impl FnOnce() -> i64) -> bool {
        self.expiry_deadline_ms().is_some_and(|d| now_ms() >= d)
    }

    /// First position of the stream's own storage (a fork's base, else 0).
    pub fn own_start(&self) -> u64 {
        self.fork.as_ref().map_or(0, |f| f.base)
    }
}

/// A contiguous run of bytes stored by one commit: positions `[start, start + data.len())`.
///
/// For `application/json` streams `data` holds whole messages, each minified
/// and terminated by `\n`, so message boundaries are found without parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub start: u64,
    pub data: Bytes,
}

impl Chunk {
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

/// Precondition on a stream's meta record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No meta record exists at the path.
    Absent,
    /// The stored record has exactly this `version` **and** the incarnation
    /// of the meta being written (for `PutMeta`) or named (for
    /// `DeleteStream`). The incarnation check matters across processes that
    /// share no lock: a writer still holding a deleted stream's meta must not
    /// overwrite a re-created stream that happens to reach the same version.
    Version(u64),
    /// As [`Expect::Version`], and the stored tail is `tail`. Appends carry
    /// it: an append names the position its bytes land at, so a commit planned
    /// on a state that was never stored (a stale prediction that happens to
    /// share the stored version) fails instead of leaving a gap.
    VersionAt { version: u64, tail: u64 },
}

/// A small keyed record of one stream incarnation, for what is built on a
/// stream (a processor's progress, an idempotency key's position). Records
/// are wiped with their incarnation, and written only inside a [`Commit`]
/// (so together with appends when that matters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// 1 for the first write of the key, then bumped by one per write; the
    /// precondition of the next conditional write ([`RecordExpect`]).
    pub revision: u64,
    pub value: Bytes,
}

/// Longest record key, in bytes.
pub const MAX_RECORD_KEY_BYTES: usize = 256;

/// Largest record value, in bytes: the same on every substrate (so what
/// works locally works on AWS, whose items hold at most 400 KB with keys and
/// attributes).
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

/// Precondition on a stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordExpect {
    /// No record exists under the key.
    Absent,
    /// The stored record has exactly this revision.
    Revision(u64),
}

/// One write inside a [`Commit`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Write the stream's meta record, if its current state matches `expect`.
    PutMeta { meta: StreamMeta, expect: Expect },
    /// Store a chunk of `(path, incarnation)`. The core guarantees the chunk
    /// starts at the stream's previous tail; the same commit carries the
    /// `PutMeta` that advances the tail past it.
    PutChunk { path: Arc<str>, incarnation: Arc<str>, chunk: Chunk },
    /// Write one producer's state for `(path, incarnation)`.
    PutProducer { path: Arc<str>, incarnation: Arc<str>, producer_id: String, state: ProducerState },
    /// Remove the stream's meta record (if its version matches) and, now or
    /// later, every chunk, producer and record of `(path, incarnation)`.
    /// Once committed the path reads as absent.
    DeleteStream { path: Arc<str>, incarnation: Arc<str>, expect_version: u64 },
    /// Write the record `key` of `(path, incarnation)`, if the stored one
    /// matches `expect`. `record.revision` is the revision written (the
    /// writer's choice: the expected one plus one).
    PutRecord { path: Arc<str>, incarnation: Arc<str>, key: String, record: Record, expect: RecordExpect },
}

/// A set of writes applied all-or-nothing: either every precondition holds and
/// every op is applied, or nothing changes and the commit fails with
/// [`crate::StoreError::Conflict`]. The core never puts two ops on the same
/// stream's meta in one commit (DynamoDB transactions forbid it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Commit {
    pub ops: Vec<Op>,
}

impl Commit {
    pub fn new() -> Self {
        Self::default()
    }

    /// A commit with room for `ops` ops (no regrowth while it is built).
    pub fn with_capacity(ops: usize) -> Self {
        Self { ops: Vec::with_capacity(ops) }
    }

    pub fn push(&mut self, op: Op) -> &mut Self {
        self.ops.push(op);
        self
    }

    /// Paths whose meta record this commit writes or deletes.
    pub fn meta_paths(&self) -> impl Iterator<Item = &str> {
        self.ops.iter().filter_map(|op| match op {
            Op::PutMeta { meta, .. } => Some(&*meta.path),
            Op::DeleteStream { path, .. } => Some(&**path),
            _ => None,
        })
    }
}

/// What live readers of a stream are told after a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailSignal {
    pub incarnation: Arc<str>,
    pub tail: u64,
    pub closed: bool,
    /// The stream was deleted (or expired); waiters should re-read and end.
    pub deleted: bool,
}

impl TailSignal {
    pub fn of(meta: &StreamMeta) -> Self {
        Self { incarnation: meta.incarnation.clone(), tail: meta.tail, closed: meta.closed, deleted: meta.soft_deleted }
    }

    /// Whether this signal may show a reader something beyond `seen` (the
    /// state it last read): progress within its incarnation (tail further,
    /// newly closed, newly deleted), or another incarnation altogether. A
    /// signal that lags what the reader already read is not news.
    pub fn is_news_to(&self, seen: &TailSignal) -> bool {
        if self.incarnation != seen.incarnation {
            return true;
        }
        self.tail > seen.tail || (self.closed && !seen.closed) || (self.deleted && !seen.deleted)
    }
}

/// An expiry alarm that fired: the host calls
/// `StreamService::run_expiry(path, incarnation)` for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiryDue {
    pub path: String,
    pub incarnation: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(inc: &str, tail: u64, closed: bool, deleted: bool) -> TailSignal {
        TailSignal { incarnation: inc.into(), tail, closed, deleted }
    }

    #[test]
    fn only_progress_or_another_incarnation_is_news() {
        let seen = sig("a", 10, false, false);
        assert!(sig("a", 11, false, false).is_news_to(&seen));
        assert!(sig("a", 10, true, false).is_news_to(&seen));
        assert!(sig("a", 10, false, true).is_news_to(&seen));
        assert!(!sig("a", 10, false, false).is_news_to(&seen));
        assert!(!sig("a", 9, false, false).is_news_to(&seen), "a lagging signal is not news");
        assert!(!sig("a", 10, true, true).is_news_to(&sig("a", 12, true, true)));
        assert!(sig("b", 0, false, false).is_news_to(&seen));
    }
}
