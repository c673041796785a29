//! # Stream processor runner
//!
//! A processor folds and reacts to an append-only, offset-addressed JSON
//! journal. This crate runs it: the same [`Processor`] contract is served by
//! the post-commit [`Runner`] and by the synchronous, pre-commit
//! [`InlineRunner`].
//!
//! ## The model
//!
//! **Processor.** A [`Contract`] (slug, reducer version, consumed types or
//! `*`) plus three optional hooks: `validate` (sync; inline only — an error
//! refuses the append), `reduce` (pure fold, identity by default) and
//! `process_event` (synchronous; gets the event — or `None` for the one
//! eventless caught-up call —, previous and new state, the [`Delivery`]
//! context and the two [`Effects`] doors). A pure fold implements only
//! `reduce`; a stateless processor only `process_event`.
//!
//! **Two effect doors.** `block_processor_while` is a strict per-event
//! barrier: event N+1 does not start until every blocker of N succeeded, one
//! after the other in registration order; failures retry with exponential
//! backoff for ever (a wedge shows as growing lag; only `skip_through` moves
//! past it). `run_in_background` overtakes: it delays no later event, and
//! its outcome is owned by the [`Recovery`] adapter — an alarm is armed
//! while any is owed, and if the process dies the alarm appends one
//! `stream/processor-revived` event, whose scan guarantees a caught-up turn
//! over the full fold.
//!
//! **Two cursors.** [`Progress`] is `{ reduction: { reducer_version,
//! reduced_through, state }, processing: { acknowledged_through,
//! cursor_revision } }` with `reduced_through <= acknowledged_through`. A
//! reducer-version change refolds (reduce only, no effect) through the ack;
//! it never re-drives effects. Commits are conditional writes fenced by
//! cursor revision and stream incarnation ([`check_fence`]).
//!
//! **One event at a time.** A transport frame is only a doorbell: the
//! runner reads the [`Journal`] from its completed cursor and handles each
//! entry in order — consumed events are reduced and processed, unconsumed
//! and malformed ones just advance both cursors (a malformed consumed event
//! earns exactly one `stream/processor-diagnostic`). `caught_up` marks the
//! last consumed event of a scan that reached the head; a scan without one
//! ends in a single eventless call. [`Delivery::idempotency_key`] is derived
//! from (key, source position, cursor revision, stream incarnation): the
//! same on crash retry, new after `reprocess_from` or stream re-creation.
//! Checkpoints follow a [`CheckpointCadence`] and only ever acknowledge
//! settled work.
//!
//! **Operator controls**, each appending one audit event: `re_reduce`,
//! `reprocess_from` (compare-and-swap on the cursor revision) and
//! `skip_through`.
//!
//! ## A pure fold
//!
//! ```
//! use ds_processor::examples::{Counter, CounterState};
//! use ds_processor::harness::World;
//! use ds_processor::RunnerConfig;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ds_processor::RunnerError> {
//! let world = World::new();
//! world.journal.append_event("counter/incremented", json!({ "by": 2 }));
//! world.journal.append_event("unrelated/event", json!({}));
//! world.journal.append_event("counter/incremented", json!({ "by": 5 }));
//!
//! let runner = world.open(Counter::new(), RunnerConfig::default()).await?;
//! runner.catch_up().await?;
//!
//! let snapshot = runner.snapshot();
//! assert_eq!(snapshot.state, CounterState { value: 7, changes: 2 });
//! assert_eq!(snapshot.reduced_through, 3);
//! # Ok(())
//! # }
//! ```
//!
//! ## An outbox with blocking, idempotent delivery
//!
//! ```
//! use ds_processor::examples::Outbox;
//! use ds_processor::harness::World;
//! use ds_processor::{EventBatch, RunnerConfig};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), ds_processor::RunnerError> {
//! let world = World::new();
//! // The sink fails the first attempt of every request: the runner backs
//! // off and retries under the same idempotency key.
//! world.sink.fail_when(|_key, _body, attempt| attempt == 1);
//! let first = world.journal.append_event("outbox/message-queued", json!({ "id": "m1", "body": "hi" }));
//! world.journal.append_event("outbox/message-queued", json!({ "id": "m2", "body": "there" }));
//!
//! let runner = world.open(Outbox::new(world.sink.clone()), RunnerConfig::default()).await?;
//! let callback = runner.open_event_batch_callback();
//! // The frame is only a doorbell; the runner reads the journal itself.
//! callback.process_event_batch(EventBatch::doorbell()).await?;
//!
//! assert_eq!(world.sink.labels(), ["outbox:m1", "outbox:m2"]);
//! assert_eq!(runner.runtime_state().acknowledged_through, first + 1);
//! # Ok(())
//! # }
//! ```

mod backoff;
mod cadence;
mod clock;
mod contract;
pub mod core_events;
mod delivery;
mod effects;
mod error;
mod event;
mod event_types;
mod fence;
mod idempotency;
mod incarnation;
mod inline;
mod ports;
mod processor;
mod progress;
mod runner;
mod sync_util;

#[cfg(feature = "test-util")]
pub mod examples;
#[cfg(feature = "test-util")]
pub mod harness;

pub use backoff::Backoff;
pub use cadence::CheckpointCadence;
pub use clock::TokioClock;
pub use contract::{Contract, ContractError, ANY_EVENT, CORE_EVENT_PREFIX};
pub use delivery::{Delivery, Phase};
pub use effects::{EffectError, EffectFuture, Effects};
pub use error::{RunnerError, WaitError};
pub use event::{Envelope, JournalEntry, Metadata, OutgoingEvent};
pub use fence::{check_fence, Expectation, Fence, FenceRejection};
pub use idempotency::{event_key, stable_key};
pub use incarnation::StreamIncarnation;
pub use inline::{Admission, AdmitError, InlineBlockingUnsupported, InlineRunner};
pub use ports::{
    Alarm, AppendOutcome, Clock, Journal, JournalError, ProgressError, ProgressStore, Recovery, RecoveryError,
};
pub use processor::{ProcessCall, Processor, Rejection};
pub use progress::{PendingAudit, Processing, Progress, Reduction, StoredProgress};
pub use runner::{
    Adapters, DrainReport, DriveReport, EventBatch, EventBatchCallback, Revival, Runner, RunnerConfig, RuntimeState,
    Snapshot,
};
