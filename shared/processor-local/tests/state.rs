//! The `state` kind through the HTTP router over the local host: State
//! Protocol messages appended to a stream are served as the live state
//! (whole, one type paged, one row), a malformed message is reported in
//! list and show and never folded, a reset clears, and a view past its
//! limits is refused rather than served truncated.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::App;
use ds_core::{ServiceConfig, StreamService};
use ds_processor_local::{HostConfig, LocalHost};
use ds_processors_builtin::state::{StateOperator, StateViews};
use ds_processors_builtin::{Catalog, ProcessorsConfig};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[processor]]
kind = "state"
slug = "users"
streams = "state/*"

[[processor]]
kind = "state"
slug = "tiny"
streams = "state/*"
max_rows = 2
"#;

async fn app() -> App {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    let host = LocalHost::new(HostConfig { lag_log_interval: None, ..HostConfig::default() });
    let service = StreamService::new(host.tap(substrate), ServiceConfig::default());
    let (_, registry) = Catalog::builtin().load(CONFIG, &service).await.expect("valid config");
    host.start(service.clone(), registry).await.expect("start");
    let views = Arc::new(StateViews::from_config(&ProcessorsConfig::from_toml(CONFIG).unwrap()).unwrap());
    let operator = Arc::new(StateOperator::new(host.operator(), views, service.clone()));
    let ops = ds_http::Operations { processors: Some(operator), store_name: "test", ..Default::default() };
    let router = ds_http::router_with(service.clone(), ds_http::HttpConfig::default(), ops);
    App { router, service, host }
}

fn change(op: &str, t: &str, k: &str, v: Value) -> Value {
    json!({ "type": t, "key": k, "value": v, "headers": { "operation": op } })
}

async fn state(app: &App, query: &str) -> (u16, Value) {
    let r = app.call("GET", &format!("/v1/processors/users/state/state/a{query}"), &[], "").await;
    (r.status.as_u16(), r.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_state_is_served_whole_by_type_and_by_row() {
    let app = app().await;
    app.create_json("state/a").await;
    app.append(
        "state/a",
        &[
            json!({ "headers": { "control": "snapshot-start" } }),
            change("insert", "user", "1", json!({ "name": "Ann" })),
            change("insert", "user", "2", json!({ "name": "Bo" })),
            change("insert", "team", "t1", json!({ "size": 2 })),
            json!({ "headers": { "control": "snapshot-end" } }),
            change("update", "user", "2", json!({ "name": "Bob" })),
            change("upsert", "user", "3", json!(null)),
            json!({ "type": "user", "key": "1", "headers": { "operation": "delete" } }),
            // Malformed: an insert with no key.
            json!({ "type": "user", "value": 1, "headers": { "operation": "insert" } }),
        ],
    )
    .await;
    app.settle(2).await;

    let (status, whole) = state(&app, "").await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(
        whole["state"],
        json!({ "team": { "t1": { "size": 2 } }, "user": { "2": { "name": "Bob" }, "3": null } })
    );
    assert_eq!(whole["summary"]["rows"], 3);
    assert_eq!(whole["summary"]["malformed"], 1);
    assert!(whole["summary"]["lastMalformed"]["reason"].as_str().unwrap().contains("`key`"), "{whole}");
    assert!(whole.get("next").is_none());

    // Paged: the whole state two rows at a time, then one type one row at a time.
    let (_, first) = state(&app, "?limit=2").await;
    assert_eq!(first["state"], json!({ "team": { "t1": { "size": 2 } }, "user": { "2": { "name": "Bob" } } }));
    assert_eq!(first["next"], json!({ "type": "user", "key": "2" }));
    let (_, second) = state(&app, "?limit=2&afterType=user&after=2").await;
    assert_eq!(second["state"], json!({ "user": { "3": null } }));
    assert!(second.get("next").is_none());
    let (_, users) = state(&app, "?type=user&limit=1").await;
    assert_eq!((users["state"].clone(), users["next"]["key"].clone()), (json!({ "2": { "name": "Bob" } }), json!("2")));
    let (_, rest) = state(&app, "?type=user&after=2").await;
    assert_eq!(rest["state"], json!({ "3": null }));

    let (status, row) = state(&app, "?type=user&key=2").await;
    assert_eq!((status, row["state"].clone()), (200, json!({ "name": "Bob" })));
    let (status, missing) = state(&app, "?type=user&key=1").await;
    assert_eq!((status, missing["error"]["code"].clone()), (404, json!("ROW_NOT_FOUND")), "deleted rows are gone");
    let (status, bad) = state(&app, "?key=1").await;
    assert_eq!(status, 400, "{bad}");

    // The malformed message shows in list and show, with its offset.
    let listed = app.list().await;
    let users = listed.iter().find(|p| p["processor"] == "users").unwrap();
    assert_eq!(users["materialized"]["malformed"], 1, "{users}");
    let shown = app.show("users", "state/a").await;
    assert_eq!(shown["materialized"]["lastMalformed"], whole["summary"]["lastMalformed"]);
    assert_eq!(shown["materialized"]["bytes"], whole["summary"]["bytes"]);

    // A reset clears everything; what follows is the new state.
    app.append("state/a", &[json!({ "headers": { "control": "reset" } }), change("insert", "team", "t2", json!(1))])
        .await;
    let (_, after_reset) = state(&app, "").await;
    assert_eq!(after_reset["state"], json!({ "team": { "t2": 1 } }));
    assert_eq!(after_reset["summary"]["rows"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_past_its_limits_and_unknown_processors_are_clear_errors() {
    let app = app().await;
    app.create_json("state/a").await;
    app.append("state/a", &[change("insert", "u", "1", json!(1)), change("insert", "u", "2", json!(2))]).await;
    let r = app.call("GET", "/v1/processors/tiny/state/state/a", &[], "").await;
    assert_eq!(r.status, 200, "two rows fit max_rows = 2");
    app.append("state/a", &[change("insert", "u", "3", json!(3))]).await;
    let r = app.call("GET", "/v1/processors/tiny/state/state/a", &[], "").await;
    assert_eq!(r.status, 507, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["code"], "STATE_LIMIT");
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("max_rows"));

    let r = app.call("GET", "/v1/processors/nobody/state/state/a", &[], "").await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].clone()), (404, json!("UNKNOWN_PROCESSOR")));
    let r = app.call("GET", "/v1/processors/users/state/other/a", &[], "").await;
    assert_eq!((r.status.as_u16(), r.json()["error"]["code"].clone()), (404, json!("NOT_REGISTERED")));
    let r = app.call("GET", "/v1/processors/users/state/state/none", &[], "").await;
    assert_eq!(r.status, 404);
    let r = app.call("POST", "/v1/processors/users/state/state/a", &[], "").await;
    assert_eq!(r.status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_and_created_again_starts_a_fresh_view() {
    let app = app().await;
    app.create_json("state/a").await;
    app.append("state/a", &[change("insert", "u", "old", json!(1))]).await;
    assert_eq!(state(&app, "").await.1["state"], json!({ "u": { "old": 1 } }));
    let r = app.call("DELETE", "/v1/stream/state/a", &[], "").await;
    assert!(r.status.is_success(), "{}", r.status);
    assert_eq!(state(&app, "").await.0, 404);
    app.create_json("state/a").await;
    app.append("state/a", &[change("insert", "u", "new", json!(2))]).await;
    let (status, fresh) = state(&app, "").await;
    assert_eq!((status, fresh["state"].clone()), (200, json!({ "u": { "new": 2 } })), "nothing of the old stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trimmed_stream_is_folded_from_its_earliest_retained_offset() {
    let app = app().await;
    app.create_json("state/a").await;
    app.append("state/a", &[change("insert", "u", "1", json!(1))]).await;
    let first = app.service.head("state/a").await.unwrap().tail;
    app.append("state/a", &[change("insert", "u", "2", json!(2)), change("update", "u", "1", json!(10))]).await;
    app.service.trim("state/a", first).await.unwrap();
    let (status, view) = state(&app, "").await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["summary"]["foldedFrom"], json!(first), "{view}");
    // The update of a row whose insert was trimmed stores it.
    assert_eq!(view["state"], json!({ "u": { "1": 10, "2": 2 } }));
}

/// The kind's runner follows a run of appends at most every
/// `RUNNER_WAKE_DELAY`, not once per append: one request at a time, each
/// append woke it and wrote its progress record (a third of the writer's
/// appends/s). Its lag still reaches 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kinds_runner_follows_a_run_of_appends_in_few_turns() {
    const APPENDS: usize = 60;
    let app = app().await;
    app.create_json("state/a").await;
    let started = std::time::Instant::now();
    for i in 0..APPENDS {
        app.append("state/a", &[change("upsert", "user", &format!("u{}", i % 7), json!({ "v": i }))]).await;
    }
    let took = started.elapsed();
    app.settle(2).await;
    let store = &app.service.substrate().store;
    let stream = ds_core::StreamHandle::detached("state/a");
    let meta = store.read_meta(&stream).await.unwrap().unwrap();
    let revision = store
        .read_record(&stream, &meta.incarnation, &ds_processor_host::progress_key("users"))
        .await
        .unwrap()
        .expect("the runner checkpointed")
        .revision;
    // One progress record per turn that found something: the first turn
    // (at once, when the create started the slot; appends may already be
    // there), one turn at most every delay while the appends ran, and the
    // last one, plus the record the runner may write when it opens.
    let turns = took.as_millis() / ds_processors_builtin::state::RUNNER_WAKE_DELAY.as_millis() + 4;
    assert!(
        revision <= u64::try_from(turns).unwrap() && (revision as usize) < APPENDS / 2,
        "{revision} progress records for {APPENDS} appends in {took:?}"
    );
}
