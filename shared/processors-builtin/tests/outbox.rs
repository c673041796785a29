//! The outbox's effect is exactly once by key: a second run over the same
//! events (as after a crash that lost every progress commit) appends
//! nothing new to the target, on the memory and the local substrate.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bytes::Bytes;
use ds_core::{CreateRequest, ServiceConfig, StreamService};
use ds_processor::{Adapters, Journal, OutgoingEvent, RunnerConfig, StreamIncarnation};
use ds_processor_host::{adapters, InProcAlarms, StreamJournal};
use ds_processor_testkit::harness::MemoryProgressStore;
use ds_processors_builtin::Catalog;
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[processor]]
kind = "outbox"
slug = "o"
streams = "orders/*"
target = "feed"
create_target = true
consumes = ["order/placed"]
template = { type = "feed/order", payload = { id = "$/payload/id", from = "$/stream", at = "$/position" } }
"#;

async fn json_stream(svc: &StreamService, path: &str) -> StreamIncarnation {
    let req = CreateRequest {
        path: path.into(),
        content_type: Some("application/json".into()),
        lifetime: Default::default(),
        closed: false,
        body: Bytes::new(),
        fork: None,
    };
    StreamIncarnation::new(svc.create(req).await.unwrap().meta.incarnation.to_string())
}

async fn feed(svc: &StreamService) -> Vec<Value> {
    let inc = svc.head("feed").await.unwrap().incarnation;
    let page = svc.read_journal("feed", &inc, 0, 1 << 20).await.unwrap();
    page.entries.iter().map(|(_, data)| serde_json::from_slice(data).unwrap()).collect()
}

async fn forwards_once_by_key(svc: StreamService) {
    let inc = json_stream(&svc, "orders/1").await;
    let journal = Arc::new(StreamJournal::new(svc.clone(), "orders/1"));
    for id in 0..5 {
        let event = OutgoingEvent::new("order/placed", json!({ "id": id })).encode();
        journal.append(&inc, event, &format!("k{id}")).await.unwrap();
        let other = OutgoingEvent::new("order/noted", json!({})).encode();
        journal.append(&inc, other, &format!("n{id}")).await.unwrap();
    }
    let (_, registry) = Catalog::builtin().load(CONFIG, &svc).await.unwrap();
    let spec = registry.for_path("orders/1").remove(0);

    // First run: its progress commits go to a store that is then lost.
    let lost = Adapters::without_recovery(journal.clone(), Arc::new(MemoryProgressStore::default()));
    let first = spec.open_on("orders/1", lost, RunnerConfig::default()).await.unwrap();
    first.catch_up().await.unwrap();
    let once = feed(&svc).await;
    assert_eq!(once.len(), 5, "{once:#?}");
    assert_eq!(once[0]["payload"]["from"], "orders/1");
    assert_eq!(once[0]["type"], "feed/order");

    // Second run from nothing: every event is processed again, under the
    // same idempotency keys, and the target dedupes each append.
    let real = adapters(&svc, "orders/1", "o", InProcAlarms::manual(svc.clone()));
    let second = spec.open_on("orders/1", real, RunnerConfig::default()).await.unwrap();
    second.catch_up().await.unwrap();
    assert_eq!(second.state_json(), json!({ "forwarded": 5 }));
    assert_eq!(feed(&svc).await, once, "nothing appended twice");
}

#[tokio::test]
async fn memory() {
    let (substrate, _due) = ds_store_memory::memory_substrate();
    forwards_once_by_key(StreamService::new(substrate, ServiceConfig::default())).await;
}

#[tokio::test]
async fn local() {
    let dir = tempfile::tempdir().unwrap();
    let (substrate, _due) = ds_store_local::local_substrate(dir.path()).unwrap();
    forwards_once_by_key(StreamService::new(substrate, ServiceConfig::default())).await;
}
