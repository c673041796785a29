//! The operator API through the HTTP router, over the local host: each
//! control lands with exactly one audit event, a stale revision is `409`
//! and changes nothing, bad requests are clear `4xx`, access control
//! applies.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{app, app_with, order, App, CONFIG};
use serde_json::{json, Value};

async fn seeded() -> App {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    let app = app(substrate, CONFIG).await;
    app.create_json("orders/a").await;
    for id in 0..4 {
        app.append("orders/a", &[order(id, "new")]).await;
    }
    app.settle(2).await;
    app
}

async fn audit_events(app: &App, event_type: &str) -> Vec<Value> {
    app.messages("orders/a").await.into_iter().filter(|m| m["type"] == event_type).collect()
}

fn positions(messages: &[Value]) -> Vec<u64> {
    messages.iter().map(|m| m["payload"]["id"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_revision_is_409_and_changes_nothing() {
    let app = seeded().await;
    let before = app.show("order-feed", "orders/a").await;
    let revision = before["cursorRevision"].as_u64().unwrap();
    for action in ["reprocess-from", "skip-through"] {
        let r = app
            .control("order-feed", action, "orders/a", json!({ "position": 1, "expectedRevision": revision + 7 }))
            .await;
        assert_eq!(r.status, 409, "{action}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["error"]["code"], "REVISION_MISMATCH");
        let current = r.headers.get("processor-cursor-revision").unwrap().to_str().unwrap();
        assert_eq!(current, revision.to_string());
    }
    app.settle(2).await;
    assert_eq!(app.show("order-feed", "orders/a").await, before, "nothing changed");
    assert_eq!(positions(&app.messages("feed").await), [0, 1, 2, 3], "nothing forwarded again");
    for t in ["stream/processor-reprocessed", "stream/processor-skipped"] {
        assert!(audit_events(&app, t).await.is_empty(), "no audit event for a change that did not happen");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reprocess_from_rewinds_once_with_one_audit_event() {
    let app = seeded().await;
    let before = app.show("order-feed", "orders/a").await;
    let revision = before["cursorRevision"].as_u64().unwrap();
    // The third order's position: reprocess it and everything after.
    let entries = app.call("GET", "/v1/stream/orders/a?offset=-1", &[], "").await.json();
    let third = entries.as_array().unwrap().iter().take(2).map(|m| m.to_string().len() as u64 + 1).sum::<u64>() + 1;
    let r = app
        .control(
            "order-feed",
            "reprocess-from",
            "orders/a",
            json!({ "position": third, "expectedRevision": revision, "reason": "resend" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["cursorRevision"], json!(revision + 1));
    app.settle(2).await;
    assert_eq!(positions(&app.messages("feed").await), [0, 1, 2, 3, 2, 3], "rewound events are forwarded again, once");
    let audits = audit_events(&app, "stream/processor-reprocessed").await;
    assert_eq!(audits.len(), 1, "{audits:?}");
    assert_eq!(audits[0]["payload"]["reason"], "resend", "{}", audits[0]);
    // The old revision is stale now.
    let again = app
        .control("order-feed", "reprocess-from", "orders/a", json!({ "position": third, "expectedRevision": revision }))
        .await;
    assert_eq!(again.status, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_through_moves_a_wedged_outbox_past_its_poison_event() {
    let app = seeded().await;
    // The target refuses appends from now on: the next order wedges the outbox.
    let close = app.call("POST", "/v1/stream/feed", &[("stream-closed", "true")], "").await;
    assert_eq!(close.status, 204);
    app.append("orders/a", &[order(9, "new")]).await;
    let wedged = loop {
        let shown = app.show("order-feed", "orders/a").await;
        if shown["retryCount"].as_u64().unwrap() > 0 {
            break shown;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert!(wedged["lag"].as_u64().unwrap() > 0, "{wedged:#}");
    assert!(wedged["lastError"].as_str().unwrap().contains("closed"), "{wedged:#}");
    let (tail, revision) = (wedged["tail"].as_u64().unwrap(), wedged["cursorRevision"].as_u64().unwrap());
    let done = app
        .control(
            "order-feed",
            "skip-through",
            "orders/a",
            json!({ "position": tail - 1, "expectedRevision": revision }),
        )
        .await;
    assert_eq!(done.status, 400, "no entry ends there: {}", String::from_utf8_lossy(&done.body));
    assert_eq!(done.json()["error"]["code"], "INVALID_POSITION");
    let r = app
        .control(
            "order-feed",
            "skip-through",
            "orders/a",
            json!({ "position": tail, "expectedRevision": revision, "reason": "target closed" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    app.settle(2).await;
    assert_eq!(audit_events(&app, "stream/processor-skipped").await.len(), 1);
    assert_eq!(positions(&app.messages("feed").await), [0, 1, 2, 3]);

    let r = app.control("by-status", "re-reduce", "orders/a", json!({ "reason": "new fold" })).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["state"]["count"], json!(5), "rebuilt from the stream");
    app.settle(2).await;
    assert_eq!(audit_events(&app, "stream/processor-re-reduced").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_operator_requests_are_clear_4xx() {
    let app = seeded().await;
    let cases: [(&str, &str, &str, u16, &str); 7] = [
        ("GET", "/v1/processors/nope/streams/orders/a", "", 404, "UNKNOWN_PROCESSOR"),
        ("GET", "/v1/processors/order-feed/streams/elsewhere/a", "", 404, "NOT_REGISTERED"),
        ("GET", "/v1/processors/order-feed/streams/orders/missing", "", 404, "NOT_FOUND"),
        ("POST", "/v1/processors/order-feed/reprocess-from/orders/a", r#"{"position":1}"#, 400, "BAD_REQUEST"),
        ("POST", "/v1/processors/order-feed/re-reduce/orders/a", "not json", 400, "BAD_REQUEST"),
        ("POST", "/v1/processors/order-feed/rewind/orders/a", "", 404, "NOT_FOUND"),
        ("GET", "/v1/processors?limit=0", "", 400, "BAD_REQUEST"),
    ];
    for (method, uri, body, status, code) in cases {
        let r = app.call(method, uri, &[("content-type", "application/json")], body).await;
        assert_eq!((r.status.as_u16(), r.json()["error"]["code"].as_str().unwrap()), (status, code), "{method} {uri}");
    }
    let wrong_method = app.call("DELETE", "/v1/processors/order-feed/streams/orders/a", &[], "").await;
    assert_eq!(wrong_method.status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_by_stream() {
    let app = seeded().await;
    app.create_json("orders/b").await;
    app.settle(4).await;
    let first = app.call("GET", "/v1/processors?limit=1", &[], "").await.json();
    let rows = first["processors"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "both processors of the first stream");
    assert_eq!(first["next"], "orders/a");
    let second = app.call("GET", "/v1/processors?limit=1&after=orders%2Fa", &[], "").await.json();
    assert_eq!(second["processors"][0]["stream"], "orders/b");
    assert!(second.get("next").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_api_is_behind_access_control() {
    let tokens = json!({ "tokens": [
        { "name": "reader", "sha256": ds_auth::tokens::digest_hex("reader-token"),
          "streams": [{ "prefix": "", "ops": ["read"] }] },
        { "name": "orders-admin", "sha256": ds_auth::tokens::digest_hex("admin-token"),
          "streams": [{ "prefix": "orders/", "ops": ["admin", "read", "write"] }] },
    ]});
    let auth = ds_auth::Authenticator::new(ds_auth::StaticTokens::from_json(&tokens.to_string()).unwrap(), None);
    let ops = ds_http::Operations { access: Some(Arc::new(auth)), ..Default::default() };
    let (substrate, _due) = ds_store_memory::memory_substrate();
    let app = app_with(substrate, CONFIG, ops).await;
    let reader = [("authorization", "Bearer reader-token")];
    let admin = [("authorization", "Bearer admin-token"), ("content-type", "application/json")];
    app.call("PUT", "/v1/stream/orders/a", &admin, "").await;
    assert_eq!(app.call("GET", "/v1/processors", &[], "").await.status, 401);
    assert_eq!(app.call("GET", "/v1/processors", &reader, "").await.status, 200);
    assert_eq!(app.call("GET", "/v1/processors", &admin, "").await.status, 403, "no read on __ds/processors");
    let control = "/v1/processors/by-status/re-reduce/orders/a";
    assert_eq!(app.call("POST", control, &reader, "").await.status, 403, "read is not admin");
    let r = app.call("POST", control, &admin, "").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn a_server_without_processors_says_so() {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    let service = ds_core::StreamService::new(substrate, ds_core::ServiceConfig::default());
    let router = ds_http::router(service, ds_http::HttpConfig::default());
    let resp = tower::ServiceExt::oneshot(
        router,
        http::Request::get("/v1/processors").body(axum::body::Body::empty()).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 404);
}
