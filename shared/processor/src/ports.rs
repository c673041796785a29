//! Adapter traits: everything the runner needs from the outside world.
//!
//! Nothing here is AWS- or HTTP-specific. In-memory implementations live in
//! [`crate::harness`] (feature `test-util`).

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;

use crate::event::JournalEntry;
use crate::fence::{Fence, FenceRejection};
use crate::incarnation::StreamIncarnation;
use crate::progress::StoredProgress;

/// A journal read or append failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal: {0}")]
pub struct JournalError(pub String);

/// A progress read or commit failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgressError {
    /// The conditional write refused the record (see [`crate::check_fence`]).
    #[error("progress commit fenced: {0}")]
    Rejected(#[from] FenceRejection),
    #[error("progress store unavailable: {0}")]
    Unavailable(String),
}

/// The recovery adapter failed to arm, disarm or handle an alarm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("recovery: {0}")]
pub struct RecoveryError(pub String);

/// Result of an idempotent append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    pub position: u64,
    /// The key was seen before; nothing new was written.
    pub deduplicated: bool,
}

/// The stream a processor reads, and where it appends core events.
///
/// Invariants: positions are supplied by the journal and strictly increase
/// (gaps allowed); `read_after` returns entries with `position > after` in
/// order; `append` with a key already used returns the earlier position and
/// writes nothing.
#[async_trait]
pub trait Journal: Send + Sync {
    /// The stream's current incarnation.
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError>;
    /// Up to `limit` entries after `after`; empty means at the head.
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<JournalEntry>, JournalError>;
    /// Appends `data` unless `idempotency_key` was used before.
    async fn append(&self, data: Bytes, idempotency_key: &str) -> Result<AppendOutcome, JournalError>;
}

/// Durable home of one (stream, processor) progress record.
///
/// `commit` is a conditional write: it must apply [`crate::check_fence`]
/// against the stored record atomically, and store nothing on rejection.
#[async_trait]
pub trait ProgressStore: Send + Sync {
    async fn read(&self) -> Result<Option<StoredProgress>, ProgressError>;
    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError>;
}

/// A fired (or pending) one-shot revival alarm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alarm {
    pub slug: String,
    /// Distinguishes armings; the revival event is keyed by it.
    pub token: String,
    pub at_ms: u64,
}

/// Keeps background work's outcome from being lost with the process.
///
/// The runner arms the alarm before starting background work and disarms it
/// when all owed work succeeded. If the process dies first, the alarm fires
/// and `handle_alarm` appends exactly one `stream/processor-revived` event
/// (keyed by the alarm, so redelivered alarms dedupe), which wakes delivery
/// and guarantees a caught-up turn over the full fold.
#[async_trait]
pub trait Recovery: Send + Sync {
    /// Arms (or re-arms, replacing) the one-shot alarm of `slug` at `at_ms`.
    async fn arm(&self, slug: &str, at_ms: u64) -> Result<(), RecoveryError>;
    /// Cancels the pending alarm of `slug`, if any.
    async fn disarm(&self, slug: &str) -> Result<(), RecoveryError>;
    /// Handles a fired alarm; see [`crate::core_events::append_revival`].
    async fn handle_alarm(&self, alarm: &Alarm) -> Result<AppendOutcome, RecoveryError>;
}

/// Time, injected so tests run on a manual or paused clock.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch (alarm times are absolute).
    fn now_ms(&self) -> u64;
    /// Resolves once `now_ms() >= deadline_ms`.
    fn sleep_until(&self, deadline_ms: u64) -> BoxFuture<'static, ()>;
}
