//! Our own HTTP/1.1 serving of the plain request, hyper for the rest.
//!
//! An append is a short `POST` whose head and body arrive together, on a
//! keep-alive connection that sends nothing else. hyper's general machinery
//! (its dispatcher's state machine, a body channel between the connection and
//! the handler, a read buffer given away with every request) costs more
//! instructions than the append itself. This loop serves that request, and
//! `PUT` alike, with one parse (httparse, as hyper) and one write of the
//! response. An append of the protocol's own [`crate::App`] is answered
//! straight from the parsed bytes ([`crate::direct`]); any other such
//! request is built from the read buffer's bytes (no copies) and answered by
//! the [`AppService`].
//!
//! Anything else it does not try to serve: another method, HTTP/1.0, a head
//! httparse refuses or that is too large, `Transfer-Encoding`, `Expect`,
//! `Upgrade`, a repeated or unreadable `Content-Length`, a body that has not
//! fully arrived or is larger than [`FAST_BODY_MAX`]. At the first such request
//! the connection is handed to hyper, with the bytes read so far replayed
//! ahead of the socket ([`Rewind`]), and hyper serves it to its end: hyper
//! decides what a strange request means, and answers the errors (`400`,
//! `431`) as it always has.

use std::borrow::Cow;
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use futures::FutureExt;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;
use tower::ServiceExt;

use crate::append::Appended;
use crate::conn_guard::{Busy, Phase};
use crate::cors::CorsAnswer;
use crate::direct::{Answer, Direct};
use crate::serve::{AppService, ConnLimits};

/// hyper's limit on an HTTP/1.1 request's header lines; past it, hyper answers `431`.
const MAX_HEADERS: usize = 100;

/// The largest body served here; a larger one goes to hyper, which streams
/// it to the handler instead of holding it whole in the read buffer.
pub(crate) const FAST_BODY_MAX: usize = 64 * 1024;

/// How much the read buffer grows by when it is full.
const READ_CHUNK: usize = 8 * 1024;

/// A response body piece up to this size is copied behind the head, so that
/// head and body leave in one write.
const COALESCE_MAX: usize = 16 * 1024;

/// How a connection left [`serve`].
pub(crate) enum End<IO> {
    /// Closed: the peer left, a read or write failed or timed out, the request
    /// asked for it, or the server is shutting down.
    Closed,
    /// The next request is hyper's: the connection, and the bytes read from it
    /// that hyper must see first.
    Handoff(IO, Bytes),
}

/// Serve requests on `io` until the connection ends or a request is not ours.
pub(crate) async fn serve<IO, A>(
    mut io: IO,
    phase: &Arc<Phase>,
    app: A,
    limits: &ConnLimits,
    stop: &mut Option<watch::Receiver<bool>>,
) -> End<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
    A: AppService,
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
                            Some(_) => return End::Closed,
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
                _ => return End::Closed,
            }
        };

        let bytes = buf.split().freeze();
        let next = match direct(&app, &bytes, &head) {
            Some((direct, target, path)) => Next::Direct(direct, target, path),
            None => match request(&bytes, &head, &fields) {
                Some(req) => Next::Routed(req),
                // (A clone: the match holds a borrow of `bytes`; a count, not a copy.)
                None => return handoff(io, bytes.clone(), "target or header refused by the http types"),
            },
        };
        // Pipelined bytes (rare): the next request's, kept for the next parse.
        buf.extend_from_slice(&bytes[head.len + head.body_len..]);

        let busy = Busy::begin(Arc::clone(phase));
        let answer = match next {
            Next::Direct(direct, target, path) => {
                let lines = fields.iter().map(|f| (&bytes[f.name.clone()], &bytes[f.value.clone()]));
                let body = bytes.slice(head.len..head.len + head.body_len);
                direct.append(target, path, lines, body).await
            }
            Next::Routed(req) => Answer::Full(app.clone().oneshot(req).await.unwrap_or_else(|e| match e {})),
        };
        let close = head.close || stopping(flag.as_ref());
        let written = match answer {
            Answer::Appended(direct, appended, cors) => {
                appended_answer(&mut io, &mut out, direct, &appended, &cors, close).await
            }
            Answer::Full(resp) => respond(&mut io, &mut out, resp, close).await,
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

/// How [`serve`] will answer a request it read.
enum Next<'a> {
    /// An append, answered directly ([`crate::direct`]): to this target and
    /// stream.
    Direct(&'a Direct, &'a str, Cow<'a, str>),
    /// Anything else, by the app's router.
    Routed(Request),
}

/// The request as a direct append of the app's, if it is one: what serves
/// it, its target and its stream.
fn direct<'a, A: AppService>(app: &'a A, bytes: &'a Bytes, head: &Head) -> Option<(&'a Direct, &'a str, Cow<'a, str>)> {
    let direct = app.as_app()?.direct()?;
    if head.method != Method::POST {
        return None;
    }
    let target = std::str::from_utf8(&bytes[head.target.clone()]).ok()?;
    Some((direct, target, direct.path(target)?))
}

/// A request head that [`serve`] answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    method: Method,
    /// The request target (origin form), within the buffer.
    target: Range<usize>,
    /// Length of the head, blank line included.
    len: usize,
    body_len: usize,
    /// The client asked to close after this request (`Connection: close`).
    close: bool,
}

/// One header line's name and value, within the buffer.
struct Field {
    name: Range<usize>,
    value: Range<usize>,
}

#[derive(Debug, PartialEq, Eq)]
enum Parse {
    /// The head is not complete yet.
    Partial,
    Ours(Head),
    /// hyper's to serve (or to refuse).
    Theirs,
}

fn parse(buf: &[u8], max_head: usize, fields: &mut Vec<Field>) -> Parse {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) if len <= max_head => len,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Parse::Partial,
        _ => return Parse::Theirs,
    };
    let method = match req.method {
        Some("POST") => Method::POST,
        Some("PUT") => Method::PUT,
        _ => return Parse::Theirs,
    };
    let (Some(1), Some(path)) = (req.version, req.path) else { return Parse::Theirs };
    if !path.starts_with('/') {
        return Parse::Theirs;
    }
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + s.len()
    };
    let (mut body_len, mut close) = (None, false);
    fields.clear();
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            match (body_len, content_length(h.value)) {
                (None, Some(n)) => body_len = Some(n),
                _ => return Parse::Theirs,
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    return Parse::Theirs;
                }
            }
        } else if [&b"transfer-encoding"[..], b"expect", b"upgrade"].iter().any(|n| name.eq_ignore_ascii_case(n)) {
            return Parse::Theirs;
        }
        fields.push(Field { name: at(name), value: at(h.value) });
    }
    let body_len = body_len.unwrap_or(0);
    if body_len > FAST_BODY_MAX {
        return Parse::Theirs;
    }
    Parse::Ours(Head { method, target: at(path.as_bytes()), len, body_len, close })
}

/// A `Content-Length` value: digits only, as hyper reads it for one value.
fn content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0usize, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(usize::from(b - b'0')),
        _ => None,
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

/// Write a direct append's answer as [`respond`] writes the router's: the
/// same headers in the same order (the body is empty). `Ok(close)`.
async fn appended_answer<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    out: &mut Vec<u8>,
    direct: &Direct,
    appended: &Appended,
    cors: &CorsAnswer,
    close: bool,
) -> io::Result<bool> {
    status_line(out, appended.status);
    appended.each_header(|name, value| put_header(out, name.as_str().as_bytes(), value));
    if !bodyless(appended.status) {
        // A producer's `200`: an empty body, said as hyper says it.
        put_header(out, b"content-length", b"0");
    }
    direct.put_common_headers(cors, out);
    crate::date::with(|d| put_header(out, b"date", d));
    if close {
        put_header(out, b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
    send(io, out).await?;
    io.flush().await?;
    Ok(close)
}

/// A status whose response has no body, and so no framing: hyper's rule.
fn bodyless(status: StatusCode) -> bool {
    status.is_informational() || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Write `resp` as hyper frames it: the handler's headers as they are, a
/// `Date` and a length (or chunked framing) when it set none. `Ok(close)`:
/// whether the connection closes after it (`close`, or the response says
/// `Connection: close`, as hyper reads it).
async fn respond<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    out: &mut Vec<u8>,
    resp: Response,
    mut close: bool,
) -> io::Result<bool> {
    let (parts, mut body) = resp.into_parts();
    status_line(out, parts.status);
    let bodyless = bodyless(parts.status);
    let (mut length, mut chunked, mut date, mut said_close) = (false, false, false, false);
    for (name, value) in &parts.headers {
        match *name {
            // RFC 9110 §8.6: no length on a 1xx or 204 (nor, as hyper, on a
            // 304), though the router sets one on every empty body.
            header::CONTENT_LENGTH if bodyless => continue,
            header::CONTENT_LENGTH => length = true,
            header::TRANSFER_ENCODING => chunked = true,
            header::DATE => date = true,
            header::CONNECTION => said_close |= has_close(value.as_bytes()),
            _ => {}
        }
        put_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if !date {
        crate::date::with(|d| put_header(out, b"date", d));
    }
    if !bodyless && !length && !chunked {
        match http_body::Body::size_hint(&body).exact() {
            Some(n) => {
                // Writing into a Vec cannot fail.
                let _ = write!(out, "content-length: {n}\r\n");
            }
            None => {
                put_header(out, b"transfer-encoding", b"chunked");
                chunked = true;
            }
        }
    }
    if close && !said_close {
        put_header(out, b"connection", b"close");
    }
    close |= said_close;
    out.extend_from_slice(b"\r\n");
    if !bodyless {
        loop {
            // A piece not ready yet (a streamed body): what is written so far
            // goes out first.
            let next = match body.frame().now_or_never() {
                Some(next) => next,
                None => {
                    send(io, out).await?;
                    body.frame().await
                }
            };
            let Some(frame) = next else { break };
            let frame = frame.map_err(io::Error::other)?;
            let Ok(data) = frame.into_data() else { continue };
            if data.is_empty() {
                continue;
            }
            if chunked {
                let _ = write!(out, "{:x}\r\n", data.len());
            }
            if out.len() + data.len() <= COALESCE_MAX {
                out.extend_from_slice(&data);
            } else {
                send(io, out).await?;
                io.write_all(&data).await?;
            }
            if chunked {
                out.extend_from_slice(b"\r\n");
            }
        }
        if chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
    }
    send(io, out).await?;
    io.flush().await?;
    Ok(close)
}

/// Whether a `Connection` value lists `close`.
fn has_close(value: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
}

pub(crate) fn put_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

async fn send<IO: AsyncWrite + Unpin>(io: &mut IO, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// A connection whose first reads return bytes already read from it.
pub(crate) struct Rewind<IO> {
    prefix: Bytes,
    io: IO,
}

impl<IO> Rewind<IO> {
    pub(crate) fn new(prefix: Bytes, io: IO) -> Self {
        Self { prefix, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.prefix.is_empty() {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        let n = self.prefix.len().min(buf.remaining());
        buf.put_slice(&self.prefix[..n]);
        self.prefix.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewind<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
