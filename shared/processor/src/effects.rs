//! The two effect doors handed to `process_event`.
//!
//! `process_event` is synchronous: it only *registers* work. The runner then
//! drives it:
//! * [`Effects::block_processor_while`] — a strict per-event barrier. The
//!   event completes (and the next one starts) only after every blocker
//!   registered for it succeeded, one after the other in registration order.
//!   A failing blocker is re-invoked with exponential backoff, forever.
//! * [`Effects::run_in_background`] — overtaking work. It starts at once and
//!   delays no later event; the recovery adapter owns its outcome: a revival
//!   alarm stays armed while any is owed.

use std::fmt;
use std::future::Future;

use futures::future::BoxFuture;

/// Failure of an effect; the message lands in `runtime_state().last_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EffectError {
    message: String,
}

impl EffectError {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A boxed effect future.
pub type EffectFuture = BoxFuture<'static, Result<(), EffectError>>;

/// Blocking work is a factory, not a future: a retry needs a fresh attempt.
pub(crate) type BlockingWork = Box<dyn FnMut() -> EffectFuture + Send>;

/// Work registered by one `process_event` call.
#[derive(Default)]
pub struct Effects {
    blocking: Vec<BlockingWork>,
    background: Vec<EffectFuture>,
}

impl fmt::Debug for Effects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Effects")
            .field("blocking", &self.blocking.len())
            .field("background", &self.background.len())
            .finish()
    }
}

impl Effects {
    /// Holds the processor at this event until `work()` succeeds. `work` is
    /// called again for each retry, so build the request inside it and pass
    /// the delivery's idempotency key so retries dedupe.
    pub fn block_processor_while<F, Fut>(&mut self, mut work: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), EffectError>> + Send + 'static,
    {
        self.blocking.push(Box::new(move || Box::pin(work()) as EffectFuture));
    }

    /// Starts `work` without holding the processor. Losing its outcome to a
    /// crash is covered by the recovery adapter's revival turn.
    pub fn run_in_background<Fut>(&mut self, work: Fut)
    where
        Fut: Future<Output = Result<(), EffectError>> + Send + 'static,
    {
        self.background.push(Box::pin(work));
    }

    pub fn blocking_len(&self) -> usize {
        self.blocking.len()
    }

    pub fn background_len(&self) -> usize {
        self.background.len()
    }

    pub(crate) fn into_parts(self) -> (Vec<BlockingWork>, Vec<EffectFuture>) {
        (self.blocking, self.background)
    }
}
