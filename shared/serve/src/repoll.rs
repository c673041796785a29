//! Polling a connection so that it never wakes its own task.
//!
//! Serving one HTTP/1.1 request, hyper's connection wakes the task that is
//! polling it: reading the request body hands the chunk over through a
//! channel whose sender (the connection) registered the task's waker, and
//! the end of a response wakes the connection's pending read (the idle
//! deadline starts). tokio treats a task woken while it runs as yielding: it
//! goes to the back of the run queue and an idle sibling worker is woken to
//! steal it, one futex wake and one spurious park per request.
//!
//! [`Repoll`] polls the connection with a waker of its own: woken inside the
//! poll, it only notes the wake-up, and the connection is polled again
//! before the task returns; woken from outside (socket readiness, a timer,
//! another task), it wakes the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// How many times in a row one task poll polls the connection; past it, the
/// task yields, as any busy loop in a task must.
const REPOLLS: usize = 4;

const POLLING: u8 = 1;
const NOTIFIED: u8 = 2;

/// The waker a connection is polled with.
struct ConnWaker {
    /// `POLLING` while the connection is being polled, `NOTIFIED` once woken.
    state: AtomicU8,
    /// The task's waker, for wake-ups from outside the poll.
    task: AtomicWaker,
}

impl Wake for ConnWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Either the poller's closing swap sees NOTIFIED (and polls again),
        // or this sees POLLING cleared (and wakes the task): never neither.
        if self.state.fetch_or(NOTIFIED, Ordering::AcqRel) & POLLING == 0 {
            self.task.wake();
        }
    }
}

/// A future polled with a waker that turns wake-ups from inside its own poll
/// into another poll.
pub(crate) struct Repoll<F> {
    inner: F,
    shared: Arc<ConnWaker>,
    waker: Waker,
}

impl<F: Future + Unpin> Repoll<F> {
    pub(crate) fn new(inner: F) -> Self {
        let shared = Arc::new(ConnWaker { state: AtomicU8::new(0), task: AtomicWaker::new() });
        let waker = Waker::from(Arc::clone(&shared));
        Self { inner, shared, waker }
    }

    /// The wrapped future (e.g. to start a graceful shutdown).
    pub(crate) fn get_mut(&mut self) -> &mut F {
        &mut self.inner
    }
}

impl<F: Future + Unpin> Future for Repoll<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.shared.task.register(cx.waker());
        let mut inner_cx = Context::from_waker(&this.waker);
        for _ in 0..REPOLLS {
            this.shared.state.store(POLLING, Ordering::Release);
            let result = Pin::new(&mut this.inner).poll(&mut inner_cx);
            let state = this.shared.state.swap(0, Ordering::AcqRel);
            if result.is_ready() || state & NOTIFIED == 0 {
                return result;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts the wake-ups of the task polling it.
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wakes itself during its first `wakes` polls, then is ready.
    struct SelfWaking {
        wakes: usize,
        polls: usize,
    }

    impl Future for SelfWaking {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if self.polls > self.wakes {
                return Poll::Ready(self.polls);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn poll_once<F: Future + Unpin>(fut: &mut Repoll<F>) -> (Poll<F::Output>, usize) {
        let task = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&task));
        let result = Pin::new(fut).poll(&mut Context::from_waker(&waker));
        (result, task.0.load(Ordering::SeqCst))
    }

    #[test]
    fn a_wake_inside_the_poll_polls_again_without_waking_the_task() {
        let mut fut = Repoll::new(SelfWaking { wakes: 2, polls: 0 });
        let (result, task_wakes) = poll_once(&mut fut);
        assert_eq!(result, Poll::Ready(3));
        assert_eq!(task_wakes, 0);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_after_the_bound() {
        let mut fut = Repoll::new(SelfWaking { wakes: 100, polls: 0 });
        let (result, task_wakes) = poll_once(&mut fut);
        assert_eq!(result, Poll::Pending);
        assert_eq!(fut.get_mut().polls, REPOLLS);
        // It yielded: the task is woken to be polled again.
        assert_eq!(task_wakes, 1);
    }

    /// Pending until its stored waker is woken from outside.
    #[derive(Default)]
    struct Parked {
        waker: Option<Waker>,
        woken: bool,
    }

    impl Future for Parked {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.woken {
                return Poll::Ready(());
            }
            self.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_from_outside_the_poll_wakes_the_task() {
        let mut fut = Repoll::new(Parked::default());
        let task = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        let inner = fut.get_mut();
        inner.woken = true;
        inner.waker.take().unwrap().wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert!(Pin::new(&mut fut).poll(&mut cx).is_ready());
    }
}
