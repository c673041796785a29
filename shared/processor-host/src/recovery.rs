//! [`StreamRecovery`]: the runner's [`Recovery`] port over an
//! [`AlarmScheduler`] and the stream's journal.

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::StreamService;
use ds_processor::core_events::append_revival;
use ds_processor::{Alarm, AppendOutcome, Recovery, RecoveryError, StreamIncarnation};

use crate::alarms::AlarmScheduler;
use crate::journal::StreamJournal;

/// Revival alarms of the processors on the stream at `path`.
pub struct StreamRecovery {
    journal: StreamJournal,
    alarms: Arc<dyn AlarmScheduler>,
}

impl StreamRecovery {
    pub fn new(service: StreamService, path: &str, alarms: Arc<dyn AlarmScheduler>) -> Self {
        Self { journal: StreamJournal::new(service, path), alarms }
    }
}

#[async_trait]
impl Recovery for StreamRecovery {
    async fn arm(&self, slug: &str, incarnation: &StreamIncarnation, at_ms: u64) -> Result<(), RecoveryError> {
        // A fresh token per arming: the revival event is keyed by it.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let alarm = Alarm { slug: slug.to_owned(), incarnation: incarnation.clone(), token, at_ms };
        self.alarms.arm(self.journal.path(), &alarm).await
    }

    async fn disarm(&self, slug: &str) -> Result<(), RecoveryError> {
        self.alarms.disarm(self.journal.path(), slug).await
    }

    async fn handle_alarm(&self, alarm: &Alarm) -> Result<AppendOutcome, RecoveryError> {
        Ok(append_revival(&self.journal, alarm).await?)
    }
}
