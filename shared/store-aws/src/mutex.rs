//! [`StreamMutex`] for a multi-instance substrate: an in-process per-stream
//! semaphore, as an optimization only. It keeps this process's writers of one
//! stream from racing each other (so they do not waste transactions on lost
//! races). Two Lambda instances are never excluded by it: there the
//! guarantee is the commit's version condition (see [`crate::txn`]).

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{StreamGuard, StreamHandle, StreamMutex};
use tokio::sync::OwnedSemaphorePermit;

use crate::registry::{Registry, StreamCtx};

pub struct AwsMutex {
    pub(crate) registry: Arc<Registry>,
}

/// Holds the permit, and the context alive while held.
struct Guard {
    _ctx: Arc<StreamCtx>,
    _permit: OwnedSemaphorePermit,
}

#[async_trait]
impl StreamMutex for AwsMutex {
    async fn lock(&self, stream: &StreamHandle) -> StreamGuard {
        let ctx = self.registry.context_of(stream);
        let permit = match Arc::clone(&ctx.lock).acquire_owned().await {
            Ok(p) => p,
            // The semaphore is never closed; if it were, running without the
            // in-process optimization is still correct (commit conditions).
            Err(_) => return StreamGuard::new(ctx),
        };
        StreamGuard::new(Guard { _ctx: ctx, _permit: permit })
    }
}
