//! [`InProcScheduler`]: expiry alarms on tokio timers, delivered as
//! [`ExpiryDue`] messages on a channel the host drains (calling
//! `StreamService::run_expiry` for each).
//!
//! Invariants: at most one alarm per `(path, incarnation)` (re-scheduling
//! replaces it); after `cancel` returns, the cancelled alarm never fires (the
//! firing timer re-checks under the same lock); timers of a dropped scheduler
//! are aborted. Alarms do not survive a restart: hosts re-arm them from a
//! `list_streams` sweep on start-up (expiry is enforced lazily anyway).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use async_trait::async_trait;
use ds_core::{Clock, ExpiryDue, ExpiryScheduler, StoreError};
use futures::future::BoxFuture;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::AbortHandle;

type AlarmKey = (String, String);

struct Alarm {
    /// Distinguishes this alarm from a later replacement for the same key.
    generation: u64,
    timer: AbortHandle,
}

struct Inner {
    tx: UnboundedSender<ExpiryDue>,
    clock: Clock,
    alarms: Mutex<HashMap<AlarmKey, Alarm>>,
    next_generation: AtomicU64,
}

// Each critical section leaves the map valid, so a poisoned lock is recoverable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Inner {
    fn drop(&mut self) {
        for alarm in lock(&self.alarms).values() {
            alarm.timer.abort();
        }
    }
}

/// In-process [`ExpiryScheduler`]. `schedule_at` must run inside a tokio runtime.
pub struct InProcScheduler {
    inner: Arc<Inner>,
}

impl InProcScheduler {
    /// The scheduler on `clock` (an alarm fires when the clock reaches its
    /// time) and the receiver its alarms arrive on.
    pub fn new(clock: Clock) -> (Self, UnboundedReceiver<ExpiryDue>) {
        let (tx, rx) = unbounded_channel();
        let inner = Inner { tx, clock, alarms: Mutex::new(HashMap::new()), next_generation: AtomicU64::new(0) };
        (Self { inner: Arc::new(inner) }, rx)
    }

    /// Number of armed alarms (for tests and metrics).
    pub fn pending(&self) -> usize {
        lock(&self.inner.alarms).len()
    }
}

/// Timer body: wait, then deliver unless replaced or cancelled meanwhile.
async fn fire(inner: Weak<Inner>, key: AlarmKey, generation: u64, due: BoxFuture<'static, ()>) {
    due.await;
    let Some(inner) = inner.upgrade() else { return };
    let mut alarms = lock(&inner.alarms);
    if alarms.get(&key).is_some_and(|a| a.generation == generation) {
        alarms.remove(&key);
        let (path, incarnation) = key;
        // A dropped receiver means the host stopped listening; nothing to do.
        let _ = inner.tx.send(ExpiryDue { path, incarnation });
    }
}

#[async_trait]
impl ExpiryScheduler for InProcScheduler {
    async fn schedule_at(&self, path: &str, incarnation: &str, at_ms: i64) -> Result<(), StoreError> {
        let key: AlarmKey = (path.to_owned(), incarnation.to_owned());
        let generation = self.inner.next_generation.fetch_add(1, Ordering::Relaxed);
        let mut alarms = lock(&self.inner.alarms);
        // Spawned while holding the map lock: the timer cannot look up its
        // entry before it is inserted.
        let due = self.inner.clock.sleep_until(at_ms);
        let timer = tokio::spawn(fire(Arc::downgrade(&self.inner), key.clone(), generation, due));
        if let Some(old) = alarms.insert(key, Alarm { generation, timer: timer.abort_handle() }) {
            old.timer.abort();
        }
        Ok(())
    }

    async fn cancel(&self, path: &str, incarnation: &str) -> Result<(), StoreError> {
        let key: AlarmKey = (path.to_owned(), incarnation.to_owned());
        if let Some(old) = lock(&self.inner.alarms).remove(&key) {
            old.timer.abort();
        }
        Ok(())
    }
}
