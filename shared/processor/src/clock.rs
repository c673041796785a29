//! The production clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::ports::Clock;

/// Wall-clock epoch milliseconds advanced by tokio's monotonic clock, so it
/// also follows tokio's paused test time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base_instant: tokio::time::Instant,
    base_epoch_ms: u64,
}

impl TokioClock {
    pub fn new() -> Self {
        let base_epoch_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self { base_instant: tokio::time::Instant::now(), base_epoch_ms }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.base_instant.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base_epoch_ms.saturating_add(elapsed)
    }

    fn sleep_until(&self, deadline_ms: u64) -> BoxFuture<'static, ()> {
        let wait = deadline_ms.saturating_sub(self.now_ms());
        tokio::time::sleep(Duration::from_millis(wait)).boxed()
    }
}
