//! The load tool must report a server that acknowledges appends but loses
//! them as a failure. A tiny in-process Durable Streams fake (PUT, POST,
//! catch-up GET) acknowledges every append but, when lossy, silently drops
//! every 100th; `ds-load run` must exit non-zero and say FAIL. The same fake
//! without the loss must pass, so the check is not failing for another reason.

use axum::{
    body::Bytes,
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::put,
    Router,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Fake {
    streams: Mutex<HashMap<String, Vec<u8>>>,
    appends: AtomicU64,
    lossy: bool,
}

/// Offsets are byte positions, zero-padded so they sort lexicographically.
fn offset(n: usize) -> String {
    format!("{n:016}")
}

fn with_offset(status: StatusCode, next: usize) -> Response {
    let mut h = HeaderMap::new();
    h.insert("stream-next-offset", offset(next).parse().expect("header"));
    (status, h).into_response()
}

async fn create(State(f): State<Arc<Fake>>, Path(name): Path<String>, body: Bytes) -> Response {
    let mut streams = f.streams.lock().expect("lock");
    let s = streams.entry(name).or_insert_with(|| body.to_vec());
    with_offset(StatusCode::CREATED, s.len())
}

async fn append(State(f): State<Arc<Fake>>, Path(name): Path<String>, body: Bytes) -> Response {
    let n = f.appends.fetch_add(1, Ordering::SeqCst) + 1;
    let mut streams = f.streams.lock().expect("lock");
    let Some(s) = streams.get_mut(&name) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if body.is_empty() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    if f.lossy && n % 100 == 0 {
        // The bug under test: acknowledged like any other append, never stored.
        let pretend = s.len() + body.len();
        return with_offset(StatusCode::NO_CONTENT, pretend);
    }
    s.extend_from_slice(&body);
    with_offset(StatusCode::NO_CONTENT, s.len())
}

/// Catch-up read in chunks of at most 4 KiB, so readers must follow
/// Stream-Next-Offset across several responses.
async fn read(
    State(f): State<Arc<Fake>>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let streams = f.streams.lock().expect("lock");
    let Some(s) = streams.get(&name) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let start = match q.get("offset").map(String::as_str) {
        None | Some("-1") => 0,
        Some(o) => match o.parse::<usize>() {
            Ok(v) if v <= s.len() => v,
            _ => return StatusCode::BAD_REQUEST.into_response(),
        },
    };
    let end = (start + 4096).min(s.len());
    let mut h = HeaderMap::new();
    h.insert("stream-next-offset", offset(end).parse().expect("header"));
    if end == s.len() {
        h.insert("stream-up-to-date", "true".parse().expect("header"));
    }
    (StatusCode::OK, h, s[start..end].to_vec()).into_response()
}

async fn start_fake(lossy: bool) -> String {
    let state = Arc::new(Fake { lossy, ..Default::default() });
    let app = Router::new().route("/v1/stream/{name}", put(create).post(append).get(read)).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}")
}

/// Runs the real binary: P1 (all three append runs) and P2, kept short.
async fn run_tool(base: &str) -> (bool, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ds-load"))
        .args(["run", "--base", base, "--prefix", "/v1/stream", "--workloads", "p1,p2"])
        .args(["--p1-secs", "0.5", "--p1-concurrency", "8", "--p2-records", "1000", "--p2-reads", "1"])
        .output()
        .await
        .expect("run ds-load");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lossy_server_is_reported_as_failure() {
    let base = start_fake(true).await;
    let (ok, text) = run_tool(&base).await;
    assert!(!ok, "ds-load must exit non-zero against a lossy server:\n{text}");
    assert!(text.contains("RESULT: FAIL"), "{text}");
    assert!(text.contains("data lost"), "the report must say data was lost:\n{text}");
    // Every measured metric fails: none of the lossy server's numbers may
    // appear as a result.
    for line in text.lines().filter(|l| l.starts_with("| P")) {
        assert!(line.contains("**FAIL**"), "lossy server got a number: {line}\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_fake_passes() {
    let base = start_fake(false).await;
    let (ok, text) = run_tool(&base).await;
    assert!(ok, "ds-load must pass against a correct server:\n{text}");
    assert!(text.contains("RESULT: OK"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_check_names_the_loss() {
    let base = start_fake(true).await;
    let client = ds_load::client::Client::new(ds_load::client::Target::new(&base, "/v1/stream")).expect("client");
    // Four writers for 1 s: thousands of appends, so many are dropped.
    let r = ds_load::workloads::append::throughput(&client, "lib", 1, 4, std::time::Duration::from_secs(1), None).await;
    let err = format!("{:#}", r.expect_err("lossy server must fail verification"));
    assert!(err.contains("data lost"), "{err}");
}
