//! The operator API over the host's open runners: statuses from the
//! runners' views (a stream whose runner is not open yet answers from its
//! progress record), controls through the runner that is processing the
//! stream, which is then rung so it processes what the control changed.

use std::sync::Arc;

use async_trait::async_trait;
use ds_processor_host::{
    processed_stream, record_detail, resolve, runner_detail, stored_progress, Control, OperatorError, ProcessorDetail,
    ProcessorOperator, ProcessorPage, ProcessorStatus,
};

use crate::host::{matching, Inner};
use crate::slot::Slot;

pub(crate) struct LocalOperator {
    pub(crate) inner: Arc<Inner>,
}

impl LocalOperator {
    async fn status(&self, stream: &str, slot: &Slot) -> Result<Option<ProcessorStatus>, OperatorError> {
        let service = &self.inner.running().service;
        let meta = match processed_stream(service, stream).await {
            Ok(meta) => meta,
            // Gone meanwhile, or never a JSON stream: nothing to show.
            Err(OperatorError::StreamNotFound { .. } | OperatorError::NotJson { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        // A runner still on a life that is over (the stream was re-created and
        // the slot has not moved on yet) has processed nothing of this one:
        // answer from this life's progress record, so its lag is not read
        // against the old life's cursor.
        Ok(Some(match slot.runner().filter(|r| r.incarnation() == &*meta.incarnation) {
            Some(runner) => ProcessorStatus::of_runner(&slot.registration, stream, meta.tail, &runner.runtime_state()),
            None => {
                let stored = stored_progress(service, &meta, slot.slug()).await?;
                ProcessorStatus::of_record(&slot.registration, stream, meta.tail, stored.as_ref())
            }
        }))
    }

    /// The running slot of `slug` on `stream`, started if the stream exists
    /// but has none yet (e.g. it was created a moment ago).
    async fn slot(&self, slug: &str, stream: &str) -> Result<Arc<Slot>, OperatorError> {
        let running = self.inner.running();
        resolve(&running.registry, slug, stream)?;
        processed_stream(&running.service, stream).await?;
        if let Some(slot) = self.inner.slot(stream, slug) {
            return Ok(slot);
        }
        self.inner.ensure(stream, matching(&running.registry, stream), None);
        self.inner.slot(stream, slug).ok_or_else(|| OperatorError::StreamNotFound { stream: stream.to_owned() })
    }
}

#[async_trait]
impl ProcessorOperator for LocalOperator {
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ProcessorPage, OperatorError> {
        let mut page = ProcessorPage { processors: Vec::new(), next: None };
        let mut streams = 0;
        for (stream, slots) in self.inner.slots() {
            if after.is_some_and(|a| stream.as_str() <= a) {
                continue;
            }
            if streams == limit {
                page.next = page.processors.last().map(|s| s.stream.clone());
                break;
            }
            let before = page.processors.len();
            for slot in &slots {
                page.processors.extend(self.status(&stream, slot).await?);
            }
            streams += usize::from(page.processors.len() > before);
        }
        Ok(page)
    }

    async fn show(&self, slug: &str, stream: &str) -> Result<ProcessorDetail, OperatorError> {
        let running = self.inner.running();
        let registration = resolve(&running.registry, slug, stream)?;
        let meta = processed_stream(&running.service, stream).await?;
        let runner = self.inner.slot(stream, slug).and_then(|s| s.runner());
        // As in `status`: a runner on a life that is over shows nothing of this one.
        if let Some(runner) = runner.filter(|r| r.incarnation() == &*meta.incarnation) {
            return Ok(runner_detail(registration, stream, meta.tail, runner.as_ref()));
        }
        record_detail(&running.service, registration, &meta, slug).await
    }

    async fn control(&self, slug: &str, stream: &str, control: Control) -> Result<ProcessorDetail, OperatorError> {
        let slot = self.slot(slug, stream).await?;
        let runner =
            slot.runner_or_open(&self.inner.opening()).await.map_err(|turn| turn.into_operator_error(stream))?;
        let applied = control.apply(runner.as_ref()).await;
        // Whatever happened, let the slot look again (a rewind has work to redo).
        slot.ring();
        applied?;
        tracing::info!(stream, processor = slug, ?control, "operator control applied");
        let meta = processed_stream(&self.inner.running().service, stream).await?;
        Ok(runner_detail(&slot.registration, stream, meta.tail, runner.as_ref()))
    }
}
