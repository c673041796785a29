//! OpenTelemetry end to end, on the real server binary: with the `OTEL_*`
//! variables pointing at an in-process OTLP/HTTP receiver on 127.0.0.1, an
//! append carrying a W3C `traceparent` is relayed by an outbox processor to
//! a stream whose subscription's webhook (another in-process receiver) is
//! then called. One trace id must run through the exported HTTP server span
//! (a child of the `traceparent` sent), the processor step span, the
//! webhook client span and the `traceparent` header the webhook got. No
//! exported attribute or event may hold the stream content or the bearer
//! token the request carried. And without the variables nothing is
//! exported and the webhook gets no `traceparent`.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use ds_e2e::{client, Server, ServerOpts, Store};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";
const CONTENT: &str = "content-marker-7f3a9c";
const TOKEN: &str = "token-marker-51b2e8";

const PROCESSORS: &str = r#"
[[processor]]
kind = "outbox"
slug = "relay"
streams = "orders/*"
target = "feed"
create_target = true
"#;

/// Everything one in-process receiver got: OTLP export requests, or the
/// webhook's `traceparent` headers (`None`: a delivery without one).
#[derive(Default)]
struct Got {
    exports: Mutex<Vec<ExportTraceServiceRequest>>,
    hooks: Mutex<Vec<Option<String>>>,
}

async fn traces(State(got): State<Arc<Got>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP/protobuf export request");
    got.exports.lock().unwrap().push(request);
    // An empty ExportTraceServiceResponse.
    Vec::new()
}

async fn hook(State(got): State<Arc<Got>>, headers: HeaderMap) -> &'static str {
    let traceparent = headers.get("traceparent").map(|v| v.to_str().unwrap().to_owned());
    got.hooks.lock().unwrap().push(traceparent);
    "{}"
}

/// Both receivers on one 127.0.0.1 port: `/v1/traces` and `/hook`.
async fn receivers() -> (SocketAddr, Arc<Got>) {
    let got = Arc::new(Got::default());
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(traces))
        .route("/hook", axum::routing::post(hook))
        .with_state(Arc::clone(&got));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, got)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn spans(got: &Got) -> Vec<Span> {
    let exports = got.exports.lock().unwrap();
    exports.iter().flat_map(|e| &e.resource_spans).flat_map(|r| &r.scope_spans).flat_map(|s| s.spans.clone()).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let value = span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    })
}

/// Wait until `done` holds of what was received, or fail with `what`.
async fn until(got: &Got, what: &str, done: impl Fn(&Got) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(got) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; spans: {:#?}", names(&spans(got)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(spans: &[Span]) -> Vec<(String, String)> {
    spans.iter().map(|s| (s.name.clone(), hex(&s.trace_id))).collect()
}

async fn start(env: Vec<(String, String)>, addr: SocketAddr) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("processors.toml");
    std::fs::write(&config, PROCESSORS).unwrap();
    let opts = ServerOpts {
        store: Store::Local,
        extra_args: vec!["--webhook-allow-loopback".into(), "--processors".into(), config.display().to_string()],
        env,
        ..ServerOpts::default()
    };
    let server = Server::start(opts).await.unwrap();
    // The configuration is read at start-up: the file may go.
    drop(dir);
    let subscription =
        json!({"type": "webhook", "streams": ["feed"], "webhook": {"url": format!("http://{addr}/hook")}});
    let created = client()
        .put(server.url("__ds/subscriptions/otel-feed"))
        .header("content-type", "application/json")
        .body(subscription.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    let put = client().put(server.url("orders/1")).header("content-type", "application/json").send().await.unwrap();
    assert_eq!(put.status(), 201);
    server
}

/// The traced append: a plain HTTP/1.1 POST (the server's fast path), with
/// a bearer token the server ignores (no access control) but must not export.
async fn traced_append(server: &Server) {
    let event = json!({"type": "order/placed", "payload": {"id": CONTENT}});
    let resp = client()
        .post(server.url("orders/1"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"))
        .body(event.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
}

#[tokio::test]
async fn one_trace_runs_from_the_append_through_the_processor_step_to_the_webhook() {
    let (addr, got) = receivers().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_SERVICE_NAME", "ds-e2e-otel".to_owned()),
    ];
    let server = start(env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(), addr).await;
    traced_append(&server).await;

    until(&got, "the webhook", |g| !g.hooks.lock().unwrap().is_empty()).await;
    let header = got.hooks.lock().unwrap()[0].clone().expect("the webhook request carries a traceparent");
    let parts: Vec<&str> = header.split('-').collect();
    assert_eq!((parts.len(), parts[0], parts[1], parts[3]), (4, "00", TRACE_ID, "01"), "{header}");

    let in_trace = |g: &Got, name: &str| spans(g).into_iter().find(|s| s.name == name && hex(&s.trace_id) == TRACE_ID);
    // The webhook's client span is named by its method, as the conventions ask.
    for name in ["POST /v1/stream/{path}", "processor_step", "POST"] {
        until(&got, name, |g| in_trace(g, name).is_some()).await;
    }
    let http = in_trace(&got, "POST /v1/stream/{path}").unwrap();
    assert_eq!(hex(&http.parent_span_id), PARENT_SPAN_ID, "the server span continues the traceparent sent");
    assert_eq!(http.kind, SpanKind::Server as i32);
    assert_eq!(attribute(&http, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(attribute(&http, "http.route").as_deref(), Some("/v1/stream/{path}"));
    assert_eq!(attribute(&http, "url.path").as_deref(), Some("/v1/stream/orders/1"));
    assert_eq!(attribute(&http, "http.response.status_code").as_deref(), Some("204"));
    let step = in_trace(&got, "processor_step").unwrap();
    assert_eq!(attribute(&step, "slug").as_deref(), Some("relay"));
    let webhook = in_trace(&got, "POST").unwrap();
    assert_eq!(webhook.kind, SpanKind::Client as i32);
    assert_eq!(attribute(&webhook, "otel.name"), None, "the name field is the span's name, not an attribute");
    assert_eq!(hex(&webhook.span_id), parts[2], "the header names the delivery's own span");

    // Nothing exported (attributes, events, resource) holds content or the token.
    let exported = format!("{:?}", got.exports.lock().unwrap());
    assert!(!exported.contains(CONTENT), "stream content in an exported span");
    assert!(!exported.contains(TOKEN), "the bearer token in an exported span");
}

#[tokio::test]
async fn without_otel_variables_nothing_is_exported_and_no_traceparent_is_sent() {
    let (addr, got) = receivers().await;
    // The receiver is where the exporter's default would look only by
    // accident; the point is that no exporter exists at all.
    let server = start(Vec::new(), addr).await;
    traced_append(&server).await;
    until(&got, "the webhook", |g| !g.hooks.lock().unwrap().is_empty()).await;
    assert_eq!(got.hooks.lock().unwrap()[0], None, "no traceparent without export");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(got.exports.lock().unwrap().is_empty());
}
