//! The innermost service under the [`crate::edge`]: requests for a stream
//! (`/v1/stream/{path}`) go straight to [`handlers::stream`]; everything
//! else (health, metrics, the processors' API, the bare `/v1/stream`, the
//! 404 fallback) goes through an axum [`Router`].
//!
//! Why not one `Router` for all: axum boxes each route as a clonable
//! service and each layer applied to a router is applied per route, so an
//! append used to pay a boxed clone and a boxed future per layer per level,
//! plus the matched-path and URL-parameter extensions it never reads —
//! about a fifth of the allocations of a 100 B append (profiled with
//! callgrind, memory store). The stream route needs none of that: it parses
//! its own path ([`crate::request::stream_path`]).

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::response::Response;
use axum::Router;
use futures::future::{BoxFuture, Either, FutureExt, Map};
use tower::Service;

use crate::{handlers, AppState};

/// Stream paths start with this and go on (`/v1/stream/` alone is not one).
pub(crate) const STREAM_PREFIX: &str = "/v1/stream/";

#[derive(Clone)]
// `pub` (in a private module) only because [`crate::App`]'s future type names it.
pub struct Dispatch {
    pub(crate) streams: AppState,
    /// Every other route, with its own state.
    pub(crate) others: Router,
}

type Answered = fn(Response) -> Result<Response, Infallible>;

impl Service<Request> for Dispatch {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Map<BoxFuture<'static, Response>, Answered>, <Router as Service<Request>>::Future>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Neither side has back-pressure (the router is always ready).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if is_stream_path(req.uri().path()) {
            let finish = if req.method() == Method::HEAD { answered_head as Answered } else { answered as Answered };
            Either::Left(handlers::stream(State(self.streams.clone()), req).map(finish))
        } else {
            Either::Right(self.others.call(req))
        }
    }
}

/// What axum's router did to every response it served (so hosts that do
/// not frame bodies themselves, the Lambda function, see the same): a
/// `Content-Length` from the body's exact size unless one is set.
pub(crate) fn answered(mut resp: Response) -> Result<Response, Infallible> {
    if !resp.headers().contains_key(header::CONTENT_LENGTH) {
        if let Some(n) = http_body::Body::size_hint(resp.body()).exact() {
            // Most answers (every append's 204) have no body: a static value
            // spares the two allocations of formatting one.
            const ZERO: HeaderValue = HeaderValue::from_static("0");
            let value = if n == 0 { ZERO } else { HeaderValue::from(n) };
            resp.headers_mut().insert(header::CONTENT_LENGTH, value);
        }
    }
    Ok(resp)
}

/// [`answered`], then no body: a response to `HEAD` has none (an error's
/// JSON included).
fn answered_head(resp: Response) -> Result<Response, Infallible> {
    let mut resp = answered(resp)?;
    *resp.body_mut() = Body::empty();
    Ok(resp)
}

/// The paths the router's `/v1/stream/{*path}` would match: the prefix and
/// at least one more byte.
fn is_stream_path(path: &str) -> bool {
    path.strip_prefix(STREAM_PREFIX).is_some_and(|rest| !rest.is_empty())
}

#[cfg(test)]
mod tests {
    use super::is_stream_path;

    #[test]
    fn stream_paths_are_the_prefix_and_more() {
        for yes in ["/v1/stream/a", "/v1/stream/a/b", "/v1/stream/__ds/x", "/v1/stream/%2F", "/v1/stream//"] {
            assert!(is_stream_path(yes), "{yes}");
        }
        for no in ["/v1/stream/", "/v1/stream", "/v1/streams/a", "/health", "/", "/v1/processors/x", "v1/stream/a"] {
            assert!(!is_stream_path(no), "{no}");
        }
    }
}
