//! AWS writes per processed event with the checkpoint cadence of the
//! processors file, `every event` against `every 100 events`, counted at
//! the emulator (`make aws-calls` prints the table). Its own test binary
//! with one test: the emulator's counter is global, so nothing else may
//! run beside it.
//!
//! A backlog of 500 events (five appends of 100) is processed by one
//! invocation of the function, with the built-in counter (no effects: its
//! only write is the progress record) and outbox (one relay append per
//! event on top). Each event completed is a checkpoint under `every
//! event`: one conditional `TransactWriteItems` each; under `every 100
//! events` one per 100 events. The relays of the outbox do not change.

use ds_lambda_pump::{ProcessorEnv, StreamPump};
use ds_processor_aws::{Deployment, TaskHandlers};
use ds_processors_builtin::Catalog;
use ds_store_aws::test_util::{count, total, CallCounter};
use serde_json::json;

#[path = "common/mod.rs"]
mod common;
use common::*;

const APPENDS: u64 = 5;
const PER_APPEND: u64 = 100;

fn config(kind: &str, path: &str, checkpoint: &str) -> String {
    let options = match kind {
        "outbox" => {
            "target = \"cadence-feed\"\ncreate_target = true\ntemplate = { type = \"fed\", payload = \"$/payload\" }"
        }
        _ => "",
    };
    format!("[[processor]]\nkind = \"{kind}\"\nslug = \"p\"\nstreams = \"{path}\"\ncheckpoint = \"{checkpoint}\"\n{options}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_writes_per_event_follow_the_checkpoint_cadence() {
    let Some(env) = ProcessorEnv::new("cadence_calls").await else { return };
    let Some(counter) = CallCounter::new() else { return };
    let svc = env.service();
    let mut pump = StreamPump::new(&env).await;
    let events = APPENDS * PER_APPEND;
    println!("\nprocessor function, one invocation over a backlog of {events} events (calls counted at the emulator):");
    println!(
        "{:<8} {:<18} {:>18} {:>10} {:>9} {:>7}",
        "kind", "checkpoint", "TransactWriteItems", "per event", "DynamoDB", "S3"
    );
    let mut per_event = Vec::new();
    for (kind, checkpoint) in [
        ("counter", "every event"),
        ("counter", "every 100 events"),
        ("outbox", "every event"),
        ("outbox", "every 100 events"),
    ] {
        let path = format!("cadence/{kind}-{}", checkpoint.replace(' ', "-"));
        svc.create(json_stream(&path)).await.expect("create");
        let (_, registry) = Catalog::builtin().load(&config(kind, &path, checkpoint), &svc).await.expect("config");
        let function = env.function(move |_| Deployment { registry, tasks: TaskHandlers::new() });
        pump.fetch().await;
        pump.skip_pending();
        for a in 0..APPENDS {
            let batch: Vec<_> = (0..PER_APPEND)
                .map(|i| json!({ "type": "order/placed", "payload": { "id": a * PER_APPEND + i } }))
                .collect();
            append(&svc, &path, &serde_json::to_string(&batch).expect("json")).await;
        }
        pump.fetch().await;
        assert_eq!(pump.pending().len() as u64, APPENDS, "one record per append");
        counter.reset().await;
        let answer = function.handle(pump.next_event(), deadline()).await.expect("handled");
        let calls = counter.calls().await;
        assert_eq!(answer["batchItemFailures"], json!([]));
        pump.skip_pending();
        let tail = svc.head(&path).await.expect("head").tail;
        let runner = function.processors().warm_runner(&path, "p").expect("warm runner");
        assert_eq!(runner.runtime_state().acknowledged_through, tail, "{kind}, {checkpoint}: caught up");
        let writes = count(&calls, "dynamodb", "TransactWriteItems");
        println!(
            "{kind:<8} {checkpoint:<18} {writes:>18} {:>10.3} {:>9} {:>7}",
            writes as f64 / events as f64,
            total(&calls, "dynamodb"),
            total(&calls, "s3")
        );
        per_event.push(((kind, checkpoint), writes));
    }
    let writes = |k| per_event.iter().find(|(key, _)| *key == k).map_or(0, |(_, n)| *n);
    // Every event: one progress write per event (+ one relay for the outbox).
    assert_eq!(writes(("counter", "every event")), events);
    assert_eq!(writes(("outbox", "every event")), 2 * events);
    // Every 100 events: one per 100 (the scan's idle checkpoint at the
    // head finds nothing new), so a hundredth of the progress writes.
    assert_eq!(writes(("counter", "every 100 events")), events / 100);
    assert_eq!(writes(("outbox", "every 100 events")), events + events / 100);
}
