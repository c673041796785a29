//! The seam between the subscription engine and whatever runs it later:
//! [`WakeScheduler`] asks for [`crate::Subscriptions::run_due`] of one
//! subscription at a time (now, for a wake to deliver; at a lease's end; at
//! a persisted retry time). The time itself is always in the subscription
//! record too (`next_due`), so a host that restarts re-arms from the records
//! ([`crate::Subscriptions::start`]) and a lost timer only delays.
//!
//! [`InProcWakes`] is the in-process implementation (tokio timers, due ids
//! on a channel the host drains) that the local server runs for every
//! store. [`FeedWakes`] is for a front end that only serves the API while
//! another host runs the subscriptions from the store's change stream (the
//! HTTP function on AWS; the processor function delivers and keeps the
//! times, `ds_processor_aws::subscriptions`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use async_trait::async_trait;
use ds_core::Clock;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::AbortHandle;

/// Runs `Subscriptions::run_due(id)` at a time.
#[async_trait]
pub trait WakeScheduler: Send + Sync {
    /// Run `id` at `at_ms` (epoch ms; past times mean now), replacing the
    /// time set before for `id`.
    async fn wake_at(&self, id: &str, at_ms: i64);
    /// Forget `id`'s time.
    async fn cancel(&self, id: &str);
}

struct Timer {
    at_ms: i64,
    token: u64,
    handle: AbortHandle,
}

struct Inner {
    /// What the times are read on (the service's).
    clock: Clock,
    due: UnboundedSender<String>,
    timers: Mutex<HashMap<String, Timer>>,
    next_token: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in self.timers.lock().unwrap_or_else(PoisonError::into_inner).values() {
            t.handle.abort();
        }
    }
}

/// Tokio timers; fired ids arrive on the receiver [`InProcWakes::new`]
/// returns. At most one timer per id (bounded by the subscriptions).
pub struct InProcWakes {
    inner: Arc<Inner>,
}

impl InProcWakes {
    /// Timers on `clock` (the service's, so a manual one in tests).
    pub fn new(clock: Clock) -> (Self, UnboundedReceiver<String>) {
        let (due, rx) = unbounded_channel();
        let inner = Inner { clock, due, timers: Mutex::new(HashMap::new()), next_token: AtomicU64::new(0) };
        (Self { inner: Arc::new(inner) }, rx)
    }

    /// Ids with a timer (tests).
    pub fn armed(&self) -> Vec<(String, i64)> {
        let timers = self.inner.timers.lock().unwrap_or_else(PoisonError::into_inner);
        timers.iter().map(|(id, t)| (id.clone(), t.at_ms)).collect()
    }
}

async fn fire(inner: Weak<Inner>, id: String, token: u64, at_ms: i64) {
    let wait = match inner.upgrade() {
        Some(inner) => inner.clock.sleep_until(at_ms),
        None => return,
    };
    wait.await;
    let Some(inner) = inner.upgrade() else { return };
    let mut timers = inner.timers.lock().unwrap_or_else(PoisonError::into_inner);
    if timers.get(&id).is_some_and(|t| t.token == token) {
        timers.remove(&id);
        // A closed channel means the host stopped.
        let _ = inner.due.send(id);
    }
}

#[async_trait]
impl WakeScheduler for InProcWakes {
    async fn wake_at(&self, id: &str, at_ms: i64) {
        let token = self.inner.next_token.fetch_add(1, Ordering::Relaxed);
        let mut timers = self.inner.timers.lock().unwrap_or_else(PoisonError::into_inner);
        // Spawned under the map lock: the timer cannot look for its entry
        // before it is there.
        let handle = tokio::spawn(fire(Arc::downgrade(&self.inner), id.to_owned(), token, at_ms)).abort_handle();
        if let Some(old) = timers.insert(id.to_owned(), Timer { at_ms, token, handle }) {
            old.handle.abort();
        }
    }

    async fn cancel(&self, id: &str) {
        if let Some(old) = self.inner.timers.lock().unwrap_or_else(PoisonError::into_inner).remove(id) {
            old.handle.abort();
        }
    }
}

/// The scheduler of a front end that never runs subscriptions itself: it
/// serves the API, and each transition it makes is a committed change of
/// the subscription's record. The store's change stream brings that change
/// to the host that runs subscriptions, which looks at the record
/// (`Subscriptions::record_changed`): it delivers a wake the change issued
/// and keeps the record's next time. So nothing is asked of this one, and
/// no request waits on a delivery.
pub struct FeedWakes;

#[async_trait]
impl WakeScheduler for FeedWakes {
    async fn wake_at(&self, _id: &str, _at_ms: i64) {}
    async fn cancel(&self, _id: &str) {}
}
