//! Operator controls. Each preempts the driver, takes the work lock, and
//! leaves exactly one audit event (deterministically keyed) for a change
//! that landed, and none for one that did not: the event rides inside the
//! commit that makes the change ([`crate::PendingAudit`]) and reaches the
//! journal only after that commit landed.

use tokio::sync::MutexGuard;

use super::gate::ControlTicket;
use super::working::Working;
use super::{Halt, Inner};
use crate::core_events;
use crate::error::RunnerError;
use crate::event::{decode, Decoded, JournalEntry};
use crate::fence::Expectation;
use crate::ports::JournalError;
use crate::processor::Processor;

type Locked<'a, S> = (ControlTicket<'a>, MutexGuard<'a, Working<S>>);

impl<P: Processor> Inner<P> {
    /// Appends the audit event a landed commit carries. One attempt: on
    /// failure the event stays pending and rides every later commit, and the
    /// next drive, control or open appends it before doing anything else
    /// (see `ensure_reduction_current`). With `clear_now` a commit right
    /// after the append drops it from the record at once; otherwise the next
    /// checkpoint does.
    pub(crate) async fn publish_audit(&self, w: &mut Working<P::State>, clear_now: bool) -> Result<(), JournalError> {
        let Some(audit) = w.pending_audit.clone() else { return Ok(()) };
        match self.journal.append(&self.incarnation, audit.encode(), &audit.key).await {
            Ok(outcome) => {
                tracing::info!(
                    slug = %self.contract.slug,
                    event_type = %audit.event_type,
                    position = outcome.position,
                    deduplicated = outcome.deduplicated,
                    "audit event appended"
                );
                w.pending_audit = None;
                if clear_now {
                    if let Err(halt) = self.commit(w, None).await {
                        // Harmless: the next checkpoint drops it, and a
                        // repeated append dedupes by key.
                        tracing::warn!(slug = %self.contract.slug, ?halt, "could not drop the appended audit event from the record");
                    }
                }
                Ok(())
            }
            Err(error) => {
                tracing::warn!(slug = %self.contract.slug, %error, "audit event append failed; it stays pending in the record");
                self.view.note_error(format!("audit event append: {error}"));
                Err(error)
            }
        }
    }

    /// After a landed change: the change stands even if its audit event
    /// cannot be appended yet (it stays pending, see `publish_audit`).
    async fn publish_audit_after_change(&self, w: &mut Working<P::State>) {
        let _ = self.publish_audit(w, true).await;
    }

    async fn lock_for_control(&self) -> Result<Locked<'_, P::State>, RunnerError> {
        let ticket = self.gate.enter_control();
        let mut w = self.work.lock().await;
        if self.shutdown.is_cancelled() {
            return Err(RunnerError::Drained);
        }
        self.check_incarnation().await?;
        if w.needs_resync {
            self.resync(&mut w).await.map_err(Halt::into_error)?;
        }
        self.ensure_reduction_current(&mut w).await.map_err(Halt::into_error)?;
        Ok((ticket, w))
    }

    /// A control on a runner whose stream was re-created would only rewrite
    /// the dead incarnation's record: refuse it clearly instead. (Should the
    /// stream be re-created right after this check, the control's commit
    /// still lands only in that dead record.)
    async fn check_incarnation(&self) -> Result<(), RunnerError> {
        let current = self.journal.incarnation().await?;
        if current == self.incarnation {
            Ok(())
        } else {
            Err(JournalError::IncarnationChanged { expected: self.incarnation.clone(), current: Some(current) }.into())
        }
    }

    pub(crate) async fn re_reduce(&self, reason: &str) -> Result<(), RunnerError> {
        let (_ticket, mut guard) = self.lock_for_control().await?;
        let w = &mut *guard;
        // Settled work first, so "through the ack" covers all of it.
        if w.completed > w.acknowledged {
            self.commit(w, None).await.map_err(Halt::into_error)?;
        }
        self.rebuild_reduction(w, reason).await.map_err(Halt::into_error)
    }

    pub(crate) async fn reprocess_from(&self, position: u64, expected: u64, reason: &str) -> Result<(), RunnerError> {
        let (_ticket, mut guard) = self.lock_for_control().await?;
        let w = &mut *guard;
        check_revision(w, expected)?;
        if position == 0 || position > w.completed.saturating_add(1) {
            return Err(RunnerError::InvalidPosition {
                position,
                why: format!("reprocessing must start in 1..={}", w.completed + 1),
            });
        }
        // Work on a copy: a lost compare-and-swap leaves everything as it was,
        // the audit event included (it only exists inside the commit).
        let mut next = w.clone();
        next.revision = expected + 1;
        next.completed = position - 1;
        next.live = false;
        next.reset_reduction(self.processor.initial_state(), &self.contract.reducer_version);
        next.pending_audit =
            Some(core_events::reprocessed(&self.contract.slug, &w.incarnation, expected, position, reason).into());
        self.commit(&mut next, Some(Expectation::StoredRevision(expected))).await.map_err(|halt| {
            w.needs_resync = true;
            halt.into_error()
        })?;
        *w = next;
        self.publish_audit_after_change(w).await;
        self.refold(w, false).await.map_err(Halt::into_error)
    }

    pub(crate) async fn skip_through(&self, position: u64, reason: &str, expected: u64) -> Result<(), RunnerError> {
        let (_ticket, mut guard) = self.lock_for_control().await?;
        let w = &mut *guard;
        check_revision(w, expected)?;
        if position <= w.completed {
            return Err(RunnerError::InvalidPosition {
                position,
                why: format!("already completed through {}", w.completed),
            });
        }
        let skipped = self.read_through(w.completed, position).await?;
        if skipped.last().map(|e| e.position) != Some(position) {
            return Err(RunnerError::InvalidPosition { position, why: "no journal entry at this position".into() });
        }
        let mut next = w.clone();
        for entry in &skipped {
            if let Decoded::Deliverable(envelope) = decode::<P::Event>(&self.contract, entry) {
                next.state = self.processor.reduce(next.state.clone(), &envelope);
            }
        }
        next.reduced = position;
        next.completed = position;
        next.pending_audit = Some(
            core_events::skipped(&self.contract.slug, &w.incarnation, w.revision, w.completed + 1, position, reason)
                .into(),
        );
        self.commit(&mut next, Some(Expectation::StoredRevision(expected))).await.map_err(|halt| {
            w.needs_resync = true;
            halt.into_error()
        })?;
        *w = next;
        self.view.note_progress(w);
        self.publish_audit_after_change(w).await;
        Ok(())
    }

    /// Entries in `(after, through]`.
    async fn read_through(&self, after: u64, through: u64) -> Result<Vec<JournalEntry>, RunnerError> {
        let mut entries = Vec::new();
        let mut cursor = after;
        loop {
            let page = self
                .journal
                .read_after(&self.incarnation, cursor, self.config.page_size)
                .await
                .inspect_err(|e| self.view.note_journal_failure(e.to_string()))?;
            let Some(last) = page.last().map(|e| e.position) else {
                return Ok(entries);
            };
            entries.extend(page.into_iter().filter(|e| e.position <= through));
            if last >= through {
                return Ok(entries);
            }
            cursor = last;
        }
    }
}

fn check_revision<S>(w: &Working<S>, expected: u64) -> Result<(), RunnerError> {
    if w.revision == expected {
        Ok(())
    } else {
        Err(RunnerError::RevisionMismatch { expected, current: w.revision })
    }
}
