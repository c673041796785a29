//! The operator API of hosted processors, beside (never under) the stream
//! paths:
//!
//! | request | what | access |
//! | --- | --- | --- |
//! | `GET /v1/processors[?after=STREAM&limit=N]` | every processor on every stream, with its lag | `read` on `__ds/processors` |
//! | `GET /v1/processors/{slug}/streams/{stream}` | one processor on one stream, with its state | `read` on the stream |
//! | `GET /v1/processors/{slug}/state/{stream}[?…]` | a `state` processor's live state (below) | `read` on the stream |
//! | `POST /v1/processors/{slug}/re-reduce/{stream}` | rebuild the state through the ack | `admin` on the stream |
//! | `POST /v1/processors/{slug}/reprocess-from/{stream}` | rewind to a position (CAS on the cursor revision) | `admin` on the stream |
//! | `POST /v1/processors/{slug}/skip-through/{stream}` | move past a poison event (CAS) | `admin` on the stream |
//! | `POST /v1/processors/{slug}/reset/{stream}` | inline: start over from the initial state at the tail | `admin` on the stream |
//! | `POST /v1/processors/{slug}/skip/{stream}` | inline: let appends pass unchecked until a reset | `admin` on the stream |
//! | `POST /v1/processors/{slug}/compact/{stream}` | `state`: snapshot the live state, trim the history before it | `admin` on the stream |
//!
//! The state of a `state` processor is read with query parameters, because
//! the stream path is the route's tail (it may hold `/`, so a `/{type}/{key}`
//! after it would be ambiguous): no parameter, the whole state in (type,
//! key) order (`?afterType=T&after=K` continues it); `?type=T`, one type in
//! key order (`&after=K`); `?type=T&key=K`, one row (`404` when absent).
//! Pages hold at most `limit` rows (default 100, at most 1000) and name the
//! `next` cursor when more follow.
//!
//! For an inline processor `re-reduce` refolds its reduction from the whole
//! stream now.
//!
//! Control bodies are JSON: `{"reason": "…", "position": N,
//! "expectedRevision": R}` (`position` and `expectedRevision` for the two
//! compare-and-swap controls only). A stale `expectedRevision` is `409`
//! and changes nothing. Answers are JSON (`ProcessorPage`,
//! `ProcessorDetail`); errors come from `error.rs`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use ds_processor_host::{Control, ProcessorOperator, StateCursor, StateQuery, DEFAULT_STATE_LIMIT, MAX_STATE_LIMIT};
use serde::Deserialize;

use crate::error::ApiError;
use crate::request::{body, percent_decode};

/// The path a processor listing is checked against (`read` on it).
pub const PROCESSORS_PATH: &str = "__ds/processors";

/// Largest control body.
const MAX_CONTROL_BODY: usize = 64 * 1024;
/// Longest silence while a control body arrives. The operator routes keep
/// no `HttpConfig` (their state is the operator alone); a control body is a
/// few hundred bytes, so the server default (`--body-read-timeout`) is used.
const CONTROL_BODY_IDLE: std::time::Duration = std::time::Duration::from_secs(30);
/// Default and largest page of a listing, in streams.
const DEFAULT_LIMIT: usize = 1000;
const MAX_LIMIT: usize = 10_000;
const DEFAULT_REASON: &str = "operator request";

/// The operator behind the API, if the server hosts processors.
pub(crate) type Operator = Option<Arc<dyn ProcessorOperator>>;

/// A control's name in its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    ReReduce,
    ReprocessFrom,
    SkipThrough,
    Reset,
    Skip,
    Compact,
}

/// A parsed operator API request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    List,
    Show { slug: String, stream: String },
    State { slug: String, stream: String },
    Control { slug: String, action: Action, stream: String },
}

/// Parses `/v1/processors[/{slug}/{action}/{stream}]`; `None`: not an
/// operator API path.
pub(crate) fn route(uri: &Uri) -> Option<Result<Route, ApiError>> {
    let path = uri.path();
    if path == "/v1/processors" || path == "/v1/processors/" {
        return Some(Ok(Route::List));
    }
    let rest = path.strip_prefix("/v1/processors/")?;
    Some(parse_rest(rest))
}

fn parse_rest(rest: &str) -> Result<Route, ApiError> {
    let usage = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "no such operator route: use /v1/processors/{slug}/streams|state|re-reduce|reprocess-from|skip-through|reset|skip|compact/{stream}",
        )
    };
    let mut parts = rest.splitn(3, '/');
    let (Some(slug), Some(action), Some(stream)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(usage());
    };
    let slug =
        percent_decode(slug).filter(|s| !s.is_empty()).ok_or_else(|| ApiError::bad_request("bad processor slug"))?;
    let stream = percent_decode(stream)
        .ok_or_else(|| ApiError::bad_request("stream path is not valid percent-encoded UTF-8"))?;
    ds_protocol::path::validate(&stream)?;
    let action = match action {
        "streams" => return Ok(Route::Show { slug, stream }),
        "state" => return Ok(Route::State { slug, stream }),
        "re-reduce" => Action::ReReduce,
        "reprocess-from" => Action::ReprocessFrom,
        "skip-through" => Action::SkipThrough,
        "reset" => Action::Reset,
        "skip" => Action::Skip,
        "compact" => Action::Compact,
        _ => return Err(usage()),
    };
    Ok(Route::Control { slug, action, stream })
}

/// The one handler of the operator API.
pub(crate) async fn handle(State(operator): State<Operator>, req: Request) -> Response {
    dispatch(operator, req).await.unwrap_or_else(IntoResponse::into_response)
}

async fn dispatch(operator: Operator, req: Request) -> Result<Response, ApiError> {
    let Some(route) = route(req.uri()) else { return Err(ApiError::bad_request("not an operator API path")) };
    let route = route?;
    let Some(operator) = operator else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NO_PROCESSORS",
            "this server hosts no processors (start it with --processors FILE)",
        ));
    };
    let method = req.method().clone();
    match (route, method) {
        (Route::List, Method::GET) => {
            let (after, limit) = list_query(req.uri())?;
            json(&operator.list(after.as_deref(), limit).await?)
        }
        (Route::Show { slug, stream }, Method::GET) => json(&operator.show(&slug, &stream).await?),
        (Route::State { slug, stream }, Method::GET) => {
            json(&operator.state(&slug, &stream, state_query(req.uri())?).await?)
        }
        (Route::Control { slug, action, stream }, Method::POST) => {
            match control(action, &body(req.into_body(), MAX_CONTROL_BODY, CONTROL_BODY_IDLE).await?)? {
                Either::Hosted(control) => json(&operator.control(&slug, &stream, control).await?),
                Either::Inline(control) => json(&operator.inline_control(&slug, &stream, control).await?),
                Either::Compact => json(&operator.compact(&slug, &stream).await?),
            }
        }
        (Route::Control { .. }, _) => Err(method_not_allowed("POST")),
        (_, _) => Err(method_not_allowed("GET")),
    }
}

pub(crate) fn method_not_allowed(allow: &'static str) -> ApiError {
    let mut e = ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", format!("use {allow}"));
    e.headers.push(("allow", HeaderValue::from_static(allow)));
    e
}

fn list_query(uri: &Uri) -> Result<(Option<String>, usize), ApiError> {
    let (mut after, mut limit) = (None, DEFAULT_LIMIT);
    for pair in uri.query().unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v).ok_or_else(|| ApiError::bad_request("query is not valid UTF-8"))?;
        match k {
            "after" => after = Some(v),
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| ApiError::bad_request(format!("limit must be 1..={MAX_LIMIT}, not {v:?}")))?;
            }
            _ => {}
        }
    }
    Ok((after, limit))
}

/// The [`StateQuery`] of a state read's query string (see module docs).
fn state_query(uri: &Uri) -> Result<StateQuery, ApiError> {
    let (mut entity_type, mut key, mut after, mut after_type, mut limit) = (None, None, None, None, None);
    for pair in uri.query().unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v).ok_or_else(|| ApiError::bad_request("query is not valid UTF-8"))?;
        let slot = match k {
            "type" => &mut entity_type,
            "key" => &mut key,
            "after" => &mut after,
            "afterType" => &mut after_type,
            "limit" => &mut limit,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown state query parameter {other:?} (type, key, after, afterType, limit)"
                )))
            }
        };
        if slot.replace(v).is_some() {
            return Err(ApiError::bad_request(format!("query parameter {k:?} is given twice")));
        }
    }
    let limit = match limit {
        None => DEFAULT_STATE_LIMIT,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_STATE_LIMIT).contains(n))
            .ok_or_else(|| ApiError::bad_request(format!("limit must be 1..={MAX_STATE_LIMIT}, not {v:?}")))?,
    };
    if entity_type.as_deref() == Some("") || key.as_deref() == Some("") {
        return Err(ApiError::bad_request("type and key must not be empty"));
    }
    Ok(match (entity_type, key) {
        (None, Some(_)) => return Err(ApiError::bad_request("key needs a type: ?type=T&key=K")),
        (Some(entity_type), Some(key)) => {
            if after.is_some() || after_type.is_some() {
                return Err(ApiError::bad_request("a row read (type and key) takes no after or afterType"));
            }
            StateQuery::Row { entity_type, key }
        }
        (Some(entity_type), None) => {
            if after_type.is_some() {
                return Err(ApiError::bad_request("afterType is for the whole state; with type use after"));
            }
            StateQuery::Type { entity_type, after, limit }
        }
        (None, None) => {
            let after = match (after_type, after) {
                (Some(entity_type), Some(key)) => Some(StateCursor { entity_type, key }),
                (None, None) => None,
                _ => return Err(ApiError::bad_request("the whole state continues from afterType and after together")),
            };
            StateQuery::Whole { after, limit }
        }
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ControlBody {
    reason: Option<String>,
    position: Option<u64>,
    expected_revision: Option<u64>,
}

/// A control of either family: the runner's, or an inline processor's own.
#[derive(Debug, PartialEq)]
enum Either {
    Hosted(Control),
    Inline(ds_core::InlineControl),
    /// A `state` processor's compaction.
    Compact,
}

fn control(action: Action, bytes: &[u8]) -> Result<Either, ApiError> {
    let body: ControlBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        ControlBody::default()
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("control body: {e}")))?
    };
    let reason = body.reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| DEFAULT_REASON.to_owned());
    if reason.len() > 1024 {
        return Err(ApiError::bad_request("reason: at most 1024 bytes"));
    }
    let required = |v: Option<u64>, field: &str| {
        v.ok_or_else(|| ApiError::bad_request(format!("control body: `{field}` is required for this control")))
    };
    let no_cas = |name: &str| {
        if body.position.is_some() || body.expected_revision.is_some() {
            return Err(ApiError::bad_request(format!("{name} takes no `position` or `expectedRevision`")));
        }
        Ok(())
    };
    Ok(Either::Hosted(match action {
        Action::Reset => {
            no_cas("reset")?;
            return Ok(Either::Inline(ds_core::InlineControl::Reset));
        }
        Action::Skip => {
            no_cas("skip")?;
            return Ok(Either::Inline(ds_core::InlineControl::Skip { reason }));
        }
        Action::Compact => {
            no_cas("compact")?;
            return Ok(Either::Compact);
        }
        Action::ReReduce => {
            no_cas("re-reduce")?;
            Control::ReReduce { reason }
        }
        Action::ReprocessFrom => Control::ReprocessFrom {
            position: required(body.position, "position")?,
            expected_revision: required(body.expected_revision, "expectedRevision")?,
            reason,
        },
        Action::SkipThrough => Control::SkipThrough {
            position: required(body.position, "position")?,
            expected_revision: required(body.expected_revision, "expectedRevision")?,
            reason,
        },
    }))
}

fn json(value: &impl serde::Serialize) -> Result<Response, ApiError> {
    let body = serde_json::to_vec(value)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", e.to_string()))?;
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(uri: &str) -> Result<Route, ApiError> {
        route(&uri.parse().unwrap()).expect("an operator path")
    }

    #[test]
    fn routes_take_the_slug_the_action_and_a_decoded_stream_path() {
        assert_eq!(parse("/v1/processors").unwrap(), Route::List);
        assert_eq!(
            parse("/v1/processors/outbox/streams/orders%2F1/x").unwrap(),
            Route::Show { slug: "outbox".into(), stream: "orders/1/x".into() }
        );
        assert_eq!(
            parse("/v1/processors/c/skip-through/a/b").unwrap(),
            Route::Control { slug: "c".into(), action: Action::SkipThrough, stream: "a/b".into() }
        );
        assert_eq!(
            parse("/v1/processors/c/reset/a/b").unwrap(),
            Route::Control { slug: "c".into(), action: Action::Reset, stream: "a/b".into() }
        );
        assert_eq!(
            parse("/v1/processors/users/state/state/a").unwrap(),
            Route::State { slug: "users".into(), stream: "state/a".into() }
        );
        assert_eq!(parse("/v1/processors/c/rewind/a").unwrap_err().status, StatusCode::NOT_FOUND);
        assert_eq!(parse("/v1/processors/c/streams/a/%2E%2E/b").unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(parse("/v1/processors/c").unwrap_err().status, StatusCode::NOT_FOUND);
        assert!(route(&"/v1/stream/x".parse().unwrap()).is_none());
    }

    #[test]
    fn state_queries_name_a_part_of_the_state() {
        let q = |s: &str| state_query(&format!("/x?{s}").parse().unwrap());
        assert_eq!(q("").unwrap(), StateQuery::Whole { after: None, limit: DEFAULT_STATE_LIMIT });
        assert_eq!(
            q("afterType=user&after=u%2F1&limit=5").unwrap(),
            StateQuery::Whole { after: Some(StateCursor { entity_type: "user".into(), key: "u/1".into() }), limit: 5 }
        );
        assert_eq!(
            q("type=user&after=b").unwrap(),
            StateQuery::Type { entity_type: "user".into(), after: Some("b".into()), limit: DEFAULT_STATE_LIMIT }
        );
        assert_eq!(q("type=user&key=1").unwrap(), StateQuery::Row { entity_type: "user".into(), key: "1".into() });
        for bad in
            ["key=1", "limit=0", "limit=1001", "type=", "after=x", "type=a&key=1&after=b", "typo=1", "type=a&type=b"]
        {
            assert_eq!(q(bad).unwrap_err().status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn control_bodies_need_their_fields() {
        assert_eq!(
            control(Action::ReReduce, b"").unwrap(),
            Either::Hosted(Control::ReReduce { reason: DEFAULT_REASON.into() })
        );
        assert_eq!(
            control(Action::ReprocessFrom, br#"{"position":5,"expectedRevision":2,"reason":"fix"}"#).unwrap(),
            Either::Hosted(Control::ReprocessFrom { position: 5, expected_revision: 2, reason: "fix".into() })
        );
        assert_eq!(
            control(Action::Skip, br#"{"reason":"bad schema"}"#).unwrap(),
            Either::Inline(ds_core::InlineControl::Skip { reason: "bad schema".into() })
        );
        assert_eq!(control(Action::Reset, b"").unwrap(), Either::Inline(ds_core::InlineControl::Reset));
        assert!(control(Action::Reset, br#"{"position":5}"#).is_err());
        let missing = control(Action::SkipThrough, br#"{"position":5}"#).unwrap_err();
        assert!(missing.message.contains("`expectedRevision` is required"), "{}", missing.message);
        assert!(control(Action::ReReduce, br#"{"position":5}"#).is_err());
        assert!(control(Action::ReReduce, br#"{"reasn":"x"}"#).unwrap_err().message.contains("unknown field"));
    }
}
