//! [`DoorbellJournal`]: the stream journal as a doorbell-driven host reads
//! it, so a processed batch costs one journal read.
//!
//! A runner's scan ends by reading past the last entry to confirm it is at
//! the head. The core's journal page already says where the tail was when
//! it was read (consistently), so a read starting at that tail is answered
//! empty without another round trip. That is only sound because the host is
//! doorbell-driven: any append after the page was read writes a chunk whose
//! stream record invokes the host again, and the host forgets the head
//! ([`DoorbellJournal::forget_head`]) before every drive. The journal's own
//! appends forget it too.
//!
//! It also opens on the incarnation the doorbell named (no read); if the
//! stream was re-created since, the first read fails with
//! `IncarnationChanged` and the host opens the runner anew.

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::StreamService;
use ds_processor::{AppendOutcome, Journal, JournalEntry, JournalError, StreamIncarnation};
use ds_processor_host::StreamJournal;

/// See the module docs.
pub struct DoorbellJournal {
    inner: StreamJournal,
    /// The incarnation the doorbell named, used once by `incarnation()`.
    hint: Mutex<Option<StreamIncarnation>>,
    /// `(incarnation, tail)` of the last page read in this drive.
    head: Mutex<Option<(StreamIncarnation, u64)>>,
    /// The tail the last page read reported (kept when the head is
    /// forgotten): what the lag figure is measured against.
    seen_tail: Mutex<Option<u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl DoorbellJournal {
    pub fn new(service: StreamService, path: &str, hint: Option<StreamIncarnation>) -> Self {
        Self {
            inner: StreamJournal::new(service, path),
            hint: Mutex::new(hint),
            head: Mutex::new(None),
            seen_tail: Mutex::new(None),
        }
    }

    /// The stream's tail as the last page read reported it (`None`: no
    /// page read yet).
    pub fn seen_tail(&self) -> Option<u64> {
        *lock(&self.seen_tail)
    }

    /// A doorbell rang: the next read goes to the store.
    pub fn forget_head(&self) {
        *lock(&self.head) = None;
    }
}

#[async_trait]
impl Journal for DoorbellJournal {
    async fn incarnation(&self) -> Result<StreamIncarnation, JournalError> {
        if let Some(hint) = lock(&self.hint).take() {
            return Ok(hint);
        }
        self.inner.incarnation().await
    }

    async fn read_after(
        &self,
        incarnation: &StreamIncarnation,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let known = lock(&self.head).as_ref().is_some_and(|(inc, tail)| inc == incarnation && after >= *tail);
        if known {
            return Ok(Vec::new());
        }
        let (entries, tail) = self.inner.read_page(incarnation, after, limit).await?;
        *lock(&self.head) = Some((incarnation.clone(), tail));
        *lock(&self.seen_tail) = Some(tail);
        Ok(entries)
    }

    async fn append(
        &self,
        incarnation: &StreamIncarnation,
        data: Bytes,
        idempotency_key: &str,
    ) -> Result<AppendOutcome, JournalError> {
        self.forget_head();
        self.inner.append(incarnation, data, idempotency_key).await
    }

    async fn trace_context(&self, incarnation: &StreamIncarnation, position: u64) -> Option<String> {
        self.inner.trace_context(incarnation, position).await
    }
}
