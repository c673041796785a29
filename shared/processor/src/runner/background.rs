//! Background work and the revival alarm that owns its outcome.
//!
//! The alarm is armed when owed work goes from none to some, before any of
//! it starts; it is disarmed when the owed count returns to zero and all of
//! that work succeeded. If work failed, or the process died, the alarm stays
//! armed and its revival event gives the processor a caught-up turn to
//! re-derive what is owed from state.
//!
//! The same alarm covers blocking work a drain left unfinished (an event
//! interrupted mid-barrier, or observed and never reached): once a drain
//! armed it for that, nothing here disarms it, because only a later runner
//! finishing that work makes it unnecessary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;
use tracing::Instrument;

use crate::effects::EffectFuture;
use crate::incarnation::StreamIncarnation;
use crate::ports::{Recovery, RecoveryError};
use crate::sync_util::lock;
use ds_clock::Clock;

#[derive(Debug, Default)]
struct Owed {
    pending: usize,
    failed: bool,
    /// A drain left blocking work unfinished and armed the alarm for it.
    unfinished: bool,
}

pub(crate) struct BackgroundWork {
    slug: String,
    incarnation: StreamIncarnation,
    recovery: Option<Arc<dyn Recovery>>,
    clock: Clock,
    revival_delay_ms: u64,
    /// Async lock: arming/disarming and the count change together, so a
    /// disarm for finished work cannot overtake the arm for new work.
    owed: tokio::sync::Mutex<Owed>,
    pending_gauge: AtomicUsize,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl BackgroundWork {
    pub(crate) fn new(
        slug: String,
        incarnation: StreamIncarnation,
        recovery: Option<Arc<dyn Recovery>>,
        clock: Clock,
        revival_delay_ms: u64,
    ) -> Self {
        Self {
            slug,
            incarnation,
            recovery,
            clock,
            revival_delay_ms,
            owed: tokio::sync::Mutex::new(Owed::default()),
            pending_gauge: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Records `count` pieces of owed work, arming the alarm first if none
    /// was owed. On error nothing is recorded.
    pub(crate) async fn owe(&self, count: usize) -> Result<(), RecoveryError> {
        let mut owed = self.owed.lock().await;
        if owed.pending == 0 {
            match &self.recovery {
                Some(recovery) => {
                    let at = crate::time::epoch_ms(&self.clock).saturating_add(self.revival_delay_ms);
                    recovery.arm(&self.slug, &self.incarnation, at).await?;
                }
                None => tracing::warn!(
                    slug = %self.slug,
                    "background work without a recovery adapter: a crash loses its outcome"
                ),
            }
        }
        owed.pending += count;
        self.pending_gauge.store(owed.pending, Ordering::Release);
        Ok(())
    }

    /// Starts one piece of owed work on the runtime.
    pub(crate) fn spawn(self: &Arc<Self>, position: u64, work: EffectFuture) {
        let this = Arc::clone(self);
        let span = tracing::info_span!("background_work", slug = %self.slug, position);
        let handle = tokio::spawn(
            async move {
                let result = work.await;
                this.settled(result.map_err(|e| e.to_string())).await;
            }
            .instrument(span),
        );
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle.abort_handle());
    }

    async fn settled(&self, result: Result<(), String>) {
        let mut owed = self.owed.lock().await;
        owed.pending = owed.pending.saturating_sub(1);
        self.pending_gauge.store(owed.pending, Ordering::Release);
        if let Err(error) = result {
            tracing::warn!(slug = %self.slug, %error, "background work failed; leaving the revival alarm armed");
            owed.failed = true;
        }
        if owed.pending > 0 {
            return;
        }
        if !owed.failed && !owed.unfinished {
            if let Some(recovery) = &self.recovery {
                if let Err(error) = recovery.disarm(&self.slug).await {
                    // Harmless: a stray revival only costs one caught-up turn.
                    tracing::warn!(slug = %self.slug, %error, "could not disarm the revival alarm");
                }
            }
        }
        // From here the armed alarm (if any) owns the failure.
        owed.failed = false;
    }

    pub(crate) fn has_recovery(&self) -> bool {
        self.recovery.is_some()
    }

    /// A drain stops with blocking work unfinished: (re-)arms the alarm at
    /// `at_ms` and keeps background work from disarming it later. Without a
    /// recovery adapter there is nothing to arm (see [`Self::has_recovery`]).
    pub(crate) async fn hold_for_unfinished(&self, at_ms: u64) -> Result<(), RecoveryError> {
        let mut owed = self.owed.lock().await;
        owed.unfinished = true;
        match &self.recovery {
            Some(recovery) => recovery.arm(&self.slug, &self.incarnation, at_ms).await,
            None => Ok(()),
        }
    }

    pub(crate) fn pending(&self) -> usize {
        self.pending_gauge.load(Ordering::Acquire)
    }

    /// The process is going away: so does its background work.
    pub(crate) fn abort_all(&self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}
