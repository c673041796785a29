//! The innermost service under the [`crate::edge`]: each request goes to
//! the handler of the row of the route table ([`crate::routes`]) the edge
//! found for it.
//!
//! Why no axum `Router`: axum boxes each route as a clonable service and
//! each layer applied to a router is applied per route, so an append used
//! to pay a boxed clone and a boxed future per layer per level, plus the
//! matched-path and URL-parameter extensions it never reads — about a fifth
//! of the allocations of a 100 B append (profiled with callgrind, memory
//! store). And the route table already says which route a request takes.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use futures::future::{BoxFuture, FutureExt, Map};

use crate::health::Health;
use crate::metrics::Metrics;
use crate::processors::{self, Operator};
use crate::routes::RouteId as R;
use crate::{handlers, AppState};

/// Stream paths start with this and go on (`/v1/stream/` alone is not one).
pub(crate) const STREAM_PREFIX: &str = "/v1/stream/";

#[derive(Clone)]
pub(crate) struct Dispatch {
    pub(crate) streams: AppState,
    /// What the routes outside `/v1/stream/` serve from.
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: Option<Arc<dyn Metrics>>,
    pub(crate) processors: Operator,
}

type Answered = fn(Response) -> Result<Response, Infallible>;

/// The future of one routed request.
pub(crate) type RouteFuture = Map<BoxFuture<'static, Response>, Answered>;

impl Dispatch {
    /// Runs the handler of the row `route` (see [`crate::routes`]). An
    /// exhaustive match: a new route id needs its handler here, and a test
    /// needs its row in the table.
    pub(crate) fn route(&self, route: R, req: Request) -> RouteFuture {
        let finish = if req.method() == Method::HEAD { answered_head as Answered } else { answered as Answered };
        let run: BoxFuture<'static, Response> = match route {
            R::StreamFork
            | R::StreamCreate
            | R::StreamAppend
            | R::StreamSse
            | R::StreamLongPoll
            | R::StreamRead
            | R::StreamHead
            | R::StreamDelete
            | R::StreamOther
            | R::StreamBadPath
            | R::Jwks
            | R::JwksOther
            | R::SubscriptionPut
            | R::SubscriptionGet
            | R::SubscriptionDelete
            | R::SubscriptionAddStreams
            | R::SubscriptionRemoveStream
            | R::SubscriptionClaim
            | R::SubscriptionAck
            | R::SubscriptionCallback
            | R::SubscriptionRelease
            | R::SubscriptionOther
            | R::ReservedOther => handlers::stream(self.streams.clone(), route, req),
            R::Health if read(&req) => Box::pin(crate::health::health(State(self.health.clone()))),
            R::Metrics if read(&req) => Box::pin(crate::render_metrics(self.metrics.clone())),
            R::Health | R::Metrics => Box::pin(async { processors::method_not_allowed("GET, HEAD").into_response() }),
            R::ProcessorsList | R::ProcessorShow | R::ProcessorState | R::ProcessorControl | R::ProcessorBadPath => {
                Box::pin(processors::handle(State(self.processors.clone()), req))
            }
            R::NoStreamPath => Box::pin(handlers::not_a_stream()),
            // The edge answers preflights itself.
            R::Preflight | R::Unrouted => Box::pin(handlers::not_found()),
        };
        run.map(finish)
    }
}

fn read(req: &Request) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD)
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
