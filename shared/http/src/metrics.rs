//! Metrics at the edge ([`crate::edge`]): every exchange is reported to a [`Metrics`] sink (the
//! port, `ds-metrics`, below this crate) with
//! its route label, status, latency to the response head and bytes in/out;
//! live readers (long-poll and SSE requests) are counted while they are
//! open. The sink decides the format (Prometheus on the local server,
//! CloudWatch EMF on Lambda; see `ds-metrics`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

use crate::routes::Class;

pub use ds_metrics::{Exchange, Metrics};

/// One request being observed, from its classification at the edge
/// ([`crate::edge`]) to its response head.
pub(crate) struct Observation {
    metrics: Arc<dyn Metrics>,
    route: &'static str,
    method: Method,
    start: Instant,
    live: Option<LiveGuard>,
}

impl Observation {
    pub(crate) fn begin(metrics: Arc<dyn Metrics>, class: &Class, method: &Method, start: Instant) -> Self {
        let live = class.row.live().map(|mode| LiveGuard::open(metrics.clone(), mode));
        Self { metrics, route: class.row.label, method: method.clone(), start, live }
    }

    /// The response, its body wrapped to count bytes out and to report the
    /// exchange when it ends.
    pub(crate) fn finish(self, resp: Response, bytes_in: Arc<AtomicU64>) -> Response {
        let exchange = Exchange {
            route: self.route,
            method: self.method,
            status: resp.status().as_u16(),
            latency: self.start.elapsed(),
            bytes_in: 0,
            bytes_out: 0,
        };
        let (metrics, live) = (self.metrics, self.live);
        resp.map(|inner| Body::new(Observed { inner, exchange: Some(exchange), metrics, bytes_in, _live: live }))
    }
}

/// The request, its body wrapped to count the bytes the handler reads.
pub(crate) fn count_in(req: Request) -> (Request, Arc<AtomicU64>) {
    let bytes_in = Arc::new(AtomicU64::new(0));
    let req = req.map(|b| Body::new(CountIn { inner: b, n: bytes_in.clone() }));
    (req, bytes_in)
}

/// Decrements the live-reader gauge when the exchange ends, however it ends.
struct LiveGuard {
    metrics: Arc<dyn Metrics>,
    mode: &'static str,
}

impl LiveGuard {
    fn open(metrics: Arc<dyn Metrics>, mode: &'static str) -> Self {
        metrics.live_readers(mode, 1);
        Self { metrics, mode }
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.metrics.live_readers(self.mode, -1);
    }
}

/// The request body, counting the bytes the handler reads.
struct CountIn {
    inner: Body,
    n: Arc<AtomicU64>,
}

impl HttpBody for CountIn {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let poll = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &poll {
            if let Some(data) = frame.data_ref() {
                self.n.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The response body, counting bytes out and reporting the exchange at its
/// end (or when dropped early: a client that went away).
struct Observed {
    inner: Body,
    exchange: Option<Exchange>,
    metrics: Arc<dyn Metrics>,
    bytes_in: Arc<AtomicU64>,
    _live: Option<LiveGuard>,
}

impl Observed {
    fn report(&mut self) {
        if let Some(mut e) = self.exchange.take() {
            e.bytes_in = self.bytes_in.load(Ordering::Relaxed);
            self.metrics.exchange(&e);
        }
    }
}

impl HttpBody for Observed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let poll = Pin::new(&mut self.inner).poll_frame(cx);
        match &poll {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                if let Some(e) = self.exchange.as_mut() {
                    e.bytes_out += n;
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.report(),
            Poll::Pending => {}
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        self.report();
    }
}
