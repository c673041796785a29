//! A crash at every boundary of the host: the instance dies (its
//! invocation is aborted and the instance dropped), the event source
//! delivers again to a new instance, and every effect happens exactly once
//! by key, the cursor never moves back and no event is skipped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ds_lambda_pump::{ProcessorEnv, SchedulePump, SqsPump, StreamPump, TEST_VISIBILITY_SECS};
use ds_processor_aws::ProcessorFunction;
use serde_json::{json, Value};

use crate::common::*;

/// Runs `event` on `function` until `crashed` fires, then kills the run.
async fn crash_during(function: Arc<ProcessorFunction>, event: Value, crashed: tokio::sync::oneshot::Receiver<()>) {
    let run = tokio::spawn(async move { function.handle(event, deadline()).await.map_err(|e| e.to_string()) });
    tokio::time::timeout(Duration::from_secs(30), crashed).await.expect("the crash point was reached").expect("signal");
    run.abort();
    assert!(run.await.is_err_and(|e| e.is_cancelled()), "the invocation died at the crash point");
}

fn revived(types: &[String]) -> usize {
    types.iter().filter(|t| *t == "stream/processor-revived").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_every_boundary_repeats_no_effect_and_skips_no_event() {
    let Some(env) = ProcessorEnv::new("a_crash_at_every_boundary").await else { return };
    let svc = env.service();
    for path in ["orders/x", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    let world = World::default();
    let fresh = || Arc::new(env.function(|w| world.deployment(w, None)));
    let mut pump = StreamPump::new(&env).await;
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url);
    let mut acks = vec![0u64];
    let mut check_ack = |ack: u64| {
        assert!(ack >= *acks.last().expect("ack"), "the cursor moved back: {acks:?} then {ack}");
        acks.push(ack);
    };

    // 1. After the effect, before the progress commit.
    append(&svc, "orders/x", &order("x1")).await;
    append(&svc, "orders/x", &order("x2")).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    world.notify.after("x1", crash(tx));
    pump.fetch().await;
    crash_during(fresh(), pump.next_event(), rx).await;
    assert_eq!(world.notify.labels(), ["x1"]);
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 1, "x1's outbox append landed before the crash");
    check_ack(acknowledged(&svc, "orders/x").await);
    let f = fresh();
    assert!(pump.deliver_all(&f, deadline(), 10).await.failed.is_empty());
    assert_eq!(world.notify.labels(), ["x1", "x2"]);
    assert_eq!(world.notify.attempts(), 3, "x1 notified again under its key, x2 once");
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 2, "x1's outbox append deduped by key");
    check_ack(acknowledged(&svc, "orders/x").await);

    // 2. After the progress commit, before the batch was acknowledged.
    append(&svc, "orders/x", &order("x3")).await;
    pump.fetch().await;
    let batch = pump.next_event();
    f.handle(batch, deadline()).await.expect("handled");
    let ack = acknowledged(&svc, "orders/x").await;
    check_ack(ack);
    drop(f);
    let f = fresh();
    assert!(pump.deliver_all(&f, deadline(), 10).await.failed.is_empty(), "the same batch, delivered again");
    assert_eq!(world.notify.attempts(), 4, "nothing was done again");
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 3);
    assert_eq!(acknowledged(&svc, "orders/x").await, ack);
    assert_eq!(tasks.deliver_all(&f, deadline(), 10).await.failed, 0);
    assert_eq!(world.audit.labels(), ["x1", "x2", "x3"]);

    // 3. Mid hand-off to SQS: the task is enqueued, the instance dies before
    //    the runner learns it; the revival alarm armed for it fires.
    append(&svc, "orders/x", &order("x4")).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let dying_queue = Arc::new(CrashAfterEnqueue { inner: env.task_queue(), crash: Mutex::new(Some(tx)) });
    let dying = Arc::new(env.function(|w| world.deployment(w, Some(dying_queue))));
    pump.fetch().await;
    crash_during(Arc::clone(&dying), pump.next_event(), rx).await;
    drop(dying);
    let schedules = SchedulePump::new(&env);
    assert_eq!(schedules.pending().await.len(), 1, "the revival alarm is armed");
    let f = fresh();
    let far = i64::try_from(wall_ms()).expect("ms") + 3_600_000;
    assert_eq!(schedules.fire_due(&f, far, deadline()).await, 1);
    assert!(pump.deliver_all(&f, deadline(), 10).await.failed.is_empty());
    assert_eq!(tasks.deliver_all(&f, deadline(), 10).await.failed, 0);
    assert_eq!(world.audit.labels(), ["x1", "x2", "x3", "x4"], "the handed-off task ran once");
    assert_eq!(revived(&entry_types(&svc, "orders/x").await), 1);
    assert!(schedules.pending().await.is_empty(), "no alarm left behind");
    check_ack(acknowledged(&svc, "orders/x").await);
    // The schedule delivered again (Scheduler retries): one revival event.
    let input = json!({
        "kind": "processor-revival", "path": "orders/x", "slug": "relay",
        "incarnation": svc.head("orders/x").await.expect("head").incarnation, "token": "t-again", "atMs": 1
    });
    f.handle(input.clone(), deadline()).await.expect("revival");
    f.handle(input, deadline()).await.expect("revival again");
    assert_eq!(revived(&entry_types(&svc, "orders/x").await), 2, "one per arming, however often delivered");

    // 4. The task's consumer dies after the effect, before recording it.
    append(&svc, "orders/x", &order("x5")).await;
    assert!(pump.deliver_all(&f, deadline(), 10).await.failed.is_empty());
    let (tx, rx) = tokio::sync::oneshot::channel();
    world.audit.after("x5", crash(tx));
    let (event, _) = tasks.receive().await;
    crash_during(fresh(), event, rx).await;
    tokio::time::sleep(Duration::from_millis(u64::from(TEST_VISIBILITY_SECS) * 1000 + 300)).await;
    let before = world.audit.attempts();
    assert_eq!(tasks.deliver_all(&f, deadline(), 10).await.failed, 0);
    assert_eq!(world.audit.attempts(), before + 1, "run again under its key");

    // 5. ... and after recording it, before the message was deleted.
    append(&svc, "orders/x", &order("x6")).await;
    assert!(pump.deliver_all(&f, deadline(), 10).await.failed.is_empty());
    let (event, _) = tasks.receive().await;
    f.handle(event, deadline()).await.expect("ran");
    let before = world.audit.attempts();
    tokio::time::sleep(Duration::from_millis(u64::from(TEST_VISIBILITY_SECS) * 1000 + 300)).await;
    assert_eq!(tasks.deliver_all(&f, deadline(), 10).await.failed, 0);
    assert_eq!(world.audit.attempts(), before, "a recorded task is not run again");

    let ids: Vec<String> = (1..=6).map(|i| format!("x{i}")).collect();
    assert_eq!(world.notify.labels(), ids, "no event skipped");
    assert_eq!(world.audit.labels(), ids);
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 6);
    check_ack(acknowledged(&svc, "orders/x").await);
    assert_eq!(*acks.last().expect("ack"), svc.head("orders/x").await.expect("head").tail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_keeps_failing_is_dead_lettered() {
    let Some(env) = ProcessorEnv::new("a_task_that_keeps_failing").await else { return };
    let function = env.function(|_| ds_processor_aws::Deployment::default());
    let task = ds_processor_aws::Task {
        handler: "nobody".into(),
        idempotency_key: "k".into(),
        path: "p".into(),
        incarnation: "i".into(),
        payload: json!({}),
    };
    env.task_queue().enqueue(&task).await.expect("enqueued");
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url);
    let delivered = tasks.deliver_all(&function, deadline(), 10).await;
    assert_eq!(delivered.failed, delivered.delivered, "every delivery failed: no handler");
    assert_eq!(delivered.delivered as u32, ds_lambda_pump::TEST_MAX_RECEIVES);
    let dead = env.peek(&env.task_dead_letter_url).await;
    assert_eq!(dead.len(), 1, "kept in the dead-letter queue");
    assert_eq!(serde_json::from_str::<ds_processor_aws::Task>(&dead[0]).expect("a task"), task);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_the_deadline_interrupts_is_drained_and_revived() {
    let Some(env) = ProcessorEnv::new("work_the_deadline_interrupts").await else { return };
    let svc = env.service();
    for path in ["orders/d", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    append(&svc, "orders/d", &order("d1")).await;
    let world = World::default();
    // d1's notification never returns in this invocation: its blocking work
    // is still running when the deadline's stop margin comes.
    world.notify.after("d1", Box::new(|| Box::pin(futures::future::pending::<()>())));
    let host = ds_processor_aws::HostConfig { stop_margin_ms: 5_000, ..Default::default() };
    let function = env.function_with(|w| world.deployment(w, None), host, Default::default());
    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    let answer = function.handle(pump.next_event(), wall_ms() + 5_500).await.expect("handled");
    assert_eq!(answer["batchItemFailures"], json!([]), "the revival alarm covers the unfinished work");
    assert_eq!(function.processors().stats().stopped.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(acknowledged(&svc, "orders/d").await, 0, "the interrupted event is not acknowledged");
    let schedules = SchedulePump::new(&env);
    assert_eq!(schedules.pending().await.len(), 1, "the drain armed the revival alarm");

    pump.skip_pending();
    let f = Arc::new(env.function(|w| world.deployment(w, None)));
    let far = i64::try_from(wall_ms()).expect("ms") + 3_600_000;
    assert_eq!(schedules.fire_due(&f, far, deadline()).await, 1, "the alarm revives the processor");
    assert_eq!(world.notify.labels(), ["d1"]);
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 1);
    let tail = svc.head("orders/d").await.expect("head").tail;
    assert_eq!(acknowledged(&svc, "orders/d").await, tail, "caught up without a new append");
}
