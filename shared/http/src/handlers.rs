//! One handler per method on `/v1/stream/{path}`; each parses headers into a
//! service request and renders the outcome. Errors go through [`ApiError`].

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ds_core::{CreateRequest, ForkRequest, LiveMode, ReadOutcome, ReadRequest, StreamMeta};
use ds_protocol::etag::{if_none_match, read_etag};
use ds_protocol::headers::{
    format_rfc3339_ms, is_stream_closed, parse_lifetime, parse_sub_offset, validate_content_type,
};
use ds_protocol::sse::DataEncoding;
use ds_protocol::Offset;
use futures::future::BoxFuture;

use crate::append::{append, AppendHeaders};
use crate::error::ApiError;
use crate::headers::{self as h, get, name, offset_value};
use crate::request::{body, read_query, request_host, stream_path, ReadQuery};
use crate::routes::RouteId;
use crate::AppState;

type ApiResult = Result<Response, ApiError>;
type LiveSlot = tokio::sync::OwnedSemaphorePermit;

/// The stream routes (`/v1/stream/{path}`, the reserved `__ds` ones
/// included), by their row of the route table. Routing is synchronous and
/// each route's future is boxed on its own: a future holds its arguments for
/// as long as it runs, so a chain of `async fn`s taking the `Request` would
/// keep a copy of its head per level through a long-poll's whole wait; and
/// inline, every request would carry the size of the largest route's future.
pub(crate) fn stream(app: AppState, route: RouteId, req: Request) -> BoxFuture<'static, Response> {
    let routed = route_stream(app, route, req);
    Box::pin(async move {
        match routed {
            Ok(run) => run.await.unwrap_or_else(IntoResponse::into_response),
            Err(e) => e.into_response(),
        }
    })
}

fn route_stream(app: AppState, route: RouteId, req: Request) -> Result<BoxFuture<'static, ApiResult>, ApiError> {
    let path = stream_path(req.uri())?;
    if ds_protocol::path::is_reserved(&path) {
        return Ok(Box::pin(crate::reserved::dispatch(app, route, path, req)));
    }
    Ok(match route {
        RouteId::StreamCreate | RouteId::StreamFork => Box::pin(put(app, path, req)),
        RouteId::StreamAppend => Box::pin(post(app, path, req)),
        RouteId::StreamRead | RouteId::StreamLongPoll | RouteId::StreamSse => {
            let q = read_query(req.uri())?;
            let inm = get(req.headers(), "if-none-match")?.map(str::to_owned);
            Box::pin(get_stream(app, path, q, inm))
        }
        RouteId::StreamHead => Box::pin(head(app, path)),
        RouteId::StreamDelete => Box::pin(async move {
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
                let source = crate::routes::fork_source(source);
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
    let body = body(raw, app.cfg.max_body_bytes, app.cfg.body_read_timeout);
    Ok(append(&app, path.into(), hd, body).await?.into_response())
}

/// `Stream-Earliest-Offset`, once retention dropped some of the stream's
/// history (absent before: an untrimmed stream's answers are unchanged).
fn set_earliest(headers: &mut HeaderMap, earliest: u64) {
    if earliest > 0 {
        headers.insert(name::STREAM_EARLIEST_OFFSET, offset_value(earliest));
    }
}

async fn head(app: AppState, path: String) -> ApiResult {
    let meta = app.service.head(&path).await?;
    let earliest = app.service.earliest(&meta).await?;
    let mut resp = StatusCode::OK.into_response();
    let headers = resp.headers_mut();
    stream_headers(headers, &meta);
    set_earliest(headers, earliest);
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
    set_earliest(headers, out.earliest);
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
    set_earliest(headers, meta.retained_from);
    if DataEncoding::for_content_type(&meta.content_type) == DataEncoding::Base64 {
        set(headers, h::STREAM_SSE_DATA_ENCODING, "base64");
    }
    Ok(resp)
}
