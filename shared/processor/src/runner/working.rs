//! The driver's private cursors and fold, and how they are loaded.

use crate::cadence::CadenceTracker;
use crate::contract::Contract;
use crate::incarnation::StreamIncarnation;
use crate::ports::{ProgressError, ProgressStore};
use crate::processor::Processor;
use crate::progress::{PendingAudit, Processing, Progress, Reduction, StoredProgress};
use crate::RunnerError;

/// Owned by whoever holds the work lock.
///
/// Invariants: `reduced <= completed` and `acknowledged <= completed`;
/// `state` is the fold through `reduced`. `reduced < completed` only while a
/// refold is in progress.
#[derive(Debug, Clone)]
pub(crate) struct Working<S> {
    pub incarnation: StreamIncarnation,
    pub revision: u64,
    /// Durable ack (last landed commit).
    pub acknowledged: u64,
    /// Settled in memory; what the next checkpoint acknowledges.
    pub completed: u64,
    pub reduced: u64,
    pub state: S,
    pub reducer_version: String,
    /// A commit was fenced: reload before doing anything else.
    pub needs_resync: bool,
    /// The stored fold is unusable (version changed, state undecodable):
    /// re-reduce with this reason before processing.
    pub pending_re_reduce: Option<String>,
    /// Audit event of a landed change not yet appended; every commit carries
    /// it until it is.
    pub pending_audit: Option<PendingAudit>,
    /// Reached the head at least once since load or rewind.
    pub live: bool,
    /// The last checkpoint failed: retry at the next moment whatever the
    /// cadence, or settled work could stay unacknowledged while idle.
    pub retry_commit: bool,
    pub cadence: CadenceTracker,
}

impl<S: Clone> Working<S> {
    /// The record a checkpoint of this working state writes.
    pub(crate) fn to_record(&self) -> Result<StoredProgress, RunnerError>
    where
        S: serde::Serialize,
    {
        let state = serde_json::to_value(&self.state).map_err(|e| RunnerError::StateCodec(e.to_string()))?;
        Ok(StoredProgress {
            stream_incarnation: self.incarnation.clone(),
            progress: Progress {
                reduction: Reduction {
                    reducer_version: self.reducer_version.clone(),
                    reduced_through: self.reduced,
                    state,
                },
                processing: Some(Processing { acknowledged_through: self.completed, cursor_revision: self.revision }),
            },
            pending_audit: self.pending_audit.clone(),
        })
    }

    /// Drops the fold back to the initial state (a refold rebuilds it).
    pub(crate) fn reset_reduction(&mut self, initial: S, reducer_version: &str) {
        self.state = initial;
        self.reduced = 0;
        self.reducer_version = reducer_version.to_owned();
    }
}

/// The working state of `incarnation` from its stored record; a fresh one
/// (everything at 0, revision 0) if there is none yet.
pub(crate) async fn load<P: Processor>(
    processor: &P,
    contract: &Contract,
    store: &dyn ProgressStore,
    incarnation: &StreamIncarnation,
    now: u64,
) -> Result<Working<P::State>, RunnerError> {
    let stored = store.read(incarnation).await?;
    let mut w = Working {
        incarnation: incarnation.clone(),
        revision: 0,
        acknowledged: 0,
        completed: 0,
        reduced: 0,
        state: processor.initial_state(),
        reducer_version: contract.reducer_version.clone(),
        needs_resync: false,
        pending_re_reduce: None,
        pending_audit: None,
        live: false,
        retry_commit: false,
        cadence: CadenceTracker::new(now),
    };
    let Some(record) = stored else {
        return Ok(w);
    };
    if record.stream_incarnation != *incarnation {
        // A store must only hand out the record of the incarnation asked for.
        return Err(ProgressError::Unavailable(format!(
            "the progress store returned a record of incarnation {} when asked for {incarnation}",
            record.stream_incarnation
        ))
        .into());
    }
    let acknowledged = record.progress.acknowledged_through();
    let revision = record.progress.cursor_revision();
    let reduction = record.progress.reduction;
    w.pending_audit = record.pending_audit;
    w.revision = revision;
    w.acknowledged = acknowledged;
    w.completed = acknowledged;
    if reduction.reducer_version != contract.reducer_version {
        w.pending_re_reduce =
            Some(format!("reducer version changed from {} to {}", reduction.reducer_version, contract.reducer_version));
        return Ok(w);
    }
    match serde_json::from_value::<P::State>(reduction.state) {
        Ok(state) => {
            w.state = state;
            w.reduced = reduction.reduced_through.min(acknowledged);
        }
        Err(e) => {
            w.pending_re_reduce =
                Some(format!("stored state of reducer version {} no longer decodes: {e}", reduction.reducer_version));
        }
    }
    Ok(w)
}
