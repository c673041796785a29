//! Checkpoints: writing the working cursors as the durable record.

use tracing::Instrument;

use super::working::Working;
use super::{Halt, Inner};
use crate::cadence::Moment;
use crate::fence::{Expectation, Fence};
use crate::ports::ProgressError;
use crate::processor::Processor;

impl<P: Processor> Inner<P> {
    /// Checkpoints if something settled since the ack and the cadence says so.
    pub(crate) async fn checkpoint_if_due(&self, w: &mut Working<P::State>, moment: Moment) -> Result<(), Halt> {
        if w.completed > w.acknowledged
            && (w.retry_commit || self.config.cadence.is_due(moment, &w.cadence, crate::time::epoch_ms(&self.clock)))
        {
            self.commit(w, None).await
        } else {
            Ok(())
        }
    }

    /// Writes `w` (ack = completed, fold at reduced) under the monotonic
    /// rules or an explicit expectation. Only a landed commit moves the durable
    /// ack and the published snapshot; a fenced one schedules a reload.
    pub(crate) async fn commit(&self, w: &mut Working<P::State>, expect: Option<Expectation>) -> Result<(), Halt> {
        let record = w.to_record()?;
        let fence = Fence {
            stream_incarnation: w.incarnation.clone(),
            cursor_revision: w.revision,
            expect: expect.unwrap_or(Expectation::Monotonic),
        };
        let span = tracing::debug_span!(
            "progress_commit",
            slug = %self.contract.slug,
            acknowledged_through = w.completed,
            reduced_through = w.reduced,
            revision = w.revision,
        );
        match self.store.commit(&record, &fence).instrument(span).await {
            Ok(()) => {
                w.acknowledged = w.completed;
                w.retry_commit = false;
                w.cadence.committed(crate::time::epoch_ms(&self.clock));
                self.view.publish_durable(w);
                Ok(())
            }
            Err(ProgressError::Rejected(rejection)) => {
                tracing::info!(slug = %self.contract.slug, %rejection, "progress commit fenced; reloading");
                self.view.note_error(format!("progress commit fenced: {rejection}"));
                w.needs_resync = true;
                Err(Halt::Fenced(rejection))
            }
            Err(e) => {
                w.retry_commit = true;
                self.view.note_error(e.to_string());
                Err(Halt::Failed(e.into()))
            }
        }
    }

    /// Replaces the working state with the durable record.
    pub(crate) async fn resync(&self, w: &mut Working<P::State>) -> Result<(), Halt> {
        *w = self.load().await?;
        self.view.publish_durable(w);
        Ok(())
    }
}
