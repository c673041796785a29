//! The server loop: accept, hand each connection to its own task (the TLS
//! handshake, if any, runs there under the header-read timeout), serve it
//! under [`ConnLimits`] (HTTP/1.1: plain requests by `h1.rs`, the rest
//! and HTTP/2 by hyper), shut down gracefully.
//!
//! `axum::serve` sets no timer, so a connection that sends half a request
//! head, or nothing at all, or never reads its response, is held forever.
//! Here every connection's socket is guarded (see `conn_guard.rs`): a
//! read or write that waits past the deadline of the connection's phase
//! fails and the connection is dropped. A request's body has its own
//! inactivity limit in the handlers ([`crate::HttpConfig`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::{Service, ServiceExt};

use crate::conn_guard::{Busy, Guarded, Phase, TrackedBody};
use crate::h1;
use crate::repoll::Repoll;

/// Per-connection limits of the server.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// From accept (or from the first byte of a later HTTP/1.1 request)
    /// until the request head is complete, TLS handshake included; slower
    /// connections are closed.
    pub header_read_timeout: Duration,
    /// A keep-alive connection with no request in progress is closed after this.
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers); larger ones get `431`.
    /// hyper also caps an HTTP/1.1 head at 100 header lines (`431` beyond).
    pub max_header_bytes: usize,
    /// A response write that makes no progress for this long (the client
    /// stopped reading) closes the connection.
    pub send_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 64 * 1024,
            send_timeout: Duration::from_secs(30),
        }
    }
}

/// The HTTP version a connection speaks, as settled by its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// Chosen through TLS ALPN (`h2`).
    Http2,
}

/// Turns an accepted TCP connection into the byte stream HTTP is served on:
/// as is ([`PlainTcp`]), or after a TLS handshake (the server binary's).
pub trait Handshake: Send + Sync + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn handshake(&self, tcp: TcpStream) -> impl Future<Output = io::Result<(Self::Io, Protocol)>> + Send;
}

/// Plain HTTP/1.1 over TCP.
pub struct PlainTcp;

impl Handshake for PlainTcp {
    type Io = TcpStream;
    async fn handshake(&self, tcp: TcpStream) -> io::Result<(TcpStream, Protocol)> {
        Ok((tcp, Protocol::Http1))
    }
}

/// How long connections get to finish after shutdown begins; the rest are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// hyper refuses a read buffer smaller than this (it panics).
const HYPER_MIN_BUF: usize = 8192;

/// What a connection serves: an [`crate::App`], or any axum `Router`.
pub trait AppService:
    Service<Request, Response = Response, Error = Infallible, Future: Send> + Clone + Send + 'static
{
    /// The protocol's own [`crate::App`], whose plain appends the HTTP/1.1
    /// loop answers without building a `Request`; `None` for any other
    /// service.
    fn as_app(&self) -> Option<&crate::App> {
        None
    }
}

impl AppService for crate::App {
    fn as_app(&self) -> Option<&crate::App> {
        Some(self)
    }
}

impl AppService for axum::Router {}

/// Plain HTTP/1.1: [`serve_with`] and [`PlainTcp`].
pub async fn serve(
    listener: TcpListener,
    app: impl AppService,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    serve_with(listener, app, limits, PlainTcp, shutdown).await;
}

/// Accept connections on `listener` and serve `app` on each until `shutdown`
/// completes; then stop accepting, let every connection finish its request
/// in progress (idle ones close at once), and return when all are closed
/// or `SHUTDOWN_GRACE` (30 s) has passed.
pub async fn serve_with<H: Handshake>(
    listener: TcpListener,
    app: impl AppService,
    limits: ConnLimits,
    handshake: H,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let limits = Arc::new(limits);
    let handshake = Arc::new(handshake);
    let mut shutdown = pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => tcp,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small writes (SSE events) must not wait for the peer's delayed ACK.
        let _ = tcp.set_nodelay(true);
        let (app, limits, handshake, stop) =
            (app.clone(), Arc::clone(&limits), Arc::clone(&handshake), stop_rx.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(limits.header_read_timeout, handshake.handshake(tcp)).await {
                Ok(Ok((io, protocol))) => run_connection(io, protocol, app, limits, Some(stop)).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "handshake failed"),
                Err(_) => tracing::debug!("handshake timed out"),
            }
        });
    }
    drop(listener);
    drop(stop_rx);
    stop_tx.send_replace(true);
    // Resolves once every connection task has dropped its receiver.
    if tokio::time::timeout(SHUTDOWN_GRACE, stop_tx.closed()).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "connections still open after the shutdown grace; dropping them");
    }
}

/// Serve one HTTP/1.1 connection (any byte stream: TCP, an in-memory pipe)
/// until it closes. Tests use this to drive the real parser in-process.
pub async fn serve_connection<IO>(io: IO, app: impl AppService, limits: Arc<ConnLimits>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    run_connection(io, Protocol::Http1, app, limits, None).await;
}

async fn run_connection<IO>(
    io: IO,
    protocol: Protocol,
    app: impl AppService,
    limits: Arc<ConnLimits>,
    mut stop: Option<watch::Receiver<bool>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let phase = Arc::new(Phase::new(protocol == Protocol::Http2));
    let io = Guarded::new(io, Arc::clone(&phase), Arc::clone(&limits));
    // HTTP/1.1: the plain requests are served by `h1`; hyper takes the
    // connection over at the first other one.
    let io = match protocol {
        Protocol::Http1 => match h1::serve(io, &phase, app.clone(), &limits, &mut stop).await {
            h1::End::Closed => return,
            h1::End::Handoff(io, read) => TokioIo::new(h1::Rewind::new(read, io)),
        },
        // Nothing read yet (one connection type for both protocols).
        Protocol::Http2 => TokioIo::new(h1::Rewind::new(Bytes::new(), io)),
    };
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = Busy::begin(Arc::clone(&phase));
        let app = app.clone();
        // Only reads wait (long-poll, SSE); other requests end with their
        // handler, before hyper reads the next request into its buffer.
        let req = if req.method() == http::Method::GET { detach_head(req) } else { req };
        async move {
            let resp = app.oneshot(req.map(Body::new)).await.unwrap_or_else(|e| match e {});
            // The connection is busy until the body is sent (or dropped).
            Ok::<_, Infallible>(resp.map(|body| Body::new(TrackedBody::new(body, busy))))
        }
    });
    // The connection lives in its own allocation of its own size: inline,
    // it would be moved into (and sized into) every enclosing future, and
    // an HTTP/1.1 connection would carry the size of an HTTP/2 one.
    match protocol {
        Protocol::Http1 => {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .header_read_timeout(None) // the guarded IO enforces it (and the idle timeout)
                .max_header_size(limits.max_header_bytes)
                .max_buf_size(limits.max_header_bytes.max(HYPER_MIN_BUF));
            drive(Box::pin(builder.serve_connection(io, service)), stop, |c| c.graceful_shutdown()).await;
        }
        Protocol::Http2 => {
            let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            builder
                .timer(TokioTimer::new())
                .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
            drive(Box::pin(builder.serve_connection(io, service)), stop, |c| c.graceful_shutdown()).await;
        }
    }
}

/// hyper's request head refers into the connection's 8 KiB read buffer
/// (reference-counted): a request that stays in flight, a long-poll for
/// one, would pin that buffer, and hyper would allocate another for its
/// next read. A copy of the head (a few hundred bytes) lets hyper reuse it.
/// The URI and all header values are copied into one allocation each; the
/// header map itself (names are hyper's own copies) is kept.
fn detach_head<B>(req: Request<B>) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    let uri = match (parts.uri.scheme(), parts.uri.path_and_query()) {
        // Origin form, the HTTP/1.1 norm: the path and query are the URI.
        (None, Some(pq)) if parts.uri.authority().is_none() => {
            http::Uri::from_maybe_shared(Bytes::copy_from_slice(pq.as_str().as_bytes()))
        }
        _ => http::Uri::try_from(parts.uri.to_string()),
    };
    if let Ok(uri) = uri {
        parts.uri = uri;
    }
    let mut copy = Vec::with_capacity(parts.headers.values().map(|v| v.len()).sum());
    for value in parts.headers.values() {
        copy.extend_from_slice(value.as_bytes());
    }
    let copy = Bytes::from(copy);
    let mut at = 0;
    for value in parts.headers.values_mut() {
        let piece = copy.slice(at..at + value.len());
        at += value.len();
        if let Ok(mut detached) = http::HeaderValue::from_maybe_shared(piece) {
            detached.set_sensitive(value.is_sensitive());
            *value = detached;
        }
    }
    Request::from_parts(parts, body)
}

/// Run a connection to its end; when `stop` turns true, shut it down gracefully.
async fn drive<C>(conn: Pin<Box<C>>, stop: Option<watch::Receiver<bool>>, graceful: impl FnOnce(Pin<&mut C>))
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut conn = Repoll::new(conn);
    let Some(mut stop) = stop else {
        log_end(conn.await);
        return;
    };
    tokio::select! {
        result = &mut conn => {
            log_end(result);
            return;
        }
        _ = stop.wait_for(|s| *s) => graceful(conn.get_mut().as_mut()),
    }
    log_end(conn.await);
}

fn log_end(result: Result<(), hyper::Error>) {
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection closed with an error");
    }
}

/// As `axum::serve`: a failed accept (e.g. `EMFILE`) is logged and retried
/// after a pause, instead of spinning or stopping the server.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_detached_head_is_the_same_head() {
        let mut secret = http::HeaderValue::from_static("Bearer t");
        secret.set_sensitive(true);
        for uri in ["/v1/stream/a%2Fb?offset=-1&live=long-poll", "http://h:1/v1/stream/x?y=1", "*"] {
            let req = Request::builder()
                .method("POST")
                .uri(uri)
                .header("host", "127.0.0.1:8080")
                .header("producer-id", "p\u{e9}".as_bytes())
                .header("x-multi", "one")
                .header("x-multi", "")
                .header("x-multi", "three")
                .header("authorization", secret.clone())
                .body(())
                .unwrap();
            let before = req.headers().clone();
            let detached = detach_head(req);
            assert_eq!(detached.uri().to_string(), uri);
            assert_eq!(detached.method(), "POST");
            let pairs = |h: &http::HeaderMap| {
                h.iter().map(|(n, v)| (n.clone(), v.as_bytes().to_vec(), v.is_sensitive())).collect::<Vec<_>>()
            };
            assert_eq!(pairs(detached.headers()), pairs(&before), "names, values, order and sensitivity");
        }
    }
}
