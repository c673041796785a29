//! Refold: rebuild the fold through the ack, reduce only.
//!
//! Runs page by page and commits each page with `reduced_through` below the
//! unchanged ack, so a crash mid-refold resumes where it stopped and the
//! snapshot honestly shows the partial fold meanwhile. No `process_event`
//! call, no effect.

use tracing::Instrument;

use super::working::Working;
use super::{Halt, Inner};
use crate::core_events;
use crate::event::{decode, Decoded};
use crate::processor::Processor;

impl<P: Processor> Inner<P> {
    /// Appends an audit event a loaded record still owes, re-reduces if the
    /// stored fold was unusable, and finishes any refold in progress.
    pub(crate) async fn ensure_reduction_current(&self, w: &mut Working<P::State>) -> Result<(), Halt> {
        // A change landed but its audit event was not appended (the process
        // died, or the append failed): append it before anything else, so a
        // new change never overwrites it (its key dedupes a repeat). The next
        // checkpoint drops it from the record.
        self.publish_audit(w, false).await?;
        if let Some(reason) = w.pending_re_reduce.take() {
            return self.rebuild_reduction(w, &reason).await;
        }
        if w.reduced < w.completed {
            return self.refold(w, false).await;
        }
        Ok(())
    }

    /// Resets the fold and rebuilds it through the ack, reduce only. The
    /// audit event rides the first refold commit and is appended once the
    /// rebuild landed, so a fenced rebuild leaves no audit event behind.
    pub(crate) async fn rebuild_reduction(&self, w: &mut Working<P::State>, reason: &str) -> Result<(), Halt> {
        w.pending_audit = Some(
            core_events::re_reduced(
                &self.contract.slug,
                &w.incarnation,
                w.revision,
                w.completed,
                &self.contract.reducer_version,
                reason,
            )
            .into(),
        );
        w.reset_reduction(self.processor.initial_state(), &self.contract.reducer_version);
        self.refold(w, true).await?;
        // The rebuild stands even if the append fails now; the event stays
        // pending in the record.
        let _ = self.publish_audit(w, true).await;
        Ok(())
    }

    /// Folds `(reduced, completed]` into the working state, one committed
    /// page at a time. `force_commit` commits even when there is nothing to
    /// fold (a reset must still land).
    pub(crate) async fn refold(&self, w: &mut Working<P::State>, force_commit: bool) -> Result<(), Halt> {
        let span = tracing::info_span!(
            "processor_refold",
            slug = %self.contract.slug,
            from = w.reduced,
            through = w.completed,
        );
        async move {
            let target = w.completed;
            let mut committed = false;
            while w.reduced < target {
                let page = match self.journal.read_after(&self.incarnation, w.reduced, self.config.page_size).await {
                    Ok(page) => page,
                    Err(e) => {
                        self.view.note_journal_failure(e.to_string());
                        return Err(e.into());
                    }
                };
                let mut reached_target = page.is_empty();
                for entry in &page {
                    if entry.position > target {
                        reached_target = true;
                        break;
                    }
                    if let Decoded::Deliverable(envelope) = decode::<P::Event>(&self.contract, entry) {
                        w.state = self.processor.reduce(w.state.clone(), &envelope);
                    }
                    w.reduced = entry.position;
                }
                if reached_target {
                    w.reduced = target;
                }
                self.commit(w, None).await?;
                committed = true;
            }
            if force_commit && !committed {
                self.commit(w, None).await?;
            }
            Ok(())
        }
        .instrument(span)
        .await
    }
}
