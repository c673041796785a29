//! The HTTP function: the same axum router as the local server (`ds-http`)
//! over the AWS substrate, adapted to Lambda's HTTP events. Served with
//! `lambda_http::run_with_streaming_response`, so a Function URL in
//! `RESPONSE_STREAM` mode delivers SSE events as they are produced.
//!
//! Settings (env): the substrate's `DS_AWS_*` (see `ds_store_aws::AwsConfig`),
//! `DS_LONG_POLL_TIMEOUT_MS` (default 20000; keep it well below the function
//! timeout), `DS_SSE_MAX_DURATION_MS` (default 55000: SSE connections end
//! before the default 90 s function timeout), `DS_MAX_BODY_BYTES` (default
//! 6 MiB, Lambda's request payload limit) and `DS_MAX_READ_BYTES`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use ds_core::{ServiceConfig, StreamService};
use tower::ServiceExt;

/// The future of one routed request.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

/// The service Lambda runs per invocation: convert the event's body to an
/// axum body and route it. Never fails: errors are HTTP responses.
pub fn handler(
    router: axum::Router,
) -> impl tower::Service<
    lambda_http::Request,
    Response = http::Response<Body>,
    Error = Infallible,
    Future = ResponseFuture,
> + Clone {
    tower::service_fn(move |req: lambda_http::Request| {
        let router = router.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = match body {
                lambda_http::Body::Empty => bytes::Bytes::new(),
                lambda_http::Body::Text(t) => bytes::Bytes::from(t),
                lambda_http::Body::Binary(b) => bytes::Bytes::from(b),
                _ => bytes::Bytes::new(),
            };
            router.oneshot(http::Request::from_parts(parts, Body::from(bytes))).await
        }) as ResponseFuture
    })
}

fn env_u64(name: &str) -> anyhow::Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(Some(v.parse().map_err(|_| anyhow::anyhow!("{name}={v:?} is not a number"))?)),
        _ => Ok(None),
    }
}

/// The core's settings for Lambda, from the environment.
pub fn service_config_from_env() -> anyhow::Result<ServiceConfig> {
    let mut cfg = ServiceConfig {
        long_poll_timeout: Duration::from_millis(20_000),
        sse_max_duration: Duration::from_millis(55_000),
        ..ServiceConfig::default()
    };
    if let Some(ms) = env_u64("DS_LONG_POLL_TIMEOUT_MS")? {
        cfg.long_poll_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = env_u64("DS_SSE_MAX_DURATION_MS")? {
        cfg.sse_max_duration = Duration::from_millis(ms);
    }
    if let Some(n) = env_u64("DS_MAX_READ_BYTES")? {
        cfg.max_read_bytes = usize::try_from(n)?;
    }
    cfg.max_read_bytes = cfg.max_read_bytes.min(ds_store_aws::MAX_READ_BYTES);
    Ok(cfg)
}

/// Largest request body: Lambda's 6 MiB invocation payload limit.
pub fn http_config_from_env() -> anyhow::Result<ds_http::HttpConfig> {
    let max = env_u64("DS_MAX_BODY_BYTES")?.unwrap_or(6 * 1024 * 1024);
    Ok(ds_http::HttpConfig { max_body_bytes: usize::try_from(max)? })
}

/// The router over a service.
pub fn router(service: StreamService, http: ds_http::HttpConfig) -> axum::Router {
    ds_http::router(service, http)
}

/// Everything from the environment: substrate (clients built once), core
/// settings, router.
pub async fn router_from_env() -> anyhow::Result<axum::Router> {
    let aws = ds_store_aws::AwsSubstrate::from_env().await?;
    let service = StreamService::new(aws.substrate(), service_config_from_env()?);
    Ok(router(service, http_config_from_env()?))
}

/// JSON logs to stdout (CloudWatch), filter from `RUST_LOG`.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).json().without_time().try_init();
}
