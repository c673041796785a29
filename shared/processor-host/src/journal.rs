//! [`StreamJournal`]: a JSON-mode stream as a processor's journal.

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use ds_core::{AppendOutcome as CoreAppend, AppendRequest, ServiceError, StreamService};
use ds_processor::{AppendOutcome, Journal, JournalEntry, JournalError, StreamIncarnation};

/// Most bytes one `read_after` reads from the stream (it returns at most
/// `limit` entries of them).
const READ_BYTES: usize = 256 * 1024;

/// The JSON stream at `path`, through the core service (so appends follow
/// every stream rule and wake live readers).
#[derive(Clone)]
pub struct StreamJournal {
    service: StreamService,
    path: String,
}

impl StreamJournal {
    pub fn new(service: StreamService, path: &str) -> Self {
        Self { service, path: path.to_owned() }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// At most `limit` entries after `after`, and the stream's tail when
    /// they were read (consistent with them): what `read_after` returns,
    /// plus the tail a caller may cache to answer a read from there empty.
    pub async fn read_page(
        &self,
        incarnation: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<JournalEntry>, u64), JournalError> {
        let page = self
            .service
            .read_journal(&self.path, incarnation.as_str(), after, READ_BYTES)
            .await
            .map_err(|e| journal_error(e, incarnation))?;
        let entries = page.entries.into_iter().take(limit).map(|(position, data)| JournalEntry::new(position, data));
        Ok((entries.collect(), page.tail))
    }
}

/// A service error as the journal reports it, for a caller bound to `bound`.
pub(crate) fn journal_error(e: ServiceError, bound: &StreamIncarnation) -> JournalError {
    match e {
        ServiceError::IncarnationChanged { found, .. } => {
            JournalError::IncarnationChanged { expected: bound.clone(), current: Some(StreamIncarnation::new(found)) }
        }
        ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_) => {
            JournalError::IncarnationChanged { expected: bound.clone(), current: None }
        }
        ServiceError::NotRetained { earliest } => JournalError::NotRetained { earliest },
        other => JournalError::Unavailable(other.to_string()),
    }
}

#[async_trait]
impl Journal for StreamJournal {
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError> {
        match self.service.head(&self.path).await {
            Ok(meta) => Ok(StreamIncarnation::new(meta.incarnation.to_string())),
            Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::Expired(_)) => {
                Err(JournalError::StreamNotFound)
            }
            Err(e) => Err(JournalError::Unavailable(e.to_string())),
        }
    }

    async fn read_after(
        &self,
        incarnation: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        Ok(self.read_page(incarnation, after, limit).await?.0)
    }

    async fn append(
        &self,
        incarnation: &StreamIncarnation,
        data: Bytes,
        idempotency_key: &str,
    ) -> Result<AppendOutcome, JournalError> {
        // One entry per append: wrapped in an array the body is exactly one
        // message, even if `data` is itself an array.
        let mut body = BytesMut::with_capacity(data.len() + 2);
        body.put_u8(b'[');
        body.put_slice(&data);
        body.put_u8(b']');
        let request = AppendRequest {
            path: self.path.as_str().into(),
            content_type: Some("application/json".into()),
            body: body.freeze(),
            close: false,
            seq: None,
            producer: None,
            dedupe_key: Some(idempotency_key.to_owned()),
            incarnation: Some(incarnation.as_str().to_owned()),
            expect_tail: None,
            trace_context: None,
        };
        match self.service.append(request).await.map_err(|e| journal_error(e, incarnation))? {
            CoreAppend::Appended { meta, .. } => Ok(AppendOutcome { position: meta.tail, deduplicated: false }),
            CoreAppend::AlreadyAppended { end, .. } => Ok(AppendOutcome { position: end, deduplicated: true }),
            other => Err(JournalError::Unavailable(format!("unexpected append outcome {other:?}"))),
        }
    }

    async fn trace_context(&self, incarnation: &StreamIncarnation, position: u64) -> Option<String> {
        match self.service.trace_context_at(&self.path, incarnation.as_str(), position).await {
            Ok(context) => context,
            Err(e) => {
                tracing::debug!(path = %self.path, error = %e, "trace ring not read");
                None
            }
        }
    }
}
