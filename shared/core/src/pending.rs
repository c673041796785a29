//! [`PendingCommit`]: a submitted commit, resolving once it is durable.
//!
//! Not a boxed future: a store that applies a commit as it is submitted
//! (memory) hands back the outcome itself, and the local store the writer's
//! acknowledgement channel, so a submission costs no allocation of its own.
//! Only a store with other work to await boxes it ([`PendingCommit::waiting`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::error::StoreError;
use crate::model::Commit;

/// A commit handed to [`crate::StreamStore::submit`], resolving when durable.
#[must_use = "a submitted commit is only acknowledged once it resolves"]
pub struct PendingCommit(Pending);

enum Pending {
    /// Applied (or failed) already; `None` once taken.
    Done(Option<Result<(), StoreError>>),
    /// A writer answers on the channel once the commit is durable.
    Acked(oneshot::Receiver<Result<(), StoreError>>),
    Waiting(BoxFuture<'static, Result<(), StoreError>>),
}

impl PendingCommit {
    /// A commit already applied (`Ok`) or refused.
    pub fn done(result: Result<(), StoreError>) -> Self {
        Self(Pending::Done(Some(result)))
    }

    /// A commit a writer acknowledges on `ack`. A writer that stops without
    /// answering leaves the outcome unknown: a [`StoreError::Backend`].
    pub fn acked(ack: oneshot::Receiver<Result<(), StoreError>>) -> Self {
        Self(Pending::Acked(ack))
    }

    /// A commit that is durable once `fut` resolves.
    pub fn waiting(fut: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> Self {
        Self(Pending::Waiting(Box::pin(fut)))
    }
}

impl Future for PendingCommit {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Pending::Done(result) => {
                Poll::Ready(result.take().unwrap_or_else(|| {
                    Err(StoreError::backend("local commit", "a commit's outcome was asked for twice"))
                }))
            }
            Pending::Acked(ack) => Pin::new(ack).poll(cx).map(|answer| {
                answer.unwrap_or_else(|_| {
                    Err(StoreError::backend(
                        "local commit",
                        "the store's writer stopped before acknowledging (outcome unknown)",
                    ))
                })
            }),
            Pending::Waiting(fut) => fut.as_mut().poll(cx),
        }
    }
}

/// The pipeline a submitted commit belongs to: the appends one service
/// planned on the predictions of its commits in flight to one stream
/// (`service::speculation`), each stacked on the one before.
///
/// Why the store must know: a stacked commit's precondition names the state
/// it was planned on by version and tail only, and another writer (another
/// process over the same store, or a commit of this one the prediction no
/// longer counts) can leave a *different* state with that same version and
/// tail — a close, another producer's append of the same length. Once one
/// commit of the chain is refused, the ones stacked on it would then pass
/// their preconditions against that other state and apply on a plan that
/// never held (a producer's append applied twice, an append past a close).
/// So a store that honours chains ([`crate::StreamStore::try_submit_chained`])
/// breaks the chain when it does not apply one of its commits, and refuses
/// every later commit of a broken chain with [`StoreError::Conflict`].
///
/// Only the store's writer reads or breaks it, in submission order.
#[derive(Debug, Clone, Default)]
pub struct Chain(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Chain {
    /// A commit of this chain was not applied: the later ones cannot be.
    pub fn break_off(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a commit of this chain was not applied.
    pub fn is_broken(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether `self` and `other` are the same chain.
    pub fn same(&self, other: &Chain) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// What [`crate::StreamStore::try_submit`] did with a commit.
pub enum TrySubmit {
    /// Submitted (or refused) without waiting: as [`crate::StreamStore::submit`] would answer.
    Submitted(Result<PendingCommit, StoreError>),
    /// Submitting would wait: the commit back, for [`crate::StreamStore::submit`].
    WouldWait(Commit),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(p: &mut PendingCommit) -> Poll<Result<(), StoreError>> {
        Pin::new(p).poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_done_commit_answers_once_then_never_claims_success() {
        let mut p = PendingCommit::done(Ok(()));
        assert!(matches!(now(&mut p), Poll::Ready(Ok(()))));
        assert!(matches!(now(&mut p), Poll::Ready(Err(StoreError::Backend { .. }))));
        let mut refused = PendingCommit::done(Err(StoreError::Conflict));
        assert!(matches!(now(&mut refused), Poll::Ready(Err(StoreError::Conflict))));
    }

    #[test]
    fn an_acked_commit_waits_for_the_writer_and_a_vanished_writer_is_an_unknown_outcome() {
        let (tx, rx) = oneshot::channel();
        let mut p = PendingCommit::acked(rx);
        assert!(now(&mut p).is_pending());
        tx.send(Err(StoreError::Conflict)).ok();
        assert!(matches!(now(&mut p), Poll::Ready(Err(StoreError::Conflict))));
        let (tx, rx) = oneshot::channel::<Result<(), StoreError>>();
        let mut p = PendingCommit::acked(rx);
        drop(tx);
        assert!(
            matches!(now(&mut p), Poll::Ready(Err(e @ StoreError::Backend { .. })) if e.to_string().contains("outcome unknown"))
        );
    }
}
