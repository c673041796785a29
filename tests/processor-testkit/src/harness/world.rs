//! All in-memory adapters wired together.

use std::sync::Arc;

use super::crash::CrashSwitch;
use super::journal::MemoryJournal;
use super::progress::MemoryProgressStore;
use super::recovery::MemoryRecovery;
use super::sink::MemorySink;
use super::timeline::Timeline;
use ds_processor::Processor;
use ds_processor::RunnerError;
use ds_processor::{Adapters, Runner, RunnerConfig};
use ds_processor::{AppendOutcome, Clock, RecoveryError};

/// The durable world of one stream and one processor: it outlives runners,
/// so dropping a runner and opening another is a crash and a restart.
#[derive(Clone)]
pub struct World {
    pub journal: Arc<MemoryJournal>,
    pub progress: Arc<MemoryProgressStore>,
    pub recovery: Arc<MemoryRecovery>,
    pub sink: Arc<MemorySink>,
    pub crash: CrashSwitch,
    pub timeline: Timeline,
    /// The runners' clock: [`Clock::tokio`], or a manual one
    /// ([`World::with_manual_clock`]) that tests move by hand.
    pub clock: Clock,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    /// A world on [`Clock::tokio`] (follows tokio's paused test time).
    pub fn new() -> Self {
        Self::build(1, Clock::tokio())
    }

    /// A world whose journal positions advance by `stride`.
    pub fn with_stride(stride: u64) -> Self {
        Self::build(stride, Clock::tokio())
    }

    /// A world on a manual clock ([`Clock::manual`]) starting at `start_ms`.
    pub fn with_manual_clock(start_ms: i64) -> Self {
        Self::build(1, Clock::manual(start_ms))
    }

    fn build(stride: u64, clock: Clock) -> Self {
        let crash = CrashSwitch::new();
        let timeline = Timeline::new();
        let journal = Arc::new(MemoryJournal::with_stride("incarnation-1", stride));
        Self {
            progress: Arc::new(MemoryProgressStore::new(crash.clone(), timeline.clone())),
            recovery: Arc::new(MemoryRecovery::new(journal.clone(), crash.clone())),
            sink: Arc::new(MemorySink::new(crash.clone(), timeline.clone())),
            journal,
            crash,
            timeline,
            clock,
        }
    }

    pub fn adapters(&self) -> Adapters {
        Adapters {
            journal: self.journal.clone(),
            progress: self.progress.clone(),
            recovery: Some(self.recovery.clone()),
            clock: self.clock.clone(),
        }
    }

    pub async fn open<P: Processor>(&self, processor: P, config: RunnerConfig) -> Result<Runner<P>, RunnerError> {
        Runner::open(processor, self.adapters(), config).await
    }

    /// Fires the alarms due now.
    pub async fn fire_due_alarms(&self) -> Result<Vec<AppendOutcome>, RecoveryError> {
        self.recovery.fire_due(u64::try_from(self.clock.now_ms()).unwrap_or(0)).await
    }
}

/// Yields until the runner owes no background work, at most `max_yields`
/// times; `true` if it settled.
pub async fn settle_background<P: Processor>(runner: &Runner<P>, max_yields: u32) -> bool {
    for _ in 0..max_yields {
        if runner.runtime_state().pending_background == 0 {
            return true;
        }
        tokio::task::yield_now().await;
    }
    runner.runtime_state().pending_background == 0
}
