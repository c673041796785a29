//! One processor on one stream: its runner, opened on demand, and one turn
//! of it (open if needed, then catch up). The host's task for the slot
//! (`host::run_slot`) takes a turn whenever its doorbell rang (a commit on
//! the stream, or a control), then sleeps until the next ring. A doorbell
//! is a `Notify` permit, so rings while it works coalesce into one more
//! catch-up, and none is lost. If the stream was re-created the runner is
//! opened anew on the new life; if the stream is gone the slot retires.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ds_core::{StreamService, TailSignal};
use ds_processor::{JournalError, RunnerConfig, RunnerError};
use ds_processor_host::{processed_stream, AlarmScheduler, HostedRunner, InProcAlarms, OperatorError, Registration};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What a slot opens its runner with: the host's running parts.
pub(crate) struct Opening<'a> {
    pub service: &'a StreamService,
    pub alarms: &'a Arc<InProcAlarms>,
    pub runner: &'a RunnerConfig,
    pub shutdown: &'a CancellationToken,
}

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
    pub bell: Notify,
    runner: Mutex<Option<Arc<dyn HostedRunner>>>,
    /// Held while a runner is opened, so the task and a control never open two.
    opening: tokio::sync::Mutex<()>,
    pub tail: Arc<Tail>,
    pub warned: AtomicBool,
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
    pub(crate) async fn runner_or_open(&self, host: &Opening<'_>) -> Result<Arc<dyn HostedRunner>, Turn> {
        if let Some(runner) = self.runner() {
            return Ok(runner);
        }
        let _opening = self.opening.lock().await;
        if let Some(runner) = self.runner() {
            return Ok(runner);
        }
        if host.shutdown.is_cancelled() {
            return Err(Turn::Drained);
        }
        match processed_stream(host.service, &self.path).await {
            Ok(_) => {}
            Err(OperatorError::StreamNotFound { .. }) => return Err(Turn::Gone),
            Err(OperatorError::NotJson { content_type, .. }) => return Err(Turn::NotJson(content_type)),
            Err(e) => return Err(Turn::Failed(RunnerError::Journal(JournalError::Unavailable(e.to_string())))),
        }
        let alarms: Arc<dyn AlarmScheduler> = host.alarms.clone();
        let adapters = ds_processor_host::adapters(host.service, &self.path, self.slug(), alarms);
        let runner =
            self.registration.spec.open_on(&self.path, adapters, host.runner.clone()).await.map_err(Turn::of)?;
        *self.runner.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&runner));
        Ok(runner)
    }

    /// One turn: open if needed, then catch up.
    pub(crate) async fn drive(&self, host: &Opening<'_>) -> Turn {
        let runner = match self.runner_or_open(host).await {
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
