//! Headers every response carries (security, §12.7; CORS) and CORS preflight.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::cors::Cors;
use crate::headers::EXPOSED;

pub(crate) async fn protocol_headers(State(cors): State<Arc<Cors>>, req: Request, next: Next) -> Response {
    let allow_origin = cors.allow_origin(req.headers().get(http::header::ORIGIN));
    let mut resp = if req.method() == Method::OPTIONS { preflight(&req) } else { next.run(req).await };
    let h = resp.headers_mut();
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("cross-origin"));
    if cors.varies() {
        h.append(http::header::VARY, HeaderValue::from_static("origin"));
    }
    if let Some(origin) = allow_origin {
        h.insert("access-control-allow-origin", origin);
        h.insert("access-control-expose-headers", HeaderValue::from_static(EXPOSED));
    }
    resp
}

/// Answer a CORS preflight: the protocol's methods, and the requested
/// headers (including `Authorization` and `If-None-Match`). Whether the
/// origin may use them is the `Access-Control-Allow-Origin` added above.
fn preflight(req: &Request) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    h.insert("access-control-allow-methods", HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS"));
    let requested = req.headers().get("access-control-request-headers").cloned();
    h.insert("access-control-allow-headers", requested.unwrap_or_else(|| HeaderValue::from_static("*")));
    h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    resp
}
