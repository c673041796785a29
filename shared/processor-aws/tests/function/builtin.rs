//! The built-in processors as a deployment names them (`DS_PROCESSORS_TOML`, the
//! TOML of `serve --processors`), run by the processor function from the
//! table's stream records: the outbox appends exactly once, the counter's
//! state lands in its progress record, and a repeated batch changes nothing.

use ds_lambda_pump::{ProcessorEnv, StreamPump};
use ds_processor_aws::{Deployment, TaskHandlers};
use ds_processors_builtin::Catalog;
use serde_json::json;

use crate::common::*;

const CONFIG: &str = r#"
[[processor]]
kind = "outbox"
slug = "accepted"
streams = "shop/*"
target = "shop-accepted"
create_target = true
consumes = ["order/placed"]
template = { type = "order/accepted", payload = { order = "$/payload/id", source = "$/stream" } }

[[processor]]
kind = "counter"
slug = "shop-count"
streams = "shop/*"
group_by = "/type"
"#;

async fn progress(service: &ds_core::StreamService, path: &str, slug: &str) -> ds_processor::StoredProgress {
    let inc = ds_processor::StreamIncarnation::new(service.head(path).await.expect("head").incarnation.to_string());
    let store = ds_processor_host::RecordProgressStore::new(service.clone(), path, slug);
    ds_processor::ProgressStore::read(&store, &inc).await.expect("progress").expect("a progress record")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_outbox_and_counter_from_the_configuration() {
    let Some(env) = ProcessorEnv::new("builtin_outbox_and_counter").await else { return };
    let svc = env.service();
    // Built before the source exists: `create_target` makes the target.
    let (_, registry) = Catalog::builtin().load(CONFIG, &svc).await.expect("configuration");
    let function = env.function(move |_| Deployment { registry, tasks: TaskHandlers::new() });

    svc.create(json_stream("shop/1")).await.expect("create");
    append(&svc, "shop/1", &order("s1")).await;
    append(&svc, "shop/1", &json!({ "type": "order/shipped", "payload": { "id": "s1" } }).to_string()).await;
    append(&svc, "shop/1", &order("s2")).await;

    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    let first_batch = pump.next_event();
    // Lambda's default timeout (3 s): shorter than the host's 5 s stop
    // margin, which then shrinks to a quarter of the time left.
    let delivered = pump.deliver_all(&function, wall_ms() + 3_000, 10).await;
    assert!(delivered.failed.is_empty(), "{delivered:?}");

    assert_eq!(entry_types(&svc, "shop-accepted").await, ["order/accepted"; 2], "placed orders only, once each");
    // `$/stream` names the source: the host tells the outbox which stream it runs on.
    let inc = svc.head("shop-accepted").await.expect("head").incarnation;
    let page = svc.read_journal("shop-accepted", &inc, 0, 1 << 20).await.expect("read");
    let payloads: Vec<serde_json::Value> = page
        .entries
        .iter()
        .map(|(_, data)| serde_json::from_slice::<serde_json::Value>(data).expect("a JSON entry")["payload"].clone())
        .collect();
    assert_eq!(payloads, [json!({ "order": "s1", "source": "shop/1" }), json!({ "order": "s2", "source": "shop/1" })]);
    let tail = svc.head("shop/1").await.expect("head").tail;
    for slug in ["accepted", "shop-count"] {
        assert_eq!(progress(&svc, "shop/1", slug).await.progress.acknowledged_through(), tail, "{slug} caught up");
    }
    let counted = progress(&svc, "shop/1", "shop-count").await.progress.reduction.state;
    assert_eq!(counted["count"], 3);
    assert_eq!(counted["by"], json!({ "order/placed": 2, "order/shipped": 1 }));

    // The first batch again (a lost ack): nothing new is appended or counted.
    let answer = function.handle(first_batch, deadline()).await.expect("handled");
    assert_eq!(answer["batchItemFailures"], json!([]));
    assert_eq!(entry_types(&svc, "shop-accepted").await.len(), 2);
    assert_eq!(progress(&svc, "shop/1", "shop-count").await.progress.reduction.state["count"], 3);
}
