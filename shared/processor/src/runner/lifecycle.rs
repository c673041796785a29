//! Opening, waiting on and draining a runner.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::background::BackgroundWork;
use super::gate::PreemptGate;
use super::view::{DrainReport, View};
use super::working::load;
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
    tracing::info!(slug = %contract.slug, "opening processor runner");
    let w = load(&processor, &contract, adapters.journal.as_ref(), adapters.progress.as_ref(), adapters.clock.now_ms())
        .await?;
    let background = Arc::new(BackgroundWork::new(
        contract.slug.clone(),
        adapters.recovery.clone(),
        Arc::clone(&adapters.clock),
        config.revival_delay_ms,
    ));
    let inner = Arc::new(Inner {
        view: View::new(&w),
        work: tokio::sync::Mutex::new(w),
        processor,
        contract,
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
    pub(crate) async fn wait_until_event(&self, position: u64, timeout_ms: u64) -> Result<(), WaitError> {
        let mut signals = self.view.subscribe();
        let failures_at_start = signals.borrow().journal_failures;
        let deadline = self.clock.now_ms().saturating_add(timeout_ms);
        let mut timeout = self.clock.sleep_until(deadline);
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
            _ = self.clock.sleep_until(deadline_ms) => None,
        };
        let report = match locked {
            Some(mut w) => {
                let before = w.acknowledged;
                // Settled work only: the cancelled event never completed, so
                // the checkpoint cannot pass it.
                let flushed = self.clock.now_ms() < deadline_ms
                    && self.checkpoint_if_due(&mut w, Moment::Drain).await.is_ok()
                    && w.acknowledged > before;
                DrainReport { acknowledged_through: w.acknowledged, flushed, timed_out: false }
            }
            None => DrainReport {
                acknowledged_through: self.view.runtime(0).acknowledged_through,
                flushed: false,
                timed_out: true,
            },
        };
        self.view.note_in_flight(None);
        self.view.mark_drained();
        tracing::info!(slug = %self.contract.slug, ?report, "drained");
        report
    }
}
