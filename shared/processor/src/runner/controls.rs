//! Operator controls. Each preempts the driver, takes the work lock, and
//! appends exactly one audit event (deterministically keyed, appended before
//! the change so a crash in between is repaired by retrying the control).

use tokio::sync::MutexGuard;

use super::gate::ControlTicket;
use super::working::Working;
use super::{Halt, Inner};
use crate::core_events::{self, KeyedEvent};
use crate::error::RunnerError;
use crate::event::{decode, Decoded, JournalEntry};
use crate::fence::Expectation;
use crate::processor::Processor;

type Locked<'a, S> = (ControlTicket<'a>, MutexGuard<'a, Working<S>>);

impl<P: Processor> Inner<P> {
    pub(crate) async fn append_audit(&self, keyed: KeyedEvent) -> Result<(), Halt> {
        let outcome = self.journal.append(keyed.event.encode(), &keyed.key).await?;
        tracing::info!(
            slug = %self.contract.slug,
            event_type = %keyed.event.event_type,
            position = outcome.position,
            deduplicated = outcome.deduplicated,
            "audit event appended"
        );
        Ok(())
    }

    async fn lock_for_control(&self) -> Result<Locked<'_, P::State>, RunnerError> {
        let ticket = self.gate.enter_control();
        let mut w = self.work.lock().await;
        if self.shutdown.is_cancelled() {
            return Err(RunnerError::Drained);
        }
        if w.needs_resync {
            self.resync(&mut w).await.map_err(Halt::into_error)?;
        }
        self.ensure_reduction_current(&mut w).await.map_err(Halt::into_error)?;
        Ok((ticket, w))
    }

    pub(crate) async fn re_reduce(&self, reason: &str) -> Result<(), RunnerError> {
        let (_ticket, mut guard) = self.lock_for_control().await?;
        let w = &mut *guard;
        // Settled work first, so "through the ack" covers all of it.
        if w.completed > w.acknowledged {
            self.commit(w, None).await.map_err(Halt::into_error)?;
        }
        self.append_audit(core_events::re_reduced(
            &self.contract.slug,
            &w.incarnation,
            w.revision,
            w.completed,
            &self.contract.reducer_version,
            reason,
        ))
        .await
        .map_err(Halt::into_error)?;
        w.reset_reduction(self.processor.initial_state(), &self.contract.reducer_version);
        self.refold(w, true).await.map_err(Halt::into_error)
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
        self.append_audit(core_events::reprocessed(&self.contract.slug, &w.incarnation, expected, position, reason))
            .await
            .map_err(Halt::into_error)?;
        // Work on a copy: a lost compare-and-swap leaves everything as it was.
        let mut next = w.clone();
        next.revision = expected + 1;
        next.completed = position - 1;
        next.live = false;
        next.reset_reduction(self.processor.initial_state(), &self.contract.reducer_version);
        self.commit(&mut next, Some(cas(w, expected))).await.map_err(|halt| {
            w.needs_resync = true;
            halt.into_error()
        })?;
        *w = next;
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
        self.append_audit(core_events::skipped(
            &self.contract.slug,
            &w.incarnation,
            w.revision,
            w.completed + 1,
            position,
            reason,
        ))
        .await
        .map_err(Halt::into_error)?;
        let mut next = w.clone();
        for entry in &skipped {
            if let Decoded::Deliverable(envelope) = decode::<P::Event>(&self.contract, entry) {
                next.state = self.processor.reduce(next.state.clone(), &envelope);
            }
        }
        next.reduced = position;
        next.completed = position;
        self.commit(&mut next, Some(cas(w, expected))).await.map_err(|halt| {
            w.needs_resync = true;
            halt.into_error()
        })?;
        *w = next;
        self.view.note_progress(w);
        Ok(())
    }

    /// Entries in `(after, through]`.
    async fn read_through(&self, after: u64, through: u64) -> Result<Vec<JournalEntry>, RunnerError> {
        let mut entries = Vec::new();
        let mut cursor = after;
        loop {
            let page = self
                .journal
                .read_after(cursor, self.config.page_size)
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

/// The compare-and-swap precondition of a control. A runner that never
/// committed (nothing stored for this incarnation) is at revision 0 by
/// definition; its takeover precondition already guards the record.
fn cas<S>(w: &Working<S>, expected: u64) -> Expectation {
    match &w.expect {
        Expectation::Takeover { .. } => w.expect.clone(),
        _ => Expectation::StoredRevision(expected),
    }
}

fn check_revision<S>(w: &Working<S>, expected: u64) -> Result<(), RunnerError> {
    if w.revision == expected {
        Ok(())
    } else {
        Err(RunnerError::RevisionMismatch { expected, current: w.revision })
    }
}
