//! One connection, from its handshake's byte stream to its end: guarded by
//! its limits (`guard.rs`), served by the fast path while its requests are
//! plain HTTP/1.1 ones (`fast.rs`), then by hyper (HTTP/1.1 and HTTP/2).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::fast;
use crate::guard::{Busy, Guarded, Phase, TrackedBody};
use crate::limits::ConnLimits;
use crate::repoll::Repoll;
use crate::rewind::Rewind;
use crate::surface::Surface;

/// The HTTP version a connection speaks, as settled by its handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// Chosen through TLS ALPN (`h2`).
    Http2,
}

/// Whether an HTTP/1.1 connection's plain requests take the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FastPath {
    /// The server's way (see `fast.rs`).
    #[default]
    On,
    /// Every request through hyper: what the fast path is compared with.
    Off,
}

/// hyper refuses a read buffer smaller than this (it panics).
const HYPER_MIN_BUF: usize = 8192;

/// Serve one HTTP/1.1 connection (any byte stream: TCP, an in-memory pipe)
/// until it closes. Tests use this to drive the real parser in-process.
pub async fn serve_connection<IO>(io: IO, surface: impl Surface, limits: Arc<ConnLimits>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    run(io, Protocol::Http1, FastPath::On, surface, limits, None).await;
}

/// [`serve_connection`], with the fast path on or off.
pub async fn serve_connection_with<IO>(io: IO, surface: impl Surface, limits: Arc<ConnLimits>, fast: FastPath)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    run(io, Protocol::Http1, fast, surface, limits, None).await;
}

pub(crate) async fn run<IO>(
    io: IO,
    protocol: Protocol,
    fast_path: FastPath,
    surface: impl Surface,
    limits: Arc<ConnLimits>,
    mut stop: Option<watch::Receiver<bool>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let phase = Arc::new(Phase::new(protocol == Protocol::Http2));
    let io = Guarded::new(io, Arc::clone(&phase), Arc::clone(&limits));
    // HTTP/1.1: the plain requests are served by the fast path; hyper takes
    // the connection over at the first other one.
    let io = match (protocol, fast_path) {
        (Protocol::Http1, FastPath::On) => match fast::serve(io, &phase, surface.clone(), &limits, &mut stop).await {
            fast::End::Closed => return,
            fast::End::Handoff(io, read) => TokioIo::new(Rewind::new(read, io)),
        },
        // Nothing read yet (one connection type for every way in).
        _ => TokioIo::new(Rewind::new(Bytes::new(), io)),
    };
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = Busy::begin(Arc::clone(&phase));
        let surface = surface.clone();
        // Only reads wait (long-poll, SSE); other requests end with their
        // handler, before hyper reads the next request into its buffer.
        let req = if req.method() == http::Method::GET { detach_head(req) } else { req };
        async move {
            let resp = surface.oneshot(req.map(Body::new)).await.unwrap_or_else(|e| match e {});
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
