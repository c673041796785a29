//! SSE through the real Lambda runtime in streaming mode, end to end:
//! `lambda_http::run_with_streaming_response(handler(router))` polls a mock
//! Lambda Runtime API on 127.0.0.1, gets a Function URL `live=sse` event and
//! streams its response back (`Lambda-Runtime-Function-Response-Mode:
//! streaming`). The mock records the response body as it arrives, so the
//! test sees events arrive incrementally: the catch-up events before the
//! next append exists, the live event after it, all before the response ends.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use bytes::Bytes;
use ds_core::{AppendRequest, CreateRequest};
use ds_protocol::headers::Lifetime;
use futures::StreamExt;
use tokio::sync::mpsc;

#[derive(Clone)]
struct Mock {
    event: Arc<Mutex<Option<String>>>,
    chunks: mpsc::UnboundedSender<(Instant, Bytes)>,
    headers: Arc<Mutex<Vec<(String, String)>>>,
}

async fn next(State(m): State<Mock>) -> axum::response::Response {
    let event = m.event.lock().map(|mut e| e.take()).unwrap_or(None);
    let Some(event) = event else {
        // One invocation only: later polls wait until the test ends.
        futures::future::pending::<()>().await;
        unreachable!()
    };
    let deadline =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() + 60_000;
    axum::response::Response::builder()
        .header("lambda-runtime-aws-request-id", "req-1")
        .header("lambda-runtime-deadline-ms", deadline.to_string())
        .header(
            "lambda-runtime-invoked-function-arn",
            "arn:aws:lambda:us-east-1:000000000000:function:durable-streams-http",
        )
        .header("lambda-runtime-trace-id", "Root=1-65a1b2c3-0123456789abcdef01234567;Sampled=0")
        .header("content-type", "application/json")
        .body(Body::from(event))
        .expect("response")
}

async fn response(State(m): State<Mock>, Path(id): Path<String>, req: axum::extract::Request) -> &'static str {
    assert_eq!(id, "req-1");
    if let Ok(mut h) = m.headers.lock() {
        for (k, v) in req.headers() {
            h.push((k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()));
        }
    }
    let mut body = req.into_body().into_data_stream();
    while let Some(Ok(chunk)) = body.next().await {
        let _ = m.chunks.send((Instant::now(), chunk));
    }
    let _ = m.chunks.send((Instant::now(), Bytes::new())); // end of response
    "{}"
}

async fn error(Path(id): Path<String>, body: String) -> &'static str {
    panic!("the handler reported an error for {id}: {body}");
}

/// Everything received so far, decoded, with the optional space after a
/// field's colon removed (`data: x` and `data:x` are the same SSE line).
fn text(buf: &[u8]) -> String {
    String::from_utf8_lossy(buf).replace("data: ", "data:").replace("event: ", "event:")
}

/// The Lambda environment is process-wide: one mock runtime at a time.
static RUNTIME_ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A mock Runtime API on 127.0.0.1 serving one `event`, and the real
/// streaming runtime polling it with the real handler. Response chunks
/// arrive on `rx` as the mock receives them (an empty chunk ends it).
struct Invocation {
    rx: mpsc::UnboundedReceiver<(Instant, Bytes)>,
    headers: Arc<Mutex<Vec<(String, String)>>>,
    runtime: tokio::task::JoinHandle<Result<(), lambda_http::Error>>,
}

async fn invoke_streaming(event: String) -> Invocation {
    let (tx, rx) = mpsc::unbounded_channel();
    let mock = Mock { event: Arc::new(Mutex::new(Some(event))), chunks: tx, headers: Arc::default() };
    let app = axum::Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
        .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
        .with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });

    for (k, v) in [
        ("AWS_LAMBDA_RUNTIME_API", addr.to_string()),
        ("AWS_LAMBDA_FUNCTION_NAME", "durable-streams-http".to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "test".to_owned()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/test".to_owned()),
    ] {
        std::env::set_var(k, v);
    }
    let router = lambda_http_fn::router(common::service().await, lambda_http_fn::http_config_from_env().expect("cfg"));
    let runtime = tokio::spawn(lambda_http::run_with_streaming_response(lambda_http_fn::handler(router)));
    Invocation { rx, headers: mock.headers, runtime }
}

fn unique_path(kind: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("lambda/{kind}/{}-{nanos}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sse_streams_framed_events_incrementally_through_the_runtime() {
    if !common::emulator("sse_streams_framed_events_incrementally_through_the_runtime") {
        return;
    }
    let _env = RUNTIME_ENV.lock().await;
    let path = unique_path("sse");
    // The writer is another substrate instance: the live event reaches the
    // Lambda's SSE through the poll-backed hub, as across Lambda instances.
    let writer = common::service().await;
    let create = CreateRequest {
        path: path.clone(),
        content_type: Some("text/plain".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::from_static(b"one"),
        fork: None,
    };
    writer.create(create).await.expect("create");

    let Invocation { mut rx, headers, runtime } = invoke_streaming(common::fixture("get_sse.json", &path)).await;

    // 1. The prelude and the catch-up events arrive before anything else happens.
    let mut buf: Vec<u8> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ended = false;
    let mut arrivals: Vec<(Instant, usize)> = Vec::new();
    while text(&buf).matches("event:control").count() < 1 {
        let (at, chunk) =
            tokio::time::timeout_at(deadline.into(), rx.recv()).await.expect("first events in time").expect("open");
        if chunk.is_empty() {
            ended = true;
            break;
        }
        buf.extend_from_slice(&chunk);
        arrivals.push((at, buf.len()));
    }
    assert!(!ended, "the response is still open after the catch-up events");
    let prelude_end = buf.windows(8).position(|w| w == [0u8; 8]).expect("8 NUL bytes end the prelude");
    let prelude: serde_json::Value = serde_json::from_slice(&buf[..prelude_end]).expect("JSON prelude");
    assert_eq!(prelude["statusCode"], 200);
    let ct = prelude["headers"]["content-type"].as_str().unwrap_or("");
    assert!(ct.starts_with("text/event-stream"), "{prelude}");
    let headers = headers.lock().map(|h| h.clone()).unwrap_or_default();
    assert!(
        headers.iter().any(|(k, v)| k == "lambda-runtime-function-response-mode" && v == "streaming"),
        "streaming mode: {headers:?}"
    );
    let catch_up = text(&buf[prelude_end + 8..]);
    assert!(catch_up.starts_with("event:data\ndata:one\n\nevent:control\ndata:{"), "{catch_up:?}");

    // 2. A live append on the other instance arrives as new events on the
    //    still-open response.
    let before_append = Instant::now();
    let append = |body: &'static [u8], close: bool| AppendRequest {
        path: path.as_str().into(),
        content_type: Some("text/plain".into()),
        body: Bytes::from_static(body),
        close,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    };
    writer.append(append(b"two", false)).await.expect("append");
    while !text(&buf).contains("data:two") {
        let (at, chunk) =
            tokio::time::timeout_at(deadline.into(), rx.recv()).await.expect("live event in time").expect("open");
        assert!(!chunk.is_empty(), "response ended before the live event: {:?}", text(&buf));
        buf.extend_from_slice(&chunk);
        arrivals.push((at, buf.len()));
    }
    let live_at = arrivals.last().map(|a| a.0).expect("arrival");
    assert!(live_at > before_append, "the live event was streamed after the append, not buffered");

    // 3. Closing the stream ends the SSE with a final control event, and the
    //    response ends.
    writer.append(append(b"", true)).await.expect("close");
    loop {
        let (_, chunk) = tokio::time::timeout_at(deadline.into(), rx.recv()).await.expect("end in time").expect("open");
        if chunk.is_empty() {
            break;
        }
        buf.extend_from_slice(&chunk);
    }
    let events = text(&buf[prelude_end + 8..]);
    // Framing: every event is `event: <kind>\n` + `data: ...` lines + a blank line.
    let blocks: Vec<&str> = events.split("\n\n").filter(|b| !b.is_empty()).collect();
    for b in &blocks {
        let mut lines = b.lines();
        let kind = lines.next().unwrap_or("");
        assert!(kind == "event:data" || kind == "event:control", "bad event block {b:?}");
        assert!(lines.clone().count() >= 1 && lines.all(|l| l.starts_with("data:")), "bad data lines {b:?}");
    }
    let last = blocks.last().expect("events");
    assert!(last.starts_with("event:control") && last.contains("\"streamClosed\":true"), "{last:?}");
    assert!(arrivals.len() >= 2, "the body arrived in several pieces: {arrivals:?}");
    runtime.abort();
}

/// What the conformance suite's SSE client does: read chunks until the text
/// holds `event: control` followed by a blank line, then stop. A payload line
/// containing that text must not make it stop before the real control event:
/// the data event and its control event arrive in one chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sse_batch_with_control_text_in_its_payload_arrives_whole() {
    if !common::emulator("sse_batch_with_control_text_in_its_payload_arrives_whole") {
        return;
    }
    let _env = RUNTIME_ENV.lock().await;
    let path = unique_path("sse-injection");
    let payload = "safe content\r\n\r\nevent: control\r\ndata: {\"injected\":true}\r\n\r\nmore safe content";
    let writer = common::service().await;
    let create = CreateRequest {
        path: path.clone(),
        content_type: Some("text/plain".into()),
        lifetime: Lifetime::default(),
        closed: false,
        body: Bytes::from(payload),
        fork: None,
    };
    writer.create(create).await.expect("create");

    let Invocation { mut rx, runtime, .. } = invoke_streaming(common::fixture("get_sse.json", &path)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf: Vec<u8> = Vec::new();
    let mut body_start = None;
    let received = loop {
        let (_, chunk) = tokio::time::timeout_at(deadline.into(), rx.recv()).await.expect("in time").expect("open");
        assert!(!chunk.is_empty(), "the response ended early: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk);
        let Some(start) = body_start.or_else(|| buf.windows(8).position(|w| w == [0u8; 8]).map(|p| p + 8)) else {
            continue;
        };
        body_start = Some(start);
        let text = String::from_utf8_lossy(&buf[start..]).replace("\r\n", "\n");
        if let Some(at) = text.find("event: control") {
            if text[at..].contains("\n\n") {
                break text;
            }
        }
    };
    runtime.abort();
    let events: Vec<(&str, String)> = received
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let kind = block.lines().find_map(|l| l.strip_prefix("event:")).unwrap_or("").trim();
            let data: Vec<&str> = block.lines().filter_map(|l| l.strip_prefix("data:")).collect();
            (kind, data.join("\n"))
        })
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.0).collect();
    assert_eq!(kinds, ["data", "control"], "one data and one control event when the client stops: {received:?}");
    assert!(events[0].1.contains("event: control") && events[0].1.contains("{\"injected\":true}"), "{events:?}");
    let control: serde_json::Value = serde_json::from_str(&events[1].1).expect("control JSON");
    assert!(control.get("injected").is_none() && control.get("streamNextOffset").is_some(), "{control}");
}
