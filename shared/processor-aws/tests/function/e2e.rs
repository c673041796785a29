//! Appends through the HTTP router become processor effects, exactly once;
//! two instances on one record; unreadable records and unknown paths.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use ds_lambda_pump::{ProcessorEnv, SqsPump, StreamPump};
use ds_processor::{CheckpointCadence, RunnerConfig};
use ds_processor_aws::function::ParkedRecord;
use ds_processor_aws::upkeep::UpkeepPolicy;
use ds_processor_aws::{HostConfig, ProcessorFunction, DEFAULT_CADENCE};
use ds_store_aws::schema;
use serde_json::json;
use tower::ServiceExt;

use crate::common::*;

async fn send(router: &axum::Router, method: &str, path: &str, body: String) -> http::StatusCode {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("/v1/stream/{path}"))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    router.clone().oneshot(req).await.expect("routed").status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_through_http_become_effects_exactly_once() {
    let Some(env) = ProcessorEnv::new("appends_through_http_become_effects_exactly_once").await else { return };
    let router = ds_http::router(env.service(), ds_http::HttpConfig::default());
    for path in ["orders/a", RELAYED, AUDIT] {
        assert_eq!(send(&router, "PUT", path, String::new()).await, http::StatusCode::CREATED);
    }
    for id in ["a1", "a2", "a3"] {
        assert!(send(&router, "POST", "orders/a", order(id)).await.is_success());
    }
    let world = World::default();
    let function = env.function(|w| world.deployment(w, None));
    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    let first_batch = pump.next_event();
    let delivered = pump.deliver_all(&function, deadline(), 10).await;
    assert!(delivered.failed.is_empty(), "{delivered:?}");
    assert!(delivered.filtered_out > 0, "meta writes and progress records never reach the function");
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url).deliver_all(&function, deadline(), 10).await;
    assert_eq!(tasks.failed, 0);

    let svc = env.service();
    assert_eq!(entry_types(&svc, RELAYED).await, ["order/relayed"; 3]);
    assert_eq!(world.notify.labels(), ["a1", "a2", "a3"]);
    assert_eq!(world.audit.labels(), ["a1", "a2", "a3"]);
    let tail = svc.head("orders/a").await.expect("head").tail;
    assert_eq!(acknowledged(&svc, "orders/a").await, tail);

    // The same batch again (a lost ack), to another instance: nothing new.
    let again = env.function(|w| world.deployment(w, None));
    let answer = again.handle(first_batch, deadline()).await.expect("handled");
    assert_eq!(answer["batchItemFailures"], json!([]));
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 3);
    assert_eq!(world.notify.labels().len(), 3);
    assert_eq!(acknowledged(&svc, "orders/a").await, tail);
    assert_eq!(
        SqsPump::new(env.sqs.clone(), &env.task_queue_url).deliver_all(&again, deadline(), 5).await.delivered,
        0
    );
}

/// What two instances handling one record did: fenced commits of the fast
/// and the slow one, and the notifier's attempts.
struct TwoInstances {
    fenced: (u64, u64),
    attempts: usize,
}

/// One record handled by two instances with `host`'s cadence: the slow one
/// stops right after b1's notification until the fast one has processed the
/// whole batch. Whatever the cadence, the work is done once: the cursor ends
/// at the tail and never goes back, the outbox holds each relay once.
async fn one_record_on_two_instances(env: &ProcessorEnv, host: HostConfig) -> TwoInstances {
    let svc = env.service();
    for path in ["orders/b", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    for id in ["b1", "b2", "b3"] {
        append(&svc, "orders/b", &order(id)).await;
    }
    let world = World::default();
    let deploy = |w: &_| world.deployment(w, None);
    let (slow, fast) = (
        Arc::new(env.function_with(deploy, host.clone(), UpkeepPolicy::default())),
        env.function_with(deploy, host, UpkeepPolicy::default()),
    );
    let mut pump = StreamPump::new(env).await;
    pump.fetch().await;
    let event = pump.next_event();

    let (reached_tx, reached_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel();
    world.notify.after(
        "b1",
        Box::new(move || {
            Box::pin(async move {
                let _ = reached_tx.send(());
                let _ = go_rx.await;
            })
        }),
    );
    let slow_run = tokio::spawn({
        let (slow, event) = (Arc::clone(&slow), event.clone());
        async move { slow.handle(event, deadline()).await.map_err(|e| e.to_string()) }
    });
    reached_rx.await.expect("the slow instance reached b1");
    let answer = fast.handle(event, deadline()).await.expect("fast handled");
    assert_eq!(answer["batchItemFailures"], json!([]));
    let tail = svc.head("orders/b").await.expect("head").tail;
    assert_eq!(acknowledged(&svc, "orders/b").await, tail);
    let _ = go_tx.send(());
    let answer = slow_run.await.expect("joined").expect("slow handled");
    assert_eq!(answer["batchItemFailures"], json!([]), "fenced is not failed: the other instance did the work");

    assert_eq!(acknowledged(&svc, "orders/b").await, tail, "the cursor never went back");
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 3, "outbox appends dedupe by key");
    assert_eq!(world.notify.labels(), ["b1", "b2", "b3"]);
    let fenced = |f: &ProcessorFunction| f.processors().stats().fenced.load(Ordering::Relaxed);
    TwoInstances { fenced: (fenced(&fast), fenced(&slow)), attempts: world.notify.attempts() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_record_on_two_instances_progresses_once_and_fences_the_other() {
    let Some(env) = ProcessorEnv::new("one_record_on_two_instances").await else { return };
    // A checkpoint after every event: the slow instance's next one, right
    // after b1, is fenced and it stops there.
    let every_event = HostConfig { runner: RunnerConfig::default(), ..HostConfig::default() };
    assert_eq!(every_event.runner.cadence, CheckpointCadence::EveryEvent);
    let seen = one_record_on_two_instances(&env, every_event).await;
    assert_eq!(seen.fenced, (0, 1), "the slow instance was fenced once, the fast one never");
    assert_eq!(seen.attempts, 4, "only b1 was done twice, before the slow instance was fenced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_record_on_two_instances_with_the_default_cadence_repeats_only_keyed_effects() {
    let Some(env) = ProcessorEnv::new("one_record_on_two_instances_default").await else { return };
    // The function's default, a checkpoint every 100 events: the slow
    // instance has none between b1 and the end of the batch, so it repeats
    // b2 and b3 (their effects carry the keys of the first time: the outbox
    // still holds each relay once) and never moves the cursor back.
    let seen = one_record_on_two_instances(&env, HostConfig::default()).await;
    assert_eq!(HostConfig::default().runner.cadence, DEFAULT_CADENCE);
    assert_eq!(seen.fenced.0, 0, "the fast instance was never fenced");
    assert_eq!(seen.attempts, 6, "the slow instance repeated b2 and b3, nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_records_are_parked_and_unknown_paths_skipped() {
    let Some(env) = ProcessorEnv::new("unreadable_records_are_parked").await else { return };
    let svc = env.service();
    for path in ["orders/c", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    append(&svc, "orders/c", &order("c1")).await;
    let world = World::default();
    let function = env.function(|w| world.deployment(w, None));
    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    let mut event = pump.next_event();
    let not_a_record =
        json!({ "eventSource": "aws:dynamodb", "eventName": "INSERT", "dynamodb": { "SequenceNumber": "1" } });
    let bad_key = json!({
        "eventSource": "aws:dynamodb", "eventName": "INSERT",
        "dynamodb": { "Keys": { "pk": {"S": "stream#orders/c"}, "sk": {"S": "c#inc#not-hex"} }, "SequenceNumber": "2" }
    });
    let ghost = json!({
        "eventSource": "aws:dynamodb", "eventName": "INSERT",
        "dynamodb": { "Keys": { "pk": {"S": "stream#orders/ghost"}, "sk": {"S": schema::chunk_sk("gone", 10)} }, "SequenceNumber": "3" }
    });
    let records = event["Records"].as_array_mut().expect("records");
    records.insert(0, ghost);
    records.insert(0, bad_key);
    records.insert(0, not_a_record);
    let answer = function.handle(event, deadline()).await.expect("handled");
    assert_eq!(answer["batchItemFailures"], json!([]), "nothing to retry: unreadable records are parked");
    assert_eq!(world.notify.labels(), ["c1"], "the readable record was processed");

    let parked: Vec<ParkedRecord> =
        env.peek(&env.parked_queue_url).await.iter().map(|b| serde_json::from_str(b).expect("parked record")).collect();
    assert_eq!(parked.len(), 2, "{parked:?}");
    assert!(parked.iter().any(|p| p.reason.contains("not a DynamoDB stream record") && p.record.contains("\"1\"")));
    assert!(parked.iter().any(|p| p.reason.contains("sort key") && p.record.contains("not-hex")));

    // A malformed invocation (not any event this function knows) fails.
    assert!(function.handle(json!({ "hello": "world" }), deadline()).await.is_err());
}
