//! The router over the memory substrate, driven in-process (axum's testing
//! pattern): behaviour the black-box conformance suite cannot pin down.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use ds_core::{Clock, ServiceConfig, StreamService};
use http_body_util::BodyExt;
use tower::ServiceExt;

struct App {
    router: Router,
    service: StreamService,
    clock: Clock,
}

fn app(cfg: ServiceConfig, max_body_bytes: usize) -> App {
    let (sub, _due) = ds_store_memory::memory_substrate();
    let clock = Clock::manual(1_800_000_000_000);
    let service = StreamService::new(sub, cfg).with_clock(clock.clone());
    let router =
        ds_http::router(service.clone(), ds_http::HttpConfig { max_body_bytes, ..ds_http::HttpConfig::default() });
    App { router, service, clock }
}

fn default_app() -> App {
    app(ServiceConfig { long_poll_timeout: Duration::from_millis(300), ..ServiceConfig::default() }, 1 << 20)
}

struct Resp {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn call(app: &App, method: &str, uri: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app.router.clone().oneshot(req.body(Body::from(body.to_vec())).unwrap()).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    Resp { status, headers, body }
}

const TEXT: (&str, &str) = ("content-type", "text/plain");

#[tokio::test]
async fn forks_soft_delete_and_cascade_gc() {
    let a = default_app();
    assert_eq!(call(&a, "PUT", "/v1/stream/src", &[TEXT], b"abc").await.status, StatusCode::CREATED);
    let fork = [TEXT, ("stream-forked-from", "/v1/stream/src")];
    assert_eq!(call(&a, "PUT", "/v1/stream/f1", &fork, b"").await.status, StatusCode::CREATED);
    let fork2 = [TEXT, ("stream-forked-from", "/v1/stream/f1")];
    assert_eq!(call(&a, "PUT", "/v1/stream/f2", &fork2, b"Z").await.status, StatusCode::CREATED);

    // Deleting referenced streams only soft-deletes them: 410, path blocked, data kept.
    assert_eq!(call(&a, "DELETE", "/v1/stream/src", &[], b"").await.status, StatusCode::NO_CONTENT);
    assert_eq!(call(&a, "GET", "/v1/stream/src", &[], b"").await.status, StatusCode::GONE);
    assert_eq!(call(&a, "PUT", "/v1/stream/src", &[TEXT], b"").await.status, StatusCode::CONFLICT);
    assert_eq!(call(&a, "DELETE", "/v1/stream/f1", &[], b"").await.status, StatusCode::NO_CONTENT);
    assert_eq!(call(&a, "GET", "/v1/stream/f2?offset=-1", &[], b"").await.body, b"abcZ");

    // Deleting the last fork collects the whole soft-deleted chain.
    assert_eq!(call(&a, "DELETE", "/v1/stream/f2", &[], b"").await.status, StatusCode::NO_CONTENT);
    let store = &a.service.substrate().store;
    for p in ["src", "f1", "f2"] {
        assert!(
            store.read_meta(&ds_core::StreamHandle::detached(p)).await.unwrap().is_none(),
            "{p} should be collected"
        );
    }
    assert_eq!(call(&a, "PUT", "/v1/stream/src", &[TEXT], b"").await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn sliding_ttl_and_absolute_expiry() {
    let a = default_app();
    call(&a, "PUT", "/v1/stream/ttl", &[TEXT, ("stream-ttl", "10")], b"x").await;
    a.clock.advance(8_000);
    assert_eq!(call(&a, "GET", "/v1/stream/ttl", &[], b"").await.status, StatusCode::OK); // resets the window
    a.clock.advance(8_000);
    assert_eq!(call(&a, "HEAD", "/v1/stream/ttl", &[], b"").await.status, StatusCode::OK); // HEAD does not reset
    a.clock.advance(3_000);
    assert_eq!(call(&a, "GET", "/v1/stream/ttl", &[], b"").await.status, StatusCode::NOT_FOUND);
    assert!(
        a.service.substrate().store.read_meta(&ds_core::StreamHandle::detached("ttl")).await.unwrap().is_none(),
        "expired stream removed"
    );

    call(&a, "PUT", "/v1/stream/abs", &[TEXT, ("stream-expires-at", "2027-01-15T08:00:05Z")], b"x").await;
    a.clock.set(1_800_000_000_000 + 10_000); // 2027-01-15T08:00:10Z
    assert_eq!(call(&a, "POST", "/v1/stream/abs", &[TEXT], b"y").await.status, StatusCode::NOT_FOUND);
    assert_eq!(call(&a, "PUT", "/v1/stream/abs", &[TEXT], b"new").await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn reads_are_bounded_and_json_splits_on_message_boundaries() {
    let a = app(ServiceConfig { max_read_bytes: 10, ..ServiceConfig::default() }, 1 << 20);
    call(&a, "PUT", "/v1/stream/j", &[("content-type", "application/json")], br#"[1, 22, 333, 4444, 55555]"#).await;
    let mut offset = "-1".to_owned();
    let mut values = Vec::new();
    let mut reads = 0;
    loop {
        let r = call(&a, "GET", &format!("/v1/stream/j?offset={offset}"), &[], b"").await;
        reads += 1;
        let batch: Vec<u64> = serde_json::from_slice(&r.body).unwrap();
        values.extend(batch);
        offset = r.header("stream-next-offset").unwrap().to_owned();
        if r.header("stream-up-to-date").is_some() {
            break;
        }
        assert!(reads < 10);
    }
    assert_eq!(values, vec![1, 22, 333, 4444, 55555]);
    assert!(reads >= 2, "a 10-byte budget must split the read");
}

#[tokio::test]
async fn oversized_bodies_get_413_and_paths_are_validated() {
    let a = app(ServiceConfig::default(), 16);
    assert_eq!(call(&a, "PUT", "/v1/stream/s", &[TEXT], &[b'x'; 17]).await.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(call(&a, "PUT", "/v1/stream/s", &[TEXT], &[b'x'; 16]).await.status, StatusCode::CREATED);
    assert_eq!(call(&a, "POST", "/v1/stream/s", &[TEXT], &[b'x'; 17]).await.status, StatusCode::PAYLOAD_TOO_LARGE);
    for bad in ["/v1/stream/a/%2e%2e/b", "/v1/stream/a//b", "/v1/stream/a%00", "/v1/stream/%ff"] {
        let r = call(&a, "PUT", bad, &[TEXT], b"").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    let long = format!("/v1/stream/{}", "x".repeat(1025));
    assert_eq!(call(&a, "PUT", &long, &[TEXT], b"").await.status, StatusCode::BAD_REQUEST);
    assert_eq!(call(&a, "GET", "/v1/stream/__ds/subscriptions/x", &[], b"").await.status, StatusCode::NOT_IMPLEMENTED);
}

#[tokio::test]
async fn long_poll_wakes_on_append_and_ends_on_shutdown() {
    let a = app(ServiceConfig { long_poll_timeout: Duration::from_secs(30), ..ServiceConfig::default() }, 1 << 20);
    let created = call(&a, "PUT", "/v1/stream/lp", &[TEXT], b"").await;
    let tail = created.header("stream-next-offset").unwrap().to_owned();
    let uri = format!("/v1/stream/lp?offset={tail}&live=long-poll");
    let router = a.router.clone();
    let waiter = tokio::spawn(async move {
        let req = Request::get(uri).body(Body::empty()).unwrap();
        let resp = router.oneshot(req).await.unwrap();
        (resp.status(), resp.into_body().collect().await.unwrap().to_bytes())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    call(&a, "POST", "/v1/stream/lp", &[TEXT], b"hi").await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"hi"[..]));

    let uri = "/v1/stream/lp?offset=now&live=long-poll";
    let router = a.router.clone();
    let waiter = tokio::spawn(async move { router.oneshot(Request::get(uri).body(Body::empty()).unwrap()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.service.begin_shutdown();
    let resp = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap().unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT, "shutdown answers waiting long-polls at once");
}

#[tokio::test]
async fn sse_pairs_data_with_control_and_ends_at_eof() {
    let a = default_app();
    call(&a, "PUT", "/v1/stream/e", &[("content-type", "application/octet-stream")], &[0, 1, 2]).await;
    call(&a, "POST", "/v1/stream/e", &[("content-type", "application/octet-stream"), ("stream-closed", "true")], &[3])
        .await;
    let r = call(&a, "GET", "/v1/stream/e?offset=-1&live=sse", &[], b"").await;
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("stream-sse-data-encoding"), Some("base64"));
    let text = String::from_utf8(r.body).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[0], "event: data\ndata:AAECAw==");
    assert!(events[1].starts_with("event: control\ndata:{"));
    assert!(events[1].contains(r#""streamClosed":true"#) && !events[1].contains("streamCursor"));
}

#[tokio::test]
async fn idempotent_producer_retries_are_exactly_once() {
    let a = default_app();
    call(&a, "PUT", "/v1/stream/p", &[TEXT], b"").await;
    let h = |seq: &'static str| [TEXT, ("producer-id", "w"), ("producer-epoch", "0"), ("producer-seq", seq)];
    assert_eq!(call(&a, "POST", "/v1/stream/p", &h("0"), b"a").await.status, StatusCode::OK);
    assert_eq!(call(&a, "POST", "/v1/stream/p", &h("0"), b"a").await.status, StatusCode::NO_CONTENT);
    let gap = call(&a, "POST", "/v1/stream/p", &h("2"), b"c").await;
    assert_eq!(gap.status, StatusCode::CONFLICT);
    assert_eq!(gap.header("producer-expected-seq"), Some("1"));
    assert_eq!(call(&a, "POST", "/v1/stream/p", &h("1"), b"b").await.status, StatusCode::OK);
    assert_eq!(call(&a, "GET", "/v1/stream/p", &[], b"").await.body, b"ab");
}

#[tokio::test]
async fn a_public_url_is_the_base_of_location_urls() {
    let (sub, _due) = ds_store_memory::memory_substrate();
    let service = StreamService::new(sub, ServiceConfig::default());
    let ops =
        ds_http::Operations { public_url: Some("http://127.0.0.1:9/lambda-url/fn/".into()), ..Default::default() };
    let app = App {
        router: ds_http::router_with(service.clone(), ds_http::HttpConfig::default(), ops),
        service,
        clock: Clock::manual(0),
    };
    let r = call(&app, "PUT", "/v1/stream/a%20b", &[("host", "internal:1")], b"").await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.header("location"), Some("http://127.0.0.1:9/lambda-url/fn/v1/stream/a%20b"));
    let plain = default_app();
    let r = call(&plain, "PUT", "/v1/stream/a", &[("host", "internal:1")], b"").await;
    assert_eq!(r.header("location"), Some("http://internal:1/v1/stream/a"), "without it: the request's host");
}

#[tokio::test]
async fn append_acks_list_the_exposed_headers_only_for_browsers() {
    const EXPOSE: &str = "access-control-expose-headers";
    let a = default_app();
    call(&a, "PUT", "/v1/stream/c", &[TEXT], b"").await;
    let plain = call(&a, "POST", "/v1/stream/c", &[TEXT], b"x").await;
    assert_eq!(plain.status, StatusCode::NO_CONTENT);
    assert_eq!(plain.header("access-control-allow-origin"), Some("*"));
    assert_eq!(plain.header(EXPOSE), None, "no Origin: no browser to read the list");
    let browser = call(&a, "POST", "/v1/stream/c", &[TEXT, ("origin", "https://app.example")], b"y").await;
    assert!(browser.header(EXPOSE).unwrap().contains("stream-next-offset"));
    // A read may be cached and served to a browser later: always listed.
    let read = call(&a, "GET", "/v1/stream/c?offset=-1", &[], b"").await;
    assert!(read.header(EXPOSE).unwrap().contains("stream-next-offset"));
    assert_eq!(read.body, b"xy");
}

/// Retention on the wire: `Stream-Earliest-Offset` appears on HEAD and reads
/// only once a trim dropped history; a read before it is `410` with the
/// header and a JSON reason; `offset=-1` starts at it; a fork below it is
/// `410` too. Before any trim, nothing about retention shows.
#[tokio::test]
async fn reads_before_a_trim_answer_410_with_the_earliest_offset() {
    let app = default_app();
    let json = ("content-type", "application/json");
    assert_eq!(call(&app, "PUT", "/v1/stream/r", &[json], b"").await.status, StatusCode::CREATED);
    let mut ends = Vec::new();
    for i in 0..4 {
        let resp = call(&app, "POST", "/v1/stream/r", &[json], format!("{{\"i\":{i}}}").as_bytes()).await;
        ends.push(resp.header("stream-next-offset").unwrap().to_owned());
    }
    let head = call(&app, "HEAD", "/v1/stream/r", &[], b"").await;
    assert_eq!(head.header("stream-earliest-offset"), None, "no trim, no header");
    let read = call(&app, "GET", "/v1/stream/r?offset=-1", &[], b"").await;
    assert_eq!(read.header("stream-earliest-offset"), None);

    let boundary = ds_protocol::Offset::parse(&ends[1]).unwrap().position();
    app.service.trim("r", boundary).await.unwrap();
    let earliest = ends[1].as_str();
    let head = call(&app, "HEAD", "/v1/stream/r", &[], b"").await;
    assert_eq!(head.header("stream-earliest-offset"), Some(earliest));
    let gone = call(&app, "GET", &format!("/v1/stream/r?offset={}", ends[0]), &[], b"").await;
    assert_eq!(gone.status, StatusCode::GONE);
    assert_eq!(gone.header("stream-earliest-offset"), Some(earliest));
    let body: serde_json::Value = serde_json::from_slice(&gone.body).unwrap();
    assert_eq!(body["error"]["code"], "OFFSET_NOT_RETAINED");
    assert_eq!(body["error"]["earliest_offset"], earliest);
    assert!(body["error"]["message"].as_str().unwrap().contains("retention"), "{body}");

    let from_start = call(&app, "GET", "/v1/stream/r?offset=-1", &[], b"").await;
    assert_eq!(from_start.status, StatusCode::OK);
    assert_eq!(from_start.header("stream-earliest-offset"), Some(earliest));
    assert_eq!(from_start.body, br#"[{"i":2},{"i":3}]"#);
    let long_poll = call(&app, "GET", &format!("/v1/stream/r?offset={}&live=long-poll", ends[0]), &[], b"").await;
    assert_eq!(long_poll.status, StatusCode::GONE, "long-poll before the earliest offset");
    let sse = call(&app, "GET", &format!("/v1/stream/r?offset={}&live=sse", ends[0]), &[], b"").await;
    assert_eq!(sse.status, StatusCode::GONE, "SSE before the earliest offset");

    let fork = [("stream-forked-from", "r"), ("stream-fork-offset", ends[0].as_str())];
    let refused = call(&app, "PUT", "/v1/stream/f", &fork, b"").await;
    assert_eq!(refused.status, StatusCode::GONE, "a fork below the earliest offset");
    assert_eq!(refused.header("stream-earliest-offset"), Some(earliest));
}
