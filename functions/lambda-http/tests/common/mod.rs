//! Set-up shared by the handler tests: the emulator (skip loudly without
//! one; `ds_store_aws::test_util`), a service over a fresh AWS substrate
//! instance, and the event fixtures.
#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use ds_core::{ServiceConfig, StreamService};
use ds_store_aws::test_util::AwsFactory;

/// Whether the emulator is configured (else the test skips, loudly).
pub fn emulator(test: &str) -> bool {
    ds_store_aws::test_util::endpoint(test).is_some()
}

/// A core service over a new substrate instance (own clients and registry),
/// with a short long-poll timeout.
pub async fn service() -> StreamService {
    let factory = AwsFactory::new("lambda-http").await.expect("emulator configured");
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_millis(500), ..ServiceConfig::default() };
    factory.service_with(cfg).1
}

/// A core service over a new substrate instance whose commits are also
/// handed to the returned tap (for an engine playing the processor
/// function's part in process).
pub async fn tapped_service() -> (StreamService, std::sync::Arc<ds_subscriptions::ChangeTap>) {
    let factory = AwsFactory::new("lambda-http").await.expect("emulator configured");
    let mut substrate = factory.aws().substrate();
    let tap = ds_subscriptions::tap_hub(&mut substrate);
    let cfg = ServiceConfig { long_poll_timeout: Duration::from_millis(500), ..ServiceConfig::default() };
    (StreamService::new(substrate, cfg), tap)
}

/// The router the function builds (`lambda_http_fn::router_from_env`), over
/// `service`, configured by `env`.
pub async fn router(service: StreamService, env: std::collections::HashMap<&'static str, String>) -> axum::Router {
    let settings = ds_config::Settings::new(move |k: &str| env.get(k).cloned());
    let mut ops = lambda_http_fn::operations(&settings).expect("operations from env");
    ops.processors = lambda_http_fn::processors(&settings, &service).await.expect("DS_PROCESSORS_TOML");
    ops.subscriptions = Some(lambda_http_fn::subscriptions(&settings, &service).await.expect("subscriptions"));
    ds_http::router_with(service, lambda_http_fn::http_config_from_env().expect("cfg"), ops)
}

/// A fixture with `{{PATH}}` replaced.
pub fn fixture(name: &str, path: &str) -> String {
    let file = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&file).expect("fixture exists").replace("{{PATH}}", path)
}

/// A Function URL event (payload format 2.0) carrying `req`.
pub fn event(req: &ds_e2e::access::Req) -> String {
    use base64::Engine;
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let mut headers: std::collections::HashMap<String, String> = req.headers.iter().cloned().collect();
    headers.insert("host".into(), "abcdefghij.lambda-url.us-east-1.on.aws".into());
    headers.insert("x-forwarded-proto".into(), "https".into());
    serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous", "apiId": "abcdefghij",
            "domainName": "abcdefghij.lambda-url.us-east-1.on.aws", "domainPrefix": "abcdefghij",
            "http": { "method": req.method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "matrix/1.0" },
            "requestId": "33333333-2222-3333-4444-555555555555", "routeKey": "$default", "stage": "$default",
            "time": "30/Nov/2026:11:00:01 +0000", "timeEpoch": 1796036401000u64
        },
        "body": base64::engine::general_purpose::STANDARD.encode(&req.body),
        "isBase64Encoded": true
    })
    .to_string()
}

/// A `ds_e2e` sender that hands each request to the function's handler as a
/// Function URL event.
pub fn handler_sender(
    router: axum::Router,
) -> impl Fn(ds_e2e::access::Req) -> std::pin::Pin<Box<dyn std::future::Future<Output = ds_e2e::access::Resp> + Send>> + Sync
{
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let handler = lambda_http_fn::handler(router);
    move |req| {
        let handler = handler.clone();
        Box::pin(async move {
            let event: lambda_http::request::LambdaRequest =
                serde_json::from_str(&event(&req)).expect("a Function URL event");
            let resp = handler.oneshot(event.into()).await.expect("infallible");
            let (parts, body) = resp.into_parts();
            let h = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let status = parts.status.as_u16();
            let body = if status >= 400 || !req.live() {
                body.collect().await.expect("body").to_bytes().to_vec()
            } else {
                Vec::new()
            };
            ds_e2e::access::Resp {
                status,
                www_authenticate: h("www-authenticate"),
                content_type: h("content-type"),
                retry_after: h("retry-after"),
                next_offset: h("stream-next-offset"),
                body,
            }
        })
    }
}
