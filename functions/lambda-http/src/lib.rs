//! The HTTP function: the same axum router as the local server (`ds-http`)
//! over the AWS substrate, adapted to Lambda's HTTP events. Served with
//! `lambda_http::run_with_streaming_response`, so a Function URL in
//! `RESPONSE_STREAM` mode delivers SSE events as they are produced; response
//! bodies go through [`Coalesce`], so each SSE batch (a `data` event and its
//! `control` event) leaves as one chunk, as it does from the local server.
//!
//! Settings (env, in the dialect of `ds_config`: durations like `20s`, sizes
//! like `1MiB`): the substrate's `DS_AWS_*` (see `ds_store_aws::AwsConfig`),
//! `DS_LONG_POLL_TIMEOUT` (default `20s`; keep it well below the function
//! timeout), `DS_SSE_MAX_DURATION` (default `55s`: SSE connections end
//! before the default 90 s function timeout), `DS_MAX_BODY_BYTES` (default
//! `6MiB`, Lambda's request payload limit) and `DS_MAX_READ_BYTES`.
//!
//! Operations ([`operations_from_env`]): access control for `AuthType: NONE`
//! Function URLs (`DS_AUTH_TOKENS`, `DS_JWT_HS256_SECRET`,
//! `DS_JWT_PUBLIC_KEY`, `DS_JWKS_URL`, `DS_JWT_ISSUER`, `DS_JWT_AUDIENCE`,
//! `DS_JWT_LEEWAY`, `DS_JWKS_REFRESH`: see `ds_auth::AuthSettings`),
//! `DS_CORS_ORIGINS`, `DS_PUBLIC_URL` (where clients reach the function,
//! when not at `https://<Host>`: a custom domain with a path, or a runtime
//! emulator's `http://127.0.0.1:PORT/lambda-url/NAME`; the base of
//! `Location`, subscription callback and JWKS URLs), and `DS_METRICS_NAMESPACE` (CloudWatch EMF lines on
//! stdout, default `DurableStreams`; `off` disables them).
//!
//! Concurrent invocations ([`Runner`]): `DS_LAMBDA_CONCURRENT` (a switch,
//! default off; the template's `HttpConcurrentInvocations`) runs the loop
//! with `lambda_http::run_with_streaming_response_concurrent`, which takes
//! as many invocations at once as Lambda allows one execution environment
//! (`AWS_LAMBDA_MAX_CONCURRENCY`, set by Lambda Managed Instances; unset on
//! classic Lambda, where it runs one at a time as before). Every waiting
//! reader in the process then shares the substrate's one poller per stream
//! and its clients (the billing trade-off: docs/deploy-aws.md).
//!
//! Processors ([`processors`]): `DS_PROCESSORS_TOML` (the TOML of a
//! processors configuration) or `DS_PROCESSORS` (a file holding it), the
//! same settings as the local server's, turn on the operator API at
//! `/v1/processors`.
//!
//! Subscriptions ([`subscriptions`]): the `__ds` API is served here, and
//! only served: deliveries, leases and retries run in the processor
//! function, which the table's DynamoDB Stream brings every change of a
//! subscription's record to (`ds_processor_aws::subscriptions`), so no
//! request waits on a webhook. `DS_WEBHOOK_ALLOW_LOOPBACK` accepts webhook
//! URLs on loopback (development and tests only; set it on both functions).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use ds_auth::AuthSettings;
use ds_config::Settings;
use ds_core::{ServiceConfig, StreamService};
use tower::ServiceExt;

pub mod coalesce;
pub use coalesce::Coalesce;

/// What the handler answers: the router's response, its body coalesced.
pub type LambdaResponse = http::Response<Coalesce<Body>>;

/// The future of one routed request.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<LambdaResponse, Infallible>> + Send>>;

/// The service Lambda runs per invocation: convert the event's body to an
/// axum body, route it, and coalesce the response body's ready frames.
/// Never fails: errors are HTTP responses.
pub fn handler(
    router: axum::Router,
) -> impl tower::Service<lambda_http::Request, Response = LambdaResponse, Error = Infallible, Future = ResponseFuture> + Clone
{
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
            let response = router.oneshot(http::Request::from_parts(parts, Body::from(bytes))).await?;
            // The request's span has ended: export it before the invocation
            // returns and the environment is frozen (a streamed body's
            // bytes still flow after; the span does not wait for them).
            if ds_telemetry::enabled() {
                let _ = tokio::task::spawn_blocking(ds_telemetry::flush).await;
            }
            Ok(response.map(Coalesce::new))
        }) as ResponseFuture
    })
}

/// The Lambda runtime loop over `router`, with streamed responses.
///
/// A client that leaves mid-response (an SSE reader closing its connection)
/// breaks the streamed body's `POST` to the Runtime API, and lambda_runtime
/// then returns that error instead of taking the next invocation. The
/// invocation is over either way (its client left) and the instance is
/// sound, so the loop is entered again rather than the process exiting: an
/// exit costs a cold start, and under a runtime emulator that restarts
/// nothing it lost the instance for good. A Runtime API that keeps failing
/// at once (gone) still ends the process.
///
/// With [`Runner::Concurrent`], lambda_runtime runs one worker per slot of
/// `AWS_LAMBDA_MAX_CONCURRENCY`, and such an error ends that worker only
/// (the others keep serving); the runner returns once every worker has
/// ended, and is then entered again here like the sequential one.
pub async fn run(router: axum::Router, runner: Runner) -> Result<(), lambda_http::Error> {
    const QUICK: std::time::Duration = std::time::Duration::from_secs(1);
    const MAX_QUICK_FAILURES: u32 = 20;
    let mut quick_failures = 0u32;
    loop {
        let started = std::time::Instant::now();
        let ran = match runner {
            Runner::Sequential => lambda_http::run_with_streaming_response(handler(router.clone())).await,
            Runner::Concurrent => lambda_http::run_with_streaming_response_concurrent(handler(router.clone())).await,
        };
        let Err(err) = ran else {
            return Ok(());
        };
        quick_failures = if started.elapsed() < QUICK { quick_failures + 1 } else { 0 };
        if quick_failures >= MAX_QUICK_FAILURES {
            tracing::error!(error = %err, "the Runtime API keeps failing; exiting");
            return Err(err);
        }
        tracing::warn!(error = %err, "a call to the Runtime API failed (a client left mid-response?); taking the next invocation");
        tokio::time::sleep(std::time::Duration::from_millis(20 * u64::from(quick_failures))).await;
    }
}

/// How the function takes invocations from the Lambda Runtime API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// One invocation at a time per process (classic Lambda).
    Sequential,
    /// As many at once as `AWS_LAMBDA_MAX_CONCURRENCY` allows (Lambda
    /// Managed Instances); one at a time where it is unset.
    Concurrent,
}

impl Runner {
    /// `DS_LAMBDA_CONCURRENT` (default off).
    pub fn from_env() -> anyhow::Result<Self> {
        Self::from_settings(&Settings::from_env())
    }

    fn from_settings<F: Fn(&str) -> Option<String>>(env: &Settings<F>) -> anyhow::Result<Self> {
        Ok(if env.switch("DS_LAMBDA_CONCURRENT")? { Runner::Concurrent } else { Runner::Sequential })
    }
}

/// The core's settings for Lambda, from the environment.
pub fn service_config_from_env() -> anyhow::Result<ServiceConfig> {
    service_config(&Settings::from_env())
}

fn service_config<F: Fn(&str) -> Option<String>>(env: &Settings<F>) -> anyhow::Result<ServiceConfig> {
    let defaults = ServiceConfig::default();
    Ok(ServiceConfig {
        long_poll_timeout: env.duration("DS_LONG_POLL_TIMEOUT")?.unwrap_or(Duration::from_secs(20)),
        sse_max_duration: env.duration("DS_SSE_MAX_DURATION")?.unwrap_or(Duration::from_secs(55)),
        max_read_bytes: env.size("DS_MAX_READ_BYTES")?.unwrap_or(defaults.max_read_bytes),
        registry: env.switch_or("DS_REGISTRY", defaults.registry)?,
        ..defaults
    })
}

/// Largest request body: Lambda's 6 MiB invocation payload limit by default.
pub fn http_config_from_env() -> anyhow::Result<ds_http::HttpConfig> {
    let max = Settings::from_env().size("DS_MAX_BODY_BYTES")?.unwrap_or(6 * 1024 * 1024);
    Ok(ds_http::HttpConfig { max_body_bytes: max, ..ds_http::HttpConfig::default() })
}

/// The router over a service, open to everyone.
pub fn router(service: StreamService, http: ds_http::HttpConfig) -> axum::Router {
    ds_http::router(service, http)
}

/// Access control, CORS and metrics from settings (see the crate docs).
pub fn operations<F: Fn(&str) -> Option<String>>(env: &Settings<F>) -> anyhow::Result<ds_http::Operations> {
    let settings = AuthSettings::from_env(env)?;
    let rate_limits = settings.budgets()?.map(Arc::new);
    let access = settings.build()?;
    if access.is_none() {
        tracing::info!("no access control configured in the function: the Function URL's AWS_IAM auth must guard it");
    }
    let cors = match (env.raw("DS_CORS_ORIGINS"), access.is_some()) {
        (Some(list), _) => ds_http::Cors::parse(&list).map_err(anyhow::Error::msg)?,
        (None, false) => ds_http::Cors::AnyOrigin,
        (None, true) => ds_http::Cors::Origins(Vec::new()),
    };
    let namespace = env.raw("DS_METRICS_NAMESPACE").unwrap_or_else(|| "DurableStreams".to_owned());
    let metrics: Option<Arc<dyn ds_metrics::Metrics>> =
        (namespace != "off").then(|| Arc::new(ds_metrics::emf::EmfMetrics::stdout(namespace)) as _);
    let public_url = env.raw("DS_PUBLIC_URL").map(|u| public_url(&u)).transpose()?;
    Ok(ds_http::Operations {
        public_url,
        access: access.map(Arc::new),
        rate_limits,
        cors,
        metrics,
        store_name: "aws",
        https: true,
        subscriptions: None,
        processors: None,
    })
}

/// `DS_PUBLIC_URL`, checked: an absolute `http(s)` URL with no query or
/// fragment; a trailing `/` is dropped.
fn public_url(raw: &str) -> anyhow::Result<String> {
    let bad = |why: &str| anyhow::anyhow!("DS_PUBLIC_URL: {raw:?} {why}");
    let url = url::Url::parse(raw.trim()).map_err(|e| bad(&format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("must be an http:// or https:// URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(bad("must have no query, fragment or credentials"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// The operator API's view of the processors the environment names
/// (`DS_PROCESSORS_TOML`, the TOML of a processors configuration, or
/// `DS_PROCESSORS`, a file holding it: the same settings as `serve`'s),
/// checked against the store like the local server does; `None` without
/// either. The function keeps no runner open: answers come from
/// the progress records, and a control opens a runner for its duration
/// (its audit event, appended to the stream, wakes the processor host).
pub async fn processors<F: Fn(&str) -> Option<String>>(
    env: &Settings<F>,
    service: &StreamService,
) -> anyhow::Result<Option<Arc<dyn ds_processor_host::ProcessorOperator>>> {
    let Some(source) = env.processors()? else { return Ok(None) };
    let catalog = ds_processors_builtin::Catalog::builtin();
    let (config, registry) =
        catalog.load(&source.text, service).await.map_err(|e| anyhow::anyhow!("{}: {e}", source.origin))?;
    let hosted: Arc<dyn ds_processor_host::ProcessorOperator> =
        Arc::new(ds_processor_host::OnDemandOperator::new(service.clone(), registry, None));
    // Inline processors run in this function: every append it serves is
    // validated and reduced in its own commit.
    let inline = Arc::new(catalog.build_inline(&config).map_err(|e| anyhow::anyhow!("{}: {e}", source.origin))?);
    let operator = if inline.is_empty() {
        hosted
    } else {
        service.set_inline_gate(Arc::clone(&inline) as Arc<dyn ds_core::InlineGate>);
        Arc::new(ds_processor_host::InlineOperator::new(Some(hosted), inline, service.clone()))
    };
    // `state` processors' views live in this instance's memory: folded on
    // its first read of a stream, caught up on each read after.
    let views = ds_processors_builtin::state::StateViews::from_config(&config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", source.origin))?;
    if views.is_empty() {
        return Ok(Some(operator));
    }
    Ok(Some(Arc::new(ds_processors_builtin::state::StateOperator::new(operator, Arc::new(views), service.clone()))))
}

/// The subscriptions API over `service` (see the crate docs): the engine
/// with [`ds_subscriptions::FeedWakes`], the webhook signing key kept in the
/// table (its public half is served at `__ds/jwks.json`).
pub async fn subscriptions<F: Fn(&str) -> Option<String>>(
    env: &Settings<F>,
    service: &StreamService,
) -> anyhow::Result<ds_subscriptions::Subscriptions> {
    use ds_subscriptions::{FeedWakes, KeyRing, RecordKeyStore, Subscriptions, SubscriptionsConfig, UrlPolicy};
    let allow_loopback = env.switch("DS_WEBHOOK_ALLOW_LOOPBACK")?;
    if allow_loopback {
        tracing::warn!("webhook URLs on loopback are allowed (DS_WEBHOOK_ALLOW_LOOPBACK): development only");
    }
    let keys = KeyRing::open(&RecordKeyStore::new(Arc::clone(&service.substrate().store)))
        .await
        .map_err(|e| anyhow::anyhow!("the webhook signing key: {e}"))?;
    let cfg = SubscriptionsConfig {
        url_policy: UrlPolicy { allow_loopback },
        sole_writer: false,
        ..SubscriptionsConfig::default()
    };
    Ok(Subscriptions::new(service.clone(), keys, cfg, Arc::new(FeedWakes))?)
}

/// [`operations`] from the process environment.
pub fn operations_from_env() -> anyhow::Result<ds_http::Operations> {
    operations(&Settings::from_env())
}

/// Everything from the environment: substrate (clients built once), core
/// settings, operations, router.
pub async fn router_from_env() -> anyhow::Result<axum::Router> {
    let aws = ds_store_aws::AwsSubstrate::from_env().await?;
    let service = StreamService::new(aws.substrate(), service_config_from_env()?);
    // Best effort: the first create makes it anyway.
    if let Err(e) = service.ensure_registry().await {
        tracing::warn!(error = %e, "could not create the __registry__ stream yet");
    }
    let mut ops = operations_from_env()?;
    ops.processors = processors(&Settings::from_env(), &service).await?;
    ops.subscriptions = Some(subscriptions(&Settings::from_env(), &service).await?);
    Ok(ds_http::router_with(service, http_config_from_env()?, ops))
}

/// JSON logs to stdout (CloudWatch), filter from `RUST_LOG`; span export
/// when the `OTEL_*` variables ask for it (keep the answer while the
/// process lives; [`handler`] flushes after each invocation).
pub fn init_logs() -> Result<Option<ds_telemetry::Telemetry>, ds_telemetry::TelemetryError> {
    ds_telemetry::init_lambda("durable-streams-http")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_use_the_shared_dialect_and_name_bad_variables() {
        let env = Settings::new(|name: &str| match name {
            "DS_LONG_POLL_TIMEOUT" => Some("500ms".to_owned()),
            "DS_MAX_READ_BYTES" => Some("512KiB".to_owned()),
            _ => None,
        });
        let cfg = service_config(&env).expect("valid");
        assert_eq!(cfg.long_poll_timeout, Duration::from_millis(500));
        assert_eq!(cfg.sse_max_duration, Duration::from_secs(55));
        assert_eq!(cfg.max_read_bytes, 512 << 10);
        let bad = Settings::new(|name: &str| (name == "DS_SSE_MAX_DURATION").then(|| "55000".to_owned()));
        let err = service_config(&bad).expect_err("a bare number has no unit");
        assert!(err.to_string().starts_with("DS_SSE_MAX_DURATION: "), "{err}");
    }

    #[test]
    fn the_concurrent_runner_is_a_switch_off_by_default() {
        let unset = Settings::new(|_: &str| None);
        assert_eq!(Runner::from_settings(&unset).expect("valid"), Runner::Sequential);
        let on = Settings::new(|name: &str| (name == "DS_LAMBDA_CONCURRENT").then(|| "on".to_owned()));
        assert_eq!(Runner::from_settings(&on).expect("valid"), Runner::Concurrent);
        let bad = Settings::new(|name: &str| (name == "DS_LAMBDA_CONCURRENT").then(|| "sometimes".to_owned()));
        let err = Runner::from_settings(&bad).expect_err("not a switch").to_string();
        assert!(err.starts_with("DS_LAMBDA_CONCURRENT: "), "{err}");
    }

    #[test]
    fn the_public_url_is_an_http_base_without_a_trailing_slash() {
        assert_eq!(public_url("https://streams.example/").expect("ok"), "https://streams.example");
        assert_eq!(
            public_url("http://127.0.0.1:9000/lambda-url/lambda-http").expect("ok"),
            "http://127.0.0.1:9000/lambda-url/lambda-http"
        );
        for bad in ["streams.example", "ftp://x", "https://x/?a=1", "https://u:p@x", "https://x/#f"] {
            let err = public_url(bad).expect_err(bad).to_string();
            assert!(err.starts_with("DS_PUBLIC_URL: "), "{err}");
        }
    }
}
