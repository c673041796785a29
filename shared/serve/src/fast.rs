//! The HTTP/1.1 fast path: our own serving of the plain request, hyper for
//! the rest.
//!
//! An append is a short `POST` whose head and body arrive together, on a
//! keep-alive connection that sends nothing else. hyper's general machinery
//! (its dispatcher's state machine, a body channel between the connection and
//! the handler, a read buffer given away with every request) costs more
//! instructions than the append itself. This loop serves that request, and
//! `PUT` alike, with one parse (httparse, as hyper; `parse.rs`) and one
//! write of the response (`write.rs`). The surface answers it straight from
//! the parsed bytes ([`Surface::answer_raw`]) or, declining, gets it as a
//! `Request` built from the read buffer's bytes (no copies).
//!
//! Anything else it does not try to serve: another method, HTTP/1.0, a head
//! httparse refuses or that is too large, `Transfer-Encoding`, `Expect`,
//! `Upgrade`, a repeated or unreadable `Content-Length`, a body that has not
//! fully arrived or is larger than [`crate::parse::FAST_BODY_MAX`], a request cut short by
//! the end of input. At the first such request the connection is handed to
//! hyper, with the bytes read so far replayed ahead of the socket
//! (`Rewind`), and hyper serves it to its end: hyper decides what a strange
//! request means, and answers the errors (`400`, `431`) as it always has.
//! The requests the fast path serves it frames as hyper does; a
//! differential test (ds-http's `tests/transport.rs`) sends the same bytes
//! both ways and compares answers and connection outcomes.

use std::io;
use std::pin::pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Uri, Version};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::guard::{Busy, Phase};
use crate::limits::ConnLimits;
use crate::parse::{parse, Field, Head, Parse};
use crate::surface::{HeadLines, RawAnswer, RawHeaders, RawRequest, Surface};
use crate::write::{respond, respond_head};

/// How much the read buffer grows by when it is full.
const READ_CHUNK: usize = 8 * 1024;

/// How a connection left [`serve`].
pub(crate) enum End<IO> {
    /// Closed: the peer left with nothing unanswered, a read or write failed
    /// or timed out, the request asked for it, or the server is shutting
    /// down.
    Closed,
    /// The next request is hyper's: the connection, and the bytes read from it
    /// that hyper must see first.
    Handoff(IO, Bytes),
}

/// Serve requests on `io` until the connection ends or a request is not ours.
pub(crate) async fn serve<IO, S>(
    mut io: IO,
    phase: &Arc<Phase>,
    surface: S,
    limits: &ConnLimits,
    stop: &mut Option<watch::Receiver<bool>>,
) -> End<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: Surface,
{
    // For a look at whether the server is stopping, without a wait: a poll
    // of `stopped` between requests would re-register its waker each time.
    let flag = stop.clone();
    // One wait for the whole connection (a wait per request would register
    // with the channel every time).
    let mut stopped = pin!(shutdown(stop.as_mut()).fuse());
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut fields = Vec::new();
    let mut out = Vec::with_capacity(512);
    let mut lines = HeadLines::new();
    loop {
        let head = loop {
            if !buf.is_empty() {
                // The whole head is parsed again after each read, as hyper
                // does: bytes that make it malformed get hyper's `400` at once.
                match parse(&buf, limits.max_header_bytes, &mut fields) {
                    Parse::Ours(head) if buf.len() >= head.len + head.body_len => break head,
                    Parse::Ours(_) => {
                        // The body is still on its way (or behind the buffer's
                        // end): take what the socket holds now, no waiting.
                        match read_some(&mut io, &mut buf).now_or_never() {
                            Some(Ok(n)) if n > 0 => continue,
                            Some(Ok(_)) => return handoff(io, buf.freeze(), "end of input inside a body"),
                            Some(Err(_)) => return End::Closed,
                            None => return handoff(io, buf.freeze(), "body still on its way"),
                        }
                    }
                    Parse::Partial => {}
                    Parse::Theirs => return handoff(io, buf.freeze(), "not a plain request"),
                }
            } else if stopping(flag.as_ref()) {
                return End::Closed;
            }
            let read = if buf.is_empty() {
                // Idle between requests: shutting down closes the connection.
                // The read first: woken by the socket, the wait for shutdown
                // is not polled again.
                tokio::select! {
                    biased;
                    read = read_some(&mut io, &mut buf) => read,
                    () = &mut stopped => return End::Closed,
                }
            } else {
                read_some(&mut io, &mut buf).await
            };
            match read {
                Ok(n) if n > 0 => {}
                // The end of input inside a head: hyper says what it says to that.
                Ok(_) if !buf.is_empty() => return handoff(io, buf.freeze(), "end of input inside a head"),
                _ => return End::Closed,
            }
        };

        let bytes = buf.split().freeze();
        let Some(req) = raw(&bytes, &head, &fields) else {
            return handoff(io, bytes, "target refused by the http types");
        };
        let next = match surface.raw_route(&req) {
            Some(route) => Next::Raw(route, req),
            None => {
                drop(req);
                match request(&bytes, &head, &fields) {
                    Some(req) => Next::Routed(req),
                    // (A clone: `req` borrowed `bytes`; a count, not a copy.)
                    None => return handoff(io, bytes.clone(), "target or header refused by the http types"),
                }
            }
        };
        // Pipelined bytes (rare): the next request's, kept for the next parse.
        buf.extend_from_slice(&bytes[head.len + head.body_len..]);
        let busy = Busy::begin(Arc::clone(phase));
        let answer = match next {
            Next::Raw(route, req) => {
                lines.clear();
                // Lent to the surface and given back with the answer: one
                // buffer for the connection's heads, no allocation each.
                surface.answer_raw(route, req, std::mem::take(&mut lines)).await
            }
            Next::Routed(req) => RawAnswer::Full(surface.clone().oneshot(req).await.unwrap_or_else(|e| match e {})),
        };
        // Read once the answer is ready: a shutdown that began while it was
        // being made closes the connection after it.
        let close = head.close || stopping(flag.as_ref());
        let written = match answer {
            RawAnswer::Head(status, head) => {
                lines = head;
                respond_head(&mut io, &mut out, status, lines.iter(), close).await
            }
            RawAnswer::Full(resp) => respond(&mut io, &mut out, resp, close).await,
        };
        drop(busy);
        match written {
            Ok(false) => {}
            Ok(true) => {
                let _ = io.shutdown().await;
                return End::Closed;
            }
            Err(_) => return End::Closed,
        }
    }
}

/// How [`serve`] answers a request it read.
enum Next<'a, R> {
    /// From its bytes, by the surface's route.
    Raw(R, RawRequest<'a>),
    /// As a `Request`, by the surface's service.
    Routed(Request),
}

/// Whether the server is shutting down (or gone, as [`shutdown`] takes it).
fn stopping(stop: Option<&watch::Receiver<bool>>) -> bool {
    stop.is_some_and(|stop| stop.has_changed().is_err() || *stop.borrow())
}

fn handoff<IO>(io: IO, read: Bytes, why: &'static str) -> End<IO> {
    tracing::debug!(why, "HTTP/1.1 connection handed to hyper");
    End::Handoff(io, read)
}

/// Resolves when the server starts shutting down; never without a `stop`.
async fn shutdown(stop: Option<&mut watch::Receiver<bool>>) {
    match stop {
        Some(stop) => {
            // A dropped sender: the server is gone too.
            let _ = stop.wait_for(|s| *s).await;
        }
        None => std::future::pending().await,
    }
}

async fn read_some<IO: AsyncRead + Unpin>(io: &mut IO, buf: &mut BytesMut) -> io::Result<usize> {
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    io.read_buf(buf).await
}

/// The request as the surface's [`RawRequest`]; `None` for a target that
/// is not UTF-8 (hyper's to refuse).
fn raw<'a>(bytes: &'a Bytes, head: &'a Head, fields: &'a [Field]) -> Option<RawRequest<'a>> {
    Some(RawRequest {
        method: &head.method,
        target: std::str::from_utf8(&bytes[head.target.clone()]).ok()?,
        headers: RawHeaders { bytes, fields },
        body: bytes.slice(head.len..head.len + head.body_len),
    })
}

/// The request, its target and header values slices of the bytes read (no
/// copies). `None` if hyper would read something the `http` types refuse.
fn request(bytes: &Bytes, head: &Head, fields: &[Field]) -> Option<Request> {
    let uri = Uri::from_maybe_shared(bytes.slice(head.target.clone())).ok()?;
    let mut headers = HeaderMap::with_capacity(fields.len());
    for f in fields {
        let name = HeaderName::from_bytes(&bytes[f.name.clone()]).ok()?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(f.value.clone())).ok()?;
        headers.append(name, value);
    }
    let body =
        if head.body_len == 0 { Body::empty() } else { Body::from(bytes.slice(head.len..head.len + head.body_len)) };
    let mut req = Request::new(body);
    *req.method_mut() = head.method.clone();
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    Some(req)
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
