//! AWS calls of the processor function per processed batch, counted at the
//! emulator (`make aws-calls` prints the table). Its own test binary: the
//! counter is global to the emulator, so nothing else may run beside it
//! (`infra/aws-calls.sh` runs it with one test thread).
//!
//! Budget, for a warm instance and one 100 B append: one journal read (the
//! meta `GetItem` and the chunk `Query` of the core's read) and one
//! conditional progress write (a `TransactWriteItems` of one item), plus
//! the effects' own calls. A cold instance adds the progress record's
//! `GetItem` when its runner opens.

use std::sync::Arc;

use ds_lambda_pump::{ProcessorEnv, StreamPump};
use ds_processor_aws::Deployment;
use ds_processor_host::{ProcessorRegistry, Spec};
use ds_processor_testkit::examples::Counter;
use ds_store_aws::test_util::{count, total, CallCounter, Calls};
use serde_json::json;

#[path = "common/mod.rs"]
mod common;
use common::*;

fn counter_deployment() -> Deployment {
    let mut registry = ProcessorRegistry::new();
    registry.register("tallies/*", Arc::new(Spec::new(Counter::new))).expect("register");
    Deployment { registry, ..Deployment::default() }
}

/// A ~100 B counter event.
fn increment() -> String {
    let event = json!({ "type": "counter/incremented", "payload": { "by": 1, "note": "x".repeat(40) } }).to_string();
    assert!((90..=110).contains(&event.len()), "{} bytes", event.len());
    event
}

fn show(what: &str, calls: &Calls) {
    let mut line = format!("{what:<58}");
    for (service, ops) in calls {
        if service == "dynamodbstreams" {
            continue; // the pump's reads of the stream, not the function's
        }
        for (op, n) in ops {
            line.push_str(&format!(" {service}:{op}={n}"));
        }
    }
    println!("{line}");
}

/// Delivers the next batch, counting only the function's calls.
async fn counted(
    pump: &mut StreamPump,
    function: &ds_processor_aws::ProcessorFunction,
    counter: &CallCounter,
) -> Calls {
    pump.fetch().await;
    counter.reset().await;
    let answer = function.handle(pump.next_event(), deadline()).await.expect("handled");
    let calls = counter.calls().await;
    assert_eq!(answer["batchItemFailures"], json!([]));
    pump.skip_pending();
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_processed_batch_costs_one_journal_read_and_one_progress_write() {
    let Some(env) = ProcessorEnv::new("processor_calls").await else { return };
    let Some(counter) = CallCounter::new() else { return };
    let svc = env.service();
    svc.create(json_stream("tallies/a")).await.expect("create");
    let function = env.function(|_| counter_deployment());
    let mut pump = StreamPump::new(&env).await;
    pump.fetch().await;
    pump.skip_pending();

    append(&svc, "tallies/a", &increment()).await;
    let cold = counted(&mut pump, &function, &counter).await;
    append(&svc, "tallies/a", &increment()).await;
    let warm = counted(&mut pump, &function, &counter).await;
    println!("\nprocessor function, one batch after one 100 B append (calls counted at the emulator):");
    show("  cold instance (runner opens: progress GetItem)", &cold);
    show("  warm instance", &warm);
    for (what, calls, get_items) in [("warm", &warm, 1), ("cold", &cold, 2)] {
        assert_eq!(count(calls, "dynamodb", "Query"), 1, "{what}: one chunk read: {calls:?}");
        assert_eq!(
            count(calls, "dynamodb", "GetItem"),
            get_items,
            "{what}: the meta read (+ the progress record when opening): {calls:?}"
        );
        assert_eq!(
            count(calls, "dynamodb", "TransactWriteItems"),
            1,
            "{what}: one conditional progress write: {calls:?}"
        );
        assert_eq!(total(calls, "dynamodb"), 2 + get_items, "{what}: nothing else: {calls:?}");
        for other in ["s3", "scheduler", "sqs"] {
            assert_eq!(total(calls, other), 0, "{what}: no {other} call without effects: {calls:?}");
        }
    }
    let tail = svc.head("tallies/a").await.expect("head").tail;
    let runner = function.processors().warm_runner("tallies/a", "counter").expect("warm runner");
    assert_eq!(runner.runtime_state().acknowledged_through, tail);
    assert_eq!(runner.state_json()["value"], json!(2));

    // With the relay's effects (an outbox append, a sink, a task handed to
    // SQS under a revival alarm): printed, the effects' calls on top.
    for path in ["orders/calls", RELAYED, AUDIT] {
        svc.create(json_stream(path)).await.expect("create");
    }
    let world = World::default();
    let relay = env.function(|w| world.deployment(w, None));
    append(&svc, "orders/calls", &order("warmup")).await;
    counted(&mut pump, &relay, &counter).await;
    append(&svc, "orders/calls", &order("o1")).await;
    let effects = counted(&mut pump, &relay, &counter).await;
    show("  warm instance, relay (outbox append + task to SQS)", &effects);
    assert_eq!(count(&effects, "dynamodb", "Query"), 1, "{effects:?}");
    assert_eq!(count(&effects, "sqs", "SendMessage"), 1, "{effects:?}");
}
