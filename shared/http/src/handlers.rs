//! One handler per method on `/v1/stream/{path}`; each parses headers into a
//! service request and renders the outcome. Errors go through [`ApiError`].

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ds_core::{
    AppendOutcome, AppendRequest, CreateRequest, ForkRequest, LiveMode, ReadOutcome, ReadRequest, StreamMeta,
};
use ds_protocol::etag::{if_none_match, read_etag};
use ds_protocol::headers::{
    format_rfc3339_ms, is_stream_closed, parse_lifetime, parse_producer, parse_sub_offset, validate_content_type,
};
use ds_protocol::sse::DataEncoding;
use ds_protocol::Offset;
use futures::future::BoxFuture;

use crate::error::ApiError;
use crate::headers::{self as h, get, name, offset_value};
use crate::request::{body, read_query, stream_path, ReadQuery};
use crate::AppState;

type ApiResult = Result<Response, ApiError>;
type LiveSlot = tokio::sync::OwnedSemaphorePermit;

/// The stream route. Routing is synchronous and each route's future is
/// boxed on its own: a future holds its arguments for as long as it runs,
/// so a chain of `async fn`s taking the `Request` would keep a copy of its
/// head per level through a long-poll's whole wait; and inline, every
/// request would carry the size of the largest route's future.
pub(crate) fn stream(State(app): State<AppState>, req: Request) -> BoxFuture<'static, Response> {
    let routed = route(app, req);
    Box::pin(async move {
        match routed {
            Ok(run) => run.await.unwrap_or_else(IntoResponse::into_response),
            Err(e) => e.into_response(),
        }
    })
}

fn route(app: AppState, req: Request) -> Result<BoxFuture<'static, ApiResult>, ApiError> {
    let path = stream_path(req.uri())?;
    if ds_protocol::path::is_reserved(&path) {
        return Ok(Box::pin(crate::reserved::dispatch(app, path, req)));
    }
    Ok(match *req.method() {
        Method::PUT => Box::pin(put(app, path, req)),
        Method::POST => Box::pin(post(app, path, req)),
        Method::GET => {
            let q = read_query(req.uri())?;
            let inm = get(req.headers(), "if-none-match")?.map(str::to_owned);
            Box::pin(get_stream(app, path, q, inm))
        }
        Method::HEAD => Box::pin(head(app, path)),
        Method::DELETE => Box::pin(async move {
            app.service.delete(&path).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }),
        _ => return Err(ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", "method not allowed")),
    })
}

pub(crate) async fn not_a_stream() -> Response {
    ApiError::bad_request("a stream path is required: /v1/stream/{path}").into_response()
}

pub(crate) async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such route").into_response()
}

fn set(headers: &mut HeaderMap, name: &'static str, value: impl ToString) {
    if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
        headers.insert(name, v);
    }
}

/// A header from text the response borrows (one allocation: the value).
fn set_text(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

fn set_offset(headers: &mut HeaderMap, position: u64) {
    headers.insert(name::STREAM_NEXT_OFFSET, offset_value(position));
}

const TRUE: HeaderValue = HeaderValue::from_static("true");

/// The host clients reached this server by. HTTP/2 carries it in the URI's
/// authority, not a Host header.
pub(crate) fn request_host(parts: &http::request::Parts) -> Result<String, ApiError> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    Ok(get(&parts.headers, "host")?.or(authority).unwrap_or("127.0.0.1").to_owned())
}

async fn put(app: AppState, path: String, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let hd = &parts.headers;
    let parts_host = request_host(&parts)?;
    let content_type = get(hd, "content-type")?.map(str::to_owned);
    if let Some(ct) = &content_type {
        validate_content_type(ct)?;
    }
    let lifetime = parse_lifetime(get(hd, h::STREAM_TTL)?, get(hd, h::STREAM_EXPIRES_AT)?)?;
    let fork =
        match (get(hd, h::STREAM_FORKED_FROM)?, get(hd, h::STREAM_FORK_OFFSET)?, get(hd, h::STREAM_FORK_SUB_OFFSET)?) {
            (None, None, None) => None,
            (None, _, _) => return Err(ApiError::bad_request("fork headers need Stream-Forked-From")),
            (Some(source), offset, sub) => {
                let offset = offset.map(Offset::parse).transpose()?;
                let sub_offset = sub.map(parse_sub_offset).transpose()?.unwrap_or(0);
                if sub_offset > 0 && offset.is_none() {
                    return Err(ApiError::bad_request("Stream-Fork-Sub-Offset needs Stream-Fork-Offset"));
                }
                let source = crate::classify::fork_source(source);
                Some(ForkRequest { source, offset, sub_offset })
            }
        };
    let closed = is_stream_closed(get(hd, h::STREAM_CLOSED)?);
    let body = body(raw, app.cfg.max_body_bytes, app.cfg.body_read_timeout).await?;
    let out =
        app.service.create(CreateRequest { path: path.clone(), content_type, lifetime, closed, body, fork }).await?;
    let mut resp = if out.created { StatusCode::CREATED } else { StatusCode::OK }.into_response();
    let headers = resp.headers_mut();
    stream_headers(headers, &out.meta);
    if out.created {
        set(headers, "location", location(&app.base_url(&parts_host), &path));
    }
    Ok(resp)
}

/// The absolute URL of a created stream (`Location` must parse as a URL).
fn location(base: &str, path: &str) -> String {
    let encoded: String = path
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("{base}/v1/stream/{encoded}")
}

/// Content-Type, Stream-Next-Offset, and Stream-Closed when closed.
fn stream_headers(headers: &mut HeaderMap, meta: &StreamMeta) {
    set_text(headers, header::CONTENT_TYPE, &meta.content_type);
    set_offset(headers, meta.tail);
    if meta.closed {
        headers.insert(name::STREAM_CLOSED, TRUE);
    }
}

async fn post(app: AppState, path: String, req: Request) -> ApiResult {
    let (parts, raw) = req.into_parts();
    let hd = AppendHeaders::read(&parts.headers)?;
    let producer = parse_producer(hd.producer_id, hd.producer_epoch, hd.producer_seq)?;
    let request = AppendRequest {
        path,
        content_type: hd.content_type.map(str::to_owned),
        close: is_stream_closed(hd.stream_closed),
        seq: hd.stream_seq.map(str::to_owned),
        producer,
        body: body(raw, app.cfg.max_body_bytes, app.cfg.body_read_timeout).await?,
        dedupe_key: None,
        incarnation: None,
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
    let mut resp = status.into_response();
    let headers = resp.headers_mut();
    let meta = out.meta();
    set_offset(headers, meta.tail);
    if meta.closed {
        headers.insert(name::STREAM_CLOSED, TRUE);
    }
    if let Some(p) = producer {
        headers.insert(name::PRODUCER_EPOCH, HeaderValue::from(p.epoch));
        headers.insert(name::PRODUCER_SEQ, HeaderValue::from(p.last_seq));
    }
    Ok(resp)
}

/// The request headers an append reads, found in one pass over the map:
/// six lookups hashed six names (a custom name byte by byte), about 2% of a
/// 100 B append's instructions. Each is its name's first value, as
/// [`get`] would answer, and a value that is not text is a 400 as there.
#[derive(Default)]
struct AppendHeaders<'a> {
    content_type: Option<&'a str>,
    stream_closed: Option<&'a str>,
    stream_seq: Option<&'a str>,
    producer_id: Option<&'a str>,
    producer_epoch: Option<&'a str>,
    producer_seq: Option<&'a str>,
}

impl<'a> AppendHeaders<'a> {
    fn read(headers: &'a HeaderMap) -> Result<Self, ApiError> {
        let mut found = Self::default();
        for (name, value) in headers {
            let slot = match name.as_str() {
                "content-type" => &mut found.content_type,
                h::STREAM_CLOSED => &mut found.stream_closed,
                h::STREAM_SEQ => &mut found.stream_seq,
                h::PRODUCER_ID => &mut found.producer_id,
                h::PRODUCER_EPOCH => &mut found.producer_epoch,
                h::PRODUCER_SEQ => &mut found.producer_seq,
                _ => continue,
            };
            if slot.is_none() {
                let text =
                    value.to_str().map_err(|_| ApiError::bad_request(format!("header {name} is not valid text")))?;
                *slot = Some(text);
            }
        }
        Ok(found)
    }
}

async fn head(app: AppState, path: String) -> ApiResult {
    let meta = app.service.head(&path).await?;
    let mut resp = StatusCode::OK.into_response();
    let headers = resp.headers_mut();
    stream_headers(headers, &meta);
    if let Some(ttl) = meta.ttl_secs {
        set(headers, h::STREAM_TTL, ttl);
    }
    if let Some(at) = meta.expires_at_ms {
        set(headers, h::STREAM_EXPIRES_AT, format_rfc3339_ms(at));
    }
    const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    Ok(resp)
}

async fn get_stream(app: AppState, path: String, q: ReadQuery, inm: Option<String>) -> ApiResult {
    let live = q.live;
    let read = ReadRequest { path, offset: q.offset, live };
    // A live reader holds a slot until its response ends (refused with 503).
    let slot = if live == LiveMode::None { None } else { Some(app.live.admit()?) };
    if live == LiveMode::Sse {
        return Box::pin(sse(app, read, q.cursor, slot)).await;
    }
    let out = app.service.read(read).await?;
    drop(slot);
    let cursor = (live == LiveMode::LongPoll && !out.closed).then(|| app.service.live_cursor(q.cursor.as_deref()));
    Ok(render_read(&out, cursor, inm.as_deref()))
}

/// `cursor`: the `Stream-Cursor` of a live (long-poll) response.
fn render_read(out: &ReadOutcome, cursor: Option<String>, inm: Option<&str>) -> Response {
    let etag =
        (!out.at_now && !out.no_content).then(|| read_etag(&out.meta.incarnation, out.start, out.next, out.closed));
    if let (Some(etag), Some(inm)) = (&etag, inm) {
        if if_none_match(inm, etag) {
            let mut resp = StatusCode::NOT_MODIFIED.into_response();
            set_text(resp.headers_mut(), header::ETAG, etag);
            set_offset(resp.headers_mut(), out.next);
            return resp;
        }
    }
    let mut resp = if out.no_content {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (StatusCode::OK, Body::from(out.body.clone())).into_response()
    };
    let headers = resp.headers_mut();
    if !out.no_content {
        set_text(headers, header::CONTENT_TYPE, &out.meta.content_type);
    }
    set_offset(headers, out.next);
    if out.up_to_date {
        headers.insert(name::STREAM_UP_TO_DATE, TRUE);
    }
    if out.closed {
        headers.insert(name::STREAM_CLOSED, TRUE);
    }
    if let Some(cursor) = cursor {
        set_text(headers, name::STREAM_CURSOR, &cursor);
    }
    if let Some(etag) = etag {
        set_text(headers, header::ETAG, &etag);
    }
    let cacheable = !out.at_now && !out.no_content && !out.body.is_empty() && out.next > out.start;
    let cache = if cacheable { "public, max-age=60, stale-while-revalidate=300" } else { "no-store" };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    resp
}

async fn sse(app: AppState, read: ReadRequest, client_cursor: Option<String>, slot: Option<LiveSlot>) -> ApiResult {
    let (meta, events) = app.service.sse(read, client_cursor).await?;
    // The body owns the live-reader slot: it is released when the stream ends
    // or the client goes away.
    let events = futures::StreamExt::map(events, move |event| {
        let _held = &slot;
        Ok::<_, std::convert::Infallible>(event)
    });
    let mut resp = Body::from_stream(events).into_response();
    let headers = resp.headers_mut();
    set(headers, "content-type", "text/event-stream");
    set(headers, "cache-control", "no-cache");
    set(headers, "x-accel-buffering", "no");
    if DataEncoding::for_content_type(&meta.content_type) == DataEncoding::Base64 {
        set(headers, h::STREAM_SSE_DATA_ENCODING, "base64");
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
    fn an_append_header_that_is_not_text_is_a_400() {
        let mut hd = HeaderMap::new();
        hd.insert(name::PRODUCER_ID, HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        let err = AppendHeaders::read(&hd).err().unwrap();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        // Only the first value counts, as with a lookup.
        let mut hd = HeaderMap::new();
        hd.append(name::STREAM_SEQ, HeaderValue::from_static("a"));
        hd.append(name::STREAM_SEQ, HeaderValue::from_bytes(b"\xff").unwrap());
        assert_eq!(AppendHeaders::read(&hd).unwrap().stream_seq, Some("a"));
    }
}
