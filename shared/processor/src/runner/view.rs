//! What the runner publishes to readers that do not hold the work lock.
//!
//! The snapshot and the ack change only when a progress commit lands (or a
//! record is loaded), so a failed commit leaves them exactly as they were.
//! In-memory cursors and retry information are published as they move.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::watch;

use super::working::Working;
use crate::delivery::Phase;
use crate::sync_util::lock;

/// The reduction as last persisted: pinned to `reduced_through`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot<S> {
    pub state: S,
    pub reduced_through: u64,
    pub reducer_version: String,
}

/// Operational view of a runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeState {
    /// Durable ack.
    pub acknowledged_through: u64,
    /// In memory: every event through here had its blocking work succeed.
    pub completed_through: u64,
    /// In memory: the working fold's position.
    pub reduced_through: u64,
    pub cursor_revision: u64,
    pub highest_observed_position: u64,
    /// `highest_observed_position - acknowledged_through`; a wedge shows as
    /// this growing.
    pub lag: u64,
    /// Position whose work is running, if any.
    pub in_flight: Option<u64>,
    /// Failed attempts of the in-flight work so far.
    pub retry_count: u32,
    pub last_error: Option<String>,
    pub pending_background: usize,
    pub phase: Phase,
    pub drained: bool,
}

/// Outcome of one drive (`catch_up` or a transport frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriveReport {
    pub acknowledged_through: u64,
    pub completed_through: u64,
}

/// Outcome of [`crate::Runner::drain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReport {
    pub acknowledged_through: u64,
    /// Settled work past the ack was checkpointed.
    pub flushed: bool,
    /// The deadline passed before the in-flight step let go.
    pub timed_out: bool,
    /// What brings back the work the drain left unfinished.
    pub revival: Revival,
}

/// Whether work a drain left unfinished (an event whose blocking work was
/// interrupted, events observed but never reached, settled work whose
/// checkpoint failed) runs again without waiting for a new append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revival {
    /// Everything observed was acknowledged; nothing to revive.
    NotNeeded,
    /// The revival alarm is armed for `at_ms`; when it fires, its revival
    /// event wakes the processor, which resumes at its ack.
    Armed { at_ms: u64 },
    /// Work was left unfinished and no alarm covers it (no recovery adapter,
    /// arming failed, or the deadline passed first). The host must make the
    /// processor run again itself, e.g. by failing the invocation so its
    /// event source redelivers.
    Uncovered { reason: String },
}

impl Revival {
    pub fn is_armed(&self) -> bool {
        matches!(self, Self::Armed { .. })
    }

    /// Nothing unfinished is left without a way back.
    pub fn covered(&self) -> bool {
        !matches!(self, Self::Uncovered { .. })
    }
}

/// Broadcast to `wait_until_event` callers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Signals {
    pub acknowledged: u64,
    pub journal_failures: u64,
    pub last_journal_error: Option<String>,
}

struct Published<S> {
    snapshot: Snapshot<S>,
    acknowledged: u64,
    revision: u64,
    completed: u64,
    reduced: u64,
    in_flight: Option<u64>,
    retry_count: u32,
    last_error: Option<String>,
    live: bool,
    drained: bool,
}

pub(crate) struct View<S> {
    published: Mutex<Published<S>>,
    highest_observed: AtomicU64,
    signals: watch::Sender<Signals>,
}

impl<S: Clone> View<S> {
    pub(crate) fn new(w: &Working<S>) -> Self {
        let (signals, _) = watch::channel(Signals { acknowledged: w.acknowledged, ..Signals::default() });
        Self {
            published: Mutex::new(Published {
                snapshot: snapshot_of(w),
                acknowledged: w.acknowledged,
                revision: w.revision,
                completed: w.completed,
                reduced: w.reduced,
                in_flight: None,
                retry_count: 0,
                last_error: None,
                live: w.live,
                drained: false,
            }),
            highest_observed: AtomicU64::new(w.completed),
            signals,
        }
    }

    /// Publishes what is now durable (after a commit, or a load).
    pub(crate) fn publish_durable(&self, w: &Working<S>) {
        {
            let mut p = lock(&self.published);
            p.snapshot = snapshot_of(w);
            p.acknowledged = w.acknowledged;
            p.revision = w.revision;
            p.completed = w.completed;
            p.reduced = w.reduced;
            p.live = w.live;
        }
        self.signals.send_modify(|s| s.acknowledged = w.acknowledged);
    }

    /// Publishes in-memory progress (an event completed).
    pub(crate) fn note_progress(&self, w: &Working<S>) {
        let mut p = lock(&self.published);
        p.completed = w.completed;
        p.reduced = w.reduced;
        p.live = w.live;
        p.in_flight = None;
        p.retry_count = 0;
    }

    pub(crate) fn note_in_flight(&self, position: Option<u64>) {
        lock(&self.published).in_flight = position;
    }

    pub(crate) fn note_retry(&self, attempt: u32, message: String) {
        let mut p = lock(&self.published);
        p.retry_count = attempt;
        p.last_error = Some(message);
    }

    pub(crate) fn clear_retry(&self) {
        lock(&self.published).retry_count = 0;
    }

    pub(crate) fn note_error(&self, message: String) {
        lock(&self.published).last_error = Some(message);
    }

    pub(crate) fn note_journal_failure(&self, message: String) {
        self.note_error(message.clone());
        self.signals.send_modify(|s| {
            s.journal_failures += 1;
            s.last_journal_error = Some(message);
        });
    }

    pub(crate) fn mark_drained(&self) {
        lock(&self.published).drained = true;
    }

    pub(crate) fn observe(&self, position: u64) {
        self.highest_observed.fetch_max(position, Ordering::AcqRel);
    }

    pub(crate) fn highest_observed(&self) -> u64 {
        self.highest_observed.load(Ordering::Acquire)
    }

    pub(crate) fn snapshot(&self) -> Snapshot<S> {
        lock(&self.published).snapshot.clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Signals> {
        self.signals.subscribe()
    }

    pub(crate) fn runtime(&self, pending_background: usize) -> RuntimeState {
        let p = lock(&self.published);
        let highest = self.highest_observed().max(p.completed);
        RuntimeState {
            acknowledged_through: p.acknowledged,
            completed_through: p.completed,
            reduced_through: p.reduced,
            cursor_revision: p.revision,
            highest_observed_position: highest,
            lag: highest.saturating_sub(p.acknowledged),
            in_flight: p.in_flight,
            retry_count: p.retry_count,
            last_error: p.last_error.clone(),
            pending_background,
            phase: if p.live { Phase::Live } else { Phase::CatchingUp },
            drained: p.drained,
        }
    }
}

fn snapshot_of<S: Clone>(w: &Working<S>) -> Snapshot<S> {
    Snapshot { state: w.state.clone(), reduced_through: w.reduced, reducer_version: w.reducer_version.clone() }
}
