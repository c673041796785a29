//! [`InProcMutex`]: a per-stream async lock (portable-architecture §4,
//! "per-stream Semaphore(1)").
//!
//! Invariant: within one [`InProcRegistry`], two guards for the same path are
//! never held at once. Waiters and the holder all keep the stream's context
//! alive, so they all contend on the same lock; locks of different paths are
//! independent. Waiters are served in FIFO order (tokio's semaphore is fair).
//!
//! Before it queues, a locker spins briefly on the free permit (see
//! [`SPIN`]): that never jumps the queue either, since a released permit goes
//! straight to the first waiter and a spinner only ever finds one nobody is
//! waiting for.

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{StreamGuard, StreamHandle, StreamMutex};

use crate::registry::InProcRegistry;

/// Tries for the lock before the caller is queued and parked. The critical
/// sections of the in-process stores do not wait (the store answers and
/// applies without suspending), so a holder on the other worker thread is
/// gone within microseconds, and parking costs more: the queued task is
/// woken and polled again, and every locker after it queues too until the
/// queue drains. At 64 writers on one memory stream a third of the appends
/// took the queue; with this spin, server CPU per append went from 7.1–7.4
/// to 6.2–6.4 µs (wrk -c64, three runs each) and context switches per
/// append from 0.16–0.19 to 0.03–0.06; the local store was unchanged. At
/// most about 4 µs of spinning on the bench machine (256 pause
/// instructions), when the holder does wait (a read of the disk).
const SPIN: usize = 256;

/// In-process [`StreamMutex`].
pub struct InProcMutex {
    registry: Arc<InProcRegistry>,
}

impl InProcMutex {
    pub fn new(registry: Arc<InProcRegistry>) -> Self {
        Self { registry }
    }
}

#[async_trait]
impl StreamMutex for InProcMutex {
    async fn lock(&self, stream: &StreamHandle) -> StreamGuard {
        let ctx = self.registry.context_of(stream);
        for _ in 0..SPIN {
            std::hint::spin_loop();
            if ctx.lock.try_acquire().map(|permit| permit.forget()).is_ok() {
                return StreamGuard::releasing(ctx);
            }
        }
        let acquired = ctx.lock.acquire().await.map(|permit| permit.forget()).is_ok();
        if acquired {
            // The permit goes back through the guard (`Release`), which
            // holds the context: the context (and its map entry) outlive it.
            StreamGuard::releasing(ctx)
        } else {
            // Never closed. Were it closed, the guard would give back
            // nothing rather than a permit it never got.
            StreamGuard::new(ctx)
        }
    }

    /// tokio's semaphore hands a released permit straight to the first
    /// waiter, so a free lock has no waiters and this never jumps the queue.
    fn try_lock(&self, stream: &StreamHandle) -> Option<StreamGuard> {
        let ctx = self.registry.context_of(stream);
        ctx.lock.try_acquire().ok()?.forget();
        Some(StreamGuard::releasing(ctx))
    }
}
