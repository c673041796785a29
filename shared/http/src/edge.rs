//! The edge of the router: one service around every route that opens the
//! request's tracing span, finds the request's row of the route table once
//! ([`crate::routes`]) and then, in order, counts it for metrics, answers
//! CORS preflight, checks access, runs the row's route, adds the headers
//! every response carries, and logs a server error.
//!
//! One layer rather than three `axum::middleware::from_fn` layers: each of
//! those cloned the router and boxed its own future per request, and two of
//! them classified the request again — a cost every append paid, and memory
//! every held long-poll and SSE connection kept for its whole wait. The span
//! is opened here too, not by `tower_http`'s trace layer: that layer wrapped
//! the future and the response body once more, and the body in another box
//! (callgrind, memory store: 34,522 → 33,437 instructions per 100 B append).

use std::convert::Infallible;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::Request;
use axum::http::{Method, Version};
use axum::response::Response;
use futures::future::BoxFuture;
use tower::Service;
use tracing::Instrument;

use crate::access::{self, Caller, Gate};
use crate::cors::{Cors, CorsAnswer};
use crate::dispatch::{Dispatch, RouteFuture};
use crate::metrics::Metrics;
use crate::routes::{classify, Class, PathKind};
use crate::{layers, metrics};

/// What the edge does around each request; `None` parts are skipped.
#[derive(Clone)]
pub(crate) struct Edge {
    pub cors: Arc<Cors>,
    pub access: Option<Arc<Gate>>,
    pub metrics: Option<Arc<dyn Metrics>>,
}

#[derive(Clone)]
// `pub` (in a private module) only because [`crate::App`]'s future type names it.
pub struct EdgeService {
    edge: Edge,
    inner: Dispatch,
}

impl EdgeService {
    pub(crate) fn new(edge: Edge, inner: Dispatch) -> Self {
        Self { edge, inner }
    }
}

impl Service<Request> for EdgeService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The dispatch has no back-pressure.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let start = Instant::now();
        // The row decides the route, so every request is classified; its
        // grants are resolved only when access control will check them.
        let class = classify(req.method(), req.uri(), req.headers(), self.edge.access.is_some());
        let (uri, route) = (req.uri(), http_route(class.row.path));
        let span = request_span(req.method(), uri.path(), uri.query(), req.version(), route);
        if ds_telemetry::enabled() {
            if let Some(parent) = req.headers().get(ds_telemetry::TRACEPARENT).and_then(|v| v.to_str().ok()) {
                ds_telemetry::adopt_remote_parent(&span, parent);
            }
        }
        let cors = self.edge.cors.answer(req.method(), req.headers().get(http::header::ORIGIN).map(|o| o.as_bytes()));
        let observed =
            self.edge.metrics.as_ref().map(|m| metrics::Observation::begin(m.clone(), &class, req.method(), start));
        let (mut req, bytes_in) = match &observed {
            Some(_) => {
                let (req, n) = metrics::count_in(req);
                (req, Some(n))
            }
            None => (req, None),
        };
        // Everything that needs no waiting happens here, so the future below
        // holds no `Request` (a long-poll keeps it for its whole wait).
        let answer = if req.method() == Method::OPTIONS {
            Answer::Now(layers::preflight(&req))
        } else {
            match &self.edge.access {
                // Most requests carry a token the check can settle at once:
                // they run the route as if access control were off.
                Some(gate) => match access::check_now(gate, &class, req.headers()) {
                    access::Verdict::Allow(caller) => {
                        Answer::Route(self.inner.route(class.row.id, with_caller(&class, caller, req)))
                    }
                    access::Verdict::Deny(denied) => Answer::Now(denied),
                    access::Verdict::Pending => {
                        Answer::AfterAccess(Box::pin(guarded(gate.clone(), class, req, self.inner.clone())))
                    }
                },
                None => {
                    if class.defers() {
                        req.extensions_mut().insert(Caller::Unchecked);
                    }
                    Answer::Route(self.inner.route(class.row.id, req))
                }
            }
        };
        Box::pin(
            async move {
                let resp = match answer {
                    Answer::Now(resp) => resp,
                    Answer::Route(run) => run.await.unwrap_or_else(|e| match e {}),
                    Answer::AfterAccess(run) => run.await,
                };
                Ok(leave(resp, cors, start, observed.zip(bytes_in)))
            }
            .instrument(span),
        )
    }
}

/// The span of a request, with the same fields whichever way it came in
/// (here, or as bytes to [`crate::direct`]). Its fields are the
/// OpenTelemetry HTTP server span's (semantic conventions): the name is
/// `{method} {http.route}`, or the method alone for a path no route
/// template names. The target goes in `url.path` and `url.query` (offsets,
/// cursors, live modes: never a credential, which only a header carries);
/// headers and content go nowhere.
pub(crate) fn request_span(
    method: &Method,
    path: &str,
    query: Option<&str>,
    version: Version,
    route: Option<&'static str>,
) -> tracing::Span {
    // Debug level, as `tower_http`'s trace layer had it: off by default,
    // and then one check of a cached interest per request.
    tracing::debug_span!(
        "request",
        otel.name = %SpanName(method, route),
        otel.kind = "server",
        http.request.method = %method,
        http.route = route,
        url.path = path,
        url.query = query,
        network.protocol.version = protocol_version(version),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// `{method} {route}`, or `{method}`: the server span's name.
struct SpanName<'a>(&'a Method, Option<&'static str>);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(route) => write!(f, "{} {route}", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

fn protocol_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// The route template of a row's paths (`http.route`), where there is one.
pub(crate) fn http_route(kind: PathKind) -> Option<&'static str> {
    Some(match kind {
        PathKind::Stream => "/v1/stream/{path}",
        PathKind::Health => "/health",
        PathKind::Metrics => "/metrics",
        PathKind::ProcessorsList => "/v1/processors",
        PathKind::ProcessorShow => "/v1/processors/{slug}/streams/{stream}",
        PathKind::ProcessorState => "/v1/processors/{slug}/state/{stream}",
        PathKind::ProcessorControl => "/v1/processors/{slug}/{control}/{stream}",
        PathKind::Jwks => "/v1/stream/__ds/jwks.json",
        PathKind::Subscription(_) => "/v1/stream/__ds/subscriptions/{id}",
        _ => return None,
    })
}

/// The status on the request span, when spans are exported (an error status
/// for a 5xx, as the conventions ask of a server span).
pub(crate) fn record_status(status: http::StatusCode) {
    if ds_telemetry::enabled() {
        let span = tracing::Span::current();
        span.record("http.response.status_code", status.as_u16());
        if status.is_server_error() {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// A response leaving the edge, whichever way its request came in: the
/// headers every response carries and the CORS answer, a server error
/// logged, and the exchange observed (when metrics are on) until its body
/// ends, with the request body's bytes counted in `bytes_in`.
pub(crate) fn leave(
    mut resp: Response,
    cors: CorsAnswer,
    start: Instant,
    observed: Option<(metrics::Observation, Arc<AtomicU64>)>,
) -> Response {
    layers::decorate(&mut resp, cors);
    record_status(resp.status());
    if resp.status().is_server_error() {
        tracing::error!(status = resp.status().as_u16(), latency = ?start.elapsed(), "response failed");
    }
    match observed {
        Some((o, bytes_in)) => o.finish(resp, bytes_in),
        None => resp,
    }
}

/// How the edge answers a request.
enum Answer {
    /// Without running a route (CORS preflight, access denied).
    Now(Response),
    /// The route's own future.
    Route(RouteFuture),
    /// The access check that must wait (a JWT to verify), then the route
    /// (boxed: it holds the request).
    AfterAccess(BoxFuture<'static, Response>),
}

/// The request, carrying its caller when the route checks grants of its own
/// (see [`Caller`]).
fn with_caller(class: &Class, caller: Option<Arc<ds_auth::Principal>>, mut req: Request) -> Request {
    if let (true, Some(principal)) = (class.defers(), caller) {
        req.extensions_mut().insert(Caller::Principal(principal));
    }
    req
}

async fn guarded(gate: Arc<Gate>, class: Class, req: Request, inner: Dispatch) -> Response {
    match access::check(&gate, &class, req.headers()).await {
        Err(denied) => denied,
        Ok(caller) => inner.route(class.row.id, with_caller(&class, caller, req)).await.unwrap_or_else(|e| match e {}),
    }
}
