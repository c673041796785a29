//! The post-commit runner: reads a journal one event at a time, folds,
//! processes, and persists the two-cursor progress.

mod background;
mod callback;
mod commit;
mod controls;
mod drive;
mod gate;
mod lifecycle;
mod refold;
mod scan;
mod settle;
mod view;
mod working;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use callback::{EventBatch, EventBatchCallback};
pub use view::{DrainReport, DriveReport, Revival, RuntimeState, Snapshot};

use crate::backoff::Backoff;
use crate::cadence::CheckpointCadence;
use crate::contract::Contract;
use crate::error::{RunnerError, WaitError};
use crate::fence::FenceRejection;
use crate::incarnation::StreamIncarnation;
use crate::ports::{Journal, JournalError, ProgressStore, Recovery};
use crate::processor::Processor;
use ds_clock::Clock;

use background::BackgroundWork;
use gate::PreemptGate;
use view::View;
use working::Working;

/// Tunables of a runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerConfig {
    pub cadence: CheckpointCadence,
    /// Delays between attempts of failing blocking work (and of the runner's
    /// own appends and alarm arming, which sit on the same barrier).
    pub backoff: Backoff,
    /// Journal page size for scans and refolds.
    pub page_size: usize,
    /// How far in the future the revival alarm is armed.
    pub revival_delay_ms: u64,
    /// How many fenced commits one drive absorbs (by reloading) before it
    /// reports contention.
    pub max_resyncs: u32,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            cadence: CheckpointCadence::EveryEvent,
            backoff: Backoff::default(),
            page_size: 256,
            revival_delay_ms: 30_000,
            max_resyncs: 64,
        }
    }
}

/// The runner's view of the outside world: any implementations of the port
/// traits. Build with [`Adapters::new`] (the crate docs show a complete
/// runner over hand-written adapters).
#[derive(Clone)]
pub struct Adapters {
    pub journal: Arc<dyn Journal>,
    pub progress: Arc<dyn ProgressStore>,
    /// Owns background work's outcome and revives work a drain left
    /// unfinished. Without it, both wait for the next append.
    pub recovery: Option<Arc<dyn Recovery>>,
    pub clock: Clock,
}

impl Adapters {
    /// Adapters over `journal`, `progress` and `recovery`, on the wall clock
    /// as tokio advances it ([`Clock::tokio`]: paused test time moves it).
    pub fn new(journal: Arc<dyn Journal>, progress: Arc<dyn ProgressStore>, recovery: Arc<dyn Recovery>) -> Self {
        Self { journal, progress, recovery: Some(recovery), clock: Clock::tokio() }
    }

    /// Adapters without recovery, for a processor with no background work
    /// whose host re-drives it itself: a crash then loses background work's
    /// outcome, and a drain reports unfinished work as
    /// [`Revival::Uncovered`].
    pub fn without_recovery(journal: Arc<dyn Journal>, progress: Arc<dyn ProgressStore>) -> Self {
        Self { journal, progress, recovery: None, clock: Clock::tokio() }
    }

    /// Another clock (a manual one in tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}

/// Why a step stopped before completing its event.
#[derive(Debug)]
pub(crate) enum Halt {
    /// An operator control wants the work lock.
    Preempted,
    Drained,
    /// A commit was fenced; the working state must be reloaded.
    Fenced(FenceRejection),
    Failed(RunnerError),
}

impl From<RunnerError> for Halt {
    fn from(e: RunnerError) -> Self {
        Self::Failed(e)
    }
}

impl From<JournalError> for Halt {
    fn from(e: JournalError) -> Self {
        Self::Failed(e.into())
    }
}

impl Halt {
    /// For operations that are not preemptible (controls, open).
    pub(crate) fn into_error(self) -> RunnerError {
        match self {
            Self::Preempted | Self::Drained => RunnerError::Drained,
            Self::Fenced(r) => RunnerError::Progress(r.into()),
            Self::Failed(e) => e,
        }
    }
}

pub(crate) struct Inner<P: Processor> {
    pub(crate) processor: P,
    pub(crate) contract: Contract,
    /// The stream life this runner is bound to, read once at open. Every
    /// journal read and append names it, so a re-created stream fails them
    /// with `IncarnationChanged` instead of being read.
    pub(crate) incarnation: StreamIncarnation,
    pub(crate) config: RunnerConfig,
    pub(crate) journal: Arc<dyn Journal>,
    pub(crate) store: Arc<dyn ProgressStore>,
    pub(crate) clock: Clock,
    pub(crate) background: Arc<BackgroundWork>,
    pub(crate) work: tokio::sync::Mutex<Working<P::State>>,
    pub(crate) view: View<P::State>,
    pub(crate) gate: PreemptGate,
    pub(crate) shutdown: CancellationToken,
}

impl<P: Processor> Drop for Inner<P> {
    /// Dropping the last handle is the process dying: background work goes
    /// with it, and the armed alarm (if any) is what brings it back.
    fn drop(&mut self) {
        self.background.abort_all();
    }
}

/// A stream processor runner. Cheap to clone (one shared instance).
///
/// Must be used inside a tokio runtime (background work is spawned).
pub struct Runner<P: Processor> {
    inner: Arc<Inner<P>>,
}

impl<P: Processor> Clone for Runner<P> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<P: Processor> Runner<P> {
    /// Loads progress and brings the fold up to the ack (re-reducing, with
    /// an audit event, if the reducer version changed). Makes no
    /// `process_event` call.
    pub async fn open(processor: P, adapters: Adapters, config: RunnerConfig) -> Result<Self, RunnerError> {
        lifecycle::open(processor, adapters, config).await.map(|inner| Self { inner })
    }

    /// The wire callback: `{ checkpoint_offset, process_event_batch }`.
    pub fn open_event_batch_callback(&self) -> EventBatchCallback<P> {
        EventBatchCallback::new(self.clone())
    }

    /// Processes everything up to the head.
    pub async fn catch_up(&self) -> Result<DriveReport, RunnerError> {
        self.inner.drive().await
    }

    /// Resolves once `acknowledged_through >= position`; rejects after
    /// `timeout_ms` or when a journal read fails meanwhile.
    pub async fn wait_until_event(&self, position: u64, timeout_ms: u64) -> Result<(), WaitError> {
        self.inner.wait_until_event(position, timeout_ms).await
    }

    /// The persisted reduction.
    pub fn snapshot(&self) -> Snapshot<P::State> {
        self.inner.view.snapshot()
    }

    pub fn runtime_state(&self) -> RuntimeState {
        self.inner.view.runtime(self.inner.background.pending())
    }

    /// The stream life this runner processes (fixed at open).
    pub fn incarnation(&self) -> &StreamIncarnation {
        &self.inner.incarnation
    }

    /// Stops cleanly before `deadline_ms`: cancels in-flight blocking work
    /// (its event stays unacknowledged), checkpoints settled work, and arms
    /// the revival alarm if anything observed is still unacknowledged (an
    /// armed alarm for background work stays armed). The report's
    /// [`Revival`] says whether unfinished work has a way back; the host
    /// need not inspect the lag. Later drives return [`RunnerError::Drained`].
    pub async fn drain(&self, deadline_ms: u64) -> DrainReport {
        self.inner.drain(deadline_ms).await
    }

    /// Rebuilds the reduction through the ack, reduce only; appends one
    /// `stream/processor-re-reduced` audit event.
    pub async fn re_reduce(&self, reason: &str) -> Result<(), RunnerError> {
        self.inner.re_reduce(reason).await
    }

    /// Compare-and-swap rewind: ack = `position - 1`, revision + 1, fold
    /// rebuilt; later drives reduce and process again from `position` under
    /// new idempotency keys. Appends one `stream/processor-reprocessed` audit
    /// event. With a wrong `expected_cursor_revision` nothing changes.
    pub async fn reprocess_from(
        &self,
        position: u64,
        expected_cursor_revision: u64,
        reason: &str,
    ) -> Result<(), RunnerError> {
        self.inner.reprocess_from(position, expected_cursor_revision, reason).await
    }

    /// Advances past a poison event: everything through `position` is
    /// reduced, none of it processed. Appends one `stream/processor-skipped`
    /// audit event. Fenced by `expected_cursor_revision`.
    pub async fn skip_through(
        &self,
        position: u64,
        reason: &str,
        expected_cursor_revision: u64,
    ) -> Result<(), RunnerError> {
        self.inner.skip_through(position, reason, expected_cursor_revision).await
    }

    pub fn contract(&self) -> &Contract {
        &self.inner.contract
    }
}
