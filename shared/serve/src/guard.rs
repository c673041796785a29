//! What keeps a connection from holding the server forever: its socket is
//! wrapped in a [`Guarded`] IO that knows what the connection is doing
//! (waiting for a request head, idle between requests, or busy with one) and
//! fails a read or write that waits past the deadline of that phase; the
//! connection is then dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use axum::body::Body;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::limits::ConnLimits;

/// What a connection is waiting for; decides its read deadline.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// A request head, since this instant (accept, or a later request's first byte).
    Head(Instant),
    /// Nothing: idle keep-alive since this instant.
    Idle(Instant),
    /// Nothing to read on a deadline: this many requests are in progress.
    Busy(u32),
}

/// A connection's phase, shared by its [`Guarded`] IO and its service.
pub(crate) struct Phase(Mutex<PhaseState>);

struct PhaseState {
    waiting: Waiting,
    /// The task of a read left pending without a deadline (while busy): it
    /// is woken when the connection turns idle, so the idle deadline starts.
    reader: Option<Waker>,
    /// HTTP/2: frames arrive between requests (pings, settings, window
    /// updates), so bytes do not start a request head; an idle connection
    /// stays idle until a request begins.
    multiplexed: bool,
}

impl Phase {
    pub(crate) fn new(multiplexed: bool) -> Self {
        Self(Mutex::new(PhaseState { waiting: Waiting::Head(Instant::now()), reader: None, multiplexed }))
    }

    fn with<T>(&self, f: impl FnOnce(&mut PhaseState) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Bytes arrived: an idle HTTP/1.1 connection starts reading a head.
    fn bytes_read(&self) {
        self.with(|p| {
            if let (Waiting::Idle(_), false) = (p.waiting, p.multiplexed) {
                p.waiting = Waiting::Head(Instant::now());
            }
        });
    }

    /// The deadline of a pending read; with none, `cx` is woken when one starts.
    fn read_deadline(&self, limits: &ConnLimits, cx: &Context<'_>) -> Option<Instant> {
        self.with(|p| match p.waiting {
            Waiting::Head(since) => Some(since + limits.header_read_timeout),
            Waiting::Idle(since) => Some(since + limits.idle_timeout),
            Waiting::Busy(_) => {
                p.reader = Some(cx.waker().clone());
                None
            }
        })
    }
}

/// A request in progress on a connection (from its head to the end of its
/// response body).
pub(crate) struct Busy(Arc<Phase>);

impl Busy {
    pub(crate) fn begin(phase: Arc<Phase>) -> Self {
        phase.with(|p| {
            p.waiting = match p.waiting {
                Waiting::Busy(n) => Waiting::Busy(n + 1),
                _ => Waiting::Busy(1),
            }
        });
        Self(phase)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let reader = self.0.with(|p| match p.waiting {
            Waiting::Busy(n) if n > 1 => {
                p.waiting = Waiting::Busy(n - 1);
                None
            }
            _ => {
                p.waiting = Waiting::Idle(Instant::now());
                p.reader.take()
            }
        });
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

/// A response body that keeps its connection [`Busy`] until sent or dropped.
pub(crate) struct TrackedBody {
    body: Body,
    _busy: Busy,
}

impl TrackedBody {
    pub(crate) fn new(body: Body, busy: Busy) -> Self {
        Self { body, _busy: busy }
    }
}

impl http_body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A lazily created timer. Every request on a connection moves its deadline
/// later; re-arming the timer each time would reach into the timer wheel
/// once per request. The timer is re-armed only when the deadline moves
/// earlier, or when it fires before the deadline (once, to the deadline).
#[derive(Default)]
struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// Whether `at` has passed; if not, the task is woken when it does.
    fn expired(&mut self, at: Instant, cx: &mut Context<'_>) -> bool {
        if Instant::now() >= at {
            return true;
        }
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.deadline() > at {
            sleep.as_mut().reset(at);
        }
        while sleep.as_mut().poll(cx).is_ready() {
            if sleep.deadline() >= at {
                return true;
            }
            sleep.as_mut().reset(at);
        }
        false
    }
}

/// The connection's byte stream, failing reads and writes that wait past the
/// deadline of the connection's phase.
pub(crate) struct Guarded<IO> {
    io: IO,
    phase: Arc<Phase>,
    limits: Arc<ConnLimits>,
    read_timer: Deadline,
    write_timer: Deadline,
    /// Since when the current write has been refused by the socket.
    write_stalled: Option<Instant>,
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(io: IO, phase: Arc<Phase>, limits: Arc<ConnLimits>) -> Self {
        Self {
            io,
            phase,
            limits,
            read_timer: Deadline::default(),
            write_timer: Deadline::default(),
            write_stalled: None,
        }
    }

    /// After the socket refused a write: fail once it has refused for too long.
    fn write_pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let since = *self.write_stalled.get_or_insert_with(Instant::now);
        if self.write_timer.expired(since + self.limits.send_timeout, cx) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "client stopped reading the response")));
        }
        Poll::Pending
    }

    fn write_done<T>(&mut self, result: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match result {
            Poll::Pending => self.write_pending(cx),
            ready => {
                self.write_stalled = None;
                ready
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.phase.bytes_read();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(at) = self.phase.read_deadline(&self.limits, cx) else {
                    return Poll::Pending;
                };
                if self.read_timer.expired(at, cx) {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no complete request head in time, or idle for too long",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.write_done(result, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.write_done(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.io).poll_flush(cx);
        self.write_done(result, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.io).poll_shutdown(cx);
        self.write_done(result, cx)
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use super::*;

    /// Resolves once `deadline` reports `at` passed, woken by its timer alone.
    async fn expiry(deadline: &mut Deadline, at: Instant) -> Instant {
        poll_fn(|cx| if deadline.expired(at, cx) { Poll::Ready(Instant::now()) } else { Poll::Pending }).await
    }

    fn armed(deadline: &mut Deadline, at: Instant) {
        let waker = Waker::noop();
        assert!(!deadline.expired(at, &mut Context::from_waker(waker)), "not yet");
    }

    #[tokio::test]
    async fn a_deadline_moved_later_fires_at_the_later_instant() {
        let mut deadline = Deadline::default();
        let start = Instant::now();
        armed(&mut deadline, start + Duration::from_millis(50));
        let later = start + Duration::from_millis(300);
        let fired = tokio::time::timeout(Duration::from_secs(10), expiry(&mut deadline, later)).await;
        assert!(fired.expect("the timer's early firing re-arms it, it does not lose the wake-up") >= later);
    }

    #[tokio::test]
    async fn a_deadline_moved_earlier_fires_at_the_earlier_instant() {
        let mut deadline = Deadline::default();
        let start = Instant::now();
        armed(&mut deadline, start + Duration::from_secs(60));
        let earlier = start + Duration::from_millis(50);
        let fired = tokio::time::timeout(Duration::from_secs(10), expiry(&mut deadline, earlier)).await;
        let fired = fired.expect("re-armed to the earlier instant");
        // Not merely noticed when the timeout's own timer woke the task.
        assert!(fired >= earlier && fired < start + Duration::from_secs(5), "fired after {:?}", fired - start);
    }
}
