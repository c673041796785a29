//! Adapter traits: everything the runner needs from the outside world.
//!
//! Nothing here is AWS- or HTTP-specific. In-memory implementations live in
//! the test kit's `harness` (crate `ds-processor-testkit`), and every
//! implementation is held to these contracts by its `adapter_contract`
//! suite.

use async_trait::async_trait;
use bytes::Bytes;

use crate::event::JournalEntry;
use crate::fence::{Fence, FenceRejection};
use crate::incarnation::StreamIncarnation;
use crate::progress::StoredProgress;

/// A journal read or append failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum JournalError {
    /// The stream is no longer at the incarnation the caller is bound to: it
    /// was deleted, and maybe created again (`current`). Nothing was read or
    /// written. Retrying cannot help: whatever was bound to the old
    /// incarnation is done, and a runner must be opened anew to process the
    /// new one.
    #[error("stream incarnation changed: bound to {expected}, the stream is now {}", describe(current.as_ref()))]
    IncarnationChanged { expected: StreamIncarnation, current: Option<StreamIncarnation> },
    /// The stream does not exist.
    #[error("stream not found")]
    StreamNotFound,
    /// Retention dropped the entries after the read's position up to
    /// `earliest` (a trim, a State Protocol compaction): they cannot be read.
    /// A processor that consumes no event type loses nothing by going on
    /// from `earliest`; any other stops here (never skips events silently).
    #[error("the entries before position {earliest} were dropped by retention before this processor read them")]
    NotRetained { earliest: u64 },
    /// Transient or backend failure. May be retried; an append retried
    /// under the same key dedupes if the first attempt did land.
    #[error("journal unavailable: {0}")]
    Unavailable(String),
}

fn describe(current: Option<&StreamIncarnation>) -> String {
    current.map_or_else(|| "deleted".to_owned(), |c| format!("at {c}"))
}

/// A progress read or commit failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// Exhaustive on purpose: ds-http's error.rs maps every variant to a status
// code, and a new variant must fail that build rather than become a 500.
pub enum ProgressError {
    /// The conditional write refused the record (see [`crate::check_fence`]).
    #[error("progress commit fenced: {0}")]
    Rejected(#[from] FenceRejection),
    #[error("progress store unavailable: {0}")]
    Unavailable(String),
    /// The record is larger than the store keeps (the state must shrink);
    /// nothing was stored. Retrying cannot help.
    #[error("progress record too large: {0}")]
    TooLarge(String),
}

/// The recovery adapter failed to arm, disarm or handle an alarm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// Appending the revival event failed. `IncarnationChanged` means the
    /// alarm belongs to a stream life that is over: drop it, nothing is owed.
    #[error("recovery: {0}")]
    Journal(#[from] JournalError),
    /// The scheduler (or whatever keeps alarms) failed; may be retried.
    #[error("recovery unavailable: {0}")]
    Unavailable(String),
}

/// Result of an idempotent append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    pub position: u64,
    /// The key was seen before; nothing new was written.
    pub deduplicated: bool,
}

/// The stream a processor reads, and where it appends core events.
///
/// Incarnation-bound: every read and append names the stream incarnation
/// the caller is bound to, and fails with [`JournalError::IncarnationChanged`]
/// — atomically with the read or the write — if the stream is not at it. A
/// caller bound to a deleted (or deleted and re-created) stream therefore
/// never reads the new incarnation's entries and never appends to it.
///
/// Invariants: positions are supplied by the journal and strictly increase
/// within an incarnation (gaps allowed); `read_after` returns entries with
/// `position > after` in order, at most `limit`, empty only at the head;
/// `append` with a key already used in this incarnation returns the earlier
/// position and writes nothing, also when another instance over the same
/// storage used it, also when two instances append under one key at once
/// (the key is recorded atomically with the entry). Keys are scoped to one
/// incarnation: a re-created stream starts with none.
#[async_trait]
pub trait Journal: Send + Sync {
    /// The stream's current incarnation; [`JournalError::StreamNotFound`]
    /// if it does not exist.
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError>;
    /// Up to `limit` entries of `incarnation` after `after`; empty means at
    /// the head.
    async fn read_after(
        &self,
        incarnation: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, JournalError>;
    /// Appends `data` to `incarnation` unless `idempotency_key` was used
    /// before in it.
    async fn append(
        &self,
        incarnation: &StreamIncarnation,
        data: Bytes,
        idempotency_key: &str,
    ) -> Result<AppendOutcome, JournalError>;
    /// The trace context (a W3C `traceparent`) the append that wrote the
    /// entry at `position` left, if any: the step handling that entry
    /// continues its trace. Asked only while spans are exported; best
    /// effort, so any failure is `None` (the step then starts a new trace).
    async fn trace_context(&self, _incarnation: &StreamIncarnation, _position: u64) -> Option<String> {
        None
    }
}

/// Durable home of one processor's progress on one stream: one record per
/// (stream, incarnation, processor).
///
/// `read` returns the record of the named incarnation only — never another
/// incarnation's. `commit` writes the record of `fence.stream_incarnation`
/// as a conditional write: it applies [`crate::check_fence`] against that
/// same stored record atomically, and stores nothing on rejection. A commit
/// never reads or changes another incarnation's record, so a runner bound to
/// a dead incarnation cannot disturb the live one's progress (its journal
/// reads fail with [`JournalError::IncarnationChanged`]).
#[async_trait]
pub trait ProgressStore: Send + Sync {
    async fn read(&self, incarnation: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError>;
    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError>;
}

/// A fired (or pending) one-shot revival alarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alarm {
    pub slug: String,
    /// The stream life the alarm was armed for; its revival event goes there
    /// (and nowhere, if the stream was re-created since).
    pub incarnation: StreamIncarnation,
    /// Unique per arming, across every instance over the same storage: the
    /// revival event is keyed by it, so a redelivered alarm dedupes while a
    /// later arming revives again.
    pub token: String,
    pub at_ms: u64,
}

/// Keeps background work's outcome from being lost with the process.
///
/// The runner arms the alarm before starting background work and disarms it
/// when all owed work succeeded; a drain arms it for blocking work it left
/// unfinished. If the process dies first, the alarm fires and `handle_alarm`
/// appends exactly one `stream/processor-revived` event (keyed by the
/// alarm's token, so redelivered alarms dedupe), which wakes delivery and
/// guarantees a caught-up turn over the full fold.
///
/// There is at most one alarm per (stream, processor slug), whichever
/// instance armed it: arming again replaces it (new token, new time).
#[async_trait]
pub trait Recovery: Send + Sync {
    /// Arms (or re-arms, replacing) the one-shot alarm of `slug` at `at_ms`
    /// for the stream's `incarnation`.
    async fn arm(&self, slug: &str, incarnation: &StreamIncarnation, at_ms: u64) -> Result<(), RecoveryError>;
    /// Cancels the pending alarm of `slug`, if any.
    async fn disarm(&self, slug: &str) -> Result<(), RecoveryError>;
    /// Handles a fired alarm; see [`crate::core_events::append_revival`].
    async fn handle_alarm(&self, alarm: &Alarm) -> Result<AppendOutcome, RecoveryError>;
}
