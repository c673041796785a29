//! The transport's fast path against hyper alone, byte for byte: the same
//! raw bytes go to one connection served with the fast path
//! (`ds_serve::FastPath::On`, the server's way) and to one served by hyper
//! alone (`FastPath::Off`), each over its own fresh app; the answers (less
//! their `Date` lines) and how each connection ended must be the same.
//! Framing is hyper's to decide, so every case where the two could differ
//! is here: `Connection` values hyper reads or ignores, a body cut short by
//! the client's end of input, a head cut short, pipelining, and the
//! requests the fast path hands over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use ds_core::{ServiceConfig, StreamService};
use ds_serve::{serve_connection_with, ConnLimits, FastPath};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a connection may stay silent before it counts as kept open.
const QUIET: Duration = Duration::from_millis(300);

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Everything the server wrote, `Date` lines taken out.
    answer: String,
    /// The server closed the connection (else it was still open, silent).
    closed: bool,
}

fn app() -> ds_http::App {
    let (sub, _due) = ds_store_memory::memory_substrate();
    let service = StreamService::new(sub, ServiceConfig::default());
    let ops = ds_http::Operations { store_name: "memory", ..ds_http::Operations::default() };
    ds_http::app_with(service, ds_http::HttpConfig { max_body_bytes: 64, ..ds_http::HttpConfig::default() }, ops)
}

/// Sends `setup` (answered and read first), then `bytes`, then the end of
/// input if `fin`, over one connection served `fast`; reads until the
/// server closes or stays quiet.
async fn run(fast: FastPath, bytes: &[u8], fin: bool) -> Outcome {
    let (mut client, server) = tokio::io::duplex(256 * 1024);
    tokio::spawn(serve_connection_with(server, app(), Arc::new(ConnLimits::default()), fast));
    client.write_all(SETUP).await.unwrap();
    let mut got = Vec::new();
    let closed = read_until_quiet(&mut client, &mut got).await;
    assert!(!closed && got.starts_with(b"HTTP/1.1 201 Created\r\n"), "setup: {}", String::from_utf8_lossy(&got));
    got.clear();
    client.write_all(bytes).await.unwrap();
    if fin {
        client.shutdown().await.unwrap();
    }
    let closed = read_until_quiet(&mut client, &mut got).await;
    // The two apps are two stores: a stream's ETag names its incarnation.
    let answer = String::from_utf8_lossy(&got)
        .split_inclusive("\r\n")
        .filter(|line| !line.starts_with("date: "))
        .map(|line| if line.starts_with("etag: ") { "etag: <incarnation>\r\n" } else { line })
        .collect();
    Outcome { answer, closed }
}

/// Reads into `got` until the end of input (`true`) or [`QUIET`] of silence.
async fn read_until_quiet(conn: &mut tokio::io::DuplexStream, got: &mut Vec<u8>) -> bool {
    let mut chunk = [0; 8192];
    loop {
        match tokio::time::timeout(QUIET, conn.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Err(_) => return false,
        }
    }
}

const SETUP: &[u8] = b"PUT /v1/stream/s HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n";

fn append(extra: &[u8], body: &[u8]) -> Vec<u8> {
    let len = format!("content-length: {}\r\n", body.len());
    [b"POST /v1/stream/s HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\n", extra, len.as_bytes(), b"\r\n", body]
        .concat()
}

async fn same_both_ways(name: &str, bytes: &[u8], fin: bool) -> Outcome {
    let fast = run(FastPath::On, bytes, fin).await;
    let hyper = run(FastPath::Off, bytes, fin).await;
    assert_eq!(fast, hyper, "{name}: fast path (left) and hyper alone (right) differ");
    fast
}

#[tokio::test]
async fn a_plain_append_keeps_the_connection() {
    let o = same_both_ways("plain append", &append(b"", b"hello"), false).await;
    assert!(o.answer.starts_with("HTTP/1.1 204 No Content\r\n") && !o.closed, "{o:?}");
}

#[tokio::test]
async fn connection_close_closes_after_the_answer() {
    let o = same_both_ways("close", &append(b"connection: close\r\n", b"x"), false).await;
    assert!(o.answer.starts_with("HTTP/1.1 204") && o.answer.contains("connection: close\r\n") && o.closed, "{o:?}");
    let o = same_both_ways("Close, mixed case", &append(b"Connection: keep-alive, Close\r\n", b"x"), false).await;
    assert!(o.closed, "{o:?}");
}

#[tokio::test]
async fn a_connection_value_with_a_non_ascii_byte_is_ignored_as_hyper_ignores_it() {
    let o = same_both_ways("close with \\xff", &append(b"connection: close, \xff\r\n", b"x"), false).await;
    assert!(o.answer.starts_with("HTTP/1.1 204") && !o.closed, "hyper keeps the connection: {o:?}");
    same_both_ways("close then \\xff line", &append(b"connection: close\r\nconnection: \xff\r\n", b"x"), false).await;
}

#[tokio::test]
async fn a_body_cut_short_by_the_end_of_input_gets_hypers_answer() {
    let mut short = append(b"", b"0123456789");
    short.truncate(short.len() - 7);
    let o = same_both_ways("short body, FIN", &short, true).await;
    assert!(o.answer.starts_with("HTTP/1.1 400") && o.closed, "{o:?}");
    // Without the end of input, both wait for the rest of the body.
    let o = same_both_ways("short body, no FIN", &short, false).await;
    assert!(o.answer.is_empty() && !o.closed, "{o:?}");
}

#[tokio::test]
async fn a_head_cut_short_by_the_end_of_input_gets_hypers_answer() {
    same_both_ways("short head, FIN", b"POST /v1/stream/s HTTP/1.1\r\nhost: h\r\ncontent-le", true).await;
    let o = same_both_ways("nothing, FIN", b"", true).await;
    assert!(o.answer.is_empty() && o.closed, "{o:?}");
}

#[tokio::test]
async fn pipelined_requests_are_answered_alike() {
    let mut bytes = append(b"", b"one");
    bytes.extend(append(b"producer-id: p\r\nproducer-epoch: 0\r\nproducer-seq: 0\r\n", b"two"));
    bytes.extend_from_slice(b"GET /v1/stream/s?offset=-1 HTTP/1.1\r\nhost: h\r\n\r\n");
    bytes.extend(append(b"", b"three"));
    let o = same_both_ways("pipelined", &bytes, false).await;
    assert_eq!(o.answer.matches("HTTP/1.1 ").count(), 4, "{o:?}");
    assert!(o.answer.contains("onetwo"), "{o:?}");
}

#[tokio::test]
async fn refusals_and_handed_over_requests_are_answered_alike() {
    let cases: &[(&str, Vec<u8>, bool)] = &[
        ("too large (413)", append(b"", &[b'x'; 65]), false),
        ("bad producer header", append(b"producer-id: \xff\r\n", b"x"), false),
        ("unknown stream", b"POST /v1/stream/none HTTP/1.1\r\nhost: h\r\ncontent-length: 1\r\n\r\nx".to_vec(), false),
        ("reserved path", b"POST /v1/stream/__ds/x HTTP/1.1\r\nhost: h\r\ncontent-length: 1\r\n\r\nx".to_vec(), false),
        (
            "chunked",
            b"POST /v1/stream/s HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"
                .to_vec(),
            false,
        ),
        ("two lengths", append(b"content-length: 1\r\n", b"x"), false),
        ("unreadable length", append(b"content-length: 1x\r\n", b"x"), false),
        ("HTTP/1.0", b"POST /v1/stream/s HTTP/1.0\r\ncontent-type: text/plain\r\ncontent-length: 1\r\n\r\nx".to_vec(), false),
        ("expect", append(b"expect: 100-continue\r\n", b"x"), false),
        ("malformed head", b"POST /v1/stream/s HTTP/1.1\r\nbad header\r\n\r\n".to_vec(), false),
        ("PUT existing", b"PUT /v1/stream/s HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n".to_vec(), false),
        ("query", b"POST /v1/stream/s?x=1 HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\ncontent-length: 1\r\n\r\nx".to_vec(), false),
    ];
    for (name, bytes, fin) in cases {
        same_both_ways(name, bytes, *fin).await;
    }
}

/// The one difference, kept on purpose: a whole request followed at once by
/// the end of input. hyper (without `half_close`, which it needs to notice a
/// live reader leave) closes at the end of input and drops the request in
/// flight, unanswered; the fast path has read the whole request before it
/// looks for more input, so it answers, then sees the end and closes.
/// Either way the connection closes and nothing is answered twice.
#[tokio::test]
async fn a_whole_request_then_the_end_of_input_is_answered_by_the_fast_path_only() {
    let fast = run(FastPath::On, &append(b"", b"x"), true).await;
    assert!(fast.answer.starts_with("HTTP/1.1 204 No Content\r\n") && fast.closed, "{fast:?}");
    let hyper = run(FastPath::Off, &append(b"", b"x"), true).await;
    assert!(hyper.answer.is_empty() && hyper.closed, "{hyper:?}");
}
