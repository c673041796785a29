//! The per-stream queue of [`crate::group`] (group commit), kept in each
//! stream's context ([`crate::registry::StreamCtx`]): the data only, so the
//! registry holds it without depending on the group commit's logic.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use ds_core::fold::NetWrites;
use ds_core::{Chain, StoreError};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

/// Most bytes one stream's queue holds (payload plus a fixed cost per
/// commit) before `submit` waits for room.
pub const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// One stream's queue (in its [`crate::registry::StreamCtx`]).
pub struct Queue {
    pub(crate) state: Mutex<State>,
    pub(crate) room: Arc<Semaphore>,
}

impl Default for Queue {
    fn default() -> Self {
        Self { state: Mutex::default(), room: Arc::new(Semaphore::new(MAX_QUEUED_BYTES)) }
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) waiting: VecDeque<Queued>,
    /// A driver task runs this queue.
    pub(crate) driving: bool,
}

pub(crate) struct Queued {
    pub(crate) writes: NetWrites,
    pub(crate) ack: oneshot::Sender<Result<(), StoreError>>,
    /// The pipeline the commit is stacked in, if it was submitted in one
    /// (see `ds_core::Chain` and [`crate::group`]'s rules).
    pub(crate) chain: Option<Chain>,
    /// Given back when the commit is answered.
    pub(crate) _room: OwnedSemaphorePermit,
}

impl Queued {
    /// Whether a commit this one is stacked on was not applied: then this
    /// one cannot be either.
    pub(crate) fn chain_broken(&self) -> bool {
        self.chain.as_ref().is_some_and(Chain::is_broken)
    }

    /// This commit is not applied: the later ones of its chain cannot be.
    pub(crate) fn break_chain(&self) {
        self.chain.iter().for_each(Chain::break_off);
    }

    /// Answer the commit's caller (gone or not: the outcome stands). A
    /// commit answered with an error was not applied, or may not have been:
    /// its chain is broken, whichever path refused it.
    pub(crate) fn answer(self, result: Result<(), StoreError>) {
        if result.is_err() {
            self.break_chain();
        }
        let _ = self.ack.send(result);
    }
}

pub(crate) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every critical section is a push, a pop or a flag: nothing is left
    // half-done by a panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
