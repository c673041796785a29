#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use axum::body::Body;
use http::{HeaderValue, Method, StatusCode};

use super::*;
use crate::connection::serve_connection;
use crate::limits::ConnLimits;
use crate::parse::{content_length, FAST_BODY_MAX, MAX_HEADERS};

fn parsed(raw: &str) -> Parse {
    parse(raw.as_bytes(), 64 * 1024, &mut Vec::new())
}

fn ours(raw: &str) -> Head {
    match parsed(raw) {
        Parse::Ours(head) => head,
        other => panic!("{raw:?}: {other:?}"),
    }
}

#[test]
fn a_plain_post_or_put_is_ours() {
    let raw = "POST /v1/stream/a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nProducer-Id: p\r\n\r\nabc";
    let head = ours(raw);
    assert_eq!(head.method, Method::POST);
    assert_eq!(&raw[head.target.clone()], "/v1/stream/a?x=1");
    assert_eq!((head.len, head.body_len, head.close), (raw.len() - 3, 3, false));
    let head = ours("PUT /v1/stream/a HTTP/1.1\r\nconnection: keep-alive, Close\r\n\r\n");
    assert_eq!((head.method, head.body_len, head.close), (Method::PUT, 0, true));
}

#[test]
fn what_hyper_must_decide_is_theirs() {
    for raw in [
        "GET /v1/stream/a HTTP/1.1\r\n\r\n",
        "HEAD /v1/stream/a HTTP/1.1\r\n\r\n",
        "DELETE /v1/stream/a HTTP/1.1\r\n\r\n",
        "post /v1/stream/a HTTP/1.1\r\n\r\n",
        "POST /v1/stream/a HTTP/1.0\r\nContent-Length: 1\r\n\r\na",
        "POST http://h/v1/stream/a HTTP/1.1\r\n\r\n",
        "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
        "POST /a HTTP/1.1\r\nContent-Length: 1,1\r\n\r\na",
        "POST /a HTTP/1.1\r\nContent-Length: +1\r\n\r\na",
        "POST /a HTTP/1.1\r\nContent-Length: \r\n\r\n",
        "POST /a HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
        "POST /a HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
        "POST /a HTTP/1.1\r\nConnection: Upgrade\r\n\r\n",
        "POST /a HTTP/1.1\r\nBad Name: x\r\n\r\n",
        "POST /a\0 HTTP/1.1\r\n\r\n",
    ] {
        assert_eq!(parsed(raw), Parse::Theirs, "{raw:?}");
    }
    let big = format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", FAST_BODY_MAX + 1);
    assert_eq!(parsed(&big), Parse::Theirs, "a body past FAST_BODY_MAX");
    let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
    assert_eq!(parsed(&format!("POST /a HTTP/1.1\r\n{many}\r\n")), Parse::Theirs, "more header lines than hyper takes");
}

#[test]
fn connection_lines_are_read_as_hyper_reads_them() {
    let close = |lines: &str| ours(&format!("POST /a HTTP/1.1\r\n{lines}\r\n")).close;
    assert!(close("connection: close\r\n"));
    assert!(close("connection: keep-alive, Close\r\n"));
    assert!(!close("connection: keep-alive\r\n"));
    assert!(!close(""));
    // A value hyper cannot read (not visible ASCII) lists nothing, `close` included.
    assert!(!close("connection: close, \u{ff}\r\n"));
    // Later lines: once closed, only `keep-alive` opens it again.
    assert!(!close("connection: close\r\nconnection: keep-alive\r\n"));
    assert!(close("connection: close\r\nconnection: other\r\n"));
    assert!(close("connection: other\r\nconnection: close\r\n"));
}

#[test]
fn content_lengths_are_digits_only() {
    let max = usize::try_from(9_999_999_999_999_999_999u64).unwrap();
    for (value, want) in [("0", Some(0)), ("42", Some(42)), ("007", Some(7)), ("9999999999999999999", Some(max))] {
        assert_eq!(content_length(value.as_bytes()), want, "{value:?}");
    }
    for value in ["", "+1", "-1", "1 ", "1,1", "1a", "0x10", "12345678901234567890", "\u{663}"] {
        assert_eq!(content_length(value.as_bytes()), None, "{value:?}");
    }
}

#[test]
fn an_incomplete_head_waits_until_it_is_too_large() {
    assert_eq!(parsed("POST /a HTTP/1.1\r\nContent-Le"), Parse::Partial);
    assert_eq!(parsed("PO"), Parse::Partial);
    let long = format!("POST /a HTTP/1.1\r\nx: {}", "v".repeat(100));
    assert_eq!(parse(long.as_bytes(), 64, &mut Vec::new()), Parse::Theirs);
    let complete = format!("{long}\r\n\r\n");
    assert_eq!(parse(complete.as_bytes(), 64, &mut Vec::new()), Parse::Theirs, "complete but larger than allowed");
}

fn app() -> Router {
    Router::new()
        .route(
            "/echo",
            post(|headers: http::HeaderMap, body: Bytes| async move {
                let seen = headers.get("x-tag").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
                ([("x-seen", HeaderValue::from_bytes(&seen).unwrap())], body)
            }),
        )
        .route("/nothing", post(|| async { StatusCode::NO_CONTENT }))
        .route(
            "/streamed",
            post(|| async {
                let pieces = futures::stream::iter(["one", "", "two"]).then(|p| async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok::<_, std::convert::Infallible>(Bytes::from_static(p.as_bytes()))
                });
                Body::from_stream(pieces)
            }),
        )
        .route("/read", get(|| async { "read" }))
}

use futures::StreamExt;

fn connect() -> DuplexStream {
    let (client, server) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve_connection(server, app(), Arc::new(ConnLimits::default())));
    client
}

/// One response off the connection: status, headers (lower-case names), body.
async fn response(conn: &mut DuplexStream, pending: &mut Vec<u8>) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let (status, headers, head_len) = loop {
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut slots);
        if let httparse::Status::Complete(n) = resp.parse(pending).unwrap() {
            let headers = resp
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8(h.value.to_vec()).unwrap()))
                .collect::<Vec<_>>();
            break (resp.code.unwrap(), headers, n);
        }
        fill(conn, pending).await;
    };
    pending.drain(..head_len);
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if header("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let line_end = loop {
                if let Some(i) = pending.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                fill(conn, pending).await;
            };
            let size = usize::from_str_radix(std::str::from_utf8(&pending[..line_end]).unwrap(), 16).unwrap();
            while pending.len() < line_end + 2 + size + 2 {
                fill(conn, pending).await;
            }
            body.extend_from_slice(&pending[line_end + 2..line_end + 2 + size]);
            assert_eq!(&pending[line_end + 2 + size..line_end + 4 + size], b"\r\n");
            pending.drain(..line_end + 4 + size);
            if size == 0 {
                break;
            }
        }
    } else {
        let len = header("content-length").map_or(0, |v| v.parse().unwrap());
        while pending.len() < len {
            fill(conn, pending).await;
        }
        body = pending.drain(..len).collect();
    }
    (status, headers, body)
}

async fn fill(conn: &mut DuplexStream, pending: &mut Vec<u8>) {
    let mut chunk = [0; 4096];
    let n =
        tokio::time::timeout(Duration::from_secs(5), conn.read(&mut chunk)).await.expect("a response in time").unwrap();
    assert!(n > 0, "connection closed early; have {:?}", String::from_utf8_lossy(pending));
    pending.extend_from_slice(&chunk[..n]);
}

fn echo(tag: &str, body: &str) -> String {
    format!("POST /echo HTTP/1.1\r\nhost: h\r\nx-tag: {tag}\r\ncontent-length: {}\r\n\r\n{body}", body.len())
}

#[tokio::test]
async fn pipelined_appends_are_answered_in_order_and_framed_as_hyper_frames_them() {
    let mut conn = connect();
    let all: String = (0..50).map(|i| echo(&format!("t{i}"), &"x".repeat(i))).collect();
    conn.write_all(all.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    for i in 0..50 {
        let (status, headers, body) = response(&mut conn, &mut pending).await;
        assert_eq!(status, 200);
        assert_eq!(body, "x".repeat(i).as_bytes(), "response {i}");
        assert!(headers.contains(&("x-seen".into(), format!("t{i}"))), "{headers:?}");
        assert!(headers.contains(&("content-length".into(), i.to_string())), "{headers:?}");
        let date = headers.iter().find(|(n, _)| n == "date").expect("a date");
        httpdate::parse_http_date(&date.1).unwrap();
    }
    conn.write_all(b"POST /nothing HTTP/1.1\r\n\r\n").await.unwrap();
    let (status, headers, body) = response(&mut conn, &mut pending).await;
    assert_eq!((status, body.len()), (204, 0));
    // axum's router sets `content-length: 0`; a 204 carries no framing at all.
    assert!(!headers.iter().any(|(n, _)| n == "transfer-encoding" || n == "content-length"), "{headers:?}");
}

#[tokio::test]
async fn an_empty_answer_is_framed_byte_for_byte_as_hyper_frames_it() {
    // The router sets `content-length: 0` on each of these; hyper drops it
    // from the 204 (RFC 9110 §8.6) and keeps it on the 200.
    for (target, status) in [("/nothing", 204), ("/echo", 200)] {
        let request = format!("POST {target} HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n");
        let mut ours = connect();
        ours.write_all(request.as_bytes()).await.unwrap();
        // A chunked request first: hyper serves this connection from then on.
        let mut theirs = connect();
        theirs.write_all(b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n").await.unwrap();
        let mut pending = Vec::new();
        assert_eq!(response(&mut theirs, &mut pending).await.0, 200);
        theirs.write_all(request.as_bytes()).await.unwrap();
        let without_date = |(code, headers, body): (u16, Vec<(String, String)>, Vec<u8>)| {
            (code, headers.into_iter().filter(|(n, _)| n != "date").collect::<Vec<_>>(), body)
        };
        let a = without_date(response(&mut ours, &mut Vec::new()).await);
        let b = without_date(response(&mut theirs, &mut pending).await);
        assert_eq!(a.0, status);
        assert_eq!(a, b, "{target}");
        let length = a.1.iter().any(|(n, v)| n == "content-length" && v == "0");
        assert_eq!(length, status == 200, "{target}: {:?}", a.1);
    }
}

#[tokio::test]
async fn a_streamed_answer_is_chunked() {
    let mut conn = connect();
    let mut pending = Vec::new();
    for _ in 0..2 {
        conn.write_all(b"POST /streamed HTTP/1.1\r\ncontent-length: 0\r\n\r\n").await.unwrap();
        let (status, headers, body) = response(&mut conn, &mut pending).await;
        assert_eq!((status, body.as_slice()), (200, &b"onetwo"[..]));
        assert!(headers.contains(&("transfer-encoding".into(), "chunked".into())), "{headers:?}");
    }
}

#[tokio::test]
async fn hyper_takes_over_at_the_first_request_that_is_not_ours_with_the_bytes_read_so_far() {
    let mut conn = connect();
    // One write: ours, then a read (hyper's from here on), then ours again.
    let first = format!("{}GET /read HTTP/1.1\r\nhost: h\r\n\r\n{}", echo("a", "1"), echo("b", "22"));
    conn.write_all(first.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    assert_eq!(response(&mut conn, &mut pending).await.2, b"1");
    assert_eq!(response(&mut conn, &mut pending).await.2, b"read");
    assert_eq!(response(&mut conn, &mut pending).await.2, b"22");
    // A chunked upload, served by hyper.
    conn.write_all(b"POST /echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n").await.unwrap();
    assert_eq!(response(&mut conn, &mut pending).await.2, b"abc");
}

#[tokio::test]
async fn a_body_still_on_its_way_goes_to_hyper() {
    let mut conn = connect();
    conn.write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 6\r\n\r\nabc").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    conn.write_all(b"def").await.unwrap();
    let mut pending = Vec::new();
    assert_eq!(response(&mut conn, &mut pending).await.2, b"abcdef");
    // The head split across writes is still ours to wait for.
    conn.write_all(b"POST /echo HTTP/1.1\r\ncontent-").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    conn.write_all(b"length: 2\r\n\r\nok").await.unwrap();
    assert_eq!(response(&mut conn, &mut pending).await.2, b"ok");
}

#[tokio::test]
async fn a_head_sent_a_byte_at_a_time_is_served() {
    let mut conn = connect();
    let request = echo("c", "!");
    let (head, last) = request.as_bytes().split_at(request.len() - 2);
    for byte in head {
        conn.write_all(&[*byte]).await.unwrap();
        tokio::task::yield_now().await;
    }
    conn.write_all(last).await.unwrap();
    let (status, headers, body) = response(&mut conn, &mut Vec::new()).await;
    assert_eq!((status, body.as_slice()), (200, &b"!"[..]));
    assert!(headers.contains(&("x-seen".into(), "c".into())), "{headers:?}");
}

#[tokio::test]
async fn connection_close_is_honoured() {
    let mut conn = connect();
    conn.write_all(b"POST /echo HTTP/1.1\r\nconnection: close\r\ncontent-length: 2\r\n\r\nhi").await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut all)).await.unwrap().unwrap();
    let text = String::from_utf8(all).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nhi"), "{text}");
}

#[tokio::test]
async fn a_refused_head_gets_hypers_answer() {
    let mut conn = connect();
    let huge = format!("POST /echo HTTP/1.1\r\nx-big: {}\r\n\r\n", "v".repeat(70 * 1024));
    conn.write_all(huge.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    assert_eq!(response(&mut conn, &mut pending).await.0, 431);
    let mut conn = connect();
    conn.write_all(b"POST /echo HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab").await.unwrap();
    assert_eq!(response(&mut conn, &mut Vec::new()).await.0, 400);
}

#[tokio::test]
async fn shutting_down_closes_an_idle_connection_and_ends_one_in_progress_after_its_answer() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (entered_tx, entered_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Arc::clone(&release);
    let app = app().route(
        "/slow",
        post(move || {
            let (entered, gate) = (entered_tx.clone(), Arc::clone(&gate));
            async move {
                let _ = entered.send(());
                gate.notified().await;
                "late"
            }
        }),
    );
    let server = tokio::spawn(crate::listen::serve(listener, app, ConnLimits::default(), async {
        let _ = stop_rx.await;
    }));
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(echo("a", "1").as_bytes()).await.unwrap();
    let mut busy = tokio::net::TcpStream::connect(addr).await.unwrap();
    busy.write_all(b"POST /slow HTTP/1.1\r\ncontent-length: 0\r\n\r\n").await.unwrap();
    let mut entered_rx = entered_rx;
    entered_rx.recv().await.unwrap();
    let mut seen = vec![0; 4096];
    let n = idle.read(&mut seen).await.unwrap();
    assert!(seen[..n].ends_with(b"\r\n\r\n1"), "{:?}", String::from_utf8_lossy(&seen[..n]));

    stop_tx.send(()).unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest)).await.unwrap().unwrap();
    assert!(rest.is_empty(), "the idle connection is closed without an answer");
    release.notify_one();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), busy.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8(answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("\r\n\r\nlate"), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returns once both are closed").unwrap();
}

#[tokio::test]
async fn a_head_made_malformed_by_a_later_piece_gets_hypers_400_at_once() {
    let mut conn = connect();
    conn.write_all(b"POST /echo HTTP/1.1\r\nhost: h\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // No blank line yet: the head is not complete, but it can no longer be valid.
    conn.write_all(b"bad name: x\r\n").await.unwrap();
    let (status, _, _) = response(&mut conn, &mut Vec::new()).await;
    assert_eq!(status, 400);
}
