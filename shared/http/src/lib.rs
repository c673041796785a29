//! The Durable Streams HTTP surface: an axum [`Router`] serving
//! `/v1/stream/{path}` over a [`StreamService`]. The same router runs in the
//! local server and in the Lambda function.

pub mod error;
mod handlers;
pub mod headers;
mod layers;
mod request;

use std::sync::Arc;

use axum::routing::any;
use axum::Router;
use ds_core::StreamService;

pub use error::ApiError;

/// Limits the HTTP layer enforces before the service sees a request.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest accepted request body; larger ones get `413`.
    pub max_body_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self { max_body_bytes: 16 * 1024 * 1024 }
    }
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub service: StreamService,
    pub cfg: Arc<HttpConfig>,
}

/// The protocol router. Streams live under `/v1/stream/`; the reserved
/// `__ds` control prefix is routed before streams (§6).
pub fn router(service: StreamService, cfg: HttpConfig) -> Router {
    let state = AppState { service, cfg: Arc::new(cfg) };
    Router::new()
        .route("/v1/stream/{*path}", any(handlers::stream))
        .route("/v1/stream", any(handlers::not_a_stream))
        .route("/v1/stream/", any(handlers::not_a_stream))
        .route("/health", axum::routing::get(|| async { "ok" }))
        .fallback(handlers::not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn(layers::protocol_headers))
        .layer(tower_http::trace::TraceLayer::new_for_http())
}
