//! The host end to end, on the memory, local and AWS (emulator) substrates:
//! appends through the HTTP router wake the processors; the outbox stream
//! receives each transformed event exactly once; the counter's state is
//! right; streams created after start-up, and re-created ones, are picked
//! up; a restart over the same data catches up without a duplicate; a
//! revival alarm armed before a restart fires after it.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{app, order, App, CONFIG};
use ds_processor::{Alarm, StreamIncarnation};
use ds_processor_host::{AlarmScheduler, InProcAlarms};
use serde_json::{json, Value};

const STATUSES: [&str; 3] = ["new", "paid", "new"];

/// 12 orders over two streams created after start-up (with unconsumed
/// events in between); then checks the feed and the counters.
async fn outbox_and_counter(app: &App) {
    app.create_json("orders/a").await;
    app.create_json("orders/b").await;
    for id in 0..12u64 {
        let stream = if id % 2 == 0 { "orders/a" } else { "orders/b" };
        let note = json!({ "type": "note/added", "payload": { "text": "not consumed" } });
        app.append(stream, &[order(id, STATUSES[id as usize % 3]), note]).await;
    }
    let list = app.settle(4).await;
    assert_eq!(list.len(), 4, "two processors on two streams: {list:#?}");
    assert!(list.iter().all(|p| p["acknowledgedThrough"] == p["tail"]), "{list:#?}");

    let feed = app.messages("feed").await;
    let mut got: Vec<(u64, String)> = feed
        .iter()
        .map(|m| {
            assert_eq!(m["type"], "feed/order", "the template's literal: {m}");
            (m["payload"]["id"].as_u64().unwrap(), m["payload"]["from"].as_str().unwrap().to_owned())
        })
        .collect();
    got.sort();
    let want: Vec<(u64, String)> =
        (0..12).map(|id| (id, if id % 2 == 0 { "orders/a" } else { "orders/b" }.to_owned())).collect();
    assert_eq!(got, want, "each order forwarded exactly once, from its stream");

    for (stream, parity) in [("orders/a", 0), ("orders/b", 1)] {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for id in (0..12u64).filter(|id| id % 2 == parity) {
            *by.entry(STATUSES[id as usize % 3].to_owned()).or_default() += 1;
        }
        let shown = app.show("by-status", stream).await;
        assert_eq!(shown["state"], json!({ "count": 6, "by": by, "other": 0 }), "{shown:#}");
        assert_eq!(shown["lag"], json!(0));
        assert_eq!(shown["running"], json!(true));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_outbox_and_counter() {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    outbox_and_counter(&app(substrate, CONFIG).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_outbox_and_counter_and_a_restart_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (substrate, _due) = ds_store_local::local_substrate(dir.path()).unwrap();
        let first = app(substrate, CONFIG).await;
        outbox_and_counter(&first).await;
        first.host.shutdown().await;
    }
    // Same data, new process: the existing streams are caught up at start
    // (nothing new), then new appends flow; nothing is forwarded twice.
    let (substrate, _due) = ds_store_local::local_substrate(dir.path()).unwrap();
    let second = app(substrate, CONFIG).await;
    second.append("orders/a", &[order(100, "late")]).await;
    second.settle(4).await;
    let ids: Vec<u64> = second.messages("feed").await.iter().map(|m| m["payload"]["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), 13, "{ids:?}");
    assert_eq!(ids.iter().filter(|id| **id == 100).count(), 1);
    let a = second.show("by-status", "orders/a").await;
    assert_eq!(a["state"]["count"], json!(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_outbox_and_counter() {
    let Some(factory) = ds_store_aws::test_util::AwsFactory::new("processor_host_aws").await else { return };
    // A table of its own: the host lists every stream of its table at start.
    let mut cfg = factory.cfg.clone();
    cfg.table = format!("ds-processor-host-{}", std::process::id());
    ds_store_aws::test_util::ensure_resources(&factory.conf, &cfg).await;
    outbox_and_counter(&app(factory.aws_with(cfg).substrate(), CONFIG).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_created_stream_is_processed_in_its_new_life() {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    let app = app(substrate, CONFIG).await;
    app.create_json("orders/r").await;
    app.append("orders/r", &[order(1, "new")]).await;
    app.settle(2).await;
    let r = app.call("DELETE", "/v1/stream/orders/r", &[], "").await;
    assert_eq!(r.status, 204);
    app.create_json("orders/r").await;
    app.append("orders/r", &[order(2, "new")]).await;
    app.settle(2).await;
    let ids: Vec<u64> = app.messages("feed").await.iter().map(|m| m["payload"]["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2]);
    let shown = app.show("by-status", "orders/r").await;
    assert_eq!(shown["state"]["count"], json!(1), "the new life's counter starts from zero");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_does_not_match_or_is_not_json_is_left_alone() {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    let app = app(substrate, CONFIG).await;
    let put = app.call("PUT", "/v1/stream/orders/text", &[("content-type", "text/plain")], "").await;
    assert_eq!(put.status, 201);
    let post = app.call("POST", "/v1/stream/orders/text", &[("content-type", "text/plain")], "hello").await;
    assert_eq!(post.status, 204);
    app.create_json("elsewhere/x").await;
    app.append("elsewhere/x", &[order(1, "new")]).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(app.list().await.is_empty());
    assert!(app.messages("feed").await.is_empty());
    let shown = app.call("GET", "/v1/processors/order-feed/streams/orders/text", &[], "").await;
    assert_eq!((shown.status.as_u16(), shown.json()["error"]["code"].clone()), (409, json!("NOT_A_JSON_STREAM")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revival_alarm_armed_before_a_restart_fires_after_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (substrate, _due) = ds_store_local::local_substrate(dir.path()).unwrap();
        let service = ds_core::StreamService::new(substrate, ds_core::ServiceConfig::default());
        let create = ds_core::CreateRequest {
            path: "orders/z".into(),
            content_type: Some("application/json".into()),
            lifetime: Default::default(),
            closed: false,
            body: bytes::Bytes::new(),
            fork: None,
        };
        let incarnation = StreamIncarnation::new(service.create(create).await.unwrap().meta.incarnation.to_string());
        // What a drain leaves behind when work is unfinished: an armed alarm record.
        let alarms = InProcAlarms::manual(service.clone());
        let at_ms = u64::try_from(service.clock().now_ms() + 200).unwrap();
        let alarm = Alarm { slug: "order-feed".into(), incarnation, token: "before-restart".into(), at_ms };
        alarms.arm("orders/z", &alarm).await.unwrap();
    }
    let (substrate, _due) = ds_store_local::local_substrate(dir.path()).unwrap();
    let app = app(substrate, CONFIG).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let revived: Vec<Value> =
            app.messages("orders/z").await.into_iter().filter(|m| m["type"] == "stream/processor-revived").collect();
        if !revived.is_empty() {
            assert_eq!(revived.len(), 1, "{revived:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the re-armed alarm never fired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.settle(2).await;
}
