//! Subscriptions on the AWS plane: the HTTP router (as the HTTP function
//! builds it, `FeedWakes`) only serves the API; the wakes come from the
//! processor function, driven by the table's stream records (the pump with
//! the template's filter) and its timer messages (the task queue). Webhooks
//! go to a receiver on 127.0.0.1 only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use ds_core::StreamService;
use ds_lambda_pump::{ProcessorEnv, SqsPump, StreamPump};
use ds_processor_aws::{Deployment, ProcessorFunction};
use ds_subscriptions::{FeedWakes, KeyRing, RecordKeyStore, Subscriptions, SubscriptionsConfig, UrlPolicy};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::deadline;

/// A webhook receiver on 127.0.0.1 answering from a script (then `{}`).
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<(Instant, Value)>>>,
}

async fn receiver(script: Vec<(u16, Value)>) -> Receiver {
    let got: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let (got2, script2) = (Arc::clone(&got), Arc::clone(&script));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (got, script) = (Arc::clone(&got2), Arc::clone(&script2));
            async move {
                let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                got.lock().expect("got").push((Instant::now(), value));
                let (status, answer) = script.lock().expect("script").pop_front().unwrap_or((200, json!({})));
                (http::StatusCode::from_u16(status).expect("status"), axum::Json(answer))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver { url, got }
}

impl Receiver {
    fn count(&self) -> usize {
        self.got.lock().expect("got").len()
    }

    fn nth(&self, i: usize) -> (Instant, Value) {
        self.got.lock().expect("got")[i].clone()
    }
}

/// The HTTP function's router: subscriptions served, never run.
async fn http_router(service: StreamService) -> axum::Router {
    let keys = KeyRing::open(&RecordKeyStore::new(Arc::clone(&service.substrate().store))).await.expect("keys");
    let cfg = SubscriptionsConfig {
        url_policy: UrlPolicy { allow_loopback: true },
        sole_writer: false,
        ..SubscriptionsConfig::default()
    };
    let engine = Subscriptions::new(service.clone(), keys, cfg, Arc::new(FeedWakes)).expect("engine");
    let ops = ds_http::Operations { subscriptions: Some(engine), store_name: "aws", ..ds_http::Operations::default() };
    ds_http::router_with(service, ds_http::HttpConfig::default(), ops)
}

async fn call(
    router: &axum::Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (u16, Value) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("/v1/stream/{path}"))
        .header("host", "127.0.0.1:1")
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let resp = router.clone().oneshot(req.body(body).expect("request")).await.expect("routed");
    let status = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Pumps the table's stream and the task queue into `function` until
/// `done` holds (or `secs` pass).
async fn pump_for(
    secs: u64,
    function: &ProcessorFunction,
    stream: &mut StreamPump,
    tasks: &SqsPump,
    mut done: impl FnMut() -> bool,
) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        let d = stream.deliver_all(function, deadline(), 20).await;
        assert!(d.failed.is_empty(), "stream records failed: {d:?}");
        let t = tasks.deliver_all(function, deadline(), 20).await;
        assert_eq!(t.failed, 0, "timer messages failed");
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn acked(sub: &Value, path: &str) -> String {
    let streams = sub["streams"].as_array().cloned().unwrap_or_default();
    let stream = streams.iter().find(|s| s["path"] == path).cloned().unwrap_or(Value::Null);
    stream["acked_offset"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_sent_by_the_processor_plane_with_retries_and_fencing() {
    let Some(env) = ProcessorEnv::new("webhooks_are_sent_by_the_processor_plane_with_retries_and_fencing").await else {
        return;
    };
    // First delivery refused (a retry is owed after ~1 s), the retry
    // accepted without `done` (the worker calls back).
    let hook = receiver(vec![(500, json!({})), (200, json!({}))]).await;
    let router = http_router(env.service()).await;
    let sub = json!({"type": "webhook", "pattern": "events/*", "webhook": {"url": hook.url}, "lease_ttl_ms": 60000});
    assert_eq!(call(&router, "PUT", "__ds/subscriptions/s1", Some(sub), None).await.0, 201);
    assert_eq!(call(&router, "PUT", "events/a", Some(json!({"n": 1})), None).await.0, 201);
    assert_eq!(hook.count(), 0, "the HTTP function never sends a webhook");

    let function = env.function_with_subscriptions(|_| Deployment::default()).await;
    let mut stream = StreamPump::new(&env).await;
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url);
    assert!(pump_for(15, &function, &mut stream, &tasks, || hook.count() >= 1).await, "no first delivery");
    let (first_at, first) = hook.nth(0);
    assert_eq!(first["subscription_id"], "s1");
    assert_eq!(first["streams"][0]["path"], "events/a");
    assert!(pump_for(15, &function, &mut stream, &tasks, || hook.count() >= 2).await, "the retry never came");
    let (retry_at, retry) = hook.nth(1);
    let waited = retry_at - first_at;
    assert!(waited >= Duration::from_millis(750), "retried after {waited:?}: the 1 s backoff (±20%) was not kept");
    assert_eq!(retry["streams"][0]["path"], "events/a", "the same work, woken again");
    assert!(retry["generation"].as_u64() > first["generation"].as_u64(), "a failed wake is replaced by a newer one");

    // Two HTTP function instances take the same callback at once: exactly
    // one wins, the other is fenced.
    let other = http_router(env.service()).await;
    let tail = retry["streams"][0]["tail_offset"].clone();
    let ack = json!({"wake_id": retry["wake_id"], "generation": retry["generation"],
                     "acks": [{"stream": "events/a", "offset": tail}], "done": true});
    let token = retry["callback_token"].as_str().expect("token").to_owned();
    let path = "__ds/subscriptions/s1/callback";
    let (a, b) = tokio::join!(
        call(&router, "POST", path, Some(ack.clone()), Some(&token)),
        call(&other, "POST", path, Some(ack.clone()), Some(&token)),
    );
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{a:?} {b:?}");
    let fenced = if a.0 == 409 { a.1 } else { b.1 };
    assert_eq!(fenced["error"]["code"], "FENCED");
    let (_, state) = call(&router, "GET", "__ds/subscriptions/s1", None, None).await;
    assert_eq!(acked(&state, "events/a"), tail.as_str().expect("offset"));

    // More data: the acked record's change and the chunk reach the plane,
    // which wakes the worker again; nothing more is sent for old data.
    assert_eq!(call(&router, "POST", "events/a", Some(json!({"n": 2})), None).await.0, 204);
    assert!(pump_for(15, &function, &mut stream, &tasks, || hook.count() >= 3).await, "no wake for new data");
    let (_, third) = hook.nth(2);
    assert_ne!(third["wake_id"], retry["wake_id"]);
    assert_eq!(third["streams"][0]["acked_offset"], tail);

    // Deleted: the plane drops it, and later data wakes no one.
    assert_eq!(call(&router, "DELETE", "__ds/subscriptions/s1", None, None).await.0, 204);
    assert_eq!(call(&router, "POST", "events/a", Some(json!({"n": 3})), None).await.0, 204);
    assert_eq!(call(&router, "PUT", "events/b", Some(json!({"n": 1})), None).await.0, 201);
    pump_for(3, &function, &mut stream, &tasks, || false).await;
    assert_eq!(hook.count(), 3, "a deleted subscription was woken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_wake_leases_end_by_timer_message_and_wake_again() {
    let Some(env) = ProcessorEnv::new("pull_wake_leases_end_by_timer_message_and_wake_again").await else { return };
    let router = http_router(env.service()).await;
    assert_eq!(call(&router, "PUT", "wake/pool", Some(json!([])), None).await.0, 201);
    let sub = json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wake/pool", "lease_ttl_ms": 1000});
    assert_eq!(call(&router, "PUT", "__ds/subscriptions/p1", Some(sub), None).await.0, 201);
    assert_eq!(call(&router, "PUT", "jobs/1", Some(json!({"job": 1})), None).await.0, 201);

    let function = env.function_with_subscriptions(|_| Deployment::default()).await;
    let mut stream = StreamPump::new(&env).await;
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url);
    let svc = env.service();
    let wakes = || {
        let svc = svc.clone();
        async move {
            let inc = svc.head("wake/pool").await.expect("head").incarnation;
            svc.read_journal("wake/pool", &inc, 0, 1 << 20).await.expect("read").entries.len()
        }
    };
    let until = Instant::now() + Duration::from_secs(15);
    while wakes().await == 0 && Instant::now() < until {
        pump_for(15, &function, &mut stream, &tasks, || true).await;
    }
    assert_eq!(wakes().await, 1, "one wake event for the new stream");

    // Claimed, never acked: the lease ends after 1 s by a timer message,
    // and the work still pending is woken again.
    let (status, claimed) =
        call(&router, "POST", "__ds/subscriptions/p1/claim", Some(json!({"worker": "w1"})), None).await;
    assert_eq!(status, 200, "{claimed}");
    let claimed_at = Instant::now();
    let until = Instant::now() + Duration::from_secs(15);
    while wakes().await < 2 && Instant::now() < until {
        pump_for(15, &function, &mut stream, &tasks, || true).await;
    }
    assert_eq!(wakes().await, 2, "the expired lease's work was woken again");
    assert!(claimed_at.elapsed() >= Duration::from_millis(1000), "woken before the lease ended");
    let (status, again) =
        call(&router, "POST", "__ds/subscriptions/p1/claim", Some(json!({"worker": "w2"})), None).await;
    assert_eq!(status, 200, "the lease of w1 is over: {again}");
    assert!(again["generation"].as_u64() > claimed["generation"].as_u64());
}

/// A webhook receiver on 127.0.0.1 that records each delivery, then holds
/// its answer until `release` has a permit: a receiver as slow as the test
/// wants.
async fn held_receiver(release: Arc<tokio::sync::Semaphore>) -> Receiver {
    let got: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let got2 = Arc::clone(&got);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (got, release) = (Arc::clone(&got2), Arc::clone(&release));
            async move {
                got.lock().expect("got").push((Instant::now(), serde_json::from_slice(&body).unwrap_or(Value::Null)));
                let _held = release.acquire().await.expect("release");
                axum::Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver { url, got }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_delays_only_its_own_subscription() {
    let Some(env) = ProcessorEnv::new("a_slow_receiver_delays_only_its_own_subscription").await else { return };
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let slow = held_receiver(Arc::clone(&release)).await;
    let fast = receiver(Vec::new()).await;
    let router = http_router(env.service()).await;
    for (id, pattern, url) in [("a-slow", "a-slow/*", &slow.url), ("b-fast", "b-fast/*", &fast.url)] {
        let sub = json!({"type": "webhook", "pattern": pattern, "webhook": {"url": url}, "lease_ttl_ms": 60000});
        assert_eq!(call(&router, "PUT", &format!("__ds/subscriptions/{id}"), Some(sub), None).await.0, 201);
    }
    assert_eq!(call(&router, "PUT", "a-slow/1", Some(json!({"n": 1})), None).await.0, 201);
    assert_eq!(call(&router, "PUT", "b-fast/1", Some(json!({"n": 1})), None).await.0, 201);

    // The table-stream batch with both streams' data sends no webhook: it
    // hands each delivery to the task queue.
    let function = Arc::new(env.function_with_subscriptions(|_| Deployment::default()).await);
    let mut stream = StreamPump::new(&env).await;
    let d = tokio::time::timeout(Duration::from_secs(60), stream.deliver_all(&*function, deadline(), 20))
        .await
        .expect("the stream batch waits on no receiver");
    assert!(d.failed.is_empty(), "{d:?}");
    assert_eq!((slow.count(), fast.count()), (0, 0), "no delivery ran in the stream invocation");

    // One SQS batch holding both deliveries: the fast receiver gets its
    // delivery while the slow one still holds its answer.
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url);
    let (event, _) = tasks.receive().await;
    let ids: Vec<String> = event["Records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str()?).ok()?["id"].as_str().map(str::to_owned))
        .collect();
    assert!(ids.contains(&"a-slow".to_owned()) && ids.contains(&"b-fast".to_owned()), "one batch: {ids:?}");
    let sqs_invocation = {
        let function = Arc::clone(&function);
        tokio::spawn(async move { function.handle(event, deadline()).await.map_err(|e| e.to_string()) })
    };
    // Within the 10 s webhook timeout: delivered one after the other, the
    // fast one would wait for the slow one to time out.
    let until = Instant::now() + Duration::from_secs(8);
    while fast.count() == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fast.count(), 1, "the fast subscription was delivered while the slow receiver held its answer");
    assert_eq!(slow.count(), 1, "the slow receiver got its delivery and still holds it");
    assert!(!sqs_invocation.is_finished(), "the slow delivery is still running");
    release.add_permits(16);
    let answer = sqs_invocation.await.expect("joined").expect("handled");
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    assert_eq!(
        (slow.nth(0).1["subscription_id"].clone(), fast.nth(0).1["subscription_id"].clone()),
        (json!("a-slow"), json!("b-fast"))
    );
}
