//! The HTTP function serves the processors' operator API when
//! `DS_PROCESSORS_TOML` names them: Function URL events through the real handler
//! over the AWS substrate on the emulator. The processing itself runs
//! elsewhere (here: a local host over another substrate instance of the same
//! table, standing in for the processor function); the function answers
//! from the progress records and applies controls through a runner it opens
//! for the call.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use ds_core::{AppendRequest, CreateRequest, ServiceConfig, StreamService};
use ds_processor_local::{HostConfig, LocalHost};
use ds_store_aws::test_util::{ensure_resources, AwsFactory};
use http_body_util::BodyExt;
use lambda_http::request::LambdaRequest;
use serde_json::{json, Value};
use tower::ServiceExt;

const CONFIG: &str = r#"
[[processor]]
kind = "counter"
slug = "by-status"
streams = "orders/*"
group_by = "/payload/status"
"#;

fn event(method: &str, target: &str, body: &str) -> LambdaRequest {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let event = json!({
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": query,
        "headers": { "host": "abcdefghij.lambda-url.us-east-1.on.aws", "content-type": "application/json" },
        "requestContext": {
            "accountId": "anonymous", "apiId": "abcdefghij",
            "domainName": "abcdefghij.lambda-url.us-east-1.on.aws", "domainPrefix": "abcdefghij",
            "http": { "method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "t/1.0" },
            "requestId": "33333333-2222-3333-4444-555555555555", "routeKey": "$default", "stage": "$default",
            "time": "30/Nov/2026:11:00:01 +0000", "timeEpoch": 1796036401000u64
        },
        "body": base64::engine::general_purpose::STANDARD.encode(body),
        "isBase64Encoded": true
    });
    serde_json::from_value(event).unwrap()
}

async fn append(svc: &StreamService, path: &str, status: &str) {
    let body = json!([{ "type": "order/placed", "payload": { "status": status } }]).to_string();
    let req = AppendRequest {
        path: path.into(),
        content_type: Some("application/json".into()),
        body: Bytes::from(body),
        close: false,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    };
    svc.append(req).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_serves_the_operator_api_from_the_progress_records() {
    let Some(factory) = AwsFactory::new("the_function_serves_the_operator_api").await else { return };
    // A table of its own: listing scans it.
    let mut cfg = factory.cfg.clone();
    cfg.table = format!("ds-lambda-processors-{}", std::process::id());
    ensure_resources(&factory.conf, &cfg).await;

    // The processing side: a host over one substrate instance.
    let host = LocalHost::new(HostConfig { lag_log_interval: None, ..HostConfig::default() });
    let worker = StreamService::new(host.tap(factory.aws_with(cfg.clone()).substrate()), ServiceConfig::default());
    let (_, registry) = ds_processors_builtin::Catalog::builtin().load(CONFIG, &worker).await.unwrap();
    host.start(worker.clone(), registry).await.unwrap();
    let create = CreateRequest {
        path: "orders/1".into(),
        content_type: Some("application/json".into()),
        lifetime: Default::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    worker.create(create).await.unwrap();
    for status in ["new", "new", "paid"] {
        append(&worker, "orders/1", status).await;
    }

    // The function: another instance, configured from its environment.
    let service = StreamService::new(factory.aws_with(cfg).substrate(), ServiceConfig::default());
    let env: HashMap<&str, String> = HashMap::from([("DS_PROCESSORS_TOML", CONFIG.to_owned())]);
    let settings = ds_config::Settings::new(move |k: &str| env.get(k).cloned());
    let mut ops = lambda_http_fn::operations(&settings).unwrap();
    ops.processors = lambda_http_fn::processors(&settings, &service).await.unwrap();
    assert!(ops.processors.is_some());
    let router = ds_http::router_with(service, lambda_http_fn::http_config_from_env().unwrap(), ops);
    let handler = lambda_http_fn::handler(router);
    let call = |method: &'static str, target: String, body: Value| {
        let handler = handler.clone();
        async move {
            let resp = handler.oneshot(event(method, &target, &body.to_string()).into()).await.unwrap();
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };

    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        let (status, page) = call("GET", "/v1/processors".into(), Value::Null).await;
        assert_eq!(status, 200, "{page}");
        let row = page["processors"][0].clone();
        if row["lag"] == 0 && row["tail"].as_u64() > Some(0) {
            break row;
        }
        assert!(Instant::now() < deadline, "never caught up: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((listed["processor"].as_str(), listed["running"].as_bool()), (Some("by-status"), Some(false)));
    let (status, shown) = call("GET", "/v1/processors/by-status/streams/orders/1".into(), Value::Null).await;
    assert_eq!(status, 200);
    assert_eq!(shown["state"], json!({ "count": 3, "by": { "new": 2, "paid": 1 }, "other": 0 }));

    let revision = shown["cursorRevision"].as_u64().unwrap();
    let stale = json!({ "position": 1, "expectedRevision": revision + 1 });
    let (status, err) = call("POST", "/v1/processors/by-status/reprocess-from/orders/1".into(), stale).await;
    assert_eq!((status, err["error"]["code"].as_str()), (409, Some("REVISION_MISMATCH")));
    let (_, after) = call("GET", "/v1/processors/by-status/streams/orders/1".into(), Value::Null).await;
    assert_eq!(after["cursorRevision"], json!(revision), "nothing changed");

    let fresh = json!({ "position": 1, "expectedRevision": revision, "reason": "rebuild" });
    let (status, done) = call("POST", "/v1/processors/by-status/reprocess-from/orders/1".into(), fresh).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["cursorRevision"], json!(revision + 1));
    let (_, events) = call("GET", "/v1/stream/orders/1?offset=-1".into(), Value::Null).await;
    let audits = events.as_array().unwrap().iter().filter(|e| e["type"] == "stream/processor-reprocessed").count();
    assert_eq!(audits, 1, "{events}");
    host.shutdown().await;
}

const INLINE: &str = r#"
[[processor]]
kind = "json-schema"
slug = "order-schema"
streams = "orders/*"
schemas."order/placed" = '''{"type":"object","required":["status"],"properties":{"status":{"type":"string"}}}'''

[[processor]]
kind = "counter"
slug = "order-count"
streams = "orders/*"
inline = true
"#;

/// Inline processors run in the HTTP function itself: an append the schema
/// refuses is answered 400 and writes nothing; an accepted one is counted
/// in its own transaction, which the operator API shows at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_runs_inline_processors_on_its_appends() {
    let Some(factory) = AwsFactory::new("the_function_runs_inline_processors").await else { return };
    let service = StreamService::new(factory.aws().substrate(), ServiceConfig::default());
    let env: HashMap<&str, String> = HashMap::from([("DS_PROCESSORS_TOML", INLINE.to_owned())]);
    let settings = ds_config::Settings::new(move |k: &str| env.get(k).cloned());
    let mut ops = lambda_http_fn::operations(&settings).unwrap();
    ops.processors = lambda_http_fn::processors(&settings, &service).await.unwrap();
    let router = ds_http::router_with(service, lambda_http_fn::http_config_from_env().unwrap(), ops);
    let handler = lambda_http_fn::handler(router);
    let call = |method: &'static str, target: String, body: String| {
        let handler = handler.clone();
        async move {
            let resp = handler.oneshot(event(method, &target, &body).into()).await.unwrap();
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let stream = format!("orders/inline-{nanos}");
    assert_eq!(call("PUT", format!("/v1/stream/{stream}"), String::new()).await.0, 201);
    let good = json!({"type": "order/placed", "payload": {"status": "new"}}).to_string();
    let bad = json!({"type": "order/placed", "payload": {"status": 7}}).to_string();
    assert_eq!(call("POST", format!("/v1/stream/{stream}"), good.clone()).await.0, 204);
    let (status, refused) = call("POST", format!("/v1/stream/{stream}"), bad).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["processor"], "order-schema", "{refused}");
    assert_eq!(call("POST", format!("/v1/stream/{stream}"), good).await.0, 204);
    let (status, shown) = call("GET", format!("/v1/processors/order-count/streams/{stream}"), String::new()).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["state"]["count"], 2, "{shown}");
    assert_eq!(shown["reducedThrough"], shown["tail"], "{shown}");
    let (_, schema) = call("GET", format!("/v1/processors/order-schema/streams/{stream}"), String::new()).await;
    assert_eq!(schema["inline"]["rejections"], 1, "{schema}");
}

const STATE: &str = r#"
[[processor]]
kind = "state"
slug = "users"
streams = "state/*"
"#;

async fn call<H>(handler: H, method: &str, target: String, body: String) -> (u16, Value)
where
    H: tower::Service<
        lambda_http::Request,
        Response = lambda_http_fn::LambdaResponse,
        Error = std::convert::Infallible,
    >,
{
    let resp = handler.oneshot(event(method, &target, &body).into()).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
}

/// The `state` kind in the function over the AWS substrate: the live state
/// read, a compaction on request (the snapshot lands at the tail, the
/// history before it answers 410), and another instance (its own, empty
/// views) folding the same state from the compacted stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_serves_and_compacts_state_views() {
    let Some(factory) = AwsFactory::new("the_function_serves_and_compacts_state_views").await else { return };
    let instance = || async {
        let service = StreamService::new(factory.aws().substrate(), ServiceConfig::default());
        let env: HashMap<&str, String> = HashMap::from([("DS_PROCESSORS_TOML", STATE.to_owned())]);
        let settings = ds_config::Settings::new(move |k: &str| env.get(k).cloned());
        let mut ops = lambda_http_fn::operations(&settings).unwrap();
        ops.processors = lambda_http_fn::processors(&settings, &service).await.unwrap();
        let router = ds_http::router_with(service, lambda_http_fn::http_config_from_env().unwrap(), ops);
        lambda_http_fn::handler(router)
    };
    let (first, second) = (instance().await, instance().await);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let stream = format!("state/s{nanos}");
    assert_eq!(call(first.clone(), "PUT", format!("/v1/stream/{stream}"), String::new()).await.0, 201);
    let upserts: Vec<Value> = (0..60)
        .map(|i| json!({"type": "user", "key": format!("u{}", i % 5), "value": {"v": i}, "headers": {"operation": "upsert"}}))
        .collect();
    let body = Value::Array(upserts).to_string();
    assert_eq!(call(first.clone(), "POST", format!("/v1/stream/{stream}"), body).await.0, 204);
    let expected =
        json!({"user": {"u0": {"v": 55}, "u1": {"v": 56}, "u2": {"v": 57}, "u3": {"v": 58}, "u4": {"v": 59}}});
    let (status, read) =
        call(first.clone(), "GET", format!("/v1/processors/users/state/{stream}"), String::new()).await;
    assert_eq!((status, read["state"].clone()), (200, expected.clone()), "{read}");

    let (status, report) =
        call(first.clone(), "POST", format!("/v1/processors/users/compact/{stream}"), "{}".into()).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["outcome"], "compacted", "{report}");
    assert_eq!(report["rows"], 5);
    let at = report["snapshotAt"].as_u64().unwrap();
    assert_eq!(report["earliestOffset"], at);
    let (status, gone) = call(first.clone(), "GET", format!("/v1/stream/{stream}?offset=-1"), String::new()).await;
    assert_eq!(status, 200);
    let messages = gone.as_array().unwrap();
    assert_eq!((messages.len(), messages[0]["headers"]["control"].clone()), (7, json!("snapshot-start")));
    let zero = "0000000000000000_0000000000000000";
    assert_eq!(call(first.clone(), "GET", format!("/v1/stream/{stream}?offset={zero}"), String::new()).await.0, 410);
    let (status, read) = call(second, "GET", format!("/v1/processors/users/state/{stream}"), String::new()).await;
    assert_eq!((status, read["state"].clone()), (200, expected), "{read}");
    assert_eq!(read["summary"]["foldedFrom"], at, "the other instance folded only the snapshot and after");
}
