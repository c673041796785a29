//! [`InProcMutex`]: a per-stream async lock (portable-architecture §4,
//! "per-stream Semaphore(1)").
//!
//! Invariant: within one [`InProcRegistry`], two guards for the same path are
//! never held at once. Waiters and the holder all keep the stream's context
//! alive, so they all contend on the same lock; locks of different paths are
//! independent. Waiters are served in FIFO order (tokio's semaphore is fair).

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{StreamGuard, StreamHandle, StreamMutex};

use crate::registry::InProcRegistry;

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
