//! The per-event loop: scan to the head, one event at a time.
//!
//! A transport frame is only a wake. Whatever frames arrive, the driver reads
//! the journal from its completed cursor, so reordered, duplicated, split or
//! empty frames change nothing.

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::scan::ScanBuffer;
use super::view::DriveReport;
use super::working::Working;
use super::{Halt, Inner};
use crate::cadence::Moment;
use crate::delivery::{Delivery, Phase};
use crate::effects::Effects;
use crate::error::RunnerError;
use crate::event::{Decoded, Envelope};
use crate::processor::{ProcessCall, Processor};

impl<P: Processor> Inner<P> {
    /// One drive: wait out operator controls, take the work lock, scan to the
    /// head. Preemption by a control re-queues the drive behind it; a fenced
    /// commit reloads progress and carries on.
    pub(crate) async fn drive(&self) -> Result<DriveReport, RunnerError> {
        let mut resyncs = 0u32;
        loop {
            if self.shutdown.is_cancelled() {
                return Err(RunnerError::Drained);
            }
            self.gate.controls_done().await;
            let mut w = self.work.lock().await;
            if self.shutdown.is_cancelled() {
                return Err(RunnerError::Drained);
            }
            let preempt = self.gate.driver_token();
            match self.drive_locked(&mut w, &preempt).await {
                Ok(()) => {
                    return Ok(DriveReport { acknowledged_through: w.acknowledged, completed_through: w.completed })
                }
                Err(Halt::Preempted) => {
                    tracing::debug!(slug = %self.contract.slug, "drive preempted by an operator control");
                }
                Err(Halt::Drained) => return Err(RunnerError::Drained),
                Err(Halt::Fenced(rejection)) => {
                    resyncs += 1;
                    if resyncs > self.config.max_resyncs {
                        return Err(RunnerError::Contended(rejection));
                    }
                }
                Err(Halt::Failed(e)) => return Err(e),
            }
        }
    }

    async fn drive_locked(&self, w: &mut Working<P::State>, preempt: &CancellationToken) -> Result<(), Halt> {
        if w.needs_resync {
            self.resync(w).await?;
        }
        self.ensure_reduction_current(w).await?;
        self.scan(w, preempt).await?;
        self.checkpoint_if_due(w, Moment::BatchEnd).await
    }

    async fn scan(&self, w: &mut Working<P::State>, preempt: &CancellationToken) -> Result<(), Halt> {
        let mut buffer = ScanBuffer::new(w.completed, self.config.page_size);
        let mut scanned_any = false;
        let mut delivered = false;
        let mut eventless_done = false;
        loop {
            if self.shutdown.is_cancelled() {
                return Err(Halt::Drained);
            }
            if preempt.is_cancelled() {
                return Err(Halt::Preempted);
            }
            let Some(entry) = self.next_entry(&mut buffer).await? else {
                break;
            };
            scanned_any = true;
            let position = entry.position;
            self.view.note_in_flight(Some(position));
            let (eventless_due, mut moment) = match entry.decoded {
                Decoded::Deliverable(envelope) => {
                    let caught_up = self.no_later_deliverable(&mut buffer).await? && self.head_verified(&buffer);
                    delivered = true;
                    self.step(w, Some(&envelope), position, caught_up, preempt).await?;
                    (false, Moment::EventCompleted)
                }
                Decoded::Malformed { event_type, reason } => {
                    self.diagnose(w, position, event_type.as_deref(), &reason, preempt).await?;
                    (!delivered && !eventless_done, Moment::EventCompleted)
                }
                Decoded::Unconsumed => (!delivered && !eventless_done, Moment::EntrySkipped),
            };
            // The eventless call rides the last entry of a scan without a
            // consumed event, before that entry completes: the ack never
            // covers a caught-up call whose blocking work has not succeeded.
            if eventless_due && self.at_head(&mut buffer).await? {
                eventless_done = true;
                self.step(w, None, position, true, preempt).await?;
                moment = Moment::EventCompleted;
            }
            self.complete(w, position, moment).await?;
        }
        self.view.note_in_flight(None);
        if scanned_any && self.head_verified(&buffer) && !w.live {
            w.live = true;
            self.view.note_progress(w);
        }
        self.checkpoint_if_due(w, Moment::ScanIdle).await
    }

    async fn next_entry(
        &self,
        buffer: &mut ScanBuffer<P::Event>,
    ) -> Result<Option<super::scan::ScanEntry<P::Event>>, Halt> {
        if buffer.is_empty() {
            self.fill(buffer).await?;
        }
        Ok(buffer.pop())
    }

    pub(crate) async fn fill(&self, buffer: &mut ScanBuffer<P::Event>) -> Result<usize, Halt> {
        match buffer.fill(self.journal.as_ref(), &self.incarnation, &self.contract).await {
            Ok(added) => {
                self.view.observe(buffer.read_through());
                Ok(added)
            }
            Err(e) => {
                self.view.note_journal_failure(e.to_string());
                Err(e.into())
            }
        }
    }

    /// No deliverable event follows in the buffer, reading ahead to the head.
    async fn no_later_deliverable(&self, buffer: &mut ScanBuffer<P::Event>) -> Result<bool, Halt> {
        let mut checked = 0;
        loop {
            if buffer.has_deliverable_from(checked) {
                return Ok(false);
            }
            checked = buffer.len();
            if self.fill(buffer).await? == 0 {
                return Ok(true);
            }
        }
    }

    /// Nothing follows the entry just taken, and the head is verified.
    async fn at_head(&self, buffer: &mut ScanBuffer<P::Event>) -> Result<bool, Halt> {
        if !buffer.is_empty() {
            return Ok(false);
        }
        Ok(self.fill(buffer).await? == 0 && self.head_verified(buffer))
    }

    /// The journal read came back empty and nothing was ever observed past
    /// what was read: `caught_up` is never set behind a notified head.
    fn head_verified(&self, buffer: &ScanBuffer<P::Event>) -> bool {
        buffer.head_reached() && buffer.read_through() >= self.view.highest_observed()
    }

    /// `moment`: [`Moment::EntrySkipped`] for an entry no call was made
    /// for (its type is not consumed), else [`Moment::EventCompleted`].
    async fn complete(&self, w: &mut Working<P::State>, position: u64, moment: Moment) -> Result<(), Halt> {
        let bytes = position.saturating_sub(w.completed);
        match moment {
            Moment::EntrySkipped => w.cadence.skipped_one(bytes),
            _ => w.cadence.completed_one(bytes),
        }
        w.completed = position;
        w.reduced = position;
        self.view.note_progress(w);
        self.checkpoint_if_due(w, moment).await
    }

    /// Reduce, call `process_event`, start background work, settle blocking
    /// work; only then does the working fold move.
    async fn step(
        &self,
        w: &mut Working<P::State>,
        event: Option<&Envelope<P::Event>>,
        position: u64,
        caught_up: bool,
        preempt: &CancellationToken,
    ) -> Result<(), Halt> {
        let span = tracing::info_span!(
            "processor_step",
            slug = %self.contract.slug,
            position,
            caught_up,
            eventless = event.is_none(),
            revision = w.revision,
        );
        // Continue the trace of the append that wrote the event, when it
        // left one (export on only; otherwise the step is a root span).
        if event.is_some() && ds_telemetry::enabled() {
            if let Some(parent) = self.journal.trace_context(&self.incarnation, position).await {
                ds_telemetry::continue_from(&span, &parent);
            }
        }
        async move {
            let next_state = match event {
                Some(envelope) => self.processor.reduce(w.state.clone(), envelope),
                None => w.state.clone(),
            };
            let delivery = Delivery {
                phase: if w.live || caught_up { Phase::Live } else { Phase::CatchingUp },
                highest_observed_position: self.view.highest_observed().max(position),
                caught_up,
                cursor_revision: w.revision,
                stream_incarnation: w.incarnation.clone(),
                source_position: position,
            };
            let mut effects = Effects::default();
            self.processor.process_event(
                ProcessCall { event, previous_state: &w.state, state: &next_state, delivery: &delivery },
                &mut effects,
            );
            let (blocking, background) = effects.into_parts();
            if !background.is_empty() {
                self.start_background(position, background, preempt).await?;
            }
            self.settle_blocking(position, blocking, preempt).await?;
            w.state = next_state;
            Ok(())
        }
        .instrument(span)
        .await
    }
}
