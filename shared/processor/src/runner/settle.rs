//! Running the work an event registered, and the runner's own per-event
//! appends, behind the per-event barrier.

use std::fmt::Display;
use std::future::Future;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::working::Working;
use super::{Halt, Inner};
use crate::contract::CORE_EVENT_PREFIX;
use crate::core_events;
use crate::effects::{BlockingWork, EffectFuture};
use crate::processor::Processor;

impl<P: Processor> Inner<P> {
    /// Runs `op` until it succeeds, backing off between attempts, for ever.
    /// Only drain or an operator control (preemption) stops it; either way
    /// the event stays uncompleted.
    pub(crate) async fn retry_until_ok<F, Fut, E>(
        &self,
        position: u64,
        what: &str,
        mut op: F,
        preempt: &CancellationToken,
    ) -> Result<(), Halt>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        let mut attempt: u32 = 0;
        loop {
            let outcome = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return Err(Halt::Drained),
                _ = preempt.cancelled() => return Err(Halt::Preempted),
                outcome = op() => outcome,
            };
            let error = match outcome {
                Ok(()) => {
                    if attempt > 0 {
                        self.view.clear_retry();
                    }
                    return Ok(());
                }
                Err(error) => error,
            };
            attempt = attempt.saturating_add(1);
            let message = format!("{what} at position {position}: {error}");
            tracing::warn!(slug = %self.contract.slug, position, attempt, %message, "retrying");
            self.view.note_retry(attempt, message);
            let wake = crate::time::epoch_ms(&self.clock).saturating_add(self.config.backoff.delay_ms(attempt));
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return Err(Halt::Drained),
                _ = preempt.cancelled() => return Err(Halt::Preempted),
                _ = crate::time::sleep_until(&self.clock, wake) => {}
            }
        }
    }

    /// Blockers of one event settle one after the other, in registration
    /// order; the event completes only when all succeeded.
    pub(crate) async fn settle_blocking(
        &self,
        position: u64,
        blocking: Vec<BlockingWork>,
        preempt: &CancellationToken,
    ) -> Result<(), Halt> {
        for (index, mut work) in blocking.into_iter().enumerate() {
            let span = tracing::debug_span!("blocking_work", position, index);
            self.retry_until_ok(position, "blocking work", &mut work, preempt).instrument(span).await?;
        }
        Ok(())
    }

    /// Arms the revival alarm (part of this event's barrier: a crash here
    /// redelivers the event), then starts the work without waiting for it.
    pub(crate) async fn start_background(
        &self,
        position: u64,
        work: Vec<EffectFuture>,
        preempt: &CancellationToken,
    ) -> Result<(), Halt> {
        let owed = work.len();
        self.retry_until_ok(position, "arming the revival alarm", || self.background.owe(owed), preempt).await?;
        for future in work {
            self.background.spawn(position, future);
        }
        Ok(())
    }

    /// One diagnostic per malformed consumed event, appended idempotently as
    /// part of that event's barrier, so a crash cannot lose or double it.
    pub(crate) async fn diagnose(
        &self,
        w: &Working<P::State>,
        position: u64,
        event_type: Option<&str>,
        reason: &str,
        preempt: &CancellationToken,
    ) -> Result<(), Halt> {
        tracing::warn!(slug = %self.contract.slug, position, ?event_type, reason, "malformed consumed event");
        // A malformed core event is not diagnosed: a processor that names a
        // core event type it cannot read would otherwise feed on its own
        // diagnostics.
        if event_type.is_some_and(|t| t.starts_with(CORE_EVENT_PREFIX)) {
            return Ok(());
        }
        let keyed =
            core_events::diagnostic(&self.contract.slug, &w.incarnation, w.revision, position, event_type, reason);
        let data = keyed.event.encode();
        self.retry_until_ok(
            position,
            "diagnostic append",
            || {
                let data = data.clone();
                let key = keyed.key.as_str();
                async move { self.journal.append(&self.incarnation, data, key).await.map(|_| ()) }
            },
            preempt,
        )
        .await
    }
}
