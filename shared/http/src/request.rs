//! Turning raw requests into service requests: the stream path, the query,
//! the body (with the size limit).

use std::borrow::Cow;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::AsHeaderName;
use axum::http::{HeaderMap, Uri};
use bytes::{Bytes, BytesMut};
use ds_core::LiveMode;
use ds_protocol::ReadOffset;
use futures::FutureExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::error::ApiError;

/// The decoded stream path of a `/v1/stream/{path}` URI.
pub fn stream_path(uri: &Uri) -> Result<String, ApiError> {
    stream_path_ref(uri).map(Cow::into_owned)
}

/// [`stream_path`], borrowed from the URI when nothing was encoded.
pub(crate) fn stream_path_ref(uri: &Uri) -> Result<Cow<'_, str>, ApiError> {
    decode_stream_path(uri.path().strip_prefix("/v1/stream/").unwrap_or_default())
}

/// The stream path from the part of a URI path after `/v1/stream/`:
/// percent-decoded, and valid (`ds_protocol::path::validate`).
pub(crate) fn decode_stream_path(raw: &str) -> Result<Cow<'_, str>, ApiError> {
    let decoded = if raw.contains('%') {
        Cow::Owned(
            percent_decode(raw)
                .ok_or_else(|| ApiError::bad_request("stream path is not valid percent-encoded UTF-8"))?,
        )
    } else {
        Cow::Borrowed(raw)
    };
    ds_protocol::path::validate(&decoded)?;
    Ok(decoded)
}

pub(crate) fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The read query: `offset`, `live`, `cursor`. Unknown parameters are ignored.
#[derive(Debug)]
pub struct ReadQuery {
    pub offset: Option<ReadOffset>,
    pub live: LiveMode,
    pub cursor: Option<String>,
}

/// The `live` parameter: absent (catch-up), `long-poll` or `sse`.
fn live_mode(v: &str) -> Result<LiveMode, ApiError> {
    match v {
        "long-poll" => Ok(LiveMode::LongPoll),
        "sse" => Ok(LiveMode::Sse),
        other => Err(ApiError::bad_request(format!("unknown live mode {other:?} (expected long-poll or sse)"))),
    }
}

pub fn read_query(uri: &Uri) -> Result<ReadQuery, ApiError> {
    let mut offsets = Vec::new();
    let mut q = ReadQuery { offset: None, live: LiveMode::None, cursor: None };
    for pair in uri.query().unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v =
            percent_decode(&v.replace('+', " ")).ok_or_else(|| ApiError::bad_request("query is not valid UTF-8"))?;
        match k {
            "offset" => offsets.push(v),
            "live" => q.live = live_mode(&v)?,
            "cursor" => q.cursor = Some(v),
            _ => {}
        }
    }
    let refs: Vec<&str> = offsets.iter().map(String::as_str).collect();
    q.offset = ReadOffset::from_query(&refs)?;
    Ok(q)
}

/// Read the whole body, refusing more than `limit` bytes with 413, and a body
/// that stalls for longer than `idle` between two pieces with 408.
pub async fn body(body: Body, limit: usize, idle: Duration) -> Result<Bytes, ApiError> {
    let mut body = Limited::new(body, limit);
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    loop {
        // A piece already received (a small body arrives with its head) is
        // taken without arming the timer: no clock read, no timer entry.
        let mut next = body.frame();
        let frame = match (&mut next).now_or_never() {
            Some(frame) => frame,
            None => tokio::time::timeout(idle, next).await.map_err(|_| ApiError::body_timeout(idle))?,
        };
        let frame = match frame {
            None => break,
            Some(frame) => frame.map_err(|e| body_error(&*e, limit))?,
        };
        let Ok(data) = frame.into_data() else { continue };
        // One piece (the common case) is returned as is, without a copy.
        match &first {
            None => first = Some(data),
            Some(f) => {
                if rest.is_empty() {
                    rest.extend_from_slice(f);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    Ok(if rest.is_empty() { first.unwrap_or_default() } else { rest.freeze() })
}

fn body_error(e: &(dyn std::error::Error + 'static), limit: usize) -> ApiError {
    if e.is::<LengthLimitError>() {
        ApiError::payload_too_large(limit)
    } else {
        ApiError::bad_request(format!("could not read the request body: {e}"))
    }
}

/// A request header as text; a value that is not visible ASCII is a 400.
/// `name`: a `&str`, or (cheaper) a `HeaderName` from [`crate::headers::name`].
pub fn get<N>(headers: &HeaderMap, name: N) -> Result<Option<&str>, ApiError>
where
    N: AsHeaderName + std::fmt::Display + Copy,
{
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| ApiError::bad_request(format!("header {name} is not valid text"))),
    }
}

/// The host clients reached this server by. HTTP/2 carries it in the URI's
/// authority, not a Host header.
pub(crate) fn request_host(parts: &http::request::Parts) -> Result<String, ApiError> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    Ok(get(&parts.headers, "host")?.or(authority).unwrap_or("127.0.0.1").to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_and_queries() {
        let uri: Uri = "/v1/stream/a%2Fb/c?offset=-1&live=long-poll&x=1".parse().unwrap();
        assert_eq!(stream_path(&uri).unwrap(), "a/b/c");
        let q = read_query(&uri).unwrap();
        assert_eq!(q.offset, Some(ReadOffset::Beginning));
        assert_eq!(q.live, LiveMode::LongPoll);
        assert!(read_query(&"/x?offset=-1&live=poll".parse().unwrap()).is_err(), "unknown live mode");
        for bad in ["/v1/stream/a/%2E%2E/b", "/v1/stream/..", "/v1/stream/a%00b", "/v1/stream/%ff"] {
            assert!(stream_path(&bad.parse().unwrap()).is_err(), "{bad}");
        }
        assert!(read_query(&"/x?offset=1,2".parse().unwrap()).is_err());
        assert!(read_query(&"/x?offset=".parse().unwrap()).is_err());
        assert!(read_query(&"/x?offset=-1&offset=-1".parse().unwrap()).is_err());
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_413_and_others_are_read_whole() {
        let idle = Duration::from_secs(5);
        let ok = body(Body::from("12345"), 5, idle).await.unwrap();
        assert_eq!(ok, Bytes::from_static(b"12345"));
        let err = body(Body::from("123456"), 5, idle).await.expect_err("over the limit");
        assert_eq!(err.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        let pieces =
            ["", "ab", "", "cd", "e"].map(|p| Ok::<_, std::convert::Infallible>(Bytes::from_static(p.as_bytes())));
        let whole = body(Body::from_stream(futures::stream::iter(pieces)), 5, idle).await.unwrap();
        assert_eq!(whole, Bytes::from_static(b"abcde"), "pieces joined in order");
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_is_408() {
        let first = futures::stream::iter([Ok::<_, std::convert::Infallible>(Bytes::from_static(b"ab"))]);
        let stalled = Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()));
        let err = body(stalled, 100, Duration::from_millis(50)).await.expect_err("stalled");
        assert_eq!(err.status, axum::http::StatusCode::REQUEST_TIMEOUT);
        assert!(err.headers.iter().any(|(n, v)| *n == "connection" && v == "close"), "408 closes the connection");
    }
}
