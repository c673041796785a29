//! One processor on one stream: its runner and the task that drives it.
//!
//! The task catches the runner up whenever its doorbell rang (a commit on
//! the stream, or a control), then sleeps until the next ring. A doorbell
//! is a `Notify` permit, so rings while it works coalesce into one more
//! catch-up, and none is lost. If the stream was re-created the runner is
//! opened anew on the new life; if the stream is gone the slot retires.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ds_core::TailSignal;
use ds_processor::{JournalError, RunnerError};
use ds_processor_host::{processed_stream, AlarmScheduler, HostedRunner, OperatorError, Registration};
use tokio::sync::Notify;

use crate::host::Inner;

/// The last tail published for a stream, per incarnation (merged like the
/// hub merges its signals: never backwards within one life).
#[derive(Default)]
pub(crate) struct Tail(Mutex<Option<(String, u64)>>);

impl Tail {
    pub(crate) fn note(&self, signal: &TailSignal) {
        let mut tail = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match tail.as_mut() {
            Some((incarnation, t)) if **incarnation == *signal.incarnation => *t = (*t).max(signal.tail),
            _ => *tail = Some((signal.incarnation.to_string(), signal.tail)),
        }
    }

    /// The last published tail, and whether it is of the life `incarnation`
    /// (true too when nothing was published yet).
    pub(crate) fn of_life(&self, incarnation: &str) -> (u64, bool) {
        match self.0.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            Some((life, t)) => (*t, life == incarnation),
            None => (0, true),
        }
    }
}

pub(crate) struct Slot {
    pub path: String,
    pub registration: Registration,
    /// Bumped by every ring (see the ring/retire invariant in `host`).
    pub rung: AtomicU64,
    bell: Notify,
    runner: Mutex<Option<Arc<dyn HostedRunner>>>,
    /// Held while a runner is opened, so the task and a control never open two.
    opening: tokio::sync::Mutex<()>,
    pub tail: Arc<Tail>,
    warned: AtomicBool,
}

/// How one turn of a slot ended.
#[derive(Debug)]
pub(crate) enum Turn {
    /// Caught up (or nothing to do): wait for the next ring.
    Idle,
    /// The stream was re-created: open a runner on its new life.
    Reopen,
    /// The stream does not exist (deleted, expired, never created).
    Gone,
    /// The stream is not a JSON stream.
    NotJson(String),
    Failed(RunnerError),
    /// The host is shutting down.
    Drained,
}

impl Turn {
    fn of(error: RunnerError) -> Self {
        match error {
            RunnerError::Journal(JournalError::IncarnationChanged { current: Some(_), .. }) => Self::Reopen,
            RunnerError::Journal(
                JournalError::IncarnationChanged { current: None, .. } | JournalError::StreamNotFound,
            ) => Self::Gone,
            RunnerError::Drained => Self::Drained,
            e => Self::Failed(e),
        }
    }

    /// For operator calls that needed a runner.
    pub(crate) fn into_operator_error(self, stream: &str) -> OperatorError {
        match self {
            Self::Gone | Self::Reopen => OperatorError::StreamNotFound { stream: stream.to_owned() },
            Self::NotJson(content_type) => OperatorError::NotJson { stream: stream.to_owned(), content_type },
            Self::Failed(e) => OperatorError::Runner(e),
            Self::Idle | Self::Drained => OperatorError::Runner(RunnerError::Drained),
        }
    }
}

impl Slot {
    pub(crate) fn new(path: &str, registration: Registration, tail: Arc<Tail>) -> Self {
        Self {
            path: path.to_owned(),
            registration,
            rung: AtomicU64::new(0),
            bell: Notify::new(),
            runner: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            tail,
            warned: AtomicBool::new(false),
        }
    }

    pub(crate) fn slug(&self) -> &str {
        self.registration.spec.slug()
    }

    pub(crate) fn ring(&self) {
        self.rung.fetch_add(1, Ordering::SeqCst);
        self.bell.notify_one();
    }

    pub(crate) fn runner(&self) -> Option<Arc<dyn HostedRunner>> {
        self.runner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn clear_runner(&self, old: &Arc<dyn HostedRunner>) {
        let mut runner = self.runner.lock().unwrap_or_else(PoisonError::into_inner);
        if runner.as_ref().is_some_and(|r| Arc::ptr_eq(r, old)) {
            *runner = None;
        }
    }

    /// The open runner, or a new one on the stream's current life.
    pub(crate) async fn runner_or_open(&self, inner: &Inner) -> Result<Arc<dyn HostedRunner>, Turn> {
        if let Some(runner) = self.runner() {
            return Ok(runner);
        }
        let _opening = self.opening.lock().await;
        if let Some(runner) = self.runner() {
            return Ok(runner);
        }
        if inner.shutdown.is_cancelled() {
            return Err(Turn::Drained);
        }
        let running = inner.running();
        match processed_stream(&running.service, &self.path).await {
            Ok(_) => {}
            Err(OperatorError::StreamNotFound { .. }) => return Err(Turn::Gone),
            Err(OperatorError::NotJson { content_type, .. }) => return Err(Turn::NotJson(content_type)),
            Err(e) => return Err(Turn::Failed(RunnerError::Journal(JournalError::Unavailable(e.to_string())))),
        }
        let alarms: Arc<dyn AlarmScheduler> = running.alarms.clone();
        let adapters = ds_processor_host::adapters(&running.service, &self.path, self.slug(), alarms);
        let runner = self
            .registration
            .spec
            .open_on(&self.path, adapters, inner.config.runner.clone())
            .await
            .map_err(Turn::of)?;
        *self.runner.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&runner));
        Ok(runner)
    }

    /// One turn: open if needed, then catch up.
    async fn drive(&self, inner: &Inner) -> Turn {
        let runner = match self.runner_or_open(inner).await {
            Ok(runner) => runner,
            Err(turn) => return turn,
        };
        match runner.catch_up().await {
            Ok(_) => Turn::Idle,
            Err(e) => {
                let turn = Turn::of(e);
                if matches!(turn, Turn::Reopen | Turn::Gone) {
                    self.clear_runner(&runner);
                }
                turn
            }
        }
    }
}

/// Longest pause between attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The slot's task (see module docs).
pub(crate) async fn run(inner: Arc<Inner>, slot: Arc<Slot>) {
    let mut failures = 0u32;
    loop {
        if inner.shutdown.is_cancelled() {
            return;
        }
        let seen = slot.rung.load(Ordering::SeqCst);
        match slot.drive(&inner).await {
            Turn::Idle => failures = 0,
            Turn::Reopen => continue,
            Turn::Gone => {
                if inner.retire(&slot, seen) {
                    tracing::debug!(stream = %slot.path, processor = slot.slug(), "stream gone: processor retired");
                    return;
                }
                continue;
            }
            Turn::NotJson(content_type) => {
                if !slot.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(stream = %slot.path, processor = slot.slug(), %content_type, "stream matches the processor's pattern but is not a JSON stream: not processed");
                }
            }
            Turn::Failed(error) => {
                failures = failures.saturating_add(1);
                let delay = Duration::from_millis(100).saturating_mul(1 << failures.min(9)).min(MAX_BACKOFF);
                tracing::warn!(stream = %slot.path, processor = slot.slug(), %error, retry_in = ?delay, "processor turn failed");
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = inner.shutdown.cancelled() => return,
                }
            }
            Turn::Drained => return,
        }
        tokio::select! {
            () = slot.bell.notified() => {}
            () = inner.shutdown.cancelled() => return,
        }
    }
}
