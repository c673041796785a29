//! The wire callback a stream host drives the runner through.

use super::view::DriveReport;
use super::Runner;
use crate::error::RunnerError;
use crate::event::JournalEntry;
use crate::processor::Processor;

/// A transport frame from the stream: a wake, nothing more. Its entries only
/// tell the runner how far the stream has been seen; the runner reads the
/// journal itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventBatch {
    pub entries: Vec<JournalEntry>,
}

impl EventBatch {
    pub fn new(entries: Vec<JournalEntry>) -> Self {
        Self { entries }
    }

    /// An empty frame: a pure wake.
    pub fn doorbell() -> Self {
        Self::default()
    }

    pub fn highest_position(&self) -> Option<u64> {
        self.entries.iter().map(|e| e.position).max()
    }
}

/// `{ checkpoint_offset, process_event_batch }`.
pub struct EventBatchCallback<P: Processor> {
    /// Acknowledged-through at the time the callback was opened: where the
    /// host starts delivering frames from.
    pub checkpoint_offset: u64,
    runner: Runner<P>,
}

impl<P: Processor> EventBatchCallback<P> {
    pub(crate) fn new(runner: Runner<P>) -> Self {
        Self { checkpoint_offset: runner.runtime_state().acknowledged_through, runner }
    }

    /// Rings the doorbell: records the frame's highest position, then drives
    /// to the head. Frames may be split, merged, reordered, duplicated or
    /// empty; only the journal decides what is processed.
    pub async fn process_event_batch(&self, batch: EventBatch) -> Result<DriveReport, RunnerError> {
        if let Some(highest) = batch.highest_position() {
            self.runner.inner.view.observe(highest);
        }
        self.runner.inner.drive().await
    }

    /// The current durable ack.
    pub fn current_checkpoint_offset(&self) -> u64 {
        self.runner.runtime_state().acknowledged_through
    }
}
