//! The append (`POST /v1/stream/{path}`): the request headers it reads, the
//! call into the service, and its answer. One implementation for both ways
//! a request arrives: as an `http::Request` through the router
//! ([`crate::handlers`]), or parsed straight from the connection's bytes
//! ([`crate::direct`]). The answer lists its headers once
//! ([`Appended::each_header`]) for both to render.

use std::borrow::Cow;
use std::future::Future;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use ds_core::{AppendOutcome, AppendRequest};
use ds_protocol::headers::{is_stream_closed, parse_producer};
use ds_protocol::Offset;

use crate::error::ApiError;
use crate::headers::{self as h, name};
use crate::AppInner;

/// The request headers an append reads, found in one pass: six lookups
/// hashed six names (a custom name byte by byte), about 2% of a 100 B
/// append's instructions. Each is its name's first value, as
/// [`crate::headers::get`] would answer, and a value that is not text is a
/// 400 as there.
#[derive(Default)]
pub(crate) struct AppendHeaders<'a> {
    pub content_type: Option<&'a str>,
    pub stream_closed: Option<&'a str>,
    pub stream_seq: Option<&'a str>,
    pub producer_id: Option<&'a str>,
    pub producer_epoch: Option<&'a str>,
    pub producer_seq: Option<&'a str>,
    /// W3C `traceparent`: only looked at when spans are exported.
    pub traceparent: Option<&'a str>,
}

impl<'a> AppendHeaders<'a> {
    pub(crate) fn read(headers: &'a HeaderMap) -> Result<Self, ApiError> {
        Self::from_fields(headers.iter().map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes())))
    }

    /// From header lines as they arrived: names in any case, values as
    /// bytes (text is checked as [`HeaderValue::to_str`] checks it).
    pub(crate) fn from_fields(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Result<Self, ApiError> {
        let mut found = Self::default();
        for (name, value) in fields {
            let Some((slot, label)) = found.slot(name) else { continue };
            if slot.is_none() {
                match text(value) {
                    Some(value) => *slot = Some(value),
                    // Tracing never refuses a request: an unreadable one is ignored.
                    None if label == ds_telemetry::TRACEPARENT => {}
                    None => return Err(ApiError::bad_request(format!("header {label} is not valid text"))),
                }
            }
        }
        Ok(found)
    }

    fn slot(&mut self, name: &[u8]) -> Option<(&mut Option<&'a str>, &'static str)> {
        // Lengths first: most header lines (host, content-length, user-agent)
        // are none of these, and are passed over without a comparison.
        let (slot, label) = match name.len() {
            10 => (&mut self.stream_seq, h::STREAM_SEQ),
            // `traceparent` has the length of `producer-id`.
            11 if name[0].eq_ignore_ascii_case(&b't') => (&mut self.traceparent, ds_telemetry::TRACEPARENT),
            11 => (&mut self.producer_id, h::PRODUCER_ID),
            12 if name[0].eq_ignore_ascii_case(&b'c') => (&mut self.content_type, "content-type"),
            12 => (&mut self.producer_seq, h::PRODUCER_SEQ),
            13 => (&mut self.stream_closed, h::STREAM_CLOSED),
            14 => (&mut self.producer_epoch, h::PRODUCER_EPOCH),
            _ => return None,
        };
        name.eq_ignore_ascii_case(label.as_bytes()).then_some((slot, label))
    }
}

/// A header value as text: visible ASCII and tabs, as `HeaderValue::to_str`.
pub(crate) fn text(value: &[u8]) -> Option<&str> {
    // Every byte looked at (no early exit): the loop is vectorized.
    if value.iter().fold(true, |text, &b| text & ((b == b'\t') | (0x20..0x7f).contains(&b))) {
        // ASCII only, so this cannot fail.
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// What an append answered: `200` or `204` and its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Appended {
    pub status: StatusCode,
    pub tail: u64,
    pub closed: bool,
    /// A producer's epoch and last sequence number.
    pub producer: Option<(u64, u64)>,
}

/// Run the append of `body` to `path`; `body` is awaited after the headers
/// are read (a bad header is answered without reading it).
pub(crate) async fn append(
    app: &AppInner,
    path: Cow<'_, str>,
    hd: AppendHeaders<'_>,
    body: impl Future<Output = Result<Bytes, ApiError>>,
) -> Result<Appended, ApiError> {
    let producer = parse_producer(hd.producer_id, hd.producer_epoch, hd.producer_seq)?;
    let request = AppendRequest {
        path,
        content_type: hd.content_type.map(Cow::Borrowed),
        close: is_stream_closed(hd.stream_closed),
        seq: hd.stream_seq.map(str::to_owned),
        producer,
        body: body.await?,
        dedupe_key: None,
        incarnation: None,
        // The request span's own context, when it continues a sampled
        // `traceparent` (the edge made it its parent): only then does the
        // append leave its context for the work it causes.
        expect_tail: None,
        trace_context: hd
            .traceparent
            .filter(|_| ds_telemetry::enabled())
            .and_then(|_| ds_telemetry::current_traceparent()),
    };
    let empty_body = request.body.is_empty();
    let out = app.service.append(request).await?;
    let (status, producer) = match &out {
        // 200 only when a producer's request stored new data; a producer's
        // close-only request is a 204 like any close.
        AppendOutcome::Appended { producer: Some(p), .. } if !empty_body => (StatusCode::OK, Some(*p)),
        AppendOutcome::Appended { producer, .. } => (StatusCode::NO_CONTENT, *producer),
        AppendOutcome::AlreadyClosed { .. } | AppendOutcome::AlreadyAppended { .. } => (StatusCode::NO_CONTENT, None),
        AppendOutcome::Duplicate { producer, .. } => (StatusCode::NO_CONTENT, Some(*producer)),
    };
    let meta = out.meta();
    Ok(Appended { status, tail: meta.tail, closed: meta.closed, producer: producer.map(|p| (p.epoch, p.last_seq)) })
}

impl Appended {
    /// The answer's headers in order, each passed to `put`.
    pub(crate) fn each_header(&self, mut put: impl FnMut(HeaderName, &[u8])) {
        put(name::STREAM_NEXT_OFFSET, &Offset(self.tail).to_token());
        if self.closed {
            put(name::STREAM_CLOSED, b"true");
        }
        if let Some((epoch, seq)) = self.producer {
            put(name::PRODUCER_EPOCH, decimal(epoch, &mut [0; 20]));
            put(name::PRODUCER_SEQ, decimal(seq, &mut [0; 20]));
        }
    }
}

impl IntoResponse for Appended {
    fn into_response(self) -> Response {
        let mut resp = self.status.into_response();
        let headers = resp.headers_mut();
        self.each_header(|name, value| {
            // Digits, `_` and `true`: always a valid value.
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.insert(name, value);
            }
        });
        resp
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        // `n % 10` is below 10, so the cast is exact.
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use axum::http::header;

    use super::*;
    use crate::headers::get;

    #[test]
    fn append_headers_are_each_names_first_value() {
        let mut hd = HeaderMap::new();
        hd.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        hd.append(name::STREAM_SEQ, HeaderValue::from_static("b"));
        hd.append(name::STREAM_SEQ, HeaderValue::from_static("a"));
        hd.insert(name::PRODUCER_ID, HeaderValue::from_static("p"));
        hd.insert(name::PRODUCER_EPOCH, HeaderValue::from_static("1"));
        hd.insert(name::PRODUCER_SEQ, HeaderValue::from_static("2"));
        hd.insert(name::STREAM_CLOSED, HeaderValue::from_static("true"));
        hd.insert(header::HOST, HeaderValue::from_static("x"));
        // Same-length names that are none of them are passed over.
        hd.insert("x-producer-i", HeaderValue::from_static("no"));
        hd.insert("content-typo", HeaderValue::from_static("no"));
        let found = AppendHeaders::read(&hd).unwrap();
        for (name, got) in [
            ("content-type", found.content_type),
            (h::STREAM_SEQ, found.stream_seq),
            (h::PRODUCER_ID, found.producer_id),
            (h::PRODUCER_EPOCH, found.producer_epoch),
            (h::PRODUCER_SEQ, found.producer_seq),
            (h::STREAM_CLOSED, found.stream_closed),
        ] {
            assert_eq!(got, get(&hd, name).unwrap(), "{name}: what a lookup answers");
        }
        assert_eq!(found.stream_seq, Some("b"), "the first of two values");
        assert!(AppendHeaders::read(&HeaderMap::new()).unwrap().content_type.is_none());
    }

    #[test]
    fn header_lines_as_they_arrived_read_like_the_map() {
        let lines: [(&[u8], &[u8]); 5] = [
            (b"Host", b"x"),
            (b"Content-Type", b"text/plain"),
            (b"PRODUCER-SEQ", b"7"),
            (b"stream-seq", b"b"),
            (b"Stream-Seq", b"a"),
        ];
        let found = AppendHeaders::from_fields(lines.into_iter()).unwrap();
        assert_eq!(
            (found.content_type, found.producer_seq, found.stream_seq, found.producer_id),
            (Some("text/plain"), Some("7"), Some("b"), None)
        );
        let tab: [(&[u8], &[u8]); 1] = [(b"producer-id", b"a\tb c")];
        assert_eq!(AppendHeaders::from_fields(tab.into_iter()).unwrap().producer_id, Some("a\tb c"));
    }

    #[test]
    fn an_append_header_that_is_not_text_is_a_400() {
        let mut hd = HeaderMap::new();
        hd.insert(name::PRODUCER_ID, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        let err = AppendHeaders::read(&hd).err().unwrap();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert_eq!(err.message, "header producer-id is not valid text");
        // Only the first value counts, as with a lookup.
        let mut hd = HeaderMap::new();
        hd.append(name::STREAM_SEQ, HeaderValue::from_static("a"));
        hd.append(name::STREAM_SEQ, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(AppendHeaders::read(&hd).unwrap().stream_seq, Some("a"));
        for bad in [&b"\x7f"[..], b"\x01", b"\x80"] {
            assert!(text(bad).is_none(), "{bad:?}");
            assert!(HeaderValue::from_bytes(bad).map_or(true, |v| v.to_str().is_err()), "{bad:?}");
        }
    }

    #[test]
    fn decimals() {
        for n in [0, 7, 10, 1234567890, u64::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string().as_bytes());
        }
    }

    #[test]
    fn an_answer_lists_its_headers_in_order() {
        let a = Appended { status: StatusCode::OK, tail: 42, closed: true, producer: Some((3, 9)) };
        let mut seen = Vec::new();
        a.each_header(|name, value| seen.push(format!("{name}: {}", std::str::from_utf8(value).unwrap())));
        assert_eq!(
            seen,
            [
                format!("stream-next-offset: {}", Offset(42)),
                "stream-closed: true".into(),
                "producer-epoch: 3".into(),
                "producer-seq: 9".into()
            ]
        );
        let resp = a.into_response();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[h::PRODUCER_SEQ], "9");
        let plain = Appended { status: StatusCode::NO_CONTENT, tail: 0, closed: false, producer: None };
        let mut n = 0;
        plain.each_header(|_, _| n += 1);
        assert_eq!(n, 1, "only the next offset");
    }
}
