//! [`InProcMutex`]: a per-stream async lock (portable-architecture §4,
//! "per-stream Semaphore(1)").
//!
//! Invariant: within one [`InProcRegistry`], two guards for the same path are
//! never held at once. Waiters and the holder all keep the stream's context
//! alive, so they all contend on the same lock; locks of different paths are
//! independent. Waiters are served in FIFO order (tokio's mutex is fair).

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
        let guard = Arc::clone(&ctx.lock).lock_owned().await;
        // Tuple fields drop in order: the lock is released before the context
        // reference, so the context (and its map entry) outlive the guard.
        StreamGuard::new((guard, ctx))
    }
}
