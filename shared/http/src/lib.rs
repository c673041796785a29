//! The Durable Streams HTTP surface: one tower service ([`App`]) serving
//! `/v1/stream/{path}` over a [`StreamService`], and the processors'
//! operator API at `/v1/processors` (`processors.rs`). The local server
//! serves the [`App`] itself; the Lambda function and tests take it wrapped
//! in an axum [`Router`] ([`router_with`]).
//!
//! The transport below it (`ds-serve`: connections, limits, the HTTP/1.1
//! fast path, hyper) serves the [`App`] through `ds_serve::Surface`; the
//! fast path's plain appends are answered from their bytes (`direct.rs`,
//! the same append code as the router's handler).

mod access;
mod app;
mod append;
mod cors;
mod direct;
mod dispatch;
mod edge;
pub mod error;
mod handlers;
pub mod headers;
mod health;
mod layers;
mod live;
mod metrics;
mod processors;
mod request;
mod reserved;
pub mod routes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use ds_core::StreamService;

pub use app::App;
pub use cors::Cors;
pub use error::ApiError;
pub use metrics::{Exchange, Metrics};
pub use processors::PROCESSORS_PATH;
pub use routes::METRICS_PATH;

/// Limits the HTTP layer enforces before the service sees a request.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest accepted request body; larger ones get `413`.
    pub max_body_bytes: usize,
    /// Most live readers (long-poll and SSE requests) served at once; more
    /// get `503` with `Retry-After`.
    pub max_live_readers: usize,
    /// Longest silence while a request body arrives; then `408` and the
    /// connection is closed.
    pub body_read_timeout: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self { max_body_bytes: 16 * 1024 * 1024, max_live_readers: 10_000, body_read_timeout: Duration::from_secs(30) }
    }
}

/// What every stream handler needs, shared: cloned for each request (the
/// `State` extractor), so one reference count instead of one per service
/// inside it (profiled: the field-wise clone and drop of a request's state
/// were ~3% of the server's CPU on the memory store).
#[derive(Clone)]
pub(crate) struct AppState(Arc<AppInner>);

impl std::ops::Deref for AppState {
    type Target = AppInner;

    fn deref(&self) -> &AppInner {
        &self.0
    }
}

pub(crate) struct AppInner {
    pub service: StreamService,
    pub cfg: Arc<HttpConfig>,
    /// `http` or `https`: the scheme of `Location` URLs.
    pub scheme: &'static str,
    /// [`Operations::public_url`].
    pub public_url: Option<String>,
    /// The subscription engine (`None`: the `__ds` control APIs answer 501).
    pub subscriptions: Option<ds_subscriptions::Subscriptions>,
    pub live: live::LiveReaders,
}

/// How the router is operated: access control, CORS, metrics, and the
/// store name `/health` reports.
#[derive(Clone, Default)]
pub struct Operations {
    /// `None`: everyone may do everything.
    pub access: Option<Arc<ds_auth::Authenticator>>,
    /// Request budgets per credential, `429` past them (with `access` only:
    /// a budget belongs to a credential).
    pub rate_limits: Option<Arc<ds_auth::Budgets>>,
    pub cors: Cors,
    /// Where exchanges are reported; also what `/metrics` serves.
    pub metrics: Option<Arc<dyn Metrics>>,
    /// `memory`, `local`, `aws`: shown by `/health`.
    pub store_name: &'static str,
    /// Clients reach this router over TLS (directly or through a proxy that
    /// terminates it): `Location` URLs say `https`.
    pub https: bool,
    /// Serve the subscription control APIs under `__ds` (§6-7) with this
    /// engine; `None`: they answer `501`.
    pub subscriptions: Option<ds_subscriptions::Subscriptions>,
    /// The hosted processors, served by the operator API at
    /// `/v1/processors` (without: that API answers `404`).
    pub processors: Option<Arc<dyn ds_processor_host::ProcessorOperator>>,
    /// Where clients reach this router, when the request's `Host` does not
    /// say it all: scheme, host and path prefix (`https://streams.example`,
    /// `http://127.0.0.1:9000/lambda-url/fn`), without a trailing `/`. The
    /// base of `Location`, subscription callback and JWKS URLs; `None`:
    /// `http(s)://<Host>`.
    pub public_url: Option<String>,
}

impl AppInner {
    /// The base URL of this router as clients reach it (see
    /// [`Operations::public_url`]), for a request that named `host`.
    pub(crate) fn base_url(&self, host: &str) -> String {
        match &self.public_url {
            Some(url) => url.clone(),
            None => format!("{}://{host}", self.scheme),
        }
    }
}

/// The protocol router, open to everyone. Streams live under `/v1/stream/`;
/// the reserved `__ds` control prefix is routed before streams (§6).
pub fn router(service: StreamService, cfg: HttpConfig) -> Router {
    router_with(service, cfg, Operations::default())
}

/// The protocol router with access control, CORS, metrics and health as
/// configured: [`app_with`] in an axum [`Router`].
pub fn router_with(service: StreamService, cfg: HttpConfig, ops: Operations) -> Router {
    Router::new().fallback_service(app_with(service, cfg, ops))
}

/// The protocol's HTTP service with access control, CORS, metrics and
/// health as configured. The edge, outermost: the tracing span, metrics (so
/// refused requests are counted), security and CORS headers (so a browser
/// can read a `401`), access control; then the routes.
pub fn app_with(service: StreamService, cfg: HttpConfig, ops: Operations) -> App {
    let service_store = service.substrate().store.clone();
    let live = live::LiveReaders::new(cfg.max_live_readers, service.random().clone());
    let state = AppState(Arc::new(AppInner {
        service,
        cfg: Arc::new(cfg),
        scheme: if ops.https { "https" } else { "http" },
        public_url: ops.public_url.as_ref().map(|u| u.trim_end_matches('/').to_owned()),
        subscriptions: ops.subscriptions.clone(),
        live,
    }));
    let health = Arc::new(health::Health::new(ops.store_name, service_store));
    let cors = Arc::new(ops.cors);
    // Access control needs the router's request (see `direct`).
    let direct = ops.access.is_none().then(|| direct::Direct::new(state.clone(), cors.clone(), ops.metrics.clone()));
    let gate = ops.access.map(|auth| Arc::new(access::Gate { auth, budgets: ops.rate_limits }));
    let dispatch =
        dispatch::Dispatch { streams: state, health, metrics: ops.metrics.clone(), processors: ops.processors };
    App::new(edge::EdgeService::new(edge::Edge { cors, access: gate, metrics: ops.metrics }, dispatch), direct)
}

/// `GET /metrics`: what the metrics port renders, if it renders anything.
async fn render_metrics(m: Option<Arc<dyn Metrics>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match m.and_then(|m| m.render()) {
        Some(text) => {
            ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
        }
        None => handlers::not_found().await,
    }
}
