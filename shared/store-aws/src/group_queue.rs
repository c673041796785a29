//! The per-stream queue of [`crate::group`] (group commit), kept in each
//! stream's context ([`crate::registry::StreamCtx`]): the data only, so the
//! registry holds it without depending on the group commit's logic.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ds_core::fold::NetWrites;
use ds_core::{Chain, StoreError};
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};

/// Most bytes one stream's queue holds (payload plus a fixed cost per
/// commit) before `submit` waits for room.
pub const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// One stream's queue (in its [`crate::registry::StreamCtx`]).
pub struct Queue {
    pub(crate) state: Mutex<State>,
    pub(crate) room: Arc<Semaphore>,
    /// Told of every commit queued, for [`Queue::gather`].
    pub(crate) arrivals: Notify,
}

impl Default for Queue {
    fn default() -> Self {
        Self { state: Mutex::default(), room: Arc::new(Semaphore::new(MAX_QUEUED_BYTES)), arrivals: Notify::new() }
    }
}

impl Queue {
    /// Wait (at most `linger`) until `want` commits are queued.
    ///
    /// Why: the driver answers a group and takes the next one at once, and
    /// at that instant the writers it just answered have not sent their next
    /// appends yet (their answer is still on its way to them). Those arrive
    /// a moment later: the first alone in a new group (sent as it comes, as
    /// a lone writer's is), the rest behind it, or behind a group of the
    /// ones queued meanwhile. A stream's writers then split into cohorts
    /// that alternate, each transaction carrying a part of them: under
    /// contention across processes, where transactions per second are what
    /// is scarce, that divides the appends per second. Waiting a fraction of
    /// a round trip for the answered writers to rejoin keeps them in one
    /// group. A lone writer loses nothing: one is all it waits for.
    pub(crate) async fn gather(&self, want: usize, linger: Duration) {
        let deadline = tokio::time::Instant::now() + linger;
        loop {
            let arrival = self.arrivals.notified();
            tokio::pin!(arrival);
            arrival.as_mut().enable();
            if lock(&self.state).waiting.len() >= want {
                return;
            }
            if tokio::time::timeout_at(deadline, arrival).await.is_err() {
                return;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    fn push(queue: &Queue) {
        let room = Arc::new(Semaphore::new(1)).try_acquire_owned().expect("a permit");
        let queued = Queued { writes: NetWrites::default(), ack: oneshot::channel().0, chain: None, _room: room };
        lock(&queue.state).waiting.push_back(queued);
        queue.arrivals.notify_waiters();
    }

    #[tokio::test(start_paused = true)]
    async fn gather_ends_when_the_answered_writers_are_back() {
        let queue = Arc::new(Queue::default());
        push(&queue);
        let q = Arc::clone(&queue);
        tokio::spawn(async move {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                push(&q);
            }
        });
        let start = Instant::now();
        queue.gather(3, Duration::from_millis(10)).await;
        assert_eq!(lock(&queue.state).waiting.len(), 3);
        assert_eq!(start.elapsed(), Duration::from_millis(2), "left as the third arrived, not at the deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn gather_waits_no_longer_than_its_linger() {
        let queue = Queue::default();
        let start = Instant::now();
        queue.gather(1, Duration::from_millis(2)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(2), "nobody came back: the linger bounds the wait");
        push(&queue);
        let start = Instant::now();
        queue.gather(1, Duration::from_millis(2)).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "already there: no wait");
    }
}
