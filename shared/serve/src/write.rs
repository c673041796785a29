//! The fast path's writing of a response, framed as hyper frames it: one
//! rule for the head of every answer ([`head`]), whether the surface gave
//! a `Response` or header lines, and the body after it.

use std::io::{self, Write};

use axum::response::Response;
use futures::FutureExt;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::parse::has_token;

/// A response body piece up to this size is copied behind the head, so that
/// head and body leave in one write.
const COALESCE_MAX: usize = 16 * 1024;

/// How the body after a head is framed, and whether the connection closes
/// after the response.
pub(crate) struct Framing {
    pub chunked: bool,
    pub close: bool,
}

/// What hyper knows of a response body when it writes the head.
#[derive(Clone, Copy)]
pub(crate) enum BodySize {
    /// Ended before it began (`is_end_stream`): hyper drops a length line
    /// the response set and says `content-length: 0` after the others.
    Empty,
    Exact(u64),
    Unknown,
}

/// Writes the status line and the head of a response into `out` (cleared
/// first) as hyper's HTTP/1.1 server writes it (`proto::h1::role`,
/// `Server::encode`), for the `POST` and `PUT` requests the fast path
/// serves: the lines in order, but a length line not on a body that ended
/// before it began; then `connection: close` when the connection closes
/// (`close`: the request asked for it, or the server is stopping) unless a
/// line lists it; then the length (or chunked framing) when no line framed
/// the body and the status may have one; then `date`, unless set.
pub(crate) fn head<'a>(
    out: &mut Vec<u8>,
    status: StatusCode,
    lines: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    body: BodySize,
    close: bool,
) -> Framing {
    status_line(out, status);
    let (mut length, mut chunked, mut date, mut said_close) = (false, false, false, false);
    for (name, value) in lines {
        if name.eq_ignore_ascii_case(b"content-length") {
            if matches!(body, BodySize::Empty) || length {
                continue;
            }
            length = true;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if !may_have_body(status) {
                continue;
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"date") {
            date = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            said_close |= has_token(value, b"close");
        }
        put_header(out, name, value);
    }
    if close && !said_close {
        put_header(out, b"connection", b"close");
    }
    if !length && !chunked && may_have_body(status) {
        match body {
            BodySize::Empty => put_header(out, b"content-length", b"0"),
            BodySize::Exact(n) => {
                // Writing into a Vec cannot fail.
                let _ = write!(out, "content-length: {n}\r\n");
            }
            BodySize::Unknown => {
                put_header(out, b"transfer-encoding", b"chunked");
                chunked = true;
            }
        }
    }
    if !date {
        crate::date::with(|d| put_header(out, b"date", d));
    }
    out.extend_from_slice(b"\r\n");
    Framing { chunked: chunked && may_have_body(status), close: close || said_close }
}

/// Writes `resp` (see [`head`]). `Ok(close)`: whether the connection
/// closes after it.
pub(crate) async fn respond<IO: AsyncWrite + Unpin>(
    io: &mut IO,
    out: &mut Vec<u8>,
    resp: Response,
    close: bool,
) -> io::Result<bool> {
    let (parts, mut body) = resp.into_parts();
    let size = if http_body::Body::is_end_stream(&body) {
        BodySize::Empty
    } else {
        http_body::Body::size_hint(&body).exact().map_or(BodySize::Unknown, BodySize::Exact)
    };
    let lines = parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
    let framing = head(out, parts.status, lines, size, close);
    if may_have_body(parts.status) && !matches!(size, BodySize::Empty) {
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
            if framing.chunked {
                let _ = write!(out, "{:x}\r\n", data.len());
            }
            if out.len() + data.len() <= COALESCE_MAX {
                out.extend_from_slice(&data);
            } else {
                send(io, out).await?;
                io.write_all(&data).await?;
            }
            if framing.chunked {
                out.extend_from_slice(b"\r\n");
            }
        }
        if framing.chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
    }
    finish(io, out).await?;
    Ok(framing.close)
}

/// Writes a response with no body whose head is `lines` (see [`head`]).
/// `Ok(close)`.
pub(crate) async fn respond_head<'a, IO: AsyncWrite + Unpin>(
    io: &mut IO,
    out: &mut Vec<u8>,
    status: StatusCode,
    lines: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    close: bool,
) -> io::Result<bool> {
    let framing = head(out, status, lines, BodySize::Empty, close);
    finish(io, out).await?;
    Ok(framing.close)
}

/// Whether a response to a `POST` or `PUT` with this status may have a
/// body, and so a length or chunked framing: hyper's rule
/// (`can_have_content_length`, `can_chunked`).
fn may_have_body(status: StatusCode) -> bool {
    !(status.is_informational() || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED))
}

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn put_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

async fn finish<IO: AsyncWrite + Unpin>(io: &mut IO, out: &mut Vec<u8>) -> io::Result<()> {
    send(io, out).await?;
    io.flush().await
}

async fn send<IO: AsyncWrite + Unpin>(io: &mut IO, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(())
}
