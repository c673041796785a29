//! Headers every response carries (security, §12.7; CORS) and CORS
//! preflight; run by [`crate::edge`].

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::cors::CorsAnswer;
use crate::headers::{name, EXPOSED};

/// Add the headers every response carries, and the CORS headers
/// [`crate::cors::Cors::answer`] chose for the request.
pub(crate) fn decorate(resp: &mut Response, cors: CorsAnswer) {
    let h = resp.headers_mut();
    decorations(&cors, |name, value| {
        // `Vary` may already name what the route varies on.
        if name == header::VARY {
            h.append(name, value);
        } else {
            h.insert(name, value);
        }
    });
}

/// The headers [`decorate`] adds, in order, each passed to `put`.
pub(crate) fn decorations(cors: &CorsAnswer, mut put: impl FnMut(HeaderName, HeaderValue)) {
    // Names and values are constants: every response pays for these, and a
    // `&str` name or `from_static` value outside a const is parsed each time
    // (the exposed-headers list is ~400 bytes).
    const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");
    const CROSS_ORIGIN: HeaderValue = HeaderValue::from_static("cross-origin");
    const ORIGIN: HeaderValue = HeaderValue::from_static("origin");
    const EXPOSED_VALUE: HeaderValue = HeaderValue::from_static(EXPOSED);
    put(name::X_CONTENT_TYPE_OPTIONS, NOSNIFF);
    put(name::CROSS_ORIGIN_RESOURCE_POLICY, CROSS_ORIGIN);
    if cors.vary {
        put(header::VARY, ORIGIN);
    }
    if let Some(origin) = &cors.allow_origin {
        put(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    }
    if cors.expose {
        put(header::ACCESS_CONTROL_EXPOSE_HEADERS, EXPOSED_VALUE);
    }
}

/// Answer a CORS preflight: the protocol's methods, and the requested
/// headers (including `Authorization` and `If-None-Match`). Whether the
/// origin may use them is the `Access-Control-Allow-Origin` added above.
pub(crate) fn preflight(req: &Request) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    h.insert("access-control-allow-methods", HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS"));
    let requested = req.headers().get("access-control-request-headers").cloned();
    h.insert("access-control-allow-headers", requested.unwrap_or_else(|| HeaderValue::from_static("*")));
    h.insert("access-control-max-age", HeaderValue::from_static("86400"));
    resp
}
