//! Opening, waiting on and draining a runner.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::background::BackgroundWork;
use super::gate::PreemptGate;
use super::view::{DrainReport, Revival, View};
use super::working::{load, Working};
use super::{Adapters, Halt, Inner, RunnerConfig};
use crate::cadence::Moment;
use crate::error::{RunnerError, WaitError};
use crate::processor::Processor;

pub(super) async fn open<P: Processor>(
    processor: P,
    adapters: Adapters,
    config: RunnerConfig,
) -> Result<Arc<Inner<P>>, RunnerError> {
    let contract = processor.contract().clone();
    contract.check_events::<P::Event>()?;
    tracing::info!(slug = %contract.slug, "opening processor runner");
    let incarnation = adapters.journal.incarnation().await?;
    let w =
        load(&processor, &contract, adapters.progress.as_ref(), &incarnation, crate::time::epoch_ms(&adapters.clock))
            .await?;
    let background = Arc::new(BackgroundWork::new(
        contract.slug.clone(),
        incarnation.clone(),
        adapters.recovery.clone(),
        adapters.clock.clone(),
        config.revival_delay_ms,
    ));
    let inner = Arc::new(Inner {
        view: View::new(&w),
        work: tokio::sync::Mutex::new(w),
        processor,
        contract,
        incarnation,
        config,
        journal: adapters.journal,
        store: adapters.progress,
        clock: adapters.clock,
        background,
        gate: PreemptGate::new(),
        shutdown: CancellationToken::new(),
    });
    {
        let mut w = inner.work.lock().await;
        inner.ensure_reduction_current(&mut w).await.map_err(Halt::into_error)?;
    }
    Ok(inner)
}

impl<P: Processor> Inner<P> {
    /// Reads the durable record of the runner's incarnation into a working
    /// state. Does not refold; see `ensure_reduction_current`.
    pub(crate) async fn load(&self) -> Result<Working<P::State>, RunnerError> {
        load(
            &self.processor,
            &self.contract,
            self.store.as_ref(),
            &self.incarnation,
            crate::time::epoch_ms(&self.clock),
        )
        .await
    }
}

impl<P: Processor> Inner<P> {
    pub(crate) async fn wait_until_event(&self, position: u64, timeout_ms: u64) -> Result<(), WaitError> {
        let mut signals = self.view.subscribe();
        let failures_at_start = signals.borrow().journal_failures;
        let deadline = crate::time::epoch_ms(&self.clock).saturating_add(timeout_ms);
        let mut timeout = crate::time::sleep_until(&self.clock, deadline);
        loop {
            {
                let s = signals.borrow_and_update();
                if s.acknowledged >= position {
                    return Ok(());
                }
                if s.journal_failures > failures_at_start {
                    return Err(WaitError::JournalRead(s.last_journal_error.clone().unwrap_or_default()));
                }
            }
            tokio::select! {
                biased;
                changed = signals.changed() => {
                    if changed.is_err() {
                        return Err(WaitError::Timeout { position });
                    }
                }
                _ = &mut timeout => return Err(WaitError::Timeout { position }),
            }
        }
    }

    pub(crate) async fn drain(&self, deadline_ms: u64) -> DrainReport {
        // Cancels in-flight blocking work and backoff sleeps; the in-flight
        // event stays uncompleted, so the cursor does not pass it.
        self.shutdown.cancel();
        let locked = tokio::select! {
            biased;
            w = self.work.lock() => Some(w),
            _ = crate::time::sleep_until(&self.clock, deadline_ms) => None,
        };
        let (acknowledged_through, flushed, timed_out, unfinished) = match locked {
            Some(mut w) => {
                let before = w.acknowledged;
                // Settled work only: the cancelled event never completed, so
                // the checkpoint cannot pass it.
                let flushed = crate::time::epoch_ms(&self.clock) < deadline_ms
                    && self.checkpoint_if_due(&mut w, Moment::Drain).await.is_ok()
                    && w.acknowledged > before;
                let unfinished = w.acknowledged < self.view.highest_observed().max(w.completed);
                (w.acknowledged, flushed, false, unfinished)
            }
            None => {
                let state = self.view.runtime(0);
                (state.acknowledged_through, false, true, state.lag > 0 || state.in_flight.is_some())
            }
        };
        let revival = if unfinished { self.arm_revival(deadline_ms).await } else { Revival::NotNeeded };
        let report = DrainReport { acknowledged_through, flushed, timed_out, revival };
        self.view.note_in_flight(None);
        self.view.mark_drained();
        tracing::info!(slug = %self.contract.slug, ?report, "drained");
        report
    }

    /// Arms the revival alarm for work a drain left unfinished, so the host
    /// need not inspect the lag: the alarm's revival event wakes the
    /// processor even if no one appends again.
    async fn arm_revival(&self, deadline_ms: u64) -> Revival {
        if !self.background.has_recovery() {
            tracing::warn!(slug = %self.contract.slug, "drained with unfinished work and no recovery adapter");
            return Revival::Uncovered { reason: "no recovery adapter to arm a revival alarm".into() };
        }
        let at_ms = crate::time::epoch_ms(&self.clock).saturating_add(self.config.revival_delay_ms);
        // Biased towards the arm: a deadline already past still lets an
        // immediately ready arm through, never a slow one.
        tokio::select! {
            biased;
            armed = self.background.hold_for_unfinished(at_ms) => match armed {
                Ok(()) => Revival::Armed { at_ms },
                Err(error) => {
                    tracing::warn!(slug = %self.contract.slug, %error, "could not arm the revival alarm at drain");
                    Revival::Uncovered { reason: format!("arming the revival alarm failed: {error}") }
                }
            },
            _ = crate::time::sleep_until(&self.clock, deadline_ms) => Revival::Uncovered {
                reason: "the drain deadline passed before the revival alarm was armed".into(),
            },
        }
    }
}
