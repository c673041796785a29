//! [`RecordProgressStore`]: one processor's progress on one stream
//! incarnation, as the keyed record `progress/<slug>` of that incarnation.
//!
//! A commit is one conditional write. This instance remembers the record it
//! last read or wrote (with the record's revision); `commit` checks the fence
//! rules against that record and writes under the precondition "the stored
//! revision is still that one". If another instance wrote meanwhile, the
//! write fails, the record is read again and the fence rules decide against
//! the fresh one — so the rules always hold against what is actually stored,
//! and the common case costs one call (on AWS, one conditional write inside
//! a `TransactWriteItems`).

use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use ds_core::{Commit, Op, Record, RecordExpect, StoreError, StreamHandle, StreamService};
use ds_processor::{check_fence, Fence, ProgressError, ProgressStore, StoredProgress, StreamIncarnation};

/// Attempts of one commit that loses to concurrent writers before it gives up
/// as unavailable (each loss re-reads and re-checks the fence first).
const ATTEMPTS: u32 = 8;

/// What this instance last saw of the record of one incarnation.
#[derive(Clone)]
struct Seen {
    incarnation: StreamIncarnation,
    /// `(record revision, decoded progress)`; `None`: no record.
    stored: Option<(u64, StoredProgress)>,
}

/// Progress of processor `slug` on the stream at `path` (see module docs).
pub struct RecordProgressStore {
    service: StreamService,
    stream: StreamHandle,
    key: String,
    seen: Mutex<Option<Seen>>,
}

impl RecordProgressStore {
    pub fn new(service: StreamService, path: &str, slug: &str) -> Self {
        let stream = service.substrate().registry.enter(path);
        Self { service, stream, key: progress_key(slug), seen: Mutex::new(None) }
    }

    fn seen(&self, incarnation: &StreamIncarnation) -> Option<Option<(u64, StoredProgress)>> {
        let seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.as_ref().filter(|s| s.incarnation == *incarnation).map(|s| s.stored.clone())
    }

    fn remember(&self, incarnation: &StreamIncarnation, stored: Option<(u64, StoredProgress)>) {
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *seen = Some(Seen { incarnation: incarnation.clone(), stored });
    }

    /// The stored record of `incarnation`, read from the store.
    async fn fetch(&self, incarnation: &StreamIncarnation) -> Result<Option<(u64, StoredProgress)>, ProgressError> {
        let store = &self.service.substrate().store;
        let record = store.read_record(&self.stream, incarnation.as_str(), &self.key).await.map_err(unavailable)?;
        let stored = record.map(|r| decode(&r).map(|p| (r.revision, p))).transpose()?;
        self.remember(incarnation, stored.clone());
        Ok(stored)
    }
}

/// The record key of processor `slug`'s progress.
pub fn progress_key(slug: &str) -> String {
    format!("progress/{slug}")
}

fn unavailable(e: StoreError) -> ProgressError {
    ProgressError::Unavailable(e.to_string())
}

fn decode(record: &Record) -> Result<StoredProgress, ProgressError> {
    serde_json::from_slice(&record.value)
        .map_err(|e| ProgressError::Unavailable(format!("progress record is not readable: {e}")))
}

#[async_trait]
impl ProgressStore for RecordProgressStore {
    async fn read(&self, incarnation: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError> {
        Ok(self.fetch(incarnation).await?.map(|(_, p)| p))
    }

    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError> {
        let incarnation = &fence.stream_incarnation;
        let value = Bytes::from(
            serde_json::to_vec(record).map_err(|e| ProgressError::Unavailable(format!("encoding progress: {e}")))?,
        );
        let (mut stored, mut fresh) = match self.seen(incarnation) {
            Some(stored) => (stored, false),
            None => (self.fetch(incarnation).await?, true),
        };
        for _ in 0..ATTEMPTS {
            if let Err(rejection) = check_fence(stored.as_ref().map(|(_, p)| p), record, fence) {
                // Only what is actually stored may refuse a commit: a
                // remembered record may be stale.
                if fresh {
                    return Err(rejection.into());
                }
                (stored, fresh) = (self.fetch(incarnation).await?, true);
                continue;
            }
            let (revision, expect) = match &stored {
                Some((rev, _)) => (rev + 1, RecordExpect::Revision(*rev)),
                None => (1, RecordExpect::Absent),
            };
            let op = Op::PutRecord {
                path: self.stream.path().into(),
                incarnation: incarnation.as_str().into(),
                key: self.key.clone(),
                record: Record { revision, value: value.clone() },
                expect,
            };
            match self.service.substrate().store.commit(Commit { ops: vec![op] }).await {
                Ok(()) => {
                    self.remember(incarnation, Some((revision, record.clone())));
                    return Ok(());
                }
                Err(StoreError::Conflict) => {
                    (stored, fresh) = (self.fetch(incarnation).await?, true);
                    // A write whose answer was lost may have landed: that is ours.
                    if stored.as_ref().is_some_and(|(rev, p)| *rev == revision && p == record) {
                        return Ok(());
                    }
                }
                Err(StoreError::TooLarge(m)) => return Err(ProgressError::TooLarge(m)),
                Err(e) => {
                    // The outcome may be unknown: read before the next commit.
                    *self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                    return Err(unavailable(e));
                }
            }
        }
        Err(ProgressError::Unavailable(format!("progress commit lost {ATTEMPTS} races in a row")))
    }
}
