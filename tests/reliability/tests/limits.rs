//! Resource limits of the real server binary, each with a clear answer:
//! the live-reader cap (503 + Retry-After), the header-read, idle, body and
//! send timeouts, the maximum header size, and readers that never read.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use ds_e2e::{Server, ServerOpts, Store};
use ds_reliability::client::{Conn, Outcome, Response, Tcp};
use ds_reliability::gen::{After, Body, Req};
use ds_reliability::procfs;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn server(args: &[&str]) -> Server {
    server_with(args, "500ms").await
}

async fn server_with(args: &[&str], long_poll_timeout: &'static str) -> Server {
    let opts = ServerOpts {
        store: Store::Memory,
        extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
        long_poll_timeout,
        ..ServerOpts::default()
    };
    Server::start(opts).await.unwrap()
}

async fn exchange(server: &Server, req: Req) -> Response {
    let mut conn = Conn::open(&Tcp(server.addr)).await.unwrap();
    match conn.exchange(&req.bytes(), After::Read, false, Duration::from_secs(10)).await {
        Outcome::Response(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn create(server: &Server, name: &str, body: Vec<u8>) {
    let req = Req::new("PUT", format!("/v1/stream/{name}"))
        .header("content-type", "application/octet-stream")
        .body(Body::Sized(body));
    assert_eq!(exchange(server, req).await.status, 201);
}

/// Send a live read on a fresh connection and return the socket once the
/// response head has arrived (the reader then holds its slot).
async fn open_live(server: &Server, live: &str) -> (TcpStream, String) {
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    let req = format!("GET /v1/stream/s?offset=now&live={live} HTTP/1.1\r\nhost: x\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut byte)).await;
        match n {
            Ok(Ok(1)) => head.push(byte[0]),
            // A long-poll being held sends nothing yet: that is the point.
            Err(_) if head.is_empty() && live == "long-poll" => return (tcp, String::new()),
            other => panic!("reading the {live} head: {other:?}"),
        }
    }
    (tcp, String::from_utf8_lossy(&head).into_owned())
}

#[tokio::test]
async fn live_reader_cap_answers_503_with_retry_after() {
    let mut server = server_with(&["--max-live-readers", "4", "--sse-max-duration", "20s"], "20s").await;
    create(&server, "s", b"x".to_vec()).await;
    let mut held = Vec::new();
    for live in ["sse", "sse", "long-poll", "long-poll"] {
        let (tcp, head) = open_live(&server, live).await;
        assert!(live == "long-poll" || head.starts_with("HTTP/1.1 200"), "{live}: {head}");
        held.push(tcp);
    }
    for live in ["sse", "long-poll"] {
        let req = Req::new("GET", format!("/v1/stream/s?offset=now&live={live}"));
        let resp = exchange(&server, req).await;
        assert_eq!(resp.status, 503, "{live} beyond the cap");
        let wait: u64 = resp.header("retry-after").expect("Retry-After").parse().unwrap();
        assert!((1..=4).contains(&wait), "Retry-After {wait}");
        let body = String::from_utf8_lossy(&resp.body);
        assert!(body.contains("TOO_MANY_LIVE_READERS") && body.contains("4 live readers"), "{body}");
    }
    // Catch-up reads and appends are not live readers.
    assert_eq!(exchange(&server, Req::new("GET", "/v1/stream/s?offset=-1")).await.status, 200);
    // A reader that goes away frees its slot.
    drop(held.remove(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let req = Req::new("GET", "/v1/stream/s?offset=now&live=sse");
        let mut conn = Conn::open(&Tcp(server.addr)).await.unwrap();
        // The SSE response only ends at its max duration: a 200 head is enough.
        match conn.exchange(&req.bytes(), After::Read, false, Duration::from_millis(500)).await {
            Outcome::Hung => break, // admitted and streaming
            Outcome::Response(r) if r.status == 503 => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.assert_answers().await;
}

/// Bytes sent one at a time, `gap` apart, until the server closes; returns
/// how long that took and what it answered.
async fn trickle(server: &Server, bytes: &[u8], gap: Duration) -> (Duration, Vec<u8>) {
    let started = Instant::now();
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    for b in bytes {
        if tcp.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(gap).await;
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    (started.elapsed(), answer)
}

#[tokio::test]
async fn slow_heads_and_idle_connections_are_closed() {
    let mut server = server(&["--header-read-timeout", "1s", "--idle-timeout", "2s"]).await;
    // A head sent a byte every 100 ms takes 3.5 s: cut at the 1 s timeout.
    let head = b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-padding: 0123456789\r\n\r\n";
    let (took, answer) = trickle(&server, head, Duration::from_millis(100)).await;
    assert!(answer.is_empty(), "no answer to an unfinished head: {:?}", String::from_utf8_lossy(&answer));
    assert!(took < Duration::from_secs(3), "closed after {took:?}, want about 1s");
    // A connection that says nothing at all.
    let (took, _) = trickle(&server, b"", Duration::ZERO).await;
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "silent connection: {took:?}");

    // Keep-alive: requests 1 s apart keep the connection (idle timer resets)...
    let mut conn = Conn::open(&Tcp(server.addr)).await.unwrap();
    let health = Req::new("GET", "/health").bytes();
    for _ in 0..4 {
        match conn.exchange(&health, After::Read, false, Duration::from_secs(5)).await {
            Outcome::Response(r) => assert_eq!(r.status, 200),
            other => panic!("keep-alive request: {other:?}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // ...and an idle one is closed after about 2 s.
    let idle_from = Instant::now();
    assert!(conn.closed_within(Duration::from_secs(5)).await, "idle connection never closed");
    let idle = idle_from.elapsed();
    assert!(idle >= Duration::from_millis(900) && idle < Duration::from_secs(4), "idle close after {idle:?}");
    server.assert_answers().await;
}

#[tokio::test]
async fn oversized_heads_get_431() {
    let mut server = server(&["--max-header-bytes", "8KiB"]).await;
    let fits = exchange(&server, Req::new("GET", "/health").header("x-a", "a".repeat(7000))).await;
    assert_eq!(fits.status, 200);
    let mut conn = Conn::open(&Tcp(server.addr)).await.unwrap();
    let big = Req::new("GET", "/health").header("x-a", "a".repeat(9000)).bytes();
    match conn.exchange(&big, After::Read, false, Duration::from_secs(5)).await {
        Outcome::Response(r) => assert_eq!(r.status, 431),
        other => panic!("{other:?}"),
    }
    let many = (0..101).fold(Req::new("GET", "/health"), |r, i| r.header(&format!("x-{i}"), "1"));
    let mut conn = Conn::open(&Tcp(server.addr)).await.unwrap();
    match conn.exchange(&many.bytes(), After::Read, false, Duration::from_secs(5)).await {
        Outcome::Response(r) => assert_eq!(r.status, 431, "101 header lines"),
        other => panic!("{other:?}"),
    }
    server.assert_answers().await;
}

#[tokio::test]
async fn a_stalled_body_gets_408_and_changes_nothing() {
    let mut server = server(&["--body-read-timeout", "1s"]).await;
    create(&server, "s", b"base".to_vec()).await;
    let started = Instant::now();
    let mut conn = Conn::open(&Tcp(server.addr)).await.unwrap();
    let partial = b"POST /v1/stream/s HTTP/1.1\r\nhost: x\r\ncontent-type: application/octet-stream\r\n\
                    content-length: 100\r\n\r\nonly-part-of-it";
    match conn.exchange(partial, After::Stall, false, Duration::from_secs(10)).await {
        Outcome::Response(r) => {
            assert_eq!(r.status, 408);
            assert!(r.closes(), "408 must close the connection");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    let read = exchange(&server, Req::new("GET", "/v1/stream/s?offset=-1")).await;
    assert_eq!(read.body, b"base", "a stalled append must not land");
    server.assert_answers().await;
}

/// Readers that never read: a non-reading SSE reader of a big stream and a
/// client pipelining requests without reading answers. Buffering stays
/// bounded, and the send timeout disconnects them (freeing their slots).
#[tokio::test]
async fn readers_that_never_read_are_bounded_and_cut_off() {
    let mut server = server(&["--send-timeout", "2s", "--max-live-readers", "8", "--sse-max-duration", "60s"]).await;
    create(&server, "s", vec![b'z'; 4 << 20]).await;
    let before = procfs::rss_bytes(server.pid()).unwrap();
    let mut stuck = Vec::new();
    for _ in 0..8 {
        let mut tcp = TcpStream::connect(server.addr).await.unwrap();
        tcp.write_all(b"GET /v1/stream/s?offset=-1&live=sse HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        stuck.push(tcp);
    }
    let mut pipelined = TcpStream::connect(server.addr).await.unwrap();
    let many = b"GET /v1/stream/s?offset=-1 HTTP/1.1\r\nhost: x\r\n\r\n".repeat(500);
    let _ = tokio::time::timeout(Duration::from_secs(3), pipelined.write_all(&many)).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let during = procfs::rss_bytes(server.pid()).unwrap();
    let grown = during.saturating_sub(before);
    eprintln!("RSS {before} -> {during} with 8 stuck SSE readers of a 4 MiB stream and 500 pipelined reads");
    // Each stuck connection holds at most about one read budget (1 MiB,
    // base64 in SSE) in the server; 9 connections, generous margin.
    assert!(grown < 48 << 20, "server buffered {grown} bytes for clients that do not read");
    // All 8 slots are taken now; after the send timeout they are free again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let req = Req::new("GET", "/v1/stream/s?offset=now&live=long-poll");
        let status = exchange(&server, req).await.status;
        if status != 503 {
            assert!(matches!(status, 200 | 204), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "stuck readers were never disconnected");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(stuck);
    server.assert_answers().await;
}

#[tokio::test]
async fn bad_limit_settings_are_refused_at_start() {
    for (args, env, want) in [
        (vec!["--max-header-bytes", "100"], vec![], "below the minimum of 1KiB"),
        (vec!["--idle-timeout", "10"], vec![], "not a duration"),
        (vec![], vec![("DS_HEADER_READ_TIMEOUT", "soon")], "not a duration"),
        (vec![], vec![("DS_MAX_LIVE_READERS", "-1")], "invalid value"),
    ] {
        let out = std::process::Command::new(ds_e2e::server::server_bin())
            .arg("serve")
            .args(["--store", "memory", "--bind", "127.0.0.1:0"])
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(want), "{args:?} {env:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
