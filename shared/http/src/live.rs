//! The cap on concurrent live readers (long-poll and SSE requests) per
//! process: each holds a connection, a task and a hub subscription for up to
//! the long-poll timeout or the SSE duration, so their number bounds memory.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// Slots for live readers; a slot is held until the reader's response ends.
#[derive(Clone)]
pub(crate) struct LiveReaders {
    slots: Arc<Semaphore>,
    max: usize,
    /// Spreads the `Retry-After` of refusals (the service's randomness).
    random: ds_core::Random,
}

impl LiveReaders {
    pub(crate) fn new(max: usize, random: ds_core::Random) -> Self {
        let max = max.min(Semaphore::MAX_PERMITS);
        Self { slots: Arc::new(Semaphore::new(max)), max, random }
    }

    /// A slot, or `503` with `Retry-After` when all are taken.
    pub(crate) fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.slots).try_acquire_owned().map_err(|_| ApiError::too_many_live_readers(self.max, &self.random))
    }
}
