//! Lifecycle events on EventBridge, against the emulator: the processor
//! function, fed the table's stream by the pump as Lambda would, sends one
//! event per create, close and delete to the bus; a rule on the bus
//! delivers them to an SQS queue the test reads. The first sends fail (a
//! fault rule scoped to the function's access key), so the records come
//! again and every event still arrives, each under one `detail.id`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use ds_core::{AppendRequest, CreateRequest, ForkRequest, REGISTRY_PATH};
use ds_lambda_pump::{ProcessorEnv, StreamPump};
use ds_processor_aws::lifecycle::{LifecycleEvents, SOURCE};
use ds_processor_aws::Deployment;
use ds_store_aws::test_util::{count, CallCounter};
use serde_json::{json, Value};

#[path = "common/mod.rs"]
mod common;
use common::*;

/// A bus whose events (from [`SOURCE`]) land in a new queue; its URL.
async fn bus_into_queue(env: &ProcessorEnv, bus: &str) -> String {
    let events = aws_sdk_eventbridge::Client::new(&env.conf);
    events.create_event_bus().name(bus).send().await.expect("create bus");
    let queue = env.sqs.create_queue().queue_name(format!("{bus}-q")).send().await.expect("queue");
    let url = queue.queue_url().expect("url").to_owned();
    let attrs = env
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue arn");
    let arn = attrs.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)).cloned();
    let pattern = json!({ "source": [SOURCE] }).to_string();
    events.put_rule().name("all").event_bus_name(bus).event_pattern(pattern).send().await.expect("rule");
    let target = aws_sdk_eventbridge::types::Target::builder().id("q").arn(arn.expect("arn")).build().expect("target");
    events.put_targets().rule("all").event_bus_name(bus).targets(target).send().await.expect("target");
    url
}

/// Every event in the queue: `(detail-type, detail)`.
async fn received(env: &ProcessorEnv, url: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    loop {
        let got = env.sqs.receive_message().queue_url(url).max_number_of_messages(10).send().await.expect("receive");
        let messages = got.messages();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let event: Value = serde_json::from_str(m.body().unwrap_or_default()).expect("an event");
            assert_eq!(event["source"], SOURCE);
            out.push((event["detail-type"].as_str().unwrap_or_default().to_owned(), event["detail"].clone()));
            env.sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
    }
}

fn put_events(calls: &ds_store_aws::test_util::Calls) -> u64 {
    count(calls, "events", "PutEvents")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_create_close_and_delete_reaches_the_bus_at_least_once_under_one_id() {
    let Some(env) = ProcessorEnv::new("lifecycle_events").await else { return };
    let Some(counter) = CallCounter::new() else { return };
    let key = format!("lifecycle-{}", wall_ms());
    let env = env.as_access_key(&key);
    let bus = format!("dsp-life-{}", wall_ms());
    let queue = bus_into_queue(&env, &bus).await;
    let svc = env.service();
    let mut pump = StreamPump::new(&env).await;

    // a: created, then closed by its last append; b: created, forked as c,
    // soft-deleted; c: deleted (collecting b).
    svc.create(json_stream("life/a")).await.expect("create a");
    let close = AppendRequest {
        path: "life/a".into(),
        content_type: Some("application/json".into()),
        body: Bytes::from_static(b"[{\"type\":\"x\"}]"),
        close: true,
        seq: None,
        producer: None,
        dedupe_key: None,
        incarnation: None,
        expect_tail: None,
        trace_context: None,
    };
    svc.append(close).await.expect("close a");
    svc.create(json_stream("life/b")).await.expect("create b");
    let fork = ForkRequest { source: "life/b".into(), offset: None, sub_offset: 0 };
    svc.create(CreateRequest { fork: Some(fork), content_type: None, ..json_stream("life/c") }).await.expect("fork c");
    svc.delete("life/b").await.expect("soft-delete b");
    svc.delete("life/c").await.expect("delete c");

    // The function's first three sends fail (the SDK's three attempts at one
    // call): its records fail and come again.
    let rule =
        json!([{"service": "events", "operation": "PutEvents", "fault": "error", "count": 3, "access_key": key}]);
    counter.add_fault_rules(rule).await;
    let before = put_events(&counter.calls().await);
    let function = env.function(|_| Deployment::default()).with_lifecycle(LifecycleEvents::new(
        aws_sdk_eventbridge::Client::new(&env.conf),
        &bus,
        env.service(),
    ));
    let delivered = pump.deliver_all(&function, deadline(), 20).await;
    assert!(!delivered.failed.is_empty(), "the failed send failed its records: {delivered:?}");
    assert!(pump.pending().is_empty(), "every record was delivered again until it passed");
    let sends = put_events(&counter.calls().await) - before;
    assert!(sends >= 4, "three refused attempts and the send that passed, counted at the emulator: {sends}");

    let events = received(&env, &queue).await;
    let mut by_id: BTreeMap<String, (String, Value)> = BTreeMap::new();
    for (kind, detail) in &events {
        let id = detail["id"].as_str().expect("an id").to_owned();
        if let Some(first) = by_id.insert(id.clone(), (kind.clone(), detail.clone())) {
            assert_eq!(first, (kind.clone(), detail.clone()), "a resend of {id} is the same event");
        }
    }
    let got: BTreeSet<(String, String)> = by_id
        .values()
        .map(|(kind, d)| (kind.clone(), d["path"].as_str().unwrap_or_default().to_owned()))
        .filter(|(_, path)| path.starts_with("life/"))
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("Stream Created", "life/a"),
        ("Stream Closed", "life/a"),
        ("Stream Created", "life/b"),
        ("Stream Created", "life/c"),
        ("Stream Deleted", "life/b"),
        ("Stream Deleted", "life/c"),
    ]
    .iter()
    .map(|(k, p)| ((*k).to_owned(), (*p).to_owned()))
    .collect();
    assert_eq!(got, want, "one event per change, none missing: {events:?}");
    assert_eq!(by_id.len(), 6, "six changes, six ids: {by_id:?}");
    let created = by_id.values().find(|(k, d)| k == "Stream Created" && d["path"] == "life/a").expect("a's create");
    assert_eq!(created.1["contentType"], "application/json");
    assert!(created.1["createdAt"].is_i64());
    let registry = svc.head(REGISTRY_PATH).await.expect("the registry");
    assert!(by_id.keys().all(|id| id.starts_with(&format!("{}/", registry.incarnation))), "{by_id:?}");
}
