//! The fast path's reading of a request head: httparse, as hyper parses
//! it, and hyper's own decisions on what the head means (its length, its
//! `Connection`), for the requests the fast path serves; everything else is
//! left to hyper ([`Parse::Theirs`]).

use std::mem::MaybeUninit;
use std::ops::Range;

use http::Method;

/// hyper's limit on an HTTP/1.1 request's header lines; past it, hyper answers `431`.
pub(crate) const MAX_HEADERS: usize = 100;

/// The largest body the fast path serves; a larger one goes to hyper,
/// which streams it to the handler instead of holding it whole in the read
/// buffer.
pub(crate) const FAST_BODY_MAX: usize = 64 * 1024;

/// A request head that the fast path serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub method: Method,
    /// The request target (origin form), within the buffer.
    pub target: Range<usize>,
    /// Length of the head, blank line included.
    pub len: usize,
    pub body_len: usize,
    /// The connection closes after this request, as hyper reads the
    /// request's `Connection` lines.
    pub close: bool,
}

/// One header line's name and value, within the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    pub name: Range<usize>,
    pub value: Range<usize>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parse {
    /// The head is not complete yet.
    Partial,
    Ours(Head),
    /// hyper's to serve (or to refuse).
    Theirs,
}

pub(crate) fn parse(buf: &[u8], max_head: usize, fields: &mut Vec<Field>) -> Parse {
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
    let (mut body_len, mut keep_alive) = (None, KeepAlive::default());
    fields.clear();
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            match (body_len, content_length(h.value)) {
                (None, Some(n)) => body_len = Some(n),
                _ => return Parse::Theirs,
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            if has_token(h.value, b"upgrade") {
                return Parse::Theirs;
            }
            keep_alive.line(h.value);
        } else if [&b"transfer-encoding"[..], b"expect", b"upgrade"].iter().any(|n| name.eq_ignore_ascii_case(n)) {
            return Parse::Theirs;
        }
        fields.push(Field { name: at(name), value: at(h.value) });
    }
    let body_len = body_len.unwrap_or(0);
    if body_len > FAST_BODY_MAX {
        return Parse::Theirs;
    }
    Parse::Ours(Head { method, target: at(path.as_bytes()), len, body_len, close: !keep_alive.0 })
}

/// Whether an HTTP/1.1 connection stays open after the request, read from
/// its `Connection` lines in order as hyper reads them: while it stays
/// open, a line listing `close` closes it; once closed, only a line listing
/// `keep-alive` opens it again. A value that is not all visible ASCII is
/// unreadable to hyper (`HeaderValue::to_str` fails) and lists nothing.
struct KeepAlive(bool);

impl Default for KeepAlive {
    fn default() -> Self {
        Self(true)
    }
}

impl KeepAlive {
    fn line(&mut self, value: &[u8]) {
        self.0 = if self.0 { !has_token(value, b"close") } else { has_token(value, b"keep-alive") };
    }
}

/// Whether a comma-separated header value lists `token` (ASCII case
/// ignored), as hyper reads one: only a value of visible ASCII is read.
pub(crate) fn has_token(value: &[u8], token: &[u8]) -> bool {
    let readable = value.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    readable && value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// A `Content-Length` value: digits only, as hyper reads it for one value.
pub(crate) fn content_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 19 {
        return None;
    }
    value.iter().try_fold(0usize, |n, &b| match b {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(usize::from(b - b'0')),
        _ => None,
    })
}
