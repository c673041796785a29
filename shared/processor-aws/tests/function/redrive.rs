//! Nothing fails silently, and what failed can be run again: a revival
//! whose function fails every attempt ends on the function's on-failure
//! destination (Lambda's invocation record, via the pumps' model of
//! Scheduler's asynchronous invocation and the template's
//! `EventInvokeConfig`), a task that keeps failing ends on the task queue's
//! dead-letter queue; the operator's redrive (`ds-dead-letters`, behind
//! `durable-streams aws redrive`) runs each again to success, and a letter
//! redriven twice has one effect.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use ds_dead_letters::{DeadLetterQueues, Letter, QueueRole, Redriven, RerunTarget};
use ds_lambda_pump::{ProcessorEnv, SchedulePump, SqsPump, StreamPump, TEST_MAX_RECEIVES};
use ds_processor::EffectError;
use ds_processor_aws::{Deployment, HostConfig, Task, TaskHandler, TaskHandlers};
use ds_store_aws::test_util::CallCounter;
use serde_json::json;

use crate::common::*;

fn operator(env: &ProcessorEnv) -> DeadLetterQueues {
    let urls = [
        (QueueRole::TaskDeadLetters, env.task_dead_letter_url.clone()),
        (QueueRole::FailedInvocations, env.failed_invocations_url.clone()),
        (QueueRole::ParkedRecords, env.parked_queue_url.clone()),
    ];
    let target = env.revival_target();
    DeadLetterQueues {
        sqs: env.sqs.clone(),
        scheduler: aws_sdk_scheduler::Client::new(&env.conf),
        urls: urls.into_iter().collect(),
        task_queue_url: Some(env.task_queue_url.clone()),
        rerun: Some(RerunTarget {
            schedule_group: target.schedule_group,
            role_arn: target.role_arn,
            dead_letter_arn: target.dead_letter_arn,
            processor_function_arn: target.function_arn,
        }),
        clock: ds_dead_letters::Clock::system(),
    }
}

fn revived(types: &[String]) -> usize {
    types.iter().filter(|t| *t == "stream/processor-revived").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revival_that_always_fails_lands_on_the_destination_and_a_redrive_runs_it() {
    let Some(env) = ProcessorEnv::new("a_revival_that_always_fails").await else { return };
    let svc = env.service();
    for path in ["orders/f", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    append(&svc, "orders/f", &order("f1")).await;
    // The deadline interrupts f1's notification: the drain arms a revival.
    let world = World::default();
    world.notify.after("f1", Box::new(|| Box::pin(futures::future::pending::<()>())));
    let host = HostConfig { stop_margin_ms: 5_000, ..Default::default() };
    let function = env.function_with(|w| world.deployment(w, None), host, Default::default());
    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    function.handle(pump.next_event(), wall_ms() + 5_500).await.expect("handled");
    pump.skip_pending();
    let schedules = SchedulePump::new(&env);
    assert_eq!(schedules.pending().await.len(), 1, "the drain armed the revival alarm");

    // Every DynamoDB call of this instance fails (its own access key).
    let key = format!("ds-failing-{}", uuid::Uuid::new_v4().simple());
    let emulator = CallCounter::new().expect("the emulator");
    emulator.add_fault_rules(json!({ "service": "dynamodb", "fault": "error", "access_key": key })).await;
    let metrics = Arc::new(RecordedMetrics::default());
    let failing =
        env.as_access_key(&key).function(|w| world.deployment(w, None)).with_metrics(Arc::clone(&metrics) as _);
    let far = i64::try_from(wall_ms()).expect("ms") + 3_600_000;
    assert_eq!(schedules.fire_due(&failing, far, deadline()).await, 0, "every attempt failed");
    assert!(schedules.pending().await.is_empty(), "Lambda took the event: the schedule deleted itself");
    assert_eq!(metrics.failed("RevivalFailures"), 3, "each failed attempt is counted");
    assert_eq!(acknowledged(&svc, "orders/f").await, 0, "not caught up");

    let operator = operator(&env);
    let letters = operator.list(QueueRole::FailedInvocations).await.expect("list");
    assert_eq!(letters.len(), 1, "the failed revival is on the destination: {letters:?}");
    println!(
        "failed-invocations: {} | {} | {}",
        letters[0].message_id,
        letters[0].letter.concerns(),
        letters[0].letter.reason()
    );
    let Letter::FailedInvocation { condition, attempts, event, .. } = &letters[0].letter else {
        panic!("{:?}", letters[0].letter)
    };
    assert_eq!((condition.as_str(), *attempts), ("RetriesExhausted", 3), "1 attempt + MaximumRetryAttempts 2");
    assert_eq!((event["kind"].as_str(), event["path"].as_str()), (Some("processor-revival"), Some("orders/f")));
    assert_eq!(operator.list(QueueRole::FailedInvocations).await.expect("list").len(), 1, "listing leaves it");

    let redriven = operator.redrive(QueueRole::FailedInvocations, None).await.expect("redrive");
    assert_eq!(redriven.len(), 1);
    let Redriven::Rerun { schedule } = &redriven[0].1 else { panic!("{:?}", redriven[0].1) };
    println!("redrive: {} → re-run by schedule {schedule}", redriven[0].0.letter.concerns());
    // The same letter redriven again (a second operator, a duplicate
    // message): the same re-run schedule, replaced.
    assert_eq!(operator.redrive_one(&redriven[0].0).await.expect("again"), redriven[0].1);
    assert_eq!(schedules.pending().await.len(), 1, "one re-run");
    assert!(operator.list(QueueRole::FailedInvocations).await.expect("list").is_empty(), "redriven letters leave");

    let healthy = env.function(|w| world.deployment(w, None));
    assert_eq!(schedules.fire_due(&healthy, far, deadline()).await, 1, "the re-run succeeds");
    let tail = svc.head("orders/f").await.expect("head").tail;
    assert_eq!(acknowledged(&svc, "orders/f").await, tail, "caught up by the re-run");
    assert_eq!(world.notify.labels(), ["f1"]);
    assert_eq!(entry_types(&svc, RELAYED).await.len(), 1);
    // It runs once more (redriven after it ran): still one revival event.
    healthy.handle(event.clone(), deadline()).await.expect("revival again");
    assert_eq!(revived(&entry_types(&svc, "orders/f").await), 1, "one revival event, however often re-run");
    assert!(operator.list(QueueRole::FailedInvocations).await.expect("list").is_empty());
}

/// Fails while `failing` is set; counts the runs that succeeded.
#[derive(Default)]
struct Flaky {
    failing: AtomicBool,
    ran: AtomicUsize,
}

#[async_trait]
impl TaskHandler for Flaky {
    async fn run(&self, _task: &Task) -> Result<(), EffectError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(EffectError::new("the receiver is down"));
        }
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_task_is_redriven_to_its_queue_and_runs_once() {
    let Some(env) = ProcessorEnv::new("a_dead_lettered_task_is_redriven").await else { return };
    let svc = env.service();
    svc.create(json_stream("orders/t")).await.expect("create");
    let incarnation = svc.head("orders/t").await.expect("head").incarnation.to_string();
    let flaky = Arc::new(Flaky { failing: AtomicBool::new(true), ..Default::default() });
    let handler = Arc::clone(&flaky);
    let metrics = Arc::new(RecordedMetrics::default());
    let function = env
        .function(move |_| {
            let mut tasks = TaskHandlers::new();
            tasks.register("flaky", handler);
            Deployment { tasks, ..Default::default() }
        })
        .with_metrics(Arc::clone(&metrics) as _);
    let task = Task {
        handler: "flaky".into(),
        idempotency_key: "t-1".into(),
        path: "orders/t".into(),
        incarnation,
        payload: json!({}),
    };
    env.task_queue().enqueue(&task).await.expect("enqueued");
    let tasks = SqsPump::new(env.sqs.clone(), &env.task_queue_url);
    let delivered = tasks.deliver_all(&function, deadline(), 10).await;
    assert_eq!((delivered.delivered, delivered.failed), (TEST_MAX_RECEIVES as usize, TEST_MAX_RECEIVES as usize));
    assert_eq!(metrics.failed("TaskFailures"), u64::from(TEST_MAX_RECEIVES), "each failed delivery is counted");

    let operator = operator(&env);
    let letters = operator.list(QueueRole::TaskDeadLetters).await.expect("list");
    assert_eq!(letters.len(), 1, "dead-lettered: {letters:?}");
    println!("tasks: {} | {} | {}", letters[0].message_id, letters[0].letter.concerns(), letters[0].letter.reason());
    assert_eq!(letters[0].letter.concerns(), "task flaky t-1 of orders/t");

    flaky.failing.store(false, Ordering::SeqCst);
    let redriven = operator.redrive(QueueRole::TaskDeadLetters, None).await.expect("redrive");
    assert_eq!(redriven.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(), [Redriven::Requeued]);
    // Redriven twice: two messages on the task queue, one effect.
    assert_eq!(operator.redrive_one(&redriven[0].0).await.expect("again"), Redriven::Requeued);
    assert!(operator.list(QueueRole::TaskDeadLetters).await.expect("list").is_empty());
    let delivered = tasks.deliver_all(&function, deadline(), 10).await;
    assert_eq!((delivered.delivered, delivered.failed), (2, 0));
    assert_eq!(flaky.ran.load(Ordering::SeqCst), 1, "the task ran once: its completion record holds the second");
    println!("tasks redriven: 1 letter, delivered twice, ran once");
}
