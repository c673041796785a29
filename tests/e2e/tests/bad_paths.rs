//! Path traversal attempts and oversized bodies: a clear 4xx, no side effect,
//! no crash. Paths go through a raw HTTP/1.1 client so the server sees them
//! verbatim (reqwest would resolve `..` and `%2e%2e` itself).
#![allow(clippy::unwrap_used)]

use ds_e2e::{client, raw, read_all, Checks, Server, ServerOpts};

#[tokio::test]
async fn path_traversal_is_rejected() {
    let mut server = Server::local().await.unwrap();
    let mut checks = Checks::new();
    let long = format!("/v1/stream/{}", "x".repeat(1100));
    let long_segments = format!("/v1/stream/{}", "abcdefghi/".repeat(110) + "z");
    let stream_paths = [
        "/v1/stream/..",
        "/v1/stream/.",
        "/v1/stream/a/../b",
        "/v1/stream/a/./b",
        "/v1/stream/./a",
        "/v1/stream/a/..",
        "/v1/stream/%2e%2e",
        "/v1/stream/%2E%2E",
        "/v1/stream/.%2e",
        "/v1/stream/a/%2e%2e/b",
        "/v1/stream/a/%2e%2e%2fb",
        "/v1/stream/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/v1/stream/..%2f..%2fescaped",
        "/v1/stream/a%2f..%2f..%2fescaped",
        "/v1/stream/a//b",
        "/v1/stream//a",
        "/v1/stream/a/",
        "/v1/stream/a%2f%2fb",
        "/v1/stream/a%00b",
        "/v1/stream/%00",
        "/v1/stream/a%0ab",
        "/v1/stream/a%5c..%5cb",
        "/v1/stream/%ff%fe",
        "/v1/stream/",
        &long,
        &long_segments,
    ];
    for method in ["PUT", "POST", "GET", "HEAD", "DELETE"] {
        for target in stream_paths {
            match raw::request(server.addr, method, target, b"x").await {
                Ok(r) => checks.status(&format!("{method} {}", short(target)), r.status, &r.body, &[400]),
                Err(e) => checks.fail(format!("{method} {}: {e:#}", short(target))),
            }
        }
        // Outside /v1/stream/ the router never reaches a stream: 400 or 404.
        for target in ["/v1/../v1/stream/x", "/v1/stream/../../etc/passwd", "/v1/stream%2f..%2fx", "/../v1/stream/x"] {
            match raw::request(server.addr, method, target, b"x").await {
                Ok(r) => checks.status(&format!("{method} {target}"), r.status, &r.body, &[400, 404]),
                Err(e) => checks.fail(format!("{method} {target}: {e:#}")),
            }
        }
    }
    // Nothing was created by any of them.
    let http = client();
    for name in ["b", "a", "escaped", "etc/passwd", "x", "a/b", "z"] {
        checks.send(&format!("HEAD {name} afterwards"), http.head(server.url(name)), &[404]).await;
    }
    // Nothing appeared next to the data dir.
    let parent = server.data_dir.parent().unwrap().to_path_buf();
    let entries: Vec<String> =
        std::fs::read_dir(&parent).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    if entries != ["data"] {
        checks.fail(format!("files appeared next to the data dir: {entries:?}"));
    }
    // Validation is not over-broad: dots inside names and encoded characters are fine.
    for ok in ["a.b/c..d", "...", "a%20b", "%E6%97%A5%E6%9C%AC"] {
        match raw::request(server.addr, "PUT", &format!("/v1/stream/{ok}"), b"x").await {
            Ok(r) => checks.status(&format!("PUT {ok}"), r.status, &r.body, &[201]),
            Err(e) => checks.fail(format!("PUT {ok}: {e:#}")),
        }
    }
    checks.finish("path traversal");
    server.assert_answers().await;
}

fn short(target: &str) -> String {
    if target.len() > 60 {
        format!("{}...({} bytes)", &target[..40], target.len())
    } else {
        target.to_owned()
    }
}

#[tokio::test]
async fn oversized_body_is_413() {
    const LIMIT: usize = 1024;
    let opts = ServerOpts { max_body_bytes: Some(LIMIT), ..ServerOpts::default() };
    let mut server = Server::start(opts).await.unwrap();
    // A fresh client (connection) per request: connection reuse after a 413 is
    // checked on its own below.
    let http = client;
    let octet = "application/octet-stream";
    let mut checks = Checks::new();
    let url = server.url("big");
    checks
        .send("PUT limit+1", http().put(&url).header("content-type", octet).body(vec![b'p'; LIMIT + 1]), &[413])
        .await;
    checks.send("HEAD after rejected PUT", http().head(&url), &[404]).await;
    checks
        .send("PUT exactly limit", http().put(&url).header("content-type", octet).body(vec![b'a'; LIMIT]), &[201])
        .await;
    for size in [LIMIT + 1, 2 * LIMIT, 16 * LIMIT] {
        let req = http().post(&url).header("content-type", octet).body(vec![b'x'; size]);
        checks.send(&format!("POST {size} bytes"), req, &[413]).await;
    }
    // Chunked (no Content-Length): the limit still holds.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..8).map(|_| Ok(vec![b'c'; 512])).collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    checks.send("POST chunked 4096 bytes", http().post(&url).header("content-type", octet).body(body), &[413]).await;
    checks
        .send("POST exactly limit", http().post(&url).header("content-type", octet).body(vec![b'b'; LIMIT]), &[204])
        .await;

    // After a 413 on a keep-alive connection, the connection is either still
    // usable or the 413 said `Connection: close` (RFC 9112 §9.6): otherwise a
    // client's next request on it fails spuriously.
    let head = "POST /v1/stream/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n";
    let mut by_length = format!("{head}Content-Length: {}\r\n\r\n", 16 * LIMIT).into_bytes();
    by_length.extend(vec![b'x'; 16 * LIMIT]);
    let mut chunked = format!("{head}Transfer-Encoding: chunked\r\n\r\n").into_bytes();
    for _ in 0..8 {
        chunked.extend(b"200\r\n");
        chunked.extend(vec![b'c'; 512]);
        chunked.extend(b"\r\n");
    }
    chunked.extend(b"0\r\n\r\n");
    for (what, request) in [("Content-Length 16 KiB", by_length), ("chunked 4 KiB", chunked)] {
        let mut conn = raw::Conn::open(server.addr).await.unwrap();
        let first = match conn.exchange(&request).await {
            Ok(r) => r,
            Err(e) => {
                checks.fail(format!("keep-alive POST {what}: {e:#}"));
                continue;
            }
        };
        checks.status(&format!("keep-alive POST {what}"), first.status, &first.body, &[413]);
        if first.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            continue;
        }
        match conn.exchange(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await {
            Ok(r) => checks.status(&format!("next request after the 413 to {what}"), r.status, &r.body, &[200]),
            Err(e) => checks.fail(format!(
                "413 to POST {what} had no `Connection: close`, yet the server closed the connection: \
                 the next request on it failed ({e:#})"
            )),
        }
    }
    checks.finish("oversized body");
    server.assert_answers().await;
    let (bytes, _) = read_all(&http(), &url).await.unwrap();
    let mut want = vec![b'a'; LIMIT];
    want.extend(vec![b'b'; LIMIT]);
    assert!(bytes == want, "only the accepted bodies are in the stream ({} bytes)", bytes.len());
}
