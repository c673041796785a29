//! Access control inside the HTTP function (for `AuthType: NONE` Function
//! URLs), configured from the environment as the template sets it: the same
//! route × token matrix as the local server, as Function URL events through
//! the real handler over the AWS substrate on the emulator.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use base64::Engine;
use ds_e2e::access::{self, Req, Resp};
use ds_e2e::Checks;
use http_body_util::BodyExt;
use lambda_http::request::LambdaRequest;
use tower::ServiceExt;

fn event(req: &Req) -> String {
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    let mut headers: HashMap<String, String> = req.headers.iter().cloned().collect();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_and_token_case_through_the_handler() {
    if !common::emulator("every_route_and_token_case_through_the_handler") {
        return;
    }
    let secret = access::new_secret();
    let root = ds_auth::tokens::generate();
    let tokens = serde_json::json!({"tokens": [{"name": "root", "sha256": ds_auth::tokens::digest_hex(&root),
        "streams": [{"prefix": "", "ops": ["read", "write", "admin"]}]}]})
    .to_string();
    let env: HashMap<&str, String> = HashMap::from([
        ("DS_AUTH_TOKENS", tokens),
        ("DS_JWT_HS256_SECRET", secret.clone()),
        ("DS_JWT_ISSUER", access::ISSUER.to_owned()),
        ("DS_JWT_AUDIENCE", access::AUDIENCE.to_owned()),
    ]);
    let settings = ds_config::Settings::new(move |k: &str| env.get(k).cloned());
    let ops = lambda_http_fn::operations(&settings).expect("operations from env");
    assert!(ops.access.is_some(), "access control is on");
    let http = lambda_http_fn::http_config_from_env().expect("cfg");
    let router = ds_http::router_with(common::service().await, http, ops);
    let handler = lambda_http_fn::handler(router);

    let send = move |req: Req| -> Pin<Box<dyn Future<Output = Resp> + Send>> {
        let handler = handler.clone();
        Box::pin(async move {
            let event: LambdaRequest = serde_json::from_str(&event(&req)).expect("a Function URL event");
            let resp = handler.oneshot(event.into()).await.expect("infallible");
            let (parts, body) = resp.into_parts();
            let h = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let status = parts.status.as_u16();
            let body = if status >= 400 { body.collect().await.expect("body").to_bytes().to_vec() } else { Vec::new() };
            Resp { status, www_authenticate: h("www-authenticate"), content_type: h("content-type"), body }
        })
    };
    let tag = format!("lambda-matrix-{}", std::process::id());
    let mut checks = Checks::new();
    // No Prometheus endpoint on Lambda (EMF lines instead): an in-scope
    // /metrics is a 404, still only after authentication.
    access::run(&send, &secret, &root, &tag, 404, &mut checks).await;
    checks.finish("access matrix (Lambda handler)");
}
