//! A clock that moves only when told to.

use std::sync::Mutex;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;

use crate::ports::Clock;
use crate::sync_util::lock;

#[derive(Debug, Default)]
struct ClockState {
    now: u64,
    sleepers: Vec<(u64, oneshot::Sender<()>)>,
}

/// Manual clock: `sleep_until` resolves only when [`ManualClock::advance`]
/// (or `set`) moves time past the deadline.
#[derive(Debug, Default)]
pub struct ManualClock {
    state: Mutex<ClockState>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        Self { state: Mutex::new(ClockState { now: start_ms, sleepers: Vec::new() }) }
    }

    pub fn advance(&self, ms: u64) {
        let now = self.now_ms().saturating_add(ms);
        self.set(now);
    }

    pub fn set(&self, now_ms: u64) {
        let due = {
            let mut s = lock(&self.state);
            s.now = s.now.max(now_ms);
            let now = s.now;
            let (due, pending): (Vec<_>, Vec<_>) = s.sleepers.drain(..).partition(|(at, _)| *at <= now);
            s.sleepers = pending;
            due
        };
        for (_, wake) in due {
            let _ = wake.send(());
        }
    }

    /// Earliest pending sleep deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        lock(&self.state).sleepers.iter().map(|(at, _)| *at).min()
    }

    pub fn sleepers(&self) -> usize {
        lock(&self.state).sleepers.len()
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        lock(&self.state).now
    }

    fn sleep_until(&self, deadline_ms: u64) -> BoxFuture<'static, ()> {
        let mut s = lock(&self.state);
        if deadline_ms <= s.now {
            return futures::future::ready(()).boxed();
        }
        let (tx, rx) = oneshot::channel();
        s.sleepers.push((deadline_ms, tx));
        async move {
            // A dropped clock never wakes the sleeper, like time stopping.
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        .boxed()
    }
}
