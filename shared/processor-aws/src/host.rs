//! [`ProcessorHost`]: runs the registered processors of a stream when its
//! doorbell rings, within the invocation's deadline.
//!
//! Runners stay open in a warm instance (keyed by stream path and slug): a
//! runner keeps its progress record's revision, so a warm batch costs one
//! journal read and one conditional progress write. Another instance's
//! commit in between only costs a fenced write and a reload.
//!
//! One drive per (stream, processor) per batch: catch up to the head; if the
//! deadline's stop margin comes first, drain (in-flight blocking work is
//! interrupted, settled work checkpointed, and the revival alarm armed for
//! whatever is left), and forget the runner. Background hand-offs in flight
//! get until the stop margin to settle; an unsettled one stays covered by
//! its revival alarm.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ds_core::StreamService;
use ds_processor::{
    Adapters, CheckpointCadence, Fence, JournalError, ProgressError, ProgressStore, Recovery, Revival, RunnerConfig,
    RunnerError, StoredProgress, StreamIncarnation,
};
use ds_processor_host::{
    AlarmScheduler, HostedRunner, ProcessorRegistry, ProcessorSpec, RecordProgressStore, StreamRecovery,
};

use crate::journal::DoorbellJournal;
use crate::lag::LagBook;

/// Runners kept open between invocations; past this many, idle ones are
/// dropped (a runner costs one progress read to open again).
const MAX_WARM_RUNNERS: usize = 1024;

/// Tunables of the host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub runner: RunnerConfig,
    /// Catch-up stops this long before the invocation's deadline (at most a
    /// quarter of the time the invocation has left, so a function with a
    /// short timeout, Lambda's default 3 s included, still makes progress);
    /// the drain that follows gets until half of it.
    pub stop_margin_ms: u64,
}

/// The checkpoint cadence of a processor whose configuration names none.
/// On AWS every checkpoint is a conditional DynamoDB write, so checkpointing
/// every event doubles (counter) or half again (outbox) an event's writes;
/// every 100 events makes it one write per invocation and stream in the
/// common case (a scan that reaches the head, or a drain at the deadline,
/// checkpoints whatever the policy). A crash replays at most the 99 events
/// since, whose effects carry the idempotency keys they had the first time.
pub const DEFAULT_CADENCE: CheckpointCadence = CheckpointCadence::EveryN(100);

impl Default for HostConfig {
    fn default() -> Self {
        Self { runner: RunnerConfig { cadence: DEFAULT_CADENCE, ..RunnerConfig::default() }, stop_margin_ms: 5_000 }
    }
}

/// Counters of what the host saw (logs, tests).
#[derive(Debug, Default)]
pub struct HostStats {
    /// Progress commits refused because another instance moved the record.
    pub fenced: AtomicU64,
    /// Drives stopped by the deadline's stop margin.
    pub stopped: AtomicU64,
    /// Runners opened (cold).
    pub opened: AtomicU64,
}

/// Why a processor could not be run on a stream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriveError {
    #[error("processor {slug} on {path}: {source}")]
    Runner { path: String, slug: String, source: RunnerError },
    #[error("processor {slug} on {path} stopped with work left and no revival: {reason}")]
    Uncovered { path: String, slug: String, reason: String },
}

struct Warm {
    runner: Arc<dyn HostedRunner>,
    journal: Arc<DoorbellJournal>,
}

/// Runs processors on streams (see module docs).
pub struct Processors {
    service: StreamService,
    registry: ProcessorRegistry,
    alarms: Arc<dyn AlarmScheduler>,
    cfg: HostConfig,
    warm: Mutex<HashMap<(String, String), Arc<Warm>>>,
    stats: Arc<HostStats>,
    lags: LagBook,
}

/// The service clock's reading in the runner's units (epoch ms, `u64`).
fn epoch_ms(service: &StreamService) -> u64 {
    u64::try_from(service.clock().now_ms()).unwrap_or(0)
}

/// How one drive ended.
enum Driven {
    CaughtUp,
    Stopped(ds_processor::DrainReport),
    Failed(RunnerError),
}

impl Processors {
    pub fn new(
        service: StreamService,
        registry: ProcessorRegistry,
        alarms: Arc<dyn AlarmScheduler>,
        cfg: HostConfig,
    ) -> Self {
        Self { service, registry, alarms, cfg, warm: Mutex::default(), stats: Arc::default(), lags: LagBook::default() }
    }

    pub fn stats(&self) -> &HostStats {
        &self.stats
    }

    pub fn registry(&self) -> &ProcessorRegistry {
        &self.registry
    }

    /// Each processor's lag at the end of its drives since the last take
    /// (see [`crate::lag`]): `(slug, max lag, streams)`.
    pub fn take_lags(&self) -> Vec<(String, u64, u64)> {
        self.lags.take()
    }

    fn note_lag(&self, slug: &str, warm: &Warm) {
        if let Some(tail) = warm.journal.seen_tail() {
            self.lags.note(slug, tail, warm.runner.runtime_state().acknowledged_through);
        }
    }

    fn warm(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<Warm>>> {
        self.warm.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs every processor registered for `path` to its head (or to the
    /// deadline's stop margin). `hint` is the incarnation the doorbell named.
    pub async fn wake(&self, path: &str, hint: Option<&str>, deadline_ms: u64) -> Result<(), Vec<DriveError>> {
        let specs = self.registry.for_path(path);
        if specs.is_empty() {
            tracing::debug!(path, "no processor registered for this stream");
            return Ok(());
        }
        let runs = specs.iter().map(|spec| self.run(spec, path, hint, deadline_ms));
        let errors: Vec<DriveError> =
            futures::future::join_all(runs).await.into_iter().filter_map(Result::err).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    async fn run(
        &self,
        spec: &Arc<dyn ProcessorSpec>,
        path: &str,
        hint: Option<&str>,
        deadline_ms: u64,
    ) -> Result<(), DriveError> {
        let slug = spec.slug().to_owned();
        let key = (path.to_owned(), slug.clone());
        let err = |source| DriveError::Runner { path: path.to_owned(), slug: slug.clone(), source };
        let mut hint = hint.map(StreamIncarnation::from);
        // A second round only for a stream re-created since the runner opened.
        for _ in 0..2 {
            let warm = match self.open(spec, path, hint.take()).await {
                Ok(Some(warm)) => warm,
                Ok(None) => return Ok(()),
                Err(e) => return Err(err(e)),
            };
            warm.journal.forget_head();
            match self.drive(&warm, deadline_ms).await {
                Driven::CaughtUp => {
                    self.settle_background(&warm, deadline_ms).await;
                    self.note_lag(&slug, &warm);
                    return Ok(());
                }
                Driven::Stopped(report) => {
                    self.note_lag(&slug, &warm);
                    self.stats.stopped.fetch_add(1, Ordering::Relaxed);
                    self.warm().remove(&key);
                    tracing::warn!(path, %slug, ?report, "stopped at the invocation's deadline");
                    return match report.revival {
                        Revival::Uncovered { reason } => {
                            Err(DriveError::Uncovered { path: path.to_owned(), slug: slug.clone(), reason })
                        }
                        Revival::NotNeeded | Revival::Armed { .. } => Ok(()),
                    };
                }
                Driven::Failed(RunnerError::Journal(JournalError::IncarnationChanged { .. })) => {
                    tracing::info!(path, %slug, "the stream was re-created: opening its processor anew");
                    self.warm().remove(&key);
                }
                Driven::Failed(e) => {
                    self.warm().remove(&key);
                    // Arms the revival alarm if anything observed is unfinished.
                    let report = warm.runner.drain(deadline_ms.saturating_sub(self.margin(deadline_ms) / 2)).await;
                    self.note_lag(&slug, &warm);
                    tracing::error!(path, %slug, error = %e, ?report, "processor drive failed");
                    return Err(err(e));
                }
            }
        }
        Ok(())
    }

    /// The warm runner of `spec` on `path`, or a new one; `None` when the
    /// stream does not exist (nothing to process).
    async fn open(
        &self,
        spec: &Arc<dyn ProcessorSpec>,
        path: &str,
        hint: Option<StreamIncarnation>,
    ) -> Result<Option<Arc<Warm>>, RunnerError> {
        let key = (path.to_owned(), spec.slug().to_owned());
        if let Some(warm) = self.warm().get(&key).cloned() {
            return Ok(Some(warm));
        }
        let journal = Arc::new(DoorbellJournal::new(self.service.clone(), path, hint));
        let progress = Arc::new(FenceCounting {
            inner: RecordProgressStore::new(self.service.clone(), path, spec.slug()),
            stats: Arc::clone(&self.stats),
        });
        let recovery: Arc<dyn Recovery> =
            Arc::new(StreamRecovery::new(self.service.clone(), path, Arc::clone(&self.alarms)));
        let adapters = Adapters::new(journal.clone(), progress, recovery);
        let runner = match spec.open_on(path, adapters, self.cfg.runner.clone()).await {
            Ok(runner) => runner,
            Err(RunnerError::Journal(JournalError::StreamNotFound | JournalError::IncarnationChanged { .. })) => {
                tracing::info!(path, slug = spec.slug(), "the stream is gone: nothing to process");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        self.stats.opened.fetch_add(1, Ordering::Relaxed);
        let warm = Arc::new(Warm { runner, journal });
        let mut open = self.warm();
        if open.len() >= MAX_WARM_RUNNERS {
            // Dropping a runner aborts its background work: keep those that have some.
            open.retain(|_, w| w.runner.runtime_state().pending_background > 0);
        }
        open.insert(key, Arc::clone(&warm));
        Ok(Some(warm))
    }

    /// The stop margin for an invocation ending at `deadline_ms` (see
    /// [`HostConfig::stop_margin_ms`]).
    fn margin(&self, deadline_ms: u64) -> u64 {
        self.cfg.stop_margin_ms.min(deadline_ms.saturating_sub(epoch_ms(&self.service)) / 4)
    }

    async fn drive(&self, warm: &Warm, deadline_ms: u64) -> Driven {
        let margin = self.margin(deadline_ms);
        let stop_at = deadline_ms.saturating_sub(margin);
        let drive = warm.runner.catch_up();
        tokio::pin!(drive);
        tokio::select! {
            result = &mut drive => match result {
                Ok(_) => Driven::CaughtUp,
                Err(e) => Driven::Failed(e),
            },
            () = self.service.clock().sleep_until(i64::try_from(stop_at).unwrap_or(i64::MAX)) => {
                // The drive must keep being polled while the drain waits for it to let go.
                let hard = deadline_ms.saturating_sub(margin / 2);
                let (report, _) = tokio::join!(warm.runner.drain(hard), drive.as_mut());
                Driven::Stopped(report)
            }
        }
    }

    /// Waits (until the stop margin) for background hand-offs to settle.
    async fn settle_background(&self, warm: &Warm, deadline_ms: u64) {
        let stop_at = deadline_ms.saturating_sub(self.margin(deadline_ms));
        while warm.runner.runtime_state().pending_background > 0 && epoch_ms(&self.service) < stop_at {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The open runners (tests, operators).
    pub fn warm_runner(&self, path: &str, slug: &str) -> Option<Arc<dyn HostedRunner>> {
        self.warm().get(&(path.to_owned(), slug.to_owned())).map(|w| Arc::clone(&w.runner))
    }
}

/// The progress store, counting fenced commits.
struct FenceCounting {
    inner: RecordProgressStore,
    stats: Arc<HostStats>,
}

#[async_trait]
impl ProgressStore for FenceCounting {
    async fn read(&self, incarnation: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError> {
        self.inner.read(incarnation).await
    }

    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError> {
        let result = self.inner.commit(record, fence).await;
        if let Err(ProgressError::Rejected(rejection)) = &result {
            self.stats.fenced.fetch_add(1, Ordering::Relaxed);
            tracing::info!(%rejection, "progress commit fenced by another instance");
        }
        result
    }
}
