//! In-memory progress store applying the shared fence rules.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::crash::{freeze, Boundary, CrashSwitch};
use super::timeline::{Mark, Timeline};
use crate::lock;
use ds_processor::StoredProgress;
use ds_processor::StreamIncarnation;
use ds_processor::{check_fence, Fence, FenceRejection};
use ds_processor::{ProgressError, ProgressStore};

#[derive(Debug, Default)]
struct StoreState {
    /// One record per stream incarnation.
    records: HashMap<StreamIncarnation, StoredProgress>,
    last_committed: Option<StreamIncarnation>,
    history: Vec<StoredProgress>,
    rejections: Vec<FenceRejection>,
    failing_commits: u32,
}

/// The records of one (stream, processor), one per stream incarnation, with
/// the full history of landed commits for invariant checks. Every `Arc`
/// clone is another instance over the same storage; the lock makes the fence
/// check and the write one atomic step.
#[derive(Debug, Default)]
pub struct MemoryProgressStore {
    state: Mutex<StoreState>,
    crash: CrashSwitch,
    timeline: Timeline,
}

impl MemoryProgressStore {
    pub fn new(crash: CrashSwitch, timeline: Timeline) -> Self {
        Self { state: Mutex::new(StoreState::default()), crash, timeline }
    }

    /// The record of the incarnation that committed last (the live one in
    /// every test that does not race a dead incarnation).
    pub fn record(&self) -> Option<StoredProgress> {
        let s = lock(&self.state);
        s.last_committed.as_ref().and_then(|i| s.records.get(i)).cloned()
    }

    /// The record of `incarnation`.
    pub fn record_of(&self, incarnation: &StreamIncarnation) -> Option<StoredProgress> {
        lock(&self.state).records.get(incarnation).cloned()
    }

    /// Every record that landed, oldest first.
    pub fn history(&self) -> Vec<StoredProgress> {
        lock(&self.state).history.clone()
    }

    pub fn rejections(&self) -> Vec<FenceRejection> {
        lock(&self.state).rejections.clone()
    }

    /// The next `n` commits fail as unavailable (nothing stored).
    pub fn fail_next_commits(&self, n: u32) {
        lock(&self.state).failing_commits = n;
    }
}

#[async_trait]
impl ProgressStore for MemoryProgressStore {
    async fn read(&self, incarnation: &StreamIncarnation) -> Result<Option<StoredProgress>, ProgressError> {
        Ok(self.record_of(incarnation))
    }

    async fn commit(&self, record: &StoredProgress, fence: &Fence) -> Result<(), ProgressError> {
        let refold_page = record.progress.reduction.reduced_through < record.progress.acknowledged_through();
        if refold_page && self.crash.hit(Boundary::RefoldPageCommit) {
            return freeze().await;
        }
        if self.crash.hit(Boundary::BeforeProgressCommit) {
            return freeze().await;
        }
        {
            let mut s = lock(&self.state);
            if s.failing_commits > 0 {
                s.failing_commits -= 1;
                return Err(ProgressError::Unavailable("injected commit failure".into()));
            }
            let stored = s.records.get(&fence.stream_incarnation);
            if let Err(rejection) = check_fence(stored, record, fence) {
                s.rejections.push(rejection.clone());
                return Err(rejection.into());
            }
            s.records.insert(fence.stream_incarnation.clone(), record.clone());
            s.last_committed = Some(fence.stream_incarnation.clone());
            s.history.push(record.clone());
            self.timeline.push(Mark::Committed {
                acknowledged_through: record.progress.acknowledged_through(),
                reduced_through: record.progress.reduction.reduced_through,
                cursor_revision: record.progress.cursor_revision(),
            });
        }
        if self.crash.hit(Boundary::AfterProgressCommit) {
            return freeze().await;
        }
        Ok(())
    }
}
