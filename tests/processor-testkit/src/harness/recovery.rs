//! In-memory recovery adapter: one-shot alarms per slug.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;

use async_trait::async_trait;

use super::crash::{freeze, Boundary, CrashSwitch};
use super::journal::MemoryJournal;
use crate::lock;
use ds_processor::core_events::append_revival;
use ds_processor::StreamIncarnation;
use ds_processor::{Alarm, AppendOutcome, Recovery, RecoveryError};

#[derive(Debug, Default)]
struct RecoveryState {
    armed: BTreeMap<String, Alarm>,
    next_token: u64,
    arms: u64,
    disarms: u64,
    failing_arms: u32,
}

/// One-shot revival alarms of one stream, at most one per processor slug,
/// and the handler that appends their revival events. Every `Arc` clone is
/// another instance over the same alarms; tokens come from one counter, so
/// they are unique across instances.
#[derive(Debug)]
pub struct MemoryRecovery {
    journal: Arc<MemoryJournal>,
    state: Mutex<RecoveryState>,
    crash: CrashSwitch,
}

impl MemoryRecovery {
    pub fn new(journal: Arc<MemoryJournal>, crash: CrashSwitch) -> Self {
        Self { journal, state: Mutex::new(RecoveryState::default()), crash }
    }

    pub fn armed(&self, slug: &str) -> Option<Alarm> {
        lock(&self.state).armed.get(slug).cloned()
    }

    pub fn arms(&self) -> u64 {
        lock(&self.state).arms
    }

    pub fn disarms(&self) -> u64 {
        lock(&self.state).disarms
    }

    /// The next `n` arm attempts fail.
    pub fn fail_next_arms(&self, n: u32) {
        lock(&self.state).failing_arms = n;
    }

    /// Plays the scheduler: removes and returns the alarms due at `now_ms`
    /// (they are one-shot), without handling them.
    pub fn take_due(&self, now_ms: u64) -> Vec<Alarm> {
        let mut s = lock(&self.state);
        let slugs: Vec<String> =
            s.armed.iter().filter(|(_, a)| a.at_ms <= now_ms).map(|(slug, _)| slug.clone()).collect();
        slugs.iter().filter_map(|slug| s.armed.remove(slug)).collect()
    }

    /// Fires every alarm due at `now_ms` and handles each. Returns the
    /// appends.
    pub async fn fire_due(&self, now_ms: u64) -> Result<Vec<AppendOutcome>, RecoveryError> {
        let mut outcomes = Vec::new();
        for alarm in &self.take_due(now_ms) {
            outcomes.push(self.handle_alarm(alarm).await?);
        }
        Ok(outcomes)
    }
}

#[async_trait]
impl Recovery for MemoryRecovery {
    async fn arm(&self, slug: &str, incarnation: &StreamIncarnation, at_ms: u64) -> Result<(), RecoveryError> {
        if self.crash.hit(Boundary::ArmAlarm) {
            return freeze().await;
        }
        let mut s = lock(&self.state);
        if s.failing_arms > 0 {
            s.failing_arms -= 1;
            return Err(RecoveryError::Unavailable("injected arm failure".into()));
        }
        s.next_token += 1;
        let token = format!("{slug}#{}", s.next_token);
        s.arms += 1;
        let alarm = Alarm { slug: slug.to_owned(), incarnation: incarnation.clone(), token, at_ms };
        s.armed.insert(slug.to_owned(), alarm);
        Ok(())
    }

    async fn disarm(&self, slug: &str) -> Result<(), RecoveryError> {
        let mut s = lock(&self.state);
        s.disarms += 1;
        s.armed.remove(slug);
        Ok(())
    }

    async fn handle_alarm(&self, alarm: &Alarm) -> Result<AppendOutcome, RecoveryError> {
        Ok(append_revival(self.journal.as_ref(), alarm).await?)
    }
}
