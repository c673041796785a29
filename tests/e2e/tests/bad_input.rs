//! Bad requests get the 4xx the protocol requires — never a 5xx, never a
//! crash, never a side effect — and the server keeps answering afterwards.
//! One test per category; paths and body limits are in `bad_paths.rs`.
#![allow(clippy::unwrap_used)]

use ds_e2e::{client, header, read_all, Checks, Server};

const OCTET: &str = "application/octet-stream";

/// A local server with stream `s` (octet-stream, content `hello`); returns
/// the tail offset token after `hello` as well.
async fn setup() -> (Server, reqwest::Client, String) {
    let server = Server::local().await.unwrap();
    let http = client();
    let resp = http.put(server.url("s")).header("content-type", OCTET).body("hello").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let tail = header(&resp, "stream-next-offset").unwrap();
    (server, http, tail)
}

/// The server is alive and stream `s` holds exactly `want`.
async fn still_fine(server: &mut Server, http: &reqwest::Client, want: &[u8]) {
    server.assert_answers().await;
    let (bytes, _) = read_all(http, &server.url("s")).await.unwrap();
    assert_eq!(bytes, want, "stream s changed: {:?}", String::from_utf8_lossy(&bytes));
}

#[tokio::test]
async fn malformed_offsets_are_400() {
    let (mut server, http, tail) = setup().await;
    let url = server.url("s");
    let mut checks = Checks::new();
    // The genuine token works: the checks below are about the token, not the stream.
    checks.send(&format!("GET offset={tail} (issued)"), http.get(format!("{url}?offset={tail}")), &[200]).await;
    let beyond_tail = "0000000000000000_0000000000099999";
    let bad = [
        "offset=abc",
        "offset=1,2",
        "offset=",
        "offset",
        "offset=-1&offset=-1",
        "offset=-1&offset=now",
        "offset=-2",
        "offset=NOW",
        "offset=%00",
        "offset=0000000000000001_0000000000000000", // reserved high part set
        "offset=0000000000000000_000000000000000x",
        "offset=0_5",
        "offset=01ARZ3NDEKTSV4RRFFQ69G5FAV", // a ULID from some other server
        &format!("offset={beyond_tail}"),    // well-formed, never issued here
        &format!("offset={tail}%2C{tail}"),
    ];
    for live in ["", "&live=long-poll", "&live=sse"] {
        for q in bad {
            checks.send(&format!("GET ?{q}{live}"), http.get(format!("{url}?{q}{live}")), &[400]).await;
        }
    }
    checks.finish("malformed offsets");
    still_fine(&mut server, &http, b"hello").await;
}

fn post(http: &reqwest::Client, url: &str, producer: &[(&str, &str)], body: &'static str) -> reqwest::RequestBuilder {
    let mut req = http.post(url).header("content-type", OCTET).body(body);
    for (name, value) in producer {
        req = req.header(*name, *value);
    }
    req
}

#[tokio::test]
async fn bad_producer_headers_are_400() {
    let (mut server, http, _) = setup().await;
    let url = server.url("s");
    let mut checks = Checks::new();
    let (id, ep, sq) = ("producer-id", "producer-epoch", "producer-seq");
    let partial: [&[(&str, &str)]; 6] = [
        &[(id, "p")],
        &[(ep, "0")],
        &[(sq, "0")],
        &[(id, "p"), (ep, "0")],
        &[(id, "p"), (sq, "0")],
        &[(ep, "0"), (sq, "0")],
    ];
    for headers in partial {
        checks.send(&format!("partial set {headers:?}"), post(&http, &url, headers, "BAD"), &[400]).await;
    }
    checks.send("empty Producer-Id", post(&http, &url, &[(id, ""), (ep, "0"), (sq, "0")], "BAD"), &[400]).await;
    let two53 = "9007199254740992"; // 2^53: one past the limit
    for bad in ["-1", "abc", "1.5", "1e3", "+1", "", " ", "0x1", two53, "18446744073709551616"] {
        let e = [(id, "p"), (ep, bad), (sq, "0")];
        checks.send(&format!("Producer-Epoch {bad:?}"), post(&http, &url, &e, "BAD"), &[400]).await;
        let s = [(id, "p"), (ep, "0"), (sq, bad)];
        checks.send(&format!("Producer-Seq {bad:?}"), post(&http, &url, &s, "BAD"), &[400]).await;
    }
    // A real session, then a new epoch that does not start at seq 0.
    checks.send("p epoch 0 seq 0", post(&http, &url, &[(id, "p"), (ep, "0"), (sq, "0")], "a"), &[200]).await;
    checks.send("p new epoch 1 at seq 1", post(&http, &url, &[(id, "p"), (ep, "1"), (sq, "1")], "BAD"), &[400]).await;
    checks.send("p new epoch 7 at seq 3", post(&http, &url, &[(id, "p"), (ep, "7"), (sq, "3")], "BAD"), &[400]).await;
    checks.send("p epoch 1 seq 0", post(&http, &url, &[(id, "p"), (ep, "1"), (sq, "0")], "b"), &[200]).await;
    checks.send("p stale epoch 0", post(&http, &url, &[(id, "p"), (ep, "0"), (sq, "1")], "BAD"), &[403]).await;
    // The largest allowed value is fine.
    let max = "9007199254740991";
    checks.send("q epoch 2^53-1", post(&http, &url, &[(id, "q"), (ep, max), (sq, "0")], "c"), &[200]).await;
    checks.finish("bad producer headers");
    still_fine(&mut server, &http, b"helloabc").await;
}

#[tokio::test]
async fn bad_ttl_and_expiry_are_400() {
    let (mut server, http, _) = setup().await;
    let mut checks = Checks::new();
    let mut n = 0;
    let mut cases: Vec<(String, Vec<(&str, &str)>)> = Vec::new();
    for ttl in ["+1", "01", "1.5", "1e3", "-1", "abc", "", "0x10", "18446744073709551616"] {
        cases.push((format!("Stream-TTL {ttl:?}"), vec![("stream-ttl", ttl)]));
    }
    for at in ["tomorrow", "2030-13-45T00:00:00Z", "2030-01-01", "1900000000", "2030-01-01T00:00:00", ""] {
        cases.push((format!("Stream-Expires-At {at:?}"), vec![("stream-expires-at", at)]));
    }
    cases.push((
        "both Stream-TTL and Stream-Expires-At".into(),
        vec![("stream-ttl", "60"), ("stream-expires-at", "2030-01-01T00:00:00Z")],
    ));
    for (what, headers) in cases {
        n += 1;
        let url = server.url(&format!("ttl/{n}"));
        let mut req = http.put(&url).header("content-type", OCTET).body("x");
        for (name, value) in headers {
            req = req.header(name, value);
        }
        checks.send(&format!("PUT {what}"), req, &[400]).await;
        checks.send(&format!("HEAD after rejected {what}"), http.head(&url), &[404]).await;
    }
    // The well-formed forms are accepted.
    let ok = [("stream-ttl", "3600"), ("stream-expires-at", "2099-01-01T00:00:00Z")];
    for (name, value) in ok {
        let req = http.put(server.url(&format!("ttl/ok-{name}"))).header(name, value);
        checks.send(&format!("PUT {name}: {value}"), req, &[201]).await;
    }
    checks.finish("bad TTL / expiry");
    still_fine(&mut server, &http, b"hello").await;
}

#[tokio::test]
async fn invalid_json_is_400() {
    let (mut server, http, _) = setup().await;
    let url = server.url("j");
    let json = "application/json";
    let mut checks = Checks::new();
    checks.send("PUT json stream", http.put(&url).header("content-type", json), &[201]).await;
    let bad: [&[u8]; 9] = [b"{", b"[]", b"[1,", b"{\"a\":1}}", b"nul", b"{'a':1}", b"[1,]", b"\xff", b""];
    for body in bad {
        let what = format!("POST {:?}", String::from_utf8_lossy(body));
        checks.send(&what, http.post(&url).header("content-type", json).body(body.to_vec()), &[400]).await;
    }
    let fresh = server.url("j2");
    checks.send("PUT json stream with body {", http.put(&fresh).header("content-type", json).body("{"), &[400]).await;
    checks.send("HEAD after rejected PUT", http.head(&fresh), &[404]).await;
    checks.send("POST valid object", http.post(&url).header("content-type", json).body(r#"{"a":1}"#), &[204]).await;
    checks.send("POST valid batch", http.post(&url).header("content-type", json).body("[2,[3]]"), &[204]).await;
    checks.finish("invalid JSON");
    let (bytes, _) = read_all(&http, &url).await.unwrap();
    let got: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(got, serde_json::json!([{"a": 1}, 2, [3]]), "only the valid appends are in the JSON stream");
    still_fine(&mut server, &http, b"hello").await;
}

#[tokio::test]
async fn unknown_live_mode_is_400() {
    let (mut server, http, tail) = setup().await;
    let url = server.url("s");
    let mut checks = Checks::new();
    for live in ["foo", "long_poll", "LONG-POLL", "longpoll", "sse2", "true", "", "long-poll%00"] {
        for offset in ["-1", "now", tail.as_str()] {
            let q = format!("offset={offset}&live={live}");
            checks.send(&format!("GET ?{q}"), http.get(format!("{url}?{q}")), &[400]).await;
        }
    }
    checks.finish("unknown live mode");
    still_fine(&mut server, &http, b"hello").await;
}
