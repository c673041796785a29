#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ds_core::{ServiceConfig, StreamService};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::metrics::{Exchange, Metrics};
use crate::{App, Cors, HttpConfig, Operations};
use ds_serve::{serve_connection, ConnLimits};

/// The exchanges an app reported, without their latency.
#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

impl Metrics for Seen {
    fn exchange(&self, e: &Exchange) {
        let line = format!("{} {} {} in={} out={}", e.route, e.method, e.status, e.bytes_in, e.bytes_out);
        self.0.lock().unwrap().push(line);
    }

    fn live_readers(&self, _mode: &'static str, _delta: i64) {}
}

const ORIGIN: &str = "https://app.example";

fn app(seen: Arc<Seen>) -> App {
    app_with_cors(seen, Cors::parse(ORIGIN).unwrap())
}

fn app_with_cors(seen: Arc<Seen>, cors: Cors) -> App {
    let (sub, _due) = ds_store_memory::memory_substrate();
    let service = StreamService::new(sub, ServiceConfig::default());
    let ops = Operations { cors, metrics: Some(seen), store_name: "memory", ..Operations::default() };
    crate::app_with(service, HttpConfig { max_body_bytes: 16, ..HttpConfig::default() }, ops)
}

fn connect(app: App) -> DuplexStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve_connection(server, app, Arc::new(ConnLimits::default())));
    client
}

/// One whole response, as bytes, with its `Date` line taken out (the only
/// part that may differ between two servers).
async fn exchange(conn: &mut DuplexStream, request: &[u8]) -> String {
    conn.write_all(request).await.unwrap();
    let mut got = Vec::new();
    loop {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut slots);
        if let httparse::Status::Complete(head) = resp.parse(&got).unwrap() {
            let len = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map_or(0, |h| std::str::from_utf8(h.value).unwrap().parse::<usize>().unwrap());
            if got.len() >= head + len {
                assert_eq!(got.len(), head + len, "nothing after the response");
                break;
            }
        }
        let mut chunk = [0; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk)).await.expect("an answer").unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8(got).unwrap();
    text.split_inclusive("\r\n").filter(|line| !line.starts_with("date: ")).collect()
}

/// A `POST`, with `content-type: text/plain` unless `headers` name one.
fn post(target: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let typed = if headers.to_ascii_lowercase().contains("content-type") { "" } else { "content-type: text/plain\r\n" };
    let head = format!("POST {target} HTTP/1.1\r\nhost: h\r\n{typed}{headers}content-length: {}\r\n\r\n", body.len());
    [head.as_bytes(), body].concat()
}

#[tokio::test]
async fn a_direct_append_answers_byte_for_byte_as_the_router_does() {
    // Listed origins (`Vary`, an allowed origin or none), and any origin.
    for cors in [Cors::parse(ORIGIN).unwrap(), Cors::AnyOrigin] {
        compare_with_the_router(cors).await;
    }
}

async fn compare_with_the_router(cors: Cors) {
    let origin = format!("origin: {ORIGIN}\r\n");
    let producer = |seq: u64| format!("producer-id: p\r\nproducer-epoch: 0\r\nproducer-seq: {seq}\r\n");
    let requests: Vec<(Vec<u8>, u16)> = vec![
        (
            b"PUT /v1/stream/s HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n".to_vec(),
            201,
        ),
        (post("/v1/stream/s", "content-type: text/plain\r\n", b"a"), 204),
        (post("/v1/stream/s", &origin, b"bb"), 204),
        (post("/v1/stream/s", "Origin: https://other.example\r\n", b"c"), 204),
        (post("/v1/stream/s", &producer(0), b"d"), 200),
        (post("/v1/stream/s", &producer(0), b"d"), 204),
        (post("/v1/stream/s", &format!("{}{origin}", producer(5)), b"e"), 409),
        (post("/v1/stream/s", "content-type: application/json\r\n", b"{}"), 409),
        (post("/v1/stream/s", "producer-id: caf\u{e9}\r\n", b"f"), 400),
        (post("/v1/stream/s", "", b""), 400),
        (post("/v1/stream/s", "Stream-Seq: 0002\r\n", b"g"), 204),
        (post("/v1/stream/s", "stream-seq: 0001\r\n", b"h"), 409),
        (post("/v1/stream/nope", "", b"i"), 404),
        (post("/v1/stream/s%2Fx", "", b"j"), 404),
        (post("/v1/stream/s?x=1", "", b"k"), 204),
        (post("/v1/stream/a/../b", "", b"l"), 400),
        (post("/v1/stream/__ds/subscriptions/x", "", b"m"), 501),
        (post("/v1/stream/s", "stream-closed: true\r\n", b""), 204),
        (post("/v1/stream/s", "stream-closed: true\r\n", b""), 204),
        (post("/v1/stream/s", "", b"n"), 409),
        // Past `max_body_bytes`: 413, and the connection closes.
        (post("/v1/stream/s", "", &[b'x'; 17]), 413),
    ];
    let (seen_direct, seen_routed) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
    let served = app_with_cors(seen_direct.clone(), cors.clone());
    let mut direct = connect(served.clone());
    let mut routed = connect(app_with_cors(seen_routed.clone(), cors).without_direct());
    for (request, status) in &requests {
        let what = String::from_utf8_lossy(request);
        let a = exchange(&mut direct, request).await;
        let b = exchange(&mut routed, request).await;
        assert!(a.starts_with(&format!("HTTP/1.1 {status} ")), "{what}\n{a}");
        assert_eq!(a, b, "{what}");
        // RFC 9110 §8.6: a 204 has no length; every other answer says its own.
        assert_eq!(a.contains("content-length: "), *status != 204, "{what}\n{a}");
    }
    assert!(direct.read_u8().await.is_err(), "closed after the 413");
    assert!(routed.read_u8().await.is_err(), "closed after the 413");
    // All but the `PUT` and the three targets the router must see.
    let taken = served.direct().unwrap().taken.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(taken, requests.len() - 4);
    let (a, b) = (seen_direct.0.lock().unwrap().clone(), seen_routed.0.lock().unwrap().clone());
    assert_eq!(a.len(), requests.len());
    assert_eq!(a, b);
    assert_eq!(a[4], "stream_append POST 200 in=1 out=0");
    assert!(a[8].starts_with("stream_append POST 400 in=0 out="), "a bad header: the body is not read: {}", a[8]);
}

#[test]
fn what_is_served_directly() {
    let app = app(Arc::new(Seen::default()));
    let direct = app.direct().expect("no access control: appends are direct");
    let is_direct = |target| direct.path(target).is_some();
    for yes in ["/v1/stream/s", "/v1/stream/a/b", "/v1/stream/s%2Fx", "/v1/stream/a:b@c"] {
        assert!(is_direct(yes), "{yes}");
    }
    for no in [
        "/v1/stream/",
        "/v1/stream/s?x=1",
        "/v1/stream/s#f",
        "/v1/stream/a/../b",
        "/v1/stream/%ff",
        "/v1/stream/__ds/subscriptions/x",
        "/v1/stream/a b",
        "/v1/streams/a",
        "/health",
    ] {
        assert!(!is_direct(no), "{no}");
    }
    let guarded = Operations {
        access: Some(Arc::new(ds_auth::Authenticator::new(ds_auth::StaticTokens::default(), None))),
        ..Operations::default()
    };
    let (sub, _due) = ds_store_memory::memory_substrate();
    let app = crate::app_with(StreamService::new(sub, ServiceConfig::default()), HttpConfig::default(), guarded);
    assert!(app.direct().is_none(), "access control needs the router's request");
}

/// One random append: mostly valid (the stream's content type, whole
/// producer triples, JSON bodies for the JSON stream), with every kind of
/// refusal mixed in (mismatched or missing headers, bad values, closed
/// streams, bodies over the limit, unknown streams).
fn random_append(rng: &mut impl rand::Rng) -> Vec<u8> {
    let (target, own_type, bodies): (&str, &str, &[&str]) = match rng.gen_range(0..10) {
        0..=3 => ("/v1/stream/t", "text/plain", &["a", "hello", "0123456789"]),
        4..=6 => ("/v1/stream/j", "application/json", &["{}", "[1,2]", "[]", "{\"k\":", "3"]),
        7..=8 => ("/v1/stream/a%2Fb", "application/octet-stream", &["x", "yz"]),
        _ => ("/v1/stream/missing", "text/plain", &["a"]),
    };
    let mut headers = String::new();
    match rng.gen_range(0..10) {
        0..=6 => headers.push_str(&format!("Content-Type: {own_type}\r\n")),
        7 => headers.push_str("content-type: application/json\r\n"),
        8 => headers.push_str("content-type: text/plain\r\n"),
        _ => {}
    }
    match rng.gen_range(0..20) {
        0..=7 => {}
        8..=18 => headers.push_str(&format!(
            "producer-id: p{}\r\nProducer-Epoch: {}\r\nproducer-seq: {}\r\n",
            rng.gen_range(1..3),
            rng.gen_range(0..2),
            rng.gen_range(0..4)
        )),
        _ => headers.push_str("producer-id: p1\r\nproducer-epoch: x\r\n"),
    }
    if rng.gen_bool(0.2) {
        headers.push_str(&format!("Stream-Seq: {:03}\r\n", rng.gen_range(0..40)));
    }
    if rng.gen_bool(0.2) {
        headers.push_str(if rng.gen_bool(0.5) {
            "origin: https://app.example\r\n"
        } else {
            "Origin: https://b.example\r\n"
        });
    }
    if rng.gen_bool(0.03) {
        headers.push_str("x-other: caf\u{e9}\r\nproducer-id: caf\u{e9}\r\n");
    }
    let body = match rng.gen_range(0..40) {
        0 => "0123456789abcdefXYZ",
        1 => "",
        _ => bodies[rng.gen_range(0..bodies.len())],
    };
    if rng.gen_bool(0.005) {
        headers.push_str("stream-closed: true\r\n");
    }
    post(target, &headers, body.as_bytes())
}

#[tokio::test]
async fn random_appends_are_answered_alike_both_ways() {
    use rand::SeedableRng;
    let creates: [&[u8]; 3] = [
        b"PUT /v1/stream/t HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n",
        b"PUT /v1/stream/j HTTP/1.1\r\nhost: h\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
        b"PUT /v1/stream/a%2Fb HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n",
    ];
    for seed in 0..4u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (seen_direct, seen_routed) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
        let served = app(seen_direct.clone());
        let routed_app = app(seen_routed.clone()).without_direct();
        let (mut direct, mut routed) = (connect(served.clone()), connect(routed_app.clone()));
        for create in creates {
            assert_eq!(exchange(&mut direct, create).await, exchange(&mut routed, create).await);
        }
        for i in 0..300 {
            let request = random_append(&mut rng);
            let a = exchange(&mut direct, &request).await;
            let b = exchange(&mut routed, &request).await;
            assert_eq!(a, b, "seed {seed}, request {i}: {}", String::from_utf8_lossy(&request));
            if a.contains("\r\nconnection: close\r\n") {
                (direct, routed) = (connect(served.clone()), connect(routed_app.clone()));
            }
        }
        let seen = seen_direct.0.lock().unwrap().clone();
        assert_eq!(seen, *seen_routed.0.lock().unwrap(), "seed {seed}: the metrics");
        let with = |status: &str| seen.iter().filter(|e| e.contains(&format!(" POST {status} "))).count();
        for status in ["200", "204", "400", "404", "409", "413"] {
            assert!(with(status) >= 5, "seed {seed}: {status} answered {} times: {seen:?}", with(status));
        }
        let taken = served.direct().unwrap().taken.load(std::sync::atomic::Ordering::Relaxed);
        assert!(taken > 250, "seed {seed}: most appends were direct ({taken})");
    }
}
