//! Subscriptions (§6-7) through the real server: signatures checked with a
//! second Ed25519 implementation (ring) against the published JWKS,
//! generation fencing, tombstones, the retry schedule surviving `kill -9`,
//! and the 4xx of bad input. Webhooks go to a receiver on 127.0.0.1 only.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ds_e2e::webhook::{Delivery, Receiver};
use ds_e2e::{client, Server, ServerOpts, Store};
use serde_json::{json, Value};

fn opts(store: Store) -> ServerOpts {
    ServerOpts { store, extra_args: vec!["--webhook-allow-loopback".into()], ..ServerOpts::default() }
}

async fn send(method: &str, url: &str, token: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let mut req = client().request(method.parse().unwrap(), url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Verify a delivery's `Webhook-Signature` with ring against `jwks`.
fn verify(d: &Delivery, jwks: &Value) -> bool {
    let Some(header) = &d.signature else { return false };
    let parts: Vec<(&str, &str)> = header.split(',').filter_map(|p| p.split_once('=')).collect();
    let get = |k: &str| parts.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let (Some(t), Some(kid), Some(sig)) = (get("t"), get("kid"), get("ed25519")) else { return false };
    let Some(key) = jwks["keys"].as_array().unwrap().iter().find(|k| k["kid"] == kid) else { return false };
    let x = URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap();
    let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(&d.body);
    let fresh = (t.parse::<i64>().unwrap() - now_secs()).abs() <= 300;
    fresh && ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, x).verify(&message, &sig).is_ok()
}

fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[tokio::test]
async fn signed_webhooks_fencing_and_tombstones() {
    let server = Server::start(opts(Store::Memory)).await.unwrap();
    let hook = Receiver::start(0).await.unwrap();
    let sub = server.url("__ds/subscriptions/e2e-hook");
    let config = json!({"type": "webhook", "pattern": "orders/*", "webhook": {"url": hook.url}, "lease_ttl_ms": 60000});
    let (status, created) = send("PUT", &sub, None, Some(config.clone())).await;
    assert_eq!(status, 201, "{created}");
    let jwks_resp = client().get(server.url("__ds/jwks.json")).send().await.unwrap();
    assert_eq!(jwks_resp.headers()["content-type"], "application/jwk-set+json");
    assert_eq!(jwks_resp.headers()["cache-control"], "public, max-age=300");
    let jwks: Value = serde_json::from_str(&jwks_resp.text().await.unwrap()).unwrap();
    assert!(!jwks.to_string().contains("\"d\""), "no private key material");

    let put = client().put(server.url("orders/1")).header("content-type", "application/json").body("{\"n\":1}");
    assert_eq!(put.send().await.unwrap().status(), 201);
    let first = hook.wait_for(1, Duration::from_secs(10)).await.unwrap().remove(0);
    assert!(verify(&first, &jwks), "ring verifies the signature against the published JWKS");
    let mut forged = first.clone();
    forged.body = axum::body::Bytes::from(first.body.iter().copied().chain(*b" ").collect::<Vec<u8>>());
    assert!(!verify(&forged, &jwks), "a changed body fails verification");
    let wake = first.json();
    let (token, callback) = (wake["callback_token"].as_str().unwrap(), wake["callback_url"].as_str().unwrap());
    let tail = wake["streams"][0]["tail_offset"].clone();
    let ack = json!({"wake_id": wake["wake_id"], "generation": wake["generation"],
        "acks": [{"stream": "orders/1", "offset": tail}], "done": true});

    assert_eq!(send("POST", callback, None, Some(ack.clone())).await.0, 401, "no token");
    assert_eq!(send("POST", callback, Some("1.w_x.AAAA"), Some(ack.clone())).await.0, 401, "forged token");
    let mut stale = ack.clone();
    stale["generation"] = json!(wake["generation"].as_u64().unwrap() + 1);
    let (status, body) = send("POST", callback, Some(token), Some(stale)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("FENCED")));
    let unlinked = json!({"wake_id": wake["wake_id"], "generation": wake["generation"],
        "acks": [{"stream": "orders/none", "offset": tail}]});
    assert_eq!(send("POST", callback, Some(token), Some(unlinked)).await.0, 400, "ack of an unlinked stream");
    let beyond = json!({"wake_id": wake["wake_id"], "generation": wake["generation"],
        "acks": [{"stream": "orders/1", "offset": "0000000000000000_0000000000099999"}]});
    assert_eq!(send("POST", callback, Some(token), Some(beyond)).await.0, 400, "ack beyond the tail");
    let (status, body) = send("POST", callback, Some(token), Some(ack.clone())).await;
    assert_eq!((status, body), (200, json!({"ok": true, "next_wake": false})));
    let (status, body) = send("POST", callback, Some(token), Some(ack.clone())).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("FENCED")), "a finished wake is fenced");

    // A second wake, then delete: its callback fails and moves no cursor.
    let post = client().post(server.url("orders/1")).header("content-type", "application/json").body("{\"n\":2}");
    assert!(post.send().await.unwrap().status().is_success());
    let second = hook.wait_for(2, Duration::from_secs(10)).await.unwrap().remove(1);
    assert!(verify(&second, &jwks));
    let w2 = second.json();
    assert!(w2["generation"].as_u64() > wake["generation"].as_u64());
    let (_, before) = send("GET", &sub, None, None).await;
    assert_eq!(send("DELETE", &sub, None, None).await.0, 204);
    let ack2 = json!({"wake_id": w2["wake_id"], "generation": w2["generation"],
        "acks": [{"stream": "orders/1", "offset": w2["streams"][0]["tail_offset"]}], "done": true});
    let (status, _) =
        send("POST", w2["callback_url"].as_str().unwrap(), w2["callback_token"].as_str(), Some(ack2)).await;
    assert_eq!(status, 404, "a deleted subscription takes no callback");
    assert_eq!(send("GET", &sub, None, None).await.0, 404);
    assert_eq!(before["streams"][0]["acked_offset"], tail, "the cursor was where the first callback left it");
    let (status, recreated) = send("PUT", &sub, None, Some(config)).await;
    assert_eq!(status, 201, "the id is free again after delete");
    assert_eq!(recreated["streams"][0]["acked_offset"], w2["streams"][0]["tail_offset"], "new instance: at the tail");
}

#[tokio::test]
async fn retry_schedule_survives_kill_9() {
    let data = tempfile::tempdir().unwrap();
    let local = || ServerOpts { data_dir: Some(data.path().join("data")), ..opts(Store::Local) };
    let mut server = Server::start(local()).await.unwrap();
    let hook = Receiver::start(0).await.unwrap();
    hook.reply(503, "busy");
    let sub = server.url("__ds/subscriptions/retry");
    let config = json!({"type": "webhook", "streams": ["jobs/a"], "webhook": {"url": hook.url}});
    assert_eq!(send("PUT", &sub, None, Some(config)).await.0, 201);
    let put = client().put(server.url("jobs/a")).header("content-type", "text/plain").body("x");
    assert_eq!(put.send().await.unwrap().status(), 201);
    // Attempts at 0, ~1 s, ~3 s; the next one is persisted for ~4 s later.
    let failed = hook.wait_for(3, Duration::from_secs(15)).await.unwrap();
    let third = failed[2].at;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, state) = send("GET", &sub, None, None).await;
    assert_eq!(state["status"], "failed");
    server.kill9().unwrap();
    hook.reply(200, "{\"done\": true}");
    let restarted = Server::start(local()).await.unwrap();
    let next = hook.wait_for(4, Duration::from_secs(15)).await.unwrap()[3].at;
    let waited = next.duration_since(third);
    assert!(
        waited >= Duration::from_millis(3_200),
        "the persisted retry time was honoured, not retried at once: {waited:?}"
    );
    assert!(
        waited <= Duration::from_millis(6_500),
        "the retry came at the persisted time (4 s ± 20%), not late: {waited:?}"
    );
    let url = restarted.url("__ds/subscriptions/retry");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, state) = send("GET", &url, None, None).await;
        if state["status"] == "active" && state["streams"][0]["acked_offset"] == "0000000000000000_0000000000000001" {
            break;
        }
        assert!(Instant::now() < deadline, "done auto-acked after the retry: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(hook.deliveries().len(), 4, "no duplicate attempt");
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx() {
    let server = Server::start(opts(Store::Memory)).await.unwrap();
    let sub = |id: &str| server.url(&format!("__ds/subscriptions/{id}"));
    let hook = "http://127.0.0.1:9/hook";
    let cases: Vec<(Value, &str)> = vec![
        (json!({"type": "carrier-pigeon", "pattern": "a/*"}), "unknown type"),
        (json!({"type": "webhook", "webhook": {"url": hook}}), "pattern or streams"),
        (json!({"type": "webhook", "pattern": "a/b*", "webhook": {"url": hook}}), "pattern"),
        (json!({"type": "webhook", "pattern": "a", "webhook": {"url": hook}, "lease_ttl_ms": 999}), "lease_ttl_ms"),
        (json!({"type": "webhook", "pattern": "a", "webhook": {"url": hook}, "lease_ttl_ms": 600001}), "lease_ttl_ms"),
        (
            json!({"type": "webhook", "pattern": "a", "webhook": {"url": hook}, "description": "d".repeat(1025)}),
            "description",
        ),
    ];
    for (body, why) in cases {
        let (status, answer) = send("PUT", &sub("bad"), None, Some(body.clone())).await;
        assert_eq!(status, 400, "{body}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(why), "{why}: {answer}");
    }
    for url in [
        "http://10.0.0.1/hook",
        "https://172.16.0.1/h",
        "https://192.168.0.1/h",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.0.1/h",
        "https://[fd00::1]/h",
        "https://[fe80::1]/h",
        "http://example.com/h",
        "ftp://127.0.0.1/h",
    ] {
        let body = json!({"type": "webhook", "pattern": "a/*", "webhook": {"url": url}});
        let (status, answer) = send("PUT", &sub("ssrf"), None, Some(body)).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("WEBHOOK_URL_REJECTED")), "{url}");
    }
    let strict = Server::start(ServerOpts { store: Store::Memory, ..ServerOpts::default() }).await.unwrap();
    let body = json!({"type": "webhook", "pattern": "a/*", "webhook": {"url": hook}});
    let (status, answer) = send("PUT", &strict.url("__ds/subscriptions/loop"), None, Some(body)).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("WEBHOOK_URL_REJECTED")), "loopback is opt-in");

    let ok = json!({"type": "webhook", "pattern": "a/*", "webhook": {"url": hook}});
    assert_eq!(send("PUT", &sub("s1"), None, Some(ok.clone())).await.0, 201);
    assert_eq!(send("PUT", &sub("s1"), None, Some(ok)).await.0, 200);
    let other = json!({"type": "webhook", "pattern": "b/*", "webhook": {"url": hook}});
    assert_eq!(send("PUT", &sub("s1"), None, Some(other)).await.0, 409);
    assert_eq!(send("PUT", &sub("a%20b"), None, Some(json!({}))).await.0, 400, "bad id");
    assert_eq!(send("POST", &format!("{}/claim", sub("s1")), None, Some(json!({"worker": "w"}))).await.0, 400);
    assert_eq!(send("GET", &sub("nope"), None, None).await.0, 404);
    assert_eq!(send("DELETE", &sub("nope"), None, None).await.0, 404);
    let release = json!({"wake_id": "w", "generation": 1});
    assert_eq!(send("POST", &format!("{}/release", sub("s1")), None, Some(release.clone())).await.0, 401);
    assert_eq!(send("POST", &format!("{}/release", sub("s1")), Some("garbage"), Some(release)).await.0, 401);
}

/// A new subscription's `PUT` answer names its streams at the tails they
/// were just linked at, without reading each again: it must say what a
/// `GET` right after says (nothing is appended in between), for streams
/// its pattern matched and for an explicit one that does not exist yet.
#[tokio::test]
async fn a_new_subscriptions_answer_agrees_with_a_get_of_it() {
    let server = Server::start(opts(Store::Local)).await.unwrap();
    let hook = Receiver::start(0).await.unwrap();
    for (path, body) in [("audit/a", "{\"n\":1}"), ("audit/b", "[{\"n\":1},{\"n\":2}]"), ("audit/c", "")] {
        let put = client().put(server.url(path)).header("content-type", "application/json").body(body);
        assert_eq!(put.send().await.unwrap().status(), 201);
    }
    let sub = server.url("__ds/subscriptions/e2e-answer");
    let config = json!({"type": "webhook", "pattern": "audit/*", "streams": ["elsewhere/not-yet"],
                        "webhook": {"url": hook.url}, "lease_ttl_ms": 60000});
    let (status, created) = send("PUT", &sub, None, Some(config)).await;
    assert_eq!(status, 201, "{created}");
    let (status, got) = send("GET", &sub, None, None).await;
    assert_eq!(status, 200, "{got}");
    let streams = |v: &Value| {
        let mut s = v["streams"].as_array().unwrap().clone();
        s.sort_by_key(|x| x["path"].as_str().unwrap().to_owned());
        s
    };
    let listed = streams(&created);
    let paths: Vec<&str> = listed.iter().map(|s| s["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["audit/a", "audit/b", "audit/c", "elsewhere/not-yet"], "{created}");
    let tail_b = client().head(server.url("audit/b")).send().await.unwrap().headers()["stream-next-offset"].clone();
    assert_eq!(listed[1]["acked_offset"].as_str(), tail_b.to_str().ok(), "linked at its tail: {created}");
    assert_ne!(listed[1]["acked_offset"], listed[2]["acked_offset"], "an empty stream's tail is not a written one's");
    assert_eq!(listed, streams(&got), "the PUT's answer and the GET's");
}
