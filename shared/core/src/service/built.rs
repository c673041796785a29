//! An append built under the stream's lock, from what the stream holds at
//! that moment (State Protocol compaction: a snapshot of the state through
//! the tail, appended right at the tail).
//!
//! Built outside the lock and appended with `expect_tail`, such an append
//! loses to every append that lands between its read of the stream and its
//! commit: under a writer that keeps the stream's pipeline full, every
//! try (and its rebuild) was refused, and about half the compactions gave
//! up after 16 (bench/results/2026-12-06-state-compaction.md). Here the
//! build runs inside the critical section, after the commits in flight are
//! durable, so no append of this process can land in between: the appends
//! queue behind one build instead. Another process's append still can (the
//! lock is per process); `expect_tail` keeps that case correct, and the
//! caller tries again.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;

use super::{AppendOutcome, AppendRequest, Reads, ServiceError, ServiceResult, StreamService};
use crate::StoreError;

/// Longest a build may hold the stream's lock. Also what ends the one
/// deadlock a build can meet: a read inside it that finds the stream
/// expired removes it, which takes the lock the build holds.
const BUILD_LIMIT: Duration = Duration::from_secs(10);
/// Longest wait, under the lock, for the commits in flight to be durable.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Makes an append from what the stream holds when it is called (see
/// [`StreamService::append_built`]).
#[async_trait]
pub trait BuildAppend: Send {
    /// The append to make now; `None`: make none (the builder keeps why).
    /// Called under the stream's lock, with every earlier append of this
    /// process durable and readable. It may be called again (a commit
    /// refused by another process's write is re-planned).
    async fn build(&mut self) -> Option<AppendRequest<'static>>;
}

impl StreamService {
    /// Appends what `build` makes, built under the stream's lock once the
    /// appends in flight are durable, so that no other append of this
    /// service lands between what the builder read and its append.
    /// `Ok(None)`: the builder made none.
    ///
    /// Appends of the stream wait for the build; keep it short (a builder
    /// that folds the stream catches up before, and only the last appends
    /// under the lock).
    pub async fn append_built(&self, path: &str, build: &mut dyn BuildAppend) -> ServiceResult<Option<AppendOutcome>> {
        self.refuse_registry_write(path)?;
        let stream = self.sub.registry.enter(path);
        // The request of this attempt: `mutate` plans twice when the first
        // plan commits nothing, and the second must not build again.
        let cell: Mutex<(&mut dyn BuildAppend, Option<Option<AppendRequest<'static>>>)> = Mutex::new((build, None));
        let outcome = self
            .mutate(&stream, |reads| {
                let (cell, stream) = (&cell, &stream);
                async move {
                    let mut cell = cell.lock().await;
                    if reads == Reads::MayCache || cell.1.is_none() {
                        self.drain_pipeline(stream.path()).await?;
                        let built = tokio::time::timeout(BUILD_LIMIT, cell.0.build()).await.map_err(|_| {
                            ServiceError::Store(StoreError::Unavailable(format!(
                                "an append built under the lock of {:?} took over {BUILD_LIMIT:?}",
                                stream.path()
                            )))
                        })?;
                        cell.1 = Some(built);
                    }
                    match cell.1.as_ref().and_then(Option::as_ref) {
                        // Consistent reads: the builder read the durable state.
                        Some(req) => self.plan_append(stream, req, Reads::Consistent).await,
                        None => Err(ServiceError::Contention),
                    }
                }
            })
            .await;
        let declined = matches!(cell.into_inner().1, Some(None));
        match outcome {
            Err(ServiceError::Contention) if declined => Ok(None),
            other => other.map(Some),
        }
    }

    /// Waits until no commit of `path` is in flight (called under its lock,
    /// so none can start).
    async fn drain_pipeline(&self, path: &str) -> ServiceResult<()> {
        let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
        while self.speculation.in_flight(path) {
            if tokio::time::Instant::now() >= deadline {
                return Err(ServiceError::Store(StoreError::Unavailable(format!(
                    "the appends in flight on {path:?} did not finish within {DRAIN_LIMIT:?}"
                ))));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }
}
