//! # Stream processor runner
//!
//! Where this crate sits in the processor plane, which reads left to right:
//! runner (`ds-processor`, **this crate**) → adapters (`ds-processor-host`) → hosts
//! (`ds-processor-local` in the server, `ds-processor-aws` in the Lambda
//! processor function) → built-in kinds and their TOML (`ds-processors-builtin`).
//! Test support for all of them: `ds-processor-testkit` (tests/processor-testkit).
//!
//! A processor folds and reacts to an append-only, offset-addressed JSON
//! journal. This crate runs it: the same [`Processor`] contract is served by
//! the post-commit [`Runner`] and by the synchronous, pre-commit
//! [`InlineRunner`].
//!
//! ## The model
//!
//! **Processor.** A [`Contract`] (slug, reducer version, consumed types or
//! `*` — best taken from the event enum with [`Contract::for_events`], and
//! checked against it when a runner is built), an `initial_state`, and
//! three optional hooks: `validate` (sync; inline only — an error refuses
//! the append), `reduce` (pure fold, identity by default) and
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
//! cursor revision ([`check_fence`]), one record per stream incarnation.
//!
//! **One stream life.** A runner binds to the stream's incarnation when it
//! opens; every journal read and append names it. A stream deleted and
//! created again fails them with [`JournalError::IncarnationChanged`]: the
//! old runner never reads the new life, and a runner opened anew starts it
//! from the beginning.
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
//! Checkpoints follow a [`CheckpointCadence`], only ever acknowledge
//! settled work, and always flush it when a scan reaches the head.
//!
//! **Stopping.** [`Runner::drain`] interrupts in-flight blocking work (its
//! event stays unacknowledged), checkpoints what settled, and arms the
//! revival alarm if anything observed is still unacknowledged; its
//! [`DrainReport`] says whether unfinished work has a way back
//! ([`Revival`]), so a host never has to inspect the lag.
//!
//! **Operator controls**, each leaving exactly one audit event for a change
//! that landed and none for one that did not: `re_reduce`, `reprocess_from`
//! (compare-and-swap on the cursor revision) and `skip_through`. The audit
//! event rides inside the committing record ([`PendingAudit`]) and is
//! appended after the commit landed; a crash in between leaves it in the
//! record, and the next runner to load it appends it.
//!
//! **Adapters.** Hosts implement [`Journal`], [`ProgressStore`] and
//! [`Recovery`] over their storage and check them with the adapter contract
//! suite (crate `ds-processor-testkit`, module `adapter_contract`).
//!
//! ## A runner over your own adapters
//!
//! Nothing here needs the test kit: any implementation of the port
//! traits will do. These keep one stream in memory; a real host talks
//! to its database in the same shape (the incarnation check, the key lookup
//! and the write of an append are one atomic step; a progress commit applies
//! [`check_fence`] to the stored record in the same conditional write).
//!
//! ```
//! use std::sync::{Arc, Mutex};
//!
//! use async_trait::async_trait;
//! use bytes::Bytes;
//! use ds_processor::core_events::append_revival;
//! use ds_processor::{
//!     check_fence, Adapters, Alarm, AppendOutcome, Contract, Envelope, Fence, Journal, JournalEntry,
//!     JournalError, OutgoingEvent, Processor, ProgressError, ProgressStore, Recovery, RecoveryError,
//!     Runner, RunnerConfig, StoredProgress, StreamIncarnation,
//! };
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! // The processor: sums `tally/added`.
//! #[derive(Deserialize)]
//! #[serde(tag = "type", content = "payload")]
//! enum TallyEvent {
//!     #[serde(rename = "tally/added")]
//!     Added { n: i64 },
//! }
//!
//! struct Tally(Contract);
//!
//! impl Processor for Tally {
//!     type State = i64;
//!     type Event = TallyEvent;
//!     fn contract(&self) -> &Contract {
//!         &self.0
//!     }
//!     fn initial_state(&self) -> i64 {
//!         0
//!     }
//!     fn reduce(&self, sum: i64, event: &Envelope<TallyEvent>) -> i64 {
//!         let TallyEvent::Added { n } = event.event;
//!         sum + n
//!     }
//! }
//!
//! // The adapters.
//! fn life() -> StreamIncarnation {
//!     StreamIncarnation::new("life-1")
//! }
//!
//! fn bound(incarnation: &StreamIncarnation) -> Result<(), JournalError> {
//!     if *incarnation == life() {
//!         Ok(())
//!     } else {
//!         Err(JournalError::IncarnationChanged { expected: incarnation.clone(), current: Some(life()) })
//!     }
//! }
//!
//! #[derive(Default)]
//! struct VecJournal(Mutex<Vec<(String, JournalEntry)>>);
//!
//! #[async_trait]
//! impl Journal for VecJournal {
//!     async fn incarnation(&self) -> Result<StreamIncarnation, JournalError> {
//!         Ok(life())
//!     }
//!     async fn read_after(
//!         &self,
//!         incarnation: &StreamIncarnation,
//!         after: u64,
//!         limit: usize,
//!     ) -> Result<Vec<JournalEntry>, JournalError> {
//!         bound(incarnation)?;
//!         let entries = self.0.lock().unwrap();
//!         Ok(entries.iter().map(|(_, e)| e).filter(|e| e.position > after).take(limit).cloned().collect())
//!     }
//!     async fn append(
//!         &self,
//!         incarnation: &StreamIncarnation,
//!         data: Bytes,
//!         key: &str,
//!     ) -> Result<AppendOutcome, JournalError> {
//!         bound(incarnation)?;
//!         let mut entries = self.0.lock().unwrap();
//!         if let Some((_, entry)) = entries.iter().find(|(k, _)| k == key) {
//!             return Ok(AppendOutcome { position: entry.position, deduplicated: true });
//!         }
//!         let position = entries.len() as u64 + 1;
//!         entries.push((key.to_owned(), JournalEntry::new(position, data)));
//!         Ok(AppendOutcome { position, deduplicated: false })
//!     }
//! }
//!
//! #[derive(Default)]
//! struct OneRecord(Mutex<Option<StoredProgress>>);
//!
//! #[async_trait]
//! impl ProgressStore for OneRecord {
//!     async fn read(&self, incarnation: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError> {
//!         let stored = self.0.lock().unwrap();
//!         Ok(stored.clone().filter(|r| r.stream_incarnation == *incarnation))
//!     }
//!     async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError> {
//!         let mut stored = self.0.lock().unwrap();
//!         check_fence(stored.as_ref(), record, fence)?;
//!         *stored = Some(record.clone());
//!         Ok(())
//!     }
//! }
//!
//! struct Alarms {
//!     journal: Arc<VecJournal>,
//!     armed: Mutex<Vec<Alarm>>,
//! }
//!
//! #[async_trait]
//! impl Recovery for Alarms {
//!     async fn arm(&self, slug: &str, incarnation: &StreamIncarnation, at_ms: u64) -> Result<(), RecoveryError> {
//!         let mut armed = self.armed.lock().unwrap();
//!         armed.retain(|a| a.slug != slug);
//!         let token = format!("{slug}-{at_ms}-{}", armed.len());
//!         armed.push(Alarm { slug: slug.into(), incarnation: incarnation.clone(), token, at_ms });
//!         Ok(())
//!     }
//!     async fn disarm(&self, slug: &str) -> Result<(), RecoveryError> {
//!         self.armed.lock().unwrap().retain(|a| a.slug != slug);
//!         Ok(())
//!     }
//!     async fn handle_alarm(&self, alarm: &Alarm) -> Result<AppendOutcome, RecoveryError> {
//!         Ok(append_revival(self.journal.as_ref(), alarm).await?)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = Arc::new(VecJournal::default());
//! let recovery = Arc::new(Alarms { journal: journal.clone(), armed: Mutex::default() });
//! let adapters = Adapters::new(journal.clone(), Arc::new(OneRecord::default()), recovery);
//! let tally = Tally(Contract::for_events::<TallyEvent>("tally", "1")?);
//! let runner = Runner::open(tally, adapters, RunnerConfig::default()).await?;
//!
//! for (n, key) in [(2, "a"), (5, "b"), (5, "b")] {
//!     let event = OutgoingEvent::new("tally/added", json!({ "n": n }));
//!     journal.append(&life(), event.encode(), key).await?;
//! }
//! runner.catch_up().await?;
//! assert_eq!(runner.snapshot().state, 7);
//!
//! let report = runner.drain(u64::MAX).await;
//! assert_eq!(report.acknowledged_through, 2);
//! assert!(report.revival.covered());
//! # Ok(())
//! # }
//! ```
//!
//! ## A pure fold
//!
//! ```
//! use ds_processor_testkit::examples::{Counter, CounterState};
//! use ds_processor_testkit::harness::World;
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
//! use ds_processor_testkit::examples::Outbox;
//! use ds_processor_testkit::harness::World;
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
mod time;

pub use backoff::Backoff;
pub use cadence::{CheckpointCadence, SKIPPED_CHECKPOINT_BYTES, SKIPPED_CHECKPOINT_ENTRIES};
pub use contract::{Contract, ContractError, ANY_EVENT, CORE_EVENT_PREFIX};
pub use delivery::{Delivery, Phase};
pub use ds_clock::Clock;
pub use effects::{EffectError, EffectFuture, Effects};
pub use error::{RunnerError, WaitError};
pub use event::{Envelope, JournalEntry, Metadata, OutgoingEvent};
pub use fence::{check_fence, Expectation, Fence, FenceRejection};
pub use idempotency::{event_key, stable_key};
pub use incarnation::StreamIncarnation;
pub use inline::{admit_entries, fold_entries, Admission, AdmitError, InlineBlockingUnsupported, InlineRunner};
pub use ports::{Alarm, AppendOutcome, Journal, JournalError, ProgressError, ProgressStore, Recovery, RecoveryError};
pub use processor::{ProcessCall, Processor, Rejection};
pub use progress::{PendingAudit, Processing, Progress, Reduction, StoredProgress};
pub use runner::{
    Adapters, DrainReport, DriveReport, EventBatch, EventBatchCallback, Revival, Runner, RunnerConfig, RuntimeState,
    Snapshot,
};
